"""Where prepare-shards writes OUT: a local folder, or any fsspec URL (s3://, gs://, ...).

Both kinds keep one rule: **a shard is trusted only through its record** (OUT/_prepare/records/),
and a record is written only after its shard is complete under its final name and checked.
- `LocalOut` (local.py): a shard written in place, atomically; a rerun re-hashes it (size + sha256).
- `RemoteOut` (remote.py): a shard staged locally, uploaded, checked against what the store says
  (size, ETag); a rerun trusts a shard whose record, size and ETag agree with the listing.
run.py talks to either through the same few methods and never asks which kind it has: the
local/remote difference lives here only. `open_outdir` refuses, before any work, an OUT that
cannot be written (http(s):// is read-only) and a staging folder that is not local.

`layout` says where the job state and the records lie in OUT, and which files are ours.
"""

from __future__ import annotations

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.prepare.outdir.layout import (OUR_SHARDS, OUR_TOP_FILES, RECORDS, STATE, STATE_DIR,
                                                            record_name, record_rel)
from imagenet_shards.pipeline.prepare.outdir.local import LocalOut
from imagenet_shards.pipeline.prepare.outdir.remote import RemoteOut, UploadError, check_upload


def open_outdir(out: str, *, staging: str | None = None, verify: bool = True):
    """LocalOut for a path or file:// URL, RemoteOut for anything else. Nothing is touched yet.

    ValueError (one line) for an OUT that cannot be written (http://, https://) and for a
    `staging` that is a URL: both are refused before any work is done."""
    if staging is not None and storage.is_remote(staging):
        raise ValueError(f"--staging takes a local folder, got {storage.redact(staging)} (shards are built "
                         "there before upload; give a path on a local disk)")
    if not storage.can_write(out):
        raise ValueError(f"--out {storage.redact(out)} is read-only: {storage.protocol(out)}:// has no uploads; "
                         "give a local folder or a store you can write to (s3://, gs://, ...), then serve that")
    path = storage.local_path(out)
    if path is not None:
        return LocalOut(path, staging=storage.local_path(staging) if staging else None)
    return RemoteOut(str(out).rstrip("/"), staging=storage.local_path(staging) if staging else None,
                     verify=verify)


__all__ = ["OUR_SHARDS", "OUR_TOP_FILES", "RECORDS", "STATE", "STATE_DIR", "LocalOut", "RemoteOut", "UploadError",
           "check_upload", "open_outdir", "record_name", "record_rel"]
