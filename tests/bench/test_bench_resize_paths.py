"""bench/bench_resize_paths.py: the real corpus's refusals (pip cannot fetch, not a colour image) in
one line, and a tiny synthetic run with the full-size-decode column."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_resize_paths.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_resize_paths", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_real_corpus_says_in_one_line_when_pip_cannot_fetch(bench, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name, value in (("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", ""), ("PIP_EXTRA_INDEX_URL", "")):
        monkeypatch.setenv(name, value)
    assert bench.main(["--corpus", "real"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: cannot fetch the real-photo corpus")
    assert str(tmp_path / "imagenet-shards" / "photo-wheels") in err


def test_a_grey_picture_is_not_in_the_real_corpus(bench):
    grey = Image.new("RGB", (8, 8), (90, 90, 90))
    with pytest.raises(bench.CorpusError, match="not a colour image"):
        bench._colour(grey, "grey.png")
    assert bench._colour(Image.new("RGB", (8, 8), (200, 40, 30)), "red.png").mode == "RGB"


def test_tiny_synthetic_run_has_the_full_decode_column(bench, monkeypatch):
    monkeypatch.setattr(bench, "PEER_PYTHON", Path("/nonexistent/python"))
    result = bench.measure(2, 1, seed=1)
    assert result["corpus"] == "synthetic" and result["ffcv"].startswith("not run")
    for groups in result["table"].values():
        paths = groups["all"]
        assert set(paths) == {"source", "ours-500", "ours-none", "ours-none-full"}
        assert paths["ours-none-full"]["crops"] == paths["source"]["crops"] >= 1
