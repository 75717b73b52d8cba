"""prepare-shards adopt: a shard set written by webdataset's own ShardWriter in timm's naming is
adopted (in place, to --out, from S3/GCS), then audit-shards passes and the loader reads every sample
exactly once; broken variants (labels off by one, devkit-ID order, a truncated shard, duplicate keys,
unverifiable labels) are refused with one line and nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from imagenet_shards.pipeline.audit.cli import main as audit_main
from imagenet_shards.pipeline.format.digest import hex_of
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.prepare.adopt import label_space, split_of
from imagenet_shards.pipeline.prepare.adopt_scan import image_format, sample_evidence
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.tools.inspect_shards import main as inspect_main
from imagenet_shards.pipeline.tools.synthetic.plan import ilsvrc_ids
from imagenet_shards.train import loader as D

SHARD = 10  # samples per adopted shard
INDEX_1K = {c.wnid: c.index for c in imagenet_1k_classes()}
NAME = {c.wnid: c.name for c in imagenet_1k_classes()}


@pytest.fixture(scope="module")
def samples(synthetic_shards) -> dict[str, list[dict]]:
    """Every sample of the shared prepared set, per split, as webdataset reads them (raw bytes)."""
    import webdataset as wds

    m = json.loads((synthetic_shards / "manifest.json").read_text())
    return {split: sorted(wds.WebDataset([str(synthetic_shards / sh["url"]) for sh in s["shards"]],
                                         shardshuffle=False), key=lambda x: x["__key__"])
            for split, s in m["splits"].items()}


def wnid_of(sample: dict) -> str:
    return json.loads(sample["json"])["wnid"]


def write_wds(root: Path, samples: dict, *, edit=None, info: bool = True) -> Path:
    """A set in timm's imagenet-1k-wds layout, written by webdataset's ShardWriter: top-level
    imagenet1k-{train,validation}-NNNN.tar and (with `info`) _info.json. `edit(split, sample)` returns
    the members to write (a dict with __key__), or None to drop the sample."""
    import webdataset as wds

    root.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, items in samples.items():
        name = {"val": "validation"}.get(split, split)
        lengths = []
        with wds.ShardWriter(str(root / f"imagenet1k-{name}-%04d.tar"), maxcount=SHARD, verbose=0) as sink:
            for s in items:
                out = edit(split, dict(s)) if edit else dict(s)
                if out is not None:
                    out.pop("__url__", None)
                    out.pop("__local_path__", None)
                    sink.write(out)
        for i, path in enumerate(sorted(root.glob(f"imagenet1k-{name}-*.tar"))):
            lengths.append(sum(1 for n in _member_names(path) if n.endswith(".jpg")))
        files = sorted(p.name for p in root.glob(f"imagenet1k-{name}-*.tar"))
        splits[name] = {"name": name, "filenames": files, "shard_lengths": lengths, "num_samples": sum(lengths)}
    if info:
        (root / "_info.json").write_text(json.dumps({"name": "imagenet-1k", "splits": splits}))
    return root


def _member_names(path: Path) -> list[str]:
    import tarfile

    with tarfile.open(path) as tf:
        return tf.getnames()


def timm_style(split: str, s: dict) -> dict:
    """Labels as 1k indexes, a .json like timm's (filename, label, class_name: no wnid field)."""
    wnid = wnid_of(s)
    meta = json.loads(s["json"])
    label = INDEX_1K[wnid]
    return {"__key__": s["__key__"], "jpg": s["jpg"], "cls": str(label).encode(),
            "json": json.dumps({"filename": meta["filename"], "label": label, "class_name": NAME[wnid]}).encode()}


def relabel(s: dict, label: int) -> dict:
    """The sample with .cls and its .json label set to `label` (the wnid kept)."""
    meta = json.loads(s["json"])
    meta["label"] = label
    return dict(s, cls=str(label).encode(), json=json.dumps(meta).encode())


def adopt(*args) -> int:
    return prepare_main(["adopt", *map(str, args), "--quiet", "--workers", "2"])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def keys_read(data: str, split: str) -> list[str]:
    shards = D.split_shards(D.read_manifest(data), data, split)
    return [r.key for r in D.read_pieces(shards, [D.Piece(i, 0, s.num_samples) for i, s in enumerate(shards)])]


def expect_exactly_once(data: str, samples: dict, label_of) -> None:
    """The loader gives every sample of each split once, with the label `label_of(sample)`."""
    for split, items in samples.items():
        keys = keys_read(data, split)
        assert sorted(keys) == [s["__key__"] for s in items]
        ld = D.make_loader(data, split, 4, train=False, workers=2, val_resize=40, val_crop=32)
        labels = torch.cat([lab for _, lab in ld])
        assert len(labels) == len(items) and ld.stats["samples"] == len(items)
        assert sorted(labels.tolist()) == sorted(label_of(s) for s in items)


# ----------------------------------------------------------------------------- pure parts

def test_split_names_and_sample_evidence():
    assert split_of("imagenet1k-train-0000.tar") == "train"
    assert split_of("imagenet1k-validation-0063.tar") == split_of("val/imagenet1k-validation-000001.tar") == "val"
    assert split_of("shard-0001.tar") is None
    jpg = _tiny_jpeg()
    members = {"jpg": jpg, "cls": b"0", "json": json.dumps({"label": 0, "class_name": NAME["n01440764"]}).encode()}
    assert sample_evidence("x_1", members, names={NAME["n01440764"]: "n01440764"}) == (0, "n01440764", [])
    assert sample_evidence("n01440764_7", {"jpg": jpg, "cls": b"0"}) == (0, "n01440764", [])
    assert sample_evidence("ILSVRC2012_val_00000001", {"jpg": jpg, "cls": b"0"}) == (0, None, [])
    label, wnid, problems = sample_evidence("n01440764_7", {"jpg": b"junk", "cls": b"-1",
                                                            "json": b'{"wnid": "n01443537"}'})
    assert label is None and wnid is None
    assert [k for k, _ in problems] == ["cls_invalid", "wnid_conflict"]  # the image is image_format's to judge


def test_image_format_names_what_pillow_reads_and_why_the_rest_is_not_an_image():
    import io

    from PIL import Image

    from imagenet_shards.pipeline.tools.synthetic.images import truncate_jpeg

    def saved(mode, fmt):
        b = io.BytesIO()
        Image.new(mode, (16, 16)).save(b, fmt)
        return b.getvalue()

    assert image_format(_tiny_jpeg()) == ("JPEG", None)
    assert image_format(saved("RGBA", "PNG")) == ("PNG", None) and image_format(saved("P", "GIF")) == ("GIF", None)
    assert image_format(saved("RGB", "PPM")) == ("PPM", None)  # no signature we know: Pillow's name
    assert image_format(b"")[1][0] == "empty" and image_format(b"junk" * 9)[1][0] == "not_an_image"
    big = io.BytesIO()
    Image.effect_noise((64, 64), 40).convert("RGB").save(big, "JPEG")
    cut = truncate_jpeg(big.getvalue())
    assert image_format(cut) == ("JPEG", None)  # the header reads: only --deep finds the cut
    assert image_format(cut, deep=True)[1][0] == "truncated"


def test_label_space_accepts_both_sorted_conventions_and_names_the_first_offender():
    where = {"a": "s0.tar", "b": "s0.tar"}
    assert len(label_space({(0, "n01440764"): "a", (2, "n01484850"): "b"}, where)) == 1000  # 1k indexes
    assert label_space({(0, "n01440764"): "a", (1, "n01484850"): "b"}, where) == ["n01440764", "n01484850"]
    with pytest.raises(ValueError, match=r"sample a in s0.tar has .cls 1 but its class n01440764 is label 0 among ImageNet-1k.s sorted WNIDs, 0 among the 2"):
        label_space({(1, "n01440764"): "a", (2, "n01484850"): "b"}, where)


def _tiny_jpeg() -> bytes:
    import io

    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(b, "JPEG")
    return b.getvalue()


# ----------------------------------------------------------------------------- adopted, then audited and loaded

def test_adopt_in_place_then_audit_and_load_exactly_once(samples, tmp_path, capsys):
    """Our own sample .json (it carries the wnid): labels proved, the subset's label space kept."""
    src = write_wds(tmp_path / "wds", samples, info=False)
    assert prepare_main(["adopt", str(src), "--json", "--quiet", "--workers", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    total = sum(len(v) for v in samples.values())
    assert summary["samples"] == total and summary["label_space"] == "subset" and summary["classes"] == 6
    assert summary["splits"]["val"]["trusted"] == 0 and summary["info_json"] == "written"
    m = json.loads((src / "manifest.json").read_text())
    assert m["adopted"]["from"] == str(src) and m["config"]["mode"] == "adopt"
    assert [(c["wnid"], c["imagenet_1k_index"]) for c in m["classes"]] == sorted(
        (w, INDEX_1K[w]) for w in {wnid_of(s) for s in samples["train"]})
    assert m["sources"][0]["kind"] == "adopted-webdataset"
    assert [sh["url"] for sh in m["splits"]["train"]["shards"]][:2] == ["imagenet1k-train-0000.tar",
                                                                        "imagenet1k-train-0001.tar"]
    assert all(sh["xxh3_128"] == hex_of("xxh3_128", (src / sh["url"]).read_bytes())  # the loader's check
               for split in m["splits"].values() for sh in split["shards"])
    assert audit_main([str(src), "--quiet", "--workers", "2", "--deep"]) == 0
    expect_exactly_once(str(src), samples, lambda s: int(s["cls"]))

    before = (src / "manifest.json").read_bytes()  # a rerun gives the same bytes
    assert adopt(src) == 0 and (src / "manifest.json").read_bytes() == before


def test_timm_style_set_with_its_info_json_and_1k_labels(samples, tmp_path, capsys):
    src = write_wds(tmp_path / "wds", samples, edit=timm_style)
    info = (src / "_info.json").read_bytes()
    assert prepare_main(["adopt", str(src), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["label_space"] == "imagenet-1k" and summary["classes"] == 1000
    assert summary["info_json"] == "source" and (src / "_info.json").read_bytes() == info  # theirs, untouched
    assert audit_main([str(src), "--quiet"]) == 0
    expect_exactly_once(str(src), samples, lambda s: INDEX_1K[wnid_of(s)])


def test_adopt_to_a_separate_out_uses_absolute_paths(samples, tmp_path):
    src = write_wds(tmp_path / "wds", samples, edit=timm_style)
    out = tmp_path / "manifest-here"
    assert adopt(src, "--out", out) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert all(os.path.isabs(sh["url"]) and sh["url"].startswith(str(src)) for s in m["splits"].values()
               for sh in s["shards"])
    assert not (src / "manifest.json").exists()
    assert audit_main([str(out), "--quiet"]) == 0
    expect_exactly_once(str(out), samples, lambda s: INDEX_1K[wnid_of(s)])


@pytest.mark.timeout(120)
def test_adopt_from_a_bucket_with_a_local_out(bucket, samples, tmp_path, capsys):
    src = write_wds(tmp_path / "wds", samples, edit=timm_style)
    for p in sorted(src.iterdir()):
        bucket.put(f"wds/{p.name}", p.read_bytes())
    url, out = bucket.url("wds"), tmp_path / "out"
    assert prepare_main(["adopt", url, "--quiet"] + bucket.cli) == 2  # remote: the manifest needs --out
    assert "give --out" in one_error_line(capsys)
    assert prepare_main(["adopt", url, "--out", str(out), "--quiet", "--workers", "2"] + bucket.cli) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert all(sh["url"].startswith(url + "/imagenet1k-") for s in m["splits"].values() for sh in s["shards"])
    assert bucket.keys("wds/") == sorted(f"wds/{p.name}" for p in src.iterdir())  # nothing written there
    assert audit_main([str(out), "--quiet", "--workers", "2"] + bucket.cli) == 0
    expect_exactly_once(str(out), samples, lambda s: INDEX_1K[wnid_of(s)])
    key = samples["val"][0]["__key__"]
    assert inspect_main([str(out), "--key", key] + bucket.cli) == 0 and key in capsys.readouterr().out


# ----------------------------------------------------------------------------- refused

def _refused(src: Path, capsys, *extra) -> str:
    assert adopt(src, *extra) == 2
    assert not (src / "manifest.json").exists() and not list(src.glob("*.wids.json"))
    return one_error_line(capsys)


def test_labels_off_by_one_are_refused(samples, tmp_path, capsys):
    def shifted(split, s):  # .cls and the .json label alike, as a writer with the bug would write them
        return relabel(s, int(s["cls"]) + 1)

    err = _refused(write_wds(tmp_path / "wds", samples, edit=shifted), capsys)
    assert "do not follow the sorted-WNID convention" in err and "off-by-one" in err


def test_devkit_id_labels_are_refused(samples, tmp_path, capsys):
    wnids = sorted({wnid_of(s) for s in samples["train"]})
    ids = ilsvrc_ids(wnids, 0)  # the synthetic devkit's ILSVRC2012_IDs: a permutation of 1..6

    def devkit_order(split, s):
        return relabel(s, ids[wnid_of(s)] - 1)

    err = _refused(write_wds(tmp_path / "wds", samples, edit=devkit_order), capsys)
    assert "sorted-WNID convention" in err and "ILSVRC2012_ID" in err


def test_a_truncated_shard_is_refused(samples, tmp_path, capsys):
    src = write_wds(tmp_path / "wds", samples)
    shard = src / "imagenet1k-train-0001.tar"
    shard.write_bytes(shard.read_bytes()[:5000])
    err = _refused(src, capsys)
    assert "has problems" in err and "tar_truncated" in err and "imagenet1k-train-0001.tar" in err


def test_duplicate_keys_are_refused(samples, tmp_path, capsys):
    twice = dict(samples, val=samples["val"] + [samples["train"][0]])
    err = _refused(write_wds(tmp_path / "wds", twice), capsys)
    assert "duplicate_key" in err and samples["train"][0]["__key__"] in err


def test_a_missing_member_and_an_info_json_that_disagrees_are_refused(samples, tmp_path, capsys):
    victim = samples["train"][3]["__key__"]

    def drop_jpg(split, s):
        if s["__key__"] == victim:
            del s["jpg"]
        return s

    err = _refused(write_wds(tmp_path / "a", samples, edit=drop_jpg), capsys)
    assert "sample_members" in err and victim in err
    src = write_wds(tmp_path / "b", samples)
    info = json.loads((src / "_info.json").read_text())
    info["splits"]["train"]["shard_lengths"][0] += 1
    (src / "_info.json").write_text(json.dumps(info))
    assert "info_mismatch" in _refused(src, capsys)


def test_without_json_val_labels_need_trust_labels(samples, tmp_path, capsys):
    """Train keys name their WNID; val keys do not, and with no .json nothing proves their labels."""
    def no_json(split, s):
        del s["json"]
        return s

    src = write_wds(tmp_path / "wds", samples, edit=no_json, info=False)
    err = _refused(src, capsys)
    n = len(samples["val"])
    assert f"the labels of {n} samples cannot be verified (val: {n} of {n}" in err and "--trust-labels" in err
    assert adopt(src, "--trust-labels") == 0
    m = json.loads((src / "manifest.json").read_text())
    assert m["adopted"]["labels"]["val"] == {"verified": 0, "trusted": n} and m["config"]["trust_labels"] is True
    assert m["adopted"]["sample_exts"] == ["cls", "jpg"]
    assert audit_main([str(src), "--quiet"]) == 0
    expect_exactly_once(str(src), samples, lambda s: int(s["cls"]))


def test_a_set_of_ours_and_a_wnid_outside_imagenet_are_refused(samples, synthetic_shards, tmp_path, capsys):
    assert adopt(synthetic_shards, "--out", tmp_path / "x") == 0  # elsewhere: our own layout adopts too
    assert adopt(synthetic_shards) == 2  # in place, it already has a manifest adopt did not write
    assert "already holds a manifest.json" in one_error_line(capsys)

    def alien(split, s):  # val keys name no class, so only the .json speaks
        if split == "train":
            return s
        meta = json.loads(s["json"])
        meta["wnid"] = "n99999999"
        s["json"] = json.dumps(meta).encode()
        return s

    err = _refused(write_wds(tmp_path / "wds", samples, edit=alien), capsys)
    assert "n99999999" in err and "not an ImageNet-1k class" in err


@pytest.mark.timeout(60)
def test_adopt_over_http_needs_info_json(samples, tmp_path, capsys):
    from tests.fixtures.servers import serve_http

    src = write_wds(tmp_path / "wds", samples, edit=timm_style)
    bare = write_wds(tmp_path / "bare", samples, edit=timm_style, info=False)
    with serve_http(tmp_path) as base:
        assert adopt(f"{base}/bare", "--out", tmp_path / "x") == 2
        assert "cannot be listed" in one_error_line(capsys) and not (tmp_path / "x").exists()
        assert adopt(f"{base}/wds", "--out", tmp_path / "out") == 0
        m = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert m["splits"]["val"]["shards"][0]["url"] == f"{base}/wds/imagenet1k-validation-0000.tar"
        assert audit_main([str(tmp_path / "out"), "--quiet"]) == 0
        expect_exactly_once(str(tmp_path / "out"), samples, lambda s: INDEX_1K[wnid_of(s)])
    assert not list(bare.glob("*.json")) and not (src / "manifest.json").exists()  # sources untouched


def test_credentials_in_a_url_and_a_remote_source_without_out_are_refused(tmp_path, capsys):
    assert adopt("https://user:hunter2@example.invalid/wds", "--out", tmp_path / "out") == 2
    err = one_error_line(capsys)
    assert "credentials" in err and "hunter2" not in err and not (tmp_path / "out").exists()
    assert adopt("https://example.invalid/wds") == 2
    assert "is remote: give --out" in one_error_line(capsys)


def test_the_unlabeled_test_split_is_listed_not_adopted(samples, tmp_path, capsys):
    src = write_wds(tmp_path / "wds", dict(samples, test=[dict(s, cls=b"-1") for s in samples["val"][:3]]),
                    info=False)
    assert prepare_main(["adopt", str(src), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ignored"] == ["imagenet1k-test-0000.tar"] and sorted(summary["splits"]) == ["train", "val"]


def test_json_refusal_lists_the_problems_and_help_names_adopt(samples, tmp_path, capsys):
    twice = dict(samples, val=samples["val"] + samples["train"][:2])
    src = write_wds(tmp_path / "wds", twice)
    assert prepare_main(["adopt", str(src), "--json", "--quiet"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["adopted"] is False and [p["kind"] for p in report["problems"]] == ["duplicate_key"] * 2
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
    with pytest.raises(SystemExit):
        prepare_main(["--help"])
    assert "prepare-shards adopt SRC" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        prepare_main(["adopt", "--help"])
    assert "--trust-labels" in capsys.readouterr().out


@pytest.mark.usefixtures("one_thread")
def test_train_imagenet_runs_on_an_adopted_set(samples, tmp_path):
    from imagenet_shards.train.trainer.watch.telemetry import read_metrics
    from tests.fixtures.trainer import TINY, run_cli

    src = write_wds(tmp_path / "wds", samples, edit=timm_style)
    assert adopt(src, "--out", tmp_path / "adopted") == 0
    run = tmp_path / "run"
    assert run_cli("--data", tmp_path / "adopted", "--out", run, *TINY, "--epochs", "1", "--limit-batches", "2") == 0
    epoch = next(r for r in read_metrics(run) if r["kind"] == "epoch")
    assert epoch["bad_samples"] == 0 and epoch["loader"]["batches"] >= 2


# ----------------------------------------------------------------------------- sets written from the original files

def original_files(root: Path) -> dict[str, list[dict]]:
    """Every member of the synthetic ILSVRC2012 at `root` as (key, wnid, kind, bytes), per split: the
    original files, quirks and all, read out of the class tars and the flat val tar."""
    import io
    import tarfile

    expected = json.loads((root / "expected.json").read_text())
    data = {}
    with tarfile.open(root / "ILSVRC2012_img_train.tar") as outer:
        for m in outer.getmembers():
            with tarfile.open(fileobj=io.BytesIO(outer.extractfile(m).read())) as inner:
                data.update({f"{m.name}/{i.name}": inner.extractfile(i).read() for i in inner.getmembers()})
    with tarfile.open(root / "ILSVRC2012_img_val.tar") as val:
        data.update({m.name: val.extractfile(m).read() for m in val.getmembers()})
    out: dict[str, list[dict]] = {"train": [], "val": []}
    for s in expected["samples"]:
        if not s["filename"].startswith("._"):  # an AppleDouble file has no webdataset key
            out[s["split"]].append({"key": s["key"], "wnid": s["wnid"], "kind": s["quirk"] or "clean",
                                    "data": data[s["member"]]})
    return out


def write_from_originals(root: Path, files: dict, *, keep) -> Path:
    """What most conversion scripts do: webdataset's ShardWriter straight from the original files,
    the bytes under `.jpg` whatever they are, timm's labels (1k indexes) and .json (filename, label,
    class_name). `keep(sample)` picks the samples."""
    items = {split: [{"__key__": f["key"], "jpg": f["data"], "cls": str(INDEX_1K[f["wnid"]]).encode(),
                      "json": json.dumps({"filename": f"{f['key']}.JPEG", "label": INDEX_1K[f["wnid"]],
                                          "class_name": NAME[f["wnid"]]}).encode()}
                     for f in sorted(fs, key=lambda f: f["key"]) if keep(f)] for split, fs in files.items()}
    return write_wds(root, items)


def read_everything(data: str, split: str) -> tuple[list[str], dict]:
    """Keys the loader's reading stage gives, and the stats of one eval pass through its decoders."""
    ld = D.make_loader(data, split, 8, train=False, workers=0, val_resize=40, val_crop=32)
    assert sum(len(lab) for _, lab in ld) == ld.stats["samples"]
    return sorted(keys_read(data, split)), ld.stats


def test_a_set_written_from_the_original_files_is_adopted_with_its_pngs_and_gif(synthetic_imagenet, tmp_path,
                                                                                capsys):
    """ImageNet's own PNG (n02105855_2933), an RGBA PNG and a palette GIF under .jpg: Pillow decodes
    them, so they are adopted, counted by their real format, and the loader's Pillow path decodes them."""
    files = original_files(synthetic_imagenet)
    readable = {"clean", "progressive", "exif_rotated", "large", "tiny", "png_as_jpeg", "rgba_png", "palette_gif",
                "cmyk", "grayscale"}
    src = write_from_originals(tmp_path / "wds", files, keep=lambda f: f["kind"] in readable)
    assert prepare_main(["adopt", str(src), "--json", "--quiet", "--workers", "2", "--deep"]) == 0
    summary = json.loads(capsys.readouterr().out)
    m = json.loads((src / "manifest.json").read_text())
    train = [f for f in files["train"] if f["kind"] in readable]
    assert m["adopted"]["formats"]["train"] == {"GIF": 1, "JPEG": len(train) - 3, "PNG": 2}
    assert summary["splits"]["train"]["formats"] == m["adopted"]["formats"]["train"]
    assert "n02105855_2933" in {f["key"] for f in train if f["kind"] == "png_as_jpeg"}
    assert m["rejected"] == [] and summary["samples"] == sum(1 for fs in files.values() for f in fs
                                                             if f["kind"] in readable)
    assert audit_main([str(src), "--quiet", "--deep", "--workers", "2"]) == 0
    keys, stats = read_everything(str(src), "train")
    assert keys == sorted(f["key"] for f in train) and stats["bad_samples"] == 0


def test_images_nothing_decodes_refuse_the_set_or_are_left_out_with_exclude_bad(synthetic_imagenet, tmp_path,
                                                                                capsys):
    files = original_files(synthetic_imagenet)
    files["val"].append({"key": "ILSVRC2012_val_00009999", "wnid": files["val"][0]["wnid"], "kind": "junk",
                         "data": b"<html>404 Not Found</html>"})  # a failed download saved as the image
    src = write_from_originals(tmp_path / "wds", files, keep=lambda f: True)
    bad = {f["key"]: f["kind"] for fs in files.values() for f in fs if f["kind"] in ("empty", "truncated", "junk")}
    assert sorted(bad.values()) == ["empty", "junk", "truncated"]

    err = _refused(src, capsys)  # header checks: the empty member and the junk are undecodable
    assert "undecodable 2" in err and "--exclude-bad" in err

    assert adopt(src, "--exclude-bad", "--deep") == 0  # --deep also finds the truncated JPEG
    m = json.loads((src / "manifest.json").read_text())
    assert {r["key"]: r["reason"] for r in m["rejected"]} == {
        k: {"empty": "empty", "junk": "not_an_image", "truncated": "truncated"}[kind] for k, kind in bad.items()}
    assert all(r["source"].startswith("imagenet1k-") and r["detail"] for r in m["rejected"])
    assert m["config"]["exclude_bad"] is True
    listed = {k for s in m["splits"].values() for sh in s["shards"] for k in sh.get("excluded", [])}
    assert listed == set(bad)
    for split, s in m["splits"].items():  # conservation: every sample is in a shard count or in rejected
        assert s["images_in"] == len(files[split]) == s["num_samples"] + s["num_rejected"]
    assert audit_main([str(src), "--quiet", "--deep", "--workers", "2"]) == 0  # the audit passes over them
    for split in ("train", "val"):  # and so does the loader's reading stage
        assert sorted(keys_read(str(src), split)) == sorted(f["key"] for f in files[split] if f["key"] not in bad)

    from imagenet_shards.pipeline.audit.run import audit

    entry = next(sh for sh in m["splits"]["val"]["shards"] if sh.get("excluded"))
    entry["excluded"] = entry["excluded"] + ["ILSVRC2012_val_00000000"]  # a key the shard does not hold
    (src / "manifest.json").write_text(json.dumps(m))
    problems = audit(str(src), workers=1, progress=False).problems
    assert ("sample_missing", "ILSVRC2012_val_00000000") in {(p.kind, p.key) for p in problems}


def test_read_shard_counts_positions_past_excluded_samples(synthetic_shards):
    url = str(next((synthetic_shards / "train").glob("*.tar")))
    keys = [r.key for r in D.read_shard(url)]
    gone = frozenset({keys[0], keys[3], keys[-1]})
    rest = [k for k in keys if k not in gone]
    assert [r.key for r in D.read_shard(url, exclude=gone)] == rest
    assert [r.key for r in D.read_shard(url, 2, 5, exclude=gone)] == rest[2:5]
    assert all(r.jpg and r.cls for r in D.read_shard(url, 1, 4, exclude=gone))
    with pytest.raises(ValueError, match="holds at least"):
        list(D.read_shard(url, 0, len(rest) + 1, exclude=gone))
