"""imagenet_shards.pipeline.storage.fs, the one I/O layer: redaction, error classification, retries, the resuming reader,
uploads and their checks — against real servers on 127.0.0.1 (SeaweedFS's S3, a static HTTP server, a
fault-injecting proxy) started by the fixtures in tests/fixtures/servers.py."""

from __future__ import annotations

import errno
import gc
import hashlib
import os

import pytest

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.prepare.outdir.remote import UploadError, check_upload
from tests.fixtures.servers import FaultPlan, fault_proxy, serve_http

pytestmark = pytest.mark.usefixtures("fast_retries")


# ----------------------------------------------------------------------------- pure helpers

@pytest.mark.parametrize("text,secret", [
    ("https://alice:hunter2@example.com/shards/manifest.json", "hunter2"),
    ("s3://AKIAXXXX:topsecret@bucket/prefix", "topsecret"),
    ("http://AKIAXXXX:unescaped/slash+pw@127.0.0.1:8000/x", "slash+pw"),
    ("https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAQQ%2F2026&"
     "X-Amz-Signature=abc123def&X-Amz-Security-Token=tok999", "abc123def"),
    ("https://b.s3.amazonaws.com/k.tar?AWSAccessKeyId=AKIAQQ&Signature=sig%2Bxyz&Expires=1", "sig%2Bxyz"),
    ("https://storage.googleapis.com/b/o?X-Goog-Signature=feedbeef&X-Goog-Credential=svc", "feedbeef"),
    ("https://acct.blob.core.windows.net/c/o?sv=2022&sig=azuresig%3D&se=2030", "azuresig"),
    ("error: cannot read https://u:pw-in-message@h/x (404) and http://h/y?token=t0k3n", "pw-in-message"),
])
def test_redact_strips_userinfo_and_signed_url_secrets(text, secret):
    out = storage.redact(text)
    assert secret not in out
    assert "AKIAQQ" not in out and "t0k3n" not in out and "tok999" not in out
    assert out.split("://", 1)[0] == text.split("://", 1)[0]  # still says where


def test_redact_leaves_plain_urls_and_paths_alone():
    for text in ("s3://bucket/imagenet/train/imagenet1k-train-000001.tar", "/data/shards/manifest.json",
                 "https://host:8443/a/b?part=3&page=2"):
        assert storage.redact(text) == text


def test_parse_storage_options():
    got = storage.parse_storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=true", "block_size=0",
                                         "client_kwargs.region_name=eu-west-1", "profile=dev=ops"])
    assert got == {"endpoint_url": "http://127.0.0.1:9000", "anon": True, "block_size": 0,
                   "client_kwargs": {"region_name": "eu-west-1"}, "profile": "dev=ops"}
    with pytest.raises(ValueError):
        storage.parse_storage_options(["novalue"])


def _with_cause(exc, cause):
    exc.__cause__ = cause
    return exc


def test_transient_or_permanent():
    import aiohttp
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    def http_error(status):
        return aiohttp.ClientResponseError(None, (), status=status, message="x")

    def s3_error(code, status):
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    transient = [http_error(503), http_error(500), http_error(429), http_error(408), s3_error("SlowDown", 503),
                 _with_cause(FileNotFoundError("http://h/x"), http_error(503)),  # fsspec's HEAD-then-GET
                 _with_cause(FileNotFoundError("http://h/x"), aiohttp.ServerDisconnectedError()),
                 _with_cause(OSError(errno.EBUSY, "ServiceUnavailable"), s3_error("ServiceUnavailable", 503)),
                 ConnectionResetError(), TimeoutError(), OSError(errno.ECONNRESET, "reset"),
                 aiohttp.ClientPayloadError("Response payload is not completed"),
                 aiohttp.ServerDisconnectedError(), EndpointConnectionError(endpoint_url="http://h"),
                 ReadTimeoutError(endpoint_url="http://h")]
    permanent = [http_error(404), http_error(403), http_error(400), s3_error("NoSuchKey", 404),
                 s3_error("AccessDenied", 403), FileNotFoundError("x"), PermissionError("x"),
                 _with_cause(FileNotFoundError("http://h/x"), http_error(404)), ValueError("bad"),
                 OSError(errno.EINVAL, "bad request")]
    assert [storage.is_transient(e) for e in transient] == [True] * len(transient)
    assert [storage.is_transient(e) for e in permanent] == [False] * len(permanent)


def test_call_retries_transient_errors_then_succeeds():
    tries, slept = [], []

    def flaky():
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionResetError("reset by peer")
        return "ok"

    assert storage.call(flaky, "s3://b/k", sleep=slept.append) == "ok"
    assert len(tries) == 3 and len(slept) == 2 and slept[1] >= slept[0] / 2


def test_call_permanent_error_names_the_url_at_once():
    tries = []

    def missing():
        tries.append(1)
        raise FileNotFoundError("https://u:secretpw@h/x.tar")

    with pytest.raises(FileNotFoundError) as e:
        storage.call(missing, "https://u:secretpw@h/x.tar")
    assert len(tries) == 1
    assert "https://***@h/x.tar" in str(e.value) and "not found" in str(e.value)
    assert "secretpw" not in str(e.value) and e.value.__cause__ is None and e.value.__suppress_context__


def test_call_gives_up_after_the_policy_and_says_so():
    def down():
        raise ConnectionRefusedError("refused")

    with pytest.raises(storage.StorageError, match=r"cannot read s3://b/k: .*still failing after 3 tries"):
        storage.call(down, "s3://b/k", policy=storage.RetryPolicy(attempts=3, base_s=0.001, max_s=0.001))


class _FlakyFile:
    """An fsspec-like file over `data` whose connection breaks after `cut` bytes of each open."""

    def __init__(self, data: bytes, cut: int):
        self.data, self.cut, self.size, self.pos, self.served = data, cut, len(data), 0, 0

    def seek(self, pos):
        self.pos = pos

    def read(self, n=-1):
        if self.served >= self.cut:
            raise ConnectionResetError("reset by peer (test)")
        n = self.size - self.pos if n is None or n < 0 else n
        n = min(n, self.cut - self.served)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        self.served += len(chunk)
        return chunk

    def close(self):
        pass


def test_reader_resumes_at_the_byte_where_the_connection_broke_through_the_one_retry_loop():
    data = bytes(range(256)) * 40
    opens = []

    def open_fresh():
        opens.append(1)
        return _FlakyFile(data, cut=1000)

    with storage.RetryingReader("s3://b/k", open_fresh) as f:
        got = b"".join(iter(lambda: f.read(700), b""))
        assert got == data and f.reopens == len(opens) - 1 >= len(data) // 1000


def test_reader_gives_up_after_the_policy_naming_the_byte():
    opens = []

    def open_fresh():  # the first connection serves 1234 bytes, every later one breaks at once
        opens.append(1)
        return _FlakyFile(b"x" * 5000, cut=1234 if len(opens) == 1 else 0)

    f = storage.RetryingReader("s3://b/k", open_fresh,
                               policy=storage.RetryPolicy(attempts=3, base_s=0.001, max_s=0.001))
    assert f.read(1234) == b"x" * 1234
    with pytest.raises(storage.StorageError, match=r"cannot read s3://b/k: .*at byte 1234; still failing after 3 tries"):
        f.read(10)


# ----------------------------------------------------------------------------- HTTP

@pytest.fixture(scope="module")
def blob_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("blobs")
    data = os.urandom(12 * 2**20 + 12345)
    (root / "blob.bin").write_bytes(data)
    return root, data


@pytest.mark.timeout(60)
def test_http_read_is_exact_through_503s_resets_and_delays(blob_dir):
    root, data = blob_dir
    plan = FaultPlan(error_every=3, reset_every=4, delay_every=5, delay_s=0.02)
    with serve_http(root) as base, fault_proxy(base, plan) as proxy:
        assert storage.info(f"{base}/blob.bin").size == len(data)
        with storage.open_url(f"{proxy}/blob.bin") as f:
            chunks = []
            while chunk := f.read(777_777):
                chunks.append(chunk)
            reopens = f.reopens
    assert hashlib.sha256(b"".join(chunks)).digest() == hashlib.sha256(data).digest()
    assert plan.counts["503"] >= 2 and plan.counts["reset"] >= 1 and reopens >= 2


@pytest.mark.timeout(60)
def test_http_stream_without_range_resumes_by_reading_past(blob_dir):
    """block_size=0: fsspec gives a plain streaming GET (no seek); a resume re-reads up to the offset."""
    root, data = blob_dir
    plan = FaultPlan(error_every=0, reset_every=2, delay_every=0, max_faults=3)
    with serve_http(root) as base, fault_proxy(base, plan) as proxy:
        storage.set_options("http", {"block_size": 0})
        with storage.open_url(f"{proxy}/blob.bin") as f:
            got = f.read()
            assert f.reopens >= 1
    assert got == data and plan.counts["reset"] >= 1


@pytest.mark.timeout(30)
def test_http_missing_object_fails_fast_naming_the_redacted_url(blob_dir):
    root, _ = blob_dir
    with serve_http(root) as base:
        url = base.replace("http://", "http://reader:pa55word@") + "/train/imagenet1k-train-000007.tar"
        with pytest.raises(FileNotFoundError) as e:
            storage.open_url(url)
    msg = str(e.value)
    assert "imagenet1k-train-000007.tar" in msg and "reader:" not in msg and "pa55word" not in msg
    assert "***@127.0.0.1" in msg and "not found" in msg


def test_http_cannot_list_nor_be_written():
    assert not storage.can_list("https://host/shards") and storage.can_list("s3://b/p")
    assert storage.can_list("/data/shards")
    assert not storage.can_write("http://host/shards") and not storage.can_write("HTTPS://host/shards")
    assert storage.can_write("s3://b/p") and storage.can_write("gs://b/p") and storage.can_write("/data/shards")


# ----------------------------------------------------------------------------- S3 (SeaweedFS)

@pytest.mark.timeout(60)
def test_s3_single_and_multipart_uploads_are_checked_against_their_etags(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(storage.fs, "UPLOAD_PART_BYTES", 5 * 2**20)  # S3's smallest part
    small, big = os.urandom(3000), os.urandom(11 * 2**20 + 7)
    for name, data in (("small.tar", small), ("big.tar", big)):
        local = tmp_path / name
        local.write_bytes(data)
        url = s3.url(f"p/{name}")
        storage.put_file(str(local), url)
        rec = {"bytes": len(data), "md5": hashlib.md5(data).hexdigest()}
        etag = check_upload(str(local), url, rec, verify=True)
        assert etag == storage.info(url).etag
        assert ("-" in etag) == (name == "big.tar")  # multipart: md5-of-md5s "-N"
        with pytest.raises(UploadError, match="rerun"):
            check_upload(str(local), url, {**rec, "bytes": len(data) + 1}, verify=True)
    local = tmp_path / "small.tar"
    with pytest.raises(UploadError, match="SSE-KMS"):
        check_upload(str(local), s3.url("p/small.tar"), {"bytes": len(small), "md5": "0" * 32}, verify=True)
    assert check_upload(str(local), s3.url("p/small.tar"), {"bytes": len(small), "md5": "0" * 32}, verify=False)


@pytest.mark.timeout(60)
def test_s3_read_write_list_remove(s3, tmp_path):
    url = s3.url("d/x.json")
    storage.write_bytes(url, b'{"a": 1}')
    assert storage.read_bytes(url) == b'{"a": 1}' and s3.get("d/x.json") == b'{"a": 1}'
    info = storage.info(url)
    assert info.size == 8 and info.md5 == hashlib.md5(b'{"a": 1}').hexdigest()
    assert storage.listdir(s3.url("d")) == ["x.json"] and storage.isdir(s3.url("d"))
    s3.put("d/y.json", b"{}")  # written behind the layer's back: listings must not be stale
    assert storage.listdir(s3.url("d")) == ["x.json", "y.json"]
    storage.remove(s3.url("d"), recursive=True)
    assert s3.keys("d/") == [] and not storage.exists(url)
    with pytest.raises(FileNotFoundError, match=r"cannot read s3://.*/d/x.json: not found"):
        storage.open_url(url)


@pytest.mark.timeout(90)
def test_s3_read_is_exact_through_faults_with_botocore_retries_off(s3, s3_endpoint):
    data = os.urandom(3 * 2**20 + 5)
    s3.put("f/blob.bin", data)
    plan = FaultPlan(error_every=4, reset_every=3, delay_every=5, delay_s=0.02, only_paths=("blob.bin",))
    with fault_proxy(s3_endpoint, plan) as proxy:
        storage.set_options("s3", {"endpoint_url": proxy, "default_block_size": 2**20,
                                   "config_kwargs": {"retries": {"max_attempts": 1}}})
        with storage.open_url(s3.url("f/blob.bin")) as f:
            chunks = []
            while chunk := f.read(300_000):
                chunks.append(chunk)
    assert b"".join(chunks) == data
    assert plan.faults >= 2


@pytest.mark.timeout(60)
def test_forked_child_does_not_break_the_parents_pooled_connections(blob_dir):
    """A loader worker is a fork of a process that has already talked to the store. If the child
    closed the inherited sessions (fsspec does, when it drops them), it would unregister the
    parent's pooled sockets from the epoll instance they share and the parent's next request on
    one would wait forever."""
    import multiprocessing
    import threading

    root, data = blob_dir

    def child(url):
        storage.set_options("http", {"block_size": 1 << 20})  # a new filesystem: the inherited one is dropped
        with storage.open_url(url) as f:
            f.read(10)
        gc.collect()  # what a long-lived loader worker does sooner or later

    with serve_http(root) as base:
        url = f"{base}/blob.bin"
        for _ in range(3):
            with storage.open_url(url) as f:  # leaves keep-alive connections in the pool
                assert f.read(100) == data[:100]
            p = multiprocessing.get_context("fork").Process(target=child, args=(url,))
            p.start()
            p.join(30)
            assert p.exitcode == 0
            done = []
            t = threading.Thread(target=lambda: done.append(storage.read_bytes(url)), daemon=True)
            t.start()
            t.join(15)
            assert done and done[0] == data, "the parent hangs on a connection the child unregistered"


@pytest.mark.timeout(60)
def test_http_stalled_response_times_out_and_is_retried(blob_dir, monkeypatch):
    import aiohttp

    root, data = blob_dir
    plan = FaultPlan(error_every=0, reset_every=0, delay_every=3, delay_s=1.0)  # every 3rd request stalls
    with serve_http(root) as base, fault_proxy(base, plan) as proxy:
        storage.set_options("http", {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_read=0.3)}})
        with storage.open_url(f"{proxy}/blob.bin") as f:
            got = b"".join(iter(lambda: f.read(1 << 20), b""))
            assert f.reopens >= 1
    assert got == data and plan.counts["delay"] >= 1
