"""Gang teardown and PodGroup lifecycle: table-driven planner cases."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from reconbuild import (
    HOUR,
    T0,
    deadline_ann,
    group_labels,
    job,
    pod,
    pod_group,
    running,
    snapshot,
    terminated,
    ts,
)

from webhook.contract import GANG_RESTART_ANNOTATION
from webhook.reconciler.model import LABEL_COMPLETION_INDEX
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings

SETTINGS = Settings()
G = group_labels("mpi", 3)
J = job("mpi", template_labels=G)
J_DONE = job("mpi", template_labels=G, finished="Failed")


def member(name: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("labels", G)
    return pod(name, **kw)


def job_members(*overrides: dict[str, Any], owner: dict[str, Any] = J) -> list[dict[str, Any]]:
    names = ["mpi-a", "mpi-b", "mpi-c"]
    return [member(n, owner=owner, **(overrides[i] if i < len(overrides) else {})) for i, n in enumerate(names)]


@dataclass
class Case:
    id: str
    objects: list[dict[str, Any]]
    want: list[tuple[str, str, str]]  # (kind, target name, reason)
    deletes: list[tuple[str, str | None]] | None = None  # (name, propagation) across all actions, in order
    message: str = ""
    nodes: list[str] | None = None
    settings: Settings = SETTINGS


OOM = {"containers": [terminated(137, reason="OOMKilled")], "phase": "Failed"}
EXIT3 = {"containers": [terminated(3)], "phase": "Failed"}
RESTART, INDEX = GANG_RESTART_ANNOTATION, LABEL_COMPLETION_INDEX
# mpi-a failed earlier and its group was restarted for it: marked with its own uid
OOM_DONE = {**OOM, "annotations": {RESTART: "uid-demo-mpi-a"}}


def pfp(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"podFailurePolicy": {"rules": list(rules)}}

GANG_CASES = [
    Case("all members running: nothing", [J, *job_members()], []),
    Case("one member OOMKilled: the group starts over, the Job stays; the Event names the pod and OOMKilled",
         [J, *job_members({}, OOM)], [("gang-restart", "mpi", "GangRestarted")],
         deletes=[("mpi-a", None), ("mpi-c", None)],
         message="pod mpi-b of pod group mpi failed: container main was OOMKilled (exit code 137); the group "
                 "starts over together (restart 1; 1 of the 6 failures its backoffLimit allows): deleting its 2 "
                 "running pods so that the Job makes them again"),
    Case("non-zero exit code is told apart from OOM",
         [J, *job_members(EXIT3)], [("gang-restart", "mpi", "GangRestarted")],
         message="container main exited with code 3"),
    Case("a container failed while the pod still runs (sidecar alive): the Job counts it when the pod ends",
         [J, *job_members({"containers": [terminated(2, name="rank"), running(0, "sidecar")]})], []),
    Case("restartPolicy OnFailure: a container that crashed and restarted is no pod failure",
         [J, *job_members({"containers": [terminated(1, last=True)], "restart_policy": "OnFailure"})], []),
    Case("restartPolicy Never: a failed container is final (bare pods do not wait for the phase)",
         [member("r0"), member("r1", containers=[terminated(2, name="rank"), running(0, "sidecar")])],
         [("gang-failed", "r0", "GangFailed"), ("gang-failed", "r1", "GangFailed")]),
    Case("a member that succeeds is no failure",
         [J, *job_members({"phase": "Succeeded", "containers": [terminated(0)]})], []),
    Case("first failure named when several failed",
         [J, *job_members({"phase": "Failed", "containers": [terminated(1, finished=90)]},
                          {"phase": "Failed", "containers": [terminated(1, finished=30)]})],
         [("gang-restart", "mpi", "GangRestarted")], deletes=[("mpi-c", None)],
         message="pod mpi-b of pod group mpi failed: container main exited with code 1; the group starts over "
                 "together (restart 1; 2 of the 6 failures"),
    Case("a failure already dealt with (marked with its own uid) triggers nothing",
         [J, *job_members(OOM_DONE)], []),
    Case("a mark copied from elsewhere (not the pod's uid) counts for nothing",
         [J, *job_members({**OOM, "annotations": {RESTART: "uid-demo-other"}})],
         [("gang-restart", "mpi", "GangRestarted")]),
    Case("the next failure after a restart: restart 2, both failures counted",
         [J, *job_members(OOM_DONE, EXIT3)], [("gang-restart", "mpi", "GangRestarted")],
         deletes=[("mpi-c", None)], message="(restart 2; 2 of the 6 failures its backoffLimit allows)"),
    Case("backoffLimit spent (counted on the pods): the Job controller fails the Job, nothing here",
         [J1 := job("mpi", template_labels=G, spec={"backoffLimit": 1}),
          *job_members(OOM_DONE, EXIT3, owner=J1)], []),
    Case("backoffLimit spent (counted by the Job controller, pods gone): nothing here",
         [J2 := job("mpi", template_labels=G, spec={"backoffLimit": 2}, failed=3), *job_members(EXIT3, owner=J2)], []),
    Case("backoffLimit 0: the Job controller fails the Job at once and stops its pods",
         [J3 := job("mpi", template_labels=G, spec={"backoffLimit": 0}), *job_members(EXIT3, owner=J3)], []),
    Case("podFailurePolicy FailJob on this exit code: the Job fails by its own rule, nothing here",
         [J4 := job("mpi", template_labels=G, spec=pfp({"action": "FailJob", "onExitCodes":
                                                         {"operator": "In", "values": [3]}})),
          *job_members(EXIT3, owner=J4)], []),
    Case("podFailurePolicy Ignore on this exit code: the group starts over, uncounted",
         [J5 := job("mpi", template_labels=G, spec={"backoffLimit": 0, **pfp(
             {"action": "Ignore", "onExitCodes": {"containerName": "main", "operator": "In", "values": [3]}})}),
          *job_members(EXIT3, owner=J5)], [("gang-restart", "mpi", "GangRestarted")],
         message="(restart 1; its podFailurePolicy ignores this failure)"),
    Case("podFailurePolicy Count rule: counted like no rule",
         [J6 := job("mpi", template_labels=G, spec={"backoffLimit": 0, **pfp(
             {"action": "Count", "onExitCodes": {"operator": "In", "values": [3]}})}),
          *job_members(EXIT3, owner=J6)], []),
    Case("backoffLimitPerIndex: another index's failures do not spend this one's",
         [J7 := job("mpi", template_labels=G, spec={"backoffLimitPerIndex": 1, "completionMode": "Indexed"}),
          member("mpi-a", owner=J7, **{**OOM_DONE, "annotations": {**OOM_DONE["annotations"], INDEX: "0"}}),
          member("mpi-a2", owner=J7, **{**OOM_DONE, "uid": "u-a2", "annotations": {RESTART: "u-a2", INDEX: "0"}}),
          member("mpi-b", owner=J7, **{**EXIT3, "annotations": {INDEX: "1"}}),
          member("mpi-c", owner=J7, annotations={INDEX: "2"})],
         [("gang-restart", "mpi", "GangRestarted")], deletes=[("mpi-c", None)],
         message="(restart 3; index 1 may fail 1 times (backoffLimitPerIndex))"),
    Case("backoffLimitPerIndex spent for this index: the index fails by the Job's rule, nothing here",
         [J8 := job("mpi", template_labels=G, spec={"backoffLimitPerIndex": 1, "completionMode": "Indexed"}),
          member("mpi-a", owner=J8, **{**OOM_DONE, "annotations": {**OOM_DONE["annotations"], INDEX: "1"}}),
          member("mpi-b", owner=J8, **{**EXIT3, "annotations": {INDEX: "1"}}),
          member("mpi-c", owner=J8, annotations={INDEX: "2"})], []),
    Case("failed member already being deleted triggers nothing",
         [J, *job_members({**OOM, "deleting": True})], []),
    Case("finished Job: its pods are history", [J_DONE, *job_members(OOM, owner=J_DONE)], []),
    Case("Job being deleted: nothing more to tear down",
         [job("mpi", template_labels=G, deleting=True), *job_members(OOM)], []),
    Case("pods whose Job is not (yet) in the cache are left alone", [*job_members(OOM)], []),
    Case("evicted member: interrupted, the pods go and the Job stays",
         [J, *job_members({"phase": "Failed", "reason": "Evicted", "message": "low on memory",
                           "containers": [terminated(137)]})],
         [("gang-interrupted", "mpi", "GangInterrupted")],
         deletes=[("mpi-b", None), ("mpi-c", None), ("mpi-a", None)], message="was interrupted (Evicted: low on memory)"),
    Case("member lost with its node: interrupted, not failed",
         [J, *job_members({}, {"node": "node-gone"})], [("gang-interrupted", "mpi", "GangInterrupted")],
         deletes=[("mpi-a", None), ("mpi-c", None), ("mpi-b", None)], message="node node-gone is gone", nodes=["node-1"]),
    Case("node list unknown: no node-based verdict", [J, *job_members({}, {"node": "node-gone"})], [], nodes=None),
    Case("preempted (DisruptionTarget condition) is an interruption",
         [J, *job_members({"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                             "reason": "PreemptionByScheduler"}]})],
         [("gang-interrupted", "mpi", "GangInterrupted")], message="PreemptionByScheduler"),
    Case("disruption the Job's podFailurePolicy fails it for: its controller stops the pods, nothing here",
         [J9 := job("mpi", template_labels=G, spec=pfp({"action": "FailJob", "onPodConditions":
                                                         [{"type": "DisruptionTarget", "status": "True"}]})),
          *job_members({"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                           "reason": "PreemptionByScheduler"}]}, owner=J9)], []),
    Case("interruption teardown can be switched off",
         [J, *job_members({"phase": "Failed", "reason": "Evicted"})], [],
         settings=Settings(teardown_interrupted_groups=False)),
    Case("bare pods: every member gets the Event and goes, the failed one last",
         [member("r0"), member("r1", **OOM), member("r2")],
         [("gang-failed", "r0", "GangFailed"), ("gang-failed", "r2", "GangFailed"), ("gang-failed", "r1", "GangFailed")],
         deletes=[("r0", None), ("r2", None), ("r1", None)], message="pod r1 of pod group mpi failed"),
    Case("bare group cut short by a crash: the rest is finished with the same cause",
         [member("r0", deleting=True), member("r1", **OOM), member("r2")],
         [("gang-failed", "r2", "GangFailed"), ("gang-failed", "r1", "GangFailed")],
         deletes=[("r2", None), ("r1", None)]),
    Case("same group name, different owners: judged separately",
         [J, *job_members(), member("bare-0"), member("bare-1", **EXIT3)],
         [("gang-failed", "bare-0", "GangFailed"), ("gang-failed", "bare-1", "GangFailed")]),
    Case("deadline and failure on the same Job: one deletion",
         [job("mpi", template_labels=G, annotations=deadline_ann("1h", started=0, deadline=HOUR, warned=HOUR)),
          *job_members(OOM)], [("stop", "mpi", "TimeLimitExceeded")]),
]


def _now(case: Case) -> float:
    return T0 + (2 * HOUR if case.id.startswith("deadline and failure") else 60)


@pytest.mark.parametrize("case", GANG_CASES, ids=[c.id for c in GANG_CASES])
def test_gangs(case: Case) -> None:
    result = plan(snapshot(*case.objects, nodes=case.nodes), _now(case), case.settings)
    assert [(a.kind, a.target.name, a.reason) for a in result.actions] == case.want
    if case.deletes is not None:
        got = [(d.ref.name, d.propagation) for a in result.actions for d in a.deletes]
        assert got == case.deletes
    if case.message:
        assert case.message in result.actions[0].message
    for a in result.actions:
        assert all(d.ref.uid for d in a.deletes)


def test_teardown_event_names_depend_on_the_cause_not_on_progress() -> None:
    """A teardown finished after a crash reuses the first attempt's Event names."""
    full = plan(snapshot(member("r0"), member("r1", **OOM), member("r2")), T0, Settings()).actions
    rest = plan(snapshot(member("r0", deleting=True), member("r1", **OOM), member("r2")), T0, Settings()).actions
    names = {a.target.name: a.event_name() for a in full}
    assert all(names[a.target.name] == a.event_name() for a in rest)


# -- PodGroups -------------------------------------------------------------
@dataclass
class PGCase:
    id: str
    objects: list[dict[str, Any]]
    pod_groups: list[dict[str, Any]] | None
    want: list[tuple[str, str, str]]
    check: dict[str, Any] | None = None  # fields of the first action's pod_group write


PG_CASES = [
    PGCase("CRD not installed: nothing", [J, *job_members()], None, []),
    PGCase("Job with a group gets a PodGroup owned by it",
           [J], [], [("create-podgroup", "mpi", "PodGroupCreated")],
           check={"op": "create", "name": "mpi", "min_member": 3, "group": "mpi"}),
    PGCase("existing matching PodGroup: steady", [J, *job_members()], [pod_group("mpi", min_member=3, owner=J)], []),
    PGCase("wrong minMember is corrected", [J], [pod_group("mpi", min_member=2, owner=J)],
           [("update-podgroup", "mpi", "PodGroupResized")], check={"op": "update", "min_member": 3, "resource_version": "30"}),
    PGCase("finished Job keeps its PodGroup while it exists",
           [J_DONE, *job_members(OOM, owner=J_DONE)], [pod_group("mpi", min_member=3, owner=J_DONE)], []),
    PGCase("Job gone: its PodGroup goes", [], [pod_group("mpi", min_member=3, owner=J)],
           [("delete-podgroup", "mpi", "PodGroupDeleted")], check={"op": "delete", "uid": "uid-demo-mpi"}),
    PGCase("PodGroups batchgate did not create are never touched",
           [], [pod_group("theirs", managed=False)], []),
    PGCase("unmanaged PodGroup of the right name is left as it is",
           [J], [pod_group("mpi", managed=False, min_member=7)], []),
    PGCase("PodGroup of an earlier Job of the same name is replaced",
           [J], [pod_group("mpi", min_member=3, owner=job("mpi", uid="old-uid"))],
           [("delete-podgroup", "mpi", "PodGroupDeleted")]),
    PGCase("bare group: created from its pods, Event on the first pod",
           [member("r1"), member("r0")], [], [("create-podgroup", "r0", "PodGroupCreated")], check={"owner": None}),
    PGCase("bare group with every pod terminating: kept until the last one is gone",
           [member("r0", deleting=True)], [pod_group("mpi", min_member=3)], []),
    PGCase("bare group with no pod left: deleted", [], [pod_group("mpi", min_member=3)],
           [("delete-podgroup", "mpi", "PodGroupDeleted")]),
    PGCase("Job template without the group (generateName): taken from its pods",
           [job("mpi"), *job_members()], [], [("create-podgroup", "mpi", "PodGroupCreated")],
           check={"min_member": 3}),
    PGCase("scheduler label names the PodGroup",
           [job("j", template_labels=group_labels("g", 2, cosched=False) | {"scheduling.x-k8s.io/pod-group": "g-pg"})],
           [], [("create-podgroup", "j", "PodGroupCreated")], check={"name": "g-pg", "group": "g"}),
]


@pytest.mark.parametrize("case", PG_CASES, ids=[c.id for c in PG_CASES])
def test_pod_groups(case: PGCase) -> None:
    result = plan(snapshot(*case.objects, pod_groups=case.pod_groups), T0 + 60, Settings())
    assert [(a.kind, a.target.name, a.reason) for a in result.actions] == case.want
    if case.check:
        w = result.actions[0].pod_group
        assert w is not None
        for k, v in case.check.items():
            assert getattr(w, k) == v, k


def test_job_podgroup_is_owned_by_the_job() -> None:
    (a,) = plan(snapshot(J, pod_groups=[]), T0, Settings()).actions
    assert a.pod_group is not None and a.pod_group.owner is not None
    assert (a.pod_group.owner.kind, a.pod_group.owner.uid) == ("Job", "uid-demo-mpi")


def test_a_restart_marks_its_cause_after_the_deletes_with_the_pods_own_uid() -> None:
    (a,) = plan(snapshot(J, *job_members({}, OOM)), T0, Settings()).actions
    assert a.mark is not None and a.mark.ref.name == "mpi-b" and a.mark.ref.uid == "uid-demo-mpi-b"
    assert a.mark.annotations == {GANG_RESTART_ANNOTATION: "uid-demo-mpi-b"}
    assert a.event_type == "Warning" and a.target.kind == "Job"
    # once marked, the next pass (the members being replaced) plans nothing for this failure
    marked = job_members({"deleting": True}, {**OOM, "annotations": {GANG_RESTART_ANNOTATION: "uid-demo-mpi-b"}},
                         {"deleting": True})
    assert plan(snapshot(J, *marked), T0, Settings()).actions == []


def test_a_restart_of_a_generate_name_job_reads_the_jobs_budget() -> None:
    """A Job created with generateName has only the size in its template: its policy is read all the same."""
    j = job("sweep-x1", template_labels={"batchgate.io/pod-group-size": "3"}, spec={"backoffLimit": 0})
    members = [pod(n, owner=j, labels=group_labels("sweep-x1", 3), **kw)
               for n, kw in (("s-a", {}), ("s-b", EXIT3), ("s-c", {}))]
    assert plan(snapshot(j, *members), T0, Settings()).actions == []  # backoffLimit 0: the Job fails itself


# A member of an Indexed Job as kube-apiserver 1.31 stores it after the scheduler preempted it
# (Job tracking finalizer, completion index as label and annotation, DisruptionTarget condition).
PREEMPTED_131: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
        "name": "train-2-x7k2p", "namespace": "demo", "uid": "5f0c2a9e-7f4b-4a8e-9d7a-0c6e3b1d2f45",
        "resourceVersion": "48213", "creationTimestamp": "2024-05-01T09:00:00Z",
        "finalizers": ["batch.kubernetes.io/job-tracking"],
        "labels": {"batch.kubernetes.io/controller-uid": "uid-demo-train", "batch.kubernetes.io/job-name": "train",
                   "batch.kubernetes.io/job-completion-index": "2", **group_labels("train", 4)},
        "annotations": {"batch.kubernetes.io/job-completion-index": "2"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-demo-train",
                             "controller": True, "blockOwnerDeletion": True}],
    },
    "spec": {"nodeName": "node-1", "restartPolicy": "Never", "hostname": "train-2", "subdomain": "train",
             "containers": [{"name": "main", "image": "trainer"}]},
    "status": {
        "phase": "Failed",
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "demo/urgent: preempting to accommodate a higher priority pod",
             "lastTransitionTime": "2024-05-01T09:59:00Z"},
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": "2024-05-01T09:59:30Z"},
        ],
        "containerStatuses": [{"name": "main", "ready": False, "restartCount": 0, "image": "trainer",
                               "state": {"terminated": {"exitCode": 137, "reason": "Error",
                                                        "startedAt": "2024-05-01T09:01:00Z",
                                                        "finishedAt": "2024-05-01T09:59:30Z"}}}],
    },
}


def test_a_recorded_preempted_member_of_a_current_indexed_job() -> None:
    from webhook.reconciler.model import pod_view

    v = pod_view(PREEMPTED_131)
    assert v.index == 2 and v.exits == (("main", 137),) and ("DisruptionTarget", "True") in v.conditions
    assert v.interrupted is not None and "PreemptionByScheduler" in v.interrupted
    train = job("train", uid="uid-demo-train", template_labels=group_labels("train", 4),
                spec={"completionMode": "Indexed", "completions": 4, "parallelism": 4, **pfp(
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})})
    others = [member(f"train-{i}", owner=train, labels=group_labels("train", 4)) for i in (0, 1, 3)]
    (a,) = plan(snapshot(train, PREEMPTED_131, *others), T0, Settings()).actions
    assert a.kind == "gang-interrupted" and [d.ref.name for d in a.deletes][-1] == "train-2-x7k2p"
    # the same Job, failing the Job for any disruption: its controller stops the pods, nothing here
    strict = job("train", uid="uid-demo-train", template_labels=group_labels("train", 4), spec=pfp(
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}))
    assert plan(snapshot(strict, PREEMPTED_131, *others), T0, Settings()).actions == []


# -- Kubernetes 1.26+: what batchgate takes down is a disruption, not a failure --------------------
# The Job controller counts every pod deleted before it ended as failed; the webhook gives gang Jobs a
# podFailurePolicy rule {Ignore, onPodConditions: DisruptionTarget}, and batchgate marks the members
# it takes down with that condition (reason BatchgateGangRestart) before deleting them.
def disruption(reason: str, at: float) -> list[dict[str, Any]]:
    return [{"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "...",
             "lastTransitionTime": ts(at)}]


def disruptions(a: Any) -> list[tuple[str, str | None]]:
    return [(d.ref.name, d.disruption.reason if d.disruption is not None else None) for d in a.deletes]


def test_a_restart_marks_the_running_partners_disrupted_not_the_failed_one() -> None:
    (a,) = plan(snapshot(J, *job_members({}, OOM)), T0, Settings()).actions
    assert a.kind == "gang-restart"
    assert disruptions(a) == [("mpi-a", "BatchgateGangRestart"), ("mpi-c", "BatchgateGangRestart")]
    assert all(d.disruption is not None and "pod mpi-b of pod group mpi failed" in d.disruption.message
               for d in a.deletes)


def test_a_partner_kubernetes_marked_already_keeps_its_reason() -> None:
    (a,) = plan(snapshot(J, *job_members({"conditions": disruption("PreemptionByScheduler", 30)}, OOM)),
                T0 + 60, Settings()).actions
    assert disruptions(a) == [("mpi-a", None), ("mpi-c", "BatchgateGangRestart")]


def test_a_member_lost_with_its_node_is_marked_too_and_goes_last() -> None:
    (a,) = plan(snapshot(J, *job_members({}, {"node": "node-gone"}), nodes=["node-1"]), T0, Settings()).actions
    assert a.kind == "gang-interrupted"
    assert disruptions(a) == [("mpi-a", "BatchgateGangRestart"), ("mpi-c", "BatchgateGangRestart"),
                              ("mpi-b", "BatchgateGangRestart")]


def test_an_evicted_member_that_ended_is_not_marked_after_the_fact() -> None:
    (a,) = plan(snapshot(J, *job_members({"phase": "Failed", "reason": "Evicted", "containers": [terminated(137)]})),
                T0, Settings()).actions
    assert disruptions(a) == [("mpi-b", "BatchgateGangRestart"), ("mpi-c", "BatchgateGangRestart"), ("mpi-a", None)]


def test_bare_members_are_marked_as_torn_down() -> None:
    acts = plan(snapshot(member("r0"), member("r1", **OOM), member("r2")), T0, Settings()).actions
    assert [disruptions(a) for a in acts] == [[("r0", "BatchgateGangTeardown")], [("r2", "BatchgateGangTeardown")],
                                              [("r1", None)]]


PREEMPTING = {"deleting": True, "conditions": disruption("PreemptionByScheduler", 30)}


def test_a_member_kubernetes_is_taking_down_restarts_the_gang_and_is_marked_as_dealt_with() -> None:
    """Preempted, evicted through the Eviction API (a drain), the taint manager's: the pod is being
    deleted with Kubernetes' DisruptionTarget. Its partners go too; it is marked, not deleted again."""
    (a,) = plan(snapshot(J, *job_members({}, PREEMPTING)), T0 + 60, Settings()).actions
    assert (a.kind, a.reason) == ("gang-interrupted", "GangInterrupted") and a.key == "uid-demo-mpi-b"
    assert "pod mpi-b of pod group mpi was interrupted (PreemptionByScheduler: ...)" in a.message
    assert disruptions(a) == [("mpi-a", "BatchgateGangRestart"), ("mpi-c", "BatchgateGangRestart")]
    assert a.mark is not None and a.mark.ref.name == "mpi-b" and a.mark.annotations == {GANG_RESTART_ANNOTATION: "uid-demo-mpi-b"}
    marked = {**PREEMPTING, "annotations": {GANG_RESTART_ANNOTATION: "uid-demo-mpi-b"}}
    assert plan(snapshot(J, *job_members({}, marked)), T0 + 60, Settings()).actions == []


def test_a_bare_member_kubernetes_is_taking_down_tears_the_group_down() -> None:
    acts = plan(snapshot(member("r0"), member("r1", **PREEMPTING)), T0 + 60, Settings()).actions
    assert [(a.target.name, disruptions(a), a.mark is not None) for a in acts] == [
        ("r0", [("r0", "BatchgateGangTeardown")], False), ("r1", [], True)]


def test_only_partners_it_ran_with_start_over_not_the_replacements_made_since() -> None:
    """The Job's replacements, created after the disruption, are the next start: and a condition another
    component wrote over batchgate's own (PodGC on a lost node keeps its time) finds no partner."""
    later = [member(n, owner=J) for n in ("mpi-a2", "mpi-c2")]
    for p in later:
        p["metadata"]["creationTimestamp"] = ts(45)
    assert plan(snapshot(J, member("mpi-b", owner=J, **PREEMPTING), *later), T0 + 60, Settings()).actions == []
    podgc = {"deleting": True, "phase": "Failed", "conditions": disruption("DeletionByPodGC", 30)}
    assert plan(snapshot(J, member("mpi-a", owner=J, **podgc), *later), T0 + 60, Settings()).actions == []


def test_a_member_batchgate_took_down_triggers_nothing() -> None:
    ours = {"deleting": True, "conditions": disruption("BatchgateGangRestart", 30)}
    assert plan(snapshot(J, *job_members(ours, {}, ours)), T0 + 60, Settings()).actions == []


def test_a_restart_cut_short_between_a_mark_and_its_delete_is_finished_with_the_same_cause() -> None:
    """A crash after a partner got batchgate's condition but before it was deleted: that partner is no
    interruption of its own; the failure is found again and the same restart finished."""
    ours = {"conditions": disruption("BatchgateGangRestart", 30)}
    (a,) = plan(snapshot(J, *job_members(ours, OOM)), T0 + 60, Settings()).actions
    assert (a.kind, a.key) == ("gang-restart", "uid-demo-mpi-b")
    assert disruptions(a) == [("mpi-a", None), ("mpi-c", "BatchgateGangRestart")]


def test_a_disruption_the_job_fails_for_is_left_to_its_controller_while_the_pod_terminates() -> None:
    strict = job("mpi", template_labels=G, spec=pfp(
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}))
    assert plan(snapshot(strict, *job_members({}, PREEMPTING, owner=strict)), T0 + 60, Settings()).actions == []


def test_the_partners_failures_batchgate_caused_are_not_counted_against_the_budget() -> None:
    """After a restart the partners end Failed (SIGTERM, exit 143) with batchgate's DisruptionTarget: the
    Job's Ignore rule leaves them uncounted, and so does the planner's budget."""
    j = job("mpi", template_labels=G, spec={"backoffLimit": 2, **pfp(
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})})
    stopped = {"phase": "Failed", "deleting": True, "containers": [terminated(143)],
               "conditions": disruption("BatchgateGangRestart", 30)}
    members = [member("mpi-a", owner=j, **stopped),
               member("mpi-b", owner=j, **{**OOM, "annotations": {RESTART: "uid-demo-mpi-b"}}),
               member("mpi-c", owner=j, **stopped), member("mpi-a2", owner=j, **EXIT3), member("mpi-b2", owner=j)]
    (a,) = plan(snapshot(j, *members), T0 + 60, Settings()).actions
    assert a.kind == "gang-restart" and "(restart 2; 2 of the 2 failures its backoffLimit allows)" in a.message, a.message
    assert disruptions(a) == [("mpi-b2", "BatchgateGangRestart")]
