"""The turbo decoder's own entropy decoder (pipeline/native/jpegcrop_cells.c, hooked into libjpeg by
jpegcrop_entropy.c) against libjpeg's own: byte-identical outputs on every stored image of the test
corpora, the same verdict on damaged data (a seeded, bounded fuzz of truncated and bit-flipped
cells), libjpeg's path for the files it does not take, and the IMAGENET_SHARDS_ENTROPY switch."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import decode as dec
from tests.fixtures.loader import texture_image, write_shard_set

pytestmark = pytest.mark.skipif(dec._jpegcrop is None, reason="imagenet_shards.train.loader._jpegcrop not built")
J = dec._jpegcrop
OWN_AVAILABLE = J is not None and J.entropy_path()[2]
# the hook declines only a libjpeg that is not libjpeg-turbo 2.x/3.x; a failed self-test is a failure here
TURBO = J is not None and J.LIBJPEG_TURBO_VERSION.split(".")[0] in ("2", "3")
needs_own = pytest.mark.skipif(not OWN_AVAILABLE and not TURBO, reason="libjpeg is not libjpeg-turbo 2.x/3.x: "
                               "the own entropy decoder's hook is off by design")


@needs_own
def test_the_hook_passed_its_self_test():
    """On libjpeg-turbo 2.x/3.x the hook must work (the other tests would otherwise compare libjpeg
    with itself)."""
    assert J.entropy_path()[2], J.entropy_path()


def stored_jpegs(root) -> list[bytes]:
    """Every .jpg of both splits of the shard set at ``root``, read with the loader's own reader."""
    manifest = D.read_manifest(str(root))
    return [rec.jpg for split in ("train", "val") for s in D.split_shards(manifest, str(root), split)
            for rec in D.read_shard(s.url)]


@pytest.fixture(scope="module")
def photo_shards(tmp_path_factory):
    """ImageNet-sized busy pictures through prepare-shards (its restart-marker grid, q90 4:2:0)."""
    sizes = [(500, 375), (375, 500), (333, 251), (500, 333), (160, 120), (1000, 700)]
    return write_shard_set(tmp_path_factory.mktemp("entropy"), train=18, val=6, content="photo", size=sizes,
                           shard_samples=8)


def crop_both(data: bytes, box, res: int, flip: bool):
    """crop_into through each entropy path: (own's result, own's pixels, libjpeg's result, libjpeg's pixels)."""
    a, b = np.full((3, res, res), 3, np.uint8), np.full((3, res, res), 3, np.uint8)
    ra = J.crop_into(data, a, *box, flip, entropy="own")
    rb = J.crop_into(data, b, *box, flip, entropy="libjpeg")
    return ra, a, rb, b


def boxes(w: int, h: int, rng: random.Random):
    """The loader's train boxes (RandomResizedCrop), the val centre crop and the whole image."""
    for _ in range(3):
        yield dec.random_resized_crop_params(w, h, (0.08, 1.0), (3 / 4, 4 / 3), rng)
    yield dec.center_crop_params(w, h, 256, 224)
    yield (0.0, 0.0, float(h), float(w))


def assert_same_everywhere(images: list[bytes], seed: int) -> int:
    """Every image through both paths: crops at every DCT scale the loader picks (224, 160, 64, 24 px:
    8/8 .. 1/8) and decode_region's RGBX at 1/1, 1/2 and 1/8, whole and in part. Returns the calls."""
    rng, calls = random.Random(seed), 0
    for i, data in enumerate(images):
        w, h, _ = J.header(data)
        for res in (224, 160, 64, 24):
            for box in boxes(w, h, rng):
                flip = rng.random() < 0.5
                ra, a, rb, b = crop_both(data, box, res, flip)
                assert ra == rb, (i, res, box, ra, rb)
                assert a.tobytes() == b.tobytes(), (i, res, box)
                calls += 1
            # decoded from the top (rows above skipped by jpeg_skip_scanlines), not entered at the markers
            a, b = np.empty((3, res, res), np.uint8), np.empty((3, res, res), np.uint8)
            assert (J.crop_into(data, a, *box, False, restarts=False, entropy="own")
                    == J.crop_into(data, b, *box, False, restarts=False, entropy="libjpeg"))
            assert a.tobytes() == b.tobytes(), (i, res, box)
            calls += 1
        for denom in (1, 2, 8):
            sw, sh = -(-w // denom), -(-h // denom)
            for region in ((0, 0, sw, sh), (sw // 3, sh // 2, sw // 3 + max(1, sw // 4), sh)):
                for restarts in (True, False):
                    own = J.decode_region(data, denom, *region, restarts=restarts, entropy="own")
                    lib = J.decode_region(data, denom, *region, restarts=restarts, entropy="libjpeg")
                    assert own == lib, (i, denom, region, restarts)
                    calls += 1
    return calls


@needs_own
def test_every_stored_image_decodes_byte_for_byte_the_same_through_both_paths(synthetic_shards, photo_shards):
    """The shards of the generator's archives (every quirk, through prepare-shards) and of busy
    ImageNet-sized pictures: the own decoder's uint8 output equals libjpeg's on every call, and the
    own decoder did take the stored files (the comparison is not libjpeg against itself)."""
    images = stored_jpegs(synthetic_shards) + stored_jpegs(photo_shards)
    assert len(images) >= 100
    before = J.entropy_counts()
    calls = assert_same_everywhere(images, seed=0)
    after = J.entropy_counts()
    own = after["own"] - before["own"]
    # each call asked for the own path once; stored files all carry the marker grid
    assert own >= 0.9 * calls, (calls, before, after)
    assert after["retried"] == before["retried"]  # one MCU row of context was always enough


@needs_own
@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
@pytest.mark.parametrize("marker", [{"restart_marker_blocks": 1}, {"restart_marker_blocks": 3},
                                    {"restart_marker_rows": 1}])
def test_each_sampling_and_restart_interval_it_takes(subsampling, marker):
    """Files not made by prepare-shards but of the kinds the own decoder takes: 4:4:4, 4:2:2 and
    4:2:0, a restart interval of 1 or 3 MCUs (3 tiles no row: decoded from the top) or a row."""
    images = [_jpeg(texture_image(w, h, seed=w), subsampling=subsampling, **marker) for w, h in [(200, 150), (97, 61)]]
    before = J.entropy_counts()["own"]
    calls = assert_same_everywhere(images, seed=subsampling)
    assert J.entropy_counts()["own"] - before >= 0.9 * calls


def test_files_it_does_not_take_go_to_libjpeg_with_the_same_output():
    """Progressive, no restart markers, grayscale (declined before any entropy decoding): libjpeg's
    path, the same bytes either way."""
    img = texture_image(120, 90, seed=2)
    cases = [_jpeg(img, progressive=True, restart_marker_blocks=2), _jpeg(img), _jpeg(img, subsampling=2)]
    before = J.entropy_counts()
    for data in cases:
        ra, a, rb, b = crop_both(data, (10.0, 20.0, 60.0, 70.0), 48, False)
        assert ra is None and rb is None and a.tobytes() == b.tobytes()
    gray = _jpeg(img.convert("L"), restart_marker_blocks=2)
    ra, _, rb, _ = crop_both(gray, (0.0, 0.0, 90.0, 120.0), 48, False)
    assert ra == rb and ra[0] == "declined"
    after = J.entropy_counts()
    assert after["own"] == before["own"]
    assert after["not_taken"] - before["not_taken"] == (3 if OWN_AVAILABLE else 0)


@needs_own
def test_threads_decoding_at_once_get_the_serial_bytes(photo_shards):
    """crop_into releases the GIL and the own decoder's memory is per thread: 4 threads cropping
    the same images at once get what one thread gets, byte for byte."""
    from concurrent.futures import ThreadPoolExecutor

    images = stored_jpegs(photo_shards)
    jobs = [(data, box) for data in images for box in boxes(*J.header(data)[:2], random.Random(len(data)))]

    def run(job):
        out = np.empty((3, 160, 160), np.uint8)
        assert J.crop_into(job[0], out, *job[1], False, entropy="own") is None
        return out.tobytes()

    serial = [run(j) for j in jobs]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(run, jobs * 2)) == serial * 2


@needs_own
def test_a_region_too_large_for_its_memory_cap_goes_to_libjpeg():
    """More than 16 MiB of coefficients (a 3200 x 2400 4:2:0 image decoded whole: ~30,000 MCUs) is
    libjpeg's; a smaller crop of the same file is the own decoder's. Same bytes either way."""
    img = Image.fromarray(np.asarray(texture_image(400, 300, seed=4))).resize((3200, 2400))
    data = _jpeg(img, restart_marker_blocks=2)
    for box, own_expected in (((0.0, 0.0, 2400.0, 3200.0), 0), ((1000.0, 1000.0, 300.0, 400.0), 1)):
        before = J.entropy_counts()
        ra, a, rb, b = crop_both(data, box, 1024 if own_expected == 0 else 224, False)
        after = J.entropy_counts()
        assert ra is None and rb is None and a.tobytes() == b.tobytes()
        assert after["own"] - before["own"] == own_expected, (box, before, after)
        assert after["not_taken"] - before["not_taken"] == 1 - own_expected


def _jpeg(img: Image.Image, quality: int = 90, **kw) -> bytes:
    b = io.BytesIO()
    img.save(b, "JPEG", quality=quality, **kw)
    return b.getvalue()


def _cells(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each restart cell's bytes (end: its marker)."""
    sos = data.index(b"\xff\xda")
    at = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    cells, i = [], at
    while True:
        i = data.index(b"\xff", i)
        if data[i + 1] == 0:
            i += 2
            continue
        cells.append((at, i))
        if data[i + 1] == 0xD9:
            return cells
        at = i = i + 2


def damaged_variants(data: bytes, rng: random.Random, n: int) -> list[bytes]:
    """``n`` damaged copies: a cell cut short (bytes removed before its marker, or from its middle),
    the file truncated inside the scan, or 1-8 random bit flips in the entropy-coded data."""
    cells, out = _cells(data), []
    first = cells[0][0]
    for _ in range(n):
        kind = rng.choice(("cut", "cut", "truncate", "flip", "flip", "flip"))
        if kind == "cut":
            a, b = rng.choice([c for c in cells if c[1] - c[0] > 2])
            x = rng.randrange(a, b - 1)
            y = rng.randrange(x + 1, min(b, x + 24) + 1)
            out.append(data[:x] + data[y:])
        elif kind == "truncate":
            out.append(data[:rng.randrange(first + 1, len(data) - 2)])
        else:
            d = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                d[rng.randrange(first, len(d) - 2)] ^= 1 << rng.randrange(8)
            out.append(bytes(d))
    return out


@needs_own
def test_damaged_cells_get_libjpegs_verdict_through_the_own_path(photo_shards):
    """Seeded, bounded fuzz: 300 damaged copies of stored JPEGs (cells cut short, truncated files,
    bit flips), each cropped three ways through both paths: the same result every time -- rejected
    as corrupt (a bad sample for the loader) with libjpeg's message wherever libjpeg rejects it,
    the same pixels wherever it does not. No crash."""
    rng = random.Random(34)
    images = stored_jpegs(photo_shards)[:10]
    before = J.entropy_counts()
    verdicts = {"ok": 0, "corrupt": 0, "other": 0}
    for data in images:
        w, h, _ = J.header(data)
        for bad in damaged_variants(data, rng, 30):
            for box, res in ((dec.center_crop_params(w, h, 256, 224), 224), ((0.0, 0.0, float(h), float(w)), 64),
                             (dec.random_resized_crop_params(w, h, (0.08, 1.0), (3 / 4, 4 / 3), rng), 160)):
                ra, a, rb, b = crop_both(bad, box, res, False)
                assert ra == rb, (box, ra, rb)
                if ra is None:
                    assert a.tobytes() == b.tobytes(), box
                verdicts["ok" if ra is None else "corrupt" if ra[0] == "corrupt" else "other"] += 1
    after = J.entropy_counts()
    # the fuzz has teeth: both verdicts occur, and the own decoder itself found damage it handed back
    assert verdicts["corrupt"] > 100 and verdicts["ok"] > 100, verdicts
    assert after["flagged"] > before["flagged"] and after["own"] > before["own"], (before, after)


CHILD = """
import importlib.util, json, sys
import numpy as np
spec = importlib.util.spec_from_file_location("_jpegcrop", sys.argv[2])  # the module alone: no torch import
J = importlib.util.module_from_spec(spec)
spec.loader.exec_module(J)
data = open(sys.argv[1], "rb").read()
J.crop_into(data, np.empty((3, 32, 32), np.uint8), 0.0, 0.0, 50.0, 60.0)
print(json.dumps({"path": J.entropy_path(), "counts": J.entropy_counts()}))
"""


def _child(tmp_path, value: str | None) -> dict:
    path = tmp_path / "a.jpg"
    path.write_bytes(_jpeg(texture_image(64, 48, seed=1), restart_marker_blocks=2))
    env = {k: v for k, v in os.environ.items() if k != "IMAGENET_SHARDS_ENTROPY"}
    if value is not None:
        env["IMAGENET_SHARDS_ENTROPY"] = value
    run = subprocess.run([sys.executable, "-c", CHILD, str(path), J.__file__], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(run.stdout)


def test_the_switch_turns_the_own_path_off_for_the_process(tmp_path):
    off = _child(tmp_path, "libjpeg")
    assert off["path"][:2] == ["libjpeg", "IMAGENET_SHARDS_ENTROPY=libjpeg"] and off["counts"]["own"] == 0
    bad = _child(tmp_path, "fast")
    assert bad["path"][0] == "libjpeg" and bad["path"][1].startswith("error: IMAGENET_SHARDS_ENTROPY=fast")
    on = _child(tmp_path, None)
    if OWN_AVAILABLE:
        assert on["path"][0] == "own" and on["counts"]["own"] == 1, on
    else:
        assert on["path"][0] == "libjpeg" and on["counts"]["own"] == 0, on


def test_entropy_argument_is_checked():
    with pytest.raises(ValueError, match="entropy must be"):
        J.crop_into(b"\xff\xd8", np.empty((3, 8, 8), np.uint8), 0.0, 0.0, 8.0, 8.0, entropy="fast")
