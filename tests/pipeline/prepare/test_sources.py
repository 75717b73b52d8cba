"""Indexing accounts for every input: non-regular archive members are listed as skipped, names that
would make unsafe keys are rejected; both are in the manifest, counted by conservation, and change
nothing else (the shards stay byte-identical to those of the archives without them)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import unicodedata
from pathlib import Path

import pytest

from imagenet_shards.pipeline.audit.cli import main as audit_main
from imagenet_shards.pipeline.prepare.run import Config, prepare
from imagenet_shards.pipeline.prepare.sources import index_train, unsafe_key

SHARD = 16


def _add(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.mtime = kind, link, 0o644, 0
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _copy_members(src: tarfile.TarFile, dst: tarfile.TarFile, replace: dict[str, bytes] | None = None):
    for ti in src.getmembers():
        data = (replace or {}).get(ti.name) or src.extractfile(ti).read()
        _add(dst, ti.name, data=data)


def _odd_archives(src: Path, to: Path) -> dict:
    """Copies of the synthetic train and val archives with odd members added; returns what was added."""
    to.mkdir()
    added = {"train": [], "val": []}
    with tarfile.open(src / "ILSVRC2012_img_train.tar") as outer:
        first = outer.getmembers()[0]
        inner_src = tarfile.open(fileobj=io.BytesIO(outer.extractfile(first).read()))
        images = [m.name for m in inner_src.getmembers()]
        jpeg = inner_src.extractfile(images[0]).read()
        wnid = first.name[:-4]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as inner:
            _copy_members(inner_src, inner)
            _add(inner, f"{wnid}_symlink.JPEG", tarfile.SYMTYPE, link=images[1])
            _add(inner, f"{wnid}_hardlink.JPEG", tarfile.LNKTYPE, link=images[2])
            _add(inner, f"{wnid}_fifo.JPEG", tarfile.FIFOTYPE)
            _add(inner, f"{wnid}_new\nline.JPEG", data=jpeg)  # a real image under an unsafe name
            _add(inner, f"{wnid}_bell\x07.JPEG", data=jpeg)
        added["train"] += [(f"{first.name}/{wnid}_symlink.JPEG", "not_a_regular_file"),
                           (f"{first.name}/{wnid}_hardlink.JPEG", "not_a_regular_file"),
                           (f"{first.name}/{wnid}_fifo.JPEG", "not_a_regular_file"),
                           (f"{first.name}/{wnid}_new\nline.JPEG", "unsafe_key"),
                           (f"{first.name}/{wnid}_bell\x07.JPEG", "unsafe_key")]
        with tarfile.open(to / "ILSVRC2012_img_train.tar", "w", format=tarfile.GNU_FORMAT) as new_outer:
            _copy_members(outer, new_outer, {first.name: buf.getvalue()})
            _add(new_outer, "n09999999.tar", tarfile.SYMTYPE, link=first.name)  # a link at the outer level
            added["train"].append(("n09999999.tar", "not_a_regular_file"))
    with tarfile.open(src / "ILSVRC2012_img_val.tar") as val_src, \
            tarfile.open(to / "ILSVRC2012_img_val.tar", "w", format=tarfile.GNU_FORMAT) as val:
        names = val_src.getnames()
        _copy_members(val_src, val)
        _add(val, "ILSVRC2012_val_99999999.JPEG", tarfile.SYMTYPE, link=names[0])
        _add(val, "ILSVRC2012_val_0000000\n1.JPEG", data=val_src.extractfile(names[0]).read())
        added["val"] += [("ILSVRC2012_val_99999999.JPEG", "not_a_regular_file"),
                         ("ILSVRC2012_val_0000000\n1.JPEG", "unsafe_key")]
    shutil.copy(src / "ILSVRC2012_devkit_t12.tar.gz", to)
    return added


def _run(src: Path, out: Path) -> dict:
    prepare(out=str(out), train=str(src / "ILSVRC2012_img_train.tar"), val=str(src / "ILSVRC2012_img_val.tar"),
            devkit=str(src / "ILSVRC2012_devkit_t12.tar.gz"), config=Config(shard_samples=SHARD), workers=1,
            progress=False)
    return json.loads((out / "manifest.json").read_text())


def _shard_hashes(m: dict) -> dict:
    return {sh["url"]: sh["sha256"] for s in m["splits"].values() for sh in s["shards"]}


def test_odd_archive_members_are_recorded_and_change_nothing_else(synthetic_imagenet, synthetic_shards, tmp_path):
    added = _odd_archives(synthetic_imagenet, tmp_path / "odd")
    out = tmp_path / "out"
    m = _run(tmp_path / "odd", out)
    clean = json.loads((synthetic_shards / "manifest.json").read_text())
    assert _shard_hashes(m) == _shard_hashes(clean)  # the odd members made no difference to any shard

    listed = {(x["split"], x["source"]): x for x in m["rejected"] + m["skipped"]}
    for split, rows in added.items():
        for source, reason in rows:
            entry = listed[(split, source)]
            assert entry["reason"] == reason, source
            assert entry in (m["skipped"] if reason == "not_a_regular_file" else m["rejected"])
        s, c = m["splits"][split], clean["splits"][split]
        assert s["images_in"] == c["images_in"] + len(rows)
        assert s["num_skipped"] == c["num_skipped"] + sum(r == "not_a_regular_file" for _, r in rows)
        assert s["num_rejected"] == c["num_rejected"] + sum(r == "unsafe_key" for _, r in rows)
        assert s["images_in"] == s["num_samples"] + s["num_rejected"] + s["num_skipped"]
    link = listed[("train", added["train"][0][0])]
    assert link["detail"].startswith("symbolic link to ") and "hard link to " in listed[("train", added["train"][1][0])]["detail"]
    newline = listed[("train", added["train"][3][0])]
    assert "\n" in newline["key"] and "U+000A" in newline["detail"]
    assert m["totals"]["images_in"] == clean["totals"]["images_in"] + sum(map(len, added.values()))

    for url in _shard_hashes(m):
        with tarfile.open(out / url) as t:
            bad = [n for n in t.getnames() if any(unicodedata.category(ch) == "Cc" for ch in n)]
        assert bad == [], url
    assert audit_main([str(out), "--quiet", "--workers", "1"]) == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs fifos")
def test_folder_sources_record_entries_that_are_not_files_and_unsafe_names(synthetic_imagenet, tmp_path):
    train = tmp_path / "train"
    shutil.copytree(synthetic_imagenet / "imagefolder" / "train", train)
    cls = sorted(train.iterdir())[0]
    image = sorted(cls.iterdir())[0]
    (cls / "dangling.JPEG").symlink_to(tmp_path / "gone.JPEG")
    os.mkfifo(cls / "pipe.JPEG")
    shutil.copy(image, cls / "tab\there.JPEG")
    (cls / "good_link.JPEG").symlink_to(image)  # a symlink to a file is a file: indexed as usual
    (cls / "nested").mkdir()  # folders are containers, not inputs
    idx = index_train(train)
    got = {(u.source, u.reason) for u in idx.unusable}
    assert got == {(f"{cls.name}/dangling.JPEG", "not_a_regular_file"), (f"{cls.name}/pipe.JPEG", "not_a_regular_file"),
                   (f"{cls.name}/tab\there.JPEG", "unsafe_key")}
    assert "good_link" in {m.key for m in idx.members}
    assert [u.status for u in sorted(idx.unusable, key=lambda u: u.source)] == ["skipped", "skipped", "rejected"]


@pytest.mark.parametrize("key,safe", [
    ("n01440764_10026", True), ("ILSVRC2012_val_00000001", True), ("名前_1", True), ("", False),
    ("a\nb", False), ("a\x00b", False), ("a\x7fb", False), ("a\x85b", False), ("a/b", False), ("a..b", False),
])
def test_unsafe_key(key, safe):
    assert (unsafe_key(key) is None) == safe
