"""Pixels and bytes for the synthetic ILSVRC2012 generator (see `generate`).

Each class has a procedural signature that survives random crops and flips: a hue (the whole
image stays near it) plus a texture family (stripes, checkers, rings, blobs, dots, waves) with a
class-specific angle and frequency. Each image varies position, phase, scale, hue, lightness and
noise. Pictures are drawn at low resolution with vectorised numpy and upscaled with PIL, so a
500x375 JPEG costs a few milliseconds.

`encode_sample(kind, image, mask, quality, progressive)` turns a picture into the member bytes for
one sample kind: a clean JPEG or one of the known ILSVRC2012 quirks (the kinds of `plan.SAMPLE_FACTS`).

ImageNet-like mode (`make-synthetic-imagenet --imagenet-like`, for speed figures): the smooth
pictures above compress to ~0.15 bytes/pixel, while ImageNet's average 0.6 (110 KB at 500x375), and
Huffman decoding, the floor of every JPEG loader, scales with the compressed bytes, so smooth bench
images inflate every per-core rate. `render_photo` adds what photos have (hard-edged shapes, texture
at several scales, sensor grain)
over the class's picture (q75..95 averages ~0.6), and `imagenet_like_size` draws ImageNet's size spread (most at or under
500 px, ~17 % larger, ~0.5 % very large).
"""

from __future__ import annotations

import colorsys
import io
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

FAMILIES = ("stripes", "checker", "rings", "blobs", "dots", "waves")
# Draw at 1/DOWNSCALE of the output size, then upscale: fast, and smooth like a photo.
DOWNSCALE = 4
# An AppleDouble header (macOS "._" resource-fork companion file): magic, version, filler,
# zero entries. Not an image; real ImageNet-derived copies made on a Mac carry these.
APPLEDOUBLE_BYTES = b"\x00\x05\x16\x07" + b"\x00\x02\x00\x00" + b"Mac OS X        " + b"\x00\x00"
EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True)
class ClassStyle:
    """The signature of one class: hue in [0, 1), texture family, angle (radians), cycles per short side."""

    hue: float
    family: str
    angle: float
    frequency: float
    dark_hue_shift: float


def class_styles(num_classes: int, seed: int) -> list[ClassStyle]:
    """One distinct style per local class index (0..num_classes-1).

    Neighbouring hues get different texture families, so classes that share a family are
    num_families/num_classes apart on the hue circle. Deterministic in (num_classes, seed).
    """
    rng = np.random.default_rng([seed, num_classes, 7001])
    hue0 = float(rng.random())
    styles = []
    for i in range(num_classes):
        family = FAMILIES[i % len(FAMILIES)]
        # frequency steps with the "round" over families, so same-family classes also differ in scale
        frequency = (3.0, 6.0, 4.5, 8.0)[(i // len(FAMILIES)) % 4]
        angle = (i * 0.61803398875 * math.pi) % math.pi
        styles.append(ClassStyle(
            hue=(hue0 + i / num_classes) % 1.0,
            family=family,
            angle=angle,
            frequency=frequency,
            dark_hue_shift=0.06 if i % 2 else -0.06,
        ))
    return styles


def _pattern(style: ClassStyle, rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """Texture in [0, 1], shape (h, w), for the style's family with per-image jitter."""
    s = float(min(w, h))
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    x = (x - rng.uniform(0, w)) / s
    y = (y - rng.uniform(0, h)) / s
    theta = style.angle + rng.normal(0, 0.12)
    f = style.frequency * rng.uniform(0.8, 1.25)
    u = x * math.cos(theta) + y * math.sin(theta)
    v = -x * math.sin(theta) + y * math.cos(theta)
    phase = rng.uniform(0, 2 * math.pi)
    two_pi = np.float32(2 * math.pi)
    if style.family == "stripes":
        t = np.sin(two_pi * f * u + phase)
    elif style.family == "checker":
        t = np.sin(two_pi * f * u + phase) * np.sin(two_pi * f * v + phase)
    elif style.family == "rings":
        t = np.sin(two_pi * f * np.sqrt(u * u + v * v) + phase)
    elif style.family == "blobs":
        t = np.zeros_like(u)
        for k in range(3):
            a = theta + k * 2.1 + rng.normal(0, 0.3)
            t += np.sin(two_pi * f * 0.6 * (x * math.cos(a) + y * math.sin(a)) + rng.uniform(0, 6.3))
        t = t / 1.5
    elif style.family == "dots":
        fu = (u * f + phase) % 1.0 - 0.5
        fv = (v * f) % 1.0 - 0.5
        t = np.where(fu * fu + fv * fv < 0.09, 1.0, -1.0).astype(np.float32)
    elif style.family == "waves":
        t = np.sin(two_pi * f * (u + 0.08 * np.sin(two_pi * f * 0.5 * v)) + phase)
    else:  # pragma: no cover - FAMILIES is closed
        raise ValueError(f"unknown texture family {style.family!r}")
    # a soft edge: crisp enough to look like a texture, smooth enough to upscale well
    return np.clip(t * 2.5, -1.0, 1.0) * 0.5 + 0.5


def _object_mask(rng: np.random.Generator, w: int, h: int) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """A soft ellipse (the 'object') in [0, 1] and its box as fractions (x1, y1, x2, y2)."""
    cx, cy = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7)
    rx, ry = rng.uniform(0.2, 0.45), rng.uniform(0.2, 0.45)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    d = ((x / w - cx) / rx) ** 2 + ((y / h - cy) / ry) ** 2
    mask = np.clip((1.3 - d) / 0.6, 0.0, 1.0)
    box = (max(cx - rx, 0.0), max(cy - ry, 0.0), min(cx + rx, 1.0), min(cy + ry, 1.0))
    return mask, box


def render(style: ClassStyle, rng: np.random.Generator, width: int, height: int,
           downscale: int = DOWNSCALE) -> tuple[Image.Image, tuple[float, float, float, float], np.ndarray]:
    """Draw one RGB picture of the class: (image, object box as fractions, low-res object mask).

    The texture covers the whole frame (strong inside the object, weaker outside), so any crop
    carries the class colour and texture.
    """
    w = max(4, -(-width // downscale))
    h = max(4, -(-height // downscale))
    t = _pattern(style, rng, w, h)
    mask, box = _object_mask(rng, w, h)
    contrast = 0.55 + 0.45 * mask
    t = 0.5 + (t - 0.5) * contrast
    hue = style.hue + rng.normal(0, 0.012)
    light = colorsys.hsv_to_rgb(hue % 1.0, rng.uniform(0.6, 0.95), rng.uniform(0.75, 1.0))
    dark = colorsys.hsv_to_rgb((hue + style.dark_hue_shift) % 1.0, rng.uniform(0.5, 0.9), rng.uniform(0.2, 0.45))
    light = np.asarray(light, dtype=np.float32)
    dark = np.asarray(dark, dtype=np.float32)
    pixels = dark + t[..., None] * (light - dark)
    # lighting gradient and sensor-ish noise, so no two images are alike
    gy, gx = np.mgrid[0:h, 0:w].astype(np.float32)
    grad = rng.normal(0, 0.12) * (gx / w - 0.5) + rng.normal(0, 0.12) * (gy / h - 0.5)
    pixels = pixels + grad[..., None] + rng.normal(0, 0.03, size=pixels.shape).astype(np.float32)
    small = Image.fromarray((np.clip(pixels, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8), "RGB")
    if (w, h) == (width, height):
        return small, box, mask
    return small.resize((width, height), Image.BILINEAR), box, mask


# ---- ImageNet-like pictures and sizes (--imagenet-like) ---------------------------------------

# Fractions of ImageNet-like images whose longer side is over 500 px, and over 2000 px (a few
# camera originals up to 4000 px, as in the real train set).
OVER_500_FRACTION, VERY_LARGE_FRACTION = 0.17, 0.005
PHOTO_QUALITY = (75, 96)  # JPEG quality drawn from [75, 96)
PHOTO_PROGRESSIVE_FRACTION = 0.02


def imagenet_like_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) from ImageNet's spread: ~83 % with longer side <= 500 (mostly 500x375/500x333
    and their portrait forms), ~17 % larger (501..1600 px), of which a few 2000..4000 px."""
    r = rng.random()
    aspect = (4 / 3, 3 / 2, 1.0, 16 / 9, 5 / 4)[int(rng.choice(5, p=(0.5, 0.25, 0.1, 0.08, 0.07)))]
    if r < VERY_LARGE_FRACTION:
        longer = int(rng.integers(2000, 4001))
    elif r < OVER_500_FRACTION:
        longer = int(np.exp(rng.uniform(np.log(501), np.log(1600))))
    elif r < OVER_500_FRACTION + 0.63:
        longer = 500
    else:
        longer = int(rng.integers(150, 500))
    shorter = max(16, round(longer / aspect))
    return (longer, shorter) if rng.random() < 0.75 else (shorter, longer)


def render_photo(style: ClassStyle, rng: np.random.Generator, width: int, height: int,
                 quality: int) -> tuple[Image.Image, tuple[float, float, float, float], np.ndarray]:
    """Like `render`, with a photo's detail: hard-edged shapes, mid-scale texture and grain.

    With quality drawn from q75..95 the set averages ImageNet's ~0.6 bytes per pixel (q75 ~0.4,
    q95 ~0.85; tests check the mean). `quality` is taken for the caller's convenience only.
    """
    image, box, mask = render(style, rng, width, height, downscale=16 if max(width, height) > 2000 else DOWNSCALE)
    draw = ImageDraw.Draw(image)
    w, h = image.size
    base = np.asarray(colorsys.hsv_to_rgb(style.hue, 0.6, 0.8)) * 255
    for _ in range(int(rng.integers(6, 16))):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(4, w // 3 + 5)), y0 + int(rng.integers(4, h // 3 + 5))
        fill = tuple(int(v) for v in np.clip(base + rng.normal(0, 70, 3), 0, 255))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=fill)
    a = np.asarray(image, dtype=np.float32)
    # mid-scale texture (foliage, fur, fabric): noise drawn at 2/3 size and upscaled
    tw, th = max(2, w * 2 // 3), max(2, h * 2 // 3)
    tex = rng.normal(0, 1, (th, tw)).astype(np.float32)
    tex = np.asarray(Image.fromarray(tex, "F").resize((w, h), Image.BILINEAR))
    grain = 28.0  # sigma in 8-bit levels: the detail a Flickr photo keeps at q75..95
    a += (24.0 * tex)[..., None]
    a += rng.normal(0, grain, (h, w, 1)).astype(np.float32)  # luma grain
    a += rng.normal(0, grain * 0.5, (h, w, 3)).astype(np.float32)  # chroma grain
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB"), box, mask


def photo_bytes(style: ClassStyle, rng: np.random.Generator, width: int, height: int, quality: int,
                progressive: bool = False) -> tuple[bytes, tuple[float, float, float, float]]:
    """One ImageNet-like JPEG of the class (4:2:0, like nearly all of ImageNet's): (bytes, object box)."""
    image, box, _ = render_photo(style, rng, width, height, quality)
    return _jpeg(image, quality, progressive=progressive), box


# ---- bytes for each sample kind -------------------------------------------------------------

def _jpeg(image: Image.Image, quality: int, progressive: bool = False, **extra) -> bytes:
    buf = io.BytesIO()
    # subsampling=2 is 4:2:0, what nearly all camera/web JPEGs (and ImageNet's) use
    image.save(buf, "JPEG", quality=quality, subsampling=2, progressive=progressive, **extra)
    return buf.getvalue()


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def truncate_jpeg(data: bytes) -> bytes:
    """Cut a baseline JPEG in the middle of its entropy-coded scan (no EOI), like a partial download."""
    sos = data.find(b"\xff\xda")
    if sos < 0:
        raise ValueError("no SOS marker: not a baseline JPEG")
    scan_start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    scan_end = len(data) - 2  # EOI
    return data[:scan_start + (scan_end - scan_start) // 2]


def encode_sample(kind: str, image: Image.Image, mask: np.ndarray, quality: int,
                  progressive: bool = False) -> bytes:
    """Member bytes for one sample kind (a clean JPEG or a named quirk).

    `kind` is a key of imagenet_shards.pipeline.tools.synthetic.plan.SAMPLE_FACTS ("clean", "progressive"
    or a quirk name); `image` and `mask` come from render() (the low-res object mask is the alpha of
    rgba_png; both are None for "empty" and "non_image", which need no picture).
    Deterministic: the same inputs give the same bytes.
    """
    if kind in ("clean", "progressive", "large", "tiny"):
        return _jpeg(image, quality, progressive=progressive)
    if kind == "exif_rotated":
        exif = Image.Exif()
        exif[EXIF_ORIENTATION] = 6  # "rotate 90 CW to display": camera held sideways
        return _jpeg(image, quality, exif=exif.tobytes())
    if kind == "cmyk":
        return _jpeg(image.convert("CMYK"), quality)  # PIL writes Adobe-style (inverted) CMYK
    if kind == "grayscale":
        return _jpeg(image.convert("L"), quality)
    if kind == "truncated":
        return truncate_jpeg(_jpeg(image, quality))
    if kind == "empty":
        return b""
    if kind == "png_as_jpeg":
        return _png(image)
    if kind == "rgba_png":
        alpha = Image.fromarray((np.clip(mask * 1.5, 0.0, 1.0) * 255).astype(np.uint8), "L")
        rgba = image.convert("RGBA")
        rgba.putalpha(alpha.resize(image.size, Image.BILINEAR))
        return _png(rgba)
    if kind == "palette_gif":
        buf = io.BytesIO()
        image.quantize(colors=64, method=Image.MEDIANCUT, dither=Image.NONE).save(buf, "GIF")
        return buf.getvalue()
    if kind == "non_image":
        return APPLEDOUBLE_BYTES
    raise ValueError(f"unknown sample kind {kind!r}")
