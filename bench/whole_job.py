"""Table 5 of bench/benchmarks.py: the whole job's CPU per image, from the figures of its tables 2 and 4.

A whole job is the offline stages once (their marginal images per CPU-second, table 4) plus the
epochs of a schedule (the loader's images per CPU-second at each epoch's resolution, table 2):
ours over our JPEG shards (prepare), ours over the pixel form (prepare + derive), and FFCV's writer
+ loader in each of its write settings. The schedules: 16 epochs at 224 px, and each FFCV recipe's
own resolution per epoch, as the trainer runs it (``run_resolution`` of the recipe's config:
ffcv-imagenet's min_res -> max_res ramp), so nothing here restates a recipe. No figure, no sum:
a missing rate gives None, never an estimate.
"""

from __future__ import annotations

from collections import Counter

from imagenet_shards.train.bench.peers import FFCV_WRITES, PEERS, describe_write

EPOCHS = 16
RECIPES = ("ffcv-rn50-16", "ffcv-rn18-16")  # ffcv-imagenet's 16-epoch schedules (train/recipes/ffcv.py)
TARGET_RECIPE, TARGET_WRITE, TARGET_RATIO = "ffcv-rn18-16", "rn18", 1.5  # issue 32's whole-job target
PIXEL_SIDE = 400  # the pixel form's max side: FFCV rn18's (peers.FFCV_WRITES["rn18"])
PIXEL_LABEL = f"yuv420, {PIXEL_SIDE} px"  # compare()'s forms label: the row is "imagenet-shards (LABEL)"
DIRECT_LABEL = f"{PIXEL_LABEL}, from the archives"  # the set prepare --pixels writes (compare()'s forms label)
JPEG_ROW, PIXEL_ROW = "imagenet-shards (turbo)", f"imagenet-shards ({PIXEL_LABEL})"
DIRECT_LOADER_ROW = f"imagenet-shards ({DIRECT_LABEL})"
PREPARE_ROW = "imagenet-shards prepare, 1 worker"
DERIVE_ROW = f"imagenet-shards derive, 1 worker (JPEG shards -> {PIXEL_LABEL})"
DIRECT_ROW = f"imagenet-shards prepare --pixels, 1 worker (archives -> {PIXEL_LABEL})"
OURS_JPEG, OURS_PIXEL = "imagenet-shards (JPEG shards)", f"imagenet-shards, pixel form ({PIXEL_LABEL})"
OURS_DIRECT = f"imagenet-shards, pixel form from the archives ({PIXEL_LABEL})"
OURS = (OURS_JPEG, OURS_PIXEL, OURS_DIRECT)  # table 5's "÷ ours" columns, in contenders() order
FFCV_ROW = {p.write: p.name for p in PEERS if p.write}


def recipe_schedule(name: str) -> tuple[tuple[int, int], ...]:
    """((resolution, epochs), ...) of recipe ``name`` in the order they run, from the trainer's own
    per-epoch resolution of the recipe's config."""
    from imagenet_shards.train.trainer.cli import config_from_argv
    from imagenet_shards.train.trainer.schedule import run_resolution

    config, _, _ = config_from_argv(["--recipe", name, "--show"])
    return tuple(Counter(run_resolution(config, e) for e in range(config.epochs)).items())


def schedules() -> dict[str, dict]:
    """Table 5's columns: label -> {"plan": ((res, epochs), ...), "recipes": names}; recipes whose
    schedules are the same share one column."""
    out = {f"{EPOCHS} epochs at 224 px": {"plan": ((224, EPOCHS),), "recipes": ()}}
    by_plan: dict[tuple, list[str]] = {}
    for name in RECIPES:
        by_plan.setdefault(recipe_schedule(name), []).append(name)
    for plan, names in by_plan.items():
        out[f"{' = '.join(names)} schedule ({' + '.join(f'{n} x {r} px' for r, n in plan)})"] = {
            "plan": plan, "recipes": tuple(names)}
    return out


def job_ms(offline: list[float | None], loader: dict[int, float | None], plan) -> float | None:
    """CPU ms per image of a whole job: 1000 / each offline stage's images per CPU-second, plus
    1000 x epochs / the loader's images per CPU-second at each (res, epochs) of ``plan``; None when
    any of those figures is missing."""
    rates = list(offline) + [loader.get(res) for res, _ in plan]
    if not all(rates):
        return None
    return sum(1000 / r for r in offline) + sum(1000 * n / loader[res] for res, n in plan)


def contenders() -> list[tuple[str, tuple[str, ...], str]]:
    """(name, its offline stages' rows in table 4, its loader's row in table 2) of every whole job; the
    pixel form from the archives (prepare --pixels) is read from its own set (the derived set's size rule)."""
    out = [(OURS_JPEG, (PREPARE_ROW,), JPEG_ROW), (OURS_PIXEL, (PREPARE_ROW, DERIVE_ROW), PIXEL_ROW),
           (OURS_DIRECT, (DIRECT_ROW,), DIRECT_LOADER_ROW)]
    return out + [(FFCV_ROW[w], (f"FFCV DatasetWriter, 1 worker ({describe_write(w)})",), FFCV_ROW[w])
                  for w in FFCV_WRITES]


def whole_job(loader: dict, prepare: list[dict], columns: dict[str, dict]) -> list[dict]:
    """Rows {name, offline_ms, ms: {column: CPU ms per image}, over: {column: {ours' name: this ÷
    ours}}} from table 2's rows per resolution (``loader``), table 4's rows (``prepare``) and
    ``columns`` (``schedules()``)."""
    offline_rate = {r["name"]: r.get("marginal_img_cpu_s") for r in prepare}
    rows = []
    for name, stages, loader_row in contenders():
        rates = {res: next((r.get("images_per_cpu_s") for r in rows_ if r["name"] == loader_row), None)
                 for res, rows_ in loader.items() if isinstance(res, int)}
        offline = [offline_rate.get(s) for s in stages]
        rows.append({"name": name, "offline_ms": job_ms(offline, {}, ()),
                     "ms": {label: job_ms(offline, rates, c["plan"]) for label, c in columns.items()}})
    ours = rows[:len(OURS)]
    for row in rows:
        row["over"] = {label: {o["name"]: row["ms"][label] / o["ms"][label] if row["ms"][label] and o["ms"][label]
                               else None for o in ours} for label in columns}
    return rows


def target(rows: list[dict], columns: dict[str, dict]) -> str:
    """Issue 32's whole-job target as one line: FFCV's rn18 write ÷ our pixel form (made from the archives
    in one pass, and by prepare + derive) on ffcv-rn18-16's schedule, ≥ ×1.5."""
    label = next(k for k, c in columns.items() if TARGET_RECIPE in c["recipes"])
    theirs = next(r for r in rows if r["name"] == FFCV_ROW[TARGET_WRITE])
    direct, derived = (theirs["over"][label][o] for o in (OURS_DIRECT, OURS_PIXEL))
    head = (f"**Target (issue 32): the whole job on {TARGET_RECIPE}'s schedule, FFCV rn18 write (writer + "
            f"{EPOCHS} epochs) ÷ ours, pixel form (prepare --pixels + {EPOCHS} epochs) ≥ ×{TARGET_RATIO}:")
    if direct is None:
        return f"{head} not measured** (a row of tables 2 or 4 it needs has no figure)."
    return (f"{head} {'met' if direct >= TARGET_RATIO else 'not met'}, ×{direct:.2f}** in this run "
            f"(by prepare + derive + {EPOCHS} epochs: ×{fmt(derived, '.2f')}).")


def fmt(v, spec=",.0f") -> str:
    """``v`` formatted, or "—" for a figure that was not measured (the tables' cells)."""
    return "—" if v is None else format(v, spec)


def whole_md(rows: list[dict], columns: dict[str, dict]) -> list[str]:
    """Table 5 as markdown, then the target line."""
    head, rule = ["contender", "offline stages, ms CPU per image"], ["---", "---:"]
    for label in columns:
        head += [f"+ {label}, ms", "÷ ours JPEG", "÷ ours pixel", "÷ ours pixel from the archives"]
        rule += ["---:"] * 4
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    for r in rows:
        cells = [r["name"], fmt(r["offline_ms"], ".2f")]
        for label in columns:
            cells += [fmt(r["ms"][label], ".1f")] + [fmt(r["over"][label][o], ".2f") for o in OURS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", target(rows, columns)]
