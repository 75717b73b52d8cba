"""report-run and the loader verdict: TensorBoard events hold every scalar of metrics.jsonl, the
one-page report of a real short CPU run has its panels, and the verdict logic on both sides."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imagenet_shards.train.report import verdict as V
from imagenet_shards.train.report.cli import main as report_main
from imagenet_shards.train.report.page import DPI, PAGE_INCHES, read_run
from tests.fixtures.trainer import TINY, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- the verdict (pure)

def test_data_bound_from_wait_names_the_speedup_and_the_workers():
    v = V.from_wait(0.34, workers=8, cores=32)
    assert v.bound == "data-bound"
    assert v.speedup_needed == pytest.approx(1 / 0.66)
    assert v.workers_needed == 14  # ceil(8 x 1.515 x 1.1 headroom)
    assert v.line.startswith("data-bound: the training loop waited 34 % of the time; ~1.5x more loader")
    assert "raise --workers from 8 to ~14" in v.line


def test_compute_bound_below_five_percent_wait():
    v = V.from_wait(0.012, workers=8)
    assert v.bound == "compute-bound" and v.workers_needed == 8
    assert v.line == "compute-bound: data-wait 1.2 % (the loader keeps up)"


def test_data_bound_beyond_the_cores_suggests_other_remedies():
    v = V.from_rates(800, 2400, workers=8, cores=12)
    assert v.bound == "data-bound" and v.speedup_needed == pytest.approx(3.0)
    assert "more workers than the 12 cores can give" in v.line and "lower resolution" in v.line


def test_the_advice_names_only_what_would_change_something():
    """Issue 25: --decoder turbo is advised only when the rate was measured with another decoder."""
    assert "--decoder turbo" in V.from_rates(800, 2400, workers=8, cores=12, decoder="pil").line
    for decoder in ("turbo", None):  # in use, or not known
        assert "--decoder" not in V.from_rates(800, 2400, workers=8, cores=12, decoder=decoder).line


def test_rates_at_target_are_compute_bound_and_unknown_without_numbers():
    assert V.from_rates(2500, 2400).bound == "compute-bound"
    assert V.from_rates(None, 2400).bound == "unknown"
    assert V.from_wait(None).bound == "unknown"


def test_run_verdict_prefers_the_ceiling_then_the_last_epoch_then_intervals():
    intervals = [{"kind": "train_interval", "epoch": 0, "step": 2, "data_wait_fraction": 0.8},  # start-up
                 {"kind": "train_interval", "epoch": 0, "step": 4, "data_wait_fraction": 0.02},
                 {"kind": "train_interval", "epoch": 0, "step": 6, "data_wait_fraction": 0.04}]
    v = V.from_metrics(intervals)
    assert v.bound == "compute-bound" and v.wait_fraction == pytest.approx(0.03)
    epoch = [{"kind": "epoch", "epoch": 0, "step": 6, "data_wait_fraction": 0.5}]
    assert V.from_metrics(intervals + epoch).bound == "data-bound"
    efficiency = [{"kind": "efficiency", "real_img_per_s": 990.0, "ceiling_img_per_s": 1000.0}]
    assert V.from_metrics(intervals + epoch + efficiency).bound == "compute-bound"


# ----------------------------------------------------------------------------- a real short run

@pytest.fixture(scope="module")
def run_dir(tiny_shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "run"
    assert run_cli("--data", tiny_shards, "--out", out, *TINY, "--epochs", "2", "--measure-ceiling", "4") == 0
    return out


def _numeric_fields(records: list[dict]) -> set[str]:
    return {f"{r['kind']}/{k}" for r in records for k, v in r.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("time", "step")}


def test_every_scalar_of_metrics_jsonl_reaches_tensorboard(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = read_run(str(run_dir))
    expected = _numeric_fields(records)
    for tag in ("train_interval/loss", "train_interval/acc", "train_interval/lr", "train_interval/img_per_s",
                "train_interval/data_wait_fraction", "epoch/val_top1", "epoch/val_top5",
                "efficiency/loader_efficiency"):
        assert tag in expected, tag  # the run produced it, so the check below covers it
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert expected <= tags, sorted(expected - tags)
    # and the values agree, e.g. the last val top-1
    last = [r for r in records if r["kind"] == "epoch"][-1]
    assert events.Scalars("epoch/val_top1")[-1].value == pytest.approx(last["val_top1"], rel=1e-6)


def test_the_run_records_its_set_up_and_ends_with_the_verdict(run_dir):
    records = read_run(str(run_dir))
    start = records[0]
    assert start["kind"] == "start" and start["workers"] == 0 and start["cores_per_rank"] >= 1
    final = records[-1]
    assert final["kind"] == "final"
    assert final["loader_verdict"] == V.from_metrics(records, workers=0, cores=start["cores_per_rank"]).line


def test_the_run_says_where_tensorboard_events_go(tmp_path, capsys):
    out = tmp_path / "syn"
    assert run_cli("--synthetic-data", "--out", out, *TINY, "--epochs", "1", "--limit-batches", "2") == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert f"TensorBoard events: {out / 'tensorboard'}" in text and f"report-run {out}" in text
    assert "loader: " in text and (out / "tensorboard").is_dir()


def test_report_png_has_its_panels_and_the_verdict(run_dir, tmp_path, capsys):
    out = tmp_path / "report.png"
    assert report_main([str(run_dir), "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["report"] == str(out) and printed["bound"] in ("data-bound", "compute-bound")
    fps = printed["data_fingerprints"]  # per epoch: samples used and their key hash, train and val
    assert [f["epoch"] for f in fps] == [0, 1] and all(f["val"]["samples"] == 20 for f in fps)
    # 64 train samples in batches of 8, no spares: each epoch uses every one, so the same set
    assert all(f["train"]["samples"] == 8 * 8 for f in fps) and fps[0]["train"] == fps[1]["train"]
    img = np.asarray(Image.open(out).convert("L"))
    assert img.shape == (PAGE_INCHES[1] * DPI, PAGE_INCHES[0] * DPI)
    h, w = img.shape
    # six plot cells (3 rows x 2) above the summary row; each has dark pixels (axes, curves, text)
    for row in range(3):
        for col in range(2):
            cell = img[row * h // 4 + 20:(row + 1) * h // 4 - 20, col * w // 2 + 20:(col + 1) * w // 2 - 20]
            assert (cell < 128).mean() > 0.01, (row, col)
    assert (img[3 * h // 4 + 20:h - 20] < 128).mean() > 0.005  # the summary and the verdict


def test_report_of_a_remote_run_folder(run_dir, tmp_path, capsys):
    """A copy of the run folder behind HTTP (or in a bucket) reports the same verdict."""
    from tests.fixtures.servers import serve_http

    local = tmp_path / "local.png"
    assert report_main([str(run_dir), "--out", str(local), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)["line"]
    with serve_http(run_dir) as base:
        assert report_main([base, "--out", str(tmp_path / "remote.png"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["line"] == want and (tmp_path / "remote.png").stat().st_size > 10_000
    assert report_main([str(run_dir), "--out", "s3://bucket/report.png"]) == 2  # --out is local only
    assert report_main([str(run_dir), "--out", f"file://{tmp_path}/file-url.png"]) == 0  # file:// is a local path
    assert (tmp_path / "file-url.png").stat().st_size > 10_000


def test_report_of_a_folder_without_metrics_is_a_one_line_error(tmp_path, capsys):
    assert report_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no metrics.jsonl") and err.count("\n") == 1


def test_docs_training_md_names_every_record_kind_and_field_of_a_run(run_dir):
    """docs/training.md's metrics.jsonl table against a real run's records (with --measure-ceiling,
    so every kind but `eval` is written): each kind is a row, each field is named in its row."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "training.md").read_text()
    table = text[text.index("| kind | fields |"):].split("\n\n", 1)[0].splitlines()[2:]
    rows = {re.match(r"\| `(\w+)`", line).group(1): line for line in table}
    records = read_run(str(run_dir))
    epoch_fields = {k for r in records if r["kind"] == "epoch" for k in r}
    for r in records:
        assert r["kind"] in rows, r["kind"]
        named = set(re.findall(r"[a-z][a-z0-9_]*", rows[r["kind"]]))
        if r["kind"] == "final":  # "the last epoch record plus ..."
            named |= epoch_fields
        missing = sorted(set(r) - named - {"kind", "time"})
        assert not missing, f"{r['kind']}: {missing} are not in docs/training.md's metrics table"


def test_superseded_records_are_drawn_once(tmp_path, capsys):
    """What a run resumed after a kill leaves: the killed run's records past the checkpoint marked
    superseded, the resumed run's after them. report-run reads each step once, in order."""
    from imagenet_shards.train.trainer.watch.telemetry import supersede

    lines = [{"kind": "start", "time": 0}]
    lines += [{"kind": "train_interval", "step": s, "epoch": 0, "loss": 1.0, "img_per_s": 10.0, "time": s}
              for s in range(1, 9)]  # the killed run got to step 8; its checkpoint is at step 5
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"kind": "train_in')
    assert supersede(tmp_path, 5) == 3  # steps 6, 7, 8 (and the half-written last line dropped)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        for r in [{"kind": "start", "time": 9}] + [{"kind": "train_interval", "step": s, "epoch": 0, "loss": 0.5,
                                                   "img_per_s": 20.0, "time": 10 + s} for s in range(6, 11)]:
            f.write(json.dumps(r) + "\n")
    drawn = [(r["step"], r["loss"]) for r in read_run(str(tmp_path)) if r["kind"] == "train_interval"]
    assert drawn == [(s, 1.0) for s in range(1, 6)] + [(s, 0.5) for s in range(6, 11)]
    assert report_main([str(tmp_path), "--out", str(tmp_path / "r.png")]) == 0
