"""Batched resized crops for `--gpu-decode`: every image of a batch cropped and resized in a few
kernels, instead of a dozen small ones per image (torchvision's `resized_crop` in a Python loop).

The images are padded into one tensor and each output is `Wy @ image @ Wx^T`, with per-image weight
matrices of the antialiased bilinear filter (torch's and PIL's: a triangle widened by the
downscale factor, cut at the crop's edges and renormalized) and the horizontal flip folded into
`Wx`. Measured against torchvision's uint8 `resized_crop` on the same images: at most one grey level
apart (it rounds between its two passes; against its float path, equal but for rare ties).
"""

from __future__ import annotations

import torch

CROP_CHUNK_FLOATS = 2**26  # float32 elements of padded images cropped per matmul (256 MB)


def resize_weights(starts: torch.Tensor, lengths: torch.Tensor, size: int, extent: int) -> torch.Tensor:
    """[B, size, extent] float32 weights of an antialiased bilinear resample of each row range
    [start, start+length) to `size` outputs (torch's/PIL's antialias filter: a triangle widened by
    the downscale factor, cut at the range's ends and renormalized)."""
    lengths = lengths.clamp(min=1).to(torch.float32).view(-1, 1, 1)
    starts = starts.to(torch.float32).view(-1, 1, 1)
    scale = lengths / size
    support = scale.clamp(min=1.0)
    center = (torch.arange(size, device=starts.device, dtype=torch.float32).view(1, -1, 1) + 0.5) * scale
    j = torch.arange(extent, device=starts.device, dtype=torch.float32).view(1, 1, -1) - starts  # crop coords
    lo = (center - support + 0.5).floor().clamp(min=0)
    hi = torch.minimum((center + support + 0.5).floor(), lengths)
    w = (1 - ((j - center + 0.5) / support).abs()).clamp(min=0) * ((j >= lo) & (j < hi))
    return w / w.sum(-1, keepdim=True).clamp(min=1e-12)


def crop_batch(images: list[torch.Tensor], boxes: list[tuple[float, float, float, float]], flips: list[bool],
               size: int) -> torch.Tensor:
    """Resized crops (antialiased bilinear) of each image's box (top, left, h, w) to size x size,
    flipped where asked; uint8 [B,3,size,size] on the images' device. Same integer box rounding as
    the CPU loader's tvio path. Chunks of at most CROP_CHUNK_FLOATS padded pixels bound the memory."""
    device = images[0].device
    b = len(images)
    out = torch.empty((b, 3, size, size), dtype=torch.uint8, device=device)
    hs, ws = [img.shape[-2] for img in images], [img.shape[-1] for img in images]
    H, W = max(hs), max(ws)
    t0 = [int(round(top)) for top, _, _, _ in boxes]
    l0 = [int(round(left)) for _, left, _, _ in boxes]
    ch = [int(round(top + h)) - t for (top, _, h, _), t in zip(boxes, t0)]
    cw = [int(round(left + w)) - l for (_, left, _, w), l in zip(boxes, l0)]
    geometry = torch.tensor([t0, ch, l0, cw], dtype=torch.int64).to(device)
    chunk = max(1, CROP_CHUNK_FLOATS // (3 * H * W))
    flip = torch.tensor(flips, dtype=torch.bool).to(device)
    for a in range(0, b, chunk):
        z = min(b, a + chunk)
        canvas = torch.zeros((z - a, 3, H, W), dtype=torch.float32, device=device)
        for i in range(a, z):
            canvas[i - a, :, :hs[i], :ws[i]] = images[i]
        wy = resize_weights(geometry[0, a:z], geometry[1, a:z], size, H)
        wx = resize_weights(geometry[2, a:z], geometry[3, a:z], size, W)
        wx = torch.where(flip[a:z].view(-1, 1, 1), wx.flip(1), wx)
        res = torch.matmul(torch.matmul(wy.unsqueeze(1), canvas), wx.transpose(1, 2).unsqueeze(1))
        out[a:z] = res.round_().clamp_(0, 255).to(torch.uint8)
    return out
