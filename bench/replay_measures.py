"""Issue 24's measures of a replay, as pure functions over one record per workload.

bench/queue_replay.py fills a ``Record`` for each workload a system ran and calls ``measures``; the
functions here know nothing of how the day was simulated, so they are tested on hand-made records
(tests/unit/test_replay_measures.py). Every share is a fraction (0.9 = 90 %), every time seconds.

- **promise kept** (goal 100 % among the *clean*, 95 % among all): a workload keeps its promise when
  all its pods started by its first start-by (plus ``slack``, the reconciler's ``START_BY_SLACK``:
  a promise is only rewritten when it moves by more). *Clean*: given a promise, and no workload that
  arrived after it was ranked ahead of it while it waited, and no node it counted on was lost.
  *Among all*: a workload that started within ``slack`` of its arrival without a promise counts as
  kept (it needed none); one that waited without ever getting one counts as not kept. A start-by
  that moved later for an allowed reason counts as kept if the workload started by its *first* one.
  ``broken``: the workloads not kept among all, by cause: *unpromised* (waited without a promise),
  *priority* (a later arrival of a higher priority was ranked ahead of it), *fair share* (only later
  arrivals of its own priority were, ranked ahead by fair share), *clean* (none: a defect).
- **tightness**: the median of (start-by - arrival) / actual wait over the promised workloads that
  waited, beside the same for the Slurm-style *to-the-limit* start (the start computed when it was
  first seen, with every job running to its time limit). Goal: no looser (not above).
- **estimate** (the expected start when the workload was first seen, from predicted runtimes; never
  after the start-by), over the workloads that waited (started more than ``slack`` after arrival):
  *calibration*, the share that started before their estimate (goal 40-60 %; also among those
  no later arrival overtook, which no estimate made on arrival can foresee); the median absolute
  error, beside the to-the-limit start's on the same workloads (goal: at most half); the share within
  ``near`` (10 minutes) of the actual start (anchor: 75-90 %, Brown et al. 2022, ML predictors on two
  Slurm sites).
- **cost**: utilisation, the core-seconds held (a pod holds its cores from its own start to its own
  end: the workload's end unless ``ends`` says otherwise, as for kube-scheduler's pods of a workload
  that is not a gang, each computing from its own start; so kube-scheduler's half-started gangs
  count what they hold idle) within
  ``window`` over ``capacity`` x ``window``; mean bounded slowdown, mean of
  max((wait + run) / max(run, ``tau``), 1) with ``tau`` 10 s (Feitelson's usual threshold: a job of a
  second that waited a minute counts as 6, not 60); the longest wait of a gang.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TAU = 10.0  # bounded slowdown's threshold (s)
NEAR = 600.0  # "within 10 minutes"
SLACK = 60.0  # the reconciler's START_BY_SLACK


@dataclass(frozen=True)
class Record:
    """One workload as a system ran it."""

    arrival: float
    start: float  # all its pods running
    end: float
    gang: bool = False
    pieces: tuple[tuple[float, int], ...] = ()  # (a pod's start, its cores): held until its end
    ends: tuple[float, ...] = ()  # each piece's own end, where pods end apart (else every piece ends at ``end``)
    start_by: float | None = None  # its first promise (None: never given one)
    to_limit: float | None = None  # the to-the-limit start when first seen
    expected: float | None = None  # the expected start when first seen
    overtaken: bool = False  # a later arrival was ranked ahead of it while it waited, or a node was lost
    by_priority: bool = False  # of those arrivals, one of a higher priority

    @property
    def wait(self) -> float:
        return self.start - self.arrival


def _share(hits: int, n: int) -> float | None:
    return hits / n if n else None


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def kept(r: Record, slack: float = SLACK) -> bool:
    """Started by its first start-by; or, without one, on arrival."""
    if r.start_by is None:
        return r.wait <= slack
    return r.start <= r.start_by + slack


def promises(records: Sequence[Record], slack: float = SLACK) -> dict[str, Any]:
    promised = [r for r in records if r.start_by is not None]
    clean = [r for r in promised if not r.overtaken]
    return {
        "promised": len(promised),
        "promised_share": _share(len(promised), len(records)),
        "clean": len(clean),
        "kept_clean": _share(sum(kept(r, slack) for r in clean), len(clean)),
        "kept_promised": _share(sum(kept(r, slack) for r in promised), len(promised)),
        "kept_all": _share(sum(kept(r, slack) for r in records), len(records)),
        "broken_overtaken": sum(1 for r in promised if r.overtaken and not kept(r, slack)),
        "waited_unpromised": sum(1 for r in records if r.start_by is None and r.wait > slack),
    }


def broken(records: Sequence[Record], slack: float = SLACK) -> dict[str, int]:
    """The workloads not kept (among all), by cause (the module docstring's ``broken``)."""
    out = {"broken_unpromised": 0, "broken_priority": 0, "broken_fair_share": 0, "broken_clean": 0}
    for r in records:
        if kept(r, slack):
            continue
        cause = ("unpromised" if r.start_by is None else "priority" if r.by_priority
                 else "fair_share" if r.overtaken else "clean")
        out[f"broken_{cause}"] += 1
    return out


def tightness(records: Sequence[Record]) -> dict[str, Any]:
    """Median (promise - arrival) / wait, and the same for the to-the-limit start, over the promised
    workloads that waited (a ratio of 1 is exact; above 1, the promise was later than the start)."""
    waited = [r for r in records if r.start_by is not None and r.wait > 0]
    return {
        "tightness": _median([(r.start_by - r.arrival) / r.wait for r in waited]),  # type: ignore[operator]
        "tightness_to_limit": _median([(r.to_limit - r.arrival) / r.wait for r in waited if r.to_limit is not None]),
    }


def estimates(records: Sequence[Record], slack: float = SLACK, near: float = NEAR) -> dict[str, Any]:
    """Calibration, median absolute error (beside the to-the-limit start's) and the share within
    ``near``, over the workloads that waited and had both estimates."""
    rs = [r for r in records if r.wait > slack and r.expected is not None and r.to_limit is not None]
    clean = [r for r in rs if not r.overtaken]
    err = [abs(r.start - r.expected) for r in rs]  # type: ignore[operator]
    err_limit = [abs(r.start - r.to_limit) for r in rs]  # type: ignore[operator]
    return {
        "estimated": len(rs),
        "calibration": _share(sum(1 for r in rs if r.start < r.expected), len(rs)),  # type: ignore[operator]
        # the same among those no later arrival overtook: what the estimate could have known
        "calibration_clean": _share(sum(1 for r in clean if r.start < r.expected), len(clean)),  # type: ignore[operator]
        "mae": _median(err),
        "mae_to_limit": _median(err_limit),
        "within_near": _share(sum(1 for e in err if e <= near), len(err)),
        "within_near_to_limit": _share(sum(1 for e in err_limit if e <= near), len(err_limit)),
    }


def utilisation(records: Sequence[Record], capacity: float, window: float, t0: float = 0.0) -> float:
    """Core-seconds held within [t0, t0 + window) over capacity x window."""
    held = 0.0
    for r in records:
        for i, (s, cores) in enumerate(r.pieces):
            lo, hi = max(s, t0), min(r.ends[i] if r.ends else r.end, t0 + window)
            if hi > lo:
                held += cores * (hi - lo)
    return held / (capacity * window)


def bounded_slowdown(r: Record, tau: float = TAU) -> float:
    run = r.end - r.start
    return max((r.wait + run) / max(run, tau), 1.0)


def costs(records: Sequence[Record], capacity: float, window: float, tau: float = TAU) -> dict[str, Any]:
    return {
        "utilisation": utilisation(records, capacity, window),
        "mean_bounded_slowdown": statistics.fmean(bounded_slowdown(r, tau) for r in records) if records else None,
        "longest_gang_wait": max((r.wait for r in records if r.gang), default=0.0),
    }


def measures(records: Sequence[Record], *, capacity: float, window: float, tau: float = TAU,
             slack: float = SLACK, near: float = NEAR) -> dict[str, Any]:
    """Every measure above, one flat dict."""
    return {**promises(records, slack), **broken(records, slack), **tightness(records), **estimates(records, slack, near),
            **costs(records, capacity, window, tau)}


def pooled(rows: Sequence[dict[str, Any]], key: str) -> tuple[float, float, float] | None:
    """Mean, lowest and highest of one measure over rows (seeds); None where no row has it."""
    xs = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return (statistics.fmean(xs), min(xs), max(xs)) if xs else None
