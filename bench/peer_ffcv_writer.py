"""FFCV's writer as a row of bench/bench_prepare.py: run by ``$PEERS/ffcv/bin/python`` (shared/peers/setup.sh).

The ffcv-imagenet recipe (shared/peers/README.md): ``DatasetWriter`` with ``RGBImageField(**write)``
+ ``IntField`` over a torchvision ``ImageFolder``; ``write`` is one of train/bench/peers.py's
FFCV_WRITES (all JPEG, or ffcv-imagenet's ``write_mode="proportion"`` settings for rn50 / rn18).
The one argument is a JSON object: ``folders`` (ImageFolder roots, each timed once per round, in
order), ``out`` (a scratch folder), ``workers``, ``rounds``, ``write``. Prints one JSON line:
``{"runs": [[{"folder", "images", "wall_s", "cpu_s", "bytes"}, ...] per round]}`` or ``{"error": ...}``.
Timing is ``train/bench/timing.py``'s process-tree CPU time, the same code as our rows.
Ends with ``os._exit``: FFCV's writer pool can hang at interpreter exit when pinned to one core.
It lives here, not beside train/bench/peer_ffcv.py: that package holds only what bench-loader runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train" / "bench"))
from timing import process_tree_cpu_seconds  # noqa: E402  (standard library only)


def write_once(folder: str, beton: Path, workers: int, write: dict) -> dict:
    """Write ``folder`` as an FFCV dataset file once: images, wall and CPU seconds (import excluded),
    the file's bytes."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from torchvision.datasets import ImageFolder

    dataset = ImageFolder(folder)
    beton.unlink(missing_ok=True)
    c0, t0 = process_tree_cpu_seconds(), time.perf_counter()
    DatasetWriter(str(beton), {"image": RGBImageField(**write), "label": IntField()},
                  num_workers=workers).from_indexed_dataset(dataset)
    wall, cpu = time.perf_counter() - t0, process_tree_cpu_seconds() - c0
    return {"folder": folder, "images": len(dataset), "wall_s": wall, "cpu_s": cpu, "bytes": beton.stat().st_size}


def main() -> None:
    setup = json.loads(sys.argv[1])
    try:
        import ffcv.writer  # noqa: F401  (import and JIT set-up before any timing)
        beton = Path(setup["out"]) / "ffcv.beton"
        runs = [[write_once(f, beton, int(setup["workers"]), setup["write"]) for f in setup["folders"]]
                for _ in range(int(setup["rounds"]))]
        print(json.dumps({"runs": runs}), flush=True)
    except BaseException as e:  # the bench prints it as the row's "not run" reason
        print(json.dumps({"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
