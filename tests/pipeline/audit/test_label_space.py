"""audit-shards against the label space the manifest records: the class table must hash to the
recorded `label_space.sha256`, and `--expect` defaults to the recorded name (issue 28)."""

from __future__ import annotations

import json
import shutil

import pytest

from imagenet_shards.pipeline.audit.cli import main as audit_main
from imagenet_shards.pipeline.format.label_spaces import label_space, list_sha256
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import FALL11_TAR


@pytest.fixture(scope="module")
def in22k(full_imagenet, tmp_path_factory):
    """The synthetic fall11 prepared with defaults: the manifest records imagenet-22k."""
    out = tmp_path_factory.mktemp("in22k") / "out"
    assert prepare_main(["--train", str(full_imagenet / FALL11_TAR), "--splits", "train", "--out", str(out),
                         "--workers", "1", "--quiet"]) == 0
    return out


@pytest.fixture
def copy(in22k, tmp_path):
    shutil.copytree(in22k, tmp_path / "set")
    return tmp_path / "set"


def _edit_manifest(d, edit) -> dict:
    m = json.loads((d / "manifest.json").read_text())
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m, sort_keys=True, indent=1) + "\n")
    return m


def _audit(d, capsys, *args) -> tuple[int, str]:
    rc = audit_main([str(d), "--workers", "1", "--quiet", *args])
    return rc, capsys.readouterr().out


def test_the_default_audit_of_a_set_in_a_label_space_passes(in22k, capsys):
    assert json.loads((in22k / "manifest.json").read_text())["label_space"]["name"] == "imagenet-22k"
    rc, out = _audit(in22k, capsys)
    assert rc == 0 and "intact" in out, out


def test_a_recorded_hash_the_class_table_does_not_give_is_caught_without_expect(copy, capsys):
    table = json.loads((copy / "manifest.json").read_text())["classes"]
    actual = list_sha256(c["wnid"] for c in table)
    wrong = label_space("imagenet-12k").sha256
    _edit_manifest(copy, lambda m: m["label_space"].update(sha256=wrong))
    rc, out = _audit(copy, capsys)
    assert rc == 1 and "label_space_mismatch" in out, out
    line = next(line for line in out.splitlines() if "label_space_mismatch" in line)
    assert actual in line and wrong in line and "imagenet-22k" in line


def test_expect_defaults_to_the_recorded_name(copy, capsys):
    """The manifest says imagenet-12k (name and hash), its class table is 22k's: without --expect,
    the table is compared with 12k's (expect_classes), and the hash does not match it."""
    twelve = label_space("imagenet-12k")
    _edit_manifest(copy, lambda m: m["label_space"].update(name="imagenet-12k", sha256=twelve.sha256,
                                                           num_classes=twelve.num_classes))
    rc, out = _audit(copy, capsys)
    assert rc == 1 and "expect_classes" in out and "imagenet-12k has 11821" in out, out
    assert "label_space_mismatch" in out
    rc, out = _audit(copy, capsys, "--expect", "imagenet-22k")  # named: that one, not the recorded
    assert "expect_classes" not in out and "label_space_mismatch" in out


def test_an_ilsvrc_set_without_a_recorded_space_is_audited_as_before(synthetic_shards, capsys):
    assert "label_space" not in json.loads((synthetic_shards / "manifest.json").read_text())
    rc, out = _audit(synthetic_shards, capsys)
    assert rc == 0, out


def test_a_set_recorded_as_imagenet_1k_is_held_to_its_table_not_its_counts_by_default(synthetic_imagenet, tmp_path,
                                                                                       capsys):
    out = tmp_path / "out"
    assert prepare_main(["--train", str(synthetic_imagenet / "ILSVRC2012_img_train.tar"), "--splits", "train",
                         "--label-space", "imagenet-1k", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    rc, text = _audit(out, capsys)
    assert rc == 0, text  # a few images a class: imagenet-1k's counts would fail, its table does not
    rc, text = _audit(out, capsys, "--expect", "imagenet-1k")
    assert rc == 1 and "expect_count" in text and "expect_classes" not in text
