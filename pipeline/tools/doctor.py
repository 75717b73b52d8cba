"""Report which imaging backend is active, so users can see they got the fast path.

`python -m imagenet_shards.pipeline.tools.doctor` (or `imagenet-shards-doctor`) prints PIL's version, whether it is
pillow-simd, the libjpeg(-turbo) version, which entropy decoder the turbo crop decoder uses (its own for
the restart-marker files, or libjpeg's: IMAGENET_SHARDS_ENTROPY, docs/loader.md), AVX2 support, and the
torch/torchvision versions. Exit 2 when IMAGENET_SHARDS_ENTROPY holds a value it does not know.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from importlib import metadata

from imagenet_shards.pipeline.console import OneLineParser


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
        # the loader's optional libjpeg-turbo region decoder (pipeline/native/_jpegcrop.c); without it `auto` uses PIL
        "turbo_crop_decoder": importlib.util.find_spec("imagenet_shards.train.loader._jpegcrop") is not None,
        # prepare-shards' optional lossless rewrite with restart markers (pipeline/native/_jpegtran.c); without
        # it pass-through JPEGs are stored byte for byte, without markers
        "restart_marker_rewrite": importlib.util.find_spec("imagenet_shards.pipeline.prepare._jpegtran") is not None,
    }
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
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    info = backend_info()
    reason = info["entropy_decoder_reason"] or ""
    if reason.startswith("error:"):
        print(reason, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    fast = info["pillow_simd"] and info["libjpeg_turbo"]
    jpeg = (f"libjpeg-turbo {info['libjpeg_turbo_version']}" if info["libjpeg_turbo"]
            else f"libjpeg {info['libjpeg_version']} (not turbo)")
    line = (f"PIL {info['pil_version']} ({'pillow-simd' if info['pillow_simd'] else 'plain Pillow'}), {jpeg}, "
            f"turbo crop decoder {'built' if info['turbo_crop_decoder'] else 'not built'}, "
            f"entropy decoder {info['entropy_decoder'] or 'none'}, "
            f"restart-marker rewrite {'built' if info['restart_marker_rewrite'] else 'not built'}, "
            f"AVX2 {'yes' if info['cpu_avx2'] else 'no'}, torch {info['torch']}, torchvision {info['torchvision']}"
            f" -> {'fast path' if fast else 'SLOW PATH: run scripts/bootstrap.sh to get pillow-simd'}")
    if args.brief:
        print(line)
        return 0
    for k, v in info.items():
        print(f"{k:22s} {v}")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
