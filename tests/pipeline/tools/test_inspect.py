"""inspect-shards: the contact sheet's captions match the samples' labels; --stats; --key/--extract."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from PIL import Image

from imagenet_shards.pipeline.tools.inspect_shards import (CAPTION_LINES, LINE, PAD, TILE, Sample, draw_contact_sheet, main, pick_samples)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def shard_set(synthetic_shards):
    """The session's prepared shard set (6 classes; 5 train + 2 val shards). Read-only: copy it before damaging it."""
    return synthetic_shards


@pytest.fixture(scope="module")
def manifest(shard_set):
    return json.loads((shard_set / "manifest.json").read_text())


@pytest.fixture(scope="module")
def members(shard_set, manifest):
    """key -> {ext: bytes}, read from every shard with plain tarfile (independently of our reader)."""
    out = {}
    for s in manifest["splits"].values():
        for sh in s["shards"]:
            with tarfile.open(shard_set / sh["url"]) as tf:
                for m in tf.getmembers():
                    key, ext = m.name.split(".", 1)
                    out.setdefault(key, {})[ext] = tf.extractfile(m).read()
    return out


def tile_size():
    return TILE + 2 * PAD, TILE + 2 * PAD + CAPTION_LINES * LINE


def test_contact_sheet_captions_match_labels(shard_set, manifest, members, synthetic_imagenet, tmp_path, capsys):
    sheet, tiles = draw_contact_sheet(pick_samples(str(shard_set), manifest, split="val", n=10),
                                      manifest["classes"], cols=4)
    truth = {s["key"]: s["wnid"] for s in json.loads((synthetic_imagenet / "expected.json").read_text())["samples"]}
    assert len(tiles) == 10 and len({t.key for t in tiles}) == 10
    tw, th = tile_size()
    assert sheet.size == (4 * tw, 3 * th)
    for i, t in enumerate(tiles):
        label = int(members[t.key]["cls"])
        c = manifest["classes"][label]
        assert t.label == label and t.wnid == c["wnid"] == truth[t.key]  # the generator's ground truth
        assert t.caption == (f"{label} {c['wnid']}", c["name"].split(",")[0], t.key)
        assert t.box == ((i % 4) * tw, (i // 4) * th, (i % 4 + 1) * tw, (i // 4 + 1) * th)
        caption_area = sheet.crop((t.box[0], t.box[1] + PAD + TILE, t.box[2], t.box[3]))
        assert caption_area.getextrema() != ((255, 255),) * 3  # something was written there
    # the CLI writes the same sheet as a PNG
    png = tmp_path / "grid.png"
    assert main([str(shard_set), "--split", "val", "--n", "10", "--cols", "4", "--out", str(png)]) == 0
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size == (4 * tw, 3 * th)
        assert im.convert("RGB").tobytes() == sheet.tobytes()
    assert "10 val samples" in capsys.readouterr().out


def test_contact_sheet_class_filter(shard_set, manifest, tmp_path):
    wnid = manifest["classes"][2]["wnid"]
    picked = pick_samples(str(shard_set), manifest, split="train", n=5, labels={2})
    _, tiles = draw_contact_sheet(picked, manifest["classes"])
    assert len(tiles) == 5 and {(t.label, t.wnid) for t in tiles} == {(2, wnid)}
    assert main([str(shard_set), "--split", "train", "--classes", f"{wnid},0", "--n", "3", "--out",
                 str(tmp_path / "f.png")]) == 0


def test_contact_sheet_marks_disagreement(manifest, members):
    key = next(k for k in members if k.startswith("ILSVRC2012_val"))
    files = dict(members[key])
    files["cls"] = str((int(files["cls"]) + 1) % len(manifest["classes"])).encode()
    sheet, (tile,) = draw_contact_sheet([Sample(key, "x.tar", files)], manifest["classes"])
    assert tile.json_wnid != tile.wnid and "json:" in tile.caption[0]
    px = np.asarray(sheet.crop((0, PAD + TILE, tile.box[2], tile.box[3])).convert("RGB")).reshape(-1, 3)
    assert ((px[:, 0] > 150) & (px[:, 1] < 80)).any()  # drawn in red


def test_stats_png(shard_set, manifest, tmp_path, capsys):
    png = tmp_path / "stats.png"
    assert main([str(shard_set), "--stats", "--out", str(png)]) == 0
    with Image.open(png) as im:
        assert im.format == "PNG" and im.width >= 600 and im.height >= 600
    from imagenet_shards.pipeline.tools.inspect_shards import draw_stats, sample_sizes
    sizes, read, total = sample_sizes(str(shard_set), manifest, max_shards=0)
    assert read == total == manifest["totals"]["shards"] and len(sizes) == manifest["totals"]["samples"]
    _, drawn = draw_stats(manifest, sizes)
    for split, counts in drawn["class_counts"].items():
        assert counts == [manifest["splits"][split]["class_counts"].get(c["wnid"], 0) for c in manifest["classes"]]


def test_key_extract(shard_set, members, tmp_path, capsys):
    key = sorted(k for k in members if k.startswith("ILSVRC2012_val"))[0]
    out = tmp_path / "ex"
    assert main([str(shard_set), "--key", key, "--extract", str(out)]) == 0
    text = capsys.readouterr().out
    assert json.loads(members[key]["json"])["wnid"] in text and "extracted 3 files" in text
    assert sorted(p.name for p in out.iterdir()) == [f"{key}.cls", f"{key}.jpg", f"{key}.json"]
    for ext in ("cls", "jpg", "json"):
        assert (out / f"{key}.{ext}").read_bytes() == members[key][ext]
    train_key = next(k for k in members if k.startswith("n"))
    assert main([str(shard_set), "--key", train_key]) == 0
    assert main([str(shard_set), "--key", "no_such_key"]) == 1


def test_errors_exit_2(shard_set, tmp_path, capsys):
    assert main([str(tmp_path), "--out", str(tmp_path / "g.png")]) == 2
    assert main([str(shard_set)]) == 2  # no --out for the contact sheet
    assert main([str(shard_set), "--classes", "n00000000", "--out", str(tmp_path / "g.png")]) == 2
    err = capsys.readouterr().err
    assert all(line.startswith("inspect-shards: error: ") for line in err.splitlines()) and err.count("\n") == 3


@pytest.mark.parametrize("args", [["--key", "KEY", "--extract", "s3://bucket/ex"],
                                  ["--key", "KEY", "--extract", "https://user:secret@host/ex"],
                                  ["--out", "gs://bucket/grid.png"], ["--stats", "--out", "s3://bucket/stats.png"]])
def test_local_only_arguments_refuse_urls(shard_set, members, args, tmp_path, monkeypatch, capsys):
    """--extract and --out write local files: a URL is refused (exit 2, one line), nothing is created."""
    key = sorted(k for k in members if k.startswith("ILSVRC2012_val"))[0]
    monkeypatch.chdir(tmp_path)
    assert main([str(shard_set), *[key if a == "KEY" else a for a in args]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inspect-shards: error: ") and err.count("\n") == 1
    assert "takes a local path, not a URL" in err and "secret" not in err
    assert list(tmp_path.iterdir()) == []  # no ./s3: folder or the like


def test_file_url_is_a_local_path(shard_set, members, tmp_path, capsys):
    key = sorted(k for k in members if k.startswith("ILSVRC2012_val"))[0]
    assert main([str(shard_set), "--key", key, "--extract", f"file://{tmp_path}/ex"]) == 0
    assert sorted(p.name for p in (tmp_path / "ex").iterdir()) == [f"{key}.cls", f"{key}.jpg", f"{key}.json"]


def test_sheet_decodes_via_pillow_alone():
    """An undecodable image gets a crossed tile, not a crash."""
    classes = [{"index": 0, "wnid": "n01440764", "name": "tench, Tinca tinca"}]
    meta = json.dumps({"wnid": "n01440764"}).encode()
    sheet, (tile,) = draw_contact_sheet([Sample("k", "x.tar", {"cls": b"0", "jpg": b"\xff\xd8\xffjunk",
                                                               "json": meta})], classes)
    assert tile.caption == ("0 n01440764", "tench", "k")
    buf = io.BytesIO()
    sheet.save(buf, format="PNG")


def test_a_pixel_set_sheet_shows_each_samples_planes_through_the_float_reference(pixel_shards, tmp_path):
    """Each tile of a pixel set's sheet is pixels.to_rgb of that sample (thumbnailed), placed as a JPEG tile is."""
    from imagenet_shards.pipeline.format import pixels

    m = json.loads((pixel_shards / "manifest.json").read_text())
    picked = pick_samples(str(pixel_shards), m, split="val", n=4)
    sheet, tiles = draw_contact_sheet(picked, m["classes"])
    for s, t in zip(picked, tiles):
        meta = json.loads(s.files["json"])
        want = Image.fromarray(pixels.to_rgb(s.files["yuv420"], meta["width"], meta["height"]))
        want.thumbnail((TILE, TILE))
        x0, y0 = t.box[0] + PAD + (TILE - want.width) // 2, t.box[1] + PAD + (TILE - want.height) // 2
        got = np.asarray(sheet.crop((x0, y0, x0 + want.width, y0 + want.height)))
        assert np.array_equal(got, np.asarray(want)), s.key
        assert t.json_wnid == t.wnid  # captions from .cls and json agree
    assert main([str(pixel_shards), "--split", "val", "--n", "4", "--out", str(tmp_path / "sheet.png")]) == 0
    assert Image.open(tmp_path / "sheet.png").size == sheet.size
