"""Which C files here make which extension module: the one table that setup.py, the GPU check's
wheel (scripts/gpu_check/build_gpu_wheel.py) and its ``cc`` fallback (scripts/gpu_check/gpu_check.sh)
all read, so a new part file is built by every one of them without being listed anywhere.

Every ``_NAME.c`` in this folder is the Python side of the module ``PACKAGES[_NAME]._NAME``, built
from it and every ``NAME_*.c``; the headers are shared (``-I`` this folder): ``jpeg_errors.h``, the
one libjpeg error manager and the rule of which warnings mean a damaged JPEG, and
``abi3_compat.h``, force-included by the abi3 wheel build only. The built modules go beside their
thin Python callers (``train/loader/decode.py``, ``pipeline/prepare/images.py``), where the import
names point. Standard library only: setup.py runs this file before anything is installed.

  python pipeline/native/modules.py    one line per module: its folder in the tree, its import name
                                       and its C sources, relative to the repository root
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = {"_jpegcrop": "imagenet_shards.train.loader", "_jpegtran": "imagenet_shards.pipeline.prepare"}
NAMESPACE = "imagenet_shards"


def extensions(folder: Path = HERE) -> list[tuple[str, list[str]]]:
    """(import name, C sources relative to the repository root) of each module, sorted by name;
    ValueError for a ``_NAME.c`` that PACKAGES does not place."""
    root = folder.parent.parent
    found = []
    for entry in sorted(folder.glob("_*.c")):
        name = entry.stem
        if name not in PACKAGES:
            raise ValueError(f"{entry.relative_to(root)}: no package for module {name} (add it to PACKAGES in {__file__})")
        parts = sorted(folder.glob(f"{name[1:]}_*.c"))
        found.append((f"{PACKAGES[name]}.{name}", [p.relative_to(root).as_posix() for p in [entry, *parts]]))
    return found


def tree_folder(import_name: str) -> str:
    """Where a module's build goes in the source tree (pyproject's package-dir: imagenet_shards.X.Y -> X/Y)."""
    package = import_name.rsplit(".", 1)[0]
    return package.removeprefix(f"{NAMESPACE}.").replace(".", "/")


if __name__ == "__main__":
    for module, sources in extensions():
        print(tree_folder(module), module, *sources)
    sys.exit(0)
