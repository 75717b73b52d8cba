"""Sample keys: how a source file name becomes a key, and how a tar member name splits into (key, extension).

Both follow webdataset: the members of one sample share a key, which is everything before the
first '.' of the member's basename (directory included), so a key itself never holds a dot.
"""

from __future__ import annotations

import os
import re


def key_for(filename: str) -> str:
    """Sample key of a source file: its stem; dots would split a webdataset key, so they become underscores.

    `n01440764_10026.JPEG` -> `n01440764_10026`; an AppleDouble `._n01440764_2.JPEG` -> `__n01440764_2`
    (a leading dot does not start an extension)."""
    stem = os.path.basename(filename)
    stem = stem.rsplit(".", 1)[0] if "." in stem[1:] else stem
    return stem.replace(".", "_")


def split_key(name: str) -> tuple[str, str]:
    """(key, extension) of a tar member name: `train/n01_7.cls` -> (`train/n01_7`, `cls`); no dot -> (name, "")."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:]


_TRAIN_KEY_RE = re.compile(r"^(n\d{8})_")


def train_key_wnid(key: str) -> str | None:
    """The WNID a train key names (`n01440764_10026` -> `n01440764`), or None for another key."""
    m = _TRAIN_KEY_RE.match(key)
    return m.group(1) if m else None


JUNK_NAMES = ("thumbs.db", "desktop.ini")  # Windows' folder thumbnails and settings, lower-cased


def junk_name(name: str) -> bool:
    """Whether a source file's name says it is never an image: a hidden file (the AppleDouble `._*`
    companions macOS writes beside each file it copies to a foreign disk, `.DS_Store`) or Windows'
    `Thumbs.db` / `desktop.ini`. `name` is a file name or a source location (`n01440764.tar/._x.JPEG`,
    `train-00000-of-00002.parquet#3:._x.JPEG`): its last component is judged. prepare-shards still reads
    such a member in a full run (and lists it as skipped, `not_an_image`); a `--per-class`/`--fraction`
    draw never takes one, and `audit-shards --expect` does not count one as an image of the dataset."""
    base = re.split(r"[/\\:]", name)[-1]
    return base.startswith(".") or base.lower() in JUNK_NAMES
