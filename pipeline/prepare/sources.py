"""What is in the archives: every member's key, class and where its bytes are, without extracting anything.

Train sources: the original ``ILSVRC2012_img_train.tar`` (a tar of 1000 per-class tars), a directory of
per-class ``nXXXXXXXX.tar``, or an ImageFolder tree. Val sources: ``ILSVRC2012_img_val.tar`` or a flat
directory (labels from the devkit or Kaggle's ``LOC_val_solution.csv``), or an ImageFolder tree.

Tars are indexed by reading headers only: outer and inner tars are uncompressed, so every member has
a byte offset and size inside the original file and is later read with one seek + read.

Every input is accounted for: a member that cannot become a sample is not dropped but listed in
`SourceIndex.unusable` with a reason, and ends up in the manifest: `not_a_regular_file` (skipped:
symlinks, hard links, devices, fifos in an archive; entries of a source folder that are neither a
file nor a folder, e.g. a broken symlink) and `unsafe_key` (rejected: a name whose key holds a
control character, '/' or '..', which would make a shard member name that tools cannot handle).
Directories are containers, not inputs, and are not listed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import tarfile
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass(frozen=True)
class Unusable:
    """A member found while indexing that cannot become a sample; recorded in the manifest."""

    key: str
    source: str
    reason: str  # NOT_REGULAR (skipped) or UNSAFE_KEY (rejected)
    detail: str

    @property
    def status(self) -> str:
        """Where the manifest lists it: "skipped" (not an image file at all) or "rejected"."""
        return "skipped" if self.reason == NOT_REGULAR else "rejected"


NOT_REGULAR = "not_a_regular_file"
UNSAFE_KEY = "unsafe_key"


@dataclass
class SourceIndex:
    split: str
    kind: str
    name: str
    bytes: int
    members: list[Member]
    unusable: list[Unusable] = field(default_factory=list)  # in source order; not in the fingerprint

    def fingerprint(self) -> str:
        """sha256 over (source location, size) of every member, in archive order."""
        h = hashlib.sha256()
        for m in self.members:
            h.update(f"{m.source}\0{m.size}\n".encode())
        return "index-sha256:" + h.hexdigest()


def key_for(filename: str) -> str:
    """Sample key = file stem; dots would split a webdataset key, so they become underscores."""
    stem = os.path.basename(filename)
    stem = stem.rsplit(".", 1)[0] if "." in stem[1:] else stem
    return stem.replace(".", "_")


def unsafe_key(key: str) -> str | None:
    """Why `key` cannot name a sample (None if it can): empty, a control character, '/' or '..'."""
    if not key:
        return "the key is empty"
    bad = next((c for c in key if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return f"the name holds a control character (U+{ord(bad):04X})"
    if "/" in key:
        return "the key holds '/'"
    if ".." in key:
        return "the key holds '..'"
    return None


def _not_regular(ti: tarfile.TarInfo) -> str:
    if ti.issym():
        return f"symbolic link to {ti.linkname}"
    if ti.islnk():
        return f"hard link to {ti.linkname}"
    kinds = {tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "fifo"}
    return kinds.get(ti.type, f"tar member of type {ti.type!r}") + " (only regular files are read)"


def _usable_tar_members(tar: tarfile.TarFile, what: str, where: str, unusable: list[Unusable], *,
                        check_keys: bool = True):
    """(member, key) of each regular file of `tar` whose key is safe. Other members, but directories,
    go to `unusable` (their source is `where` + the member name)."""
    for ti in _tar_members(tar, what):
        if ti.isdir():
            continue
        key = key_for(os.path.basename(ti.name))
        if not ti.isfile():
            unusable.append(Unusable(key, f"{where}{ti.name}", NOT_REGULAR, _not_regular(ti)))
        elif check_keys and (why := unsafe_key(key)) is not None:
            unusable.append(Unusable(key, f"{where}{ti.name}", UNSAFE_KEY, why))
        else:
            yield ti, key


def _usable_files(folder: Path, unusable: list[Unusable], where: str = ""):
    """(path, key) of each file directly in `folder` (sorted) whose key is safe; entries that are
    neither a file nor a folder (a broken symlink, a fifo) and unsafe names go to `unusable`."""
    for f in sorted(folder.iterdir()):
        if f.is_dir():
            continue
        key = key_for(f.name)
        if not f.is_file():
            unusable.append(Unusable(key, f"{where}{f.name}", NOT_REGULAR,
                                     "broken symbolic link" if f.is_symlink() else "not a regular file"))
        elif (why := unsafe_key(key)) is not None:
            unusable.append(Unusable(key, f"{where}{f.name}", UNSAFE_KEY, why))
        else:
            yield f, key


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


def _index_inner_tar(f, path: str, start: int, size: int, wnid: str, inner_name: str,
                     unusable: list[Unusable]) -> list[Member]:
    out = []
    inner = _open_tar(_Window(f, start, size), f"inner archive {inner_name}")
    for ti, key in _usable_tar_members(inner, f"inner archive {inner_name}", f"{inner_name}/", unusable):
        name = os.path.basename(ti.name)
        out.append(Member(key, name, wnid, path, start + ti.offset_data, ti.size, f"{inner_name}/{ti.name}"))
    return out


def index_train(src: str | os.PathLike) -> SourceIndex:
    """Index a train source: tar of class tars, directory of class tars, or ImageFolder tree."""
    p = Path(src)
    if not p.exists():
        raise SourceError(f"train source {p} does not exist")
    if p.is_file():
        members, unusable = [], []
        with _open_source(p, "train") as f:
            what = f"train archive {p.name}"
            for ti, _ in _usable_tar_members(_open_tar(f, what), what, "", unusable, check_keys=False):
                name = os.path.basename(ti.name)
                wnid = name[:-4] if name.endswith(".tar") else None
                if wnid is None or not WNID_RE.match(wnid):
                    raise SourceError(
                        f"train archive {p.name} holds {ti.name!r}; expected per-class tars named nXXXXXXXX.tar "
                        "(the original ILSVRC2012_img_train.tar layout)")
                members += _index_inner_tar(f, str(p), ti.offset_data, ti.size, wnid, name, unusable)
        return SourceIndex("train", "tar-of-tars", p.name, p.stat().st_size, members, unusable)
    class_tars = sorted(c for c in p.iterdir() if c.is_file() and c.suffix == ".tar" and WNID_RE.match(c.stem))
    if class_tars:
        members, unusable = [], []
        for c in class_tars:
            with open(c, "rb") as f:
                members += _index_inner_tar(f, str(c), 0, c.stat().st_size, c.stem, c.name, unusable)
        return SourceIndex("train", "class-tars", p.name, sum(c.stat().st_size for c in class_tars), members,
                           unusable)
    return _index_imagefolder(p, "train")


def _index_imagefolder(p: Path, split: str) -> SourceIndex:
    class_dirs = sorted(d for d in p.iterdir() if d.is_dir() and WNID_RE.match(d.name))
    if not class_dirs:
        raise SourceError(
            f"{split} source {p} is neither a tar nor a directory of nXXXXXXXX.tar or nXXXXXXXX/ class folders")
    members, unusable, total = [], [], 0
    for d in class_dirs:
        for f, key in _usable_files(d, unusable, f"{d.name}/"):
            size = f.stat().st_size
            total += size
            members.append(Member(key, f.name, d.name, str(f), 0, size, f"{d.name}/{f.name}"))
    return SourceIndex(split, "imagefolder", p.name, total, members, unusable)


def index_val(src: str | os.PathLike, labels: dict[str, str] | None) -> SourceIndex:
    """Index a val source. `labels` maps key -> WNID for flat sources (from the devkit or Kaggle CSV)."""
    p = Path(src)
    if not p.exists():
        raise SourceError(f"val source {p} does not exist")
    if p.is_dir() and any(d.is_dir() and WNID_RE.match(d.name) for d in p.iterdir()):
        return _index_imagefolder(p, "val")
    raw, unusable = [], []  # raw: (key, filename, path, offset, size, source)
    if p.is_file():
        with _open_source(p, "val") as f:
            what = f"val archive {p.name}"
            for ti, key in _usable_tar_members(_open_tar(f, what), what, "", unusable):
                raw.append((key, os.path.basename(ti.name), str(p), ti.offset_data, ti.size, ti.name))
        kind, total = "flat-tar", p.stat().st_size
    else:
        raw = [(key, f.name, str(f), 0, f.stat().st_size, f.name) for f, key in _usable_files(p, unusable)]
        kind, total = "flat-dir", sum(r[4] for r in raw)
    if labels is None:
        raise SourceError(f"val source {p} is flat: give --devkit ILSVRC2012_devkit_t12.tar.gz or --val-labels LOC_val_solution.csv")
    members = [Member(key, filename, labels.get(key), path, offset, size, source)
               for key, filename, path, offset, size, source in raw]
    return SourceIndex("val", kind, p.name, total, members, unusable)


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
    want = "data/meta.mat and data/ILSVRC2012_validation_ground_truth.txt"
    try:
        if p.is_dir():
            meta_bytes = (p / "data" / "meta.mat").read_bytes()
            gt_text = (p / "data" / "ILSVRC2012_validation_ground_truth.txt").read_text()
        else:
            with tarfile.open(p) as t:
                names = {os.path.basename(n.name): n for n in t.getmembers() if n.isfile()}
                meta_bytes = t.extractfile(names["meta.mat"]).read()
                gt_text = t.extractfile(names["ILSVRC2012_validation_ground_truth.txt"]).read().decode()
    except (tarfile.TarError, EOFError, zlib.error):  # tarfile's message spans several lines
        raise SourceError(f"devkit {p} is not a readable tar archive: give ILSVRC2012_devkit_t12.tar.gz "
                          "or the folder it extracts to") from None
    except KeyError as e:
        raise SourceError(f"devkit {p} has no {e.args[0]}; expected {want}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"devkit {p} is unreadable or incomplete ({getattr(e, 'strerror', None) or e}); "
                          f"expected {want}") from None
    try:
        meta = scipy.io.loadmat(io.BytesIO(meta_bytes), squeeze_me=True)["synsets"]
        id_to_wnid = {}
        for s in meta:
            if int(s["num_children"]) == 0:
                id_to_wnid[int(s["ILSVRC2012_ID"])] = str(s["WNID"])
        gt = [int(line) for line in gt_text.split()]
    except Exception as e:  # noqa: BLE001 - scipy raises many types for a damaged file
        raise SourceError(f"devkit {p} is damaged: its meta.mat or ground truth cannot be parsed "
                          f"({type(e).__name__}); re-download it") from None
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
