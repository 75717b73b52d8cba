"""Per-sample decoding of the pixel form (pipeline/format/pixels.py): YUV 4:2:0 planes in, a uint8 crop out.

Same crop streams as the JPEG path (``decode.decode_train``: the RandomResizedCrop box, then the
flip, drawn from the sample's rng in that order), so a sample gets the same box whichever form its
set is stored in. One C call per sample (``_jpegcrop.yuv_crop_into``, pipeline/native/jpegcrop_pixels.c)
resamples Y over the box and Cb/Cr over the box halved, with the turbo path's filter and weights,
and converts to RGB straight into the CHW slot. Without the extension, ``crop_numpy`` computes the
same integers in numpy (same bytes, tested; much slower). The bound against the float reference
(``pixels.to_rgb`` of the planes, then the exact triangle filter): docs/loader.md, "Pixel shards".
"""

from __future__ import annotations

import json
import math
import random

import numpy as np

from imagenet_shards.pipeline.format import pixels
from imagenet_shards.train.augment import interpolation as interp
from imagenet_shards.train.loader import decode as dec

FORM = pixels.FORM
_BITS = 14  # RESAMPLE_BITS (jpegcrop_resample.h)
_HALF = 1 << (_BITS - 1)


def size_of(meta: bytes | None) -> tuple[int, int]:
    """(width, height) from a pixel sample's ``KEY.json``; DecodeError when it has none."""
    try:
        m = json.loads(meta)
        return int(m["width"]), int(m["height"])
    except (TypeError, ValueError, KeyError) as e:
        raise dec.DecodeError(f"pixel sample without a usable .json width/height ({e})") from None


def _cubic(x: float) -> float:
    """Pillow's bicubic (Keys, a = -0.5), as jpegcrop_resample.c's ``cubic``."""
    x, a = abs(x), -0.5
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    return (((x - 5) * x + 8) * x - 4) * a if x < 2.0 else 0.0


def _weights(in0: float, in1: float, size: int, out: int, filter: str = "bilinear") -> np.ndarray:
    """axis_plan's fixed-point weights (jpegcrop_resample.c) as an out x size int64 matrix."""
    in0, in1 = float(np.float32(in0)), float(np.float32(in1))  # Pillow takes the box as C floats
    scale = (in1 - in0) / out
    filterscale = max(scale, 1.0)
    support = filterscale * (2.0 if filter == "bicubic" else 1.0)
    kernel = _cubic if filter == "bicubic" else (lambda x: max(0.0, 1.0 - abs(x)))
    ss, ksize = 1.0 / filterscale, int(math.ceil(support)) * 2 + 1
    m = np.zeros((out, size), np.int64)
    for i in range(out):
        center = in0 + (i + 0.5) * scale
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), size)
        n = min(max(hi - lo, 0), ksize)
        w = [kernel((x + lo - center + 0.5) * ss) for x in range(n)]
        ww = sum(w)
        m[i, lo:lo + n] = [int((-0.5 if v < 0 else 0.5) + v * (1 << _BITS)) for v in (v / ww if ww else v for v in w)]
    return m


def _resample(plane: np.ndarray, box: tuple, out_h: int, out_w: int, filter: str) -> np.ndarray:
    top, left, h, w = box
    mv = _weights(top, top + h, plane.shape[0], out_h, filter)
    mh = _weights(left, left + w, plane.shape[1], out_w, filter)
    cols = np.clip((mv @ plane.astype(np.int64) + _HALF) >> _BITS, 0, 255)  # vertical pass first, as the C
    return np.clip((cols @ mh.T + _HALF) >> _BITS, 0, 255)


def crop_numpy(payload, width: int, height: int, box: tuple, out: np.ndarray, flip: bool,
               filter: str = "bilinear") -> np.ndarray:
    """``_jpegcrop.yuv_crop_into`` in numpy: the same integer arithmetic, so the same bytes."""
    y, cb, cr = pixels.planes(payload, width, height)
    _, out_h, out_w = out.shape
    top, left, h, w = box
    yy = _resample(y, box, out_h, out_w, filter)
    u, v = (_resample(c, (top / 2, left / 2, h / 2, w / 2), out_h, out_w, filter) - 128 for c in (cb, cr))
    rgb = np.stack([yy + ((91881 * v + 32768) >> 16), yy + ((-22554 * u - 46802 * v + 32768) >> 16),
                    yy + ((116130 * u + 32768) >> 16)])
    out[...] = np.clip(rgb[:, :, ::-1] if flip else rgb, 0, 255)
    return out


def _crop(payload, width: int, height: int, box: tuple, size: int, out: np.ndarray | None, flip: bool,
          filter: str) -> np.ndarray:
    shape = (3, size, size)
    slot = (out if out is not None and out.flags.c_contiguous and out.dtype == np.uint8 and out.shape == shape
            else np.empty(shape, np.uint8))
    try:
        if dec._jpegcrop is not None:
            dec._jpegcrop.yuv_crop_into(payload, width, height, slot, *box, flip, filter)
        else:
            crop_numpy(payload, width, height, box, slot, flip, filter)
    except ValueError as e:  # the payload is not the size the json says
        raise dec.DecodeError(f"bad yuv420 sample: {e}") from None
    if out is not None and slot is not out:
        out[...] = slot
    return out if out is not None else slot


def pixels_train(payload, meta: bytes | None, *, res: int, rng: random.Random, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), hflip: bool = True, out: np.ndarray | None = None,
                 interpolation: str = "bilinear") -> np.ndarray:
    """``decode.decode_train`` for a pixel sample (``meta``: its KEY.json): the same draws from ``rng``
    (crop, flip, then the filter for "random")."""
    interp.check(interpolation, train=True)
    width, height = size_of(meta)
    box = dec.random_resized_crop_params(width, height, scale, ratio, rng)
    flip = hflip and rng.random() < 0.5
    return _crop(payload, width, height, box, res, out, flip, interp.draw(interpolation, rng))


def pixels_val(payload, meta: bytes | None, *, resize: int = 256, crop: int = 224, out: np.ndarray | None = None,
               ratio: float | None = None, interpolation: str = "bilinear") -> np.ndarray:
    """``decode.decode_val`` for a pixel sample: the same centre box, one resample."""
    interp.check(interpolation, train=False)
    width, height = size_of(meta)
    box = (dec.center_crop_ratio_params(width, height, ratio) if ratio is not None
           else dec.center_crop_params(width, height, resize, crop))
    return _crop(payload, width, height, box, crop, out, False, interpolation)
