"""Sequential-only sources: one streaming pass copies each planned member into its shard's bucket.

A ``.tar.gz`` or a parquet file cannot be read by offset, but the seeded global shuffle needs any
member in any shard. So after planning, each such file is streamed once (in parallel across files):
the bytes of every member that a pending shard needs are appended to a bucket file of that shard
(one bucket per shard and source file, so parallel jobs never share a file), and the plan's samples
are re-pointed at (bucket, offset). Shards are then built exactly as from an uncompressed tar:
same ``process_image``, same order, same bytes, so the output does not depend on the input form.
Memory stays bounded (one member at a time; pyarrow holds one row group); disk needs the raw bytes
of the pending shards once (put the buckets on a fast local disk with ``--staging`` if OUT is slow).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections import defaultdict

from imagenet_shards.pipeline.parallel import run_jobs
from imagenet_shards.pipeline.prepare.plan import ShardSpec
from imagenet_shards.pipeline.prepare.sources import SourceError, iter_member_bytes


def spill(specs: list[ShardSpec], kinds: dict[str, str], folder: str, *, workers: int | None = None,
          progress=None) -> list[ShardSpec]:
    """Copy the planned members of sequential sources (``kinds``: file path -> source kind) into
    per-shard buckets under ``folder``; returns the specs with those samples re-pointed there.

    Samples of other (offset-readable) sources are left as they are. Raises SourceError if a file
    no longer holds a member it held when indexed."""
    wanted: dict[str, dict[int, tuple[str, int]]] = defaultdict(dict)
    for spec in specs:
        for s in spec.samples:
            if s.path in kinds:
                wanted[s.path][s.offset] = (spec.split, spec.index)
    if not wanted:
        return specs
    if os.path.exists(folder):
        shutil.rmtree(folder)  # buckets of an interrupted run: partial, rebuilt from scratch
    for split in {spec.split for spec in specs}:
        os.makedirs(os.path.join(folder, split), exist_ok=True)
    paths = sorted(wanted)
    jobs = [(kinds[p], p, wanted[p], folder, n) for n, p in enumerate(paths)]
    located: dict[tuple[str, int], tuple[str, int, int]] = {}
    for i, found in run_jobs(_spill_file, jobs, workers=workers):
        located.update({(paths[i], ordinal): where for ordinal, where in found.items()})
        if progress is not None:
            progress.update(1)
    out = []
    for spec in specs:
        samples = []
        for s in spec.samples:
            if s.path in kinds:
                bucket, offset, size = located[(s.path, s.offset)]
                if size != s.size:
                    raise SourceError(f"{s.source}: {size} bytes now, {s.size} when indexed; the file changed "
                                      "during the run")
                s = dataclasses.replace(s, member=dataclasses.replace(s.member, path=bucket, offset=offset))
            samples.append(s)
        out.append(ShardSpec(spec.split, spec.index, samples, dataset=spec.dataset))
    return out


def _spill_file(kind: str, path: str, wanted: dict[int, tuple[str, int]], folder: str,
                number: int) -> dict[int, tuple[str, int, int]]:
    """Stream one source file; append each wanted member to its shard's bucket. {ordinal: (bucket, offset, size)}."""
    found, ends = {}, {}
    for ordinal, data in iter_member_bytes(kind, path):
        target = wanted.get(ordinal)
        if target is None:
            continue
        bucket = os.path.join(folder, target[0], f"{target[1]:06d}.{number}.bin")
        with open(bucket, "ab") as f:  # open per member: one shard's bucket per write, no fd limit
            f.write(data)
        offset = ends.get(bucket, 0)
        ends[bucket] = offset + len(data)
        found[ordinal] = (bucket, offset, len(data))
    missing = len(wanted) - len(found)
    if missing:
        raise SourceError(f"{os.path.basename(path)} no longer holds {missing} member(s) it held when indexed; "
                          "the file changed during the run")
    return found
