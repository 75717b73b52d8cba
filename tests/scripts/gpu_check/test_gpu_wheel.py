"""scripts/gpu_check/build_gpu_wheel.py: the wheel the GPU check carries (both C extensions, abi3, libjpeg-turbo
beside them) builds here, is manylinux, unpacks into a source tree, and its modules import and decode
under another Python (3.12, as on the GPU machine, where one is installed) with the system libjpeg
out of reach: hidden behind /dev/null in a private mount namespace where that is allowed, and in any
case absent from the process's memory map. Their output equals the normal build's byte for byte."""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SYSTEM_LIBJPEG = "/usr/lib/x86_64-linux-gnu/libjpeg.so.62"

CHILD = textwrap.dedent("""
    import hashlib, importlib.util, json, platform, sys
    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    crop, tran = load("_jpegcrop", sys.argv[1]), load("_jpegtran", sys.argv[2])
    data = open(sys.argv[3], "rb").read()
    w, h = crop.header(data)[:2]
    pixels = crop.decode_region(data, 1, 0, 0, w, h)[0]
    rewritten = tran.restart_rows(data)[0]
    own = crop.decode_region(rewritten, 1, 0, 0, w, h, entropy="own")[0]  # the own entropy decoder's hook
    maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libjpeg" in line})
    print(json.dumps({"python": platform.python_version(), "turbo": crop.LIBJPEG_TURBO_VERSION,
                      "pixels": hashlib.sha256(pixels).hexdigest(), "restart": hashlib.sha256(rewritten).hexdigest(),
                      "grid": rewritten.count(b"\\xff\\xdd") > 0, "maps": maps, "entropy": crop.entropy_path(),
                      "own_decodes": crop.entropy_counts()["own"], "own_pixels": hashlib.sha256(own).hexdigest()}))
""")


def _python312() -> str | None:
    """A working Python 3.12 (a pyenv shim on PATH may name one it cannot run)."""
    for exe in [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3"))), shutil.which("python3.12")]:
        if exe and subprocess.run([exe, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"],
                                  capture_output=True).returncode == 0:
            return exe
    return None


def _hidden(cmd: list[str]) -> tuple[list[str], bool]:
    """`cmd` in a private mount namespace with the system libjpeg bound to /dev/null, where allowed."""
    real = os.path.realpath(SYSTEM_LIBJPEG)
    if not os.path.exists(real) or shutil.which("unshare") is None:
        return cmd, False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind /dev/null {real}"], capture_output=True)
    if probe.returncode != 0:
        return cmd, False
    script = f'mount --bind /dev/null {real} && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, "sh", *cmd], True


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    proc = subprocess.run([sys.executable, "scripts/gpu_check/build_gpu_wheel.py", "--out", str(out), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 2 and ("not found" in proc.stderr or "no libjpeg" in proc.stderr or "no C compiler" in proc.stderr):
        pytest.skip(f"cannot build here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    tree = out / "tree"
    unpacked = subprocess.run([sys.executable, "scripts/gpu_check/build_gpu_wheel.py", "--unpack", result["wheel"], "--into",
                               str(tree), "--json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert unpacked.returncode == 0, unpacked.stderr
    return result, tree, json.loads(unpacked.stdout)["unpacked"]


def test_the_wheel_is_manylinux_abi3_small_and_carries_its_libjpeg(built):
    result, tree, unpacked = built
    assert result["tag"].startswith("cp311-abi3-manylinux_") and Path(result["wheel"]).name.endswith(result["tag"] + ".whl")
    assert result["bytes"] < 2 * 2**20  # carried within the device call's 64 MiB
    grafted = result["libjpeg"]["grafted_as"]
    assert sorted(unpacked) == sorted(["pipeline/prepare/_jpegtran.abi3.so", f"pipeline/prepare/{grafted}",
                                       "train/loader/_jpegcrop.abi3.so", f"train/loader/{grafted}"])
    for module in ("train/loader/_jpegcrop.abi3.so", "pipeline/prepare/_jpegtran.abi3.so"):
        dynamic = subprocess.run(["readelf", "-d", str(tree / module)], capture_output=True, text=True).stdout
        assert f"[{grafted}]" in dynamic and "[libjpeg.so.62]" not in dynamic and "[$ORIGIN]" in dynamic


@pytest.mark.parametrize("python", ["this", "3.12"])
def test_the_unpacked_modules_decode_without_the_system_libjpeg(built, python, tmp_path):
    from PIL import Image
    result, tree, _ = built
    exe = sys.executable if python == "this" else _python312()
    if exe is None:
        pytest.skip("no Python 3.12 on this machine (the GPU machine's version)")
    img = Image.effect_noise((96, 64), 60).convert("RGB")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    (tmp_path / "a.jpg").write_bytes(buf.getvalue())
    (tmp_path / "child.py").write_text(CHILD)
    cmd, hidden = _hidden([exe, "-I", str(tmp_path / "child.py"), str(tree / "train/loader/_jpegcrop.abi3.so"),
                           str(tree / "pipeline/prepare/_jpegtran.abi3.so"), str(tmp_path / "a.jpg")])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    if python == "3.12":
        assert got["python"].startswith("3.12")
    grafted = result["libjpeg"]["grafted_as"]
    assert got["turbo"] and got["grid"] and got["maps"] and all(m.endswith(grafted) for m in got["maps"]), (got, hidden)
    assert not any(os.path.realpath(SYSTEM_LIBJPEG) == m for m in got["maps"])
    from imagenet_shards.train.loader import decode
    from imagenet_shards.pipeline.prepare import images
    if decode._jpegcrop is None or images._jpegtran is None:
        pytest.skip("the normal build of the extensions is missing: nothing to compare with")
    data = buf.getvalue()
    w, h = decode._jpegcrop.header(data)[:2]
    assert got["pixels"] == hashlib.sha256(decode._jpegcrop.decode_region(data, 1, 0, 0, w, h)[0]).hexdigest()
    assert got["restart"] == hashlib.sha256(images._jpegtran.restart_rows(data)[0]).hexdigest()
    # the own entropy decoder's hook passed its self-test against the bundled libjpeg-turbo, decoded
    # the restart-marker file, and matches this build's libjpeg path byte for byte
    assert got["entropy"][2] and got["own_decodes"] == 1, got["entropy"]
    lib = decode._jpegcrop.decode_region(images._jpegtran.restart_rows(data)[0], 1, 0, 0, w, h, entropy="libjpeg")[0]
    assert got["own_pixels"] == hashlib.sha256(lib).hexdigest()
