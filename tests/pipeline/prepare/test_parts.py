"""Multi-machine prepare: which part a process is (--part I/N, --part auto from Slurm, a Kubernetes
Indexed Job or torchrun), and a real Slurm array job plus a dependent finalize job giving the
bytes of a one-machine run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imagenet_shards.pipeline.prepare.parts import PartError, parse_part
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import WINTER21_TGZ


def test_part_auto_reads_the_engine_that_started_the_process():
    slurm = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_STEP": "2",
             "SLURM_ARRAY_TASK_COUNT": "4"}  # --array=1-7:2
    assert parse_part("auto", slurm) == (3, 4) == parse_part("auto/4", slurm) == parse_part(None, slurm)
    assert parse_part("auto/5", {"JOB_COMPLETION_INDEX": "4"}) == (4, 5)
    assert parse_part("auto", {"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    assert parse_part("2/3", slurm) == (2, 3)  # an explicit part wins
    with pytest.raises(PartError, match="give the number of parts, --part auto/N"):
        parse_part("auto", {"JOB_COMPLETION_INDEX": "0"})
    with pytest.raises(PartError, match="--part auto/3: the Slurm array has 4 parts"):
        parse_part("auto/3", slurm)
    with pytest.raises(PartError, match="the environment names no part"):
        parse_part("auto", {})
    with pytest.raises(PartError, match="out of range"):
        parse_part("auto/5", {"JOB_COMPLETION_INDEX": "5"})


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and "_prepare" not in p.parts}


def test_a_slurm_array_and_a_dependent_finalize_give_the_one_machine_bytes(slurm_cluster, full_imagenet, tmp_path):
    tool = str(Path(sys.executable).with_name("prepare-shards"))
    args = ["--train", str(full_imagenet / WINTER21_TGZ), "--holdout-per-class", "1", "--shard-samples", "5",
            "--workers", "1", "--quiet"]
    one = tmp_path / "one-machine"
    subprocess.run([tool, *args, "--out", str(one)], check=True)
    out, logs = tmp_path / "array", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "prepare.sbatch"  # the shape of the script in docs/prepare.md
    script.write_text("#!/bin/bash\n#SBATCH --array=0-2\n#SBATCH --cpus-per-task=1\n"
                      f"#SBATCH --output={logs}/part-%a.out\n"
                      f"exec {tool} {' '.join(args)} --out {out} --part auto\n")
    array = slurm_cluster.sbatch(str(script))
    final = slurm_cluster.sbatch(f"--dependency=afterok:{array}", f"--output={logs}/finalize.out",
                                 "--wrap", f"exec {tool} finalize {out}")
    states = slurm_cluster.wait([array, final])
    logged = "\n".join(f"{p.name}: {p.read_text()}" for p in sorted(logs.iterdir()))
    assert states[array] == ["COMPLETED"] * 3 and states[final] == ["COMPLETED"], (states, logged)
    assert _files(out) == _files(one)
    parts = sorted(p.name for p in (out / "_prepare").glob("part-*.json"))
    assert parts == ["part-0-of-3.json", "part-1-of-3.json", "part-2-of-3.json"]
