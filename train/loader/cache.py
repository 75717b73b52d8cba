"""A local copy of remote shards for multi-epoch training: fetch each shard once, read it from disk after.

``ShardCache(dir, max_bytes).open(url)`` is an opener for ``imagenet_shards.train.loader.reading.read_shard``: a local path is
opened directly (nothing to cache); a remote shard is served from the cache folder when it is
there, else downloaded whole (through ``imagenet_shards.pipeline.storage.fs``, so with retries and resume) to a temp
file, renamed into place, and opened. The cache holds at most ``max_bytes``: after each download
the least recently used shards (by mtime, refreshed on every hit) are deleted until it fits. A shard
larger than the whole cache is streamed instead. Several loader workers, and several ranks on one
machine, can share a folder: downloads are atomic renames and eviction tolerates races. Use a local
disk (the temp-file names carry the process id, which means nothing across machines).
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shutil

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.storage.atomic import TEMP_SUFFIX, atomic_open, temp_owner

log = logging.getLogger(__name__)

_COPY_BLOCK = 4 << 20


def default_cache_bytes(folder: str) -> int:
    """90% of what the cache folder's disk could hold (free space plus what the cache holds already)."""
    os.makedirs(folder, exist_ok=True)
    held = sum(e.stat().st_size for e in os.scandir(folder) if e.is_file())
    return int(0.9 * (shutil.disk_usage(folder).free + held))


class ShardCache:
    """LRU cache of remote shards in `folder`, at most `max_bytes` in all (see the module docstring)."""

    def __init__(self, folder: str, max_bytes: int | None = None):
        self.folder = os.path.abspath(folder)
        os.makedirs(self.folder, exist_ok=True)
        self.max_bytes = default_cache_bytes(self.folder) if max_bytes is None else int(max_bytes)
        if self.max_bytes <= 0:
            raise ValueError(f"cache size must be positive, got {self.max_bytes}")

    def path_for(self, url: str) -> str:
        """Where `url` is cached: a hash of the URL (without query string or user info) + its file name."""
        bare = storage.redact(url).split("?", 1)[0].replace("***@", "")
        digest = hashlib.sha256(bare.encode()).hexdigest()[:20]
        return os.path.join(self.folder, f"{digest}-{posixpath.basename(bare)}")

    def open(self, url: str, mode: str = "rb"):
        """A file object for the shard at `url`, from the cache when possible (an opener for read_shard)."""
        if not storage.is_remote(url):
            return storage.open_url(url, mode)
        path = self.path_for(url)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            pass
        else:
            try:
                os.utime(path)  # most recently used
            except OSError:
                pass
            return f
        src = storage.open_url(url, "rb")
        size = getattr(src, "size", None)
        if size is not None and size > self.max_bytes:
            log.info("%s (%d bytes) is larger than the shard cache (%d bytes): streaming it",
                     storage.redact(url), size, self.max_bytes)
            return src
        with src, atomic_open(path, fsync=False) as dst:  # a cache: losing it in a crash costs a download
            shutil.copyfileobj(src, dst, _COPY_BLOCK)
            got = dst.tell()
            if size is not None and got != size:
                raise storage.StorageError(f"{storage.redact(url)}: fetched {got} of {size} bytes")
        self.evict(keep=path)
        return open(path, "rb")

    def entries(self) -> list[tuple[float, int, str]]:
        """(mtime, bytes, path) of every cached shard; temp files of dead processes are removed."""
        out = []
        for e in os.scandir(self.folder):
            try:
                if not e.is_file():
                    continue
                if e.name.startswith(".") and e.name.endswith(TEMP_SUFFIX):
                    owner = temp_owner(e.path)
                    if owner is not None and not _alive(owner):
                        os.unlink(e.path)  # a download that was killed
                    continue
                st = e.stat()
                out.append((st.st_mtime, st.st_size, e.path))
            except (OSError, ValueError):
                continue
        return out

    def evict(self, keep: str | None = None) -> int:
        """Delete least recently used shards until the cache fits in max_bytes; returns bytes freed."""
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        freed = 0
        for _, size, path in entries:
            if total - freed <= self.max_bytes:
                break
            if path == keep:
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:  # another worker evicted it first
                pass
            except OSError:
                continue
            freed += size
        if freed:
            log.debug("shard cache %s: evicted %d bytes", self.folder, freed)
        return freed

    def size(self) -> int:
        return sum(size for _, size, _ in self.entries())


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["ShardCache", "default_cache_bytes"]
