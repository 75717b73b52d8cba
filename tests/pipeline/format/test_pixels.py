"""pipeline/format/pixels.py: the pixel form's bytes (docs/format.md, "Pixel form")."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from imagenet_shards.pipeline.format import pixels


def _photo(w: int, h: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], axis=-1)
    return np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("w,h", [(16, 10), (17, 9), (1, 1), (333, 250)])
def test_payload_is_three_planes_of_the_stated_sizes(w, h):
    data = pixels.encode(_photo(w, h))
    assert len(data) == pixels.payload_size(w, h) == w * h + 2 * ((w + 1) // 2) * ((h + 1) // 2)
    y, cb, cr = pixels.planes(data, w, h)
    assert y.shape == (h, w) and cb.shape == cr.shape == ((h + 1) // 2, (w + 1) // 2)


def test_planes_are_jfif_ycbcr():
    # JFIF's float conversion, rounded: libjpeg's 16-bit coefficients give it but for a few
    # values sitting at .5, off by one (Pillow's own convert("YCbCr") is off by one for half the pixels)
    rgb = _photo(64, 48, seed=3)
    y, cb, cr = pixels.planes(pixels.encode(rgb), 64, 48)
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    want_y = np.floor(0.299 * r + 0.587 * g + 0.114 * b + 0.5)
    full_cb = np.floor(128 - 0.168736 * r - 0.331264 * g + 0.5 * b + 0.5).clip(0, 255).astype(np.uint16)
    assert np.abs(y - want_y).max() <= 1 and (y == want_y).mean() > 0.99
    mean = (full_cb[0::2, 0::2] + full_cb[0::2, 1::2] + full_cb[1::2, 0::2] + full_cb[1::2, 1::2] + 2) >> 2
    assert np.abs(cb.astype(int) - mean.astype(int)).max() <= 1 and (cb == mean).mean() > 0.95


def test_round_trip_is_close_to_the_rgb_it_came_from():
    rgb = np.asarray(Image.open(io.BytesIO(_jpeg(_photo(200, 150, seed=5)))).convert("RGB"))
    back = pixels.to_rgb(pixels.encode(rgb), 200, 150)
    err = np.abs(back.astype(int) - rgb.astype(int))
    assert err.mean() < 6 and back.shape == rgb.shape  # chroma at half resolution: small, not zero
    grey = np.full((8, 8, 3), 77, np.uint8)
    assert np.array_equal(pixels.to_rgb(pixels.encode(grey), 8, 8), grey)  # no chroma: exact


def test_a_payload_of_the_wrong_size_is_refused():
    data = pixels.encode(_photo(10, 10))
    with pytest.raises(ValueError, match="10x10 yuv420 image is 150 bytes, this one is 149"):
        pixels.planes(data[:-1], 10, 10)
    with pytest.raises(ValueError, match="H x W x 3 uint8"):
        pixels.encode(np.zeros((4, 4), np.uint8))


def _jpeg(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=90)
    return buf.getvalue()
