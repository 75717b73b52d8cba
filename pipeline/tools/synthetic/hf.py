"""The Hugging Face ``ILSVRC/imagenet-1k`` layouts of a synthetic set: the same images, HF's packaging.

Written from the set's own ILSVRC archives (so they hold exactly the same bytes):
  hf/data/train_images_{0..K-1}.tar.gz   members ``<original stem>_<WNID>.JPEG``, split over K files
  hf/data/val_images.tar.gz              ``ILSVRC2012_val_%08d_<WNID>.JPEG``
  hf/data/test_images.tar.gz             ``ILSVRC2012_test_%08d.JPEG`` (unlabeled; copies of val images)
  hf-parquet/data/{train,validation,test}-%05d-of-%05d.parquet
                                         rows: image {bytes, path = the HF member name}, label (-1 for test)
Tar members are written in a shuffled (seeded) order and nested one folder deep in the first train
file, as real downloads vary on both counts. Parquet needs pyarrow (the ``hf`` extra).
"""

from __future__ import annotations

import gzip
import io
import os
import random
import tarfile
from pathlib import Path

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.storage.atomic import atomic_open

TRAIN_FILES = 2
ROWS_PER_GROUP = 16
TEST_IMAGES = 4


def hf_members(out: Path, expected: dict) -> dict[str, list[tuple[str, bytes, int]]]:
    """{split: [(HF member name, bytes, label)]} read back from the ILSVRC archives under ``out``."""
    by_member = {s["member"]: s for s in expected["samples"]}
    label_of = {c.wnid: c.index for c in imagenet_1k_classes()}
    splits: dict[str, list] = {"train": [], "val": [], "test": []}
    with tarfile.open(out / expected["files"]["train_tar"]) as outer:
        for ti in outer:
            inner = tarfile.open(fileobj=outer.extractfile(ti))
            for m in inner:
                if m.isfile():
                    s = by_member[f"{ti.name}/{m.name}"]
                    splits["train"].append((_suffixed(m.name, s["wnid"]), inner.extractfile(m).read(),
                                            label_of[s["wnid"]]))
    with tarfile.open(out / expected["files"]["val_tar"]) as val:
        for m in val:
            if m.isfile():
                s = by_member[m.name]
                data = val.extractfile(m).read()
                splits["val"].append((_suffixed(m.name, s["wnid"]), data, label_of[s["wnid"]]))
                if len(splits["test"]) < TEST_IMAGES:
                    splits["test"].append((f"ILSVRC2012_test_{len(splits['test']) + 1:08d}.JPEG", data, -1))
    return splits


def _suffixed(name: str, wnid: str) -> str:
    stem, dot, ext = os.path.basename(name).rpartition(".")
    return f"{stem}_{wnid}.{ext}" if dot else f"{name}_{wnid}"


def write_targz(path: Path, members: list[tuple[str, bytes, int]], *, folder: str = "") -> None:
    """A gzip'd GNU tar of ``members`` (names under ``folder``), byte-reproducible (mtime 0)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data, _ in members:
            ti = tarfile.TarInfo(f"{folder}/{name}" if folder else name)
            ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
            tar.addfile(ti, io.BytesIO(data))
    with atomic_open(path, fsync=False) as f:
        f.write(gzip.compress(buf.getvalue(), compresslevel=6, mtime=0))


def write_parquet(path: Path, members: list[tuple[str, bytes, int]]) -> None:
    """One HF-style parquet file: image {bytes, path}, label; small row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = pa.array([{"bytes": d, "path": n} for n, d, _ in members],
                     type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    table = pa.table({"image": image, "label": pa.array([lab for _, _, lab in members], type=pa.int64())})
    with atomic_open(path, fsync=False) as f:
        pq.write_table(table, f, row_group_size=ROWS_PER_GROUP)


def write_hf_layouts(out: Path, expected: dict, *, targz: bool, parquet: bool, seed: int) -> None:
    """Write the requested HF layouts of the synthetic set under ``out`` (see the module docstring)."""
    splits = hf_members(out, expected)
    rng = random.Random(seed)
    for items in splits.values():
        rng.shuffle(items)
    if targz:
        data = out / "hf" / "data"
        train = splits["train"]
        for i in range(TRAIN_FILES):
            write_targz(data / f"train_images_{i}.tar.gz", train[i::TRAIN_FILES], folder="train" if i == 0 else "")
        write_targz(data / "val_images.tar.gz", splits["val"])
        write_targz(data / "test_images.tar.gz", splits["test"])
    if parquet:
        data = out / "hf-parquet" / "data"
        for split, name, files in (("train", "train", TRAIN_FILES), ("val", "validation", 1), ("test", "test", 1)):
            items = splits[split]
            for i in range(files):
                write_parquet(data / f"{name}-{i:05d}-of-{files:05d}.parquet", items[i::files])
