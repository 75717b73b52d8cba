"""Batched resized crops for `--gpu-decode`: every image of a batch cropped and resized in a few
kernels, instead of a dozen small ones per image (torchvision's `resized_crop` in a Python loop).

The images are padded into one tensor (torch's nested-tensor padding: one copy into a flat buffer
and one padding kernel, not one copy per image) and each output is `Wy @ image @ Wx^T`, with
per-image weight matrices of the antialiased bilinear filter (torch's and PIL's: a triangle widened
by the downscale factor, cut at the crop's edges and renormalized), or per image of the bicubic one
(PIL's and torch's antialiased bicubic: Keys' cubic, a = -0.5, support 2 widened the same way; one
float pass, so unlike PIL's uint8 passes nothing is clipped between the two), and the horizontal
flip folded into `Wx`. Measured against torchvision's uint8 `resized_crop` on the same images: at most one grey
level apart (it rounds between its two passes; against its float path, equal but for rare ties),
when the matmuls run in float32: TF32 (`torch.set_float32_matmul_precision("high")`, which the
trainer sets only for `--amp none`) keeps 10 mantissa bits and can add a grey level.

The crop boxes of a batch are drawn at once too (`random_resized_crop_boxes`, `center_crop_boxes`):
the CPU loader's per-image functions in `decode`, in numpy over the batch, equal to them given the
same random draws (tests/train/augment/test_gpu_crop.py).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

CROP_CHUNK_FLOATS = 2**26  # float32 elements of padded images cropped per matmul (256 MB)
ATTEMPTS = 10              # RandomResizedCrop's tries before its centre-crop fallback


def rrc_boxes_from_draws(widths, heights, ratio, area_frac, log_ratio, u_top, u_left) -> np.ndarray:
    """(top, left, h, w) int64 [B,4] of RandomResizedCrop given its draws: area_frac and log_ratio
    [B, ATTEMPTS] (uniform in scale / log(ratio)), u_top and u_left [B] uniform in [0, 1) for the
    position (randint(0, n) = floor(u * (n + 1))). Same rules as `decode.random_resized_crop_params`."""
    width, height = np.asarray(widths, np.int64)[:, None], np.asarray(heights, np.int64)[:, None]
    target = (width * height) * area_frac
    aspect = np.exp(log_ratio)
    w = np.rint(np.sqrt(target * aspect)).astype(np.int64)  # rint: Python's round, half to even
    h = np.rint(np.sqrt(target / aspect)).astype(np.int64)
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = ok.argmax(1)
    rows = np.arange(len(first))
    w, h, width, height = w[rows, first], h[rows, first], width[:, 0], height[:, 0]
    top = np.floor(np.asarray(u_top) * (height - h + 1)).astype(np.int64)
    left = np.floor(np.asarray(u_left) * (width - w + 1)).astype(np.int64)
    # no try fits: a centre crop clamped to the ratio range
    in_ratio = width / height
    lo, hi = min(ratio), max(ratio)
    fw = np.where(in_ratio < lo, width, np.where(in_ratio > hi, np.rint(height * hi).astype(np.int64), width))
    fh = np.where(in_ratio < lo, np.rint(width / lo).astype(np.int64), height)
    miss = ~ok.any(1)
    out = np.stack([top, left, h, w], 1)
    out[miss] = np.stack([(height - fh) // 2, (width - fw) // 2, fh, fw], 1)[miss]
    return out


def random_resized_crop_boxes(widths, heights, scale, ratio, rng: np.random.Generator) -> np.ndarray:
    """RandomResizedCrop boxes (top, left, h, w) for a batch of image sizes, drawn from `rng`."""
    n = len(widths)
    area_frac = rng.uniform(scale[0], scale[1], (n, ATTEMPTS))
    log_ratio = rng.uniform(math.log(ratio[0]), math.log(ratio[1]), (n, ATTEMPTS))
    return rrc_boxes_from_draws(widths, heights, ratio, area_frac, log_ratio, rng.random(n), rng.random(n))


def center_crop_boxes(widths, heights, resize: int, crop: int) -> np.ndarray:
    """`decode.center_crop_params` (Resize(resize) + CenterCrop(crop)) for a batch: float64 [B,4]."""
    if crop > resize:
        raise ValueError(f"val crop {crop} is larger than the val resize {resize}")
    width, height = np.asarray(widths, np.int64), np.asarray(heights, np.int64)
    portrait = width <= height
    rw = np.where(portrait, resize, (resize * width / height).astype(np.int64))  # int(): truncation
    rh = np.where(portrait, (resize * height / width).astype(np.int64), resize)
    top, left = np.rint((rh - crop) / 2.0), np.rint((rw - crop) / 2.0)
    sx, sy = width / rw, height / rh
    return np.stack([top * sy, left * sx, crop * sy, crop * sx], 1)


def _keys_cubic(x: torch.Tensor) -> torch.Tensor:
    """PIL's bicubic_filter (a = -0.5) at |x|."""
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return torch.where(x < 1.0, near, torch.where(x < 2.0, far, torch.zeros_like(x)))


def resize_weights(starts: torch.Tensor, lengths: torch.Tensor, size: int, extent: int,
                   cubic: torch.Tensor | None = None) -> torch.Tensor:
    """[B, size, extent] float32 weights of an antialiased resample of each row range
    [start, start+length) to `size` outputs (torch's/PIL's antialias filters: a triangle, or where
    `cubic` (bool [B]) is set Keys' cubic, widened by the downscale factor, cut at the range's ends
    and renormalized)."""
    lengths = lengths.clamp(min=1).to(torch.float32).view(-1, 1, 1)
    starts = starts.to(torch.float32).view(-1, 1, 1)
    scale = lengths / size
    filterscale = scale.clamp(min=1.0)
    support = filterscale if cubic is None else filterscale * (1.0 + cubic.to(torch.float32).view(-1, 1, 1))
    center = (torch.arange(size, device=starts.device, dtype=torch.float32).view(1, -1, 1) + 0.5) * scale
    j = torch.arange(extent, device=starts.device, dtype=torch.float32).view(1, 1, -1) - starts  # crop coords
    lo = (center - support + 0.5).floor().clamp(min=0)
    hi = torch.minimum((center + support + 0.5).floor(), lengths)
    x = ((j - center + 0.5) / filterscale).abs()
    w = (1 - x).clamp(min=0)
    if cubic is not None:
        w = torch.where(cubic.view(-1, 1, 1), _keys_cubic(x), w)
    w = w * ((j >= lo) & (j < hi))
    return w / w.sum(-1, keepdim=True).clamp(min=1e-12)


def padded(images: list[torch.Tensor], height: int, width: int) -> torch.Tensor:
    """float32 [B,3,height,width]: the images top-left, zeros around them (nested-tensor padding)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "nested tensors are in prototype stage"
        nested = torch.nested.nested_tensor(images, dtype=torch.float32)
        return nested.to_padded_tensor(0.0, output_size=(len(images), 3, height, width))


def crop_batch(images: list[torch.Tensor], boxes, flips, size: int, cubic=None) -> torch.Tensor:
    """Resized crops (antialiased bilinear, or bicubic where `cubic`, bool [B], is set) of each
    image's box (top, left, h, w: rows of `boxes`, a [B,4] array or a list of tuples) to size x size,
    flipped where asked; uint8 [B,3,size,size] on the images' device. Same integer box rounding as
    the CPU loader's tvio path. Chunks of at most CROP_CHUNK_FLOATS padded pixels bound the memory."""
    device = images[0].device
    b = len(images)
    out = torch.empty((b, 3, size, size), dtype=torch.uint8, device=device)
    H, W = max(img.shape[-2] for img in images), max(img.shape[-1] for img in images)
    box = np.asarray(boxes, dtype=np.float64).reshape(b, 4)
    t0, l0 = np.rint(box[:, 0]), np.rint(box[:, 1])  # round half to even, as Python's round()
    geometry = torch.from_numpy(np.stack([t0, np.rint(box[:, 0] + box[:, 2]) - t0, l0,
                                          np.rint(box[:, 1] + box[:, 3]) - l0]).astype(np.int64))
    flip = torch.from_numpy(np.asarray(flips, dtype=bool).reshape(b))
    bicubic = None if cubic is None else torch.from_numpy(np.asarray(cubic, dtype=bool).reshape(b))
    if bicubic is not None and not bool(bicubic.any()):
        bicubic = None  # all bilinear: the plain weights
    if device.type == "cuda":  # from pinned memory: an asynchronous copy that does not stall the stream
        geometry, flip = geometry.pin_memory(), flip.pin_memory()
        bicubic = None if bicubic is None else bicubic.pin_memory()
    geometry, flip = geometry.to(device, non_blocking=True), flip.to(device, non_blocking=True)
    bicubic = None if bicubic is None else bicubic.to(device, non_blocking=True)
    chunk = max(1, CROP_CHUNK_FLOATS // (3 * H * W))
    for a in range(0, b, chunk):
        z = min(b, a + chunk)
        canvas = padded(images[a:z], H, W)
        part = None if bicubic is None else bicubic[a:z]
        wy = resize_weights(geometry[0, a:z], geometry[1, a:z], size, H, part)
        wx = resize_weights(geometry[2, a:z], geometry[3, a:z], size, W, part)
        wx = torch.where(flip[a:z].view(-1, 1, 1), wx.flip(1), wx)
        res = torch.matmul(torch.matmul(wy.unsqueeze(1), canvas), wx.transpose(1, 2).unsqueeze(1))
        out[a:z] = res.round_().clamp_(0, 255).to(torch.uint8)
    return out
