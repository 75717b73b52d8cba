"""A small, fake full ImageNet in the layouts of the real releases, for tests and demos.

- `fall11` layout: `fall11_whole.tar`, an uncompressed tar of per-synset tars `nXXXXXXXX.tar` at its
  top level, each holding `nXXXXXXXX_<n>.JPEG` (the same layout as ILSVRC2012_img_train.tar);
- `winter21` layout: `winter21_whole.tar.gz`, a gzip-compressed tar of `winter21_whole/nXXXXXXXX.tar`
  (the classes `REMOVED_IN_WINTER21` marks are left out, as winter21 left out 2,674 of fall11's).

The classes are real WNIDs chosen so that every known label space keeps some and leaves some out
(`COVERAGE`: an ImageNet-1k class, one of 1k outside timm's 12k, 12k-only, 22k-only, one that
winter21 drops), the rest spread over the 22k table. Class sizes differ (`SMALL_CLASSES` get
`small_per_class`), so a held-out split meets classes with fewer images than it takes. Planted:
a WNID-named member that is not a tar (`NOT_A_TAR`: prepare-shards skips it, with its reason), a
PNG named `.JPEG` and a tiny image. `unknown_wnids` adds class tars of WNIDs no label space has
(`UNKNOWN_WNID`: what prepare-shards' release default refuses unless asked). Same arguments give byte-identical files (tar metadata fixed,
gzip mtime 0). `expected.json` lists every member with its WNID.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np

from imagenet_shards.pipeline.format.label_spaces import WNID_RE, label_space
from imagenet_shards.pipeline.storage.atomic import atomic_open
from imagenet_shards.pipeline.tools.synthetic.archives import tar_bytes
from imagenet_shards.pipeline.tools.synthetic.images import class_styles, encode_sample, render

FALL11_TAR = "fall11_whole.tar"
WINTER21_TGZ = "winter21_whole.tar.gz"
WINTER21_FOLDER = "winter21_whole"
FULL_LAYOUTS = ("fall11", "winter21")
# one WNID per case a label space must meet (see the module docstring)
COVERAGE = {
    "n01440764": "in every space (tench, ImageNet-1k's label 0)",
    "n02085782": "ImageNet-1k and 22k, not timm's 12k",
    "n00005787": "12k and both miil lists, not 1k",
    "n00444340": "12k, not the miil lists",
    "n00004475": "22k only (not 12k, not miil)",
    "n09505153": "miil (fall11), not miil-w21: left out of the synthetic winter21",
}
REMOVED_IN_WINTER21 = ("n09505153",)
NOT_A_TAR = "n15102894"  # the last 22k WNID: its member holds a text file, not a tar
SMALL_CLASSES = 2  # the last two chosen classes hold small_per_class images
UNKNOWN_WNID = "n99999999"  # a well-formed WNID that no release and no known label space has


def choose_full_classes(num_classes: int) -> list[str]:
    """Sorted WNIDs: the `COVERAGE` classes, then ones evenly spaced through the 22k table."""
    table = label_space("imagenet-22k").wnids
    chosen = list(COVERAGE)[:num_classes]
    step = len(table) / num_classes
    for wnid in [table[int(i * step)] for i in range(num_classes)] + list(table):
        if len(chosen) == num_classes:
            break
        if wnid not in chosen and wnid != NOT_A_TAR:
            chosen.append(wnid)
    return sorted(chosen)


def _tar_members(wnid: str, count: int, style, seed: int, code: int) -> list[tuple[str, bytes, str]]:
    """(file name, bytes, kind) of one class's images: small JPEGs, the first class's first two a PNG
    named .JPEG and a tiny JPEG."""
    rng = np.random.default_rng([seed, 21, code])
    numbers = sorted(int(n) for n in rng.choice(np.arange(1, 50000), count, replace=False))
    out = []
    for i, n in enumerate(numbers):
        kind = ("png_as_jpeg", "tiny")[i] if code == 0 and i < 2 else "clean"
        w, h = (40, 30) if kind == "tiny" else (int(rng.integers(64, 161)), int(rng.integers(64, 161)))
        image, _, mask = render(style, rng, w, h)
        out.append((f"{wnid}_{n}.JPEG", encode_sample(kind, image, mask, int(rng.integers(80, 95))), kind))
    return out


def generate_full(out, *, classes: int = 8, per_class: int = 12, small_per_class: int = 2, seed: int = 0,
                  layouts=FULL_LAYOUTS, unknown_wnids=()) -> dict:
    """Write the fall11 and/or winter21 layouts under `out`; returns (and writes) expected.json's dict.
    `unknown_wnids`: WNIDs outside every known label space, each added as a class tar of
    `small_per_class` images (listed in expected.json's `unknown_wnids` and `samples`).

    ValueError for arguments that cannot work (fewer classes than the coverage needs, ...)."""
    layouts = tuple(dict.fromkeys(layouts))
    if not set(layouts) <= set(FULL_LAYOUTS) or not layouts:
        raise ValueError(f"the full-ImageNet layouts are {', '.join(FULL_LAYOUTS)}, got {','.join(layouts) or 'none'}")
    if classes < len(COVERAGE) + SMALL_CLASSES:
        raise ValueError(f"--classes {classes} is too few for the full-ImageNet layouts: they need "
                         f"{len(COVERAGE) + SMALL_CLASSES} (one per label-space case, two small ones)")
    if per_class < 3 or not 1 <= small_per_class < per_class:
        raise ValueError("--train-per-class must be at least 3 and the small classes' count between 1 and it")
    known = set(label_space("imagenet-21k-goog").wnids) | set(label_space("imagenet-1k").wnids)  # every space's
    bad = [w for w in unknown_wnids if not WNID_RE.match(w) or w in known]
    if bad:
        raise ValueError(f"unknown_wnids must be WNIDs (nXXXXXXXX) that no label space has, got {', '.join(bad)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = choose_full_classes(classes)
    wnids = sorted(set(chosen) | set(unknown_wnids))
    small = [w for w in chosen if w not in COVERAGE][-SMALL_CLASSES:] + list(unknown_wnids)
    styles = dict(zip(wnids, class_styles(len(wnids), seed)))
    inner, samples = {}, []
    for code, wnid in enumerate(wnids):
        members = _tar_members(wnid, small_per_class if wnid in small else per_class, styles[wnid], seed, code)
        inner[wnid] = tar_bytes([(name, data) for name, data, _ in members])
        samples += [{"key": name.rsplit(".", 1)[0], "filename": name, "wnid": wnid, "kind": kind,
                     "sha256": hashlib.sha256(data).hexdigest(),
                     "in_winter21": wnid not in REMOVED_IN_WINTER21} for name, data, kind in members]
    junk = (f"{NOT_A_TAR}.tar", b"this synset's archive is missing; see the download page\n")
    files = {}
    if "fall11" in layouts:
        with atomic_open(out / FALL11_TAR, fsync=False) as f:
            f.write(tar_bytes([(f"{w}.tar", inner[w]) for w in wnids] + [junk]))
        files["fall11"] = FALL11_TAR
    if "winter21" in layouts:
        kept = [w for w in wnids if w not in REMOVED_IN_WINTER21]
        body = tar_bytes([(f"{WINTER21_FOLDER}/{w}.tar", inner[w]) for w in kept]
                         + [(f"{WINTER21_FOLDER}/{junk[0]}", junk[1])])
        with atomic_open(out / WINTER21_TGZ, fsync=False) as f:
            f.write(gzip.compress(body, compresslevel=6, mtime=0))
        files["winter21"] = WINTER21_TGZ
    expected = {"args": {"classes": classes, "per_class": per_class, "small_per_class": small_per_class,
                         "seed": seed, "layouts": list(layouts)},
                "classes": chosen, "small_classes": small[:SMALL_CLASSES], "coverage": COVERAGE,
                **({"unknown_wnids": sorted(unknown_wnids)} if unknown_wnids else {}),
                "removed_in_winter21": list(REMOVED_IN_WINTER21), "not_a_tar": f"{NOT_A_TAR}.tar",
                "files": files, "samples": samples}
    with atomic_open(out / "expected.json", fsync=False) as f:
        f.write((json.dumps(expected, sort_keys=True, indent=1) + "\n").encode())
    return expected
