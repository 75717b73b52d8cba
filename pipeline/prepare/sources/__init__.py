"""What is in the sources: every member's key, class and where its bytes are, without extracting anything.

One module per input form, all yielding the same records (``records.SourceIndex`` of ``Member``s
plus the ``Unusable`` inputs with their reasons), so nothing downstream knows which form ran:
- ``archives``: the original ILSVRC2012_img_train.tar (a tar of per-class tars), a folder of
  per-class tars, an ImageFolder tree, a flat val/test tar or folder (headers only; read by offset);
- ``huggingface``: the Hugging Face ILSVRC/imagenet-1k download, .tar.gz or parquet (sequential
  only: spilled per shard before building, see prepare/spill.py);
- ``full_imagenet``: a compressed full release, winter21_whole.tar.gz (a .tar.gz of per-synset tars;
  sequential; the uncompressed fall11_whole.tar is a tar of tars, read by ``archives``);
- ``labels``: val labels for flat val sources (the devkit, or Kaggle's LOC_val_solution.csv).
``index_split`` picks the form from what it is given (the files' content, not their names).
Members come as a ``table.MemberTable`` (columns, not objects: 14 M fit in bounded memory).
"""

from __future__ import annotations

from pathlib import Path

from imagenet_shards.pipeline.prepare.sources import archives, full_imagenet, huggingface
from imagenet_shards.pipeline.prepare.sources.full_imagenet import KIND_RELEASE_GZ
from imagenet_shards.pipeline.prepare.sources.labels import (read_devkit, val_labels_from_devkit,
                                                             val_labels_from_kaggle_csv)
from imagenet_shards.pipeline.format.keys import key_for
from imagenet_shards.pipeline.prepare.sources.records import (NOT_A_TAR, NOT_REGULAR, UNSAFE_KEY, WNID_RE, Member,
                                                              SourceError, SourceIndex, Unusable, unsafe_key)
from imagenet_shards.pipeline.prepare.sources.table import MemberTable

SEQUENTIAL_KINDS = (*huggingface.SEQUENTIAL_KINDS, KIND_RELEASE_GZ)  # cannot be read by offset
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
    if len(paths) == 1 and paths[0].is_file() and huggingface.detect_form(paths[0]) == huggingface.KIND_TARGZ \
            and full_imagenet.is_release(paths[0]):
        if split != "train":
            raise SourceError(f"{SPLIT_FLAGS[split]} {paths[0].name} is a full-ImageNet release (a .tar.gz of per-synset "
                              "tars): give it as --train (carve val with --holdout-per-class K)")
        return full_imagenet.index_release(paths[0], split)
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


def sequential_kind(split: str, sources) -> str | None:
    """The kind of a split's source(s) when they can only be read in order (SEQUENTIAL_KINDS), else None."""
    paths = [Path(s) for s in ([sources] if isinstance(sources, (str, Path)) else sources)]
    if not paths or not all(p.is_file() for p in paths):
        return None
    forms = {huggingface.detect_form(p) for p in paths}
    if forms == {huggingface.KIND_TARGZ} and len(paths) == 1 and full_imagenet.is_release(paths[0]):
        return KIND_RELEASE_GZ if split == "train" else None
    return forms.pop() if len(forms) == 1 and None not in forms else None


def sequential_items(kind: str, sources, split: str, *, read: bool):
    """(row or Unusable, bytes or None) of every member of a sequential source, in file order."""
    paths = [Path(s) for s in ([sources] if isinstance(sources, (str, Path)) else sources)]
    form = {KIND_RELEASE_GZ: full_imagenet.release_items, huggingface.KIND_TARGZ: huggingface.targz_items,
            huggingface.KIND_PARQUET: huggingface.parquet_items}[kind]
    return form(paths, split, read=read)


def iter_member_bytes(kind: str, path: str):
    """(ordinal, bytes) of every member of one sequential source file, in file order (the spill pass)."""
    if kind == KIND_RELEASE_GZ:
        return full_imagenet.iter_member_bytes(path)
    return huggingface.iter_member_bytes(kind, path)


def index_train(src) -> SourceIndex:
    """Index a train source (see ``index_split``)."""
    return index_split("train", src)


def index_val(src, labels: dict[str, str] | None) -> SourceIndex:
    """Index a val source (see ``index_split``)."""
    return index_split("val", src, labels)


__all__ = ["KIND_RELEASE_GZ", "MemberTable", "NOT_A_TAR", "NOT_REGULAR", "SEQUENTIAL_KINDS", "iter_member_bytes", "UNSAFE_KEY", "WNID_RE", "Member", "SourceError", "SourceIndex",
           "Unusable", "index_split", "index_train", "index_val", "key_for", "read_devkit", "unsafe_key",
           "val_labels_from_devkit", "val_labels_from_kaggle_csv"]
