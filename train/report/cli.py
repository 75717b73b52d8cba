"""`report-run`: one page (PNG) of a training run's curves and the verdict on its data loading.

  report-run RUN_DIR [--out report.png] [--json]

Reads RUN_DIR/metrics.jsonl (a local folder or a URL) and draws loss, top-1/top-5, learning rate,
throughput, data-wait and memory (main RSS, loader workers' PSS per epoch) over steps (each step
once: records a resumed run superseded are left out), with one verdict line: "data-bound: the
training loop waited 34 % of the time; ~1.5x more loader throughput needed ..." or
"compute-bound: data-wait 1.2 %"; then each epoch's data fingerprint (samples used and a hash of
their keys, over all ranks).
Needs matplotlib (pip install -e '.[report]').
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import OneLineParser
from imagenet_shards.train.report.page import ReportError, draw_report, metric_line, read_run, run_metric
from imagenet_shards.train.report.records import fingerprints


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="report-run", description=__doc__.split("\n\n")[0],
                      epilog="Exit codes: 0 written, 2 the run could not be read or drawn.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a train-imagenet --out folder (or a URL of a copy)")
    p.add_argument("--out", default=None, help="PNG to write (default RUN_DIR/report.png; a local path)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or (os.path.join(args.run_dir, "report.png") if not storage.is_remote(args.run_dir) else "report.png")
    if storage.is_remote(out):
        print(f"error: --out takes a local path, got {storage.redact(out)}", file=sys.stderr)
        return 2
    out = storage.local_path(out)  # file:// names a local path
    try:
        records = read_run(args.run_dir)
        try:
            verdict = draw_report(records, out, title=os.path.basename(os.path.normpath(args.run_dir)))
        except ImportError:
            raise ReportError("report-run draws with matplotlib: pip install -e '.[report]'") from None
    except (ReportError, OSError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    fps = fingerprints(records)
    if args.json:
        print(json.dumps({"report": out, **verdict.as_dict(), "data_fingerprints": fps, "metric": run_metric(records)},
                         sort_keys=True))
    else:
        print(f"wrote {out}\n{verdict.line}")
        if metric_line(records):
            print(metric_line(records))
        for fp in fps:
            print(f"epoch {fp['epoch'] + 1} data fingerprint: " + "; ".join(
                f"{split} {fp[split]['samples']} samples, hash {fp[split]['hash']}" for split in ("train", "val")
                if fp.get(split)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
