"""Repeated augmentation spread over the micro-batches of an optimizer step (``plan.spread_plan``):
with fewer ranks than copies and gradient accumulation, each (rank, micro-batch slot) is a rank of
the repeated plan, so no forward holds two copies of one sample and, where the copies divide the
slots, a sample's copies all fall in one step. Plan-level over W x A layouts, then the real loader
(resume mid-step, DataLoader workers, two gloo ranks)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch

from tests.fixtures.loader import index_of, run_gloo_ranks, write_shard_set
from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import plan as P
from imagenet_shards.train.loader import position

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
R = 4
SIZES = [700, 300, 1100]  # 2,100 samples: 2,048 after torchvision's rounding to 256


def rank_batches(sizes, *, rank, world, workers, accumulate, bs, buffer=50, seed=1, epoch=2) -> list[list[int]]:
    """The sample ids of one rank's batches in the order the loader yields them, from the plans alone:
    each stream's shuffle run on ids (``position.worker_stream``, the buffer shared among a worker's
    streams as ``ShardDataset`` shares it), batch j taken from stream ``j % len(plans)``."""
    plans = D.epoch_plan(sizes, batch_size=bs, rank=rank, world_size=world, workers=workers, train=True,
                         seed=seed, epoch=epoch, repeats=R, accumulate=accumulate)
    per_worker = len(plans) // workers
    streams = []
    for t, p in enumerate(plans):
        ids = P.sample_ids(sizes, p.pieces).tolist()
        seed_t = position.stream_seed(seed, epoch, rank, t, p)
        out = list(position.worker_stream(ids, p, -(-buffer // per_worker), seed_t))
        cuts = [sum(p.batch_sizes[:k]) for k in range(len(p.batch_sizes) + 1)]
        streams.append([out[a:b] for a, b in zip(cuts, cuts[1:])])
    total = sum(len(s) for s in streams)
    return [streams[j % len(plans)][j // len(plans)] for j in range(total)]


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("world,accumulate", [(1, 8), (2, 4), (4, 2), (3, 3), (8, 1)])
def test_copies_go_to_different_micro_batches_of_one_step(world, accumulate, workers):
    bs = 4
    ranks = [rank_batches(SIZES, rank=r, world=world, workers=workers, accumulate=accumulate, bs=bs)
             for r in range(world)]
    counts = [len(b) for b in ranks]
    # equal on every rank; the optimizer steps of the unspread plan (its floor(nb / A)), all of them
    nb = (sum(SIZES) // 256 * 256 // world) // bs
    assert counts == [nb // accumulate * accumulate] * world
    assert all(len(b) == bs for batches in ranks for b in batches)
    where = defaultdict(list)  # sample -> [(step, rank, slot)] of its copies
    for r, batches in enumerate(ranks):
        for j, batch in enumerate(batches):
            assert len(set(batch)) == len(batch), (r, j)  # no forward holds two copies of a sample
            for i in batch:
                where[i].append((j // accumulate, r, j % accumulate))
    assert max(len(w) for w in where.values()) <= R
    # each copy in its own (rank, micro-batch slot): a slot is a rank of torchvision's sampler
    assert all(len({(r, a) for _, r, a in w}) == len(w) for w in where.values())
    placement = P.ra_placement(world_size=world, repeats=R, accumulate=accumulate)
    assert placement["one_copy_per_forward"] and placement["slots"] == (world * accumulate if world < R else world)
    if placement["copies_in_one_step"]:  # 8 slots, 4 copies: every sample R times, all in one step
        assert all(len(w) == R and len({s for s, _, _ in w}) == 1 for w in where.values())
    else:  # 3 x 3 = 9 slots: distinct forwards, but the copies spread over steps (docs/loader.md)
        assert (world, accumulate) == (3, 3)
        assert any(len({s for s, _, _ in w}) > 1 for w in where.values())
    if world >= R:  # nothing changes
        for r in range(world):
            kw = dict(batch_size=bs, rank=r, world_size=world, workers=workers, train=True, seed=1, epoch=2, repeats=R)
            assert D.epoch_plan(SIZES, accumulate=accumulate, **kw) == D.epoch_plan(SIZES, **kw)


@pytest.mark.parametrize("world,accumulate", [(1, 8), (2, 4), (3, 3)])
def test_what_an_epoch_shows_does_not_depend_on_the_worker_count(world, accumulate):
    """The samples an epoch shows, with their counts (what data_fingerprint hashes), and each rank's
    steps: the same for 1, 2, 3 and 8 workers (only the order within a slot's stream changes)."""
    shown = []
    for workers in (1, 2, 3, 8):
        ranks = [rank_batches(SIZES, rank=r, world=world, workers=workers, accumulate=accumulate, bs=4)
                 for r in range(world)]
        shown.append((Counter(i for b in ranks for batch in b for i in batch), [len(b) for b in ranks]))
    assert all(s == shown[0] for s in shown)


def test_fewer_slots_than_copies_and_the_plain_plan():
    """1 x 2 slots for 4 copies: each slot shows its samples twice in a row (torchvision on 2 GPUs), both
    slots the same samples in the same step; without repeats accumulate changes nothing."""
    ranks = rank_batches(SIZES, rank=0, world=1, workers=1, accumulate=2, bs=4)
    for s in range(len(ranks) // 2):
        a, b = ranks[2 * s], ranks[2 * s + 1]
        assert sorted(a) == sorted(b) and max(Counter(a).values()) == 2
    kw = dict(batch_size=4, rank=0, world_size=1, workers=2, train=True, seed=1)
    assert D.epoch_plan(SIZES, accumulate=8, **kw) == D.epoch_plan(SIZES, **kw)
    assert P.ra_placement(world_size=2, repeats=R, accumulate=1) == {
        "repeats": R, "over": "ranks", "slots": 2, "one_copy_per_forward": False, "copies_in_one_step": True}
    assert P.ra_placement(world_size=8, repeats=1, accumulate=4) is None


def test_streams_of_one_group_shuffle_alike_and_crop_apart():
    plans = D.epoch_plan(SIZES, batch_size=4, rank=0, world_size=1, workers=2, train=True, seed=1, repeats=R,
                         accumulate=8)
    assert len(plans) == 8 and len({p.stream for p in plans}) == 8
    groups = defaultdict(list)
    for p in plans:
        groups[(p.shuffle_key, p.stream[1])].append(p)
    for same in groups.values():  # virtual ranks reading the same range: same pieces, same shuffle seed
        assert len(same) == R and all(p.pieces == same[0].pieces for p in same)  # 8 slots: 2 groups of 4
        assert len({position.stream_seed(1, 0, 0, 9, p) for p in same}) == 1
        assert len({position.crop_seed(1, 0, position.copies_rank(p, 0)) for p in same}) == R


# ----------------------------------------------------------------------------- through the loader

N, C, B = 96, 4, 4


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return str(write_shard_set(tmp_path_factory.mktemp("ramicro") / "out", train=N, shard_samples=11,
                               num_classes=C, size=(32, 24)))


def _loader(data, **kw):
    return D.make_loader(data, "train", B, res=16, repeats=R, seed=4, epoch=1, shuffle_buffer=12, **kw)


def _batches(ld):
    return [(x.clone(), y.clone()) for x, y in ld]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers,accumulate", [(0, 4), (3, 4)])
def test_loader_steps_hold_each_sample_once_per_forward_and_resume_mid_step(shards, workers, accumulate):
    """One rank, the copies over the micro-batches of each step (4 slots: every forward has 4
    different images, the step each of them 4 times); cut inside a step, the rest of the epoch is
    the uninterrupted one, pixel for pixel. With 3 DataLoader workers: 12 streams, 3 per worker."""
    straight = _batches(_loader(shards, workers=workers, accumulate=accumulate))
    assert len(straight) == len(_loader(shards, workers=workers, accumulate=accumulate))
    ids = [[index_of(img) for img in x] for x, _ in straight]
    assert all(len(set(b)) == B for b in ids)
    for s in range(len(ids) // accumulate):
        step = [i for b in ids[s * accumulate:(s + 1) * accumulate] for i in b]
        assert set(Counter(step).values()) == {accumulate}, s
    for cut in (1, accumulate + 1, len(straight) - 1):
        first = _loader(shards, workers=workers, accumulate=accumulate)
        for i, _ in enumerate(first):
            if i + 1 == cut:
                break
        again = _loader(shards, workers=workers, accumulate=accumulate)
        assert again.resume(first.plan_state(), [first.position(cut)]) == {"exact": True, "samples_left": None}
        assert len(again) == len(straight) - cut
        rest = _batches(again)
        assert len(rest) == len(straight) - cut
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(straight[cut:], rest)), cut
        end = again.position()
        assert end["batches"] == len(straight) and end["samples"] == len(straight) * B
    with pytest.raises(D.PlanError, match="over 1 micro-batch of a step, this loader over 4 "):
        _loader(shards, workers=workers, accumulate=accumulate).resume(
            _loader(shards, workers=workers).plan_state(), [first.position(cut)])


def test_a_position_saved_before_the_copies_were_spread_is_refused_in_one_line(shards):
    """A mid-epoch checkpoint of --ra-reps 4 --accumulate 4 on one GPU written before the spread plan
    (its loader plan has no ``ra_micro_batches``): one PlanError line, not a KeyError."""
    first = _loader(shards, workers=0)
    next(iter(first))
    old = {k: v for k, v in first.plan_state().items() if k != "ra_micro_batches"}
    with pytest.raises(D.PlanError, match=r"^the saved loader position spreads repeated augmentation's copies "
                                          r"over 1 micro-batch of a step, this loader over 4 \(--accumulate with"):
        _loader(shards, workers=0, accumulate=4).resume(old, [first.position()])


def _ddp_rank(rank, world, data, outdir):
    import torch.distributed as dist
    ld = D.make_loader(data, "train", 2, rank=rank, world_size=world, workers=2, res=16, repeats=R, seed=9,
                       accumulate=2)
    idx = []
    for images, _ in ld:
        idx.append([index_of(img) for img in images])
        dist.all_reduce(torch.ones(1))  # a rank running dry would hang here
    gathered = [None] * world
    dist.all_gather_object(gathered, (len(ld), idx))
    if rank == 0:
        Path(outdir, "result.json").write_text(json.dumps(gathered))


@pytest.mark.timeout(180)
def test_two_gloo_ranks_two_micro_batches(shards, tmp_path):
    """W=2, A=2: 4 slots for 4 copies. Every rank runs len() batches; in every step each of the 4
    forwards (2 ranks x 2 micro-batches) holds distinct samples, and the step holds each sample 4 times."""
    run_gloo_ranks(_ddp_rank, 2, shards, str(tmp_path))
    (n0, a), (n1, b) = json.loads((tmp_path / "result.json").read_text())
    assert n0 == n1 == len(a) == len(b) == (N // 2 // 2) // 2 * 2
    for s in range(n0 // 2):
        forwards = [a[2 * s], a[2 * s + 1], b[2 * s], b[2 * s + 1]]
        assert all(len(set(f)) == len(f) for f in forwards)
        assert set(Counter(i for f in forwards for i in f).values()) == {R}, s


@pytest.mark.parametrize("repeats", [1, R])
def test_a_stop_inside_a_long_step_finds_the_position_of_its_start(shards, repeats):
    """A stop past its deadline saves the last completed step (engine.train_one_epoch): A - 1 micro-
    batches of the next step trained, one held ahead by the prefetcher, so the loader must still know
    the position A batches back (A = 8: tv-rn50-v2 on one GPU). The state kept there resumes exactly."""
    A = 8
    straight = _batches(D.make_loader(shards, "train", B, res=16, repeats=repeats, seed=4, epoch=1,
                                      shuffle_buffer=12, workers=0, accumulate=A))
    first = D.make_loader(shards, "train", B, res=16, repeats=repeats, seed=4, epoch=1, shuffle_buffer=12,
                          workers=0, accumulate=A)
    it = iter(first)
    for _ in range(A + A):  # step 1 done, A - 1 micro-batches of step 2, one ahead
        next(it)
    saved = first.position(A)
    assert saved["batches"] == A
    again = D.make_loader(shards, "train", B, res=16, repeats=repeats, seed=4, epoch=1, shuffle_buffer=12,
                          workers=0, accumulate=A)
    assert again.resume(first.plan_state(), [saved])["exact"]
    rest = _batches(again)
    assert len(rest) == len(straight) - A
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(straight[A:], rest))
