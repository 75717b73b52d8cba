"""Reading a shard tar as a stream: one pass, hashed while it is read, strict about structure.

Used by audit-shards (hash + parse in the same pass, constant memory) and inspect-shards.
Raises TarFormatError for truncated members, trailing garbage, non-regular files, absolute or
`..` names.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass


class HashingReader:
    """Reads a file in large blocks, feeding every block to the hashes once, and serves exact-size reads.

    With no hashes and a seekable file, `skip` seeks instead of reading (used for key lookups).
    """

    def __init__(self, f, algorithms=("sha256", "md5"), block: int = 1 << 20):
        self._f, self._block = f, block
        self.hashes = {a: hashlib.new(a) for a in algorithms}
        self._buf, self._off = b"", 0
        self.pos = 0  # bytes handed out (or skipped) so far
        self.bytes_read = 0

    def _fill(self) -> bool:
        self._buf, self._off = self._f.read(self._block), 0
        for h in self.hashes.values():
            h.update(self._buf)
        self.bytes_read += len(self._buf)
        return bool(self._buf)

    def read(self, n: int) -> bytes:
        """Up to n bytes; fewer only at the end of the file."""
        parts = []
        while n > 0:
            if self._off >= len(self._buf) and not self._fill():
                break
            part = self._buf[self._off:self._off + n]
            self._off += len(part)
            n -= len(part)
            parts.append(part)
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        self.pos += len(out)
        return out

    def skip(self, n: int) -> int:
        """Skip n bytes; returns how many could be skipped."""
        left = len(self._buf) - self._off
        if n > left and not self.hashes and getattr(self._f, "seekable", lambda: False)():
            self._f.seek(n - left, io.SEEK_CUR)  # tell() at the end would be wrong; nobody needs it
            self._buf, self._off = b"", 0
            self.pos += n
            return n
        done = 0
        while done < n:
            chunk = self.read(min(n - done, self._block))
            if not chunk:
                break
            done += len(chunk)
        return done

    def read_rest(self):
        """Yield what is left, block by block (hashing it)."""
        if self._off < len(self._buf):
            rest, self._buf, self._off = self._buf[self._off:], b"", 0
            self.pos += len(rest)
            yield rest
        while self._fill():
            rest, self._buf, self._off = self._buf, b"", 0
            self.pos += len(rest)
            yield rest

    def hexdigest(self, name: str) -> str:
        return self.hashes[name].hexdigest()


class TarFormatError(Exception):
    def __init__(self, kind: str, detail: str, key: str | None = None):
        super().__init__(detail)
        self.kind, self.detail, self.key = kind, detail, key


@dataclass
class TarMember:
    name: str
    type: bytes  # tarfile type flag: b"0" regular, b"5" directory, ...
    size: int
    offset: int  # of its header
    data: bytes | None  # None when `want` declined it


def iter_tar(r: HashingReader, want=lambda name: True):
    """Yield the members of the tar read by `r`; raise TarFormatError at a structural fault.

    Faults: a header that fails its checksum, a member or header cut short, no end-of-archive
    marker, non-zero bytes after the end marker. Handles pax (x/g) and GNU long-name (L) headers.
    """
    pax: dict[str, str] = {}
    long_name = None
    while True:
        offset = r.pos
        block = r.read(tarfile.BLOCKSIZE)
        if not block:
            raise TarFormatError("tar_truncated", f"ends at byte {offset} without the end-of-archive marker")
        if len(block) < tarfile.BLOCKSIZE:
            raise TarFormatError("tar_truncated", f"header at byte {offset} is cut short ({len(block)} of 512 bytes)")
        if block.count(0) == tarfile.BLOCKSIZE:
            _check_tail(r, offset)
            return
        name, size, kind = _parse_header(block, offset)
        size = int(pax.get("size", size))
        name = pax.get("path", long_name or name)
        meta = kind in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME)
        take = meta or want(name)
        data = r.read(size) if take else None
        got = len(data) if take else r.skip(size)
        if got < size:
            raise TarFormatError("tar_truncated", f"member {name} at byte {offset} is cut short "
                                                  f"({got} of {size} bytes)", split_name(name)[0])
        pad = -size % tarfile.BLOCKSIZE
        if pad and r.skip(pad) < pad:
            raise TarFormatError("tar_truncated", f"member {name} at byte {offset} lacks its padding",
                                 split_name(name)[0])
        if kind == tarfile.XHDTYPE:
            pax = _parse_pax(data, offset)
            continue
        if kind == tarfile.GNUTYPE_LONGNAME:
            long_name = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
            continue
        if kind == tarfile.XGLTYPE:
            continue
        pax, long_name = {}, None
        yield TarMember(name, kind, size, offset, data)


def _parse_header(block: bytes, offset: int) -> tuple[str, int, bytes]:
    """(name, size, type) of a 512-byte header, checksum verified.

    Fast path for the POSIX ustar headers our writer emits (tarfile.frombuf costs ~10x more, which
    shows over 4 million ImageNet members); anything else goes through tarfile's own parser.
    """
    if block[257:263] == b"ustar\0" and block[124] in b"01234567 ":
        try:
            stored = int(block[148:156].replace(b"\0", b" ").strip() or b"0", 8)
            size = int(block[124:136].replace(b"\0", b" ").strip() or b"0", 8)
        except ValueError:
            stored = size = -1
        if stored == sum(block[:148]) + 256 + sum(block[156:]) and size >= 0:
            name = block[:100].split(b"\0", 1)[0]
            prefix = block[345:500].split(b"\0", 1)[0]
            if prefix:
                name = prefix + b"/" + name
            return name.decode("utf-8", "surrogateescape"), size, block[156:157] or tarfile.REGTYPE
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError as e:
        raise TarFormatError("tar_bad_header", f"invalid tar header at byte {offset} ({e})") from None
    return info.name, info.size, info.type


def _parse_pax(data: bytes, offset: int) -> dict[str, str]:
    out, pos = {}, 0
    try:
        while pos < len(data) and data[pos] != 0:
            length = int(data[pos:data.index(b" ", pos)])
            key, _, value = data[data.index(b" ", pos) + 1:pos + length - 1].partition(b"=")
            out[key.decode()] = value.decode("utf-8", "surrogateescape")
            pos += length
    except ValueError:
        raise TarFormatError("tar_bad_header", f"unreadable pax header at byte {offset}") from None
    return out


def _check_tail(r: HashingReader, offset: int) -> None:
    """After the first zero block only zeros may follow (the second end block and record padding)."""
    pos = offset + tarfile.BLOCKSIZE
    for chunk in r.read_rest():
        if chunk.count(0) != len(chunk):
            first = pos + next(i for i, b in enumerate(chunk) if b)
            raise TarFormatError("tar_trailing_garbage",
                                 f"non-zero bytes at byte {first}, after the end-of-archive marker at byte {offset}")
        pos += len(chunk)


def split_name(name: str) -> tuple[str, str]:
    """(key, extension) as webdataset groups members: key = everything before the first '.' of the basename."""
    d, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext
