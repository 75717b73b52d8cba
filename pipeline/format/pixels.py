"""The pixel form: a sample's image stored as decoded YUV 4:2:0 planes (docs/format.md, "Pixel form").

A pixel shard's image member is `KEY.yuv420`: the Y plane (height rows of width bytes), then Cb,
then Cr (each ceil(height/2) rows of ceil(width/2) bytes), no header; width and height are in the
sample's json. Colours are JFIF's full-range YCbCr (what a baseline JPEG holds), converted from RGB
with libjpeg's own 16-bit fixed-point coefficients (jccolor.c) so the bytes do not depend on a
float unit; chroma is the rounded mean of each 2x2 block (an odd last row or column is its own
edge repeated), sited at the block's centre as in JPEG.

Pure functions over numpy arrays: the writer (`encode`), the reader (`planes`), and the float
reference back to RGB (`to_rgb`) that tests, the audit and inspect-shards compare against.
"""

from __future__ import annotations

import numpy as np

FORM = "yuv420"
EXT = "yuv420"  # the member's extension: KEY.yuv420

# libjpeg's jccolor.c: FIX(x) = round(x * 2**16)
_SCALE = 16
_HALF = 1 << (_SCALE - 1)
_Y = (19595, 38470, 7471)
_CB = (-11059, -21709, 32768)
_CR = (32768, -27439, -5329)
_CHROMA_OFFSET = (128 << _SCALE) + _HALF - 1  # libjpeg's CBCR_OFFSET + ONE_HALF - 1


def chroma_size(width: int, height: int) -> tuple[int, int]:
    """(width, height) of each chroma plane."""
    return (width + 1) // 2, (height + 1) // 2


def payload_size(width: int, height: int) -> int:
    """Bytes of a KEY.yuv420 member for an image of width x height."""
    cw, ch = chroma_size(width, height)
    return width * height + 2 * cw * ch


def _subsample(plane: np.ndarray) -> np.ndarray:
    """The rounded mean of each 2x2 block of a uint8 plane; an odd edge is repeated."""
    h, w = plane.shape
    p = np.pad(plane, ((0, h % 2), (0, w % 2)), mode="edge").astype(np.uint16)
    s = p[0::2, 0::2] + p[0::2, 1::2] + p[1::2, 0::2] + p[1::2, 1::2]
    return ((s + 2) >> 2).astype(np.uint8)


def encode(rgb: np.ndarray) -> bytes:
    """The KEY.yuv420 payload of an H x W x 3 uint8 RGB image."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"encode wants H x W x 3 uint8 RGB, got {rgb.shape} {rgb.dtype}")
    r, g, b = (rgb[..., i].astype(np.int32) for i in range(3))
    y = (_Y[0] * r + _Y[1] * g + _Y[2] * b + _HALF) >> _SCALE
    cb = (_CB[0] * r + _CB[1] * g + _CB[2] * b + _CHROMA_OFFSET) >> _SCALE
    cr = (_CR[0] * r + _CR[1] * g + _CR[2] * b + _CHROMA_OFFSET) >> _SCALE
    parts = (y.astype(np.uint8), _subsample(cb.astype(np.uint8)), _subsample(cr.astype(np.uint8)))
    return b"".join(np.ascontiguousarray(p).tobytes() for p in parts)


def planes(payload: bytes | memoryview, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Y, Cb and Cr planes of a payload (views, no copy); ValueError if its size is not the
    size width x height implies."""
    want = payload_size(width, height)
    if width < 1 or height < 1 or len(payload) != want:
        raise ValueError(f"a {width}x{height} yuv420 image is {want} bytes, this one is {len(payload)}")
    buf = np.frombuffer(payload, dtype=np.uint8)
    cw, ch = chroma_size(width, height)
    n = width * height
    return (buf[:n].reshape(height, width), buf[n:n + cw * ch].reshape(ch, cw),
            buf[n + cw * ch:].reshape(ch, cw))


def to_rgb(payload: bytes | memoryview, width: int, height: int) -> np.ndarray:
    """The float reference back to H x W x 3 uint8 RGB: chroma repeated over its 2x2 block, JFIF's
    inverse (jdcolor.c's coefficients), rounded and clipped."""
    y, cb, cr = planes(payload, width, height)
    up = [np.repeat(np.repeat(c, 2, axis=0), 2, axis=1)[:height, :width].astype(np.float64) - 128.0 for c in (cb, cr)]
    yf = y.astype(np.float64)
    rgb = np.stack([yf + 1.402 * up[1], yf - 0.344136 * up[0] - 0.714136 * up[1], yf + 1.772 * up[0]], axis=-1)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
