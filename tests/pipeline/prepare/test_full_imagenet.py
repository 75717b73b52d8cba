"""The full ImageNet (fall11_whole.tar, winter21_whole.tar.gz) through prepare-shards: every label
space labels by its table and counts what it leaves out, the held-out split, the one read of the
.tar.gz, and the bad inputs of issue 22."""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from collections import Counter

import pytest

from imagenet_shards.pipeline.audit.holdout import check_holdout
from imagenet_shards.pipeline.audit.run import audit
from imagenet_shards.pipeline.format.label_spaces import (LabelSpaceError, label_space, label_space_option, present_space,
                                                          read_label_space_file)
from imagenet_shards.pipeline.prepare import onepass
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.prepare.config import Config, ConfigError
from imagenet_shards.pipeline.prepare.finalize import finalize
from imagenet_shards.pipeline.prepare.run import PrepareError, prepare
from imagenet_shards.pipeline.prepare.sources import full_imagenet as release_source
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import FALL11_TAR, NOT_A_TAR, WINTER21_TGZ

SPACES = ["imagenet-1k", "imagenet-12k", "imagenet-22k", "imagenet-21k-goog", "imagenet-21k-miil",
          "imagenet-21k-miil-w21", "present", "file", None]


def _expected(src) -> dict:
    return json.loads((src / "expected.json").read_text())


def _samples(out) -> dict[str, tuple[int, dict]]:
    """key -> (.cls, .json) of every sample in the set's shards."""
    found = {}
    for shard in sorted(out.glob("*/*.tar")):
        with tarfile.open(shard) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        for name, data in members.items():
            if name.endswith(".cls"):
                key = name[:-4]
                found[key.split("/")[-1]] = (int(data), json.loads(members[key + ".json"]))
    return found


def _files(out) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and "_prepare" not in p.parts}


@pytest.mark.parametrize("name", SPACES)
def test_every_label_space_labels_by_its_table_and_counts_what_it_leaves_out(full_imagenet, tmp_path, name):
    src, out = full_imagenet, tmp_path / "out"
    if name == "file":  # a user's head: three classes, not in sorted order
        (tmp_path / "head.txt").write_text("n02085782 Japanese spaniel\nn01440764\nn00004475\n")
        space, option = read_label_space_file(tmp_path / "head.txt"), str(tmp_path / "head.txt")
    elif name in (None, "present"):
        space, option = (label_space("imagenet-22k") if name is None else
                         present_space(_expected(src)["classes"])), name
    else:
        space, option = label_space(name), name
    parsed = None if option is None else label_space_option(option)  # as the CLI parses it, once
    prepare(out=str(out), train=str(src / FALL11_TAR), config=Config(splits=("train",), shard_samples=1000,
                                                                        label_space=parsed),
            workers=1, progress=False)
    m = json.loads((out / "manifest.json").read_text())
    assert m["label_space"]["name"] == (space.name if name != "file" else "file")
    assert m["label_space"]["num_classes"] == space.num_classes and m["label_space"]["sha256"] == space.sha256
    assert [c["wnid"] for c in m["classes"]] == list(space.wnids)
    assert json.loads((out / "_info.json").read_text())["num_classes"] == space.num_classes
    images = [s for s in _expected(src)["samples"]]
    inside = [s for s in images if s["wnid"] in space.index]
    got = _samples(out)
    assert sorted(got) == sorted(s["key"] for s in inside)
    assert all(cls == space.index[meta["wnid"]] == meta["label"] for cls, meta in got.values())
    train = m["splits"]["train"]
    assert train["excluded_by_label_space"] == len(images) - len(inside)
    assert train["images_in"] == len(images) + 1  # + the class member that is not a tar
    assert [(s["key"], s["reason"]) for s in m["skipped"]] == [(NOT_A_TAR, "not_a_class_tar")]
    assert m["conservation"].endswith("+ excluded_by_label_space")
    assert train["images_in"] == train["num_samples"] + train["num_rejected"] + train["num_skipped"] \
        + train["excluded_by_label_space"]
    expect = space.name if space.name not in ("file", "present", "imagenet-1k") else None  # 1k: counts too
    report = audit(str(out), workers=1, expect=expect, progress=False)
    assert report.ok, [p.detail for p in report.errors]


def test_the_default_for_ilsvrc_archives_records_nothing_new(synthetic_shards):
    m = json.loads((synthetic_shards / "manifest.json").read_text())
    assert "label_space" not in m and m["name"] == "imagenet1k"
    assert not any("excluded_by_label_space" in s or "held_out" in s for s in m["splits"].values())


def test_imagenet_12k_on_ilsvrc_style_sources_labels_by_the_12k_index(synthetic_imagenet, tmp_path):
    out = tmp_path / "out"
    assert prepare_main(["--train", str(synthetic_imagenet / "ILSVRC2012_img_train.tar"), "--splits", "train",
                         "--label-space", "imagenet-12k", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    twelve = label_space("imagenet-12k")
    got = _samples(out)
    assert got and all(cls == twelve.index[meta["wnid"]] for cls, meta in got.values())
    one_k = label_space("imagenet-1k").index
    assert any(cls != one_k[meta["wnid"]] for cls, meta in got.values())  # the 12k index, not the 1k one
    assert (out / "train" / "imagenet12k-train-000000.tar").exists()


def test_the_held_out_split_is_seeded_nested_disjoint_and_recorded(full_imagenet, tmp_path):
    src = full_imagenet / FALL11_TAR
    expected = _expected(full_imagenet)
    sizes = Counter(s["wnid"] for s in expected["samples"])

    def run(k: int, seed: int, name: str) -> dict:
        out = tmp_path / name
        prepare(out=str(out), train=str(src), config=Config(holdout_per_class=k, seed=seed, shard_samples=1000),
                workers=1, progress=False)
        return {"out": out, "m": json.loads((out / "manifest.json").read_text()), "samples": _samples(out)}

    one, two, other = run(1, 0, "k1"), run(2, 0, "k2"), run(2, 5, "k2-seed5")
    val = {r: {k for k, (_, meta) in x["samples"].items() if k not in _train_keys(x["out"])}
           for r, x in (("one", one), ("two", two), ("other", other))}
    # nested: where a class gives K=2 images, K=1's image is one of them (a class of 2 gives one, then none)
    big = {w for w, n in sizes.items() if n > 2}
    assert {k for k in val["one"] if k.split("_")[0] in big} < val["two"]
    assert val["two"] != val["other"]  # another seed, another draw
    for x, k in ((one, 1), (two, 2)):
        m = x["m"]
        assert m["config"]["holdout"] == {"per_class": k, "seed": 0}
        assert m["splits"]["val"]["held_out_from"] == "train"
        assert m["splits"]["train"]["held_out"] == m["splits"]["val"]["images_in"]
        held = Counter(meta["wnid"] for key, (_, meta) in x["samples"].items() if key not in _train_keys(x["out"]))
        assert held == {w: k for w, n in sizes.items() if n > k}  # classes of k or fewer give none
        assert not _train_keys(x["out"]) & {key for key in x["samples"] if key not in _train_keys(x["out"])}
        assert m["totals"]["images_in"] == m["splits"]["train"]["images_in"]  # held-out images counted once
        report = audit(str(x["out"]), workers=1, expect="imagenet-22k", progress=False)
        assert report.ok, [p.detail for p in report.errors]
    leaked = {"train": ["n00004475_1", "a"], "val": ["n00004475_1"]}
    problems = check_holdout(two["m"], leaked)
    assert [p.kind for p in problems] == ["holdout_overlap"] and "n00004475_1" in problems[0].detail
    bent = json.loads(json.dumps(two["m"]))
    wnid = next(iter(bent["splits"]["val"]["class_counts"]))
    bent["splits"]["val"]["class_counts"][wnid] = 1
    assert [p.kind for p in check_holdout(bent, {})] == ["holdout_count"]


def _train_keys(out) -> set[str]:
    keys = set()
    for shard in (out / "train").glob("*.tar"):
        with tarfile.open(shard) as tar:
            keys |= {m.name[:-4] for m in tar if m.name.endswith(".cls")}
    return keys


def test_winter21_tar_gz_is_read_once_and_gives_the_bytes_of_its_uncompressed_form(full_imagenet, tmp_path,
                                                                                   monkeypatch):
    reads = []
    real = release_source.iter_release
    monkeypatch.setattr(release_source, "iter_release", lambda path, read: reads.append(read) or real(path, read=read))
    plain = tmp_path / "winter21_whole.tar"
    plain.write_bytes(gzip.decompress((full_imagenet / WINTER21_TGZ).read_bytes()))
    cfg = Config(holdout_per_class=1, shard_samples=7)
    one, two, ref = tmp_path / "one-read", tmp_path / "two-reads", tmp_path / "offsets"
    prepare(out=str(one), train=str(full_imagenet / WINTER21_TGZ), config=cfg, workers=2, progress=False)
    assert reads == [True]  # one read of the file, its images processed in it
    assert not (one / "_prepare" / "spill").exists()  # the spill is gone once the shards are built
    reads.clear()
    for part in ((0, 2), (1, 2)):  # parts read twice: the index, then only their own shards' images
        prepare(out=str(two), train=str(full_imagenet / WINTER21_TGZ), config=cfg, workers=1, part=part,
                progress=False)
    assert reads == [False, True, False, True]
    prepare(out=str(ref), train=str(plain), config=cfg, workers=2, progress=False)
    a, b, c = _files(one), _files(two), _files(ref)
    assert a == b
    assert {k: v for k, v in a.items() if k != "manifest.json"} == {k: v for k, v in c.items() if k != "manifest.json"}
    ma, mc = (json.loads(x["manifest.json"]) for x in (a, c))
    assert ma["sources"][0]["kind"] == "tar-of-tars.gz" and mc["sources"][0]["kind"] == "tar-of-tars"
    assert ma["sources"][0]["fingerprint"] == mc["sources"][0]["fingerprint"]
    assert {k: v for k, v in ma.items() if k != "sources"} == {k: v for k, v in mc.items() if k != "sources"}
    assert ma["splits"]["train"]["num_skipped"] == 1  # the member that is not a tar, in either form


def test_the_one_read_stores_what_process_image_returned():
    from imagenet_shards.pipeline.prepare.images import ImageResult
    r = ImageResult("rejected", None, 0, 0, 10, 20, ("cmyk_to_rgb",), "truncated", "short", "JPEG", False)
    assert onepass.unpack_result(onepass.pack_result(r)) == r
    ok = ImageResult("ok", b"\xff\xd8jpeg", 5, 6, 7, 8, (), None, None, "PNG", False)
    assert onepass.unpack_result(onepass.pack_result(ok)) == ok


def test_a_part_that_ran_with_other_options_is_refused_by_finalize_naming_the_field(full_imagenet, tmp_path):
    src, out, other = str(full_imagenet / FALL11_TAR), tmp_path / "out", tmp_path / "other"
    prepare(out=str(out), train=src, config=Config(splits=("train",), shard_samples=6, seed=0), part=(0, 2),
            workers=1, progress=False)
    prepare(out=str(other), train=src, config=Config(splits=("train",), shard_samples=6, seed=1), part=(1, 2),
            workers=1, progress=False)
    for rec in (other / "_prepare" / "records").glob("*.json"):  # part 1 wrote into the same OUT, as if it raced
        if json.loads(rec.read_text())["part"] == "1/2":
            shutil.copy(rec, out / "_prepare" / "records" / rec.name)
            shard = json.loads(rec.read_text())["url"]
            shutil.copy(other / shard, out / shard)
    shutil.copy(other / "_prepare" / "part-1-of-2.json", out / "_prepare")
    with pytest.raises(PrepareError, match=r"built by part 1/2, which ran with other options than the job "
                                           r"\(seed: 1 \(part\) vs 0 \(job\)\)"):
        finalize(str(out))
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("text, words", [("n01440764\nn01440764\n", "line 2 repeats n01440764 (first on line 1)"),
                                         ("n01440764\nn014407\n", "line 2 starts with 'n014407', not a WNID")])
def test_a_bad_label_space_file_exits_2_with_one_line_naming_the_line(full_imagenet, tmp_path, capsys, text, words):
    (tmp_path / "space.txt").write_text(text)
    assert prepare_main(["--train", str(full_imagenet / FALL11_TAR), "--splits", "train", "--label-space",
                         str(tmp_path / "space.txt"), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err
    assert not (tmp_path / "out").exists()


def test_options_that_cannot_go_together_are_refused(full_imagenet, tmp_path):
    with pytest.raises(ConfigError, match="--label-space or --classes, not both"):
        Config(label_space=label_space("imagenet-12k"), classes=10)
    with pytest.raises(ConfigError, match="--splits must hold train and val"):
        Config(holdout_per_class=5, splits=("train",))
    with pytest.raises(LabelSpaceError, match="unknown label space 'imagenet-9k'"):
        label_space_option("imagenet-9k")
    with pytest.raises(ConfigError, match="label_space takes a LabelSpace or 'present'"):
        Config(label_space="imagenet-12k")  # a name is parsed once, by label_space_option, not by Config
    with pytest.raises(PrepareError, match="give it or --val, not both"):
        prepare(out=str(tmp_path / "o"), train=str(full_imagenet / FALL11_TAR), val=str(full_imagenet / FALL11_TAR),
                config=Config(holdout_per_class=2), progress=False)
    with pytest.raises(PrepareError, match="none of the sources' 8 classes .* is in the label space"):
        (tmp_path / "far.txt").write_text("n15102894\n")
        prepare(out=str(tmp_path / "o"), train=str(full_imagenet / FALL11_TAR),
                config=Config(splits=("train",), label_space=read_label_space_file(tmp_path / "far.txt")),
                progress=False)
    prepare(out=str(tmp_path / "three"), train=str(full_imagenet / FALL11_TAR),  # --classes relabels: no space
            config=Config(splits=("train",), classes=3), progress=False)
    m = json.loads((tmp_path / "three" / "manifest.json").read_text())
    assert len(m["classes"]) == 3 and "label_space" not in m
    with pytest.raises(PrepareError, match="is a full-ImageNet release .* give it as --train"):
        prepare(out=str(tmp_path / "o"), train=str(full_imagenet / FALL11_TAR), val=str(full_imagenet / WINTER21_TGZ),
                devkit=None, config=Config(), progress=False)
