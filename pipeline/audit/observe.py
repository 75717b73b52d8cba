"""Observing one shard: read it once (hashing the same bytes), note every sample's members, label,
json and a digest of its image (and with `deep`, what a full decode gives).

Runs in worker processes; never raises for bad data: what it cannot read becomes part of the
observation, for the checks (`checks`) to turn into problems. The tar is read by the strict mode of
the one tar reader (`imagenet_shards.pipeline.format.tar`).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.format.digest import FAST
from imagenet_shards.pipeline.format.tar import HashingReader, TarFormatError, iter_tar
from imagenet_shards.pipeline.prepare.image_formats import image_format_name

try:
    from imagenet_shards.pipeline.prepare import _jpegtran
except ImportError:  # not built: --deep decodes with Pillow only, which does not see libjpeg's warnings
    _jpegtran = None

DIGEST_BYTES = 16
REGULAR_TYPES = (b"0", b"\0")  # a shard holds regular files only (tar type 0, or NUL in old headers)


@dataclass
class SampleObservation:
    key: str
    exts: list[str]
    cls: bytes | None = None
    json: bytes | None = None
    jpg_head: bytes = b""
    jpg_size: int = 0  # of the image member (.jpg, .webp or .yuv420)
    digest: bytes = b""  # of the stored image bytes (sha1, truncated), for duplicate detection
    image_format: str | None = None  # `image_format_name`: recounted against an adopted set's formats
    decoded: tuple | None = None  # deep: (format, mode, width, height)
    decode_error: str | None = None


@dataclass
class ShardObservation:
    url: str
    exists: bool = True
    read_error: str | None = None
    size: int | None = None
    sha256: str | None = None
    md5: str | None = None
    xxh3_128: str | None = None
    tar_problems: list[tuple[str, str | None, str]] = field(default_factory=list)  # (kind, key, detail)
    samples: list[SampleObservation] = field(default_factory=list)
    complete: bool = False  # the tar parsed to its end marker


def decode_image(data: bytes) -> tuple[tuple | None, str | None]:
    """Fully decode image bytes: ((format, mode, width, height), None) or (None, why not).

    A JPEG is first read by libjpeg itself through prepare-shards' own check (``_jpegtran.check``,
    when built): it entropy-decodes every block and reports what Pillow drops, libjpeg's warnings
    about damaged data (it pads with grey and only warns), as ``corrupt: libjpeg: <its message>``.
    The rule of which warnings count is prepare's (pipeline/native/jpeg_errors.h). A JPEG that
    check reads cleanly is not decoded a second time (Pillow reads its header for the format, mode
    and size)."""
    from PIL import Image, ImageFile, UnidentifiedImageError

    checked = False  # libjpeg read every block without a complaint: Pillow need not decode it again
    if _jpegtran is not None and data[:3] == b"\xff\xd8\xff":
        kind, message = _jpegtran.check(data)
        if kind == "warning":
            return None, f"corrupt: libjpeg: {message}"
        checked = kind is None
    saved, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, False
    try:
        with Image.open(io.BytesIO(data)) as im:
            if not (checked and im.format == "JPEG"):
                im.load()
            return (im.format, im.mode, im.width, im.height), None
    except UnidentifiedImageError:  # its message names the BytesIO object, not the bytes
        return None, f"not a recognised image ({len(data)} bytes starting {bytes(data[:8])!r})"
    except Exception as e:  # noqa: BLE001 - any decoder failure is the finding
        return None, f"{type(e).__name__}: {e}"
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = saved


def read_planes(data: bytes, meta: bytes | None) -> str | None:
    """Why a KEY.yuv420 payload cannot be read as the planes its sample's json sizes (None: it can)."""
    try:
        m = json.loads(meta)
        pixels.planes(data, int(m["width"]), int(m["height"]))
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        return f"{pixels.EXT} planes: {e}"
    return None


def _until_fault(members, faults: list):
    """The members, ending (not raising) at a tar fault, which is appended to `faults`."""
    try:
        yield from members
    except TarFormatError as e:
        faults.append(e)


def observe_samples(members, deep: bool, problems: list):
    """Group consecutive tar members into samples (webdataset's rule); note member-level problems.

    A tar fault ends the samples and is raised after them. The sample being grouped is yielded first
    unless the fault cut one of its members: after bytes that follow the end-of-archive marker, or a
    bad header, every member before was read whole and the sample counts."""
    current, faults = None, []
    for m in _until_fault(members, faults):
        if m.type not in REGULAR_TYPES:
            problems.append(("tar_not_regular", None, f"{m.name} is not a regular file (type {m.type!r})"))
            continue
        if m.name.startswith("/") or ".." in m.name.split("/"):
            problems.append(("tar_unsafe_name", None, f"member name {m.name!r} is absolute or climbs out with '..'"))
        key, ext = m.key, m.ext
        if current is None or current.key != key:
            if current is not None:
                yield current
            current = SampleObservation(key, [])
        current.exts.append(ext)
        if ext == "cls":
            current.cls = m.data
        elif ext == "json":
            current.json = m.data
        elif ext in ("jpg", "webp"):  # the image (.webp: an adopted WEBP set)
            current.jpg_head, current.jpg_size = m.data[:3], len(m.data)
            current.image_format = image_format_name(m.data)
            # sha1: hardware-accelerated where sha256 is, fast where it is not; collisions by accident only matter
            current.digest = hashlib.sha1(m.data).digest()[:DIGEST_BYTES]
            if deep:
                current.decoded, current.decode_error = decode_image(m.data)
        elif ext == pixels.EXT:  # a pixel set's planes: after the json (sorted extensions), which gives their size
            current.jpg_size = len(m.data)
            current.digest = hashlib.sha1(m.data).digest()[:DIGEST_BYTES]
            if deep:
                current.decode_error = read_planes(m.data, current.json)
    if current is not None and not (faults and faults[0].key == current.key):
        yield current
    if faults:
        raise faults[0]


def observe_shard(url: str, *, deep: bool = False) -> ShardObservation:
    """Read one shard once: size, sha256 and xxh3_128 (and md5 when deep), tar structure and every sample.

    md5 only proves again what a matching sha256 proves; it is checked with `deep` (it costs as much
    as sha256 and the content digest together). Never raises for bad data.
    """
    obs = ShardObservation(url)
    try:
        obs.size = storage.size(url)
    except FileNotFoundError:
        obs.exists = False
        return obs
    except OSError as e:
        obs.read_error = f"{type(e).__name__}: {e}"
        return obs
    try:
        with storage.open_url(url, "rb") as f:
            r = HashingReader(f, ("sha256", FAST, "md5") if deep else ("sha256", FAST))
            try:
                for sample in observe_samples(iter_tar(r), deep, obs.tar_problems):
                    obs.samples.append(sample)  # one by one: a fault keeps the samples before it
                obs.complete = True
            except TarFormatError as e:
                obs.tar_problems.append((e.kind, e.key, e.detail))
                for _ in r.read_rest():  # hash the rest: the file's digest is still worth reporting
                    pass
            obs.sha256 = r.hexdigest("sha256")
            obs.md5 = r.hexdigest("md5") if deep else None
            obs.xxh3_128 = r.hexdigest(FAST)
    except OSError as e:
        obs.read_error = f"{type(e).__name__}: {e}"
    return obs
