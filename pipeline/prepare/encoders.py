"""The two ways a prepared image is stored: a JPEG (`encode_jpeg`) or the pixel form's planes
(`encode_pixels`, format/pixels.py). prepare (images.process_image) and prepare-shards derive both
encode through here, so each form has one encoder.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from imagenet_shards.pipeline.format import pixels

try:
    from imagenet_shards.pipeline.prepare import _jpegtran
except ImportError:  # not built (no C compiler or libjpeg headers at install time): pass-through stays byte for byte
    _jpegtran = None

# The C encoder (pipeline/native/jpegtran_yuv.c): pixels.encode's bytes (tested byte for byte), 4x and
# more faster (docs/benchmarks.md, "prepare-shards derive per core"); None without the extension, or with
# one built before it had the encoder (imagenet-shards-doctor names both), and then numpy's reference encodes.
_yuv420 = getattr(_jpegtran, "yuv420", None)


def encode_pixels(rgb) -> bytes:
    """pixels.encode(rgb): by the C encoder where it is built, else by numpy's reference itself."""
    if _yuv420 is None or rgb.dtype != "uint8" or rgb.ndim != 3 or rgb.shape[2] != 3:
        return pixels.encode(rgb)  # which also refuses what is not H x W x 3 uint8
    h, w = rgb.shape[:2]
    return _yuv420(np.ascontiguousarray(rgb), w, h)


def encode_jpeg(img: Image.Image, quality: int, restart_markers: bool) -> bytes:
    """`img` (RGB) as the JPEG prepare stores."""
    # Only these options reach the encoder: no EXIF, ICC or XMP is carried over; baseline, 4:2:0;
    # restart markers on the same grid as the lossless rewrite (_jpegtran.interval_mcus; without the
    # extension, one per MCU row) unless the policy turned them off. A Pillow without the option ignores
    # it: the loader then just reads those files without entering at the markers.
    markers = {}
    if restart_markers and _jpegtran is not None:
        markers = {"restart_marker_blocks": _jpegtran.interval_mcus(-(-img.width // 16), 16)}  # 4:2:0: 16 px MCUs
    elif restart_markers:
        markers = {"restart_marker_rows": 1}
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False, subsampling=2, **markers)
    return buf.getvalue()
