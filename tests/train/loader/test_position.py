"""The loader's position: the rest plan's invariants, exact resumption at any batch without decoding
what was consumed, the rest of an epoch under another layout, and the data fingerprint."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import fingerprint, position
from imagenet_shards.train.loader.plan import epoch_sequence, sample_ids
from imagenet_shards.train.loader.reading import SKIPPED
from tests.fixtures.loader import damage_samples, index_of, sample_key, write_shard_set

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

C, RES = 7, 16


def _loader(data, *, batch_size=4, **kw):
    return D.make_loader(data, "train", batch_size, res=RES, val_resize=20, val_crop=16, **kw)


def _batches(ld) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in ld]


def _keys(batch) -> list[str]:
    return [sample_key("train", i, i % C) for i in (index_of(img) for img in batch[0])]


# ----------------------------------------------------------------------------- pure: the rest of an epoch

@pytest.mark.parametrize("sizes", [[50], [7] * 7 + [1], [3, 0, 5, 9, 1, 2, 30]])
@pytest.mark.parametrize("world,workers,bs", [(1, 1, 4), (2, 3, 4), (3, 2, 5), (4, 4, 1), (2, 8, 16)])
def test_rest_plan_covers_every_remaining_sample_once(sizes, world, workers, bs):
    n = sum(sizes)
    rng = np.random.default_rng(len(sizes) * 100 + world * 10 + workers)
    for fraction in (0.0, 0.3, 0.9, 1.0):
        remaining = rng.random(n) >= fraction
        todo = int(remaining.sum())
        try:
            plans = [D.rest_plan(sizes, remaining, batch_size=bs, rank=r, world_size=world, workers=workers,
                                 seed=3, epoch=1) for r in range(world)]
        except D.PlanError as e:
            assert "ranks cannot each get" in str(e)
            shares = [todo // world + (i < todo % world) for i in range(world)]
            assert min(shares) < -(-max(shares) // bs)  # refused only when it really cannot be shared
            continue
        steps = {sum(len(p.batch_sizes) for p in rank) for rank in plans}
        assert len(steps) == 1  # every rank the same number of steps
        assert all(1 <= b <= bs for rank in plans for p in rank for b in p.batch_sizes)
        got = np.concatenate([sample_ids(sizes, p.pieces) for rank in plans for p in rank])
        assert len(got) == todo and sorted(got.tolist()) == np.flatnonzero(remaining).tolist()
        for rank in plans:  # batch j is worker j % workers's: the counts follow that round-robin
            counts = [len(p.batch_sizes) for p in rank]
            assert counts == sorted(counts, reverse=True) and counts[0] - counts[-1] <= 1
            assert all(sum(q.stop - q.start for q in p.pieces) == p.num_samples for p in rank)


def test_consumed_stream_is_the_shuffle_on_positions():
    items = [f"rec{i}" for i in range(300)]
    shuffled = list(D.shuffle_buffer(items, 64, random.Random(9)))
    plan = D.WorkerPlan((D.Piece(0, 0, 300),), (4,) * 75)
    for taken in (0, 1, 99, 300):
        assert [items[i] for i in position.consumed_stream(plan, 300, 64, 9, taken)] == shuffled[:taken]
    # repeated augmentation: the same stream, copies included, on positions as on records
    (ra,) = D.epoch_plan([300], batch_size=4, rank=0, world_size=1, workers=1, train=True, repeats=3)
    n = sum(p.stop - p.start for p in ra.pieces)
    stream = list(position.worker_stream(items[:n], ra, 64, 9))
    assert [items[i] for i in position.consumed_stream(ra, n, 64, 9, 50)] == stream[:50]
    order = position.consumed_stream(ra, n, 64, 9, 50)
    skip = position.skippable(ra, n, order)
    assert skip <= set(order) and len(set(order) - skip) <= 1  # at most one sample straddles the cut


def test_epoch_sequence_is_the_plan_order():
    sizes = [3, 0, 5, 9, 1]
    plans = D.epoch_plan(sizes, batch_size=2, rank=0, world_size=1, workers=1, train=True, seed=4, epoch=2)
    seq = epoch_sequence(sizes, 4, 2)
    assert sorted(seq.tolist()) == list(range(18))
    assert sample_ids(sizes, plans[0].pieces).tolist() == seq[:len(sample_ids(sizes, plans[0].pieces))].tolist()


def test_fingerprint_is_order_independent_and_counts_repeats():
    a = fingerprint.of_keys(["x", "y", "z"])
    assert a == fingerprint.of_keys(["z", "x", "y"]) == fingerprint.combine(fingerprint.of_keys(["y"]),
                                                                             fingerprint.of_keys(["z", "x"]))
    assert fingerprint.of_keys(["x", "x"]) != fingerprint.of_keys(["x"]) != fingerprint.EMPTY
    assert fingerprint.as_record(a)["samples"] == 3 and len(fingerprint.as_record(a)["hash"]) == 16


# ----------------------------------------------------------------------------- real shards: exact resumption

@pytest.fixture(scope="module")
def starved(tmp_path_factory):
    """30 train samples in 3 shards, 8 undecodable: with batch 4 and 1 worker the spares run out,
    batch 6 is topped up from itself and batch 7 from batch 6 (the whole spares mechanism)."""
    root = tmp_path_factory.mktemp("starved") / "out"
    bad = [sample_key("train", i, i % C) for i in (1, 4, 8, 13, 17, 21, 26, 29)]
    return str(write_shard_set(root, train=30, shard_samples=10, num_classes=C, size=(32, 24), corrupt_keys=bad))


@pytest.mark.timeout(120)
def test_resume_at_every_batch_is_exact_with_spares_and_repeats(starved):
    straight_ld = _loader(starved, workers=0, seed=2, epoch=1)
    straight = _batches(straight_ld)
    assert straight_ld.stats["duplicated"] > 4 and straight_ld.stats["bad_samples"] == 8  # the starved zone
    total_fp = straight_ld.position()["fingerprint"]
    for cut in range(len(straight)):
        first = _loader(starved, workers=0, seed=2, epoch=1)
        for i, _ in enumerate(first if cut else ()):
            if i + 1 == cut:
                break
        saved = first.position(cut)
        again = _loader(starved, workers=0, seed=2, epoch=1)
        assert again.resume(first.plan_state(), [saved]) == {"exact": True, "samples_left": None}
        assert len(again) == len(straight) - cut
        rest = _batches(again)
        assert len(rest) == len(straight) - cut
        for (x, y), (x2, y2) in zip(straight[cut:], rest):
            assert torch.equal(x, x2) and torch.equal(y, y2), cut
        end = again.position()
        assert end["fingerprint"] == total_fp and end["bad_samples"] == 8 and end["batches"] == len(straight)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("interpolation", ["bilinear", "random"])
def test_resume_with_workers_skips_without_decoding(tmp_path, interpolation):
    """Two workers, cut after 5 batches; the samples of those batches are then made undecodable on
    disk: the resumed epoch still equals the uninterrupted one, so it never decoded them. Also with
    timm's random bilinear/bicubic choice, drawn from each sample's own stream."""
    data = str(write_shard_set(tmp_path / "out", train=48, shard_samples=9, num_classes=C, size=(32, 24)))
    kw = dict(workers=2, seed=5, epoch=3, shuffle_buffer=16, interpolation=interpolation)
    straight = _batches(_loader(data, **kw))
    first = _loader(data, **kw)
    head = []
    for x, y in first:
        head.append((x.clone(), y.clone()))
        if len(head) == 5:
            break
    saved, plan = first.position(5), first.plan_state()
    assert [w[0] for w in saved["workers"]] == [3, 2]  # batches 0, 2, 4 came from worker 0
    damage_samples(data, corrupt_keys=[k for b in head for k in _keys(b)])
    again = _loader(data, **kw)
    again.resume(plan, [saved])
    rest = _batches(again)
    assert len(head) + len(rest) == len(straight) == 12
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(straight, head + rest))
    assert again.stats["bad_samples"] == 0 and again.position()["samples"] == 48


@pytest.mark.timeout(180)
def test_another_layout_sees_every_unseen_sample_once(tmp_path):
    """2 ranks x 2 workers cut mid-epoch, continued by 1 rank (in-process) and by 3 ranks x 1 worker:
    what came before plus the rest is every sample of the epoch exactly once, and the combined
    fingerprint is that of all keys."""
    n = 46
    data = str(write_shard_set(tmp_path / "out", train=n, shard_samples=7, num_classes=C, size=(32, 24)))
    every = fingerprint.of_keys(sample_key("train", i, i % C) for i in range(n))
    seen, positions, plan = [], [], None
    for rank in range(2):
        ld = _loader(data, workers=2, rank=rank, world_size=2, seed=1, epoch=4)
        for i, batch in enumerate(ld):
            seen += [index_of(img) for img in batch[0]]
            if i + 1 == 3:
                break
        positions.append(ld.position(3))
        plan = ld.plan_state()
    for world, workers in ((1, 0), (3, 1)):
        got, fps = list(seen), []
        lds = [_loader(data, workers=workers, rank=r, world_size=world, seed=1, epoch=4) for r in range(world)]
        for ld in lds:
            summary = ld.resume(plan, positions)
            assert summary["exact"] is False and summary["samples_left"] == n - 2 * 3 * 4
        counts = {len(ld) for ld in lds}
        assert len(counts) == 1  # equal steps on every new rank
        for ld in lds:
            got += [index_of(img) for x, _ in ld for img in x]
            fps.append(ld.position()["fingerprint"])
        assert sorted(got) == list(range(n)), (world, workers)
        assert fingerprint.combine(*fps) == every


def test_a_position_from_other_settings_is_refused(tmp_path):
    data = str(write_shard_set(tmp_path / "out", train=20, shard_samples=10, num_classes=C, size=(32, 24)))
    ld = _loader(data, workers=0, seed=1)
    next(iter(ld))
    plan, saved = ld.plan_state(), ld.position(1)
    with pytest.raises(D.PlanError, match="batch_size 4, this loader has 5"):
        _loader(data, workers=0, seed=1, batch_size=5).resume(plan, [saved])
    with pytest.raises(D.PlanError, match="seed 1, this loader has 2"):
        _loader(data, workers=0, seed=2).resume(plan, [saved])


def test_val_fingerprint_is_every_key_once(tmp_path):
    data = str(write_shard_set(tmp_path / "out", val=23, shard_samples=5, num_classes=C, size=(24, 32)))
    fps = []
    for rank in range(3):
        ld = D.make_loader(data, "val", 4, workers=0, rank=rank, world_size=3, val_resize=20, val_crop=16)
        list(ld)
        fps.append(ld.stats["fingerprint"])
    assert fingerprint.combine(*fps) == fingerprint.of_keys(sample_key("val", i, i % C) for i in range(23))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_resume_with_repeated_augmentation_is_exact(tmp_path, workers):
    """x3 copies of each sample, in a row: cut anywhere (also between two copies of a sample), the
    rest of the epoch is the uninterrupted one. (The copies' crops differ: see the next test.)"""
    data = str(write_shard_set(tmp_path / "out", train=40, shard_samples=9, num_classes=C, size=(32, 24)))
    kw = dict(workers=workers, seed=3, epoch=1, repeats=3, shuffle_buffer=8)
    straight = _batches(_loader(data, **kw))
    ids = [index_of(img) for x, _ in straight for img in x]
    assert any(a == b for a, b in zip(ids, ids[1:]))  # copies in a row, so some batch boundary splits them
    for cut in (1, 3, len(straight) - 1):
        first = _loader(data, **kw)
        for i, _ in enumerate(first):
            if i + 1 == cut:
                break
        again = _loader(data, **kw)
        again.resume(first.plan_state(), [first.position(cut)])
        rest = _batches(again)
        assert len(rest) == len(straight) - cut
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(straight[cut:], rest)), cut
    with pytest.raises(D.PlanError, match="repeated augmentation"):
        _loader(data, **{**kw, "workers": 3}).resume(first.plan_state(), [first.position(cut)])


def test_copies_of_a_sample_get_their_own_crop_streams():
    from imagenet_shards.train.loader.batching import expand_counts, sample_rng, with_counts
    rec = D.Record("n0_1", "u", b"", b"0", shard=2, index=5)
    out = list(expand_counts(with_counts([rec, rec._replace(index=6)], [2, 3], first=1)))
    assert [(r.index, r.copy) for r in out] == [(5, 1), (5, 2), (6, 0), (6, 1), (6, 2)]
    draws = {tuple(sample_rng(7, r).random() for _ in range(3)) for r in out}
    assert len(draws) == 5  # five emissions, five streams
    assert sample_rng(7, out[0]).random() == sample_rng(7, out[0]).random()  # each one reproducible


def test_skipped_positions_count_past_samples_the_manifest_excludes(tmp_path):
    """A resumed worker's stand-ins and a manifest's excluded samples in one shard: positions (what
    `skip` names and `Record.index` says, the crop seed) count the samples not excluded only."""
    data = write_shard_set(tmp_path / "out", train=12, shard_samples=12, num_classes=C, size=(24, 16))
    url = str(next((data / "train").glob("*.tar")))
    keys = [r.key for r in D.read_shard(url)]
    gone = frozenset({keys[0], keys[4], keys[5]})
    rest = [k for k in keys if k not in gone]
    got = list(D.read_shard(url, 1, 8, exclude=gone, shard=3, skip=lambda i: i in (2, 3, 6)))
    assert [r if r is SKIPPED else (r.key, r.index, r.shard) for r in got] == [
        (rest[1], 1, 3), SKIPPED, SKIPPED, (rest[4], 4, 3), (rest[5], 5, 3), SKIPPED, (rest[7], 7, 3)]
