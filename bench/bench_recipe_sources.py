"""A toy run side by side with the recipes' sources' own scripts (issue 30): torchvision's
`references/classification/train.py` on an ImageFolder of the images, timm's `train.py` on our
shards (its webdataset reader, from our `_info.json`), and our `train-imagenet` on the same shards,
with the same model, epochs, seed, batch, lr, schedule and resolution, on the CPU. The table of
docs/recipes.md, "Toy runs beside the sources' scripts".

    python bench/bench_recipe_sources.py [--work DIR] [--epochs 4] [--seed 0] [--res 224 --val-resize 256]
        [--torchvision-refs DIR] [--timm-train FILE] [--timm-python PY] [--markdown]

The corpus: the synthetic generator's 4 learnable classes (16 train, 25 val images per class)
through prepare-shards at a longer side of 64 px; the ImageFolder holds the very JPEG bytes of those
shards, one folder per WNID (so ImageFolder's sorted-folder labels are our labels). The settings are
those of `--recipe tv-rn50-v1` scaled to a global batch of 8 (SGD, momentum 0.9, wd 1e-4, lr
0.1 x 8 / 256, step every 30 epochs, no label smoothing, no augmentation past a random-resized crop
and a flip), resnet18, 224 px crops, val resize 256 then a 224 px centre crop (the fixed sizes of
torchvision's train.py at pytorch/vision@bde124ee, the commit tv-rn50-v1 cites; the 64 px images are
upscaled alike in all three), one thread each.

Sources: torchvision's script is not in any installed package; pass `--torchvision-refs DIR` (a
folder holding its train.py and utils.py, and what a newer train.py imports besides), else the bench
takes ~/.cache/imagenet-shards-peers/torchvision-refs, else a fetched mirror at
MIRRORS/pytorch+vision (written into the work folder; never kept in this repository). That script has
no `--seed`: the bench starts it through `runpy` after `torch.manual_seed(seed)` (its DataLoader's
shuffle and the model's init follow that seed), and it builds its model with 1000 outputs whatever
the data (`num_classes` is not passed at that commit). timm's
train.py comes from a mirror of huggingface/pytorch-image-models (`--timm-train`), run by the
Python of the DALI peer environment (`--timm-python`), which has timm and webdataset. A source that
cannot run is a row with "not run: <reason>", never a figure from elsewhere.

Not a test of who is better: 100 val images, 4 classes, a few dozen steps; seeded CPU runs differ
across CPU families, and the three scripts draw their random crops from different generators, so
curves a few points apart are noise. Prints one JSON object (and the markdown table with
`--markdown`).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.fixtures for the bench data
MIRRORS = Path("/work/.mirror")
PEER_PYTHON = Path.home() / ".cache/imagenet-shards-peers/dali/bin/python"
TV_REFS = Path.home() / ".cache/imagenet-shards-peers/torchvision-refs"
TV_FILES = ("train.py", "utils.py")  # what train.py@bde124ee imports; newer ones also take these from a mirror:
TV_MORE = ("presets.py", "transforms.py", "sampler.py")
CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 4, 16, 25
ARCH, BATCH = "resnet18", 8
TV_SIZES = (224, 256)  # train.py@bde124ee's fixed crop and val resize
LR, MOMENTUM, WD, STEP_EPOCHS, GAMMA = 0.1 * BATCH / 256, 0.9, 1e-4, 30, 0.1
TIMEOUT_S = 600


@dataclass(frozen=True)
class Toy:
    """What the three runs share besides the corpus and the tv-rn50-v1 values above."""
    epochs: int
    seed: int
    res: int
    val_resize: int


def build_corpus(work: Path, seed: int) -> tuple[Path, Path]:
    """Our shards, and an ImageFolder (train/, val/, one folder per WNID) of the same JPEG bytes."""
    from tests.fixtures.trainer import write_tiny_shards

    shards = write_tiny_shards(work / "shards", classes=CLASSES, train_per_class=TRAIN_PER_CLASS,
                               val_per_class=VAL_PER_CLASS, seed=seed)
    folder = work / "imagefolder"
    for split, sub in (("train", "train"), ("validation", "val")):
        for name in json.loads((shards / "_info.json").read_text())["splits"][split]["filenames"]:
            with tarfile.open(shards / name) as tar:
                for member in tar.getmembers():
                    key, _, ext = member.name.rpartition(".")
                    if ext == "jpg":
                        meta = json.load(tar.extractfile(f"{key}.json"))
                        dest = folder / sub / meta["wnid"] / f"{Path(key).name}.jpg"
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(tar.extractfile(member).read())
    return shards, folder


def _run(cmd: list[str], log: Path, cwd: Path | None = None) -> tuple[int, float]:
    """Run CMD under `nice -n 10` with one thread, output to LOG; (exit code, wall seconds)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    start = time.perf_counter()
    with log.open("w") as out:
        try:
            rc = subprocess.run(["nice", "-n", "10", *cmd], stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=cwd, timeout=TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, round(time.perf_counter() - start, 1)


def _failed(name: str, rc: int, log: Path) -> str:
    tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-3:]
    return f"not run: {name} exited {rc}: " + " | ".join(tail)[-400:]


def run_ours(shards: Path, work: Path, toy: Toy) -> dict:
    out = work / "ours"
    cmd = [sys.executable, "-m", "imagenet_shards.train", "--data", str(shards), "--out", str(out),
           "--recipe", "tv-rn50-v1", "--arch", ARCH, "--batch-size", str(BATCH), "--epochs", str(toy.epochs),
           "--seed", str(toy.seed), "--res", str(toy.res), "--val-res", str(toy.val_resize), "--val-crop", str(toy.res),
           "--workers", "0", "--device", "cpu", "--amp", "none", "--log-interval", "4"]
    rc, wall = _run(cmd, work / "ours.log")
    row = {"source": "ours (train-imagenet)", "command": _shown(cmd), "wall_s": wall}
    if rc:
        return row | {"not_run": _failed("train-imagenet", rc, work / "ours.log")}
    from imagenet_shards.train.trainer.watch.telemetry import read_metrics
    epochs_seen = [r for r in read_metrics(out) if r["kind"] == "epoch"]
    return row | {"val_top1": [round(100 * r["val_top1"], 1) for r in epochs_seen]}


def find_torchvision_refs(given: str | None, work: Path) -> tuple[Path | None, str]:
    """The folder of torchvision's classification references, and where it came from (or why not)."""
    if given or TV_REFS.is_dir():
        folder = Path(given or TV_REFS)
        missing = [f for f in TV_FILES if not (folder / f).is_file()]
        return (None, f"--torchvision-refs {folder} lacks {', '.join(missing)}") if missing else (folder, str(folder))
    git_dir = MIRRORS / "pytorch+vision" / "repo"
    if not git_dir.is_dir():
        return None, (f"no --torchvision-refs and no fetched mirror at {git_dir} (torchvision's references "
                      "are in no installed package)")
    folder = work / "tv-refs"
    folder.mkdir(exist_ok=True)
    for name in TV_FILES + TV_MORE:  # written from the mirror at run time, never kept in this repository
        shown = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:references/classification/{name}"],
                               capture_output=True, text=True)
        if shown.returncode == 0:
            (folder / name).write_text(shown.stdout)
    head = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], capture_output=True, text=True)
    return folder, f"pytorch/vision@{head.stdout.strip()[:10]}"


def run_torchvision(folder: Path, refs: Path | None, why: str, work: Path, toy: Toy) -> dict:
    row = {"source": "torchvision references/classification/train.py", "refs": why}
    if refs is None:
        return row | {"not_run": f"not run: {why}"}
    sized = (toy.res, toy.val_resize) != TV_SIZES
    if sized and "--train-crop-size" not in (refs / "train.py").read_text():
        return row | {"not_run": f"not run: this train.py fixes a {TV_SIZES[0]} px crop, {TV_SIZES[1]} px val resize"}
    args = ["--data-path", str(folder), "--model", ARCH, "--device", "cpu", "-b", str(BATCH), "--epochs",
            str(toy.epochs), "-j", "0", "--lr", repr(LR), "--momentum", str(MOMENTUM), "--wd", str(WD),
            "--lr-step-size", str(STEP_EPOCHS), "--lr-gamma", str(GAMMA), "--print-freq", "4",
            "--output-dir", str(work / "tv")]
    if sized:  # a newer train.py (the check above)
        args += ["--train-crop-size", str(toy.res), "--val-resize-size", str(toy.val_resize),
                 "--val-crop-size", str(toy.res)]
    seeded = (f"import runpy, sys, torch; torch.manual_seed({toy.seed}); sys.path.insert(0, {str(refs)!r}); "
              "sys.argv = ['train.py', *sys.argv[1:]]; "
              f"runpy.run_path({str(refs / 'train.py')!r}, run_name='__main__')")
    cmd = [sys.executable, "-c", seeded, *args]
    rc, wall = _run(cmd, work / "tv.log", cwd=refs)
    row |= {"command": _shown(cmd), "wall_s": wall}
    if rc:
        return row | {"not_run": _failed("torchvision's train.py", rc, work / "tv.log")}
    # "Test:  Acc@1 x" (newer) or " * Acc@1 x" (older); the EMA model's lines say "Test: EMA"
    top1 = re.findall(r"(?:^Test: +|^ \* )Acc@1 ([\d.]+)", (work / "tv.log").read_text(), re.M)
    return row | {"val_top1": [round(float(x), 1) for x in top1]}


def run_timm(shards: Path, train_py: Path, python: Path, work: Path, toy: Toy) -> dict:
    row = {"source": "timm train.py", "train_py": str(train_py)}
    if not train_py.is_file():
        return row | {"not_run": f"not run: no timm train.py at {train_py} (fetch huggingface/pytorch-image-models)"}
    probe = subprocess.run([str(python), "-c", "import timm, webdataset; print(timm.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode:
        return row | {"not_run": f"not run: {python} cannot import timm and webdataset"}
    cmd = [str(python), str(train_py), "--data-dir", str(shards), "--dataset", "wds/imagenet1k",
           "--train-split", "train", "--val-split", "validation", "--num-classes", str(CLASSES), "--model", ARCH,
           "--device", "cpu", "--epochs", str(toy.epochs), "-b", str(BATCH), "--opt", "sgd", "--lr", repr(LR),
           "--momentum", str(MOMENTUM), "--weight-decay", str(WD), "--sched", "step", "--decay-epochs",
           str(STEP_EPOCHS), "--decay-rate", str(GAMMA), "--warmup-epochs", "0", "--smoothing", "0",
           "--color-jitter", "0", "--input-size", "3", str(toy.res), str(toy.res),
           "--crop-pct", repr(toy.res / toy.val_resize),
           "--interpolation", "bilinear", "--train-interpolation", "bilinear", "--seed", str(toy.seed), "-j", "1",
           "--log-interval", "4", "--checkpoint-hist", "1", "--output", str(work / "timm"), "--experiment", "toy"]
    rc, wall = _run(cmd, work / "timm.log")
    row |= {"timm": probe.stdout.strip(), "command": _shown(cmd), "wall_s": wall}
    summary = work / "timm" / "toy" / "summary.csv"
    if rc or not summary.is_file():
        return row | {"not_run": _failed("timm's train.py", rc, work / "timm.log")}
    with summary.open() as f:
        return row | {"val_top1": [round(float(r["eval_top1"]), 1) for r in csv.DictReader(f)]}


def _shown(cmd: list[str]) -> str:
    return " ".join(["nice -n 10", *(a if re.fullmatch(r"[\w./:=,@+-]+", a) else repr(a) for a in cmd)])


def markdown(result: dict) -> str:
    epochs = result["epochs"]
    lines = [f"{result['date']}, load `{result['uptime']}`; {result['settings']}", "",
             "| script | " + " | ".join(f"ep {e + 1}" for e in range(epochs)) + " | wall s |",
             "|---|" + "---:|" * (epochs + 1)]
    for row in result["rows"]:
        cells = [f"{x:.1f}" for x in row["val_top1"]] if "val_top1" in row else [row["not_run"]] + [""] * (epochs - 1)
        lines.append(f"| {row['source']} | " + " | ".join(cells) + f" | {row.get('wall_s', '')} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", help="work folder (default: a temp folder, deleted at the end)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--res", type=int, default=TV_SIZES[0], help="train crop (default: torchvision's fixed 224)")
    p.add_argument("--val-resize", type=int, default=TV_SIZES[1], help="val resize before a --res centre crop")
    p.add_argument("--torchvision-refs", metavar="DIR", help="torchvision's references/classification folder")
    p.add_argument("--timm-train", default=str(MIRRORS / "huggingface+pytorch-image-models" / "train.py"),
                   help="timm's train.py (default: written from the fetched mirror)")
    p.add_argument("--timm-python", default=str(PEER_PYTHON), help="a Python with timm and webdataset")
    p.add_argument("--skip", default="", help="comma list of ours,torchvision,timm to leave out")
    p.add_argument("--markdown", action="store_true", help="also print the docs/recipes.md table")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="recipe-sources-"))
    work.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    toy = Toy(epochs=args.epochs, seed=args.seed, res=args.res, val_resize=args.val_resize)
    try:
        shards, folder = build_corpus(work, args.seed)
        timm_train = _timm_train_py(Path(args.timm_train), work)
        refs, why = find_torchvision_refs(args.torchvision_refs, work)
        rows = []
        if "ours" not in skip:
            rows.append(run_ours(shards, work, toy))
        if "torchvision" not in skip:
            rows.append(run_torchvision(folder, refs, why, work, toy))
        if "timm" not in skip:
            rows.append(run_timm(shards, timm_train, Path(args.timm_python), work, toy))
        result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                  "epochs": args.epochs, "seed": args.seed, "rows": rows,
                  "settings": (f"{ARCH}, {CLASSES} classes x {TRAIN_PER_CLASS} train / {VAL_PER_CLASS} val, "
                               f"batch {BATCH}, SGD lr {LR} momentum {MOMENTUM} wd {WD}, step {STEP_EPOCHS}, "
                               f"{toy.res} px (val {toy.val_resize} -> {toy.res}), {toy.epochs} epochs, "
                               f"seed {toy.seed}, "
                               "CPU, 1 thread")}
        print(json.dumps(result, indent=1))
        if args.markdown:
            print(markdown(result))
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _timm_train_py(given: Path, work: Path) -> Path:
    """timm's train.py: GIVEN if it is a file, else written from the mirror's git directory."""
    if given.is_file():
        return given
    git_dir = MIRRORS / "huggingface+pytorch-image-models" / "repo"
    shown = subprocess.run(["git", f"--git-dir={git_dir}", "show", "HEAD:train.py"], capture_output=True, text=True)
    if shown.returncode:
        return given
    (work / "timm-train.py").write_text(shown.stdout)
    return work / "timm-train.py"


if __name__ == "__main__":
    sys.exit(main())
