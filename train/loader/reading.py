"""Reading stages of the loader: planned pieces of shards -> records of raw bytes (image, .cls, .json).

Plain generators: ``read_pieces`` yields the records of a worker's pieces in order, for the
shuffle and batching stages (``batching``) to consume. The tar is read by the project's one tar
reader (``imagenet_shards.pipeline.format.tar``) in its lenient mode.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from typing import Callable, Collection, Iterable, Iterator, NamedTuple

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.digest import hex_of, new_hash
from imagenet_shards.pipeline.format.manifest import Shard
from imagenet_shards.pipeline.format.tar import HashingReader, iter_tar
from imagenet_shards.train.loader.plan import Piece

_FIELDS = ("jpg", "webp", "yuv420", "cls", "json")  # what a sample needs: its image (.jpg; .webp in an adopted
# set such as timm's imagenet-w21-webp-wds, decoded through Pillow; .yuv420 in a pixel set, whose size is in
# its .json); other members are skipped, not read


class Record(NamedTuple):
    """One sample's raw bytes (None where the member is missing), the (redacted) URL of its shard,
    and where it sits: the shard's index in the split and the sample's index in the shard (-1 when
    not known). (shard, index, copy) seeds the sample's random crop, so a crop does not depend on
    which worker reads the sample, or on what was read before it."""

    key: str
    url: str
    jpg: bytes | memoryview | None  # the image's bytes (.jpg, .webp or .yuv420; a view of a mapped shard: views)
    cls: bytes | None
    shard: int = -1
    index: int = -1
    copy: int = 0   # repeated augmentation: which of the sample's copies in the epoch this is
    bad: str | None = None  # why the sample cannot be used without reading it (its shard failed its digest)
    meta: bytes | None = None  # the .json (a pixel sample's width and height)


class _Skipped:
    """Stands in for a sample a resumed epoch already consumed: its bytes are not read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()


_IMAGES = ("jpg", "webp", "yuv420")


def _image(fields: dict) -> bytes | None:
    return next((fields[ext] for ext in _IMAGES if ext in fields), None)


def open_url(url: str, mode: str = "rb"):
    """Open a local path or a URL (file://, http(s)://, s3://, gs://...) as a file object.

    Every read of the loader goes through here, and from here through ``imagenet_shards.pipeline.storage``,
    the project's one I/O layer: plain paths use the builtin ``open`` (no layer in between); a
    remote file retries transient errors (5xx, resets, timeouts) with backoff and resumes at the
    byte where it stopped, so a shard's samples come out exactly once; a permanent error (404,
    403) raises at once, naming the (redacted) URL."""
    return storage.open_url(url, mode)


BAD_SHARDS = ("stop", "skip")  # what a shard whose digest disagrees with the manifest does (docs/loader.md)


class ShardDigestError(ValueError):
    """A shard's bytes do not hash to the digest its manifest entry records; the message is one line
    naming the (redacted) URL and saying to run audit-shards."""


def read_shard(url: str, start: int = 0, stop: int | None = None, *, opener=open_url, shard: int = -1,
               exclude: frozenset = frozenset(), skip: Callable[[int], bool] | None = None,
               digest: tuple[str, str] | None = None, bad_shards: str = "stop",
               check_streamed: bool = True, views: bool = False) -> Iterator[Record]:
    """Samples ``[start, stop)`` of one shard, as records of raw bytes (the image, .cls and .json only).

    Streams the tar (works for non-seekable URLs); samples before ``start`` and other members are
    passed over (by seek where the file can), not read into memory. Samples whose key is in
    ``exclude`` (the manifest left them out) are passed over the same way and not counted: positions
    count the other samples only. A sample whose position ``skip`` accepts comes out as ``SKIPPED``,
    its bytes passed over the same way. A damaged tar, or a shard that ends before ``stop``,
    disagrees with the manifest: ValueError naming the URL (redacted, as everywhere the URL is
    shown) and saying to run audit-shards.

    ``digest`` ((algorithm, hex), the manifest's: ``format.digest.shard_check``): every byte of the
    file is hashed, the ones passed over included, and a mismatch is a ``ShardDigestError``. A
    local file (mapped) is hashed before its first record comes out; a stream is hashed as it is
    read, so with ``bad_shards="stop"`` the error comes at its end, after its records, and with
    ``"skip"`` its records are held until the hash is known (memory: one shard's .jpg/.cls bytes).
    ``"skip"``: a shard that fails comes out as records whose ``bad`` says why (the batching stage
    counts them as bad samples, named), ``SKIPPED`` ones staying as they are. ``check_streamed=False``
    (a piece that reads only part of the shard): only a mapped local file is checked, since a stream
    would have to fetch the rest of the shard for it.

    ``views`` (the loader's): a mapped local file's image members come as read-only memoryviews of
    the mapping instead of copies (``_mapped``); .cls and .json stay bytes."""
    if bad_shards not in BAD_SHARDS:
        raise ValueError(f"bad_shards must be one of {BAD_SHARDS}, got {bad_shards!r}")
    shown = storage.redact(url)
    with opener(url, "rb") as f, _mapped(f, views) as (source, mapped):
        if digest is None:
            yield from _records(source, shown, start, stop, shard, exclude, skip)
            return
        if mapped is not None:
            why = _mismatch(digest, hex_of(digest[0], mapped), shown)
            if why is None:
                yield from _records(source, shown, start, stop, shard, exclude, skip)
                return
            if bad_shards == "stop":
                for _ in _records(source, shown, start, stop, shard, exclude, skip, read=False):
                    pass  # a damaged tar header, with its offset, is the more precise message: raised here
                raise ShardDigestError(why)
            yield from _as_bad(_records(source, shown, start, stop, shard, exclude, skip, read=False), why,
                               shown, shard, start, stop, skip)
            return
        if not check_streamed:
            yield from _records(source, shown, start, stop, shard, exclude, skip)
            return
        hashing = _Digesting(f, digest[0])
        held = [] if bad_shards == "skip" else None
        try:
            for rec in _records(hashing, shown, start, stop, shard, exclude, skip):
                if held is None:
                    yield rec
                else:
                    held.append(rec)
        except ValueError:  # a damaged tar: with "skip", the digest says whether to skip it or raise
            if held is None:
                raise
            hashing.drain()
            if _mismatch(digest, hashing.hexdigest(), shown) is None:
                raise
            held = None  # its records are cut short: the planned positions stand in (``_as_bad``)
        hashing.drain()
        why = _mismatch(digest, hashing.hexdigest(), shown)
        if why is None:
            yield from held or ()
            return
        if bad_shards == "stop":
            raise ShardDigestError(why)
        yield from _as_bad(held or (), why, shown, shard, start, stop, skip)


def _mismatch(digest: tuple[str, str], got: str, shown: str) -> str | None:
    name, want = digest
    if got == want:
        return None
    return (f"{shown}: its bytes do not match the manifest ({name} {got}, manifest says {want}): the shard "
            f"changed after it was written; run audit-shards on this shard set")


def _as_bad(records: Iterable, why: str, shown: str, shard: int, start: int, stop: int | None,
            skip: Callable[[int], bool] | None) -> Iterator:
    """`records` (SKIPPED or not) as bad records saying `why`; where they end early (a damaged tar
    cut them short), the rest of the planned positions ``[start, stop)``, keyed ``URL#position``."""
    i = start
    try:
        for rec in records:
            yield rec if rec is SKIPPED else rec._replace(jpg=None, cls=None, meta=None, bad=why)
            i += 1
    except ValueError:
        pass
    for j in range(i, stop if stop is not None else i):
        yield SKIPPED if skip is not None and skip(j) else Record(f"{shown}#{j}", shown, None, None, shard, j, bad=why)


def _records(source, shown: str, start: int, stop: int | None, shard: int, exclude: frozenset,
             skip: Callable[[int], bool] | None, read: bool = True) -> Iterator[Record]:
    """``read_shard``'s records from an open source; ``read=False``: no member's bytes are read."""
    index, key, fields, out = -1, None, {}, False  # index: position of the last sample not excluded

    def want(k: str, ext: str) -> bool:  # the member's sample is the current one (same key) or the next
        if not read or ext not in _FIELDS:
            return False
        if k == key:
            return not out and index >= start and not (skip is not None and skip(index))
        return k not in exclude and index + 1 >= start and not (skip is not None and skip(index + 1))

    def record():
        if skip is not None and skip(index):
            return SKIPPED
        return Record(key, shown, _image(fields), fields.get("cls"), shard, index, meta=fields.get("json"))

    for m in iter_tar(source, want=want, strict=False, where=shown):
        if m.key != key:
            if key is not None and not out and start <= index:
                yield record()
            key, fields, out = m.key, {}, m.key in exclude
            if not out:
                index += 1
                if stop is not None and index >= stop:
                    return
        if m.data is not None:
            fields[m.ext] = m.data if m.ext in _IMAGES or type(m.data) is bytes else bytes(m.data)
    if key is not None and not out and start <= index:
        yield record()
    index += 1
    if stop is not None and index < stop:
        raise ValueError(f"{shown}: the manifest says it holds at least {stop} samples but it has {index}; "
                         f"run audit-shards on this shard set")


class _Digesting:
    """A file that hashes every byte read through it; not seekable, so the tar reader reads the
    members it passes over too (they must be hashed) instead of seeking past them."""

    def __init__(self, f, algorithm: str):
        self._f, self._hash = f, new_hash(algorithm)

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._hash.update(data)
        return data

    def seekable(self) -> bool:
        return False

    def drain(self) -> None:
        """Read (and hash) what is left: padding after the end-of-archive marker, or a piece's tail."""
        while self.read(1 << 20):
            pass

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


@contextlib.contextmanager
def _mapped(f, views: bool = False):
    """(reader, mapping): a reader over an mmap of ``f`` and the mmap when it is a local file, else
    (``f`` itself, streamed, None). ``views``: the reader hands out large members as memoryviews of
    the mapping (``HashingReader.over``), which then stays mapped until the last of them is gone.

    Why: measured on the benchmark VM, reading a shard through the file object costs a kernel copy
    into a buffer and a copy out of it per member; from the page cache mapped into the process each
    record is one copy, and the members skipped are never touched (docs/benchmarks.md). With views
    not even that copy: the decoder reads the page cache (a 167 KB pixel sample: ~12 µs of copy
    and the allocator's churn saved per image, docs/benchmarks.md "Pixel shards per core")."""
    try:
        mm = (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
              if f.tell() == 0 and os.fstat(f.fileno()).st_size else None)
    except (AttributeError, OSError, ValueError):  # not a local file (fsspec, a pipe...), or mmap refused
        mm = None
    if mm is None:
        yield f, None
        return
    reader = HashingReader.over(mm, views)
    try:
        yield reader, mm
    finally:
        reader.release()
        try:
            mm.close()
        except BufferError:  # records still hold views of its members: unmapped when the last one goes
            pass


def read_pieces(shards: list[Shard], pieces: Iterable[Piece], *, opener=open_url,
                skip: Collection[int] = (), readahead: storage.ReadAheadPolicy | None = None,
                shard_bytes: list[int | None] | None = None,
                counters: storage.ReadCounters | None = None, digests: list | None = None,
                bad_shards: str = "stop", views: bool = False) -> Iterator[Record]:
    """Records of the planned pieces, in order. ``skip``: positions in that sequence of samples
    (0 = the first piece's first sample) that come out as ``SKIPPED`` without being read; a piece
    skipped whole is not even opened.

    ``readahead`` (with ``shard_bytes``, each shard's size from the manifest): the remote shards of
    the pieces to be opened are read through one ``storage.ReadAhead`` (parallel ranged reads, a
    bounded window running ahead across shards), instead of ``opener``; ``counters`` adds up what
    that cost. Shards that are local, or of unknown size, still go through ``opener``.

    ``digests`` (per shard, ``format.digest.shard_check``'s (algorithm, hex) or None): each shard
    read is checked against it as ``read_shard`` says, ``bad_shards`` deciding what a mismatch
    does; a piece that reads part of a shard is checked only where the file is local. ``views``:
    as ``read_shard`` says."""
    pieces = list(pieces)
    plan, pos = [], 0  # (piece, offset of its first sample in the sequence, read it?)
    for p in pieces:
        n = p.stop - p.start
        plan.append((p, pos, not (skip and all(pos + i in skip for i in range(n)))))
        pos += n
    ahead, slot = None, {}
    if readahead is not None and shard_bytes is not None:
        objects = []
        for i, (p, _, read) in enumerate(plan):
            url, size = shards[p.shard].url, shard_bytes[p.shard]
            if read and size is not None and storage.is_remote(url):
                slot[i] = len(objects)
                objects.append((url, size))
        if objects:
            ahead = storage.ReadAhead(objects, readahead, counters=counters)
    try:
        for i, (p, offset, read) in enumerate(plan):
            if not read:
                yield from (SKIPPED for _ in range(p.stop - p.start))
                continue
            shard = shards[p.shard]
            open_it = opener if i not in slot else (lambda url, mode, k=slot[i]: ahead.open(k))
            whole = p.start == 0 and p.stop == shard.num_samples
            yield from read_shard(shard.url, p.start, p.stop, opener=open_it, shard=p.shard, exclude=shard.exclude,
                                  skip=(lambda j, o=offset - p.start: o + j in skip) if skip else None,
                                  digest=digests[p.shard] if digests is not None else None,
                                  bad_shards=bad_shards, check_streamed=whole, views=views)
    finally:
        if ahead is not None:
            ahead.close()
