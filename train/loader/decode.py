"""Per-sample decoding: JPEG bytes in, a uint8 crop out. Pure functions, no files, no globals.

Three decoders, same crop semantics (crop parameters are always drawn in original-image
coordinates, with the distribution of torchvision's ``RandomResizedCrop.get_params``):

* ``turbo`` (the ``auto`` choice when the ``imagenet_shards.train.loader._jpegcrop`` extension is built; see
  docs/loader.md for the measurements): libjpeg-turbo decodes only the crop's region. In JPEGs
  with prepare-shards' grid of restart markers only the cells around the crop are handed to
  libjpeg at all (rows above and columns beside are never entropy-decoded); otherwise rows above
  it are entropy-decoded but skipped (no IDCT, upsampling or colour conversion). Only the iMCU
  columns holding it are converted, decoding stops after its last row, and the same 1/2, 1/4,
  1/8 DCT scaling as ``pil`` applies. The region comes out as RGBX, which Pillow wraps without a
  copy, and is resampled to the output size in one resize. Same libjpeg, same settings: the
  output equals ``pil``'s. Anything the extension declines (not a JPEG, grayscale/CMYK, any
  libjpeg error or warning) goes through the ``pil`` path with the same crop.
* ``pil``: pillow(-simd) with JPEG DCT-domain downscaling (``Image.draft``: 1/2, 1/4, 1/8
  whenever the crop stays at least ``res`` pixels) and *row-limited decoding*: libjpeg decodes
  top to bottom, so we stop after the last row the resize filter can touch. Rows below a crop
  are never entropy-decoded, IDCT'd or colour-converted. The crop box is then resampled straight
  to the output size (one resize; Pillow's filter reaches outside the box exactly as a
  resize-then-crop would).
* ``tvio``: ``torchvision.io.decode_jpeg`` (full decode) + ``v2.functional.resized_crop``
  (antialiased) on the uint8 tensor.

The filter (``interpolation``): Pillow's antialiased bilinear by default, or its bicubic (Keys,
a = -0.5, support 2 x the downscale), in all three; ``random`` (train only) is timm's per-image
choice of the two, drawn from the sample's stream after its crop and flip (``augment.interpolation``).
``dct_scaling="off"`` turns the 1/2, 1/4, 1/8 decode off in ``turbo`` and ``pil``: the same box,
decoded at full size, then resampled (closer to torchvision's and timm's full decode; docs/loader.md).

Output: a uint8 ``numpy`` array ``[3, H, W]``, written into ``out`` when the caller passes one
(the batcher passes its batch slot): the resized HWC(X) pixels go into the CHW slot in one pass,
flip included (``_jpegcrop.to_planes``, ~10 µs per 224 px crop against ~100 µs for numpy's
strided transpose-copy). Nothing is converted to float here.
"""

from __future__ import annotations

import io
import math
import random
import warnings

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from imagenet_shards.train.augment import interpolation as interp
from imagenet_shards.train.loader.boxes import center_crop_params, center_crop_ratio_params, random_resized_crop_params

try:
    from imagenet_shards.train.loader import _jpegcrop
except ImportError:  # not built (no C compiler or libjpeg-turbo headers at install time)
    _jpegcrop = None

DECODERS = ("auto", "turbo", "pil", "tvio")
# auto: the 1/2, 1/4, 1/8 DCT-domain decode whenever the crop stays >= the output after it (turbo and pil);
# off: every crop decoded at full size, then resampled, as torchvision and timm do (docs/loader.md)
DCT_SCALINGS = ("auto", "off")
# docs/loader.md: turbo ~20-25 % less CPU per crop than pil, which beats tvio on train crops
AUTO_DECODER = "turbo" if _jpegcrop is not None else "pil"

# Filter support in output pixels (PIL.Image.BILINEAR 1.0, BICUBIC 2.0); when downscaling by f
# the filter reaches f times that many input pixels on each side.
_FILTER_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0}
_PIL_FILTER = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
_ROW_MARGIN = 2
# turbo: libjpeg's fancy upsampling lacks its neighbours in the first and last 8 columns of a
# cropped region, so ask for 8 more on each side than the filter needs (exact, tested)
_COL_MARGIN = 8 + 2


class DecodeError(ValueError):
    """The bytes are not a decodable image (the caller knows the key and shard)."""


def resolve_decoder(decoder: str) -> str:
    """Map ``auto`` to the measured default (``turbo`` when built, else ``pil``) and validate the name."""
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder {decoder!r}; choose one of {', '.join(DECODERS)}")
    if decoder == "turbo" and _jpegcrop is None:
        raise ValueError("decoder 'turbo' needs the imagenet_shards.train.loader._jpegcrop extension, which was not built: install a C "
                         "compiler and the libjpeg-turbo headers (apt-get install libjpeg-dev), then reinstall "
                         "(pip install -e .), or use decoder 'pil'")
    return AUTO_DECODER if decoder == "auto" else decoder


def check_dct_scaling(dct_scaling: str) -> str:
    """``dct_scaling`` if it is one of ``DCT_SCALINGS``, else ValueError naming them."""
    if dct_scaling not in DCT_SCALINGS:
        raise ValueError(f"unknown dct_scaling {dct_scaling!r}; choose one of {', '.join(DCT_SCALINGS)}")
    return dct_scaling


# ----------------------------------------------------------------------------- PIL path

def _open(data: bytes) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise DecodeError(f"not a recognised image ({len(data)} bytes starting {bytes(data[:8])!r})") from None
    except Exception as e:  # SyntaxError, struct.error, OSError... from a damaged header
        raise DecodeError(f"cannot open image: {e}") from e


def _dct_reduction(crop_w: float, crop_h: float, out_w: int, out_h: int) -> int:
    """The largest of 1, 2, 4, 8 that keeps the crop at least the output size after dividing by it.
    (libjpeg-turbo also scales by 3/8, 5/8, 6/8, 7/8, but those IDCTs are plain C: measured slower
    than a full-size SIMD decode, docs/loader.md.)"""
    k = min(crop_w / out_w, crop_h / out_h)
    return 8 if k >= 8 else 4 if k >= 4 else 2 if k >= 2 else 1


def _draft_scale(img: Image.Image, crop_w: float, crop_h: float, out_w: int, out_h: int) -> int:
    """Ask libjpeg for a 1/2, 1/4 or 1/8 DCT-domain reduction that keeps the crop >= the output;
    returns the reduction actually applied (1 when none, or not a JPEG)."""
    if img.format != "JPEG":
        return 1
    s = _dct_reduction(crop_w, crop_h, out_w, out_h)
    if s == 1:
        return 1
    W, H = img.size
    # Pillow picks the scale as min(W // w, H // h): ask for floor sizes, or an odd height (375)
    # would silently get no reduction at all
    res = img.draft("RGB", (max(1, W // s), max(1, H // s)))
    if res is None:
        return 1
    return max(1, round(W / res[1][2]))


def _load_rows(img: Image.Image, rows: int) -> Image.Image:
    """Decode only the first ``rows`` rows of a (drafted) JPEG.

    libjpeg refuses to *finish* a decompression that stopped early, so Pillow reports a broken
    stream after writing every row we asked for; that one error is expected. Anything that
    looks off (a different error, a truncated stream, or an untouched last row) falls back to a
    normal full ``load()``, which raises for real corruption.
    """
    W, H = img.size
    tile = img.tile
    if (rows >= H or len(tile) != 1 or tile[0][0] != "jpeg" or img.mode not in ("RGB", "L")
            or not hasattr(img, "decoderconfig")):
        img.load()
        return img
    _, extents, offset, args = tile[0]
    if tuple(extents) != (0, 0, W, H):
        img.load()
        return img
    fp = img.fp
    fp.seek(offset)
    data = fp.read()
    part = Image.core.new(img.mode, (W, rows))
    decoder = Image._getdecoder(img.mode, "jpeg", args, img.decoderconfig)
    try:
        decoder.setimage(part, (0, 0, W, rows))
        n, err = decoder.decode(data)
    finally:
        decoder.cleanup()
    # n >= 0: the decoder wants more bytes (truncated); err -1 means it finished the image.
    ok = n < 0 and err in (-1, -2)
    out = img._new(part)
    if not ok or out.crop((0, rows - 1, W, rows)).getbbox() is None:
        # unexpected status, or the last row untouched (an error mid-way leaves zeros; a black
        # border can too): decode normally, which raises for real corruption
        fp.seek(0)
        img.load()
        return img
    return out


def _pil_resized_crop(img: Image.Image, top: float, left: float, h: float, w: float,
                      out_w: int, out_h: int, filter: str = "bilinear", dct_scaling: str = "auto") -> Image.Image:
    """Crop box (original pixels) of an opened, not yet loaded image, resampled to out_w x out_h
    with ``filter`` (``interpolation.INTERPOLATIONS``); ``dct_scaling`` off: no draft, a full-size decode."""
    s = 1 if dct_scaling == "off" else _draft_scale(img, w, h, out_w, out_h)
    box = (left / s, top / s, (left + w) / s, (top + h) / s)
    try:
        # the filter reads up to max(1, scale) * support input rows past the box
        reach = max(1.0, (h / s) / out_h) * _FILTER_SUPPORT[filter]
        rows = min(img.size[1], int(math.ceil(box[3] + reach)) + _ROW_MARGIN)
        img = _load_rows(img, rows)
        if img.mode != "RGB":
            img = img.convert("RGB")
        return img.resize((out_w, out_h), _PIL_FILTER[filter], box=box)
    except Exception as e:  # OSError (truncated/broken), ValueError, SyntaxError...
        raise DecodeError(f"cannot decode image: {e}") from e


def _write_chw(img: Image.Image, out: np.ndarray | None, flip: bool = False) -> np.ndarray:
    """A resized RGB/RGBX Pillow image -> ``out`` (uint8 CHW, allocated when None), mirrored
    left-right when ``flip``. Read in place through Pillow's Arrow export where it has one (Pillow
    >= 11.2, an image in one memory block), else through ``np.asarray`` (a copy)."""
    w, h = img.size
    if out is None:
        out = np.empty((3, h, w), np.uint8)
    if (_jpegcrop is not None and img.mode in ("RGB", "RGBX") and out.flags.c_contiguous
            and out.shape == (3, h, w) and out.dtype == np.uint8):
        try:
            schema, array = img.__arrow_c_array__()
        except (AttributeError, ValueError):  # older Pillow; an image spread over several blocks
            pass
        else:
            if _jpegcrop.arrow_to_planes(schema, array, out, h, w, flip):
                return out
    return _array_to_chw(np.asarray(img), out, flip)


def _array_to_chw(hwc: np.ndarray, out: np.ndarray, flip: bool) -> np.ndarray:
    h, w, c = hwc.shape
    if (_jpegcrop is not None and c in (3, 4) and hwc.flags.c_contiguous and out.flags.c_contiguous
            and out.shape == (3, h, w) and out.dtype == np.uint8 and hwc.dtype == np.uint8):
        _jpegcrop.to_planes(hwc, out, h, w, c, flip)
    else:
        out[...] = (hwc[:, ::-1, :3] if flip else hwc[:, :, :3]).transpose(2, 0, 1)
    return out


# ----------------------------------------------------------------------------- turbo path (libjpeg-turbo, one C call)

def _turbo_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a 3-component JPEG the turbo path can try; None sends it to Pillow."""
    head = _jpegcrop.header(data)
    return (head[0], head[1]) if head is not None and head[2] == 3 else None


def _turbo_into(data: bytes, top: float, left: float, h: float, w: float, out: np.ndarray,
                flip: bool, filter: str = "bilinear", dct_scaling: str = "auto") -> bool:
    """The crop box resampled with ``filter`` into ``out`` (uint8 [3,H,W]) by ``_jpegcrop.crop_into``
    (``dct_scaling`` off: at scale 8/8, a full-size decode of the region); False when the extension
    declines the bytes (Pillow then decides); DecodeError when libjpeg warned about the data."""
    status = _jpegcrop.crop_into(data, out, top, left, h, w, flip, filter=filter, scale=8 if dct_scaling == "off" else 0)
    if status is None:
        return True
    kind, message = status
    if kind == "corrupt":
        raise DecodeError(f"corrupt JPEG data (libjpeg: {message})")
    return False


def _crop(data: bytes, img: Image.Image | None, box: tuple, out_size: int, out: np.ndarray | None,
          flip: bool, filter: str, dct_scaling: str = "auto") -> np.ndarray:
    """The crop ``box`` (top, left, h, w) resampled with ``filter`` to ``out`` (allocated when None):
    turbo when ``img`` is None (falling back to Pillow if it declines), else Pillow; either with
    ``dct_scaling``."""
    if img is None:
        shape = (3, out_size, out_size)
        slot = (out if out is not None and out.flags.c_contiguous and out.dtype == np.uint8 and out.shape == shape
                else np.empty(shape, np.uint8))
        if _turbo_into(data, *box, slot, flip, filter, dct_scaling):
            if out is not None and slot is not out:
                out[...] = slot
            return out if out is not None else slot
        img = _open(data)
    return _write_chw(_pil_resized_crop(img, *box, out_size, out_size, filter, dct_scaling), out, flip)


def _open_size(data: bytes, decoder: str) -> tuple[tuple[int, int], Image.Image | None]:
    """Image size, and the opened PIL image unless the turbo path will try the bytes first."""
    if decoder == "turbo":
        size = _turbo_size(data)
        if size is not None:
            return size, None
    img = _open(data)
    return img.size, img


# ----------------------------------------------------------------------------- torchvision.io path

def _tvio_decode(data: bytes) -> torch.Tensor:
    from torchvision.io import ImageReadMode, decode_image
    with warnings.catch_warnings():
        # torchvision 0.29 deprecates its image codecs in favour of TorchCodec; still the same libjpeg-turbo
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
        except Exception as e:
            raise DecodeError(f"cannot decode image: {e}") from e


def _tvio_resized_crop(img: torch.Tensor, top: float, left: float, h: float, w: float,
                       out_w: int, out_h: int, filter: str = "bilinear") -> torch.Tensor:
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F
    # integer crop like torchvision (the val box comes in as floats from the centre-crop maths)
    t0, l0 = int(round(top)), int(round(left))
    mode = InterpolationMode.BICUBIC if filter == "bicubic" else InterpolationMode.BILINEAR
    return F.resized_crop(img, t0, l0, int(round(top + h)) - t0, int(round(left + w)) - l0,
                          [out_h, out_w], interpolation=mode, antialias=True)


# ----------------------------------------------------------------------------- public entry points

def _tvio_out(img: torch.Tensor, out: np.ndarray | None, flip: bool = False) -> np.ndarray:
    a = img.numpy()
    a = a[:, :, ::-1] if flip else a
    if out is None:
        return a
    out[...] = a
    return out


def decode_train(data: bytes, *, res: int, rng: random.Random, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), hflip: bool = True, decoder: str = "pil",
                 out: np.ndarray | None = None, interpolation: str = "bilinear",
                 dct_scaling: str = "auto") -> np.ndarray:
    """RandomResizedCrop(res, scale, ratio) + random horizontal flip -> uint8 [3, res, res]
    (written into ``out`` when given: a C-contiguous uint8 [3, res, res] array, e.g. a batch slot),
    resampled with ``interpolation`` (bilinear, bicubic, or random: timm's per-image choice).
    ``dct_scaling`` (``DCT_SCALINGS``; turbo and pil, tvio always decodes in full): off decodes the
    crop at full size; the same box either way.

    Draws from ``rng`` in a fixed order (crop, flip, then the filter for "random" only), so a seeded
    rng gives the same crop whatever the decoder. Raises ``DecodeError`` for undecodable bytes."""
    decoder = resolve_decoder(decoder)
    interp.check(interpolation, train=True)
    check_dct_scaling(dct_scaling)
    if decoder != "tvio":
        (W, H), img = _open_size(data, decoder)
        box = random_resized_crop_params(W, H, scale, ratio, rng)
        flip = hflip and rng.random() < 0.5
        return _crop(data, img, box, res, out, flip, interp.draw(interpolation, rng), dct_scaling)
    img = _tvio_decode(data)
    H, W = img.shape[-2:]
    top, left, h, w = random_resized_crop_params(W, H, scale, ratio, rng)
    flip = hflip and rng.random() < 0.5
    filter = interp.draw(interpolation, rng)
    return _tvio_out(_tvio_resized_crop(img, top, left, h, w, res, res, filter), out, flip)


def decode_val(data: bytes, *, resize: int = 256, crop: int = 224, decoder: str = "pil",
               out: np.ndarray | None = None, ratio: float | None = None,
               interpolation: str = "bilinear", dct_scaling: str = "auto") -> np.ndarray:
    """Resize the shorter side to ``resize`` and centre-crop ``crop`` -> uint8 [3, crop, crop]
    (torchvision ``Resize(resize)`` + ``CenterCrop(crop)``, done as one resample of the box with
    ``interpolation``, bilinear or bicubic; written into ``out`` when given, like ``decode_train``,
    with its ``dct_scaling``).
    With ``ratio``: FFCV's centre crop instead (``center_crop_ratio_params``) resized to ``crop``
    (``resize`` unused)."""
    decoder = resolve_decoder(decoder)
    filter = interp.check(interpolation, train=False)
    check_dct_scaling(dct_scaling)

    def box(width: int, height: int):
        if ratio is not None:
            return center_crop_ratio_params(width, height, ratio)
        return center_crop_params(width, height, resize, crop)

    if decoder != "tvio":
        size, img = _open_size(data, decoder)
        return _crop(data, img, box(*size), crop, out, False, filter, dct_scaling)
    img = _tvio_decode(data)
    H, W = img.shape[-2:]
    top, left, h, w = box(W, H)
    return _tvio_out(_tvio_resized_crop(img, top, left, h, w, crop, crop, filter), out)


def decode_label(data: bytes) -> int:
    """The ``.cls`` member: decimal ASCII, no newline (docs/format.md)."""
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError) as e:
        raise DecodeError(f"bad .cls content {data[:20]!r}") from e


# ----------------------------------------------------------------------------- optional augmentations

# The augmentations live in ``augment.policies`` (the one table of names); re-exported here for the loader.
from imagenet_shards.train.augment.policies import AUG_NAMES, apply_aug, make_aug  # noqa: E402,F401
