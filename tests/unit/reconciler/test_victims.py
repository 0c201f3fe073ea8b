"""The reconciler chooses which scavengers make room for released work (victims.py, issue 25):
the gangs that lose least, whole, on the nodes the workload may use; then it narrows the workload
to those nodes and releases it. kube-scheduler alone takes the node with the fewest victims."""

from __future__ import annotations

from typing import Any

from tests.unit.reconciler.reconbuild import HOUR, T0, pod, ts
from tests.unit.reconciler.test_queue_promises import S, gated
from tests.unit.reconciler.test_shadow import node, with_spec
from webhook.reconciler import victims
from webhook.reconciler.model import REASON_PREEMPTED, Snapshot, pod_view
from webhook.reconciler.planner import plan
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


def test_work_that_fits_in_free_room_takes_nobody_s_and_is_not_narrowed():
    acts = plan(cluster(scavenger("s", "a", "4", -HOUR), gated("small", "2", "1h")), T0, S, estimate=False).actions
    assert not [a for a in acts if a.kind in ("preempt", "narrow")]
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
