"""Multi-machine prepare: which part a process is (--part I/N, --part auto from Slurm, a Kubernetes
Indexed Job or torchrun), and a real Slurm array job plus a dependent finalize job giving the
bytes of a one-machine run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagenet_shards.pipeline.prepare.parts import PartError, parse_part
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import FALL11_TAR, WINTER21_TGZ


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


def _prepare_process(args: list[str], env_extra: dict | None = None, drop=()) -> subprocess.CompletedProcess:
    """prepare-shards as its own process (this checkout's code), with the engine's variables given."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION_INDEX"))
           and k not in ("RANK", "WORLD_SIZE", *drop)}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_slurm_task_without_its_count_is_told_what_is_missing(full_imagenet, tmp_path):
    args = ["--train", str(full_imagenet / WINTER21_TGZ), "--splits", "train", "--out", str(tmp_path / "out"),
            "--workers", "1", "--quiet"]
    task = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "2"}
    for part in (["--part", "auto"], []):  # asked for, or the default inside an array task
        done = _prepare_process(args + part, task)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "SLURM_ARRAY_TASK_COUNT" in done.stderr, done.stderr
        assert "no SLURM_ARRAY_TASK_ID" not in done.stderr and "--part auto/N" in done.stderr
        assert "SLURM_ARRAY_TASK_MAX=2" in done.stderr
    assert not (tmp_path / "out").exists()
    assert parse_part("auto/3", task) == (1, 3)  # the count given as auto/N


def test_a_part_whose_count_differs_from_the_jobs_is_refused_naming_both(full_imagenet, tmp_path):
    out = tmp_path / "out"
    args = ["--train", str(full_imagenet / WINTER21_TGZ), "--splits", "train", "--shard-samples", "5",
            "--out", str(out), "--workers", "1", "--quiet"]
    first = _prepare_process(args + ["--part", "0/2"])
    assert first.returncode == 0, first.stderr
    assert json.loads((out / "_prepare" / "parts.json").read_text()) == {"count": 2}  # the first part's record
    records = sorted(p.name for p in (out / "_prepare" / "records").iterdir())
    second = _prepare_process(args + ["--part", "1/3"])
    assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
    assert "--part 1/3" in second.stderr and "runs in 2 parts" in second.stderr and "not 3" in second.stderr
    assert sorted(p.name for p in (out / "_prepare" / "records").iterdir()) == records  # it built nothing
    assert not (out / "_prepare" / "part-1-of-3.json").exists()
    last = _prepare_process(args + ["--part", "1/2"])  # the right count finishes the job
    assert last.returncode == 0 and (out / "manifest.json").exists(), last.stderr


def test_the_recorded_count_can_be_removed_to_split_the_job_another_way(full_imagenet, tmp_path):
    out = tmp_path / "out"
    args = ["--train", str(full_imagenet / FALL11_TAR), "--splits", "train", "--shard-samples", "5",
            "--out", str(out), "--workers", "1", "--quiet"]
    assert _prepare_process(args + ["--part", "0/2"]).returncode == 0
    refused = _prepare_process(args + ["--part", "1/3"])
    assert refused.returncode == 2 and "remove _prepare/parts.json" in refused.stderr, refused.stderr
    (out / "_prepare" / "parts.json").unlink()  # as the message says
    for part in ("1/3", "2/3"):
        done = _prepare_process(args + ["--part", part])
        assert done.returncode == 0, done.stderr
    assert json.loads((out / "_prepare" / "parts.json").read_text()) == {"count": 3}
    assert not (out / "manifest.json").exists()  # shard 3 was 1 of 2's, then 0 of 3's: not built yet
    assert _prepare_process(args).returncode == 0 and (out / "manifest.json").exists()  # without --part: the rest


def test_parts_started_at_once_with_two_counts_one_is_refused(full_imagenet, tmp_path):
    """Two real processes into one OUT, 0/2 and 1/3, started together: whichever records the count
    first runs, the other is refused naming both counts (the record is claimed, not overwritten)."""
    import os

    out = tmp_path / "out"
    args = [sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "--train", str(full_imagenet / FALL11_TAR),
            "--splits", "train", "--shard-samples", "5", "--out", str(out), "--workers", "1", "--quiet"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")}
    procs = {part: subprocess.Popen([*args, "--part", part], env=env, stderr=subprocess.PIPE, text=True)
             for part in ("0/2", "1/3")}
    codes = {part: (p.wait(timeout=300), p.stderr.read()) for part, p in procs.items()}
    assert sorted(rc for rc, _ in codes.values()) == [0, 2], codes
    count = json.loads((out / "_prepare" / "parts.json").read_text())["count"]
    loser = next(part for part, (rc, _) in codes.items() if rc == 2)
    assert int(loser.split("/")[1]) != count and f"runs in {count} parts" in codes[loser][1]
    assert not list((out / "_prepare").glob("*.claim"))


@pytest.mark.parametrize("where", ["local", "memory://"])
def test_a_claim_keeps_the_first_writers_record(tmp_path, where):
    from imagenet_shards.pipeline.prepare.outdir import open_outdir

    out = open_outdir(str(tmp_path / "o") if where == "local" else f"memory://claims/{tmp_path.name}")
    if where == "local":
        out.create()
    assert out.claim_json("_prepare/parts.json", {"count": 2}) == {"count": 2}
    assert out.claim_json("_prepare/parts.json", {"count": 3}) == {"count": 2}
