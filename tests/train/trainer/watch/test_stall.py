"""A loader worker that delivers nothing: named in a warning, and a stop past its deadline still
writes the last completed step's checkpoint, kills the workers and resumes exactly. Real processes:
a train-imagenet subprocess with 2 loader workers, a real SIGSTOP to one of them, a real SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from imagenet_shards.train.loader import activity
from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.state import checkpoint as ckpt
from imagenet_shards.train.trainer.state.lifecycle import Lifecycle, StopOverdue
from imagenet_shards.train.trainer.watch.stall import StallWatch
from imagenet_shards.train.trainer.watch.telemetry import read_metrics
from tests.fixtures.trainer import run_cli, write_tiny_shards
from tests.train.trainer.state.test_preemption import FLAGS, _assert_same_weights, _epochs, _launch

pytestmark = pytest.mark.usefixtures("one_thread")
DEADLINE = 2.0


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    # 40 steps an epoch: a worker stopped within the first 30 steps still owes batches (prefetch: 4 each)
    return write_tiny_shards(tmp_path_factory.mktemp("stall") / "shards", classes=4, train_per_class=40,
                             val_per_class=2, shard_samples=13)


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return sorted(kids)


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, T, Z...), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _wait_for(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, what
        time.sleep(0.05)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("extra", [[], pytest.param(["--ra-reps", "4", "--accumulate", "8"], marks=pytest.mark.slow)],
                         ids=["plain", "ra4-accumulate8"])
def test_sigstop_one_worker_then_sigterm_stops_by_the_deadline_and_resumes_exactly(shards, tmp_path, extra):
    """ra4-accumulate8 (tv-rn50-v2 on one GPU): the stall comes inside a step (2 workers: after an odd
    number of its 8 micro-batches), the checkpoint is the step before it, and it resumes exactly."""
    straight, stalled = tmp_path / "straight", tmp_path / "stalled"
    common = ["--data", shards, *FLAGS, "--epochs", "1", "--workers", "2", *extra]
    assert run_cli(*common, "--out", straight) == 0

    proc = _launch(tmp_path, 1, [*common, "--out", stalled, "--stall-warn", "1", "--stop-deadline", DEADLINE])
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    stopped_pid = None
    try:
        def steps() -> list[int]:
            if not (stalled / "metrics.jsonl").exists():
                return []
            return [r["step"] for r in read_metrics(stalled) if r["kind"] == "train_interval"]
        _wait_for(lambda: steps() and len(_children(proc.pid)) >= 2, 120, "no step with 2 workers")
        workers = _children(proc.pid)
        stopped_pid = workers[0]
        os.kill(stopped_pid, signal.SIGSTOP)
        _wait_for(lambda: any(f"(pid {stopped_pid})" in line for line in lines) or proc.poll() is not None, 60,
                  "no stall warning")
        assert proc.poll() is None, "".join(lines)[-3000:]
        last_step = steps()[-1]
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
        if stopped_pid and _state(stopped_pid) == "T":
            os.kill(stopped_pid, signal.SIGKILL)
    reader.join(10)
    out = "".join(lines)
    assert rc == 143, out[-3000:]
    assert took < DEADLINE + 6, (took, out[-3000:])  # the deadline, the checkpoint write and the exit
    named = [line for line in lines if re.search(
        rf"the train loader has delivered no batch for \d+ s: loader worker [01] \(pid {stopped_pid}\) is reading "
        rf"\S+/imagenet1k-train-\d+\.tar \(its last sample read: #\d+", line)]
    assert named, out[-3000:]
    stop = [line for line in out.replace("\r", "\n").splitlines() if line.startswith("stopped by SIGTERM")]
    assert len(stop) == 1 and "past the stop deadline (--stop-deadline 2 s" in stop[0], out[-3000:]
    assert f"(pid {stopped_pid})" in stop[0] and "loader worker(s) killed" in stop[0], stop[0]
    assert "checkpoint-mid.pt written" in stop[0], stop[0]
    mid = ckpt.load_checkpoint(stalled / ckpt.MID)
    assert mid["epoch"] == 0 and mid["epoch_step"] == mid["step"] == last_step, (mid["step"], last_step)
    assert _state(stopped_pid) in (None, "Z"), "the stopped worker is still alive"
    assert all(_state(p) in (None, "Z") for p in workers)
    record = [r for r in read_metrics(stalled) if r["kind"] == "stopped"][-1]
    assert record["exit_code"] == 143 and "killed" in record["overdue"]

    assert run_cli(*common, "--out", stalled, "--resume", "auto") == 0
    _assert_same_weights(straight, stalled, "stalled worker")
    a, b = _epochs(straight), _epochs(stalled)
    assert [r["data_fingerprint"] for r in a] == [r["data_fingerprint"] for r in b]
    assert [r["train_loss"] for r in a] == [r["train_loss"] for r in b]
    assert b[0]["data_fingerprint"]["train"]["samples"] == 160


class _Loader:
    """A loader stand-in with the real wait and reading board, and a DataLoader-like iterator whose
    task table says batch 3 is due from worker 1."""

    class _Proc:
        pid = 4242

    def __init__(self, url: str):
        self.wait = activity.Wait()
        self.wait.iterator = type("It", (), {"_task_info": {3: (1,)}, "_rcvd_idx": 3,
                                             "_workers": [self._Proc(), self._Proc()]})()
        shard = type("Shard", (), {"url": url})()
        self.dataset = type("D", (), {"activity": activity.new_board(2), "shards": [shard, shard]})()


def test_the_watch_warns_once_per_wait_and_nudges_only_past_the_deadline():
    loader = _Loader("https://user:secret@host/shards/train-000001.tar")
    board = loader.dataset.activity
    records = activity.reading(iter([activity.SKIPPED, type("R", (), {"shard": 1, "index": 7})()]), board, 1)
    assert list(records)[0] is activity.SKIPPED and board[1].tolist()[:2] == [1.0, 7.0]
    now = [100.0]
    life = Lifecycle(DistInfo(0, 1, 0, torch.device("cpu")), announce=False, clock=lambda: now[0], stop_deadline=5)
    nudges = []
    life.nudge = lambda reason: nudges.append(reason)
    watch = StallWatch(life, {"train": loader, "val": None}, warn_after=3, write=lambda line: None)
    loader.wait.since = time.monotonic() - 4
    watch.check()
    watch.check()
    assert len(watch.lines) == 1 and "loader worker 1 (pid 4242) is reading https://***@host/shards/train-000001.tar" \
        in watch.lines[0] and "secret" not in watch.lines[0] and "#7" in watch.lines[0], watch.lines
    assert not nudges  # no stop asked for
    life.signal, life.signal_at = "SIGTERM", 100.0
    now[0] = 104.0
    watch.check()
    assert not nudges  # 4 s after the signal: inside the deadline
    now[0] = 105.5
    watch.check()
    assert len(nudges) == 1 and "--stop-deadline 5 s" in nudges[0] and "pid 4242" in nudges[0]
    loader.wait.since = None  # the batch came: no more nudges
    watch.check(now=time.monotonic() + 5)
    assert len(nudges) == 1
    ddp = StallWatch(life, {"train": loader}, warn_after=3, write=lambda line: None, min_wait=5)
    loader.wait.since = time.monotonic() - 4  # DDP: a wait shorter than the deadline is not abandoned
    ddp.check()
    assert len(nudges) == 1
    loader.wait.since = time.monotonic() - 6
    ddp.check()
    assert len(nudges) == 2


class _StallsAt(list):
    """Loader batches whose iteration raises StopOverdue (as the lifecycle's nudge does, out of the
    wait) when batch ``at`` is asked for."""

    def __init__(self, batches, at: int):
        super().__init__(batches)
        self.at = at

    def set_epoch(self, epoch):
        pass

    def __iter__(self):
        for i, batch in enumerate(list.__iter__(self)):
            if i == self.at:
                raise StopOverdue("test")
            yield batch


def test_a_stop_past_its_deadline_inside_a_step_checkpoints_the_step_start():
    """--accumulate 4, the loader stalls on micro-batch 3 of step 2: the checkpoint the engine writes
    holds BatchNorm statistics and the torch random state (dropout) as step 1 left them, not as the
    trained micro-batches of step 2 moved them (a resume from it would not be exact)."""
    from imagenet_shards.train.trainer.engine import StepRecord, make_autocast, train_one_epoch
    from imagenet_shards.train.trainer.prefetch import DevicePrefetcher
    cpu = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 255, (4, 3, 4, 4), dtype=torch.uint8, generator=gen),
             torch.randint(0, 3, (4,), generator=gen)) for _ in range(8)]

    def run(batches):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                    torch.nn.Dropout(0.5), torch.nn.Linear(16, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        saved = []

        def checkpoint(done, sums):
            saved.append((done, {k: v.clone() for k, v in model.state_dict().items()}, torch.get_rng_state()))
        how = StepRecord(model, optimizer=opt, scheduler=None, scaler=None, criterion=torch.nn.CrossEntropyLoss(),
                         autocast=make_autocast("none", torch.device("cpu")), info=cpu, log_interval=100,
                         accumulate=4)
        stats = train_one_epoch(DevicePrefetcher(batches, torch.device("cpu")), how, epoch=0, step=0,
                                checkpoint=checkpoint)
        return stats, saved, model, torch.get_rng_state()

    _, _, one_step, rng_after = run(_StallsAt(data[:4], 99))  # step 1 alone, uninterrupted
    stats, saved, _, _ = run(_StallsAt(data, 7))  # batches 5-7 of step 2 trained, batch 8 never comes
    assert stats.overdue and stats.steps == 1 and len(saved) == 1 and saved[0][0] == 1
    for key, value in one_step.state_dict().items():
        assert torch.equal(saved[0][1][key], value), key
    assert torch.equal(saved[0][2], rng_after)
