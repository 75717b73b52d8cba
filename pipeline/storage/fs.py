"""The one I/O layer: every read and write of DATA and OUT, local or remote, goes through here.

A URL is a string; a plain path (or ``file://``) is a local file and takes the direct path, with no
layer in between. Anything else goes to fsspec (s3fs for ``s3://``, gcsfs for ``gs://``, aiohttp
for ``http(s)://``), with:
- storage options per protocol (``set_options``; the CLIs' ``--storage-option KEY=VALUE``), on top
  of what the backend reads itself (AWS_ENDPOINT_URL, AWS_PROFILE, instance roles, ...);
- retries with backoff for transient errors (HTTP 5xx/408/429, connection resets, timeouts);
  permanent ones (404, 403, ...) are raised at once, naming the URL;
- a reader that survives transient errors mid-file: it reopens and continues at the byte where it
  stopped, so callers never see a duplicated or missing byte;
- ``redact`` for every URL that goes into a message: no user:password@, no signed-URL secrets
  (these three live in imagenet_shards.pipeline.storage.retry and are re-exported here);
- fork hooks that keep forked workers from breaking the parent's connections (``forks``).
Credentials are never taken from anywhere but the backend's standard sources and the options.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import re
from dataclasses import dataclass

from imagenet_shards.pipeline.storage import forks
from imagenet_shards.pipeline.storage.atomic import write_atomic
from imagenet_shards.pipeline.storage.retry import (RetryPolicy, RetryingReader, StorageError, call, is_transient,
                                                    named_error, redact, retry_policy, set_retry_policy)

UNLISTABLE = ("http", "https")  # plain HTTP has no listing (an autoindex page is not one)
READ_ONLY = ("http", "https")  # nor uploads: fsspec's HTTP backend can only read
S3_PROTOCOLS = ("s3", "s3a")
GCS_PROTOCOLS = ("gs", "gcs")
UPLOAD_PART_BYTES = 64 * 2**20  # S3 multipart part size we upload with (so we know its composite ETag)


# ----------------------------------------------------------------------------- URLs and options

def protocol(url) -> str:
    """'s3', 'https', ... or '' for a plain local path."""
    url = str(url)
    return url.split("://", 1)[0].lower() if "://" in url else ""


def local_path(url) -> str | None:
    """The local path `url` names (a plain path or file://...), or None for a remote URL."""
    url = str(url)
    p = protocol(url)
    if not p:
        return url
    if p in ("file", "local"):
        return url.split("://", 1)[1]
    return None


def is_remote(url) -> bool:
    return local_path(url) is None


def can_write(url) -> bool:
    """Whether the store behind `url` accepts writes (plain HTTP does not)."""
    return protocol(url) not in READ_ONLY


def can_list(url) -> bool:
    """Whether the store behind `url` can list a folder (plain HTTP cannot)."""
    return protocol(url) not in UNLISTABLE


_OPTIONS: dict[str, dict] = {}


def parse_storage_options(pairs) -> dict:
    """['endpoint_url=http://h:9000', 'anon=true', 'client_kwargs.region_name=eu'] -> nested dict.

    Values that read as JSON scalars (true, false, null, numbers) are converted; dotted keys nest.
    ValueError for an item without '='."""
    out: dict = {}
    for item in pairs or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--storage-option takes KEY=VALUE, got {item.split('=')[0]!r}")
        try:
            parsed = json.loads(value)
            if isinstance(parsed, (dict, list, str)):
                parsed = value
        except ValueError:
            parsed = value
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parsed
    return out


def set_options(url_or_protocol: str, options: dict | None) -> None:
    """Storage options (fsspec keyword arguments) for every URL of this protocol, in this process
    and the worker processes it forks. `url_or_protocol`: 's3' or any URL of that scheme."""
    proto = protocol(url_or_protocol) or str(url_or_protocol).lower()
    if options:
        _OPTIONS[proto] = dict(options)
    else:
        _OPTIONS.pop(proto, None)


def add_storage_option(parser) -> None:
    """--storage-option KEY=VALUE (repeatable) on an argparse parser; every CLI that takes a URL has it."""
    import argparse

    def pair(text: str) -> str:
        if "=" not in text or text.startswith("="):
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text.split('=')[0]!r}")
        return text

    parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", type=pair,
        help="fsspec option for URLs, e.g. endpoint_url=http://minio:9000 (MinIO, R2, Ceph), profile=NAME, "
             "anon=true, client_kwargs.region_name=eu-west-1; repeatable. Credentials come from the standard "
             "sources (AWS_* environment, profiles, instance roles): see docs/storage.md")


def apply_storage_options(url, pairs) -> None:
    """Use the --storage-option pairs for every URL with the protocol of `url` (none for a local path)."""
    options = parse_storage_options(pairs)
    if options and is_remote(url):
        set_options(url, options)


def options_snapshot() -> dict:
    """The current options, to hand to a spawned process (`restore_options` there)."""
    return {k: dict(v) for k, v in _OPTIONS.items()}


def restore_options(snapshot: dict) -> None:
    """Make `snapshot` (from `options_snapshot`) the current options, replacing all others."""
    _OPTIONS.clear()
    _OPTIONS.update(snapshot)


forks.install()  # before any connection exists that a forked child could break

HTTP_CONNECT_TIMEOUT_S, HTTP_READ_TIMEOUT_S = 30, 60


def _http_defaults(options: dict) -> dict:
    """aiohttp's only default timeout is 5 minutes for a whole request: a stalled connection would
    hold a loader worker that long. Bound the connect and each read instead (then retry), unless
    the caller set a timeout of their own."""
    client = dict(options.get("client_kwargs") or {})
    if "timeout" not in client:
        import aiohttp

        client["timeout"] = aiohttp.ClientTimeout(total=None, sock_connect=HTTP_CONNECT_TIMEOUT_S,
                                                  sock_read=HTTP_READ_TIMEOUT_S)
    return {**options, "client_kwargs": client}


def fs_for(url):
    """(fsspec filesystem, path) for a URL, with this protocol's storage options."""
    from fsspec.core import url_to_fs

    url = str(url)
    proto = protocol(url)
    options = _OPTIONS.get(proto, {})
    if proto in UNLISTABLE:
        options = _http_defaults(options)
    if proto in GCS_PROTOCOLS and options.get("endpoint_url"):
        return _gcs_at_endpoint(url, options)
    return url_to_fs(url, **options)


def _gcs_at_endpoint(url: str, options: dict):
    """gcsfs's plain filesystem for a custom endpoint (an emulator, a private gateway).

    Since 2026.x gcsfs's default class (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT``, on unless set to
    false) asks Google's Storage Control API, over gRPC, what kind of bucket it talks to. A custom
    endpoint does not serve that API: every call stalled ~60 s before falling back (measured against
    gcp-storage-emulator). Plain objects need none of it, so with an endpoint we use the core class
    (same as setting the variable to false); against Google itself gcsfs's default stays."""
    from gcsfs.core import GCSFileSystem

    fs = GCSFileSystem(**options)
    return fs, fs._strip_protocol(url)


def join(base, rel: str) -> str:
    """`base`/`rel` for a local path or a URL (URLs always use '/')."""
    base = str(base)
    if "://" in base:
        return posixpath.join(base.rstrip("/") + "/", rel)
    return os.path.join(base, rel)


def _open_fresh(url):
    fs, path = fs_for(url)
    fs.invalidate_cache(path)
    return fs.open(path, "rb")


def open_url(url, mode: str = "rb"):
    """Open `url` and return a file object (use it as a context manager).

    Local: the builtin ``open``. Remote "rb": a `RetryingReader`. Permanent errors (missing object,
    no access) raise at once as FileNotFoundError/PermissionError naming the redacted URL."""
    path = local_path(url)
    if path is not None:
        return open(path, mode)
    if mode == "rb":
        return RetryingReader(url, lambda: _open_fresh(url))
    fs, p = fs_for(url)
    return fs.open(p, mode)


def read_range(url, start: int, end: int) -> bytes:
    """Bytes [start, end) of the file at `url`: one ranged read (a GET with a Range header), not
    retried here: ``readahead`` retries each range through ``call``, which also names the URL."""
    path = local_path(url)
    if path is not None:
        with open(path, "rb") as f:
            return os.pread(f.fileno(), end - start, start)
    fs, p = fs_for(url)
    return fs.cat_file(p, start=start, end=end)


def read_bytes(url) -> bytes:
    """The whole object/file at `url`."""
    with open_url(url, "rb") as f:
        return f.read()


def _ask(url, local_test, remote_method: str) -> bool:
    """A yes/no question about `url`: os.path's answer locally, else the filesystem's (fresh, retried)."""
    path = local_path(url)
    if path is not None:
        return local_test(path)
    fs, p = fs_for(url)
    fs.invalidate_cache(p)
    return bool(call(lambda: getattr(fs, remote_method)(p), url))


def exists(url) -> bool:
    """True if `url` names an existing file or directory."""
    return _ask(url, os.path.exists, "exists")


def isdir(url) -> bool:
    """True if `url` names a directory (or, on object stores, a prefix holding objects)."""
    return _ask(url, os.path.isdir, "isdir")


def size(url) -> int:
    """Size of the file at `url` in bytes; FileNotFoundError if there is none."""
    return info(url).size


def listdir(url) -> list[str]:
    """Names (not paths) of the entries directly under `url`, sorted; FileNotFoundError if it is not there."""
    path = local_path(url)
    if path is not None:
        return sorted(os.listdir(path))
    return sorted(list_details(url))


def list_details(url) -> dict[str, "ObjectInfo"]:
    """{name: ObjectInfo} of the entries directly under `url` (one listing call on object stores)."""
    path = local_path(url)
    if path is not None:
        return {n: ObjectInfo(os.path.getsize(os.path.join(path, n)) if os.path.isfile(os.path.join(path, n))
                              else 0) for n in os.listdir(path)}
    fs, p = fs_for(url)
    fs.invalidate_cache(p)
    entries = call(lambda: fs.ls(p, detail=True), url, action="list")
    return {posixpath.basename(e["name"].rstrip("/")): _object_info(e) for e in entries}


# ----------------------------------------------------------------------------- object metadata

_MD5_HEX = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class ObjectInfo:
    """What the store says about an object: size, its ETag (S3/GCS/HTTP) and an md5 where the store
    vouches for one (an S3 single-part ETag, GCS md5Hash, HTTP Content-MD5)."""

    size: int
    etag: str | None = None
    md5: str | None = None


def _object_info(d: dict) -> ObjectInfo:
    etag = d.get("ETag") or d.get("etag") or None
    etag = etag.strip('"').strip() if isinstance(etag, str) else None
    md5 = None
    b64 = d.get("md5Hash") or d.get("Content-MD5")
    if isinstance(b64, str):
        try:
            md5 = base64.b64decode(b64).hex()
        except ValueError:
            md5 = None
    elif etag and _MD5_HEX.fullmatch(etag) and "md5Hash" not in d and "mimetype" not in d:
        md5 = etag  # S3's ETag of a single-part upload (not for SSE-KMS/SSE-C objects: see docs/storage.md)
    size = d.get("size")
    return ObjectInfo(int(size) if size is not None else -1, etag, md5)


def info(url) -> ObjectInfo:
    """Size (and ETag/md5 where the store has them) of the file at `url`; FileNotFoundError if none."""
    path = local_path(url)
    if path is not None:
        return ObjectInfo(os.path.getsize(path))
    fs, p = fs_for(url)
    fs.invalidate_cache(p)
    return _object_info(call(lambda: fs.info(p), url))


def multipart_etag(path: str, part_bytes: int | None = None) -> str:
    """The ETag S3 gives an object uploaded from local `path` in parts of `part_bytes` (default: what
    `put_file` uses): md5 of the parts' md5 digests, '-', the number of parts."""
    part_bytes = part_bytes or UPLOAD_PART_BYTES
    digests = []
    with open(path, "rb") as f:
        while part := f.read(part_bytes):
            digests.append(hashlib.md5(part).digest())
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def uploads_in_parts(size: int) -> bool:
    """Whether `put_file` uploads an object of `size` bytes to S3 in parts (s3fs: from 2 parts on)."""
    return size >= 2 * UPLOAD_PART_BYTES


# ----------------------------------------------------------------------------- writing

def write_bytes(url, data: bytes) -> None:
    """Write `data` to `url` atomically: local temp file + fsync + rename; remote: one PUT (atomic per
    object on object stores), retried on transient errors."""
    path = local_path(url)
    if path is not None:
        write_atomic(path, data)
        return
    fs, p = fs_for(url)
    call(lambda: fs.pipe_file(p, data), url, action="write")


def put_file(local: str, url) -> None:
    """Upload local file `local` to `url` (retried on transient errors). On S3 a file from
    2 x UPLOAD_PART_BYTES on goes up as a multipart upload in parts of that size; either way the
    object appears only when complete (an interrupted upload leaves none)."""
    fs, p = fs_for(url)
    kw = {"chunksize": UPLOAD_PART_BYTES} if protocol(url) in S3_PROTOCOLS else {}
    call(lambda: fs.put_file(local, p, **kw), url, action="upload to")


def makedirs(url) -> None:
    """Create the folder `url` (and parents) where folders exist; nothing on object stores, where
    a prefix needs no creating (and creating a bucket by accident is worse than an error)."""
    path = local_path(url)
    if path is not None:
        os.makedirs(path, exist_ok=True)
    elif protocol(url) not in S3_PROTOCOLS + ("gs", "gcs", "az", "abfs", "abfss"):
        fs, p = fs_for(url)
        call(lambda: fs.makedirs(p, exist_ok=True), url, action="create")


def remove(url, recursive: bool = False) -> None:
    """Delete the file (or with `recursive`, the folder/prefix) at `url`; no error if it is not there."""
    import shutil

    path = local_path(url)
    if path is not None:
        if os.path.isdir(path) and recursive:
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
        return
    fs, p = fs_for(url)

    def rm():
        try:
            fs.rm(p, recursive=recursive)
        except FileNotFoundError:
            pass
    call(rm, url, action="delete")
    fs.invalidate_cache(p)


__all__ = ["ObjectInfo", "READ_ONLY", "RetryPolicy", "RetryingReader", "StorageError", "add_storage_option",
           "apply_storage_options", "call", "can_list", "can_write", "exists", "fs_for", "info", "is_remote", "is_transient",
           "isdir", "join", "list_details", "listdir", "local_path", "makedirs", "multipart_etag", "named_error",
           "open_url", "options_snapshot", "parse_storage_options", "protocol", "put_file", "read_bytes", "read_range",
           "redact",
           "remove", "restore_options", "retry_policy", "set_options", "set_retry_policy", "size",
           "uploads_in_parts", "write_bytes"]
