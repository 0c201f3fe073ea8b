"""The queue replay (bench/queue_replay.py) on a short day: its invariants, under both systems."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
sim: Any = load_script(ROOT / "bench" / "queue_replay.py", "queue_replay")

P = sim.Params(hours=2.0, heavy_backlog=10, depth=30)
PLACEMENTS = ["shadow", "simple", "greedy"]


@pytest.fixture(scope="module")
def day() -> list[Any]:
    works: list[Any] = sim.generate(1, P)
    assert any(w.gang for w in works) and len({w.account for w in works}) >= 3
    return works


@pytest.mark.parametrize(("system", "placement"), [("kube", "shadow")] + [("queue", p) for p in PLACEMENTS])
def test_no_node_over_capacity_and_all_work_runs(day: list[Any], system: str, placement: str) -> None:
    p = sim.Params(hours=2.0, heavy_backlog=10, depth=30, placement=placement)
    res = sim.simulate(day, p, system)
    assert res.max_over == 0
    assert all(w.end is not None and w.started is not None and w.started >= w.arrival for w in res.works)
    assert all(w.end == max(w.ends) and len(w.ends) == w.pods for w in res.works)
    # replay the intervals: at no time does a node hold more cores than it has
    for n in range(P.nodes):
        edges = sorted([(s, w.cores) for w in res.works for s, m in zip(w.starts, w.nodes, strict=True) if m == n]
                       + [(e, -w.cores) for w in res.works for e, m in zip(w.ends, w.nodes, strict=True) if m == n],
                       key=lambda e: (e[0], e[1]))
        level = 0
        for _, c in edges:
            level += c
            assert level <= P.node_cpu


@pytest.mark.parametrize("system", ["kube", "queue"])
def test_utilisation_is_the_core_seconds_the_simulation_held_and_never_above_capacity(system: str) -> None:
    """The measure over the records (each pod to its own end) is the simulation's integral; figures()
    checks it too. Before, a kube pod of a workload that is not a gang was held to the workload's last
    pod's end: the pooled 24-hour day gave kube alone 100.8 %."""
    p = sim.Params(hours=2.0, heavy_backlog=40, depth=30)  # a backlog that fills the cluster: pods start apart
    res = sim.simulate(sim.generate(1, p), p, system)
    u = sim.measures(sim.records(res), capacity=p.nodes * p.node_cpu, window=p.hours * sim.HOUR)["utilisation"]
    assert u == pytest.approx(res.alloc_window / (p.nodes * p.node_cpu * p.hours * sim.HOUR), abs=1e-9)
    assert 0 < u <= 1
    if system == "kube":  # pods of one workload that end apart: held to the last one's end, above capacity
        assert any(len(set(w.ends)) > 1 for w in res.works)
        old = [sim.Record(**{**vars(r), "ends": ()}) for r in sim.records(res)]
        assert sim.measures(old, capacity=p.nodes * p.node_cpu, window=p.hours * sim.HOUR)["utilisation"] > u


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_queue_starts_every_workload_whole(day: list[Any], placement: str) -> None:
    res = sim.simulate(day, sim.Params(hours=2.0, heavy_backlog=10, depth=30, placement=placement), "queue")
    assert all(len(set(w.starts)) == 1 and len(w.starts) == w.pods for w in res.works)
    assert res.partial_gang_starts == 0 and res.idle_window == 0.0
    assert res.bind_misses == 0  # bound on the nodes the product's placement chose (--bind planned): they fit


@pytest.mark.parametrize("bind", ["planned", "spread", "first-fit"])
def test_released_work_is_bound_where_the_placement_said_only_when_kept_there(day: list[Any], bind: str) -> None:
    """``planned`` (the product narrows every release): no release off plan, none unbound; spread
    unnarrowed (kube-scheduler's default scoring) takes other nodes, the emptiest first."""
    p = sim.Params(hours=2.0, heavy_backlog=10, depth=30, bind=bind)
    res = sim.simulate(day, p, "queue")
    assert res.max_over == 0
    if bind == "planned":
        assert res.off_plan == 0 and res.bind_misses == 0
    if bind == "spread":
        assert res.off_plan > 0


def test_spread_binds_on_the_emptiest_node_first() -> None:
    cluster = sim.Cluster(sim.Params(nodes=3, node_cpu=8))
    cluster.bind(0, 6, 1.0)
    cluster.bind(1, 2, 1.0)
    w = sim.Work(0, "a", 0.0, 3, 2, 3600.0, 60.0, True)
    assert sim._spread(cluster, w) == [2, 1, 2]  # 8 free, then 6 and 6 (the first), then 6
    assert sim._bind(cluster, w, "planned", ("n0", "n1")) == [0, 1, 1]
    assert sim._bind(cluster, w, "first-fit", ()) == [0, 1, 1]


def test_kube_pods_of_a_workload_that_is_no_gang_each_run_from_their_own_start() -> None:
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 600.0, False), sim.Work(1, "b", 1.0, 2, 2, 3600.0, 900.0, False)]
    b = sim.simulate(works, p, "kube").works[1]
    assert b.starts == [1.0, 600.0] and b.ends == [901.0, 1500.0] and b.end == 1500.0


def test_useful_utilisation_leaves_out_a_gangs_idle_pods() -> None:
    """A gang's first pod holds 2 cores idle from 1 to 600 while the second waits for room."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 600.0, False), sim.Work(1, "b", 1.0, 2, 2, 3600.0, 600.0, True)]
    kube = sim.simulate(works, p, "kube")
    assert kube.idle_window == pytest.approx(2 * 599.0)
    f = sim.figures(kube, p, sim.FairShare())
    assert f["utilisation"] - f["useful_utilisation"] == pytest.approx(2 * 599.0 / (4 * 3600))


@pytest.mark.parametrize("placement", ["shadow", "simple"])
def test_kube_starts_gangs_in_parts_on_a_full_cluster(placement: str) -> None:
    """The comparison means something: kube-scheduler alone does start a gang piece by piece."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0, placement=placement)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 600.0, False), sim.Work(1, "b", 1.0, 2, 2, 3600.0, 600.0, True)]
    kube = sim.simulate(works, p, "kube")
    assert kube.works[1].starts == [1.0, 600.0] and kube.partial_gang_starts == 1
    queue = sim.simulate(works, p, "queue")
    assert queue.works[1].starts == [600.0, 600.0] and queue.works[1].start_by == 3600.0


@pytest.mark.parametrize("placement", ["shadow", "simple"])
def test_backfill_never_delays_a_reservation(placement: str) -> None:
    """A short job fitting now starts ahead of a waiting gang; a long one that would delay it waits."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0, placement=placement)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 3600.0, False),  # runs to its limit: 2 cores until 3600
             sim.Work(1, "b", 1.0, 2, 2, 3600.0, 60.0, True),  # needs all 4: reserved at 3600
             sim.Work(2, "c", 2.0, 1, 2, 7200.0, 60.0, False),  # fits now, but its limit runs past 3600
             sim.Work(3, "d", 3.0, 1, 2, 1800.0, 60.0, False)]  # fits now and ends by 3600: backfilled
    res = sim.simulate(works, p, "queue")
    assert res.works[3].starts == [3.0]
    assert res.works[1].starts == [3600.0, 3600.0]
    assert res.works[2].starts[0] >= 3600.0


def test_share_counts_only_while_every_account_waits() -> None:
    """a's first job runs 0-100 while a's second and b's job wait (both accounts waiting: 99 s); then
    only b waits. So a holds all the core-hours of the window: +100 % of its half, b -100 %."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 4, 3600.0, 100.0, False), sim.Work(1, "a", 0.0, 1, 4, 3600.0, 100.0, False),
             sim.Work(2, "b", 1.0, 1, 4, 3600.0, 100.0, False)]
    f = sim.figures(sim.simulate(works, p, "kube"), p, sim.FairShare())
    assert f["all_waiting_h"] == pytest.approx(99 / 3600)
    assert f["share"] == {"a": 1.0, "b": 0.0}
    assert f["deviation"] == {"a": pytest.approx(1.0), "b": pytest.approx(-1.0)}
    assert f["carried_in"] == 1.0  # a's first job started at 0, before b waited


def test_offline_switches_reserve_for_the_runtime_and_queue_pod_by_pod() -> None:
    """``--reserve runtime``: the placement holds a job's room for its actual runtime (an oracle), so
    the long job that waited behind a reservation from a limit starts at once; ``--split``: a workload
    that is not a gang is queued pod by pod, its pods starting apart as room comes."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 600.0, False),  # ends at 600, limit 3600
             sim.Work(1, "b", 1.0, 2, 2, 3600.0, 60.0, True),  # needs all 4: reserved at its end
             sim.Work(2, "c", 2.0, 1, 2, 7200.0, 60.0, False)]  # fits now; its limit overlaps b's reservation
    limit = sim.simulate(works, p, "queue")
    assert limit.works[2].starts[0] >= 600.0
    oracle = sim.simulate(works, sim.Params(nodes=1, node_cpu=4, hours=1.0, reserve="runtime"), "queue")
    assert oracle.works[2].starts == [2.0]  # c's 60 s end before a's 600
    split = sim.simulate([sim.Work(0, "a", 0.0, 1, 2, 3600.0, 600.0, False),
                          sim.Work(1, "b", 1.0, 2, 2, 3600.0, 60.0, False)], replace_p(p, split=True), "queue")
    assert [w.pods for w in split.works] == [1, 1, 1] and split.works[1].starts == [1.0]
    assert split.works[2].starts == [61.0]  # when b's first pod ends; released whole, b starts at 600


def replace_p(p: Any, **kw: Any) -> Any:
    return dataclasses.replace(p, **kw)


def test_kube_alone_spread_binds_each_pod_on_the_emptiest_node() -> None:
    p = sim.Params(nodes=2, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 2, 2, 3600.0, 60.0, False)]
    assert sim.simulate(works, p, "kube").works[0].nodes == [0, 0]
    assert sim.simulate(works, replace_p(p, kube_bind="spread"), "kube").works[0].nodes == [0, 1]


def test_idle_room_counts_free_cores_while_work_waits_and_a_waiting_pod_fits(day: list[Any]) -> None:
    """kube alone binds whatever fits, so it leaves no room a waiting pod fits in; the queue may (a
    reservation ahead, a whole gang); free room while work waits is never less than that."""
    kube = sim.figures(sim.simulate(day, P, "kube"), P, sim.FairShare())
    assert kube["room_while_waiting"] == 0.0
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 2, 3600.0, 600.0, False), sim.Work(1, "b", 1.0, 2, 2, 3600.0, 600.0, True)]
    queue = sim.figures(sim.simulate(works, p, "queue"), p, sim.FairShare())
    # b (a gang of two 2-core pods) waits from 1 to 600 while 2 cores are free and one of its pods fits
    assert queue["room_while_waiting"] == pytest.approx(2 * 599 / (4 * 3600))
    assert queue["free_while_waiting"] == queue["room_while_waiting"]


def test_the_estimate_learns_no_runtime_from_work_that_failed() -> None:
    """As runtimes.finished_runs: a failed run says nothing of how long a good one takes. Had the
    failure after 60 s been learned, the job of the same program running since 0 would be expected
    (outlived at 200 s) halfway to its limit, and the one waiting behind it then; it is expected at
    the limit (no run to go by), as the to-the-limit start."""
    p = sim.Params(nodes=1, node_cpu=2, hours=1.0)
    works = [sim.Work(0, "a", 0.0, 1, 1, 3600.0, 60.0, False, program="P", fails=True),
             sim.Work(1, "a", 0.0, 1, 1, 3600.0, 1000.0, False, program="P"),
             sim.Work(2, "a", 200.0, 1, 2, 3600.0, 500.0, False, program="P")]
    res = sim.simulate(works, p, "queue")
    assert res.works[2].started == 1000.0
    assert res.works[2].to_limit == 3600.0
    assert res.works[2].expected == 3600.0
    learned = sim.simulate([dataclasses.replace(w, fails=False) for w in works], p, "queue")
    assert learned.works[2].expected == (200.0 + 3600.0) / 2


def test_the_simple_estimate_places_with_the_median_runtime_and_the_forecast_sums_the_mean() -> None:
    """As runtimes.Predictor: ``likely`` (the geometric mean of the last five runs) for start times,
    ``predict`` (the mean of the last two) for the forecast's work; clamped to the limit."""
    w = sim.Work(0, "a", 0.0, 1, 1, 3600.0, 60.0, False, program="P")
    runs = {("a", "P"): [5000.0, 600.0, 2400.0]}
    assert sim._likely(w, runs) == pytest.approx((5000.0 * 600.0 * 2400.0) ** (1 / 3))
    assert sim._predicted(w, runs) == 1500.0
    assert sim._likely(w, {("a", "P"): [5000.0]}) == 3600.0
    assert sim._likely(w, {("a", ""): [600.0, 2400.0]}) == pytest.approx(1200.0)  # the account's
    assert sim._likely(w, {}) == 3600.0
