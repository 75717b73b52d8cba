"""The shape of a published recipe: one frozen record of named values, each with the source line it
comes from. The trainer never branches on a recipe's name; `trainer/recipe.py`'s `resolve` turns a
record into a `TrainConfig` (plus the explicit flags and the world size), and `describe` into the
`--show` JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple


# where the shard setting a recipe names was measured against its source's own resize path
SHARDS_MEASURED = "measured: bench/bench_resize_paths.py, docs/recipes.md 'Shard settings'"
# why a recipe whose source decodes every image in full sets the loader's dct_scaling off
FULL_DECODE_MEASURED = ("ours: the loader's 1/2, 1/4, 1/8 DCT-scaled decode is not the source's full decode; "
                        "measured: bench/bench_resize_paths.py (ours-none-full against ours-none), docs/recipes.md "
                        "'Shard settings'")


class Cited(NamedTuple):
    """A value and where it comes from (file:line, table, or "ours: ..." for a value we chose)."""

    value: Any
    source: str


@dataclass(frozen=True)
class Recipe:
    """One published training recipe.

    `hyper`: TrainConfig field -> Cited value; every hyperparameter the source fixes is here, also
    the ones equal to our defaults, so that any flag that changes one is an override. `published`:
    what the source reports (top1, top5, real_top1 as fractions; minutes; hardware). `world_size`
    and `hyper["batch_size"]` are the source's GPUs and per-GPU batch; `scale_rule` is how its lr
    follows another global batch ("linear" or "sqrt"). `absolute_lr_bounds`: the source gives its
    warmup-start and floor lrs as absolute values (timm), so they stay put when the peak is scaled.
    `ema_adjust`: torchvision's EMA decay adjustment applies. `metric`: which of our eval figures the
    published top-1 is ("val_top1", "ema_val_top1" or "val_real_top1"; with the recipe's `tta` as it is
    set): what checkpoint-best, the run summary and report-run follow. `shards_resize`: the prepare-shards
    `--resize` whose stored images are the source's own data ("none": the original JPEGs; "longer:500":
    FFCV's 500 px bound), which train-imagenet compares with the manifest's at start (docs/recipes.md,
    "Shard settings"; None: the recipe says nothing). `ramp_rule`: how the source's own
    configs place the progressive-resize ramp for another number of epochs, as (start fraction, end
    fraction, offset): ramp = (floor(start x E) + offset, floor(end x E) + offset); None where the
    source has no ramp or no rule fits its configs. `changes`: what we do differently and why
    (ideally nothing).
    """

    name: str
    family: str
    title: str
    source: str
    world_size: Cited
    scale_rule: Cited
    hyper: Mapping[str, Cited]
    published: Mapping[str, Cited]
    changes: tuple[str, ...] = ()
    data: str = ""
    absolute_lr_bounds: bool = False
    ema_adjust: bool = False
    ramp_rule: Cited | None = None
    shards_resize: Cited | None = None
    metric: Cited = Cited("val_top1", "the raw model's single-crop top-1")
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        object.__setattr__(self, "hyper", MappingProxyType(dict(self.hyper)))
        object.__setattr__(self, "published", MappingProxyType(dict(self.published)))

    def value(self, name: str, default=None):
        """The recipe's value of a TrainConfig field (`default` when it does not set one)."""
        cited = self.hyper.get(name)
        return default if cited is None else cited.value
