"""telemetry.trace_summary: host syncs and copy overlap read from a profiler trace."""

from __future__ import annotations

import pytest

from imagenet_shards.train.trainer.watch.telemetry import trace_summary


def _x(name: str, cat: str, ts: float, dur: float, tid: int = 7) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid}


def test_trace_summary_counts_syncs_and_copy_overlap():
    trace = {"traceEvents": [
        _x("cudaStreamSynchronize", "cuda_runtime", 0, 5, tid=1),
        _x("cudaStreamSynchronize", "cuda_runtime", 50, 5, tid=1),
        _x("cudaLaunchKernel", "cuda_runtime", 60, 1, tid=1),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 10, 2),
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 100, 10, tid=13),  # on the side stream
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 200, 10, tid=13),
        _x("conv", "kernel", 95, 10, tid=7),    # overlaps the first copy by 5 of its 10 us
        _x("relu", "kernel", 102, 20, tid=7),   # and to its end: 10 of 10 covered
        _x("bn", "kernel", 200, 10, tid=13),    # same stream as the second copy: no overlap
    ]}
    got = trace_summary(trace, steps=2)
    assert got["host_syncs_per_step"] == 1.0 and got["dtoh_copies_per_step"] == 0.5
    assert got["htod_copies"] == 2 and got["htod_overlap_fraction"] == pytest.approx(10 / 20)
    empty = trace_summary({"traceEvents": []}, steps=3)
    assert empty["host_syncs_per_step"] == 0 and empty["htod_overlap_fraction"] is None
