"""Label spaces: the class lists that define `.cls`, owned here and read from manifests/ (nowhere else
in the code knows how many classes ImageNet has).

A label space is an ordered list of WNIDs; a sample's `.cls` is the index of its WNID in it. The
known ones are tables in manifests/label-spaces/ (registry `spaces.json`, provenance in its
README.md): `imagenet-1k` (manifests/imagenet-1k/classes.tsv), `imagenet-22k`, `imagenet-12k`,
`imagenet-21k-goog`, `imagenet-21k-miil`, `imagenet-21k-miil-w21`, copied from timm's
`timm/data/_info/` (the project does not import timm). `present` (the sources' own WNIDs, sorted)
is resolved once the sources are indexed; a FILE lists one WNID a line, in label order. Names are
the WordNet lemmas of `lemmas.tsv` (every WNID of every known space).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

# manifests/ sits two levels above this file both in a checkout and in an install (imagenet_shards/manifests)
MANIFESTS_DIR = Path(__file__).resolve().parents[2] / "manifests"
LABEL_SPACES_DIR = MANIFESTS_DIR / "label-spaces"
WNID_RE = re.compile(r"^n\d{8}$")
PRESENT = "present"  # the sources' own WNIDs, sorted (what labels were before label spaces)
FILE = "file"  # the name a label space read from a user's file is recorded under
DEFAULT_DATASET = "imagenet1k"  # manifest name and shard prefix of ImageNet-1k-like sets
FULL_DATASET = "imagenet21k"  # ... and of a full-release set labelled by `present` or a FILE
RELEASE_SPACE = "imagenet-22k"  # the full releases' published space (fall11's synsets; winter21's are a subset)


class LabelSpaceError(ValueError):
    """A label space that cannot be used; the message is one line (naming the file's line where one is bad)."""


@dataclass(frozen=True)
class LabelSpace:
    """An ordered WNID list: label = index in `wnids`. `dataset`: the manifest name and shard-name
    prefix of a set labelled by it; `source`: where the list comes from (for the manifest)."""

    name: str
    wnids: tuple[str, ...]
    dataset: str
    source: str

    @property
    def num_classes(self) -> int:
        return len(self.wnids)

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """WNID -> label."""
        return {w: i for i, w in enumerate(self.wnids)}

    @property
    def sha256(self) -> str:
        """sha256 of the list as a file, one WNID a line in label order (equal to timm's file's)."""
        return list_sha256(self.wnids)

    def record(self) -> dict:
        """What the job config and the manifest record of it (a list by its count and hash)."""
        return {"name": self.name, "num_classes": self.num_classes, "sha256": self.sha256, "source": self.source}


def list_sha256(wnids) -> str:
    return hashlib.sha256("".join(f"{w}\n" for w in wnids).encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def registry() -> dict:
    """manifests/label-spaces/spaces.json: the known spaces, their files, counts, hashes and provenance."""
    return json.loads((LABEL_SPACES_DIR / "spaces.json").read_text(encoding="utf-8"))


def known_names() -> tuple[str, ...]:
    """The label spaces known by name, in the registry's order."""
    return tuple(sorted(registry()["spaces"], key=lambda n: (n != "imagenet-1k", n)))


@functools.lru_cache(maxsize=None)
def label_space(name: str) -> LabelSpace:
    """A known label space by name; LabelSpaceError naming the known ones otherwise."""
    spaces = registry()["spaces"]
    if name not in spaces:
        raise LabelSpaceError(f"unknown label space {name!r}: known are {', '.join(known_names())}, {PRESENT}, "
                              "or a file of WNIDs (one a line)")
    entry = spaces[name]
    path = (LABEL_SPACES_DIR / entry["file"]).resolve()
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".tsv":  # manifests/imagenet-1k/classes.tsv: index, wnid, name, gloss
        wnids = tuple(line.split("\t")[1] for line in lines[1:])
    else:
        wnids = tuple(lines)
    src = registry()["source"]
    return LabelSpace(name, wnids, entry["dataset"], f"{entry['timm_file']} (timm {src['timm_version']}, "
                                                     f"{src['repository']} @ {src['commit'][:8]})")


def read_label_space_file(path) -> LabelSpace:
    """A label space from a file: one WNID a line, in label order ('#' starts a comment, anything
    after the WNID on its line, e.g. a name, is ignored, blank lines are skipped). LabelSpaceError
    naming the first line that holds no WNID or repeats one."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise LabelSpaceError(f"cannot read --label-space {path}: {getattr(e, 'strerror', None) or e}") from None
    wnids: list[str] = []
    first: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if not WNID_RE.match(words[0]):
            raise LabelSpaceError(f"--label-space {path}: line {n} starts with {words[0][:40]!r}, not a WNID "
                                  "(nXXXXXXXX)")
        if words[0] in first:
            raise LabelSpaceError(f"--label-space {path}: line {n} repeats {words[0]} (first on line "
                                  f"{first[words[0]]}); a label space lists each class once")
        first[words[0]] = n
        wnids.append(words[0])
    if not wnids:
        raise LabelSpaceError(f"--label-space {path} lists no WNIDs")
    dataset = DEFAULT_DATASET if set(wnids) <= set(label_space("imagenet-1k").wnids) else FULL_DATASET
    return LabelSpace(FILE, tuple(wnids), dataset, Path(path).name)


def present_space(wnids) -> LabelSpace:
    """The `present` space of sources holding `wnids`: them, sorted."""
    wnids = tuple(sorted(set(wnids)))
    dataset = DEFAULT_DATASET if set(wnids) <= set(label_space("imagenet-1k").wnids) else FULL_DATASET
    return LabelSpace(PRESENT, wnids, dataset, "the WNIDs of the sources, sorted")


def label_space_option(value: str) -> LabelSpace | str:
    """--label-space NAME|FILE: a known space, `present` (resolved against the sources later), or a file."""
    if value == PRESENT:
        return PRESENT
    if value in registry()["spaces"]:
        return label_space(value)
    if Path(value).is_file():
        return read_label_space_file(value)
    return label_space(value)  # raises, naming the known spaces


@functools.lru_cache(maxsize=None)
def wnid_lemmas() -> dict[str, str]:
    """WNID -> WordNet lemmas ("tench, Tinca tinca"), for every WNID of every known space (21,844)."""
    text = (LABEL_SPACES_DIR / registry()["names"]["file"]).read_text(encoding="utf-8")
    return dict(line.split("\t", 1) for line in text.splitlines() if line)


def is_imagenet_1k(wnids) -> bool:
    """Whether every WNID is an ImageNet-1k class (ILSVRC-like sources, as opposed to a full release)."""
    return set(wnids) <= set(label_space("imagenet-1k").wnids)


def is_full_release(wnids) -> bool:
    """Whether sources holding `wnids` are (part of) a full ImageNet release: some WNID is a fall11
    synset beyond ImageNet-1k's (the ILSVRC2012 archives hold only ImageNet-1k classes)."""
    beyond = set(label_space(RELEASE_SPACE).wnids) - set(label_space("imagenet-1k").wnids)
    return not is_imagenet_1k(wnids) and not beyond.isdisjoint(wnids)
