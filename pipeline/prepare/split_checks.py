"""Checks that a split asked for is the split it claims to be, before and after the work.

- `check_val_source`: the devkit's ground truth lists every val image (50,000 lines for ILSVRC2012);
  a val source holding other images than those (49 of 100, or the train archive given as `--val`)
  is an error unless `allow_partial_val`, which the manifest then records.
- `empty_split_error`: a split that would end with 0 samples (an empty tar, a val archive none of
  whose members the labels name, a subset that keeps nothing) is an error before any image is read.
- `empty_in_manifest`: the same after the images were read (every one of them rejected), so that
  no manifest is written for it.
Each returns the one-line message (or raises `PrepareError` with it); `run` and `finalize` call them.
"""

from __future__ import annotations

from collections import Counter

from imagenet_shards.pipeline.prepare.errors import PrepareError

SPLIT_FLAGS = {"train": "--train", "val": "--val", "test": "--test"}


def _reasons(counts: Counter) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts.items()))


def check_val_source(idx, ground_truth: dict[str, str], *, allow_partial: bool) -> dict | None:
    """Compare the val source's images with the devkit's ground truth (key -> WNID).

    PrepareError (one line) when the source holds a different set of images, unless
    `allow_partial`; then returns what the sources entry records (`ground_truth_images`, and how
    many of the source's images it lists), else None."""
    held = len(idx.members)
    listed = sum(1 for m in idx.members if m.key in ground_truth)
    if held == listed == len(ground_truth):
        return None
    if held == 0:
        raise PrepareError(f"--val {idx.name} holds no images (the devkit's ground truth lists "
                           f"{len(ground_truth):,}): the val split would have 0 samples; give the val archive, "
                           "ILSVRC2012_img_val.tar")
    if listed == 0:
        looks = (" (its members are class tars: the train archive?)"
                 if idx.members and all(m.filename.endswith(".tar") for m in idx.members) else "")
        raise PrepareError(f"--val {idx.name} holds {held:,} images and the devkit's ground truth names none of "
                           f"them (it lists {len(ground_truth):,}, named ILSVRC2012_val_NNNNNNNN){looks}: give the "
                           "val archive, ILSVRC2012_img_val.tar, or the devkit that belongs to it")
    if not allow_partial:
        unlisted = f", {held - listed:,} of them not listed there" if held != listed else ""
        raise PrepareError(f"--val {idx.name} holds {held:,} images{unlisted}, but the devkit's ground truth lists "
                           f"{len(ground_truth):,}: a partial or different val archive; give the full one, or pass "
                           f"--allow-partial-val to build val from the {listed:,} it holds that the devkit labels "
                           "(recorded in the manifest)")
    return {"ground_truth_images": len(ground_truth), "ground_truth_listed": listed}


def empty_split_error(split: str, idx, plan) -> str | None:
    """The one-line error for a split whose plan holds no sample, else None. `idx`: its SourceIndex."""
    if any(len(sh) for sh in plan.shards):  # len: a shard's samples are made only when read (plan.ShardSpec)
        return None
    flag = f"{SPLIT_FLAGS[split]} {idx.name}"
    if not idx.members:
        found = f" ({len(idx.unusable):,} members that are not images)" if idx.unusable else ""
        return f"{flag} holds no images{found}: the {split} split would have 0 samples; give the {split} source"
    set_aside = Counter({"duplicate_key": len(plan.duplicates), "no_label": len(plan.unlabeled)}) + Counter()
    if plan.excluded:
        set_aside["left out by the subset"] = plan.excluded
    return (f"{flag}: the {split} split would have 0 samples ({len(idx.members):,} images, all set aside: "
            f"{_reasons(set_aside)}); give the {split} source that belongs to the others, or --splits without "
            f"{split}")


def empty_in_manifest(manifest: dict) -> str | None:
    """The one-line error for a split whose every image was rejected or skipped, else None."""
    for split, s in manifest["splits"].items():
        if s["num_samples"] == 0:
            why = Counter(r["reason"] for r in manifest["rejected"] + manifest["skipped"] if r["split"] == split)
            return (f"the {split} split has 0 samples: all {s['images_in']:,} of its images were set aside "
                    f"({_reasons(why) or 'none read'}); no manifest was written. Check the {split} source (the "
                    "manifest's reasons are in OUT/_prepare/records), or build without it (--splits)")
    return None


__all__ = ["check_val_source", "empty_in_manifest", "empty_split_error"]
