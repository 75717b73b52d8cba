"""The ImageNet-1k class table shipped in manifests/imagenet-1k (label = index of the WNID in sorted order),
with its glosses and facts; every other label space, and the names of all WNIDs, are `label_spaces`'."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from imagenet_shards.pipeline.format.label_spaces import MANIFESTS_DIR, wnid_lemmas

IMAGENET_1K_DIR = MANIFESTS_DIR / "imagenet-1k"


@dataclass(frozen=True)
class ClassInfo:
    index: int
    wnid: str
    name: str
    gloss: str = ""


@functools.lru_cache(maxsize=None)
def imagenet_1k_classes() -> tuple[ClassInfo, ...]:
    """The 1000 ImageNet-1k classes in sorted-WNID order; `classes[i].index == i`."""
    rows = (IMAGENET_1K_DIR / "classes.tsv").read_text(encoding="utf-8").splitlines()[1:]
    out = []
    for line in rows:
        index, wnid, name, gloss = line.split("\t")
        out.append(ClassInfo(int(index), wnid, name, gloss))
    return tuple(out)


def wnid_names() -> dict[str, str]:
    """WNID -> human-readable name (WordNet lemmas), for every WNID of every known label space; the
    ImageNet-1k classes' are their `name` in classes.tsv (the same lemmas)."""
    return wnid_lemmas()


def imagenet_1k_facts() -> dict:
    """Split sizes, archive md5s and known quirky files (manifests/imagenet-1k/facts.json)."""
    import json

    return json.loads((IMAGENET_1K_DIR / "facts.json").read_text(encoding="utf-8"))
