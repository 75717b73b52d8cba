"""The synthetic full-ImageNet layouts: fall11_whole.tar (tar of per-synset tars) and
winter21_whole.tar.gz (the same under winter21_whole/, gzip-compressed, minus the removed classes)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest

from imagenet_shards.pipeline.format.label_spaces import label_space
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import (COVERAGE, FALL11_TAR, NOT_A_TAR,
                                                                    REMOVED_IN_WINTER21, UNKNOWN_WNID, WINTER21_TGZ,
                                                                    generate_full)
from imagenet_shards.pipeline.tools.synthetic.generate import main


def _outer(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_both_releases_hold_the_same_class_tars_and_every_label_space_case(tmp_path):
    out = tmp_path / "full"
    assert main([str(out), "--layout", "fall11,winter21", "--classes", "9", "--train-per-class", "4",
                 "--quiet"]) == 0
    expected = json.loads((out / "expected.json").read_text())
    assert set(COVERAGE) <= set(expected["classes"]) and len(expected["classes"]) == 9
    fall11 = _outer((out / FALL11_TAR).read_bytes())
    assert list(fall11) == [f"{w}.tar" for w in expected["classes"]] + [f"{NOT_A_TAR}.tar"]
    raw = (out / WINTER21_TGZ).read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    winter21 = _outer(gzip.decompress(raw))
    assert list(winter21) == [f"winter21_whole/{w}.tar" for w in expected["classes"] if w not in REMOVED_IN_WINTER21] \
        + [f"winter21_whole/{NOT_A_TAR}.tar"]
    assert all(winter21[f"winter21_whole/{n}"] == data for n, data in fall11.items() if f"winter21_whole/{n}" in winter21)
    images = {name: data for w in expected["classes"] for name, data in _outer(fall11[f"{w}.tar"]).items()}
    assert sorted(images) == sorted(s["filename"] for s in expected["samples"])
    small = expected["small_classes"]
    assert sum(1 for s in expected["samples"] if s["wnid"] == small[0]) == 2
    assert sum(1 for s in expected["samples"] if s["wnid"] == expected["classes"][-1]) in (2, 4)
    # every space keeps some classes and leaves some out
    for name in ("imagenet-1k", "imagenet-12k", "imagenet-21k-miil", "imagenet-21k-miil-w21"):
        inside = set(expected["classes"]) & set(label_space(name).wnids)
        assert inside and inside != set(expected["classes"]), name
    assert set(expected["classes"]) <= set(label_space("imagenet-22k").wnids)
    again = tmp_path / "again"
    main([str(again), "--layout", "fall11,winter21", "--classes", "9", "--train-per-class", "4", "--quiet"])
    assert (again / WINTER21_TGZ).read_bytes() == raw and (again / FALL11_TAR).read_bytes() == (out / FALL11_TAR).read_bytes()


def test_too_few_classes_for_the_coverage_is_refused(tmp_path, capsys):
    assert main([str(tmp_path / "x"), "--layout", "fall11", "--classes", "3", "--quiet"]) == 2
    assert "too few for the full-ImageNet layouts" in capsys.readouterr().err


def test_unknown_wnids_add_a_class_tar_no_label_space_has(tmp_path):
    expected = generate_full(tmp_path / "g", classes=8, per_class=3, small_per_class=1, layouts=("fall11",),
                             unknown_wnids=(UNKNOWN_WNID,))
    with tarfile.open(tmp_path / "g" / FALL11_TAR) as tar:
        assert f"{UNKNOWN_WNID}.tar" in tar.getnames()
    assert expected["unknown_wnids"] == [UNKNOWN_WNID] and UNKNOWN_WNID not in expected["classes"]
    assert sum(s["wnid"] == UNKNOWN_WNID for s in expected["samples"]) == 1  # small_per_class images
    with pytest.raises(ValueError, match="that no label space has, got n01440764"):
        generate_full(tmp_path / "h", unknown_wnids=("n01440764",))


def test_the_cli_writes_unknown_wnids_with_the_full_layouts_only(tmp_path, capsys):
    assert main([str(tmp_path / "g"), "--layout", "fall11", "--classes", "8", "--train-per-class", "3",
                 "--unknown-wnids", UNKNOWN_WNID]) == 0
    with tarfile.open(tmp_path / "g" / FALL11_TAR) as tar:
        assert f"{UNKNOWN_WNID}.tar" in tar.getnames()
    assert main([str(tmp_path / "h"), "--unknown-wnids", UNKNOWN_WNID]) == 2
    assert "goes with the full-ImageNet layouts" in capsys.readouterr().err
