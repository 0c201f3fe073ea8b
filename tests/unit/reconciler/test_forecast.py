"""The expected start's forecast of work that arrives and ranks ahead (forecast.py): the load of the
recent arrivals, per priority and fair-share score, the stretch of the wait, and the pass that writes
it (never after the start-by)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.unit.reconciler.reconbuild import HOUR, T0, job, pod, ts
from tests.unit.reconciler.test_queue import BATCH, INTERACTIVE, POLICY, busy, queued_job
from tests.unit.reconciler.test_shadow import node, snap, with_spec
from webhook.contract import (
    EXPECTED_START_ANNOTATION,
    EXPECTED_START_REASON_ANNOTATION,
    START_BY_ANNOTATION,
)
from webhook.reconciler.forecast import (
    MOST,
    WINDOW,
    Arrival,
    Forecast,
    arrivals,
    backfilled,
    stretched,
)
from webhook.reconciler.model import Ref
from webhook.reconciler.planner import plan
from webhook.reconciler.report import queue_rows
from webhook.reconciler.settings import Settings
from webhook.reconciler.shadow import Estimate
from webhook.units import format_time, parse_time

NOW = 1_000_000.0


def fc(*arrivals: Arrival, factors: dict[str, float] | None = None, capacity: float = 10.0) -> Forecast:
    return Forecast.of(arrivals, now=NOW, capacity=capacity, factors=factors or {}, window=1000.0)


def test_higher_priorities_rank_ahead_and_lower_ones_never() -> None:
    f = fc(Arrival(NOW - 10, 10, "a", 1000.0), Arrival(NOW - 10, 5, "a", 2000.0), Arrival(NOW - 10, 0, "a", 4000.0))
    # capacity 10 cores x 1000 s: 10,000 cpu-seconds
    assert f.load(5) == pytest.approx(0.1)  # the 10's; its own priority without fair share: not ahead
    assert f.load(0) == pytest.approx(0.3)
    assert f.load(3) == pytest.approx(0.3)  # a priority no arrival has: those above it
    assert f.load(10) == 0.0
    assert f.load(11) == 0.0
    # work no fair share orders (no account) counts by its priority alone
    f = fc(Arrival(NOW - 10, 10, None, 1000.0), Arrival(NOW - 10, 5, None, 2000.0))
    assert (f.load(3), f.load(5, 0.0), f.load(5)) == (pytest.approx(0.3), pytest.approx(0.1), pytest.approx(0.1))


def test_within_a_priority_only_accounts_whose_factor_is_above_the_score_rank_ahead() -> None:
    f = fc(Arrival(NOW - 10, 0, "light", 1000.0), Arrival(NOW - 10, 0, "heavy", 2000.0),
           Arrival(NOW - 10, 0, "new", 500.0), factors={"light": 0.9, "heavy": 0.2})
    assert f.load(0, 0.5) == pytest.approx(0.15)  # light (0.9) and new (no usage: 1.0)
    assert f.load(0, 0.95) == pytest.approx(0.05)  # only the new account
    assert f.load(0, 1.2) == 0.0  # an old workload: its age puts it ahead of every newcomer
    assert f.load(0, 0.2) == pytest.approx(0.15)  # an equal factor is no rank ahead (its own account)


def test_its_own_accounts_work_never_ranks_ahead_though_its_factor_is_a_hair_above_its_score() -> None:
    """A workload placed as it arrives has a score of its account's factor alone; that factor summed
    again for the forecast may come out a last bit higher, which must not count its account's own
    arrivals (itself among them) as ranking ahead of it."""
    f = fc(Arrival(NOW - 10, BATCH, "a", 5000.0), Arrival(NOW - 10, BATCH, "b", 2000.0),
           factors={"a": 0.5 + 1e-15, "b": 0.9})
    assert f.load(BATCH, 0.5) == pytest.approx(0.7)  # of no account: both count
    assert f.load(BATCH, 0.5, "a") == pytest.approx(0.2)
    assert f.load(BATCH, 0.95, "a") == 0.0
    assert f.load(BATCH, 0.5, "c") == pytest.approx(0.7)


def test_only_the_window_counts() -> None:
    f = fc(Arrival(NOW - 1001, 10, "a", 9000.0), Arrival(NOW - 1000, 10, "a", 1000.0),
           Arrival(NOW + 2, 10, "a", 500.0))  # stamped by a clock ahead of ours: it arrived now
    assert f.load(0) == pytest.approx(0.15)


def test_no_capacity_means_no_forecast() -> None:
    assert fc(Arrival(NOW - 10, 10, "a", 1000.0), capacity=0).load(0) == 0.0


def test_the_wait_is_stretched_by_one_over_one_minus_the_load() -> None:
    assert stretched(NOW + 600, now=NOW, load=0.25) == pytest.approx(NOW + 800)
    assert stretched(NOW + 600, now=NOW, load=0.0) == NOW + 600
    assert stretched(NOW + 600, now=NOW, load=5.0) == pytest.approx(NOW + 600 / (1 - MOST)) == NOW + 1200  # x2 at most
    assert stretched(NOW + 600, now=NOW, load=0.5, start_by=NOW + 900) == NOW + 900  # never after the promise
    assert stretched(NOW, now=NOW, load=0.5) == NOW  # starts now: nothing to stretch
    assert stretched(NOW - 5, now=NOW, load=0.5) == NOW - 5


def _cluster(*more: dict[str, Any], holder_runtime: str = "90m") -> Any:
    """n1 (4 cores) is held until +3h by its limit, +30 min as its own expected runtime says (or
    ``holder_runtime``); the queued Job needs all 4 cores. n2 (8 cores) is where arrivals run."""
    holder = busy("holder", "4", limit="4h", started=-HOUR)
    holder["metadata"].setdefault("annotations", {})["batchgate.io/expected-runtime"] = holder_runtime
    return snap(holder, queued_job("wait", cpu="4", limit="1h"), *more, nodes=[node("n1", cpu="4"), node("n2", cpu="8")])


def _written(s: Any, name: str = "wait", usage: dict[str, float] | None = None) -> dict[str, str]:
    actions = plan(s, T0, Settings(queues=POLICY), usage=usage).actions
    out = {}
    for a in actions:
        if a.target.name == name:
            out.update({k: v for k, v in (a.annotations or {}).items() if v is not None})
    return out


def _urgent(created: float, limit: str = "2h") -> dict[str, Any]:
    """An interactive pod (ranks ahead of batch work) of 8 cores on n2, created ``created`` from now."""
    p = busy("urgent", "8", node_name="n2", limit=limit, priority=INTERACTIVE, started=created)
    p["metadata"]["namespace"] = "other"
    p["metadata"]["creationTimestamp"] = ts(created)
    return p


def test_recent_work_of_a_higher_priority_makes_the_expected_start_later() -> None:
    quiet = _written(_cluster(_urgent(-7 * HOUR, limit="8h")))  # arrived before the window: no forecast
    assert parse_time(quiet[EXPECTED_START_ANNOTATION]) - T0 == pytest.approx(1800, abs=1)
    assert "later by" not in quiet[EXPECTED_START_REASON_ANNOTATION]
    busy_ = _written(_cluster(_urgent(-HOUR)))
    # 8 cores x 2 h (its limit: no runtime to go by) over 12 cores x 6 h: 2/9 of the cluster, x9/7
    assert parse_time(busy_[EXPECTED_START_ANNOTATION]) - T0 == pytest.approx(1800 * 9 / 7, abs=1)
    assert "later by x1.29" in busy_[EXPECTED_START_REASON_ANNOTATION]
    assert "22% of the cluster's cpu" in busy_[EXPECTED_START_REASON_ANNOTATION]
    assert busy_[START_BY_ANNOTATION] == quiet[START_BY_ANNOTATION]  # the promise is not the forecast's


def test_the_forecast_never_moves_the_expected_start_past_the_start_by() -> None:
    w = _written(_cluster(_urgent(-HOUR, limit="12h"), holder_runtime="3h"))  # x2 of +2h: past +3h
    assert parse_time(w[EXPECTED_START_ANNOTATION]) == parse_time(w[START_BY_ANNOTATION]) == T0 + 3 * HOUR


def test_backfilled_are_those_placed_to_start_before_work_placed_ahead_of_them() -> None:
    def e(name: str, start: float | None) -> Estimate:
        return Estimate(Ref("batch/v1", "Job", "demo", name, name), start, "")

    placed = [e("a", 10.0), e("b", 30.0), e("c", 20.0), e("unknown", None), e("d", 25.0), e("e", 30.0), e("f", 40.0)]
    assert backfilled(placed) == {"c", "d"}  # "e" starts with "b", in its turn
    assert backfilled([]) == frozenset()


def _backfill(arrival: dict[str, Any]) -> Any:
    """'small', ranked behind 'wait', fits on n3 at +20 min, before 'wait' starts (+30 min) on n1:
    backfilled, in room 'wait' cannot use. ``arrival`` runs on n2."""
    short = busy("short", "2", node_name="n3", limit="4h")
    short["metadata"].setdefault("annotations", {})["batchgate.io/expected-runtime"] = "80m"  # ends at +20 min
    holder = busy("holder", "4", limit="4h")
    holder["metadata"].setdefault("annotations", {})["batchgate.io/expected-runtime"] = "90m"
    return snap(holder, short, queued_job("wait", cpu="4", limit="1h"),
                queued_job("small", cpu="2", limit="1h", created=-HOUR / 2), arrival,
                nodes=[node("n1", cpu="4"), node("n2", cpu="8"), node("n3", cpu="2")])


def test_a_backfilled_workload_is_not_stretched_for_arrivals_of_its_priority_that_fair_share_ranks_ahead() -> None:
    """Work of another account arrived in the last hour, at batch priority, and ranks ahead of
    'demo' (which used much): 'wait', in its turn, is stretched for it; 'small' starts in room the
    work ahead cannot use and is not."""
    other = busy("other-work", "8", node_name="n2", limit="2h")
    other["metadata"]["namespace"] = "other"
    other["metadata"]["creationTimestamp"] = ts(-HOUR)
    s = _backfill(other)
    usage = {"demo": 1e6}
    small = _written(s, "small", usage=usage)
    assert parse_time(small[EXPECTED_START_ANNOTATION]) - T0 == pytest.approx(1200, abs=1)
    assert "later by" not in small[EXPECTED_START_REASON_ANNOTATION]
    wait = _written(s, usage=usage)
    assert parse_time(wait[EXPECTED_START_ANNOTATION]) - T0 > 1800 + 60
    assert "later by" in wait[EXPECTED_START_REASON_ANNOTATION]


def test_a_backfilled_workload_is_stretched_for_arrivals_of_a_higher_priority() -> None:
    small = _written(_backfill(_urgent(-HOUR)), "small")
    assert parse_time(small[EXPECTED_START_ANNOTATION]) - T0 > 1200 + 60
    assert "later by" in small[EXPECTED_START_REASON_ANNOTATION]


def test_arrivals_of_the_snapshot_count_jobs_with_their_pods_and_bare_pods() -> None:
    done = job("done", finished="Complete", annotations={"batchgate.io/time-limit": "1h"})
    done["metadata"]["creationTimestamp"] = ts(-3 * HOUR)
    ran = with_spec(pod("done-0", owner=done, phase="Succeeded"), cpu="2", priority=BATCH)  # a finished Job: its pod's
    s = _cluster(_urgent(-HOUR), queued_job("two", pods=2, cpu="3", limit="30m", created=-2 * HOUR),
                 queued_job("old", created=-7 * HOUR), done, ran)
    got = sorted((a.priority, a.account, a.work) for a in arrivals(
        s, now=T0, policy=POLICY, predictor=None, limit_of=lambda o: o.limit, window=WINDOW))
    assert got == sorted([
        (BATCH, "demo", 4 * 1.5 * HOUR),  # the holder: its own expected runtime
        (BATCH, "demo", 4 * HOUR),  # wait: its limit
        (BATCH, "demo", 2 * 3 * 0.5 * HOUR),  # two pods of 3 cores for its limit
        (INTERACTIVE, "other", 8 * 2 * HOUR),
        (BATCH, "demo", 2 * HOUR),  # the finished Job: its pod's 2 cores for its hour
    ])


def test_batchgate_queue_shows_the_same_stretched_start_never_after_the_start_by() -> None:
    def row(s: Any) -> dict[str, Any]:
        (r,) = [r for r in queue_rows(s, T0, queues=POLICY) if r["name"] == "wait"]
        return r

    r = row(_cluster(_urgent(-HOUR)))
    assert r["start"] == format_time(T0 + 1800 * 9 / 7) and "later by x1.29" in r["reason"]
    promised = _cluster(_urgent(-HOUR))
    job = promised.jobs[("demo", "wait")]
    promised = dataclasses.replace(promised, jobs={**promised.jobs, ("demo", "wait"): dataclasses.replace(
        job, start_by=format_time(T0 + 1200))})
    assert row(promised)["start"] == format_time(T0 + 1200)


# -- work of schedulers kube-scheduler does not serve (spec.kubeSchedulerProfiles) ------------------
def _elsewhere(p: dict[str, Any], scheduler: str) -> dict[str, Any]:
    p["spec"]["schedulerName"] = scheduler
    return p


def test_work_of_another_scheduler_is_no_arrival_ahead() -> None:
    """Another scheduler (Volcano, a second kube-scheduler the bundle does not list) binds its pods in its
    own order: they rank ahead of nothing kube-scheduler or the queue places. Its recent work, a bare pod
    and a Job, is left out of the arrivals; a profile the bundle lists is kube-scheduler's and counts."""
    other_job = queued_job("volcano-job", pods=2, cpu="3", limit="30m", created=-2 * HOUR)
    other_job["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    s = _cluster(_elsewhere(_urgent(-HOUR), "volcano"), other_job)

    def work(policy: Any) -> list[tuple[int, str | None, float]]:
        return sorted((a.priority, a.account, a.work) for a in arrivals(
            s, now=T0, policy=policy, predictor=None, limit_of=lambda o: o.limit, window=WINDOW))

    ours = [(BATCH, "demo", 4 * 1.5 * HOUR), (BATCH, "demo", 4 * HOUR)]  # the holder and 'wait'
    assert work(POLICY) == sorted(ours)
    profiles = dataclasses.replace(POLICY, kube_schedulers=frozenset({"default-scheduler", "volcano"}))
    assert work(profiles) == sorted([*ours, (INTERACTIVE, "other", 8 * 2 * HOUR), (BATCH, "demo", 2 * 3 * 0.5 * HOUR)])


def test_an_urgent_pod_of_another_scheduler_does_not_make_the_expected_start_later() -> None:
    w = _written(_cluster(_elsewhere(_urgent(-HOUR), "volcano")))
    assert parse_time(w[EXPECTED_START_ANNOTATION]) - T0 == pytest.approx(1800, abs=1)
    assert "later by" not in w[EXPECTED_START_REASON_ANNOTATION]
