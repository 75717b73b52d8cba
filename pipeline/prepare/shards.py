"""Write one shard, atomically and byte-reproducibly, and describe what went into it.

A worker process builds whole shards: read each planned member's bytes by offset, run
`process_image` (or, for a one-pass build, take the result it stored: prepare/onepass.py), append `KEY.cls`, `KEY.jpg`, `KEY.json` to a temp tar, fsync, rename. The returned
record (counts, hash, rejects, fixes) is what the manifest is assembled from.

The tar is written with the standard library's ``tarfile``, the bytes ``webdataset.TarWriter(f,
user="", group="", mode=0o644, mtime=0)`` writes (members of a sample in sorted extension order, the
default PAX format, the end padded to a 10 KiB record; its defaults are mode 0o444, owner ``bigdata``
and the current time). It opens the tar in mode "w", not webdataset's stream mode "w|", and copies
each member in one piece (``copybufsize``): the same bytes (tested), without the stream's 10 KiB
re-slicing and 16 KiB copy loop, ~0.1 ms less CPU per 180 KB member (a pixel-form image; measured
with 201 such samples through open_shard, 0.114 -> 0.092 s, sha256 and md5 of them ~0.06 s of that).
Importing webdataset would import torch, which cost each prepare process ~470 MB of RSS and 1.4-2.4 s
of start-up (measured, issue 12) for a tar writer.
The record counts, per class, the planned images that did not become samples (``failed_by_class``:
the manifest names the classes a train subset left short; format/manifest.py). It lists the samples
whose fixes the manifest lists (``fixed``) and only counts the others (``fix_counts``: every fix of
the shard): per-sample entries for policy-wide steps (``resized``, ``restart_markers``) would be one
per image, ~1.3 M entries held by the process that assembles the manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
from collections import Counter

from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.format.digest import FAST, new_hash
from imagenet_shards.pipeline.format.manifest import COUNTED_ONLY
from imagenet_shards.pipeline.storage.atomic import atomic_open
from imagenet_shards.pipeline.prepare.images import ImagePolicy, process_image
from imagenet_shards.pipeline.prepare.onepass import unpack_result
from imagenet_shards.pipeline.prepare.plan import PlannedSample, ShardSpec

_ONE_PIECE = 1 << 30  # tarfile's copy buffer: more than any member, so each is read and written once


class SourceFiles:
    """Open source files of one shard build, by path (one outer tar = one handle), closed at the end.

    Scoped to one shard on purpose: a process-wide cache would outlive the build and, in a
    long-lived process (a notebook, a test session, one worker running several jobs), serve bytes
    from a file that has since been replaced under the same path."""

    MAX_OPEN = 64

    def __init__(self):
        self._files: dict[str, object] = {}

    def read_member(self, s: PlannedSample) -> bytes:
        """The member's bytes, read by offset from its source file."""
        f = self._files.get(s.path)
        if f is None:
            if len(self._files) >= self.MAX_OPEN:  # ImageFolder: one file per image
                self.close()
            f = self._files[s.path] = open(s.path, "rb")
        f.seek(s.offset)
        data = f.read(s.size)
        if len(data) != s.size:
            raise OSError(f"short read of {s.source} from {s.path}: source changed since it was indexed?")
        return data

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sample_json(s: PlannedSample, r, form: str | None = None) -> bytes:
    """The sample's `KEY.json` (docs/format.md); a class-subset run adds `label_1k` (`s.meta`), the pixel
    form its `form` (as prepare-shards derive's samples: width and height are the stored planes')."""
    meta = {"label": s.label, "wnid": s.wnid, "filename": s.filename, "width": r.width, "height": r.height,
            "orig_width": r.orig_width, "orig_height": r.orig_height, "fixes": list(r.fixes), **dict(s.meta)}
    if form is not None:
        meta["form"] = form
    return json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """One member as `webdataset.TarWriter(f, user="", group="", mode=0o644, mtime=0)` writes it."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = len(data), 0, 0o644, "", ""
    tar.addfile(ti, io.BytesIO(data))


class ShardWriter:
    """A shard being written (`open_shard`): `add` appends one member; `digests()` once it is closed."""

    def __init__(self, tar: tarfile.TarFile, hashes):
        self._tar, self._hashes, self.size = tar, hashes, None

    def add(self, name: str, data: bytes) -> None:
        _add(self._tar, name, data)

    def digests(self) -> dict:
        """The record's `bytes`, `sha256`, `md5` and `xxh3_128` of the written shard."""
        sha256, md5, fast = self._hashes
        return {"bytes": self.size, "sha256": sha256.hexdigest(), "md5": md5.hexdigest(), FAST: fast.hexdigest()}


@contextlib.contextmanager
def open_shard(path: str):
    """A ShardWriter over a temp tar beside `path`, hashed as it is written (not re-read); fsynced and
    renamed to `path` when the block ends without error, removed otherwise. Add a sample's members in
    sorted extension order."""
    hashes = (hashlib.sha256(), hashlib.md5(), new_hash(FAST))
    with atomic_open(path) as raw:
        with tarfile.open(fileobj=_HashingWriter(raw, hashes), mode="w") as tar:
            tar.copybufsize = _ONE_PIECE
            writer = ShardWriter(tar, hashes)
            yield writer
        writer.size = raw.tell()


def build_shard(spec: ShardSpec, out_dir: str, policy: ImagePolicy) -> dict:
    """Write `spec` under out_dir/spec.url (temp name, fsync, rename) and return its record."""
    rejected, skipped, fixed, class_counts, written = [], [], [], {}, 0
    fix_counts: Counter = Counter()
    failed: dict[str, Counter] = {}  # wnid -> reasons: planned images of the class that are not samples
    image_ext = "jpg" if policy.pixels is None else pixels.EXT  # sorted extensions: cls, jpg, json / cls, json, yuv420
    with SourceFiles() as sources, open_shard(os.path.join(out_dir, spec.url)) as tw:
        for s in spec.samples:
            data = sources.read_member(s)
            r = unpack_result(data) if spec.preprocessed else process_image(data, policy)
            where = {"split": spec.split, "key": s.key, "source": s.source}
            if r.status in ("rejected", "skipped"):
                (rejected if r.status == "rejected" else skipped).append(
                    {**where, "reason": r.reason, "detail": r.detail})
                if s.wnid is not None:
                    failed.setdefault(s.wnid, Counter())[r.reason] += 1
                continue
            members = {"cls": str(s.label).encode(), image_ext: r.data, "json": sample_json(s, r, policy.pixels)}
            for ext in sorted(members):
                tw.add(f"{s.key}.{ext}", members[ext])
            written += 1
            if s.wnid is not None:  # test samples have no class
                class_counts[s.wnid] = class_counts.get(s.wnid, 0) + 1
            fix_counts.update(r.fixes)
            if any(x not in COUNTED_ONLY for x in r.fixes):
                fixed.append({"split": spec.split, "key": s.key, "fixes": list(r.fixes)})
    return {
        "split": spec.split, "index": spec.index, "url": spec.url,
        "num_samples": written, "planned": len(spec), **tw.digests(),
        "class_counts": dict(sorted(class_counts.items())),
        "rejected": rejected, "skipped": skipped, "fixed": fixed, "fix_counts": dict(sorted(fix_counts.items())),
        "failed_by_class": {w: dict(sorted(c.items())) for w, c in sorted(failed.items())},
    }


class _HashingWriter:
    """File wrapper that hashes what is written, so a shard is hashed while it is written, not re-read."""

    def __init__(self, f, digests):
        self._f, self._digests = f, digests

    def write(self, b):
        for d in self._digests:
            d.update(b)
        return self._f.write(b)

    def tell(self):
        return self._f.tell()

    def flush(self):
        self._f.flush()
