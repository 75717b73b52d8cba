"""What surviving preemption costs: the ranks' stop agreement per step, a mid-epoch checkpoint, and
skipping the consumed part of an epoch on resume. The figures of docs/training.md, "Preemption and
requeue".

    torchrun --standalone --nproc_per_node 2 bench/bench_preemption.py agree [--steps 4000] [--size 96]
    python bench/bench_preemption.py checkpoint [--arch resnet50] [--ranks 8] [--dir DIR]
    python bench/bench_preemption.py skip [--samples 4000] [--buffer 2000]

* ``agree`` (2 gloo ranks on the CPU): CPU time (the process, gloo's threads included) and wall
  time per training step spent in ``Lifecycle.after_step`` with ``--stop-check-every`` 1 and 8,
  against one blocking all-reduce of the same two numbers every step (the naive way). Each "step"
  is a fixed small matmul, so the difference is the agreement's cost; rounds interleave the
  variants, medians reported.
* ``checkpoint``: bytes and seconds of ``save_checkpoint`` (atomic: temp file, fsync, rename) for
  the epoch-end state of ``--arch`` with SGD momentum, and what a mid-epoch one adds for
  ``--ranks`` ranks (their BatchNorm buffers, loader positions, RNG states). On the disk of
  ``--dir`` (default: a temp folder).
* ``skip``: CPU time of resuming one loader worker near the end of its range: the shuffle replayed
  on positions (``position.consumed_stream``), the reading that passes the consumed samples over
  (tar headers only), and the first batch, against a fresh start's first batch.

Not a test: the numbers depend on the machine (and, on a shared one, on its neighbours).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fixtures for the bench data


def agree(args) -> dict:
    import torch.distributed as dist
    from imagenet_shards.train.trainer.distributed import init_distributed
    from imagenet_shards.train.trainer.state.lifecycle import Lifecycle

    torch.set_num_threads(1)
    info = init_distributed("cpu")
    a, b = torch.randn(args.size, args.size), torch.randn(args.size, args.size)
    group = dist.new_group(backend="gloo")
    lives = {k: Lifecycle(info, agree_every=k) for k in (1, 8)}

    def run(kind) -> tuple[float, float]:
        dist.barrier()
        t0, w0 = time.process_time(), time.perf_counter()
        for step in range(1, args.steps + 1):
            a.mm(b)  # the "training step"
            if kind == "blocking":
                flags = torch.zeros(2, dtype=torch.int64)
                dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=group)
                flags.tolist()
            elif kind != "none":
                lives[kind].after_step(step)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        return cpu / args.steps * 1e6, wall / args.steps * 1e6

    kinds = ("none", 1, 8, "blocking")
    rounds: dict = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            rounds[kind].append(run(kind))
    out = {}
    for i, what in enumerate(("cpu", "wall")):
        base = statistics.median(r[i] for r in rounds["none"])
        out[f"{what}_us_bare_step"] = round(base, 1)
        for kind in kinds[1:]:
            name = f"agree_every_{kind}" if kind != "blocking" else "blocking_every_step"
            out[f"{what}_us_{name}"] = round(statistics.median(r[i] for r in rounds[kind]) - base, 1)
    if info.is_main:
        print(json.dumps({"per_step_over_the_bare_step": out, "ranks": info.world_size}))
    for life in lives.values():
        life.__exit__(None, None, None)
    dist.destroy_process_group()
    return out


def checkpoint(args) -> dict:
    from imagenet_shards.train.trainer.state import checkpoint as ckpt
    from imagenet_shards.train.trainer.model import build_model, build_optimizer

    torch.manual_seed(0)
    model = build_model(args.arch, 1000)
    opt = build_optimizer(model, lr=0.1, momentum=0.9, nesterov=False, weight_decay=5e-5, no_bn_wd=False)
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    opt.step()  # momentum buffers exist
    state = {"format": ckpt.FORMAT, "format_version": ckpt.FORMAT_VERSION, "model": model.state_dict(),
             "optimizer": opt.state_dict(), "rng": [ckpt.rng_state(torch.device("cpu"))] * args.ranks}
    position = {"epoch": 3, "batches": 2000, "workers": [(143, 36700, 142, 36440, 36700)] * 14,
                "fingerprint": [512000, 2**63], "samples": 512000, "bad_samples": 0, "duplicated": 0}
    # each rank's own tensors (torch.save would store one object referenced eight times once)
    mid = {**state, "epoch_step": 2000, "ranks": [{"loader": position, "buffers": ckpt.rank_buffers(model),
                                                   "ema_buffers": None, "prefetch": None, "sums": [1.0, 2, 3]}
                                                  for _ in range(args.ranks)]}
    out = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for name, s in (("epoch_end", state), ("mid_epoch", mid)):
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                ckpt.save_checkpoint(Path(folder) / f"{name}.pt", s)
                times.append(time.perf_counter() - t0)
            out[name] = {"bytes": (Path(folder) / f"{name}.pt").stat().st_size,
                         "seconds_median": round(statistics.median(times), 3)}
    out["mid_epoch_extra_bytes"] = out["mid_epoch"]["bytes"] - out["epoch_end"]["bytes"]
    print(json.dumps({"arch": args.arch, "ranks": args.ranks, **out}))
    return out


def skip(args) -> dict:
    from imagenet_shards.train import loader as D
    from imagenet_shards.train.loader import position
    from tests.fixtures.loader import write_shard_set

    with tempfile.TemporaryDirectory() as folder:
        data = str(write_shard_set(Path(folder) / "set", train=args.samples, shard_samples=1000, num_classes=10,
                                   size=(64, 48)))
        kw = dict(workers=0, res=32, shuffle_buffer=args.buffer)
        t0 = time.process_time()
        fresh = D.make_loader(data, "train", args.batch, **kw)
        next(iter(fresh))
        fresh_first = time.process_time() - t0
        n_batches = len(fresh)
        cut = int(n_batches * args.fraction)
        taken = cut * args.batch
        plan = fresh.dataset.plan(0)[0]
        seed = position.stream_seed(fresh.dataset.seed, 0, 0, 0, plan)
        t0 = time.process_time()
        position.consumed_stream(plan, args.samples, args.buffer, seed, taken)
        replay = time.process_time() - t0
        saved = {"epoch": 0, "batches": cut, "workers": [(cut, taken, cut - 1, taken - args.batch, taken)],
                 "fingerprint": [0, 0]}
        t0 = time.process_time()
        resumed = D.make_loader(data, "train", args.batch, **kw)
        resumed.resume(fresh.plan_state(), [saved])
        next(iter(resumed))
        resumed_first = time.process_time() - t0
    out = {"samples": args.samples, "skipped": taken, "shuffle_buffer": args.buffer,
           "replay_us_per_record": round(replay / max(1, taken) * 1e6, 2),
           "fresh_first_batch_s": round(fresh_first, 3), "resumed_first_batch_s": round(resumed_first, 3),
           "resume_extra_us_per_skipped_sample": round((resumed_first - fresh_first) / max(1, taken) * 1e6, 2)}
    print(json.dumps(out))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("agree")
    a.add_argument("--steps", type=int, default=4000)
    a.add_argument("--rounds", type=int, default=5)
    a.add_argument("--size", type=int, default=96, help="the step's matmul size (96: ~20 µs, 384: ~1.5 ms)")
    c = sub.add_parser("checkpoint")
    c.add_argument("--arch", default="resnet50")
    c.add_argument("--ranks", type=int, default=8)
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--dir", default=None)
    s = sub.add_parser("skip")
    s.add_argument("--samples", type=int, default=4000)
    s.add_argument("--buffer", type=int, default=2000)
    s.add_argument("--batch", type=int, default=64)
    s.add_argument("--fraction", type=float, default=0.9)
    args = p.parse_args(argv)
    {"agree": agree, "checkpoint": checkpoint, "skip": skip}[args.what](args)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
