"""What indexing yields, whatever the input form: members, the inputs that cannot become samples, and errors.

Every input is accounted for: a member that cannot become a sample is not dropped but listed in
`SourceIndex.unusable` with a reason, and ends up in the manifest: `not_a_regular_file` (skipped:
symlinks, hard links, devices, fifos in an archive; entries of a source folder that are neither a
file nor a folder, e.g. a broken symlink), `not_a_class_tar` (skipped: a `nXXXXXXXX.tar` member of a tar
of per-class tars that does not open as a tar) and `unsafe_key` (rejected: a name whose key holds a
control character, '/' or '..', which would make a shard member name that tools cannot handle).
Directories are containers, not inputs, and are not listed.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field

from imagenet_shards.pipeline.format.label_spaces import WNID_RE  # noqa: F401 - re-exported: the one WNID rule

VAL_KEY_RE = re.compile(r"^ILSVRC2012_val_(\d{8})$")


class SourceError(Exception):
    """A source cannot be used as given; the message says what to do."""


@dataclass(frozen=True, slots=True)  # slots: ~1.3 M of these at ImageNet's size (no __dict__ each)
class Member:
    """One file inside a source: `path` is the file on disk that holds its bytes at [offset, offset+size)."""

    key: str
    filename: str
    wnid: str | None
    path: str
    offset: int
    size: int
    source: str  # human-readable location, e.g. "n01440764.tar/n01440764_10026.JPEG"


@dataclass(frozen=True, slots=True)
class Unusable:
    """A member found while indexing that cannot become a sample; recorded in the manifest."""

    key: str
    source: str
    reason: str  # NOT_REGULAR or NOT_A_TAR (skipped), or UNSAFE_KEY (rejected)
    detail: str

    @property
    def status(self) -> str:
        """Where the manifest lists it: "skipped" (not an image file at all) or "rejected"."""
        return "skipped" if self.reason in (NOT_REGULAR, NOT_A_TAR) else "rejected"


NOT_REGULAR = "not_a_regular_file"
NOT_A_TAR = "not_a_class_tar"  # a WNID-named member of a tar of per-class tars that is not a tar itself
UNSAFE_KEY = "unsafe_key"


@dataclass
class SourceIndex:
    split: str
    kind: str
    name: str
    bytes: int
    members: "MemberTable"  # sources/table.py (or a list of Members, from library callers)
    unusable: list[Unusable] = field(default_factory=list)  # in source order; not in the fingerprint

    def fingerprint(self) -> str:
        """sha256 over (source location, size) of every member, in archive order."""
        h = hashlib.sha256()
        t = self.members
        rows = ((t.source(i), int(t.size[i])) for i in range(len(t))) if hasattr(t, "source") else \
            ((m.source, m.size) for m in t)
        for source, size in rows:
            h.update(f"{source}\0{size}\n".encode())
        return "index-sha256:" + h.hexdigest()


def unsafe_key(key: str) -> str | None:
    """Why `key` cannot name a sample (None if it can): empty, a control character, '/' or '..'."""
    if not key:
        return "the key is empty"
    bad = next((c for c in key if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return f"the name holds a control character (U+{ord(bad):04X})"
    if "/" in key:
        return "the key holds '/'"
    if ".." in key:
        return "the key holds '..'"
    return None
