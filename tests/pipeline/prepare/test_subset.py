"""Subsets (--classes, --per-class, --fraction, --train-list): the pure selection, then prepare-shards
end to end: reproducible, relabeled with the 1k index kept, recorded, conserved, audited, trainable."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest
import torch
import webdataset as wds

from imagenet_shards.pipeline.audit.expect import check_expect, load_expect
from imagenet_shards.pipeline.audit.run import audit
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.format.keys import junk_name
from imagenet_shards.pipeline.format.subset import fraction_count, names_sha256
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.prepare.config import Config, ConfigError
from imagenet_shards.pipeline.prepare.run import PrepareError, prepare
from imagenet_shards.pipeline.prepare.sources import Member
from imagenet_shards.pipeline.prepare.subset import (SubsetError, classes_option, draw_classes, read_class_file,
                                                     read_train_list, select_members, train_name)
from imagenet_shards.pipeline.tools.synthetic.generate import generate

WNIDS_1K = [c.wnid for c in imagenet_1k_classes()]
INDEX_1K = {w: i for i, w in enumerate(WNIDS_1K)}


def members_of(counts: dict[str, int]) -> list[Member]:
    """Members of a train split with `counts[wnid]` images per class (keys in ImageNet's form)."""
    return [Member(f"{w}_{i}", f"{w}_{i}.JPEG", w, "x.tar", 0, 1, f"{w}.tar/{w}_{i}.JPEG")
            for w, n in counts.items() for i in range(n)]


# ----------------------------------------------------------------------------- the pure selection

def test_class_draw_is_seeded_nested_and_a_list_is_checked():
    ten = draw_classes(WNIDS_1K, 10, seed=0)
    assert ten == sorted(ten) and len(set(ten)) == 10 and set(ten) <= set(WNIDS_1K)
    assert draw_classes(WNIDS_1K, 10, seed=0) == ten  # same seed, same draw
    assert draw_classes(WNIDS_1K, 10, seed=1) != ten  # another seed, another draw
    assert set(ten) <= set(draw_classes(WNIDS_1K, 20, seed=0))  # one seed: smaller draws are inside larger
    assert draw_classes(WNIDS_1K, 1000, seed=3) == WNIDS_1K
    assert draw_classes(WNIDS_1K, ("n01443537", "n01440764"), seed=0) == ["n01440764", "n01443537"]
    with pytest.raises(SubsetError, match="n09999999 is not a class of the sources .1 of the 2"):
        draw_classes(WNIDS_1K, ("n01440764", "n09999999"), seed=0)
    with pytest.raises(SubsetError, match="--classes 1001: the sources have only 1000 classes"):
        draw_classes(WNIDS_1K, 1001, seed=0)


def test_per_class_and_fraction_are_stratified_seeded_and_nested():
    counts = {"n01440764": 30, "n01443537": 7, "n01484850": 1}
    members = members_of(counts)
    by_class = lambda ms: Counter(m.wnid for m in ms)  # noqa: E731
    five = select_members("train", members, None, seed=0, per_class=5)
    assert by_class(five) == {"n01440764": 5, "n01443537": 5, "n01484850": 1}
    assert select_members("train", members, None, seed=0, per_class=5) == five
    assert select_members("train", members, None, seed=1, per_class=5) != five
    assert set(five) <= set(select_members("train", members, None, seed=0, per_class=10))
    # a class keeps the same images whichever other classes are kept
    only = select_members("train", members, {"n01440764"}, seed=0, per_class=5)
    assert only == [m for m in five if m.wnid == "n01440764"]
    tenth = select_members("train", members, None, seed=0, fraction=0.1)
    assert by_class(tenth) == {"n01440764": 3, "n01443537": 1, "n01484850": 1}  # 3.0, 0.7 -> 1, 0.1 -> at least 1
    assert five == [m for m in members if m in set(five)]  # in the order given
    # per-class and fraction apply to train only; a class subset applies to val too
    val = [Member(f"ILSVRC2012_val_{i:08d}", "v.JPEG", w, "v.tar", 0, 1, "v") for i, w in enumerate(counts)]
    assert select_members("val", val, None, seed=0, per_class=1, fraction=None) == val
    assert select_members("val", val, {"n01443537"}, seed=0) == [val[1]]
    test = [Member("ILSVRC2012_test_00000001", "t.JPEG", None, "t.tar", 0, 1, "t")]
    assert select_members("test", test, {"n01443537"}, seed=0) == test  # unlabeled: kept whole


def test_names_that_are_never_images_are_never_drawn():
    """A class tar copied through macOS holds `._*` companions (and folders a `.DS_Store`, a `Thumbs.db`):
    --per-class N and --fraction draw among the images, so no junk member takes an image's place."""
    members = members_of({"n01440764": 6})
    junk = [Member(k, name, "n01440764", "x.tar", 0, 1, f"n01440764.tar/{name}")
            for k, name in (("__n01440764_0", "._n01440764_0.JPEG"), ("_DS_Store", ".DS_Store"), ("Thumbs", "Thumbs.db"))]
    for seed in range(8):
        drawn = select_members("train", junk + members, None, seed=seed, per_class=5)
        assert len(drawn) == 5 and not set(drawn) & set(junk)
        assert drawn == select_members("train", members, None, seed=seed, per_class=5)  # as if they were not there
        assert select_members("train", junk + members, None, seed=seed, fraction=0.5) == \
            select_members("train", members, None, seed=seed, fraction=0.5)  # 3 of the 6 images, not 5 of 9 members


@pytest.mark.parametrize("n,fraction,want", [(1300, 0.1, 130), (1300, 0.01, 13), (732, 0.01, 7), (10, 0.25, 3),
                                             (10, 0.01, 1), (7, 1.0, 7), (0, 0.5, 0)])
def test_fraction_count_rounds_half_up_and_keeps_one(n, fraction, want):
    assert fraction_count(n, fraction) == want


def test_train_list_selects_exactly_its_names_and_refuses_a_missing_one():
    members = members_of({"n01440764": 4, "n01443537": 4})
    names = ("n01440764/n01440764_1", "n01443537/n01443537_3")
    assert [m.key for m in select_members("train", members, None, seed=0, train_list=names)] == \
        ["n01440764_1", "n01443537_3"]
    assert [m.key for m in select_members("train", members, {"n01443537"}, seed=0, train_list=names)] == \
        ["n01443537_3"]  # with a class subset: the listed images of the kept classes
    with pytest.raises(SubsetError, match=r"n01443537_8 \(class n01443537\) is not in the train source \(2 of 4"):
        select_members("train", members, None, seed=0, train_list=names + ("n01443537/n01443537_8",
                                                                            "n01443537/n01443537_9"))


def test_the_files_the_options_take(tmp_path):
    f = tmp_path / "imagenet-2.txt"
    f.write_text("# my classes\nn01443537  goldfish\n\nn01440764 # tench\nn01440764\n")
    assert read_class_file(f) == ("n01440764", "n01443537") == classes_option(str(f))
    assert classes_option("100") == 100
    f.write_text("n01440764\ntench\n")
    with pytest.raises(SubsetError, match="line 2 starts with 'tench', not a WNID"):
        read_class_file(f)
    with pytest.raises(SubsetError, match="there is no file nowhere.txt"):
        classes_option("nowhere.txt")
    lst = tmp_path / "1percent.txt"
    lst.write_text("n01440764_10026.JPEG\nn01440764/n01440764_10027.JPEG\n# c\n\nn01440764_10026.JPEG\n")
    assert read_train_list(lst) == ("n01440764/n01440764_10026", "n01440764/n01440764_10027")
    lst.write_text("n01440764_1.JPEG\nn01443537/n01440764_2.JPEG\n")
    with pytest.raises(SubsetError, match="line 2: .* folder names class n01443537 but the file name n01440764"):
        read_train_list(lst)
    with pytest.raises(ValueError, match="does not say its class"):
        train_name("ILSVRC2012_val_00000001.JPEG")


def test_config_records_a_subset_only_when_asked():
    plain = Config().as_dict()
    assert set(plain) == {"resize", "quality", "shard_samples", "shard_bytes", "seed", "max_pixels",
                          "exif_transpose", "restart_markers", "splits"}  # without subset options: what it always did
    asked = Config(seed=4, classes=3, fraction=1, splits=("train", "val")).as_dict()
    assert asked == {**plain, "seed": 4, "subset": {"classes": {"count": 3, "seed": 4}, "fraction": 1.0}}
    listed = Config(classes=["n01443537", "n01440764"], train_list=["n01440764_7.JPEG", "n01440764/n01440764_2.JPEG"])
    rec = listed.as_dict()["subset"]
    assert rec["classes"] == {"count": 2, "wnids": ["n01440764", "n01443537"],
                              "sha256": hashlib.sha256(b"n01440764\nn01443537\n").hexdigest()}
    assert rec["train_list"] == {"names": 2, "sha256": names_sha256(["n01440764/n01440764_2", "n01440764/n01440764_7"]),
                                 "class_counts": {"n01440764": 2}}


@pytest.mark.parametrize("kwargs,message", [
    (dict(per_class=2, fraction=0.5), "give one of --per-class, --fraction and --train-list"),
    (dict(per_class=0), "--per-class must be a positive integer"),
    (dict(fraction=1.5), r"--fraction must be in \(0, 1\]"),
    (dict(fraction=0.0), r"--fraction must be in \(0, 1\]"),
    (dict(classes=0), "--classes must be at least 1"),
    (dict(classes=["tench"]), "--classes takes a number or WNIDs"),
    (dict(per_class=3, splits=("val",)), "--per-class selects train images, but the train split is not built"),
    (dict(train_list=["x.JPEG"]), "--train-list: 'x.JPEG' does not say its class"),
])
def test_bad_subset_options_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Config(**kwargs)


# ----------------------------------------------------------------------------- end to end

CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 6, 10, 4


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("subset-src")
    generate(out, classes=CLASSES, train_per_class=TRAIN_PER_CLASS, val_per_class=VAL_PER_CLASS, seed=5,
             quirks=True, progress=False)
    return out


def run(src: Path, out: Path, **config) -> dict:
    return prepare(out=str(out), train=src / "ILSVRC2012_img_train.tar", val=src / "ILSVRC2012_img_val.tar",
                   devkit=src / "ILSVRC2012_devkit_t12.tar.gz", workers=1, progress=False,
                   config=Config(resize="longer:64", shard_samples=7, **config))


def manifest_of(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def read_samples(out: Path, split: str) -> list[dict]:
    urls = [str(out / sh["url"]) for sh in manifest_of(out)["splits"][split]["shards"]]
    return list(wds.WebDataset(urls, shardshuffle=False))


def files_of(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and "_prepare" not in p.parts}


@pytest.fixture(scope="module")
def subset_set(archives, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("subset") / "out"
    run(archives, out, classes=3, per_class=4)
    return out


def test_same_options_same_bytes_other_seed_other_classes(archives, subset_set, tmp_path):
    again = tmp_path / "again"
    run(archives, again, classes=3, per_class=4)
    assert files_of(again) == files_of(subset_set)  # shards, manifest, _info.json, wids indexes
    other = tmp_path / "other"
    run(archives, other, classes=3, per_class=4, seed=1)
    wnids = lambda out: [c["wnid"] for c in manifest_of(out)["classes"]]  # noqa: E731
    assert wnids(other) != wnids(subset_set)
    assert wnids(other) == draw_classes(json.loads((archives / "expected.json").read_text())["classes"], 3, seed=1)


def test_label_space_of_a_class_subset(archives, subset_set):
    m = manifest_of(subset_set)
    wnids = [c["wnid"] for c in m["classes"]]
    assert len(wnids) == 3 and wnids == sorted(wnids)
    assert m["classes"] == [{"index": i, "wnid": w, "name": next(c.name for c in imagenet_1k_classes() if c.wnid == w),
                             "imagenet_1k_index": INDEX_1K[w]} for i, w in enumerate(wnids)]
    expected = {s["key"]: s for s in json.loads((archives / "expected.json").read_text())["samples"]}
    for split in ("train", "val"):
        samples = read_samples(subset_set, split)
        assert samples
        for s in samples:
            meta = json.loads(s["json"])
            label = int(s["cls"])
            assert 0 <= label < 3 and meta["label"] == label and wnids[label] == meta["wnid"]
            assert meta["label_1k"] == INDEX_1K[meta["wnid"]] == expected[s["__key__"]]["label"]
    assert set(m["splits"]["val"]["class_counts"]) == set(wnids)


def test_per_class_counts_conservation_and_the_record(archives, subset_set):
    m = manifest_of(subset_set)
    assert m["config"]["subset"] == {"classes": {"count": 3, "seed": 0}, "per_class": 4}
    assert m["conservation"].endswith("+ excluded_by_subset")
    wnids = {c["wnid"] for c in m["classes"]}
    train_rejects = Counter(r["key"].split("_")[0] for r in m["rejected"]
                            if r["split"] == "train" and r["reason"] not in ("duplicate_key", "unsafe_key"))
    for w in wnids:  # each kept class: 4 drawn, each a sample or a recorded reject
        assert m["splits"]["train"]["class_counts"].get(w, 0) + train_rejects[w] == 4
    val_of = Counter(s["wnid"] for s in json.loads((archives / "expected.json").read_text())["samples"]
                     if s["split"] == "val" and s["expect"] in ("ok", "fix"))
    assert m["splits"]["val"]["class_counts"] == {w: val_of[w] for w in sorted(wnids)}  # val is not reduced per class
    for split, s in m["splits"].items():
        assert s["images_in"] == s["num_samples"] + s["num_rejected"] + s["num_skipped"] + s["excluded_by_subset"]
        assert s["excluded_by_subset"] > 0
    report = audit(subset_set, workers=1, progress=False)
    assert report.ok, [p.detail for p in report.errors]


def test_fraction_and_train_list_end_to_end(archives, tmp_path):
    expected = json.loads((archives / "expected.json").read_text())
    out = tmp_path / "fraction"
    run(archives, out, fraction=0.5)
    m = manifest_of(out)
    assert len(m["classes"]) == CLASSES and "imagenet_1k_index" not in m["classes"][0]  # the label space is kept
    assert all("label_1k" not in json.loads(s["json"]) for s in read_samples(out, "train"))
    assert m["splits"]["val"]["excluded_by_subset"] == 0
    train = [s for s in expected["samples"] if s["split"] == "train" and not junk_name(s["key"])]  # drawable
    drawn = Counter(m["splits"]["train"]["class_counts"])  # each drawn member: a sample, a reject or a skip
    drawn.update(r["source"].split(".tar/")[0] for r in m["rejected"] + m["skipped"] if r["split"] == "train")
    assert drawn == {w: fraction_count(n, 0.5) for w, n in Counter(s["wnid"] for s in train).items()}

    ok = sorted(s["key"] for s in expected["samples"] if s["split"] == "train" and s["expect"] == "ok")[::3]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{k}.JPEG\n" if i % 2 else f"{k.split('_')[0]}/{k}.JPEG\n" for i, k in enumerate(ok)))
    out = tmp_path / "listed"
    assert prepare_main(["--train", str(archives / "ILSVRC2012_img_train.tar"), "--val",
                         str(archives / "ILSVRC2012_img_val.tar"), "--devkit",
                         str(archives / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(out), "--resize", "longer:64",
                         "--train-list", str(listing), "--workers", "1", "--quiet"]) == 0
    assert sorted(s["__key__"] for s in read_samples(out, "train")) == ok
    rec = manifest_of(out)["config"]["subset"]["train_list"]
    assert rec["names"] == len(ok) and rec["class_counts"] == dict(sorted(Counter(k.split("_")[0] for k in ok).items()))
    assert audit(out, workers=1, progress=False).ok


def test_a_missing_train_list_name_or_unknown_class_is_one_line(archives, tmp_path, capsys):
    args = ["--train", str(archives / "ILSVRC2012_img_train.tar"), "--val", str(archives / "ILSVRC2012_img_val.tar"),
            "--devkit", str(archives / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(tmp_path / "out"), "--quiet"]
    listing = tmp_path / "list.txt"
    listing.write_text("n01440764_99999999.JPEG\n")
    assert prepare_main(args + ["--train-list", str(listing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --train-list: n01440764_99999999 (class n01440764) is not in the train source")
    assert err.count("\n") == 1
    classes = tmp_path / "classes.txt"
    classes.write_text("n01440764\nn09999999\nn09999998\n")
    assert prepare_main(args + ["--classes", str(classes)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --classes: n09999998 is not a class of the sources") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_rerun_with_other_subset_options_is_refused_naming_the_field(archives, subset_set, tmp_path):
    with pytest.raises(PrepareError, match=r"subset\.per_class: 4 \(existing\) vs 5 \(asked\)"):
        run(archives, subset_set, classes=3, per_class=5)
    with pytest.raises(PrepareError, match=r"subset\.classes: 3 drawn with seed 0 \(existing\) vs unset \(asked\)"):
        run(archives, subset_set, per_class=4)
    plain = tmp_path / "plain"
    run(archives, plain)
    with pytest.raises(PrepareError, match=r"subset\.per_class: unset \(existing\) vs 4 \(asked\)"):
        run(archives, plain, per_class=4)
    assert run(archives, subset_set, classes=3, per_class=4)["shards_built"] == 0  # the same asks resume


# ----------------------------------------------------------------------------- audit --expect, trainer

def test_audit_expect_imagenet_1k_follows_the_subset(tmp_path):
    src = tmp_path / "src"  # ImageNet's val shape (50 a class) at a few classes; train 9 a class
    generate(src, classes=4, train_per_class=9, val_per_class=50, seed=2, quirks=False, progress=False)
    out = tmp_path / "out"
    run(src, out, classes=2, per_class=6, seed=3)
    report = audit(out, workers=1, progress=False, expect="imagenet-1k")
    assert report.ok, [p.detail for p in report.errors]
    full = tmp_path / "full"
    run(src, full, classes=2, seed=3)  # train keeps 9 a class: fewer than ImageNet's 732
    kinds = {p.kind for p in audit(full, workers=1, progress=False, expect="imagenet-1k").errors}
    assert kinds == {"expect_count", "expect_class_count"}


def test_check_expect_on_subset_records():
    facts, reference = load_expect("imagenet-1k")
    wnids = ["n01440764", "n01443537"]
    m = {"config": {"subset": {"classes": {"count": 2, "wnids": wnids, "sha256": "…"}, "fraction": 0.01}},
         "classes": [{"index": i, "wnid": w, "name": w, "imagenet_1k_index": i} for i, w in enumerate(wnids)],
         "splits": {"train": {"num_samples": 25, "class_counts": {wnids[0]: 13, wnids[1]: 12}},
                    "val": {"num_samples": 99, "class_counts": {wnids[0]: 50, wnids[1]: 49}}},
         "rejected": [{"split": "val", "key": "ILSVRC2012_val_00000042", "reason": "truncated"}]}
    assert check_expect(m, facts, reference, ["train", "val"], "imagenet-1k") == []  # 1 % of 732..1300 is 7..13
    m["classes"][1]["imagenet_1k_index"] = 7
    m["splits"]["train"] = {"num_samples": 27, "class_counts": {wnids[0]: 14, wnids[1]: 13}}
    problems = check_expect(m, facts, reference, ["train", "val"], "imagenet-1k")
    assert [p.kind for p in problems] == ["expect_classes", "expect_count", "expect_class_count"]
    assert "n01443537 7 (is 1)" in problems[0].detail and "n01440764 14 (at most 13)" in problems[2].detail


def test_a_prepared_per_class_subset_passes_its_own_audit_and_names_its_short_classes(tmp_path, capsys):
    """The quirk classes at ImageNet's val shape: one class tar holds an AppleDouble `._*` member, two
    classes an image that is rejected (truncated, empty). Every class gets its N images but those
    two, which the summary and the manifest name with the reason; audit --expect imagenet-1k passes."""
    src = tmp_path / "src"
    generate(src, classes=4, train_per_class=9, val_per_class=50, seed=2, quirks=True, progress=False)
    expected = json.loads((src / "expected.json").read_text())
    train = [s for s in expected["samples"] if s["split"] == "train"]
    junk_class = next(s["wnid"] for s in train if junk_name(s["key"]))
    failing = {s["wnid"]: s["reason"] for s in train if s["expect"] == "reject"}
    out = tmp_path / "out"
    args = ["--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"),
            "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(out), "--resize", "longer:64",
            "--workers", "1", "--classes", "4", "--per-class", "9"]
    assert prepare_main(args) == 0
    summary = capsys.readouterr().out
    m = manifest_of(out)
    s = m["splits"]["train"]
    assert not [x for x in m["skipped"] if x["split"] == "train"]  # the `._*` member of junk_class was not drawn
    assert s["short_classes"] == {w: {"drawn": 9, "samples": 8, "reasons": {reason: 1}} for w, reason in failing.items()}
    assert {w: n for w, n in s["class_counts"].items() if w not in failing} == \
        {w: 9 for w in expected["classes"] if w not in failing}
    assert junk_class in failing  # it is short, but because of its rejected image, not its `._*` member
    assert f"train: 2 classes short of what was drawn: " + ", ".join(
        f"{w} 8 of 9 ({reason} 1)" for w, reason in sorted(failing.items())) in summary
    report = audit(out, workers=1, progress=False, expect="imagenet-1k")
    assert report.ok, [p.detail for p in report.errors]
    m["splits"]["train"]["short_classes"][junk_class]["samples"] = 9  # the record must agree with the counts
    (out / "manifest.json").write_text(json.dumps(m))
    details = [p.detail for p in audit(out, workers=1, progress=False).errors if p.kind == "manifest_inconsistent"]
    assert details == [f"splits.train.short_classes: {junk_class}: 9 samples of 9 drawn with 1 failed, but class_counts "
                       "has 8"]


@pytest.mark.timeout(300)
def test_the_trainer_runs_on_a_subset_with_k_outputs(archives, tmp_path, one_thread):
    from imagenet_shards.train.trainer.state import checkpoint as ckpt
    from tests.fixtures.trainer import TINY, run_cli

    out = tmp_path / "shards"
    run(archives, out, classes=3)
    assert run_cli("--data", out, "--out", tmp_path / "run", *TINY, "--epochs", "1", "--limit-batches", "2",
                   "--amp", "none") == 0
    state = torch.load(tmp_path / "run" / ckpt.LATEST, weights_only=True)
    assert state["model"]["fc.weight"].shape[0] == 3


def test_audit_checks_label_1k_against_the_class_table():
    from imagenet_shards.pipeline.audit.checks import check_sample
    from imagenet_shards.pipeline.audit.observe import SampleObservation

    classes = [{"index": 0, "wnid": "n01440764", "name": "tench", "imagenet_1k_index": 0},
               {"index": 1, "wnid": "n01484850", "name": "great white shark", "imagenet_1k_index": 2}]

    def kinds(**extra):
        meta = {"label": 1, "wnid": "n01484850", "filename": "n01484850_1.JPEG", "width": 1, "height": 1,
                "orig_width": 1, "orig_height": 1, "fixes": [], **extra}
        s = SampleObservation("n01484850_1", ["cls", "jpg", "json"], b"1", json.dumps(meta).encode(), b"\xff\xd8\xff")
        return [p.kind for p in check_sample(s, "train", classes, "x.tar")]

    assert kinds(label_1k=2) == []
    assert kinds(label_1k=1) == ["label_1k_mismatch"]
    assert kinds() == ["label_1k_mismatch"]  # a class-subset set's samples carry it
    assert kinds(label_1k="2") == ["json_invalid"]
    classes = [{k: v for k, v in c.items() if k != "imagenet_1k_index"} for c in classes]
    assert kinds() == []  # a full set has neither
