"""The prepare job's configuration: everything that decides the output bytes, checked in one place.

`Config` cannot hold an invalid value: its constructor runs `check_config`, the one validator that
the CLI, `prepare()` and library callers all go through. The image settings (resize, quality,
max_pixels) are checked by building the `ImagePolicy` they describe, so each rule is written once:
the policy's own check in `images`, the job's (shards, seed, splits) here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from imagenet_shards.pipeline.prepare.images import ImagePolicy

SPLITS = ("train", "val", "test")  # canonical order; test is unlabeled (.cls -1)
DEFAULT_SPLITS = ("train", "val")


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line naming the option and the bad value."""


@dataclass(frozen=True)
class Config:
    """Everything that decides the output bytes (workers and --part do not). Validated on
    construction (ConfigError); `splits` is kept in canonical order (train before val)."""

    resize: str = "longer:500"
    quality: int = 90
    shard_samples: int | None = 1000
    shard_bytes: int | None = None
    seed: int = 0
    max_pixels: int = 89_478_485
    exif_transpose: bool = False
    splits: tuple[str, ...] = DEFAULT_SPLITS

    def __post_init__(self):
        check_config(self)
        object.__setattr__(self, "splits", tuple(s for s in SPLITS if s in self.splits))

    def policy(self) -> ImagePolicy:
        """The per-image policy these settings describe."""
        return ImagePolicy(resize=self.resize, quality=self.quality, max_pixels=self.max_pixels,
                           exif_transpose=self.exif_transpose)

    def as_dict(self) -> dict:
        """The config as recorded in the job state and the manifest (JSON types only)."""
        d = asdict(self)
        d["splits"] = list(self.splits)
        return d


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(cfg: Config) -> None:
    """Raise ConfigError (one line) for any setting that cannot work; the one check of the config."""
    try:
        cfg.policy()
    except ValueError as e:
        raise ConfigError(str(e)) from None
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
