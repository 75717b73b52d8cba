"""The loader's Pillow path decodes WEBP (timm's imagenet-w21-webp-wds images) as it decodes JPEG:
the same crop maths, the pixels Pillow gives, through both entry points and the turbo fallback."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image, features

from imagenet_shards.train.loader import decode as dec

pytestmark = pytest.mark.skipif(not features.check("webp"), reason="this Pillow has no WEBP codec (build "
                                                                  "pillow-simd with libwebp-dev: scripts/bootstrap.sh)")


def _webp(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "WEBP", **kw)
    return buf.getvalue()


def test_webp_decodes_like_pillow_through_every_decoder_setting():
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 255, (90, 120, 3), dtype=np.uint8), "RGB")
    data = _webp(img, lossless=True)  # lossless: the decoded pixels are img's own
    for decoder in ("pil", "turbo"):
        out = dec.decode_val(data, resize=36, crop=32, decoder=decoder)
        top, left, h, w = dec.center_crop_params(120, 90, 36, 32)
        ref = np.asarray(img.resize((32, 32), Image.BILINEAR, box=(left, top, left + w, top + h))).transpose(2, 0, 1)
        assert out.shape == (3, 32, 32) and np.array_equal(out, ref), decoder
        a = dec.decode_train(data, res=24, rng=random.Random(3), decoder=decoder)
        b = dec.decode_train(data, res=24, rng=random.Random(3), decoder="pil")
        assert a.shape == (3, 24, 24) and np.array_equal(a, b)


def test_an_rgba_or_grayscale_webp_comes_out_rgb_and_a_damaged_one_is_a_decode_error():
    rgba = Image.new("RGBA", (40, 30), (10, 200, 30, 128))
    assert dec.decode_val(_webp(rgba, lossless=True), resize=32, crop=32).shape == (3, 32, 32)
    gray = Image.new("L", (40, 30), 77)
    out = dec.decode_val(_webp(gray, lossless=True), resize=32, crop=32)
    assert (out == 77).all()
    data = _webp(Image.new("RGB", (40, 30), (1, 2, 3)))
    with pytest.raises(dec.DecodeError):
        dec.decode_val(data[: len(data) // 2], resize=32, crop=32)
