"""prepare-shards --pixels: the pixel form straight from the sources, in one decode. The same keys, labels,
order, shards and rejects as a JPEG prepare of the same sources at the same size; byte-reproducible across
--workers and --part; the audit and the loader read it as a derived set."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from imagenet_shards.pipeline.audit.run import audit
from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.prepare.images import decode_resized
from imagenet_shards.pipeline.prepare.run import Config, prepare
from tests.fixtures.synthetic import PIXEL_MAX_SIDE
from tests.pipeline.prepare.test_derive import files, samples

JPEG_ONLY_FIXES = ("restart_markers", "reencoded")  # what the JPEG form does to store an image


def sources(src: Path) -> dict:
    return dict(train=str(src / "ILSVRC2012_img_train.tar"), val=str(src / "ILSVRC2012_img_val.tar"),
                devkit=str(src / "ILSVRC2012_devkit_t12.tar.gz"))


def cli_args(src: Path, out: Path) -> list[str]:
    s = sources(src)
    return ["--train", s["train"], "--val", s["val"], "--devkit", s["devkit"], "--out", str(out),
            "--shard-samples", "16", "--quiet"]


@pytest.fixture(scope="module")
def direct(synthetic_imagenet, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("direct") / "out"
    prepare(out=str(out), **sources(synthetic_imagenet), workers=1, progress=False,
            config=Config(shard_samples=16, pixels=pixels.FORM, resize=f"longer:{PIXEL_MAX_SIDE}"))
    return out


def test_same_samples_and_accounting_as_a_jpeg_prepare_at_the_same_size(synthetic_imagenet, direct, tmp_path):
    jpeg = tmp_path / "jpeg"
    prepare(out=str(jpeg), **sources(synthetic_imagenet), workers=1, progress=False,
            config=Config(shard_samples=16, resize=f"longer:{PIXEL_MAX_SIDE}"))
    m, jm = (json.loads((d / "manifest.json").read_text()) for d in (direct, jpeg))
    assert (m["form"], m["max_side"], m["config"]["pixels"], jm["form"]) == ("yuv420", PIXEL_MAX_SIDE, "yuv420", "jpeg")
    assert "derived_from" not in m and "quality" not in m["config"] and "restart_markers" not in m["config"]
    assert m["rejected"] and m["skipped"]  # the quirks: there is accounting to compare
    for k in ("rejected", "skipped", "classes", "conservation"):
        assert m[k] == jm[k], k
    assert {**m["totals"], "bytes": 0} == {**jm["totals"], "bytes": 0}  # the same counts, other bytes
    fixed = 0
    for split, s in jm["splits"].items():
        assert [sh["url"] for sh in m["splits"][split]["shards"]] == [sh["url"] for sh in s["shards"]]
        assert m["splits"][split]["class_counts"] == s["class_counts"]
        for sh in s["shards"]:
            before, after = samples(jpeg / sh["url"]), samples(direct / sh["url"])
            assert [k for k, _ in after] == [k for k, _ in before]  # same keys, same order
            for (_, a), (_, b) in zip(before, after):
                assert sorted(b) == ["cls", "json", "yuv420"] and b["cls"] == a["cls"]
                meta, jmeta = json.loads(b["json"]), json.loads(a["json"])
                fixes = [f for f in jmeta["fixes"] if f not in JPEG_ONLY_FIXES]
                assert meta == {**jmeta, "fixes": fixes, "form": "yuv420"}  # derive's layout: width/height stored
                fixed += fixes != ["resized"]
                rgb = pixels.to_rgb(b["yuv420"], meta["width"], meta["height"]).astype(np.int16)
                ref = decode_resized(a["jpg"], "none").astype(np.int16)  # the JPEG form's q90 copy of it
                assert np.abs(rgb - ref).mean() < 6  # 4:2:0 chroma, JPEG q90 and rounding only
    assert fixed > 0  # some samples took fixes other than the resize (gray, CMYK, PNG...): compared too
    report = audit(direct, deep=True, progress=False, workers=1)
    assert report.ok, report.errors


def test_the_loader_reads_it(direct):
    from imagenet_shards.train.loader import make_loader

    m = json.loads((direct / "manifest.json").read_text())
    loader = make_loader(str(direct), "val", 4, workers=0, res=32, val_resize=40, val_crop=32)
    assert loader.dataset.cfg.form == "yuv420"
    labels = [y for _, y in loader for y in y.tolist()]
    assert sorted(labels) == sorted(int(c["index"]) for c in m["classes"]
                                    for _ in range(m["splits"]["val"]["class_counts"][c["wnid"]]))


def test_workers_parts_and_the_cli_give_the_same_bytes(synthetic_imagenet, direct, tmp_path):
    once = files(direct)
    args = cli_args(synthetic_imagenet, tmp_path / "cli") + ["--pixels", "yuv420", "--max-side", str(PIXEL_MAX_SIDE)]
    assert prepare_main(args + ["--workers", "2"]) == 0
    assert files(tmp_path / "cli") == once
    assert prepare_main(args) == 0  # a rerun resumes: nothing to build, the same files
    assert files(tmp_path / "cli") == once
    parts = tmp_path / "parts"
    for i in (1, 0):
        prepare(out=str(parts), **sources(synthetic_imagenet), workers=1, progress=False, part=(i, 2),
                config=Config(shard_samples=16, pixels=pixels.FORM, resize=f"longer:{PIXEL_MAX_SIDE}"))
    assert files(parts) == once


@pytest.mark.parametrize("extra, says", [
    (["--pixels", "yuv420", "--quality", "80"], "--quality set how JPEGs are stored"),
    (["--pixels", "yuv420", "--resize", "longer:400"], "--resize set how JPEGs are stored"),
    (["--pixels", "yuv420", "--no-restart-markers"], "--no-restart-markers set how JPEGs"),
    (["--max-side", "300"], "--max-side bounds the stored planes of --pixels"),
    (["--pixels", "yuv420", "--max-side", "0"], "--max-side must be a positive"),
])
def test_options_that_mean_nothing_for_pixels_are_refused_in_one_line(synthetic_imagenet, tmp_path, capsys,
                                                                      extra, says):
    assert prepare_main(cli_args(synthetic_imagenet, tmp_path / "out") + extra) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_another_max_side_into_the_same_out_is_refused(synthetic_imagenet, direct, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(direct, out)
    assert prepare_main(cli_args(synthetic_imagenet, out) + ["--pixels", "yuv420", "--max-side", "100"]) == 2
    assert "different run" in capsys.readouterr().err
    assert files(out) == files(direct)
