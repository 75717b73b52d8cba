"""The turbo decoder's one C call per sample (``_jpegcrop.crop_into``): exactness of entering at the
restart markers, the resampler against an exact float reference and against Pillow, damaged data,
argument checks."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image

from tests.fixtures.loader import flip_scan_bytes, pillow_weights, texture_image
from imagenet_shards.train.loader import decode as dec

pytestmark = pytest.mark.skipif(dec._jpegcrop is None, reason="imagenet_shards.train.loader._jpegcrop not built")
J = dec._jpegcrop


def jpeg(img: Image.Image, quality: int = 90, **kw) -> bytes:
    b = io.BytesIO()
    img.save(b, "JPEG", quality=quality, **kw)
    return b.getvalue()


def crop(data: bytes, box, res: int, flip: bool = False, **kw) -> np.ndarray:
    out = np.full((3, res, res), 7, np.uint8)
    assert J.crop_into(data, out, *box, flip, **kw) is None
    return out


def boxes(size, rng: random.Random, n: int):
    """RandomResizedCrop boxes on an image of ``size``, and the val centre crop."""
    for _ in range(n):
        yield dec.random_resized_crop_params(*size, (0.08, 1.0), (3 / 4, 4 / 3), rng)
    yield dec.center_crop_params(*size, 256, 224)


def float_reference(data: bytes, box, res: int, flip: bool, filter: str = "bilinear", s: int | None = None) -> np.ndarray:
    """The crop as an exact (float64, unrounded) two-pass filter over libjpeg's full decode at the
    DCT scale crop_into picks (or 1/``s``): what its pixels are defined against. Each pass is clipped
    to [0, 255] as Pillow's 8-bit passes are (only the cubic's negative lobes reach outside)."""
    top, left, h, w = box
    s = dec._dct_reduction(w, h, res, res) if s is None else s
    W, H = J.header(data)[:2]
    pixels, x, y, width, rows = J.decode_region(data, s, 0, 0, 1 << 20, 1 << 20, restarts=False)
    full = np.frombuffer(pixels, np.uint8).reshape(rows, width, 4)[:, :, :3].astype(np.float64)
    assert (x, y) == (0, 0) and (width, rows) == (-(-W // s), -(-H // s))
    mh = pillow_weights(left / s, (left + w) / s, width, res, filter)
    mv = pillow_weights(top / s, (top + h) / s, rows, res, filter)
    out = np.stack([np.clip(mv @ np.clip(full[:, :, c] @ mh.T, 0, 255), 0, 255) for c in range(3)])
    return out[:, :, ::-1] if flip else out


@pytest.mark.parametrize("subsampling, filter", [(2, "bilinear"), (2, "bicubic")] + [
    pytest.param(s, f, marks=pytest.mark.slow) for s in (0, 1) for f in ("bilinear", "bicubic")])
def test_pixels_are_within_one_level_of_the_exact_filter(subsampling, filter):
    """The resampler's semantics (docs/loader.md): Pillow's bilinear or bicubic filter, weights in
    14-bit fixed point, each pass rounded (and clipped) to 8 bits. So within 1 level of the exact
    filter rounded, and 1.1 of it unrounded for bilinear (two roundings of 0.5, and the weights'
    ~0.04; 1.2 for bicubic, whose |weights| sum to up to ~1.13, so the first rounding counts more), at
    every DCT scale (res 224 .. 24 on these sizes gives 1, 1/2, 1/4, 1/8), both flips, up- and
    downscaling."""
    rng = random.Random(subsampling)
    bound = {"bilinear": 1.1, "bicubic": 1.2}[filter]
    for size in [(500, 375), (97, 150)]:
        data = jpeg(texture_image(*size, seed=11), subsampling=subsampling, restart_marker_blocks=2)
        for res in (224, 40):
            for box in boxes(size, rng, 3 if res == 224 else 6):
                flip = rng.random() < 0.5
                ref = float_reference(data, box, res, flip, filter)
                got = crop(data, box, res, flip, filter=filter).astype(np.float64)
                assert np.abs(got - np.rint(ref)).max() <= 1 and np.abs(got - ref).max() <= bound, (size, res, box)
                assert np.abs(got - ref).mean() < 0.35


@pytest.mark.parametrize("filter", ["bilinear", "bicubic"])
def test_pixels_are_close_to_pillows_resize(filter):
    """Against the Pillow path (Image.resize(BILINEAR or BICUBIC, box=...), pillow-simd's own fixed
    point): mostly equal, never more than 2 apart."""
    rng = random.Random(4)
    data = jpeg(texture_image(500, 375, seed=12))
    differ, total = 0, 0
    for res in (224, 160, 64):
        for box in boxes((500, 375), rng, 4):
            img = dec._open(data)
            want = dec._write_chw(dec._pil_resized_crop(img, *box, res, res, filter), None)
            got = crop(data, box, res, filter=filter)
            d = np.abs(got.astype(int) - want)
            assert d.max() <= 2
            differ, total = differ + int((d > 0).sum()), total + d.size
    assert differ / total < 0.05


MARKERS = [{"restart_marker_rows": 1}, {"restart_marker_blocks": 2}, {"restart_marker_blocks": 1},
           {"restart_marker_blocks": 7}]  # 7 MCUs tile no row here: decoded from the top


@pytest.mark.parametrize("subsampling, marker", [(2, MARKERS[1])] + [
    pytest.param(s, m, marks=pytest.mark.slow) for s in (0, 1, 2) for m in MARKERS if (s, m) != (2, MARKERS[1])])
def test_entering_at_restart_markers_changes_no_output_byte(subsampling, marker):
    """Crops decoded from only the cells around them (the exact cell choice of jpegcrop_entry.c)
    equal those decoded from the top, byte for byte: train and val boxes, every DCT scale the
    automatic rule picks, and the num/8 scales asked for explicitly."""
    rng = random.Random(subsampling * 10 + len(str(marker)))
    for size in [(500, 375), (333, 251), (1000, 700)]:
        data = jpeg(texture_image(*size, seed=3), subsampling=subsampling, **marker)
        for res in (224, 96, 24):
            for box in boxes(size, rng, 4):
                flip = rng.random() < 0.5
                assert np.array_equal(crop(data, box, res, flip), crop(data, box, res, flip, restarts=False)), \
                    (size, res, box)
        for num in (3, 6, 8, 12):
            for box in boxes(size, rng, 2):
                assert np.array_equal(crop(data, box, 64, scale=num), crop(data, box, 64, scale=num, restarts=False))


def test_one_call_skips_what_the_crop_does_not_need():
    """Garbage in the cells left of a crop (markers intact): entered at the markers the crop is the
    clean image's; decoded from the top libjpeg meets the garbage and says the data is corrupt."""
    clean = jpeg(texture_image(320, 96, seed=5), restart_marker_blocks=2)  # 20 MCUs a row: 10 cells of 32 px
    sos = clean.index(b"\xff\xda")
    at = sos + 2 + int.from_bytes(clean[sos + 2:sos + 4], "big")
    damaged, k = bytearray(clean), 0
    while True:  # cells 0, 10, 20...: the first of each row
        end = damaged.find(b"\xff", at)
        while damaged[end + 1] == 0:
            end = damaged.find(b"\xff", end + 2)
        if k % 10 == 0:
            for i in range(at + 2, end - 2):
                damaged[i] = 0x55
        if damaged[end + 1] == 0xD9:
            break
        at, k = end + 2, k + 1
    box = (0.0, 200.0, 90.0, 110.0)
    assert np.array_equal(crop(bytes(damaged), box, 48), crop(clean, box, 48))
    kind, message = J.crop_into(bytes(damaged), np.empty((3, 48, 48), np.uint8), *box, False, restarts=False)
    assert kind == "corrupt" and "Corrupt JPEG data" in message


def test_a_libjpeg_warning_is_a_bad_sample_not_a_grey_crop():
    """16 bytes flipped inside the entropy-coded data, size kept (issue 23): Pillow decodes it without
    a word; the turbo decoder reports libjpeg's warning, and decode_train raises it as DecodeError."""
    clean = jpeg(texture_image(320, 240, seed=9), restart_marker_blocks=2)
    damaged = flip_scan_bytes(clean)
    assert len(damaged) == len(clean) and damaged != clean
    Image.open(io.BytesIO(damaged)).load()  # no error from Pillow
    whole = dec.center_crop_params(320, 240, 240, 240)  # reads every row and column
    kind, message = J.crop_into(damaged, np.empty((3, 240, 240), np.uint8), *whole, False)
    assert kind == "corrupt" and message.startswith("Corrupt JPEG data")
    with pytest.raises(dec.DecodeError, match="corrupt JPEG data .libjpeg: Corrupt JPEG data"):
        dec.decode_val(damaged, resize=240, crop=240, decoder="turbo")
    assert dec.decode_val(damaged, resize=240, crop=240, decoder="pil").shape == (3, 240, 240)  # Pillow cannot tell
    assert dec.decode_val(clean, resize=240, crop=240, decoder="turbo").shape == (3, 240, 240)


def test_what_it_declines_goes_to_pillow_and_bad_arguments_raise():
    gray = jpeg(texture_image(80, 60, seed=1).convert("L"))
    assert J.crop_into(gray, np.empty((3, 8, 8), np.uint8), 0, 0, 60, 80, False) == ("declined", "")
    assert J.crop_into(b"not a jpeg", np.empty((3, 8, 8), np.uint8), 0, 0, 6, 8, False) == ("declined", "")
    kind, _ = J.crop_into(jpeg(texture_image(80, 60, seed=1))[:300], np.empty((3, 8, 8), np.uint8), 0, 0, 60, 80, False)
    assert kind in ("error", "corrupt")  # cut inside the scan
    photo = jpeg(texture_image(80, 60, seed=1))
    for out, box, kw, match in [(np.empty((8, 8, 3), np.uint8), (0, 0, 6, 8), {}, "shape"),
                                (np.empty((3, 8, 8), np.float32), (0, 0, 6, 8), {}, "uint8"),
                                (np.empty((3, 8, 8), np.uint8)[:, ::2], (0, 0, 6, 8), {}, "contiguous"),
                                (np.empty((3, 8, 8), np.uint8), (0, 0, 0, 8), {}, "positive"),
                                (np.empty((3, 8, 8), np.uint8), (0, 0, 6, float("nan")), {}, "finite"),
                                (np.empty((3, 8, 8), np.uint8), (0, 0, 6, 8), {"scale": 17}, "scale"),
                                (np.empty((3, 8, 8), np.uint8), (0, 0, 6, 8), {"filter": "lanczos"}, "filter")]:
        with pytest.raises((ValueError, BufferError), match=match):
            J.crop_into(photo, out, *box, False, **kw)
