"""The reconciler chooses which scavengers make room for released work (victims.py, issue 25):
the gangs that lose least, whole, on the nodes the workload may use; then it narrows the workload
to those nodes and releases it. kube-scheduler alone takes the node with the fewest victims."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.reconciler.reconbuild import HOUR, T0, job, pod, ts
from tests.unit.reconciler.test_queue_promises import S, gated
from tests.unit.reconciler.test_scavenger_controller import sj
from tests.unit.reconciler.test_shadow import node, with_spec
from webhook.reconciler import victims
from webhook.reconciler.model import REASON_PREEMPTED, Snapshot, job_view, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.scavenger import sj_view
from webhook.windows import parse_window

SCAV = -1000


def scavenger(name: str, node_name: str, cpu: str, started: float, group: str | None = None) -> dict[str, Any]:
    p = with_spec(pod(name, node=node_name, started=started), cpu=cpu, priority=SCAV)
    p["metadata"]["labels"] = {"batchgate.io/queue": "scavenger", **({"batchgate.io/pod-group": group} if group else {})}
    return p


def cluster(*objs: dict[str, Any]) -> Snapshot:
    return Snapshot.of(pods=[pod_view(o) for o in objs], jobs=[], nodes=[node("a", cpu="4"), node("b", cpu="4")])


def test_the_two_just_checkpointed_scavengers_go_not_the_one_with_hours_of_unsaved_work():
    snap = cluster(scavenger("old", "a", "4", -2 * HOUR), scavenger("new1", "b", "2", -60),
                   scavenger("new2", "b", "2", -90), gated("whole", "4", "1h"))
    acts = plan(snap, T0, S, estimate=False).actions
    preempted = sorted(d.ref.name for a in acts if a.kind == "preempt" for d in a.deletes)
    assert preempted == ["new1", "new2"], [a.line() for a in acts]
    assert all(d.disruption is not None and d.disruption.reason == REASON_PREEMPTED
               for a in acts if a.kind == "preempt" for d in a.deletes)
    (narrow,) = [a for a in acts if a.kind == "narrow"]
    terms = narrow.patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}
    kinds = [a.kind for a in acts if a.target.name == "whole"]
    assert kinds.index("narrow") < kinds.index("release")  # narrowed first, then the gate goes


def test_work_that_fits_in_free_room_takes_nobody_s_and_is_kept_to_that_room():
    """The placement counts no scavenger (it planned a, where s runs); the free room on b is taken,
    and the pod is kept there, not left for kube-scheduler to preempt s on a."""
    acts = plan(cluster(scavenger("s", "a", "4", -HOUR), gated("small", "2", "1h")), T0, S, estimate=False).actions
    assert not [a for a in acts if a.kind == "preempt"]
    (narrow,) = [a for a in acts if a.kind == "narrow"]
    assert narrow.patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}
    assert [a for a in acts if a.kind == "release" and a.target.name == "small"]


def test_a_gang_goes_whole_and_its_cost_counts_all_its_pods():
    # one gang across both nodes (little unsaved work each, but two pods) vs a lone pod on a
    snap = cluster(scavenger("g1", "a", "2", -600, group="g"), scavenger("g2", "b", "2", -600, group="g"),
                   scavenger("lone", "b", "2", -1200), gated("w", "2", "1h"))
    acts = plan(snap, T0, S, estimate=False).actions
    # free room: a has 2 free already -> no eviction needed at all
    assert not [a for a in acts if a.kind == "preempt"]
    snap = cluster(scavenger("g1", "a", "4", -600, group="g"), scavenger("g2", "b", "2", -600, group="g"),
                   scavenger("lone", "b", "2", -1500), gated("w", "4", "1h"))
    acts = plan(snap, T0, S, estimate=False).actions
    gone = sorted(d.ref.name for a in acts if a.kind == "preempt" for d in a.deletes)
    # a whole node: a, by the gang (6 cores x 600 s + 6 x 30 s = 3780), or b, by lone (2 x 1500 + 60 = 3060)
    # and the gang (g2 is on b too) together: the gang alone is cheaper, and it goes whole, from both nodes
    assert gone == ["g1", "g2"], gone


def test_a_node_about_to_be_drained_is_the_cheapest_place_to_take_room_from():
    w, problems = parse_window({"metadata": {"name": "mw", "uid": "u"}, "spec": {
        "start": ts(20 * 60), "end": ts(2 * HOUR), "nodes": ["a"]}})
    assert w is not None, problems
    snap = cluster(scavenger("old", "a", "4", -2 * HOUR), scavenger("new1", "b", "4", -60))
    gangs = victims.scavenger_gangs(snap, T0, 0, [w])
    assert [g.ref.name for g in gangs] == ["old", "new1"]  # hours of work, but it goes in 20 minutes anyway


def test_when_no_eviction_makes_room_the_workload_waits():
    snap = cluster(scavenger("s", "a", "4", -HOUR), gated("huge", "8", "1h"))
    acts = plan(snap, T0, S, estimate=False).actions
    assert not [a for a in acts if a.target.name == "huge" and a.kind in ("release", "preempt")]


def test_a_job_claiming_a_scavengerjob_it_is_not_is_no_part_of_its_gang():
    """Issue 27: an owner counts only if the reconciler has seen it exist (apiVersion, kind,
    namespace, name, uid); a Job claiming a ScavengerJob's uid (here of another namespace) makes a
    gang of its own, and the real one is unaffected."""
    real = sj("md", ns="team-b")
    real["metadata"]["uid"] = "sj-uid"

    def segment(name: str, ns: str, api_version: str = "batchgate.io/v1alpha1") -> tuple[dict[str, Any], dict[str, Any]]:
        j = job(name, ns=ns)
        j["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": "ScavengerJob", "name": "md",
                                             "uid": "sj-uid", "controller": True}]
        p = scavenger(f"{name}-0", "a", "2", -600)
        p["metadata"]["namespace"] = ns
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                             "uid": j["metadata"]["uid"], "controller": True}]
        return j, p

    (rj, rp), (fj, fp), (gj, gp) = segment("md-1", "team-b"), segment("md-1", "mallory"), \
        segment("x-1", "team-b", "nope.example.com/v1")
    snap = dataclasses.replace(
        Snapshot.of(pods=[pod_view(o) for o in (rp, fp, gp)], jobs=[job_view(o) for o in (rj, fj, gj)],
                    nodes=[node("a", cpu="8")]),
        scavenger_jobs={("team-b", "md"): sj_view(real)})
    gangs = {g.ref.namespace + "/" + g.ref.name: sorted(p.ref.name for p in g.pods)
             for g in victims.scavenger_gangs(snap, T0, 0, [])}
    assert gangs == {"team-b/md": ["md-1-0"], "mallory/md-1-0": ["md-1-0"], "team-b/x-1-0": ["x-1-0"]}, gangs


def test_a_declared_checkpoint_interval_counts_only_the_work_since_the_last_multiple_of_it():
    """spec.checkpoint.interval: one long pod, 95 minutes after its start with a 30-minute interval, has
    5 minutes unsaved (not 95); a segment that started 20 minutes ago has 20."""
    def owned(name: str, started: float) -> tuple[Any, dict[str, Any], Any]:
        obj = sj(name)
        obj["metadata"]["uid"] = f"sj-{name}"
        j = job(f"{name}-1", uid=f"job-{name}")
        j["metadata"]["ownerReferences"] = [{"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob",
                                             "name": name, "uid": f"sj-{name}", "controller": True}]
        p = with_spec(pod(f"{name}-1-0", node="a", started=started, owner=j), cpu="1", priority=SCAV)
        return job_view(j), p, sj_view(obj)

    long_job, long_pod, long_sj = owned("long", -95 * 60)
    seg_job, seg_pod, seg_sj = owned("seg", -20 * 60)
    snap = dataclasses.replace(
        Snapshot.of(pods=[pod_view(long_pod), pod_view(seg_pod)], jobs=[long_job, seg_job], nodes=[node("a")]),
        scavenger_jobs={("demo", "long"): long_sj, ("demo", "seg"): seg_sj})
    gangs = victims.scavenger_gangs(snap, T0, 0, [], {"sj-long": T0 - 95 * 60, "sj-seg": T0 - 20 * 60},
                                    {"sj-long": 30 * 60})
    unsaved = {g.ref.name: g.unsaved for g in gangs}
    assert unsaved == {"long": 5 * 60, "seg": 20 * 60}
    assert [g.ref.name for g in gangs] == ["long", "seg"]  # the long pod just checkpointed: it goes first


def _sj_gang(name: str, node_name: str, started: float) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A ScavengerJob, its segment's Job and that Job's one 4-cpu pod on ``node_name``."""
    owner = sj(name)
    owner["metadata"]["uid"] = f"sj-{name}"
    j = job(f"{name}-1")
    j["metadata"]["ownerReferences"] = [{"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "name": name,
                                         "uid": f"sj-{name}", "controller": True}]
    p = scavenger(f"{name}-1-0", node_name, "4", started)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{name}-1",
                                         "uid": j["metadata"]["uid"], "controller": True}]
    return owner, j, p


def test_one_rule_with_the_simulator_a_coming_drain_charges_what_would_be_saved_before_it():
    """scavenger.gang_loss (victims.gang_loss) is the simulator's rule too (bench/scavenger_sim.py
    imports it; its test checks that it is the same function). Drained in 20 minutes: a gang
    checkpointing every 30 minutes, 25 in, would save those 25 in 5 minutes, before the drain, and
    lose 15 at the drain: taking it now costs the 10 more. One 5 minutes in reaches no checkpoint
    before the drain: it costs nothing. A window more than an hour off changes nothing."""
    assert victims.gang_loss(unsaved_s=1500, cores=4, restart_s=30, interval=1800, drain_in=1200) == 4 * 600
    assert victims.gang_loss(unsaved_s=300, cores=4, restart_s=30, interval=1800, drain_in=1200) == 0
    assert victims.gang_loss(unsaved_s=300, cores=4, restart_s=30, interval=1800, drain_in=2 * HOUR) == 4 * 330

    soon, _ = parse_window({"metadata": {"name": "mw", "uid": "u"}, "spec": {
        "start": ts(20 * 60), "end": ts(2 * HOUR), "nodes": ["a", "b"]}})
    late, _ = parse_window({"metadata": {"name": "late", "uid": "u2"}, "spec": {
        "start": ts(3 * HOUR), "end": ts(4 * HOUR), "nodes": ["a", "b"]}})
    assert soon is not None and late is not None
    (s1, j1, p1), (s2, j2, p2) = _sj_gang("near", "a", -25 * 60), _sj_gang("fresh", "b", -5 * 60)
    snap = dataclasses.replace(
        Snapshot.of(pods=[pod_view(p1), pod_view(p2)], jobs=[job_view(j1), job_view(j2)],
                    nodes=[node("a", cpu="4"), node("b", cpu="4")]),
        scavenger_jobs={("demo", "near"): sj_view(s1), ("demo", "fresh"): sj_view(s2)})
    start_over = {"sj-near": T0 - 25 * 60, "sj-fresh": T0 - 5 * 60}
    intervals = {"sj-near": 1800.0, "sj-fresh": 1800.0}
    cost = {g.ref.name: g.cost for g in victims.scavenger_gangs(snap, T0, 0, [soon], start_over, intervals, intervals)}
    assert cost == {"near": 4 * 600, "fresh": 0}
    cost = {g.ref.name: g.cost for g in victims.scavenger_gangs(snap, T0, 0, [late], start_over, intervals, intervals)}
    assert cost == {"near": 4 * (1500 + 30), "fresh": 4 * (300 + 30)}
    # segments (no interval): a segment's end is its checkpoint; 25 minutes into a 30-minute segment
    cost = {g.ref.name: g.cost for g in victims.scavenger_gangs(snap, T0, 0, [soon], start_over, None,
                                                                 {"sj-near": 1800.0, "sj-fresh": 1800.0})}
    assert cost == {"near": 4 * 600, "fresh": 0}
