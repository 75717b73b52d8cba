"""OUT on a local (or network-mounted) file system: the worker writes the shard to a temp file beside
its final name, fsyncs and renames (shards.build_shard); a rerun re-hashes it against the record
(size + sha256)."""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import dataclass

from imagenet_shards.pipeline.format.manifest import write_json_atomic
from imagenet_shards.pipeline.prepare.config import SPLITS
from imagenet_shards.pipeline.prepare.outdir.layout import OUR_SHARDS, OUR_TOP_FILES, RECORDS, STATE_DIR, record_rel
from imagenet_shards.pipeline.prepare.plan import ShardSpec
from imagenet_shards.pipeline.prepare.shards import build_shard, sha256_file
from imagenet_shards.pipeline.storage.atomic import stale_temps


@dataclass
class LocalOut:
    """OUT on a local (or network-mounted) file system: shards written in place, atomically."""

    root: str
    staging: str | None = None  # where scratch files go (the spill of sequential sources); default OUT/_prepare
    created: bool = False  # set by create(): this job made the folder (so a failed start may remove it)

    @property
    def where(self) -> str:
        """OUT as messages show it."""
        return self.root

    room_advice = ("free space on that disk, or give an --out on a disk with room; rerunning the same command "
                   "resumes (finished shards are kept)")

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def read_json(self, rel: str):
        """The JSON object at OUT/rel; FileNotFoundError if it is not there."""
        with open(self.path(rel), encoding="utf-8") as f:
            return json.load(f)

    def read_jsons(self, rels: list[str]) -> list:
        """The JSON objects at OUT/rel for each rel, None where missing or unreadable."""
        out = []
        for rel in rels:
            try:
                out.append(self.read_json(rel))
            except (OSError, ValueError):
                out.append(None)
        return out

    def write_json(self, rel: str, obj) -> None:
        write_json_atomic(self.path(rel), obj)

    def claim_json(self, rel: str, obj):
        """Write `obj` at OUT/rel unless something is there already, and return what is there then:
        of several processes claiming at once, the first wins (a hard link cannot replace a file;
        where the file system has no hard links, a plain write where nothing is)."""
        path = self.path(rel)
        mine = f"{path}.{os.getpid()}.claim"
        write_json_atomic(mine, obj)
        try:
            os.link(mine, path)
        except FileExistsError:
            pass
        except OSError:  # no hard links here (some FUSE and SMB mounts)
            if not os.path.exists(path):
                os.replace(mine, path)
        finally:
            if os.path.exists(mine):
                os.unlink(mine)
        return self.read_json(rel)

    def has_foreign_splits(self) -> bool:
        return os.path.isdir(self.root) and any(os.path.exists(self.path(s)) for s in SPLITS)

    def create(self) -> None:
        """Make OUT and its job-state folders (noting whether OUT is new)."""
        self.created = self.created or not os.path.exists(self.root)
        os.makedirs(self.path(RECORDS), exist_ok=True)

    def discard_if_unused(self) -> None:
        """After a failed start: remove OUT if this job created it and no shard was recorded in it
        (best effort: it must not hide the error that brought us here)."""
        shutil.rmtree(self.scratch("spill"), ignore_errors=True)
        try:
            if self.created and not self.record_names():
                shutil.rmtree(self.root, ignore_errors=True)
        except OSError:
            pass

    def remove_ours(self) -> None:
        found = [self.path(STATE_DIR)] + [p for pat in OUR_TOP_FILES for p in glob.glob(self.path(pat))]
        for split in SPLITS:
            found += glob.glob(os.path.join(self.root, split, OUR_SHARDS))
            found += stale_temps(os.path.join(self.root, split), "imagenet*-*")
        for p in found:
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.unlink(p)

    def record_names(self) -> set[str]:
        try:
            return {n for n in os.listdir(self.path(RECORDS)) if n.endswith(".json")}
        except FileNotFoundError:
            return set()

    def load_records(self, specs: list[ShardSpec], verify: bool) -> dict:
        """{(split, index): record} of the specs whose shard is complete and intact (size and sha256)."""
        out = {}
        for spec in specs:
            try:
                rec = self.read_json(record_rel(spec.split, spec.index))
                path = self.path(spec.url)
                if os.path.getsize(path) != rec["bytes"] or rec["planned"] != len(spec):
                    continue
                if verify and sha256_file(path) != rec["sha256"]:
                    continue
                out[(spec.split, spec.index)] = rec
            except (OSError, ValueError, KeyError):
                continue
        return out

    def clean_stale(self, specs: list[ShardSpec]) -> None:
        """Remove temp files a killed run left for these (to be rebuilt) shards."""
        for spec in specs:
            record = self.path(record_rel(spec.split, spec.index))
            stale = stale_temps(os.path.join(self.root, spec.split), os.path.basename(spec.url))
            stale += stale_temps(os.path.dirname(record), os.path.basename(record))
            for path in stale:
                os.unlink(path)

    def clean_tmp_json(self) -> None:
        for path in stale_temps(self.root, "*.json"):  # left by a finalize that was killed
            os.unlink(path)

    def start_staging(self) -> None:
        pass

    def make_scratch(self, name: str) -> str:
        """`scratch(name)`, made now (before the job state; OUT counts as made by this job if it is new)."""
        self.created = self.created or not os.path.exists(self.root)
        os.makedirs(self.scratch(name), exist_ok=True)
        return self.scratch(name)

    def scratch(self, name: str) -> str:
        """A local folder for this job's temporary files (in --staging, else inside OUT's job state)."""
        if self.staging:
            return os.path.join(self.staging, f"_{name}")
        return self.path(f"{STATE_DIR}/{name}")

    def build(self, spec: ShardSpec, policy, builder=build_shard) -> dict:
        """Build one shard in place (in a worker process) and return its record; `builder(spec,
        folder, policy)` writes it there (prepare's build_shard, derive's derive_shard)."""
        return builder(spec, self.root, policy)

    def close(self) -> None:
        pass
