"""The pixel form's loader path (``decode_pixels``, ``_jpegcrop.yuv_crop_into``): the C kernel against
its numpy twin (same bytes) and a float reference (the bound in docs/loader.md), flips, the val box,
the crop stream shared with the JPEG path, and a loader over pixel shards."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
from PIL import Image

from imagenet_shards.pipeline.format import pixels
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader import decode_pixels as pix
from imagenet_shards.train.loader import make_loader
from tests.fixtures.loader import photo_image, pillow_weights, texture_image, write_pixel_set, write_shard_set

needs_c = pytest.mark.skipif(dec._jpegcrop is None, reason="imagenet_shards.train.loader._jpegcrop not built")


def meta(w: int, h: int) -> bytes:
    return b'{"width":%d,"height":%d}' % (w, h)


def crops(size, rng: random.Random, n: int):
    """RandomResizedCrop boxes with a flip each, and the val centre crop unflipped."""
    for _ in range(n):
        yield dec.random_resized_crop_params(*size, (0.08, 1.0), (3 / 4, 4 / 3), rng), rng.random() < 0.5
    yield dec.center_crop_params(*size, 256, 224), False


def c_crop(payload, size, box, res, flip, filter="bilinear") -> np.ndarray:
    out = np.full((3, res, res), 7, np.uint8)
    dec._jpegcrop.yuv_crop_into(payload, *size, out, *box, flip, filter)
    return out


def float_reference(payload, size, box, res: int, flip: bool, filter: str = "bilinear") -> np.ndarray:
    """The exact (float64, unrounded) filter: Y over the box, Cb/Cr over the box halved, then JFIF's
    float inverse (pixels.to_rgb's coefficients)."""
    y, cb, cr = pixels.planes(payload, *size)
    top, left, h, w = box

    def resample(p, t, lf, hh, ww):
        cols = np.clip(pillow_weights(t, t + hh, p.shape[0], res, filter) @ p.astype(np.float64), 0, 255)
        return np.clip(cols @ pillow_weights(lf, lf + ww, p.shape[1], res, filter).T, 0, 255)

    yy = resample(y, *box)
    u, v = (resample(c, top / 2, left / 2, h / 2, w / 2) - 128 for c in (cb, cr))
    out = np.clip(np.stack([yy + 1.402 * v, yy - 0.344136 * u - 0.714136 * v, yy + 1.772 * u]), 0, 255)
    return out[:, :, ::-1] if flip else out


@needs_c
@pytest.mark.parametrize("filter", ["bilinear", "bicubic"])
def test_c_kernel_and_numpy_fallback_give_the_same_bytes(filter):
    rng = random.Random(0)
    for size in [(400, 300), (97, 150), (1, 3)]:
        payload = pixels.encode(np.asarray(photo_image(*size, seed=5)))
        for res in (160, 40):
            for box, flip in crops(size, rng, 4):
                want = pix.crop_numpy(payload, *size, box, np.empty((3, res, res), np.uint8), flip, filter)
                assert np.array_equal(c_crop(payload, size, box, res, flip, filter), want), (size, res, box, flip)


@needs_c
def test_c_kernel_and_numpy_fallback_agree_on_random_planes():
    """Random bytes are a valid payload: every kind of (Y, Cb, Cr) triple, clipping at both ends; row
    widths with and without a tail after the colour loop's 32-pixel steps, flipped or not."""
    rng, gen = random.Random(2), np.random.default_rng(2)
    for size in [(400, 300), (131, 97)]:
        payload = gen.integers(0, 256, pixels.payload_size(*size), dtype=np.uint8).tobytes()
        for res in (224, 57, 33):
            for box, flip in crops(size, rng, 3):
                want = pix.crop_numpy(payload, *size, box, np.empty((3, res, res), np.uint8), flip)
                assert np.array_equal(c_crop(payload, size, box, res, flip), want), (size, res, box, flip)


@needs_c
@pytest.mark.parametrize("filter", ["bilinear", "bicubic"])
@pytest.mark.parametrize("image", [photo_image, texture_image])
def test_pixels_are_within_the_stated_bound_of_the_float_reference(image, filter):
    """docs/loader.md, "Pixel shards": each plane's two passes rounded to 8 bits (as the JPEG path's
    resampler: 1.1 levels of the exact filter), then the inverse, which scales chroma's error by up
    to 1.772: at most 3 levels from the exact pipeline (bicubic, whose 8-bit passes also clip its
    negative lobes: 3.5), 0.6 on average."""
    rng = random.Random(1)
    for size in [(400, 300), (97, 150)]:
        payload = pixels.encode(np.asarray(image(*size, seed=3)))
        for res in (224, 40):
            for box, flip in crops(size, rng, 3):
                got = c_crop(payload, size, box, res, flip, filter).astype(np.float64)
                err = np.abs(got - float_reference(payload, size, box, res, flip, filter))
                assert err.max() <= (3 if filter == "bilinear" else 3.5) and err.mean() < 0.6, (
                    size, res, box, err.max(), err.mean())


@needs_c
def test_flip_mirrors_exactly_and_a_flat_colour_comes_back():
    size = (123, 77)
    payload = pixels.encode(np.asarray(texture_image(*size, seed=2)))
    box = (10.0, 5.0, 60.0, 90.0)
    assert np.array_equal(c_crop(payload, size, box, 64, True), c_crop(payload, size, box, 64, False)[:, :, ::-1])
    flat = pixels.encode(np.full((50, 70, 3), (200, 30, 90), np.uint8))
    want = pixels.to_rgb(flat, 70, 50)[0, 0].astype(int)
    got = pix.pixels_val(flat, meta(70, 50), resize=64, crop=56)
    assert np.abs(got.reshape(3, -1).T.astype(int) - want).max() <= 1


def test_train_and_val_draw_the_jpeg_paths_boxes():
    """Same rng draws as decode_train/decode_val, so a set's crops do not depend on its form."""
    size, res = (160, 120), 48
    rgb = np.asarray(photo_image(*size, seed=9))
    b = io.BytesIO()
    Image.fromarray(rgb).save(b, "JPEG", quality=95)
    payload = pixels.encode(rgb)
    for seed in range(6):
        r1, r2 = random.Random(seed), random.Random(seed)
        a = pix.pixels_train(payload, meta(*size), res=res, rng=r1)
        j = dec.decode_train(b.getvalue(), res=res, rng=r2, decoder="pil")
        assert r1.getstate() == r2.getstate()
        assert np.abs(a.astype(int) - j).mean() < 4  # the same box: JPEG's loss apart, the same picture
    v = pix.pixels_val(payload, meta(*size), resize=64, crop=56)
    box = dec.center_crop_params(*size, 64, 56)
    assert np.array_equal(v, pix.crop_numpy(payload, *size, box, np.empty((3, 56, 56), np.uint8), False))


def test_bad_samples_raise_decode_errors():
    with pytest.raises(dec.DecodeError, match="yuv420"):
        pix.pixels_val(b"\0" * 10, meta(4, 4), resize=4, crop=4)
    with pytest.raises(dec.DecodeError, match="width/height"):
        pix.pixels_val(b"\0" * 24, b"{}", resize=4, crop=4)


def test_a_loader_over_pixel_shards_matches_the_same_crops_of_the_jpeg_set(tmp_path):
    """The loader picks the form from the manifest; the GPU path refuses pixel shards in one line."""
    kw = dict(train=12, val=5, shard_samples=4, size=[(64, 48), (40, 56)], content="photo")
    jpeg_set, pixel_set = write_shard_set(tmp_path / "jpeg", **kw), write_pixel_set(tmp_path / "pix", **kw)
    assert make_loader(str(pixel_set), "val", 4).dataset.cfg.form == "yuv420"
    assert make_loader(str(jpeg_set), "val", 4).dataset.cfg.form == "jpeg"
    for split in ("train", "val"):
        a = [b for b in make_loader(str(pixel_set), split, 4, workers=0, res=32, val_resize=40, val_crop=32)]
        j = [b for b in make_loader(str(jpeg_set), split, 4, workers=0, res=32, val_resize=40, val_crop=32, decoder="pil")]
        assert [x[1].tolist() for x in a] == [x[1].tolist() for x in j] and len(a) == (3 if split == "train" else 2)
        for (pa, _), (pj, _) in zip(a, j):
            assert pa.dtype == torch.uint8 and pa.shape == pj.shape
            assert (pa.int() - pj.int()).abs().float().mean() < 6
    from imagenet_shards.train.loader.gpu_decode import make_gpu_decode_loader
    with pytest.raises(ValueError, match="JPEG shards only"):
        make_gpu_decode_loader(str(pixel_set), "train", 4, device="cpu")



def test_a_mid_epoch_resume_on_pixel_shards_is_exact(tmp_path):
    """Cut after 3 batches, resumed from position() and plan_state(): the rest equals the uninterrupted
    epoch (the trainer-level run with SIGTERM: test_preemption's pixel test, slow)."""
    data = str(write_pixel_set(tmp_path / "pix", train=24, shard_samples=7, size=[(40, 30), (30, 44)],
                               content="photo"))

    def loader():
        return make_loader(data, "train", 4, workers=0, res=16, seed=3, epoch=1, shuffle_buffer=8)

    straight = [(x.clone(), y.clone()) for x, y in loader()]
    first, head = loader(), []
    for x, y in first:
        head.append((x.clone(), y.clone()))
        if len(head) == 3:
            break
    again = loader()
    again.resume(first.plan_state(), [first.position(3)])
    rest = [(x.clone(), y.clone()) for x, y in again]
    assert len(straight) == 6 and len(head) + len(rest) == 6
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(straight, head + rest))


def test_random_interpolation_draws_after_crop_and_flip_as_the_jpeg_path():
    """--train-interpolation random (rsb-a3): one draw after the box and the flip, the filter the draw
    names; bilinear and bicubic draw nothing (so other recipes' streams are as before)."""
    size = (160, 120)
    payload = pixels.encode(np.asarray(photo_image(*size, seed=4)))
    seen = set()
    for seed in range(12):
        r1, r2 = random.Random(seed), random.Random(seed)
        got = pix.pixels_train(payload, meta(*size), res=48, rng=r1, interpolation="random")
        box = dec.random_resized_crop_params(*size, (0.08, 1.0), (3 / 4, 4 / 3), r2)
        flip = r2.random() < 0.5
        filter = "bicubic" if r2.random() < 0.5 else "bilinear"
        seen.add(filter)
        want = pix.crop_numpy(payload, *size, box, np.empty((3, 48, 48), np.uint8), flip, filter)
        assert np.array_equal(got, want) and r1.getstate() == r2.getstate(), seed
    assert seen == {"bilinear", "bicubic"}
    r1, r2 = random.Random(0), random.Random(0)
    pix.pixels_train(payload, meta(*size), res=48, rng=r1, interpolation="bicubic")
    dec.random_resized_crop_params(*size, (0.08, 1.0), (3 / 4, 4 / 3), r2), r2.random()
    assert r1.getstate() == r2.getstate()
    with pytest.raises(ValueError, match="unknown val interpolation 'random'"):
        pix.pixels_val(payload, meta(*size), resize=64, crop=56, interpolation="random")


def test_read_shard_with_views_gives_the_same_bytes_and_lets_go_of_the_mapping(tmp_path):
    """``views``: a mapped shard's large image members (>= HashingReader.VIEW_MIN bytes) come as
    read-only memoryviews of the mapping, with the bytes the copies have; .cls and .json stay bytes;
    once the records are gone, so is the mapping (its file descriptor closed)."""
    import os

    from imagenet_shards.pipeline.format.tar import HashingReader
    from imagenet_shards.train import loader as D

    data = write_pixel_set(tmp_path / "pix", train=8, shard_samples=8, size=[(64, 48), (40, 56)], content="photo")
    url = D.split_shards(D.read_manifest(str(data)), str(data), "train")[0].url
    fds = set(os.listdir("/proc/self/fd"))
    copies, views = list(D.read_shard(url)), list(D.read_shard(url, views=True))
    assert [r.key for r in copies] == [r.key for r in views] and len(views) == 8
    big = [len(r.jpg) >= HashingReader.VIEW_MIN for r in views]
    assert any(big) and not all(big)  # 64 x 48: 4,608 bytes; 40 x 56: 3,360
    for c, v, b in zip(copies, views, big):
        assert type(c.jpg) is bytes and type(v.jpg) is (memoryview if b else bytes) and bytes(v.jpg) == c.jpg
        assert v.cls == c.cls and v.meta == c.meta and type(v.cls) is bytes and type(v.meta) is bytes
        if b:
            assert v.jpg.readonly
    assert set(os.listdir("/proc/self/fd")) - fds  # the mapping is held by the views
    del views, v
    assert not set(os.listdir("/proc/self/fd")) - fds
