"""The shadow schedule (expected start times) and the estimates it writes; a fake clock."""

from __future__ import annotations

import bisect
import random
from typing import Any

import pytest

from tests.unit.reconciler.reconbuild import HOUR, T0, job, pod, ts
from webhook.contract import EXPECTED_START_ANNOTATION
from webhook.reconciler import shadow
from webhook.reconciler.expected import plan_expected
from webhook.reconciler.model import NodeView, Snapshot, job_view, node_view, pod_view
from webhook.reconciler.planner import effective_limit, plan
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.reconciler.shadow import shadow_schedule
from webhook.units import parse_time
from webhook.windows import parse_window

S = Settings()
INF = float("inf")


def node(name: str, cpu: str = "4", mem: str = "16Gi", *, labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None) -> NodeView:
    return node_view({"metadata": {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/hostname": name,
                                                                                   **(labels or {})}},
                      "spec": {"taints": taints} if taints else {},
                      "status": {"allocatable": {"cpu": cpu, "memory": mem},
                                 "conditions": [{"type": "Ready", "status": "True"}]}})


def with_spec(p: dict[str, Any], *, cpu: str = "1", mem: str = "1Gi", priority: int = 0, created: float = -HOUR,
              **spec: Any) -> dict[str, Any]:
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": mem}}
    p["spec"]["priority"] = priority
    p["spec"].update(spec)
    p["metadata"]["creationTimestamp"] = ts(created)
    return p


def running(name: str, node_name: str, *, limit: str | None, started: float = -HOUR, **kw: Any) -> dict[str, Any]:
    ann = {"batchgate.io/time-limit": limit} if limit else None
    return with_spec(pod(name, node=node_name, started=started, annotations=ann), **kw)


def waiting(name: str, limit: str | None = "1h", **kw: Any) -> dict[str, Any]:
    ann = {"batchgate.io/time-limit": limit} if limit else None
    return with_spec(pod(name, phase="Pending", node="", started=None, annotations=ann), **kw)


def snap(*objs: dict[str, Any], nodes: list[NodeView]) -> Snapshot:
    return Snapshot.of(pods=[pod_view(o) for o in objs if o["kind"] == "Pod"],
                       jobs=[job_view(o) for o in objs if o["kind"] == "Job"], nodes=nodes)


def starts(s: Snapshot, windows: list[Any] = ()) -> dict[str, float | str | None]:  # type: ignore[assignment]
    out: dict[str, float | str | None] = {}
    for e in shadow_schedule(s, T0, windows):
        out[e.workload.name] = (e.start - T0) if e.start is not None else ("never: " if e.never else "") + e.reason
    return out


def test_running_work_frees_its_node_at_its_deadline_and_pending_work_queues_by_priority_then_age() -> None:
    s = snap(running("r1", "n1", limit="2h", cpu="4"),  # started an hour ago: frees n1 at +1h
             waiting("old", created=-3 * HOUR, cpu="4"),
             waiting("urgent", priority=100, created=-60, cpu="4"),
             waiting("young", created=-2 * HOUR, cpu="4"),
             nodes=[node("n1")])
    assert starts(s) == {"urgent": HOUR, "old": 2 * HOUR, "young": 3 * HOUR}
    est = {e.workload.name: e for e in shadow_schedule(s, T0, [])}
    assert [est[n].position for n in ("urgent", "old", "young")] == [1, 2, 3]


def test_work_that_fits_now_starts_now_and_small_work_shares_a_node() -> None:
    s = snap(running("r1", "n1", limit="2h", cpu="2"), waiting("a", cpu="1"), waiting("b", cpu="1", created=-60),
             nodes=[node("n1")])
    assert starts(s) == {"a": 0, "b": 0}


def test_node_selectors_taints_and_never_fitting_work_are_named() -> None:
    gpu = node("g1", labels={"pool": "gpu"}, taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}])
    s = snap(waiting("gpu-ok", nodeSelector={"pool": "gpu"},
                     tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]),
             waiting("gpu-untolerated", nodeSelector={"pool": "gpu"}),
             waiting("huge", cpu="64"),
             waiting("nowhere", nodeSelector={"pool": "tpu"}),
             nodes=[gpu, node("n1")])
    got = starts(s)
    assert got["gpu-ok"] == 0
    assert got["gpu-untolerated"] == got["nowhere"] == \
        "never: no node matches its node selector, node affinity and tolerations"
    assert got["huge"] == ("never: each pod asks for cpu 64, memory 1Gi; the largest node it may use (n1) has "
                           "cpu 4, memory 16Gi")


def test_work_without_a_time_limit_holds_its_node_for_good() -> None:
    s = snap(running("forever", "n1", limit=None, cpu="4"), waiting("w", cpu="4"), nodes=[node("n1")])
    assert starts(s) == {"w": "waits for work without a time limit on every node it may use"}


def test_a_pod_being_deleted_holds_its_room_to_the_end_of_its_grace_period_and_a_little_past_it() -> None:
    def deleted(name: str, node_name: str, at: float) -> dict[str, Any]:
        p = running(name, node_name, limit="2h", cpu="4")  # by its limit, n1 would be free at +1h
        p["metadata"]["deletionTimestamp"] = ts(at)
        return p

    long_grace = snap(deleted("slow", "n1", 600), waiting("w", cpu="4"), nodes=[node("n1")])
    assert starts(long_grace) == {"w": 600}  # a 10-minute grace period: its room for 10 minutes
    short_grace = snap(deleted("quick", "n1", 5), waiting("w", cpu="4"), nodes=[node("n1")])
    over = snap(deleted("kept", "n1", -600), waiting("w", cpu="4"), nodes=[node("n1")])
    assert starts(short_grace) == starts(over) == {"w": shadow.DELETING_ALLOWANCE}  # a node may keep it past


def test_windows_block_their_nodes_and_long_work_does_not_start_before_them() -> None:
    w, _ = parse_window({"metadata": {"name": "fw"}, "spec": {"start": ts(2 * HOUR), "end": ts(3 * HOUR),
                                                              "nodes": ["n1"]}})
    s = snap(waiting("short", limit="1h", cpu="4"), waiting("long", limit="4h", cpu="4", created=-60),
             nodes=[node("n1")])
    got = starts(s, [w])
    assert got["short"] == 0  # 1h + 5m margin ends before the window
    assert got["long"] == 3 * HOUR  # after the window ends


def test_a_gang_starts_all_together() -> None:
    j = job("mpi", uid="uid-mpi", annotations={"batchgate.io/time-limit": "1h"})
    members = [with_spec(pod(f"mpi-{i}", owner=j, phase="Pending", node="", started=None,
                             labels={"batchgate.io/pod-group": "mpi", "batchgate.io/pod-group-size": "3"}), cpu="3")
               for i in range(3)]
    s = snap(j, *members, running("r1", "n1", limit="2h", cpu="4"), nodes=[node("n1"), node("n2"), node("n3")])
    (e,) = shadow_schedule(s, T0, [])
    assert (e.workload.kind, e.workload.name, e.start, e.pods) == ("Job", "mpi", T0 + HOUR, 3)


def test_a_gang_waits_for_room_on_a_node_that_has_room_for_part_of_it() -> None:
    """Room for one of its pods now, for both when r1's limit runs out: the group's start is then (the
    search once stepped a second at a time past the time one pod fits, and gave up before)."""
    j = job("mpi", uid="uid-mpi", annotations={"batchgate.io/time-limit": "1h"})
    members = [with_spec(pod(f"mpi-{i}", owner=j, phase="Pending", node="", started=None,
                             labels={"batchgate.io/pod-group": "mpi", "batchgate.io/pod-group-size": "2"}), cpu="2")
               for i in range(2)]
    s = snap(j, *members, running("r1", "n1", limit="2h", cpu="2"), nodes=[node("n1")])
    (e,) = shadow_schedule(s, T0, [])
    assert (e.workload.name, e.start) == ("mpi", T0 + HOUR)


def test_estimates_are_written_once_and_moves_over_five_minutes_are_told() -> None:
    s = snap(running("r1", "n1", limit="2h", cpu="4"), waiting("w", cpu="4"), nodes=[node("n1")])
    (a,) = plan_expected(s, shadow_schedule(s, T0, []), S)
    assert (a.reason, a.annotations[EXPECTED_START_ANNOTATION]) == ("ExpectedStart", ts(HOUR))  # type: ignore[index]
    w2 = waiting("w", cpu="4")
    w2["metadata"].setdefault("annotations", {})[EXPECTED_START_ANNOTATION] = ts(HOUR - 120)  # within 5 minutes: kept
    s2 = snap(running("r1", "n1", limit="2h", cpu="4"), w2, nodes=[node("n1")])
    assert plan_expected(s2, shadow_schedule(s2, T0, []), S) == []
    w2["metadata"]["annotations"][EXPECTED_START_ANNOTATION] = ts(3 * HOUR)
    s3 = snap(running("r1", "n1", limit="2h", cpu="4"), w2, nodes=[node("n1")])
    (moved,) = plan_expected(s3, shadow_schedule(s3, T0, []), S)
    assert moved.reason == "ExpectedStartMoved" and f"(was {ts(3 * HOUR)})" in moved.message


def test_never_fitting_work_gets_a_warning_and_started_work_loses_its_estimate() -> None:
    huge = waiting("huge", cpu="64")
    gone = running("started", "n1", limit="1h", cpu="1")
    gone["metadata"].setdefault("annotations", {})[EXPECTED_START_ANNOTATION] = ts(0)
    s = snap(huge, gone, nodes=[node("n1")])
    actions = {a.target.name: a for a in plan_expected(s, shadow_schedule(s, T0, []), S)}
    assert actions["huge"].reason == "NeverFits" and actions["huge"].event_type == "Warning"
    assert actions["huge"].annotations == {EXPECTED_START_ANNOTATION: "unknown", "batchgate.io/expected-start-reason": (
        "each pod asks for cpu 64, memory 1Gi; the largest node it may use (n1) has cpu 4, memory 16Gi")}
    assert actions["started"].quiet and actions["started"].annotations[EXPECTED_START_ANNOTATION] is None  # type: ignore[index]


# -- the index of earliest starts: the same answers as asking every node --------------------
def _nodes(rng: random.Random, log: list[Any]) -> list[Any]:
    out = []
    for i in range(rng.randint(1, 12)):
        blocked = sorted((s, s + rng.choice((600.0, 3600.0))) for s in
                         (T0 + rng.uniform(0, 6 * HOUR) for _ in range(rng.randint(0, 2))))
        n = shadow._Node(f"n{i}", rng.choice((4000, 8000)), 2**34, {}, (), blocked)
        for _ in range(rng.randint(0, 6)):
            n.reserve(T0, T0 + rng.choice((600.0, 1800.0, 3600.0, float("inf"))), rng.choice((1000, 2000)), 2**30)
        n.log = log
        out.append(n)
    return out


def by_sweep(node: Any, t0: float, duration: float, cpu: int, mem: int, margin: float,
             before: float = INF, hold: float | None = None) -> float | None:
    """``_Node.earliest`` as it was before it read the stretches with room (``_Node.free``): a sweep
    over the steps of usage, candidate by candidate. The reference its answers are checked against."""
    if hold is None:
        hold = duration
    if cpu > node.cpu or mem > node.mem:
        return None
    steps = node.steps()
    n = len(steps)
    free_cpu, free_mem = node.cpu - cpu, node.mem - mem
    k = bisect.bisect_right(steps, (t0, INF, INF))
    t, uc, um = (t0, steps[k - 1][1], steps[k - 1][2]) if k > 0 else (t0, 0, 0)
    limit = min(before, t0 + shadow.HORIZON)
    while t < limit:
        if uc <= free_cpu and um <= free_mem:
            until = t + duration
            clash = 0.0
            for ws, we in node.blocked:
                if ws < t + hold + margin and t < we:
                    clash = we
                    break
            if clash:
                if clash == INF:
                    return None
                while k < n and steps[k][0] <= clash:  # usage at the window's end
                    uc, um = steps[k][1], steps[k][2]
                    k += 1
                t = clash
                continue
            q = k
            while q < n and steps[q][0] < until:
                if steps[q][1] > free_cpu or steps[q][2] > free_mem:
                    break
                q += 1
            else:
                return t
            k = q + 1  # start again after the busy stretch at q
        if k >= n:
            return None  # the usage from here on stays what it is
        t, uc, um = steps[k]
        k += 1
    return None


@pytest.mark.parametrize("seed", range(200))
def test_the_earliest_start_read_from_the_stretches_with_room_is_the_sweeps(seed: int) -> None:
    rng = random.Random(seed)
    blocked = sorted((s, s + rng.choice((0.0, 600.0, 3600.0, INF))) for s in
                     (T0 + rng.choice((-600.0, 0.0, 1800.0, rng.uniform(0, 8 * HOUR))) for _ in range(rng.choice((0, 1, 2, 3)))))
    n = shadow._Node("n", rng.choice((2000, 4000, 8000)), rng.choice((2**32, 2**34)), {}, (), blocked)
    starts = (0.0, 0.0, 600.0, 1800.0, 3600.0, 2 * HOUR)
    for _ in range(rng.randint(0, 10)):
        start = T0 + rng.choice((*starts, rng.uniform(-HOUR, 6 * HOUR)))
        n.reserve(start, start + rng.choice((0.0, 600.0, 1800.0, 3600.0, INF)), rng.choice((0, 500, 1000, 2000)),
                  rng.choice((0, 2**30, 2**31)))
        for _ in range(rng.randint(0, 6)):  # between reservations too: what ``free`` kept must follow them
            t0 = T0 + rng.choice((-HOUR, *starts, rng.uniform(0, 8 * HOUR), 70 * 86400.0))
            cpu, mem = rng.choice((0, 500, 1000, 2000, 3000, 9000)), rng.choice((0, 2**29, 2**31, 2**35))
            duration = rng.choice((0.0, 600.0, 1800.0, 3600.0, 3 * HOUR, INF))
            hold = rng.choice((None, 0.0, duration, 4 * HOUR, INF))
            margin, before = rng.choice((0.0, 300.0)), rng.choice((INF, t0 + 1, t0 + HOUR))
            assert (n.earliest(t0, duration, cpu, mem, margin, before, hold)
                    == by_sweep(n, t0, duration, cpu, mem, margin, before, hold))


def _scan(nodes: list[Any], duration: float, cpu: int) -> tuple[float, str] | None:
    best: tuple[float, str] | None = None
    for n in nodes:
        t = by_sweep(n, T0, duration, cpu, 2**30, 300.0)
        if t is not None and (best is None or t < best[0]):
            best = (t, n.name)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_index_of_earliest_starts_answers_as_a_scan_of_every_node_does(seed: int) -> None:
    rng = random.Random(seed)
    log: list[Any] = []
    nodes = _nodes(rng, log)
    shapes = [(rng.choice((1800.0, 3600.0, 7200.0)), rng.choice((1000, 2000, 4000))) for _ in range(3)]
    indexes = {sh: shadow._Earliest(nodes, log, T0, sh[0], sh[1], 2**30, 300.0) for sh in shapes}
    for _ in range(30):
        duration, cpu = sh = rng.choice(shapes)
        got = indexes[sh].best()
        assert (None if got is None else (got[0], got[1].name)) == _scan(nodes, duration, cpu)
        assert indexes[sh].all_times() == [by_sweep(n, T0, duration, cpu, 2**30, 300.0) for n in nodes]
        if got is None:
            continue
        t, n = got
        if rng.random() < 0.3:  # a gang's try that is taken back leaves no trace
            mark = len(log)
            other = rng.choice(nodes)
            other.reserve(t, t + duration, cpu, 2**30, tentative=True)
            other.unreserve()
            del log[mark:]
        n.reserve(t, t + duration, cpu, 2**30)


def test_a_reservation_taken_back_makes_the_index_ask_its_node_at_once() -> None:
    """A node's time in the index is a lower bound only while reservations are added: one taken
    back (``unreserve``, told through the log) can make room sooner, so the index asks the node
    again before it answers ``lowest``, which a gang's placement tries first."""
    log: list[Any] = []
    n = shadow._Node("n", 4000, 2**34, {}, (), [])
    n.log = log
    index = shadow._Earliest([n], log, T0, HOUR, 4000, 2**30, 300.0)
    assert index.best() == (T0, n)
    n.reserve(T0, T0 + 2 * HOUR, 4000, 2**30, tentative=True)
    assert index.best() == (T0 + 2 * HOUR, n) and index.lowest() == T0 + 2 * HOUR
    n.unreserve()
    assert index.lowest() == T0
    assert index.fit(T0, 1) == [(n, 1)]


@pytest.mark.parametrize("seed", range(20))
def test_a_reservation_added_to_the_steps_gives_the_steps_built_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    n = shadow._Node("n", 8000, 2**34, {}, (), [])
    for _ in range(25):
        start = T0 + rng.choice((0, 600, 1200, 3600))
        end = rng.choice((start, start + 600, start + 3600, float("inf")))
        tentative = rng.random() < 0.3
        n.steps()
        n.reserve(start, end, rng.choice((500, 1000)), 2**20, tentative=tentative)
        incremental = n.steps()
        n._steps = None
        assert incremental == n.steps()
        if tentative and rng.random() < 0.5:
            n.unreserve()
            after_undo = n.steps()
            n._steps = None
            assert after_undo == n.steps()
        n.keep()


# -- the limit the reconciler enforces: the admission record and the recorded queue's maximum ------
def _expected(s: Snapshot, settings: Settings) -> dict[str, float | str]:
    """What a planning pass writes as batchgate.io/expected-start, as offsets from now."""
    out: dict[str, float | str] = {}
    for a in plan(s, T0, settings).actions:
        if a.kind == "expected-start" and a.annotations:
            v = a.annotations[EXPECTED_START_ANNOTATION]
            t = parse_time(v) if v else None
            out[a.target.name] = t - T0 if t is not None else str(v)
    return out


def test_a_running_job_whose_annotation_was_removed_frees_its_node_at_the_admitted_limit() -> None:
    """The annotation is gone (or malformed); the reconciler stops the job at the limit it was
    admitted with, so the shadow schedule frees its node then, not never."""
    for ann in ({}, {"batchgate.io/time-limit": "forever"}):
        r = with_spec(pod("r", node="n1", started=-HOUR, annotations=ann, admitted=("batch", "2h")), cpu="4")
        s = snap(r, waiting("w", cpu="4"), nodes=[node("n1")])
        assert starts(s) == {"w": HOUR}
        assert _expected(s, S) == {"w": HOUR}


def test_a_limit_over_the_recorded_queue_maximum_counts_as_the_maximum_in_estimates_too() -> None:
    """Admitted to interactive (max 12h); its annotation now says 20d (raised while validation was
    down, or relabelled): the reconciler stops it at 12h, and the estimates say so."""
    settings = Settings(queues=QueuePolicy(max_time_limit={"batch": 7 * 24 * HOUR, "interactive": 12 * HOUR},
                                           default_queue="batch"))
    r = with_spec(pod("r", node="n1", started=-HOUR, annotations={"batchgate.io/time-limit": "20d"},
                      labels={"batchgate.io/queue": "batch"}, admitted=("interactive", "2h")), cpu="4")
    s = snap(r, waiting("w", cpu="4"), nodes=[node("n1")])
    assert _expected(s, settings) == {"w": 11 * HOUR}
    assert starts(s) == {"w": 20 * 24 * HOUR - HOUR}  # the annotation alone (no queue policy) says otherwise
    stop = [a for a in plan_at(s, 11 * HOUR, settings) if a.kind == "stop"]
    assert [a.target.name for a in stop] == ["r"]  # ... and that is when it is stopped


def test_a_pending_job_over_its_queue_maximum_is_held_before_a_window_by_the_maximum() -> None:
    """A window on n1 in 13h: a pending pod admitted to interactive (max 12h) whose annotation says
    20d runs at most 12h, which ends before the window: it starts now, as the reconciler will
    stop it in time."""
    settings = Settings(queues=QueuePolicy(max_time_limit={"interactive": 12 * HOUR}, default_queue="interactive"))
    w, _ = parse_window({"metadata": {"name": "fw"}, "spec": {"start": ts(13 * HOUR), "end": ts(14 * HOUR),
                                                              "nodes": ["n1"]}})
    assert w is not None
    p = with_spec(pod("w", phase="Pending", node="", started=None, annotations={"batchgate.io/time-limit": "20d"},
                      admitted=("interactive", "2h")), cpu="4")
    s = snap(p, nodes=[node("n1")])
    got = {e.workload.name: e.start for e in shadow_schedule(s, T0, [w], limit_of=lambda o: effective_limit(o, settings))}
    assert got == {"w": T0}
    assert starts(s, [w]) == {"w": 14 * HOUR}  # by the annotation: only after the window


def plan_at(s: Snapshot, offset: float, settings: Settings) -> list[Any]:
    return plan(s, T0 + offset, settings).actions
