"""The one place that opens DATA: local paths, file:// and (once their fsspec backends are installed) remote URLs.

Everything that reads a shard set goes through these five functions, so a new backend (s3, gcs,
http) plugs in here without touching the callers. A URL is a string; a plain path is a local file.
Errors are the backend's OSError subclasses (FileNotFoundError for a missing object).
"""

from __future__ import annotations

import os
import posixpath

from fsspec.core import url_to_fs


def _has_protocol(url: str) -> bool:
    return "://" in str(url)


def _fs(url):
    return url_to_fs(str(url))


def open_url(url, mode: str = "rb"):
    """Open `url` and return a file object (use it as a context manager)."""
    if not _has_protocol(url):
        return open(url, mode)  # the common case, with no layer in between
    fs, path = _fs(url)
    return fs.open(path, mode)


def join(base, rel: str) -> str:
    """`base`/`rel` for a local path or a URL (URLs always use '/')."""
    base = str(base)
    if _has_protocol(base):
        return posixpath.join(base.rstrip("/") + "/", rel)
    return os.path.join(base, rel)


def exists(url) -> bool:
    """True if `url` names an existing file or directory."""
    if not _has_protocol(url):
        return os.path.exists(url)
    fs, path = _fs(url)
    return fs.exists(path)


def isdir(url) -> bool:
    """True if `url` names a directory (or, on object stores, a prefix holding objects)."""
    if not _has_protocol(url):
        return os.path.isdir(url)
    fs, path = _fs(url)
    return fs.isdir(path)


def size(url) -> int:
    """Size of the file at `url` in bytes; FileNotFoundError if there is none."""
    if not _has_protocol(url):
        return os.path.getsize(url)
    fs, path = _fs(url)
    return int(fs.size(path))


def listdir(url) -> list[str]:
    """Names (not paths) of the entries directly under `url`, sorted; FileNotFoundError if it is not there."""
    if not _has_protocol(url):
        return sorted(os.listdir(url))
    fs, path = _fs(url)
    return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))


__all__ = ["exists", "isdir", "join", "listdir", "open_url", "size"]
