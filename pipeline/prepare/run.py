"""prepare-shards as a library function: index sources, plan, build shards in parallel, record, finalize.

Restartable by construction: a shard exists under its final name only when complete, and its record
(``OUT/_prepare/records/``) is written after it. A rerun verifies what is there (record + size +
sha256, or for a remote OUT record + size + ETag) and builds only the rest; shards are
byte-reproducible, so the result equals a clean run. OUT is a local folder or any fsspec URL
(s3://...): `outdir` hides the difference. A subset (`Config.subset`) is resolved once the sources'
classes are known (`plan.plan_splits`): the kept classes, their labels and 1k indexes, each split's selection.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections import Counter
from functools import partial

from tqdm import tqdm

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.classes import wnid_names
from imagenet_shards.pipeline.format.label_spaces import LabelSpace, label_space
from imagenet_shards.pipeline.parallel import run_jobs
from imagenet_shards.pipeline.prepare.config import SPLITS, Config
from imagenet_shards.pipeline.prepare.errors import PrepareError, skip_with_space_error
from imagenet_shards.pipeline.prepare.label_space import resolve_label_space
from imagenet_shards.pipeline.prepare.finalize import finalize, summarize
from imagenet_shards.pipeline.prepare.holdout import holdout_rows
from imagenet_shards.pipeline.prepare.outdir import STATE, open_outdir, record_name, record_rel
from imagenet_shards.pipeline.prepare.parts import join_parts, job_id, parse_part, state_differences
from imagenet_shards.pipeline.prepare.plan import ShardSpec, SplitPlan, part_of, plan_splits
from imagenet_shards.pipeline.prepare.onepass import one_pass_reader
from imagenet_shards.pipeline.prepare.sources import (SEQUENTIAL_KINDS, SourceError, SourceIndex,
                                                      val_labels_from_devkit, val_labels_from_kaggle_csv)
from imagenet_shards.pipeline.prepare.sources import index_split as _index_split
from imagenet_shards.pipeline.prepare.spill import spill
from imagenet_shards.pipeline.storage.atomic import DiskFull, disk_full_error, is_disk_full
from imagenet_shards.pipeline.prepare.split_checks import check_val_source, empty_split_error
from imagenet_shards.pipeline.prepare.subset import SubsetError


def local_sources(**sources) -> dict:
    """The source arguments as local paths (file:// URLs resolved; a list stays a list); PrepareError
    for any other URL: sources are read by offset or streamed from a local (or mounted) disk."""
    def local(name, value):
        path = storage.local_path(value)
        if path is None:
            flag = "--" + name.replace("_", "-")
            raise PrepareError(f"{flag} takes a local path, got {storage.redact(value)}: copy the archives to a "
                               "local or mounted disk first (only --out may be a URL)")
        return path

    return {name: None if value is None else
            [local(name, v) for v in value] if isinstance(value, (list, tuple)) else local(name, value)
            for name, value in sources.items()}


def index_sources(cfg: Config, *, train=None, val=None, devkit=None, val_labels=None, test=None,
                  read_sequential=None, recorded: dict | None = None):
    """Index the sources of the requested splits; returns (indexes, class WNIDs sorted).

    ``train``/``val``/``test``: a path, or a list of files (the Hugging Face forms).
    ``read_sequential(split, src)``: the index of a source that can only be read in order, made by a
    one-pass reader (prepare/onepass.py), or None to index it here. ``recorded`` (when given)
    receives, per split, what its sources entry records beyond the index: for a val source taken
    with ``allow_partial_val``, the ground truth's count (``split_checks``)."""
    train, val, devkit, val_labels, test = local_sources(train=train, val=val, devkit=devkit,
                                                         val_labels=val_labels, test=test).values()
    indexes = {}

    def index_split(split, src, labels=None):
        return (read_sequential and read_sequential(split, src)) or _index_split(split, src, labels)

    devkit_leaves = None
    if "train" in cfg.splits:
        if not train:
            raise PrepareError("--train is required when the train split is requested (or use --splits val)")
        indexes["train"] = index_split("train", train)
    if "val" in cfg.splits and cfg.holdout_per_class is not None:
        if val:
            raise PrepareError("--holdout-per-class carves val out of the train images: give it or --val, not both")
    elif "val" in cfg.splits:
        if not val:
            raise PrepareError("--val is required when the val split is requested (or use --splits train, or "
                               "--holdout-per-class K to carve it out of train)")
        labels = None
        if devkit and val_labels:
            raise PrepareError("give --devkit or --val-labels, not both")
        if devkit:
            labels, devkit_leaves = val_labels_from_devkit(devkit)
        elif val_labels:
            labels, _ = val_labels_from_kaggle_csv(val_labels)
        indexes["val"] = index_split("val", val, labels)
    if "test" in cfg.splits:
        if not test:
            raise PrepareError("--test is required when the test split is requested")
        indexes["test"] = index_split("test", test)
    if "train" in indexes:
        classes = _present(indexes["train"].members)
    elif devkit_leaves is not None:
        classes = devkit_leaves
    elif "val" in indexes:
        classes = _present(indexes["val"].members)
    else:  # test only: the labels are unknown, the class table is ImageNet-1k's
        classes = list(label_space("imagenet-1k").wnids)
    if not classes:
        raise PrepareError("the sources hold no classes (is the train archive empty?)")
    if devkit_leaves is not None and devkit_leaves != classes:
        missing = sorted(set(devkit_leaves) - set(classes))
        extra = sorted(set(classes) - set(devkit_leaves))
        raise PrepareError(
            f"devkit lists {len(devkit_leaves)} classes but the train archive has {len(classes)}"
            + (f" (missing from train: {', '.join(missing[:5])}{'…' if len(missing) > 5 else ''})" if missing else "")
            + (f" (not in devkit: {', '.join(extra[:5])}{'…' if len(extra) > 5 else ''})" if extra else "")
            + "; use the devkit that belongs to these archives")
    if "val" in indexes and devkit:  # the ground truth lists every val image: the source must hold those
        partial = check_val_source(indexes["val"], labels, allow_partial=cfg.allow_partial_val)
        if partial is not None and recorded is not None:
            recorded["val"] = partial
    if "val" in indexes:
        unknown = sorted(set(_present(indexes["val"].members)) - set(classes))
        if unknown:
            raise PrepareError(f"val labels name {len(unknown)} classes not in train (e.g. {unknown[0]}); "
                               "the labels file does not belong to these archives")
    return indexes, classes


def _present(members) -> list[str]:
    """The labelled members' WNIDs, sorted (a MemberTable's, or a list of Members')."""
    if hasattr(members, "present_wnids"):
        return members.present_wnids()
    return sorted({m.wnid for m in members if m.wnid})


def _class_table(classes: list[str], label_1k: dict[str, int | None] | None = None) -> list[dict]:
    """The manifest's class table; a class subset's entries also carry `imagenet_1k_index`."""
    names = wnid_names()
    table = [{"index": i, "wnid": w, "name": names.get(w, w)} for i, w in enumerate(classes)]
    if label_1k is not None:
        for c in table:
            c["imagenet_1k_index"] = label_1k[c["wnid"]]
    return table


def _read_job_file(out, rel: str) -> dict | None:
    """The JSON at OUT/rel (the job state, the parts record), None if it is not there yet."""
    try:
        return out.read_json(rel)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as e:
        raise PrepareError(f"cannot read {out.where}/{rel}: {storage.redact(e)}") from None


def _open_out(out, state: dict, overwrite: bool) -> None:
    """Create OUT (or check it belongs to this exact job), refusing a different config unless overwrite."""
    old = _read_job_file(out, STATE)
    try:
        if old is not None and old != state:
            if not overwrite:
                raise PrepareError(f"{out.where} holds shards from a different run "
                                   f"({'; '.join(state_differences(old, state))}); "
                                   "use a new --out, or --overwrite to replace them")
            out.remove_ours()
        elif old is None and out.has_foreign_splits() and not overwrite:
            raise PrepareError(f"{out.where} already has train/ or val/ folders that this tool did not write; "
                               "use an empty --out or --overwrite")
        out.create()
        if old != state:
            out.write_json(STATE, state)
    except DiskFull:
        raise  # prepare() says what to do
    except OSError as e:
        raise PrepareError(f"cannot write to {out.where}: {e.strerror or storage.redact(e)}") from None


UNKNOWN_WNID = "unknown_wnid"  # manifest.skipped reason: a full release's image of a WNID outside its space


def _entry(split: str, key: str, source: str, reason: str, detail: str) -> dict:
    return {"split": split, "key": key, "source": source, "reason": reason, "detail": detail}


def _split_state(idx: SourceIndex | None, p: SplitPlan, config: Config) -> dict:
    """The part of the job state that describes one split before any image is read: its number of
    shards, every input (members, and what indexing set aside) and the inputs already rejected or
    skipped: duplicate keys, unlabeled val images, unsafe keys, non-regular archive members; in a
    subset run, also the number of inputs the subset left out (`excluded_by_subset`); with a label
    space, the inputs of other classes (`excluded_by_label_space`); with a held-out split, how many
    train images went to val (`held_out`), and for val that it came from train (`idx` is None)."""
    why = {"duplicate_key": "another member has the same key; the first in key/source order was kept",
           "no_label": "the val labels file has no entry for this image"}
    rows = [(m, "duplicate_key") for m in p.duplicates] + [(m, "no_label") for m in p.unlabeled]
    rejected = [_entry(p.split, m.key, m.source, r, why[r]) for m, r in rows]
    skipped = []
    unusable = idx.unusable if idx is not None else []
    for u in unusable:
        (skipped if u.status == "skipped" else rejected).append(_entry(p.split, u.key, u.source, u.reason, u.detail))
    for m in p.unknown:  # --skip-unknown-wnids: the images of WNIDs outside the release's space
        skipped.append(_entry(p.split, m.key, m.source, UNKNOWN_WNID,
                              f"WNID {m.wnid} is not in {config.label_space.name}, the label space; left out "
                              "(--skip-unknown-wnids)"))
    order = lambda x: (x["key"], x["source"])  # noqa: E731
    state = {"num_shards": len(p.shards), "images_in": p.images_in + len(unusable),
             "plan_rejected": sorted(rejected, key=order)}
    if skipped:  # only when there are some: job states of earlier runs (which had none) stay equal
        state["plan_skipped"] = sorted(skipped, key=order)
    if config.subset:  # only in a subset run: a full run's state (and manifest) stays as it was
        state["excluded_by_subset"] = p.excluded
    if isinstance(config.label_space, LabelSpace) and idx is not None:
        state["excluded_by_label_space"] = p.excluded_by_label_space
    if config.holdout_per_class is not None:
        if idx is None:
            state["held_out_from"] = "train"
        elif p.split == "train":
            state["held_out"] = len(p.held_out)
    return state


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
                              fresh=lambda: _fresh(outdir, overwrite), folder=lambda: outdir.make_scratch("spill"),
                              workers=workers, progress=progress)
    recorded: dict = {}
    try:
        indexes, classes = index_sources(config, train=train, val=val, devkit=devkit, val_labels=val_labels,
                                         test=test, read_sequential=onepass and onepass.read, recorded=recorded)
    except SourceError as e:
        raise PrepareError(str(e)) from None
    t_index = time.monotonic()
    config, classes = resolve_label_space(config, classes)
    holdout = None if config.holdout_per_class is None else \
        partial(holdout_rows, per_class=config.holdout_per_class, seed=config.seed)
    try:
        classes, label_1k, plans = plan_splits(config, {s: idx.members for s, idx in indexes.items()}, classes,
                                               holdout=holdout)
    except SubsetError as e:
        raise PrepareError(str(e)) from None
    for split, plan in plans.items():  # a split asked for that would end with 0 samples: before any work
        error = empty_split_error(split, indexes[split], plan) if split in indexes else None if len(plan.shards) else (
            f"--holdout-per-class {config.holdout_per_class}: no class has more than {config.holdout_per_class} "
            "train images, so the val split would have 0 samples; give a smaller K")
        if error:
            raise PrepareError(error)
    state = {
        "config": config.as_dict(),
        "sources": [{"split": idx.split, "kind": idx.kind, "name": idx.name, "bytes": idx.bytes,
                     "fingerprint": idx.fingerprint(), "members": len(idx.members), **recorded.get(idx.split, {})}
                    for idx in indexes.values()],
        "classes": _class_table(classes, label_1k),
        "splits": {s: _split_state(indexes.get(s), p, config) for s, p in plans.items()},
    }
    if isinstance(config.label_space, LabelSpace):  # only then: an ILSVRC run's manifest stays as it was
        state["label_space"] = config.label_space.record()
        state["dataset"] = config.label_space.dataset
    _open_out(outdir, state, overwrite)
    job = job_id(state)
    join_parts(outdir, part, state)
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
    mine = [spec for n, spec in enumerate(all_specs) if part_of(n, *part)]
    try:
        records = outdir.load_records(mine, verify_existing)
    except OSError as e:
        raise PrepareError(f"cannot check what {outdir.where} already holds: {storage.redact(e)}") from None
    pending = [spec for spec in mine if (spec.split, spec.index) not in records]
    reused = len(mine) - len(pending)
    del records, mine
    outdir.clean_stale(pending)  # temp files left by a killed run
    t_plan = time.monotonic()
    try:
        done_images = _build(outdir, pending, config, workers, progress, sequential, job, f"{part[0]}/{part[1]}")
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


def _fresh(outdir, overwrite: bool) -> bool:
    """Whether OUT holds no job state yet (or --overwrite replaces it): a run that builds every shard."""
    try:
        outdir.read_json(STATE)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return overwrite


def _build(out, pending: list[ShardSpec], config: Config, workers: int | None, progress: bool,
           sequential: dict[str, str], job: str, part: str) -> int:
    """Build the pending shards in worker processes (each builds, and for a remote OUT uploads and
    checks, whole shards); the main process writes each record as its shard is done (and keeps none).

    ``sequential``: files that cannot be read by offset (path -> kind); their planned members are
    first copied into per-shard buckets (``spill``), removed again when the shards are built.
    ``job``: the job state's hash, stamped on each record (`parts`: finalize checks it)."""
    if not pending:
        return 0
    out.start_staging()
    # one folder per part: parts that share OUT must not remove each other's buckets
    spill_dir = out.scratch("spill" if part == "0/1" else f"spill-{part.replace('/', '-of-')}")
    try:
        return _build_shards(out, pending, config, workers, progress, sequential, spill_dir, job, part)
    finally:  # the buckets (and a one-pass spill) are a copy: a rerun spills again
        shutil.rmtree(spill_dir, ignore_errors=True)


def _build_shards(out, pending: list[ShardSpec], config: Config, workers: int | None, progress: bool,
                  sequential: dict[str, str], spill_dir: str, job: str, part: str) -> int:
    if sequential:
        files = {path for sp in pending for path in sp.paths() if path in sequential}
        with tqdm(total=len(files), desc="read sequential sources", unit="file", disable=not progress,
                  dynamic_ncols=True) as bar:
            try:
                pending = spill(pending, sequential, spill_dir, workers=workers, progress=bar)
            except SourceError as e:
                raise PrepareError(str(e)) from None
            except OSError as e:
                if is_disk_full(e) and not isinstance(e, DiskFull):
                    raise disk_full_error(spill_dir) from e  # the buckets are plain appends
                raise
    totals = Counter()
    for sp in pending:
        totals[sp.split] += len(sp)
    bars = {s: tqdm(total=totals[s], desc=f"prepare {s}", unit="img", disable=not progress, position=i,
                    dynamic_ncols=True, smoothing=0.05)
            for i, s in enumerate(sorted(totals, key=SPLITS.index))}
    rejected, skipped = Counter(), Counter()  # the summary's two words: rejected (bad images), skipped (non-images)
    policy = config.policy()
    try:
        for _, rec in run_jobs(out.build, [(sp, policy) for sp in pending], workers=workers):
            rec["job"], rec["part"] = job, part
            out.write_json(record_rel(rec["split"], rec["index"]), rec)
            rejected[rec["split"]] += len(rec["rejected"])
            skipped[rec["split"]] += len(rec["skipped"])
            bar = bars[rec["split"]]
            bar.set_postfix(rejected=rejected[rec["split"]], skipped=skipped[rec["split"]], refresh=False)
            bar.update(rec["planned"])
    finally:
        for b in bars.values():
            b.close()
    return sum(totals.values())


__all__ = ["Config", "PrepareError", "finalize", "parse_part", "prepare", "state_differences", "summarize"]
