"""Val labels for flat val sources: the devkit's meta.mat + ground truth, or Kaggle's LOC_val_solution.csv."""

from __future__ import annotations

import csv
import io
import os
import tarfile
import zlib
from pathlib import Path

from imagenet_shards.pipeline.prepare.sources.records import SourceError


def read_devkit(path: str | os.PathLike) -> tuple[dict[int, str], list[str], list[int]]:
    """Parse ILSVRC2012_devkit_t12.tar.gz (or its extracted folder).

    Returns (ILSVRC2012_ID -> WNID for leaf synsets, leaf WNIDs sorted, val ground-truth IDs in file order).
    The IDs are the devkit's own order, NOT the label: label = index of the WNID in sorted order.
    """
    import scipy.io

    p = Path(path)
    if not p.exists():
        raise SourceError(f"devkit {p} does not exist")
    want = "data/meta.mat and data/ILSVRC2012_validation_ground_truth.txt"
    try:
        if p.is_dir():
            meta_bytes = (p / "data" / "meta.mat").read_bytes()
            gt_text = (p / "data" / "ILSVRC2012_validation_ground_truth.txt").read_text()
        else:
            with tarfile.open(p) as t:
                names = {os.path.basename(n.name): n for n in t.getmembers() if n.isfile()}
                meta_bytes = t.extractfile(names["meta.mat"]).read()
                gt_text = t.extractfile(names["ILSVRC2012_validation_ground_truth.txt"]).read().decode()
    except (tarfile.TarError, EOFError, zlib.error):  # tarfile's message spans several lines
        raise SourceError(f"devkit {p} is not a readable tar archive: give ILSVRC2012_devkit_t12.tar.gz "
                          "or the folder it extracts to") from None
    except KeyError as e:
        raise SourceError(f"devkit {p} has no {e.args[0]}; expected {want}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"devkit {p} is unreadable or incomplete ({getattr(e, 'strerror', None) or e}); "
                          f"expected {want}") from None
    try:
        meta = scipy.io.loadmat(io.BytesIO(meta_bytes), squeeze_me=True)["synsets"]
        id_to_wnid = {}
        for s in meta:
            if int(s["num_children"]) == 0:
                id_to_wnid[int(s["ILSVRC2012_ID"])] = str(s["WNID"])
        gt = [int(line) for line in gt_text.split()]
    except Exception as e:  # noqa: BLE001 - scipy raises many types for a damaged file
        raise SourceError(f"devkit {p} is damaged: its meta.mat or ground truth cannot be parsed "
                          f"({type(e).__name__}); re-download it") from None
    return id_to_wnid, sorted(id_to_wnid.values()), gt


def val_labels_from_devkit(path) -> tuple[dict[str, str], list[str]]:
    """key (ILSVRC2012_val_%08d) -> WNID from the devkit's ground truth, and the devkit's leaf WNIDs."""
    id_to_wnid, leaves, gt = read_devkit(path)
    labels = {}
    for i, ilsvrc_id in enumerate(gt, start=1):
        if ilsvrc_id not in id_to_wnid:
            raise SourceError(f"devkit ground truth line {i} has ILSVRC2012_ID {ilsvrc_id}, which is not a leaf synset")
        labels[f"ILSVRC2012_val_{i:08d}"] = id_to_wnid[ilsvrc_id]
    return labels, leaves


def val_labels_from_kaggle_csv(path) -> tuple[dict[str, str], list[str]]:
    """key -> WNID from Kaggle's LOC_val_solution.csv (first synset of PredictionString)."""
    p = Path(path)
    try:
        with open(p, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise SourceError(f"cannot read val labels {p}: {e.strerror}") from None
    if not rows or "ImageId" not in rows[0] or "PredictionString" not in rows[0]:
        raise SourceError(f"{p} is not a LOC_val_solution.csv (needs columns ImageId,PredictionString)")
    labels = {r["ImageId"]: r["PredictionString"].split()[0] for r in rows}
    return labels, sorted(set(labels.values()))
