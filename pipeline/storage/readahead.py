"""Read-ahead over a known sequence of remote objects: parallel ranged GETs, a bounded window ahead of the reader.

Why: a bucket answers the first byte of a request in 20-80 ms and gives one connection ~50-100
MB/s, while one loader worker decodes ~100 MB/s of JPEG. A single sequential stream per worker
pays a first-byte wait per shard and is capped at one connection's bandwidth. Here the objects a
worker will read (the shards of its epoch plan, in order) are cut into ``chunk_bytes`` ranges, and
up to ``ahead`` of them are fetched at once, on ``ahead`` connections, ahead of the reader and
across object boundaries: the next shard's first chunks are in flight while this one is decoded.
A chunk takes RTT + chunk/bandwidth; ``ahead`` of them in parallel give, at RTT 80 ms and 50 MB/s,
6 x 4 MiB / (80 ms + 84 ms) ~ 150 MB/s per worker, and at 20 ms / 100 MB/s ~ 400 MB/s: the
defaults need no tuning in that range. Memory: at most ``(ahead + 1) x chunk_bytes`` per sequence
(28 MiB by default): the chunks in flight or fetched, and the one being read (plus, for a moment,
ranges already on the wire for a reader that closed early: they finish and are dropped).

Each chunk is one ranged read through the one retry loop (``retry.call``): a transient error or a
short body (a connection cut mid-way) fetches that range again, so the bytes handed out are the
object's bytes, once each, in order; a permanent error (404, 403) is raised when the reader reaches
that object, named. ``ReadAhead.open(i)`` is a file object over object i (read, seek forward and
back, tell, size) for the tar reader; closing it early (a piece that stops mid-shard) drops its
remaining chunks and moves the window on to the next object.
"""

from __future__ import annotations

import collections
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from imagenet_shards.pipeline.storage.retry import call, redact


@dataclass(frozen=True)
class ReadAheadPolicy:
    """``ahead`` ranged reads of ``chunk_bytes`` in flight at most, per sequence (see the module docstring)."""

    chunk_bytes: int = 4 << 20
    ahead: int = 6

    @property
    def max_bytes(self) -> int:
        return (self.ahead + 1) * self.chunk_bytes


@dataclass
class ReadCounters:
    """What a sequence's reads cost: bytes fetched, ranged requests made (retries included), seconds
    the reader waited for a chunk that was not there yet, and the most bytes held for read-ahead."""

    bytes: int = 0
    requests: int = 0
    wait_s: float = 0.0
    held_high: int = 0


class _ShortRead(ConnectionError):
    """A ranged read returned fewer bytes than asked: the connection was cut (retried)."""


class ReadAhead:
    """Reads the objects ``[(url, size), ...]`` in that order (see the module docstring).

    ``fetch(url, start, end) -> bytes`` reads one range (default: ``storage.fs.read_range``);
    ``counters`` is updated as it goes (pass one to share it across sequences)."""

    def __init__(self, objects, policy: ReadAheadPolicy | None = None, *, fetch=None,
                 counters: ReadCounters | None = None):
        self.objects = [(str(u), int(s)) for u, s in objects]
        self.policy = policy or ReadAheadPolicy()
        if fetch is None:
            from imagenet_shards.pipeline.storage.fs import read_range as fetch
        self._fetch = fetch
        self.counters = counters if counters is not None else ReadCounters()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: collections.deque = collections.deque()  # (object, start, end, future), in order
        self._next = (0, 0)  # the next range to schedule: object index, byte offset
        self._held = 0      # bytes of the pending ranges
        self._current = 0   # bytes of the chunk the reader holds
        self._closed = False

    # ------------------------------------------------------------------ scheduling

    def _schedule(self) -> None:
        """Start ranged reads until ``ahead`` are pending or every object is scheduled."""
        if self._closed:
            return
        obj, off = self._next
        while len(self._pending) < self.policy.ahead and obj < len(self.objects):
            url, size = self.objects[obj]
            if off >= size:
                obj, off = obj + 1, 0
                continue
            end = min(size, off + self.policy.chunk_bytes)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.policy.ahead, thread_name_prefix="readahead")
            future = self._pool.submit(self._read, url, off, end)
            self._pending.append((obj, off, end, future))
            self._hold(end - off)
            off = end
        self._next = (obj, off)

    def _read(self, url: str, start: int, end: int) -> bytes:
        def once():
            with self._lock:
                self.counters.requests += 1
            data = self._fetch(url, start, end)
            if len(data) != end - start:
                raise _ShortRead(f"got {len(data)} of {end - start} bytes of range {start}-{end}")
            return data

        data = call(once, url, position=lambda: start)
        with self._lock:
            self.counters.bytes += len(data)
        return data

    def _hold(self, n: int) -> None:
        self._held += n
        self.counters.held_high = max(self.counters.held_high, self._held + self._current)

    def _forget(self, item) -> None:
        _, start, end, future = item
        future.cancel()  # one already running finishes in its thread and is thrown away
        self._held -= end - start

    def _drop_until(self, obj: int) -> None:
        """Forget every pending range of objects before `obj` (read to the end, or closed early)."""
        while self._pending and self._pending[0][0] < obj:
            self._forget(self._pending.popleft())
        if self._next[0] < obj:
            self._next = (obj, 0)

    def chunk(self, obj: int, start: int) -> bytes:
        """The chunk of object `obj` that begins at byte `start` (a multiple of chunk_bytes)."""
        self._drop_until(obj)
        while self._pending and self._pending[0][0] == obj and self._pending[0][2] <= start:
            self._forget(self._pending.popleft())  # passed over by a seek
        head = self._pending[0] if self._pending else None
        if head is None or head[0] != obj or head[1] != start:
            # not where the window stands (a seek back, or a reader of an object already passed):
            # start the window again from here
            while self._pending:
                self._forget(self._pending.popleft())
            self._next = (obj, start)
        self._schedule()
        item = self._pending.popleft()
        _, a, b, future = item
        self._held -= b - a
        self._current = b - a  # the reader holds it until it asks for the next one
        self._schedule()
        if not future.done():
            t0 = time.perf_counter()
            try:
                return future.result()
            finally:
                self.counters.wait_s += time.perf_counter() - t0
        return future.result()

    def done_with(self, obj: int) -> None:
        """The reader of `obj` closed: its ranges not yet read are dropped, the window moves on."""
        self._current = 0
        self._drop_until(obj + 1)
        self._schedule()

    def open(self, obj: int) -> "ChunkReader":
        """A file object over object `obj` (an index into the sequence)."""
        self._drop_until(obj)
        self._schedule()
        return ChunkReader(self, obj)

    def close(self) -> None:
        self._closed = True
        for _, _, _, future in self._pending:
            future.cancel()
        self._pending.clear()
        self._held = 0
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ChunkReader(io.RawIOBase):
    """A read-only file over one object of a `ReadAhead`, served from its chunks."""

    def __init__(self, ahead: ReadAhead, obj: int):
        super().__init__()
        self._ahead, self._obj = ahead, obj
        self.url, self._size = ahead.objects[obj]
        self.pos = 0
        self._chunk, self._chunk_at = b"", 0

    @property
    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.pos
        elif whence == io.SEEK_END:
            offset += self._size
        if offset < 0:
            raise ValueError("negative seek position")
        self.pos = offset
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed file")
        if n is None or n < 0:
            n = self._size - self.pos
        n = min(n, self._size - self.pos)
        parts = []
        while n > 0:
            at = self.pos - self._chunk_at
            if not 0 <= at < len(self._chunk):
                step = self._ahead.policy.chunk_bytes
                self._chunk_at = self.pos - self.pos % step
                self._chunk = b""  # let go of the old one before waiting for the next
                self._chunk = self._ahead.chunk(self._obj, self._chunk_at)
                at = self.pos - self._chunk_at
            part = self._chunk[at:at + n]
            parts.append(part)
            self.pos += len(part)
            n -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._chunk = b""
            self._ahead.done_with(self._obj)
        super().close()

    def __repr__(self) -> str:
        return f"ChunkReader({redact(self.url)!r})"


__all__ = ["ChunkReader", "ReadAhead", "ReadAheadPolicy", "ReadCounters"]
