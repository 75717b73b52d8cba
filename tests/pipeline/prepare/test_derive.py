"""prepare-shards derive: a prepared JPEG set -> the pixel form, shard for shard; reproducible across
--workers, --part and a kill -9; audited (a flipped byte, a wrong dimension and a label swap caught)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from imagenet_shards.pipeline.audit.run import audit
from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.format.tar import iter_tar
from imagenet_shards.pipeline.prepare.derive import derive
from imagenet_shards.pipeline.prepare.finalize import finalize
from imagenet_shards.pipeline.prepare.images import decode_resized, resized_size
from imagenet_shards.pipeline.prepare.run import Config, prepare
from imagenet_shards.pipeline.prepare.shards import open_shard
from tests.fixtures.synthetic import PIXEL_MAX_SIDE, derive_pixels


def samples(tar: Path) -> list[tuple[str, dict[str, bytes]]]:
    """(key, {ext: bytes}) of a shard, in tar order (members read with the one tar reader)."""
    out: list = []
    with open(tar, "rb") as f:
        for m in iter_tar(f):
            if not out or out[-1][0] != m.key:
                out.append((m.key, {}))
            out[-1][1][m.ext] = m.data
    return out


def files(root: Path) -> dict[str, bytes]:
    """What a derive leaves for readers: everything but the job's own _prepare folder."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "_prepare" not in p.relative_to(root).parts}


@pytest.fixture(scope="module")
def small_shards(synthetic_imagenet, tmp_path_factory) -> Path:
    """The synthetic ImageNet in shards of 4 samples (24 shards): enough shards to kill a derive between two."""
    src = synthetic_imagenet
    out = tmp_path_factory.mktemp("small-shards") / "out"
    prepare(out=str(out), train=str(src / "ILSVRC2012_img_train.tar"), val=str(src / "ILSVRC2012_img_val.tar"),
            devkit=str(src / "ILSVRC2012_devkit_t12.tar.gz"), config=Config(shard_samples=4), workers=1,
            progress=False)
    return out


@pytest.fixture(scope="module")
def derived_once(small_shards, tmp_path_factory) -> dict[str, bytes]:
    """The files of one uninterrupted, one-worker derive of `small_shards`: what every other way must give."""
    return files(derive_pixels(small_shards, tmp_path_factory.mktemp("derived") / "out"))


def test_same_keys_labels_and_order_with_the_planes_of_the_resized_image(synthetic_shards, pixel_shards):
    src_m = json.loads((synthetic_shards / "manifest.json").read_text())
    m = json.loads((pixel_shards / "manifest.json").read_text())
    assert (m["form"], m["max_side"], src_m["form"]) == ("yuv420", PIXEL_MAX_SIDE, "jpeg")
    assert m["derived_from"]["sha256"] == hashlib.sha256((synthetic_shards / "manifest.json").read_bytes()).hexdigest()
    assert m["classes"] == src_m["classes"] and set(m["splits"]) == set(src_m["splits"])
    resized = 0
    for split, s in src_m["splits"].items():
        assert [sh["url"] for sh in m["splits"][split]["shards"]] == [sh["url"] for sh in s["shards"]]
        assert m["splits"][split]["class_counts"] == s["class_counts"]
        for sh in s["shards"]:
            before, after = samples(synthetic_shards / sh["url"]), samples(pixel_shards / sh["url"])
            assert [k for k, _ in after] == [k for k, _ in before]  # same keys, same order
            for (key, a), (_, b) in zip(before, after):
                assert sorted(b) == ["cls", "json", "yuv420"] and b["cls"] == a["cls"]
                meta, src_meta = json.loads(b["json"]), json.loads(a["json"])
                w, h = resized_size(src_meta["width"], src_meta["height"], f"longer:{PIXEL_MAX_SIDE}")
                assert meta == {**src_meta, "width": w, "height": h, "form": "yuv420"}
                assert b["yuv420"] == pixels.encode(decode_resized(a["jpg"], f"longer:{PIXEL_MAX_SIDE}"))
                assert len(b["yuv420"]) == pixels.payload_size(w, h)
                resized += (w, h) != (src_meta["width"], src_meta["height"])
    assert resized > 0  # the max side was below the source's: the resize ran
    report = audit(pixel_shards, deep=True, progress=False, workers=1)
    assert report.ok, report.errors


def test_the_planes_look_like_the_source_image(synthetic_shards, pixel_shards):
    """The float reference back to RGB is within JPEG-level error of the resized source pixels."""
    url = json.loads((pixel_shards / "manifest.json").read_text())["splits"]["val"]["shards"][0]["url"]
    for (_, a), (_, b) in zip(samples(synthetic_shards / url), samples(pixel_shards / url)):
        meta = json.loads(b["json"])
        ref = decode_resized(a["jpg"], f"longer:{PIXEL_MAX_SIDE}").astype(np.int16)
        back = pixels.to_rgb(b["yuv420"], meta["width"], meta["height"]).astype(np.int16)
        assert np.abs(back - ref).mean() < 6  # 4:2:0 chroma and rounding only


def test_workers_and_parts_give_the_same_bytes(small_shards, derived_once, tmp_path):
    two = derive_pixels(small_shards, tmp_path / "two", workers=2)
    assert files(two) == derived_once
    parts = tmp_path / "parts"
    first = derive(str(small_shards), out=str(parts), max_side=PIXEL_MAX_SIDE, workers=1, part=(0, 2), progress=False)
    assert first["complete"] is False and first["parts_missing"] == [1] and not (parts / "manifest.json").exists()
    derive(str(small_shards), out=str(parts), max_side=PIXEL_MAX_SIDE, workers=1, part=(1, 2), progress=False)
    (parts / "manifest.json").unlink()  # the last part wrote it; finalize alone must give the same
    finalize(str(parts))
    assert files(parts) == derived_once


def test_without_the_c_encoder_numpy_gives_the_same_bytes(small_shards, derived_once, tmp_path, monkeypatch):
    from imagenet_shards.pipeline.prepare import encoders

    monkeypatch.setattr(encoders, "_yuv420", None)  # as without the _jpegtran extension
    assert files(derive_pixels(small_shards, tmp_path / "numpy")) == derived_once  # one worker: this process


def _derive_process(src: Path, out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "derive", str(src), "--pixels", "yuv420",
           "--max-side", str(PIXEL_MAX_SIDE), "--out", str(out), "--workers", "1", "--quiet"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.timeout(240)
def test_kill_9_mid_derive_then_rerun_gives_the_same_bytes(small_shards, derived_once, tmp_path):
    out = tmp_path / "out"
    proc = _derive_process(small_shards, out)
    deadline = time.monotonic() + 120
    while not list((out / "_prepare" / "records").glob("*.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    done = len(list((out / "_prepare" / "records").glob("*.json")))
    assert not (out / "manifest.json").exists() and 0 < done < 24  # killed mid-way: some shards, no manifest
    rerun = _derive_process(small_shards, out)
    stdout, stderr = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, stderr
    assert files(out) == derived_once
    assert not list(out.rglob(".*.tmp"))


def test_a_source_that_is_not_a_jpeg_set_is_refused_in_one_line(pixel_shards, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "derive", str(pixel_shards),
                           "--out", str(tmp_path / "again")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "is a yuv420 set" in proc.stderr
    assert not (tmp_path / "again").exists()


# ---------------------------------------------------------------------------- the audit of a pixel set

def _rewrite(tar: Path, change) -> None:
    """Write `tar` again through the real shard writer, each sample's members passed through `change`."""
    rows = change(samples(tar))
    with open_shard(str(tar)) as w:
        for key, members in rows:
            for ext in sorted(members):
                w.add(f"{key}.{ext}", members[ext])


@pytest.fixture
def damaged(pixel_shards, tmp_path):
    """A copy of the pixel set and its first val shard (the audit of the copy is clean to begin with)."""
    copy = tmp_path / "copy"
    shutil.copytree(pixel_shards, copy)
    assert audit(copy, progress=False, workers=1).ok
    url = json.loads((copy / "manifest.json").read_text())["splits"]["val"]["shards"][0]["url"]
    return copy, copy / url


def _kinds(data: Path, deep: bool = False) -> set[str]:
    return {p.kind for p in audit(data, deep=deep, progress=False, workers=1).problems}


def test_the_audit_catches_a_flipped_byte_in_the_planes(damaged):
    copy, shard = damaged
    raw = bytearray(shard.read_bytes())
    at = raw.index(b".yuv420") + 1024  # inside the first payload (after its 512-byte header)
    raw[at] ^= 0x01
    shard.write_bytes(bytes(raw))
    assert "shard_sha256" in _kinds(copy)


def test_the_audit_catches_a_wrong_dimension(damaged):
    copy, shard = damaged

    def wider(rows):
        key, members = rows[0]
        meta = json.loads(members["json"])
        meta["width"] += 1
        members["json"] = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
        return rows
    _rewrite(shard, wider)
    assert "size_mismatch" in _kinds(copy)
    assert "size_mismatch" in _kinds(copy, deep=True)


def test_the_audit_catches_a_label_swap(damaged):
    copy, shard = damaged

    def swap(rows):
        j = next(j for j, (_, m) in enumerate(rows) if m["cls"] != rows[0][1]["cls"])
        rows[0][1]["cls"], rows[j][1]["cls"] = rows[j][1]["cls"], rows[0][1]["cls"]
        return rows
    _rewrite(shard, swap)
    assert "label_mismatch" in _kinds(copy)


def test_read_manifest_names_the_form_and_refuses_one_it_does_not_know(pixel_shards, synthetic_shards, tmp_path):
    from imagenet_shards.pipeline.format.manifest import ManifestError, manifest_form, read_manifest

    assert manifest_form(read_manifest(pixel_shards)) == "yuv420"
    assert manifest_form(read_manifest(synthetic_shards)) == "jpeg"
    m = json.loads((pixel_shards / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**m, "form": "rgb888"}))
    with pytest.raises(ManifestError, match="stores its images as 'rgb888'; this tool reads jpeg, yuv420"):
        read_manifest(tmp_path)
    del m["form"]  # a manifest written before `form`: a JPEG set
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    assert manifest_form(read_manifest(tmp_path)) == "jpeg"


def test_a_source_shard_that_is_not_what_its_manifest_says_is_refused(synthetic_shards, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(synthetic_shards, src)
    url = json.loads((src / "manifest.json").read_text())["splits"]["val"]["shards"][0]["url"]
    raw = bytearray((src / url).read_bytes())
    raw[raw.index(b".jpg") + 2048] ^= 0x01  # one bit inside the first image
    (src / url).write_bytes(bytes(raw))
    proc = subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "derive", str(src),
                           "--out", str(tmp_path / "out"), "--workers", "1", "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"source shard {src / url} does not match its manifest's xxh3_128" in proc.stderr
    assert not (tmp_path / "out" / url).exists() and not (tmp_path / "out" / "manifest.json").exists()


def test_an_image_that_does_not_decode_is_listed_as_rejected_not_lost(synthetic_shards, tmp_path):
    """A source whose manifest vouches for an image no decoder reads (written so by the real writer)."""
    src = tmp_path / "src"
    shutil.copytree(synthetic_shards, src)
    m = json.loads((src / "manifest.json").read_text())
    entry = m["splits"]["val"]["shards"][0]
    rows = samples(src / entry["url"])
    bad_key = rows[1][0]
    rows[1][1]["jpg"] = rows[1][1]["jpg"][:200]  # cut: the decoder refuses it
    with open_shard(str(src / entry["url"])) as w:
        for key, members in rows:
            for ext in sorted(members):
                w.add(f"{key}.{ext}", members[ext])
    entry.update(w.digests())
    (src / "manifest.json").write_text(json.dumps(m))
    out = derive_pixels(src, tmp_path / "out")
    got = json.loads((out / "manifest.json").read_text())
    val = got["splits"]["val"]
    # the source's own rejects are kept (the derived set's accounting is the source's), and this one added
    ours = [(r["key"], r["reason"], r["source"]) for r in got["rejected"] if r not in m["rejected"]]
    assert ours == [(bad_key, "undecodable", entry["url"])] and len(got["rejected"]) == len(m["rejected"]) + 1
    src_val = m["splits"]["val"]
    assert (val["images_in"], val["num_samples"], val["num_rejected"]) == (
        src_val["images_in"], src_val["num_samples"] - 1, src_val["num_rejected"] + 1)
    assert bad_key not in [k for k, _ in samples(out / entry["url"])]
    assert audit(out, progress=False, workers=1).ok


def test_another_max_side_into_the_same_out_is_refused_naming_it(synthetic_shards, pixel_shards, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(pixel_shards, out)
    proc = subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "derive", str(synthetic_shards),
                           "--max-side", "90", "--out", str(out), "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"max_side: {PIXEL_MAX_SIDE} (existing) vs 90 (asked)" in proc.stderr
    assert files(out) == files(pixel_shards)


def test_a_cut_source_shard_stops_the_workers_with_one_line(synthetic_shards, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(synthetic_shards, src)
    url = json.loads((src / "manifest.json").read_text())["splits"]["train"]["shards"][2]["url"]
    (src / url).write_bytes((src / url).read_bytes()[:5000])
    proc = subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "derive", str(src),
                           "--out", str(tmp_path / "out"), "--workers", "2", "--quiet"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "source shard" in proc.stderr and url in proc.stderr and "cut short" in proc.stderr
    assert not (tmp_path / "out" / url).exists() and not (tmp_path / "out" / "manifest.json").exists()
