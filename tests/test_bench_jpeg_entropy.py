"""Issue 34's prototype (bench/jpeg_entropy/): its decoders write exactly libjpeg's coefficients and
pixels on stored JPEGs, and let no damaged image through that libjpeg rejects. Slow (a synthetic
set, prepare-shards, C builds); the prototype is no product code."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "jpeg_entropy" / "bench_entropy.py"

pytestmark = pytest.mark.slow


def _bench():
    spec = importlib.util.spec_from_file_location("bench_entropy", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(the bench module, its work folder, the corpus of 20 stored JPEGs with the loader's crops)."""
    if shutil.which("cc") is None or not Path("/usr/include/jpeglib.h").exists():
        pytest.skip("needs cc and the libjpeg-turbo headers (apt-get install gcc libjpeg-dev)")
    pytest.importorskip("imagenet_shards.train.loader._jpegcrop")
    b, work = _bench(), tmp_path_factory.mktemp("jpeg_entropy")
    shards = b.make_data(work, images=20, seed=3, say=lambda msg: None)
    assert b.write_corpus(shards, work / "corpus.bin", seed=0)["images"] == 20
    return b, work, work / "corpus.bin"


def test_every_mode_gives_libjpegs_coefficients_and_pixels(corpus):
    b, work, path = corpus
    run = subprocess.run([str(b.build(work)), str(path), "check"], capture_output=True, text=True)
    result = json.loads(run.stdout)
    assert run.returncode == 0, (result, run.stderr)
    assert result["images"] == 20
    assert result["entries"] > 0  # most crops enter at the restart markers; those are compared in full too
    assert result["mcus_own"] >= result["mcus_lib"] > 0


@pytest.mark.parametrize("cut", [False, True], ids=["flipped", "cut-short"])
def test_damaged_cells_are_rejected_wherever_libjpeg_rejects_them(corpus, tmp_path, cut):
    """Bit flips in the entropy-coded data, or a cell cut short: built with AddressSanitizer and
    UBSan, no mode faults (flip_probe raises) -- the loader's hook as built ("product") included --
    and the own decoder lets through no image libjpeg rejects (the patched jdhuff.c can: its fast
    path turns a bad code into 0 without a warning, as upstream's does); the product rejects
    exactly libjpeg's (it hands whatever its decoder flags back to libjpeg)."""
    b, work, path = corpus
    probe_c = tmp_path / "probe.c"
    probe_c.write_text("int main(void) { return 0; }\n")
    if subprocess.run(["cc", "-fsanitize=address,undefined", "-o", str(tmp_path / "probe"), str(probe_c)],
                      capture_output=True).returncode != 0:
        pytest.skip("the C compiler cannot build with AddressSanitizer and UBSan here")
    probe = b.flip_probe(work, path, flips=8, seed=0, cut=cut)
    assert "not run" not in probe, probe
    assert probe["lib"]["rejected"] > 0
    assert all(probe[m]["missed"] == [] for m in ("own1", "own2", "own4", "product")), probe
    assert probe["product"]["extra"] == [], probe
