"""The synthetic ILSVRC2012 generator: real layout, parsable devkit, planted quirks, determinism."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin, UnidentifiedImageError

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.tools.synthetic.generate import generate, main
from imagenet_shards.pipeline.tools.synthetic.plan import (NAMED_QUIRKS, QUIRK_CLASSES, SAMPLE_FACTS, choose_classes,
                                                           ilsvrc_ids)

ALL_QUIRKS = {"png_as_jpeg", "cmyk", "grayscale", "truncated", "empty", "exif_rotated", "large", "tiny",
              "rgba_png", "palette_gif", "non_image", "progressive"}


def load_expected(out: Path) -> dict:
    return json.loads((out / "expected.json").read_text())


def tar_members(data_or_path) -> list[tuple[tarfile.TarInfo, bytes]]:
    """(info, bytes) of every member of an uncompressed tar, in archive order."""
    fileobj = io.BytesIO(data_or_path) if isinstance(data_or_path, bytes) else open(data_or_path, "rb")
    with fileobj, tarfile.open(fileobj=fileobj, mode="r:") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]


def all_member_bytes(out: Path) -> dict[str, bytes]:
    """expected.json 'member' path -> bytes, read from the train and val archives."""
    found = {}
    for outer, class_tar in tar_members(out / "ILSVRC2012_img_train.tar"):
        for inner, data in tar_members(class_tar):
            found[f"{outer.name}/{inner.name}"] = data
    for info, data in tar_members(out / "ILSVRC2012_img_val.tar"):
        found[info.name] = data
    return found


def assert_fixed_metadata(info: tarfile.TarInfo) -> None:
    assert info.isfile() and info.mode == 0o644
    assert (info.mtime, info.uid, info.gid, info.uname, info.gname) == (0, 0, 0, "", "")


# ---- layout ---------------------------------------------------------------------------------

def test_train_tar_is_an_uncompressed_tar_of_class_tars(synthetic_imagenet):
    expected = load_expected(synthetic_imagenet)
    path = synthetic_imagenet / "ILSVRC2012_img_train.tar"
    assert path.read_bytes()[257:262] == b"ustar"  # a plain tar header, not gzip/bz2
    outer = tar_members(path)
    assert [m.name for m, _ in outer] == [f"{w}.tar" for w in expected["classes"]]
    for info, class_tar in outer:
        assert_fixed_metadata(info)
        assert class_tar[257:262] == b"ustar"
        wnid = info.name[:-4]
        inner = tar_members(class_tar)
        want = [s["filename"] for s in expected["samples"] if s["split"] == "train" and s["wnid"] == wnid]
        assert [m.name for m, _ in inner] == want == sorted(want)
        for member, _ in inner:
            assert_fixed_metadata(member)
            assert member.name.endswith(".JPEG") and member.name.lstrip("._").startswith(wnid + "_")


def test_val_tar_is_flat_and_numbered_from_one(synthetic_imagenet):
    expected = load_expected(synthetic_imagenet)
    names = [m.name for m, _ in tar_members(synthetic_imagenet / "ILSVRC2012_img_val.tar")]
    assert names == [f"ILSVRC2012_val_{i:08d}.JPEG" for i in range(1, 6 * 4 + 1)]
    val = [s for s in expected["samples"] if s["split"] == "val"]
    assert [s["member"] for s in val] == names
    per_class = [s["wnid"] for s in val]
    assert per_class != sorted(per_class)  # shuffled class order, as in the real val set
    assert all(per_class.count(w) == 4 for w in expected["classes"])


def test_expected_json_describes_every_member_exactly(synthetic_imagenet):
    expected = load_expected(synthetic_imagenet)
    found = all_member_bytes(synthetic_imagenet)
    assert sorted(found) == sorted(s["member"] for s in expected["samples"])
    table = [c.wnid for c in imagenet_1k_classes()]
    for s in expected["samples"]:
        assert hashlib.sha256(found[s["member"]]).hexdigest() == s["sha256"]
        assert s["label"] == table.index(s["wnid"])
        assert s["local_label"] == expected["classes"].index(s["wnid"])
        assert s["key"] + ".JPEG" == s["filename"] == s["member"].split("/")[-1]
        fmt, mode, expect, fixes, reason = SAMPLE_FACTS[s["quirk"] or "clean"]
        assert (s["format"], s["mode"], s["expect"], s["fixes"], s["reason"]) == (fmt, mode, expect, fixes, reason)
    assert expected["classes"] == sorted(expected["classes"]) and len(expected["classes"]) == 6
    assert set(QUIRK_CLASSES) <= set(expected["classes"])
    counts = expected["counts"]
    assert counts["train"]["members"] == 6 * 12 + 1  # + the AppleDouble file
    assert counts["train"]["members"] == sum(counts["train"][e] for e in ("ok", "fix", "reject", "skip"))
    text = (synthetic_imagenet / "expected.json").read_text()
    assert text == json.dumps(expected, sort_keys=True, indent=1) + "\n"


# ---- quirks -------------------------------------------------------------------------------------

def test_every_quirk_is_present_and_is_what_expected_json_says(synthetic_imagenet):
    expected = load_expected(synthetic_imagenet)
    found = all_member_bytes(synthetic_imagenet)
    samples = expected["samples"]
    assert {s["quirk"] for s in samples} - {None} == ALL_QUIRKS
    names = {s["filename"]: s for s in samples}
    for kind, wnid, number in NAMED_QUIRKS:
        assert names[f"{wnid}_{number}.JPEG"]["quirk"] == kind
    assert [s["quirk"] for s in samples if s["split"] == "val" and s["quirk"] != "progressive"].count("cmyk") == 1
    assert sum(s["quirk"] == "grayscale" for s in samples) == 2
    for s in samples:
        data = found[s["member"]]
        if s["quirk"] == "empty":
            assert data == b""
            continue
        if s["quirk"] == "non_image":
            assert s["filename"].startswith("._") and data.startswith(b"\x00\x05\x16\x07")
            with pytest.raises(UnidentifiedImageError):
                Image.open(io.BytesIO(data))
            continue
        image = Image.open(io.BytesIO(data))
        assert (image.format, image.mode, image.size) == (s["format"], s["mode"], (s["width"], s["height"])), s
        if s["quirk"] == "truncated":
            assert not data.endswith(b"\xff\xd9")
            with pytest.raises(OSError, match="truncated"):
                image.load()
            continue
        image.load()  # everything else decodes fully
        if s["format"] == "JPEG":
            assert JpegImagePlugin.get_sampling(image) in (2, -1)  # 4:2:0 (-1: single channel)
            assert ("progressive" in image.info) == (s["quirk"] == "progressive")
        if s["quirk"] == "cmyk":
            assert "adobe" in image.info  # Adobe APP14, as Photoshop CMYK JPEGs have
        if s["quirk"] == "exif_rotated":
            assert image.getexif()[0x0112] == 6
        if s["quirk"] == "large":
            assert image.width * image.height >= 4000 * 3000
        if s["quirk"] == "tiny":
            assert max(image.size) <= 32
        if s["quirk"] == "rgba_png":
            assert image.getextrema()[3][0] < 255  # some real transparency
        if s["quirk"] == "palette_gif":
            assert "transparency" not in image.info


def test_no_quirks_gives_only_clean_rgb_jpegs(make_synthetic):
    out = make_synthetic(classes=3, train_per_class=4, val_per_class=2, quirks=False, layouts=("ilsvrc",))
    expected = load_expected(out)
    found = all_member_bytes(out)
    assert len(found) == 3 * 4 + 3 * 2
    for s in expected["samples"]:
        assert s["quirk"] in (None, "progressive") and s["expect"] == "ok" and s["fixes"] == []
        image = Image.open(io.BytesIO(found[s["member"]]))
        assert (image.format, image.mode) == ("JPEG", "RGB")
        image.load()


def test_bad_sizes_with_quirks_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--classes 3 is too few"):
        generate(tmp_path / "never", classes=3)
    assert not (tmp_path / "never").exists()


# ---- devkit -------------------------------------------------------------------------------------

def extract_devkit(out: Path, dest: Path) -> Path:
    with tarfile.open(out / "ILSVRC2012_devkit_t12.tar.gz", "r:gz") as tar:
        tar.extractall(dest, filter="data")
    return dest / "ILSVRC2012_devkit_t12"


def test_devkit_meta_mat_with_scipy(synthetic_imagenet, tmp_path):
    from scipy.io import loadmat

    expected = load_expected(synthetic_imagenet)
    ids = expected["ilsvrc_ids"]
    devkit = extract_devkit(synthetic_imagenet, tmp_path)
    synsets = loadmat(devkit / "data" / "meta.mat", squeeze_me=True)["synsets"]
    assert synsets.dtype.names == ("ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children",
                                   "wordnet_height", "num_train_images")
    leaves = {str(s["WNID"]): int(s["ILSVRC2012_ID"]) for s in synsets if s["num_children"] == 0}
    assert leaves == ids and sorted(leaves.values()) == list(range(1, 7))
    parents = [s for s in synsets if s["num_children"] > 0]
    assert parents and all(int(s["ILSVRC2012_ID"]) > 6 for s in parents)
    all_ids = {int(s["ILSVRC2012_ID"]) for s in synsets}
    for s in parents:
        children = np.atleast_1d(s["children"]).tolist()
        assert len(children) == s["num_children"] and set(children) <= all_ids
    names = {c.wnid: c.name for c in imagenet_1k_classes()}
    assert all(str(s["words"]) == names[str(s["WNID"])] for s in synsets if s["num_children"] == 0)
    truth = (devkit / "data" / "ILSVRC2012_validation_ground_truth.txt").read_text().splitlines()
    val = [s for s in expected["samples"] if s["split"] == "val"]
    assert [int(t) for t in truth] == [ids[s["wnid"]] for s in val]


def test_ilsvrc_ids_are_not_sorted_wnid_order(synthetic_imagenet):
    ids = load_expected(synthetic_imagenet)["ilsvrc_ids"]
    assert [ids[w] for w in sorted(ids)] != list(range(1, len(ids) + 1))
    for k in (2, 3, 4, 10):
        for seed in range(30):
            wnids = choose_classes(k, quirks=False)
            got = ilsvrc_ids(wnids, seed)
            assert sorted(got.values()) == list(range(1, k + 1))
            assert [got[w] for w in wnids] != list(range(1, k + 1))


def test_devkit_parses_with_torchvision(synthetic_imagenet, tmp_path, monkeypatch):
    import torchvision.datasets.imagenet as tv_imagenet

    expected = load_expected(synthetic_imagenet)
    for name in ("ILSVRC2012_devkit_t12.tar.gz", "ILSVRC2012_img_val.tar"):
        shutil.copy(synthetic_imagenet / name, tmp_path / name)
    # torchvision checks the real archives' md5s; everything else is its own code path
    monkeypatch.setattr(tv_imagenet, "_verify_archive", lambda *args, **kwargs: None)
    tv_imagenet.parse_devkit_archive(str(tmp_path))
    wnid_to_classes, val_wnids = tv_imagenet.load_meta_file(str(tmp_path))
    assert sorted(wnid_to_classes) == expected["classes"]
    assert wnid_to_classes["n01440764"] == ("tench", "Tinca tinca")
    val = [s for s in expected["samples"] if s["split"] == "val"]
    assert val_wnids == [s["wnid"] for s in val]
    tv_imagenet.parse_val_archive(str(tmp_path))
    for s in val:
        assert (tmp_path / "val" / s["wnid"] / s["filename"]).is_file()


# ---- determinism, layouts, CLI ------------------------------------------------------------------

def test_same_arguments_give_byte_identical_files(make_synthetic):
    small = dict(classes=4, train_per_class=3, val_per_class=1)
    a, b, c = make_synthetic(**small), make_synthetic(**small), make_synthetic(**small, seed=1)

    def digests(out):
        return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(out.rglob("*")) if p.is_file()}

    assert digests(a) == digests(b)
    assert len(digests(a)) > 10
    assert digests(a)["ILSVRC2012_img_train.tar"] != digests(c)["ILSVRC2012_img_train.tar"]


def test_optional_layouts_hold_the_same_bytes(synthetic_imagenet):
    expected = load_expected(synthetic_imagenet)
    files = expected["files"]
    found = all_member_bytes(synthetic_imagenet)
    for s in expected["samples"]:
        data = found[s["member"]]
        split_dir = synthetic_imagenet / files[f"imagefolder_{s['split']}"]
        assert (split_dir / s["wnid"] / s["filename"]).read_bytes() == data
        if s["split"] == "val":
            assert (synthetic_imagenet / files["kaggle_val"] / s["filename"]).read_bytes() == data
    for info, class_tar in tar_members(synthetic_imagenet / "ILSVRC2012_img_train.tar"):
        assert (synthetic_imagenet / files["class_tars"] / info.name).read_bytes() == class_tar

    rows = list(csv.reader((synthetic_imagenet / files["kaggle_val_solution"]).open()))
    assert rows[0] == ["ImageId", "PredictionString"]
    val = {s["key"]: s for s in expected["samples"] if s["split"] == "val"}
    assert [r[0] for r in rows[1:]] == sorted(val)
    for image_id, prediction in rows[1:]:
        tokens = prediction.split()
        assert len(tokens) % 5 == 0 and set(tokens[::5]) == {val[image_id]["wnid"]}
        x1, y1, x2, y2 = map(int, tokens[1:5])
        assert 0 <= x1 < x2 < val[image_id]["width"] and 0 <= y1 < y2 < val[image_id]["height"]
    mapping = (synthetic_imagenet / files["kaggle_synset_mapping"]).read_text().splitlines()
    assert [line.split(" ", 1)[0] for line in mapping] == expected["classes"]


def test_cli_writes_the_set_and_prints_a_summary(tmp_path, capsys):
    out = tmp_path / "fake"
    args = [str(out), "--classes", "4", "--train-per-class", "3", "--val-per-class", "1", "--seed", "3",
            "--layout", "ilsvrc,imagefolder", "--quiet"]
    assert main(args) == 0
    summary = capsys.readouterr().out.strip()
    assert summary.startswith("wrote 4 classes, 13 train + 4 val members") and "\n" not in summary
    assert load_expected(out)["args"]["layouts"] == ["ilsvrc", "imagefolder"]
    assert not (out / "kaggle").exists()
    assert main(args) == 0  # re-running over its own output replaces it


@pytest.mark.parametrize("extra, message", [
    (["--classes", "2"], "--classes 2 is too few with quirks on"),
    (["--classes", "5", "--train-per-class", "2"], "--train-per-class 2 is too few"),
    (["--layout", "ilsvrc,zip"], "unknown or no --layout zip"),
    (["--classes", "1001", "--no-quirks"], "out of range"),
])
def test_cli_bad_arguments_exit_2_with_one_line(tmp_path, capsys, extra, message):
    assert main([str(tmp_path / "x"), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_cli_refuses_a_foreign_nonempty_directory(tmp_path, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    assert main([str(tmp_path), "--quiet", "--classes", "4"]) == 2
    assert "not empty" in capsys.readouterr().err and (tmp_path / "precious.txt").exists()


def test_choose_classes():
    table = [c.wnid for c in imagenet_1k_classes()]
    assert choose_classes(1000, quirks=True) == table
    chosen = choose_classes(10, quirks=False)
    assert chosen == sorted(chosen) and len(set(chosen)) == 10 and chosen[0] == "n01440764"
    gaps = np.diff([table.index(w) for w in chosen])
    assert gaps.min() >= 90  # evenly spread through the table
    assert set(QUIRK_CLASSES) <= set(choose_classes(7, quirks=True))


# ---- learnable ---------------------------------------------------------------------------------

def _crop_features(data: bytes, rng: np.random.Generator, crops: int) -> np.ndarray:
    """16x16 RGB of random crops (10-50% area, random flip), flattened, in [0, 1]."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = image.size
    feats = []
    for _ in range(crops):
        area = rng.uniform(0.1, 0.5) * w * h
        cw = int(min(w, max(4, np.sqrt(area * rng.uniform(0.75, 1.33)))))
        ch = int(min(h, max(4, area / cw)))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        crop = image.crop((x, y, x + cw, y + ch)).resize((16, 16), Image.BILINEAR)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        feats.append(np.asarray(crop, dtype=np.float32).ravel() / 255.0)
    return np.stack(feats)


def test_classes_are_learnable_by_nearest_class_mean(synthetic_imagenet):
    expected = load_expected(synthetic_imagenet)
    found = all_member_bytes(synthetic_imagenet)
    rng = np.random.default_rng(0)
    usable = [s for s in expected["samples"] if s["expect"] in ("ok", "fix")]
    k = len(expected["classes"])
    sums, counts = np.zeros((k, 16 * 16 * 3)), np.zeros(k)
    for s in (s for s in usable if s["split"] == "train"):
        f = _crop_features(found[s["member"]], rng, crops=2)
        sums[s["local_label"]] += f.sum(0)
        counts[s["local_label"]] += len(f)
    means = sums / counts[:, None]
    val = [s for s in usable if s["split"] == "val"]
    feats = np.concatenate([_crop_features(found[s["member"]], rng, crops=3) for s in val])
    truth = np.repeat([s["local_label"] for s in val], 3)
    predicted = ((feats[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    accuracy = float((predicted == truth).mean())
    assert accuracy >= 0.8, f"nearest-class-mean accuracy {accuracy:.2f} (chance {1 / k:.2f})"


def test_imagenet_like_set_has_imagenets_bytes_per_pixel_and_size_spread(make_synthetic):
    """Statistics of a 204-image --imagenet-like set (deterministic in the seed, not timed): mean
    bytes/pixel in ImageNet's 0.5..0.7, 10..25 % of images over 500 px (ImageNet: ~15..20 %), and
    a few progressive JPEGs."""
    out = make_synthetic(classes=4, train_per_class=50, val_per_class=1, quirks=False, imagenet_like=True)
    expected = load_expected(out)
    assert expected["args"]["imagenet_like"] is True
    members = all_member_bytes(out)
    assert len(members) == 204
    per_pixel, longer, progressive = [], [], 0
    for s in expected["samples"]:
        data = members[s["member"]]
        with Image.open(io.BytesIO(data)) as img:
            assert (img.format, img.mode, img.size) == ("JPEG", "RGB", (s["width"], s["height"]))
            progressive += bool(img.info.get("progressive"))
        per_pixel.append(len(data) / (s["width"] * s["height"]))
        longer.append(max(s["width"], s["height"]))
    longer = np.array(longer)
    assert 0.5 <= float(np.mean(per_pixel)) <= 0.7
    assert 0.10 <= float(np.mean(longer > 500)) <= 0.25
    assert np.mean(longer <= 500) >= 0.75 and np.median(longer) == 500
    assert 1 <= progressive <= 10


def test_imagenet_like_sizes_follow_imagenets_spread():
    """The size draw itself over 20,000 draws: 15..20 % over 500 px, a few (0.2..1 %) over 2000 px."""
    from imagenet_shards.pipeline.tools.synthetic.images import imagenet_like_size
    rng = np.random.default_rng(0)
    longer = np.array([max(imagenet_like_size(rng)) for _ in range(20000)])
    assert 0.15 <= float(np.mean(longer > 500)) <= 0.20
    assert 0.002 <= float(np.mean(longer > 2000)) <= 0.01
    assert longer.max() <= 4000 and longer.min() >= 16
