#!/usr/bin/env bash
# GPU check of the streaming trainer (issue 6), ~5-8 minutes on one GPU with 16 CPU cores:
#   1. a synthetic ILSVRC2012 (CLASSES x TRAIN_PER_CLASS ~500x375 JPEGs) -> prepare-shards
#   2. ResNet-50 --amp bf16 --channels-last: --synthetic-data (the model-only ceiling),
#      the real CPU loader (WORKERS workers), and --gpu-decode; then fp16 + GradScaler briefly
#   3. a table: img/s, data-wait %, loader efficiency (real / synthetic img/s), peak GPU memory
# Usage: scripts/gpu_check.sh [WORKDIR]   (default /tmp/gpu-check; reuses shards already there)
# Knobs (env): PYTHON, WORKERS (16), BATCH (256), RES (176), EPOCHS (2), CLASSES (100),
#              TRAIN_PER_CLASS (200), ARCH (resnet50), EXTRA (more train-imagenet flags, e.g. --compile)
# Copy the table into docs/benchmarks.md with the date and the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
W=${1:-/tmp/gpu-check}
WORKERS=${WORKERS:-16} BATCH=${BATCH:-256} RES=${RES:-176} EPOCHS=${EPOCHS:-2}
CLASSES=${CLASSES:-100} TRAIN_PER_CLASS=${TRAIN_PER_CLASS:-200} ARCH=${ARCH:-resnet50} EXTRA=${EXTRA:-}
say() { printf '[gpu-check %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

"$PYTHON" - <<'PY' || { echo "error: no CUDA device visible to $PYTHON; this check needs a GPU" >&2; exit 2; }
import sys, torch, torchvision
ok = torch.cuda.is_available()
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"{torch.cuda.get_device_name(0) if ok else 'no GPU'}", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 || true
CORES=$("$PYTHON" -c 'import os; print(len(os.sched_getaffinity(0)))')
say "CPU cores: $CORES, loader workers: $WORKERS, /dev/shm: $(df -h /dev/shm 2>/dev/null | awk 'NR==2 {print $4 " free"}')"

mkdir -p "$W"
if [ ! -f "$W/shards/manifest.json" ]; then
  say "generating ${CLASSES}x${TRAIN_PER_CLASS} train + ${CLASSES}x10 val synthetic JPEGs"
  rm -rf "$W/src" "$W/shards"
  "$PYTHON" -m imagenet_shards.pipeline.tools.synthetic.generate "$W/src" --classes "$CLASSES" --train-per-class "$TRAIN_PER_CLASS" \
    --val-per-class 10 --no-quirks --quiet
  say "prepare-shards"
  "$PYTHON" -m imagenet_shards.pipeline.prepare.cli --train "$W/src/ILSVRC2012_img_train.tar" --val "$W/src/ILSVRC2012_img_val.tar" \
    --devkit "$W/src/ILSVRC2012_devkit_t12.tar.gz" --out "$W/shards" --shard-samples 500 \
    --workers "$CORES" --quiet
fi

COMMON=(--data "$W/shards" --arch "$ARCH" --batch-size "$BATCH" --res "$RES" --amp bf16 --channels-last
        --workers "$WORKERS" --device cuda --lr 0.1 --warmup-epochs 0.5 --log-interval 10)
run() {  # run NAME FLAGS...: a fresh run dir; the ceiling file goes in so the run prints its efficiency
  local name=$1; shift
  rm -rf "$W/$name"; mkdir -p "$W/$name"
  [ -f "$W/synthetic/synthetic.json" ] && cp "$W/synthetic/synthetic.json" "$W/$name/"
  say "$name: train-imagenet $*"
  # progress bars filtered out of stderr; a failed run is reported and the check goes on
  "$PYTHON" -m train --out "$W/$name" "$@" $EXTRA 2> >(tr '\r' '\n' | grep -v -E 'it/s|s/it|^[[:space:]]*$' >&2) \
    || say "$name FAILED (exit $?)"
}

run synthetic "${COMMON[@]}" --synthetic-data --epochs 1 --limit-batches 120
run real "${COMMON[@]}" --epochs "$EPOCHS"
run gpu-decode "${COMMON[@]}" --epochs "$EPOCHS" --gpu-decode
# fp16 + GradScaler: a few steps on real data (the ceiling key differs, so no efficiency here)
run fp16 "${COMMON[@]/bf16/fp16}" --epochs 1 --limit-batches 30

"$PYTHON" - "$W" <<'PY'
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
ceiling = json.loads((w / "synthetic" / "synthetic.json").read_text())["img_per_s"]
print()
print("| run | img/s (steady) | data-wait % | loader efficiency | peak GPU memory GiB | val top-1 | res |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name in ("synthetic", "real", "gpu-decode", "fp16"):
    path = w / name / "metrics.jsonl"
    if not path.exists():
        print(f"| {name} | (no metrics) | | | | | |"); continue
    recs = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    epochs = [r for r in recs if r["kind"] == "epoch"]
    if not epochs:
        print(f"| {name} | (no epoch finished) | | | | | |"); continue
    last = epochs[-1]
    eff = last["steady_img_per_s"] / ceiling if name in ("real", "gpu-decode") else None
    top1 = last.get("val_top1")
    print(f"| {name} | {last['steady_img_per_s']:.0f} | {100 * last['data_wait_fraction']:.1f} | "
          f"{'' if eff is None else f'{eff:.3f}'} | {last['gpu_mem_gib']} | "
          f"{'' if top1 is None else f'{100 * top1:.1f}%'} | {last['res']} |")
print()
print("loader efficiency = steady img/s of the last epoch / the --synthetic-data img/s (same arch, batch, res, amp)")
PY
