#!/usr/bin/env bash
# Idempotent set-up: .venv, the package with extras, and pillow-simd as the imported PIL.
# Usage: scripts/bootstrap.sh [EXTRAS]   (default "test"; e.g. "test,s3")
# Re-runs are no-ops unless pyproject.toml, setup.py, a file of the C folder (pipeline/native/), this script
# or the extras changed, or a C compiler or the libjpeg headers appeared (the optional extensions then build).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
EXTRAS=${1:-test}
say() { printf '[setup] %s\n' "$*" >&2; }

# the whole C folder (every file, in name order, with its name): a change to any source or header rebuilds;
# so does a C compiler or the libjpeg headers appearing (the optional extensions then build: see the end)
stamp_key=$( (cat pyproject.toml setup.py scripts/bootstrap.sh; for f in pipeline/native/*; do [ ! -f "$f" ] || { echo "$f"; cat "$f"; }; done
              echo "extras=$EXTRAS"; command -v cc || true; ls /usr/include/jpeglib.h 2>/dev/null || true) | sha256sum | cut -c1-16)
stamp="$VENV/.imagenet-shards-$stamp_key"
if [ -f "$stamp" ]; then exit 0; fi

"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "error: Python 3.10+ is needed (found %s); set PYTHON=python3.X" % sys.version.split()[0])'
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
quiet_pip() {  # pip, minus the "Location ... is ignored" noise some machines' pip.conf produces
  "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
# libjpeg-turbo and zlib headers: pillow-simd and our optional JPEG crop decoder compile against them;
# libwebp's: pillow-simd then reads WEBP (timm's imagenet-w21-webp-wds; the loader decodes it through Pillow)
need_headers=0
for h in /usr/include/jpeglib.h /usr/include/zlib.h /usr/include/webp/decode.h; do [ -f "$h" ] || need_headers=1; done
if [ $need_headers = 1 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing libjpeg-dev zlib1g-dev libwebp-dev (headers for pillow-simd and the turbo decoder)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjpeg-dev zlib1g-dev libwebp-dev >/dev/null || true
  else
    say "pillow-simd needs JPEG/zlib (and, for WEBP, libwebp) headers: run  sudo apt-get install -y libjpeg-dev zlib1g-dev libwebp-dev  and re-run"
  fi
fi

# Slurm + munge for the multi-machine test (tests/pipeline/prepare/test_parts.py runs a real one-node
# cluster): ~3 MB from Debian, about 50 s of dpkg on a busy 2-vCPU box; the test skips without them
if [[ ",$EXTRAS," == *",test,"* ]] && ! command -v slurmctld >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing slurmctld slurmd slurm-client munge (for the Slurm array test)"
    slurm_pkgs=(slurmctld slurmd slurm-client munge)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${slurm_pkgs[@]}" >/dev/null 2>&1 || \
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${slurm_pkgs[@]}" >/dev/null; } || \
      say "could not install Slurm; the Slurm test will skip"
  else
    say "the Slurm test skips without Slurm: sudo apt-get install -y slurmctld slurmd slurm-client munge"
  fi
fi

spec="."
[ -n "$EXTRAS" ] && spec=".[$EXTRAS]"
say "installing $spec (torch/torchvision come from the local wheel cache where one is configured)"
quiet_pip install -q -e "$spec"

# --- pillow-simd: same `PIL` import, ~2x faster resize; torchvision pulled in plain Pillow above.
have_simd=$("$VENV/bin/python" - <<'PY'
import os
from importlib import metadata
try:
    metadata.distribution("pillow-simd"); simd = True
except metadata.PackageNotFoundError:
    simd = False
try:
    metadata.distribution("pillow"); plain = True
except metadata.PackageNotFoundError:
    plain = False
webp = True
if simd and not plain and os.path.exists("/usr/include/webp/decode.h"):  # built before libwebp was there?
    from PIL import features
    webp = features.check("webp")
print("yes" if simd and not plain and webp else "no")
PY
)
if [ "$have_simd" != yes ]; then
  cc_flags="cc"
  grep -qw avx2 /proc/cpuinfo 2>/dev/null && cc_flags="cc -mavx2"
  say "building pillow-simd (CC='$cc_flags', ~40 s)"
  if "${PIP[@]}" uninstall -q -y pillow pillow-simd >/dev/null 2>&1; \
     CC="$cc_flags" quiet_pip install -q --no-cache-dir --no-binary pillow-simd pillow-simd; then
    say "pillow-simd installed"
  else
    say "WARNING: ********************************************************************"
    say "WARNING: pillow-simd could not be built; falling back to plain Pillow (slower resize)."
    say "WARNING: install libjpeg-dev zlib1g-dev and a C compiler, then re-run to get the fast path."
    say "WARNING: ********************************************************************"
    quiet_pip install -q pillow
  fi
fi
"$VENV/bin/python" -m imagenet_shards.pipeline.tools.doctor --brief >&2 || true
# setup.py builds the C extensions with optional=True: a failed build leaves the install "successful" and
# pip -q silent. Say which one is missing, why and how to get it (one line each).
missing_ext=$("$VENV/bin/python" -m imagenet_shards.pipeline.tools.doctor --extensions 2>&1) || true
if [ -n "$missing_ext" ]; then
  while IFS= read -r line; do say "WARNING: $line"; done <<< "$missing_ext"
fi
touch "$stamp"
