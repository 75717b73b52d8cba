"""What a run reports: RUN_DIR/metrics.jsonl (one JSON object a line) and optional TensorBoard.

Record kinds and their fields are listed in docs/training.md. Only rank 0 writes; other ranks get
a disabled logger, so callers never branch on rank.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

METRICS_FILE = "metrics.jsonl"


def gpu_memory_gib(device: torch.device) -> float | None:
    """Peak memory allocated by tensors on `device` so far, in GiB; None on CPU."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 3)


def _clean(value):
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


class MetricsLog:
    """Appends records to RUN_DIR/metrics.jsonl (flushed per record) and mirrors numeric fields to
    TensorBoard under `<kind>/<field>` when `tensorboard` is importable."""

    def __init__(self, run_dir: str | Path, enabled: bool = True, tensorboard: bool = True):
        self.enabled = enabled
        self.file = None
        self.tb = None
        if not enabled:
            return
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.file = open(run_dir / METRICS_FILE, "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # optional extra: pip install imagenet-shards[tensorboard]
                SummaryWriter = None
            if SummaryWriter is not None:
                self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, kind: str, **fields) -> dict:
        """Write one record `{"kind": kind, "time": unix seconds, **fields}`; returns it."""
        record = _clean({"kind": kind, "time": time.time(), **fields})
        if not self.enabled:
            return record
        self.file.write(json.dumps(record, sort_keys=True) + "\n")
        self.file.flush()
        if self.tb is not None:
            step = fields.get("step", 0)
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("time", "step"):
                    self.tb.add_scalar(f"{kind}/{key}", value, step)
        return record

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def read_metrics(run_dir: str | Path) -> list[dict]:
    """All records of RUN_DIR/metrics.jsonl, in order (empty if there is none)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
