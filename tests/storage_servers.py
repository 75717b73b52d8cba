"""Real storage servers on 127.0.0.1 for the object-storage tests, started and stopped by fixtures.

- `s3`: moto's standalone S3 server (the real S3 HTTP protocol, spoken by s3fs/boto3), a fresh
  bucket per test, fake credentials in the environment (distinctive, so tests can grep for leaks)
  and AWS_ENDPOINT_URL pointing at the server (subprocesses inherit all of it).
- `serve_http(root)`: a static file server with Range support (what fsspec's HTTP files use) and,
  like a CDN or a bucket website, no directory listings.
- `FaultProxy`: a loopback HTTP proxy in front of either that answers some requests with 503,
  cuts some response bodies off mid-way with a TCP reset, and delays some — on a deterministic
  schedule, at most `max_faults` times, so every test ends by itself.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import logging
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

FAKE_KEY_ID = "AKIAFAKEKEYIMGSHARDS7"
FAKE_SECRET = "fakeSecret+imagenetShards/doNotLeak9QX"
FAKE_CREDENTIALS = (FAKE_KEY_ID, FAKE_SECRET)
BUCKET = "imagenet-shards-test"


# ----------------------------------------------------------------------------- S3 (moto)

@dataclass
class S3:
    endpoint: str
    bucket: str
    client: object

    def url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)


def _clear_fsspec_instances():
    """s3fs caches filesystems by their arguments, not by the environment they read: start clean."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="session")
def moto_endpoint():
    """One moto S3 server for the session (tests isolate themselves with fresh buckets)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


_bucket_numbers = itertools.count()


@pytest.fixture
def s3(moto_endpoint, monkeypatch) -> S3:
    """A fresh, empty bucket on the moto server; the standard AWS environment points at it."""
    import boto3

    for name in list(os.environ):
        if name.startswith("AWS_") or name.startswith("FSSPEC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    _clear_fsspec_instances()
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    bucket = f"{BUCKET}-{os.getpid()}-{next(_bucket_numbers)}"
    client.create_bucket(Bucket=bucket)
    yield S3(moto_endpoint, bucket, client)
    _clear_fsspec_instances()


# ----------------------------------------------------------------------------- static HTTP with Range

class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client that hangs up early is not news
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class RangeFileHandler(BaseHTTPRequestHandler):
    """GET/HEAD of files under `root` with single-range support (206 + Content-Range); no listings."""

    root = "."
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _file(self):
        rel = self.path.split("?", 1)[0].split("#", 1)[0].lstrip("/")
        path = os.path.realpath(os.path.join(self.root, rel))
        if not path.startswith(os.path.realpath(self.root) + os.sep) or not os.path.isfile(path):
            return None
        return path

    def _send(self, body: bool):
        path = self._file()
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = os.path.getsize(path)
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes=") and "," not in rng:
            a, _, b = rng[6:].partition("-")
            if a:
                start, end = int(a), min(int(b) if b else size - 1, size - 1)
            else:
                start, end = max(0, size - int(b)), size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/x-tar" if path.endswith(".tar") else "application/json")
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if body:
            with open(path, "rb") as f:
                f.seek(start)
                left = end - start + 1
                while left > 0:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)

    def do_GET(self):
        self._send(True)

    def do_HEAD(self):
        self._send(False)


@contextlib.contextmanager
def _serve(handler):
    """Run `handler` on 127.0.0.1 in a thread; yields the base URL until the block ends."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def serve_http(root):
    """Serve `root` at http://127.0.0.1:PORT (yields that base URL) until the block ends."""
    handler = type("Handler", (RangeFileHandler,), {"root": str(root)})
    with _serve(handler) as url:
        yield url


# ----------------------------------------------------------------------------- fault injection

@dataclass
class FaultPlan:
    """Which requests (numbered from 1, all methods) get which fault; at most `max_faults` in all.

    503 every `error_every`-th request; for GETs with a body, a TCP reset after half the body on
    every `reset_every`-th; a delay of `delay_s` before every `delay_every`-th response."""

    error_every: int = 10
    reset_every: int = 7
    delay_every: int = 5
    delay_s: float = 0.05
    max_faults: int = 10_000
    only_paths: tuple = ()  # fault only requests whose path contains one of these (default: all)
    counts: dict = field(default_factory=lambda: {"requests": 0, "503": 0, "reset": 0, "delay": 0})
    seen: list = field(default_factory=list)  # (method, path) of every request, in arrival order

    @property
    def faults(self) -> int:
        return self.counts["503"] + self.counts["reset"]


class _ProxyHandler(BaseHTTPRequestHandler):
    upstream: tuple[str, int]
    plan: FaultPlan
    lock: threading.Lock
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _decide(self) -> tuple[int, set]:
        with self.lock:
            self.plan.counts["requests"] += 1
            self.plan.seen.append((self.command, self.path))
            n = self.plan.counts["requests"]
            chosen = set()
            eligible = not self.plan.only_paths or any(p in self.path for p in self.plan.only_paths)
            if eligible and self.plan.faults < self.plan.max_faults:
                if self.plan.error_every and n % self.plan.error_every == 0:
                    chosen.add("503")
                elif self.plan.reset_every and n % self.plan.reset_every == 0 and self.command == "GET":
                    chosen.add("reset")
            if eligible and self.plan.delay_every and n % self.plan.delay_every == 0:
                chosen.add("delay")
            return n, chosen

    def _count(self, what):
        with self.lock:
            self.plan.counts[what] += 1

    def _forward(self):
        n, faults = self._decide()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if "delay" in faults:
            self._count("delay")
            time.sleep(self.plan.delay_s)
        if "503" in faults:
            self._count("503")
            msg = b"<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(msg)
            self.close_connection = True
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out_headers = [(k, v) for k, v in resp.getheaders()
                           if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length")]
            status = resp.status
        finally:
            conn.close()
        self.send_response(status)
        for k, v in out_headers:
            self.send_header(k, v)
        length = len(data) if self.command != "HEAD" else int(resp.getheader("Content-Length") or 0)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if self.command == "HEAD":
            return
        if "reset" in faults and len(data) > 1:
            self._count("reset")
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            # SO_LINGER 0: close() sends RST, the way a dying load balancer or NAT does
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


@contextlib.contextmanager
def fault_proxy(upstream_url: str, plan: FaultPlan):
    """A proxy at http://127.0.0.1:PORT in front of `upstream_url` that injects `plan`'s faults."""
    host, port = upstream_url.split("://", 1)[1].split("/", 1)[0].split(":")
    handler = type("Proxy", (_ProxyHandler,), {"upstream": (host, int(port)), "plan": plan,
                                               "lock": threading.Lock()})
    with _serve(handler) as url:
        yield url
