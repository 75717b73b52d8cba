"""scripts/gpu_check.sh --cpu-smoke: every step of the GPU check, tiny and on the CPU, so the first
run on a GPU machine does not die on a path, a flag or a missing key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import gpu_check  # noqa: E402

RUN_KEYS = {"status", "seconds", "exit", "error", "proc", "steady", "epoch"}


@pytest.mark.timeout(400)
def test_cpu_smoke_runs_every_step(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out)}
    proc = subprocess.run(["scripts/gpu_check.sh", "--cpu-smoke", str(tmp_path / "work")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=380)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["device"].startswith("cpu") and result["mode"] == "cpu-smoke"
    assert set(result["steps"]) == set(gpu_check.STEPS)
    steps = result["steps"]
    assert all(s["status"] == "ok" for s in steps.values()), {k: s["status"] for k, s in steps.items()}
    for name in ("ceiling", "ceiling_compile", "ceiling_end", "profile", "fp16", "gpu_decode_train"):
        assert RUN_KEYS <= set(steps[name]), name
    runs = steps["real"]["runs"]
    assert list(runs) == [str(n) for n in gpu_check.SMOKE.workers] and all(RUN_KEYS <= set(r) for r in runs.values())
    real = next(iter(runs.values()))
    assert real["steady"]["img_per_s"] > 0 and real["proc"]["main_cpu_fraction"] is not None
    assert steps["gpu_decode_train"]["exit"] == 2 and "needs CUDA" in steps["gpu_decode_train"]["error"]
    assert steps["gpu_decode_loader"]["probe"]["ok"] is True
    assert steps["gpu_decode_loader"]["timing"]["hardware_decodes"] > 0
    assert steps["profile"]["syncs"]["steps"] == gpu_check.SMOKE.profile_steps
    assert steps["fp16"]["epoch"]["amp_scale"] > 0
    assert steps["bench_loader"]["images_per_s_per_worker"] > 0
    assert steps["data"]["images"] == 4 * (24 + 3)
    table = (out / "gpu_check.md").read_text()
    assert table == (tmp_path / "work" / "gpu_check.md").read_text() and table in proc.stdout
    assert "corruption probe | ok" in table and "refused on the CPU (expected)" in table
    assert (out / "runs.tar.gz").stat().st_size > 0 and len(list(out.iterdir())) <= 8  # the device returns 8 files


def test_a_missing_module_is_named_at_once(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "REQUIRED_MODULES", ("torch", "no_such_module_for_the_check"))
    assert gpu_check.main(["--cpu-smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no_such_module_for_the_check" in err and len(err.splitlines()) == 1
    assert "fetch_gpu_wheels.sh" in err


def test_steady_leaves_out_the_warm_up_intervals():
    from gpu_check_report import steady
    records = [{"kind": "train_interval", "step": s, "img_per_s": ips, "data_wait_fraction": wf}
               for s, ips, wf in ((5, 10.0, 0.9), (10, 100.0, 0.1), (15, 100.0, 0.1), (20, 50.0, 0.5))]
    got = steady(records, batch=10)  # skip = min(10, 20 // 4) = 5: the first interval is left out
    assert got["intervals"] == 3
    assert got["img_per_s"] == pytest.approx(150 / (0.5 + 0.5 + 1.0))
    assert got["data_wait_fraction"] == pytest.approx((0.05 + 0.05 + 0.5) / 2.0)
