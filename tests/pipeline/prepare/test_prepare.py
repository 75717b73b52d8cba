"""prepare-shards end to end on generated ILSVRC-layout archives: labels, quirks, conservation, reproducibility."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from PIL import Image

from imagenet_shards.pipeline.prepare import images
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.prepare.run import Config, prepare
from imagenet_shards.pipeline.tools.synthetic.generate import generate

CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 6, 10, 4
SHARD = 12


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ilsvrc")
    generate(out, classes=CLASSES, train_per_class=TRAIN_PER_CLASS, val_per_class=VAL_PER_CLASS, seed=3,
             quirks=True, layouts=("ilsvrc", "imagefolder", "kaggle", "classtars"), progress=False)
    return out


@pytest.fixture(scope="module")
def expected(archives) -> dict:
    return json.loads((archives / "expected.json").read_text())


def run(archives: Path, out: Path, **kw) -> dict:
    args = dict(train=archives / "ILSVRC2012_img_train.tar", val=archives / "ILSVRC2012_img_val.tar",
                devkit=archives / "ILSVRC2012_devkit_t12.tar.gz")
    args.update(kw.pop("sources", {}))
    config = kw.pop("config", Config(shard_samples=SHARD))
    return prepare(out=str(out), config=config, workers=kw.pop("workers", 2), progress=False, **args, **kw)


@pytest.fixture(scope="module")
def shards(archives, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shards")
    summary = run(archives, out)
    assert summary["complete"]
    return out


def manifest_of(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def shard_hashes(out: Path) -> dict[str, str]:
    return {sh["url"]: sh["sha256"] for s in manifest_of(out)["splits"].values() for sh in s["shards"]}


def read_samples(out: Path, split: str) -> list[dict]:
    """Every sample of a split, read back with plain webdataset (not our loader)."""
    urls = [str(out / sh["url"]) for sh in manifest_of(out)["splits"][split]["shards"]]
    return list(wds.WebDataset(urls, shardshuffle=False))


def test_every_good_image_once_with_the_sorted_wnid_label(shards, expected):
    classes = expected["classes"]
    for split in ("train", "val"):
        got = read_samples(shards, split)
        keys = [s["__key__"] for s in got]
        assert len(keys) == len(set(keys)), "a key appears twice"
        by_key = {s["__key__"]: s for s in got}
        want = [e for e in expected["samples"] if e["split"] == split and e["expect"] in ("ok", "fix")]
        assert sorted(by_key) == sorted(e["key"] for e in want)
        for e in want:
            s = by_key[e["key"]]
            meta = json.loads(s["json"])
            label = int(s["cls"])
            assert label == classes.index(e["wnid"]) == meta["label"], e["key"]
            assert meta["wnid"] == e["wnid"] and meta["filename"] == e["filename"]
            fixes = [f for f in meta["fixes"] if f not in ("resized", "restart_markers")]
            assert fixes == e["fixes"], (e["key"], fixes, e["fixes"])
            img = Image.open(io.BytesIO(s["jpg"]))
            assert img.format == "JPEG" and img.mode == "RGB"
            img.load()
            assert img.size == (meta["width"], meta["height"])
            assert (meta["orig_width"], meta["orig_height"]) == (e["width"], e["height"])


def test_quirks_are_rejected_or_skipped_as_expected(shards, expected):
    m = manifest_of(shards)
    rejected = {(r["split"], r["key"]): r["reason"] for r in m["rejected"]}
    # skipped members are matched by file name: a key cannot hold the dot of an AppleDouble "._x" name
    skipped = {(r["split"], os.path.basename(r["source"])): r["reason"] for r in m["skipped"]}
    want_rej = {(e["split"], e["key"]): e["reason"] for e in expected["samples"] if e["expect"] == "reject"}
    want_skip = {(e["split"], e["filename"]): e["reason"] for e in expected["samples"] if e["expect"] == "skip"}
    assert rejected == want_rej
    assert skipped == want_skip
    assert {"truncated", "empty"} <= set(want_rej.values()) and set(want_skip.values()) == {"not_an_image"}
    fixed_keys = {(f["split"], f["key"]) for f in m["fixed"]["samples"]}
    assert fixed_keys == {(e["split"], e["key"]) for e in expected["samples"] if e["expect"] == "fix"}
    assert m["fixed"]["counts"]["cmyk_to_rgb"] == sum(e["quirk"] == "cmyk" for e in expected["samples"])


def test_conservation_per_split(shards, expected):
    m = manifest_of(shards)
    for split, s in m["splits"].items():
        n_in = sum(e["split"] == split for e in expected["samples"])
        assert s["images_in"] == n_in
        assert s["images_in"] == s["num_samples"] + s["num_rejected"] + s["num_skipped"]
        assert s["num_samples"] == sum(sh["num_samples"] for sh in s["shards"]) == sum(s["class_counts"].values())
    assert m["totals"]["images_in"] == len(expected["samples"])


def test_val_labels_agree_with_torchvisions_devkit_parser(shards, archives, tmp_path, monkeypatch):
    import shutil

    import torchvision.datasets.imagenet as tv_imagenet

    monkeypatch.setattr(tv_imagenet, "_verify_archive", lambda *a, **k: None)  # its md5 is the real devkit's
    shutil.copy(archives / "ILSVRC2012_devkit_t12.tar.gz", tmp_path)
    tv_imagenet.parse_devkit_archive(str(tmp_path))
    _, val_wnids = tv_imagenet.load_meta_file(str(tmp_path))  # WNID of each val image, in file order
    classes = [c["wnid"] for c in manifest_of(shards)["classes"]]
    got = read_samples(shards, "val")
    assert got
    for s in got:
        number = int(s["__key__"].rsplit("_", 1)[1])
        assert json.loads(s["json"])["wnid"] == val_wnids[number - 1]
        assert int(s["cls"]) == classes.index(val_wnids[number - 1])
    # the classic bug would give other labels: the devkit's ILSVRC2012_ID - 1 is not the sorted-WNID index
    from imagenet_shards.pipeline.prepare.sources import read_devkit

    id_to_wnid, _, _ = read_devkit(archives / "ILSVRC2012_devkit_t12.tar.gz")
    assert any(i - 1 != classes.index(w) for i, w in id_to_wnid.items())


def test_shards_mix_classes_and_list_with_gnu_tar(shards):
    m = manifest_of(shards)
    first = m["splits"]["train"]["shards"][0]
    names = subprocess.run(["tar", "-tf", str(shards / first["url"])], check=True, capture_output=True,
                           text=True).stdout.split()
    assert len(names) == 3 * first["num_samples"]
    assert [n.rsplit(".", 1)[1] for n in names[:3]] == ["cls", "jpg", "json"]
    labels = {int(s["cls"]) for s in read_samples(shards, "train")[:SHARD]}
    assert len(labels) > 2, "a shard should mix classes (global shuffle)"


def test_info_json_and_wids_index(shards):
    m = manifest_of(shards)
    info = json.loads((shards / "_info.json").read_text())
    assert set(info["splits"]) == {"train", "validation"}
    for split, name in (("train", "train"), ("val", "validation")):
        s, i = m["splits"][split], info["splits"][name]
        assert i["num_samples"] == s["num_samples"] == sum(i["shard_lengths"])
        assert i["filenames"] == [sh["url"] for sh in s["shards"]]
        w = json.loads((shards / f"{split}.wids.json").read_text())
        assert w["__kind__"] == "wids-shard-index-v1" and w["wids_version"] == 1
        for entry, sh in zip(w["shardlist"], s["shards"], strict=True):
            data = (shards / entry["url"]).read_bytes()
            assert entry["nsamples"] == sh["num_samples"] and entry["filesize"] == len(data)
            assert entry["md5sum"] == hashlib.md5(data).hexdigest()
            assert sh["sha256"] == hashlib.sha256(data).hexdigest()


def test_passthrough_keeps_source_pixels_and_big_images_are_resized(archives, shards, expected, tmp_path):
    """By default a pass-through JPEG is rewritten losslessly with restart markers: the source's
    pixels exactly (the source bytes are hashed in expected.json, and a --no-restart-markers run
    keeps exactly those bytes)."""
    by_key = {s["__key__"]: s for split in ("train", "val") for s in read_samples(shards, split)}
    clean = [e for e in expected["samples"] if e["expect"] == "ok" and max(e["width"], e["height"]) <= 500
             and e["quirk"] in (None, "progressive", "tiny", "exif_rotated")]
    assert clean
    kept = tmp_path / "kept"
    run(archives, kept, config=Config(shard_samples=SHARD, restart_markers=False))
    kept_by_key = {s["__key__"]: s for split in ("train", "val") for s in read_samples(kept, split)}
    for e in clean:
        source = kept_by_key[e["key"]]["jpg"]
        assert hashlib.sha256(source).hexdigest() == e["sha256"], e["key"]
        stored = by_key[e["key"]]["jpg"]
        assert json.loads(by_key[e["key"]]["json"])["fixes"] == (["restart_markers"] if stored != source else [])
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(stored))), np.asarray(Image.open(io.BytesIO(source))))
    rewritten = sum(by_key[e["key"]]["jpg"] != kept_by_key[e["key"]]["jpg"] for e in clean)
    assert rewritten == (len(clean) if images._jpegtran is not None else 0)
    big = [e for e in expected["samples"] if e["quirk"] == "large"]
    assert big
    for e in big:
        meta = json.loads(by_key[e["key"]]["json"])
        assert max(meta["width"], meta["height"]) == 500 and "resized" in meta["fixes"]


def test_rerun_is_a_noop_and_two_clean_runs_are_identical(archives, shards, tmp_path):
    before = (shards / "manifest.json").read_bytes()
    again = run(archives, shards)
    assert again["shards_built"] == 0 and again["shards_reused"] == manifest_of(shards)["totals"]["shards"]
    assert (shards / "manifest.json").read_bytes() == before
    other = tmp_path / "clean"
    run(archives, other, workers=1)
    assert shard_hashes(other) == shard_hashes(shards)
    assert (other / "manifest.json").read_bytes() == before


@pytest.mark.parametrize("form", ["classtars+kaggle", "imagefolder"])
def test_every_input_form_gives_the_same_shards(archives, shards, tmp_path, form):
    if form == "imagefolder":
        sources = dict(train=archives / "imagefolder" / "train", val=archives / "imagefolder" / "val", devkit=None)
    else:
        sources = dict(train=archives / "train_class_tars", val=archives / "kaggle" / "val", devkit=None,
                       val_labels=archives / "kaggle" / "LOC_val_solution.csv")
    out = tmp_path / form
    run(archives, out, sources=sources)
    assert shard_hashes(out) == shard_hashes(shards)


def test_parts_then_finalize_equal_one_full_run(archives, shards, tmp_path):
    out = tmp_path / "parts"
    s0 = run(archives, out, part=(0, 3))
    assert not s0["complete"] and s0["parts_missing"] == [1, 2]
    assert prepare_main(["finalize", str(out)]) == 2  # parts 1 and 2 missing: refuses
    run(archives, out, part=(2, 3))
    s1 = run(archives, out, part=(1, 3))
    assert s1["complete"]  # the last part to finish assembles the manifest
    assert prepare_main(["finalize", str(out)]) == 0
    assert shard_hashes(out) == shard_hashes(shards)
    assert (out / "manifest.json").read_bytes() == (shards / "manifest.json").read_bytes()


def test_part_from_torchrun_and_slurm_environment():
    from imagenet_shards.pipeline.prepare.run import parse_part

    assert parse_part(None, {"RANK": "1", "WORLD_SIZE": "4"}) == (1, 4)
    assert parse_part(None, {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1",
                             "SLURM_ARRAY_TASK_COUNT": "8"}) == (4, 8)
    assert parse_part("2/3", {"RANK": "1", "WORLD_SIZE": "4"}) == (2, 3)
    assert parse_part(None, {}) == (0, 1)


def test_kill_9_mid_run_then_rerun_gives_identical_bytes(archives, shards, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "--train", str(archives / "ILSVRC2012_img_train.tar"),
           "--val", str(archives / "ILSVRC2012_img_val.tar"), "--devkit",
           str(archives / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(out), "--shard-samples", str(SHARD),
           "--workers", "1", "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True)
    records = out / "_prepare" / "records"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (records.is_dir() and len(os.listdir(records)) >= 2):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group, workers included: like a machine crash
    proc.wait()
    assert not (out / "manifest.json").exists(), "killed too late to test anything"
    assert prepare_main(cmd[3:]) == 0
    assert shard_hashes(out) == shard_hashes(shards)
    assert (out / "manifest.json").read_bytes() == (shards / "manifest.json").read_bytes()
    leftovers = [p for p in out.rglob("*.tmp*")]
    assert leftovers == []


def test_damaged_shard_is_rebuilt_on_rerun(archives, tmp_path):
    out = tmp_path / "damaged"
    run(archives, out)
    good = shard_hashes(out)
    victim = out / manifest_of(out)["splits"]["train"]["shards"][1]["url"]
    victim.write_bytes(victim.read_bytes()[:-1000])  # truncated copy, e.g. a disk error
    again = run(archives, out)
    assert again["shards_built"] == 1
    assert shard_hashes(out) == good and hashlib.sha256(victim.read_bytes()).hexdigest() == good[
        str(victim.relative_to(out))]


def test_other_config_into_same_out_is_refused_unless_overwrite(archives, tmp_path, capsys):
    out = tmp_path / "cfg"
    base = ["--train", str(archives / "ILSVRC2012_img_train.tar"), "--val", str(archives / "ILSVRC2012_img_val.tar"),
            "--devkit", str(archives / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(out), "--quiet"]
    assert prepare_main(base + ["--shard-samples", "30"]) == 0
    capsys.readouterr()
    assert prepare_main(base + ["--shard-samples", "30", "--quality", "80"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--overwrite" in err and "\n" not in err
    assert prepare_main(base + ["--shard-samples", "30", "--quality", "80", "--overwrite"]) == 0
    assert manifest_of(out)["config"]["quality"] == 80


def test_bad_inputs_exit_2_with_one_line_and_no_output(archives, tmp_path, capsys):
    other = tmp_path / "other-archives"
    generate(other, classes=5, train_per_class=1, val_per_class=1, seed=9, quirks=False, progress=False)
    cases = {
        "missing": ["--train", str(tmp_path / "nope.tar"), "--splits", "train"],
        "devkit": ["--train", str(archives / "ILSVRC2012_img_train.tar"),
                   "--val", str(archives / "ILSVRC2012_img_val.tar"),
                   "--devkit", str(other / "ILSVRC2012_devkit_t12.tar.gz")],
        "not-a-tar": ["--train", str(archives / "expected.json"), "--splits", "train"],
        "flat-val-without-labels": ["--val", str(archives / "ILSVRC2012_img_val.tar"), "--splits", "val"],
        "bad-resize": ["--train", str(archives / "ILSVRC2012_img_train.tar"), "--splits", "train",
                       "--resize", "longest:9"],
    }
    errors = {}
    for name, args in cases.items():
        out = tmp_path / f"out-{name}"
        assert prepare_main(args + ["--out", str(out), "--quiet"]) == 2, name
        errors[name] = capsys.readouterr().err.strip()
        assert errors[name].startswith("error:") and "\n" not in errors[name], (name, errors[name])
        assert not out.exists(), name
    assert "devkit lists 5 classes but the train archive has 6" in errors["devkit"]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert prepare_main(["--train", str(archives / "ILSVRC2012_img_train.tar"), "--splits", "train",
                         "--out", str(blocker / "sub"), "--quiet"]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_exif_transpose_option_and_shard_bytes(archives, expected, tmp_path):
    out = tmp_path / "exif"
    run(archives, out, config=Config(shard_samples=None, shard_bytes=400_000, exif_transpose=True))
    m = manifest_of(out)
    rotated = [e for e in expected["samples"] if e["quirk"] == "exif_rotated"]
    assert rotated
    fixed = {f["key"]: f["fixes"] for f in m["fixed"]["samples"]}
    for e in rotated:
        assert "exif_transpose" in fixed[e["key"]]
    sizes = [sh["bytes"] for sh in m["splits"]["train"]["shards"]]
    assert len(sizes) > 1 and max(sizes[:-1]) < 400_000 * 1.5


def test_duplicate_keys_and_unlabeled_val_images_are_rejected_not_lost(archives, tmp_path):
    import shutil

    train = tmp_path / "train"
    shutil.copytree(archives / "imagefolder" / "train", train)
    a, b = sorted(d for d in train.iterdir())[:2]
    victim = sorted(a.iterdir())[0]
    shutil.copy(victim, b / victim.name)  # the same file name (key) in a second class
    val = archives / "kaggle" / "val"
    csv = tmp_path / "LOC_val_solution.csv"
    rows = (archives / "kaggle" / "LOC_val_solution.csv").read_text().splitlines()
    csv.write_text("\n".join(rows[:-1]) + "\n")  # one val image loses its label
    out = tmp_path / "out"
    run(archives, out, sources=dict(train=train, val=val, devkit=None, val_labels=csv))
    m = manifest_of(out)
    reasons = {(r["split"], r["key"]): r["reason"] for r in m["rejected"]}
    assert reasons[("train", victim.stem)] == "duplicate_key"
    lost = rows[-1].split(",")[0]
    assert reasons[("val", lost)] == "no_label"
    for split, s in m["splits"].items():
        assert s["images_in"] == s["num_samples"] + s["num_rejected"] + s["num_skipped"]
    kept = [x for x in read_samples(out, "train") if x["__key__"] == victim.stem]
    assert len(kept) == 1 and json.loads(kept[0]["json"])["wnid"] == a.name  # first in key/source order


def test_a_second_run_in_one_process_reads_the_current_sources_not_cached_handles(tmp_path):
    """Two in-process runs (one worker: no pool) over archives replaced at the same path in between
    must each read their own archive's bytes (a process-wide handle cache once served stale bytes)."""
    src = tmp_path / "src"
    outs = []
    for seed in (1, 2):
        if src.exists():
            shutil.rmtree(src)
        generate(src, classes=4, train_per_class=4, val_per_class=2, seed=seed, quirks=False, progress=False)
        out = tmp_path / f"out{seed}"
        run(src, out, workers=1)
        fresh = tmp_path / f"fresh{seed}"
        subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "--train",
                        str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"),
                        "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(fresh),
                        "--shard-samples", str(SHARD), "--workers", "1", "--quiet"], check=True)
        assert shard_hashes(out) == shard_hashes(fresh)
        outs.append(shard_hashes(out))
    assert outs[0] != outs[1]


def test_every_output_file_follows_the_umask(archives, tmp_path):
    """Shards, manifest, _info.json, wids indexes, records and job state: 0644 under umask 022 (temp
    files renamed into place once came out 0600, unreadable to a job running as another account)."""
    out = tmp_path / "modes"
    old = os.umask(0o022)
    try:
        run(archives, out, part=(0, 2))  # the first half, then a resume: both write records and state
        run(archives, out)
    finally:
        os.umask(old)
    files = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()}
    kinds = {"manifest.json", "_info.json", "train.wids.json", "val.wids.json", "_prepare/state.json"}
    assert kinds <= set(files)
    assert any(f.startswith("_prepare/records/") for f in files) and any(f.endswith(".tar") for f in files)
    assert {f: m for f, m in files.items() if m != 0o644} == {}
    dirs = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_dir()}
    assert {d: m for d, m in dirs.items() if m != 0o755} == {}
