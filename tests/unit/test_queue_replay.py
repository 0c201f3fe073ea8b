"""The queue replay (bench/queue_replay.py) on a short day: its invariants, under both systems."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("queue_replay", ROOT / "bench" / "queue_replay.py")
assert _spec and _spec.loader
sim: Any = importlib.util.module_from_spec(_spec)
sys.modules["queue_replay"] = sim  # dataclasses look their module up
_spec.loader.exec_module(sim)

P = sim.Params(hours=2.0, heavy_backlog=10, depth=30)


@pytest.fixture(scope="module")
def day() -> list[Any]:
    works: list[Any] = sim.generate(1, P)
    assert any(w.gang for w in works) and len({w.account for w in works}) >= 3
    return works


@pytest.mark.parametrize("system", ["kube", "queue"])
def test_no_node_over_capacity_and_all_work_runs(day: list[Any], system: str) -> None:
    res = sim.simulate(day, P, system)
    assert res.max_over == 0
    assert all(w.end is not None and w.started is not None and w.started >= w.arrival for w in res.works)
    # replay the intervals: at no time does a node hold more cores than it has
    for n in range(P.nodes):
        edges = sorted([(s, w.cores) for w in res.works for s, m in zip(w.starts, w.nodes, strict=True) if m == n]
                       + [(w.end, -w.cores) for w in res.works for m in w.nodes if m == n],
                       key=lambda e: (e[0], e[1]))
        level = 0
        for _, c in edges:
            level += c
            assert level <= P.node_cpu


def test_queue_starts_every_workload_whole(day: list[Any]) -> None:
    res = sim.simulate(day, P, "queue")
    assert all(len(set(w.starts)) == 1 and len(w.starts) == w.pods for w in res.works)
    assert res.partial_gang_starts == 0


def test_kube_starts_gangs_in_parts_on_a_full_cluster() -> None:
    """The comparison means something: kube-scheduler alone does start a gang piece by piece."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 600.0, False), sim.Work(1, "b", 1.0, 2, 2, 3600.0, 600.0, True)]
    kube = sim.simulate(works, p, "kube")
    assert kube.works[1].starts == [1.0, 600.0] and kube.partial_gang_starts == 1
    queue = sim.simulate(works, p, "queue")
    assert queue.works[1].starts == [600.0, 600.0] and queue.works[1].start_by == 3600.0


def test_backfill_never_delays_a_reservation() -> None:
    """A short job fitting now starts ahead of a waiting gang; a long one that would delay it waits."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 3600.0, False),  # runs to its limit: 2 cores until 3600
             sim.Work(1, "b", 1.0, 2, 2, 3600.0, 60.0, True),  # needs all 4: reserved at 3600
             sim.Work(2, "c", 2.0, 1, 2, 7200.0, 60.0, False),  # fits now, but its limit runs past 3600
             sim.Work(3, "d", 3.0, 1, 2, 1800.0, 60.0, False)]  # fits now and ends by 3600: backfilled
    res = sim.simulate(works, p, "queue")
    assert res.works[3].starts == [3.0]
    assert res.works[1].starts == [3600.0, 3600.0]
    assert res.works[2].starts[0] >= 3600.0
