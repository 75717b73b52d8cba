"""Atomic local writes: the one way the project puts a file under its final name.

A writer gets a temporary file beside the target (same folder, so the rename cannot cross file
systems) named ``.NAME.PID-TOKEN.tmp``; on success the data is flushed and fsynced, the file is
renamed over the target and the folder fsynced, so a kill at any moment leaves the old file or
the new one, never a torn one, and never a partial file under the final name. Temp files are
created with mode ``0o666 & ~umask`` like any other file (``mkstemp``'s 0600 would make shards
unreadable to a training job running as another account). The PID in the name lets a folder
shared by several processes (the shard cache) tell a live writer's temp file from a dead one's.
Shards, manifests, records, checkpoints, synthetic archives and cached shards all go through here;
remote objects are written by ``storage.fs`` (one PUT is atomic on object stores). A write that runs
out of room raises ``DiskFull`` naming the file it was writing and the room left (the temp file is
removed first): ``[Errno 28] No space left on device`` alone names neither, and torch.save reports
it as ``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos ...``.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
import shutil
from typing import BinaryIO, Iterator

from imagenet_shards.pipeline.storage.units import human_bytes

TEMP_SUFFIX = ".tmp"
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """A local write ran out of room (ENOSPC, or a quota); the message names the file and the room left.
    Callers add what to do (free space, another folder), which depends on the tool."""

    def __str__(self) -> str:
        return self.strerror


def is_disk_full(error: BaseException | None) -> bool:
    """Whether `error`, or an exception it was raised from or while handling, is out-of-room."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _NO_ROOM:
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full_error(path: str | os.PathLike) -> DiskFull:
    """`DiskFull` for a write to `path` that ran out of room: "no space left on device writing PATH (N free)"."""
    path = os.fspath(path)
    try:
        st = os.statvfs(os.path.dirname(path) or ".")
        room = f"{human_bytes(st.f_bavail * st.f_frsize)} free there"
    except OSError:
        room = "free space unknown"
    return DiskFull(errno.ENOSPC, f"no space left on device writing {path} ({room})", path)


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
def _discarded_on_error(tmp: str, target: str) -> Iterator[None]:
    """Remove the temp file `tmp` if the block fails (the target stays untouched), then re-raise;
    a failure for want of room as `DiskFull` naming `target`."""
    try:
        yield
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(e) and not isinstance(e, DiskFull):
            raise disk_full_error(target) from e
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
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as e:
        if is_disk_full(e):  # no inode left
            raise disk_full_error(path) from e
        raise
    with _discarded_on_error(tmp, path):
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
    with _discarded_on_error(tmp, os.fspath(target)):
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    fsync_dir(os.path.dirname(os.fspath(target)))
