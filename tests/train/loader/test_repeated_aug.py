"""Repeated augmentation in the epoch plan (torchvision's RASampler semantics), FFCV's val crop
ratio, and val keys through the loader (ReaL). (timm's RandAugment strings: tests/train/augment/test_policies.py.)"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.fixtures.loader import index_of, run_gloo_ranks, write_shard_set
from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import decode
from imagenet_shards.train.loader.plan import repeat_counts

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
N, C, B = 40, 4, 4


def emitted(plan) -> list:
    """The (shard, index) sequence a worker plan emits, before its shuffle."""
    read = [(p.shard, i) for p in plan.pieces for i in range(p.start, p.stop)]
    counts = repeat_counts(plan)
    assert len(counts) == len(read) and sum(counts) == plan.num_samples
    return [x for x, n in zip(read, counts) for _ in range(n)]


@pytest.mark.parametrize("sizes", [[300], [37] * 20, [100, 3, 250, 7, 500]])
@pytest.mark.parametrize("world,reps,workers,bs", [(1, 4, 1, 16), (2, 4, 3, 4), (8, 4, 2, 8), (4, 2, 1, 5),
                                                   (8, 3, 2, 4), (3, 4, 2, 4), (16, 4, 1, 4)])
def test_repeated_plan_invariants(sizes, world, reps, workers, bs):
    n = sum(sizes)
    per_rank, counts = {}, []
    for rank in range(world):
        plans = D.epoch_plan(sizes, batch_size=bs, rank=rank, world_size=world, workers=workers, train=True,
                             seed=5, epoch=3, repeats=reps)
        assert plans == D.epoch_plan(sizes, batch_size=bs, rank=rank, world_size=world, workers=workers,
                                     train=True, seed=5, epoch=3, repeats=reps)  # pure
        assert all(b == bs for p in plans for b in p.batch_sizes)
        counts.append(sum(len(p.batch_sizes) for p in plans))
        per_rank[rank] = [x for p in plans for x in emitted(p)]
    # torchvision's RASampler: floor(N // 256 * 256 / W) samples per rank; here in full batches only
    assert counts == [((n // 256 * 256) // world) // bs] * world
    seen = Counter(x for xs in per_rank.values() for x in xs)
    assert max(seen.values()) <= reps
    assert len(seen) <= -(-world * counts[0] * bs // reps) + world  # about N/R distinct samples
    if world >= reps:  # each copy of a sample on a different rank
        assert all(Counter(xs).most_common(1)[0][1] == 1 for xs in per_rank.values() if xs)


def test_copies_land_in_the_same_step_where_world_and_reps_divide():
    sizes = [300]
    for world, reps in ((8, 4), (4, 2), (2, 4), (1, 4)):
        seqs = [[x for p in D.epoch_plan(sizes, batch_size=4, rank=r, world_size=world, workers=1, train=True,
                                         repeats=reps) for x in emitted(p)] for r in range(world)]
        keys = {p.shuffle_key for r in range(world) for p in D.epoch_plan(sizes, batch_size=4, rank=r,
                                                                            world_size=world, workers=1, train=True,
                                                                            repeats=reps)}
        if world >= reps:  # groups of `reps` ranks read the same samples in the same order
            groups = {tuple(s) for s in seqs}
            assert len(groups) == world // reps and len(keys) == world // reps
        else:  # every rank reads the same samples, each reps // world times in a row
            assert all(s == seqs[0] for s in seqs) and len(keys) == 1
            e = reps // world
            assert all(len(set(seqs[0][i:i + e])) == 1 for i in range(0, len(seqs[0]), e))


def test_one_repeat_is_the_plain_plan():
    for rank in range(3):
        kw = dict(batch_size=4, rank=rank, world_size=3, workers=2, train=True, seed=1, epoch=2)
        assert D.epoch_plan([50, 9], repeats=1, **kw) == D.epoch_plan([50, 9], **kw)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return str(write_shard_set(tmp_path_factory.mktemp("ra") / "out", train=N, val=N, shard_samples=7,
                               num_classes=C, size={"train": (32, 24), "val": (24, 32)}))


def test_repeats_through_the_loader(shards):
    ld = D.make_loader(shards, "train", B, workers=0, res=16, repeats=4, seed=2)
    got = [[index_of(img) for img in images] for images, _ in ld]
    assert len(got) == len(ld) == (N // B) and all(len(b) == B for b in got)
    flat = [i for b in got for i in b]
    counts = Counter(flat)
    assert set(counts.values()) == {4} and len(counts) == N // 4  # one rank: each sample 4 times
    # in a row (shuffled as distinct samples first): the 4 copies of one sample share a batch
    assert all(len(set(b)) == 1 for b in got)


def _ddp_rank(rank, world, data, outdir):
    import torch.distributed as dist
    ld = D.make_loader(data, "train", 2, rank=rank, world_size=world, workers=2, res=16, repeats=4, seed=9)
    idx, steps = [], 0
    for images, _ in ld:
        idx.append([index_of(img) for img in images])
        t = torch.ones(1)
        dist.all_reduce(t)  # a rank running dry would hang here
        steps += 1
    gathered = [None] * world
    dist.all_gather_object(gathered, (steps, len(ld), idx))
    if rank == 0:
        Path(outdir, "result.json").write_text(json.dumps(gathered))


@pytest.mark.timeout(180)
def test_repeats_keep_two_gloo_ranks_at_len_batches(shards, tmp_path):
    run_gloo_ranks(_ddp_rank, 2, shards, str(tmp_path))
    result = json.loads((tmp_path / "result.json").read_text())
    assert [(s, n) for s, n, _ in result] == [((N // 2) // 2,) * 2] * 2  # every rank exactly len() batches
    # W=2, R=4: both ranks show the same samples, each twice in a row, in the same steps
    (_, _, a), (_, _, b) = result
    assert [sorted(x) for x in a] == [sorted(x) for x in b]
    assert Counter(i for batch in a + b for i in batch).most_common(1)[0][1] == 4


# ----------------------------------------------------------------------------- FFCV's val crop, val keys

def test_ffcv_centre_crop_ratio_box():
    # ffcv/fields/rgb_image.py get_center_crop: c = int(ratio * min(h, w)), offsets (h - c) // 2, (w - c) // 2
    for w, h in ((500, 375), (375, 500), (333, 333), (64, 48)):
        c = int(224 / 256 * min(w, h))
        assert decode.center_crop_ratio_params(w, h, 224 / 256) == ((h - c) // 2, (w - c) // 2, c, c)
    with pytest.raises(ValueError):
        decode.center_crop_ratio_params(10, 10, 1.5)


def test_val_keys_and_ratio_crop_through_the_loader(shards):
    ld = D.make_loader(shards, "val", 8, workers=0, val_crop=20, val_resize=16, val_crop_ratio=0.875, keys=True)
    seen = []
    for images, labels, keys in ld:
        assert images.shape[1:] == (3, 20, 20) and len(keys) == len(labels)
        seen += [(int(k.rsplit("_", 1)[1]) - 1, index_of(img)) for k, img in zip(keys, images)]
    assert sorted(i for i, _ in seen) == list(range(N)) and all(i == j for i, j in seen)
    assert all(len(batch) == 2 for batch in D.make_loader(shards, "val", 8, workers=0, val_crop=16))
    assert list(itertools.islice(D.make_loader(shards, "train", 8, workers=0, res=8, keys=True), 1))[0].__len__() == 2
