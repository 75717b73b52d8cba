"""prepare-shards derive's C encoder (pipeline/native/jpegtran_yuv.c, `_jpegtran.yuv420`) gives the bytes
of the pixel form's numpy reference (`format.pixels.encode`), byte for byte, whatever the size."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.prepare import encoders
from imagenet_shards.pipeline.prepare.images import decode_resized
from imagenet_shards.pipeline.tools.synthetic.images import class_styles, photo_bytes

yuv420 = encoders._yuv420
needs_c = pytest.mark.skipif(yuv420 is None, reason="the _jpegtran extension (with yuv420) is not built here")


def _same(rgb: np.ndarray) -> None:
    h, w = rgb.shape[:2]
    want = pixels.encode(rgb)
    got = yuv420(np.ascontiguousarray(rgb), w, h)
    assert len(got) == pixels.payload_size(w, h)
    if got != want:
        diff = np.flatnonzero(np.frombuffer(got, np.uint8) != np.frombuffer(want, np.uint8))
        pytest.fail(f"{w}x{h}: {diff.size} bytes differ, the first at offset {diff[0]} of {len(want)}")


@needs_c
def test_random_sizes_odd_and_degenerate_ones_included():
    rng = np.random.default_rng(7)
    sizes = [(1, 1), (1, 2), (2, 1), (1, 37), (37, 1), (2, 2), (3, 3), (31, 1), (64, 3), (401, 299)]
    sizes += [(int(rng.integers(1, 90)), int(rng.integers(1, 90))) for _ in range(400)]
    for w, h in sizes:
        _same(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


@needs_c
def test_the_corners_of_the_rgb_cube_and_flat_planes():
    # the extremes of each weighted sum: where a C type too narrow, or a clip the reference lacks, would show
    corners = np.array([[r, g, b] for r in (0, 255) for g in (0, 255) for b in (0, 255)], np.uint8)
    _same(np.tile(corners, (5, 3, 1)))  # 5 x 24, each 2 x 2 block mixing corners
    _same(np.repeat(corners[None], 3, axis=0))  # 3 x 8: an odd last row
    for v in (0, 1, 127, 128, 254, 255):
        _same(np.full((7, 9, 3), v, np.uint8))


@needs_c
def test_decoded_photos_at_the_sizes_derive_stores():
    rng = np.random.default_rng(3)
    style = class_styles(1, seed=3)[0]
    for w, h, side in ((500, 375, 400), (333, 500, 257), (640, 427, 199), (123, 77, 400), (1200, 901, 401)):
        jpeg, _ = photo_bytes(style, rng, w, h, quality=85)
        _same(decode_resized(jpeg, f"longer:{side}"))


@needs_c
def test_a_buffer_of_the_wrong_size_is_refused():
    rgb = np.zeros((4, 5, 3), np.uint8)
    with pytest.raises(ValueError, match="60 bytes are not a 6 x 4 RGB image"):
        yuv420(rgb, 6, 4)
    with pytest.raises(ValueError, match="not a 0 x 4"):
        yuv420(rgb, 0, 4)


def test_encode_pixels_takes_any_layout_and_falls_back_to_the_reference(monkeypatch):
    rgb = np.random.default_rng(1).integers(0, 256, (9, 14, 3), dtype=np.uint8)
    view = rgb[:, ::2]  # not contiguous: the C path gets a packed copy
    assert encoders.encode_pixels(view) == pixels.encode(view)
    monkeypatch.setattr(encoders, "_yuv420", None)  # as without the extension
    assert encoders.encode_pixels(view) == pixels.encode(view)
    with pytest.raises(ValueError, match="H x W x 3 uint8"):
        encoders.encode_pixels(rgb.astype(np.uint16))
