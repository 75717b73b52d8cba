"""The members of a split, column by column: what indexing yields at 14 M samples in bounded memory.

A `Member` object costs ~440 B of Python heap with its strings (measured at ImageNet-1k's 1.3 M:
docs/benchmarks.md); the full release's 14.2 M would need ~6 GB in one process, and forked workers
inherit it. So a split's members are kept as a few numpy columns plus one byte blob of names:
per member its group (the container file and the prefix of its location: `n01440764.tar/`), class
code, offset, size and member name (~20 B of blob + 4 B of end offset), ~45 B in all
(`bench/bench_scale.py --full` measures it). A `Member` is made on demand (`table[i]`, iteration),
from the same fields the object held: `source = prefix + name`, `filename` = the name's basename
(or the form's own file name where it differs: the Hugging Face forms strip a WNID suffix), `key`
= `key_for(filename)`. Columns are filled with `add()` (typed `array`s, amortised growth) and made
numpy arrays by `freeze()` (once, before planning). Hand-written because no library keeps strings
this compactly with random access; pyarrow could, but it is an optional extra here.
"""

from __future__ import annotations

import os
from array import array

import numpy as np

from imagenet_shards.pipeline.format.keys import key_for
from imagenet_shards.pipeline.prepare.sources.records import Member, SourceError

MAX_NAME_BYTES = 65535  # names are counted in uint16


class MemberTable:
    """The members of one split in input order; `table[i]` is the i-th as a `Member`."""

    def __init__(self):
        self.groups: list[tuple[str, str, bool]] = []  # (container path, location prefix, path is a folder)
        self._group_ids: dict[tuple[str, str, bool], int] = {}
        self.wnids: list[str | None] = []  # class code -> WNID (None: unlabeled)
        self._wnid_ids: dict[str | None, int] = {}
        self._blob = bytearray()
        self._lengths = array("H")
        self._group, self._cls = array("i"), array("i")
        self._offset, self._size = array("q"), array("I")  # sizes: 4 B (a member of 4 GiB or more is refused)
        self._filenames: dict[int, str] = {}  # rows whose file name is not their name's basename
        self._keys: dict[int, str] = {}  # rows whose key is not key_for(file name)
        self.max_key_bytes = 1
        self.frozen = False

    # ------------------------------------------------------------------ building

    def add(self, path: str, prefix: str, name: str, wnid: str | None, offset: int, size: int,
            filename: str | None = None, *, folder: bool = False, key: str | None = None) -> int:
        """Append one member; returns its row. Its location (`source`) is `prefix + name`; its bytes
        are at `offset` in the file `path`, or with `folder`, in the file `name` inside the folder `path`
        (an ImageFolder class folder: one group for all its files). `key`: only where it is not
        `key_for(filename)` (every input form's is; a library caller's Member may differ)."""
        g = self._group_ids.get((path, prefix, folder))
        if g is None:
            g = self._group_ids[(path, prefix, folder)] = len(self.groups)
            self.groups.append((path, prefix, folder))
        c = self._wnid_ids.get(wnid)
        if c is None:
            c = self._wnid_ids[wnid] = len(self.wnids)
            self.wnids.append(wnid)
        raw = name.encode("utf-8", "surrogateescape")
        if size >= 2**32 or len(raw) > MAX_NAME_BYTES:
            raise SourceError(f"{prefix}{name}: a member of {size} bytes or a name of {len(raw)} bytes is too large to "
                              "be an image of this set (at most 4 GiB, and 65535 bytes of name)")
        row = len(self._lengths)
        self._blob += raw
        self._lengths.append(len(raw))
        self._group.append(g)
        self._cls.append(c)
        self._offset.append(offset)
        self._size.append(size)
        base = os.path.basename(name)
        if filename is not None and filename != base:
            self._filenames[row] = filename
        derived = key_for(filename or base)
        if key is not None and key != derived:
            self._keys[row] = derived = key
        self.max_key_bytes = max(self.max_key_bytes, len(derived.encode("utf-8", "surrogateescape")))
        return row

    @classmethod
    def from_members(cls, members) -> "MemberTable":
        """A table of `Member`s (a list, or a table, returned as it is)."""
        if isinstance(members, MemberTable):
            return members.freeze()
        t = cls()
        for m in members:
            prefix = m.source[: len(m.source) - len(m.filename)] if m.source.endswith(m.filename) else ""
            t.add(m.path, prefix, m.source[len(prefix):], m.wnid, m.offset, m.size, m.filename, key=m.key)
        return t.freeze()

    def freeze(self) -> "MemberTable":
        """Make the columns numpy arrays (views of the typed arrays: no copy); idempotent."""
        if self.frozen:
            return self
        ends = np.cumsum(np.frombuffer(self._lengths, dtype=np.uint16), dtype=np.uint64) if len(self._lengths) \
            else np.zeros(0, np.uint64)
        self._ends = ends.astype(np.uint32) if len(ends) and ends[-1] < 2**32 else ends
        self.group = np.frombuffer(self._group, dtype=np.int32) if len(self._group) else np.zeros(0, np.int32)
        self.cls = np.frombuffer(self._cls, dtype=np.int32) if len(self._cls) else np.zeros(0, np.int32)
        self.offset = np.frombuffer(self._offset, dtype=np.int64) if len(self._offset) else np.zeros(0, np.int64)
        self.size = np.frombuffer(self._size, dtype=np.uint32) if len(self._size) else np.zeros(0, np.uint32)
        del self._lengths
        self.frozen = True
        return self

    def relocate(self, path: str, offset: np.ndarray, size: np.ndarray) -> None:
        """Point every member at new bytes: [offset, offset + size) of the file `path` (prepare's
        one-pass spill); names and locations (`source`) stay."""
        self.groups = [(path, prefix, False) for _, prefix, _ in self.groups]
        self.offset, self.size = offset, size

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._ends) if self.frozen else len(self._lengths)

    def name(self, i: int) -> str:
        """The member's name inside its container (its location without the group prefix)."""
        start = int(self._ends[i - 1]) if i else 0
        return self._blob[start:int(self._ends[i])].decode("utf-8", "surrogateescape")

    def filename(self, i: int) -> str:
        return self._filenames.get(i) or os.path.basename(self.name(i))

    def key(self, i: int) -> str:
        return self._keys.get(i) or key_for(self.filename(i))

    def source(self, i: int) -> str:
        return self.groups[self.group[i]][1] + self.name(i)

    def path(self, i: int) -> str:
        path, _, folder = self.groups[self.group[i]]
        return os.path.join(path, self.name(i)) if folder else path

    def wnid(self, i: int) -> str | None:
        return self.wnids[self.cls[i]]

    def __getitem__(self, i) -> Member:
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        path, prefix, folder = self.groups[self.group[i]]
        name = self.name(i)
        filename = self._filenames.get(i) or os.path.basename(name)
        if folder:
            path = os.path.join(path, name)
        return Member(self._keys.get(i) or key_for(filename), filename, self.wnids[self.cls[i]], path, int(self.offset[i]),
                      int(self.size[i]), prefix + name)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def present_wnids(self) -> list[str]:
        """The WNIDs of the labelled members, sorted."""
        used = np.unique(self.cls) if len(self) else []
        return sorted(w for c in used if (w := self.wnids[c]) is not None)

    def rows_by_class(self, rows: np.ndarray) -> list[tuple[str | None, np.ndarray]]:
        """(WNID, its rows in the order given) for each class among `rows`, in WNID order."""
        if not len(rows):
            return []
        codes = self.cls[rows]
        order = np.argsort(codes, kind="stable")
        groups = np.split(rows[order], np.flatnonzero(np.diff(codes[order])) + 1)
        return sorted(((self.wnids[self.cls[g[0]]], g) for g in groups), key=lambda x: x[0] or "")

    def files(self) -> list[str]:
        """The container files (not folders), in first-use order."""
        return list(dict.fromkeys(path for path, _, folder in self.groups if not folder))

    def key_prefixes(self, width: int) -> np.ndarray:
        """Every member's key, UTF-8, cut to `width` bytes, as a numpy bytes array (for sorting):
        bytes order is the keys' code-point order, and keys hold no NUL (unsafe_key refuses them)."""
        out = np.zeros(len(self), dtype=f"S{width}")
        for i in range(len(self)):
            out[i] = self.key(i).encode("utf-8", "surrogateescape")[:width]
        return out

    def nbytes(self) -> int:
        """The table's own memory (columns and blob), for the scale figures."""
        return (len(self._blob) + self._ends.nbytes + self.group.nbytes + self.cls.nbytes + self.offset.nbytes
                + self.size.nbytes)
