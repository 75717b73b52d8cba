"""Reading source tars and folders by their headers: the helpers every offset-readable form shares."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from imagenet_shards.pipeline.format.keys import key_for
from imagenet_shards.pipeline.prepare.sources.records import NOT_REGULAR, UNSAFE_KEY, SourceError, Unusable, unsafe_key


def _not_regular(ti: tarfile.TarInfo) -> str:
    if ti.issym():
        return f"symbolic link to {ti.linkname}"
    if ti.islnk():
        return f"hard link to {ti.linkname}"
    kinds = {tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "fifo"}
    return kinds.get(ti.type, f"tar member of type {ti.type!r}") + " (only regular files are read)"


def usable_tar_members(tar: tarfile.TarFile, what: str, where: str, unusable: list[Unusable], *,
                        check_keys: bool = True):
    """(member, key) of each regular file of `tar` whose key is safe. Other members, but directories,
    go to `unusable` (their source is `where` + the member name)."""
    for ti in tar_members(tar, what):
        if ti.isdir():
            continue
        key = key_for(os.path.basename(ti.name))
        if not ti.isfile():
            unusable.append(Unusable(key, f"{where}{ti.name}", NOT_REGULAR, _not_regular(ti)))
        elif check_keys and (why := unsafe_key(key)) is not None:
            unusable.append(Unusable(key, f"{where}{ti.name}", UNSAFE_KEY, why))
        else:
            yield ti, key


def usable_files(folder: Path, unusable: list[Unusable], where: str = ""):
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


class TarWindow(io.RawIOBase):
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


def open_source(p: Path, split: str):
    try:
        return open(p, "rb")
    except OSError as e:
        raise SourceError(f"cannot read {split} source {p}: {e.strerror}") from None


def open_tar(fileobj, what: str) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=fileobj, mode="r:")
    except tarfile.TarError as e:
        raise SourceError(f"{what} is not an uncompressed tar archive ({e})") from None


def tar_members(tar: tarfile.TarFile, what: str):
    try:
        for ti in tar:
            yield ti
    except tarfile.TarError as e:
        raise SourceError(f"{what} is damaged: {e} (re-download it or check its md5)") from None
