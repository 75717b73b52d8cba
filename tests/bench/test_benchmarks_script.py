"""bench/benchmarks.py (every per-core table of docs/benchmarks.md in one run): its whole-job sums and
its markdown from given figures, and (slow) the script end to end on a tiny set; bench/bench_pixels.py's
sums from given figures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "benchmarks.py"


def _load(path: Path):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _load(SCRIPT)


@pytest.fixture(scope="module")
def pixels_script():
    return _load(SCRIPT.with_name("bench_pixels.py"))


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


def test_bench_pixels_ratios_bytes_and_loader_cores(pixels_script):
    """bench/bench_pixels.py (issue 32's table): ratios by images per CPU-second; cores = 19,523 img/s x mean CPU s per image over 12 epochs at
    160 px and 4 at 192 (docs/recipes.md); a row that did not run gives None, not a figure."""
    def rows(jpeg, pixel, rn18):
        return [{"name": pixels_script.JPEG_ROW, "images_per_cpu_s": jpeg, "bytes_per_image": 1e5, "note": ""},
                {"name": pixels_script.PIXEL_ROW, "images_per_cpu_s": pixel, "bytes_per_image": 1.6e5, "note": ""},
                {"name": pixels_script.FFCV["rn18"], "images_per_cpu_s": rn18, "bytes_per_image": 3.2e5, "note": ""}]

    loader = {224: rows(1000, 2000, 1000), 192: rows(1000, 2000, 1600), 160: rows(1000, 4000, None)}
    s = pixels_script.summary(loader)
    assert s[224] == {"pixel_vs_ffcv_rn18": 2.0, "pixel_vs_our_jpeg": 2.0}
    assert s[192]["pixel_vs_ffcv_rn18"] == 1.25 and s[160]["pixel_vs_ffcv_rn18"] is None
    assert s["bytes_pixel_vs_ffcv_rn18"] == 0.5
    cores = s[f"loader cores per H200, ffcv-rn18-16, {pixels_script.PIXEL_ROW}"]
    assert pixels_script.H200_RN18 == pytest.approx(19_523, abs=1)
    assert cores == pytest.approx(pixels_script.H200_RN18 * (12 / 4000 + 4 / 2000) / 16)
    assert "| 160 px img/CPU-s | pixel ÷ |" in "\n".join(pixels_script.markdown(loader, s))
