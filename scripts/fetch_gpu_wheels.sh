#!/usr/bin/env bash
# Download the Python packages the GPU machine lacks into .whl/, for scripts/gpu_check.sh to install
# there (that machine reaches no package registry: docs/training.md, "GPU check").
#
#   scripts/fetch_gpu_wheels.sh       (here, where pip reaches a registry)
#
# The machine (the device tool's nvidia-h200 kind): Python 3.12, torch 2.11, torchvision 0.26, plain
# Pillow, numpy, tqdm and PyYAML, but no webdataset or braceexpand, which prepare-shards imports.
# Both are pure-Python wheels. .whl/ is added to .git/info/exclude; a device run then names it:
# carry [".whl"], command "scripts/gpu_check.sh". Knobs: PYTHON, WHEEL_DIR (default .whl).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEST=${WHEEL_DIR:-.whl}
PACKAGES=("webdataset==1.0.2" "braceexpand==0.1.7")
if [ "$DEST" = ".whl" ]; then
  EXCLUDE=$(git rev-parse --git-path info/exclude)
  grep -qxF '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >>"$EXCLUDE"
fi
"$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" "${PACKAGES[@]}"
ls -l "$DEST"
