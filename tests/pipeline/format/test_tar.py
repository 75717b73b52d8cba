"""The one tar reader, strict and lenient, over real tars: Python's tarfile (ustar, GNU, pax), GNU tar,
and our own writer (prepare-shards); and the key rules."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile

import pytest

from imagenet_shards.pipeline.format.keys import key_for, split_key, train_key_wnid
from imagenet_shards.pipeline.format.tar import HashingReader, TarFormatError, iter_tar, parse_header

LONG_DIR = "d" * 120  # longer than ustar's 100-byte name field on its own


def make_tar(members, fmt=tarfile.USTAR_FORMAT) -> bytes:
    """A tar written by Python's tarfile; members are (name, bytes) or (name, bytes, type)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data, *kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind[0] if kind else tarfile.REGTYPE
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            if info.type == tarfile.SYMTYPE:
                info.linkname = "elsewhere"
            tf.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return buf.getvalue()


def tarfile_view(raw: bytes) -> list[tuple[str, bytes]]:
    """(name, bytes) of every regular member, as Python's tarfile reads them (the reference)."""
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf.getmembers() if m.isfile()]


def read(raw: bytes, strict: bool = True, **kw) -> list:
    return list(iter_tar(io.BytesIO(raw), strict=strict, **kw))


def end_of_members(raw: bytes) -> int:
    """Offset of the end-of-archive marker (where the last member's padding ends)."""
    return max(m.offset + 512 + m.size + (-m.size % 512) for m in read(raw))


SAMPLES = [("a.cls", b"1"), ("a.jpg", b"\xff\xd8\xff" + bytes(range(256)) * 3), ("a.json", b"{}"), ("b.cls", b"22")]


# ----------------------------------------------------------------------------- reading what others wrote

@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("strict", [True, False])
def test_reads_what_tarfile_writes(fmt, strict):
    members = SAMPLES + [(f"{LONG_DIR}/k.cls", b"3"), ("dir/ünï.jpg", b"x" * 513), ("empty.json", b"")]
    if fmt == tarfile.USTAR_FORMAT:  # ustar has no long names beyond prefix + name, nor non-ASCII pax paths
        members[-3] = (f"{'p' * 90}/{'n' * 90}.cls", b"3")
    raw = make_tar(members, fmt)
    got = read(raw, strict)
    assert [(m.name, m.data) for m in got] == tarfile_view(raw) == [(n, d) for n, d in members]
    assert [(m.key, m.ext) for m in got] == [split_key(n) for n, _ in members]
    assert all(m.type == b"0" and m.size == len(m.data) for m in got)


def test_gnu_and_posix_tar_from_the_tar_command(tmp_path):
    if shutil.which("tar") is None:
        pytest.skip("no tar command")
    src = tmp_path / "src"
    (src / LONG_DIR).mkdir(parents=True)
    (src / LONG_DIR / "k.cls").write_bytes(b"7")
    (src / "s.jpg").write_bytes(b"\xff\xd8" + b"j" * 2000)
    (src / "link.jpg").symlink_to("s.jpg")
    for fmt in ("gnu", "posix"):
        out = tmp_path / f"{fmt}.tar"
        subprocess.run(["tar", f"--format={fmt}", "-cf", str(out), "-C", str(src), "."], check=True)
        raw = out.read_bytes()
        strict = read(raw)
        lenient = read(raw, strict=False)
        assert [(m.name, m.data) for m in lenient] == tarfile_view(raw)  # regular files only
        assert {m.name for m in lenient} == {f"./{LONG_DIR}/k.cls", "./s.jpg"}
        kinds = {m.name: m.type for m in strict}
        assert kinds["./link.jpg"] == b"2" and kinds[f"./{LONG_DIR}/"] == b"5"  # strict yields them all


def test_reads_what_prepare_shards_writes(synthetic_shards):
    manifest = json.loads((synthetic_shards / "manifest.json").read_text())
    for split in manifest["splits"].values():
        for entry in split["shards"]:
            raw = (synthetic_shards / entry["url"]).read_bytes()
            r = HashingReader(io.BytesIO(raw), ("sha256", "md5"))
            strict = list(iter_tar(r))
            assert r.hexdigest("sha256") == entry["sha256"] and r.hexdigest("md5") == entry["md5"]
            lenient = read(raw, strict=False)
            assert [(m.name, m.data) for m in strict] == [(m.name, m.data) for m in lenient] == tarfile_view(raw)
            assert len({m.key for m in strict}) == entry["num_samples"]
            assert [m.ext for m in strict] == ["cls", "jpg", "json"] * entry["num_samples"]


# ----------------------------------------------------------------------------- faults, mode by mode

def test_member_cut_short_raises_in_both_modes():
    raw = make_tar(SAMPLES)
    cut = raw[:1024 + 512 + 100]  # inside a.jpg's body
    for strict in (True, False):
        with pytest.raises(TarFormatError) as e:
            read(cut, strict, where="s3://b/x.tar")
        assert e.value.kind == "tar_truncated" and e.value.key == "a" and "a.jpg at byte 1024" in e.value.detail
        assert str(e.value).startswith("s3://b/x.tar: ") and "run audit-shards" in str(e.value)
        assert "\n" not in str(e.value)


def test_header_cut_short_raises_in_both_modes():
    raw = make_tar(SAMPLES)
    for strict in (True, False):
        with pytest.raises(TarFormatError, match="header at byte 2560 is cut short") as e:
            read(raw[:2560 + 100], strict)
        assert e.value.kind == "tar_truncated"


def test_missing_end_marker_strict_raises_lenient_ends():
    raw = make_tar(SAMPLES)
    cut = raw[:end_of_members(raw)]
    with pytest.raises(TarFormatError, match="without the end-of-archive marker") as e:
        read(cut)
    assert e.value.kind == "tar_truncated"
    assert [(m.name, m.data) for m in read(cut, strict=False)] == SAMPLES  # like tar(1)


def test_trailing_garbage_strict_raises_lenient_stops_at_the_marker():
    raw = make_tar(SAMPLES) + b"garbage"
    with pytest.raises(TarFormatError) as e:
        read(raw)
    assert e.value.kind == "tar_trailing_garbage" and f"at byte {len(raw) - 7}" in e.value.detail
    assert [(m.name, m.data) for m in read(raw, strict=False)] == SAMPLES


def test_bad_checksum_raises_in_both_modes():
    raw = bytearray(make_tar(SAMPLES))
    raw[1024 + 10] ^= 0x20  # a name byte of the second header (after a.cls's header and body block)
    for strict in (True, False):
        with pytest.raises(TarFormatError, match="invalid tar header at byte 1024") as e:
            read(bytes(raw), strict)
        assert e.value.kind == "tar_bad_header"


def test_non_regular_members_strict_yields_lenient_skips():
    raw = make_tar([("x/", b"", tarfile.DIRTYPE), ("l.jpg", b"", tarfile.SYMTYPE)] + SAMPLES)
    assert [(m.name, m.type) for m in read(raw)][:2] == [("x/", b"5"), ("l.jpg", b"2")]
    assert [(m.name, m.data) for m in read(raw, strict=False)] == SAMPLES


def test_old_style_header_with_a_slash_is_a_directory():
    raw = bytearray(make_tar([("x/", b"", tarfile.DIRTYPE)] + SAMPLES[:1]))
    raw[156] = 0  # type NUL (pre-POSIX regular file) and a name ending in '/': a directory, as tarfile says
    raw[148:156] = b" " * 8
    raw[148:155] = b"%06o\0" % sum(raw[:512])
    assert [m.name for m in read(bytes(raw), strict=False)] == ["a.cls"]


def test_gnu_base256_size_and_signed_checksum():
    header = bytearray(make_tar([("a.jpg", b"x" * 700)])[:512])
    header[124:136] = b"\x80" + (700).to_bytes(11, "big")
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % sum(header)
    assert parse_header(bytes(header)) == ("a.jpg", 700, b"0")
    header[0:1] = b"\xe4"  # a name byte >= 128: the signed sum differs, and is accepted too
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % sum(b - 256 if b > 127 else b for b in header)
    assert parse_header(bytes(header))[1] == 700


# ----------------------------------------------------------------------------- skipping

class Stream(io.RawIOBase):
    """A file that records how many bytes were read from it; optionally not seekable."""

    def __init__(self, raw: bytes, seekable: bool):
        self._f, self._seekable, self.read_bytes = io.BytesIO(raw), seekable, 0

    def seekable(self):
        return self._seekable

    def seek(self, pos, whence=0):
        if not self._seekable:
            raise io.UnsupportedOperation("seek")
        return self._f.seek(pos, whence)

    def readable(self):
        return True

    def readinto(self, b):
        data = self._f.read(len(b))
        b[:len(data)] = data
        self.read_bytes += len(data)
        return len(data)


@pytest.mark.parametrize("seekable", [True, False])
def test_declined_members_are_skipped_by_seek_where_possible(seekable):
    big = bytes(3 << 20)
    raw = make_tar([("a.cls", b"1"), ("a.jpg", big), ("b.cls", b"2"), ("b.jpg", big)])
    f = Stream(raw, seekable)
    got = list(iter_tar(f, want=lambda key, ext: ext == "cls", strict=False))
    assert [(m.name, m.data) for m in got] == [("a.cls", b"1"), ("a.jpg", None), ("b.cls", b"2"), ("b.jpg", None)]
    assert (f.read_bytes < len(raw) // 2) if seekable else (f.read_bytes >= len(raw) - 10240)


@pytest.mark.parametrize("seekable", [True, False])
def test_a_skipped_member_cut_short_is_still_found(seekable):
    raw = make_tar([("a.cls", b"1"), ("a.jpg", bytes(3 << 20))])
    with pytest.raises(TarFormatError, match=r"member a.jpg at byte 1024 is cut short \(1000 of 3145728 bytes\)"):
        list(iter_tar(Stream(raw[:1024 + 512 + 1000], seekable), want=lambda key, ext: ext == "cls", strict=False))


def test_strict_hashes_what_it_skips():
    raw = make_tar(SAMPLES)
    r = HashingReader(io.BytesIO(raw), ("sha256",), block=1024)
    list(iter_tar(r, want=lambda key, ext: False))
    import hashlib
    assert r.hexdigest("sha256") == hashlib.sha256(raw).hexdigest() and r.bytes_read == len(raw)


# ----------------------------------------------------------------------------- keys

def test_split_key_is_webdatasets_rule():
    assert split_key("n01440764_10026.cls") == ("n01440764_10026", "cls")
    assert split_key("train/a.b.c/k.seg.png") == ("train/a.b.c/k", "seg.png")  # first dot of the basename
    assert split_key("noext") == ("noext", "")


def test_key_for_source_names():
    assert key_for("n01440764_10026.JPEG") == "n01440764_10026"
    assert key_for("x/ILSVRC2012_val_00000001.JPEG") == "ILSVRC2012_val_00000001"
    assert key_for("._n01440764_2.JPEG") == "__n01440764_2"  # AppleDouble: the leading dot is kept, as '_'
    assert key_for("a.b.JPEG") == "a_b" and key_for(".hidden") == "_hidden"
    assert train_key_wnid("n01440764_10026") == "n01440764" and train_key_wnid("ILSVRC2012_val_00000001") is None


def _cut_tar_in_worker(data: bytes) -> None:
    list(iter_tar(io.BytesIO(data), where="s3://bucket/train-000001.tar"))


def test_a_tar_format_error_pickles_back_as_itself_from_a_worker_process():
    import pickle

    from imagenet_shards.pipeline.parallel import run_jobs

    e = TarFormatError("tar_truncated", "member a.jpg is cut short", key="a", where="s3://b/x.tar")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is TarFormatError and str(back) == str(e)
    assert (back.kind, back.detail, back.key, back.where) == ("tar_truncated", "member a.jpg is cut short", "a",
                                                              "s3://b/x.tar")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("a.jpg")
        info.size = 3000
        tf.addfile(info, io.BytesIO(b"x" * 3000))
    cut = buf.getvalue()[:2048]  # through a real pool (two workers, two jobs): what derive, adopt, audit use
    with pytest.raises(TarFormatError, match="s3://bucket/train-000001.tar: .*cut short") as raised:
        for _ in run_jobs(_cut_tar_in_worker, [(cut,), (cut,)], workers=2):
            pass
    assert raised.value.kind == "tar_truncated"
