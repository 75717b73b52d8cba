"""Atomic local writes: the one way the project puts a file under its final name.

A writer gets a temporary file beside the target (same folder, so the rename cannot cross file
systems) named ``.NAME.PID-TOKEN.tmp``; on success the data is flushed and fsynced, the file is
renamed over the target and the folder fsynced, so a kill at any moment leaves the old file or
the new one, never a torn one, and never a partial file under the final name. Temp files are
created with mode ``0o666 & ~umask`` like any other file (``mkstemp``'s 0600 would make shards
unreadable to a training job running as another account). The PID in the name lets a folder
shared by several processes (the shard cache) tell a live writer's temp file from a dead one's.
Shards, manifests, records, checkpoints, synthetic archives and cached shards all go through here;
remote objects are written by ``storage.fs`` (one PUT is atomic on object stores).
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
from typing import BinaryIO, Iterator

TEMP_SUFFIX = ".tmp"


def temp_path(path: str | os.PathLike) -> str:
    """A fresh temp name beside ``path``: ``.NAME.PID-TOKEN.tmp``."""
    folder, name = os.path.split(os.fspath(path))
    return os.path.join(folder, f".{name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")


def stale_temps(folder: str | os.PathLike, name: str = "*") -> list[str]:
    """Temp files of writers to ``folder/NAME`` (a glob pattern), e.g. left by a killed process."""
    return sorted(glob.glob(os.path.join(os.fspath(folder), f".{name}.*-*{TEMP_SUFFIX}")))


def temp_owner(temp: str) -> int | None:
    """The PID that created temp file ``temp`` (None if the name is not one of ours)."""
    try:
        return int(os.path.basename(temp)[:-len(TEMP_SUFFIX)].rsplit(".", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return None


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename in ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(os.fspath(folder) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _discarded_on_error(tmp: str) -> Iterator[None]:
    """Remove the temp file `tmp` if the block fails (the target stays untouched), then re-raise."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, *, fsync: bool = True) -> Iterator[BinaryIO]:
    """Binary file object whose contents appear at ``path`` only when the block ends without error.

    On an exception the temp file is removed and ``path`` is untouched. ``fsync=False`` skips the
    flushes to disk (for throwaway outputs such as test data)."""
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    with _discarded_on_error(tmp):
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    if fsync:
        fsync_dir(folder)


def write_atomic(path: str | os.PathLike, data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_open``)."""
    with atomic_open(path, fsync=fsync) as f:
        f.write(data)


def link_atomic(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Make ``target`` a copy of ``source`` atomically: a hard link where the file system has them."""
    tmp = temp_path(target)
    with _discarded_on_error(tmp):
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    fsync_dir(os.path.dirname(os.fspath(target)))
