"""The Hugging Face ``ILSVRC/imagenet-1k`` download, in both of its forms, as sequential sources.

- tar.gz form: ``data/train_images_{0..4}.tar.gz``, ``data/val_images.tar.gz``,
  ``data/test_images.tar.gz``. Member names carry the WNID as a suffix
  (``n01440764_10026_n01440764.JPEG``, ``ILSVRC2012_val_00000293_n01440764.JPEG``); test images carry
  none (``ILSVRC2012_test_00000001.JPEG``). Members may sit flat or in folders.
- parquet form: ``data/train-00000-of-00294.parquet`` ...; rows hold ``image`` (a struct of ``bytes``
  and ``path``) and ``label`` (the sorted-WNID index, -1 for test). Read with pyarrow, one row group at
  a time (bounded memory).

Keys and file names are the original ones (the ``_nXXXXXXXX`` suffix stripped), so a shard set made
from the HF copy is byte-identical to one made from the original archives holding the same images.
Neither form can be read by offset (gzip; parquet pages), so a member's locator is its ordinal in
its file (``Member.offset``), and ``prepare/spill.py`` streams each file once more to copy the planned
members into per-shard bucket files before shards are built. Non-regular tar members and names
whose key is unsafe are listed as unusable, as for every other form.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path
from typing import Iterator

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.format.keys import key_for
from imagenet_shards.pipeline.prepare.sources.records import (NOT_REGULAR, UNSAFE_KEY, SourceError, SourceIndex,
                                                              Unusable, unsafe_key)
from imagenet_shards.pipeline.prepare.sources.table import MemberTable

HF_NAME_RE = re.compile(r"^(?P<stem>.+?)_(?P<wnid>n\d{8})(?P<ext>\.[A-Za-z0-9]+)$")
TRAIN_STEM_RE = re.compile(r"^(n\d{8})_")
PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
KIND_TARGZ, KIND_PARQUET = "hf-tar.gz", "hf-parquet"
SEQUENTIAL_KINDS = (KIND_TARGZ, KIND_PARQUET)  # cannot be read by offset: spilled before building


def detect_form(path: str | os.PathLike) -> str | None:
    """``KIND_TARGZ`` or ``KIND_PARQUET`` from a file's first bytes (None for anything else)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except (IsADirectoryError, FileNotFoundError, PermissionError):
        return None
    if head == PARQUET_MAGIC:
        return KIND_PARQUET
    if head[:2] == GZIP_MAGIC:
        return KIND_TARGZ
    return None


def original_name(name: str, split: str) -> tuple[str, str | None]:
    """(original file name, WNID or None) of an HF member name; raises SourceError when they disagree.

    ``n01440764_10026_n01440764.JPEG`` -> (``n01440764_10026.JPEG``, ``n01440764``). A train name whose
    own prefix names another WNID than its suffix is refused (the label would be ambiguous)."""
    base = os.path.basename(name)
    m = HF_NAME_RE.match(base)
    if m is None:
        return base, None
    filename = m["stem"] + m["ext"]
    prefix = TRAIN_STEM_RE.match(m["stem"])
    if split == "train" and prefix and prefix[1] != m["wnid"]:
        raise SourceError(f"{name}: the file name says {prefix[1]} but its label suffix says {m['wnid']}; "
                          "this copy's labels disagree with its names")
    return filename, m["wnid"]


def _member(split: str, path: Path, ordinal: int, name: str, size: int, wnid_from_label: str | None,
            prefix: str, location: str) -> tuple | Unusable:
    """The table row (MemberTable.add's arguments) of one HF member, or why it cannot be one;
    its location is `prefix + location`."""
    filename, wnid = original_name(name, split)
    if wnid_from_label is not None:
        if wnid is not None and wnid != wnid_from_label:
            raise SourceError(f"{prefix}{location}: the name says {wnid} but the label says {wnid_from_label}; "
                              "this copy's labels disagree with its names")
        wnid = wnid_from_label
    if split == "train" and wnid is None:
        stem = TRAIN_STEM_RE.match(filename)
        wnid = stem[1] if stem else None
    key = key_for(filename)
    why = unsafe_key(key)
    if why is not None:
        return Unusable(key, prefix + location, UNSAFE_KEY, why)
    return (str(path), prefix, location, wnid, ordinal, size, filename)


def index_items(split: str, kind: str, files: list[Path], items) -> SourceIndex:
    """The SourceIndex of (row or Unusable, bytes) items (`targz_items`, `parquet_items`, and the
    full releases' `release_items`); a row is `MemberTable.add`'s arguments."""
    members, unusable = MemberTable(), []
    for item, _ in items:
        if isinstance(item, Unusable):
            unusable.append(item)
        else:
            members.add(*item)
    return SourceIndex(split, kind, files_name(files), sum(p.stat().st_size for p in files), members.freeze(), unusable)


# ----------------------------------------------------------------------------- tar.gz

def iter_targz(path: str | os.PathLike, *, read: bool) -> Iterator[tuple[int, tarfile.TarInfo, bytes | None]]:
    """(ordinal, member, bytes or None) of every member but directories of a .tar.gz, streamed once.

    Non-regular members come with ordinal -1 and no bytes; the ordinal counts regular files only,
    so it is the same in the index pass and the spill pass."""
    ordinal = 0
    try:
        with tarfile.open(path, mode="r|gz") as tar:
            for ti in tar:
                if ti.isdir():
                    continue
                if not ti.isfile():
                    yield -1, ti, None
                    continue
                data = tar.extractfile(ti).read() if read else None
                yield ordinal, ti, data
                ordinal += 1
    except (tarfile.TarError, EOFError, OSError) as e:
        raise SourceError(f"{Path(path).name} is not a readable .tar.gz ({' '.join(str(e).split())}); "
                          "re-download it") from None


def targz_items(files: list[Path], split: str, *, read: bool):
    """(row or Unusable, bytes or None) of every member of HF tar.gz files, in file order."""
    for p in files:
        for ordinal, ti, data in iter_targz(p, read=read):
            if ordinal < 0:
                yield Unusable(key_for(os.path.basename(ti.name)), f"{p.name}/{ti.name}", NOT_REGULAR,
                               "symbolic link, hard link or device (only regular files are read)"), None
            else:
                yield _member(split, p, ordinal, ti.name, ti.size, None, f"{p.name}/", ti.name), data


def index_targz(files: list[Path], split: str) -> SourceIndex:
    """Index HF tar.gz files (names and sizes; the data is decompressed and discarded)."""
    return index_items(split, KIND_TARGZ, files, targz_items(files, split, read=False))


# ----------------------------------------------------------------------------- parquet

def _pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError("reading the Hugging Face parquet files needs pyarrow: pip install -e '.[hf]'") from None
    return pq


def iter_parquet(path: str | os.PathLike, *, read: bool) -> Iterator[tuple[int, str, int, int, bytes | None]]:
    """(row, image path, label, image size, bytes or None) of every row, one row group at a time."""
    pq = _pyarrow()
    try:
        f = pq.ParquetFile(path)
        names = set(f.schema_arrow.names)
        if not {"image", "label"} <= names:
            raise SourceError(f"{Path(path).name} has columns {sorted(names)}; expected image and label "
                              "(the ILSVRC/imagenet-1k parquet layout)")
        row = 0
        for g in range(f.num_row_groups):
            table = f.read_row_group(g, columns=["image", "label"])
            images = table.column("image").combine_chunks()
            paths = images.field("path").to_pylist()
            blobs = images.field("bytes")
            labels = table.column("label").to_pylist()
            for i in range(table.num_rows):
                blob = blobs[i].as_py()
                yield row, paths[i] or "", labels[i], len(blob or b""), (blob if read else None)
                row += 1
    except SourceError:
        raise
    except Exception as e:  # pyarrow raises its own ArrowInvalid/OSError family
        raise SourceError(f"{Path(path).name} is not a readable parquet file ({' '.join(str(e).split())}); "
                          "re-download it") from None


def parquet_items(files: list[Path], split: str, *, read: bool):
    """(row or Unusable, bytes or None) of every row of HF parquet files, in file order; the
    ``label`` column must agree with a WNID in the image path."""
    wnids = [c.wnid for c in imagenet_1k_classes()]
    for p in files:
        for row, name, label, size, data in iter_parquet(p, read=read):
            if label is None or label < 0:
                wnid = None
            elif label < len(wnids):
                wnid = wnids[label]
            else:
                raise SourceError(f"{p.name} row {row} ({name}): label {label} is not an ImageNet-1k class index")
            yield _member(split, p, row, name or f"row-{row}", size, wnid, f"{p.name}#", f"{row}:{name}"), \
                (data or b"") if read else None


def index_parquet(files: list[Path], split: str) -> SourceIndex:
    """Index HF parquet files (see `parquet_items`)."""
    return index_items(split, KIND_PARQUET, files, parquet_items(files, split, read=False))


# ----------------------------------------------------------------------------- both

def index_files(files: list[Path], split: str) -> SourceIndex | None:
    """The SourceIndex of a list of HF files (all of one form), or None if they are not HF files."""
    forms = {detect_form(p) for p in files}
    if forms == {KIND_TARGZ}:
        return index_targz(files, split)
    if forms == {KIND_PARQUET}:
        return index_parquet(files, split)
    if forms - {None} and None not in forms:
        raise SourceError(f"{split} files mix .tar.gz and parquet; give one form per split")
    return None


def iter_member_bytes(kind: str, path: str) -> Iterator[tuple[int, bytes]]:
    """(ordinal, bytes) of every member of one HF file, in file order (the spill pass)."""
    if kind == KIND_TARGZ:
        for ordinal, _, data in iter_targz(path, read=True):
            if ordinal >= 0:
                yield ordinal, data
    elif kind == KIND_PARQUET:
        for row, _, _, _, data in iter_parquet(path, read=True):
            yield row, data or b""
    else:
        raise ValueError(f"not a sequential source kind: {kind}")


def files_name(files: list[Path]) -> str:
    return files[0].name if len(files) == 1 else f"{files[0].name} (+{len(files) - 1} more)"

