"""bench/bench_scale.py (the full-size memory run) works end to end, on a tiny input: it writes the
archives once and reuses them, runs the real commands, and reports every process of each step."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "bench_scale.py"


@pytest.fixture(scope="module")
def bench_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = ["--classes", "6", "--train-per-class", "40", "--val-per-class", "3"]


def test_tiny_run_reports_every_process_of_each_step_and_reuses_its_input(bench_scale, tmp_path, capsys):
    assert bench_scale.main([str(tmp_path), *TINY, "--skip", "loader", "--trace", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["input"]["train_images"] == 240 and result["input"]["val_images"] == 18
    prepare, audit = result["steps"]
    assert (prepare["step"], audit["step"]) == ("prepare-shards", "audit-shards")
    assert prepare["rc"] == audit["rc"] == 0
    for step in result["steps"]:  # workers this short-lived may end between two samples: only main is sure
        main = step["processes"][0]
        assert main["role"] == "main" and main["peak_rss_mb"] > 0 and step["cpu_s"] >= 0
    assert result["plan_trace"]["rc"] == 0 and result["plan_trace"]["members"] == 258
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["totals"]["rejected"] == bench_scale.TRUNCATED  # the planted truncated images
    assert manifest["totals"]["samples"] == 258 - bench_scale.TRUNCATED

    train_tar = tmp_path / "input" / "ILSVRC2012_img_train.tar"
    written = train_tar.stat().st_mtime_ns
    assert bench_scale.main([str(tmp_path), *TINY, "--skip", "audit,loader"]) == 0
    assert train_tar.stat().st_mtime_ns == written  # same arguments: the input is reused, not rewritten
    table = capsys.readouterr().out
    assert "| prepare-shards |" in table and "audit-shards" not in table
