"""The streaming loader: plan invariants, exact epochs across ranks/workers, determinism, bad samples."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from tests.fixtures.loader import index_of, key_index, run_gloo_ranks, sample_key, write_shard_set
from imagenet_shards.train import loader as D

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N = 50          # samples per split in the matrix sets
C = 7           # classes
B = 4           # batch size
RES = 16        # train crop
VAL = (20, 16)  # val resize, crop
SHARDS = {1: 50, 7: 8, 17: 3}  # shards per split -> prepare-shards' --shard-samples for N samples


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """Shard sets of N train + N val samples in 1, 7 and 17 shards per split, by prepare-shards."""
    return {shards: str(write_shard_set(tmp_path_factory.mktemp(f"s{shards}") / "out", train=N, val=N,
                                        shard_samples=per_shard, num_classes=C,
                                        size={"train": (32, 24), "val": (24, 32)}))
            for shards, per_shard in SHARDS.items()}


def loader(data, split="train", batch_size=B, **kw):
    kw.setdefault("res", RES)
    kw.setdefault("val_resize", VAL[0])
    kw.setdefault("val_crop", VAL[1])
    return D.make_loader(data, split, batch_size, **kw)


def collect(ld) -> list[list[int]]:
    """Sample indices per batch, checking shape, dtype, layout and that labels came through."""
    out = []
    for images, labels in ld:
        assert images.dtype == torch.uint8 and labels.dtype == torch.int64
        assert images.is_contiguous() and images.shape[1] == 3 and images.shape[0] == labels.shape[0]
        idx = [index_of(img) for img in images]
        assert [i % C for i in idx] == labels.tolist()
        out.append(idx)
    return out


# ----------------------------------------------------------------------------- pure plan

@pytest.mark.parametrize("sizes", [[50], [7] * 7 + [1], [3, 0, 5, 9, 1, 2, 30], [1] * 16])
@pytest.mark.parametrize("world,workers,bs", [(1, 1, 4), (2, 3, 4), (3, 2, 5), (4, 4, 1), (2, 8, 16)])
def test_plan_train_equal_batches_and_disjoint(sizes, world, workers, bs):
    n = sum(sizes)
    owned = []
    for rank in range(world):
        plans = D.epoch_plan(sizes, batch_size=bs, rank=rank, world_size=world, workers=workers, train=True,
                             seed=3, epoch=1)
        assert sum(len(p.batch_sizes) for p in plans) == (n // world) // bs
        assert all(b == bs for p in plans for b in p.batch_sizes)
        for p in plans:
            assert sum(q.stop - q.start for q in p.pieces) == p.num_samples + p.spares
            owned += [(q.shard, i) for q in p.pieces for i in range(q.start, q.stop)]
    assert len(owned) == len(set(owned)) <= n


@pytest.mark.parametrize("sizes", [[50], [7] * 7 + [1], [3, 0, 5, 9, 1, 2, 30]])
@pytest.mark.parametrize("world,workers,bs", [(1, 1, 4), (2, 3, 4), (3, 2, 5), (2, 8, 16)])
def test_plan_eval_exactly_once(sizes, world, workers, bs):
    owned, counts = [], []
    for rank in range(world):
        plans = D.epoch_plan(sizes, batch_size=bs, rank=rank, world_size=world, workers=workers, train=False)
        counts.append(sum(len(p.batch_sizes) for p in plans))
        for p in plans:
            assert all(0 < b <= bs for b in p.batch_sizes)
            assert sum(q.stop - q.start for q in p.pieces) == p.num_samples
            owned += [(q.shard, i) for q in p.pieces for i in range(q.start, q.stop)]
    assert sorted(owned) == [(s, i) for s, n in enumerate(sizes) for i in range(n)]
    assert max(counts) - min(counts) <= 1


def test_shard_order_is_a_seeded_permutation():
    a = D.shard_order(100, seed=1, epoch=0)
    assert sorted(a) == list(range(100))
    assert a == D.shard_order(100, seed=1, epoch=0)
    assert a != D.shard_order(100, seed=1, epoch=1) and a != D.shard_order(100, seed=2, epoch=0)


def test_shuffle_buffer_permutes_deterministically():
    items = list(range(500))
    a = list(D.shuffle_buffer(items, 64, random.Random(1)))
    assert sorted(a) == items and a != items
    assert a == list(D.shuffle_buffer(items, 64, random.Random(1)))
    assert list(D.shuffle_buffer(items, 1, random.Random(1))) == items


def test_read_shard_mid_range(sets):
    m = D.read_manifest(sets[1])
    (shard,) = D.split_shards(m, sets[1], "train")
    with tarfile.open(shard.url) as tf:  # the shard's sample order, read independently of our reader
        keys = list(dict.fromkeys(name.split(".")[0] for name in tf.getnames()))
    assert sorted(map(key_index, keys)) == list(range(N))
    recs = list(D.read_shard(shard.url, 5, 9))
    assert [r.key for r in recs] == keys[5:9]
    assert all(r.jpg and r.cls == str(key_index(r.key) % C).encode() for r in recs)
    with pytest.raises(ValueError, match="audit-shards"):
        list(D.read_shard(shard.url, 0, N + 1))


def test_damaged_shard_names_the_redacted_url_and_offset(sets):
    """The lenient reader tolerates a missing end marker but not a cut member or a bad header."""
    import io
    (shard,) = D.split_shards(D.read_manifest(sets[1]), sets[1], "train")
    with open(shard.url, "rb") as f:
        raw = f.read()
    url = "https://user:secret@host/train/imagenet1k-train-000000.tar"
    served = {}
    opener = lambda u, mode: io.BytesIO(served[u])  # noqa: E731

    with tarfile.open(shard.url) as tf:
        members = tf.getmembers()
    jpg = [m for m in members if m.name.endswith(".jpg")][N // 2]
    served[url] = raw[:jpg.offset_data + 50]  # cut inside a member
    with pytest.raises(ValueError, match=rf"host/train/imagenet1k-train-000000.tar: member {jpg.name} at byte "
                                         rf"{jpg.offset} is cut short .*run audit-shards") as e:
        list(D.read_shard(url, opener=opener))
    assert "secret" not in str(e.value)
    damaged = bytearray(raw)
    damaged[jpg.offset + 20] ^= 1  # in its header's name field
    served[url] = bytes(damaged)
    with pytest.raises(ValueError, match=f"invalid tar header at byte {jpg.offset} .*run audit-shards"):
        list(D.read_shard(url, opener=opener))
    served[url] = raw[:len(raw) - 1024]  # no end-of-archive marker: read like tar(1) does
    assert len(list(D.read_shard(url, opener=opener))) == N


def test_unknown_split_is_refused(sets):
    with pytest.raises(ValueError, match="split 'test' is not in the manifest"):
        D.make_loader(sets[1], "test", 2)


# ----------------------------------------------------------------------------- the matrix (simulated ranks)

@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("shards", list(SHARDS))
def test_matrix_exact_epochs(sets, shards, workers):
    data = sets[shards]
    for world in (1, 2):
        train = [collect(loader(data, rank=r, world_size=world, workers=workers, seed=5, epoch=2))
                 for r in range(world)]
        assert {len(t) for t in train} == {(N // world) // B}
        assert all(len(b) == B for t in train for b in t)
        seen = [i for t in train for b in t for i in b]
        assert len(seen) == len(set(seen))  # at most once

        lds = [loader(data, "val", rank=r, world_size=world, workers=workers) for r in range(world)]
        val = [collect(ld) for ld in lds]
        assert sorted(i for v in val for b in v for i in b) == list(range(N))  # exactly once
        assert [len(v) for v in val] == [len(ld) for ld in lds]
        assert max(map(len, val)) - min(map(len, val)) <= 1
        assert all(ld.stats["samples"] == ld.num_samples for ld in lds)


@pytest.mark.timeout(120)
def test_order_determinism_and_epochs(sets):
    data = sets[7]
    a = collect(loader(data, workers=2, seed=1, epoch=0, shuffle_buffer=16))
    assert a == collect(loader(data, workers=2, seed=1, epoch=0, shuffle_buffer=16))
    assert a != collect(loader(data, workers=2, seed=1, epoch=1, shuffle_buffer=16))
    assert a != collect(loader(data, workers=2, seed=2, epoch=0, shuffle_buffer=16))
    # the in-process path gives one worker's order, also reproducible
    assert collect(loader(data, workers=0, epoch=3)) == collect(loader(data, workers=0, epoch=3))


@pytest.mark.timeout(120)
def test_persistent_workers_follow_set_epoch_and_resolution(sets):
    data = sets[7]
    ld = loader(data, workers=2, persistent_workers=True, seed=4)
    first = collect(ld)
    ld.set_epoch(1)
    ld.set_resolution(24)
    shapes = {tuple(x.shape[2:]) for x, _ in ld}
    assert shapes == {(24, 24)}
    ld.set_resolution(RES)
    assert collect(ld) == collect(loader(data, workers=2, seed=4, epoch=1))
    ld.set_epoch(0)
    assert collect(ld) == first
    assert len(ld) == ld.stats["batches"] and ld.num_samples == ld.stats["samples"]


@pytest.mark.timeout(120)
def test_a_script_that_leaves_workers_running_still_exits(sets):
    """Workers ignore SIGTERM (signals are the main process's to decide), and multiprocessing's exit
    hook SIGTERMs daemonic children and then waits for them: our exit hook stops them first, both
    persistent workers after a whole epoch and the workers of an iteration left unfinished, and
    kills one that cannot stop when asked (stopped here by SIGSTOP)."""
    script = ("import sys\nfrom imagenet_shards.train.loader import make_loader\n"
              "ld = make_loader(sys.argv[1], 'train', 4, res=16, workers=2, persistent_workers=True)\n"
              "n = sum(1 for _ in ld)\nprint(n, len(ld))\n"
              "unfinished = iter(make_loader(sys.argv[1], 'train', 4, res=16, workers=2))\n"
              "first = next(unfinished)\n"
              "stuck = make_loader(sys.argv[1], 'train', 4, res=16, workers=1)\n"
              "it = iter(stuck)\nnext(it)\n"
              "for w in next(iter(stuck._iterators))._workers:\n"
              "    import os, signal\n    os.kill(w.pid, signal.SIGSTOP)  # a worker that cannot stop when asked\n")
    r = subprocess.run([sys.executable, "-c", script, sets[7]], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    n, expected = map(int, r.stdout.split())
    assert n == expected > 0


def test_close_stops_the_workers_and_a_later_epoch_starts_new_ones(sets):
    ld = loader(sets[7], workers=2, persistent_workers=True, seed=4)
    first = collect(ld)
    workers = list(ld._loader._iterator._workers)
    assert all(w.is_alive() for w in workers)
    ld.close()
    assert not any(w.is_alive() for w in workers) and ld._loader._iterator is None
    assert collect(ld) == first
    unfinished = loader(sets[7], workers=2, seed=4)
    batches = iter(unfinished)
    next(batches)
    workers = [w for it in unfinished._iterators for w in it._workers]
    assert len(workers) == 2 and all(w.is_alive() for w in workers)
    unfinished.close()
    assert not any(w.is_alive() for w in workers)


# ----------------------------------------------------------------------------- bad samples

@pytest.fixture(scope="module")
def bad_set(tmp_path_factory):
    """42 train samples in 3 shards, 21 val in 2; train 3 and 30 and val 5 undecodable, train 11 without .cls."""
    root = tmp_path_factory.mktemp("bad") / "out"
    corrupt = [sample_key("train", 3, 3 % C), sample_key("train", 30, 30 % C)]
    write_shard_set(root, train=42, val=21, shard_samples=14, num_classes=C, size=(32, 24),
                    corrupt_keys=corrupt + [sample_key("val", 5, 5 % C)],
                    missing_cls_keys=[sample_key("train", 11, 11 % C)])
    return str(root), corrupt + [sample_key("train", 11, 11 % C)]


@pytest.mark.skipif(D.decode._jpegcrop is None, reason="the turbo decoder (_jpegcrop) is not built")
def test_libjpeg_warnings_are_bad_samples(tmp_path, caplog):
    """16 bytes flipped inside one stored JPEG, its size kept (issue 23): Pillow decodes it with wrong
    pixels; the turbo decoder sees libjpeg's warning, so the sample is skipped, counted and named."""
    key = sample_key("train", 2, 2 % C)
    data = str(write_shard_set(tmp_path / "out", train=16, shard_samples=8, num_classes=C, size=(160, 120),
                               content="texture", flipped_keys=[key]))
    whole = dict(batch_size=4, workers=0, scale=(1.0, 1.0), shuffle_buffer=1)  # every crop reads every cell
    ld = D.make_loader(data, "train", decoder="turbo", **whole)
    with caplog.at_level("WARNING"):
        assert len(list(ld)) == 4
    assert ld.stats["bad_samples"] == 1 and ld.stats["bad_keys"] == [key]
    assert any(key in r.getMessage() and "Corrupt JPEG data" in r.getMessage() for r in caplog.records)
    pil = D.make_loader(data, "train", decoder="pil", **whole)
    assert len(list(pil)) == 4 and pil.stats["bad_samples"] == 0  # what the loader did before: a wrong image


def shard_keys(data: str, split: str) -> list[list[str]]:
    """Sample keys of each shard of ``split``, in manifest and file order (read with plain tarfile)."""
    out = []
    for shard in D.split_shards(D.read_manifest(data), data, split):
        with tarfile.open(shard.url) as tf:
            out.append(list(dict.fromkeys(name.split(".")[0] for name in tf.getnames())))
    return out


def expected_duplicates(data: str, bad_keys, *, batch_size: int, workers: int) -> int:
    """Train slots refilled with a used sample (shuffle_buffer=1, rank 0 of 1, seed 0, epoch 0): per
    worker, the bad samples in its range beyond its spares."""
    keys = shard_keys(data, "train")
    plans = D.epoch_plan([len(k) for k in keys], batch_size=batch_size, rank=0, world_size=1,
                         workers=max(1, workers), train=True)
    bad = [sum(k in bad_keys for q in p.pieces for k in keys[q.shard][q.start:q.stop]) for p in plans]
    return sum(max(0, b - p.spares) for b, p in zip(bad, plans))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_bad_samples_skipped_replaced_and_reported(bad_set, workers, caplog):
    data, bad_keys = bad_set
    # 42 samples, batch 8: 5 full batches and 2 spares; all 3 bad samples are read (shuffle_buffer=1: in order)
    ld = loader(data, batch_size=8, workers=workers, shuffle_buffer=1)
    got = collect(ld)
    assert len(got) == len(ld) == 5 and all(len(b) == 8 for b in got)
    seen = [i for b in got for i in b]
    assert not {3, 11, 30} & set(seen)
    assert ld.stats["bad_samples"] == 3 and sorted(ld.stats["bad_keys"]) == sorted(bad_keys)
    # 40 slots, 39 good samples: at least one slot repeats a sample, counted; exactly as many as the
    # workers whose range holds more bad samples than spares must repeat
    dup = expected_duplicates(data, bad_keys, batch_size=8, workers=workers)
    assert dup >= 1 and ld.stats["duplicated"] == dup and len(set(seen)) == 40 - dup
    assert any(bad_keys[0] in r.getMessage() for r in caplog.records)

    val = loader(data, "val", batch_size=8, workers=workers)
    got = collect(val)
    assert sorted(i for b in got for i in b) == [i for i in range(21) if i != 5]
    assert val.stats["bad_keys"] == [sample_key("val", 5, 5 % C)] and len(got) == len(val)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_strict_raises_with_key_and_shard(bad_set, workers):
    data, bad_keys = bad_set
    keys = "|".join(bad_keys)
    with pytest.raises(D.BadSampleError, match=rf"bad sample '({keys})' in .*imagenet1k-train-00000\d\.tar"):
        collect(loader(data, batch_size=8, workers=workers, shuffle_buffer=1, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
def test_stats_count_a_partly_consumed_epoch(bad_set, workers):
    """An epoch cut short (train-imagenet --limit-batches) still reports what it yielded, bad samples included."""
    data, bad_keys = bad_set
    keys = shard_keys(data, "train")
    plans = D.epoch_plan([len(k) for k in keys], batch_size=8, rank=0, world_size=1, workers=max(1, workers),
                         train=True)
    # per batch of worker 0, in order: the bad samples skipped while filling it (shuffle_buffer=1: file order)
    stream = iter([k for q in plans[0].pieces for k in keys[q.shard][q.start:q.stop]])
    bad_per_batch = []
    for _ in plans[0].batch_sizes:
        good = bad = 0
        while good < 8 and (k := next(stream, None)) is not None:
            bad += k in bad_keys
            good += k not in bad_keys
        bad_per_batch.append(bad)
    cut = next(i for i, b in enumerate(bad_per_batch) if b) + 1  # the first batch that skipped one
    ld = loader(data, batch_size=8, workers=workers, shuffle_buffer=1)
    assert cut < len(ld)
    stride = 2 if workers == 2 else 1  # the DataLoader takes the workers' batches in turn
    taken = (cut - 1) * stride + 1
    for i, _ in enumerate(ld):
        if i + 1 == taken:
            break
    assert ld.stats["batches"] == taken and ld.stats["samples"] == 8 * taken
    assert ld.stats["bad_samples"] >= sum(bad_per_batch[:cut]) > 0
    if workers == 0:
        assert ld.stats["bad_samples"] == sum(bad_per_batch[:cut])


def test_bad_samples_use_spares_first(bad_set):
    data, _ = bad_set
    ld = loader(data, batch_size=13, workers=0)  # 3 batches = 39 slots; 42 samples, 3 bad: spares suffice
    got = collect(ld)
    assert len(got) == 3 and ld.stats["duplicated"] == 0 and ld.stats["bad_samples"] == 3
    seen = [i for b in got for i in b]
    assert len(seen) == len(set(seen)) == 39


# ----------------------------------------------------------------------------- pixels and labels

def test_val_crop_matches_torchvision_reference(tmp_path):
    import io

    import torchvision.transforms as T
    from PIL import Image

    data = str(write_shard_set(tmp_path / "out", val=6, shard_samples=4, num_classes=3, content="texture",
                               size=[(160, 120), (97, 150), (150, 101)]))
    ld = D.make_loader(data, "val", 4, workers=0, val_resize=72, val_crop=64)
    out = [(x, y) for x, y in ld]
    images = torch.cat([x for x, _ in out])
    labels = torch.cat([y for _, y in out])
    shards = D.split_shards(D.read_manifest(data), data, "val")
    recs = [r for s in shards for r in D.read_shard(s.url)]  # eval order: manifest order, as read
    assert sorted(key_index(r.key) for r in recs) == list(range(6))
    assert labels.tolist() == [key_index(r.key) % 3 for r in recs]
    ref_tf = T.Compose([T.Resize(72), T.CenterCrop(64), T.PILToTensor()])
    for img, rec in zip(images, recs):
        ref = ref_tf(Image.open(io.BytesIO(rec.jpg)).convert("RGB"))
        diff = (img.int() - ref.int()).abs()
        assert diff.max() <= 2 and diff.float().mean() < 0.1


@pytest.mark.timeout(120)
def test_the_interpolation_reaches_every_crop_and_random_is_per_sample(tmp_path):
    """--train-interpolation random through the loader: each sample's crop is its bilinear or its
    bicubic one (the choice in its own stream, so the same with 0 or 2 workers), both occur; val
    takes bilinear or bicubic only."""
    data = str(write_shard_set(tmp_path / "out", train=16, val=4, shard_samples=4, num_classes=3, content="texture",
                               size=[(64, 48), (48, 64)]))

    def crops(interpolation, workers=0):
        ld = D.make_loader(data, "train", 4, workers=workers, res=24, seed=3, interpolation=interpolation)
        return sorted(img.numpy().tobytes() for images, _ in ld for img in images)

    bilinear, bicubic, mixed = crops("bilinear"), crops("bicubic"), crops("random")
    assert mixed == crops("random", workers=2)
    both = set(bilinear) & set(bicubic)
    assert not both  # the filters differ on every crop of this texture
    assert set(mixed) <= set(bilinear) | set(bicubic)
    assert set(mixed) & set(bilinear) and set(mixed) & set(bicubic)
    with pytest.raises(ValueError, match="val interpolation 'random'"):
        D.make_loader(data, "val", 4, workers=0, interpolation="random")


def test_train_labels_and_crops_come_through(sets):
    ld = loader(sets[7], workers=0, res=12)
    got = collect(ld)  # collect checks label == index % C for every image
    assert all(x.shape == (B, 3, 12, 12) for x, _ in ld)
    assert len(got) == N // B


def test_importing_the_loader_is_light():
    import subprocess
    import sys
    code = ("import sys, imagenet_shards.train.loader; heavy = [m for m in ('torchvision', 'webdataset', 'fsspec') if m in sys.modules];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- real DDP (2 gloo ranks)

def _ddp_rank(rank, world, data, outdir):
    import torch.distributed as dist
    result = {}
    for split in ("train", "val"):
        ld = loader(data, split, rank=rank, world_size=world, workers=2, seed=9)
        idx, steps = [], 0
        for images, labels in ld:
            idx += [index_of(img) for img in images]
            # what a DDP step does: a collective per batch; a rank running dry would hang here
            t = torch.ones(1)
            dist.all_reduce(t)
            steps += 1
        gathered = [None] * world
        dist.all_gather_object(gathered, (steps, idx))
        result[split] = gathered
    if rank == 0:
        Path(outdir, "result.json").write_text(json.dumps(result))


@pytest.mark.timeout(180)
def test_real_ddp_two_gloo_ranks(sets, tmp_path):
    # train: 7 shards, 50 samples, 2 ranks x 2 workers; val: unequal batch counts are fine, but this
    # set gives equal ones (25 per rank), so the per-batch all_reduce cannot hang either
    run_gloo_ranks(_ddp_rank, 2, sets[7], str(tmp_path))
    result = json.loads((tmp_path / "result.json").read_text())
    steps = [s for s, _ in result["train"]]
    assert steps == [(N // 2) // B] * 2
    train_idx = [i for _, idx in result["train"] for i in idx]
    assert len(train_idx) == len(set(train_idx)) == 2 * ((N // 2) // B) * B
    assert sorted(i for _, idx in result["val"] for i in idx) == list(range(N))


# ----------------------------------------------------------------------------- augs

def test_aug_through_the_loader(sets):
    ld = loader(sets[7], workers=0, aug="ta", res=12)
    got = [(x, y) for x, y in ld]
    assert len(got) == len(ld) and all(x.dtype == torch.uint8 and x.shape == (B, 3, 12, 12) for x, _ in got)
    again = [(x, y) for x, y in loader(sets[7], workers=0, aug="ta", res=12)]
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, again))  # seeded from (seed, epoch, rank, worker)
    with pytest.raises(ValueError, match="unknown aug"):
        loader(sets[7], aug="cutmix")


# ----------------------------------------------------------------------------- round trip with the real writer

@pytest.mark.timeout(300)
def test_round_trip_with_prepare_shards(tmp_path):
    """Synthetic archives -> prepare-shards -> our loader: labels per class equal the manifest's counts."""
    from collections import Counter

    from imagenet_shards.pipeline.prepare.cli import main as prepare
    from imagenet_shards.pipeline.tools.synthetic.generate import generate
    src, out = tmp_path / "src", tmp_path / "shards"
    generate(src, classes=4, train_per_class=12, val_per_class=4, quirks=True, progress=False)
    assert prepare(["--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"),
                    "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(out),
                    "--resize", "longer:96", "--shard-samples", "7", "--workers", "1", "--quiet"]) == 0
    manifest = D.read_manifest(str(out))
    wnid = {c["index"]: c["wnid"] for c in manifest["classes"]}
    for split, world in (("val", 2), ("train", 2)):
        counts, batches = Counter(), []
        n = manifest["splits"][split]["num_samples"]
        for rank in range(world):
            ld = D.make_loader(str(out), split, 4, workers=2, rank=rank, world_size=world, res=32,
                               val_resize=40, val_crop=32)
            got = [(x.shape, y) for x, y in ld]
            batches.append(len(got))
            counts.update(wnid[int(label)] for _, y in got for label in y)
            assert ld.stats["bad_samples"] == 0
        expected = manifest["splits"][split]["class_counts"]
        if split == "val":
            assert counts == Counter(expected) and sum(counts.values()) == n
        else:
            assert batches == [(n // world) // 4] * world
            assert all(counts[w] <= expected[w] for w in counts)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_worker_rss_does_not_grow_across_epochs(tmp_path):
    import os
    data = write_shard_set(tmp_path / "out", train=600, shard_samples=200, num_classes=C, content="texture",
                           size=(128, 96))
    ld = D.make_loader(str(data), "train", 16, workers=1, persistent_workers=True, res=64, shuffle_buffer=200)

    def worker_rss_mib() -> int:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    if int(stat[stat.rindex(")") + 2:].split()[1]) == os.getpid():
                        pages = int(Path(f"/proc/{entry}/statm").read_text().split()[1])
                        return pages * os.sysconf("SC_PAGE_SIZE") >> 20
                except OSError:
                    pass
        return 0
    peaks = []
    for epoch in range(5):
        ld.set_epoch(epoch)
        peak = 0
        for i, _ in enumerate(ld):
            if i % 5 == 4:
                peak = max(peak, worker_rss_mib())
        peaks.append(peak)
    assert 0 < peaks[-1] < 1500 and peaks[-1] - peaks[1] < 40, peaks


# ----------------------------------------------------------------------------- recycled batch memory

@pytest.mark.timeout(120)
@pytest.mark.parametrize("persistent", [False, True])
def test_workers_reuse_batch_memory_only_once_the_batch_is_gone(sets, persistent):
    """Batches a consumer drops come back as recycled memory; batches it keeps are never
    overwritten (their bytes are the same after the whole epoch as when they arrived), and the data
    is the same either way."""
    data = sets[7]

    def run(keep: bool):
        ld = loader(data, "val", batch_size=2, workers=2, prefetch_factor=2, persistent_workers=persistent)
        kept, sums = [], []
        for epoch in range(2):
            ld.set_epoch(epoch)
            for images, _ in ld:
                sums.append(images.sum(dtype=torch.int64).item())
                if keep:
                    kept.append((images, sums[-1]))
            if epoch == 0:
                first = ld.stats["recycled"]
        return sums, first + ld.stats["recycled"], kept

    dropped, recycled, _ = run(keep=False)
    held, none, kept = run(keep=True)
    assert dropped == held and recycled > 0 and none == 0
    assert all(images.sum(dtype=torch.int64).item() == s for images, s in kept)


def test_a_slot_is_reused_only_with_its_own_token():
    from imagenet_shards.train.loader.slots import Releaser, SlotRing, new_board

    board = new_board(1, prefetch_factor=1)  # 4 slots
    ring = SlotRing(board, 0)
    taken = [ring.take((2, 3, 4, 4)) for _ in range(4)]
    assert [t[1] for t in taken] == [0, 1, 2, 3] and not any(t[3] for t in taken)
    assert ring.take((2, 3, 4, 4))[1] == -1  # all four handed out, none released: a fresh block
    rel = Releaser(board)
    _, slot, token, _ = taken[1]
    received = torch.zeros((2, 3, 4, 4), dtype=torch.uint8)  # the main process's own mapping of the block
    view = received[0]
    rel.track(received, 0, slot, token)
    del received
    rel.release_done()
    assert board[0, 1] == 0  # a view still holds the storage: not released
    del view
    rel.release_done()
    assert board[0, 1] == token
    again = ring.take((2, 3, 4, 4))
    assert again[1] == 1 and again[3]  # the released block, recycled
    board[0, 2] = 12345  # a stale token (an earlier ring's) frees nothing
    assert ring.take((2, 3, 4, 4))[1] == -1


def test_a_recycled_block_travels_as_its_shape_and_comes_back_as_an_alias():
    """slots.outgoing / Releaser.receive: labels as bytes; a recycled ring block as its shape, handed
    out as an alias of the block the main process kept (same memory, a storage of its own, so the
    slot is released when the batch is dropped, not when the block is)."""
    from imagenet_shards.train.loader.batching import BatchInfo
    from imagenet_shards.train.loader.slots import Releaser, SlotRing, new_board, outgoing

    board = new_board(1, prefetch_factor=1)
    ring, rel = SlotRing(board, 0), Releaser(board, keep_blocks=True)
    block, slot, token, recycled = ring.take((2, 3, 4, 4))
    block.fill_(7)
    sent = outgoing(block, torch.tensor([3, 1]), BatchInfo((), 0, 0, slot, token, recycled))
    assert sent[0] is block and sent[1] == torch.tensor([3, 1]).numpy().tobytes()
    images, labels = rel.receive(*sent)
    assert labels.tolist() == [3, 1] and images.data_ptr() == block.data_ptr() and int(images.sum()) == 7 * 96
    assert images.untyped_storage()._cdata != block.untyped_storage()._cdata
    del images
    rel.release_done()
    assert board[0, slot] == token
    assert ring.take((2, 3, 4, 4))[1] != slot  # never the previous batch's block
    again = ring.take((2, 3, 4, 4))
    assert again[1] == slot and again[3]
    sent = outgoing(again[0][:1], torch.tensor([5]), BatchInfo((), 0, 0, again[1], again[2], again[3]))
    assert sent[0] == (1, 3, 4, 4)
    images, labels = rel.receive(*sent)
    assert images.shape == (1, 3, 4, 4) and images.data_ptr() == block.data_ptr() and labels.tolist() == [5]
    with pytest.raises(RuntimeError, match="never received"):
        Releaser(board, keep_blocks=True).receive((2, 3, 4, 4), b"", BatchInfo((), 0, 0, 1, 9, True))
