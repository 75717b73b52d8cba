"""Reading stages of the loader: planned pieces of shards -> records of raw bytes (.jpg and .cls).

Plain generators: ``read_pieces`` yields the records of a worker's pieces in order, for the
shuffle and batching stages (``batching``) to consume. The tar is read by the project's one tar
reader (``imagenet_shards.pipeline.format.tar``) in its lenient mode.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from typing import Iterable, Iterator, NamedTuple

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import Shard
from imagenet_shards.pipeline.format.tar import HashingReader, iter_tar
from imagenet_shards.train.loader.plan import Piece

_FIELDS = ("jpg", "webp", "cls")  # what a sample needs (its image: .jpg, or .webp in an adopted set such as
# timm's imagenet-w21-webp-wds; decoded through Pillow); other members (.json) are skipped, not read


class Record(NamedTuple):
    """One sample's raw bytes (None where the member is missing) and the (redacted) URL of its shard."""

    key: str
    url: str
    jpg: bytes | None  # the image's bytes (.jpg or .webp)
    cls: bytes | None


def _image(fields: dict) -> bytes | None:
    return fields.get("jpg") if "jpg" in fields else fields.get("webp")


def open_url(url: str, mode: str = "rb"):
    """Open a local path or a URL (file://, http(s)://, s3://, gs://...) as a file object.

    Every read of the loader goes through here, and from here through ``imagenet_shards.pipeline.storage``,
    the project's one I/O layer: plain paths use the builtin ``open`` (no layer in between); a
    remote file retries transient errors (5xx, resets, timeouts) with backoff and resumes at the
    byte where it stopped, so a shard's samples come out exactly once; a permanent error (404,
    403) raises at once, naming the (redacted) URL."""
    return storage.open_url(url, mode)


def read_shard(url: str, start: int = 0, stop: int | None = None, *, opener=open_url,
               exclude: frozenset = frozenset()) -> Iterator[Record]:
    """Samples ``[start, stop)`` of one shard, as records of raw bytes (.jpg and .cls only).

    Streams the tar (works for non-seekable URLs); samples before ``start`` and other members are
    passed over (by seek where the file can), not read into memory. Samples whose key is in
    ``exclude`` (the manifest left them out) are passed over the same way and not counted: positions
    count the other samples only. A damaged tar, or a shard that ends before ``stop``, disagrees
    with the manifest: ValueError naming the URL (redacted, as everywhere the URL is shown) and
    saying to run audit-shards."""
    index, key, fields, skip = -1, None, {}, False  # index: position of the last sample not excluded
    shown = storage.redact(url)

    def want(k: str, ext: str) -> bool:  # the member's sample is the current one (same key) or the next
        if ext not in _FIELDS:
            return False
        if k == key:
            return not skip and index >= start
        return k not in exclude and index + 1 >= start

    with opener(url, "rb") as f, _mapped(f) as source:
        for m in iter_tar(source, want=want, strict=False, where=shown):
            if m.key != key:
                if key is not None and not skip and start <= index:
                    yield Record(key, shown, _image(fields), fields.get("cls"))
                key, fields, skip = m.key, {}, m.key in exclude
                if not skip:
                    index += 1
                    if stop is not None and index >= stop:
                        return
            if m.data is not None:
                fields[m.ext] = m.data
        if key is not None and not skip and start <= index:
            yield Record(key, shown, _image(fields), fields.get("cls"))
        index += 1
    if stop is not None and index < stop:
        raise ValueError(f"{shown}: the manifest says it holds at least {stop} samples but it has {index}; "
                         f"run audit-shards on this shard set")


@contextlib.contextmanager
def _mapped(f):
    """A reader over an mmap of ``f`` when it is a local file, else ``f`` itself (streamed).

    Why: measured on the benchmark VM, reading a shard through the file object costs a kernel copy
    into a buffer and a copy out of it per member; from the page cache mapped into the process each
    record is one copy, and the members skipped are never touched (docs/benchmarks.md)."""
    try:
        mm = (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
              if f.tell() == 0 and os.fstat(f.fileno()).st_size else None)
    except (AttributeError, OSError, ValueError):  # not a local file (fsspec, a pipe...), or mmap refused
        mm = None
    if mm is None:
        yield f
        return
    try:
        yield HashingReader.over(mm)
    finally:
        mm.close()


def read_pieces(shards: list[Shard], pieces: Iterable[Piece], *, opener=open_url) -> Iterator[Record]:
    """Records of the planned pieces, in order."""
    for p in pieces:
        shard = shards[p.shard]
        yield from read_shard(shard.url, p.start, p.stop, opener=opener, exclude=shard.exclude)
