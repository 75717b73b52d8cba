"""What is in the archives: every member's key, class and where its bytes are, without extracting anything.

Train sources: the original ``ILSVRC2012_img_train.tar`` (a tar of 1000 per-class tars), a directory of
per-class ``nXXXXXXXX.tar``, or an ImageFolder tree. Val sources: ``ILSVRC2012_img_val.tar`` or a flat
directory (labels from the devkit or Kaggle's ``LOC_val_solution.csv``), or an ImageFolder tree.

Tars are indexed by reading headers only: outer and inner tars are uncompressed, so every member has
a byte offset and size inside the original file and is later read with one seek + read.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from imagenet_shards.pipeline.format.keys import key_for

WNID_RE = re.compile(r"^n\d{8}$")
VAL_KEY_RE = re.compile(r"^ILSVRC2012_val_(\d{8})$")


class SourceError(Exception):
    """A source cannot be used as given; the message says what to do."""


@dataclass(frozen=True)
class Member:
    """One file inside a source: `path` is the file on disk that holds its bytes at [offset, offset+size)."""

    key: str
    filename: str
    wnid: str | None
    path: str
    offset: int
    size: int
    source: str  # human-readable location, e.g. "n01440764.tar/n01440764_10026.JPEG"


@dataclass
class SourceIndex:
    split: str
    kind: str
    name: str
    bytes: int
    members: list[Member]

    def fingerprint(self) -> str:
        """sha256 over (source location, size) of every member, in archive order."""
        h = hashlib.sha256()
        for m in self.members:
            h.update(f"{m.source}\0{m.size}\n".encode())
        return "index-sha256:" + h.hexdigest()


class _Window(io.RawIOBase):
    """A read-only, seekable view of [start, start+size) of an open file (an inner tar inside the outer one)."""

    def __init__(self, f, start: int, size: int):
        self._f, self._start, self._size, self._pos = f, start, size, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, pos, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, b):
        n = max(0, min(len(b), self._size - self._pos))
        if n == 0:
            return 0
        self._f.seek(self._start + self._pos)
        data = self._f.read(n)
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _open_source(p: Path, split: str):
    try:
        return open(p, "rb")
    except OSError as e:
        raise SourceError(f"cannot read {split} source {p}: {e.strerror}") from None


def _open_tar(fileobj, what: str) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=fileobj, mode="r:")
    except tarfile.TarError as e:
        raise SourceError(f"{what} is not an uncompressed tar archive ({e})") from None


def _tar_members(tar: tarfile.TarFile, what: str):
    try:
        for ti in tar:
            yield ti
    except tarfile.TarError as e:
        raise SourceError(f"{what} is damaged: {e} (re-download it or check its md5)") from None


def _index_inner_tar(f, path: str, start: int, size: int, wnid: str, inner_name: str) -> list[Member]:
    out = []
    inner = _open_tar(_Window(f, start, size), f"inner archive {inner_name}")
    for ti in _tar_members(inner, f"inner archive {inner_name}"):
        if not ti.isfile():
            continue
        name = os.path.basename(ti.name)
        out.append(Member(key_for(name), name, wnid, path, start + ti.offset_data, ti.size, f"{inner_name}/{ti.name}"))
    return out


def index_train(src: str | os.PathLike) -> SourceIndex:
    """Index a train source: tar of class tars, directory of class tars, or ImageFolder tree."""
    p = Path(src)
    if not p.exists():
        raise SourceError(f"train source {p} does not exist")
    if p.is_file():
        members = []
        with _open_source(p, "train") as f:
            for ti in _tar_members(_open_tar(f, f"train archive {p.name}"), f"train archive {p.name}"):
                if not ti.isfile():
                    continue
                name = os.path.basename(ti.name)
                wnid = name[:-4] if name.endswith(".tar") else None
                if wnid is None or not WNID_RE.match(wnid):
                    raise SourceError(
                        f"train archive {p.name} holds {ti.name!r}; expected per-class tars named nXXXXXXXX.tar "
                        "(the original ILSVRC2012_img_train.tar layout)")
                members += _index_inner_tar(f, str(p), ti.offset_data, ti.size, wnid, name)
        return SourceIndex("train", "tar-of-tars", p.name, p.stat().st_size, members)
    class_tars = sorted(c for c in p.iterdir() if c.is_file() and c.suffix == ".tar" and WNID_RE.match(c.stem))
    if class_tars:
        members = []
        for c in class_tars:
            with open(c, "rb") as f:
                members += _index_inner_tar(f, str(c), 0, c.stat().st_size, c.stem, c.name)
        return SourceIndex("train", "class-tars", p.name, sum(c.stat().st_size for c in class_tars), members)
    return _index_imagefolder(p, "train")


def _index_imagefolder(p: Path, split: str) -> SourceIndex:
    class_dirs = sorted(d for d in p.iterdir() if d.is_dir() and WNID_RE.match(d.name))
    if not class_dirs:
        raise SourceError(
            f"{split} source {p} is neither a tar nor a directory of nXXXXXXXX.tar or nXXXXXXXX/ class folders")
    members, total = [], 0
    for d in class_dirs:
        for f in sorted(d.iterdir()):
            if f.is_file():
                size = f.stat().st_size
                total += size
                members.append(Member(key_for(f.name), f.name, d.name, str(f), 0, size, f"{d.name}/{f.name}"))
    return SourceIndex(split, "imagefolder", p.name, total, members)


def index_val(src: str | os.PathLike, labels: dict[str, str] | None) -> SourceIndex:
    """Index a val source. `labels` maps key -> WNID for flat sources (from the devkit or Kaggle CSV)."""
    p = Path(src)
    if not p.exists():
        raise SourceError(f"val source {p} does not exist")
    if p.is_dir() and any(d.is_dir() and WNID_RE.match(d.name) for d in p.iterdir()):
        return _index_imagefolder(p, "val")
    raw = []  # (filename, path, offset, size, source)
    if p.is_file():
        with _open_source(p, "val") as f:
            for ti in _tar_members(_open_tar(f, f"val archive {p.name}"), f"val archive {p.name}"):
                if ti.isfile():
                    raw.append((os.path.basename(ti.name), str(p), ti.offset_data, ti.size, ti.name))
        kind, total = "flat-tar", p.stat().st_size
    else:
        files = sorted(f for f in p.iterdir() if f.is_file())
        raw = [(f.name, str(f), 0, f.stat().st_size, f.name) for f in files]
        kind, total = "flat-dir", sum(r[3] for r in raw)
    if labels is None:
        raise SourceError(f"val source {p} is flat: give --devkit ILSVRC2012_devkit_t12.tar.gz or --val-labels LOC_val_solution.csv")
    members = []
    for filename, path, offset, size, source in raw:
        key = key_for(filename)
        members.append(Member(key, filename, labels.get(key), path, offset, size, source))
    return SourceIndex("val", kind, p.name, total, members)


# --- labels for flat val sources -------------------------------------------------------------------

def read_devkit(path: str | os.PathLike) -> tuple[dict[int, str], list[str], list[int]]:
    """Parse ILSVRC2012_devkit_t12.tar.gz (or its extracted folder).

    Returns (ILSVRC2012_ID -> WNID for leaf synsets, leaf WNIDs sorted, val ground-truth IDs in file order).
    The IDs are the devkit's own order, NOT the label: label = index of the WNID in sorted order.
    """
    import scipy.io

    p = Path(path)
    if not p.exists():
        raise SourceError(f"devkit {p} does not exist")
    try:
        if p.is_dir():
            meta_bytes = (p / "data" / "meta.mat").read_bytes()
            gt_text = (p / "data" / "ILSVRC2012_validation_ground_truth.txt").read_text()
        else:
            with tarfile.open(p) as t:
                names = {os.path.basename(n.name): n for n in t.getmembers() if n.isfile()}
                meta_bytes = t.extractfile(names["meta.mat"]).read()
                gt_text = t.extractfile(names["ILSVRC2012_validation_ground_truth.txt"]).read().decode()
    except (OSError, KeyError, tarfile.TarError) as e:
        raise SourceError(f"devkit {p} is unreadable or incomplete ({e}); expected data/meta.mat and "
                          "data/ILSVRC2012_validation_ground_truth.txt") from None
    meta = scipy.io.loadmat(io.BytesIO(meta_bytes), squeeze_me=True)["synsets"]
    id_to_wnid = {}
    for s in meta:
        if int(s["num_children"]) == 0:
            id_to_wnid[int(s["ILSVRC2012_ID"])] = str(s["WNID"])
    gt = [int(line) for line in gt_text.split()]
    return id_to_wnid, sorted(id_to_wnid.values()), gt


def val_labels_from_devkit(path) -> tuple[dict[str, str], list[str]]:
    """key (ILSVRC2012_val_%08d) -> WNID from the devkit's ground truth, and the devkit's leaf WNIDs."""
    id_to_wnid, leaves, gt = read_devkit(path)
    labels = {}
    for i, ilsvrc_id in enumerate(gt, start=1):
        if ilsvrc_id not in id_to_wnid:
            raise SourceError(f"devkit ground truth line {i} has ILSVRC2012_ID {ilsvrc_id}, which is not a leaf synset")
        labels[f"ILSVRC2012_val_{i:08d}"] = id_to_wnid[ilsvrc_id]
    return labels, leaves


def val_labels_from_kaggle_csv(path) -> tuple[dict[str, str], list[str]]:
    """key -> WNID from Kaggle's LOC_val_solution.csv (first synset of PredictionString)."""
    p = Path(path)
    try:
        with open(p, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise SourceError(f"cannot read val labels {p}: {e.strerror}") from None
    if not rows or "ImageId" not in rows[0] or "PredictionString" not in rows[0]:
        raise SourceError(f"{p} is not a LOC_val_solution.csv (needs columns ImageId,PredictionString)")
    labels = {r["ImageId"]: r["PredictionString"].split()[0] for r in rows}
    return labels, sorted(set(labels.values()))
