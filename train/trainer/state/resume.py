"""Which checkpoint a run continues from, and whether it may: `--resume auto` among the run's files, a
torn file skipped for the previous one, and a mid-epoch checkpoint held to the run that made it.

`resume_state` loads the one `--resume` names and checks it against this run (restore.py puts it
back into the run). A run folder holds up to three checkpoints to resume from (checkpoint.py writes them):
`checkpoint-mid.pt` (the newest mid-epoch one), `checkpoint-latest.pt` (the last epoch end) and
`checkpoint-previous.pt` (the epoch end before it, a hard link kept for this fallback). `--resume
auto` takes the one furthest into training that loads; one that does not (torn, truncated, not
ours) is named and passed over. Each is opened with `mmap=True`, so looking at all three reads
their headers, not their tensors.

A mid-epoch checkpoint continues exactly only the run that wrote it: same shard set (by content:
shard names, sizes and hashes, wherever the copy lives), seed, batch size and recipe (every
config field but the execution settings in EXECUTION). Another value is refused in one line;
changed execution settings are allowed and reported (world size and workers re-plan the rest of
the epoch, see loader/position.py; the others only lose bit-identity).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from imagenet_shards.train.trainer.config import TrainConfig, TrainError
from imagenet_shards.train.trainer.state.checkpoint import (BEST, LATEST, MID, PREVIOUS, load_checkpoint, plain,
                                                             saved_config)

# Config fields that say how a run executes, not what it computes: they may differ on resume.
EXECUTION = frozenset({
    "data", "out", "workers", "device", "resume", "overwrite", "stop_after_epochs", "eval_only", "profile", "measure_ceiling",
    "log_interval", "cache_dir", "cache_size", "storage_option", "weights", "compile", "channels_last",
    "checkpoint_every", "stop_check_every", "stop_deadline", "stall_warn", "dist_backend",
    # evaluation only, and how a recipe was fitted to the world size (its effects show as the fields it set)
    "eval_every", "tta", "eval_real", "val_crop_ratio", "no_val", "recipe_scaling",
    "device_adaptations", "skip_bad_shards",
})
# What a run leaves in RUN_DIR (moved aside together by --overwrite, so two runs' files never mix).
CHECKPOINTS = (LATEST, PREVIOUS, BEST, MID)
RUN_FILES = (*CHECKPOINTS, "metrics.jsonl", "recipe.json", "tensorboard", "profile")
# Of those, the ones whose change at a mid-epoch resume changes what the run reports: a note each.
NOTED = {"eval_every": "evaluation follows this run's value from the epoch it continues on"}
# Of those, the ones whose change costs bit-identity (numerics may differ in the last bits).
INEXACT = ("compile", "channels_last", "device")


def data_identity(manifest: dict | None) -> str | None:
    """A digest of the shard set's content as its manifest lists it (split, shard name, samples,
    sha256 or size): equal for two copies of one set wherever they live."""
    if manifest is None:
        return None
    rows = []
    for split in sorted(manifest.get("splits", {})):
        for s in manifest["splits"][split].get("shards", []):
            rows.append([split, Path(str(s.get("url", ""))).name, s.get("num_samples"), s.get("sha256") or s.get("bytes")])
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


def position_of(state: dict) -> tuple[int, int]:
    """(epoch, steps done in it): how far into training a checkpoint is."""
    return int(state.get("epoch", 0)), int(state.get("epoch_step") or 0)


def describe_position(state: dict) -> str:
    epoch, done = position_of(state)
    if done:
        return f"epoch {epoch + 1}, step {done} of {state.get('steps_per_epoch', '?')} (global step {state.get('step')})"
    return f"the end of epoch {epoch} (global step {state.get('step')})"


def pick(paths: list[Path], load) -> tuple[dict | None, Path | None, list[str]]:
    """Of the existing `paths`, the checkpoint furthest into training that `load` reads, and one
    line per file that could not be read. (None, None, lines) when none could."""
    loaded, notes = [], []
    for path in paths:
        if not path.exists():
            continue
        try:
            loaded.append((load(path), path))
        except Exception as e:  # torn, truncated or foreign: name it and go on to the next
            reason = " ".join(str(e).split())[:160]
            notes.append(f"{path} cannot be loaded ({type(e).__name__}: {reason})")
    if not loaded:
        return None, None, notes
    state, path = max(loaded, key=lambda sp: position_of(sp[0]))
    if notes:
        notes = [f"warning: {n}; resuming from {path} ({describe_position(state)}) instead" for n in notes]
    return state, path, notes


def config_changes(saved: dict, config: dict) -> tuple[list[str], list[str]]:
    """(refused, allowed): the fields that differ between a mid-epoch checkpoint's config and this
    run's, as `--flag A there, B here` texts; allowed lists only those that cost bit-identity."""
    refused, allowed = [], []
    for name in sorted(set(saved) | set(config)):
        if name in ("data", "storage_option"):
            continue
        a, b = plain(saved.get(name)), plain(config.get(name))
        if a == b:
            continue
        text = f"--{name.replace('_', '-')} {_show(a)} there, {_show(b)} here"
        if name not in EXECUTION:
            refused.append(text)
        elif name in INEXACT:
            allowed.append(text)
    return refused, allowed


def noted_changes(saved: dict, config: dict) -> list[str]:
    """The NOTED fields a mid-epoch checkpoint's config and this run's differ in, as
    `--flag A there, B here: what follows` texts."""
    return [f"--{name.replace('_', '-')} {_show(plain(saved[name]))} there, {_show(plain(config.get(name)))} here: {why}"
            for name, why in NOTED.items() if name in saved and plain(saved[name]) != plain(config.get(name))]


def continuation_problem(state: dict, config: dict, data_id: str | None, path: Path) -> str | None:
    """One line saying why this mid-epoch checkpoint cannot continue this run, or None."""
    if data_id is not None and state.get("data_id") not in (None, data_id):
        what = "another shard set (its manifest lists other shards, sizes or hashes)"
    else:
        refused, _ = config_changes(state.get("config") or {}, config)
        if not refused:
            return None
        what = "other settings: " + "; ".join(refused[:4]) + (f" (and {len(refused) - 4} more)" if len(refused) > 4 else "")
    return (f"{path} is a mid-epoch checkpoint of {what}. It continues only the run that wrote it (same shard "
            f"set, seed, batch size and recipe); to change them, resume from the epoch-end checkpoint "
            f"(--resume {path.parent / 'checkpoint-latest.pt'}) or start a new --out")


def _show(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def resume_state(config: TrainConfig, num_classes: int,
                 data_id: str | None = None) -> tuple[dict | None, Path | None, list[str]]:
    """The checkpoint `--resume` names, loaded and checked against this run, and the warnings to
    print (a torn file passed over). (None, None, []) without one; `--resume auto` with no
    checkpoint yet starts from scratch."""
    if not config.resume:
        return None, None, []
    out = Path(config.out)
    notes: list[str] = []
    if config.resume == "auto":
        state, path, notes = pick([out / MID, out / LATEST, out / PREVIOUS], lambda p: load_checkpoint(p, mmap=True))
        if state is None:
            if notes:
                raise TrainError(f"--resume auto: no checkpoint in {out} can be loaded: {'; '.join(notes)}")
            if config.eval_only:
                raise TrainError(f"--resume auto: no checkpoint at {out / LATEST}")
            return None, None, []
    else:
        path = Path(config.resume)
        if not path.exists():
            raise TrainError(f"--resume {config.resume}: no checkpoint at {path}")
        try:
            state = load_checkpoint(path, mmap=True)
        except Exception as e:  # torn or foreign file: say which and why
            raise TrainError(f"cannot load checkpoint {path}: {e} (--resume auto falls back to the run's "
                             f"previous checkpoint)") from None
    if state["arch"] != config.arch or state["num_classes"] != num_classes:
        raise TrainError(f"checkpoint {path} is --arch {state['arch']} with {state['num_classes']} classes, "
                         f"this run is --arch {config.arch} with {num_classes} classes "
                         f"(use the same --arch/--data, or a new --out)")
    if state.get("epoch_step") and not config.eval_only:
        problem = continuation_problem(state, plain(saved_config(config)), data_id, path)
        if problem:
            raise TrainError(problem)
    return state, path, notes


def fresh_start_problem(config: TrainConfig) -> str | None:
    """Why a run started without --resume may not use RUN_DIR (it holds another run's checkpoints),
    or None. A requeue that forgot --resume must lose nothing: such a folder is refused, unless
    --overwrite says to start afresh (`set_aside`). Runs that write no checkpoints (--eval-only,
    --synthetic-data) share a run folder freely."""
    if config.resume or config.overwrite or config.eval_only or config.synthetic_data:
        return None
    out = Path(config.out)
    found = [name for name in CHECKPOINTS if (out / name).exists()]
    if not found:
        return None
    return (f"--out {out} holds another run's checkpoints ({', '.join(found)}): continue that run with --resume "
            f"auto, or start a new one there with --overwrite (its files are moved to {out}/replaced-<time>/), "
            f"or give another --out")


def set_aside(out: str | Path) -> Path | None:
    """--overwrite: move the earlier run's files (RUN_FILES) into RUN_DIR/replaced-<UTC time>/ and
    return that folder (None when there were none). Moved, not deleted: a rename costs nothing on
    the same disk, and an --overwrite given by mistake (a requeue script) loses nothing; deleting
    the folder is the user's call."""
    out = Path(out)
    present = [out / name for name in RUN_FILES if (out / name).exists()]
    if not present:
        return None
    aside = out / time.strftime("replaced-%Y%m%dT%H%M%SZ", time.gmtime())
    n = 0
    while aside.exists():  # two --overwrite runs within a second
        n += 1
        aside = aside.with_name(f"{aside.name.split('.')[0]}.{n}")
    aside.mkdir()
    for path in present:
        path.rename(aside / path.name)
    return aside
