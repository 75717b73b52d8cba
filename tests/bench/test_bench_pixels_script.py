"""bench/bench_pixels.py (issue 32's per-core table): its ratios, bytes and loader-core estimate from
given figures (the run itself is a benchmark, not a test)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_pixels.py"


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_pixels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ratios_bytes_and_loader_cores(script):
    """Ratios by images per CPU-second; cores = 19,523 img/s x mean CPU s per image over 12 epochs at
    160 px and 4 at 192 (docs/recipes.md); a row that did not run gives None, not a figure."""
    def rows(jpeg, pixel, rn18):
        return [{"name": script.JPEG_ROW, "images_per_cpu_s": jpeg, "bytes_per_image": 1e5, "note": ""},
                {"name": script.PIXEL_ROW, "images_per_cpu_s": pixel, "bytes_per_image": 1.6e5, "note": ""},
                {"name": script.FFCV["rn18"], "images_per_cpu_s": rn18, "bytes_per_image": 3.2e5, "note": ""}]

    loader = {224: rows(1000, 2000, 1000), 192: rows(1000, 2000, 1600), 160: rows(1000, 4000, None)}
    s = script.summary(loader)
    assert s[224] == {"pixel_vs_ffcv_rn18": 2.0, "pixel_vs_our_jpeg": 2.0}
    assert s[192]["pixel_vs_ffcv_rn18"] == 1.25 and s[160]["pixel_vs_ffcv_rn18"] is None
    assert s["bytes_pixel_vs_ffcv_rn18"] == 0.5
    cores = s[f"loader cores per H200, ffcv-rn18-16, {script.PIXEL_ROW}"]
    assert script.H200_RN18 == pytest.approx(19_523, abs=1)
    assert cores == pytest.approx(script.H200_RN18 * (12 / 4000 + 4 / 2000) / 16)
    assert "| 160 px img/CPU-s | pixel ÷ |" in "\n".join(script.markdown(loader, s))
