"""The train-imagenet parser, made from `TrainConfig`'s fields: config.py states each flag's default,
help and type once, beside its field (`config.flag`). A flag is `--` + the field's name with dashes,
in the fields' order, in the --help section the last field naming a `group` opened. `--show` and
`--world-size` (CLI_ONLY) are what the command does rather than what a run is asked to do; they
follow `--recipe`.

The parser states no defaults (every action's is argparse.SUPPRESS): one parse returns the flags
given and nothing else, which `--recipe` needs (a flag equal to the trainer's default still
overrides the recipe's value); `defaults()` holds the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

from imagenet_shards.pipeline.console import OneLineParser
from imagenet_shards.train.recipes import recipe_names
from imagenet_shards.train.trainer.config import TrainConfig, positive_int

# Parser destinations that are not TrainConfig fields, and add_argument's keywords (not given: --show
# off, --world-size torchrun's); --help lists them after CLI_ONLY_AFTER.
CLI_ONLY = {
    "show": {"action": "store_true",
             "help": "print the fully resolved recipe (or config) as JSON and exit, touching no data"},
    "world_size": {"type": positive_int, "metavar": "W",
                   "help": "with --show: resolve for W GPUs (a run takes torchrun's WORLD_SIZE)"},
}
CLI_ONLY_AFTER = "recipe"


def flag_fields() -> list[dataclasses.Field]:
    """TrainConfig's fields that are flags, in --help's order."""
    return [f for f in dataclasses.fields(TrainConfig) if "flag" in f.metadata]


def field_default(f: dataclasses.Field):
    """A field's default (a fresh one for a factory; None for --data and --out, which have none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    return None if f.default_factory is dataclasses.MISSING else f.default_factory()


def defaults() -> dict:
    """TrainConfig's default of each flag, by field name (parser destination)."""
    return {f.name: field_default(f) for f in flag_fields()}


def shown(value) -> str:
    """A default as --help says it: on/off for a switch, 5e-5 rather than 5e-05, 2 rather than 2.0."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:g}")
    return str(value)


def recipe_list(names: list[str]) -> str:
    """Recipe names for a help line, a family's numbered ones folded: ffcv-rn50-{16,24}, tv-rn50-v1."""
    folded: dict[str, list[str]] = {}
    for name in names:
        stem, _, tail = name.rpartition("-")
        if stem and tail.isdigit():
            folded.setdefault(stem + "-", []).append(tail)
        else:
            folded[name] = []
    return ", ".join(key + (tails[0] if len(tails) == 1 else "{" + ",".join(tails) + "}") if tails else key
                     for key, tails in folded.items())


def _argparse_kwargs(f: dataclasses.Field) -> dict:
    """add_argument's keywords for a flag field (config.flag's rules: store_true for a False default,
    the type of an int or float default, the help's {default} and {recipes} filled in)."""
    kwargs = {k: v for k, v in f.metadata["flag"].items() if k not in ("group", "add") and v is not None}
    default = field_default(f)
    if "help" in kwargs:
        kwargs["help"] = kwargs["help"].replace("{default}", shown(default)).replace(
            "{recipes}", recipe_list(recipe_names()))
    if "action" not in kwargs:
        if default is False:
            kwargs["action"] = "store_true"
        elif "type" not in kwargs and type(default) in (int, float):
            kwargs["type"] = type(default)
    return kwargs


def build_parser(**parser_kwargs) -> argparse.ArgumentParser:
    """The train-imagenet parser (`parser_kwargs` go to OneLineParser: prog, description, ...)."""
    p = OneLineParser(**parser_kwargs)
    group = p
    for f in flag_fields():
        meta = f.metadata["flag"]
        if meta["group"]:
            group = p.add_argument_group(meta["group"])
        if meta["add"]:
            meta["add"](group)
        else:
            group.add_argument("--" + f.name.replace("_", "-"), **_argparse_kwargs(f))
        if f.name == CLI_ONLY_AFTER:
            for name, kwargs in CLI_ONLY.items():
                group.add_argument("--" + name.replace("_", "-"), **kwargs)
    for action in p._actions:  # the flags given, only: see the module's docstring
        action.default = argparse.SUPPRESS
    return p
