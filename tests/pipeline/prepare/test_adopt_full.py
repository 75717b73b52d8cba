"""prepare-shards adopt takes timm's full-ImageNet sets in their own layouts, written here by webdataset's
ShardWriter as timm's writer script wrote them (key = file stem, .jpg, .cls, a .json with label,
label_12k, class_name = the synset, width, height; _info.json with train_12k/validation_12k views):
imagenet-22k-wds (22k labels and a verified 12k label field), imagenet-12k-wds (12k labels) and
imagenet-w21-webp-wds (WEBP images): each adopts with its label space, audits with --expect, and the
loader reads every sample once, WEBP through Pillow."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from PIL import Image, features

from imagenet_shards.pipeline.audit.run import audit
from imagenet_shards.pipeline.format.label_spaces import label_space, present_space
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import FALL11_TAR, REMOVED_IN_WINTER21

SHARD = 8


def _images(src: Path) -> list[tuple[str, str, bytes]]:
    """(key, wnid, bytes) of every image of the synthetic fall11 archive that Pillow opens as JPEG."""
    out = []
    with tarfile.open(src / FALL11_TAR) as outer:
        for m in outer:
            try:
                inner = tarfile.open(fileobj=io.BytesIO(outer.extractfile(m).read()))
            except tarfile.TarError:
                continue  # the planted member that is not a tar
            for im in inner:
                data = inner.extractfile(im).read()
                if Image.open(io.BytesIO(data)).format == "JPEG":  # timm's writer re-encoded the others; we skip them
                    out.append((im.name.rsplit(".", 1)[0], im.name.split("_")[0], data))
    return sorted(out)


def write_timm_set(root: Path, name: str, images, *, label, ext: str = "jpg", alt: dict | None = None,
                   val_every: int = 4) -> Path:
    """A set as timm's writer made them: {name}-{train,validation}-NNNN.tar, every 4th image in validation;
    `label(wnid)` gives .cls (None: the image is left out), `alt` extra `label_*` fields of the .json."""
    import webdataset as wds

    root.mkdir(parents=True)
    splits = {}
    for split in ("train", "validation"):
        chosen = [x for i, x in enumerate(images) if (i % val_every == 0) == (split == "validation")
                  and label(x[1]) is not None]
        with wds.ShardWriter(str(root / f"{name}-{split}-%04d.tar"), maxcount=SHARD, verbose=0) as sink:
            for key, wnid, data in chosen:
                img = Image.open(io.BytesIO(data))
                if ext == "webp":
                    buf = io.BytesIO()
                    img.convert("RGB").save(buf, "WEBP", quality=90)
                    data = buf.getvalue()
                meta = {"label": label(wnid), "class_name": wnid, "width": img.width, "height": img.height,
                        **{k: f(wnid) for k, f in (alt or {}).items()}}
                sink.write({"__key__": key, ext: data, "cls": label(wnid), "json": meta})
        files = sorted(p.name for p in root.glob(f"{name}-{split}-*.tar"))
        lengths = [sum(1 for n in tarfile.open(root / f).getnames() if n.endswith(".cls")) for f in files]
        splits[split] = {"name": split, "filenames": files, "shard_lengths": lengths, "alt_label": None,
                         "num_samples": sum(lengths)}
        for field in alt or {}:  # the same files, read by the extra label
            view = f"{split}_{field.removeprefix('label_')}"
            splits[view] = {**splits[split], "name": view, "alt_label": field}
    (root / "_info.json").write_text(json.dumps({"name": name, "splits": splits}))
    return root


def _adopt(src: Path, capsys) -> dict:
    assert prepare_main(["adopt", str(src), "--json", "--quiet", "--workers", "1"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _loader_labels(data: Path, split: str) -> list[int]:
    from imagenet_shards.train import loader as D

    loader = D.make_loader(str(data), split, 4, train=False, workers=0, res=32, val_resize=36, val_crop=32,
                           decoder="pil")
    return [int(y) for _, labels in loader for y in labels]


def test_timms_22k_set_adopts_in_the_22k_space_with_its_12k_label_checked(full_imagenet, tmp_path, capsys):
    images, in22k, in12k = _images(full_imagenet), label_space("imagenet-22k"), label_space("imagenet-12k")
    src = write_timm_set(tmp_path / "in22k", "imagenet22k", images, label=in22k.index.get,
                         alt={"label_12k": lambda w: in12k.index.get(w, -1)})
    summary = _adopt(src, capsys)
    assert summary["label_space"] == "imagenet-22k" and summary["classes"] == 21841
    m = json.loads((src / "manifest.json").read_text())
    assert m["label_space"]["name"] == "imagenet-22k" and m["name"] == "imagenet22k"
    assert m["adopted"]["extra_labels"] == {"label_12k": "imagenet-12k"}
    assert m["totals"]["samples"] == len(images)
    report = audit(str(src), workers=1, expect="imagenet-22k", progress=False)
    assert report.ok, [p.detail for p in report.errors]
    assert sorted(_loader_labels(src, "val")) == sorted(in22k.index[w] for i, (_, w, _) in enumerate(images)
                                                        if i % 4 == 0)

    bad = write_timm_set(tmp_path / "bad", "imagenet22k", images, label=in22k.index.get,
                         alt={"label_12k": lambda w: in12k.index.get(w, -1) + 1})
    assert prepare_main(["adopt", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "label_12k" in err and "imagenet-12k" in err
    assert not (bad / "manifest.json").exists()


def test_timms_12k_set_adopts_in_the_12k_space(full_imagenet, tmp_path, capsys):
    in12k = label_space("imagenet-12k")
    src = write_timm_set(tmp_path / "in12k", "imagenet12k", _images(full_imagenet), label=in12k.index.get)
    summary = _adopt(src, capsys)
    assert summary["label_space"] == "imagenet-12k" and summary["classes"] == 11821
    assert audit(str(src), workers=1, expect="imagenet-12k", progress=False).ok


@pytest.mark.skipif(not features.check("webp"), reason="this Pillow has no WEBP codec (build pillow-simd with "
                                                      "libwebp-dev: scripts/bootstrap.sh installs it)")
def test_timms_winter21_webp_set_adopts_and_the_loader_decodes_webp(full_imagenet, tmp_path, capsys):
    images = [x for x in _images(full_imagenet) if x[1] not in REMOVED_IN_WINTER21]
    w21 = present_space({w for _, w, _ in images})  # labelled by its own synsets, sorted (timm's 19,167)
    src = write_timm_set(tmp_path / "w21", "imagenet-w21-webp", images, label=w21.index.get, ext="webp")
    summary = _adopt(src, capsys)
    assert summary["label_space"] == "present" and summary["classes"] == w21.num_classes
    m = json.loads((src / "manifest.json").read_text())
    assert m["adopted"]["sample_exts"] == ["cls", "json", "webp"]
    report = audit(str(src), deep=True, workers=1, progress=False)
    assert report.ok, [p.detail for p in report.errors]
    got = _loader_labels(src, "train")
    assert sorted(got) == sorted(w21.index[w] for i, (_, w, _) in enumerate(images) if i % 4 != 0)
