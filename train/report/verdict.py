"""Is data loading the bottleneck? One line, computed from what a run or a benchmark measured.

The training loop measures the time it spends blocked in the loader's ``next()`` (data-wait). If
the loop waits a fraction ``w`` of its wall time, the model alone needs ``1 - w`` of it, so the
loader must deliver ``1 / (1 - w)`` times faster for the wait to vanish. A benchmark instead knows
the loader's rate ``r`` and a target ``t`` (e.g. the synthetic-data ceiling): needed = ``t / r``.
Loader throughput scales about linearly with decoding workers until the cores run out, so the
suggested worker count is the current one times the factor (rounded up), capped by the cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DATA_BOUND_WAIT = 0.05   # below 5 % data-wait the loader is not what limits the run
HEADROOM = 1.1           # ask for 10 % more loader throughput than the bare minimum


@dataclass(frozen=True)
class Verdict:
    bound: str                     # "data-bound", "compute-bound" or "unknown"
    wait_fraction: float | None    # time the consumer waited for data / wall time
    speedup_needed: float | None   # loader throughput needed / what it delivers (>= 1 when data-bound)
    workers: int | None            # workers now
    workers_needed: int | None     # suggested workers
    line: str                      # the one-line verdict

    def as_dict(self) -> dict:
        return dict(bound=self.bound, wait_fraction=self.wait_fraction, speedup_needed=self.speedup_needed,
                    workers=self.workers, workers_needed=self.workers_needed, line=self.line)


def _workers_hint(workers: int | None, speedup: float, cores: int | None,
                  decoder: str | None = None) -> tuple[int | None, str]:
    if not workers:
        return None, "add loader workers, or store the shards at a lower resolution"
    needed = math.ceil(workers * speedup * HEADROOM)
    if cores and needed > cores:
        # advise only what would change something: not the decoder already in use (or not known)
        other_decoder = ", use --decoder turbo" if decoder not in (None, "turbo") else ""
        return needed, (f"more workers than the {cores} cores can give ({needed} needed): store the shards at a "
                        f"lower resolution (prepare-shards --resize){other_decoder}, or --gpu-decode")
    return needed, f"raise --workers from {workers} to ~{needed}, or store at lower resolution"


def from_wait(wait_fraction: float | None, *, workers: int | None = None, cores: int | None = None) -> Verdict:
    """Verdict from the training loop's data-wait fraction (0..1)."""
    if wait_fraction is None or not math.isfinite(wait_fraction):
        return Verdict("unknown", None, None, workers, None, "unknown: no data-wait measured yet")
    w = min(max(wait_fraction, 0.0), 0.999)
    if w < DATA_BOUND_WAIT:
        return Verdict("compute-bound", w, 1.0, workers, workers,
                       f"compute-bound: data-wait {100 * w:.1f} % (the loader keeps up)")
    speedup = 1 / (1 - w)
    needed, hint = _workers_hint(workers, speedup, cores)
    return Verdict("data-bound", w, speedup, workers, needed,
                   f"data-bound: the training loop waited {100 * w:.0f} % of the time; ~{speedup:.1f}x more "
                   f"loader throughput needed — {hint}")


def from_rates(img_per_s: float | None, target_img_per_s: float | None, *, workers: int | None = None,
               cores: int | None = None, decoder: str | None = None) -> Verdict:
    """Verdict from a loader's measured rate and the rate the model could consume (both img/s);
    ``decoder``: the one that rate was measured with (the advice names another only then)."""
    if not img_per_s or not target_img_per_s:
        return Verdict("unknown", None, None, workers, None, "unknown: no rate or no target to compare")
    speedup = target_img_per_s / img_per_s
    if speedup <= 1 / (1 - DATA_BOUND_WAIT):
        return Verdict("compute-bound", 0.0, speedup, workers, workers,
                       f"compute-bound: the loader gives {img_per_s:,.0f} img/s, "
                       f"{img_per_s / target_img_per_s:.2f}x the target {target_img_per_s:,.0f} img/s")
    needed, hint = _workers_hint(workers, speedup, cores, decoder)
    return Verdict("data-bound", 1 - 1 / speedup, speedup, workers, needed,
                   f"data-bound: the loader gives {img_per_s:,.0f} img/s of the {target_img_per_s:,.0f} needed; "
                   f"~{speedup:.1f}x more loader throughput needed — {hint}")


def for_run(wait_fraction: float | None, *, real_img_per_s: float | None = None,
            ceiling_img_per_s: float | None = None, workers: int | None = None, cores: int | None = None) -> Verdict:
    """A training run's verdict: from its loader efficiency (real ÷ synthetic-data ceiling) when the
    ceiling was measured, the direct comparison; else from the loop's data-wait."""
    if real_img_per_s and ceiling_img_per_s:
        return from_rates(real_img_per_s, ceiling_img_per_s, workers=workers, cores=cores)
    return from_wait(wait_fraction, workers=workers, cores=cores)


def from_metrics(records: list[dict], *, workers: int | None = None, cores: int | None = None) -> Verdict:
    """Verdict of a run from its metrics.jsonl records: the same line the trainer printed at its end.

    With an ``efficiency`` record (a measured ceiling): real vs ceiling rates. Otherwise the last
    epoch's data-wait; for a run still in its first epoch, the mean of its intervals after the
    first (worker start-up would read as data-wait)."""
    efficiency = [r for r in records if r.get("kind") == "efficiency" and r.get("ceiling_img_per_s")]
    if efficiency:
        e = efficiency[-1]
        return for_run(None, real_img_per_s=e.get("real_img_per_s"), ceiling_img_per_s=e["ceiling_img_per_s"],
                       workers=workers, cores=cores)
    epochs = [r for r in records if r.get("kind") == "epoch" and r.get("data_wait_fraction") is not None]
    if epochs:
        return from_wait(epochs[-1]["data_wait_fraction"], workers=workers, cores=cores)
    intervals = [r["data_wait_fraction"] for r in records
                 if r.get("kind") == "train_interval" and r.get("data_wait_fraction") is not None]
    steady = intervals[1:] or intervals
    return from_wait(sum(steady) / len(steady) if steady else None, workers=workers, cores=cores)
