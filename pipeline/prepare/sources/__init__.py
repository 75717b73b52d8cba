"""What is in the sources: every member's key, class and where its bytes are, without extracting anything.

One module per input form, all yielding the same records (``records.SourceIndex`` of ``Member``s
plus the ``Unusable`` inputs with their reasons), so nothing downstream knows which form ran:
- ``archives``: the original ILSVRC2012_img_train.tar (a tar of per-class tars), a folder of
  per-class tars, an ImageFolder tree, a flat val/test tar or folder (headers only; read by offset);
- ``huggingface``: the Hugging Face ILSVRC/imagenet-1k download, .tar.gz or parquet (sequential
  only: spilled per shard before building, see prepare/spill.py);
- ``labels``: val labels for flat val sources (the devkit, or Kaggle's LOC_val_solution.csv).
``index_split`` picks the form from what it is given (the files' content, not their names).
"""

from __future__ import annotations

from pathlib import Path

from imagenet_shards.pipeline.prepare.sources import archives, huggingface
from imagenet_shards.pipeline.prepare.sources.huggingface import SEQUENTIAL_KINDS
from imagenet_shards.pipeline.prepare.sources.labels import (read_devkit, val_labels_from_devkit,
                                                             val_labels_from_kaggle_csv)
from imagenet_shards.pipeline.format.keys import key_for
from imagenet_shards.pipeline.prepare.sources.records import (NOT_REGULAR, UNSAFE_KEY, WNID_RE, Member, SourceError,
                                                              SourceIndex, Unusable, unsafe_key)

SPLIT_FLAGS = {"train": "--train", "val": "--val", "test": "--test"}


def index_split(split: str, sources, labels: dict[str, str] | None = None) -> SourceIndex:
    """Index the source(s) of one split.

    ``sources``: one path, or several files (the Hugging Face forms come as several .tar.gz or
    parquet files). ``labels`` (key -> WNID) labels a flat val source; train labels come from the
    layout, Hugging Face labels travel with the images, and the test split is unlabeled."""
    paths = [Path(s) for s in ([sources] if isinstance(sources, (str, Path)) else sources)]
    if not paths:
        raise SourceError(f"{SPLIT_FLAGS[split]} names no files")
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise SourceError(f"{split} source {missing[0]} does not exist")
    if all(p.is_file() for p in paths):
        found = huggingface.index_files(paths, split)
        if found is not None:
            return found
    if len(paths) > 1:
        raise SourceError(f"{split}: {len(paths)} sources given, but several files are only taken in the Hugging "
                          f"Face forms (.tar.gz or parquet); give one archive or folder")
    if split == "train":
        return archives.index_train(paths[0])
    return archives.index_val(paths[0], labels, split)


def index_train(src) -> SourceIndex:
    """Index a train source (see ``index_split``)."""
    return index_split("train", src)


def index_val(src, labels: dict[str, str] | None) -> SourceIndex:
    """Index a val source (see ``index_split``)."""
    return index_split("val", src, labels)


__all__ = ["NOT_REGULAR", "SEQUENTIAL_KINDS", "UNSAFE_KEY", "WNID_RE", "Member", "SourceError", "SourceIndex",
           "Unusable", "index_split", "index_train", "index_val", "key_for", "read_devkit", "unsafe_key",
           "val_labels_from_devkit", "val_labels_from_kaggle_csv"]
