"""The per-sample step of the offline stage: image bytes in, JPEG bytes (or pixel planes) out, or a reason not to.

`process_image(data, policy)` is pure: no files, no state kept, no printing (it only silences
PIL's DecompressionBombWarning inside `warnings.catch_warnings`, which is process-wide: use worker
processes, as the writer does, not threads). It

- detects the format from the content (signatures in `image_formats`, then PIL's own identification),
  never the name;
- validates by a full decode (PIL's default strictness: a cut file raises; `LOAD_TRUNCATED_IMAGES`
  must stay False, and we refuse to run if something in the process set it), plus two checks PIL
  lacks: a JPEG whose scan data is not followed by an end-of-image marker is `truncated` (libjpeg
  happily decodes a cut file padded with zeros), and a pass-through JPEG whose entropy-coded data
  libjpeg warns about is `corrupt` (read by `_jpegtran`, which sees libjpeg's warnings: a bad
  Huffman code, a segment that ends early, extraneous bytes before a marker; warnings about
  metadata only are ignored). A pass-through JPEG needs no pixels: that reading (or, without the
  extension, a 1/8 DCT-scaled decode, which still entropy-decodes every block) is its validation;
- fixes what a standard JPEG decoder would not read as 8-bit RGB (see docs/format.md for the
  vocabulary), resizes per policy, and re-encodes (baseline, 4:2:0, `policy.quality`);
- passes an already-fine JPEG through without generation loss: Huffman baseline, extended or
  progressive, 8-bit, 3 components in YCbCr, within the size bound, no fix needed. By default
  (`policy.restart_markers`) it is rewritten losslessly with restart markers on a grid of ~32 px
  cells, one MCU row high (`_jpegtran`: the same DCT coefficients, so the same pixels; fix
  `restart_markers`), which lets the loader decode only the cells around a crop; that rewrite entropy-decodes every block
  and declines on any libjpeg error or warning, so it is the validation too. Where it declines (or
  the extension is not built, or the policy is off) the bytes pass through unchanged after the
  validation below. Re-encoded images get the same markers from the encoder;
- with `policy.pixels` (the pixel form, `prepare-shards --pixels`), stores every image as the planes of
  its decoded, fixed and resized pixels (`encoders.encode_pixels`): nothing passes through, but a JPEG
  that would have is still read by libjpeg (`_jpegtran.check`) first, so both forms reject the same
  images; the fixes are the JPEG form's, less `restart_markers` and `reencoded` (how a JPEG is stored).

Pixels are what PIL (and so torchvision's `ImageFolder`) shows: no colour management (ICC profiles
are dropped from re-encoded files, pixel values are left as decoded) and, by default, no EXIF
rotation. A pass-through JPEG keeps its EXIF orientation tag; decoders that ignore it (PIL,
`torchvision.io.decode_jpeg` with its default `apply_exif_orientation=False`, our loader) see the
same pixels as the re-encoded images, whose EXIF is dropped.

Resampling is LANCZOS (see `_RESAMPLE`). Large JPEGs are first reduced in the DCT domain
(`draft`, by 2, 4 or 8, to at least the target) when the source is at least twice the target, then
resampled to the exact size computed from the original dimensions, so both paths give the same
size; against a full decode + LANCZOS the pixels differ by ~0.6/255 on average, for 2-4x less time.

Limits: a JPEG cut mid-scan *and then given an end-of-image marker* (a "repaired" file), or with
garbage mid-scan, decodes with grey or wrong blocks without an error (PIL does not expose libjpeg's
warnings): with the `_jpegtran` extension a pass-through JPEG like that is `corrupt`; one that is
resized or fixed is accepted (its pixels come from PIL's decode). Garbage that happens to leave a
baseline scan's length intact can decode without any warning (random damage was caught 40-54 % of
the time: tests/pipeline/prepare/test_images.py). Multi-frame files (GIF, TIFF, MPO) keep their
first frame. Pillow's own bomb limit (2 x `Image.MAX_IMAGE_PIXELS`) still applies when
`policy.max_pixels` is above it.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.prepare.image_formats import (JPEG_FAMILY, JpegHeader, failure_reason, jpeg_has_end,
                                                            jpeg_header, sniff_format)

from imagenet_shards.pipeline.prepare.encoders import _jpegtran, encode_jpeg, encode_pixels

# LANCZOS over BICUBIC+reducing_gap: after the DCT-domain draft the remaining factor is < 2, where
# reducing_gap never engages and LANCZOS and BICUBIC cost and score the same (bench/bench_images.py:
# ~20 ms per large JPEG, mean |diff| 0.61 to an ideal float resize, both); without draft,
# BICUBIC+reducing_gap=2 was slower here than LANCZOS with draft and no closer. So: the sharper filter.
_RESAMPLE = Image.Resampling.LANCZOS

# Formats we let PIL identify: each has a signature check. Plugins that accept almost any
# bytes (TGA, SPIDER, IM, PCD, ...) are left out, so junk is "not_an_image", not a "corrupt" TGA.
_OPEN_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP", "PPM", "JPEG2000", "ICO")

_GRAY_MODES = ("1", "L", "LA", "La", "I", "F") + tuple(m for m in Image.MODES if m.startswith("I;16"))
_PALETTE_MODES = ("P", "PA")
_CMYK_MODES = ("CMYK",)  # PIL decodes YCCK JPEGs to CMYK too

# EXIF orientation -> the transpose that undoes it (as ImageOps.exif_transpose).
_ORIENTATION_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_EXIF_ORIENTATION = 0x0112

_RESIZE_RE = re.compile(r"(longer|shorter):([1-9][0-9]*)")
_OBJECT_REPR_RE = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")  # keep details free of memory addresses
_DETAIL_MAX = 200


@dataclass(frozen=True)
class ImagePolicy:
    """How images are stored. Validated on construction (ValueError with the bad value)."""

    resize: str = "longer:500"  # "none" | "longer:N" | "shorter:N"
    quality: int = 90  # JPEG quality for re-encoded images
    max_pixels: int = 89_478_485  # decompression-bomb guard (PIL's default); over -> too_many_pixels
    exif_transpose: bool = False  # default: pixels as PIL / torchvision ImageFolder see them
    restart_markers: bool = True  # restart markers on a grid of MCU cells in every stored JPEG (module docstring)
    pixels: str | None = None  # None: store JPEGs; pixels.FORM: store the decoded planes (quality, markers unused)

    def __post_init__(self):
        kind, _ = parse_resize(self.resize)
        if self.pixels is not None and self.pixels != pixels.FORM:
            raise ValueError(f"pixel form {self.pixels!r}: the forms are {pixels.FORM}")
        if self.pixels is not None and kind != "longer":  # the manifest's max_side bounds the longer side
            raise ValueError(f"the {self.pixels} form bounds the longer side (max_side): resize must be "
                             f"longer:N, got {self.resize!r}")
        if not (isinstance(self.quality, int) and 1 <= self.quality <= 100):
            raise ValueError(f"JPEG quality must be an integer in 1..100, got {self.quality!r}")
        if not (isinstance(self.max_pixels, int) and self.max_pixels > 0):
            raise ValueError(f"max_pixels must be a positive integer, got {self.max_pixels!r}")


@dataclass(frozen=True)
class ImageResult:
    """What `process_image` made of one input."""

    status: str  # "ok" | "rejected" | "skipped"
    data: bytes | None  # the JPEG to store (None unless ok)
    width: int  # stored size (0 if not ok)
    height: int
    orig_width: int  # source size as stored in the file (0 if unknown)
    orig_height: int
    fixes: tuple[str, ...]  # docs/format.md vocabulary, in the order applied
    reason: str | None  # empty | truncated | corrupt | too_many_pixels | not_an_image
    detail: str | None  # short human message (the decoder's error)
    source_format: str | None  # PIL format name detected from content: "JPEG", "PNG", ...
    passthrough: bool  # True when data is the input bytes unchanged (restart_markers: the same coefficients)


def parse_resize(spec: str) -> tuple[str, int | None]:
    """Parse a resize policy: "none" -> ("none", None); "longer:500" -> ("longer", 500)."""
    if spec == "none":
        return "none", None
    m = _RESIZE_RE.fullmatch(spec) if isinstance(spec, str) else None
    if not m:
        raise ValueError(f'invalid resize policy {spec!r}: use "none", "longer:N" or "shorter:N" '
                         f'with N a positive integer (e.g. "longer:500")')
    return m.group(1), int(m.group(2))


def resized_size(width: int, height: int, resize: str) -> tuple[int, int]:
    """Output size for a width x height image under `resize`; never larger than the input.

    "longer:N" makes the longer side N, "shorter:N" the shorter side N; the other side is scaled
    and rounded half up, at least 1 px. Images already within the bound keep their size.
    """
    kind, n = parse_resize(resize)
    if kind == "none":
        return width, height
    long_side, short_side = max(width, height), min(width, height)
    side = long_side if kind == "longer" else short_side
    if side <= n:
        return width, height
    # round_half_up(x * n / side) in integers (no float ties); gives exactly n for the side itself
    return tuple(max(1, (2 * x * n + side) // (2 * side)) for x in (width, height))


def process_image(data: bytes, policy: ImagePolicy) -> ImageResult:
    """Validate, fix, resize and encode one image. Never raises for bad image data.

    Raises RuntimeError if `PIL.ImageFile.LOAD_TRUNCATED_IMAGES` is set in this process, because
    then truncated images would pass validation.
    """
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True in this process; truncated "
                           "images would pass as valid. Leave it False (something imported set it).")
    if not data:
        return _rejected("empty", "zero bytes", None)
    sniffed = sniff_format(data)
    header, header_error = None, None
    if sniffed == "JPEG":
        try:
            header = jpeg_header(data)
        except ValueError as e:  # PIL may still read it; this only decides pass-through
            header_error = str(e)

    try:
        with warnings.catch_warnings():
            # We apply policy.max_pixels ourselves right after open; PIL's warning is noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=_OPEN_FORMATS)
    except Image.DecompressionBombError as e:
        dims = (header.width, header.height) if header else (0, 0)
        return _rejected("too_many_pixels", str(e), sniffed, *dims)
    except Exception as e:  # noqa: BLE001 - any decoder error is a verdict on the data
        if sniffed is None:  # no signature we know: junk that some plugin half-claimed at most
            return _rejected("not_an_image", f"no known image signature (starts with {data[:8].hex()})",
                             None, status="skipped")
        if isinstance(e, UnidentifiedImageError):  # its message is only "cannot identify image file"
            detail = header_error or f"{sniffed} signature but PIL cannot read the header"
        else:
            detail = _describe(e)
        return _rejected(failure_reason(sniffed, data, header, detail), detail, sniffed)

    with img:
        return _process_opened(img, data, header, policy)


def _process_opened(img: Image.Image, data: bytes, header: JpegHeader | None,
                    policy: ImagePolicy) -> ImageResult:
    fmt = img.format
    width, height = img.size
    if width * height > policy.max_pixels:
        return _rejected("too_many_pixels",
                         f"{width}x{height} = {width * height} pixels > max_pixels {policy.max_pixels}",
                         fmt, width, height)
    is_jpeg = fmt in JPEG_FAMILY
    orientation = _orientation(img) if policy.exif_transpose else 1
    swaps = orientation in (5, 6, 7, 8)
    upright = (height, width) if swaps else (width, height)
    target = resized_size(*upright, policy.resize)
    needs_resize = target != upright
    stored_target = (target[1], target[0]) if swaps else target

    # libjpeg itself reads a pass-through JPEG's entropy-coded data (_jpegtran), because it reports
    # what Pillow drops: libjpeg only *warns* about corrupt data (a bad Huffman code, a segment that
    # ends early or late) and pads with grey. A warning rejects the image as corrupt, after Pillow's
    # own verdict below (errors and cuts keep their usual reasons). In the same reading it is
    # rewritten with restart markers; one that reads cleanly is validated, pixels or not. (JPEGs
    # that are decoded to be resized or fixed are not read twice: a second Huffman pass over the
    # large ones cost ~0.9 ms per image on average on the ImageNet-like set. docs/format.md) The pixel
    # form decodes every image, but checks these so, too: both forms of the same sources reject the same.
    passthrough = (is_jpeg and img.mode == "RGB" and header is not None and header.is_plain()
                   and not needs_resize and orientation == 1)
    warning = None  # libjpeg's complaint about the entropy-coded data, if it had one
    if passthrough and _jpegtran is not None:
        if policy.restart_markers and policy.pixels is None:
            rewritten, kind, message = _jpegtran.restart_rows(data)
            if rewritten is not None:
                return _ok(rewritten, (width, height), (width, height), ("restart_markers",), fmt,
                           passthrough=False)
        else:
            kind, message = _jpegtran.check(data)
            if kind is None and policy.pixels is None:
                return _ok(data, (width, height), (width, height), (), fmt, passthrough=True)
        warning = message if kind == "warning" else None
    passthrough = passthrough and policy.pixels is None
    # Without the extension, a JPEG that will pass through needs no pixels, only the verdict: decode
    # it at 1/8 scale in the DCT domain. libjpeg still entropy-decodes every block (a cut scan fails
    # exactly as in a full decode); what it skips is the IDCT, upsampling and colour conversion,
    # which cannot fail. Measured on the ImageNet-like set: 1.25 -> ~0.8 ms CPU per image.
    box = None  # region of the (possibly drafted) image that maps to the full original
    if passthrough:
        img.draft(img.mode, (max(1, width // 8), max(1, height // 8)))
    elif needs_resize:
        box = _draft(img, stored_target)
    try:
        img.load()
    except Exception as e:  # noqa: BLE001 - decoder errors are verdicts on the data
        return _rejected(failure_reason(fmt, data, header, str(e)), _describe(e), fmt, width, height)
    if is_jpeg and not jpeg_has_end(data, header):
        return _rejected("truncated", "JPEG scan data is not followed by an end-of-image marker (cut file)",
                         fmt, width, height)
    if warning is not None:
        return _rejected("corrupt", f"libjpeg: {warning}", fmt, width, height)

    if passthrough:
        return _ok(data, (width, height), (width, height), (), fmt, passthrough=True)

    fixes = [] if is_jpeg else [f"converted_from_{fmt.lower()}"]
    try:
        rgb = _to_rgb(img, fixes)
    except ValueError as e:  # a mode PIL cannot turn into RGB (e.g. LAB): unusable for training
        return _rejected("corrupt", _describe(e), fmt, width, height)
    if orientation != 1:
        method = _ORIENTATION_TRANSPOSE[orientation]
        if box is not None:
            box = _transposed_box(box, rgb.size, method)
        rgb = rgb.transpose(method)
        fixes.append("exif_transpose")
    if needs_resize:
        rgb = rgb.resize(target, _RESAMPLE, box=box)  # with _draft: the one resize (decode_resized too)
        fixes.append("resized")
    if policy.pixels is not None:  # fixes name what was done to the pixels: "reencoded" is the JPEG form's
        return _ok(encode_pixels(np.asarray(rgb)), rgb.size, (width, height), tuple(fixes), fmt, passthrough=False)
    return _ok(encode_jpeg(rgb, policy.quality, policy.restart_markers), rgb.size, (width, height),
               tuple(fixes or ["reencoded"]), fmt, passthrough=False)


def _draft(img: Image.Image, target: tuple[int, int]) -> tuple | None:
    """Reduce a not yet loaded JPEG in the DCT domain (by 2, 4 or 8, to at least `target`) when it is
    at least twice the target; the box of the drafted image that maps to the full original, or None."""
    if img.format in JPEG_FAMILY and img.width >= 2 * target[0] and img.height >= 2 * target[1]:
        drafted = img.draft(img.mode, target)
        if drafted is not None:
            return drafted[1]
    return None


def decode_resized(data: bytes, resize: str) -> np.ndarray:
    """An image's pixels as an H x W x 3 uint8 RGB array, resized per `resize` (never upscaled)
    exactly as `process_image` resizes (DCT draft for large reductions, then LANCZOS to the size
    computed from the original dimensions), with no EXIF rotation: what prepare-shards derive
    stores. Raises what PIL raises for data it cannot decode (OSError, ValueError, ...)."""
    with Image.open(io.BytesIO(data), formats=_OPEN_FORMATS) as img:
        orig = img.size
        target = resized_size(*orig, resize)
        box = _draft(img, target) if target != orig else None
        img.load()
        rgb = _to_rgb(img, [])
        return np.asarray(rgb.resize(target, _RESAMPLE, box=box) if target != orig else rgb)


def _to_rgb(img: Image.Image, fixes: list[str]) -> Image.Image:
    """Return `img` as 8-bit RGB, appending the fixes it took. ValueError for unconvertible modes."""
    mode = img.mode
    if mode in _CMYK_MODES:
        fixes.append("cmyk_to_rgb")
    elif mode in _GRAY_MODES:
        fixes.append("gray_to_rgb")
        if mode.startswith("I") or mode == "F":
            img = _wide_gray_to_l(img)
    elif mode in _PALETTE_MODES:
        fixes.append("palette_to_rgb")
    if img.has_transparency_data:
        fixes.append("alpha_over_white")
        rgba = img.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.getchannel("A"))
        return white
    return img if img.mode == "RGB" else img.convert("RGB")


def _wide_gray_to_l(img: Image.Image) -> Image.Image:
    """16/32-bit or float gray -> L. PIL's own convert clips at 255 (a 16-bit image turns white),
    so 16-bit data is scaled by 1/256 instead: always for I;16*, for 32-bit "I" (how older Pillow
    opens 16-bit PNGs) when values exceed 255. Floats are clipped to 0..255."""
    a = np.asarray(img)
    if a.dtype.kind in "ui" and (img.mode.startswith("I;16") or (a.size and int(a.max()) > 255)):
        a = a.astype(np.int64) >> 8
    return Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8), "L")


def _orientation(img: Image.Image) -> int:
    try:
        value = img.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - an unreadable EXIF block means no usable orientation
        return 1
    return value if value in _ORIENTATION_TRANSPOSE else 1


def _transposed_box(box, size, method) -> tuple[float, float, float, float]:
    """`box` (x0, y0, x1, y1) in an image of `size`, as it lies after `img.transpose(method)`."""
    w, h = size
    T = Image.Transpose
    corner = {
        T.FLIP_LEFT_RIGHT: lambda x, y: (w - x, y),
        T.FLIP_TOP_BOTTOM: lambda x, y: (x, h - y),
        T.ROTATE_180: lambda x, y: (w - x, h - y),
        T.ROTATE_90: lambda x, y: (y, w - x),
        T.ROTATE_270: lambda x, y: (h - y, x),
        T.TRANSPOSE: lambda x, y: (y, x),
        T.TRANSVERSE: lambda x, y: (h - y, w - x),
    }[method]
    (ax, ay), (bx, by) = corner(box[0], box[1]), corner(box[2], box[3])
    return min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)


def _ok(data: bytes, size: tuple[int, int], orig_size: tuple[int, int], fixes: tuple[str, ...],
        source_format: str, passthrough: bool) -> ImageResult:
    return ImageResult(status="ok", data=data, width=size[0], height=size[1], orig_width=orig_size[0],
                       orig_height=orig_size[1], fixes=fixes, reason=None, detail=None,
                       source_format=source_format, passthrough=passthrough)


def _rejected(reason: str, detail: str, source_format: str | None, width: int = 0,
              height: int = 0, status: str = "rejected") -> ImageResult:
    return ImageResult(status=status, data=None, width=0, height=0, orig_width=width,
                       orig_height=height, fixes=(), reason=reason, detail=_clean(detail),
                       source_format=source_format, passthrough=False)


def _describe(e: Exception) -> str:
    return _clean(str(e) or type(e).__name__)


def _clean(detail: str) -> str:
    """Details go into the manifest, which must be byte-reproducible: no memory addresses."""
    detail = _OBJECT_REPR_RE.sub("<data>", detail)
    return detail if len(detail) <= _DETAIL_MAX else detail[: _DETAIL_MAX - 3] + "..."
