"""Object storage end to end, against real servers on 127.0.0.1 (tests/fixtures/servers.py):
prepare-shards -> S3 (SeaweedFS) -> audit-shards -> the loader, the same over plain HTTP, interrupted
uploads, injected faults, and no credentials anywhere they should not be."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.audit.cli import main as audit_main
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.tools.inspect_shards import main as inspect_main
from imagenet_shards.pipeline.tools.synthetic.generate import generate
from imagenet_shards.train import loader as D
from imagenet_shards.train.loader.cache import ShardCache
from tests.fixtures.servers import FAKE_CREDENTIALS, FaultPlan, fault_proxy, serve_http

SHARD = 10
pytestmark = pytest.mark.usefixtures("fast_retries")


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ilsvrc-remote")
    generate(out, classes=4, train_per_class=8, val_per_class=3, seed=5, quirks=True, layouts=("ilsvrc",),
             progress=False)
    return out


def source_args(archives: Path) -> list[str]:
    return ["--train", str(archives / "ILSVRC2012_img_train.tar"), "--val", str(archives / "ILSVRC2012_img_val.tar"),
            "--devkit", str(archives / "ILSVRC2012_devkit_t12.tar.gz"), "--shard-samples", str(SHARD),
            "--workers", "2", "--quiet"]


@pytest.fixture(scope="module")
def local_shards(archives, tmp_path_factory) -> Path:
    """The same job written to a local folder: the reference every remote run must equal byte for byte."""
    out = tmp_path_factory.mktemp("local-shards")
    assert prepare_main(source_args(archives) + ["--out", str(out)]) == 0
    return out


def manifest_of(local: Path) -> dict:
    return json.loads((local / "manifest.json").read_text())


def shard_entries(m: dict):
    return [sh for s in m["splits"].values() for sh in s["shards"]]


def record_name(url: str) -> str:
    """'val/imagenet1k-validation-000001.tar' -> 'val-000001.json' (the record prepare-shards keeps)."""
    return f"{url.split('/')[0]}-{int(url.rsplit('-', 1)[1][:6]):06d}.json"


def expect_same_set_in(bucket, prefix: str, local: Path) -> None:
    """Objects under `prefix` are exactly the local run's files (plus job state), byte for byte."""
    assert bucket.get(f"{prefix}/manifest.json") == (local / "manifest.json").read_bytes()
    for name in ("_info.json", "train.wids.json", "val.wids.json"):
        assert bucket.get(f"{prefix}/{name}") == (local / name).read_bytes()
    entries = shard_entries(manifest_of(local))
    for sh in entries:
        assert hashlib.sha256(bucket.get(f"{prefix}/{sh['url']}")).hexdigest() == sh["sha256"], sh["url"]
    shards = [k for k in bucket.keys(prefix + "/") if k.endswith(".tar")]
    assert shards == sorted(f"{prefix}/{sh['url']}" for sh in entries)


# ----------------------------------------------------------------------------- buckets: S3 and GCS

@pytest.mark.timeout(120)
def test_prepare_to_a_bucket_then_audit_there(bucket, archives, local_shards, tmp_path, capsys):
    out = bucket.url("imagenet")
    staging = tmp_path / "staging"
    args = source_args(archives) + ["--out", out, "--staging", str(staging), "--json",
                                    "--storage-option", f"endpoint_url={bucket.endpoint}", *bucket.cli]
    assert prepare_main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["complete"] and summary["shards_built"] == summary["shards"] and summary["out"] == out
    expect_same_set_in(bucket, "imagenet", local_shards)
    assert [p for p in staging.rglob("*") if p.is_file()] == []  # every staged shard went up and was removed
    rec = json.loads(bucket.get("imagenet/_prepare/records/train-000000.json"))
    assert rec["etag"] == storage.info(storage.join(out, rec["url"])).etag

    assert prepare_main(args) == 0  # rerun: everything verified by listing + records, nothing rebuilt
    again = json.loads(capsys.readouterr().out)
    assert again["shards_built"] == 0 and again["shards_reused"] == summary["shards"]

    report = tmp_path / "audit.json"
    assert audit_main([out, "--quiet", "--workers", "2", "--json", str(report), *bucket.cli]) == 0
    r = json.loads(report.read_text())
    assert r["ok"] and r["notes"] == [] and r["counts"]["train"]["samples_read"] == summary["splits"]["train"]["samples"]
    capsys.readouterr()

    # listing works on buckets: an unlisted shard is found, a missing one named
    bucket.put("imagenet/train/imagenet1k-train-999999.tar", b"stray")
    bucket.delete("imagenet/val/imagenet1k-validation-000000.tar")
    assert audit_main([out, "--quiet", "--workers", "1", *bucket.cli]) == 1
    text = capsys.readouterr().out
    assert "shard_extra" in text and "train/imagenet1k-train-999999.tar" in text
    assert "val/imagenet1k-validation-000000.tar" in text


@pytest.mark.timeout(120)
def test_derive_from_a_bucket_into_a_bucket_gives_the_local_derive(bucket, archives, local_shards, tmp_path, capsys):
    from tests.fixtures.synthetic import PIXEL_MAX_SIDE, derive_pixels

    local = derive_pixels(local_shards, tmp_path / "pixels")
    opts = ["--storage-option", f"endpoint_url={bucket.endpoint}", *bucket.cli]
    src, out = bucket.url("jpeg"), bucket.url("pixels")
    assert prepare_main(source_args(archives) + ["--out", src, "--staging", str(tmp_path / "s1"), *opts]) == 0
    args = ["derive", src, "--max-side", str(PIXEL_MAX_SIDE), "--out", out, "--staging", str(tmp_path / "s2"),
            "--workers", "2", "--quiet", *opts]
    assert prepare_main(args) == 0
    m, want = json.loads(bucket.get("pixels/manifest.json")), manifest_of(local)
    assert m["derived_from"]["url"] == src and want["derived_from"]["sha256"] == m["derived_from"]["sha256"]
    assert {**m, "derived_from": None} == {**want, "derived_from": None}  # the same set but for where it came from
    for sh in shard_entries(want):
        assert bucket.get(f"pixels/{sh['url']}") == (local / sh["url"]).read_bytes(), sh["url"]
    assert audit_main([out, "--quiet", "--workers", "1", *bucket.cli]) == 0
    capsys.readouterr()


@pytest.mark.timeout(120)
def test_resume_in_a_bucket_rebuilds_only_what_the_records_do_not_vouch_for(bucket, archives, local_shards, capsys):
    out = bucket.url("resume")
    args = source_args(archives) + ["--out", out, "--json", *bucket.cli]  # S3: endpoint from AWS_ENDPOINT_URL
    assert prepare_main(args) == 0
    capsys.readouterr()
    entries = shard_entries(manifest_of(local_shards))
    same_size = entries[1]["url"]
    good = bucket.get(f"resume/{same_size}")
    bucket.put(f"resume/{same_size}", bytes(len(good)))        # replaced behind our back: same size, other ETag
    bucket.put(f"resume/{entries[2]['url']}", good[:1000])     # truncated
    bucket.delete(f"resume/{entries[3]['url']}")               # gone
    bucket.delete(f"resume/_prepare/records/{record_name(entries[4]['url'])}")  # shard fine, record gone
    assert prepare_main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["shards_built"] == 4
    expect_same_set_in(bucket, "resume", local_shards)


@pytest.mark.timeout(120)
def test_upload_that_fails_midway_then_rerun_is_consistent(bucket, archives, local_shards, monkeypatch, capsys):
    """The uploader dies after two shards, leaving a half-written object under a final name (what a
    non-atomic store could do; S3 itself never shows a partial object). No record vouches for it, so
    the manifest never trusts it: the rerun rebuilds it and the set is exactly the clean one."""
    real_put = storage.put_file
    calls = []

    def dying_put(local, url):
        calls.append(url)
        if len(calls) == 3:
            data = Path(local).read_bytes()
            storage.write_bytes(url, data[:len(data) // 2])
            raise ConnectionAbortedError("uploader killed mid-upload (test)")
        real_put(local, url)

    monkeypatch.setattr(storage, "put_file", dying_put)
    out = bucket.url("broken")
    args = source_args(archives) + ["--out", out, "--workers", "1", *bucket.cli]
    assert prepare_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "\n" not in err.strip()
    assert "broken/manifest.json" not in bucket.keys("broken/")
    records = [k for k in bucket.keys("broken/_prepare/records/")]
    assert len(records) == 2
    monkeypatch.setattr(storage, "put_file", real_put)
    assert prepare_main(args) == 0
    expect_same_set_in(bucket, "broken", local_shards)
    assert audit_main([out, "--quiet", "--workers", "1", *bucket.cli]) == 0


@pytest.mark.timeout(180)
def test_kill_9_during_uploads_then_rerun_gives_the_clean_set(bucket, archives, local_shards, tmp_path):
    out = bucket.url("killed")
    cmd = [sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", *source_args(archives), "--out", out,
           "--workers", "1", "--staging", str(tmp_path / "stage"), *bucket.cli]
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(bucket.keys("killed/_prepare/records/")) < 2 and proc.poll() is None:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group, worker included: like a machine dying mid-upload
    proc.wait()
    assert "killed/manifest.json" not in bucket.keys("killed/"), "killed too late to test anything"
    assert prepare_main(cmd[3:]) == 0
    expect_same_set_in(bucket, "killed", local_shards)
    assert [p for p in (tmp_path / "stage").rglob("*") if p.is_file()] == []
    assert audit_main([out, "--quiet", "--workers", "1", *bucket.cli]) == 0


@pytest.mark.timeout(120)
def test_staged_shards_follow_the_umask_before_upload(s3, archives, local_shards, tmp_path, monkeypatch):
    """In the staging area of a URL OUT, every shard is 0644 under umask 022 when it is uploaded."""
    import stat

    real_put, modes = storage.put_file, {}

    def recording_put(local, url):
        modes[url] = stat.S_IMODE(os.stat(local).st_mode)
        real_put(local, url)

    monkeypatch.setattr(storage, "put_file", recording_put)
    out = s3.url("modes")
    old = os.umask(0o022)
    try:
        assert prepare_main(source_args(archives) + ["--out", out, "--workers", "1",
                                                     "--staging", str(tmp_path / "stage")]) == 0
    finally:
        os.umask(old)
    assert len(modes) == len(shard_entries(manifest_of(local_shards)))
    assert {u: m for u, m in modes.items() if m != 0o644} == {}


@pytest.mark.timeout(60)
def test_missing_bucket_is_one_clear_line(bucket, archives, capsys):
    missing = bucket.url().split("://")[0] + "://no-such-bucket-here/x"
    assert prepare_main(source_args(archives) + ["--out", missing, *bucket.cli]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and missing in err
    assert audit_main([missing, *bucket.cli]) == 2
    err = capsys.readouterr().err.strip()
    assert "no-such-bucket-here" in err and "\n" not in err


# ----------------------------------------------------------------------------- HTTP

@pytest.mark.timeout(60)
def test_audit_over_http_passes_and_notes_the_listing_it_cannot_do(local_shards, tmp_path, capsys):
    with serve_http(local_shards) as base:
        report = tmp_path / "audit.json"
        assert audit_main([base, "--workers", "2", "--json", str(report)]) == 0
        text = capsys.readouterr().out
        assert "note: not checked for shards the manifest does not list: http:// cannot list" in text
        r = json.loads(report.read_text())
        assert r["ok"] and r["counts"]["val"]["samples_read"] == manifest_of(local_shards)["splits"]["val"]["num_samples"]
        assert inspect_main([base, "--stats", "--out", str(tmp_path / "stats.png")]) == 0
        key = keys_read(str(local_shards), "val")[0]
        assert inspect_main([base, "--key", key]) == 0 and key in capsys.readouterr().out
        # a shard the server does not have is named, with the credentials in the URL redacted
        with_userinfo = base.replace("http://", "http://auditor:s3cr3t-pw@")
        assert audit_main([with_userinfo, "--quiet", "--workers", "1"]) == 0
        assert audit_main([with_userinfo + "/nowhere", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "s3cr3t-pw" not in err and "auditor" not in err and "***@127.0.0.1" in err


@pytest.mark.timeout(60)
def test_audit_over_http_with_faults(local_shards):
    plan = FaultPlan(error_every=10, reset_every=7, delay_every=5, delay_s=0.02)
    with serve_http(local_shards) as base, fault_proxy(base, plan) as proxy:
        assert audit_main([proxy, "--quiet", "--workers", "2"]) == 0
    assert plan.faults >= 2


# ----------------------------------------------------------------------------- the loader

def loader_epoch(data: str, split: str, *, workers: int = 2, loaders: list | None = None,
                 **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """One eval-mode epoch (centre crops, a fixed order for a given worker count), as (images, labels).
    `loaders`, if given, gets the loader (for its store_stats)."""
    ld = D.make_loader(data, split, 4, train=False, workers=workers, val_resize=40, val_crop=32, **kw)
    images, labels = zip(*ld)
    if loaders is not None:
        loaders.append(ld)
    return torch.cat(images), torch.cat(labels)


def keys_read(data: str, split: str) -> list[str]:
    shards = D.split_shards(D.read_manifest(data), data, split)
    pieces = [D.Piece(i, 0, s.num_samples) for i, s in enumerate(shards)]
    return [r.key for r in D.read_pieces(shards, pieces)]


@pytest.fixture(scope="module")
def local_epochs(local_shards) -> dict:
    return {split: (loader_epoch(str(local_shards), split), keys_read(str(local_shards), split))
            for split in ("train", "val")}


def expect_the_local_epochs(data: str, local_epochs: dict, **kw) -> None:
    """The loader's epochs of both splits from `data` are the local ones, in order, pixel for pixel."""
    for split in ("train", "val"):
        (want_images, want_labels), _ = local_epochs[split]
        images, labels = loader_epoch(data, split, **kw)
        assert torch.equal(labels, want_labels) and torch.equal(images, want_images)


def expect_exactly_once(data: str, local_shards: Path, local_epochs: dict, **kw) -> None:
    """Every sample of both splits, once each, in the same order and pixel for pixel as read locally."""
    m = manifest_of(local_shards)
    for split in ("train", "val"):
        keys = keys_read(data, split)
        assert keys == local_epochs[split][1] and len(set(keys)) == len(keys) == m["splits"][split]["num_samples"]
    expect_the_local_epochs(data, local_epochs, **kw)


@pytest.mark.timeout(120)
def test_prepare_audit_load_from_a_bucket(bucket, archives, local_shards, local_epochs):
    out = bucket.url("e2e")
    assert prepare_main(source_args(archives) + ["--out", out, *bucket.cli]) == 0
    assert audit_main([out, "--quiet", "--workers", "2", *bucket.cli]) == 0
    expect_exactly_once(out, local_shards, local_epochs)


@pytest.mark.timeout(120)
def test_loader_from_s3_through_faults_with_botocore_retries_off(s3, archives, local_shards, local_epochs,
                                                                 s3_endpoint):
    out = s3.url("faulty")
    assert prepare_main(source_args(archives) + ["--out", out]) == 0
    plan = FaultPlan(error_every=10, reset_every=4, delay_every=5, delay_s=0.02)
    with fault_proxy(s3_endpoint, plan) as proxy:
        storage.set_options("s3", {"endpoint_url": proxy, "config_kwargs": {"retries": {"max_attempts": 1}}})
        expect_exactly_once(out, local_shards, local_epochs)
    assert plan.counts["503"] >= 3 and plan.counts["reset"] >= 3, plan.counts


@pytest.mark.slow  # ~25 s; the default run keeps GCS end to end (above) and faults over S3 and HTTP
@pytest.mark.timeout(120)
def test_loader_from_gcs_through_faults(gcs, archives, local_shards, local_epochs):
    out = gcs.url("faulty")
    assert prepare_main(source_args(archives) + ["--out", out, *gcs.cli]) == 0
    plan = FaultPlan(error_every=10, reset_every=4, delay_every=5, delay_s=0.02)
    with fault_proxy(gcs.endpoint, plan) as proxy:
        storage.set_options("gs", {**gcs.options, "endpoint_url": proxy})
        expect_exactly_once(out, local_shards, local_epochs)
    assert plan.counts["503"] >= 3 and plan.counts["reset"] >= 3, plan.counts


@pytest.mark.timeout(120)
def test_load_over_http_plain_and_through_faults(local_shards, local_epochs):
    with serve_http(local_shards) as base:
        expect_exactly_once(base, local_shards, local_epochs)
        plan = FaultPlan(error_every=10, reset_every=7, delay_every=5, delay_s=0.02)
        with fault_proxy(base, plan) as proxy:
            expect_exactly_once(proxy, local_shards, local_epochs)
    assert plan.counts["503"] >= 3 and plan.counts["reset"] >= 3  # ~10% 503s, resets mid-body


@pytest.mark.timeout(60)
def test_permanently_missing_shard_fails_fast_naming_it(local_shards, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(local_shards, copy)
    gone = manifest_of(local_shards)["splits"]["val"]["shards"][1]["url"]
    (copy / gone).unlink()
    with serve_http(copy) as base:
        data = base.replace("http://", "http://trainer:hunter2-pw@")
        t0 = time.monotonic()
        with pytest.raises(FileNotFoundError) as e:
            loader_epoch(data, "val", workers=1)
        assert time.monotonic() - t0 < 20  # a 404 is not retried
    msg = str(e.value)
    assert gone in msg and "not found" in msg and "hunter2-pw" not in msg and "***@127.0.0.1" in msg


@pytest.mark.timeout(120)
def test_shard_cache_fetches_each_shard_once_across_epochs(local_shards, local_epochs, tmp_path):
    plan = FaultPlan(error_every=0, reset_every=0, delay_every=0)  # a request counter
    cache = tmp_path / "cache"
    with serve_http(local_shards) as base, fault_proxy(base, plan) as proxy:
        first = loader_epoch(proxy, "val", cache_dir=str(cache), cache_bytes=1 << 30)
        fetched = [p for m, p in plan.seen if p.endswith(".tar") and m == "GET"]
        plan.seen.clear()
        second = loader_epoch(proxy, "val", cache_dir=str(cache), cache_bytes=1 << 30)
        assert [p for m, p in plan.seen if p.endswith(".tar")] == []  # from the cache only
    n = manifest_of(local_shards)["splits"]["val"]["num_shards"]
    assert len({p for p in fetched}) == n and len(os.listdir(cache)) == n
    (want_images, want_labels), _ = local_epochs["val"]
    for images, labels in (first, second):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


@pytest.mark.timeout(60)
def test_shard_cache_keeps_its_cap_and_evicts_least_recently_used(local_shards, tmp_path):
    entries = shard_entries(manifest_of(local_shards))[:4]
    sizes = [e["bytes"] for e in entries]
    cache = ShardCache(str(tmp_path / "c"), max_bytes=sizes[0] + sizes[1] + sizes[2] - 1)  # fits any two
    stale = Path(cache.folder) / ".0123-imagenet1k-train-000009.tar.4194999-0a1b2c3d.tmp"  # a killed download (no such pid)
    stale.write_bytes(b"partial")
    with serve_http(local_shards) as base:
        urls = [f"{base}/{e['url']}" for e in entries]

        def use(i):
            with cache.open(urls[i]) as f:
                assert hashlib.sha256(f.read()).hexdigest() == entries[i]["sha256"]
            time.sleep(0.01)  # distinct mtimes

        use(0), use(1), use(0)   # 1 is now the least recently used
        use(2)                   # evicts 1, keeps 0
        cached = set(os.listdir(cache.folder))
        assert cached == {os.path.basename(cache.path_for(urls[i])) for i in (0, 2)}  # and the stale temp is gone
        assert cache.size() <= cache.max_bytes
        small = ShardCache(str(tmp_path / "tiny"), max_bytes=100)  # smaller than any shard: streamed, not kept
        with small.open(urls[3]) as f:
            assert len(f.read()) == sizes[3]
        assert os.listdir(small.folder) == []


# ----------------------------------------------------------------------------- credentials

TINY_TRAIN = ["--arch", "resnet18", "--res", "32", "--val-res", "36", "--val-crop", "32", "--batch-size", "8",
              "--workers", "2", "--device", "cpu", "--log-interval", "1", "--amp", "none", "--epochs", "1"]


@pytest.mark.timeout(180)
def test_no_credentials_in_manifests_logs_metrics_or_errors(s3, archives, tmp_path, capsys, caplog, monkeypatch):
    from imagenet_shards.train.trainer.cli import main as train_main

    caplog.set_level(logging.INFO, logger="pipeline")
    caplog.set_level(logging.INFO, logger="train")
    out = s3.url("no-leaks")
    report = tmp_path / "audit.json"
    assert prepare_main(source_args(archives) + ["--out", out, "--json"]) == 0
    assert audit_main([out, "--json", str(report), "--workers", "1"]) == 0
    # credentials as storage options this time (not the environment): used, and still written nowhere
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    run = tmp_path / "run"
    creds = ["--storage-option", f"key={FAKE_CREDENTIALS[0]}", "--storage-option", f"secret={FAKE_CREDENTIALS[1]}"]
    assert train_main(["--data", out, "--out", str(run), "--cache-dir", str(tmp_path / "cache"),
                       "--cache-size", "1GB", *TINY_TRAIN, *creds]) == 0
    assert (run / "metrics.jsonl").exists() and list((tmp_path / "cache").iterdir())
    # error paths, with secrets in the URLs
    assert train_main(["--data", "s3://no-such-bucket-here/x", "--out", str(tmp_path / "r2"), *TINY_TRAIN,
                       *creds]) == 2
    with serve_http(tmp_path) as base:
        leaky = base.replace("http://", f"http://{FAKE_CREDENTIALS[0]}:{FAKE_CREDENTIALS[1]}@") + "/nowhere"
        assert audit_main([leaky]) == 2
        assert train_main(["--data", leaky, "--out", str(tmp_path / "r3"), *TINY_TRAIN]) == 2
        signed = f"{base}/nowhere?X-Amz-Credential={FAKE_CREDENTIALS[0]}&X-Amz-Signature={FAKE_CREDENTIALS[1]}"
        assert audit_main([signed]) == 2
    captured = capsys.readouterr()
    assert "***@127.0.0.1" in captured.err and "X-Amz-Signature=REDACTED" in captured.err

    haystack = [captured.out, captured.err, caplog.text, report.read_text()]
    haystack += [s3.get(k).decode("latin-1") for k in s3.keys("no-leaks/")]  # manifests, records, state, shards
    haystack += [p.read_bytes().decode("latin-1") for p in run.rglob("*") if p.is_file()]  # metrics, checkpoints
    for secret in FAKE_CREDENTIALS:
        assert not [i for i, text in enumerate(haystack) if secret in text], secret


# ----------------------------------------------------------------------------- the shaped link

@pytest.mark.timeout(60)
def test_shaped_link_adds_its_round_trip_and_caps_each_connection(tmp_path):
    """Lower bounds only (a busy machine can only make things slower): a new connection's first
    response takes two round trips (handshake, request), a kept-alive one's one; a body no faster
    than the cap; and a link left open stops by itself after its lifetime."""
    import http.client

    from tests.fixtures.shaped_link import shaped_link

    (tmp_path / "blob").write_bytes(os.urandom(3 << 20))
    with serve_http(tmp_path) as base, shaped_link(base, rtt_s=0.05, bandwidth=20e6) as link:
        host, port = link.url.split("://")[1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        timings = []
        for rng in ("bytes=0-9", "bytes=0-9", None):
            t0 = time.monotonic()
            conn.request("GET", "/blob", headers={"Range": rng} if rng else {})
            body = conn.getresponse().read()
            timings.append(time.monotonic() - t0)
        conn.close()
        assert len(body) == 3 << 20
        assert timings[0] >= 0.1 and timings[1] >= 0.05 and timings[2] >= 0.05 + (3 << 20) / 20e6
        assert link.stats.connections == 1 and link.stats.down_bytes >= 3 << 20
        assert link.stats.held_high <= 8 << 20
    with serve_http(tmp_path) as base, shaped_link(base, rtt_s=0.0, bandwidth=None, lifetime_s=0.3) as link:
        time.sleep(0.6)
        host, port = link.url.split("://")[1].split(":")
        with pytest.raises(OSError):
            c = http.client.HTTPConnection(host, int(port), timeout=5)
            c.request("GET", "/blob")
            c.getresponse().read()


# ----------------------------------------------------------------------------- read-ahead, a long link, many readers

@pytest.mark.timeout(120)
def test_loader_through_a_shaped_link_with_default_settings_delivers_every_sample_once(s3, s3_endpoint, archives,
                                                                                        local_shards, local_epochs):
    """RTT 40 ms and 80 MB/s per connection in front of SeaweedFS, the loader's defaults: the
    read-ahead reads every shard (its ranged requests counted, its memory within the bound) and the
    epoch is the local one, sample for sample."""
    from tests.fixtures.shaped_link import shaped_link

    out = s3.url("far")
    assert prepare_main(source_args(archives) + ["--out", out]) == 0
    loaders = []
    with shaped_link(s3_endpoint, rtt_s=0.04, bandwidth=80e6) as link:
        storage.set_options("s3", {"endpoint_url": link.url})
        expect_the_local_epochs(out, local_epochs, loaders=loaders)  # each sample once, as locally
    st = loaders[1].store_stats()
    val_bytes = sum(sh["bytes"] for sh in manifest_of(local_shards)["splits"]["val"]["shards"])
    # each worker reads whole chunks of the shards its pieces touch: a shard split between the two is read twice
    assert val_bytes <= st["bytes"] <= 2 * val_bytes
    assert st["requests"] >= manifest_of(local_shards)["splits"]["val"]["num_shards"]
    assert 0 < st["readahead_high_bytes"] <= storage.ReadAheadPolicy().max_bytes and st["wait_s"] > 0
    assert link.stats.connections >= 2


@pytest.mark.timeout(120)
def test_read_ahead_in_small_chunks_is_exact_through_faults(s3, s3_endpoint, archives, local_shards, local_epochs):
    """Chunks much smaller than a shard (many ranged GETs per shard, several shards in flight),
    503s and connections reset mid-body, botocore's own retries off: still exactly the local epoch."""
    out = s3.url("chunky")
    assert prepare_main(source_args(archives) + ["--out", out]) == 0
    plan = FaultPlan(error_every=9, reset_every=5, delay_every=4, delay_s=0.01)
    with fault_proxy(s3_endpoint, plan) as proxy:
        storage.set_options("s3", {"endpoint_url": proxy, "config_kwargs": {"retries": {"max_attempts": 1}}})
        expect_the_local_epochs(out, local_epochs, readahead=storage.ReadAheadPolicy(chunk_bytes=16 << 10, ahead=3))
    assert plan.counts["503"] >= 3 and plan.counts["reset"] >= 3, plan.counts


def _node(data: str, rank: int, endpoint: str, cache: str, out: str, faulty: bool) -> None:
    """One "node" of `four_nodes`, in a process of its own: rank `rank` of 4, 2 workers, its own cache."""
    import traceback

    try:
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()  # the parent's, made for its endpoint
        options = {"endpoint_url": endpoint}
        if faulty:  # our retries, quickly, and nobody else's
            storage.set_retry_policy(storage.RetryPolicy(attempts=8, base_s=0.005, max_s=0.02))
            options["config_kwargs"] = {"retries": {"max_attempts": 1}}
        storage.set_options("s3", options)
        ld = D.make_loader(data, "val", 4, train=False, workers=2, rank=rank, world_size=4, val_resize=40,
                           val_crop=32, keys=True, cache_dir=cache, cache_bytes=1 << 30, persistent_workers=True)
        epochs = []
        for epoch in range(2):
            ld.set_epoch(epoch)
            epochs.append([k for _, _, keys in ld for k in keys])
        ld.close()
        Path(out).write_text(json.dumps(epochs))
    except BaseException:  # noqa: BLE001 - reported to the test through the file
        Path(out).write_text(json.dumps({"error": traceback.format_exc()}))
        raise


def four_nodes(s3, tmp_path, endpoint: str, faulty: bool) -> None:
    """4 processes as 4 nodes (ranks of 4, 2 workers, a cache folder each) read one bucket for 2
    epochs: every sample once per epoch across them, and only whole shards in the caches. The
    processes are forks of this one: a fresh interpreter spends ~7 s importing torch on a busy 2-core box."""
    import multiprocessing

    from tests.fixtures.loader import write_shard_set

    local = write_shard_set(tmp_path / "set", val=80, shard_samples=10, size=(32, 24))
    for p in local.rglob("*"):
        if p.is_file():
            s3.put(f"nodes/{p.relative_to(local)}", p.read_bytes())
    m = manifest_of(local)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_node, args=(s3.url("nodes"), r, endpoint, str(tmp_path / f"cache{r}"),
                                              str(tmp_path / f"keys{r}.json"), faulty)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    per_node = [json.loads((tmp_path / f"keys{r}.json").read_text()) for r in range(4)]
    assert [p.exitcode for p in procs] == [0] * 4, [n["error"] for n in per_node if "error" in n]
    want = sorted(keys_read(str(local), "val"))
    for epoch in range(2):
        got = sorted(k for node in per_node for k in node[epoch])
        assert got == want and len(set(got)) == m["splits"]["val"]["num_samples"]
        assert all(node[epoch] for node in per_node)  # every node had a share
    digests = {os.path.basename(sh["url"]): sh["sha256"] for sh in m["splits"]["val"]["shards"]}
    for r in range(4):
        files = list((tmp_path / f"cache{r}").iterdir())
        assert files and not [f for f in files if f.name.startswith(".") or f.name.endswith(".tmp")]
        for f in files:  # "<hash>-<shard name>": whole, the manifest's bytes
            assert hashlib.sha256(f.read_bytes()).hexdigest() == digests[f.name.split("-", 1)[1]], f


@pytest.mark.timeout(300)
def test_four_nodes_read_one_bucket_each_sample_once_per_epoch(s3, s3_endpoint, tmp_path):
    four_nodes(s3, tmp_path, s3_endpoint, faulty=False)


@pytest.mark.slow  # ~15 s on 2 busy cores; the default run has the plain one and faults elsewhere
@pytest.mark.timeout(300)
def test_four_nodes_read_one_bucket_through_faults(s3, s3_endpoint, tmp_path):
    plan = FaultPlan(error_every=5, reset_every=3, delay_every=4, delay_s=0.02)
    with fault_proxy(s3_endpoint, plan) as proxy:
        four_nodes(s3, tmp_path, proxy, faulty=True)
    assert plan.counts["503"] >= 3 and plan.counts["reset"] >= 3, plan.counts
