"""The --gpu-decode loader's logic, run on the CPU: the same thread, queue, refills, batched crop and
stream hand-off calls as on a GPU, with CPU decoding (and a fake stream where the order matters).
"""

from __future__ import annotations

import contextlib
import io
import threading

import pytest
import torch
from PIL import Image

from imagenet_shards.train.loader import gpu_decode as gd
from imagenet_shards.train.loader import make_loader

KW = dict(workers=0, val_resize=36, val_crop=32, res=32, seed=3, epoch=1)


def _jpeg(progressive: bool = False, fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 60)).save(buf, fmt, **({"progressive": progressive} if fmt == "JPEG" else {}))
    return buf.getvalue()


def test_jpeg_coding_tells_baseline_from_progressive():
    assert gd.jpeg_coding(_jpeg()) == gd.BASELINE
    assert gd.jpeg_coding(_jpeg(progressive=True)) == gd.PROGRESSIVE
    assert gd.jpeg_coding(_jpeg(fmt="PNG")) == gd.OTHER
    assert gd.jpeg_coding(b"\xff\xd8\xff") == gd.OTHER


def test_gpu_decode_path_matches_cpu_loader_on_cpu(tiny_shards):
    """The --gpu-decode reader + crop code, run on the CPU: val pixels within one grey level of the
    CPU loader's torchvision decoder, same labels, same samples per train epoch."""
    data = str(tiny_shards)
    gpu_val = list(gd.make_gpu_decode_loader(data, "val", 8, device="cpu", **KW))
    cpu_val = list(make_loader(data, "val", 8, decoder="tvio", **KW))
    assert sum(len(y) for _, y in gpu_val) == 20
    for (xg, yg), (xc, yc) in zip(gpu_val, cpu_val, strict=True):
        assert torch.equal(yg, yc) and (xg.int() - xc.int()).abs().max() <= 1
    gpu_train = gd.make_gpu_decode_loader(data, "train", 8, device="cpu", **KW)
    cpu_train = make_loader(data, "train", 8, **KW)
    assert len(gpu_train) == len(cpu_train)
    batches = list(gpu_train)
    assert len(batches) == len(gpu_train) and batches[0][0].shape == (8, 3, 32, 32)
    labels = torch.cat([y for _, y in batches]).sort().values
    assert torch.equal(labels, torch.cat([y for _, y in cpu_train]).sort().values)
    stats = gpu_train.stats
    assert stats["batches"] == len(batches) and stats["samples"] == 8 * len(batches)
    assert stats["hardware_decodes"] + stats["host_decodes"] == stats["samples"]


class FailingDecode:
    """decode_batch, except that the images listed per call (0-based call number) fail."""

    def __init__(self, fail: dict[int, object]):
        self.fail, self.calls = fail, 0

    def __call__(self, jpgs, device):
        images = gd.decode_batch(jpgs, device)
        bad = self.fail.get(self.calls, ())
        self.calls += 1
        return [None if (bad == "all" or i in bad) else img for i, img in enumerate(images)]


def _loader(data, split, decode, ops=None, **kw):
    loader = gd.make_gpu_decode_loader(str(data), split, 8, device="cpu", **{**KW, **kw})
    loader.decode = decode
    if ops is not None:
        loader.ops = ops
    return loader


def test_train_batches_stay_full_when_images_or_a_whole_batch_fail(tiny_shards):
    """A batch whose every image fails is refilled from the previous batch, a partly bad one from
    its own good images: exactly len() full batches (no DDP rank falls one batch short)."""
    loader = _loader(tiny_shards, "train", FailingDecode({2: "all", 4: (0, 1, 2)}))
    batches = list(loader)
    assert len(batches) == len(loader) == 8
    assert all(x.shape == (8, 3, 32, 32) and y.shape == (8,) for x, y in batches)
    assert torch.equal(batches[2][0], batches[1][0]) and torch.equal(batches[2][1], batches[1][1])
    assert loader.stats["bad_samples"] == 8 + 3 and loader.stats["duplicated"] == 8 + 3
    assert loader.stats["batches"] == 8


def test_eval_leaves_out_a_batch_whose_images_all_fail(tiny_shards):
    loader = _loader(tiny_shards, "val", FailingDecode({0: "all", 1: (0,)}))
    batches = list(loader)
    assert sum(len(y) for _, y in batches) == 20 - 8 - 1 and loader.stats["bad_samples"] == 9


def test_first_train_batch_all_bad_is_an_error(tiny_shards):
    with pytest.raises(RuntimeError, match="first batch"):
        list(_loader(tiny_shards, "train", FailingDecode({0: "all"})))


class RecordingOps(gd.StreamOps):
    """The stream hand-off calls, logged with the thread that made them and the stream current."""

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.log, self.events, self.current = [], 0, "consumer"

    def _note(self, what):
        self.log.append((what, threading.current_thread().name, self.current))

    @contextlib.contextmanager
    def _on(self, stream):
        before, self.current = self.current, stream
        self._note(f"enter {stream}")
        try:
            yield
        finally:
            self._note(f"exit {stream}")
            self.current = before

    def decoding(self):
        return self._on("decode")

    def cropping(self, images):
        self._note(f"crop waits on decode, holds {len(images)} images")
        return self._on("crop")

    def done(self):
        self.events += 1
        self._note(f"done{self.events}")
        return self.events

    def hand_over(self, tensors, event):
        self._note(f"hand_over{event}")


def test_stream_hand_off_order(tiny_shards):
    """Decodes run with the decode stream current (where nothing else runs: no drain); each batch's
    crop runs on the crop stream after it waited on the decode and took hold of the decoded images;
    its event is recorded after the crop, and the consumer's thread gets the batch only after
    hand_over with that event. No host sync is asked for anywhere."""
    ops = RecordingOps()

    def decode(jpgs, device):
        ops._note("decode")
        return gd.decode_batch(jpgs, device)

    loader = _loader(tiny_shards, "train", decode, ops)
    me = threading.current_thread().name
    seen = 0
    for i, _ in enumerate(loader):
        seen += 1
        assert [what for what, thread, _ in ops.log if thread == me][-1] == f"hand_over{i + 1}"
    log = [(what, stream) for what, thread, stream in ops.log if thread == "gpu-decode"]
    decodes = [i for i, (what, _) in enumerate(log) if what == "decode"]
    assert seen == len(decodes) == 8 and all(log[i][1] == "decode" for i in decodes)
    for k, i in enumerate(decodes):
        nxt = decodes[k + 1] if k + 1 < len(decodes) else len(log)
        between = [what for what, _ in log[i + 1:nxt]]
        assert len(between) >= 5 and between == ["exit decode", "crop waits on decode, holds 8 images", "enter crop", f"done{k + 1}",
                           "exit crop", "enter decode"][:len(between)]
    assert not [what for what, _, _ in ops.log if "drain" in what or "sync" in what]
    assert [int(what[9:]) for what, _, _ in ops.log if what.startswith("hand_over")] == list(range(1, 9))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_bad_jpeg_in_a_batch_is_found_by_halving(monkeypatch):
    """One bad JPEG among 32: about 2 log2(32) decode calls instead of 32 single ones; the others
    decode exactly as alone."""
    import torchvision.io
    good = [torch.frombuffer(bytearray(_jpeg()), dtype=torch.uint8) for _ in range(32)]
    jpgs = list(good)
    jpgs[19] = torch.frombuffer(bytearray(b"\xff\xd8\xff\xe0 not a jpeg"), dtype=torch.uint8)
    calls = []
    real = torchvision.io.decode_jpeg

    def counting(data, *args, **kwargs):
        calls.append(len(data) if isinstance(data, list) else 1)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(torchvision.io, "decode_jpeg", counting)
    images = gd.decode_batch(jpgs, torch.device("cpu"))
    assert [i for i, img in enumerate(images) if img is None] == [19]
    alone = real(good[0], mode=torchvision.io.ImageReadMode.RGB)
    assert all(torch.equal(img, alone) for i, img in enumerate(images) if i != 19)
    assert len(calls) <= 2 * 5 + 1 and calls[0] == 32
    calls.clear()
    assert len(gd.decode_batch(good, torch.device("cpu"))) == 32 and calls == [32]


def test_decode_thread_stops_with_the_consumer_and_passes_errors_on(tiny_shards):
    loader = _loader(tiny_shards, "train", gd.decode_batch)
    it = iter(loader)
    next(it)
    it.close()  # an epoch cut short (--limit-batches)
    assert not [t for t in threading.enumerate() if t.name == "gpu-decode"]
    assert loader.stats["batches"] >= 1

    def broken(jpgs, device):
        raise OSError("simulated device failure")

    with pytest.raises(OSError, match="simulated"):
        list(_loader(tiny_shards, "train", broken))


def test_unknown_arguments_are_an_error(tiny_shards):
    with pytest.raises(TypeError):
        gd.make_gpu_decode_loader(str(tiny_shards), "train", 8, device="cpu", decoder="pil")


def test_gpu_decode_interpolation_follows_the_flags(tiny_shards):
    """--val-interpolation bicubic: val pixels near the CPU loader's (torchvision's uint8 bicubic,
    which clips between its passes); --train-interpolation random: a seeded epoch repeats exactly,
    and is neither the all-bilinear nor the all-bicubic one; val refuses random."""
    data = str(tiny_shards)
    gpu_val = list(gd.make_gpu_decode_loader(data, "val", 8, device="cpu", interpolation="bicubic", **KW))
    cpu_val = list(make_loader(data, "val", 8, decoder="tvio", interpolation="bicubic", **KW))
    plain = list(gd.make_gpu_decode_loader(data, "val", 8, device="cpu", **KW))
    for (xg, yg), (xc, yc), (xp, _) in zip(gpu_val, cpu_val, plain, strict=True):
        assert torch.equal(yg, yc) and (xg.int() - xc.int()).abs().max() <= 2
        assert not torch.equal(xg, xp)

    def train(interpolation):
        return torch.cat([x for x, _ in gd.make_gpu_decode_loader(data, "train", 8, device="cpu",
                                                                  interpolation=interpolation, **KW)])

    mixed = train("random")
    assert torch.equal(mixed, train("random"))
    assert not torch.equal(mixed, train("bilinear")) and not torch.equal(mixed, train("bicubic"))
    with pytest.raises(ValueError, match="val interpolation 'random'"):
        gd.make_gpu_decode_loader(data, "val", 8, device="cpu", interpolation="random", **KW)
