"""imagenet_shards.pipeline.storage.readahead: parallel ranged reads ahead of the reader, bounded,
exact through faults; against an in-memory store (a fetch function) and the static HTTP server."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.storage.readahead import ReadAhead, ReadAheadPolicy
from tests.fixtures.servers import FaultPlan, fault_proxy, serve_http

pytestmark = pytest.mark.usefixtures("fast_retries")

SMALL = ReadAheadPolicy(chunk_bytes=1000, ahead=3)


class Store:
    """Objects in memory; `fetch` serves ranges, counting them, at most `ahead` at once (asserted)."""

    def __init__(self, objects: dict[str, bytes], delay_s: float = 0.0):
        self.objects, self.delay_s = objects, delay_s
        self.calls, self.active, self.most_active = [], 0, 0
        self.lock = threading.Lock()

    def fetch(self, url, start, end):
        with self.lock:
            self.calls.append((url, start, end))
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.delay_s)
            return self.objects[url][start:end]
        finally:
            with self.lock:
                self.active -= 1


def blobs(n=4, size=4321):
    return {f"s3://b/{i}.tar": os.urandom(size + i) for i in range(n)}


def read_all(ahead, i, block=777):
    with ahead.open(i) as f:
        return b"".join(iter(lambda: f.read(block), b""))


def test_every_object_comes_out_exact_in_order_with_a_bounded_window():
    objects = blobs()
    store = Store(objects, delay_s=0.002)
    with ReadAhead(list((u, len(d)) for u, d in objects.items()), SMALL, fetch=store.fetch) as ahead:
        got = [read_all(ahead, i) for i in range(len(objects))]
    assert got == list(objects.values())
    # each byte fetched once, in ranges of at most chunk_bytes, at most `ahead` at once
    assert sorted(store.calls) == sorted({c for c in store.calls}) and all(e - s <= 1000 for _, s, e in store.calls)
    assert sum(e - s for _, s, e in store.calls) == sum(map(len, objects.values()))
    assert store.most_active <= SMALL.ahead
    c = ahead.counters
    assert c.bytes == sum(map(len, objects.values())) and c.requests == len(store.calls)
    assert 0 < c.held_high <= SMALL.max_bytes


def test_the_next_object_is_fetched_while_this_one_is_read():
    objects = blobs(n=2, size=1500)  # 2 chunks each: with ahead=3 the next object's first is in flight
    store = Store(objects)
    with ReadAhead(list((u, len(d)) for u, d in objects.items()), SMALL, fetch=store.fetch) as ahead:
        with ahead.open(0) as f:
            f.read(10)
            deadline = time.monotonic() + 5
            while ("s3://b/1.tar", 0, 1000) not in store.calls and time.monotonic() < deadline:
                time.sleep(0.001)
            assert ("s3://b/1.tar", 0, 1000) in store.calls


def test_seeks_and_early_close_read_only_what_is_asked():
    objects = blobs(n=3, size=9000)
    urls = list(objects)
    store = Store(objects)
    with ReadAhead([(u, len(objects[u])) for u in urls], SMALL, fetch=store.fetch) as ahead:
        with ahead.open(0) as f:
            assert f.size == len(objects[urls[0]]) and f.seekable()
            f.seek(5500)
            assert f.read(600) == objects[urls[0]][5500:6100] and f.tell() == 6100
            f.seek(-100, io.SEEK_CUR)
            assert f.read(50) == objects[urls[0]][6000:6050]
            f.seek(10, io.SEEK_SET)  # back: the window starts again there
            assert f.read(5) == objects[urls[0]][10:15]
            f.seek(0, io.SEEK_END)
            assert f.read(10) == b""
        # object 0 closed early: 1 is read whole, exact
        assert read_all(ahead, 1) == objects[urls[1]]
        assert read_all(ahead, 2) == objects[urls[2]]


def test_transient_faults_are_retried_and_permanent_ones_raised_when_reached():
    objects = blobs(n=3)
    urls = list(objects)
    tries = {}

    def flaky(url, start, end):
        tries[(url, start)] = tries.get((url, start), 0) + 1
        if url == urls[2]:
            raise FileNotFoundError("NoSuchKey")
        if tries[(url, start)] == 1 and start % 2000 == 0:
            raise ConnectionResetError("reset by peer")
        if tries[(url, start)] <= 2 and start % 2000 == 1000:
            return objects[url][start:end - 7]  # a body cut short
        return objects[url][start:end]

    with ReadAhead([(u, len(objects[u])) for u in urls], SMALL, fetch=flaky) as ahead:
        assert read_all(ahead, 0) == objects[urls[0]]
        assert read_all(ahead, 1) == objects[urls[1]]  # object 2's 404 was fetched ahead: not raised yet
        with pytest.raises(FileNotFoundError, match=r"cannot read s3://b/2.tar: not found"):
            read_all(ahead, 2)
    assert ahead.counters.requests == sum(tries.values())


def test_over_http_through_faults_the_bytes_are_exact(tmp_path):
    data = {f"{i}.bin": os.urandom(300_000 + i) for i in range(3)}
    for name, blob in data.items():
        (tmp_path / name).write_bytes(blob)
    plan = FaultPlan(error_every=4, reset_every=3, delay_every=0)
    with serve_http(tmp_path) as base, fault_proxy(base, plan) as proxy:
        objects = [(f"{proxy}/{name}", len(blob)) for name, blob in data.items()]
        with ReadAhead(objects, ReadAheadPolicy(chunk_bytes=64 << 10, ahead=4)) as ahead:
            got = [read_all(ahead, i, block=100_000) for i in range(3)]
    assert got == list(data.values()) and plan.faults >= 3
    assert storage.read_range(str(tmp_path / "1.bin"), 5, 9) == data["1.bin"][5:9]


def test_the_loaders_pieces_read_ahead_are_the_pieces_read_in_one_stream(tmp_path):
    """read_pieces with read-ahead gives exactly the records of plain streaming: pieces that start
    and stop mid-shard, a piece skipped whole (never opened) and skipped samples (a resumed epoch)."""
    import json

    from imagenet_shards.train import loader as D
    from tests.fixtures.loader import write_shard_set

    local = write_shard_set(tmp_path / "set", val=45, shard_samples=10, size=(40, 30))
    m = json.loads((local / "manifest.json").read_text())
    pieces = [D.Piece(0, 3, 10), D.Piece(2, 0, 10), D.Piece(1, 0, 7), D.Piece(4, 0, 5), D.Piece(3, 2, 9)]
    skip = set(range(7, 17)) | {20, 21, 30}  # all of the second piece, and a few more
    with serve_http(local) as base:
        shards = D.split_shards(m, base, "val")
        sizes = [s["bytes"] for s in m["splits"]["val"]["shards"]]
        counters = storage.ReadCounters()
        ahead = list(D.read_pieces(shards, pieces, skip=skip, readahead=ReadAheadPolicy(chunk_bytes=4096, ahead=3),
                                   shard_bytes=sizes, counters=counters))
        plain = list(D.read_pieces(shards, pieces, skip=skip))
    assert ahead == plain and len(ahead) == sum(p.stop - p.start for p in pieces)
    assert sum(r is D.SKIPPED for r in ahead) == len(skip)
    assert counters.requests > len(pieces) and counters.held_high <= 4 * 4096
