"""Report which imaging backend is active, so users can see they got the fast path.

`python -m imagenet_shards.pipeline.tools.doctor` (or `imagenet-shards-doctor`) prints PIL's version, whether it is
pillow-simd, the libjpeg(-turbo) version, which entropy decoder the turbo crop decoder uses (its own for
the restart-marker files, or libjpeg's: IMAGENET_SHARDS_ENTROPY, docs/loader.md), AVX2 support, and the
torch/torchvision versions. Exit 2 when IMAGENET_SHARDS_ENTROPY holds a value it does not know.

The two C extensions are optional (setup.py builds them with ``optional=True``: an install without
a C compiler or the libjpeg-turbo headers succeeds without them, and pip says nothing), so doctor
names each one that does not import, what that costs and how to get it; ``--extensions`` prints
just those lines (exit 1 if any), which scripts/bootstrap.sh runs after installing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from importlib import metadata

from imagenet_shards.pipeline.console import OneLineParser


# each optional extension: what it is, and what runs without it
EXTENSIONS = {
    "imagenet_shards.train.loader._jpegcrop": "the turbo crop decoder (pipeline/native/_jpegcrop.c): without it "
                                              "the loader decodes with Pillow (decoder auto), slower",
    "imagenet_shards.pipeline.prepare._jpegtran": "prepare-shards' restart-marker rewrite (pipeline/native/_jpegtran.c): "
                                                  "without it pass-through JPEGs are stored byte for byte, without "
                                                  "restart markers, and prepare-shards derive encodes the pixel form "
                                                  "with numpy (the same bytes, slower)",
}
# what a build from older sources lacks (it imports, but the code that calls these falls back): named as missing
FUNCTIONS = {"imagenet_shards.pipeline.prepare._jpegtran": ("restart_rows", "check", "yuv420")}
BUILD_FIX = ("install a C compiler and the libjpeg-turbo headers (sudo apt-get install -y gcc libjpeg-dev), "
             "then run make setup")


def missing_extensions() -> dict[str, str]:
    """{module name: why it does not import} for each optional extension that does not (a file that is
    there but fails to load counts: a missing libjpeg.so, another Python's build), or that lacks a
    function of FUNCTIONS (a build from older sources)."""
    missing = {}
    for module in EXTENSIONS:
        try:
            built = importlib.import_module(module)
        except ImportError as e:
            missing[module] = str(e) or type(e).__name__
            continue
        lacking = [f for f in FUNCTIONS.get(module, ()) if not hasattr(built, f)]
        if lacking:
            missing[module] = f"built from older sources: it has no {', '.join(lacking)}; rebuild it"
    return missing


def extension_lines(missing: dict[str, str]) -> list[str]:
    """One line per missing extension: its name, what it is and costs, why it did not import, the fix."""
    return [f"{module.rsplit('.', 1)[1]} not built: {EXTENSIONS[module]} ({why}); to build it: {BUILD_FIX}"
            for module, why in missing.items()]


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def backend_info() -> dict:
    """Facts about the imaging stack in this interpreter (no side effects)."""
    import PIL
    from PIL import features

    try:
        with open("/proc/cpuinfo") as f:
            avx2 = " avx2" in f.read()
    except OSError:
        avx2 = None
    info = {
        "python": sys.version.split()[0],
        "pil_version": PIL.__version__,
        "pillow_simd": _dist_version("pillow-simd") is not None and ".post" in PIL.__version__,
        "plain_pillow_installed": _dist_version("pillow") is not None,
        "libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
        "libjpeg_version": features.version("jpg"),  # the libjpeg API version (6.2 for turbo's default build)
        "libjpeg_turbo_version": features.version("libjpeg_turbo"),
        "cpu_avx2": avx2,
    }
    missing = missing_extensions()  # the two optional C extensions: EXTENSIONS says what each is
    info["turbo_crop_decoder"] = "imagenet_shards.train.loader._jpegcrop" not in missing
    info["restart_marker_rewrite"] = "imagenet_shards.pipeline.prepare._jpegtran" not in missing
    info["missing_extensions"] = missing
    # the turbo crop decoder's entropy decoding: "own" (pipeline/native/jpegcrop_cells.c) or "libjpeg", and why
    info["entropy_decoder"], info["entropy_decoder_reason"] = _entropy_path() if info["turbo_crop_decoder"] else (None, None)
    for mod in ("torch", "torchvision", "webdataset"):
        info[mod] = _dist_version(mod)
    return info


def _entropy_path() -> tuple[str, str]:
    from imagenet_shards.train.loader import _jpegcrop

    path, reason, _ = _jpegcrop.entropy_path()
    return path, reason


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="imagenet-shards-doctor", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--brief", action="store_true", help="one line")
    p.add_argument("--extensions", action="store_true",
                   help="only a line per optional C extension that does not import, with the fix (exit 1 if any)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.extensions:
        lines = extension_lines(missing_extensions())
        for line in lines:
            print(line)
        return 1 if lines else 0
    info = backend_info()
    reason = info["entropy_decoder_reason"] or ""
    if reason.startswith("error:"):
        print(reason, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    fast = info["pillow_simd"] and info["libjpeg_turbo"] and info["turbo_crop_decoder"]
    todo = ([] if info["pillow_simd"] and info["libjpeg_turbo"] else ["run scripts/bootstrap.sh to get pillow-simd"]) + [
        f"build {m.rsplit('.', 1)[1]} (imagenet-shards-doctor says how)" for m in info["missing_extensions"]]
    verdict = ("fast path" if fast else "SLOW PATH") + (f": {'; '.join(todo)}" if todo else "")
    jpeg = (f"libjpeg-turbo {info['libjpeg_turbo_version']}" if info["libjpeg_turbo"]
            else f"libjpeg {info['libjpeg_version']} (not turbo)")
    line = (f"PIL {info['pil_version']} ({'pillow-simd' if info['pillow_simd'] else 'plain Pillow'}), {jpeg}, "
            f"turbo crop decoder {'built' if info['turbo_crop_decoder'] else 'not built'}, "
            f"entropy decoder {info['entropy_decoder'] or 'none'}, "
            f"restart-marker rewrite {'built' if info['restart_marker_rewrite'] else 'not built'}, "
            f"AVX2 {'yes' if info['cpu_avx2'] else 'no'}, torch {info['torch']}, torchvision {info['torchvision']}"
            f" -> {verdict}")
    if args.brief:
        print(line)
        return 0
    for k, v in info.items():
        print(f"{k:22s} {v}")
    print(line)
    for advice in extension_lines(info["missing_extensions"]):
        print(advice)
    return 0


if __name__ == "__main__":
    sys.exit(main())
