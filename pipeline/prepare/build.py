"""The part's pending shards, built in worker processes; the main process writes each shard's record
as it is done (and keeps none), so a shard is trusted only once complete and recorded.

Files that cannot be read by offset (a .tar.gz, a parquet file) are first copied into per-shard
buckets (`spill`), removed again when the shards are built.
"""

from __future__ import annotations

import shutil
from collections import Counter

from tqdm import tqdm

from imagenet_shards.pipeline.parallel import run_jobs
from imagenet_shards.pipeline.prepare.config import SPLITS, Config
from imagenet_shards.pipeline.prepare.errors import PrepareError
from imagenet_shards.pipeline.prepare.outdir import record_rel
from imagenet_shards.pipeline.prepare.plan import ShardSpec
from imagenet_shards.pipeline.prepare.sources import SourceError
from imagenet_shards.pipeline.prepare.spill import spill
from imagenet_shards.pipeline.storage.atomic import DiskFull, disk_full_error, is_disk_full


def build_pending(out, pending: list[ShardSpec], config: Config, workers: int | None, progress: bool,
           sequential: dict[str, str], job: str, part: str) -> int:
    """Build the pending shards in worker processes (each builds, and for a remote OUT uploads and
    checks, whole shards); the main process writes each record as its shard is done (and keeps none).

    ``sequential``: files that cannot be read by offset (path -> kind); their planned members are
    first copied into per-shard buckets (``spill``), removed again when the shards are built.
    ``job``: the job state's hash, stamped on each record (`parts`: finalize checks it)."""
    if not pending:
        return 0
    out.start_staging()
    # one folder per part: parts that share OUT must not remove each other's buckets
    spill_dir = out.scratch("spill" if part == "0/1" else f"spill-{part.replace('/', '-of-')}")
    try:
        return _build_shards(out, pending, config, workers, progress, sequential, spill_dir, job, part)
    finally:  # the buckets (and a one-pass spill) are a copy: a rerun spills again
        shutil.rmtree(spill_dir, ignore_errors=True)


def _build_shards(out, pending: list[ShardSpec], config: Config, workers: int | None, progress: bool,
                  sequential: dict[str, str], spill_dir: str, job: str, part: str) -> int:
    if sequential:
        files = {path for sp in pending for path in sp.paths() if path in sequential}
        with tqdm(total=len(files), desc="read sequential sources", unit="file", disable=not progress,
                  dynamic_ncols=True) as bar:
            try:
                pending = spill(pending, sequential, spill_dir, workers=workers, progress=bar)
            except SourceError as e:
                raise PrepareError(str(e)) from None
            except OSError as e:
                if is_disk_full(e) and not isinstance(e, DiskFull):
                    raise disk_full_error(spill_dir) from e  # the buckets are plain appends
                raise
    totals = Counter()
    for sp in pending:
        totals[sp.split] += len(sp)
    bars = {s: tqdm(total=totals[s], desc=f"prepare {s}", unit="img", disable=not progress, position=i,
                    dynamic_ncols=True, smoothing=0.05)
            for i, s in enumerate(sorted(totals, key=SPLITS.index))}
    rejected, skipped = Counter(), Counter()  # the summary's two words: rejected (bad images), skipped (non-images)
    policy = config.policy()
    try:
        for _, rec in run_jobs(out.build, [(sp, policy) for sp in pending], workers=workers):
            rec["job"], rec["part"] = job, part
            out.write_json(record_rel(rec["split"], rec["index"]), rec)
            rejected[rec["split"]] += len(rec["rejected"])
            skipped[rec["split"]] += len(rec["skipped"])
            bar = bars[rec["split"]]
            bar.set_postfix(rejected=rejected[rec["split"]], skipped=skipped[rec["split"]], refresh=False)
            bar.update(rec["planned"])
    finally:
        for b in bars.values():
            b.close()
    return sum(totals.values())
