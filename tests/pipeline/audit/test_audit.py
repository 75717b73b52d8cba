"""audit-shards: a clean set audits clean; each planted damage is found and named; exit codes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile

import pytest

from tests.fixtures.loader import flip_scan_bytes

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.audit import observe
from imagenet_shards.pipeline.audit.checks import check_sample
from imagenet_shards.pipeline.audit.cli import main
from imagenet_shards.pipeline.audit.duplicates import find_duplicate_content
from imagenet_shards.pipeline.audit.expect import check_expect
from imagenet_shards.pipeline.audit.observe import SampleObservation, observe_samples
from imagenet_shards.pipeline.audit.run import AuditError, audit, load_manifest
from imagenet_shards.pipeline.format.tar import HashingReader, TarFormatError, iter_tar
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes, imagenet_1k_facts
from imagenet_shards.pipeline.format.digest import FAST, hex_of
from imagenet_shards.pipeline.format.manifest import dumps, wids_index

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def shard_set(synthetic_shards):
    """The session's prepared shard set (6 classes; 5 train + 2 val shards). Read-only: copy it before damaging it."""
    return synthetic_shards


@pytest.fixture
def data(shard_set, tmp_path):
    """A private copy of the shard set, to damage."""
    dst = tmp_path / "data"
    shutil.copytree(shard_set, dst)
    return dst


def manifest_of(d) -> dict:
    return json.loads((d / "manifest.json").read_text())


def shard_path(d, split="train", i=1):
    return d / manifest_of(d)["splits"][split]["shards"][i]["url"]


def kinds(report) -> set[str]:
    return {p.kind for p in report.errors}


def run_cli(args, capsys):
    rc = main([str(a) for a in args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def read_members(path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tf:
        return [(m, tf.extractfile(m).read()) for m in tf.getmembers()]


def rewrite_shard(d, url: str, edit) -> None:
    """Rewrite shard `url` of copy `d` with edit(members) and make manifest, wids index agree with the new bytes,
    so only what is inside the shard is wrong."""
    path = d / url
    members = edit(read_members(path))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for info, payload in members:
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload))
    raw = buf.getvalue()
    path.write_bytes(raw)
    m = manifest_of(d)
    for split, s in m["splits"].items():
        for sh in s["shards"]:
            if sh["url"] == url:
                sh.update(bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest(), md5=hashlib.md5(raw).hexdigest(),
                          **{FAST: hex_of(FAST, raw)})
                (d / f"{split}.wids.json").write_text(dumps(wids_index(m, split)))
    m["totals"]["bytes"] = sum(sh["bytes"] for s in m["splits"].values() for sh in s["shards"])
    (d / "manifest.json").write_text(dumps(m))


def replace_member(name: str, new: bytes):
    def edit(members):
        assert any(i.name == name for i, _ in members), name
        return [(i, new if i.name == name else b) for i, b in members]
    return edit


def first_key(d, split="train", i=1) -> str:
    return read_members(shard_path(d, split, i))[0][0].name.split(".")[0]


# ---------------------------------------------------------------------------------------------------

def test_clean_set_is_intact(shard_set, capsys):
    rc, out, err = run_cli([shard_set, "--workers", "2", "--quiet"], capsys)
    assert rc == 0, out
    assert out.startswith("result: intact") and "7 shards" in out


def test_clean_set_is_intact_deep(shard_set):
    r = audit(shard_set, deep=True, workers=1, progress=False)
    assert r.ok, r.errors
    m = manifest_of(shard_set)
    for split, c in r.counts.items():
        assert c["samples_read"] == m["splits"][split]["num_samples"]
        assert c["shards_read"] == m["splits"][split]["num_shards"]
    assert r.timing["bytes_read"] == m["totals"]["bytes"]


def test_url_agnostic_file_url(shard_set):
    r = audit(f"file://{shard_set}", splits=["val"], workers=1, progress=False)
    assert r.ok and r.splits == ["val"]


def test_json_report_shape(shard_set, tmp_path, capsys):
    report = tmp_path / "report.json"
    rc, out, _ = run_cli([shard_set, "--json", report, "--quiet"], capsys)
    assert rc == 0
    r = json.loads(report.read_text())
    assert {"data", "ok", "deep", "splits", "problems", "num_errors", "num_warnings", "counts", "duplicates",
            "timing"} <= set(r)
    assert r["ok"] is True and r["problems"] == [] and r["splits"] == ["train", "val"]
    assert set(r["counts"]["train"]) >= {"shards", "samples_read", "samples_manifest", "bytes_read"}


def test_json_report_lists_every_problem(data, tmp_path, capsys):
    url = manifest_of(data)["splits"]["train"]["shards"][1]["url"]
    os.unlink(data / url)
    report = tmp_path / "report.json"
    rc, out, _ = run_cli([data, "--json", report], capsys)
    assert rc == 1
    problems = json.loads(report.read_text())["problems"]
    assert problems == [{"kind": "shard_missing", "shard": url, "key": None,
                         "detail": "listed in the manifest but not there", "severity": "error"}]
    assert "shard_missing" in out and url in out and "NOT INTACT" in out


def test_flipped_byte(data, capsys):
    path = shard_path(data)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    path.write_bytes(bytes(raw))
    rc, out, _ = run_cli([data, "--quiet"], capsys)
    assert rc == 1
    assert "shard_sha256" in out and "shard_xxh3_128" in out and str(path.relative_to(data)) in out
    assert "shard_md5" in kinds(audit(data, deep=True, workers=1, progress=False))


def test_flipped_byte_in_a_header(data):
    path = shard_path(data)
    raw = bytearray(path.read_bytes())
    raw[1024 + 10] ^= 0x20  # in the name field of the second header (after the .cls header and its block)
    path.write_bytes(bytes(raw))
    r = audit(data, workers=1, progress=False)
    assert {"shard_sha256", "tar_bad_header"} <= kinds(r)


def test_truncated_shard(data):
    path = shard_path(data)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    r = audit(data, workers=1, progress=False)
    assert {"shard_size", "shard_sha256", "tar_truncated", "shard_count"} <= kinds(r)
    size = next(p for p in r.errors if p.kind == "shard_size")
    assert size.shard == str(path.relative_to(data)) and "truncated" in size.detail
    assert "class_count" not in kinds(r)  # the shard problems already explain the missing samples


@pytest.mark.parametrize("where", ["appended", "inside the zero padding"])
def test_bytes_after_the_end_marker_do_not_drop_the_last_sample_from_the_count(data, where):
    path = shard_path(data)
    raw = bytearray(path.read_bytes())
    assert raw[-1024:] == bytes(1024)  # the tar ends with zero blocks: the end-of-archive marker and padding
    if where == "appended":
        raw += b"garbage"
    else:
        raw[-100:-93] = b"garbage"
    path.write_bytes(bytes(raw))
    r = audit(data, workers=1, progress=False)
    assert kinds(r) == {"tar_trailing_garbage", "shard_sha256", "shard_xxh3_128"} | ({"shard_size"} if where == "appended" else set())


def test_missing_shard(data):
    path = shard_path(data, "val", 0)
    path.unlink()
    r = audit(data, workers=1, progress=False)
    assert kinds(r) == {"shard_missing"}
    assert r.errors[0].shard == str(path.relative_to(data))


def test_extra_unlisted_shard(data):
    shutil.copy(shard_path(data), data / "train" / "imagenet1k-train-000099.tar")
    (data / "val" / ".imagenet1k-validation-000000.tar.x1.tmp").write_bytes(b"leftover")
    r = audit(data, workers=1, progress=False)
    assert kinds(r) == {"shard_extra"}
    assert sorted(p.shard for p in r.errors) == ["train/imagenet1k-train-000099.tar",
                                                  "val/.imagenet1k-validation-000000.tar.x1.tmp"]


def test_undecodable_jpeg_with_matching_hash_found_by_deep(data, capsys):
    url = manifest_of(data)["splits"]["val"]["shards"][0]["url"]
    key = first_key(data, "val", 0)
    jpg = dict((i.name, b) for i, b in read_members(data / url))[f"{key}.jpg"]
    rewrite_shard(data, url, replace_member(f"{key}.jpg", jpg[: len(jpg) // 2]))
    assert audit(data, workers=1, progress=False).ok  # sizes and hashes agree: only decoding can tell
    rc, out, _ = run_cli([data, "--deep", "--quiet"], capsys)
    assert rc == 1
    r = audit(data, deep=True, workers=2, progress=False)
    assert [(p.kind, p.shard, p.key) for p in r.errors] == [("undecodable", url, key)]


@pytest.mark.skipif(observe._jpegtran is None, reason="prepare's _jpegtran extension (libjpeg's warnings) not built")
def test_mild_jpeg_damage_is_named_by_deep(data, capsys):
    """16 bytes flipped inside one stored JPEG, its size kept and the hashes updated (issue 23):
    Pillow decodes it without a word; --deep reads it with prepare's libjpeg check and names the
    sample, the shard and libjpeg's message."""
    from PIL import Image

    url = manifest_of(data)["splits"]["train"]["shards"][1]["url"]
    key = first_key(data)
    damaged = flip_scan_bytes(dict((i.name, b) for i, b in read_members(data / url))[f"{key}.jpg"])
    Image.open(io.BytesIO(damaged)).load()
    rewrite_shard(data, url, replace_member(f"{key}.jpg", damaged))
    assert audit(data, workers=1, progress=False).ok  # sizes and hashes agree: only decoding can tell
    r = audit(data, deep=True, workers=1, progress=False)
    assert [(p.kind, p.shard, p.key) for p in r.errors] == [("undecodable", url, key)]
    assert r.errors[0].detail.startswith("corrupt: libjpeg: Corrupt JPEG data")
    rc, out, _ = run_cli([data, "--deep"], capsys)
    assert rc == 1 and key in out and "Corrupt JPEG data" in out


def test_deep_says_why_bytes_are_no_image(data):
    url = manifest_of(data)["splits"]["train"]["shards"][1]["url"]
    key = first_key(data)
    rewrite_shard(data, url, replace_member(f"{key}.jpg", b"\xff\xd8\xff" + b"no image here " * 20))
    details = [p.detail for p in audit(data, deep=True, workers=1, progress=False).errors if p.kind == "undecodable"]
    assert len(details) == 1 and " at 0x" not in details[0] and "bytes starting" in details[0]


def test_cls_disagrees_with_json(data):
    url = manifest_of(data)["splits"]["train"]["shards"][2]["url"]
    key = first_key(data, "train", 2)
    members = dict((i.name, b) for i, b in read_members(data / url))
    wrong = (int(members[f"{key}.cls"]) + 1) % len(manifest_of(data)["classes"])
    rewrite_shard(data, url, replace_member(f"{key}.cls", str(wrong).encode()))
    r = audit(data, workers=1, progress=False)
    assert [(p.kind, p.shard, p.key) for p in r.errors] == [("label_mismatch", url, key)]
    assert f".cls says {wrong}" in r.errors[0].detail


def test_consistent_relabel_is_caught_by_wnid_and_counts(data):
    """.cls and json both say another class: the train key's WNID and the class counts still disagree."""
    m = manifest_of(data)
    url = m["splits"]["train"]["shards"][0]["url"]
    key = first_key(data, "train", 0)
    members = dict((i.name, b) for i, b in read_members(data / url))
    meta = json.loads(members[f"{key}.json"])
    new = (meta["label"] + 1) % len(m["classes"])
    meta.update(label=new, wnid=m["classes"][new]["wnid"])

    def edit(ms):
        ms = replace_member(f"{key}.cls", str(new).encode())(ms)
        return replace_member(f"{key}.json", json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())(ms)
    rewrite_shard(data, url, edit)
    r = audit(data, workers=1, progress=False)
    assert {"wnid_mismatch", "class_count"} == kinds(r)
    assert next(p for p in r.errors if p.kind == "wnid_mismatch").key == key


def test_json_wnid_disagrees_with_class_table(data):
    url = manifest_of(data)["splits"]["val"]["shards"][1]["url"]
    key = first_key(data, "val", 1)
    members = dict((i.name, b) for i, b in read_members(data / url))
    meta = json.loads(members[f"{key}.json"])
    meta["wnid"] = "n09999999"
    rewrite_shard(data, url, replace_member(f"{key}.json", json.dumps(meta).encode()))
    r = audit(data, workers=1, progress=False)
    assert ("wnid_mismatch", key) in {(p.kind, p.key) for p in r.errors}


def test_duplicate_key_across_shards(data):
    m = manifest_of(data)
    url0, url1 = (sh["url"] for sh in m["splits"]["train"]["shards"][:2])
    taken, victim = first_key(data, "train", 0), first_key(data, "train", 1)

    def rename(members):
        for info, _ in members:
            if info.name.split(".")[0] == victim:
                info.name = taken + "." + info.name.split(".", 1)[1]
        return members
    rewrite_shard(data, url1, rename)
    r = audit(data, workers=2, progress=False)
    dup = [p for p in r.errors if p.kind == "duplicate_key"]
    assert [(p.shard, p.key) for p in dup] == [(url1, taken)] and url0 in dup[0].detail


def test_incomplete_sample_and_bad_cls(data):
    url = manifest_of(data)["splits"]["train"]["shards"][3]["url"]
    ms = read_members(data / url)
    k1, k2 = ms[0][0].name.split(".")[0], ms[3][0].name.split(".")[0]

    def edit(members):
        members = [(i, b) for i, b in members if i.name != f"{k1}.json"]
        return replace_member(f"{k2}.cls", b"7\n")(members)
    rewrite_shard(data, url, edit)
    r = audit(data, workers=1, progress=False)
    got = {(p.kind, p.key) for p in r.errors}
    assert ("sample_members", k1) in got and ("cls_invalid", k2) in got


def test_manifest_and_side_files_checked(data):
    m = manifest_of(data)
    m["totals"]["samples"] += 1
    (data / "manifest.json").write_text(dumps(m))
    wids = json.loads((data / "val.wids.json").read_text())
    wids["shardlist"][0]["md5sum"] = "0" * 32
    (data / "val.wids.json").write_text(json.dumps(wids))
    (data / "_info.json").unlink()
    r = audit(data, workers=1, progress=False)
    assert kinds(r) == {"manifest_inconsistent", "wids_mismatch", "info_missing"}
    assert "shardlist[0].md5sum" in next(p.detail for p in r.errors if p.kind == "wids_mismatch")


def test_schema_damage_is_reported_not_crashed_on(data):
    m = manifest_of(data)
    del m["name"]
    del m["splits"]["val"]["shards"][0]["sha256"]
    (data / "manifest.json").write_text(dumps(m))
    r = audit(data, workers=1, progress=False, expect="imagenet-1k")
    assert kinds(r) == {"manifest_schema"} and len(r.errors) == 2
    assert r.counts["train"]["samples_read"] == m["splits"]["train"]["num_samples"]  # the sound split is read


def test_duplicate_content_is_a_warning(data, capsys):
    m = manifest_of(data)
    train_members = read_members(data / m["splits"]["train"]["shards"][0]["url"])
    train_jpg = next(b for i, b in train_members if i.name.endswith(".jpg"))
    url = m["splits"]["val"]["shards"][0]["url"]
    key = first_key(data, "val", 0)
    rewrite_shard(data, url, replace_member(f"{key}.jpg", train_jpg))
    rc, out, _ = run_cli([data], capsys)
    assert rc == 0 and "duplicate_content_across_splits" in out and "leakage" in out
    r = audit(data, workers=1, progress=False)
    assert r.ok and r.duplicates["across_splits"]["groups"] == 1
    assert f"val:{key}" in r.duplicates["across_splits"]["examples"][0]


def test_expect_imagenet_1k_on_a_tiny_set(shard_set, capsys):
    rc, out, _ = run_cli([shard_set, "--expect", "imagenet-1k", "--quiet"], capsys)
    assert rc == 1 and "expect_classes" in out and "expect_count" in out and "incomplete" in out


# --- exit 2 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["no_manifest", "no_dir", "not_json", "not_a_manifest", "bad_split", "bad_expect"])
def test_cannot_run_exits_2_with_one_line(case, shard_set, tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    args = [d]
    if case == "no_dir":
        args = [tmp_path / "nope"]
    elif case == "not_json":
        (d / "manifest.json").write_text("{")
    elif case == "not_a_manifest":
        (d / "manifest.json").write_text("{}")
    elif case == "bad_split":
        args = [shard_set, "--splits", "test"]
    elif case == "bad_expect":
        args = [shard_set, "--expect", "imagenet-21k"]
    rc, out, err = run_cli(args, capsys)
    assert rc == 2 and out == ""
    assert err.startswith("audit-shards: error: ") and err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_data_exits_2(data, capsys):
    os.chmod(data, 0)
    try:
        rc, _, err = run_cli([data], capsys)
    finally:
        os.chmod(data, 0o755)
    assert rc == 2 and err.count("\n") == 1


# --- the pieces ---------------------------------------------------------------------------------------

def _tar(members, tail=b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, payload, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.size = len(payload) if kind == tarfile.REGTYPE else 0
            if kind == tarfile.SYMTYPE:
                info.linkname = "elsewhere"
            tf.addfile(info, io.BytesIO(payload))
    return buf.getvalue() + tail


def _scan(raw: bytes):
    problems = []
    samples = list(observe_samples(iter_tar(HashingReader(io.BytesIO(raw))), False, problems))
    return samples, problems


def test_observe_samples_groups_members_and_flags_odd_ones():
    """Grouping into samples, and the member-level findings; the tar reader itself: tests/pipeline/format/test_tar.py."""
    ok = [("a.cls", b"1", tarfile.REGTYPE), ("a.jpg", b"\xff\xd8\xff" + b"x" * 600, tarfile.REGTYPE),
          ("a.json", b"{}", tarfile.REGTYPE), ("b.cls", b"2", tarfile.REGTYPE)]
    samples, problems = _scan(_tar(ok))
    assert [(s.key, s.exts) for s in samples] == [("a", ["cls", "jpg", "json"]), ("b", ["cls"])] and not problems
    assert samples[0].jpg_head == b"\xff\xd8\xff" and samples[0].jpg_size == 603 and len(samples[0].digest) == 16
    _, problems = _scan(_tar([("../up.cls", b"1", tarfile.REGTYPE), ("l.jpg", b"", tarfile.SYMTYPE)]))
    assert [k for k, _, _ in problems] == ["tar_unsafe_name", "tar_not_regular"]
    with pytest.raises(TarFormatError):  # structural faults come from the reader, as exceptions
        _scan(_tar(ok, tail=b"garbage"))


def test_check_sample_rules():
    classes = [{"index": 0, "wnid": "n01440764", "name": "tench"}, {"index": 1, "wnid": "n01443537", "name": "fish"}]
    meta = {"label": 1, "wnid": "n01443537", "filename": "n01443537_7.JPEG", "width": 4, "height": 3,
            "orig_width": 4, "orig_height": 3, "fixes": []}
    good = SampleObservation("n01443537_7", ["cls", "jpg", "json"], b"1", json.dumps(meta).encode(), b"\xff\xd8\xff",
                             10, b"d" * 16, ("JPEG", "RGB", 4, 3))
    assert check_sample(good, "train", classes, "s") == []
    cmyk = SampleObservation(**{**good.__dict__, "decoded": ("JPEG", "CMYK", 5, 3), "cls": b"2"})
    assert [p.kind for p in check_sample(cmyk, "train", classes, "s")] == ["cls_out_of_range", "not_rgb",
                                                                          "size_mismatch"]


def test_duplicate_content_groups():
    d = lambda c: bytes([c]) * 16  # noqa: E731
    dups = find_duplicate_content({"train": (["a", "b", "c"], d(1) + d(2) + d(1)), "val": (["v"], d(2))})
    assert dups["within_train"] == {"images": 1, "groups": 1, "examples": [["a", "c"]]}
    assert dups["across_splits"] == {"images": 2, "groups": 1, "examples": [["train:b", "val:v"]]}


def test_expect_allows_for_recorded_rejects():
    facts = imagenet_1k_facts()
    wnids = [c.wnid for c in imagenet_1k_classes()]
    counts = {w: 50 for w in wnids}
    counts[wnids[7]] = 49
    m = {"classes": [{"index": i, "wnid": w, "name": w} for i, w in enumerate(wnids)],
         "splits": {"val": {"num_samples": 49999, "class_counts": counts}},
         "rejected": [{"split": "val", "key": "ILSVRC2012_val_00000042", "reason": "truncated"}]}
    assert check_expect(m, facts, wnids, ["val"], "imagenet-1k") == []
    m["rejected"] = []
    assert [p.kind for p in check_expect(m, facts, wnids, ["val"], "imagenet-1k")] == ["expect_count",
                                                                                      "expect_class_count"]
    assert [p.kind for p in check_expect(m, facts, wnids, ["train", "val"], "imagenet-1k")][0] == \
        "expect_split_missing"


def test_expect_counts_skipped_images_like_rejected_ones_but_not_names_that_are_never_images():
    facts = imagenet_1k_facts()
    wnids = [c.wnid for c in imagenet_1k_classes()]
    counts = {w: 50 for w in wnids}
    counts[wnids[7]] = 49
    skip = {"split": "val", "key": "ILSVRC2012_val_00000042", "source": "ILSVRC2012_img_val.tar/ILSVRC2012_val_00000042.JPEG",
            "reason": "not_an_image"}  # an image file whose bytes are no image any more
    m = {"classes": [{"index": i, "wnid": w, "name": w} for i, w in enumerate(wnids)],
         "splits": {"val": {"num_samples": 49999, "class_counts": counts}}, "rejected": [], "skipped": [skip]}
    assert check_expect(m, facts, wnids, ["val"], "imagenet-1k") == []
    junk = {**skip, "key": "__ILSVRC2012_val_00000042", "source": "ILSVRC2012_img_val.tar/._ILSVRC2012_val_00000042.JPEG"}
    m["skipped"] = [junk]  # macOS's AppleDouble companion: not an image of the dataset
    assert [p.kind for p in check_expect(m, facts, wnids, ["val"], "imagenet-1k")] == ["expect_count",
                                                                                      "expect_class_count"]
    m["splits"]["val"] = {"num_samples": 50000, "class_counts": {w: 50 for w in wnids}}
    assert check_expect(m, facts, wnids, ["val"], "imagenet-1k") == []  # ... and it makes no image too many


def test_storage_local_and_file_url(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.bin").write_bytes(b"12345")
    for base in (str(tmp_path), f"file://{tmp_path}"):
        p = storage.join(base, "sub/x.bin")
        assert storage.exists(p) and storage.size(p) == 5 and not storage.exists(storage.join(base, "nope"))
        with storage.open_url(p) as f:
            assert f.read() == b"12345"
        assert storage.listdir(storage.join(base, "sub")) == ["x.bin"]
        assert storage.isdir(storage.join(base, "sub"))
    with pytest.raises(AuditError):
        load_manifest(str(tmp_path))
