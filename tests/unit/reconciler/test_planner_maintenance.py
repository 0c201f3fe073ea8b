"""Maintenance windows in the planner: countdown labels, cordon, drain, give back; a fake clock."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.unit.reconciler.reconbuild import HOUR, T0, job, pod, ts
from webhook.contract import COUNTDOWN_LABEL, MAINTENANCE_ANNOTATION
from webhook.reconciler.actions import Action
from webhook.reconciler.maintenance import plan_maintenance
from webhook.reconciler.model import NodeView, Snapshot, job_view, pod_view, window_view
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings

S = Settings()


def mw(name: str, start: float, end: float, *, nodes: list[str] | None = None, selector: Any = None,
       status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    sp: dict[str, Any] = {"start": ts(start), "end": ts(end), **spec}
    if nodes is not None:
        sp["nodes"] = nodes
    if selector is not None:
        sp["nodeSelector"] = selector
    obj = {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
           "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "5"}, "spec": sp}
    if status is not None:
        obj["status"] = status
    return obj


def node(name: str, *, labels: dict[str, str] | None = None, unschedulable: bool = False,
         cordoned: dict[str, Any] | None = None, rv: str = "7") -> NodeView:
    return NodeView(name=name, ready="True", uid=f"uid-{name}", resource_version=rv, labels=dict(labels or {}),
                    unschedulable=unschedulable,
                    maintenance=None if cordoned is None else json.dumps(cordoned))


def snap(*objects: dict[str, Any], nodes: list[NodeView], windows: list[dict[str, Any]]) -> Snapshot:
    return Snapshot.of(
        pods=[pod_view(o) for o in objects if o["kind"] == "Pod"],
        jobs=[job_view(o) for o in objects if o["kind"] == "Job"],
        nodes=nodes, windows=[window_view(w) for w in windows],
    )


def run(s: Snapshot, now: float) -> tuple[list[Action], float | None]:
    actions, wake = plan_maintenance(s, now, S)
    return [a for a in actions if a.kind != "window-status"], wake


def labels_after(n: NodeView, actions: list[Action]) -> dict[str, str]:
    labels = dict(n.labels)
    for a in actions:
        if a.kind == "countdown" and a.target.name == n.name:
            for k, v in (a.patch or {})["metadata"]["labels"].items():
                if v is None:
                    labels.pop(k, None)
                else:
                    labels[k] = v
    return labels


# -- the countdown -------------------------------------------------------------------
def test_a_node_with_a_window_ahead_gets_a_countdown_that_rounds_down() -> None:
    w = mw("fw", 3 * HOUR, 5 * HOUR, nodes=["n1"])
    actions, wake = run(snap(nodes=[node("n1"), node("n2")], windows=[w]), T0)
    (a,) = actions
    # 3h - 216s (2 % of the time left held back), rounded down: 176 minutes
    assert (a.kind, a.target.name, a.patch) == ("countdown", "n1", {"metadata": {"labels": {COUNTDOWN_LABEL: "176"}}})
    assert not a.quiet and a.reason == "MaintenanceScheduled" and "window fw" in a.message
    assert wake == T0 + 3 * HOUR - 176 * 60 - S.countdown_guard


def test_the_countdown_never_overstates_and_is_rewritten_rarely() -> None:
    w = mw("fw", 6 * HOUR, 8 * HOUR, nodes=["n1"])
    n = node("n1")
    writes = 0
    t = T0
    while t < T0 + 7 * HOUR:
        actions, _ = run(snap(nodes=[n], windows=[w]), t)
        writes += sum(a.kind == "countdown" for a in actions)
        n = dataclasses.replace(n, labels=labels_after(n, actions))
        value = int(n.labels[COUNTDOWN_LABEL])
        assert value * 60 <= max(T0 + 6 * HOUR - t, 0), f"overstated at {t - T0}s: {value} minutes"
        t += 10
    assert n.labels[COUNTDOWN_LABEL] == "0"  # during the window
    assert writes < 6 * 60 / 2, f"{writes} label writes for a 6 h countdown"


def test_a_steady_node_needs_no_write_and_a_moved_window_is_followed() -> None:
    w = mw("fw", 3 * HOUR, 5 * HOUR, nodes=["n1"])
    assert run(snap(nodes=[node("n1", labels={COUNTDOWN_LABEL: "176"})], windows=[w]), T0)[0] == []
    later = mw("fw", 9 * HOUR, 10 * HOUR, nodes=["n1"])  # the admin moved it later: the label goes up
    (a,) = run(snap(nodes=[node("n1", labels={COUNTDOWN_LABEL: "176"})], windows=[later]), T0)[0]
    assert a.quiet and int(a.patch["metadata"]["labels"][COUNTDOWN_LABEL]) > 500  # type: ignore[index]
    sooner = mw("fw", 1 * HOUR, 2 * HOUR, nodes=["n1"])  # ... or sooner: down at once
    (a,) = run(snap(nodes=[node("n1", labels={COUNTDOWN_LABEL: "176"})], windows=[sooner]), T0)[0]
    assert int(a.patch["metadata"]["labels"][COUNTDOWN_LABEL]) <= 58  # type: ignore[index]


def test_the_label_goes_when_no_window_is_ahead_and_forged_values_are_corrected() -> None:
    old = mw("old", -3 * HOUR, -1 * HOUR, nodes=["n1"])
    (a,) = run(snap(nodes=[node("n1", labels={COUNTDOWN_LABEL: "0"})], windows=[old]), T0)[0]
    assert a.patch == {"metadata": {"labels": {COUNTDOWN_LABEL: None}}}
    w = mw("fw", 1 * HOUR, 2 * HOUR, nodes=["n1"])
    (a,) = run(snap(nodes=[node("n1", labels={COUNTDOWN_LABEL: "99999"})], windows=[w]), T0)[0]
    assert a.patch == {"metadata": {"labels": {COUNTDOWN_LABEL: "58"}}}
    (a,) = run(snap(nodes=[node("n1", labels={COUNTDOWN_LABEL: "soon"})], windows=[w]), T0)[0]
    assert a.kind == "countdown"


def test_selector_windows_and_the_earliest_window_counts() -> None:
    rack = mw("rack", 2 * HOUR, 3 * HOUR, selector={"matchLabels": {"rack": "7"}})
    one = mw("one", 1 * HOUR, 4 * HOUR, nodes=["n2"])
    actions, _ = run(snap(nodes=[node("n1", labels={"rack": "7"}), node("n2", labels={"rack": "7"}),
                                 node("n3", labels={"rack": "8"})], windows=[rack, one]), T0)
    got = {a.target.name: a.patch["metadata"]["labels"][COUNTDOWN_LABEL] for a in actions}  # type: ignore[index]
    assert got == {"n1": "117", "n2": "58"}


def test_nothing_to_do_without_windows() -> None:
    assert plan_maintenance(snap(nodes=[node("n1")], windows=[]), T0, S) == ([], None)
    s = Snapshot.of(nodes=[node("n1")])  # no CRD: windows unknown
    assert plan_maintenance(s, T0, S) == ([], None)


# -- cordon, drain, give back --------------------------------------------------------------
def test_at_the_start_the_node_is_cordoned_remembering_how_it_was() -> None:
    w = mw("fw", -10, HOUR, nodes=["n1", "n2"], reason="firmware")
    actions, wake = run(snap(nodes=[node("n1", labels={COUNTDOWN_LABEL: "0"}),
                                 node("n2", labels={COUNTDOWN_LABEL: "0"}, unschedulable=True)],
                             windows=[w]), T0)
    cordons = {a.target.name: a for a in actions if a.kind == "cordon"}
    assert cordons["n1"].patch == {"metadata": {"resourceVersion": "7", "annotations": {
        MAINTENANCE_ANNOTATION: '{"unschedulable":false,"window":"fw"}'}}, "spec": {"unschedulable": True}}
    assert json.loads(cordons["n2"].patch["metadata"]["annotations"][MAINTENANCE_ANNOTATION])["unschedulable"] is True  # type: ignore[index]
    assert "stays so after the window" in cordons["n2"].message
    assert cordons["n1"].reason == "MaintenanceStarted" and "firmware" in cordons["n1"].message
    assert [a.kind for a in actions if a.kind not in ("cordon",)] == []  # drain next pass, once cordoned
    assert wake == T0 + HOUR  # the end


def test_the_drain_evicts_each_pod_with_an_event_on_its_workload() -> None:
    w = mw("fw", -10, HOUR, nodes=["n1"])
    j = job("train")
    pods = [
        pod("train-a", owner=j, node="n1"),
        pod("solo", node="n1"),
        pod("done", node="n1", phase="Succeeded"),
        pod("going", node="n1", deleting=True),
        pod("elsewhere", node="n2"),
    ]
    ds = pod("fluentd", node="n1")
    ds["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fluentd",
                                          "uid": "ds", "controller": True}]
    cordoned = {"window": "fw", "unschedulable": False}
    s = snap(j, *pods, ds, nodes=[node("n1", labels={COUNTDOWN_LABEL: "0"}, unschedulable=True, cordoned=cordoned),
                                  node("n2")], windows=[w])
    actions, wake = run(s, T0)
    evicts = [(a.kind, a.target.kind, a.target.name, a.evict.name if a.evict else None) for a in actions]
    assert evicts == [("evict", "Pod", "solo", "solo"), ("evict", "Job", "train", "train-a")]
    assert all(a.reason == "MaintenanceEviction" and "window fw" in a.message for a in actions)
    assert wake == T0 - 10 + S.drain_timeout  # the drain deadline
    # past the deadline, what a budget still protects is deleted
    late, _ = run(s, T0 - 10 + S.drain_timeout)
    assert [(a.kind, [d.ref.name for d in a.deletes]) for a in late] == [("force-drain", ["solo"]),
                                                                        ("force-drain", ["train-a"])]
    assert late[0].event_type == "Warning" and "drain deadline" in late[0].message
    # deleted from outside, as an eviction would have: marked DisruptionTarget first (a Job's
    # podFailurePolicy can take it for an interruption; a gang starts over without counting it)
    assert [(d.disruption.reason if d.disruption else None) for a in late for d in a.deletes] == [
        "BatchgateMaintenanceDrain"] * 2


def test_at_the_end_nodes_come_back_exactly_as_they_were() -> None:
    w = mw("fw", -2 * HOUR, -1, nodes=["n1", "n2"])
    s = snap(nodes=[node("n1", unschedulable=True, cordoned={"window": "fw", "unschedulable": False},
                         labels={COUNTDOWN_LABEL: "0"}),
                    node("n2", unschedulable=True, cordoned={"window": "fw", "unschedulable": True})],
             windows=[w])
    actions, _ = run(s, T0)
    back = {a.target.name: a for a in actions if a.kind == "uncordon"}
    assert back["n1"].patch == {"metadata": {"resourceVersion": "7", "annotations": {MAINTENANCE_ANNOTATION: None}},
                                "spec": {"unschedulable": None}}
    assert back["n2"].patch["spec"] == {"unschedulable": True}  # type: ignore[index]
    assert "stays cordoned, as it was before" in back["n2"].message
    assert [a.target.name for a in actions if a.kind == "countdown"] == ["n1"]  # label removed too


def test_a_deleted_window_gives_its_nodes_back_too() -> None:
    s = snap(nodes=[node("n1", unschedulable=True, cordoned={"window": "gone", "unschedulable": False})], windows=[])
    (a,) = run(s, T0)[0]
    assert a.kind == "uncordon" and "gone" in a.message


def test_a_restart_mid_drain_finishes_and_doubles_nothing() -> None:
    """The second reconciler sees the cordon on the node and the evicted pods deleting:
    no second cordon, no second eviction; the rest goes."""
    w = mw("fw", -60, HOUR, nodes=["n1"])
    s = snap(pod("a", node="n1", deleting=True), pod("b", node="n1"),
             nodes=[node("n1", labels={COUNTDOWN_LABEL: "0"}, unschedulable=True,
                         cordoned={"window": "fw", "unschedulable": True})], windows=[w])
    actions, _ = run(s, T0)
    assert [(a.kind, a.evict.name if a.evict else "") for a in actions] == [("evict", "b")]


def test_window_status_and_invalid_windows() -> None:
    good = mw("fw", HOUR, 2 * HOUR, selector={"matchLabels": {"rack": "7"}})
    bad = mw("bad", HOUR, -HOUR, nodes=["n1"])
    ok = mw("ok", HOUR, 2 * HOUR, nodes=["n1"], status={"state": "Scheduled", "nodeCount": 1})
    s = snap(nodes=[node("n1", labels={"rack": "7", COUNTDOWN_LABEL: "57"}), node("n2", labels={"rack": "7"})],
             windows=[good, bad, ok])
    actions, _ = plan_maintenance(s, T0, S)
    status = [(a.target.name, a.patch, a.subresource) for a in actions if a.kind == "window-status"]
    assert status == [("fw", {"status": {"state": "Scheduled", "nodeCount": 2}}, "status")]
    (invalid,) = [a for a in actions if a.kind == "window-invalid"]
    assert invalid.event_type == "Warning" and "spec.end" in invalid.message


@pytest.mark.parametrize("offset", [-HOUR, HOUR])
def test_the_planner_includes_maintenance_and_wakes_for_it(offset: float) -> None:
    w = mw("fw", offset, offset + 2 * HOUR, nodes=["n1"])
    result = plan(snap(nodes=[node("n1")], windows=[w]), T0, S)
    assert {a.kind for a in result.actions} >= {"countdown"}
    assert result.wake_at is not None and result.wake_at <= T0 + HOUR


# -- the next window, recorded on running jobs ------------------------------------------------
def test_running_jobs_get_the_next_window_on_their_nodes() -> None:
    from webhook.reconciler.model import NEXT_MAINTENANCE_ANNOTATION
    from webhook.windows import read_next_maintenance

    w = mw("fw", 3 * HOUR, 5 * HOUR, nodes=["n1"])
    later = mw("later", 9 * HOUR, 10 * HOUR, nodes=["n2"])
    j = job("train", annotations={"batchgate.io/time-limit": "8h"})
    pods = [pod("train-a", owner=j, node="n1"), pod("train-b", owner=j, node="n2"),
            pod("solo", node="n2", annotations={"batchgate.io/time-limit": "1h"}),
            pod("free", node="n3", annotations={"batchgate.io/time-limit": "1h"}),
            pod("untimed", node="n1")]
    s = snap(j, *pods, nodes=[node("n1", labels={COUNTDOWN_LABEL: "176"}), node("n2"), node("n3")],
             windows=[w, later])
    actions = [a for a in plan_maintenance(s, T0, S)[0] if a.kind == "record-maintenance"]
    got = {a.target.name: read_next_maintenance((a.annotations or {})[NEXT_MAINTENANCE_ANNOTATION]) for a in actions}
    assert got == {"train": ("fw", T0 + 3 * HOUR, ts(3 * HOUR), "n1"), "solo": ("later", T0 + 9 * HOUR, ts(9 * HOUR), "n2")}
    assert all(a.quiet for a in actions)  # nothing the user must act on: their deadlines are unknown here


def test_a_job_whose_deadline_passes_a_new_window_is_told_and_stale_records_go() -> None:
    from webhook.reconciler.model import NEXT_MAINTENANCE_ANNOTATION

    w = mw("fw", HOUR, 2 * HOUR, nodes=["n1"])
    late = pod("late", node="n1", annotations={"batchgate.io/time-limit": "4h", "batchgate.io/started-at": ts(-60),
                                               "batchgate.io/deadline": ts(4 * HOUR - 60)})
    stale = pod("stale", node="n2", annotations={"batchgate.io/time-limit": "4h",
                                                 NEXT_MAINTENANCE_ANNOTATION: '{"node":"n2","start":"x","window":"old"}'})
    s = snap(late, stale, nodes=[node("n1", labels={COUNTDOWN_LABEL: "58"}), node("n2")], windows=[w])
    actions = {a.target.name: a for a in plan_maintenance(s, T0, S)[0] if a.kind == "record-maintenance"}
    assert not actions["late"].quiet and actions["late"].event_type == "Warning"
    assert "it will be evicted when the window starts" in actions["late"].message
    assert actions["stale"].annotations == {NEXT_MAINTENANCE_ANNOTATION: None} and actions["stale"].quiet
    # recorded: steady
    from webhook.windows import next_maintenance_text, parse_window

    window, _ = parse_window(w)
    assert window is not None
    recorded = pod("late", node="n1", annotations={**late["metadata"]["annotations"],
                                                   NEXT_MAINTENANCE_ANNOTATION: next_maintenance_text(window, "n1")})
    s = snap(recorded, nodes=[node("n1", labels={COUNTDOWN_LABEL: "58"})], windows=[w])
    assert [a for a in plan_maintenance(s, T0, S)[0] if a.kind == "record-maintenance"] == []


@pytest.mark.parametrize(("owner", "admitted", "drained"), [
    (("apps/v1", "DaemonSet", "fluentd"), None, False),
    (("v1", "Node", "n1"), None, False),  # a static (mirror) pod of the node it runs on
    (("nope.example.com/v1", "DaemonSet", "fluentd"), None, True),
    (("apps/v1", "DaemonSet", "fluentd"), ("batch", "24h"), True),  # a user's Pod, admitted as a job
    (("v1", "Node", "n2"), None, True),  # not the node it runs on
    (("apps/v2", "DaemonSet", "fluentd"), None, True),
], ids=["daemonset", "mirror-pod", "made-up-group", "recorded-as-a-job", "another-node", "made-up-version"])
def test_the_drain_leaves_only_real_daemonset_and_mirror_pods(owner, admitted, drained) -> None:
    """Issue 27: a bare Pod naming nope.example.com/v1 DaemonSet as its controller was skipped by
    the drain as a DaemonSet's pod. Only the real kinds count, and only for a pod the webhook
    admitted as a service (no admission record)."""
    w = mw("fw", -10, HOUR, nodes=["n1"])
    p = pod("sneaky", node="n1", admitted=admitted)
    api_version, kind, name = owner
    p["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name, "uid": "u",
                                         "controller": True}]
    cordoned = {"window": "fw", "unschedulable": False}
    s = snap(p, nodes=[node("n1", labels={COUNTDOWN_LABEL: "0"}, unschedulable=True, cordoned=cordoned),
                       node("n2")], windows=[w])
    actions, _ = run(s, T0)
    assert [a.evict.name for a in actions if a.kind == "evict" and a.evict] == (["sneaky"] if drained else [])
