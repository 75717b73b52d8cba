"""OUT at an fsspec URL: the worker builds the shard in a local staging folder, uploads it (one PUT,
or an S3 multipart upload: either way the object appears only when complete), checks what the store
then says (size, and the ETag against the md5 we computed while writing: `check_upload`), and deletes
the staged copy. A rerun trusts a shard whose record, size and ETag agree with the listing (size alone
where the store gives no ETag); everything else is rebuilt and uploaded again over whatever is there."""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import dumps
from imagenet_shards.pipeline.prepare.config import SPLITS
from imagenet_shards.pipeline.prepare.outdir.layout import (OUR_SHARDS, OUR_TOP_FILES, RECORDS, STATE, STATE_DIR,
                                                            record_name, record_rel)
from imagenet_shards.pipeline.prepare.plan import ShardSpec
from imagenet_shards.pipeline.prepare.shards import build_shard
from imagenet_shards.pipeline.storage.atomic import stale_temps


class UploadError(OSError):
    """An uploaded shard is not what was sent (size or hash); the message says which and what to do."""


@dataclass
class RemoteOut:
    """OUT at an fsspec URL: shards staged locally, uploaded, checked, then recorded."""

    url: str
    staging: str | None = None
    verify: bool = True
    options: dict = field(default_factory=storage.options_snapshot)  # for workers that are spawned
    created: bool = False  # set by create(): this job wrote the first job state under the prefix

    def __post_init__(self):
        self._own_staging = self.staging is None

    @property
    def where(self) -> str:
        """OUT as messages show it (credentials redacted)."""
        return storage.redact(self.url)

    room_advice = ("free space there, or give --staging DIR on a disk with room (shards are built there before "
                   "upload: about one per worker at a time); rerunning the same command resumes")

    def start_staging(self) -> None:
        """Create the staging folder (before the workers start; they build into it)."""
        if self.staging is None:
            self.staging = tempfile.mkdtemp(prefix="prepare-shards-staging-")
        os.makedirs(self.staging, exist_ok=True)

    def make_scratch(self, name: str) -> str:
        """`scratch(name)`, made now (before the job state)."""
        self.start_staging()
        os.makedirs(self.scratch(name), exist_ok=True)
        return self.scratch(name)

    def scratch(self, name: str) -> str:
        """A local folder for this job's temporary files (in the staging folder; after start_staging)."""
        return os.path.join(self.staging, f"_{name}")

    def path(self, rel: str) -> str:
        return storage.join(self.url, rel)

    def read_json(self, rel: str):
        return json.loads(storage.read_bytes(self.path(rel)))

    def read_jsons(self, rels: list[str]) -> list:
        """The JSON objects at OUT/rel for each rel (fetched concurrently), None where missing or
        invalid; transient errors are retried, other errors raised."""
        if not rels:
            return []
        fs, _ = storage.fs_for(self.url)
        paths = [storage.fs_for(self.path(rel))[1] for rel in rels]
        try:
            got = fs.cat(paths, on_error="return")
        except Exception:  # noqa: BLE001 - fall back to one retried GET each below
            got = {}
        out = []
        for rel, path in zip(rels, paths):
            data = got.get(path)
            try:
                if not isinstance(data, bytes):
                    data = storage.read_bytes(self.path(rel))
                out.append(json.loads(data))
            except (FileNotFoundError, ValueError):
                out.append(None)
        return out

    def write_json(self, rel: str, obj) -> None:
        storage.write_bytes(self.path(rel), dumps(obj).encode())

    def claim_json(self, rel: str, obj):
        """`obj` at OUT/rel unless something is there, and what is there then. An object store has no
        portable create-if-absent: read, then write (two parts started at the same instant may both
        write; the last one's stays)."""
        try:
            return self.read_json(rel)
        except FileNotFoundError:
            self.write_json(rel, obj)
            return obj

    def has_foreign_splits(self) -> bool:
        return any(storage.exists(self.path(s)) for s in SPLITS)

    def create(self) -> None:
        """Make OUT's folders where the store has folders (noting whether the job state is new)."""
        self.created = not storage.exists(self.path(STATE))
        storage.makedirs(self.path(RECORDS))
        for split in SPLITS:
            storage.makedirs(self.path(split))

    def discard_if_unused(self) -> None:
        """After a failed start: remove the job state this job wrote if no shard was recorded; never
        the prefix itself, which may hold other data. Best effort: an unreachable store holds nothing
        of ours either."""
        if self.staging:
            shutil.rmtree(self.scratch("spill"), ignore_errors=True)
        if not self.created:
            return
        try:
            if not self.record_names():
                storage.remove(self.path(STATE_DIR), recursive=True)
        except OSError:
            pass

    def _listing(self, rel: str) -> dict:
        try:
            return storage.list_details(self.path(rel))
        except FileNotFoundError:
            return {}

    def remove_ours(self) -> None:
        storage.remove(self.path(STATE_DIR), recursive=True)
        for name in self._listing(""):
            if any(fnmatch.fnmatch(name, pat) for pat in OUR_TOP_FILES):
                storage.remove(self.path(name))
        for split in SPLITS:
            for name in self._listing(split):
                if fnmatch.fnmatch(name, OUR_SHARDS):
                    storage.remove(self.path(f"{split}/{name}"))

    def record_names(self) -> set[str]:
        return {n for n in self._listing(RECORDS) if n.endswith(".json")}

    def load_records(self, specs: list[ShardSpec], verify: bool) -> dict:
        """{(split, index): record} of the specs whose record exists and whose object has the recorded
        size and ETag (size alone where the store has no ETag, or with verify=False). One listing per
        folder and one GET per record: no shard is downloaded."""
        names = self.record_names()
        specs = [s for s in specs if record_name(s) in names]
        objects = {split: self._listing(split) for split in {s.split for s in specs}}
        recs = self.read_jsons([record_rel(s.split, s.index) for s in specs])
        out = {}
        for spec, rec in zip(specs, recs):
            try:
                obj = objects[spec.split].get(os.path.basename(spec.url))
                if obj is None or obj.size != rec["bytes"] or rec["planned"] != len(spec):
                    continue
                if verify and rec.get("etag") and obj.etag and obj.etag != rec["etag"]:
                    continue
                out[(spec.split, spec.index)] = rec
            except (TypeError, KeyError):  # no record (None) or not one of ours
                continue
        return out

    def clean_stale(self, specs: list[ShardSpec]) -> None:
        """Nothing to clean remotely (an interrupted upload leaves no object); staged leftovers go."""
        if self.staging is None:
            return
        for spec in specs:
            folder = os.path.join(self.staging, spec.split)
            for path in stale_temps(folder, os.path.basename(spec.url)) + \
                    glob.glob(os.path.join(self.staging, spec.url)):
                os.unlink(path)

    def clean_tmp_json(self) -> None:
        pass

    def build(self, spec: ShardSpec, policy, builder=build_shard) -> dict:
        """Build one shard in staging (`builder`, as LocalOut.build), upload it, check the object, delete
        the staged copy (in a worker)."""
        storage.restore_options(self.options)
        rec = builder(spec, self.staging, policy)
        local = os.path.join(self.staging, spec.url)
        url = self.path(spec.url)
        try:
            storage.put_file(local, url)
            rec["etag"] = check_upload(local, url, rec, verify=self.verify)
        finally:
            if os.path.exists(local):
                os.unlink(local)
        return rec

    def close(self) -> None:
        if self._own_staging and self.staging:
            shutil.rmtree(self.staging, ignore_errors=True)


def check_upload(local: str, url: str, rec: dict, *, verify: bool) -> str | None:
    """Check the uploaded object against what was sent; returns its ETag (kept in the record).

    Size always. With verify: the md5 the store vouches for (S3 single-part ETag, GCS md5Hash), or an
    S3 multipart ETag against the one computed from the staged file; stores with neither: size only."""
    obj = storage.info(url)
    where = storage.redact(url)
    if obj.size != rec["bytes"]:
        raise UploadError(f"uploaded {where} has {obj.size} bytes, expected {rec['bytes']}: rerun to upload it again")
    if not verify:
        return obj.etag
    if obj.md5 is not None:
        expected = rec["md5"]
    elif obj.etag and storage.uploads_in_parts(rec["bytes"]) and "-" in obj.etag:
        expected = storage.multipart_etag(local)
    else:
        return obj.etag
    got = obj.md5 if obj.md5 is not None else obj.etag
    if got != expected:
        raise UploadError(f"uploaded {where}: the store reports {got} but the bytes sent hash to {expected}; rerun "
                          "to upload it again (buckets with SSE-KMS/SSE-C encryption report ETags that are not "
                          "md5s: use --no-verify there, which checks sizes only)")
    return obj.etag
