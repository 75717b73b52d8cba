"""bench/benchmarks.py (every per-core table of docs/benchmarks.md in one run): its whole-job sums and
its markdown from given figures, and (slow) the script end to end on a tiny set."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "benchmarks.py"


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("benchmarks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(name, cpu):
    return {"name": name, "images_per_cpu_s": cpu, "speedup_cpu": None, "bytes_per_image": 1e5, "note": ""}


def test_whole_job_is_prepare_once_plus_the_epochs(script):
    """CPU ms per image = 1000 / prepare's marginal img per CPU-s + epochs x 1000 / the loader's, per
    contender; the rn50 schedule is 12 epochs at 160 px and 4 at 192 (ffcv-imagenet rn50_16_epochs)."""
    ffcv = script.FFCV_ROW["jpg"]
    loader = {224: [_row("imagenet-shards (turbo)", 1000), _row(ffcv, 500)],
              192: [_row("imagenet-shards (turbo)", 1250), _row(ffcv, 625)],
              160: [_row("imagenet-shards (turbo)", 2000), _row(ffcv, 800)]}
    prepare = [{"name": "imagenet-shards prepare, 1 worker", "marginal_img_cpu_s": 250},
               {"name": "FFCV DatasetWriter, 1 worker (jpg q90, max side 500)", "marginal_img_cpu_s": 200}]
    ours, theirs, *others = script.whole_job(loader, prepare)
    a, b = "16 epochs at 224 px", "rn50 schedule (12 x 160 px + 4 x 192 px)"
    assert ours["prepare_ms"] == 4 and ours[a] == pytest.approx(4 + 16) and ours[b] == pytest.approx(4 + 6 + 3.2)
    assert theirs[a] == pytest.approx(5 + 32) and theirs[f"{a} ratio"] == pytest.approx(37 / 20)
    assert theirs[b] == pytest.approx(5 + 15 + 6.4)
    assert all(r[a] is None for r in others)  # no figures: no sum, never an estimate
    assert "| imagenet-shards | 4.00 | 20.0 | 1.00 |" in "\n".join(script._whole_md([ours, theirs, *others]))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_script_runs_end_to_end_on_a_tiny_set(script, tmp_path, capsys):
    args = [str(tmp_path), "--classes", "4", "--train-per-class", "16", "--rounds", "1", "--batches", "2",
            "--batch-size", "8", "--n", "8", "--profile-images", "64"]
    assert script.main(args) == 0
    out = capsys.readouterr().out
    for heading in ("Loader per core", "Where our loader's time goes", "prepare-shards vs FFCV", "The whole job"):
        assert f"#### {heading}" in out
    assert "python bench/benchmarks.py " + " ".join(args) in out and "not run: peers not found" in out
