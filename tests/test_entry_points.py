"""Import names cannot collide: a user's own train.py / pipeline.py beside our commands changes nothing.

Every console script, ``python -m imagenet_shards.train`` and ``torchrun -m imagenet_shards.train``
run from a folder that holds a ``train.py`` and a ``pipeline.py`` which would announce themselves if
they were ever imported or run; and no module of ours is named like a standard-library module
(running one of our files directly would otherwise shadow the standard module of that name).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"])
TRAP = "raise SystemExit('USER FILE {name} WAS IMPORTED')\n"


@pytest.fixture
def user_project(tmp_path) -> Path:
    for name in ("train", "pipeline", "data", "model"):
        (tmp_path / f"{name}.py").write_text(TRAP.format(name=name))
    return tmp_path


def run_in(folder: Path, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_scripts_from_a_folder_with_its_own_train_py(user_project, script):
    r = run_in(user_project, str(Path(sys.executable).with_name(script)), "--help")
    assert r.returncode == 0, r.stderr
    assert "USER FILE" not in r.stdout + r.stderr
    assert f"usage: {script}" in r.stdout


def test_python_m_and_torchrun_run_our_trainer_not_the_users(user_project):
    for cmd in ([sys.executable, "-m", "imagenet_shards.train", "--help"],
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                 "-m", "imagenet_shards.train", "--help"]):
        r = run_in(user_project, *cmd)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "USER FILE" not in r.stdout + r.stderr
        assert "usage: train-imagenet" in r.stdout


def test_library_imports_from_a_folder_with_its_own_train_py(user_project):
    r = run_in(user_project, sys.executable, "-c",
               "from imagenet_shards.train.loader import make_loader; "
               "from imagenet_shards.pipeline.prepare.run import prepare; print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_no_module_of_ours_shadows_the_standard_library():
    ours = {p.stem for top in ("pipeline", "train") for p in (REPO / top).rglob("*.py")}
    ours |= {p.name for top in ("pipeline", "train") for p in (REPO / top).rglob("*") if p.is_dir()}
    assert not ours & set(sys.stdlib_module_names) - {"__init__", "__main__"}


def test_every_package_folder_is_listed_for_installation():
    """pyproject lists the packages explicitly (the folders are mapped into imagenet_shards): a new
    subpackage missing from the list would work in a checkout and be absent from a wheel."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"imagenet_shards." + ".".join(init.parent.relative_to(REPO).parts)
             for top in ("pipeline", "train") for init in (REPO / top).rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
