"""The compact per-sample state of prepare-shards (issue 12: < 1 GB per process at ImageNet's size)
gives what the roomier one gave: the same canonical order, the same manifest from either shape of
shard record, and no torch in a prepare process. The full-size run itself is bench/bench_scale.py."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tarfile

from imagenet_shards.pipeline.format.manifest import MANIFEST_NAME, build_manifest
from imagenet_shards.pipeline.prepare.finalize import finalize
from imagenet_shards.pipeline.prepare.plan import _canonical_order
from imagenet_shards.pipeline.prepare.sources import Member


def test_canonical_order_is_key_then_source_and_keeps_ties_in_input_order():
    rng = random.Random(5)
    members = [Member(f"k{rng.randrange(40)}", "f", "n01440764", "p", i, 1, f"s{rng.randrange(6)}")
               for i in range(500)]  # many equal keys, equal (key, source) pairs too
    got = _canonical_order(members)
    want = sorted(members, key=lambda m: (m.key, m.source))  # stable: ties keep input order
    assert [m.offset for m in got] == [m.offset for m in want]
    assert len({m.offset for m in got}) == len(members)


def _old_shape(rec: dict, shard_samples: dict[str, list[str]]) -> dict:
    """A record as written before `fix_counts`: every fixed sample listed, counted-only fixes included."""
    old = {k: v for k, v in rec.items() if k != "fix_counts"}
    old["fixed"] = [{"split": rec["split"], "key": key, "fixes": fixes}
                    for key, fixes in shard_samples.items() if fixes]
    return old


def test_records_of_either_shape_give_the_same_manifest_bytes(synthetic_shards, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(synthetic_shards, out)
    before = (out / MANIFEST_NAME).read_bytes()
    records = sorted((out / "_prepare" / "records").glob("*.json"))
    counted_only = 0
    for path in records:
        rec = json.loads(path.read_text())
        assert "fix_counts" in rec and all(set(f["fixes"]) - {"resized", "restart_markers"} for f in rec["fixed"])
        with tarfile.open(out / rec["url"]) as tar:
            fixes = {m.name[:-5]: json.loads(tar.extractfile(m).read())["fixes"]
                     for m in tar if m.name.endswith(".json")}
        counted_only += sum(1 for f in fixes.values() if f and not set(f) - {"resized", "restart_markers"})
        path.write_text(json.dumps(_old_shape(rec, fixes)))
    assert counted_only  # the old shape really lists more: restart_markers on the pass-through images
    (out / MANIFEST_NAME).unlink()
    finalize(str(out))
    assert (out / MANIFEST_NAME).read_bytes() == before


def test_build_manifest_reads_each_record_once_in_index_order(synthetic_shards):
    state = json.loads((synthetic_shards / "_prepare" / "state.json").read_text())
    recs = {s: [json.loads((synthetic_shards / "_prepare" / "records" / f"{s}-{i:06d}.json").read_text())
                for i in range(state["splits"][s]["num_shards"])] for s in state["splits"]}
    from_lists = build_manifest(state, recs)
    from_iterators = build_manifest(state, {s: iter(r) for s, r in recs.items()})
    assert from_lists == from_iterators == json.loads((synthetic_shards / MANIFEST_NAME).read_text())


def test_a_prepare_process_does_not_import_torch():
    code = ("import sys; import imagenet_shards.pipeline.prepare.run, imagenet_shards.pipeline.prepare.cli; "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
