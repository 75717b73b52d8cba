"""Repeated augmentation spread over the micro-batches of a step (loader/plan.py ``spread_plan``) through
train-imagenet: a real SIGTERM inside an epoch of --ra-reps 4 --accumulate 4 on one process, with a
worker count that is not a multiple of 4, resumes bit-identically; the epoch's data fingerprints are
those of an in-process run; another --workers is refused in one line."""

from __future__ import annotations

import pytest

from imagenet_shards.train.trainer.state import checkpoint as ckpt
from tests.fixtures.trainer import write_tiny_shards
from tests.train.trainer.state.test_preemption import FLAGS, _assert_same_weights, _epochs, _interrupt, _launch, _run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_sigterm_inside_a_spread_epoch_resumes_exactly(tmp_path):
    # 96 samples, batch 4, 4 slots: 6 batches a slot, 24 a rank, 6 steps an epoch
    shards = write_tiny_shards(tmp_path / "shards", classes=4, train_per_class=24, val_per_class=2, shard_samples=13)
    common = ["--data", shards, *FLAGS, "--ra-reps", "4", "--accumulate", "4"]
    straight, inproc, split = tmp_path / "straight", tmp_path / "inproc", tmp_path / "split"
    _run(tmp_path, 1, [*common, "--workers", "3", "--out", straight])
    _run(tmp_path, 1, [*common, "--workers", "0", "--out", inproc])
    a, b = _epochs(straight), _epochs(inproc)
    assert [r["step"] for r in a] == [6, 12]
    assert [r["data_fingerprint"] for r in a] == [r["data_fingerprint"] for r in b]
    assert a[0]["data_fingerprint"]["train"]["samples"] == 96

    _interrupt(tmp_path, 1, [*common, "--workers", "3", "--out", split], split, at_step=8, slow_from=7)
    mid = ckpt.load_checkpoint(split / ckpt.MID)
    assert mid["epoch"] == 1 and 0 < mid["epoch_step"] < 6
    refused = _launch(tmp_path, 1, [*common, "--workers", "2", "--out", split, "--resume", "auto"])
    text, _ = refused.communicate(timeout=200)
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1, text
    assert "repeated augmentation (x4) cannot continue" in errors[0], text
    _run(tmp_path, 1, [*common, "--workers", "3", "--out", split, "--resume", "auto"])
    _assert_same_weights(straight, split, "spread resume")
    assert [r["data_fingerprint"] for r in _epochs(split)] == [r["data_fingerprint"] for r in a]
