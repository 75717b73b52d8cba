"""Every console script answers a bad argument with one line on stderr and exit 2 (README: "Exit codes").

Each script of pyproject's [project.scripts] (and `python -m imagenet_shards.pipeline.tools.demo`)
is called through the function its console script runs, with arguments argparse refuses: an
invalid value, a missing required argument, an unknown option, two exclusive options.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
DEMO = "imagenet_shards.pipeline.tools.demo:main"

# (script, argv, the message argparse gives, as it must appear on the one line)
CASES = [
    ("make-synthetic-imagenet", ["out", "--classes", "abc"], "argument --classes: invalid int value: 'abc'"),
    ("prepare-shards", ["--out", "o", "--shard-samples", "abc"], "argument --shard-samples: invalid int value: 'abc'"),
    ("prepare-shards", ["--out", "o", "--train-list", "l.txt", "--per-class", "3"],
     "argument --per-class: not allowed with argument --train-list"),
    ("prepare-shards", ["--train", "t.tar"], "the following arguments are required: --out"),
    ("prepare-shards", ["finalize"], "the following arguments are required: OUT"),
    ("prepare-shards", ["adopt", "src", "--bogus"], "unrecognized arguments: --bogus"),
    ("audit-shards", ["s1", "--bogus"], "unrecognized arguments: --bogus"),
    ("inspect-shards", ["s1", "--n", "many"], "argument --n: invalid int value: 'many'"),
    ("imagenet-shards-doctor", ["--bogus"], "unrecognized arguments: --bogus"),
    ("bench-loader", [], "the following arguments are required: DATA"),
    ("train-imagenet", ["--data", "d"], "the following arguments are required: --out"),
    ("report-run", ["run", "--bogus"], "unrecognized arguments: --bogus"),
    ("demo", ["--classes", "abc"], "argument --classes: invalid int value: 'abc'"),
]
PROG = {"demo": "python -m imagenet_shards.pipeline.tools.demo", "prepare-shards finalize": "prepare-shards finalize"}


def entry_point(script: str):
    module, func = (DEMO if script == "demo" else SCRIPTS[script]).split(":")
    return getattr(importlib.import_module(module), func)


def test_every_console_script_has_a_case():
    assert set(SCRIPTS) <= {script for script, _, _ in CASES}


@pytest.mark.parametrize("script,argv,message", CASES, ids=[f"{s} {' '.join(a)}" for s, a, _ in CASES])
def test_argument_errors_are_one_line_and_exit_2(capsys, script, argv, message):
    with pytest.raises(SystemExit) as e:
        entry_point(script)(argv)
    out, err = capsys.readouterr()
    prog = PROG.get(script, script)
    if script == "prepare-shards" and argv[:1] in (["finalize"], ["adopt"]):
        prog = f"prepare-shards {argv[0]}"
    assert e.value.code == 2
    assert out == ""
    assert err == f"error: {message} (see {prog} --help)\n"


def test_the_installed_script_prints_the_same_one_line():
    """The console script itself (a real process): nothing else reaches stderr, not even a usage line."""
    r = subprocess.run([str(Path(sys.executable).with_name("prepare-shards")), "--out", "o", "--shard-samples", "abc"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "error: argument --shard-samples: invalid int value: 'abc' (see prepare-shards --help)\n"


# --workers: one rule for every command (pipeline/console.py: worker_count).


def _parsers() -> dict:
    out = {name: importlib.import_module(ep.split(":")[0]).build_parser() for name, ep in SCRIPTS.items()}
    from imagenet_shards.pipeline.prepare import cli as prepare_cli

    out["prepare-shards adopt"] = prepare_cli.build_adopt_parser()
    return out


def test_every_workers_option_is_parsed_by_the_one_rule():
    from imagenet_shards.pipeline.console import worker_count

    with_workers = {name: a for name, p in _parsers().items() for a in p._actions if "--workers" in a.option_strings}
    assert {"prepare-shards", "prepare-shards adopt", "audit-shards", "train-imagenet",
            "bench-loader"} <= set(with_workers)
    wrong = [name for name, a in with_workers.items() if a.type is not worker_count]
    assert not wrong, wrong


WORKER_COMMANDS = [("prepare-shards", ["--train", "t.tar", "--out", "o"]), ("prepare-shards", ["adopt", "src"]),
                   ("audit-shards", ["data"]), ("train-imagenet", ["--out", "o"]), ("bench-loader", ["data"])]


@pytest.mark.parametrize("script,argv", WORKER_COMMANDS, ids=[" ".join([s, *a[:1]]) for s, a in WORKER_COMMANDS])
@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_negative_or_odd_worker_count_is_one_line_exit_2_everywhere(capsys, script, argv, value):
    with pytest.raises(SystemExit) as e:
        entry_point(script)([*argv, "--workers", value])
    prog = f"prepare-shards {argv[0]}" if argv[0] == "adopt" else script
    assert e.value.code == 2
    assert capsys.readouterr().err == (f"error: argument --workers: must be a whole number >= 0 (0: none, the work "
                                       f"runs in this process), got '{value}' (see {prog} --help)\n")


def test_workers_0_runs_in_the_commands_own_process_and_gives_the_same_bytes(synthetic_imagenet, tmp_path):
    """Real processes: prepare-shards --workers 0 (once: all cores) builds the bytes --workers 2 does,
    and starts no worker process (its pool helper is never asked for one); audit-shards --workers 0
    (once: refused) audits in its own process."""
    src = synthetic_imagenet
    common = ["--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"),
              "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--quiet"]
    guard = tmp_path / "no_pool.py"  # run the CLI with the process pool made to fail: 0 must not start one
    guard.write_text("import sys\nimport imagenet_shards.pipeline.parallel as p\n"
                     "def _no(*a, **k):\n    raise SystemExit('a worker pool was started')\n"
                     "p._pool = _no\nfrom imagenet_shards.pipeline.%s import main\nsys.exit(main(sys.argv[1:]))\n")

    def run(module: str, args: list[str]) -> subprocess.CompletedProcess:
        script = tmp_path / f"{module.replace('.', '_')}.py"
        script.write_text(guard.read_text() % module)
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)

    zero = run("prepare.cli", [*common, "--out", str(tmp_path / "zero"), "--workers", "0"])
    assert zero.returncode == 0, zero.stderr
    two = subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", *common,
                          "--out", str(tmp_path / "two"), "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr
    files = lambda d: {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))  # noqa: E731
                       if p.is_file() and "_prepare" not in p.parts}
    assert files(tmp_path / "zero") == files(tmp_path / "two")
    audit = run("audit.cli", [str(tmp_path / "zero"), "--workers", "0", "--quiet"])
    assert audit.returncode == 0 and "intact" in audit.stdout, audit.stdout + audit.stderr
    pooled = run("audit.cli", [str(tmp_path / "zero"), "--workers", "2", "--quiet"])
    assert pooled.returncode != 0 and "a worker pool was started" in pooled.stderr  # the guard does guard
