"""The last step of prepare-shards: assemble manifest.json, _info.json and the wids indexes from the
shard records in OUT/_prepare/records (after a run, or after the --part runs of several machines).

The records are read a few at a time and handed to `format.manifest.build_manifest` one by one, so
the memory this takes is the manifest's own lists (rejected, skipped, the listed fixes), not all
~1,350 records at once: at ImageNet's size those were part of the 2.7 GB that prepare-shards once
peaked at (docs/benchmarks.md, "Full-size run: memory").
"""

from __future__ import annotations

import posixpath
from collections import Counter

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import LEFT_OUT, build_manifest, write_outputs
from imagenet_shards.pipeline.prepare.errors import PrepareError
from imagenet_shards.pipeline.prepare.outdir import STATE, open_outdir, record_rel
from imagenet_shards.pipeline.prepare.parts import check_record_job, job_id
from imagenet_shards.pipeline.prepare.split_checks import empty_in_manifest
from imagenet_shards.pipeline.storage.atomic import DiskFull


def finalize(out: str) -> dict:
    """Assemble manifest.json, _info.json and the wids indexes once every shard has its record."""
    try:
        outdir = open_outdir(out)
    except ValueError as e:
        raise PrepareError(str(e)) from None
    try:
        try:
            state = outdir.read_json(STATE)
        except (FileNotFoundError, NotADirectoryError):
            raise PrepareError(f"{storage.redact(out)} has no {STATE}: run prepare-shards into it first") from None
        wanted = [(split, i) for split in state["config"]["splits"]
                  for i in range(state["splits"][split]["num_shards"])]
        done = outdir.record_names()
        missing = [(n, f"{split}/{i:06d}") for n, (split, i) in enumerate(wanted)
                   if posixpath.basename(record_rel(split, i)) not in done]
        n = len(wanted)
        if missing:
            raise PrepareError(f"{len(missing)} of {n} shards are not done yet (first: {missing[0][1]}, global "
                               f"shard number {missing[0][0]}; with --part I/N that is part {missing[0][0]} mod "
                               "N); run the missing parts, then finalize again")
        outdir.clean_tmp_json()
        check = _job_check(outdir, state)
        records = {split: map(check, _read_records(outdir, split, state["splits"][split]["num_shards"]))
                   for split in state["config"]["splits"]}
        manifest = build_manifest(state, records)
        error = empty_in_manifest(manifest)
        if error:
            raise PrepareError(error)
        write_outputs(out, manifest)
        return manifest
    except DiskFull as e:
        raise PrepareError(f"cannot finalize {storage.redact(out)}: {e}: free space there, then run prepare-shards "
                           f"finalize {storage.redact(out)} (or rerun the same command)") from None
    except OSError as e:
        raise PrepareError(f"cannot finalize {storage.redact(out)}: {storage.redact(e)}") from None


def _job_check(outdir, state: dict):
    """A pass-through for records that raises PrepareError for one a part with other options wrote."""
    expected = job_id(state)

    def read_part_state(rel):
        try:
            return outdir.read_json(rel)
        except (OSError, ValueError):
            return None

    def check(rec: dict) -> dict:
        why = check_record_job(rec, state, expected, read_part_state)
        if why is not None:
            raise PrepareError(why)
        return rec
    return check


def _read_records(outdir, split: str, num_shards: int, chunk: int = 64):
    """The split's shard records in index order, read `chunk` at a time (concurrently where OUT is
    remote) and handed on one by one: ~1,300 records are never all in memory at once."""
    for start in range(0, num_shards, chunk):
        stop = min(num_shards, start + chunk)
        for i, rec in zip(range(start, stop), outdir.read_jsons([record_rel(split, i) for i in range(start, stop)])):
            if rec is None:
                raise PrepareError(f"the record of shard {split}/{i:06d} is unreadable; rerun prepare-shards into "
                                   "this OUT (it rebuilds that shard), then finalize again")
            yield rec


def summarize(manifest: dict) -> dict:
    """The summary numbers of a finished job (what the CLI prints), from its manifest."""
    t = manifest["totals"]
    return {"complete": True, "samples": t["samples"], "shards": t["shards"], "bytes": t["bytes"],
            "images_in": t["images_in"],
            "rejected_by_reason": dict(Counter(r["reason"] for r in manifest["rejected"] + manifest["skipped"])),
            "fixed_by_kind": manifest["fixed"]["counts"],
            **({"label_space": {k: manifest["label_space"][k] for k in ("name", "num_classes")}}
               if "label_space" in manifest else {}),  # only when recorded: an ILSVRC run's summary is as it was
            "splits": {s: {"samples": v["num_samples"], "shards": v["num_shards"], "rejected": v["num_rejected"],
                           "skipped": v["num_skipped"], "images_in": v["images_in"],
                           **{k: v[k] for k in (*LEFT_OUT, "held_out_from") if k in v},
                           **({"short_classes": v["short_classes"]} if v.get("short_classes") else {})}
                       for s, v in manifest["splits"].items()}}
