"""The peer side of ``bench-loader --compare``: a loader in its own environment, timed on request.

Runs inside the FFCV or DALI environment (``peer_ffcv.py``, ``peer_dali.py`` call ``serve``), so it
imports only the standard library and ``timing`` (the same timing code as our rows), by path: Python
puts this folder first on ``sys.path`` when it runs a script from it.

Protocol, one JSON object per line: the script's one argument is the setup (``folder``, ``work``,
``res``, ``batch_size``, ``workers``, ``seed``); the peer builds its loader (untimed: FFCV writes
its dataset file here) and answers ``{"ready": true, "note": ..., "bytes_per_image": ...}`` (the
last when it knows what its own files hold) or ``{"error": "..."}``. Then each
request ``{"batches": B, "warmup": W}`` on stdin is answered with ``time_stream``'s figures, and
``{"quit": true}`` (or the end of stdin) ends the process.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable, Iterable

if __package__:  # imported as part of the package (docs, tools)
    from imagenet_shards.train.bench.timing import BatchStream, time_stream
else:  # a peer environment runs a sibling script: this folder is first on sys.path
    from timing import BatchStream, time_stream


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def serve(build: Callable[[dict], tuple]) -> None:
    """Build the loader with ``build(setup) -> (epochs, note)`` or ``(epochs, note, bytes_per_image)``
    and answer timing requests; never returns.

    Anything a library prints goes to stderr (fd 1 is pointed there), so stdout carries only the
    protocol. Ends with ``os._exit``: FFCV's writer pool can hang at interpreter exit (peers README)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    try:
        epochs, note, *size = build(json.loads(sys.argv[1]))
        stream = BatchStream(epochs)
    except BaseException as e:  # the parent shows it as the row's "not run" reason
        send({"error": _error(e)})
        os._exit(0)
    send({"ready": True, "note": note, "bytes_per_image": size[0] if size else None})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        try:
            send(time_stream(stream, batches=int(request["batches"]), warmup=int(request["warmup"])))
        except BaseException as e:
            send({"error": _error(e)})
            break
    proto.flush()
    os._exit(0)
