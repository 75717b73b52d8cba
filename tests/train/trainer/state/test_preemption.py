"""Training that survives preemption, with real processes and real signals: SIGTERM to torchrun (or to
one rank) mid-epoch, SIGKILL after a periodic checkpoint, resumption that gives bit-identical
weights, a world-size change that still sees every sample of the epoch once, the fingerprint, the
metrics a killed run leaves behind, and the refusals.

Every kill lands at a random step of epoch 2 (its seed is in the assertion messages). The model is
mobilenet_v3_small at 32 px: BatchNorm (per-rank buffers inside an epoch), dropout (the torch RNG)
and small checkpoints (18 MB).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import fingerprint
from imagenet_shards.train.report.page import read_run
from imagenet_shards.train.trainer.state import checkpoint as ckpt
from imagenet_shards.train.trainer.state import resume
from imagenet_shards.train.trainer.state.lifecycle import Lifecycle, RunSignals, parse_every
from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.watch.telemetry import read_metrics
from tests.fixtures.loader import to_pixel_set
from tests.fixtures.trainer import run_cli, write_tiny_shards

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[4]
# 60 train samples in 5 shards, batch 4: 15 steps an epoch on one rank, 7 on two (4 spares), 5 on three
FLAGS = ["--arch", "mobilenet_v3_small", "--res", "32", "--val-res", "36", "--val-crop", "32", "--batch-size", "4",
         "--device", "cpu", "--log-interval", "1", "--amp", "none", "--epochs", "2", "--warmup-epochs", "0.5",
         "--mixup", "0.2", "--random-erase", "0.25", "--ema", "0.9", "--lr", "0.02", "--stop-check-every", "1"]
RANK_MAIN = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from imagenet_shards.train.trainer.cli import main
    out = Path(sys.argv[sys.argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    rank = os.environ.get("RANK", "0")
    (out / f"pid-rank{rank}").write_text(str(os.getpid()))
    if os.environ.get("TEST_SLOW_FROM_STEP"):  # from that optimizer step on, 0.5 s per step: a stop sent
        import time  # there lands inside its epoch however loaded the box is
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from_step, count = int(os.environ["TEST_SLOW_FROM_STEP"]), [0]
        def slow(*_):
            count[0] += 1
            if count[0] >= from_step:
                time.sleep(0.5)
        register_optimizer_step_post_hook(slow)
    rc = main(sys.argv[1:])
    (out / f"rc-rank{rank}").write_text(str(rc))
    sys.exit(rc)
""")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return write_tiny_shards(tmp_path_factory.mktemp("preempt") / "shards", classes=4, train_per_class=15,
                             val_per_class=5, shard_samples=13)


def _launch(tmp: Path, ranks: int, args: list, env: dict | None = None) -> subprocess.Popen:
    """train-imagenet in fresh processes: torchrun with `ranks` gloo ranks, or one plain process."""
    script = tmp / "rank_main.py"
    script.write_text(RANK_MAIN)
    head = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] \
        if ranks > 1 else [sys.executable]
    return subprocess.Popen([*head, str(script), *map(str, args)], cwd=REPO, env={**ENV, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _run(tmp: Path, ranks: int, args: list, timeout: float = 400) -> str:
    proc = _launch(tmp, ranks, args)
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def _interrupt(tmp: Path, ranks: int, args: list, out_dir: Path, *, at_step: int, sig=signal.SIGTERM,
               target=None, after_checkpoint: bool = False, times: int = 1, slow_from: int | None = None) -> str:
    """Start a run, wait until rank 0 logged global step `at_step` (and, with `after_checkpoint`, a
    mid-epoch checkpoint before it), then send `sig` to `target` (a pid; default the launcher),
    `times` times 0.1 s apart. `slow_from`: the ranks take 0.5 s per step from that step on."""
    proc = _launch(tmp, ranks, args, {"TEST_SLOW_FROM_STEP": str(slow_from)} if slow_from else None)
    deadline = time.monotonic() + 400
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            records = read_metrics(out_dir) if (out_dir / "metrics.jsonl").exists() else []
            steps = [r["step"] for r in records if r["kind"] == "train_interval"]
            mids = [r["step"] for r in records if r["kind"] == "checkpoint" and r["at"] == "mid_epoch"]
            if steps and steps[-1] >= at_step and (not after_checkpoint or any(m < steps[-1] for m in mids)):
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before the signal"
        pid = target() if callable(target) else proc.pid
        for i in range(times):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            time.sleep(0.1 if i + 1 < times else 0)
        out, _ = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out


def _rank_codes(out_dir: Path, ranks: int) -> list[int]:
    return [int((out_dir / f"rc-rank{r}").read_text()) for r in range(ranks)]


def _assert_same_weights(a_dir: Path, b_dir: Path, why: str) -> None:
    a, b = ckpt.load_checkpoint(a_dir / ckpt.LATEST), ckpt.load_checkpoint(b_dir / ckpt.LATEST)
    assert a["epoch"] == b["epoch"] and a["step"] == b["step"], why
    assert all(torch.isfinite(t).all() for t in a["model"].values() if t.is_floating_point()), why
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), (key, why)
    for key in a["ema"]["module"]:
        assert torch.equal(a["ema"]["module"][key], b["ema"]["module"][key]), (key, why)


def _epochs(run: Path) -> list[dict]:
    return [r for r in read_metrics(run, current=True) if r["kind"] == "epoch"]


def _seeded(test: str) -> tuple[random.Random, str]:
    seed = random.randrange(10**6)
    return random.Random(seed), f"{test}: random seed {seed}"


# ----------------------------------------------------------------------------- the default run

@pytest.mark.timeout(900)
def test_ddp_sigterm_mid_epoch_then_resume_is_bit_identical(shards, tmp_path):
    """2 gloo ranks through torchrun; SIGTERM to torchrun at a random step of epoch 2: both ranks
    agree on one stop step, write checkpoint-mid.pt, exit 143 with one line; --resume auto then
    ends with the weights, EMA, train loss and data fingerprints of an uninterrupted run."""
    rng, why = _seeded("ddp sigterm")
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["--data", shards, *FLAGS, "--workers", "0"]
    _run(tmp_path, 2, [*common, "--out", straight])
    out = _interrupt(tmp_path, 2, [*common, "--out", split], split, at_step=rng.randint(8, 10))
    assert _rank_codes(split, 2) == [143, 143], out[-3000:]
    lines = [line for line in out.replace("\r", "\n").splitlines() if line.startswith("stopped by SIGTERM")]
    assert len(lines) == 1 and "--resume auto" in lines[0] and "checkpoint-mid.pt" in lines[0], out[-3000:]
    mid = ckpt.load_checkpoint(split / ckpt.MID)
    assert mid["epoch"] == 1 and 0 < mid["epoch_step"] < 7 and len(mid["ranks"]) == 2, why
    assert mid["step"] == 7 + mid["epoch_step"] and not (split / "rc-rank0").read_text() == "0"

    out = _run(tmp_path, 2, [*common, "--out", split, "--resume", "auto"])
    assert f"resumed from {split / ckpt.MID} at epoch 2, step {mid['epoch_step']} of 7" in out
    _assert_same_weights(straight, split, why)
    a, b = _epochs(straight), _epochs(split)
    assert [r["train_loss"] for r in a] == [r["train_loss"] for r in b], why
    assert [r["data_fingerprint"] for r in a] == [r["data_fingerprint"] for r in b], why
    assert b[1]["data_fingerprint"]["train"]["samples"] == 2 * 7 * 4 and b[1]["data_fingerprint"]["val"]["samples"] == 20
    start = [r for r in read_metrics(split) if r["kind"] == "start"][-1]
    assert start["resumed"]["epoch_step"] == mid["epoch_step"] and start["resumed"]["exact"] is True


@pytest.mark.slow  # ~50 s on 2 vCPUs; the loader-level resume on pixel shards is a default test
@pytest.mark.timeout(600)
def test_pixel_shards_train_and_a_mid_epoch_sigterm_resumes_bit_identical(tmp_path):
    """The same tiny set in the pixel form (KEY.yuv420, "form": "yuv420" in the manifest): train-imagenet
    reads it without a flag; SIGTERM at a random step of epoch 2, then --resume auto ends with the
    uninterrupted run's weights, EMA, train losses and data fingerprints."""
    rng, why = _seeded("pixel shards")
    data = to_pixel_set(write_tiny_shards(tmp_path / "pixels", classes=4, train_per_class=15, val_per_class=5,
                                          shard_samples=13))
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["--data", data, *FLAGS, "--workers", "0"]
    _run(tmp_path, 1, [*common, "--out", straight])
    _interrupt(tmp_path, 1, [*common, "--out", split], split, at_step=rng.randint(17, 26))
    mid = ckpt.load_checkpoint(split / ckpt.MID)
    assert mid["epoch"] == 1 and 0 < mid["epoch_step"] < 15, why
    _run(tmp_path, 1, [*common, "--out", split, "--resume", "auto"])
    _assert_same_weights(straight, split, why)
    a, b = _epochs(straight), _epochs(split)
    assert [r["train_loss"] for r in a] == [r["train_loss"] for r in b], why
    assert [r["data_fingerprint"] for r in a] == [r["data_fingerprint"] for r in b], why
    assert b[1]["data_fingerprint"]["train"]["samples"] == 15 * 4 and b[1]["val_samples"] == 20


@pytest.mark.timeout(600)
def test_sigkill_after_a_periodic_checkpoint_resumes_exactly_and_supersedes_metrics(shards, tiny_shards, tmp_path,
                                                                                    capsys):
    """One process, --checkpoint-every 4steps, SIGKILL at a random step of epoch 2 past a mid-epoch
    checkpoint. Another shard set, seed or batch size is refused in one line; --resume auto
    continues from the mid-epoch checkpoint to the uninterrupted run's weights; the killed run's
    records past that step are marked superseded, so report-run reads each step once."""
    rng, why = _seeded("sigkill")
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    common = ["--data", shards, *FLAGS, "--workers", "0"]
    assert run_cli(*common, "--out", straight) == 0
    _interrupt(tmp_path, 1, [*common, "--out", killed, "--checkpoint-every", "4steps"], killed,
               at_step=rng.randint(22, 26), sig=signal.SIGKILL, after_checkpoint=True)
    mid = ckpt.load_checkpoint(killed / ckpt.MID)
    assert mid["epoch"] == 1 and mid["step"] % 4 == 0 and mid["step"] > 15, why
    logged = max(r["step"] for r in read_metrics(killed) if r["kind"] == "train_interval")
    assert logged > mid["step"], why
    capsys.readouterr()

    for bad, named in ((["--seed", "1"], "--seed 0 there, 1 here"), (["--batch-size", "3"], "--batch-size 4 there"),
                       (["--data", tiny_shards], "another shard set"), (["--mixup", "0.5"], "--mixup 0.2 there, 0.5")):
        args = [*common, "--out", killed, "--checkpoint-every", "4steps", "--resume", "auto"]
        if bad[0] in args:
            args[args.index(bad[0]) + 1] = bad[1]
        else:
            args += bad
        assert run_cli(*args) == 2, bad
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and named in err and "mid-epoch checkpoint" in err, err

    assert run_cli(*common, "--out", killed, "--checkpoint-every", "4steps", "--resume", "auto") == 0
    assert f"resumed from {killed / ckpt.MID}" in capsys.readouterr().out
    _assert_same_weights(straight, killed, why)
    records = read_metrics(killed)
    superseded = [r for r in records if r.get("superseded")]
    assert superseded and all(r["step"] > mid["step"] for r in superseded), why
    assert {r["step"] for r in superseded if r["kind"] == "train_interval"} == set(range(mid["step"] + 1, logged + 1))
    drawn = [r["step"] for r in read_run(str(killed)) if r["kind"] == "train_interval"]
    assert drawn == list(range(1, 31)), why  # each step once, in order
    start = [r for r in records if r["kind"] == "start"][-1]
    assert start["resumed"]["superseded_records"] == len(superseded)
    assert [r["data_fingerprint"] for r in _epochs(straight)] == [r["data_fingerprint"] for r in _epochs(killed)]


@pytest.mark.timeout(600)
def test_sigkill_before_any_checkpoint_then_resume_auto_supersedes_the_killed_runs_records(shards, tmp_path, capsys):
    """SIGKILL in epoch 1 before any checkpoint (no --checkpoint-every), then --resume auto: the run
    starts from scratch, and every record the killed run wrote is marked superseded, so report-run and
    the epoch records count each step once (issue 29 row 2)."""
    rng, why = _seeded("sigkill-first-epoch")
    out = tmp_path / "killed"
    common = ["--data", shards, *FLAGS, "--workers", "0", "--epochs", "1", "--out", out]
    _interrupt(tmp_path, 1, common, out, at_step=rng.randint(3, 8), sig=signal.SIGKILL)
    assert not any((out / name).exists() for name in (ckpt.LATEST, ckpt.MID)), why
    killed = [r for r in read_metrics(out) if r["kind"] == "train_interval"]
    assert killed, why
    capsys.readouterr()
    assert run_cli(*common, "--resume", "auto") == 0
    assert "no checkpoint in" in capsys.readouterr().out
    records = read_metrics(out)
    superseded = [r for r in records if r.get("superseded")]
    assert len([r for r in superseded if r["kind"] == "train_interval"]) == len(killed), why
    drawn = [r["step"] for r in read_run(str(out)) if r["kind"] == "train_interval"]
    assert drawn == list(range(1, 16)), why  # each step once, in order
    start = [r for r in records if r["kind"] == "start"][-1]
    assert start["resumed"]["from"] is None and start["resumed"]["superseded_records"] == len(superseded), why
    assert len(_epochs(out)) == 1, why


@pytest.mark.timeout(600)
def test_eval_every_changed_at_a_mid_epoch_resume_gets_a_note(shards, tmp_path, capsys):
    """SIGTERM mid-epoch 1, then --resume auto with another --eval-every: allowed (how the run reports,
    not what it computes), with one note, also in the start record (issue 29 row 12)."""
    out = tmp_path / "run"
    common = ["--data", shards, *FLAGS, "--workers", "0", "--out", out]
    _interrupt(tmp_path, 1, common, out, at_step=3)
    assert ckpt.load_checkpoint(out / ckpt.MID)["epoch_step"] >= 3
    capsys.readouterr()
    assert run_cli(*common, "--resume", "auto", "--eval-every", "2", "--epochs", "2") == 0
    said = capsys.readouterr().out
    line = "note: --eval-every 1 there, 2 here: evaluation follows this run's value from the epoch it continues on"
    assert said.count(line) == 1, said
    start = [r for r in read_metrics(out) if r["kind"] == "start"][-1]
    assert start["resumed"]["noted"] == [line[len("note: "):]]


def test_torn_checkpoint_falls_back_to_the_previous_and_says_so(tmp_path):
    out = tmp_path / "run"
    base = {"format": ckpt.FORMAT, "format_version": ckpt.FORMAT_VERSION, "arch": "resnet18", "num_classes": 4,
            "blob": torch.arange(200_000, dtype=torch.float32)}
    ckpt.save_checkpoint(out / ckpt.PREVIOUS, {**base, "epoch": 1, "step": 7})
    ckpt.save_checkpoint(out / ckpt.LATEST, {**base, "epoch": 2, "step": 14})
    ckpt.save_checkpoint(out / ckpt.MID, {**base, "epoch": 2, "epoch_step": 3, "step": 17})
    raw = (out / ckpt.MID).read_bytes()
    (out / ckpt.MID).write_bytes(raw[: len(raw) // 2])  # torn: a copy cut short
    load = lambda p: ckpt.load_checkpoint(p, mmap=True)  # noqa: E731
    state, path, notes = resume.pick([out / ckpt.MID, out / ckpt.LATEST, out / ckpt.PREVIOUS], load)
    assert path == out / ckpt.LATEST and state["step"] == 14
    assert len(notes) == 1 and str(out / ckpt.MID) in notes[0] and "resuming from" in notes[0]
    assert str(out / ckpt.LATEST) in notes[0] and "end of epoch 2" in notes[0]
    (out / ckpt.LATEST).write_bytes(b"")  # both newer ones gone bad: the one before them
    state, path, notes = resume.pick([out / ckpt.MID, out / ckpt.LATEST, out / ckpt.PREVIOUS], load)
    assert path == out / ckpt.PREVIOUS and len(notes) == 2
    # the newest wins, whichever file it is: a mid-epoch one of an earlier epoch loses to an epoch end
    ckpt.save_checkpoint(out / ckpt.MID, {**base, "epoch": 0, "epoch_step": 5, "step": 5})
    assert resume.pick([out / ckpt.MID, out / ckpt.PREVIOUS], load)[1] == out / ckpt.PREVIOUS
    ckpt.save_checkpoint(out / ckpt.MID, {**base, "epoch": 1, "epoch_step": 1, "step": 8})
    assert resume.pick([out / ckpt.MID, out / ckpt.PREVIOUS], load)[1] == out / ckpt.MID


def test_a_mid_epoch_checkpoint_holds_the_recipe_but_not_how_the_run_executes():
    """What `--resume auto` compares: a recipe field or the recipe's name is refused (named, as the
    run would print it); how the run executes is not, and only what costs bit-identity is reported."""
    saved = {"seed": 0, "lr": 0.1, "recipe": None, "workers": 2, "compile": False, "no_val": False, "data": "a"}
    here = {**saved, "recipe": "ffcv-rn18-16", "lr": 0.2, "workers": 5, "compile": True, "no_val": True, "data": "b"}
    refused, allowed = resume.config_changes(saved, here)
    assert refused == ["--lr 0.1 there, 0.2 here", "--recipe unset there, ffcv-rn18-16 here"]
    assert allowed == ["--compile off there, on here"]


def test_signals_inside_training_are_a_flag_and_a_second_one_is_only_noted():
    """Real signals to this process: inside `deferred()` SIGUSR1 (Slurm's warning) only sets the stop
    flag, so the step goes on; the next decision is save-and-stop with exit code 138; a second signal
    (during the save, say) is only counted. Outside, the previous handlers are back."""
    before = signal.getsignal(signal.SIGUSR1)
    life = Lifecycle(DistInfo(0, 1, 0, torch.device("cpu")), announce=False)
    with life.deferred():
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # Python runs the handlers between bytecodes of this thread
        assert life.signal == "SIGUSR1" and life.extra == 1
        decision = life.after_step(3)
    assert decision.save and decision.stop and life.code == 138
    assert signal.getsignal(signal.SIGUSR1) is before


def test_outside_training_a_signal_stops_the_command_at_once_with_one_line(capsys):
    """The command's own policy (`RunSignals`, start-up and --eval-only) around the lifecycle's: a
    signal inside `deferred()` is a flag; once training is left, the next one stops the command
    where it is (nothing after it runs), one line, 128 + the signal."""
    reached = []

    def body() -> int:
        life = Lifecycle(DistInfo(0, 1, 0, torch.device("cpu")), announce=False)
        with life.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        reached.append(life.signal)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        reached.append("after")
        return 0

    assert RunSignals().run(body, resuming=True) == 138
    assert reached == ["SIGTERM"] and capsys.readouterr().err.strip() == "interrupted; rerun the same command to resume"


AGREE = textwrap.dedent("""
    import json, os, signal, sys
    import torch.distributed as dist
    from imagenet_shards.train.trainer.distributed import init_distributed
    from imagenet_shards.train.trainer.state.lifecycle import Lifecycle
    info = init_distributed("cpu", backend="gloo")
    calls = [0]
    reduce = dist.all_reduce
    def counted(*a, **k):
        calls[0] += 1
        return reduce(*a, **k)
    life = Lifecycle(info, announce=False)  # the default --stop-check-every (8)
    dist.all_reduce = counted
    with life, life.deferred():
        for step in range(1, 200):
            if info.rank == 1 and step == int(sys.argv[2]):
                os.kill(os.getpid(), signal.SIGUSR1)  # only rank 1 is told
            decision = life.after_step(step)
            if decision is not None and decision.stop:
                break
    out = {"stop": step, "reduces": calls[0], "code": life.code, "signal": life.signal}
    open(os.path.join(sys.argv[1], f"rank{info.rank}.json"), "w").write(json.dumps(out))
    dist.destroy_process_group()
""")


@pytest.mark.timeout(300)
def test_ddp_agreement_every_k_steps_stops_every_rank_at_one_step(tmp_path):
    """2 gloo ranks through torchrun with the default K = 8 and no training around it: a real SIGUSR1
    to rank 1 alone at step 13 stops both ranks at the same step, a multiple of K within 2K steps
    of it, with rank 1's exit code on both; one reduce per K steps, none in between."""
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), str(tmp_path), "13"], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1], ranks
    stop = ranks[0]["stop"]
    assert stop % 8 == 0 and 13 < stop <= 13 + 16 and ranks[0]["code"] == 138 and ranks[0]["signal"] == "SIGUSR1"
    assert ranks[0]["reduces"] == stop // 8 - 1  # issued at steps 8, 16, ... and read K steps later


def test_checkpoint_every_and_the_lifecycle_decisions():
    assert parse_every("30m") == (None, 1800) and parse_every("1.5h") == (None, 5400)
    assert parse_every("2000steps") == (2000, None) and parse_every("90s,500steps") == (500, 90)
    for bad in ("30", "0m", "2.5steps", "soon"):
        with pytest.raises(ValueError, match="--checkpoint-every"):
            parse_every(bad)
    now = [0.0]
    life = Lifecycle(DistInfo(0, 1, 0, torch.device("cpu")), every_steps=5, every_seconds=60, clock=lambda: now[0])
    assert [life.after_step(s) is not None for s in range(1, 11)] == [s % 5 == 0 for s in range(1, 11)]
    now[0] = 61.0
    assert life.after_step(11).save and not life.after_step(11).stop
    life.saved()
    assert life.after_step(12) is None


# ----------------------------------------------------------------------------- slow: the other variants

@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_ddp_two_workers_signal_to_one_rank_only(shards, tmp_path):
    """2 ranks x 2 loader workers, time-based checkpoints; SIGTERM three times to rank 1 alone (as
    when only one node is reclaimed, and a second signal during the save): the agreement stops rank
    0 at the same step, both exit 143, and the resumed run is bit-identical."""
    rng, why = _seeded("one rank")
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["--data", shards, *FLAGS, "--workers", "2"]
    _run(tmp_path, 2, [*common, "--out", straight])
    _interrupt(tmp_path, 2, [*common, "--out", split, "--checkpoint-every", "1s"], split,
               at_step=rng.randint(8, 10), target=lambda: int((split / "pid-rank1").read_text()), times=3)
    assert _rank_codes(split, 2) == [143, 143], why
    mid = ckpt.load_checkpoint(split / ckpt.MID)
    assert mid["epoch"] == 1 and 0 < mid["epoch_step"] < 7, why
    saves = [r for r in read_metrics(split) if r["kind"] == "checkpoint" and r["at"] == "mid_epoch"]
    assert saves and saves[-1]["step"] == mid["step"], why  # the time-based ones, then the stop's
    _run(tmp_path, 2, [*common, "--out", split, "--resume", "auto", "--checkpoint-every", "1s"])
    _assert_same_weights(straight, split, why)
    assert [r["data_fingerprint"] for r in _epochs(straight)] == [r["data_fingerprint"] for r in _epochs(split)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("workers", [0, 2])
def test_ddp_sigkill_with_periodic_checkpoints_and_a_torn_one(shards, tmp_path, workers):
    """2 ranks x 0 or 2 workers, --checkpoint-every 3steps, SIGKILL to every process at a random step
    of epoch 2: --resume auto continues from the mid-epoch checkpoint to bit-identical weights. Then
    (2 workers) the same kill again with checkpoint-mid.pt torn afterwards: --resume auto says so,
    falls back to the epoch-end checkpoint, and still ends bit-identical (epoch-boundary resumption
    is exact too)."""
    rng, why = _seeded(f"ddp sigkill, {workers} workers")
    straight = tmp_path / "straight"
    common = ["--data", shards, *FLAGS, "--workers", str(workers), "--checkpoint-every", "3steps"]
    _run(tmp_path, 2, [*common, "--out", straight])
    for torn in (False, True) if workers else (False,):
        run = tmp_path / f"killed-{torn}"
        pids = lambda: [int((run / f"pid-rank{r}").read_text()) for r in (0, 1)]  # noqa: E731

        def kill_all():  # SIGKILL every rank (the launcher then has nothing left to manage)
            for pid in pids()[1:]:
                os.kill(pid, signal.SIGKILL)
            return pids()[0]
        _interrupt(tmp_path, 2, [*common, "--out", run], run, at_step=rng.randint(10, 12), sig=signal.SIGKILL,
                   target=kill_all, after_checkpoint=True)
        mid = ckpt.load_checkpoint(run / ckpt.MID)
        assert mid["epoch"] == 1 and mid["epoch_step"] > 0, why
        if torn:
            raw = (run / ckpt.MID).read_bytes()
            (run / ckpt.MID).write_bytes(raw[:-1000])
        out = _run(tmp_path, 2, [*common, "--out", run, "--resume", "auto"])
        if torn:
            assert f"warning: {run / ckpt.MID} cannot be loaded" in out and f"resuming from {run / ckpt.LATEST}" in out
        _assert_same_weights(straight, run, why)


def _train_keys(data: Path) -> list[str]:
    shards_ = D.split_shards(D.read_manifest(str(data)), str(data), "train")
    return [r.key for r in D.read_pieces(shards_, [D.Piece(i, 0, s.num_samples) for i, s in enumerate(shards_)])]


def _plan_fingerprint(data: Path, *, epoch: int, world: int) -> dict:
    """The train fingerprint a fresh `world`-rank run has in `epoch` (0-based), from the loader alone."""
    fps = []
    for rank in range(world):
        ld = D.make_loader(str(data), "train", 4, workers=0, seed=0, epoch=epoch, rank=rank, world_size=world, res=32)
        for _ in ld:
            pass
        fps.append(ld.position()["fingerprint"])
    return fingerprint.as_record(fingerprint.combine(*fps))


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("before,after", [(2, 1), (1, 3)])
def test_world_size_change_mid_epoch_sees_every_sample_once(shards, tmp_path, before, after):
    """SIGTERM mid-epoch 2 on `before` ranks, resume on `after`: epoch 2's fingerprint is every train
    sample exactly once (the part before the stop plus the re-planned rest), epoch 3 is the plan of
    a fresh `after`-rank run, and the start record says what changed."""
    rng, why = _seeded(f"world {before}->{after}")
    run = tmp_path / "run"
    common = ["--data", shards, *FLAGS, "--workers", "0", "--epochs", "3"]
    spe_before = 60 // before // 4
    at = spe_before + rng.randint(1, 3)  # a loaded box once let 2 ranks run on to the epoch's end: slowed from there
    _interrupt(tmp_path, before, [*common, "--out", run], run, at_step=at, slow_from=at)
    mid = ckpt.load_checkpoint(run / ckpt.MID)
    assert mid["epoch"] == 1 and 0 < mid["epoch_step"] < spe_before, why
    out = _run(tmp_path, after, [*common, "--out", run, "--resume", "auto"])
    assert "continuing epoch 2 on another layout (world_size" in out, out[-3000:]
    start = [r for r in read_metrics(run) if r["kind"] == "start"][-1]["resumed"]
    assert start["exact"] is False and start["changed"]["world_size"] == [before, after], start
    assert start["samples_left"] == 60 - before * mid["epoch_step"] * 4, (start, why)
    epochs = _epochs(run)
    assert [r["epoch"] for r in epochs] == [0, 1, 2]
    assert epochs[1]["data_fingerprint"]["train"] == fingerprint.as_record(fingerprint.of_keys(_train_keys(shards)))
    assert epochs[2]["data_fingerprint"]["train"] == _plan_fingerprint(shards, epoch=2, world=after), why
    assert epochs[2]["step"] == 3 * (60 // after // 4)  # the schedule is back on the new layout's grid


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_recipe_state_survives_a_mid_epoch_stop(shards, tmp_path):
    """The recipes' state across a SIGTERM mid-epoch (one process): repeated augmentation's sampler
    position, LAMB's moments, the EMA every 2 steps, gradient accumulation, MixUp and CutMix draws
    and timm's RandAugment in the workers: --resume auto ends bit-identical."""
    rng, why = _seeded("recipe state")
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["--data", shards, *FLAGS, "--workers", "2", "--ra-reps", "2", "--optimizer", "lamb", "--ema-every", "2",
              "--accumulate", "2", "--cutmix", "1.0", "--aug", "rand-m6-mstd0.5-inc1"]
    _run(tmp_path, 1, [*common, "--out", straight])
    _interrupt(tmp_path, 1, [*common, "--out", split], split, at_step=rng.randint(8, 10))
    mid = ckpt.load_checkpoint(split / ckpt.MID)
    assert mid["epoch"] == 1 and 0 < mid["epoch_step"] < 7, why  # 15 batches of 4, 2 per step: 7 steps
    # another layout cannot continue repeated augmentation's copies exactly: refused in one line
    other = list(common)
    other[other.index("--workers") + 1] = "0"
    refused = _launch(tmp_path, 1, [*other, "--out", split, "--resume", "auto"])
    text, _ = refused.communicate(timeout=200)
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1 and "repeated augmentation (x2) cannot continue" in errors[0], text
    _run(tmp_path, 1, [*common, "--out", split, "--resume", "auto"])
    _assert_same_weights(straight, split, why)
    assert [r["data_fingerprint"] for r in _epochs(straight)] == [r["data_fingerprint"] for r in _epochs(split)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_preemption_skip_and_checkpoint_run(tmp_path):
    """bench/bench_preemption.py (the docs' figures) still runs against the code it measures."""
    def bench(*args) -> dict:
        proc = subprocess.run([sys.executable, "bench/bench_preemption.py", *args], cwd=REPO, env=ENV,
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])
    skip = bench("skip", "--samples", "300", "--buffer", "60", "--batch", "8")
    assert skip["skipped"] == int(300 // 8 * 0.9) * 8 and skip["replay_us_per_record"] > 0
    cost = bench("checkpoint", "--arch", "resnet18", "--ranks", "2", "--repeats", "1", "--dir", str(tmp_path))
    assert cost["mid_epoch_extra_bytes"] > 0 and cost["epoch_end"]["bytes"] > 40e6
