"""What a run reports: RUN_DIR/metrics.jsonl (one JSON object a line), optional TensorBoard, the
process's own resource use, and the `--profile` trace.

Record kinds and their fields are listed in docs/training.md. Only rank 0 writes; other ranks get
a disabled logger, so callers never branch on rank.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import time
from pathlib import Path

import torch

from imagenet_shards.train.loader import fingerprint
from imagenet_shards.train.trainer.distributed import DistInfo, gather_objects
from imagenet_shards.train.trainer.state.checkpoint import supports_positions

METRICS_FILE = "metrics.jsonl"


def gpu_memory_gib(device: torch.device) -> float | None:
    """Peak memory allocated by tensors on `device` so far, in GiB; None on CPU."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 3)


def process_cpu_seconds() -> float | None:
    """User + system CPU seconds of this process so far, all its threads (the same numbers as
    utime + stime in /proc/PID/stat); loader workers are separate processes and not included."""
    try:
        t = os.times()
    except OSError:
        return None
    return t.user + t.system


def process_memory() -> dict:
    """This process's peak resident memory (GiB) and, on CUDA, the pinned host memory held by
    torch's caching host allocator (GiB, peak). Loader workers are not included."""
    out: dict = {"peak_rss_gib": None, "pinned_peak_gib": None}
    try:
        import resource
        out["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)  # KiB on Linux
    except (ImportError, OSError):
        pass
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            peak = stats().get("allocated_bytes.peak")
        except RuntimeError:
            peak = None
        out["pinned_peak_gib"] = None if peak is None else round(peak / 2**30, 3)
    return out


def _clean(value):
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


class MetricsLog:
    """Appends records to RUN_DIR/metrics.jsonl (flushed per record) and mirrors numeric fields to
    TensorBoard under `<kind>/<field>` when `tensorboard` is importable. `purge_step` (a resumed
    run's step): TensorBoard hides the earlier events past it, as `supersede` marks the records."""

    def __init__(self, run_dir: str | Path, enabled: bool = True, tensorboard: bool = True,
                 purge_step: int | None = None):
        self.enabled = enabled
        self.file = None
        self.tb = None
        self.tensorboard_dir = None  # where events go, when they do
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
                self.tb = SummaryWriter(str(run_dir / "tensorboard"),
                                        purge_step=None if purge_step is None else purge_step + 1)
                self.tensorboard_dir = run_dir / "tensorboard"

    def log(self, kind: str, **fields) -> dict:
        """Write one record `{"kind": kind, "time": unix seconds, **fields}`; returns it."""
        record = _clean({"kind": kind, "time": time.time(), **fields})
        if not self.enabled:
            return record
        try:
            self.file.write(json.dumps(record, sort_keys=True) + "\n")
            self.file.flush()
        except OSError as e:  # a full or vanished disk: one line, not a traceback from the epoch loop
            from imagenet_shards.train.trainer.config import TrainError

            raise TrainError(f"cannot write {self.file.name}: {e.strerror or e}; free space there (or move "
                             "RUN_DIR to a disk with room), then continue with --resume auto") from None
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


def read_metrics(run_dir: str | Path, current: bool = False) -> list[dict]:
    """All records of RUN_DIR/metrics.jsonl, in order (empty if there is none); `current`: without
    the superseded ones (see `supersede`)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if current:
        from imagenet_shards.train.report.records import current_records
        records = current_records(records)
    return records


def supersede(run_dir: str | Path, step: int) -> int:
    """Mark the records a killed run wrote past global step `step` (where its successor resumes)
    `"superseded": true`, so each step has one current record; returns how many. The file is
    rewritten through the atomic writer: a crash leaves the old file or the new one. Records
    without a step (`start`) stay as they are."""
    from imagenet_shards.pipeline.storage.atomic import write_atomic

    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return 0
    lines, marked = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the line a killed process was writing
            continue
        if isinstance(record.get("step"), int) and record["step"] > step and not record.get("superseded"):
            record["superseded"] = True
            marked += 1
        lines.append(json.dumps(record, sort_keys=True))
    write_atomic(path, ("\n".join(lines) + "\n").encode("utf-8") if lines else b"")
    return marked


# CUDA runtime calls that block the host until the device catches up
HOST_SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def trace_summary(trace: dict, steps: int) -> dict:
    """From a torch.profiler chrome trace of `steps` training steps: host syncs and device-to-host
    copies per step (each one stalls the host until the GPU catches up), and the fraction of
    host-to-device copy time that overlaps kernels on another stream (the prefetcher's goal: 1.0)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    syncs = sum(1 for e in events if e.get("name") in HOST_SYNC_CALLS)
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    dtoh = sum(1 for e in copies if "DtoH" in e.get("name", ""))
    htod = [e for e in copies if "HtoD" in e.get("name", "")]
    kernels: dict = {}
    for e in events:
        if e.get("cat") == "kernel":
            kernels.setdefault(e.get("tid"), []).append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    overlap = None
    if htod:
        total = covered = 0.0
        busy_besides: dict = {}  # copy stream -> merged kernel intervals of every other stream
        for c in htod:
            a, b = float(c["ts"]), float(c["ts"]) + float(c.get("dur", 0))
            if c.get("tid") not in busy_besides:
                busy_besides[c.get("tid")] = _merged([iv for tid, ivs in kernels.items() if tid != c.get("tid")
                                                      for iv in ivs])
            busy = busy_besides[c.get("tid")]
            total += b - a
            covered += sum(max(0.0, min(b, y) - max(a, x)) for x, y in busy)
        overlap = covered / total if total > 0 else None
    per = max(1, steps)
    return {"steps": steps, "host_syncs_per_step": syncs / per, "dtoh_copies_per_step": dtoh / per,
            "htod_copies": len(htod), "htod_overlap_fraction": overlap, "per_step": per_step(events)}


# a read of a device value by the host (`.item()`, `.tolist()`, `bool(t)`): it waits for the device
ITEM_OP = "aten::_local_scalar_dense"


def per_step(events: list[dict]) -> list[dict]:
    """What each profiled step made the host wait for: per `ProfilerStep#N` window of the thread that
    recorded those annotations (the training loop), its host syncs, host reads of device values
    and device-to-host copies (attributed by the host call that issued the copy, found through the
    trace's correlation ids), and the syncs other threads made meanwhile (the --gpu-decode thread's,
    the pin-memory thread's: not the training loop's). ProfilerStep#N runs from the N-th
    `profiler.step()` to the next: the end of training step N and the body of step N+1."""
    marks = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    if not marks:
        return []
    main = marks[0].get("tid")
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    steps = [{"step": int(m["name"].split("#", 1)[1]), "ms": round(float(m.get("dur", 0)) / 1000, 3),
              "host_syncs": 0, "item_calls": 0, "dtoh_copies": 0, "other_thread_syncs": 0} for m in marks]
    starts = [float(m["ts"]) for m in marks]
    ends = [a + float(m.get("dur", 0)) for a, m in zip(starts, marks)]

    def slot(ts: float) -> dict | None:
        i = bisect.bisect_right(starts, ts) - 1  # the windows follow each other without overlap
        return steps[i] if i >= 0 and ts <= ends[i] else None

    for e in events:
        name, cat = e.get("name"), e.get("cat")
        if name in HOST_SYNC_CALLS:
            step = slot(float(e["ts"]))
            if step is not None:
                step["host_syncs" if e.get("tid") == main else "other_thread_syncs"] += 1
        elif name == ITEM_OP and e.get("tid") == main:
            step = slot(float(e["ts"]))
            if step is not None:
                step["item_calls"] += 1
        elif cat == "gpu_memcpy" and "DtoH" in str(name):
            launch = launches.get(e.get("args", {}).get("correlation"))
            if launch is not None and launch.get("tid") != main:
                continue  # issued by another thread
            step = slot(float((launch or e)["ts"]))
            if step is not None:
                step["dtoh_copies"] += 1
    return steps


def epoch_fingerprint(info: DistInfo, train_loader, batches: int, val_loader) -> dict | None:
    """The epoch's data fingerprint over all ranks (and over an interruption): train from the loader
    positions after `batches` batches of this iteration, val from the last evaluation."""
    train = train_loader.position(batches)["fingerprint"] if supports_positions(train_loader) else None
    val = (getattr(val_loader, "stats", None) or {}).get("fingerprint") if val_loader is not None else None
    parts = gather_objects(info, (train, val))
    out = {}
    for i, split in enumerate(("train", "val")):
        got = [p[i] for p in parts]
        if all(g is not None for g in got):
            out[split] = fingerprint.as_record(fingerprint.combine(*got))
    return out or None


def make_profiler(steps: int, out: Path, rank: int, cuda: bool):
    """torch.profiler over `steps` steps (after 1 wait + 1 warm-up step) writing OUT/trace-rank<R>.json,
    a summary table and syncs-rank<R>.json (`trace_summary`); None when `steps` is 0."""
    if not steps:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    def write(prof) -> None:
        trace = out / f"trace-rank{rank}.json"
        prof.export_chrome_trace(str(trace))
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        (out / f"summary-rank{rank}.txt").write_text(table + "\n")
        summary = trace_summary(json.loads(trace.read_text()), steps)
        (out / f"syncs-rank{rank}.json").write_text(json.dumps(summary, sort_keys=True) + "\n")

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
                   on_trace_ready=write, record_shapes=True)
