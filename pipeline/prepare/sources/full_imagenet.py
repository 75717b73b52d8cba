"""The full ImageNet releases compressed: `winter21_whole.tar.gz` (19,167 per-synset tars under
`winter21_whole/`, gzip-compressed), or any `.tar.gz` of per-synset tars `nXXXXXXXX.tar`.

The uncompressed fall11_whole.tar has the ILSVRC2012_img_train.tar layout and is read by offset
(`archives`). A .tar.gz can only be read in order, so, as the Hugging Face forms, a member's
locator is its ordinal among the release's images (`Member.offset`), and its bytes come from a
sequential read (`iter_member_bytes`: the spill pass, or the one-pass build, prepare/onepass.py).
Inner tars are streamed (`r|`), never held whole: a synset tar can hold thousands of images. A
`nXXXXXXXX.tar` member that is not a tar is skipped (`not_a_class_tar`, with its reason); its
images' ordinals are unaffected (ordinals count the images of the tars that open).
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path
from typing import Iterator

from imagenet_shards.pipeline.format.keys import key_for
from imagenet_shards.pipeline.prepare.sources.records import (NOT_A_TAR, NOT_REGULAR, UNSAFE_KEY, SourceError,
                                                              SourceIndex, Unusable, unsafe_key)
from imagenet_shards.pipeline.prepare.sources.table import MemberTable

KIND_RELEASE_GZ = "tar-of-tars.gz"
_CLASS_TAR_RE = re.compile(r"^(n\d{8})\.tar$")


def is_release(path: str | os.PathLike) -> bool:
    """Whether a gzip file is a tar of per-synset tars (its first file member is `[folder/]nXXXXXXXX.tar`)."""
    try:
        with tarfile.open(path, mode="r|gz") as tar:
            for ti in tar:
                if ti.isdir():
                    continue
                return bool(_CLASS_TAR_RE.match(os.path.basename(ti.name)))
    except (tarfile.TarError, EOFError, OSError):
        return False
    return False


def iter_release(path: str | os.PathLike, *, read: bool) -> Iterator[tuple]:
    """Stream a .tar.gz of per-synset tars once, in order, yielding for each inner member:
    ("member", ordinal, wnid, inner tar name, member TarInfo, bytes or None), or
    ("unusable", Unusable) for what cannot be a sample. SourceError for a damaged file, or a member
    of the outer tar that is not a per-synset tar."""
    p = Path(path)
    ordinal = 0
    try:
        with tarfile.open(p, mode="r|gz") as outer:
            for oti in outer:
                if oti.isdir():
                    continue
                base = os.path.basename(oti.name)
                m = _CLASS_TAR_RE.match(base)
                if m is None or not oti.isfile():
                    raise SourceError(f"{p.name} holds {oti.name!r}; expected per-synset tars named nXXXXXXXX.tar "
                                      "(the fall11/winter21 layout)")
                wnid, where = m[1], f"{base}/"
                try:
                    inner = tarfile.open(fileobj=outer.extractfile(oti), mode="r|")
                except tarfile.TarError as e:
                    yield "unusable", Unusable(wnid, base, NOT_A_TAR,
                                               f"{oti.size} bytes that do not open as a tar ({' '.join(str(e).split())})")
                    continue
                with inner:
                    for ti in inner:
                        if ti.isdir():
                            continue
                        key = key_for(os.path.basename(ti.name))
                        if not ti.isfile():
                            yield "unusable", Unusable(key, where + ti.name, NOT_REGULAR,
                                                       "symbolic link, hard link or device (only regular files are read)")
                        elif (why := unsafe_key(key)) is not None:
                            yield "unusable", Unusable(key, where + ti.name, UNSAFE_KEY, why)
                        else:
                            data = inner.extractfile(ti).read() if read else None
                            yield "member", ordinal, wnid, base, ti, data
                            ordinal += 1
    except SourceError:
        raise
    except (tarfile.TarError, EOFError, OSError) as e:
        raise SourceError(f"{p.name} is not a readable .tar.gz of per-synset tars ({' '.join(str(e).split())}); "
                          "re-download it") from None


def release_items(files: list[Path], split: str, *, read: bool):
    """(row or Unusable, bytes or None) of every image of a compressed release, in file order; a row
    is `MemberTable.add`'s arguments (the locator is the image's ordinal)."""
    for path in files:
        for item in iter_release(path, read=read):
            if item[0] == "unusable":
                yield item[1], None
            else:
                _, ordinal, wnid, base, ti, data = item
                yield (str(path), f"{base}/", ti.name, wnid, ordinal, ti.size), data


def index_release(path: Path, split: str) -> SourceIndex:
    """Index a compressed release (names and sizes; the data is decompressed and discarded)."""
    members, unusable = MemberTable(), []
    for item, _ in release_items([path], split, read=False):
        if isinstance(item, Unusable):
            unusable.append(item)
        else:
            members.add(*item)
    return SourceIndex(split, KIND_RELEASE_GZ, path.name, path.stat().st_size, members.freeze(), unusable)


def iter_member_bytes(path: str) -> Iterator[tuple[int, bytes]]:
    """(ordinal, bytes) of every image of the release, in file order (the spill pass)."""
    for item in iter_release(path, read=True):
        if item[0] == "member":
            yield item[1], item[5]
