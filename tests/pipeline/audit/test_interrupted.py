"""Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM to audit-shards and
inspect-shards while they read: one line, exit 130 / 143, no traceback from the main process or the
audit's workers. The shards are served over loopback HTTP by a server that holds every shard
request open, so the signal lands while the command is certainly reading."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.fixtures.servers import RangeFileHandler, _serve


@contextlib.contextmanager
def stalling_http(root):
    """Serve `root`; a request for a shard (.tar) sets `reading` and then waits until the block ends."""
    reading, done = threading.Event(), threading.Event()

    class Handler(RangeFileHandler):
        def do_GET(self):
            if self.path.split("?", 1)[0].endswith(".tar"):
                reading.set()
                done.wait(120)
                return
            super().do_GET()

        do_HEAD = do_GET

    Handler.root = str(root)
    with _serve(Handler) as url:
        try:
            yield url, reading
        finally:
            done.set()


def interrupt_while_reading(args: list[str], root, signum: int) -> tuple[int, str, str]:
    with stalling_http(root) as (url, reading):
        proc = subprocess.Popen([sys.executable, "-m", *[a.replace("URL", url) for a in args]],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert reading.wait(90), proc.communicate(timeout=30)
            os.killpg(proc.pid, signum)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, stdout, stderr


@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_audit_with_workers_interrupted_is_one_line(synthetic_shards, signum, code):
    rc, stdout, stderr = interrupt_while_reading(
        ["imagenet_shards.pipeline.audit.cli", "URL", "--workers", "2", "--quiet"], synthetic_shards, signum)
    assert rc == code, stderr
    assert stderr == "audit-shards: interrupted; nothing was written\n" and stdout == ""


@pytest.mark.timeout(180)
def test_inspect_interrupted_is_one_line(synthetic_shards, tmp_path):
    rc, stdout, stderr = interrupt_while_reading(
        ["imagenet_shards.pipeline.tools.inspect_shards", "URL", "--stats", "--out", str(tmp_path / "stats.png")],
        synthetic_shards, signal.SIGINT)
    assert rc == 130, stderr
    assert stderr == "inspect-shards: interrupted\n" and not (tmp_path / "stats.png").exists()
