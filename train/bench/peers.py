"""FFCV and DALI rows of ``bench-loader --compare``: each peer runs as a subprocess of the bench in
its own environment (they cannot share the project's: FFCV needs numpy 1.26), on the same image
files, and takes its turns with our loader like any other row.

The environments are built outside the project by ``shared/peers/setup.sh``, which prints their
folder; point the bench at it with ``--peers DIR`` or ``IMAGENET_SHARDS_PEERS``. Without them, or
when a peer cannot start, its row says ``not run: <reason>``. The peer side is ``peer_serve.py``.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

PEERS_ENV = "IMAGENET_SHARDS_PEERS"
HOW = (f"pass --peers DIR or set {PEERS_ENV} to the folder shared/peers/setup.sh prints; see docs/benchmarks.md")
HERE = Path(__file__).resolve().parent
START_TIMEOUT_S = 1800.0  # FFCV writes its dataset file and compiles its pipeline before it is ready
ROUND_TIMEOUT_S = 900.0


# How FFCV's writer stores the images (RGBImageField), in the rows of both benchmarks (peer_ffcv.py, and
# bench/peer_ffcv_writer.py for bench/bench_prepare.py). "jpg": every image re-encoded as JPEG, the
# kind of bytes our shards hold. "rn50" and "rn18": what ffcv-imagenet recommends for training those
# models (its README, "Training Details": 50 % JPEG at 500 px side length for ResNet-50, 10 % JPEG at
# 400 px for ResNet-18; write_imagenet.sh passes --cfg.write_mode=proportion, the max resolution,
# --cfg.compress_probability and --cfg.jpeg_quality=90): the other images are stored as raw pixels.
FFCV_WRITES = {
    "jpg": {"write_mode": "jpg", "max_resolution": 500, "jpeg_quality": 90},
    "rn50": {"write_mode": "proportion", "max_resolution": 500, "compress_probability": 0.5, "jpeg_quality": 90},
    "rn18": {"write_mode": "proportion", "max_resolution": 400, "compress_probability": 0.1, "jpeg_quality": 90},
}


def describe_write(name: str) -> str:
    """FFCV_WRITES[name] in words: "jpg q90, max side 500" / "50 % JPEG q90, the rest raw, max side 500"."""
    w = FFCV_WRITES[name]
    if w["write_mode"] == "jpg":
        return f"jpg q{w['jpeg_quality']}, max side {w['max_resolution']}"
    return (f"{100 * w['compress_probability']:.0f} % JPEG q{w['jpeg_quality']}, the rest raw, "
            f"max side {w['max_resolution']}")


@dataclass(frozen=True)
class Peer:
    """A row run in another environment: ``DIR/<env>/bin/python <script> <setup JSON>``; ``write``: the
    FFCV_WRITES entry its writer uses (FFCV rows)."""
    name: str
    env: str
    script: Path
    write: str | None = None


PEERS = (Peer("DALI CPU pipeline", "dali", HERE / "peer_dali.py"),
         Peer("FFCV", "ffcv", HERE / "peer_ffcv.py", "jpg"),
         Peer("FFCV, rn50 write (50 % JPEG, 500 px)", "ffcv", HERE / "peer_ffcv.py", "rn50"),
         Peer("FFCV, rn18 write (10 % JPEG, 400 px)", "ffcv", HERE / "peer_ffcv.py", "rn18"))


class PeerNotRun(Exception):
    """The peer's row cannot have figures; the message is its ``not run: ...`` note."""


def peers_dir(peers: str | None = None) -> Path | None:
    """The peers folder: ``peers`` (``--peers``), else ``$IMAGENET_SHARDS_PEERS``, else None."""
    value = peers if peers else os.environ.get(PEERS_ENV, "")
    return Path(value).expanduser() if value else None


def peer_python(peer: Peer, root: Path | None) -> Path:
    """The interpreter of ``peer``'s environment under ``root``; PeerNotRun says what is missing."""
    if root is None:
        raise PeerNotRun(f"not run: peers not found ({HOW})")
    if not root.is_dir():
        raise PeerNotRun(f"not run: peers not found at {root} ({HOW})")
    python = root / peer.env / "bin" / "python"
    if not os.access(python, os.X_OK):
        raise PeerNotRun(f"not run: no {peer.name} environment at {python} (shared/peers/setup.sh builds it)")
    return python


class PeerProcess:
    """A running peer: ``time(batches=, warmup=)`` has it time its own stream, as ``time_stream`` does."""

    def __init__(self, peer: Peer, python: Path, setup: dict, *, start_timeout: float = START_TIMEOUT_S,
                 round_timeout: float = ROUND_TIMEOUT_S):
        self.peer, self.round_timeout = peer, round_timeout
        # the peer's own output (warnings, progress) goes to a file: its last line explains a crash
        self.log = tempfile.TemporaryFile(mode="w+", prefix=f"bench-peer-{peer.env}-")
        self.proc = subprocess.Popen([str(python), str(peer.script), json.dumps(setup)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            msg = self._receive(start_timeout, "to start")
        except PeerNotRun:
            self.close()
            raise
        self.note = msg.get("note", "")
        self.bytes_per_image = msg.get("bytes_per_image")  # what its own files hold per image, if it says

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _receive(self, timeout: float, when: str) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise PeerNotRun(f"not run: {self.peer.name} failed {when}: no answer in {timeout:.0f} s") from None
        if line is None:
            status = self.proc.wait()
            raise PeerNotRun(f"not run: {self.peer.name} failed {when}: it exited with status {status}"
                             f"{self._last_log_line()}")
        msg = json.loads(line)
        if "error" in msg:
            raise PeerNotRun(f"not run: {self.peer.name} failed {when}: {msg['error']}")
        return msg

    def _last_log_line(self) -> str:
        self.log.seek(0)
        lines = [s.strip() for s in self.log.read().splitlines() if s.strip()]
        return f" ({lines[-1][:200]})" if lines else ""

    def time(self, *, batches: int, warmup: int) -> dict:
        """Figures of ``batches`` batches after ``warmup`` untimed ones, measured inside the peer."""
        try:
            self.proc.stdin.write(json.dumps({"batches": batches, "warmup": warmup}) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it has exited: _receive reports its status and last words
        return self._receive(self.round_timeout, "while timed")

    def close(self) -> None:
        """Ask the peer to quit; kill it if it does not within 10 s."""
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def start_peer(peer: Peer, root: Path | None, setup: dict) -> PeerProcess:
    """Start ``peer`` from the folder ``root`` with ``setup`` (folder, work, res, batch_size, workers,
    seed; plus ``write``, ``write_name`` for an FFCV row); raises PeerNotRun with the row's note when it
    cannot run."""
    if peer.write is not None:
        setup = {**setup, "write": FFCV_WRITES[peer.write], "write_name": peer.write,
                 "write_note": describe_write(peer.write)}
    return PeerProcess(peer, peer_python(peer, root), setup)
