"""The batch queue's promises and notices (queue.plan_start_by, plan_notices) through plan():
batchgate.io/start-by is the reservation's start; later work ranked below cannot move it; it never
moves earlier (a deadline), and later only with a Warning; expected-start is never after it; a waiting
workload mounting a missing ConfigMap is told at once. A fake clock, plain dicts."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.reconciler.reconbuild import HOUR, T0, pod, ts
from tests.unit.reconciler.test_shadow import node, with_spec
from webhook.contract import EXPECTED_START_ANNOTATION, QUEUE_GATE, START_BY_ANNOTATION
from webhook.reconciler.model import Snapshot, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.rules import load_bundle
from webhook.units import parse_time

QP = QueuePolicy.from_bundle(load_bundle("policies"))
S = Settings(queues=QP)
BATCH = 1000  # batchgate-batch


def busy(name: str, cpu: str, until: float) -> dict[str, Any]:
    """A running pod of the batch queue holding ``cpu`` on n1 until ``until`` (its deadline)."""
    p = with_spec(pod(name, node="n1", started=-HOUR, annotations={
        "batchgate.io/time-limit": "2h", "batchgate.io/deadline": ts(until)}), cpu=cpu, priority=BATCH)
    p["metadata"]["labels"] = {"batchgate.io/queue": "batch"}
    return p


def gated(name: str, cpu: str, limit: str, *, created: float = -600, start_by: float | None = None,
          volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ann = {"batchgate.io/time-limit": limit}
    if start_by is not None:
        ann[START_BY_ANNOTATION] = ts(start_by)
    p = with_spec(pod(name, phase="Pending", node="", started=None, annotations=ann), cpu=cpu, priority=BATCH,
                  created=created, schedulingGates=[{"name": QUEUE_GATE}], **({"volumes": volumes} if volumes else {}))
    p["metadata"]["labels"] = {"batchgate.io/queue": "batch"}
    return p


def run(*objs: dict[str, Any], settings: Settings = S) -> list[Any]:
    snap = Snapshot.of(pods=[pod_view(o) for o in objs], jobs=[], nodes=[node("n1", cpu="4")])
    return list(plan(snap, T0, settings, estimate=True).actions)


def of(actions: list[Any], kind: str, name: str) -> list[Any]:
    return [a for a in actions if a.kind == kind and a.target.name == name]


def test_a_big_job_is_promised_the_end_of_what_runs_and_a_short_one_backfills_before_it():
    acts = run(busy("b", "2", HOUR), gated("big", "4", "1h"), gated("short", "1", "30m", created=-60),
               gated("long", "1", "3h", created=-30))
    (promise,) = of(acts, "start-by", "big")
    assert promise.annotations == {START_BY_ANNOTATION: ts(HOUR)} and promise.reason == "StartBy"
    assert of(acts, "release", "short") and not of(acts, "release", "long") and not of(acts, "release", "big")
    (later,) = of(acts, "start-by", "long")  # after the big job, whose reservation it must not delay
    assert parse_time(later.annotations[START_BY_ANNOTATION]) == T0 + 2 * HOUR


def test_a_later_workload_ranked_below_does_not_move_a_promise_and_a_kept_one_is_not_rewritten():
    acts = run(busy("b", "2", HOUR), gated("big", "4", "1h", start_by=HOUR), gated("later", "4", "1h", created=-5))
    assert not of(acts, "start-by", "big")
    assert parse_time(of(acts, "start-by", "later")[0].annotations[START_BY_ANNOTATION]) == T0 + 2 * HOUR


def test_a_promise_never_moves_earlier_and_later_only_with_a_warning_saying_why():
    # the node frees at +1h, an hour before the promise: it stays (room to spare), and the job goes then
    assert not of(run(busy("b", "2", HOUR), gated("big", "4", "1h", start_by=2 * HOUR)), "start-by", "big")
    # a workload ranked ahead (higher priority) arrived and has no promise yet: the promise moves
    urgent = gated("urgent", "4", "1h", created=-1)
    urgent["spec"]["priority"] = 10_000
    (moved,) = of(run(busy("b", "2", HOUR), gated("big", "4", "1h", start_by=HOUR), urgent), "start-by", "big")
    assert moved.reason == "StartByMoved" and moved.event_type == "Warning"
    assert "1 workload ranked ahead of it arrived" in moved.message
    # room it counted on is gone (the running work's deadline is later than the promise assumed)
    (lost,) = of(run(busy("b", "2", 3 * HOUR), gated("big", "4", "1h", start_by=HOUR)), "start-by", "big")
    assert "room it counted on is gone" in lost.message


def test_the_expected_start_is_never_after_the_promise():
    settings = dataclasses.replace(S, runtime_prediction=False)
    acts = run(busy("b", "2", HOUR), gated("big", "4", "1h"), settings=settings)
    (e,) = of(acts, "expected-start", "big")
    assert parse_time(e.annotations[EXPECTED_START_ANNOTATION]) <= T0 + HOUR


def test_a_waiting_workload_is_told_once_that_it_waits_and_at_once_of_a_missing_volume():
    vol = [{"name": "d", "configMap": {"name": "inputs"}}, {"name": "o", "secret": {"secretName": "x", "optional": True}}]
    acts = run(busy("b", "4", HOUR), gated("w", "1", "1h", volumes=vol))
    (told,) = of(acts, "queued", "w")
    assert told.reason == "Queued" and "waits in queue 'batch'" in told.message
    (req,) = told.requires  # the optional Secret is not required
    assert (req.ref.kind, req.ref.name) == ("ConfigMap", "inputs")
    assert req.otherwise.reason == "VolumeMissing" and req.otherwise.event_type == "Warning"
    assert req.otherwise.message.startswith(f"ConfigMap {req.ref.namespace}/inputs, which it mounts, does not exist")


def test_a_held_queue_releases_nothing_and_promises_nothing():
    held = dataclasses.replace(S, queues=dataclasses.replace(QP, states={**QP.states, "batch": "hold"}))
    acts = run(gated("w", "1", "1h"), settings=held)
    assert not of(acts, "release", "w") and not of(acts, "start-by", "w")
    assert "is on hold" in of(acts, "queued", "w")[0].message


def test_a_queue_put_on_hold_or_stopped_withdraws_its_promises_with_a_warning():
    """Nothing is reserved behind a promise of a queue that holds, and nobody can say when an admin
    opens it: the start-by is removed, a Warning says why; a draining queue keeps its promises (it
    releases in order); opened again, the workload is promised afresh."""
    def with_state(state: str) -> Settings:
        return dataclasses.replace(S, queues=dataclasses.replace(QP, states={**QP.states, "batch": state}))
    promised = gated("w", "4", "1h", start_by=HOUR)
    for state, says in (("hold", "is on hold"), ("stop", "is stopped")):
        acts = run(busy("b", "2", HOUR), promised, gated("new", "1", "1h"), settings=with_state(state))
        (a,) = of(acts, "start-by", "w")
        assert (a.reason, a.event_type, a.annotations) == ("StartByWithdrawn", "Warning", {START_BY_ANNOTATION: None})
        assert f"its promised start {ts(HOUR)} is withdrawn: queue 'batch' {says}" in a.message
        assert not of(acts, "start-by", "new") and not of(acts, "release", "new")
    assert not of(run(busy("b", "2", HOUR), promised, settings=with_state("drain")), "start-by", "w")
    (again,) = of(run(busy("b", "2", HOUR), gated("w", "4", "1h")), "start-by", "w")
    assert again.reason == "StartBy" and again.annotations == {START_BY_ANNOTATION: ts(HOUR)}


def test_a_node_an_admin_cordoned_before_a_window_is_not_promised_when_the_window_ends():
    """Issue 24's flaw: the window's cordon recorded that the node was cordoned before; its end gives
    the node back cordoned, so no promise may count on it (nor did the estimate before the window)."""
    from tests.unit.reconciler.test_shadow import node as mk

    cordoned = mk("n2", cpu="4")
    for was, counted in ((True, False), (False, True)):
        n2 = dataclasses.replace(cordoned, unschedulable=True,
                                 maintenance=f'{{"unschedulable":{str(was).lower()},"window":"mw"}}')
        snap = Snapshot.of(pods=[pod_view(busy("b", "4", 3 * HOUR)), pod_view(gated("w", "4", "1h"))], jobs=[],
                           nodes=[node("n1", cpu="4"), n2])
        acts = plan(snap, T0, S, estimate=False).actions
        # no window is known here: a node the window gives back (schedulable before) is free now
        if counted:
            assert of(acts, "release", "w") and not of(acts, "start-by", "w")
        else:
            (promise,) = of(acts, "start-by", "w")
            assert parse_time(promise.annotations[START_BY_ANNOTATION]) == T0 + 3 * HOUR


def test_room_kube_scheduler_preempted_for_a_pod_it_does_not_model_is_that_pods_not_a_promises():
    """kube-scheduler preempts a batch pod on n1 for a higher-priority Deployment's pod (not work the
    placement models: no Job, no time limit) and nominates it to n1. The victim, being deleted, frees
    its room at the end of its grace period, and that room is the preemptor's: the big job is promised
    n2, where room really comes, not n1 30 seconds from now."""
    victim = busy("victim", "2", HOUR)
    victim["metadata"]["deletionTimestamp"] = ts(30)
    other = busy("other", "4", 2 * HOUR)
    other["spec"]["nodeName"] = "n2"
    web = with_spec(pod("web-7d9f-x2k", phase="Pending", node="", started=None, admitted=None), cpu="3",
                    priority=10_000)
    web["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                                           "uid": "uid-rs", "controller": True}]
    nodes = [node("n1", cpu="4"), node("n2", cpu="4")]
    for nominated, start_by in (("n1", 2 * HOUR), ("n2", 30)):  # nominated to n2: n1's room is free then
        web["status"]["nominatedNodeName"] = nominated
        snap = Snapshot.of(pods=[pod_view(o) for o in (victim, other, web, gated("big", "4", "1h"))], jobs=[],
                           nodes=nodes)
        (promise,) = of(plan(snap, T0, S, estimate=False).actions, "start-by", "big")
        assert parse_time(promise.annotations[START_BY_ANNOTATION]) == T0 + start_by, nominated


def test_the_waiting_metric_counts_what_the_pass_gathered_per_queue_and_account():
    """batchgate_queue_waiting_workloads comes from the pass's own gathering (Plan.waiting)."""
    from tests.unit.reconciler.fakeapi import FakeApi
    from webhook.reconciler import metrics
    from webhook.reconciler.controller import Controller

    api = FakeApi()
    for name, ns in (("w1", "heavy"), ("w2", "heavy"), ("w3", "light")):
        p = gated(name, "4", "1h")
        p["metadata"]["namespace"], p["metadata"]["uid"] = ns, f"uid-{ns}-{name}"
        api.put(p)
    c = Controller(api, dataclasses.replace(S, leader_elect=False), clock=lambda: T0)
    c.cache.list_once()
    result = c.plan_now()
    assert sorted(result.waiting) == [("batch", "heavy"), ("batch", "heavy"), ("batch", "light")]
    got = {(s.labels["queue"], s.labels["account"]): s.value
           for s in metrics.QUEUE_WAITING.collect()[0].samples}
    assert got == {("batch", "heavy"): 2.0, ("batch", "light"): 1.0}


def test_each_moved_promise_counts_the_unpromised_work_ranked_ahead_of_it():
    """The count of new work ranked ahead (made once a pass, not once per moved promise) is, for every
    moved promise, the workloads above it in the order without a promise."""
    urgent = [gated(f"urgent-{i}", "4", "1h", created=-1) for i in range(2)]
    for u in urgent:
        u["spec"]["priority"] = 10_000
    big_1, mid = gated("big-1", "4", "1h", created=-900, start_by=HOUR), gated("mid", "4", "1h", created=-800)
    big_1["spec"]["priority"], mid["spec"]["priority"] = 5_000, 3_000  # one priority each: none moves ahead of another
    acts = run(busy("b", "2", HOUR), *urgent, big_1, mid, gated("big-2", "4", "1h", created=-700, start_by=2 * HOUR))
    (one,), (two,) = of(acts, "start-by", "big-1"), of(acts, "start-by", "big-2")
    assert one.reason == two.reason == "StartByMoved"
    assert "2 workloads ranked ahead of it arrived" in one.message
    assert "3 workloads ranked ahead of it arrived" in two.message  # urgent-0, urgent-1, mid (big-1 has one)


def test_a_notice_the_controller_told_is_not_planned_again_and_one_it_did_not_tell_is():
    """plan(told=...) makes no Queued notice the controller already carried out (it would drop it);
    every other action, and the notice of work not told yet, is as without ``told``."""
    snap = Snapshot.of(pods=[pod_view(o) for o in (busy("b", "4", HOUR), gated("w", "1", "1h"),
                                                   gated("v", "1", "1h", created=-500))],
                       jobs=[], nodes=[node("n1", cpu="4")])
    first = plan(snap, T0, S, estimate=False).actions
    (w,), (v,) = of(first, "queued", "w"), of(first, "queued", "v")
    again = plan(snap, T0, S, estimate=False, told={(w.target.uid, w.key)}).actions
    assert not of(again, "queued", "w") and of(again, "queued", "v") == [v]
    assert again == [a for a in first if a is not w]
    # a TELL_ONCE record of another key (the missing-volume Warning, another kind) is not this notice
    other = plan(snap, T0, S, estimate=False, told={(w.target.uid, "missing/ConfigMap/inputs")}).actions
    assert other == first


def test_a_workload_released_this_pass_gets_no_notice():
    acts = run(busy("b", "2", HOUR), gated("fits", "1", "1h"), gated("waits", "4", "1h", created=-60))
    assert of(acts, "release", "fits") and not of(acts, "queued", "fits")
    assert of(acts, "queued", "waits")


def test_the_controller_plans_no_notice_it_already_carried_out():
    from tests.unit.reconciler.fakeapi import FakeApi
    from webhook.reconciler.controller import Controller

    api = FakeApi()
    api.put(busy("b", "4", HOUR))
    api.put(gated("w", "1", "1h"))
    c = Controller(api, dataclasses.replace(S, leader_elect=False), clock=lambda: T0)
    c.cache.list_once()
    assert [o.action.kind for o in c.run_pass() if o.result == "done"].count("queued") == 1
    assert not [a for a in c.plan_now().actions if a.kind == "queued"]
