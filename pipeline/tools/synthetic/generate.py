"""A small, fake ILSVRC2012 in the exact layout of the real archives, for tests and demos.

`generate(out, ...)` writes, under OUT:
  ILSVRC2012_img_train.tar      tar of per-class tars nXXXXXXXX.tar, each of nXXXXXXXX_<n>.JPEG
  ILSVRC2012_img_val.tar        flat ILSVRC2012_val_%08d.JPEG (numbered from 1, classes shuffled)
  ILSVRC2012_devkit_t12.tar.gz  data/meta.mat (synsets struct) + data/ILSVRC2012_validation_ground_truth.txt
  expected.json                 what every member is and what a correct pipeline must make of it
and optionally the extracted `imagefolder`, Kaggle-style `kaggle` and per-class `classtars` layouts.

Classes are real ImageNet-1k WNIDs; each has a learnable procedural look (`images`); what each
member is comes from the seeded plan (`plan`), its archive bytes from `archives`; this module writes
the layouts and expected.json, and is the `make-synthetic-imagenet` command.
The devkit's ILSVRC2012_IDs are a seeded permutation, NOT sorted-WNID order, so a pipeline that
uses ID-1 as the label gives visibly wrong labels. With quirks on, the real archive's oddities are
planted (a PNG and CMYK JPEGs under their real names, grayscale, truncated, empty, EXIF-rotated,
huge, tiny, RGBA PNG, palette GIF, an AppleDouble `._` file, a CMYK val image).
Same arguments -> byte-identical files (tar mtime/uid 0, gzip mtime 0, fixed .mat header).
With `imagenet_like` (--imagenet-like) the clean images get ImageNet's bytes per pixel, size spread
and a few progressive JPEGs (`images.render_photo`, `images.imagenet_like_size`): the set for speed
figures. The quirks stay as they are.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import OneLineParser
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.storage.atomic import atomic_open
from imagenet_shards.pipeline.tools.synthetic.archives import add_member, devkit_bytes, kaggle_solution, tar_bytes
from imagenet_shards.pipeline.tools.synthetic.full_imagenet import FULL_LAYOUTS, generate_full
from imagenet_shards.pipeline.tools.synthetic.hf import write_hf_layouts
from imagenet_shards.pipeline.tools.synthetic.images import (PHOTO_PROGRESSIVE_FRACTION, PHOTO_QUALITY, class_styles,
                                                             imagenet_like_size, photo_bytes)
from imagenet_shards.pipeline.tools.synthetic.plan import (MIN_TRAIN_WITH_QUIRKS, QUIRK_CLASSES, SAMPLE_FACTS, Planned,
                                                           choose_classes, ilsvrc_ids, member_bytes, plan_samples)

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
EXPECTED = "expected.json"
LAYOUTS = ("ilsvrc", "imagefolder", "kaggle", "classtars", "hf-targz", "hf-parquet")
HF_LAYOUTS = ("hf-targz", "hf-parquet")  # written from the ilsvrc archives (pipeline/tools/synthetic/hf.py)
# layout -> what it writes under OUT (files and directories), for expected.json["files"]
LAYOUT_FILES = {
    "ilsvrc": {"train_tar": TRAIN_TAR, "val_tar": VAL_TAR, "devkit": DEVKIT},
    "imagefolder": {"imagefolder_train": "imagefolder/train", "imagefolder_val": "imagefolder/val"},
    "kaggle": {"kaggle_val_solution": "kaggle/LOC_val_solution.csv",
               "kaggle_synset_mapping": "kaggle/LOC_synset_mapping.txt", "kaggle_val": "kaggle/val"},
    "classtars": {"class_tars": "train_class_tars"},
    "hf-targz": {"hf_targz": "hf/data"},
    "hf-parquet": {"hf_parquet": "hf-parquet/data"},
}


@contextlib.contextmanager
def _tar_writer(path: Path, enabled: bool):
    """A GNU tar written atomically to `path`, or to nowhere when its layout is not wanted."""
    with (atomic_open(path, fsync=False) if enabled else open(os.devnull, "wb")) as f, \
            tarfile.open(fileobj=f, mode="w", format=tarfile.GNU_FORMAT) as tar:
        yield tar


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _prepare_out(out: Path) -> None:
    """OUT may be new, empty, or a previous run of ours (whose outputs are replaced)."""
    if out.exists() and any(out.iterdir()):
        if not (out / EXPECTED).exists():
            raise ValueError(f"{out} is not empty and holds no {EXPECTED} from an earlier run; "
                             f"pass a new or empty directory")
        (out / EXPECTED).unlink()
        for files in LAYOUT_FILES.values():
            for rel in files.values():
                top = out / rel.split("/")[0]
                if top.is_dir():
                    shutil.rmtree(top)
                elif top.exists():
                    top.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _check_args(classes: int, train_per_class: int, val_per_class: int, quirks: bool,
                layouts: tuple[str, ...]) -> None:
    if not 1 <= classes <= 1000:
        raise ValueError(f"--classes {classes} is out of range: ImageNet-1k has 1 to 1000 classes")
    if quirks and classes < len(QUIRK_CLASSES):
        raise ValueError(f"--classes {classes} is too few with quirks on: they need the "
                         f"{len(QUIRK_CLASSES)} classes {', '.join(QUIRK_CLASSES)}; "
                         f"use --classes {len(QUIRK_CLASSES)} or more, or --no-quirks")
    min_train = MIN_TRAIN_WITH_QUIRKS if quirks else 1
    if train_per_class < min_train:
        raise ValueError(f"--train-per-class {train_per_class} is too few: need at least {min_train}"
                         + (" with quirks on (or pass --no-quirks)" if quirks else ""))
    if val_per_class < 1:
        raise ValueError(f"--val-per-class {val_per_class} is too few: need at least 1")
    unknown = [name for name in layouts if name not in LAYOUTS]
    if unknown or not layouts:
        raise ValueError(f"unknown or no --layout {','.join(unknown) or '(empty)'}: "
                         f"choose from {','.join(LAYOUTS)} (or, on their own, {','.join(FULL_LAYOUTS)})")
    if set(layouts) & set(HF_LAYOUTS) and "ilsvrc" not in layouts:
        raise ValueError("the hf-targz and hf-parquet layouts are written from the ilsvrc archives: add ilsvrc "
                         "to --layout")


def _imagenet_like_plan(plan: list[Planned], seed: int) -> None:
    """Give the clean and progressive members ImageNet's sizes, q75..95, and ~2 % progressive."""
    rng = np.random.default_rng([seed, 3])
    for p in plan:
        if p.kind in ("clean", "progressive"):
            p.kind = "progressive" if rng.random() < PHOTO_PROGRESSIVE_FRACTION else "clean"
            p.size = imagenet_like_size(rng)
            p.quality = int(rng.integers(*PHOTO_QUALITY))


def generate(out, *, classes: int = 10, train_per_class: int = 50, val_per_class: int = 10,
             seed: int = 0, quirks: bool = True, layouts=("ilsvrc",), progress: bool = True,
             imagenet_like: bool = False) -> dict:
    """Write a synthetic ILSVRC2012 under `out` and return the expected dict (also OUT/expected.json).

    labels: `label` = index of the WNID in the full 1000-class sorted table, `local_label` = index
    among the chosen classes. width/height are as PIL opens the member (EXIF not applied).
    `imagenet_like`: clean images with ImageNet's bytes per pixel (~0.6) and size spread, for speed
    figures (slower to write: ~25 ms an image).
    Raises ValueError for arguments that cannot work (too few classes for the quirks, ...).
    """
    from tqdm import tqdm

    layouts = tuple(dict.fromkeys(layouts))
    _check_args(classes, train_per_class, val_per_class, quirks, layouts)
    out = Path(out)
    _prepare_out(out)
    wnids = choose_classes(classes, quirks)
    ids = ilsvrc_ids(wnids, seed)
    label_of = {c.wnid: c.index for c in imagenet_1k_classes()}
    styles = dict(zip(wnids, class_styles(len(wnids), seed)))
    plan = plan_samples(wnids, train_per_class, val_per_class, seed, quirks)
    if imagenet_like:
        _imagenet_like_plan(plan, seed)
    samples, boxes = [], {}

    def build(p: Planned) -> bytes:
        if imagenet_like and p.kind in ("clean", "progressive"):
            rng = np.random.default_rng([seed, label_of[p.wnid], 0 if p.split == "train" else 1, p.number, 3])
            data, box = photo_bytes(styles[p.wnid], rng, *p.size, p.quality, progressive=p.kind == "progressive")
        else:
            data, box = member_bytes(p, styles[p.wnid], seed, label_of[p.wnid])
        fmt, mode, expect, fixes, reason = SAMPLE_FACTS[p.kind]
        has_pixels = fmt is not None
        samples.append({
            "split": p.split, "key": p.filename.rsplit(".", 1)[0], "filename": p.filename,
            "member": p.member, "wnid": p.wnid, "label": label_of[p.wnid],
            "local_label": wnids.index(p.wnid),
            "width": p.size[0] if has_pixels else None, "height": p.size[1] if has_pixels else None,
            "format": fmt, "mode": mode, "quirk": None if p.kind == "clean" else p.kind,
            "expect": expect, "fixes": list(fixes), "reason": reason,
            "sha256": hashlib.sha256(data).hexdigest()})
        if box is not None and p.split == "val":
            boxes[p.filename] = box
        return data

    want = set(layouts)
    val_plan = [p for p in plan if p.split == "val"]
    with tqdm(total=len(plan), desc="synthetic ImageNet", unit="img", disable=not progress) as bar:
        _write_train(out, want, wnids, plan, build, bar)
        _write_val(out, want, val_plan, build, bar)
    _write_labels(out, want, wnids, ids, plan, val_plan, boxes)

    expected = {
        "seed": seed,
        "args": {"classes": classes, "train_per_class": train_per_class, "val_per_class": val_per_class,
                 "seed": seed, "quirks": quirks, "layouts": list(layouts),
                 **({"imagenet_like": True} if imagenet_like else {})},
        "classes": wnids,
        "ilsvrc_ids": ids,
        "files": {k: v for name in LAYOUTS if name in want for k, v in LAYOUT_FILES[name].items()},
        "counts": _counts(samples),
        "samples": samples,
    }
    if want & set(HF_LAYOUTS):
        write_hf_layouts(out, expected, targz="hf-targz" in want, parquet="hf-parquet" in want, seed=seed)
    text = json.dumps(expected, sort_keys=True, indent=1) + "\n"
    with atomic_open(out / EXPECTED, fsync=False) as f:  # written last: its presence means the set is complete
        f.write(text.encode())
    return expected


def _write_train(out: Path, want: set, wnids: list[str], plan: list[Planned], build, bar) -> None:
    """The train archive (a tar of per-class tars), and the class tars and ImageFolder tree if asked for."""
    with _tar_writer(out / TRAIN_TAR, "ilsvrc" in want) as train_tar:
        for wnid in wnids:
            members = []
            for p in (p for p in plan if p.split == "train" and p.wnid == wnid):
                members.append((p.filename, build(p)))
                if "imagefolder" in want:
                    _write(out / "imagefolder" / "train" / wnid / p.filename, members[-1][1])
                bar.update()
            class_tar = tar_bytes(members)
            add_member(train_tar, f"{wnid}.tar", class_tar)
            if "classtars" in want:
                _write(out / "train_class_tars" / f"{wnid}.tar", class_tar)


def _write_val(out: Path, want: set, val_plan: list[Planned], build, bar) -> None:
    """The val archive (flat), and the ImageFolder and Kaggle val folders if asked for."""
    with _tar_writer(out / VAL_TAR, "ilsvrc" in want) as val_tar:
        for p in val_plan:
            data = build(p)
            add_member(val_tar, p.filename, data)
            if "imagefolder" in want:
                _write(out / "imagefolder" / "val" / p.wnid / p.filename, data)
            if "kaggle" in want:
                _write(out / "kaggle" / "val" / p.filename, data)
            bar.update()


def _write_labels(out: Path, want: set, wnids: list[str], ids: dict, plan: list[Planned], val_plan: list[Planned],
                  boxes: dict) -> None:
    """What says the val labels: the ILSVRC devkit, or Kaggle's solution CSV and synset mapping."""
    if "ilsvrc" in want:
        counts = {w: sum(1 for p in plan if p.split == "train" and p.wnid == w and p.kind != "non_image")
                  for w in wnids}
        with atomic_open(out / DEVKIT, fsync=False) as f:
            f.write(devkit_bytes(wnids, ids, counts, [p.wnid for p in val_plan]))
    if "kaggle" in want:
        _write(out / "kaggle" / "LOC_val_solution.csv", kaggle_solution(val_plan, boxes))
        names = {c.wnid: c.name for c in imagenet_1k_classes()}
        _write(out / "kaggle" / "LOC_synset_mapping.txt", "".join(f"{w} {names[w]}\n" for w in wnids).encode())


def _counts(samples: list[dict]) -> dict:
    """Per split: members, and how many a correct pipeline keeps as-is, fixes, rejects, skips."""
    out = {}
    for split in ("train", "val"):
        rows = [s for s in samples if s["split"] == split]
        out[split] = {"members": len(rows), **{e: sum(1 for s in rows if s["expect"] == e)
                                             for e in ("ok", "fix", "reject", "skip")}}
    return out


# ---- CLI ----------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="make-synthetic-imagenet",
        description="Write a small fake ILSVRC2012 (train tar of class tars, flat val tar, devkit) "
                    "with learnable procedural images of real ImageNet-1k classes, the real "
                    "archive's quirks, and OUT/expected.json describing every member. "
                    "Same arguments give byte-identical files.",
        epilog="example: make-synthetic-imagenet /tmp/fake-imagenet --classes 10 "
               "--train-per-class 50 --val-per-class 10 --layout ilsvrc,imagefolder")
    parser.add_argument("out", help="output directory (new, empty, or an earlier run's; a local path)")
    parser.add_argument("--classes", type=int, default=10, help="number of classes (default 10; >= 4 with quirks)")
    parser.add_argument("--train-per-class", type=int, default=50, help="train images per class (default 50)")
    parser.add_argument("--val-per-class", type=int, default=10, help="val images per class (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed for every random choice (default 0)")
    parser.add_argument("--no-quirks", dest="quirks", action="store_false",
                        help="only clean RGB JPEGs (default: plant the real archive's oddities)")
    parser.add_argument("--layout", default="ilsvrc",
                        help="comma-separated layouts to write: ilsvrc (the three real archives), "
                             "imagefolder (OUT/imagefolder/{train,val}/WNID/), kaggle (OUT/kaggle/ "
                             "LOC_val_solution.csv + flat val/), classtars (OUT/train_class_tars/"
                             "WNID.tar), hf-targz (OUT/hf/data/*.tar.gz) and hf-parquet (OUT/hf-parquet/data/"
                             "*.parquet), the Hugging Face ILSVRC/imagenet-1k forms of the same images (need "
                             "ilsvrc; parquet needs pyarrow); or the full-ImageNet releases, on their own: fall11 "
                             "(OUT/fall11_whole.tar of per-synset tars) and winter21 (OUT/winter21_whole.tar.gz), "
                             "--classes WNIDs spread over every label space; default ilsvrc")
    parser.add_argument("--unknown-wnids", metavar="WNID,...", default="",
                        help="with the fall11/winter21 layouts: also a class tar of each of these WNIDs, which no "
                             "label space has (e.g. n99999999: what prepare-shards refuses unless asked)")
    parser.add_argument("--imagenet-like", action="store_true",
                        help="clean images with ImageNet's bytes per pixel (~0.6 at q75..95), size spread (~17%% "
                             "over 500 px, a few up to 4000 px) and ~2%% progressive JPEGs: the set for speed "
                             "figures (default: smooth, small pictures that write fast)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if storage.is_remote(args.out):  # it would write ./s3:/bucket/... otherwise
        print(f"error: OUT takes a local path, not a URL ({storage.redact(args.out)}): generate here, then copy",
              file=sys.stderr)
        return 2
    args.out = Path(storage.local_path(args.out))
    layouts = tuple(s.strip() for s in args.layout.split(",") if s.strip())
    start = time.perf_counter()
    if args.unknown_wnids and not (layouts and set(layouts) <= set(FULL_LAYOUTS)):
        print("error: --unknown-wnids goes with the full-ImageNet layouts (--layout fall11,winter21)", file=sys.stderr)
        return 2
    if layouts and set(layouts) <= set(FULL_LAYOUTS):
        try:
            expected = generate_full(args.out, classes=args.classes, per_class=args.train_per_class, seed=args.seed,
                                     layouts=layouts, unknown_wnids=tuple(w for w in args.unknown_wnids.split(",") if w))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {len(expected['classes'])} classes, {len(expected['samples'])} images as {','.join(layouts)} "
              f"to {args.out} in {time.perf_counter() - start:.1f}s")
        return 0
    try:
        expected = generate(args.out, classes=args.classes, train_per_class=args.train_per_class,
                            val_per_class=args.val_per_class, seed=args.seed, quirks=args.quirks,
                            layouts=layouts, progress=not args.quiet, imagenet_like=args.imagenet_like)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    counts = expected["counts"]
    quirky = sum(1 for s in expected["samples"] if s["quirk"] not in (None, "progressive"))
    print(f"wrote {len(expected['classes'])} classes, {counts['train']['members']} train + "
          f"{counts['val']['members']} val members ({quirky} quirks) as {','.join(layouts)} "
          f"to {args.out} in {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
