"""What indexing yields, whatever the input form: members, the inputs that cannot become samples, and errors.

Every input is accounted for: a member that cannot become a sample is not dropped but listed in
`SourceIndex.unusable` with a reason, and ends up in the manifest: `not_a_regular_file` (skipped:
symlinks, hard links, devices, fifos in an archive; entries of a source folder that are neither a
file nor a folder, e.g. a broken symlink) and `unsafe_key` (rejected: a name whose key holds a
control character, '/' or '..', which would make a shard member name that tools cannot handle).
Directories are containers, not inputs, and are not listed.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field

WNID_RE = re.compile(r"^n\d{8}$")
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
    reason: str  # NOT_REGULAR (skipped) or UNSAFE_KEY (rejected)
    detail: str

    @property
    def status(self) -> str:
        """Where the manifest lists it: "skipped" (not an image file at all) or "rejected"."""
        return "skipped" if self.reason == NOT_REGULAR else "rejected"


NOT_REGULAR = "not_a_regular_file"
UNSAFE_KEY = "unsafe_key"


@dataclass
class SourceIndex:
    split: str
    kind: str
    name: str
    bytes: int
    members: list[Member]
    unusable: list[Unusable] = field(default_factory=list)  # in source order; not in the fingerprint

    def fingerprint(self) -> str:
        """sha256 over (source location, size) of every member, in archive order."""
        h = hashlib.sha256()
        for m in self.members:
            h.update(f"{m.source}\0{m.size}\n".encode())
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
