"""bench/benchmarks.py (every per-core table of docs/benchmarks.md in one run): its whole-job sums
(bench/whole_job.py) and their markdown from given figures, and (slow) the script end to end on a tiny
set; bench/bench_pixels.py's sums from given figures."""

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


@pytest.fixture(scope="module")
def whole():
    return _load(SCRIPT.with_name("whole_job.py"))


def test_job_ms_is_the_offline_stages_once_plus_each_epoch_at_its_resolution(whole):
    """CPU ms per image = sum of 1000 / each offline stage's img per CPU-s + sum of epochs x 1000 / the
    loader's img per CPU-s at their resolution; a missing figure gives None, never an estimate."""
    assert whole.job_ms([250, 500], {160: 2000, 192: 1250}, ((160, 12), (192, 4))) == pytest.approx(4 + 2 + 6 + 3.2)
    assert whole.job_ms([250], {}, ()) == pytest.approx(4)
    assert whole.job_ms([250, None], {160: 2000}, ((160, 1),)) is None
    assert whole.job_ms([250], {160: 2000}, ((160, 12), (192, 4))) is None  # 192 px not measured


def test_the_schedules_are_the_recipes_as_the_trainer_runs_them(whole):
    """ffcv-imagenet's rn50 and rn18 16-epoch configs: min_res 160, max_res 192, ramp 11-13, rounded to
    32 px as its get_resolution does: 12 epochs at 160 px, then 4 at 192 (one column for both)."""
    assert whole.recipe_schedule("ffcv-rn18-16") == whole.recipe_schedule("ffcv-rn50-16") == ((160, 12), (192, 4))
    columns = whole.schedules()
    assert [c["plan"] for c in columns.values()] == [((224, 16),), ((160, 12), (192, 4))]
    assert list(columns.values())[1]["recipes"] == ("ffcv-rn50-16", "ffcv-rn18-16")


def _row(name, cpu):
    return {"name": name, "images_per_cpu_s": cpu, "speedup_cpu": None, "bytes_per_image": 1e5, "note": ""}


def test_whole_job_rows_ratios_and_the_target_line(whole):
    """Each contender's offline stages (ours pixel: prepare + derive; from the archives: prepare --pixels) and
    its loader row over each column's schedule (the pixel row for both pixel jobs); ratios over each of ours;
    the target is FFCV rn18 ÷ ours pixel from the archives on ffcv-rn18-16 (and ÷ prepare + derive beside it)."""
    columns = whole.schedules()
    a, b = list(columns)
    rn18, jpg = whole.FFCV_ROW["rn18"], whole.FFCV_ROW["jpg"]
    rates = {224: (1000, 2000, 1000), 192: (1250, 2500, 1250), 160: (2000, 4000, 1600)}
    loader = {res: [_row(whole.JPEG_ROW, j), _row(whole.PIXEL_ROW, p), _row(whole.DIRECT_LOADER_ROW, 2 * p),
                    _row(rn18, f)] for res, (j, p, f) in rates.items()}
    loader["plain"] = [_row(whole.JPEG_ROW, 1)]  # not a resolution: ignored
    prepare = [{"name": whole.PREPARE_ROW, "marginal_img_cpu_s": 250},
               {"name": whole.DERIVE_ROW, "marginal_img_cpu_s": 500},
               {"name": whole.DIRECT_ROW, "marginal_img_cpu_s": 100},
               {"name": "FFCV DatasetWriter, 1 worker (10 % JPEG q90, the rest raw, max side 400)",
                "marginal_img_cpu_s": 200}]
    rows = {r["name"]: r for r in whole.whole_job(loader, prepare, columns)}
    ours, pixel, theirs, direct = rows[whole.OURS_JPEG], rows[whole.OURS_PIXEL], rows[rn18], rows[whole.OURS_DIRECT]
    assert direct["offline_ms"] == pytest.approx(10)
    assert direct["ms"][b] == pytest.approx(10 + 1.5 + 0.8)  # its own set's loader row
    assert (ours["offline_ms"], pixel["offline_ms"], theirs["offline_ms"]) == pytest.approx((4, 6, 5))
    assert ours["ms"][a] == pytest.approx(4 + 16) and pixel["ms"][a] == pytest.approx(6 + 8)
    assert pixel["ms"][b] == pytest.approx(6 + 3 + 1.6) and theirs["ms"][b] == pytest.approx(5 + 7.5 + 3.2)
    assert theirs["over"][b][whole.OURS_PIXEL] == pytest.approx(15.7 / 10.6)
    assert ours["over"][a][whole.OURS_JPEG] == 1 and rows[jpg]["ms"][a] is None  # FFCV jpg: no figures
    md = "\n".join(whole.whole_md(list(rows.values()), columns))
    assert f"| {whole.OURS_PIXEL} | 6.00 | 14.0 | 0.70 | 1.00 | {14 / 14:.2f} |" in md
    assert md.endswith(f"not met, ×{15.7 / 12.3:.2f}** in this run (by prepare + derive + 16 epochs: "
                       f"×{15.7 / 10.6:.2f}).")
    prepare[3]["marginal_img_cpu_s"] = 50  # 20 ms to write: now ×(20 + 10.7) / 12.3
    line = whole.target(whole.whole_job(loader, prepare, columns), columns)
    assert f": met, ×{30.7 / 12.3:.2f}** in this run" in line
    del prepare[1]  # derive not measured: the direct job still has its figure
    line = whole.target(whole.whole_job(loader, prepare, columns), columns)
    assert "(by prepare + derive + 16 epochs: ×—)" in line
    del prepare[1]  # prepare --pixels not measured: no target figure
    assert "not measured" in whole.target(whole.whole_job(loader, prepare, columns), columns)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_script_runs_end_to_end_on_a_tiny_set(script, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("IMAGENET_SHARDS_PEERS", raising=False)  # the peers' rows must say "not run" here
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
