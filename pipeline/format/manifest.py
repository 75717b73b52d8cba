"""The manifest: assembled from shard records and written (prepare-shards), read and validated (everyone else).

Writing: manifest.json, timm's _info.json and the wids indexes. The manifest is data: keys sorted,
lists in a stable order, no timestamps, so the same inputs and config give the same manifest bytes.
Reading: `read_manifest(DATA)` is the one reader (loader, trainer, audit-shards, inspect-shards);
`split_shards` the one way to get a split's shard list from it. See docs/format.md for the schema.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Iterable, NamedTuple

from imagenet_shards.pipeline import __version__, storage
from imagenet_shards.pipeline.format.digest import FAST
from imagenet_shards.pipeline.format.pixels import FORM as PIXEL_FORM
from imagenet_shards.pipeline.format.keys import train_key_wnid
from imagenet_shards.pipeline.format.subset import selects

FORMAT = "imagenet-shards-manifest"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
DATASET_NAME = "imagenet1k"
INFO_SPLIT_NAMES = {"train": "train", "val": "validation"}
CONSERVATION = "per split: images_in = num_samples + num_rejected + num_skipped"
# inputs a split leaves out on purpose, each a field of the split's entry only where the run has it:
# a subset's, a label space's (members of other classes), and train images held out as the val split
LEFT_OUT = ("excluded_by_subset", "excluded_by_label_space", "held_out")


# Fixes that are only counted in the manifest's `fixed.counts`, never listed per sample: policy-wide
# steps that touch a large share of the samples (docs/format.md).
COUNTED_ONLY = ("resized", "restart_markers")
JPEG_FORM = "jpeg"  # the stored form of a set of .jpg samples; a manifest without `form` is one
FORMS = (JPEG_FORM, PIXEL_FORM)  # the forms read_manifest accepts (docs/format.md, "Pixel form")


def manifest_form(m: dict) -> str:
    """The stored form of a manifest's samples: "jpeg", or the pixel form (`pixels.FORM`)."""
    return m.get("form", JPEG_FORM)


def dumps(obj) -> str:
    """The manifest's JSON text: sorted keys, one-space indent, UTF-8 as is, a final newline (stable bytes)."""
    return json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def write_json_atomic(path: str, obj) -> None:
    """Write JSON to `path` (a path or URL) atomically: locally a temp file beside it, fsync, rename;
    on an object store one PUT."""
    storage.write_bytes(path, dumps(obj).encode("utf-8"))


def build_manifest(state: dict, records: dict[str, Iterable[dict]]) -> dict:
    """Assemble the manifest from the run state (config, sources, classes, plan-time rejects) and shard records.

    ``records``: per split, its shard records in index order; each is read once and not kept, so an
    iterator that reads them one by one keeps one record in memory at a time. A record's
    ``fix_counts`` counts its fixes and its ``fixed`` lists only the samples the manifest lists;
    records written before ``fix_counts`` existed list every fixed sample and are counted here.
    A derived set's state (prepare-shards derive) adds its `form`, `max_side` and `derived_from`, and its
    splits carry the source's accounting (its rejects as `plan_rejected`/`plan_skipped`, `failed_by_class`)."""
    splits, rejected, skipped, fix_samples = {}, [], [], []
    fix_counts: Counter = Counter()
    for split, split_state in sorted(state["splits"].items()):
        entry, split_rejected, split_skipped = _split_entry(split, split_state, records[split], state["config"],
                                                            fix_counts, fix_samples)
        splits[split] = entry
        rejected += split_rejected
        skipped += split_skipped
    by_key = lambda x: (x["split"], x["key"], x["source"])  # noqa: E731
    totals = {
        "images_in": sum(s["images_in"] for s in splits.values() if "held_out_from" not in s),  # held out: counted in train
        "samples": sum(s["num_samples"] for s in splits.values()),
        "rejected": len(rejected), "skipped": len(skipped),
        "shards": sum(s["num_shards"] for s in splits.values()),
        "bytes": sum(sh["bytes"] for s in splits.values() for sh in s["shards"]),
    }
    terms = [k for k in LEFT_OUT if any(k in s for s in splits.values())]
    out = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "tool": {"name": "imagenet-shards", "version": __version__},
        "name": state.get("dataset", DATASET_NAME),
        "form": state.get("form", JPEG_FORM),
        "config": state["config"],
        "sources": state["sources"],
        "classes": state["classes"],
        "splits": splits,
        "rejected": sorted(rejected, key=by_key),
        "skipped": sorted(skipped, key=by_key),
        "fixed": {"counts": dict(sorted(fix_counts.items())),
                  "samples": sorted(fix_samples, key=lambda x: (x["split"], x["key"]))},
        "totals": totals,
        "conservation": " + ".join([CONSERVATION, *terms]),
    }
    for k in ("label_space", "max_side", "derived_from"):  # only where the run has them
        if k in state:
            out[k] = state[k]
    return out


def _split_entry(split: str, split_state: dict, records: Iterable[dict], config: dict, fix_counts: Counter,
                 fix_samples: list) -> tuple[dict, list, list]:
    """One split's manifest entry from its state and shard records, with its rejected and skipped
    lists; adds the records' fixes to `fix_counts` and the listed ones to `fix_samples`."""
    split_rejected = list(split_state["plan_rejected"])
    split_skipped = list(split_state.get("plan_skipped", []))
    class_counts: Counter = Counter()
    # drawn images that failed before the records (a derived set: its source's), then the records'
    failed: dict[str, Counter] = {w: Counter(c) for w, c in split_state.get("failed_by_class", {}).items()}
    shards, last = [], -1
    for r in records:
        if r["index"] <= last:
            raise ValueError(f"{split} shard records out of order: {r['index']} after {last}")
        last = r["index"]
        split_rejected += r["rejected"]
        split_skipped += r["skipped"]
        class_counts.update(r["class_counts"])
        for wnid, reasons in _failed_by_class(r).items():
            failed.setdefault(wnid, Counter()).update(reasons)
        if "fix_counts" in r:
            fix_counts.update(r["fix_counts"])
        for f in r["fixed"]:
            if "fix_counts" not in r:
                fix_counts.update(f["fixes"])
            if any(x not in COUNTED_ONLY for x in f["fixes"]):
                fix_samples.append(f)
        shards.append({**{k: r[k] for k in ("url", "num_samples", "bytes", "sha256", "md5")},
                       **({FAST: r[FAST]} if FAST in r else {}),  # records written before it lack it
                       **({"excluded": r["excluded"]} if r.get("excluded") else {})})
    num_samples = sum(sh["num_samples"] for sh in shards)
    entry = {"num_samples": num_samples, "num_shards": len(shards), "images_in": split_state["images_in"],
             "num_rejected": len(split_rejected), "num_skipped": len(split_skipped),
             "class_counts": dict(sorted(class_counts.items())), "shards": shards}
    for k in (*LEFT_OUT, "held_out_from"):
        if k in split_state:
            entry[k] = split_state[k]
    if selects(config.get("subset"), split):  # the classes a draw left short: drawn images rejected or skipped
        entry["short_classes"] = {w: {"drawn": class_counts[w] + sum(c.values()), "samples": class_counts[w],
                                      "reasons": dict(sorted(c.items()))} for w, c in sorted(failed.items())}
    if entry["images_in"] != (num_samples + entry["num_rejected"] + entry["num_skipped"]
                              + sum(entry.get(k, 0) for k in LEFT_OUT)):
        raise AssertionError(f"conservation broken for {split}: {entry['images_in']} in, {num_samples} out, "
                             f"{entry['num_rejected']} rejected, {entry['num_skipped']} skipped, "
                             + ", ".join(f"{entry.get(k, 0)} {k}" for k in LEFT_OUT))
    return entry, split_rejected, split_skipped


def _failed_by_class(record: dict) -> dict[str, dict[str, int]]:
    """A shard record's planned images that are not samples, by class and reason; for a record
    written before records counted them, attributed by the WNID a train key names."""
    if "failed_by_class" in record:
        return record["failed_by_class"]
    out: dict[str, Counter] = {}
    for x in record["rejected"] + record["skipped"]:
        wnid = train_key_wnid(x["key"])
        if wnid is not None:
            out.setdefault(wnid, Counter())[x["reason"]] += 1
    return out


def samples_in_tar(shard: dict) -> int:
    """The samples a shard's tar holds: its `num_samples` plus those the manifest lists as `excluded`
    (an adopted set's samples left out with `--exclude-bad`, which stay in the tar)."""
    return shard["num_samples"] + len(shard.get("excluded") or ())


def info_json(manifest: dict) -> dict:
    """timm / HF-style split info (`_info.json`); it describes the tars as they are (excluded samples included)."""
    splits = {}
    for split, s in manifest["splits"].items():
        name = INFO_SPLIT_NAMES.get(split, split)
        lengths = [samples_in_tar(sh) for sh in s["shards"]]
        splits[name] = {"name": name, "filenames": [sh["url"] for sh in s["shards"]],
                        "shard_lengths": lengths, "num_samples": sum(lengths)}
    info = {"name": manifest["name"], "splits": splits}
    if "label_space" in manifest:
        info["num_classes"] = manifest["label_space"]["num_classes"]
        info["label_space"] = manifest["label_space"]["name"]
    return info


def wids_index(manifest: dict, split: str) -> dict:
    """The wids shard index for one split (urls relative to the folder holding the index); wids
    addresses samples by position in the tar, so `nsamples` counts excluded samples too."""
    shards = manifest["splits"][split]["shards"]
    return {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": f"{manifest['name']}-{split}",
            "shardlist": [{"url": sh["url"], "nsamples": samples_in_tar(sh), "filesize": sh["bytes"],
                           "md5sum": sh["md5"]} for sh in shards]}


def write_outputs(out_dir: str, manifest: dict, *, info: bool = True) -> None:
    """Write the wids indexes and _info.json, then manifest.json last (its presence means complete).
    `info=False` leaves _info.json alone (an adopted set's own)."""
    for split in manifest["splits"]:
        write_json_atomic(storage.join(out_dir, f"{split}.wids.json"), wids_index(manifest, split))
    if info:
        write_json_atomic(storage.join(out_dir, "_info.json"), info_json(manifest))
    write_json_atomic(storage.join(out_dir, MANIFEST_NAME), manifest)


# ----------------------------------------------------------------------------- reading

class ManifestError(ValueError):
    """DATA's manifest cannot be used; the message is one line that says what to do."""


class ManifestMissing(ManifestError, FileNotFoundError):
    """There is no manifest.json at DATA."""


class Shard(NamedTuple):
    """A shard of a split, as the loader and tools open it."""

    url: str  # resolved against DATA
    num_samples: int  # the samples a reader gets: those in `exclude` are passed over, not counted
    exclude: frozenset = frozenset()  # keys of samples the manifest left out (adopt --exclude-bad)


def shard_url(data: str, rel: str) -> str:
    """A manifest url (relative to DATA, or absolute) as a path or URL to open."""
    return rel if "://" in rel else storage.join(data, rel)


def read_manifest(data) -> dict:
    """Read DATA/manifest.json (DATA a directory or URL) and check it is one this code reads.

    Checked: it exists and is readable, is a JSON object of our `format` and `format_version`, has a
    `splits` table, and a stored `form` this code knows (absent: jpeg). ManifestError (ManifestMissing when absent) with a one-line reason
    otherwise. The rest of the schema is checked where it is used (`split_shards`) and in full by
    audit-shards, which reports each fault instead of stopping at the first."""
    data = str(data)
    path = storage.join(data, MANIFEST_NAME)
    where = storage.redact(path)
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        raise ManifestMissing(f"no {MANIFEST_NAME} in {storage.redact(data)}: point at the --out of a finished "
                              "prepare-shards run") from None
    except OSError as e:
        raise ManifestError(f"cannot read {where}: {e.strerror or storage.redact(e)}") from None
    try:
        m = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestError(f"{where} is not valid JSON ({e}): it is damaged; rerun prepare-shards to "
                            "rewrite it") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ManifestError(f"{where} is not an imagenet-shards manifest (format is not {FORMAT!r})")
    if m.get("format_version") != FORMAT_VERSION:
        raise ManifestError(f"{where} has format_version {m.get('format_version')}; this tool reads "
                            f"{FORMAT_VERSION}")
    if not isinstance(m.get("splits"), dict) or not m["splits"]:
        raise ManifestError(f"{where} has no splits: rerun prepare-shards to rewrite it")
    if manifest_form(m) not in FORMS:
        raise ManifestError(f"{where} stores its images as {manifest_form(m)!r}; this tool reads "
                            f"{', '.join(FORMS)}")
    return m


def split_shards(manifest: dict, data, split: str) -> list[Shard]:
    """The split's shards in manifest order, with URLs resolved against DATA; ManifestError for an
    unknown split or a malformed shard entry."""
    splits = manifest["splits"]
    if split not in splits:
        raise ManifestError(f"split {split!r} is not in the manifest (has: {', '.join(sorted(splits))})")
    try:
        out = [Shard(shard_url(str(data), s["url"]), int(s["num_samples"]), frozenset(s.get("excluded") or ()))
               for s in splits[split]["shards"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ManifestError(f"manifest split {split!r}: malformed shard entry ({e!r}); run audit-shards") from None
    if any(s.num_samples < 0 for s in out):
        raise ManifestError(f"manifest split {split!r}: a shard entry has a negative num_samples; run audit-shards")
    return out
