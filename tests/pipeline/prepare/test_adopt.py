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
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.prepare.adopt import label_space, split_of
from imagenet_shards.pipeline.prepare.adopt_scan import sample_evidence
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
    assert [k for k, _ in problems] == ["cls_invalid", "undecodable", "wnid_conflict"]


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
    from imagenet_shards.train.trainer.telemetry import read_metrics
    from tests.fixtures.trainer import TINY, run_cli

    src = write_wds(tmp_path / "wds", samples, edit=timm_style)
    assert adopt(src, "--out", tmp_path / "adopted") == 0
    run = tmp_path / "run"
    assert run_cli("--data", tmp_path / "adopted", "--out", run, *TINY, "--epochs", "1", "--limit-batches", "2") == 0
    epoch = next(r for r in read_metrics(run) if r["kind"] == "epoch")
    assert epoch["bad_samples"] == 0 and epoch["loader"]["batches"] >= 2
