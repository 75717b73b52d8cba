"""A small, fake ILSVRC2012 in the exact layout of the real archives, for tests and demos.

`generate(out, ...)` writes, under OUT:
  ILSVRC2012_img_train.tar      tar of per-class tars nXXXXXXXX.tar, each of nXXXXXXXX_<n>.JPEG
  ILSVRC2012_img_val.tar        flat ILSVRC2012_val_%08d.JPEG (numbered from 1, classes shuffled)
  ILSVRC2012_devkit_t12.tar.gz  data/meta.mat (synsets struct) + data/ILSVRC2012_validation_ground_truth.txt
  expected.json                 what every member is and what a correct pipeline must make of it
and optionally the extracted `imagefolder`, Kaggle-style `kaggle` and per-class `classtars` layouts.

Classes are real ImageNet-1k WNIDs; each has a learnable procedural look (imagenet_shards.pipeline.tools.synthetic.images).
The devkit's ILSVRC2012_IDs are a seeded permutation, NOT sorted-WNID order, so a pipeline that
uses ID-1 as the label gives visibly wrong labels. With quirks on, the real archive's oddities are
planted (a PNG and CMYK JPEGs under their real names, grayscale, truncated, empty, EXIF-rotated,
huge, tiny, RGBA PNG, palette GIF, an AppleDouble `._` file, a CMYK val image).
Same arguments -> byte-identical files (tar mtime/uid 0, gzip mtime 0, fixed .mat header).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from imagenet_shards.pipeline.storage.atomic import atomic_open
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.tools.synthetic.images import class_styles, encode_sample, render

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
EXPECTED = "expected.json"
LAYOUTS = ("ilsvrc", "imagefolder", "kaggle", "classtars")
# layout -> what it writes under OUT (files and directories), for expected.json["files"]
LAYOUT_FILES = {
    "ilsvrc": {"train_tar": TRAIN_TAR, "val_tar": VAL_TAR, "devkit": DEVKIT},
    "imagefolder": {"imagefolder_train": "imagefolder/train", "imagefolder_val": "imagefolder/val"},
    "kaggle": {"kaggle_val_solution": "kaggle/LOC_val_solution.csv",
               "kaggle_synset_mapping": "kaggle/LOC_synset_mapping.txt", "kaggle_val": "kaggle/val"},
    "classtars": {"class_tars": "train_class_tars"},
}

# kind -> (format, mode, expect, fixes, reason). fixes are the policy-independent ones, in the
# order docs/format.md applies them; "resized" is policy-dependent and never listed.
SAMPLE_FACTS = {
    "clean": ("JPEG", "RGB", "ok", [], None),
    "progressive": ("JPEG", "RGB", "ok", [], None),
    "exif_rotated": ("JPEG", "RGB", "ok", [], None),
    "large": ("JPEG", "RGB", "ok", [], None),
    "tiny": ("JPEG", "RGB", "ok", [], None),
    "png_as_jpeg": ("PNG", "RGB", "fix", ["converted_from_png"], None),
    "cmyk": ("JPEG", "CMYK", "fix", ["cmyk_to_rgb"], None),
    "grayscale": ("JPEG", "L", "fix", ["gray_to_rgb"], None),
    "rgba_png": ("PNG", "RGBA", "fix", ["converted_from_png", "alpha_over_white"], None),
    "palette_gif": ("GIF", "P", "fix", ["converted_from_gif", "palette_to_rgb"], None),
    "truncated": ("JPEG", "RGB", "reject", [], "truncated"),
    "empty": (None, None, "reject", [], "empty"),
    "non_image": (None, None, "skip", [], "not_an_image"),
}
# Quirks pinned to the real file names they have in ILSVRC2012 (manifests/imagenet-1k/facts.json).
NAMED_QUIRKS = (("png_as_jpeg", "n02105855", 2933), ("cmyk", "n01739381", 1309),
                ("cmyk", "n02077923", 14822))
# Quirks spread over the chosen classes (least-loaded class first, seeded tie-break).
SPREAD_QUIRKS = ("grayscale", "grayscale", "truncated", "empty", "exif_rotated", "large", "tiny",
                 "rgba_png", "palette_gif")
QUIRK_CLASSES = ("n01440764", "n01739381", "n02077923", "n02105855")  # tench + the named quirks
MIN_TRAIN_WITH_QUIRKS = 3  # 12 train quirks over >= 4 classes never need more than 3 slots a class
PROGRESSIVE_FRACTION = 0.10
LARGE_SIZE, TINY_SIZE = (4000, 3000), (32, 24)
# ImageNet-like sizes: (width, height, weight); the rest are random smaller or a few larger.
COMMON_SIZES = ((500, 375, 0.42), (375, 500, 0.18), (500, 333, 0.14), (333, 500, 0.06))
LARGER_SIZES = ((640, 480), (800, 600), (1024, 683))
NON_LEAF_SYNSETS = {  # a tiny slice of the WordNet tree above the leaves, as the real meta.mat has
    "entity": ("n00001740", "entity", "that which is perceived or known or inferred to have its own distinct existence"),
    "animal": ("n00015388", "animal, animate being, beast, brute, creature, fauna",
               "a living organism characterized by voluntary movement"),
    "object": ("n00002684", "object, physical object", "a tangible and visible entity"),
}
FIRST_NON_ANIMAL = "n02666196"  # abacus: ImageNet-1k's sorted WNIDs below it are animals


@dataclass
class Planned:
    """One member to write: where it goes and how to draw and encode it."""

    split: str
    wnid: str
    number: int  # n in nXXXX_<n>.JPEG, or the val image number
    kind: str = "clean"
    size: tuple[int, int] = (500, 375)
    quality: int = 90
    info: dict = field(default_factory=dict)

    @property
    def filename(self) -> str:
        if self.split == "val":
            return f"ILSVRC2012_val_{self.number:08d}.JPEG"
        prefix = "._" if self.kind == "non_image" else ""
        return f"{prefix}{self.wnid}_{self.number}.JPEG"

    @property
    def member(self) -> str:
        return self.filename if self.split == "val" else f"{self.wnid}.tar/{self.filename}"


def choose_classes(num_classes: int, quirks: bool) -> list[str]:
    """Sorted WNIDs: the quirk classes (if quirks) plus ones evenly spaced through the 1000-class table."""
    table = [c.wnid for c in imagenet_1k_classes()]
    chosen = list(QUIRK_CLASSES) if quirks else []
    step = len(table) / num_classes
    candidates = [table[int(i * step)] for i in range(num_classes)] + table
    for wnid in candidates:
        if len(chosen) == num_classes:
            break
        if wnid not in chosen:
            chosen.append(wnid)
    return sorted(chosen)


def ilsvrc_ids(wnids: list[str], seed: int) -> dict[str, int]:
    """Devkit ILSVRC2012_ID (1..K) per WNID: a seeded permutation that is never the sorted order."""
    perm = np.random.default_rng([seed, 1]).permutation(len(wnids))
    if len(wnids) > 1 and np.array_equal(perm, np.arange(len(wnids))):
        perm = np.roll(perm, 1)
    return {w: int(p) + 1 for w, p in zip(wnids, perm)}


def _image_size(rng: np.random.Generator) -> tuple[int, int]:
    r = rng.random()
    for w, h, p in COMMON_SIZES:
        if r < p:
            return w, h
        r -= p
    if r < 0.03:
        return LARGER_SIZES[int(rng.integers(len(LARGER_SIZES)))]
    w = int(rng.integers(150, 500))
    h = int(min(500, max(100, w * rng.uniform(0.6, 1.4))))
    return (w, h) if rng.random() < 0.7 else (h, w)


def plan_samples(wnids: list[str], train_per_class: int, val_per_class: int, seed: int,
                 quirks: bool) -> list[Planned]:
    """Every member of both archives in archive order (train: class, then name; val: number)."""
    rng = np.random.default_rng([seed, 2])
    numbers = {}
    for wnid in wnids:
        picked = rng.choice(np.arange(1, max(20000, 2 * train_per_class)), train_per_class, replace=False)
        numbers[wnid] = [int(n) for n in picked]
    train = {w: {n: Planned("train", w, n) for n in numbers[w]} for w in wnids}
    extra = {w: [] for w in wnids}
    if quirks:
        load = {w: 0 for w in wnids}
        for kind, wnid, n in NAMED_QUIRKS:
            if n not in train[wnid]:  # give the real name to one of the class's slots
                del train[wnid][next(m for m, p in train[wnid].items() if p.kind == "clean")]
                train[wnid][n] = Planned("train", wnid, n)
            train[wnid][n].kind = kind
            load[wnid] += 1
        tie = {w: float(t) for w, t in zip(wnids, rng.random(len(wnids)))}
        for kind in SPREAD_QUIRKS:
            wnid = min(wnids, key=lambda w: (load[w], tie[w]))
            free = sorted(n for n, p in train[wnid].items() if p.kind == "clean")
            train[wnid][free[int(rng.integers(len(free)))]].kind = kind
            load[wnid] += 1
        # the AppleDouble companion of an image, in the same class tar
        wnid = wnids[int(rng.integers(len(wnids)))]
        extra[wnid].append(Planned("train", wnid, min(train[wnid]), "non_image"))
    val_classes = rng.permutation(np.repeat(np.arange(len(wnids)), val_per_class))
    val = [Planned("val", wnids[c], i + 1) for i, c in enumerate(val_classes)]
    if quirks and val:
        val[int(rng.integers(len(val)))].kind = "cmyk"
    ordered = []
    for wnid in wnids:
        ordered += sorted(list(train[wnid].values()) + extra[wnid], key=lambda p: p.filename)
    ordered += val
    for p in ordered:
        if p.kind == "clean" and rng.random() < PROGRESSIVE_FRACTION:
            p.kind = "progressive"
        p.size = LARGE_SIZE if p.kind == "large" else TINY_SIZE if p.kind == "tiny" else _image_size(rng)
        p.quality = 75 if p.kind == "large" else int(rng.integers(75, 96))
    return ordered


def member_bytes(p: Planned, style, seed: int, label: int) -> tuple[bytes, tuple[float, ...] | None]:
    """Draw and encode one planned member: (bytes, object box as fractions or None)."""
    if p.kind in ("empty", "non_image"):
        return encode_sample(p.kind, None, None, p.quality), None
    rng = np.random.default_rng([seed, label, 0 if p.split == "train" else 1, p.number])
    w, h = p.size
    image, box, mask = render(style, rng, w, h, downscale=16 if p.kind == "large" else 4)
    return encode_sample(p.kind, image, mask, p.quality, progressive=p.kind == "progressive"), box


# ---- archives ---------------------------------------------------------------------------------

def _tarinfo(name: str, size: int, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.uid, info.gid, info.uname, info.gname = size, 0, 0, 0, "", ""
    info.mode = 0o755 if directory else 0o644
    if directory:
        info.type, info.size = tarfile.DIRTYPE, 0
    return info


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Append one regular file with fixed metadata (mtime 0, uid/gid 0, mode 0o644)."""
    tar.addfile(_tarinfo(name, len(data)), io.BytesIO(data))


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """An uncompressed GNU tar of (name, bytes) in the given order, reproducible byte for byte."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            add_member(tar, name, data)
    return buf.getvalue()


def meta_mat_bytes(wnids: list[str], ids: dict[str, int], train_counts: dict[str, int]) -> bytes:
    """devkit data/meta.mat: MATLAB struct array `synsets` (leaves 1..K, then a few parents)."""
    from scipy.io import savemat

    info = {c.wnid: c for c in imagenet_1k_classes()}
    k = len(wnids)
    groups = {"animal": [w for w in wnids if w < FIRST_NON_ANIMAL],
              "object": [w for w in wnids if w >= FIRST_NON_ANIMAL]}
    groups = {g: ws for g, ws in groups.items() if ws}
    rows = [(ids[w], w, info[w].name, info[w].gloss, [], 0, train_counts[w])
            for w in sorted(wnids, key=ids.get)]
    group_ids = {g: k + 2 + i for i, g in enumerate(groups)}
    rows.append((k + 1, *NON_LEAF_SYNSETS["entity"], list(group_ids.values()), 2,
                 sum(train_counts.values())))
    for g, ws in groups.items():
        rows.append((group_ids[g], *NON_LEAF_SYNSETS[g], sorted(ids[w] for w in ws), 1,
                     sum(train_counts[w] for w in ws)))
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children",
              "wordnet_height", "num_train_images"]
    synsets = np.empty((len(rows), 1), dtype=[(f, object) for f in fields])
    for i, (sid, wnid, words, gloss, children, height, n_train) in enumerate(rows):
        synsets[i, 0] = (np.array([[sid]], np.uint16), wnid, words, gloss,
                         np.array([[len(children)]], np.uint16),
                         np.array(children, np.uint16).reshape(1, -1), np.array([[height]], np.uint8),
                         np.array([[n_train]], np.uint32))
    buf = io.BytesIO()
    savemat(buf, {"synsets": synsets})
    data = bytearray(buf.getvalue())
    # scipy puts the current time in the 116-byte text header; pin it for reproducibility
    data[:116] = b"MATLAB 5.0 MAT-file, Platform: GLNXA64, written by make-synthetic-imagenet".ljust(116)
    return bytes(data)


def devkit_bytes(wnids: list[str], ids: dict[str, int], train_counts: dict[str, int],
                 val_wnids: list[str]) -> bytes:
    """ILSVRC2012_devkit_t12.tar.gz with meta.mat and the val ground truth (one ID a line)."""
    root = "ILSVRC2012_devkit_t12"
    truth = "".join(f"{ids[w]}\n" for w in val_wnids).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(_tarinfo(root, 0, directory=True))
        tar.addfile(_tarinfo(f"{root}/data", 0, directory=True))
        add_member(tar, f"{root}/data/ILSVRC2012_validation_ground_truth.txt", truth)
        add_member(tar, f"{root}/data/meta.mat", meta_mat_bytes(wnids, ids, train_counts))
    return gzip.compress(buf.getvalue(), compresslevel=9, mtime=0)


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
                         f"choose from {','.join(LAYOUTS)}")


def generate(out, *, classes: int = 10, train_per_class: int = 50, val_per_class: int = 10,
             seed: int = 0, quirks: bool = True, layouts=("ilsvrc",), progress: bool = True) -> dict:
    """Write a synthetic ILSVRC2012 under `out` and return the expected dict (also OUT/expected.json).

    labels: `label` = index of the WNID in the full 1000-class sorted table, `local_label` = index
    among the chosen classes. width/height are as PIL opens the member (EXIF not applied).
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
    samples, boxes = [], {}

    def build(p: Planned) -> bytes:
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
    bar = tqdm(total=len(plan), desc="synthetic ImageNet", unit="img", disable=not progress)
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
    val_plan = [p for p in plan if p.split == "val"]
    with _tar_writer(out / VAL_TAR, "ilsvrc" in want) as val_tar:
        for p in val_plan:
            data = build(p)
            add_member(val_tar, p.filename, data)
            if "imagefolder" in want:
                _write(out / "imagefolder" / "val" / p.wnid / p.filename, data)
            if "kaggle" in want:
                _write(out / "kaggle" / "val" / p.filename, data)
            bar.update()
    bar.close()
    if "ilsvrc" in want:
        counts = {w: sum(1 for p in plan if p.split == "train" and p.wnid == w and p.kind != "non_image")
                  for w in wnids}
        with atomic_open(out / DEVKIT, fsync=False) as f:
            f.write(devkit_bytes(wnids, ids, counts, [p.wnid for p in val_plan]))
    if "kaggle" in want:
        _write(out / "kaggle" / "LOC_val_solution.csv", _kaggle_solution(val_plan, boxes))
        names = {c.wnid: c.name for c in imagenet_1k_classes()}
        _write(out / "kaggle" / "LOC_synset_mapping.txt", "".join(f"{w} {names[w]}\n" for w in wnids).encode())

    expected = {
        "seed": seed,
        "args": {"classes": classes, "train_per_class": train_per_class, "val_per_class": val_per_class,
                 "seed": seed, "quirks": quirks, "layouts": list(layouts)},
        "classes": wnids,
        "ilsvrc_ids": ids,
        "files": {k: v for name in LAYOUTS if name in want for k, v in LAYOUT_FILES[name].items()},
        "counts": _counts(samples),
        "samples": samples,
    }
    text = json.dumps(expected, sort_keys=True, indent=1) + "\n"
    with atomic_open(out / EXPECTED, fsync=False) as f:  # written last: its presence means the set is complete
        f.write(text.encode())
    return expected


def _kaggle_solution(val_plan: list[Planned], boxes: dict) -> bytes:
    """LOC_val_solution.csv: ImageId,PredictionString with 'wnid x1 y1 x2 y2 ' per box (pixels)."""
    lines = ["ImageId,PredictionString"]
    for p in sorted(val_plan, key=lambda p: p.number):
        w, h = p.size
        x1, y1, x2, y2 = boxes[p.filename]
        box = (int(x1 * (w - 1)), int(y1 * (h - 1)), int(x2 * (w - 1)), int(y2 * (h - 1)))
        lines.append(f"{p.filename.rsplit('.', 1)[0]},{p.wnid} {' '.join(map(str, box))} ")
    return ("\n".join(lines) + "\n").encode()


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
    parser = argparse.ArgumentParser(
        prog="make-synthetic-imagenet",
        description="Write a small fake ILSVRC2012 (train tar of class tars, flat val tar, devkit) "
                    "with learnable procedural images of real ImageNet-1k classes, the real "
                    "archive's quirks, and OUT/expected.json describing every member. "
                    "Same arguments give byte-identical files.",
        epilog="example: make-synthetic-imagenet /tmp/fake-imagenet --classes 10 "
               "--train-per-class 50 --val-per-class 10 --layout ilsvrc,imagefolder")
    parser.add_argument("out", type=Path, help="output directory (new, empty, or an earlier run's)")
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
                             "WNID.tar); default ilsvrc")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    layouts = tuple(s.strip() for s in args.layout.split(",") if s.strip())
    start = time.perf_counter()
    try:
        expected = generate(args.out, classes=args.classes, train_per_class=args.train_per_class,
                            val_per_class=args.val_per_class, seed=args.seed, quirks=args.quirks,
                            layouts=layouts, progress=not args.quiet)
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
