"""Issue 34's prototype (bench/jpeg_entropy/): its decoders write exactly libjpeg's coefficients and
pixels on stored JPEGs. Slow (a synthetic set, prepare-shards, a C build); the prototype is no product code."""

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


def test_every_mode_gives_libjpegs_coefficients_and_pixels(tmp_path):
    if shutil.which("cc") is None or not Path("/usr/include/jpeglib.h").exists():
        pytest.skip("needs cc and the libjpeg-turbo headers (apt-get install gcc libjpeg-dev)")
    pytest.importorskip("imagenet_shards.train.loader._jpegcrop")
    b = _bench()
    shards = b.make_data(tmp_path, images=20, seed=3, say=lambda msg: None)
    summary = b.write_corpus(shards, tmp_path / "corpus.bin", seed=0)
    exe = b.build(tmp_path)
    run = subprocess.run([str(exe), str(tmp_path / "corpus.bin"), "check"], capture_output=True, text=True)
    result = json.loads(run.stdout)
    assert run.returncode == 0, (result, run.stderr)
    assert result["images"] == summary["images"] == 20
    assert result["entries"] > 0  # most crops enter at the restart markers; those are compared in full too
    assert result["mcus_own"] >= result["mcus_lib"] > 0
