"""prepare-shards as a command: errors are one line with exit 2 and leave nothing behind, refusals
come before any work, the help names every subcommand, a rerun says exactly what differs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.prepare.cli import one_line
from imagenet_shards.pipeline.prepare.config import Config, ConfigError
from imagenet_shards.pipeline.prepare.run import state_differences
from tests.fixtures.servers import FaultPlan, fault_proxy, serve_http


def sources(src: Path) -> list[str]:
    return ["--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"),
            "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz")]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def test_help_names_the_finalize_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        prepare_main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "prepare-shards finalize OUT" in text and "--part I/N" in text
    with pytest.raises(SystemExit):
        prepare_main(["finalize", "--help"])
    assert "usage: prepare-shards finalize" in capsys.readouterr().out


@pytest.mark.timeout(30)
def test_a_read_only_http_out_is_refused_before_any_work(tmp_path, capsys):
    """Refused before the sources are indexed (the missing --train is never looked at) and before
    the server is contacted at all (so there is nothing to retry)."""
    plan = FaultPlan(error_every=0, reset_every=0, delay_every=0)
    with serve_http(tmp_path) as base, fault_proxy(base, plan) as proxy:
        for out in (f"{proxy}/shards", proxy.replace("http://", "https://") + "/shards"):
            assert prepare_main(["--train", str(tmp_path / "missing.tar"), "--splits", "train",
                                 "--out", out, "--quiet"]) == 2
            err = one_error_line(capsys)
            assert "read-only" in err and out in err and "missing.tar" not in err
    assert plan.seen == []
    assert prepare_main(["finalize", "https://example.invalid/shards"]) == 2
    assert "read-only" in one_error_line(capsys)


def test_a_staging_url_is_refused_and_nothing_is_created(synthetic_imagenet, tmp_path, capsys):
    out = tmp_path / "out"
    for staging in ("s3://bucket/staging", "http://127.0.0.1:9/staging"):
        for dest in (str(out), "s3://bucket/shards"):
            assert prepare_main(sources(synthetic_imagenet) + ["--out", dest, "--staging", staging,
                                                               "--quiet"]) == 2
            err = one_error_line(capsys)
            assert "--staging takes a local folder" in err and staging in err
    assert list(tmp_path.iterdir()) == []
    assert not Path("s3:").exists() and not Path("http:").exists()


@pytest.mark.parametrize("garbage", ["random", "gzip-of-random", "empty"])
def test_a_garbage_devkit_is_one_line(synthetic_imagenet, tmp_path, capsys, garbage):
    devkit = tmp_path / "ILSVRC2012_devkit_t12.tar.gz"
    data = bytes(range(256)) * 40
    devkit.write_bytes({"random": data, "gzip-of-random": gzip.compress(data), "empty": b""}[garbage])
    args = sources(synthetic_imagenet)
    args[args.index("--devkit") + 1] = str(devkit)
    out = tmp_path / "out"
    assert prepare_main(args + ["--out", str(out), "--quiet"]) == 2
    err = one_error_line(capsys)
    assert f"devkit {devkit} is not a readable tar archive" in err
    assert not out.exists()


def test_library_messages_that_span_lines_are_printed_on_one():
    text = "file could not be opened successfully:\n- method gz: ReadError('x')\n- method bz2: ReadError('y')"
    assert one_line(OSError(text)) == "file could not be opened successfully: - method gz: ReadError('x') - " \
                                      "method bz2: ReadError('y')"
    assert one_line("cannot read https://u:pw@h/x\n\tdetail") == "cannot read https://***@h/x detail"


def test_a_rerun_with_another_seed_names_the_field_and_both_values(synthetic_imagenet, tmp_path, capsys):
    out = tmp_path / "out"
    base = sources(synthetic_imagenet) + ["--out", str(out), "--quiet", "--shard-samples", "40", "--splits", "val"]
    assert prepare_main(base) == 0
    assert prepare_main(base + ["--seed", "1"]) == 2
    err = one_error_line(capsys)
    assert "(seed: 0 (existing) vs 1 (asked));" in err and "--overwrite" in err
    assert prepare_main(base + ["--seed", "1", "--quality", "80", "--shard-samples", "30"]) == 2
    err = one_error_line(capsys)
    assert ("(quality: 90 (existing) vs 80 (asked); seed: 0 (existing) vs 1 (asked); "
            "shard_samples: 40 (existing) vs 30 (asked))") in err
    assert json.loads((out / "manifest.json").read_text())["config"]["seed"] == 0  # untouched


def test_state_differences_name_sources_and_classes():
    old = {"config": {"seed": 0, "splits": ["train", "val"], "shard_bytes": None},
           "sources": [{"split": "train", "kind": "tar-of-tars", "name": "a.tar", "members": 10,
                        "fingerprint": "index-sha256:" + "0" * 64, "bytes": 1}],
           "classes": [{"index": 0, "wnid": "n01440764"}], "splits": {"train": {"num_shards": 1}}}
    new = {**old, "config": {"seed": 0, "splits": ["train"], "shard_bytes": 1000},
           "sources": [{**old["sources"][0], "name": "b.tar", "members": 12}],
           "classes": [{"index": 0, "wnid": "n01443537"}]}
    assert state_differences(old, new) == [
        "shard_bytes: unset (existing) vs 1000 (asked)",
        "splits: train,val (existing) vs train (asked)",
        "train source: a.tar (tar-of-tars, 10 members, index-sha256:000000000000…) (existing) vs "
        "b.tar (tar-of-tars, 12 members, index-sha256:000000000000…) (asked)",
        "classes: 1 (existing) vs 1 (asked), differing in n01440764, n01443537"]
    assert state_differences(old, {**old, "splits": {"train": {"num_shards": 2}}}) == [
        "splits: the recorded job differs"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(quality=0), "quality must be an integer in 1..100, got 0"),
    (dict(resize="longest:9"), "invalid resize policy 'longest:9'"),
    (dict(max_pixels=0), "max_pixels must be a positive integer"),
    (dict(shard_samples=None), "give exactly one of --shard-samples and --shard-bytes"),
    (dict(shard_bytes=1000), "give exactly one of --shard-samples and --shard-bytes"),
    (dict(shard_samples=0), "--shard-samples must be a positive integer, got 0"),
    (dict(seed=-1), "--seed must be a non-negative integer, got -1"),
    (dict(splits=("train", "tests")), "--splits takes train, val and/or test, got train,tests"),
    (dict(splits=()), "--splits takes train, val and/or test, got nothing"),
])
def test_the_one_config_check(kwargs, message):
    with pytest.raises(ConfigError) as e:
        Config(**kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_config_keeps_splits_in_canonical_order():
    assert Config(splits=("val", "train")) == Config() and Config(splits=["val"]).splits == ("val",)


@pytest.mark.parametrize("args,message", [
    (["--shard-samples", "0"], "--shard-samples must be a positive integer"),
    (["--seed", "-3"], "--seed must be a non-negative integer"),
    (["--splits", "train,tests"], "--splits takes train, val and/or test"),
    (["--quality", "101"], "quality must be an integer in 1..100"),
])
def test_bad_settings_exit_2_with_one_line_before_any_work(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert prepare_main(["--train", str(tmp_path / "missing.tar"), "--out", str(out), "--quiet"] + args) == 2
    assert message in one_error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--train", "--val", "--devkit", "--val-labels"])
def test_a_url_as_a_source_is_refused_not_taken_for_a_local_path(synthetic_imagenet, tmp_path, capsys, flag):
    args = sources(synthetic_imagenet)
    if flag == "--val-labels":
        args = args[:4] + ["--val-labels", "s3://bucket/LOC_val_solution.csv"]
    else:
        args[args.index(flag) + 1] = "s3://key:secret@bucket/archive"
    out = tmp_path / "out"
    assert prepare_main(args + ["--out", str(out), "--quiet"]) == 2
    err = one_error_line(capsys)
    assert f"{flag} takes a local path" in err and "secret" not in err
    assert not out.exists()


def test_file_urls_are_local_paths(synthetic_imagenet, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--val", f"file://{synthetic_imagenet / 'ILSVRC2012_img_val.tar'}",
            "--devkit", f"file://{synthetic_imagenet / 'ILSVRC2012_devkit_t12.tar.gz'}", "--splits", "val"]
    assert prepare_main(args + ["--out", f"file://{out}", "--quiet"]) == 0
    assert (out / "manifest.json").exists()


def test_a_test_source_adds_the_test_split_unless_splits_says_otherwise(synthetic_imagenet, tmp_path, capsys):
    """--test SRC alone builds the test split (it used to be dropped, exit 0); with an explicit --splits
    that leaves it out, one line says the source is not read."""
    flat = str(synthetic_imagenet / "ILSVRC2012_img_val.tar")  # flat and unlabeled as a test source
    base = sources(synthetic_imagenet) + ["--resize", "longer:64", "--workers", "1", "--test", flat]
    assert prepare_main(base + ["--out", str(tmp_path / "implied"), "--quiet"]) == 0
    m = json.loads((tmp_path / "implied" / "manifest.json").read_text())
    assert m["config"]["splits"] == ["train", "val", "test"] and m["splits"]["test"]["num_samples"] > 0
    assert capsys.readouterr().err == ""
    assert prepare_main(base + ["--out", str(tmp_path / "told"), "--splits", "val", "--json"]) == 0
    m = json.loads((tmp_path / "told" / "manifest.json").read_text())
    assert list(m["splits"]) == ["val"]
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert err == ["note: --train, --test not read: --splits val leaves those splits out"]


def test_the_progress_bar_counts_rejected_and_skipped_as_the_summary_does(make_synthetic, tmp_path, capsys):
    src = make_synthetic(classes=4, train_per_class=3, val_per_class=1, layouts=("ilsvrc",))
    assert prepare_main(["--train", str(src / "ILSVRC2012_img_train.tar"), "--splits", "train", "--workers", "1",
                         "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    summary = next(line for line in captured.out.splitlines() if line.strip().startswith("train"))
    rejected, skipped = (int(summary.split(f" {w}")[0].rsplit(" ", 1)[-1]) for w in ("rejected", "skipped"))
    assert (rejected, skipped) == (2, 1)  # the quirks: a truncated and an empty JPEG; an AppleDouble file
    bar = [seg for seg in captured.err.replace("\r", "\n").splitlines() if seg.startswith("prepare train")][-1]
    assert bar.endswith(f"rejected={rejected}, skipped={skipped}]"), bar
