"""Reading stages of the loader: planned pieces of shards -> records of raw bytes (.jpg and .cls).

Plain generators: ``read_pieces`` yields the records of a worker's pieces in order, for the
shuffle and batching stages (``batching``) to consume. The tar is read by the project's one tar
reader (``imagenet_shards.pipeline.format.tar``) in its lenient mode.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterable, Iterator, NamedTuple

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import Shard
from imagenet_shards.pipeline.format.tar import iter_tar
from imagenet_shards.train.loader.plan import Piece

_FIELDS = ("jpg", "cls")  # what a sample needs; other members (.json) are skipped, not read


class Record(NamedTuple):
    """One sample's raw bytes (None where the member is missing), the (redacted) URL of its shard,
    and where it sits: the shard's index in the split and the sample's index in the shard (-1 when
    not known). (shard, index, copy) seeds the sample's random crop, so a crop does not depend on
    which worker reads the sample, or on what was read before it."""

    key: str
    url: str
    jpg: bytes | None
    cls: bytes | None
    shard: int = -1
    index: int = -1
    copy: int = 0   # repeated augmentation: which of the sample's copies in the epoch this is


class _Skipped:
    """Stands in for a sample a resumed epoch already consumed: its bytes are not read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()


def open_url(url: str, mode: str = "rb"):
    """Open a local path or a URL (file://, http(s)://, s3://, gs://...) as a file object.

    Every read of the loader goes through here, and from here through ``imagenet_shards.pipeline.storage``,
    the project's one I/O layer: plain paths use the builtin ``open`` (no layer in between); a
    remote file retries transient errors (5xx, resets, timeouts) with backoff and resumes at the
    byte where it stopped, so a shard's samples come out exactly once; a permanent error (404,
    403) raises at once, naming the (redacted) URL."""
    return storage.open_url(url, mode)


def read_shard(url: str, start: int = 0, stop: int | None = None, *, opener=open_url, shard: int = -1,
               skip: Callable[[int], bool] | None = None) -> Iterator[Record]:
    """Samples ``[start, stop)`` of one shard, as records of raw bytes (.jpg and .cls only).

    Streams the tar (works for non-seekable URLs); samples before ``start`` and other members are
    passed over (by seek where the file can), not read into memory. A sample whose index ``skip``
    accepts comes out as ``SKIPPED``, its bytes passed over the same way. A damaged tar, or a shard
    that ends before ``stop``, disagrees with the manifest: ValueError naming the URL (redacted, as
    everywhere the URL is shown) and saying to run audit-shards."""
    index, key, fields = -1, None, {}
    shown = storage.redact(url)

    def want(k: str, ext: str) -> bool:  # the member's sample is `index` (same key) or the next one
        i = index + (k != key)
        return ext in _FIELDS and i >= start and not (skip is not None and skip(i))

    def record():
        if skip is not None and skip(index):
            return SKIPPED
        return Record(key, shown, fields.get("jpg"), fields.get("cls"), shard, index)

    with opener(url, "rb") as f:
        for m in iter_tar(f, want=want, strict=False, where=shown):
            if m.key != key:
                if key is not None and start <= index:
                    yield record()
                index += 1
                if stop is not None and index >= stop:
                    return
                key, fields = m.key, {}
            if m.data is not None:
                fields[m.ext] = m.data
        if key is not None and start <= index:
            yield record()
        index += 1
    if stop is not None and index < stop:
        raise ValueError(f"{shown}: the manifest says it holds at least {stop} samples but it has {index}; "
                         f"run audit-shards on this shard set")


def read_pieces(shards: list[Shard], pieces: Iterable[Piece], *, opener=open_url,
                skip: Collection[int] = ()) -> Iterator[Record]:
    """Records of the planned pieces, in order. ``skip``: positions in that sequence of samples
    (0 = the first piece's first sample) that come out as ``SKIPPED`` without being read; a piece
    skipped whole is not even opened."""
    pos = 0
    for p in pieces:
        n = p.stop - p.start
        if skip and all(pos + i in skip for i in range(n)):
            yield from (SKIPPED for _ in range(n))
        else:
            offset = pos - p.start
            yield from read_shard(shards[p.shard].url, p.start, p.stop, opener=opener, shard=p.shard,
                                  skip=(lambda i, o=offset: o + i in skip) if skip else None)
        pos += n
