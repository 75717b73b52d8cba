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
