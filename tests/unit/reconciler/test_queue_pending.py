"""What kube-scheduler binds before the queue releases anything, and promises nothing is reserved
behind (issue 24's promise): pending pods that are not gated take the room that frees first, so the
placement places them before all gated work (quietly, when they are not modelled as work, like a
ReplicaSet's, for good: the reconciler times no pod a controller made), else to their time limit; a promise the placement finds room for nowhere any
more is withdrawn with a Warning and made afresh when the workload fits again. A fake clock, plain
dicts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.unit.reconciler.reconbuild import HOUR, T0, pod, ts
from tests.unit.reconciler.test_queue import gated as gated_pod
from tests.unit.reconciler.test_queue import queued_job, released
from tests.unit.reconciler.test_queue_promises import BATCH, S, busy, gated, of
from tests.unit.reconciler.test_shadow import node, with_spec
from webhook.contract import QUEUED_ANNOTATION, START_BY_ANNOTATION
from webhook.reconciler.model import Snapshot, job_view, pod_view
from webhook.reconciler.planner import plan
from webhook.units import parse_time


def replica(name: str, cpu: str, *, priority: int = BATCH, limit: str | None = None, nominated: str = "",
            unschedulable: bool = True, gates: list[str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Deployment's pending pod (owned by a ReplicaSet: not work the placement models), not
    gated; kube-scheduler found no node for it (``unschedulable``) and nominated none."""
    p = with_spec(pod(name, phase="Pending", node="", started=None, admitted=None,
                      annotations={"batchgate.io/time-limit": limit} if limit else None),
                  cpu=cpu, priority=priority, created=-60, **spec)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                                         "uid": "uid-rs", "controller": True}]
    if nominated:
        p["status"]["nominatedNodeName"] = nominated
    if unschedulable:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    if gates:
        p["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return p


def on(node_name: str, p: dict[str, Any]) -> dict[str, Any]:
    p["spec"]["nodeName"] = node_name
    return p


def run(*objs: dict[str, Any], nodes: tuple[str, ...] = ("n1", "n2"), estimate: bool = False) -> list[Any]:
    snap = Snapshot.of(pods=[pod_view(o) for o in objs], jobs=[], nodes=[node(n, cpu="4") for n in nodes])
    return list(plan(snap, T0, S, estimate=estimate).actions)


def start_by(acts: list[Any], name: str) -> float:
    (a,) = of(acts, "start-by", name)
    return parse_time(a.annotations[START_BY_ANNOTATION]) - T0


def test_a_pending_pod_not_gated_takes_the_room_that_frees_first_for_good_and_the_promise_counts_on_other_room():
    """n1 frees in an hour, n2 in two. A Deployment's pod of the batch priority waits for room, with
    no time limit and no node nominated: kube-scheduler binds it on n1 the moment n1 frees, before the
    queue releases anything, and it holds n1 for good. The big job is promised n2's room, not n1's."""
    base = (busy("b1", "4", HOUR), on("n2", busy("b2", "4", 2 * HOUR)), gated("big", "4", "1h"))
    assert start_by(run(*base), "big") == HOUR  # nothing pending: n1's room is the big job's
    acts = run(*base, replica("web-1", "3"), estimate=True)
    assert start_by(acts, "big") == 2 * HOUR
    assert not [a for a in acts if a.target.name == "web-1"]  # placed, but nothing is written on it


def test_a_pending_services_pod_holds_its_room_for_good_whatever_its_annotation_says():
    """A time-limit annotation on a Deployment's pod (its template carried one) limits nothing: the
    reconciler never times a pod its controller made without an admission record (planner._limit), so
    the placement does not count on its room freeing after 2 h; the big job is promised n2's, at 5 h."""
    acts = run(busy("b1", "4", HOUR), on("n2", busy("b2", "4", 5 * HOUR)), replica("web-1", "3", limit="2h"),
               gated("big", "4", "1h"))
    assert start_by(acts, "big") == 5 * HOUR  # not n1 from 3 h, after the pod's 2 h


def test_pending_work_not_gated_goes_before_gated_work_of_a_higher_priority():
    """kube-scheduler binds a pending batch-priority bare pod (admitted while the webhook was down)
    when n1 frees; the gated interactive-priority job is no candidate until released."""
    urgent = gated("urgent", "4", "1h")
    urgent["spec"]["priority"] = 10_000
    loose = with_spec(pod("loose", phase="Pending", node="", started=None,
                          annotations={"batchgate.io/time-limit": "1h"}), cpu="2", priority=BATCH, created=-5)
    acts = run(busy("b1", "4", HOUR), loose, urgent, nodes=("n1",))
    assert start_by(acts, "urgent") == 2 * HOUR


def test_what_holds_no_room_for_the_queue():
    """A pod kube-scheduler preempts for the queue's work (priority below every gated queue's), one
    another scheduling gate holds, and one kube-scheduler found no node for while the placement
    has room for it now (something the placement does not model keeps it off: inter-pod affinity,
    volume topology): none of them takes the room the big job is promised (or released onto)."""
    for extra, fits_now in ((replica("low", "3", priority=0), False),
                            (replica("kueued", "3", gates=["kueue.x-k8s.io/admission"]), False),
                            (replica("stuck", "3"), True)):
        objs = (gated("big", "4", "1h"), extra) if fits_now else (busy("b1", "4", HOUR), gated("big", "4", "1h"),
                                                                   extra)
        acts = run(*objs, nodes=("n1",))
        if fits_now:
            assert of(acts, "release", "big"), extra["metadata"]["name"]
        else:
            assert start_by(acts, "big") == HOUR, extra["metadata"]["name"]
    # not yet tried by kube-scheduler, it is about to take the free room: the big job waits behind it,
    # for good (a service's pod has no end, whatever it is annotated)
    acts = run(gated("big", "4", "1h"), replica("fresh", "3", limit="1h", unschedulable=False), nodes=("n1",))
    assert not of(acts, "release", "big") and not of(acts, "start-by", "big")


def test_a_nominated_pending_pod_is_held_once_on_its_node_only():
    acts = run(busy("b1", "4", HOUR), on("n2", busy("b2", "4", 2 * HOUR)), replica("web-1", "3", nominated="n2"),
               gated("big", "4", "1h"))
    assert start_by(acts, "big") == HOUR  # it holds n2 (nominated), not n1 too


def test_a_promise_with_no_room_left_anywhere_is_withdrawn_with_a_warning_and_made_again_when_it_fits():
    """The node its promise counted on is gone (or cordoned): no node it may use has room for it.
    The start-by goes with a Warning naming why; when it fits again, it is promised afresh."""
    promised = gated("w", "4", "1h", start_by=HOUR)
    promised["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    (a,) = of(run(on("n2", busy("b2", "4", HOUR)), promised, nodes=("n2",)), "start-by", "w")
    assert (a.reason, a.event_type, a.annotations) == ("StartByWithdrawn", "Warning", {START_BY_ANNOTATION: None})
    assert a.message.startswith(f"its promised start {ts(HOUR)} is withdrawn: no node it may use has room for it "
                                "any more (no node matches its node selector")
    assert a.message.endswith("it is promised a start again when it fits")
    # it fits nowhere but behind a pod that holds its node for good: withdrawn too
    (b,) = of(run(busy("b1", "4", HOUR), replica("web-1", "4"), promised, nodes=("n1",)), "start-by", "w")
    assert b.reason == "StartByWithdrawn" and "waits for work without a time limit" in b.message
    # not promised, it gets none; back with room, promised afresh
    fresh = gated("w", "4", "1h")
    fresh["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    assert not of(run(on("n2", busy("b2", "4", HOUR)), fresh, nodes=("n2",)), "start-by", "w")
    (c,) = of(run(busy("b1", "4", HOUR), fresh, nodes=("n1",)), "start-by", "w")
    assert c.reason == "StartBy" and c.annotations == {START_BY_ANNOTATION: ts(HOUR)}


def test_a_promised_group_missing_a_pod_has_its_promise_withdrawn_saying_so():
    members = []
    for i in range(2):
        m = gated(f"g-{i}", "1", "1h", start_by=HOUR)
        m["metadata"]["labels"].update({"batchgate.io/pod-group": "g", "batchgate.io/pod-group-size": "3"})
        members.append(m)
    (a,) = of(run(busy("b1", "4", HOUR), *members, nodes=("n1",)), "start-by", "g-0")
    assert a.reason == "StartByWithdrawn"
    assert "nothing is reserved for it while it waits for all 3 pods of its group 'g' to exist (2 do)" in a.message


# -- pods kube-scheduler never binds (issue 23: another scheduler's) ---------------------
def test_a_pending_pod_of_a_scheduler_kube_scheduler_does_not_serve_holds_no_room():
    """A tenant's pending pods naming a scheduler nobody runs (``nobody``) ask for n1 whole: a
    ReplicaSet's pod with no time limit, not yet tried (it would hold n1 for good), and a bare pod of an
    ungated queue. kube-scheduler never binds them, so the gated job is released onto n1 all the same;
    naming kube-scheduler's own profile, they are placed first as before."""
    fresh = replica("web-1", "4", unschedulable=False, schedulerName="nobody")
    bare = with_spec(pod("bare", phase="Pending", node="", started=None, labels={"batchgate.io/queue": "interactive"}),
                     cpu="4", priority=BATCH, created=-60, schedulerName="nobody")
    for extra in (fresh, bare):
        acts = run(gated("big", "4", "1h"), extra, nodes=("n1",))
        assert of(acts, "release", "big"), extra["metadata"]["name"]
        assert not of(run(gated("big", "4", "1h"), with_spec(extra, cpu="4", priority=BATCH, created=-60,
                                                             schedulerName="default-scheduler"), nodes=("n1",)),
                      "release", "big"), extra["metadata"]["name"]


def test_a_bound_pod_of_another_scheduler_holds_its_room():
    acts = run(on("n1", replica("web-1", "4", unschedulable=False, schedulerName="nobody")), gated("big", "4", "1h"),
               nodes=("n1",))
    assert not of(acts, "release", "big")


def test_a_profile_the_bundle_names_is_kube_schedulers():
    """kube-scheduler run with a second profile (spec.kubeSchedulerProfiles): its pending pods are placed first."""
    s = replace(S, queues=replace(S.queues, kube_schedulers=frozenset({"default-scheduler", "gpu-packing"})))
    objs = (gated("big", "4", "1h"), replica("web-1", "4", unschedulable=False, schedulerName="gpu-packing"))
    snap = Snapshot.of(pods=[pod_view(o) for o in objs], jobs=[], nodes=[node("n1", cpu="4")])
    assert not of(list(plan(snap, T0, s).actions), "release", "big")
    assert of(run(*objs, nodes=("n1",)), "release", "big")  # by default, not kube-scheduler's


def test_a_released_job_whose_pods_name_another_scheduler_holds_no_room_for_the_pods_being_made():
    """A Job the queue released, its controller still making its pods: it holds their room, unless
    its template names a scheduler kube-scheduler does not serve (nobody would bind them)."""
    job = queued_job("wide", pods=2, cpu="4", created=-2 * HOUR)
    job["spec"]["suspend"] = False
    del job["metadata"]["annotations"][QUEUED_ANNOTATION]
    nodes = [node("n1", cpu="4"), node("n2", cpu="4")]
    small = gated_pod("small", cpu="2", created=-HOUR)
    assert not released(Snapshot.of(pods=[pod_view(small)], jobs=[job_view(job)], nodes=nodes))
    job["spec"]["template"]["spec"]["schedulerName"] = "nobody"
    assert [a.target.name for a in released(Snapshot.of(pods=[pod_view(small)], jobs=[job_view(job)], nodes=nodes))] \
        == ["small"]


def test_a_services_gated_pods_wait_one_by_one_whatever_group_label_their_template_gives_them():
    """A StatefulSet's pod (OrderedReady: db-1 is made only once db-0 is Ready) and a rollout's surge
    pod, gated in the queue, carry their template's pod-group labels (a group of 3): each is a one-pod
    workload, released when it fits. Grouped, each would wait for good for pods that are never made."""
    db0 = replica("db-0", "1", gates=["batchgate.io/queue"], unschedulable=False)
    db0["metadata"]["labels"] = {"batchgate.io/queue": "batch", "batchgate.io/pod-group": "db",
                                 "batchgate.io/pod-group-size": "3"}
    db0["metadata"]["ownerReferences"][0].update(kind="StatefulSet", name="db", uid="uid-sts")
    web = replica("web-7d9f-x", "1", gates=["batchgate.io/queue"], unschedulable=False)
    web["metadata"]["labels"] = {"batchgate.io/queue": "batch", "batchgate.io/pod-group": "web-7d9f",
                                 "batchgate.io/pod-group-size": "3"}
    acts = run(busy("b1", "2", HOUR), db0, web)
    assert sorted(a.target.name for a in acts if a.kind == "release") == ["db-0", "web-7d9f-x"]
