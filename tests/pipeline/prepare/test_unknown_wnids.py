"""A full release holding a WNID outside its published label space (issue 29, row 3): the default
(imagenet-22k) refuses it naming the WNID, unless the user asks: `--skip-unknown-wnids` (its images
listed in the manifest as skipped) or `--label-space present`."""

from __future__ import annotations

import json
import tarfile

import pytest

from imagenet_shards.pipeline.audit.cli import main as audit_main
from imagenet_shards.pipeline.format.label_spaces import label_space
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import FALL11_TAR, UNKNOWN_WNID, WINTER21_TGZ, generate_full

RELEASES = {"fall11": FALL11_TAR, "winter21": WINTER21_TGZ}


@pytest.fixture(scope="module")
def with_unknown(tmp_path_factory):
    """The synthetic releases plus one class tar of a WNID no label space has."""
    root = tmp_path_factory.mktemp("full-unknown")
    expected = generate_full(root, classes=8, per_class=4, small_per_class=2, seed=3, unknown_wnids=(UNKNOWN_WNID,))
    return root, expected


def _prepare(src, out, *extra) -> int:
    return prepare_main(["--train", str(src), "--splits", "train", "--out", str(out), "--workers", "1", "--quiet",
                         *extra])


def _sample_wnids(out) -> set[str]:
    wnids = set()
    for shard in out.glob("train/*.tar"):
        with tarfile.open(shard) as tar:
            wnids |= {json.load(tar.extractfile(m))["wnid"] for m in tar if m.name.endswith(".json")}
    return wnids


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_default_refuses_a_wnid_outside_the_release_space_naming_it(with_unknown, tmp_path, capsys, release):
    root, _ = with_unknown
    assert _prepare(root / RELEASES[release], tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and UNKNOWN_WNID in err and "imagenet-22k" in err and "--skip-unknown-wnids" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_skip_unknown_wnids_lists_their_images_as_skipped(with_unknown, tmp_path, capsys, release):
    root, expected = with_unknown
    out = tmp_path / "out"
    assert _prepare(root / RELEASES[release], out, "--skip-unknown-wnids") == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["label_space"]["name"] == "imagenet-22k" and m["config"]["skip_unknown_wnids"] is True
    unknown_keys = sorted(s["key"] for s in expected["samples"] if s["wnid"] == UNKNOWN_WNID)
    assert unknown_keys
    listed = [s for s in m["skipped"] if s["reason"] == "unknown_wnid"]
    assert sorted(s["key"] for s in listed) == unknown_keys
    assert all(UNKNOWN_WNID in s["detail"] and s["split"] == "train" for s in listed)
    train = m["splits"]["train"]
    assert train["excluded_by_label_space"] == 0 and train["num_skipped"] == len(m["skipped"])
    assert train["images_in"] == train["num_samples"] + train["num_rejected"] + train["num_skipped"]
    assert UNKNOWN_WNID not in _sample_wnids(out) and [c["wnid"] for c in m["classes"]] == \
        list(label_space("imagenet-22k").wnids)
    assert audit_main([str(out), "--workers", "1", "--quiet"]) == 0, capsys.readouterr().out


def test_present_labels_the_sources_own_wnids_unknown_included(with_unknown, tmp_path, capsys):
    root, _ = with_unknown
    out = tmp_path / "out"
    assert _prepare(root / FALL11_TAR, out, "--label-space", "present", "--json") == 0
    summary = json.loads(capsys.readouterr().out)  # the summary names the labelling
    assert summary["label_space"] == {"name": "present", "num_classes": 9}
    m = json.loads((out / "manifest.json").read_text())
    assert m["label_space"]["name"] == "present" and UNKNOWN_WNID in [c["wnid"] for c in m["classes"]]
    assert UNKNOWN_WNID in _sample_wnids(out)


@pytest.mark.parametrize("extra, words", [(["--label-space", "imagenet-12k"], "with --label-space"),
                                          (["--classes", "3"], "with --classes")])
def test_skip_unknown_wnids_with_a_chosen_space_is_refused(with_unknown, tmp_path, capsys, extra, words):
    root, _ = with_unknown
    assert _prepare(root / FALL11_TAR, tmp_path / "out", "--skip-unknown-wnids", *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_skip_unknown_wnids_on_ilsvrc_archives_is_refused(synthetic_imagenet, tmp_path, capsys):
    assert _prepare(synthetic_imagenet / "ILSVRC2012_img_train.tar", tmp_path / "out", "--skip-unknown-wnids") == 2
    assert "applies to a full release" in capsys.readouterr().err
