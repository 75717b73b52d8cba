"""Where prepare-shards' own files lie in OUT: the job state and the shard records (a shard is trusted
only through its record), and the names of the files it writes (what --overwrite removes)."""

from __future__ import annotations

from imagenet_shards.pipeline.prepare.plan import ShardSpec

STATE_DIR = "_prepare"
STATE = f"{STATE_DIR}/state.json"
RECORDS = f"{STATE_DIR}/records"
OUR_TOP_FILES = ("manifest.json", "_info.json", "*.wids.json")
OUR_SHARDS = "imagenet*-*.tar"  # <dataset>-<split>-NNNNNN.tar (plan.ShardSpec.url)


def record_rel(split: str, index: int) -> str:
    """Where the record of shard (split, index) lives, relative to OUT."""
    return f"{RECORDS}/{split}-{index:06d}.json"


def record_name(spec: ShardSpec) -> str:
    """The file name of `spec`'s record."""
    return f"{spec.split}-{spec.index:06d}.json"
