"""Every example in README.md and docs/ that can run on synthetic data runs here, so none can rot.

The convention (checked below): every fenced block has an info string.
- ```sh — commands a reader can paste; each block runs top to bottom in a fresh folder holding a
  synthetic ImageNet under the names the docs use (the ILSVRC archives, a class-tar folder,
  `imagefolder/`, `kaggle/`, the Hugging Face files in `data/`) and `shards/`, the shard set the
  docs' first prepare-shards command makes (rerunning that command is a no-op). Paths are substituted
  (`/data/imagenet-shards` -> `shards`) and sizes shrunk: training and generator commands get tiny
  overrides appended (argparse takes the last value), `torchrun` runs one process.
- ```python — runs too, with a small prelude (`rank`, `world`, `epochs`, `res_for`) and sizes shrunk.
- ```text / ```json — synopses, transcripts, outputs, examples that need a bucket or a cluster.
  Their commands still must only use flags the command's `--help` lists.
README's "Where your copy came from" table is run row by row as well.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.docs import BIN, DOCS, REPO, SCRIPTS, SUBSTITUTIONS, doc_env, fenced_blocks

TINY_TRAIN = ["--arch", "resnet18", "--res", "32", "--val-res", "36", "--val-crop", "32", "--batch-size", "8",
              "--epochs", "1", "--limit-batches", "2", "--workers", "0", "--device", "cpu", "--amp", "none",
              "--log-interval", "1", "--warmup-epochs", "0"]
TINY_SYNTHETIC = ["--train-per-class", "6", "--val-per-class", "2"]
PRELUDE = "rank, world, epochs = 0, 1, 1\nres_for = lambda epoch: 32\n"
PYTHON_SHRINK = [("workers=8", "workers=1"), (", 256,", ", 8,"), ("res=176", "res=32")]


def logical_lines(body: str) -> list[str]:
    """Lines with backslash continuations joined, comments and blanks dropped."""
    out, cur = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        stripped = cur.strip()
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        if stripped and not stripped.startswith("#"):
            out.append(stripped)
        cur = ""
    return out


def our_command(line: str) -> list[str] | None:
    """The tokens of `line` from our console script on (after env assignments, taskset, torchrun -m),
    or None when the line does not run one of our commands."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:
        return None
    while tokens and (re.match(r"^\w+=", tokens[0]) or tokens[0] == "taskset"):
        tokens = tokens[3:] if tokens[0] == "taskset" else tokens[1:]
    if tokens and tokens[0] == "torchrun" and "-m" in tokens:
        module = tokens[tokens.index("-m") + 1]
        return ["train-imagenet", *tokens[tokens.index("-m") + 2:]] if module == "imagenet_shards.train" else None
    if tokens and tokens[0] in SCRIPTS:
        return tokens
    return None


def shrink(line: str) -> str:
    """The command as the test runs it: paths substituted, sizes tiny."""
    for old, new in SUBSTITUTIONS:
        line = line.replace(old, new)
    tokens = our_command(line)
    if tokens is None:
        return line
    if tokens[0] == "train-imagenet":
        extra = TINY_TRAIN + (["--measure-ceiling", "2"] if "--measure-ceiling" in tokens else [])
        line += " " + " ".join(extra)
        line = re.sub(r"--nproc_per_node[= ]\d+", "--nproc_per_node=1 --standalone", line)
    elif tokens[0] == "make-synthetic-imagenet":
        line += " " + " ".join(TINY_SYNTHETIC)
    elif tokens[0] == "prepare-shards" and "--holdout-per-class" in tokens:
        line += " --holdout-per-class 2"  # the docs hold out timm's 40 a class; the playground's classes hold 4
    return line


def allowed_exit(line: str) -> tuple[int, ...]:
    """audit-shards --expect imagenet-1k on a synthetic set finds it incomplete: exit 1 is its answer."""
    return (0, 1) if (our_command(line) or [""])[0] == "audit-shards" and "--expect" in line else (0,)


@pytest.fixture
def playground(doc_playground) -> Path:
    return doc_playground


def fresh_folder(playground: Path, tmp_path: Path, *, with_shards: bool = True) -> Path:
    """The playground's inputs (linked) and, unless told otherwise, a copy of its shard set."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in playground.iterdir():
        if entry.name == "shards":
            if with_shards:
                shutil.copytree(entry, work / "shards")
        elif entry.name not in ("hf", "hf-parquet", "full", "expected.json"):
            (work / entry.name).symlink_to(entry)
    return work


def run_lines(lines: list[str], work: Path, where: str) -> None:
    env = doc_env()
    for line in lines:
        cmd = shrink(line)
        r = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode in allowed_exit(line), f"{where}: `{cmd}` exited {r.returncode}:\n{r.stderr[-3000:]}"


SH_BLOCKS = [(doc, line, body) for doc, line, info, body in fenced_blocks() if info == "sh"]
PY_BLOCKS = [(doc, line, body) for doc, line, info, body in fenced_blocks() if info == "python"]


def _id(doc: Path, line: int) -> str:
    return f"{doc.relative_to(REPO)}:{line}"


def test_every_fenced_block_says_what_it_is():
    unlabeled = [_id(doc, line) for doc, line, info, _ in fenced_blocks() if info not in ("sh", "python", "text", "json")]
    assert not unlabeled, f"label these blocks sh, python, text or json: {unlabeled}"
    assert len(SH_BLOCKS) >= 5 and PY_BLOCKS  # the examples that run are really collected


@pytest.mark.timeout(900)
@pytest.mark.parametrize("doc,line,body", SH_BLOCKS, ids=[_id(d, n) for d, n, _ in SH_BLOCKS])
def test_shell_examples_run(playground, tmp_path, doc, line, body):
    run_lines(logical_lines(body), fresh_folder(playground, tmp_path), _id(doc, line))


def readme_table_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Where your copy came from"):]
    section = section[:section.index("\n## ", 3)]
    return re.findall(r"\| `(prepare-shards [^`]+)` \|", section)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", readme_table_commands())
def test_every_input_form_in_the_readme_table_runs(playground, tmp_path, command):
    work = fresh_folder(playground, tmp_path, with_shards=False)
    run_lines([command, "audit-shards shards --quiet"], work, "README table")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("doc,line,body", PY_BLOCKS, ids=[_id(d, n) for d, n, _ in PY_BLOCKS])
def test_python_examples_run(playground, tmp_path, doc, line, body):
    work = fresh_folder(playground, tmp_path)
    code = body
    for old, new in SUBSTITUTIONS + PYTHON_SHRINK:
        code = code.replace(old, new)
    r = subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=work, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{_id(doc, line)}:\n{r.stderr[-3000:]}"


def every_documented_command() -> list[tuple[str, list[str]]]:
    out = []
    for doc, line, info, body in fenced_blocks():
        for cmd in logical_lines(body):
            tokens = our_command(cmd)
            if tokens:
                out.append((_id(doc, line), tokens))
    return out


def test_documented_flags_exist():
    """Every --flag in every documented command (runnable or not) is one that command's --help lists."""
    helps: dict[tuple, str] = {}
    missing = []
    for where, tokens in every_documented_command():
        sub = tuple(tokens[:2]) if tokens[0] == "prepare-shards" and tokens[1:2] in (["finalize"], ["adopt"]) \
            else (tokens[0],)
        if sub not in helps:
            r = subprocess.run([str(BIN / sub[0]), *sub[1:], "--help"], capture_output=True, text=True, timeout=120)
            helps[sub] = r.stdout
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", " ".join(tokens[1:])):
            if flag.split("=")[0] not in helps[sub]:
                missing.append(f"{where}: {' '.join(sub)} {flag}")
    assert not missing, missing
