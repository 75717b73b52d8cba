#!/usr/bin/env bash
# The GPU check of the trainer (issues 11, 21): one call of at most 6.5 minutes, install included, on
# one GPU + 16 cores. It prints one table and rewrites WORKDIR/gpu_check.json and gpu_check.md after
# every step, with OUT set also $OUT/gpu_check.json, $OUT/gpu_check.md and $OUT/runs.tar.gz (each
# run's metrics.jsonl, log, sync counts, rank results): a call cut short returns what it finished.
#
#   scripts/gpu_check/gpu_check.sh [--extensions-only] [--cpu-smoke] [WORKDIR] [-- gpu_check.py options, e.g. --steps ddp]
#
# --extensions-only: put the C extensions in place as below, print what happened, and stop.
#
# The one device call (docs/training.md, "GPU check"). Here, first:
#   .venv/bin/python scripts/gpu_check/build_gpu_wheel.py     # -> .gpu/imagenet_shards_gpu_ext-*.whl (~0.3 MB),
#                                                   #    /.gpu/ added to .git/info/exclude
# then, with the device tool:
#   run(command="scripts/gpu_check/gpu_check.sh", carry=[".gpu"], timeout_s=420)
# and copy the returned gpu_check.md into docs/benchmarks.md with the date; give the machine back.
#
# --cpu-smoke: every step with tiny sizes on the CPU (tests/scripts/gpu_check/test_gpu_check.py runs it).
# What this wrapper does before scripts/gpu_check/gpu_check.py:
#   - if the C extensions are not in the tree for this Python (the GPU machine: Python 3.12, no libjpeg
#     headers), the carried wheel .gpu/*.whl (abi3, libjpeg-turbo beside each module) is unpacked into
#     the tree; without one, both are built with cc if jpeglib.h and Python.h are there (every
#     module of pipeline/native/modules.py from all its sources; one that does not import is removed);
#   - the imagenet_shards namespace is mapped onto this tree by a folder of symlinks (no install).
# GPU_CHECK_EXT tells the check which of these happened; GPU_CHECK_T0 when the call began.
# Knob: PYTHON (default python3).
set -euo pipefail
export GPU_CHECK_T0=${GPU_CHECK_T0:-$(date +%s.%N)}
cd "$(dirname "$0")/../.."
REPO=$(pwd)
SMOKE=()
ONLY_EXT=0
if [ "${1:-}" = "--extensions-only" ]; then ONLY_EXT=1; shift; fi
if [ "${1:-}" = "--cpu-smoke" ]; then SMOKE=(--cpu-smoke); shift; fi
W=/tmp/gpu-check${SMOKE[0]:+-smoke}
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then W=$1; shift; fi
[ "${1:-}" = "--" ] && shift
PYTHON=${PYTHON:-python3}
mkdir -p "$W"
export PYTHONUNBUFFERED=1

mkdir -p "$W/shim/imagenet_shards"
for d in pipeline train manifests; do ln -sfn "$REPO/$d" "$W/shim/imagenet_shards/$d"; done
export PYTHONPATH="$W/shim${PYTHONPATH:+:$PYTHONPATH}"

# Is each extension there for this Python? (file names only: importing the package would import torch)
have_ext() {  # $1: folder, $2: module name
  "$PYTHON" - "$1" "$2" <<'PY'
import importlib.machinery, pathlib, sys
folder, name = sys.argv[1], sys.argv[2]
sys.exit(0 if any((pathlib.Path(folder) / (name + s)).exists() for s in importlib.machinery.EXTENSION_SUFFIXES) else 1)
PY
}
# cc: every module of the C folder's table (pipeline/native/modules.py) from all its sources, with the
# shared headers; a module that then does not import (an unresolved symbol) is removed again, and the
# build counts as failed
build_with_cc() {  # $1: Python's include dir, $2: its extension suffix
  "$PYTHON" pipeline/native/modules.py | while read -r folder module sources; do
    target="$folder/${module##*.}$2"
    # shellcheck disable=SC2086  # $sources: the module's C files, one word each
    cc -O3 -shared -fPIC -I"$1" -Ipipeline/native $sources -ljpeg -o "$target" || return 1
    if ! "$PYTHON" - "$target" <<'PY'
import importlib.util, sys
path = sys.argv[1]
spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[1].split(".")[0], path)
try:
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
except Exception as e:
    sys.exit(f"{path} does not import: {type(e).__name__}: {e}")
PY
    then rm -f "$target"; return 1
    fi
  done
}
EXT="in the tree (this Python's build)"
if ! have_ext train/loader _jpegcrop || ! have_ext pipeline/prepare _jpegtran; then
  WHEEL=$(ls .gpu/imagenet_shards_gpu_ext-*.whl 2>/dev/null | head -1 || true)
  INC=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  SUFFIX=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  if [ -n "$WHEEL" ]; then
    "$PYTHON" scripts/gpu_check/build_gpu_wheel.py --unpack "$WHEEL" --into "$REPO" >/dev/null
    EXT="carried wheel $(basename "$WHEEL") (abi3, libjpeg-turbo beside the modules)"
  elif ! command -v cc >/dev/null; then EXT="none: no carried wheel and no C compiler"
  elif [ ! -f "$INC/Python.h" ]; then EXT="none: no carried wheel and no Python.h"
  elif ! printf '#include <stdio.h>\n#include <jpeglib.h>\n' | cc -E -x c - >/dev/null 2>&1; then
    EXT="none: no carried wheel and no jpeglib.h (build one here: scripts/gpu_check/build_gpu_wheel.py)"
  elif build_with_cc "$INC" "$SUFFIX" >"$W/ext-build.log" 2>&1; then EXT="built here with cc against the system libjpeg"
  else EXT="none: the cc build failed: $(tail -1 "$W/ext-build.log") ($W/ext-build.log)"
  fi
fi
export GPU_CHECK_EXT="$EXT"
if [ $ONLY_EXT = 1 ]; then echo "$EXT"; exit 0; fi

exec "$PYTHON" scripts/gpu_check/gpu_check.py ${SMOKE[@]+"${SMOKE[@]}"} --workdir "$W" "$@"
