"""telemetry.per_step: host syncs, host reads and device-to-host copies attributed to each profiled
step of the training thread, from a profiler trace (a made-up one with the real event names)."""

from __future__ import annotations

from imagenet_shards.train.trainer.watch.telemetry import per_step, trace_summary

MAIN, DECODE = 1, 2


def _x(name, cat, ts, dur=1.0, tid=MAIN, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "args": args}


def test_syncs_reads_and_copies_land_in_their_steps():
    events = [
        _x("ProfilerStep#2", "user_annotation", 0, 100), _x("ProfilerStep#3", "user_annotation", 100, 100),
        _x("ProfilerStep#4", "user_annotation", 200, 100),
        # step 2: a loss.item() (a read + its copy + the sync), and the decode thread's own sync
        _x("aten::_local_scalar_dense", "cpu_op", 10), _x("cudaMemcpyAsync", "cuda_runtime", 11, correlation=7),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 150, tid=20, correlation=7),  # runs later on the GPU
        _x("cudaStreamSynchronize", "cuda_runtime", 12), _x("cudaStreamSynchronize", "cuda_runtime", 50, tid=DECODE),
        # step 3: nothing; step 4: a copy issued by the decode thread (not the training loop's)
        _x("cudaMemcpyAsync", "cuda_runtime", 210, tid=DECODE, correlation=9),
        _x("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 220, tid=20, correlation=9),
        _x("cudaDeviceSynchronize", "cuda_runtime", 290),
        _x("cudaStreamSynchronize", "cuda_runtime", 400),  # after the last step: in none
    ]
    got = {s["step"]: s for s in per_step(events)}
    assert sorted(got) == [2, 3, 4] and got[2]["ms"] == 0.1
    assert (got[2]["host_syncs"], got[2]["item_calls"], got[2]["dtoh_copies"], got[2]["other_thread_syncs"]) == (1, 1, 1, 1)
    assert (got[3]["host_syncs"], got[3]["item_calls"], got[3]["dtoh_copies"]) == (0, 0, 0)
    assert (got[4]["host_syncs"], got[4]["dtoh_copies"]) == (1, 0)
    assert trace_summary({"traceEvents": events}, steps=3)["per_step"] == per_step(events)
    assert per_step([]) == []
