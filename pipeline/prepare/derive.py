"""prepare-shards derive: a JPEG shard set -> the same set in the pixel form (format/pixels.py).

One output shard per source shard, under the same name, with the same samples in the same order:
`KEY.cls` as it was, `KEY.json` the source's plus the stored planes' width/height and `"form"`,
`KEY.yuv420` the planes of the decoded image resized to `max_side` (images.decode_resized: the one
resize prepare uses). So output shard i is a pure function of source shard i and the options, and
the set is byte-reproducible whatever --workers or --part did. The job runs through prepare's own
machinery: the OUT folder or URL (`outdir`: a shard exists under its name only when complete, its
record is written after it), the parts (`parts`, `prepare-shards finalize`), the pool (`parallel`),
the manifest (`format.manifest.build_manifest` from the job state and the records). A sample the
decoder refuses is left out and listed in the manifest's `rejected`, with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import time
from dataclasses import dataclass

from tqdm import tqdm

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.format.manifest import (JPEG_FORM, LEFT_OUT, MANIFEST_NAME, ManifestError,
                                                      manifest_form, read_manifest, shard_url)
from imagenet_shards.pipeline.format.digest import shard_check
from imagenet_shards.pipeline.format.keys import train_key_wnid
from imagenet_shards.pipeline.format.tar import HashingReader, TarFormatError, iter_tar
from imagenet_shards.pipeline.parallel import run_jobs
from imagenet_shards.pipeline.prepare.config import SPLITS
from imagenet_shards.pipeline.prepare.errors import PrepareError
from imagenet_shards.pipeline.prepare.finalize import finalize, summarize
from imagenet_shards.pipeline.prepare.encoders import encode_pixels
from imagenet_shards.pipeline.prepare.images import decode_resized
from imagenet_shards.pipeline.prepare.outdir import STATE, open_outdir, record_name, record_rel
from imagenet_shards.pipeline.prepare.job_state import claim_part_count
from imagenet_shards.pipeline.prepare.parts import job_id, part_state_rel, state_differences
from imagenet_shards.pipeline.prepare.plan import part_of
from imagenet_shards.pipeline.prepare.shards import open_shard
from imagenet_shards.pipeline.storage.atomic import DiskFull

FORMS = (pixels.FORM,)

@dataclass(frozen=True)
class DeriveSpec:
    """One output shard: the source shard it is made from and how many samples that holds."""

    split: str
    index: int
    url: str  # relative to OUT (the source's name)
    source: str  # the source shard, resolved against SRC
    planned: int
    max_side: int
    check: tuple[str, str] | None = None  # the source shard's digest (format.digest.shard_check)

    def __len__(self) -> int:  # what outdir's resume check compares with the record's `planned`
        return self.planned


def derive_sample(key: str, members: dict[str, bytes], max_side: int) -> tuple[dict | None, dict | None]:
    """One source sample -> ({ext: bytes} of the pixel sample, None) or (None, {reason, detail})."""
    image = next((v for e, v in members.items() if e not in ("cls", "json")), None)
    try:
        meta = json.loads(members["json"])
        rgb = decode_resized(image, f"longer:{max_side}")
    except Exception as e:  # noqa: BLE001 - any failure to read the sample is its verdict
        reason = "no_json" if "json" not in members else "no_image" if image is None else "undecodable"
        return None, {"reason": reason, "detail": f"{type(e).__name__}: {e}"[:200]}
    h, w = rgb.shape[:2]
    meta.update(width=w, height=h, form=pixels.FORM)
    return {"cls": members["cls"], "json": json.dumps(meta, sort_keys=True, separators=(",", ":")).encode(),
            pixels.EXT: encode_pixels(rgb)}, None


class SourceDamaged(PrepareError):
    """A source shard's bytes are not those its manifest's digest vouches for, or not a whole tar: one line
    that says to audit SRC (a TarFormatError's own says to audit the set it is in, here the source)."""


def _samples(url: str, check: tuple[str, str] | None):
    """(key, {ext: bytes}) of a source shard, in tar order, hashed as read; SourceDamaged at the end if
    its digest is not `check` (algorithm, hex: what the source manifest records, as the loader checks)."""
    key, members = None, {}
    with storage.open_url(url, "rb") as f:
        r = HashingReader(f, (check[0],) if check else ())
        try:
            for m in iter_tar(r, where=storage.redact(url)):
                if m.key != key and key is not None:
                    yield key, members
                    members = {}
                key = m.key
                members[m.ext] = m.data
        except TarFormatError as e:
            raise SourceDamaged(f"source shard {e}") from None
        for _ in r.read_rest():
            pass
    if check and r.hexdigest(check[0]) != check[1]:
        raise SourceDamaged(f"source shard {storage.redact(url)} does not match its manifest's {check[0]}: it is "
                            "damaged or was replaced; run audit-shards on SRC (nothing derived from it is kept)")
    if key is not None:
        yield key, members


def derive_shard(spec: DeriveSpec, out_dir: str, _policy=None) -> dict:
    """Write the pixel shard of `spec` under out_dir/spec.url (atomically) and return its record."""
    rejected, class_counts, failed, written = [], {}, {}, 0
    with open_shard(os.path.join(out_dir, spec.url)) as tw:
        for key, members in _samples(spec.source, spec.check):
            sample, why = derive_sample(key, members, spec.max_side)
            if why is not None:
                rejected.append({"split": spec.split, "key": key, "source": spec.url, **why})
                wnid = train_key_wnid(key)  # a class's failed draws, as prepare's records count them
                if wnid is not None:
                    failed.setdefault(wnid, {}).setdefault(why["reason"], 0)
                    failed[wnid][why["reason"]] += 1
                continue
            for ext in sorted(sample):
                tw.add(f"{key}.{ext}", sample[ext])
            written += 1
            wnid = json.loads(sample["json"]).get("wnid")
            if wnid is not None:
                class_counts[wnid] = class_counts.get(wnid, 0) + 1
    return {"split": spec.split, "index": spec.index, "url": spec.url, "num_samples": written,
            "planned": spec.planned, **tw.digests(), "class_counts": dict(sorted(class_counts.items())),
            "rejected": rejected, "skipped": [], "fixed": [], "fix_counts": {},
            "failed_by_class": dict(sorted(failed.items()))}


def source_set(src: str) -> tuple[dict, dict]:
    """(the source manifest, its record in the derived one: url and sha256 of its bytes)."""
    try:
        m = read_manifest(src)
        raw = storage.read_bytes(storage.join(src, MANIFEST_NAME))
    except (ManifestError, OSError) as e:
        raise PrepareError(f"derive SRC: {storage.redact(e)}") from None
    form = manifest_form(m)
    if form != JPEG_FORM:
        raise PrepareError(f"{storage.redact(src)} is a {form} set: derive reads a JPEG shard set")
    if "adopted" in m:
        raise PrepareError(f"{storage.redact(src)} is an adopted set: derive reads a set prepare-shards wrote")
    return m, {"url": storage.redact(src), "sha256": hashlib.sha256(raw).hexdigest(), "form": form}


def plan(m: dict, src: str, max_side: int) -> tuple[dict, list[DeriveSpec]]:
    """The job state (what build_manifest and finalize read) and every output shard, in job order."""
    splits = [s for s in SPLITS if s in m["splits"]] + sorted(s for s in m["splits"] if s not in SPLITS)
    specs = []
    for split in splits:
        for i, sh in enumerate(m["splits"][split]["shards"]):
            rel = sh["url"] if "://" not in sh["url"] else f"{split}/{posixpath.basename(sh['url'])}"
            specs.append(DeriveSpec(split, i, rel, shard_url(src, sh["url"]), sh["num_samples"], max_side,
                                     shard_check(sh)))
    state = {"config": {**m["config"], "splits": splits}, "sources": m["sources"], "classes": m["classes"],
             "splits": {s: _split_state(m, s) for s in splits}, "form": pixels.FORM, "max_side": max_side}
    for k in ("label_space", "name"):
        if k in m:
            state["label_space" if k == "label_space" else "dataset"] = m[k]
    return state, specs


def _split_state(m: dict, split: str) -> dict:
    """A derived split's job state: the source split's accounting, so the derived manifest's is the
    source's plus what derive itself rejects. Its images_in, what the source run rejected and skipped
    (its `rejected`/`skipped` records), left out on purpose (`excluded_by_*`, `held_out`) or held out
    from (`held_out_from`), and, per class, the drawn images that failed (what `short_classes` counts):
    the audit's holdout, subset and --expect checks then read a derived set as they read its source."""
    source = m["splits"][split]
    state = {"num_shards": len(source["shards"]), "images_in": source["images_in"],
             "plan_rejected": [r for r in m.get("rejected", []) if r["split"] == split],
             "plan_skipped": [r for r in m.get("skipped", []) if r["split"] == split],
             **{k: source[k] for k in (*LEFT_OUT, "held_out_from") if k in source}}
    short = source.get("short_classes") or {}
    if short:
        state["failed_by_class"] = {w: e["reasons"] for w, e in sorted(short.items())}
    return state


def derive(src: str, *, out: str, form: str = pixels.FORM, max_side: int = 400, workers: int | None = None,
           part: tuple[int, int] = (0, 1), verify_existing: bool = True, progress: bool = True,
           staging: str | None = None) -> dict:
    """Run (or resume) a derive job; the summary dict (as prepare's). PrepareError (one line) on bad input."""
    t0 = time.monotonic()
    if form not in FORMS:
        raise PrepareError(f"--pixels {form!r}: the forms are {', '.join(FORMS)}")
    if max_side < 1:
        raise PrepareError(f"--max-side must be a positive number of pixels, got {max_side}")
    m, source = source_set(src)
    state, specs = plan(m, src, max_side)
    state["derived_from"] = source
    try:
        outdir = open_outdir(out, staging=staging, verify=verify_existing)
    except ValueError as e:
        raise PrepareError(str(e)) from None
    try:
        _claim(outdir, state)
        if part[1] > 1:  # as prepare's parts: one count per job, and what this part ran with
            claim_part_count(outdir, part)
            outdir.write_json(part_state_rel(part), state)
        mine = [sp for n, sp in enumerate(specs) if part_of(n, *part)]
        done = outdir.load_records(mine, verify_existing)
        pending = [sp for sp in mine if (sp.split, sp.index) not in done]
        outdir.clean_stale(pending)
        images = _build(outdir, pending, job_id(state), f"{part[0]}/{part[1]}", workers, progress)
        names = outdir.record_names()
        missing = [n for n, sp in enumerate(specs) if record_name(sp) not in names]
        summary = {"command": "prepare-shards derive", "out": storage.redact(out), "part": f"{part[0]}/{part[1]}", "shards_built": len(pending),
                   "shards_reused": len(mine) - len(pending), "images_processed": images,
                   "wall_s": round(time.monotonic() - t0, 3)}
        summary["images_per_s"] = round(images / summary["wall_s"], 1) if summary["wall_s"] else 0.0
        if missing:
            summary.update(complete=False, shards_missing=len(missing),
                           parts_missing=sorted({n % part[1] for n in missing}))
        else:
            summary.update(summarize(finalize(out)))
        return summary
    except DiskFull as e:
        raise PrepareError(f"{e}: {outdir.room_advice}") from None
    except (OSError, TarFormatError) as e:
        raise PrepareError(f"derive into {storage.redact(out)}: {storage.redact(e)}; rerunning resumes") from None
    finally:
        outdir.close()


def _claim(outdir, state: dict) -> None:
    """Create OUT with this job's state, or check that the state already there is this job's."""
    try:
        old = outdir.read_json(STATE)
    except (FileNotFoundError, NotADirectoryError):
        old = None
    if old is not None and old != state:
        own = [f"{k}: {old.get(k)} (existing) vs {state[k]} (asked)" for k in ("form", "max_side") if old.get(k) != state[k]]
        if old.get("derived_from") != state["derived_from"]:
            own.append(f"source: {(old.get('derived_from') or {}).get('url')} (existing) vs "
                       f"{state['derived_from']['url']} (asked), or the same set rewritten since")
        differ = own or state_differences(old, state)
        raise PrepareError(f"{outdir.where} holds another derive job ({'; '.join(differ)}); use a new --out")
    outdir.create()
    if old is None:
        outdir.write_json(STATE, state)


def _build(outdir, pending: list[DeriveSpec], job: str, part: str, workers, progress: bool) -> int:
    """Derive the pending shards in worker processes; write each record as its shard is done."""
    if not pending:
        return 0
    outdir.start_staging()
    total = sum(sp.planned for sp in pending)
    rejected = 0
    with tqdm(total=total, desc="derive", unit="img", disable=not progress, dynamic_ncols=True, smoothing=0.05) as bar:
        for _, rec in run_jobs(outdir.build, [(sp, None, derive_shard) for sp in pending], workers=workers):
            rec["job"], rec["part"] = job, part
            outdir.write_json(record_rel(rec["split"], rec["index"]), rec)
            rejected += len(rec["rejected"])
            bar.set_postfix(rejected=rejected, refresh=False)
            bar.update(rec["planned"])
    return total
