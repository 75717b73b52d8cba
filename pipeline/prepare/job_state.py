"""The job state (OUT/_prepare/state.json): what a run is, written before any shard is built, so that
a rerun with the same sources and config resumes and any other refuses (or, with --overwrite,
replaces) what is there; with parts, the number of parts the first one recorded.

`job_state` is the state as data: the config, each source's fingerprint, the class table, and per
split its shard count and the inputs already rejected or skipped before any image is read.
"""

from __future__ import annotations

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.classes import wnid_names
from imagenet_shards.pipeline.format.label_spaces import LabelSpace
from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.errors import PrepareError
from imagenet_shards.pipeline.prepare.outdir import STATE
from imagenet_shards.pipeline.prepare.parts import PARTS_RECORD, check_part_count, state_differences
from imagenet_shards.pipeline.prepare.plan import SplitPlan
from imagenet_shards.pipeline.prepare.sources import SourceIndex
from imagenet_shards.pipeline.storage.atomic import DiskFull


UNKNOWN_WNID = "unknown_wnid"  # manifest.skipped reason: a full release's image of a WNID outside its space


def _entry(split: str, key: str, source: str, reason: str, detail: str) -> dict:
    return {"split": split, "key": key, "source": source, "reason": reason, "detail": detail}


def split_state(idx: SourceIndex | None, p: SplitPlan, config: Config) -> dict:
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


def class_table(classes: list[str], label_1k: dict[str, int | None] | None = None) -> list[dict]:
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


def open_job(out, state: dict, overwrite: bool) -> None:
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
        raise  # prepare.run.prepare says what to do
    except OSError as e:
        raise PrepareError(f"cannot write to {out.where}: {e.strerror or storage.redact(e)}") from None


def claim_part_count(outdir, part: tuple[int, int]) -> None:
    """Record the job's number of parts (the first part to get here does, even among parts started
    at once), or PrepareError if this part names another."""
    try:
        recorded = outdir.claim_json(PARTS_RECORD, {"count": part[1]})
    except (OSError, ValueError) as e:
        raise PrepareError(f"cannot record the job's parts in {outdir.where}/{PARTS_RECORD}: "
                           f"{storage.redact(e)}") from None
    why = check_part_count(recorded, part)
    if why:
        raise PrepareError(why)


def fresh_job(outdir, overwrite: bool) -> bool:
    """Whether OUT holds no job state yet (or --overwrite replaces it): a run that builds every shard."""
    try:
        outdir.read_json(STATE)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return overwrite


def job_state(config: Config, indexes: dict[str, SourceIndex], classes: list[str], label_1k: dict | None,
              plans: dict[str, SplitPlan], recorded: dict) -> dict:
    """The job state of a run: its config, each source (fingerprint, and what `recorded` adds per split),
    the class table and each split's state (split_state)."""
    state = {
        "config": config.as_dict(),
        "sources": [{"split": idx.split, "kind": idx.kind, "name": idx.name, "bytes": idx.bytes,
                     "fingerprint": idx.fingerprint(), "members": len(idx.members), **recorded.get(idx.split, {})}
                    for idx in indexes.values()],
        "classes": class_table(classes, label_1k),
        "splits": {s: split_state(indexes.get(s), p, config) for s, p in plans.items()},
    }
    if config.pixels is not None:  # the stored form, as a derived set records it (without derived_from)
        state["form"], state["max_side"] = config.pixels, config.max_side
    if isinstance(config.label_space, LabelSpace):  # only then: an ILSVRC run's manifest stays as it was
        state["label_space"] = config.label_space.record()
        state["dataset"] = config.label_space.dataset
    return state
