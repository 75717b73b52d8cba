"""Shard digests: the hashes a manifest records per shard, and which one a reader checks.

Every shard entry has `sha256` and `md5`; prepare-shards, adopt and finalize also record `xxh3_128`
(XXH3, 128-bit, seed 0, as lower-case hex of the canonical big-endian digest: what
`xxhash.xxh3_128_hexdigest(data)` and `xxhsum -H2` print). Why a second, non-cryptographic
digest: the loader checks every shard it reads (docs/loader.md), and on the dev box sha256 costs
0.55 ms/MiB of CPU (1.8 GB/s with SHA-NI; several times that without) against 0.045 ms/MiB for
xxh3_128 (22 GB/s): ~60 against ~5 µs for a 110 KB image (docs/benchmarks.md). It guards against
damage (a flipped byte, a stale copy), not against an attacker: `audit-shards` checks sha256.
"""

from __future__ import annotations

import hashlib

FAST = "xxh3_128"
# what a reader checks, in order of preference: the first the shard entry records
CHECKED = (FAST, "sha256")
_HEX_LEN = {"xxh3_128": 32, "sha256": 64, "md5": 32}


def new_hash(name: str):
    """A hash object (update/hexdigest) for `name`: a hashlib name, or `xxh3_128`."""
    if name == FAST:
        import xxhash  # a dependency of the package; imported here so that hashlib users need not load it

        return xxhash.xxh3_128()
    return hashlib.new(name)


def hex_of(name: str, data) -> str:
    """`name`'s hex digest of a bytes-like object (an mmap too)."""
    h = new_hash(name)
    h.update(data)
    return h.hexdigest()


def is_digest(name: str, value) -> bool:
    """`value` is a lower-case hex digest of `name`'s length."""
    return (isinstance(value, str) and len(value) == _HEX_LEN[name]
            and all(c in "0123456789abcdef" for c in value))


def shard_check(entry: dict) -> tuple[str, str] | None:
    """(algorithm, hex digest) a reader checks a shard entry against: xxh3_128 where the manifest
    records it, else sha256; None when it records neither in a usable form (nothing is checked)."""
    for name in CHECKED:
        if is_digest(name, entry.get(name)):
            return name, entry[name]
    return None


__all__ = ["CHECKED", "FAST", "hex_of", "is_digest", "new_hash", "shard_check"]
