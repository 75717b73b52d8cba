"""The bytes of the synthetic archives, in the real files' formats: uncompressed GNU tars with fixed
metadata (mtime 0, uid/gid 0, mode 0o644), the devkit's ``meta.mat`` (MATLAB struct array
``synsets``, as scipy and torchvision read it) and tar.gz, and Kaggle's ``LOC_val_solution.csv``.
Reproducible byte for byte: no timestamps anywhere (gzip mtime 0, a fixed .mat text header).
"""

from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.tools.synthetic.plan import Planned

NON_LEAF_SYNSETS = {  # a tiny slice of the WordNet tree above the leaves, as the real meta.mat has
    "entity": ("n00001740", "entity", "that which is perceived or known or inferred to have its own distinct existence"),
    "animal": ("n00015388", "animal, animate being, beast, brute, creature, fauna",
               "a living organism characterized by voluntary movement"),
    "object": ("n00002684", "object, physical object", "a tangible and visible entity"),
}
FIRST_NON_ANIMAL = "n02666196"  # abacus: ImageNet-1k's sorted WNIDs below it are animals


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


def kaggle_solution(val_plan: list[Planned], boxes: dict) -> bytes:
    """LOC_val_solution.csv: ImageId,PredictionString with 'wnid x1 y1 x2 y2 ' per box (pixels)."""
    lines = ["ImageId,PredictionString"]
    for p in sorted(val_plan, key=lambda p: p.number):
        w, h = p.size
        x1, y1, x2, y2 = boxes[p.filename]
        box = (int(x1 * (w - 1)), int(y1 * (h - 1)), int(x2 * (w - 1)), int(y2 * (h - 1)))
        lines.append(f"{p.filename.rsplit('.', 1)[0]},{p.wnid} {' '.join(map(str, box))} ")
    return ("\n".join(lines) + "\n").encode()
