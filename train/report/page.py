"""One page per training run: loss, accuracy, learning rate, throughput, data-wait, memory, and the verdict.

Drawn with matplotlib (the ``report`` extra) on the Agg backend, from RUN_DIR/metrics.jsonl alone, so
it works for a finished run, a running one, or a copy of its metrics. Curves are over global steps;
per-epoch values (validation) sit at the step where their epoch ended.
"""

from __future__ import annotations

import json

from imagenet_shards.pipeline import storage
from imagenet_shards.train.report.records import GROWTH_LIMIT, current_records, fingerprints
from imagenet_shards.train.report.verdict import Verdict, from_metrics

METRICS_FILE = "metrics.jsonl"
PAGE_INCHES, DPI = (12, 12), 100
PANELS = ("loss", "accuracy", "learning rate", "throughput", "data-wait", "memory")


class ReportError(Exception):
    """The run folder cannot be reported on; the message says why."""


def read_run(run_dir: str) -> list[dict]:
    """The current records of RUN_DIR/metrics.jsonl (a local folder or a URL): those a resumed run
    superseded are left out (``records.current_records``), so every step is drawn once."""
    url = storage.join(str(run_dir), METRICS_FILE)
    try:
        text = storage.read_bytes(url).decode("utf-8")
    except FileNotFoundError:
        raise ReportError(f"no {METRICS_FILE} in {storage.redact(run_dir)}: is it a train-imagenet --out folder?") from None
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if n == len(text.splitlines()):
                    break  # a line being written right now
                raise ReportError(f"{storage.redact(url)} line {n} is not JSON") from None
    records = current_records(records)
    if not records:
        raise ReportError(f"{storage.redact(url)} holds no records yet")
    return records


def run_verdict(records: list[dict]) -> Verdict:
    """The loader verdict of a run, using its ``start`` record (workers, cores) when present."""
    start = next((r for r in records if r.get("kind") == "start"), {})
    return from_metrics(records, workers=start.get("workers"), cores=start.get("cores_per_rank"))


def _series(records, kind, field):
    pts = [(r["step"], r[field]) for r in records if r.get("kind") == kind and r.get(field) is not None
           and r.get("step") is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def draw_report(records: list[dict], out_png: str, *, title: str = "") -> Verdict:
    """Write the one-page PNG for these records to ``out_png`` (local path); returns the verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verdict = run_verdict(records)
    fig = plt.figure(figsize=PAGE_INCHES, dpi=DPI)
    grid = fig.add_gridspec(4, 2)
    ax = {name: fig.add_subplot(grid[i // 2, i % 2]) for i, name in enumerate(PANELS)}
    plots = {
        "loss": [("train_interval", "loss", "train (interval)"), ("epoch", "val_loss", "val")],
        "accuracy": [("train_interval", "acc", "train top-1 (interval)"), ("epoch", "val_top1", "val top-1"),
                     ("epoch", "val_top5", "val top-5")],
        "learning rate": [("train_interval", "lr", "lr")],
        "throughput": [("train_interval", "img_per_s", "img/s (interval)"),
                       ("epoch", "steady_img_per_s", "steady img/s (epoch)"),
                       ("ceiling", "steady_img_per_s", "synthetic-data ceiling")],
        "data-wait": [("train_interval", "data_wait_fraction", "data-wait fraction")],
        "memory": [("epoch", "main_rss_gib", "main process RSS, GiB"),
                   ("epoch", "workers_pss_gib", "loader workers PSS (sum), GiB")],
    }
    for name, lines in plots.items():
        a = ax[name]
        drawn = False
        for kind, field, label in lines:
            xs, ys = _series(records, kind, field)
            if xs:
                style = "o-" if kind in ("epoch", "ceiling") else "-"
                a.plot(xs, ys, style, label=label, markersize=4)
                drawn = True
        if name == "data-wait":
            a.axhline(0.05, color="grey", linestyle=":", label="5 % (data-bound above)")
            a.set_ylim(0, 1)
        if name == "memory":
            _memory_limits(a, records)
        a.set_title(name)
        a.set_xlabel("step")
        a.grid(alpha=0.3)
        if drawn:
            a.legend(fontsize=8)
        else:
            a.text(0.5, 0.5, "no data", ha="center", va="center", transform=a.transAxes)
    summary = fig.add_subplot(grid[3, :])
    summary.axis("off")
    final = next((r for r in reversed(records) if r.get("kind") in ("final", "epoch")), {})
    done = final.get("epoch")
    lines = [f"epochs done: {done + 1 if isinstance(done, int) else '?'}   steps: {final.get('step', '?')}"]
    if final.get("val_top1") is not None:
        lines.append(f"val top-1 {100 * final['val_top1']:.2f} %   top-5 {100 * (final.get('val_top5') or 0):.2f} %")
    if final.get("loader_efficiency") is not None:
        lines.append(f"loader efficiency {100 * final['loader_efficiency']:.0f} % of the synthetic-data ceiling")
    fps = fingerprints(records)
    if fps:
        lines += ["", "data fingerprint (samples, key hash):"]
        for fp in fps[-3:]:
            lines += [f"  epoch {fp['epoch'] + 1} {split} {fp[split]['samples']} {fp[split]['hash'][:8]}"
                      for split in ("train", "val") if fp.get(split)]
    warning = next((r["line"] for r in records if r.get("kind") == "memory_warning"), None)
    lines += ["", "verdict:"] + _wrap(verdict.line, 110) + ([""] + _wrap(warning, 110) if warning else [])
    summary.text(0.0, 1.0, "\n".join(lines), va="top", family="monospace", fontsize=10,
                 color="firebrick" if verdict.bound == "data-bound" else "black")
    fig.suptitle(title or "training run", fontsize=14)
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)
    return verdict


def _memory_limits(a, records: list[dict]) -> None:
    """The memory panel's dotted lines: 10 % over the second epoch, where the trainer warns."""
    epochs = [r for r in records if r.get("kind") == "epoch"]
    if len(epochs) < 2:
        return
    for key, who in (("main_rss_gib", "main"), ("workers_pss_gib", "workers")):
        base = epochs[1].get(key)
        if base:
            a.axhline(base * (1 + GROWTH_LIMIT), color="grey", linestyle=":", linewidth=1,
                      label=f"{who}: +{100 * GROWTH_LIMIT:.0f} % over epoch 2 (warned above)")


def _wrap(text: str, width: int) -> list[str]:
    out, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return out + [line] if line else out
