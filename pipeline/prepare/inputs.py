"""The job's inputs: the sources of each requested split, indexed, and the class list they agree on.

`index_sources` checks what only the sources together can show (a devkit that belongs to the train
archive, val labels of known classes, a val source that holds what the ground truth lists), so that a
mismatch stops the job before any image is read; `local_sources` refuses a source that is a URL.
"""

from __future__ import annotations

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.label_spaces import label_space
from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.errors import PrepareError
from imagenet_shards.pipeline.prepare.sources import val_labels_from_devkit, val_labels_from_kaggle_csv
from imagenet_shards.pipeline.prepare.sources import index_split as _index_split
from imagenet_shards.pipeline.prepare.split_checks import check_val_source


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
