#!/usr/bin/env bash
# The GPU check of the trainer (issue 11): one call of at most 8 minutes on one GPU + 16 cores. It
# prints one table and writes WORKDIR/gpu_check.json, and with OUT set also $OUT/gpu_check.json,
# $OUT/gpu_check.md (the table) and $OUT/runs.tar.gz (each run's metrics.jsonl, log, sync counts).
#
#   scripts/gpu_check.sh [--cpu-smoke] [WORKDIR]     (default /tmp/gpu-check, or /tmp/gpu-check-smoke)
#
# --cpu-smoke: every step with tiny sizes on the CPU (tests/scripts/test_gpu_check.py runs it).
# What this wrapper does before scripts/gpu_check.py (docs/training.md, "GPU check"):
#   - wheels in .whl/ (scripts/fetch_gpu_wheels.sh: webdataset, braceexpand, which prepare-shards
#     needs and the GPU machine lacks; it reaches no registry) are installed into WORKDIR/site;
#   - the imagenet_shards namespace is mapped onto this tree by a folder of symlinks (no install);
#   - the turbo decoder is built if it does not import and cc, jpeglib.h and Python.h are there.
# A module still missing after that ends the check at once: `error: ... cannot import NAME`.
# Knob: PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
SMOKE=()
if [ "${1:-}" = "--cpu-smoke" ]; then SMOKE=(--cpu-smoke); shift; fi
W=${1:-/tmp/gpu-check${SMOKE[0]:+-smoke}}
PYTHON=${PYTHON:-python3}
mkdir -p "$W"
export PYTHONUNBUFFERED=1

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" .whl/*.whl
  export PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}"
fi

mkdir -p "$W/shim/imagenet_shards"
for d in pipeline train manifests; do ln -sfn "$REPO/$d" "$W/shim/imagenet_shards/$d"; done
export PYTHONPATH="$W/shim${PYTHONPATH:+:$PYTHONPATH}"

TURBO="prebuilt"
if ! "$PYTHON" -c "import importlib.util as u, sys; sys.exit(u.find_spec('imagenet_shards.train.loader._jpegcrop') is None)"; then
  INC=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  SUFFIX=$("$PYTHON" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  if ! command -v cc >/dev/null; then TURBO="not built: no C compiler"
  elif [ ! -f "$INC/Python.h" ]; then TURBO="not built: no Python.h"
  elif ! printf '#include <stdio.h>\n#include <jpeglib.h>\n' | cc -E -x c - >/dev/null 2>&1; then
    TURBO="not built: no jpeglib.h"
  elif cc -O3 -shared -fPIC -I"$INC" train/loader/_jpegcrop.c -ljpeg -o "train/loader/_jpegcrop$SUFFIX" \
      2>"$W/turbo-build.log"; then TURBO="built here"
  else TURBO="not built: compile failed ($W/turbo-build.log)"
  fi
fi
export GPU_CHECK_TURBO_BUILD="$TURBO"

exec "$PYTHON" scripts/gpu_check.py ${SMOKE[@]+"${SMOKE[@]}"} --workdir "$W"
