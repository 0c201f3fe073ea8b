"""The pure ScavengerJob functions the controller and the simulator share: start order,
fit, cap, segments, and failure vs interruption on recorded pods (1.20 and newer)."""

from __future__ import annotations

from typing import Any

from reconbuild import T0, pod, terminated, ts

from webhook.reconciler.model import NodeView, Snapshot, job_view, pod_view
from webhook.reconciler.scavenger import (
    Need,
    Room,
    Waiting,
    cap_room,
    choose_starts,
    classify,
    job_body,
    place,
    plan_scavengers,
    segment_end,
    sj_view,
    standing,
    start_order,
    take,
    unsaved,
    victim_key,
)
from webhook.reconciler.settings import Settings

GI = 1 << 30
SETTINGS = Settings(leader_elect=False)


def w(name: str, count: int = 0, created: float = 0, pods: int = 1, cpu: int = 1000, mem: int = GI) -> Waiting:
    return Waiting(("demo", name), count, created, Need(pods, cpu, mem))


def rooms(*specs: tuple[str, int, int]) -> dict[str, Room]:
    return {n: Room(n, c, m) for n, c, m in specs}


def test_start_order_interrupted_first_then_oldest_then_name():
    order = start_order([w("new", 0, 10), w("old", 0, 5), w("twice", 2, 50), w("once", 1, 1), w("b", 0, 5)])
    assert [x.key[1] for x in order] == ["twice", "once", "b", "old", "new"]


def test_place_all_or_none_and_tightest_node_first():
    free = rooms(("big", 8000, 16 * GI), ("small", 2000, 4 * GI))
    assert place(Need(2, 1000, GI), free) == {"small": 2}
    assert place(Need(3, 1000, GI), free) == {"small": 2, "big": 1}
    assert place(Need(11, 1000, GI), free) is None  # 10 fit, never half a gang
    assert place(Need(1, 1000, 5 * GI), free) == {"big": 1}  # memory decides too
    assert place(Need(2, 1000, GI), {"n": Room("n", 8000, 8 * GI, pods=1)}) is None  # pod slots
    after = take(free, {"small": 2, "big": 1}, Need(3, 1000, GI))
    assert after["small"] == Room("small", 0, 2 * GI, 108) and after["big"].cpu_m == 7000
    assert free["small"].cpu_m == 2000  # not changed in place


def test_cap_room():
    assert cap_room((10_000, 10 * GI), (3000, 2 * GI), 0.7) == (4000, 5 * GI)


def test_choose_starts_order_cap_backfill_and_never_fits():
    alloc = rooms(("a", 4000, 8 * GI), ("b", 4000, 8 * GI))  # cap 70 %: 5600m cpu
    free = dict(alloc)
    decisions = choose_starts(
        [w("head", 1, 100, pods=2, cpu=2000), w("second", 0, 1, pods=2, cpu=2000), w("small", 0, 2, cpu=1000),
         w("huge", 0, 0, pods=3, cpu=3000), w("wide", 0, 3, pods=1, cpu=4500)],
        free, alloc, (0, 0), 0.7)
    got = {d.waiting.key[1]: d for d in decisions}
    assert [d.waiting.key[1] for d in decisions] == ["head", "huge", "second", "small", "wide"]
    assert got["head"].kind == "start"
    assert got["huge"].kind == "never-fits" and "over the scavengers' share 70%" in got["huge"].why
    assert got["second"].kind == "over-cap"  # 4000 + 4000 > 5600
    assert got["small"].kind == "start"  # backfill: it fits under the cap
    assert got["wide"].kind == "never-fits" and "not all of them fit even on the empty nodes" in got["wide"].why


def test_choose_starts_counts_what_scavengers_use_and_what_is_free():
    alloc = rooms(("a", 4000, 8 * GI))
    assert choose_starts([w("x", cpu=1000)], alloc, alloc, (2000, 0), 0.7)[0].kind == "over-cap"
    busy = rooms(("a", 500, 8 * GI))
    assert choose_starts([w("x", cpu=1000)], busy, alloc, (0, 0), 0.7)[0].kind == "no-room"


def test_segments_and_standing():
    assert segment_end(100.0, 1800) == 1900.0
    assert standing(100.0, 100.0, 1800) == 0.0
    assert standing(1000.0, 100.0, 1800) == 0.5
    assert standing(5000.0, 100.0, 1800) == 1.0
    # the scheduler preempts the latest start first: the one that just started over
    assert max([("older", victim_key(0.0)), ("fresh", victim_key(1700.0))], key=lambda t: t[1])[0] == "fresh"


def _v(**kw):
    return pod_view(pod(**kw))


def test_classify_success_running_starting():
    ok = [_v(name=f"p{i}", phase="Succeeded", containers=[terminated(0)]) for i in range(2)]
    assert classify(ok, 2).kind == "succeeded"
    assert classify([_v(name="p0"), _v(name="p1")], 2).kind == "running"
    assert classify([_v(name="p0"), _v(name="p1", phase="Pending", started=None)], 2).kind == "starting"
    assert classify([_v(name="p0")], 2).kind == "starting"


def test_classify_failure_by_exit_code_and_oomkilled():
    v = classify([_v(name="p0"), _v(name="p1", phase="Failed", containers=[terminated(3)])], 2)
    assert v.kind == "failed" and v.pod is not None and v.pod.ref.name == "p1"
    assert v.why == "container main exited with code 3"
    v = classify([_v(name="p0", phase="Failed", containers=[terminated(137, reason="OOMKilled")])], 1)
    assert v.kind == "failed" and "OOMKilled" in v.why


def test_the_agreed_checkpoint_exit_code_ends_the_segment():
    done = _v(name="b", phase="Failed", containers=[terminated(3)])
    v = classify([_v(name="a", deleting=True), done], 2, checkpoint_code=3)
    assert v.kind == "checkpointed" and v.pod is not None and v.pod.ref.name == "b"
    assert classify([_v(name="a", deleting=True), done], 2).kind == "failed"  # no contract: a failure
    # a real failure of a sibling still wins; OOMKilled never counts as the agreed code
    assert classify([done, _v(name="c", phase="Failed", containers=[terminated(1)])], 2, checkpoint_code=3).kind \
        == "failed"
    oom = _v(name="d", phase="Failed", containers=[terminated(3, reason="OOMKilled")])
    assert classify([oom], 1, checkpoint_code=3).kind == "failed"


def test_a_failure_wins_over_siblings_the_job_controller_deletes():
    v = classify([_v(name="a", deleting=True), _v(name="b", phase="Failed", containers=[terminated(1)])], 2)
    assert v.kind == "failed" and v.pod is not None and v.pod.ref.name == "b"


def test_interruptions_on_1_20_and_newer():
    # 1.20: kube-scheduler / kubectl / eviction delete the running pod with its grace period
    v = classify([_v(name="a", deleting=True), _v(name="b")], 2)
    assert v.kind == "interrupted" and "deleted while running" in v.why
    # deleted, SIGTERM made it exit 143: still an interruption, not a failure
    v = classify([_v(name="a", deleting=True, phase="Failed", containers=[terminated(143)])], 1)
    assert v.kind == "interrupted"
    # newer: DisruptionTarget condition (preemption)
    cond = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "default-scheduler: preempting to accommodate a higher priority pod"}]
    v = classify([_v(name="a", conditions=cond, phase="Failed", containers=[terminated(143)])], 1)
    assert v.kind == "interrupted" and v.why.startswith("PreemptionByScheduler")
    cond = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    assert classify([_v(name="a", conditions=cond)], 1).why == "EvictionByEvictionAPI"
    # kubelet reasons, and a node that is gone
    assert classify([_v(name="a", phase="Failed", reason="Evicted", message="low on memory")], 1).kind == "interrupted"
    v = classify([_v(name="a", node="n1")], 1, node_gone=lambda n: n == "n1")
    assert v.kind == "interrupted" and v.why == "node n1 of pod a is gone"
    # a finished pod being cleaned up is nobody's interruption
    assert classify([_v(name="a", phase="Succeeded", deleting=True, containers=[terminated(0)])], 1).kind == "succeeded"


def test_choose_starts_places_exactly_as_place_does_one_by_one():
    """choose_starts keeps the rooms sorted incrementally; the placements must be what place()
    gives when called afresh for each start (random clusters, a fixed seed)."""
    import random

    rnd = random.Random(7)
    for _ in range(200):
        alloc = {f"n{i}": Room(f"n{i}", rnd.choice([4000, 8000, 16000]), rnd.choice([8, 16, 32]) * GI, rnd.choice([3, 110]))
                 for i in range(rnd.randint(1, 12))}
        free = {n: Room(n, r.cpu_m - rnd.randint(0, r.cpu_m // 1000) * 1000, r.mem_b, r.pods) for n, r in alloc.items()}
        ws = [w(f"s{i}", rnd.randint(0, 2), rnd.random(), pods=rnd.randint(1, 4), cpu=rnd.choice([500, 1000, 2000]),
                mem=rnd.choice([1, 2]) * GI) for i in range(rnd.randint(1, 15))]
        got = choose_starts(ws, free, alloc, (0, 0), 1.0)
        room = dict(free)
        for d in got:
            if d.kind == "start":
                assert d.placement == place(d.waiting.need, room)
                room = take(room, d.placement, d.waiting.need)
            elif d.kind == "no-room":
                assert place(d.waiting.need, room) is None


def _reference_choose_starts(ws: list[Waiting], free: dict[str, Room], alloc: dict[str, Room],
                             used: tuple[int, int], share: float) -> list[tuple[str, str, dict[str, int] | None]]:
    """choose_starts written the slow, obvious way: every check from scratch, for every waiting one."""
    total = (sum(r.cpu_m for r in alloc.values()), sum(r.mem_b for r in alloc.values()))
    room, cur, out = dict(free), used, []
    for x in start_order(ws):
        tc, tm = x.need.total
        if tc > int(total[0] * share) or tm > int(total[1] * share) or place(x.need, alloc) is None:
            out.append((x.key[1], "never-fits", None))
            continue
        cap_c, cap_m = cap_room(total, cur, share)
        if tc > cap_c or tm > cap_m:
            out.append((x.key[1], "over-cap", None))
            continue
        where = place(x.need, room)
        if where is None:
            out.append((x.key[1], "no-room", None))
            continue
        room, cur = take(room, where, x.need), (cur[0] + tc, cur[1] + tm)
        out.append((x.key[1], "start", where))
    return out


def test_choose_starts_decides_as_the_obvious_reference_does():
    """The shortcuts in choose_starts (rooms with too little cpu skipped by bisection, a need at
    least as big as one that found no room is not placed again, "can ever fit" counted over node
    shapes) change no decision: random clusters with full, over-committed and slot-bound nodes,
    zero-sized needs, a fixed seed."""
    import random

    rnd = random.Random(14)
    kinds: set[str] = set()
    for _ in range(400):
        shapes = [(rnd.choice([4000, 8000, 64000]), rnd.choice([8, 32, 256]) * GI, rnd.choice([2, 10, 110]))
                  for _ in range(rnd.randint(1, 3))]
        alloc = {f"n{i}": Room(f"n{i}", *rnd.choice(shapes)) for i in range(rnd.randint(1, 30))}
        free = {n: Room(n, r.cpu_m - rnd.randint(-500, r.cpu_m), r.mem_b - rnd.randint(-GI, r.mem_b),
                        r.pods - rnd.randint(0, r.pods)) for n, r in alloc.items()}
        ws = [w(f"s{i}", rnd.choice([0, 0, 1, 3]), rnd.choice([1.0, 2.0, float(i)]), pods=rnd.choice([0, 1, 1, 2, 4, 9]),
                cpu=rnd.choice([0, 500, 1000, 4000, 8000, 70000]), mem=rnd.choice([0, 1, 2, 8, 300]) * GI)
              for i in range(rnd.randint(1, 60))]
        tot = (sum(r.cpu_m for r in alloc.values()), sum(r.mem_b for r in alloc.values()))
        used = (int(tot[0] * rnd.random() * 0.8), int(tot[1] * rnd.random() * 0.8))
        share = rnd.choice([0.3, 0.7, 1.0])
        got = [(d.waiting.key[1], d.kind, dict(d.placement) if d.placement is not None else None)
               for d in choose_starts(ws, free, alloc, used, share)]
        assert got == _reference_choose_starts(ws, free, alloc, used, share)
        kinds.update(k for _, k, _ in got)
    assert kinds == {"start", "no-room", "over-cap", "never-fits"}


# -- a pod that checkpointed, then was deleted (issue 25) ---------------------------------------
def test_a_checkpointed_pod_deleted_afterwards_is_no_interruption():
    done = dict(phase="Failed", containers=[terminated(3, finished=60)])
    # the Job controller (or a person, or the garbage collector) deletes the ended pod
    assert classify([_v(name="a", deleting=True, **done)], 1, checkpoint_code=3).kind == "checkpointed"
    # an eviction of the ended pod marks it DisruptionTarget after its exit: still the workload's checkpoint
    late = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
             "lastTransitionTime": ts(120)}]
    assert classify([_v(name="a", deleting=True, conditions=late, **done)], 1, checkpoint_code=3).kind \
        == "checkpointed"
    # preempted first (the condition before the exit), it saved on SIGTERM and exited with the code:
    # an interruption, told by the condition
    early = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
              "lastTransitionTime": ts(30)}]
    v = classify([_v(name="a", deleting=True, conditions=early, **done)], 1, checkpoint_code=3)
    assert v.kind == "interrupted" and v.why.startswith("PreemptionByScheduler")
    # without the agreed code the same deleted pod is an interruption, as before
    assert classify([_v(name="a", deleting=True, **done)], 1).kind == "interrupted"
    assert classify([_v(name="a", deleting=True, phase="Failed", containers=[terminated(143)])], 1,
                    checkpoint_code=3).kind == "interrupted"


# -- the reconciler's victims (issue 25) ----------------------------------------------------------
def test_unsaved_work_from_the_pods_start_or_the_declared_interval():
    assert unsaved(130, None) == 130  # a segment starts at a checkpoint
    assert unsaved(130, 60) == 10 and unsaved(120, 60) == 0
    assert unsaved(-5, 60) == 0  # a node clock ahead


# -- a running segment and a spec edited since (plan_scavengers over plain views) --------------------
def _segment_world(spec_pods: int, segment_pods: int, phases: tuple[str, ...] | None = None,
                   ) -> tuple[list[Any], Any]:
    """A ScavengerJob whose segment 1 (Job md-1, ``segment_pods`` pods, all seen running) runs, with
    ``spec.pods`` now ``spec_pods``; ``phases``: its pods' phases (all Running by default). Planned at T0."""
    obj = {"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob",
           "metadata": {"name": "md", "namespace": "demo", "uid": "uid-sj", "resourceVersion": "7",
                        "generation": 2, "creationTimestamp": ts(-7200)},
           "spec": {"image": "registry.example.org/sim:1", "command": ["sim"], "runAsUser": 1000, "pods": segment_pods,
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}, "duration": "1h"},
           "status": {"phase": "Running", "segment": 1, "jobName": "md-1", "runningSegment": 1,
                      "priorityStartOverTimestamp": ts(-600), "creationTimestamp": ts(-7200)}}
    made = job_body(sj_view(obj), 1, SETTINGS.queues)  # the Job as it was made, from the spec of then
    made["metadata"].update(uid="uid-md-1", resourceVersion="8", creationTimestamp=ts(-900))
    obj["spec"]["pods"] = spec_pods
    labels = made["spec"]["template"]["metadata"]["labels"]
    pods = [pod(f"md-1-{i}", owner=made, labels=labels, node=f"n{i}", started=-600,
                phase=(phases or ("Running",) * segment_pods)[i],
                containers=[terminated(0, started=-600, finished=-60)] if phases and phases[i] == "Succeeded" else None)
            for i in range(segment_pods)]
    snap = Snapshot.of(pods=[pod_view(p) for p in pods], jobs=[job_view(made)], scavenger_jobs=[sj_view(obj)],
                       nodes=[NodeView(f"n{i}", "True") for i in range(segment_pods)])
    actions, wake = plan_scavengers(snap, T0, SETTINGS)
    return actions, wake


def test_a_lowered_spec_ends_the_running_segment_and_a_raised_one_waits_for_the_next():
    # lowered: the segment ends now, as at a boundary (no interruption); the next one is made from the spec
    actions, _ = _segment_world(2, 4)
    assert [(a.kind, a.reason) for a in actions] == [("sj-segment", "Resized")]
    st = actions[0].patch["status"]
    assert (st["segment"], st["jobName"], st["phase"], st["priorityStartOverTimestamp"]) == (2, "md-2", "Running",
                                                                                               ts(0))
    assert "interruptedCount" not in st or st["interruptedCount"] == 0
    assert {d.ref.name for d in actions[0].deletes} == {"md-1", "md-1-0", "md-1-1", "md-1-2", "md-1-3"}
    # half of the 4 pods exited 0: not "all 2 pods the spec says now" (the ScavengerJob is not done)
    actions, _ = _segment_world(2, 4, ("Succeeded", "Succeeded", "Running", "Running"))
    assert [(a.kind, a.reason) for a in actions] == [("sj-segment", "Resized")]
    # as it was made: it runs on to its boundary
    actions, wake = _segment_world(4, 4)
    assert actions == [] and wake == T0 - 600 + 3600
    # raised (an admin may): no interruption for pods it never had; the next segment is made bigger
    actions, wake = _segment_world(6, 4)
    assert actions == [] and wake == T0 - 600 + 3600
    # one pod: the Job has no group label, and is a gang of one
    actions, _ = _segment_world(1, 1)
    assert actions == []


def test_finished_stays_finished_whatever_its_spec_says_since():
    """A Completed or Failed ScavengerJob never runs again: edited bigger afterwards (admission lets its
    user: rules.scavengerjob.running is None once finished), with room for it, its Job kept or gone,
    its status still naming that Job or not, the reconciler starts, resumes and re-queues nothing and
    writes no status. Only a Job its status does not name is cleaned up, as ever."""
    base = {"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob",
            "metadata": {"name": "md", "namespace": "demo", "uid": "uid-sj", "resourceVersion": "7",
                         "generation": 3, "creationTimestamp": ts(-7200)},
            "spec": {"image": "registry.example.org/sim:1", "command": ["sim"], "runAsUser": 1000, "pods": 1,
                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}, "duration": "1h"}}
    made = job_body(sj_view({**base, "status": {}}), 2, SETTINGS.queues)
    made["metadata"].update(uid="uid-md-2", resourceVersion="8", creationTimestamp=ts(-900))
    nodes = [NodeView("n0", "True", cpu=64000, mem=256 * GI)]
    for phase in ("Completed", "Failed"):
        for job_name in ("md-2", ""):
            for jobs in ([made], []):
                obj = {**base, "spec": {**base["spec"], "pods": 8, "resources": {"limits": {"cpu": "4", "memory": "8Gi"}}},
                       "status": {"phase": phase, "segment": 2, "jobName": job_name, "runningSegment": 2,
                                  "finishedTimestamp": ts(-60), "creationTimestamp": ts(-7200)}}
                snap = Snapshot.of(jobs=[job_view(j) for j in jobs], scavenger_jobs=[sj_view(obj)], nodes=nodes)
                actions, wake = plan_scavengers(snap, T0, SETTINGS)
                kept = job_name == "md-2"  # the Job its status names (a finished Job: it runs nothing)
                want = [] if not jobs or kept else [("sj-cleanup", "md-2")]
                assert [(a.kind, d.ref.name) for a in actions for d in a.deletes] == want, (phase, job_name, jobs)
                assert all(a.patch is None and a.create is None for a in actions) and wake is None
