"""One read of a source that can only be read in order: index it and process every image in that read.

winter21_whole.tar.gz (1.1 TB) and the Hugging Face .tar.gz/parquet files cannot be read by offset,
but the seeded global shuffle can put any image in any shard, so no shard is known before the whole
file has been read. The two-read path (`spill`) indexes in one read and copies each pending shard's
raw bytes into buckets in a second; at 1.1 TB each read is about an hour of gzip inflate on one core
(docs/benchmarks.md, "Full ImageNet scale"). Here, for a run that builds every shard (one part, no
shards recorded yet, no subset), the one read also runs `process_image` on each image (in worker
processes, while the main process reads on) and appends the result to one spill file: the stored
JPEG and what the shard records need (sizes, fixes, or the rejection). After planning, each shard is
assembled from the spill by offset (`shards.build_shard` with `ShardSpec.preprocessed`): the same
results in the same order, so the same bytes as from the uncompressed form.

Disk: the spill holds the processed images, about the size of the shards themselves (not the raw
archive), and is removed once the shards are built; put it on another disk with `--staging`.
Memory: a few batches in flight, plus the index (`MemberTable`, ~45 B a member) and 12 B a member
for its place in the spill.
"""

from __future__ import annotations

import json
import os
import struct
from array import array
from pathlib import Path

import numpy as np
from tqdm import tqdm

from imagenet_shards.pipeline.format.label_spaces import RELEASE_SPACE, label_space
from imagenet_shards.pipeline.parallel import run_stream
from imagenet_shards.pipeline.prepare.errors import unknown_wnids_error
from imagenet_shards.pipeline.prepare.images import ImagePolicy, ImageResult, process_image
from imagenet_shards.pipeline.prepare.sources import (KIND_RELEASE_GZ, SourceIndex, Unusable, sequential_items,
                                                      sequential_kind)
from imagenet_shards.pipeline.prepare.sources.huggingface import files_name
from imagenet_shards.pipeline.prepare.sources.table import MemberTable

BATCH = 32  # images a worker job processes: amortises the pickling of one job
_HEAD = struct.Struct("<I")
_FIELDS = ("status", "width", "height", "orig_width", "orig_height", "fixes", "reason", "detail", "source_format",
           "passthrough")


def pack_result(r: ImageResult) -> bytes:
    """One result as stored in the spill: a 4-byte length, its fields as JSON, then the image bytes."""
    head = json.dumps({k: getattr(r, k) for k in _FIELDS}, separators=(",", ":")).encode()
    return _HEAD.pack(len(head)) + head + (r.data or b"")


def unpack_result(blob: bytes) -> ImageResult:
    """The `ImageResult` `pack_result` stored."""
    (n,) = _HEAD.unpack_from(blob)
    fields = json.loads(blob[_HEAD.size:_HEAD.size + n])
    data = blob[_HEAD.size + n:]
    fields["fixes"] = tuple(fields["fixes"])
    return ImageResult(data=data if fields["status"] == "ok" else None, **fields)


def _process_batch(batch: list[tuple[int, bytes]], policy: ImagePolicy) -> list[tuple[int, bytes]]:
    return [(row, pack_result(process_image(data, policy))) for row, data in batch]


class Stored:
    """Where each member's processed result is in the spill file (-1: not processed)."""

    def __init__(self, path: str):
        self.path = path
        self.offset, self.length = array("q"), array("I")

    def relocate(self, table: MemberTable) -> None:
        """Point every member of `table` at its stored result (after the plan and the job state, which
        use the source's locators and sizes)."""
        offset = np.frombuffer(self.offset, dtype=np.int64) if len(self.offset) else np.zeros(0, np.int64)
        length = np.frombuffer(self.length, dtype=np.uint32) if len(self.length) else np.zeros(0, np.uint32)
        table.relocate(self.path, offset, length.astype(np.int64))


def index_and_process(kind: str, sources, split: str, policy: ImagePolicy, spill_path: str, *, keep,
                      workers: int | None = None, progress: bool = True) -> tuple[SourceIndex, Stored]:
    """Read a sequential source once: its index, and every image `keep(wnid)` wants processed and
    stored in `spill_path` (a new file). The index is what `sources.index_split` gives for it."""
    files = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    table, unusable, stored = MemberTable(), [], Stored(spill_path)
    written = 0

    def batches():
        batch = []
        for item, data in sequential_items(kind, files, split, read=True):
            if isinstance(item, Unusable):
                unusable.append(item)
                continue
            row = table.add(*item)
            stored.offset.append(-1)
            stored.length.append(0)
            if keep(item[3]):
                batch.append((row, data))
                if len(batch) == BATCH:
                    yield batch, policy
                    batch = []
        if batch:
            yield batch, policy

    os.makedirs(os.path.dirname(spill_path), exist_ok=True)
    with open(spill_path, "wb") as spill, \
            tqdm(desc=f"read + process {split}", unit="img", disable=not progress, dynamic_ncols=True) as bar:
        for results in run_stream(_process_batch, batches(), workers=workers):
            for row, blob in results:
                spill.write(blob)
                stored.offset[row], stored.length[row] = written, len(blob)
                written += len(blob)
            bar.update(len(results))
    paths = [Path(f) for f in files]
    return SourceIndex(split, kind, files_name(paths), sum(p.stat().st_size for p in paths), table.freeze(), unusable), stored


class OnePassReader:
    """The one-pass reader of a run's sequential sources: `read(split, src)` indexes a source that
    can only be read in order while processing its images into a spill file under `folder`, and
    keeps where each result is (`stored`, by split; `tables`: the indexes it made)."""

    def __init__(self, folder: str, config, workers, progress: bool):
        self.folder, self.config, self.workers, self.progress = folder, config, workers, progress
        self.stored, self.tables = {}, []

    def read(self, split: str, src) -> SourceIndex | None:
        kind = sequential_kind(split, src)
        if kind is None:
            return None
        space = self.config.space_wnids
        if kind == KIND_RELEASE_GZ and self.config.label_space is None and self.config.classes is None:
            keep = self._release_default(split)  # the release's space is known before its first image
        else:
            keep = (lambda w: True) if split == "test" else (lambda w: w is not None and (space is None or w in space))
        idx, self.stored[split] = index_and_process(kind, src, split, self.config.policy(),
                                                    os.path.join(self.folder, f"onepass-{split}.bin"), keep=keep,
                                                    workers=self.workers, progress=self.progress)
        self.tables.append(idx.members)
        return idx


    def _release_default(self, split: str):
        """`keep` for a compressed full release without --label-space: its default space is
        imagenet-22k, so a WNID outside it stops the read at its first image (the error `run` would
        give after the whole read), or with --skip-unknown-wnids is not processed (`run` lists it).
        ImageNet-1k's WNIDs pass too: a gzipped ILSVRC train tar is no release (`run` decides)."""
        space = frozenset(label_space(RELEASE_SPACE).wnids) | frozenset(label_space("imagenet-1k").wnids)

        def keep(wnid) -> bool:
            if wnid in space:
                return True
            if wnid is not None and not self.config.skip_unknown_wnids:
                raise unknown_wnids_error([wnid], RELEASE_SPACE)
            return False
        return keep


def one_pass_reader(config, part, sources: dict, *, fresh, folder, workers, progress: bool) -> OnePassReader | None:
    """The one-pass reader when this run builds every shard from sources read in order: one part,
    no subset (whose left-out images would be processed for nothing), a fresh OUT (`fresh()`; a
    resumed run reads twice: the index, then only the missing shards' images). None otherwise.
    `folder()` makes the spill folder (called only when one is needed)."""
    if tuple(part) != (0, 1) or config.subset:
        return None
    if not any(sequential_kind(s, src) for s, src in sources.items() if src and s in config.splits):
        return None
    if not fresh():
        return None
    return OnePassReader(folder(), config, workers, progress)
