"""Before the first step: is every shard the manifest lists there, with the size it records?

A truncated or missing shard would otherwise surface as a traceback from a loader worker, and a
missing val shard only at eval time, after a whole training epoch. One listing per folder where the
store can list (local disks, S3, GCS), else one HEAD per shard (plain HTTP), so the check costs a
few requests whatever the shard count. Bytes are not read: `audit-shards` does that.
"""

from __future__ import annotations

import posixpath
from concurrent.futures import ThreadPoolExecutor

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import shard_url

HEAD_THREADS = 16  # concurrent HEADs on stores that cannot list (each is a round trip)


def listed_shards(manifest: dict, data: str, splits) -> list[tuple[str, int | None]]:
    """(URL, recorded bytes or None) of every shard of `splits` the manifest lists, in order."""
    out = []
    for split in splits:
        for shard in manifest["splits"].get(split, {}).get("shards", []):
            out.append((shard_url(data, shard["url"]), shard.get("bytes")))
    return out


def _sizes_by_listing(urls: list[str]) -> dict[str, int | None]:
    folders: dict[str, list[str]] = {}
    for url in urls:
        folders.setdefault(posixpath.dirname(url), []).append(url)
    sizes: dict[str, int | None] = {}
    for folder, members in folders.items():
        try:
            listing = storage.list_details(folder)
        except FileNotFoundError:
            listing = {}
        for url in members:
            entry = listing.get(posixpath.basename(url))
            sizes[url] = None if entry is None else entry.size
    return sizes


def _size_by_head(url: str) -> int | None:
    try:
        return storage.info(url).size
    except FileNotFoundError:
        return None


def shard_problems(shards: list[tuple[str, int | None]]) -> list[tuple[str, str]]:
    """(URL, what is wrong) for each shard that is missing or not its recorded size.

    Raises OSError when the store cannot be asked at all (permissions, network)."""
    urls = [url for url, _ in shards]
    if not urls:
        return []
    if storage.can_list(urls[0]):
        sizes = _sizes_by_listing(urls)
    else:
        with ThreadPoolExecutor(min(HEAD_THREADS, len(urls))) as pool:
            sizes = dict(zip(urls, pool.map(_size_by_head, urls)))
    problems = []
    for url, expected in shards:
        actual = sizes.get(url)
        if actual is None:
            problems.append((url, "missing"))
        elif expected is not None and actual >= 0 and actual != expected:
            problems.append((url, f"{actual} bytes, the manifest records {expected}"))
    return problems


def describe(problems: list[tuple[str, str]], total: int, data: str) -> str:
    """One line: how many shards are broken, the first one, and what to do."""
    url, why = problems[0]
    more = f" (and {len(problems) - 1} more of {total} shards)" if len(problems) > 1 else ""
    return (f"shard {storage.redact(url)} is {why}{more}: this copy of the shard set is damaged; "
            f"run audit-shards {storage.redact(data)} to see every problem, then copy or prepare it again")
