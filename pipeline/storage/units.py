"""Sizes in bytes, read from people ('256MB', '1.5GiB') and shown to them ('33.8 MB')."""

from __future__ import annotations

import argparse

SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str, *, positive: bool = False) -> int:
    """'256MB' -> 256000000 (KB/MB/GB/TB, KiB/MiB/GiB/TiB, or plain bytes; case-insensitive).

    Raises argparse.ArgumentTypeError (a ValueError for library callers too) with a one-line reason,
    so it serves directly as an argparse ``type``."""
    t = text.strip().upper()
    num = t.rstrip("KMGTIB")
    unit = t[len(num):]
    try:
        value = int(float(num) * SIZE_UNITS[unit])
    except (KeyError, ValueError):
        raise SizeError(f"not a size: {text!r} (e.g. 256MB, 1GiB)") from None
    if value < 0 or (positive and value == 0):
        raise SizeError(f"expected a positive size, got {text!r}")
    return value


def positive_size(text: str) -> int:
    """``parse_size(text, positive=True)``, for argparse."""
    return parse_size(text, positive=True)


class SizeError(argparse.ArgumentTypeError, ValueError):
    """A size that could not be read."""


def human_bytes(n: float, *, binary: bool = False) -> str:
    """'33.8 MB' (SI) or, with binary=True, '32.2 MiB'."""
    base, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("B", "KB", "MB", "GB", "TB"))
    for unit in units:
        if n < base or unit == units[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= base
    return str(n)
