"""bench-loader: the single-loader run, --compare's rows (each expected row ran, or says why not), --help."""

from __future__ import annotations

import json
import os

import pytest

from tests.fixtures.loader import to_pixel_set, write_shard_set
from imagenet_shards.train.bench import compare as C
from imagenet_shards.train.bench import peers as P
from imagenet_shards.train.bench import run as bench
from imagenet_shards.train.bench.baselines import Baseline
from imagenet_shards.train.bench.timing import summarize
from imagenet_shards.train.loader import decode as dec

BUILT_DECODERS = ["pil", "turbo"] if dec._jpegcrop is not None else ["pil"]

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

# rows that run everywhere the project installs; DALI and FFCV run only where they are installed
EXPECTED = ("imagenet-shards (", "imagenet-shards (pil)", "torchvision ImageFolder + PIL", "seed tarfile dataset + PIL",
            "webdataset .decode('pil') + PIL")
OPTIONAL = ("DALI CPU pipeline", "FFCV", "FFCV, rn50 write (50 % JPEG, 500 px)",
            "FFCV, rn18 write (10 % JPEG, 400 px)")  # peers: subprocesses in their own environments
TINY = ["--batches", "2", "--warmup", "1", "--batch-size", "4", "--res", "16"]
REAL_PEERS = os.environ.get(P.PEERS_ENV)  # read before the autouse fixture below hides it


@pytest.fixture(autouse=True)
def no_peers(monkeypatch):
    """Tests do not pick up peer environments a developer built: each test names its own."""
    monkeypatch.delenv(P.PEERS_ENV, raising=False)


@pytest.fixture(scope="module")
def bench_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    write_shard_set(root, train=48, val=16, shard_samples=16, num_classes=4, content="texture", size=(96, 72))
    return str(root)


def _compare_json(data, capsys, *args) -> dict:
    assert bench.main([data, "--compare", "--json", "--decoder", "turbo" if C.dec.AUTO_DECODER == "turbo" else "tvio",
                       *args]) == 0
    return json.loads(capsys.readouterr().out)


def _assert_rows(rows: list[dict]) -> None:
    """Every expected row carries figures from this run; the others carry figures or say why not."""
    names = [r["name"] for r in rows]
    assert names[0].startswith(EXPECTED[0]) and names[1:len(EXPECTED)] == list(EXPECTED[1:])
    assert names[len(EXPECTED):] == list(OPTIONAL)
    for r in rows[:len(EXPECTED)]:
        assert r["note"] == "", r
        assert r["images_per_s"] > 0 and r["images_per_s_best"] >= r["images_per_s"] and r["speedup"] > 0, r
    assert rows[0]["speedup"] == 1
    for r in rows[len(EXPECTED):]:
        if r["note"].startswith("not run: "):
            assert all(r[k] is None for k in C.FIGURES), r  # never an outside figure
        else:
            assert r["images_per_s"] > 0, r


def test_bench_loader_json(bench_set, capsys):
    rc = bench.main([bench_set, "--workers", "0", "--batches", "3", "--warmup", "1", "--batch-size", "4",
                     "--res", "16", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["images"] == 12 and out["images_per_s"] > 0 and out["rounds"] == 1  # --help: default 1 round
    assert {"images_per_s", "workers", "batch_size", "decoder", "images_per_s_per_worker"} <= set(out)
    assert bench.main([bench_set + "/nope", "--json"]) == 2


def test_target_rate_gives_the_verdict(bench_set, capsys):
    args = [bench_set, "--workers", "0", "--batches", "2", "--warmup", "1", "--batch-size", "4", "--res", "16"]
    assert bench.main([*args, "--json", "--target-img-s", "1e9"]) == 0
    out = json.loads(capsys.readouterr().out)
    v = out["verdict"]
    assert v["bound"] == "data-bound" and v["speedup_needed"] == pytest.approx(1e9 / out["images_per_s"])
    assert bench.main([*args, "--target-img-s", "0.001"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("compute-bound: the loader gives")
    assert bench.main([*args, "--target-img-s", "-1"]) == 2


def test_target_rate_advice_leaves_out_the_decoder_in_use(bench_set, capsys, monkeypatch):
    """Issue 25: beyond the cores, bench-loader advised --decoder turbo while turbo was in use."""
    monkeypatch.setattr(bench, "usable_cores", lambda: 1)  # 1e9 img/s needs more workers than cores
    args = [bench_set, "--workers", "0", "--batches", "2", "--warmup", "1", "--batch-size", "4", "--res", "16",
            "--target-img-s", "1e9"]
    for decoder in BUILT_DECODERS:
        assert bench.main([*args, "--decoder", decoder]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert f"decoder {decoder}" in lines[0] and "more workers than the 1 cores" in lines[-1]
        assert ("--decoder turbo" in lines[-1]) == (decoder != "turbo")


def test_compare_every_expected_row_ran(bench_set, capsys):
    out = _compare_json(bench_set, capsys, "--workers", "0", *TINY)
    assert out["rounds"] == 3  # --help: 3 rounds with --compare
    _assert_rows(out["compare"])
    assert out["images_per_s"] == out["compare"][0]["images_per_s"]
    for r in out["compare"][len(EXPECTED):]:
        assert r["note"].startswith("not run: peers not found (pass --peers DIR or set IMAGENET_SHARDS_PEERS")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compare_every_expected_row_ran_with_worker_processes(bench_set, capsys):
    out = _compare_json(bench_set, capsys, "--workers", "1", "--rounds", "2", *TINY)
    _assert_rows(out["compare"])


def test_compare_text_table_names_every_row(bench_set, capsys):
    assert bench.main([bench_set, "--compare", "--workers", "0", "--rounds", "1", *TINY]) == 0
    out = capsys.readouterr().out
    for name in EXPECTED + OPTIONAL:
        assert name in out


def test_a_baseline_that_breaks_says_not_run(bench_set, monkeypatch):
    def broken():
        raise RuntimeError("cannot start\nsecond line")

    def dies():
        return lambda e: (1 // 0 for _ in range(1))

    monkeypatch.setattr(C, "baselines", lambda *a, **k: [
        Baseline("broken", broken), Baseline("dies", dies), Baseline("absent", None, "not run: not installed")])
    rows = C.compare(bench_set, workers=0, batches=2, batch_size=4, res=16, warmup=1, rounds=2, also_decoders=())
    by = {r["name"]: r for r in rows}
    assert by["broken"]["note"] == "not run: failed to start: RuntimeError: cannot start"
    assert by["dies"]["note"] == "not run: failed in round 1: ZeroDivisionError: integer division or modulo by zero"
    assert by["absent"]["note"] == "not run: not installed"
    for name in ("broken", "dies", "absent"):
        assert all(by[name][k] is None for k in C.FIGURES)
    assert rows[0]["images_per_s"] > 0 and [r["name"] for r in rows[1:4]] == ["broken", "dies", "absent"]


def test_comparison_rows_use_medians_and_leave_unrun_rows_empty():
    def run(ips, cpu):
        return {"images": 10, "seconds": 10 / ips, "images_per_s": ips, "cpu_seconds": 10 / cpu,
                "images_per_cpu_s": cpu}
    runs = {"ours": [run(100, 50), run(300, 60), run(200, 70)], "theirs": [run(50, 30), run(100, 30), run(10, 30)],
            "empty": []}
    rows = C.comparison_rows(["ours", "theirs", "empty", "absent"], runs, {"absent": "not run: peers not found"},
                             workers=2)
    ours, theirs, empty, absent = rows
    assert (ours["images_per_s"], ours["images_per_s_best"], ours["images_per_s_per_worker"]) == (200, 300, 100)
    assert theirs["images_per_s"] == 50 and theirs["speedup"] == 4 and theirs["speedup_cpu"] == 2
    assert empty["note"] == "not run: no round finished" and absent["note"] == "not run: peers not found"
    assert all(r[k] is None for r in (empty, absent) for k in C.FIGURES)


def test_summarize_reports_the_median_and_the_best():
    runs = [{"images": 8, "images_per_s": v, "images_per_cpu_s": None} for v in (5.0, 1.0, 3.0, 9.0)]
    s = summarize(runs)
    assert (s["images_per_s"], s["images_per_s_best"], s["images"], s["images_per_cpu_s"]) == (4.0, 9.0, 32, None)


def test_help_states_every_default_and_the_median(capsys):
    parser = bench.build_parser()
    text = " ".join(parser.format_help().split())
    assert "median" in text and "best one reported" not in text
    for action in parser._actions:
        if action.option_strings and action.default not in (None, False, "==SUPPRESS=="):
            assert f"default {action.default}" in " ".join(action.help.split()), action.option_strings
    assert "default 1, or 3 with --compare" in text


def test_bench_decoders_script_measures_or_says_why_not(bench_set, capsys):
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[3] / "bench" / "bench_decoders.py"
    spec = importlib.util.spec_from_file_location("bench_decoders", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([bench_set, "--images", "4", "--passes", "1", "--res", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cells = [row[d] for row in out["decoders"] for d in ("pil", "turbo", "tvio")]
    cells += [row["ms"] for row in out["candidates"]["32"]]
    assert len(out["decoders"]) == 4 and len(out["candidates"]["32"]) == 13
    for cell in cells:
        assert cell.startswith("not run: ") if isinstance(cell, str) else cell[0] > 0 and cell[1] > 0
    assert not isinstance(out["decoders"][0]["pil"], str) and not isinstance(out["candidates"]["32"][0]["ms"], str)
    assert script.main([bench_set + "/nope"]) == 2


# ----------------------------------------------------------------------------- peers (FFCV, DALI)

@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compare_runs_the_real_peers(bench_set, capsys):
    if not REAL_PEERS:
        pytest.skip(f"set {P.PEERS_ENV} to the folder shared/peers/setup.sh built")
    out = _compare_json(bench_set, capsys, "--workers", "1", "--rounds", "2", "--peers", REAL_PEERS, *TINY)
    _assert_rows(out["compare"])
    for r in out["compare"][len(EXPECTED):]:
        assert r["images_per_s"] > 0 and r["note"].startswith("1 thread(s)"), r


def _fake_env(root, env: str):
    """``root/env/bin/python``: this interpreter, as a peer environment would provide its own."""
    import sys
    python = root / env / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    os.chmod(python, 0o755)


def _tiny_compare(data, **kw):
    return C.compare(data, **{**dict(workers=0, batches=2, batch_size=4, res=16, warmup=1, rounds=2, also_decoders=()),
                              **kw})


def test_peer_rows_say_where_the_environments_are_missing(bench_set, tmp_path, monkeypatch):
    rows = _tiny_compare(bench_set, peers=str(tmp_path / "absent"))
    assert rows[-4]["note"].startswith(f"not run: peers not found at {tmp_path / 'absent'} (pass --peers DIR")
    monkeypatch.setenv(P.PEERS_ENV, str(tmp_path))  # the environment variable is read when --peers is not given
    rows = _tiny_compare(bench_set)
    assert rows[-4]["note"] == (f"not run: no DALI CPU pipeline environment at {tmp_path / 'dali/bin/python'} "
                                f"(shared/peers/setup.sh builds it)")
    assert all(r["note"].startswith(f"not run: no {r['name']} environment at") for r in rows[-3:])
    assert all(r[k] is None for r in rows[-4:] for k in C.FIGURES)


def test_rows_say_how_many_bytes_they_read_per_image(bench_set):
    """Our shards (tar overhead included) and the same JPEGs as files: what each row reads."""
    listed = _tiny_compare(bench_set, rounds=1)
    rows = {r["name"]: r for r in listed}
    ours, files = listed[0]["bytes_per_image"], rows["torchvision ImageFolder + PIL"]["bytes_per_image"]
    # 3 members a sample (headers, .cls, .json, padding) and each shard's end blocks: ~2.8-3.5 KB here
    assert files > 0 and files + 5 * 512 < ours < files + 8 * 512
    assert rows["webdataset .decode('pil') + PIL"]["bytes_per_image"] == ours
    assert rows["FFCV"]["bytes_per_image"] is None  # not run here: nothing measured


def test_the_ffcv_rows_use_ffcv_imagenets_write_settings():
    """The rn50 and rn18 rows write as ffcv-imagenet recommends (README, write_imagenet.sh)."""
    assert P.FFCV_WRITES["rn50"] == {"write_mode": "proportion", "max_resolution": 500, "compress_probability": 0.5,
                                     "jpeg_quality": 90}
    assert P.FFCV_WRITES["rn18"]["max_resolution"] == 400 and P.FFCV_WRITES["rn18"]["compress_probability"] == 0.1
    assert P.describe_write("rn18") == "10 % JPEG q90, the rest raw, max side 400"
    assert [p.write for p in P.PEERS if p.env == "ffcv"] == ["jpg", "rn50", "rn18"]


def test_peer_scripts_run_in_the_peer_environment_and_report_why_they_cannot_start(bench_set, tmp_path):
    # the real peer scripts, run by an environment without ffcv or nvidia.dali
    for env in ("ffcv", "dali"):
        _fake_env(tmp_path, env)
    rows = _tiny_compare(bench_set, peers=str(tmp_path))
    by = {r["name"]: r for r in rows}
    assert by["FFCV"]["note"] == "not run: FFCV failed to start: ModuleNotFoundError: No module named 'ffcv'"
    assert by[OPTIONAL[2]]["note"].startswith(f"not run: {OPTIONAL[2]} failed to start: ModuleNotFoundError")
    assert by["DALI CPU pipeline"]["note"].startswith(
        "not run: DALI CPU pipeline failed to start: ModuleNotFoundError: No module named 'nvidia")
    assert all(by[n][k] is None for n in ("FFCV", "DALI CPU pipeline") for k in C.FIGURES)


FAKE_PEER = """
import os, sys
sys.path.insert(0, {bench_dir!r})
from peer_serve import serve

def build(setup):
    import numpy as np
    assert os.path.isdir(setup["folder"]) and setup["res"] == 16
    batch = (np.zeros((setup["batch_size"], 3, 16, 16), np.uint8), np.zeros(setup["batch_size"], np.int64))
    served = []

    def epochs(e):
        for _ in range(3):
            served.append(1)
            if {dies} and len(served) > 3:  # dies in its second round
                os._exit(3)
            yield batch
    return epochs, "fake note"

serve(build)
"""


def test_peer_rows_carry_figures_timed_in_the_peer_and_the_peers_are_ended(bench_set, tmp_path, monkeypatch):
    fakes = []
    for name, dies in (("good", False), ("dies", True)):
        script = tmp_path / f"peer_{name}.py"
        script.write_text(FAKE_PEER.format(bench_dir=str(P.HERE), dies=dies))
        _fake_env(tmp_path, name)
        fakes.append(P.Peer(name, name, script))
    monkeypatch.setattr(P, "PEERS", tuple(fakes))
    started = []
    real_start = P.start_peer
    monkeypatch.setattr(P, "start_peer", lambda *a: started.append(real_start(*a)) or started[-1])
    rows = _tiny_compare(bench_set, peers=str(tmp_path))
    by = {r["name"]: r for r in rows}
    assert by["good"]["images_per_s"] > 0 and by["good"]["speedup"] > 0 and by["good"]["note"] == "fake note"
    assert by["dies"]["note"] == "not run: dies failed while timed: it exited with status 3"
    assert all(by["dies"][k] is None for k in C.FIGURES)
    assert len(started) == 2 and all(p.proc.poll() is not None for p in started)


def test_also_set_adds_the_pixel_form_as_a_row_and_refuses_other_images(bench_set, tmp_path, capsys):
    """--also-set DIR: the same images in another form (here prepare-shards derive's pixel form at max
    side 64) are a row of their own, named by the set's form and max side, with its bytes per image."""
    pixels = str(to_pixel_set(bench_set, max_side=64))
    out = _compare_json(bench_set, capsys, "--workers", "0", "--rounds", "1", "--also-set", pixels, *TINY)
    rows = {r["name"]: r for r in out["compare"]}
    row = rows["imagenet-shards (yuv420, 64 px)"]
    assert row["note"] == "" and row["images_per_s"] > 0
    assert row["bytes_per_image"] != out["compare"][0]["bytes_per_image"] > 0  # its own shards, not DATA's
    other = write_shard_set(tmp_path / "other", train=16, val=4, shard_samples=16, num_classes=4)
    assert bench.main([bench_set, "--compare", "--also-set", str(other), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "holds 16 train samples" in err and "\n" not in err
    assert bench.main([bench_set, "--also-set", pixels]) == 2
    assert capsys.readouterr().err.strip() == "error: --also-set only matters with --compare"


def test_peers_flag_needs_compare(bench_set, capsys):
    assert bench.main([bench_set, "--peers", "/tmp"]) == 2
    assert capsys.readouterr().err.strip() == "error: --peers only matters with --compare"


def test_compare_val_gives_everyone_centre_crops(bench_set, capsys):
    from imagenet_shards.train.bench.baselines import pil_transform, val_resize
    from PIL import Image

    assert val_resize(224) == 256 and val_resize(16) == 18
    img = Image.new("RGB", (40, 20))
    img.paste((255, 0, 0), (10, 0, 30, 20))  # the middle 20 columns are red
    out = pil_transform(16, train=False)(img)
    assert tuple(out.shape) == (3, 16, 16) and int(out[0].float().mean()) > 200  # centred: all red
    rows = _tiny_compare(bench_set, split="val")
    by = {r["name"]: r for r in rows}
    assert rows[0]["images_per_s"] > 0 and by["torchvision ImageFolder + PIL"]["images_per_s"] > 0
    assert bench.main([bench_set, "--compare", "--split", "val", "--workers", "0", "--rounds", "1", *TINY]) == 0
    assert "torchvision ImageFolder + PIL" in capsys.readouterr().out
