"""The original forms: ILSVRC2012_img_train.tar (a tar of per-class tars), a folder of per-class
tars, an ImageFolder tree, and a flat val tar or folder (labels from the devkit or Kaggle's CSV).

Tars are indexed by reading headers only: outer and inner tars are uncompressed, so every member has
a byte offset and size inside the original file and is later read with one seek + read.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from imagenet_shards.pipeline.prepare.sources.records import NOT_A_TAR, WNID_RE, SourceError, SourceIndex, Unusable
from imagenet_shards.pipeline.prepare.sources.table import MemberTable
from imagenet_shards.pipeline.prepare.sources.tars import (TarWindow, open_source, open_tar, usable_files,
                                                           usable_tar_members)


def _index_inner_tar(f, path: str, start: int, size: int, wnid: str, inner_name: str,
                     unusable: list[Unusable], table: MemberTable) -> None:
    """Add the images of one per-class tar; one that is not a tar at all is skipped, with its reason
    (a damaged one still stops the run: tars.tar_members)."""
    try:
        inner = tarfile.open(fileobj=TarWindow(f, start, size), mode="r:")
    except tarfile.TarError as e:
        unusable.append(Unusable(wnid, inner_name, NOT_A_TAR, f"{size} bytes that do not open as a tar ({e})"))
        return
    for ti, _ in usable_tar_members(inner, f"inner archive {inner_name}", f"{inner_name}/", unusable):
        table.add(path, f"{inner_name}/", ti.name, wnid, start + ti.offset_data, ti.size)


def index_train(src: str | os.PathLike) -> SourceIndex:
    """Index a train source: tar of class tars, directory of class tars, or ImageFolder tree."""
    p = Path(src)
    if not p.exists():
        raise SourceError(f"train source {p} does not exist")
    if p.is_file():
        members, unusable = MemberTable(), []
        with open_source(p, "train") as f:
            what = f"train archive {p.name}"
            for ti, _ in usable_tar_members(open_tar(f, what), what, "", unusable, check_keys=False):
                name = os.path.basename(ti.name)
                wnid = name[:-4] if name.endswith(".tar") else None
                if wnid is None or not WNID_RE.match(wnid):
                    raise SourceError(
                        f"train archive {p.name} holds {ti.name!r}; expected per-class tars named nXXXXXXXX.tar "
                        "(the original ILSVRC2012_img_train.tar layout)")
                _index_inner_tar(f, str(p), ti.offset_data, ti.size, wnid, name, unusable, members)
        return SourceIndex("train", "tar-of-tars", p.name, p.stat().st_size, members.freeze(), unusable)
    class_tars = sorted(c for c in p.iterdir() if c.is_file() and c.suffix == ".tar" and WNID_RE.match(c.stem))
    if class_tars:
        members, unusable = MemberTable(), []
        for c in class_tars:
            with open(c, "rb") as f:
                _index_inner_tar(f, str(c), 0, c.stat().st_size, c.stem, c.name, unusable, members)
        return SourceIndex("train", "class-tars", p.name, sum(c.stat().st_size for c in class_tars),
                           members.freeze(), unusable)
    return _index_imagefolder(p, "train")


def _index_imagefolder(p: Path, split: str) -> SourceIndex:
    class_dirs = sorted(d for d in p.iterdir() if d.is_dir() and WNID_RE.match(d.name))
    if not class_dirs:
        raise SourceError(
            f"{split} source {p} is neither a tar nor a directory of nXXXXXXXX.tar or nXXXXXXXX/ class folders")
    members, unusable, total = MemberTable(), [], 0
    for d in class_dirs:
        for f, _ in usable_files(d, unusable, f"{d.name}/"):
            size = f.stat().st_size
            total += size
            members.add(str(d), f"{d.name}/", f.name, d.name, 0, size, folder=True)
    return SourceIndex(split, "imagefolder", p.name, total, members.freeze(), unusable)


def index_val(src: str | os.PathLike, labels: dict[str, str] | None, split: str = "val") -> SourceIndex:
    """Index a val (or test) source. `labels` maps key -> WNID for flat sources (from the devkit or
    Kaggle CSV); the test split is unlabeled and needs none."""
    p = Path(src)
    if not p.exists():
        raise SourceError(f"{split} source {p} does not exist")
    if p.is_dir() and any(d.is_dir() and WNID_RE.match(d.name) for d in p.iterdir()):
        return _index_imagefolder(p, split)
    if labels is None and split != "test":
        raise SourceError(f"{split} source {p} is flat: give --devkit ILSVRC2012_devkit_t12.tar.gz or --val-labels LOC_val_solution.csv")
    members, unusable = MemberTable(), []
    label = (lambda key: labels.get(key)) if labels else (lambda key: None)
    if p.is_file():
        with open_source(p, split) as f:
            what = f"{split} archive {p.name}"
            for ti, key in usable_tar_members(open_tar(f, what), what, "", unusable):
                members.add(str(p), "", ti.name, label(key), ti.offset_data, ti.size)
        kind, total = "flat-tar", p.stat().st_size
    else:
        total = 0
        for f, key in usable_files(p, unusable):
            size = f.stat().st_size
            total += size
            members.add(str(p), "", f.name, label(key), 0, size, folder=True)
        kind = "flat-dir"
    return SourceIndex(split, kind, p.name, total, members.freeze(), unusable)
