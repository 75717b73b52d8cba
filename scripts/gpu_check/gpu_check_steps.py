"""The GPU check's steps that are more than one run (scripts/gpu_check/gpu_check.py runs them in order): the
two-rank DDP step and its SyncBatchNorm verdict, the recipe runs, bench-loader, and the figures
derived from two runs (drift, the compile speedup)."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

from gpu_check_child import kill_group
from gpu_check_measure import ProcSampler

REPO = Path(__file__).resolve().parents[2]
RECIPES = {"recipe_rn50": "ffcv-rn50-16", "recipe_rn18": "ffcv-rn18-16"}


def recipe_available() -> bool:
    """Whether this tree's train-imagenet has --recipe (issue 19), read from its sources (no import;
    anywhere under train/trainer/, whose modules may sit in subfolders)."""
    return any('"--recipe"' in p.read_text() for p in (REPO / "train" / "trainer").rglob("*.py"))


def drift(run: dict, top: float | None) -> dict:
    img = run["window"]["img_per_s"]
    run["derived"]["drift"] = img / top - 1 if img and top else None
    return run


def compiled(run: dict, top: float | None) -> dict:
    """The compile row: its window against its own (compiled) ceiling, and that ceiling against the eager one."""
    own = run["derived"].get("own_ceiling_img_per_s")
    img = run["window"]["img_per_s"]
    run["derived"].update(ceiling_img_per_s=own, compile_speedup=own / top if own and top else None,
                          efficiency=img / own if img and own else None)
    return run


def bench_step(c, w: Path, top: float | None, timeout: float) -> dict:
    out = c.child_json("bench-loader", "imagenet_shards.train.bench.run:main", [
        str(w / "shards"), "--workers", "1" if c.smoke else "4", "--batches", str(c.sz.bench_batches), "--batch-size",
        "64", "--res", str(c.sz.res), "--json"], timeout)
    per = out.get("images_per_s_per_worker")
    return {**out, "derived": {"workers_for_ceiling": top / per if top and per else None}}


def ddp_step(c, data: list, timeout: float) -> dict:
    """Two ranks on one device with gloo (NCCL refuses two ranks on one GPU): the reducer, BN-buffer
    averaging, barriers, and on CUDA --gpu-decode's equal batches per rank; and SyncBatchNorm under
    torch._dynamo.explain in the same process group. The ranks get torchrun's environment."""
    arch, batch, res, steps = c.sz.ddp
    out = c.w / "runs" / "ddp"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    argv = ["rank", out, "--explain-arch", c.sz.explain_arch, "--explain-res", min(64, res), "--", *data, "--out", out,
            "--device", c.sz.device, "--dist-backend", "gloo", "--arch", arch, "--batch-size", batch, "--res", res,
            "--val-res", c.sz.val_res, "--val-crop", c.sz.val_crop, "--workers", 1 if c.smoke else 4, "--epochs", 1,
            "--limit-batches", steps, "--log-interval", c.sz.log_interval,
            *(["--gpu-decode"] if c.sz.device == "cuda" else [])]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    procs = [c.runner.start("gpu_check_probe:main", argv, out / f"log-rank{r}.txt",
                            {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in (0, 1)]
    sampler = ProcSampler(procs[0].pid)
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    left = [pid for p in procs for pid in kill_group(p.pid)]  # each rank and its workers, ended or not
    for p in procs:
        p.join()
    proc = sampler.stop()
    proc.pop("series")
    results = [out / f"result-rank{r}.json" for r in (0, 1)]
    if not all(path.exists() for path in results):  # the DDP answers are written before the grouped explain
        if alive:
            raise RuntimeError(f"ddp: still running after {timeout:.0f} s")
        bad = next(r for r, p in enumerate(procs) if p.exitcode != 0)
        text = (out / f"log-rank{bad}.txt").read_text(errors="replace").strip().splitlines()
        raise RuntimeError(f"rank {bad} exit {procs[bad].exitcode}: {([x for x in text if 'rror' in x] or text)[-1:]}")
    ranks = [json.loads(path.read_text()) for path in results]
    for rank in ranks:
        rank.setdefault("syncbn_grouped", {"error": "the explain in the process group did not finish "
                                                    f"(killed at the step's {timeout:.0f} s)"})
    res0, res1 = ranks[0]["result"], ranks[1]["result"]
    checks = {"same_weights": res0["weights_sha256"] == res1["weights_sha256"],
              "same_steps": res0["step"] == res1["step"] == steps,
              "every_val_sample_once": res0["val_samples"] == res1["val_samples"] == c.sz.classes * c.sz.val_per_class}
    loader = "--gpu-decode" if c.sz.device == "cuda" else "CPU loader"
    detail = (f"{loader}: weights {'identical' if checks['same_weights'] else 'DIFFER'} on both ranks, "
              f"{res0['step']}/{res1['step']} steps, val {res0['val_samples']}/{res1['val_samples']} images")
    return {"proc": proc, "checks": checks, "verdict": "ok" if all(checks.values()) else "FAILED", "detail": detail,
            "left_behind": left,
            "ranks": ranks, "syncbn_compile": syncbn_verdict(ranks[0])}


def syncbn_verdict(rank: dict) -> dict:
    alone, grouped = rank.get("syncbn_alone", {}), rank.get("syncbn_grouped", {})

    def text(e):
        if "error" in e:
            return f"not traceable: {e['error']}"
        return f"{e['graph_breaks']} graph breaks, {e['graphs']} graphs for {e['syncbn_layers']} SyncBatchNorm layers" \
               + (f" ({'; '.join(e['reasons'][:2])})" if e.get("reasons") else "")

    breaks = grouped.get("graph_breaks")
    verdict = "not settled here" if breaks is None else "breaks the graph" if breaks else "no graph break"
    return {"verdict": verdict, "alone": alone, "grouped": grouped,
            "detail": f"in a 2-rank process group: {text(grouped)}; without one: {text(alone)}"}


def recipe_step(c, key: str, name: str, data: list, workers: int, timeout: float) -> dict:
    if not recipe_available():
        return {"status": "not run: --recipe not available in this tree"}
    epochs = 3 if key == "recipe_rn18" and not c.smoke else 2  # rn18's batch of 1024: few steps per epoch
    run = c.trainer(key.replace("_", "-"), ["--recipe", name, *data, "--workers", workers, "--stop-after-epochs", epochs,
                                            "--measure-ceiling", 3 if c.smoke else c.sz.ceiling_batches, *c.sz.toy],
                    timeout, sized=False,
                    workers=workers, epochs=tuple(range(1, epochs)))
    return c.efficiency(run, None)
