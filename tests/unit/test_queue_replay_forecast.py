"""The queue replay's expected start applies the product's forecast of arrivals (forecast.py) from
its own arrivals: the load that ranks ahead, the stretch, the cap at the start-by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
sim: Any = load_script(ROOT / "bench" / "queue_replay.py", "queue_replay")


def _day(b_limit: float = 3600.0) -> list[Any]:
    """One node of 4 cores, every job needing all of it: ``a`` ran a job of 100 s (its runs
    predict 100 s) and runs another from 100; ``u``'s job, of a higher priority, arrives at 110
    (no runs: its hour); ``b``'s, of ``a``'s priority, at 120."""
    return [sim.Work(0, "a", 0.0, 1, 4, 3600.0, 100.0, False), sim.Work(1, "a", 100.0, 1, 4, 3600.0, 1800.0, False),
            sim.Work(2, "u", 110.0, 1, 4, 3600.0, 600.0, False, prio=1),
            sim.Work(3, "b", 120.0, 1, 4, b_limit, 600.0, False)]


def _b(placement: str, **kw: Any) -> Any:
    return sim.simulate(_day(), sim.Params(nodes=1, node_cpu=4, hours=1.0, placement=placement, **kw), "queue").works[3]


@pytest.mark.parametrize("placement", ["shadow", "simple"])
def test_the_expected_start_counts_the_higher_priority_arrival_and_stays_by_the_start_by(placement: str) -> None:
    b = _b(placement)
    # u's 4 cores x 1 h of the node's 4 cores x 6 h rank ahead of b; a's work does not (a has used
    # the node: its factor is below b's)
    assert b.load_ahead == pytest.approx(1 / 6)
    assert b.raw_expected == 3800.0  # a's job is predicted to end at 200, u's hour then
    assert b.expected == pytest.approx(120 + 3680 * 1.2)  # the wait stretched by 1 / (1 - 1/6)
    assert b.start_by == 7300.0 > b.expected  # to the limits: a's at 3700, u's hour
    quiet = _b(placement, forecast=0.0)
    assert quiet.load_ahead == 0.0 and quiet.expected == 3800.0


def test_the_stretch_never_passes_the_start_by() -> None:
    """u's 12 h of limit over 6 h of the node: the stretch is 2 (at most), past b's start-by."""
    works = _day()
    works[2] = sim.Work(2, "u", 110.0, 1, 4, 12 * 3600.0, 600.0, False, prio=1)
    b = sim.simulate(works, sim.Params(nodes=1, node_cpu=4, hours=1.0, placement="simple"), "queue").works[3]
    assert b.load_ahead > 0.5 and b.raw_expected == 200 + 12 * 3600.0
    assert b.expected == b.start_by == 3700 + 12 * 3600.0
