"""The prepare job's configuration: everything that decides the output bytes, checked in one place.

`Config` cannot hold an invalid value: its constructor runs `check_config`, the one validator that
the CLI, `prepare()` and library callers all go through. The image settings (resize, quality,
max_pixels) are checked by building the `ImagePolicy` they describe, so each rule is written once:
the policy's own check in `images`, the job's (shards, seed, splits) here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields

from imagenet_shards.pipeline.format.label_spaces import PRESENT, LabelSpace
from imagenet_shards.pipeline.format.subset import names_sha256
from imagenet_shards.pipeline.prepare.images import ImagePolicy
from imagenet_shards.pipeline.prepare.sources import WNID_RE
from imagenet_shards.pipeline.prepare.subset import train_names

SPLITS = ("train", "val", "test")  # canonical order; test is unlabeled (.cls -1)
DEFAULT_SPLITS = ("train", "val")


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line naming the option and the bad value."""


@dataclass(frozen=True)
class Config:
    """Everything that decides the output bytes (workers and --part do not). Validated on
    construction (ConfigError); `splits` is kept in canonical order (train before val).

    Subset (all unset by default): `classes` N (drawn with `seed`) or WNIDs; `per_class` N or
    `fraction` F of each train class; `train_list` train image names (`n01440764_10026.JPEG` or
    `n01440764/n01440764_10026.JPEG`). WNIDs and names are kept sorted and unique, names as WNID/KEY.

    `label_space`: the class list `.cls` indexes, as `format.label_spaces.label_space_option` parsed it
    (once, at the CLI): a `LabelSpace`, or `PRESENT` (the sources' WNIDs, resolved by `run` once they
    are indexed); None: the sources' sorted WNIDs, i.e. ImageNet-1k for the ILSVRC2012 archives, and
    `imagenet-22k` for a full release (`run` resolves it; a WNID outside it is an error there, unless
    `skip_unknown_wnids`: then its images are left out, each listed as skipped, `unknown_wnid`). `holdout_per_class` K: a val split of K train images per class
    with more than K (prepare/holdout.py)."""

    resize: str = "longer:500"
    quality: int = 90
    shard_samples: int | None = 1000
    shard_bytes: int | None = None
    seed: int = 0
    max_pixels: int = 89_478_485
    exif_transpose: bool = False
    restart_markers: bool = True
    splits: tuple[str, ...] = DEFAULT_SPLITS
    classes: int | tuple[str, ...] | None = None
    per_class: int | None = None
    fraction: float | None = None
    train_list: tuple[str, ...] | None = field(default=None, repr=False)  # up to 128k names (the 10 % list)
    allow_partial_val: bool = False  # build val from a source with other images than the devkit lists
    label_space: LabelSpace | str | None = field(default=None, repr=False)  # str: only PRESENT
    holdout_per_class: int | None = None
    skip_unknown_wnids: bool = False  # a full release's default space: leave other WNIDs' images out, listed
    pixels: str | None = None  # the pixel form (format/pixels.py) instead of JPEGs; resize then "longer:MAX_SIDE"

    def __post_init__(self):
        check_config(self)
        object.__setattr__(self, "splits", tuple(s for s in SPLITS if s in self.splits))
        if self.classes is not None and not _is_int(self.classes):
            object.__setattr__(self, "classes", tuple(sorted(set(self.classes))))
        if self.train_list is not None:
            object.__setattr__(self, "train_list", train_names(self.train_list))
        if self.fraction is not None:
            object.__setattr__(self, "fraction", float(self.fraction))  # 1 and 1.0: one record

    @property
    def space_wnids(self) -> frozenset[str] | None:
        """The WNIDs the label space labels (other classes are left out), or None: every class of the
        sources is labelled (no space given, or `present` before `run` resolves it)."""
        return frozenset(self.label_space.wnids) if isinstance(self.label_space, LabelSpace) else None

    @property
    def subset(self) -> bool:
        """Whether any subset option is set."""
        return any(v is not None for v in (self.classes, self.per_class, self.fraction, self.train_list))

    def policy(self) -> ImagePolicy:
        """The per-image policy these settings describe."""
        return ImagePolicy(resize=self.resize, quality=self.quality, max_pixels=self.max_pixels,
                           exif_transpose=self.exif_transpose, restart_markers=self.restart_markers,
                           pixels=self.pixels)

    @property
    def max_side(self) -> int | None:
        """The pixel form's bound on the longer side (the manifest's `max_side`), None for JPEGs."""
        return None if self.pixels is None else int(self.resize.split(":")[1])

    def as_dict(self) -> dict:
        """The config as recorded in the job state and the manifest (JSON types only)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}  # not asdict: it would copy a label space's list
        d["splits"] = list(self.splits)
        for k in ("classes", "per_class", "fraction", "train_list", "label_space", "holdout_per_class"):
            del d[k]
        for k in ("allow_partial_val", "skip_unknown_wnids", "pixels"):  # recorded only when given: earlier
            if not d[k]:                                                  # runs' job states stay equal
                del d[k]
        if self.pixels is not None:  # the JPEG form's settings: not used, so not recorded
            del d["quality"], d["restart_markers"]
        if self.subset:
            d["subset"] = self.subset_record()
        # only when set: a run without them records what it recorded before they existed (same bytes)
        if isinstance(self.label_space, LabelSpace):
            d["label_space"] = self.label_space.record()
        elif self.label_space == PRESENT:
            d["label_space"] = {"name": PRESENT}
        if self.holdout_per_class is not None:
            d["holdout"] = {"per_class": self.holdout_per_class, "seed": self.seed}
        return d

    def subset_record(self) -> dict:
        """What was asked of the subset, as recorded in the manifest's `config.subset` (set keys only;
        lists by count and sha256, not name by name; see pipeline/format/subset.py)."""
        rec = {}
        if _is_int(self.classes):
            rec["classes"] = {"count": self.classes, "seed": self.seed}
        elif self.classes is not None:
            rec["classes"] = {"count": len(self.classes), "wnids": list(self.classes),
                              "sha256": names_sha256(self.classes)}
        if self.per_class is not None:
            rec["per_class"] = self.per_class
        if self.fraction is not None:
            rec["fraction"] = self.fraction
        if self.train_list is not None:
            counts = Counter(name.split("/", 1)[0] for name in self.train_list)
            rec["train_list"] = {"names": len(self.train_list), "sha256": names_sha256(self.train_list),
                                 "class_counts": dict(sorted(counts.items()))}
        return rec


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(cfg: Config) -> None:
    """Raise ConfigError (one line) for any setting that cannot work; the one check of the config."""
    try:
        cfg.policy()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.pixels is not None and (cfg.quality != 90 or not cfg.restart_markers):
        raise ConfigError(f"--quality and --no-restart-markers set how JPEGs are stored: the {cfg.pixels} form "
                          "stores none; drop them")
    if (cfg.shard_samples is None) == (cfg.shard_bytes is None):
        raise ConfigError("give exactly one of --shard-samples and --shard-bytes")
    for name, value in (("--shard-samples", cfg.shard_samples), ("--shard-bytes", cfg.shard_bytes)):
        if value is not None and not (_is_int(value) and value >= 1):
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if not (_is_int(cfg.seed) and cfg.seed >= 0):
        raise ConfigError(f"--seed must be a non-negative integer, got {cfg.seed!r}")
    splits = [cfg.splits] if isinstance(cfg.splits, str) else list(cfg.splits)
    if not splits or any(s not in SPLITS for s in splits):
        raise ConfigError(f"--splits takes train, val and/or test, got {','.join(map(str, splits)) or 'nothing'}")
    check_subset(cfg, splits)
    if cfg.label_space is not None and not isinstance(cfg.label_space, LabelSpace) and cfg.label_space != PRESENT:
        raise ConfigError(f"label_space takes a LabelSpace or {PRESENT!r} (parse --label-space NAME|FILE with "
                          f"format.label_spaces.label_space_option), got {cfg.label_space!r:.60}")
    if cfg.label_space is not None and cfg.classes is not None:
        raise ConfigError("give --label-space or --classes, not both: --classes relabels to the kept classes, a label "
                          "space keeps its own labels (to keep some classes of a space, give a label-space FILE)")
    if cfg.skip_unknown_wnids and cfg.classes is not None:  # --label-space: `run` refuses it, before resolving
        raise ConfigError("--skip-unknown-wnids applies to a full release's default label space; with --classes, "
                          "images of other classes are left out already (and counted)")
    if cfg.holdout_per_class is not None:
        if not (_is_int(cfg.holdout_per_class) and cfg.holdout_per_class >= 1):
            raise ConfigError(f"--holdout-per-class must be a positive integer, got {cfg.holdout_per_class!r}")
        if "train" not in splits or "val" not in splits:
            raise ConfigError("--holdout-per-class carves the val split out of train: --splits must hold train and val")


def check_subset(cfg: Config, splits: list[str]) -> None:
    """The subset options: each well-formed, and a combination that means something."""
    if cfg.classes is not None:
        if _is_int(cfg.classes):
            if cfg.classes < 1:
                raise ConfigError(f"--classes must be at least 1, got {cfg.classes}")
        elif isinstance(cfg.classes, str) or not all(isinstance(w, str) and WNID_RE.match(w) for w in cfg.classes):
            raise ConfigError(f"--classes takes a number or WNIDs (nXXXXXXXX), got {cfg.classes!r:.80}")
        elif not cfg.classes:
            raise ConfigError("--classes lists no WNIDs")
    if cfg.per_class is not None and not (_is_int(cfg.per_class) and cfg.per_class >= 1):
        raise ConfigError(f"--per-class must be a positive integer, got {cfg.per_class!r}")
    if cfg.fraction is not None and not (isinstance(cfg.fraction, (int, float)) and not isinstance(cfg.fraction, bool)
                                         and 0 < cfg.fraction <= 1):
        raise ConfigError(f"--fraction must be in (0, 1], got {cfg.fraction!r}")
    train_options = [f for f, v in (("--per-class", cfg.per_class), ("--fraction", cfg.fraction),
                                    ("--train-list", cfg.train_list)) if v is not None]
    if len(train_options) > 1:
        raise ConfigError(f"give one of --per-class, --fraction and --train-list, not {' and '.join(train_options)}")
    if train_options and "train" not in splits:
        raise ConfigError(f"{train_options[0]} selects train images, but the train split is not built (--splits)")
    if cfg.train_list is not None:
        if isinstance(cfg.train_list, str) or not all(isinstance(n, str) for n in cfg.train_list):
            raise ConfigError("--train-list takes image names (a list of strings)")
        if not cfg.train_list:
            raise ConfigError("--train-list lists no images")
        try:
            train_names(cfg.train_list)
        except ValueError as e:
            raise ConfigError(f"--train-list: {e}") from None
