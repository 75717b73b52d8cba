"""Per-sample decoding: crop geometry, accuracy against torchvision, row-limited and region decode, errors, augs."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from tests.fixtures.loader import texture_image
from imagenet_shards.train.augment import interpolation as interp
from imagenet_shards.train.loader import decode as dec


def jpeg(img: Image.Image, quality: int = 90, **kw) -> bytes:
    b = io.BytesIO()
    img.save(b, "JPEG", quality=quality, **kw)
    return b.getvalue()


@pytest.fixture(scope="module")
def photo() -> bytes:
    return jpeg(texture_image(200, 150, seed=1))


def pil_rgb(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


needs_turbo = pytest.mark.skipif(dec._jpegcrop is None, reason="imagenet_shards.train.loader._jpegcrop not built (no libjpeg-turbo headers)")
# every decoder this build has: the turbo tests below skip without the extension, these just shrink
BUILT = ["turbo", "pil"] if dec._jpegcrop is not None else ["pil"]


# ----------------------------------------------------------------------------- geometry

def test_random_resized_crop_params_match_torchvision_distribution():
    rng = random.Random(0)
    torch.manual_seed(0)
    W, H, n = 500, 375, 4000
    ours = np.array([dec.random_resized_crop_params(W, H, (0.08, 1.0), (3 / 4, 4 / 3), rng) for _ in range(n)])
    theirs = np.array([T.RandomResizedCrop.get_params(torch.empty(1, H, W), [0.08, 1.0], [3 / 4, 4 / 3])
                       for _ in range(n)])
    for p in (ours, theirs):
        top, left, h, w = p.T
        assert (top >= 0).all() and (left >= 0).all() and (top + h <= H).all() and (left + w <= W).all()
    area = lambda p: (p[:, 2] * p[:, 3] / (W * H))  # noqa: E731
    aspect = lambda p: np.log(p[:, 3] / p[:, 2])  # noqa: E731
    assert abs(area(ours).mean() - area(theirs).mean()) < 0.02
    assert abs(aspect(ours).mean() - aspect(theirs).mean()) < 0.02
    assert abs(np.median(ours[:, 0]) - np.median(theirs[:, 0])) < 12


def test_random_resized_crop_fallback_equals_torchvision():
    # scale 1 on a 4:1 image can never fit: both fall back to the centred, ratio-clamped crop
    params = dec.random_resized_crop_params(400, 100, (1.0, 1.0), (3 / 4, 4 / 3), random.Random(0))
    assert params == T.RandomResizedCrop.get_params(torch.empty(1, 100, 400), [1.0, 1.0], [3 / 4, 4 / 3])


def test_center_crop_params_match_resize_then_crop():
    for W, H in [(500, 375), (375, 500), (97, 150), (256, 256)]:
        top, left, h, w = dec.center_crop_params(W, H, 256, 224)
        rw, rh = T.Resize(256)(Image.new("RGB", (W, H))).size
        assert w * rw / W == pytest.approx(224) and h * rh / H == pytest.approx(224)
        assert left * rw / W == pytest.approx(round((rw - 224) / 2))
        assert top * rh / H == pytest.approx(round((rh - 224) / 2))
    with pytest.raises(ValueError):
        dec.center_crop_params(100, 100, 64, 80)


# ----------------------------------------------------------------------------- accuracy

@pytest.mark.parametrize("size", [(200, 150), (150, 200), (97, 131)])
@pytest.mark.parametrize("decoder", BUILT)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_val_equals_torchvision_resize_center_crop(size, decoder, interpolation):
    data = jpeg(texture_image(*size, seed=2))
    out = dec.decode_val(data, resize=80, crop=64, decoder=decoder, interpolation=interpolation)
    mode = T.InterpolationMode.BICUBIC if interpolation == "bicubic" else T.InterpolationMode.BILINEAR
    ref = T.Compose([T.Resize(80, mode), T.CenterCrop(64), T.PILToTensor()])(pil_rgb(data)).numpy()
    assert out.shape == (3, 64, 64) and out.dtype == np.uint8
    diff = np.abs(out.astype(int) - ref)
    assert diff.max() <= 2 and diff.mean() < 0.05


@pytest.mark.parametrize("decoder", BUILT)
@pytest.mark.parametrize("size", [(640, 480), (500, 375)])
def test_val_with_dct_downscale_stays_close(size, decoder):
    data = jpeg(texture_image(*size, seed=3))  # shorter side 480 -> 96: a 1/4 draft applies (1/2 for 375)
    out = dec.decode_val(data, resize=96, crop=80, decoder=decoder)
    ref = T.Compose([T.Resize(96), T.CenterCrop(80), T.PILToTensor()])(pil_rgb(data)).numpy()
    assert np.abs(out.astype(int) - ref).mean() < 4


def test_draft_applies_to_odd_sizes():
    # Pillow picks its draft scale as min(W // w, H // h): 375 rows must still get 1/2
    img = Image.open(io.BytesIO(jpeg(texture_image(500, 375, seed=3))))
    assert dec._draft_scale(img, 300, 300, 100, 100) == 2 and img.size == (250, 188)


def test_val_tvio_close_to_reference(photo):
    out = dec.decode_val(photo, resize=80, crop=64, decoder="tvio")
    ref = T.Compose([T.Resize(80), T.CenterCrop(64), T.PILToTensor()])(pil_rgb(photo)).numpy()
    assert out.shape == (3, 64, 64) and np.abs(out.astype(int) - ref).mean() < 2.5


@pytest.mark.parametrize("decoder", BUILT)
def test_train_full_crop_equals_plain_resize(photo, decoder):
    # scale 1 and the image's own aspect: the crop is the whole picture
    out = dec.decode_train(photo, res=48, rng=random.Random(0), scale=(1, 1), ratio=(4 / 3, 4 / 3), hflip=False,
                           decoder=decoder)
    ref = np.asarray(pil_rgb(photo).resize((48, 48), Image.BILINEAR)).transpose(2, 0, 1)
    assert np.abs(out.astype(int) - ref).max() <= 2


@pytest.mark.parametrize("decoder", BUILT)
def test_train_same_seed_same_crop_for_both_decoders_and_flip(photo, decoder):
    a = dec.decode_train(photo, res=32, rng=random.Random(5), decoder=decoder)
    b = dec.decode_train(photo, res=32, rng=random.Random(5), decoder="tvio")
    assert np.abs(a.astype(int) - b).mean() < 6  # same crop, different resamplers
    flips = set()
    for seed in range(12):
        rng = random.Random(seed)
        noflip = dec.decode_train(photo, res=32, rng=random.Random(seed), hflip=False, decoder=decoder)
        out = dec.decode_train(photo, res=32, rng=rng, decoder=decoder)
        assert out.shape == (3, 32, 32) and out.dtype == np.uint8
        flips.add(bool((out == noflip).all()) or (bool((out == noflip[:, :, ::-1]).all()) and "flipped"))
    assert flips == {True, "flipped"}


@pytest.mark.parametrize("decoder", [*BUILT, "tvio"])
def test_random_interpolation_is_drawn_after_the_crop_and_flip(photo, decoder):
    """timm's --train-interpolation random: bilinear or bicubic per sample, chosen by one draw from
    the sample's stream after its crop and flip. So a seed gives the same bytes every time, the crop
    and flip are the plain run's, and over seeds both filters occur, about half each."""
    picks = []
    for seed in range(40):
        got = dec.decode_train(photo, res=32, rng=random.Random(seed), decoder=decoder, interpolation="random")
        assert (got == dec.decode_train(photo, res=32, rng=random.Random(seed), decoder=decoder,
                                        interpolation="random")).all()
        rng = random.Random(seed)
        bilinear = dec.decode_train(photo, res=32, rng=rng, decoder=decoder)  # draws the crop and the flip
        pick = interp.draw("random", rng)
        want = bilinear if pick == "bilinear" else dec.decode_train(photo, res=32, rng=random.Random(seed),
                                                                      decoder=decoder, interpolation="bicubic")
        assert (got == want).all(), (seed, pick)
        assert pick == "bilinear" or (got != bilinear).any()  # the filters differ on this texture
        picks.append(pick)
    assert 10 <= picks.count("bicubic") <= 30


def test_interpolation_names_are_checked(photo):
    with pytest.raises(ValueError, match="val interpolation 'random'"):
        dec.decode_val(photo, resize=80, crop=64, interpolation="random")  # a per-image choice is train only
    with pytest.raises(ValueError, match="bilinear, bicubic, random"):
        dec.decode_train(photo, res=32, rng=random.Random(0), interpolation="nearest")


def test_row_limited_decode_is_exact(photo):
    full = np.asarray(pil_rgb(photo))
    for rows in (1, 17, 90, 149):
        part = dec._load_rows(Image.open(io.BytesIO(photo)), rows)
        assert np.array_equal(np.asarray(part.convert("RGB")), full[:rows])
    # a black band at the cut makes the "was the last row written" check doubt: it must still be exact
    img = texture_image(120, 90, seed=4)
    img.paste((0, 0, 0), (0, 40, 120, 90))
    data = jpeg(img)
    part = dec._load_rows(Image.open(io.BytesIO(data)), 60)
    assert np.array_equal(np.asarray(part)[:60], np.asarray(pil_rgb(data))[:60])


def test_grayscale_and_progressive_jpegs(photo):
    gray = jpeg(texture_image(120, 90, seed=5).convert("L"))
    assert dec.decode_val(gray, resize=64, crop=48).shape == (3, 48, 48)
    assert dec.decode_train(gray, res=32, rng=random.Random(0)).shape == (3, 32, 32)
    prog = jpeg(texture_image(120, 90, seed=6), progressive=True)
    out = dec.decode_val(prog, resize=64, crop=48)
    ref = T.Compose([T.Resize(64), T.CenterCrop(48), T.PILToTensor()])(pil_rgb(prog)).numpy()
    assert np.abs(out.astype(int) - ref).max() <= 2


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("decoder", BUILT + ["tvio"])
def test_undecodable_raises_decode_error(photo, decoder):
    for bad in (b"", b"not a jpeg at all", photo[: len(photo) // 3]):
        with pytest.raises(dec.DecodeError):
            dec.decode_val(bad, resize=80, crop=64, decoder=decoder)
    with pytest.raises(dec.DecodeError):
        dec.decode_train(b"\xff\xd8\xff garbage", res=32, rng=random.Random(0), decoder=decoder)


def test_decode_label_and_decoder_names():
    assert dec.decode_label(b"417") == 417
    with pytest.raises(dec.DecodeError):
        dec.decode_label(b"n01440764")
    assert dec.resolve_decoder("auto") == ("turbo" if dec._jpegcrop is not None else "pil")
    with pytest.raises(ValueError, match="unknown decoder"):
        dec.resolve_decoder("dali")


# ----------------------------------------------------------------------------- turbo (libjpeg-turbo region decode)

@needs_turbo
@pytest.mark.parametrize("size", [(500, 375), (375, 500), (333, 251), (64, 48)])
def test_turbo_train_crops_equal_pil(size):
    # same libjpeg, same DCT scaling, same resample: the region decode must not change a pixel,
    # at every reduction (res 24..224 on these sizes gives scales 1, 2, 4 and 8)
    data = jpeg(texture_image(*size, seed=7))
    for res in (224, 160, 96, 48, 24):
        for seed in range(6):
            a = dec.decode_train(data, res=res, rng=random.Random(seed), decoder="turbo")
            b = dec.decode_train(data, res=res, rng=random.Random(seed), decoder="pil")
            assert a.shape == (3, res, res) and a.dtype == np.uint8
            assert np.abs(a.astype(int) - b).max() <= 1, (size, res, seed)


@needs_turbo
def test_turbo_is_deterministic(photo):
    outs = [dec.decode_train(photo, res=40, rng=random.Random(seed), decoder="turbo") for seed in (3, 3, 4)]
    assert np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[0], outs[2])


@needs_turbo
def test_turbo_region_equals_full_decode():
    data = jpeg(texture_image(300, 200, seed=8))
    full = np.asarray(pil_rgb(data))
    pixels, x, y, w, rows = dec._jpegcrop.decode_region(data, 1, 100, 50, 180, 120)
    assert x <= 100 and y == 50 and x + w >= 180 and rows == 70
    region = np.frombuffer(pixels, np.uint8).reshape(rows, w, 4)[:, :, :3]
    # libjpeg's upsampling lacks its neighbours in a cropped region's first/last 8 columns
    assert np.array_equal(region[:, 8:-8], full[50:120, x + 8:x + w - 8])
    assert dec._jpegcrop.header(data) == (300, 200, 3)


@needs_turbo
@pytest.mark.parametrize("kind", ["png", "gray", "cmyk", "progressive"])
def test_turbo_falls_back_or_handles_the_unusual(kind):
    img = texture_image(120, 90, seed=9)
    if kind == "png":
        b = io.BytesIO()
        img.save(b, "PNG")
        data = b.getvalue()
    else:
        data = jpeg(img.convert("L") if kind == "gray" else img.convert("CMYK") if kind == "cmyk" else img,
                    progressive=kind == "progressive")
    if kind != "progressive":  # the extension declines these: the Pillow path takes over
        assert dec._jpegcrop.decode_region(data, 1, 0, 0, 10, 10) is None
    for res in (32, 80):
        a = dec.decode_train(data, res=res, rng=random.Random(1), decoder="turbo")
        b = dec.decode_train(data, res=res, rng=random.Random(1), decoder="pil")
        assert a.shape == (3, res, res) and np.abs(a.astype(int) - b).max() <= 1
    a, b = (dec.decode_val(data, resize=64, crop=48, decoder=d).astype(int) for d in ("turbo", "pil"))
    assert np.abs(a - b).max() <= 1  # turbo's own resampler (docs/loader.md) or, declined, Pillow itself


@needs_turbo
def test_turbo_declines_damage_and_pil_judges(photo):
    # libjpeg pads a truncated stream with grey and only warns: the extension declines instead
    cut = photo[: len(photo) // 2]
    assert dec._jpegcrop.decode_region(cut, 1, 0, 0, 200, 150) is None
    assert dec._jpegcrop.header(b"\xff\xd8\xff garbage") is None
    with pytest.raises(ValueError, match="denom"):
        dec._jpegcrop.decode_region(photo, 3, 0, 0, 10, 10)


def _regions(rng: random.Random, size, n: int):
    """n random (denom, left, top, right, bottom) requests, some reaching past the edges."""
    for _ in range(n):
        d = rng.choice([1, 1, 2, 4, 8])
        W, H = -(-size[0] // d), -(-size[1] // d)
        t = rng.randrange(-3, H - 2)
        left = rng.randrange(-3, W - 2)
        yield d, left, t, rng.randrange(left + 1, W + 3), rng.randrange(t + 1, H + 3)


class _NoEntry:
    """The extension with entering at restart markers turned off (everything else as it is)."""

    def __getattr__(self, name):
        return getattr(_BUILT_EXTENSION, name)

    def decode_region(self, *args, **kw):
        return _BUILT_EXTENSION.decode_region(*args, restarts=False, **kw)

    def crop_into(self, *args, **kw):
        return _BUILT_EXTENSION.crop_into(*args, restarts=False, **kw)


_BUILT_EXTENSION = dec._jpegcrop
MARKERS = [{"restart_marker_rows": 1}, {"restart_marker_blocks": 2}, {"restart_marker_blocks": 1},
           {"restart_marker_blocks": 7}]  # 7 MCUs tile no row here: decoded from the top


@needs_turbo
@pytest.mark.parametrize("subsampling", [0, 1, 2])
@pytest.mark.parametrize("marker", MARKERS, ids=["rows1", "blocks2", "blocks1", "blocks7"])
def test_entering_at_restart_markers_changes_no_output_pixel(monkeypatch, subsampling, marker):
    """Train and val crops decoded from only the restart intervals around them equal those
    decoded from the top, exactly, at every DCT scale."""
    for size in [(500, 375), (333, 251), (1000, 700)]:
        data = jpeg(texture_image(*size, seed=3), subsampling=subsampling, **marker)
        outs = {}
        for name, ext in (("entered", _BUILT_EXTENSION), ("from top", _NoEntry())):
            monkeypatch.setattr(dec, "_jpegcrop", ext)
            outs[name] = [dec.decode_train(data, res=res, rng=random.Random(seed), decoder="turbo")
                          for res in (224, 96, 24) for seed in range(6)]
            outs[name].append(dec.decode_val(data, resize=256, crop=224, decoder="turbo"))
        assert all(np.array_equal(a, b) for a, b in zip(outs["entered"], outs["from top"])), size


@needs_turbo
@pytest.mark.parametrize("marker", MARKERS[:3], ids=["rows1", "blocks2", "blocks1"])
def test_a_region_entered_at_restart_markers_equals_the_full_decode(marker):
    """Inside the margins the caller asks for (the chroma upsampling lacks its neighbours at the
    edges of what is decoded: 8 columns each side, the last row) every pixel is the full decode's."""
    size = (333, 251)
    data = jpeg(texture_image(*size, seed=3), **marker)
    full = np.asarray(pil_rgb(data))
    for d, *box in _regions(random.Random(2), size, 60):
        region = dec._jpegcrop.decode_region(data, d, *box)
        pixels, x, y, w, rows = region
        got = np.frombuffer(pixels, np.uint8).reshape(rows, w, 4)[:-1, 8:-8, :3]
        if d == 1 and got.size:
            assert np.array_equal(got, full[y:y + rows - 1, x + 8:x + w - 8]), (d, box)
        assert x <= max(box[0], 0) and y <= max(box[1], 0)  # the region starts at or before what was asked
    pixels, x, y, w, rows = dec._jpegcrop.decode_region(data, 1, 140, 200, 220, 240)
    assert x <= 140 < 220 <= x + w and y == 200 and rows == 40
    assert np.array_equal(np.frombuffer(pixels, np.uint8).reshape(rows, w, 4)[:-1, 8:-8, :3],
                          full[200:239, x + 8:x + w - 8])


@needs_turbo
def test_entering_at_a_restart_marker_skips_the_rows_above():
    """Garbage in the entropy-coded data of the first MCU rows, restart markers intact: a crop
    further down decodes exactly when entered at its marker (those rows are never read), and is
    declined when decoded from the top (libjpeg warns about the corrupt data)."""
    clean = jpeg(texture_image(320, 240, seed=5), restart_marker_rows=1)
    start = clean.index(b"\xff\xda") + 2 + int.from_bytes(clean[clean.index(b"\xff\xda") + 2:][:2], "big")
    first_marker = clean.index(b"\xff\xd0", start)
    junk = bytes(b if b != 0xFF else 0x00 for b in np.random.default_rng(0).integers(0, 256, first_marker - start - 8,
                                                                                      dtype=np.uint8).tobytes())
    damaged = clean[:start + 4] + junk + clean[first_marker - 4:]
    assert len(damaged) == len(clean)
    low = (1, 0, 160, 320, 200)
    assert dec._jpegcrop.decode_region(damaged, *low) == dec._jpegcrop.decode_region(clean, *low)
    assert dec._jpegcrop.decode_region(damaged, *low, restarts=False) != dec._jpegcrop.decode_region(clean, *low)


@needs_turbo
def test_entering_at_restart_markers_skips_the_columns_beside():
    """Garbage in the first cell of every MCU row (markers intact): a crop on the right decodes
    exactly when only its cells are decoded, and not when decoded from the top."""
    clean = jpeg(texture_image(320, 96, seed=5), restart_marker_blocks=4)  # 20 MCUs a row: 5 cells of 64 px
    sos = clean.index(b"\xff\xda")
    at = sos + 2 + int.from_bytes(clean[sos + 2:sos + 4], "big")
    damaged, k = bytearray(clean), 0
    while True:  # cells 0, 5, 10...: the first of each row
        end = damaged.find(b"\xff", at)
        while damaged[end + 1] == 0:
            end = damaged.find(b"\xff", end + 2)
        if k % 5 == 0:
            for i in range(at + 2, end - 2):
                damaged[i] = 0x55
        if damaged[end + 1] == 0xD9:
            break
        at, k = end + 2, k + 1
    right = (1, 200, 0, 320, 90)
    assert dec._jpegcrop.decode_region(bytes(damaged), *right) == dec._jpegcrop.decode_region(clean, *right)
    assert dec._jpegcrop.decode_region(bytes(damaged), *right, restarts=False) != dec._jpegcrop.decode_region(clean, *right)


@needs_turbo
def test_out_of_sequence_restart_markers_are_decoded_from_the_top():
    data = bytearray(jpeg(texture_image(320, 240, seed=6), restart_marker_rows=1))
    sos = data.index(b"\xff\xda")
    second = data.index(b"\xff\xd1", sos)
    data[second + 1] = 0xD5  # RST1 -> RST5: not the sequence libjpeg expects
    region = dec._jpegcrop.decode_region(bytes(data), 1, 0, 200, 320, 230)
    assert region is None or region == dec._jpegcrop.decode_region(bytes(data), 1, 0, 200, 320, 230, restarts=False)


@needs_turbo
@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("flip", [False, True])
def test_to_planes_equals_numpy_transpose(channels, flip):
    hwc = np.random.default_rng(channels).integers(0, 256, (37, 53, channels), dtype=np.uint8)
    want = (hwc[:, ::-1, :3] if flip else hwc[:, :, :3]).transpose(2, 0, 1)
    out = np.zeros((3, 37, 53), np.uint8)
    dec._jpegcrop.to_planes(hwc, out, 37, 53, channels, flip)
    assert np.array_equal(out, want)
    for bad in [(np.zeros((37, 52, channels), np.uint8), out), (hwc, np.zeros((3, 37, 52), np.uint8))]:
        with pytest.raises(ValueError, match="bytes"):
            dec._jpegcrop.to_planes(*bad, 37, 53, channels, flip)


@needs_turbo
@pytest.mark.parametrize("mode", ["RGB", "RGBX"])
@pytest.mark.parametrize("flip", [False, True])
def test_crop_into_slot_the_arrow_way_equals_the_copy_way(monkeypatch, mode, flip):
    img = texture_image(61, 43, seed=4).convert(mode)
    fast = dec._write_chw(img, None, flip)
    if hasattr(Image.Image, "__arrow_c_array__"):  # Pillow >= 11.2: the in-place read is the one taken
        schema, array = img.__arrow_c_array__()
        assert dec._jpegcrop.arrow_to_planes(schema, array, np.empty((3, 43, 61), np.uint8), 43, 61, flip)
    monkeypatch.delattr(Image.Image, "__arrow_c_array__", raising=False)  # older Pillow: np.asarray
    slow = dec._write_chw(img, np.empty((3, 43, 61), np.uint8), flip)
    want = np.asarray(img)[:, ::-1 if flip else 1, :3].transpose(2, 0, 1)
    assert np.array_equal(fast, want) and np.array_equal(slow, want)


@needs_turbo
def test_arrow_to_planes_declines_what_is_not_rgb():
    gray = Image.new("L", (8, 6))
    schema, array = gray.__arrow_c_array__() if hasattr(gray, "__arrow_c_array__") else (None, None)
    assert dec._jpegcrop.arrow_to_planes(schema, array, np.empty((3, 6, 8), np.uint8), 6, 8, False) is False


def test_turbo_missing_extension_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(dec, "_jpegcrop", None)
    with pytest.raises(ValueError, match="libjpeg"):
        dec.resolve_decoder("turbo")


# ----------------------------------------------------------------------------- augmentations

def test_aug_names_are_the_one_list():
    """AUG_NAMES (what train-imagenet --aug offers) is exactly what make_aug accepts."""
    assert dec.AUG_NAMES[0] == "none" and dec.make_aug("none") is None and dec.make_aug(None) is None
    assert all(callable(dec.make_aug(name)) for name in dec.AUG_NAMES[1:])
    with pytest.raises(ValueError, match="choose one of none, ra, ta, ta_wide, aa, jitter"):
        dec.make_aug("cutmix")


@pytest.mark.parametrize("name", [n for n in dec.AUG_NAMES if n != "none"])
def test_augs_stay_uint8_and_are_seeded(photo, name):
    aug = dec.make_aug(name)
    img = torch.from_numpy(np.ascontiguousarray(dec.decode_val(photo, resize=80, crop=64)))
    state = torch.get_rng_state()
    a, b = dec.apply_aug(aug, img, 7), dec.apply_aug(aug, img, 7)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG is untouched
    assert a.dtype == torch.uint8 and a.shape == img.shape and torch.equal(a, b)
    assert dec.make_aug(None) is None
    with pytest.raises(ValueError):
        dec.make_aug("mixup")
