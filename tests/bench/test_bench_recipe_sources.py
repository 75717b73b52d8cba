"""bench/bench_recipe_sources.py (issue 30: toy runs beside torchvision's and timm's own scripts): the
markdown from given rows, and (slow) the script end to end for one epoch, as a real process."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_recipe_sources.py"


def test_markdown_has_one_column_per_epoch_and_the_reason_where_a_script_did_not_run():
    markdown = runpy.run_path(str(SCRIPT))["markdown"]
    rows = [{"source": "ours", "val_top1": [50.0, 75.5], "wall_s": 3.0},
            {"source": "tv", "not_run": "not run: no refs"}]
    table = markdown({"date": "D", "uptime": "U", "settings": "S", "epochs": 2, "rows": rows})
    assert table.splitlines()[2] == "| script | ep 1 | ep 2 | wall s |"
    assert "| ours | 50.0 | 75.5 | 3.0 |" in table and "| tv | not run: no refs |  |  |" in table


def test_a_torchvision_folder_without_the_scripts_is_named_with_what_it_lacks(tmp_path):
    (tmp_path / "utils.py").write_text("")
    refs, why = runpy.run_path(str(SCRIPT))["find_torchvision_refs"](str(tmp_path), tmp_path)
    assert refs is None and why == f"--torchvision-refs {tmp_path} lacks train.py"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_bench_runs_end_to_end_with_a_row_per_source(tmp_path):
    """Ours always runs; torchvision's script runs from TORCHVISION_REFS or the peers' cache folder
    where one is here (else the bench is given an empty folder and must say what it lacks); timm's
    runs where the fetched mirror and the peer Python are here, and otherwise says why not."""
    script = runpy.run_path(str(SCRIPT))
    have = os.environ.get("TORCHVISION_REFS") or (str(script["TV_REFS"]) if script["TV_REFS"].is_dir() else None)
    refs = have or str(tmp_path / "no-refs")
    Path(refs).mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, str(SCRIPT), "--work", str(tmp_path / "w"), "--epochs", "1",
                           "--torchvision-refs", refs], capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["source"].split()[0]: row for row in json.loads(done.stdout)["rows"]}
    assert set(rows) == {"ours", "torchvision", "timm"}
    assert len(rows["ours"]["val_top1"]) == 1 and 0 <= rows["ours"]["val_top1"][0] <= 100
    for row in rows.values():
        assert ("val_top1" in row and len(row["val_top1"]) == 1) or row["not_run"].startswith("not run: "), row
    if have:
        assert "val_top1" in rows["torchvision"], rows["torchvision"]  # the scripts are here: it must have run
    else:
        assert "lacks train.py, utils.py" in rows["torchvision"]["not_run"]
    mirror = Path("/work/.mirror/huggingface+pytorch-image-models/repo")
    if mirror.is_dir() and Path(rows["timm"]["train_py"]).parent == tmp_path / "w":
        assert "val_top1" in rows["timm"], rows["timm"]  # the sources are here: it must have run
