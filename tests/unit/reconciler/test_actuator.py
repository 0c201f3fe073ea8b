"""The actuator against an in-memory API: fencing, idempotence, retries, leadership.

The same behaviour is exercised against a real API server in tests/e2e.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fakeapi import FakeApi
from reconbuild import HOUR, T0, deadline_ann, group_labels, job, pod, pod_group, terminated

from webhook.contract import DEADLINE_ANNOTATION, GANG_RESTART_ANNOTATION, WARNED_FOR_ANNOTATION
from webhook.reconciler.actuator import Actuator
from webhook.reconciler.errors import Forbidden, Transient
from webhook.reconciler.model import Snapshot, job_view, pod_group_view, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings

SETTINGS = Settings(api_attempts=3, api_backoff=0.01)


def snap(api: FakeApi, *, pod_groups: bool = False) -> Snapshot:
    objs = list(api.objects.values())
    return Snapshot.of(
        pods=[pod_view(o) for o in objs if o["kind"] == "Pod"],
        jobs=[job_view(o) for o in objs if o["kind"] == "Job"],
        pod_groups=[pod_group_view(o) for o in objs if o["kind"] == "PodGroup"] if pod_groups else None,
    )


def actuator(api: FakeApi, **kw: Any) -> Actuator:
    return Actuator(api, SETTINGS, sleep=lambda s: None, wall=lambda: T0, **kw)


def test_record_then_warn_chain_resource_versions_and_leave_a_steady_state() -> None:
    api = FakeApi()
    api.put(pod("p", started=0, annotations=deadline_ann("1h")))
    act = actuator(api)
    first = plan(snap(api), T0 + HOUR - 60, SETTINGS)
    assert [a.kind for a in first.actions] == ["record-deadline", "warn"]
    outcomes = act.execute(first.actions)
    assert [o.result for o in outcomes] == ["done", "done"]
    ann = api.objects[("pods", "demo", "p")]["metadata"]["annotations"]
    assert ann[DEADLINE_ANNOTATION] == ann[WARNED_FOR_ANNOTATION] == "2024-05-01T11:00:00Z"
    assert sorted(e["reason"] for e in api.events()) == ["DeadlineSet", "TimeLimitApproaching"]
    # The next pass on the new state: nothing to do, nothing written.
    before = len(api.writes())
    assert plan(snap(api), T0 + HOUR - 30, SETTINGS).actions == []
    assert len(api.writes()) == before


def test_stale_resource_version_is_a_conflict_and_the_object_is_re_read() -> None:
    api = FakeApi()
    api.put(pod("p", started=0, annotations=deadline_ann("1h")))
    planned = plan(snap(api), T0 + 60, SETTINGS).actions
    api.merge_patch(*_pod_addr("p"), {"metadata": {"labels": {"touched": "yes"}}})  # someone else writes
    seen: list[dict[str, Any]] = []
    outcomes = actuator(api, observe=lambda o: seen.append(o)).execute(planned)
    assert [o.result for o in outcomes] == ["conflict"]
    assert DEADLINE_ANNOTATION not in api.objects[("pods", "demo", "p")]["metadata"].get("annotations", {})
    assert seen and seen[-1]["metadata"]["labels"] == {"touched": "yes"}  # re-read for the next pass


def _pod_addr(name: str) -> tuple[Any, str, str]:
    from webhook.reconciler.model import POD

    return (POD, "demo", name)


def test_a_crash_between_event_and_delete_neither_repeats_the_event_nor_misses_the_delete() -> None:
    api = FakeApi()
    api.put(pod("p", started=0, annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR)))
    (stop,) = plan(snap(api), T0 + HOUR, SETTINGS).actions
    api.fail["delete"] = [Forbidden("simulated crash point", status=403)]
    assert actuator(api).execute([stop])[0].result == "failed"
    assert [e["reason"] for e in api.events()] == ["TimeLimitExceeded"]
    # A fresh actuator (a restarted process, no memory) plans and runs the same action again.
    (again,) = plan(snap(api), T0 + HOUR + 5, SETTINGS).actions
    assert again.event_name() == stop.event_name()
    assert actuator(api).execute([again])[0].result == "done"
    assert [e["reason"] for e in api.events()] == ["TimeLimitExceeded"]
    assert ("pods", "demo", "p") not in api.objects


def test_delete_never_hits_a_new_object_of_the_same_name() -> None:
    api = FakeApi()
    api.put(pod("p", uid="old", started=0, annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR)))
    (stop,) = plan(snap(api), T0 + HOUR, SETTINGS).actions
    del api.objects[("pods", "demo", "p")]
    api.put(pod("p", uid="new", started=HOUR))  # re-created with the same name
    outcome = actuator(api).execute([stop])[0]
    assert outcome.result == "done"
    assert api.objects[("pods", "demo", "p")]["metadata"]["uid"] == "new"


def test_delete_of_something_already_gone_is_done() -> None:
    api = FakeApi()
    api.put(pod("p", started=0, annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR)))
    (stop,) = plan(snap(api), T0 + HOUR, SETTINGS).actions
    del api.objects[("pods", "demo", "p")]
    assert actuator(api).execute([stop])[0].result == "done"


class _RecordingApi(FakeApi):
    def __init__(self) -> None:
        super().__init__()
        self.deleted_with: list[str | None] = []

    def delete(self, kind: Any, namespace: Any, name: str, *, uid: str | None = None,
               propagation: str | None = None) -> Any:
        self.deleted_with.append(uid)
        return super().delete(kind, namespace, name, uid=uid, propagation=propagation)


def _guard(api: FakeApi, owner: str) -> dict[str, Any]:
    return api.put({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "md-1", "namespace": "demo",
                                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "md-1",
                                                      "uid": owner}]}})


@pytest.mark.parametrize("owner", ["job-uid", "another-job"])
def test_an_object_not_in_the_cache_is_deleted_by_the_uid_read_and_only_when_its_owner_is_ours(owner: str) -> None:
    """A segment's guard (a PodDisruptionBudget the cache does not hold) goes with its uid as
    precondition, read live; one of the same name owned by another Job (or made since by
    someone else) is left alone (issue 27)."""
    from webhook.reconciler.actions import Action, Delete
    from webhook.reconciler.model import Ref

    api = _RecordingApi()
    stored = _guard(api, owner)
    ref = Ref("policy/v1", "PodDisruptionBudget", "demo", "md-1", "")
    lift = Action(kind="sj-unguard", target=Ref("batchgate.io/v1alpha1", "ScavengerJob", "demo", "md", "sj-uid"),
                  reason="GuardLifted", message="lifted", quiet=True, deletes=(Delete(ref, owner_uid="job-uid"),))
    assert actuator(api).execute([lift])[0].result == "done"
    if owner == "job-uid":
        assert api.deleted_with == [stored["metadata"]["uid"]]
        assert ("poddisruptionbudgets", "demo", "md-1") not in api.objects
    else:
        assert api.deleted_with == []
        assert ("poddisruptionbudgets", "demo", "md-1") in api.objects


@pytest.mark.parametrize(("grace", "finalizers", "kept"), [
    pytest.param(0, [], False, id="unbound pod: gone at once, the response shows a deletionTimestamp"),
    pytest.param(30, [], True, id="bound pod: terminating for its grace period"),
    pytest.param(0, ["batch.kubernetes.io/job-tracking"], True, id="grace 0 but a finalizer holds it"),
])
def test_a_delete_response_is_taken_in_only_while_the_object_is_still_there(
        grace: int, finalizers: list[str], kept: bool) -> None:
    """kube-apiserver 1.20, DELETE of a pod without nodeName (recorded): 200 with the pod,
    ``deletionTimestamp`` now and ``deletionGracePeriodSeconds: 0``, and the pod is gone."""
    api = FakeApi()
    api.put(pod("p", started=0, annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR)))
    (stop,) = plan(snap(api), T0 + HOUR, SETTINGS).actions
    plain = api.delete

    def delete(*a: Any, **kw: Any) -> dict[str, Any]:
        cur = api.objects[("pods", "demo", "p")]
        plain(*a, **kw)
        cur["metadata"].update({"deletionTimestamp": "2024-05-01T11:00:00Z", "deletionGracePeriodSeconds": grace,
                                **({"finalizers": finalizers} if finalizers else {})})
        return cur

    api.delete = delete  # type: ignore[method-assign]
    seen: list[str] = []
    act = actuator(api, observe=lambda o: seen.append("observe"), forget=lambda k, o: seen.append("forget"))
    assert act.execute([stop])[0].result == "done"
    assert seen[-1] == ("observe" if kept else "forget")


@pytest.mark.parametrize(("failures", "result", "delete_calls", "n_pauses"), [
    pytest.param([], "done", 1, 0, id="no failure"),
    pytest.param([Transient("503", status=503)], "done", 2, 1, id="one 503 is retried"),
    pytest.param([Transient("timeout"), Transient("429", status=429)], "done", 3, 2, id="two transient failures"),
    pytest.param([Transient("503", status=503)] * 3, "failed", 3, 2, id="gives up after api_attempts"),
    pytest.param([Forbidden("no", status=403)], "failed", 1, 0, id="forbidden is not retried"),
])
def test_transient_failures_are_retried_with_backoff(failures: list[Any], result: str, delete_calls: int,
                                                     n_pauses: int) -> None:
    api = FakeApi()
    api.put(pod("p", started=0, annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR)))
    (stop,) = plan(snap(api), T0 + HOUR, SETTINGS).actions
    api.fail["delete"] = list(failures)
    pauses: list[float] = []
    act = Actuator(api, SETTINGS, sleep=pauses.append, wall=lambda: T0)
    assert act.execute([stop])[0].result == result
    assert sum(1 for c in api.calls if c[0] == "delete") == delete_calls
    assert len(pauses) == n_pauses
    if n_pauses == 2:
        assert pauses[1] > pauses[0]  # the backoff grows


def test_no_writes_when_not_leader() -> None:
    api = FakeApi()
    api.put(pod("p", started=0, annotations=deadline_ann("1h")))
    outcomes = actuator(api, is_leader=lambda: False).execute(plan(snap(api), T0 + 60, SETTINGS).actions)
    assert [o.result for o in outcomes] == ["skipped"]
    assert api.writes() == []


def test_gang_failure_restarts_the_group_keeps_the_job_and_marks_the_cause_last() -> None:
    api = FakeApi()
    j = api.put(job("mpi", template_labels=group_labels("mpi", 2)))
    api.put(pod("mpi-a", owner=j, labels=group_labels("mpi", 2)))
    api.put(pod("mpi-b", owner=j, labels=group_labels("mpi", 2), phase="Failed",
                containers=[terminated(137, reason="OOMKilled")]))
    (a,) = plan(snap(api), T0, SETTINGS).actions
    assert actuator(api).execute([a])[0].result == "done"
    assert ("jobs", "demo", "mpi") in api.objects and ("pods", "demo", "mpi-a") not in api.objects
    failed = api.objects[("pods", "demo", "mpi-b")]  # kept, for its logs and the Job's count
    assert failed["metadata"]["annotations"][GANG_RESTART_ANNOTATION] == failed["metadata"]["uid"]
    assert not failed["status"].get("conditions")  # it failed: no DisruptionTarget on it
    ops = [(c[0], c[1], c[3]) for c in api.calls if c[0] in ("delete", "patch")]
    # the partner is marked DisruptionTarget before it is deleted; the mark of the cause comes last
    assert ops == [("patch", "pods/status", "mpi-a"), ("delete", "pods", "mpi-a"), ("patch", "pods", "mpi-b")]
    (ev,) = api.events()
    assert ev["involvedObject"]["kind"] == "Job" and "OOMKilled" in ev["message"] and "mpi-b" in ev["message"]
    assert ev["type"] == "Warning" and ev["reason"] == "GangRestarted"
    assert plan(snap(api), T0, SETTINGS).actions == []  # dealt with


def test_the_partner_is_marked_disrupted_by_batchgate_beside_its_other_conditions() -> None:
    """What the Job's podFailurePolicy (Ignore on DisruptionTarget) matches once the pod has ended: a
    condition merged by type into the pod's status (a strategic merge patch, uid as precondition), as
    the taint manager and PodGC write it; the kubelet's own conditions stay."""
    api = FakeApi()
    j = api.put(job("mpi", template_labels=group_labels("mpi", 2)))
    ready = {"type": "Ready", "status": "True"}
    partner = api.put(pod("mpi-a", owner=j, labels=group_labels("mpi", 2), conditions=[ready]))
    api.put(pod("mpi-b", owner=j, labels=group_labels("mpi", 2), phase="Failed", containers=[terminated(1)]))
    (a,) = plan(snap(api), T0, SETTINGS).actions
    (d,) = a.deletes
    assert d.disruption is not None and d.disruption.reason == "BatchgateGangRestart"
    seen: list[dict[str, Any]] = []
    real_delete = api.delete

    def delete(kind: Any, ns: Any, name: str, **kw: Any) -> Any:
        seen.append(copy.deepcopy(api.objects[("pods", ns, name)]))  # the pod as the delete finds it
        return real_delete(kind, ns, name, **kw)

    api.delete = delete  # type: ignore[method-assign]
    assert actuator(api).execute([a])[0].result == "done"
    (gone,) = seen
    assert gone["metadata"]["uid"] == partner["metadata"]["uid"]
    ready_now, disrupted = gone["status"]["conditions"]
    assert ready_now == ready
    assert disrupted["type"] == "DisruptionTarget" and disrupted["status"] == "True"
    assert disrupted["reason"] == "BatchgateGangRestart" and disrupted["lastTransitionTime"]
    assert "pod mpi-b of pod group mpi failed" in disrupted["message"]


@pytest.mark.parametrize("what", ["gone", "replaced"])
def test_a_partner_gone_or_replaced_before_its_mark_is_not_deleted(what: str) -> None:
    """The status patch carries the uid: a pod of the same name made since is neither marked nor deleted."""
    api = FakeApi()
    j = api.put(job("mpi", template_labels=group_labels("mpi", 2)))
    api.put(pod("mpi-a", owner=j, labels=group_labels("mpi", 2)))
    api.put(pod("mpi-b", owner=j, labels=group_labels("mpi", 2), phase="Failed", containers=[terminated(1)]))
    (a,) = plan(snap(api), T0, SETTINGS).actions
    del api.objects[("pods", "demo", "mpi-a")]
    if what == "replaced":
        api.put(pod("mpi-a", owner=j, labels=group_labels("mpi", 2), uid="uid-new"))
    assert actuator(api).execute([a])[0].result == "done"
    assert not [c for c in api.calls if c[0] == "delete"]
    if what == "replaced":
        assert not api.objects[("pods", "demo", "mpi-a")]["status"].get("conditions")
    failed = api.objects[("pods", "demo", "mpi-b")]
    assert failed["metadata"]["annotations"][GANG_RESTART_ANNOTATION] == failed["metadata"]["uid"]


def test_a_failed_delete_leaves_the_cause_unmarked_so_the_restart_is_planned_again() -> None:
    api = FakeApi()
    j = api.put(job("mpi", template_labels=group_labels("mpi", 2)))
    api.put(pod("mpi-a", owner=j, labels=group_labels("mpi", 2)))
    api.put(pod("mpi-b", owner=j, labels=group_labels("mpi", 2), phase="Failed", containers=[terminated(1)]))
    (a,) = plan(snap(api), T0, SETTINGS).actions
    api.fail["delete"] = [Forbidden("simulated crash point", status=403)]
    assert actuator(api).execute([a])[0].result == "failed"
    assert GANG_RESTART_ANNOTATION not in (api.objects[("pods", "demo", "mpi-b")]["metadata"].get("annotations") or {})
    assert [x.kind for x in plan(snap(api), T0, SETTINGS).actions] == ["gang-restart"]


def test_pod_group_create_then_steady_then_deleted_after_the_job() -> None:
    api = FakeApi()
    j = api.put(job("mpi", template_labels=group_labels("mpi", 4)))
    (create,) = plan(snap(api, pod_groups=True), T0, SETTINGS).actions
    assert actuator(api).execute([create])[0].result == "done"
    pg = api.objects[("podgroups", "demo", "mpi")]
    assert pg["spec"] == {"minMember": 4}
    assert pg["metadata"]["ownerReferences"][0]["uid"] == j["metadata"]["uid"]
    assert plan(snap(api, pod_groups=True), T0, SETTINGS).actions == []
    del api.objects[("jobs", "demo", "mpi")]
    (delete,) = plan(snap(api, pod_groups=True), T0, SETTINGS).actions
    assert actuator(api).execute([delete])[0].result == "done"
    assert ("podgroups", "demo", "mpi") not in api.objects


def test_pod_group_is_kept_when_the_live_check_finds_the_workload() -> None:
    """The cache said the Job was gone; the API says otherwise: no deletion, no Event."""
    api = FakeApi()
    j = api.put(job("mpi", template_labels=group_labels("mpi", 4)))
    api.put(pod_group("mpi", min_member=4, owner=j))
    stale = Snapshot.of(pods=[], jobs=[], pod_groups=[pod_group_view(api.objects[("podgroups", "demo", "mpi")])])
    (delete,) = plan(stale, T0, SETTINGS).actions
    assert actuator(api).execute([delete])[0].result == "conflict"
    assert ("podgroups", "demo", "mpi") in api.objects
    assert api.events() == []


def test_bare_group_pod_group_kept_while_a_pod_is_left() -> None:
    api = FakeApi()
    api.put(pod_group("mpi", min_member=2))
    api.put(pod("r0", labels=group_labels("mpi", 2)))
    stale = Snapshot.of(pods=[], jobs=[], pod_groups=[pod_group_view(api.objects[("podgroups", "demo", "mpi")])])
    (delete,) = plan(stale, T0, SETTINGS).actions
    assert actuator(api).execute([delete])[0].result == "conflict"
    assert ("podgroups", "demo", "mpi") in api.objects


# -- maintenance windows ---------------------------------------------------------------
def _window(start: float, end: float) -> dict[str, Any]:
    from reconbuild import ts

    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
            "metadata": {"name": "fw"}, "spec": {"start": ts(start), "end": ts(end), "nodes": ["n1"]}}


def _node(name: str, *, unschedulable: bool = False) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"unschedulable": True} if unschedulable else {}}


def _msnap(api: FakeApi) -> Snapshot:
    from webhook.reconciler.model import node_view, window_view

    objs = list(api.objects.values())
    return Snapshot.of(
        pods=[pod_view(o) for o in objs if o["kind"] == "Pod"],
        jobs=[job_view(o) for o in objs if o["kind"] == "Job"],
        nodes=[node_view(o) for o in objs if o["kind"] == "Node"],
        windows=[window_view(o) for o in objs if o["kind"] == "MaintenanceWindow"],
    )


@pytest.mark.parametrize("cordoned_before", [False, True])
def test_a_window_from_countdown_to_drain_to_the_end(cordoned_before: bool) -> None:
    from webhook.contract import COUNTDOWN_LABEL

    api = FakeApi()
    api.put(_window(HOUR, 2 * HOUR))
    api.put(_node("n1", unschedulable=cordoned_before))
    api.put(pod("solo", node="n1"))
    api.put(pod("guarded", node="n1"))
    api.blocked.add("guarded")
    act = actuator(api)

    def step(t: float) -> list[str]:
        outcomes = act.execute(plan(_msnap(api), t, SETTINGS).actions)
        return [f"{o.action.kind}:{o.result}" for o in outcomes]

    assert step(T0) == ["countdown:done", "window-status:done"]
    assert api.objects[("nodes", "", "n1")]["metadata"]["labels"][COUNTDOWN_LABEL] == "58"
    assert step(T0 + 60) == []  # steady: nothing written
    assert step(T0 + HOUR) == ["countdown:done", "cordon:done", "window-status:done"]
    n1 = api.objects[("nodes", "", "n1")]
    assert n1["spec"]["unschedulable"] is True
    assert step(T0 + HOUR + 1) == ["evict:failed", "evict:done"]  # guarded: the budget says no, for now
    assert ("pods", "demo", "solo") not in api.objects
    assert step(T0 + HOUR + 2) == ["evict:failed"]
    assert step(T0 + HOUR + SETTINGS.drain_timeout) == ["force-drain:done"]
    assert ("pods", "demo", "guarded") not in api.objects
    reasons = [e["reason"] for e in api.events()]
    assert reasons.count("MaintenanceEviction") == 1 and reasons.count("MaintenanceDrainDeadline") == 1
    assert step(T0 + 2 * HOUR) == ["countdown:done", "uncordon:done", "window-status:done"]
    n1 = api.objects[("nodes", "", "n1")]
    assert n1["spec"].get("unschedulable", False) is cordoned_before
    assert COUNTDOWN_LABEL not in n1["metadata"]["labels"] and "batchgate.io/maintenance" not in (
        n1["metadata"].get("annotations") or {})
    assert step(T0 + 2 * HOUR + 60) == []
    assert [e["reason"] for e in api.events()].count("MaintenanceEnded") == 1
