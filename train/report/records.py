"""Which records of a metrics.jsonl are current: a run resumed after a kill repeats the steps its
predecessor logged past the checkpoint, and those earlier records are marked `"superseded": true`
(trainer/watch/telemetry.py `supersede`). Readers (report-run, the trainer's own summaries) draw each
step once from `current_records`. No torch here: report-run reads copies of runs anywhere."""

from __future__ import annotations

# How much an epoch's memory may exceed the run's second epoch before the trainer's memory watch
# warns (trainer/watch/memory.py), and where the report's memory panel draws its dotted lines.
GROWTH_LIMIT = 0.10


def current_records(records: list[dict]) -> list[dict]:
    """The records that are not superseded; of several `train_interval` records for one step (a
    file resumed before records were marked) the last one."""
    live = [r for r in records if not r.get("superseded")]
    last = {r["step"]: i for i, r in enumerate(live) if r.get("kind") == "train_interval" and "step" in r}
    return [r for i, r in enumerate(live)
            if r.get("kind") != "train_interval" or "step" not in r or last[r["step"]] == i]


def fingerprints(records: list[dict]) -> list[dict]:
    """Per epoch, its data fingerprints: [{"epoch": e, "train": {...}, "val": {...}}, ...]."""
    return [{"epoch": r["epoch"], **r["data_fingerprint"]} for r in current_records(records)
            if r.get("kind") == "epoch" and r.get("data_fingerprint")]
