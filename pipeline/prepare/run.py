"""prepare-shards as a library function: index sources, plan, build shards in parallel, record, finalize.

Restartable by construction: a shard exists under its final name only when complete, and its record
(``OUT/_prepare/records/``) is written after it. A rerun verifies what is there (record + size +
sha256, or for a remote OUT record + size + ETag) and builds only the rest; shards are
byte-reproducible, so the result equals a clean run. OUT is a local folder or any fsspec URL
(s3://...): `outdir` hides the difference. A subset (`Config.subset`) is resolved once the sources'
classes are known (`plan.plan_splits`): the kept classes, their labels and 1k indexes, each split's selection.

This module runs one part from its sources to its shards and, once every part is done, finalizes;
the steps live beside it: `inputs` (index the sources), `job_state` (what OUT records about the job),
`build` (the pending shards in worker processes), `finalize` (the manifest).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from functools import partial

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.prepare.build import build_pending
from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.errors import PrepareError, skip_with_space_error
from imagenet_shards.pipeline.prepare.finalize import finalize, summarize
from imagenet_shards.pipeline.prepare.holdout import holdout_rows
from imagenet_shards.pipeline.prepare.inputs import index_sources, local_sources
from imagenet_shards.pipeline.prepare.job_state import claim_part_count, fresh_job, job_state, open_job
from imagenet_shards.pipeline.prepare.label_space import resolve_label_space
from imagenet_shards.pipeline.prepare.onepass import one_pass_reader
from imagenet_shards.pipeline.prepare.outdir import open_outdir, record_name
from imagenet_shards.pipeline.prepare.parts import job_id, parse_part, part_state_rel, state_differences
from imagenet_shards.pipeline.prepare.plan import ShardSpec, part_of, plan_splits
from imagenet_shards.pipeline.prepare.sources import SEQUENTIAL_KINDS, SourceError
from imagenet_shards.pipeline.prepare.split_checks import empty_split_error
from imagenet_shards.pipeline.prepare.subset import SubsetError
from imagenet_shards.pipeline.storage.atomic import DiskFull


def prepare(*, out: str, train=None, val=None, devkit=None, val_labels=None, test=None, config: Config = Config(),
            workers: int | None = None, part: tuple[int, int] = (0, 1), overwrite: bool = False,
            verify_existing: bool = True, progress: bool = True, staging: str | None = None) -> dict:
    """Run (or resume) the offline job; returns the summary dict. Raises PrepareError on bad input
    (one line), before any work where it can: an OUT that cannot be written, a staging URL.

    `train`/`val`/`test`: a path, or a list of files (the Hugging Face .tar.gz or parquet forms).
    `out`: a local folder or an fsspec URL; for a URL, shards are built in `staging` (a local
    folder; default a temp folder, removed at the end) and uploaded from there. If the job fails
    before any shard is recorded, an OUT it created is removed again."""
    t0 = time.monotonic()
    if config.skip_unknown_wnids and config.label_space is not None:  # before OUT is made or a source read
        raise skip_with_space_error()
    try:
        outdir = open_outdir(out, staging=staging, verify=verify_existing)
    except ValueError as e:
        raise PrepareError(str(e)) from None
    try:
        return _run(outdir, t0, out=out, train=train, val=val, devkit=devkit, val_labels=val_labels, test=test,
                    config=config, workers=workers, part=part, overwrite=overwrite,
                    verify_existing=verify_existing, progress=progress)
    except DiskFull as e:
        outdir.discard_if_unused()
        raise PrepareError(f"{e}: {outdir.room_advice}") from None
    except (PrepareError, OSError):
        outdir.discard_if_unused()
        raise
    finally:
        outdir.close()


def _run(outdir, t0: float, *, out, part, **job) -> dict:
    summary, missing = _build_part(outdir, t0, out=out, part=part, **job)
    if not missing:  # the plan is gone by now: the manifest is assembled from the records alone
        manifest = finalize(out)
        summary.update(summarize(manifest))
    else:
        summary.update({"complete": False, "shards_missing": len(missing),
                        "parts_missing": sorted({n % part[1] for n in missing})})
    return summary


def _build_part(outdir, t0: float, *, out, train, val, devkit, val_labels, test, config: Config, workers, part,
                overwrite, verify_existing, progress) -> tuple[dict, list[int]]:
    """Index, plan and build this part's shards; (summary, global numbers of the shards not done yet)."""
    onepass = one_pass_reader(config, part, {"train": train, "val": val, "test": test},
                              fresh=lambda: fresh_job(outdir, overwrite), folder=lambda: outdir.make_scratch("spill"),
                              workers=workers, progress=progress)
    recorded: dict = {}
    try:
        indexes, classes = index_sources(config, train=train, val=val, devkit=devkit, val_labels=val_labels,
                                         test=test, read_sequential=onepass and onepass.read, recorded=recorded)
    except SourceError as e:
        raise PrepareError(str(e)) from None
    t_index = time.monotonic()
    config, classes, label_1k, plans = _plan(config, indexes, classes)
    state = job_state(config, indexes, classes, label_1k, plans, recorded)
    open_job(outdir, state, overwrite)
    job = job_id(state)
    if part[1] > 1:  # what this part ran with, for finalize to name what differs if a sibling ran otherwise
        claim_part_count(outdir, part)
        outdir.write_json(part_state_rel(part), state)
    sequential = {path: idx.kind for s, idx in indexes.items() if idx.kind in SEQUENTIAL_KINDS
                  and not (onepass and s in onepass.stored) for path in idx.members.files()}
    if onepass:  # from here on, the members' bytes are their results in the one-pass spill
        for s, stored in onepass.stored.items():
            stored.relocate(indexes[s].members)
    del indexes, state  # the members live on in the plan's tables only: less for the workers to inherit
    all_specs = [spec for s in config.splits for spec in plans[s].shards]
    del plans
    if onepass:
        relocated = {id(t) for t in onepass.tables}
        for spec in all_specs:
            spec.preprocessed = id(spec.table) in relocated
    pending, reused = _pending(outdir, [spec for n, spec in enumerate(all_specs) if part_of(n, *part)], verify_existing)
    t_plan = time.monotonic()
    try:
        done_images = build_pending(outdir, pending, config, workers, progress, sequential, job, f"{part[0]}/{part[1]}")
    except BaseException:  # an error or Interrupted: the workers are stopped; what they left goes too
        with contextlib.suppress(OSError):
            outdir.clean_stale(pending)
        raise
    finally:
        if onepass:  # its spill is a copy, gone once the shards are built (or the run ends)
            shutil.rmtree(onepass.folder, ignore_errors=True)
    done = outdir.record_names()

    missing = [n for n, sp in enumerate(all_specs) if record_name(sp) not in done]
    summary = {"out": storage.redact(out), "part": f"{part[0]}/{part[1]}", "shards_built": len(pending),
               "shards_reused": reused, "images_processed": done_images,
               "wall_s": round(time.monotonic() - t0, 3),
               # index (with a one-pass read: and processing), plan + job state, build (+ spill)
               "stages_s": {"index": round(t_index - t0, 3), "plan": round(t_plan - t_index, 3),
                            "build": round(time.monotonic() - t_plan, 3)}}
    summary["images_per_s"] = round(done_images / summary["wall_s"], 1) if summary["wall_s"] else 0.0
    return summary, missing


def _plan(config: Config, indexes: dict, classes: list[str]):
    """The label space resolved and each split planned: (config, classes, label_1k, plans); PrepareError
    for a subset that cannot be made or a requested split that would end with 0 samples (before any work)."""
    config, classes = resolve_label_space(config, classes)
    holdout = None if config.holdout_per_class is None else \
        partial(holdout_rows, per_class=config.holdout_per_class, seed=config.seed)
    try:
        classes, label_1k, plans = plan_splits(config, {s: idx.members for s, idx in indexes.items()}, classes,
                                               holdout=holdout)
    except SubsetError as e:
        raise PrepareError(str(e)) from None
    for split, plan in plans.items():
        error = empty_split_error(split, indexes[split], plan) if split in indexes else None if len(plan.shards) else (
            f"--holdout-per-class {config.holdout_per_class}: no class has more than {config.holdout_per_class} "
            "train images, so the val split would have 0 samples; give a smaller K")
        if error:
            raise PrepareError(error)
    return config, classes, label_1k, plans


def _pending(outdir, mine: list[ShardSpec], verify_existing: bool) -> tuple[list[ShardSpec], int]:
    """This part's shards still to build (those without an intact record), and how many are reused; the
    temp files a killed run left for them are removed."""
    try:
        records = outdir.load_records(mine, verify_existing)
    except OSError as e:
        raise PrepareError(f"cannot check what {outdir.where} already holds: {storage.redact(e)}") from None
    pending = [spec for spec in mine if (spec.split, spec.index) not in records]
    outdir.clean_stale(pending)  # temp files left by a killed run
    return pending, len(mine) - len(pending)


__all__ = ["Config", "PrepareError", "finalize", "index_sources", "local_sources", "parse_part", "prepare",
           "state_differences", "summarize"]
