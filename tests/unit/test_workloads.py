"""Every pod-level policy decides on the pod template of every workload kind, at CREATE and at
UPDATE where the template may change, and the pods a controller makes from the admitted
template need nothing more: `check` on a workload shows what its pods get."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.conftest import SPEC, check, workload
from webhook.contract import QUEUE_GATE
from webhook.workloads import (
    SHAPES,
    FailurePolicy,
    controller_kind,
    controller_of,
    dig,
    failure_policy,
    job_gang,
    pod_group,
    requested_queue,
    shape_of,
)

CM = "system:kube-controller-manager"
def pod_from(obj: dict[str, Any], owner_kind: str) -> dict[str, Any]:
    """The Pod a controller makes from the admitted workload's template."""
    shape = shape_of(*{"Job": ("batch", "Job"), "CronJob": ("batch", "CronJob")}.get(
        obj["kind"], ("apps", obj["kind"])))
    assert shape is not None
    meta, spec = shape.template(obj)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**copy.deepcopy(meta), "generateName": "w-", "namespace": "demo",
                         "ownerReferences": [{"apiVersion": "batch/v1" if owner_kind == "Job" else "apps/v1",
                                              "kind": owner_kind, "name": "w-1",
                                              "uid": "u", "controller": True}]},
            "spec": copy.deepcopy(spec)}


TEMPLATE_KINDS = ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"]
OWNER = {"Deployment": "ReplicaSet", "ReplicaSet": "ReplicaSet", "StatefulSet": "StatefulSet",
         "DaemonSet": "DaemonSet", "Job": "Job", "CronJob": "Job"}


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_the_template_gets_what_the_pods_get(kind):
    d = check(workload(kind))
    assert d.allowed, d.message
    meta, spec = SHAPES[("apps" if kind not in ("Job", "CronJob") else "batch", kind)].template(d.obj)
    assert spec["priorityClassName"] == "batchgate-batch"
    assert spec["automountServiceAccountToken"] is False
    assert any(v["name"] == "batchgate-shm" for v in spec["volumes"])
    assert meta["labels"]["batchgate.io/queue"] == "batch"
    # the controller's pod from the admitted template: decided again, nothing left to change
    # but what only a Pod has (the integer priority the Priority plugin would have written)
    pod = check(pod_from(d.obj, OWNER[kind]), user=CM, groups=("system:authenticated",))
    assert pod.allowed and not pod.warnings, (pod.message, pod.warnings)
    # (a CronJob's pods come from its Job, whose CREATE records the admission: here the pod
    # is made from the CronJob's template directly, so the record is written on the pod; a Job's
    # pod gets its Job's uid into the record's empty BATCHGATE_JOB_UID entry)
    record = {"/spec/containers/0/env"} if kind == "CronJob" else {"/spec/containers/0/env/2/value"} \
        if kind == "Job" else set()
    # ... and a ReplicaSet's, StatefulSet's or DaemonSet's pod waits in the gated queue (batch) behind
    # the gate, as a bare Pod does (rules.queue_gate: a service's pods are not exempt); a Job's not
    gate = {"/spec/schedulingGates"} if OWNER[kind] in ("ReplicaSet", "StatefulSet", "DaemonSet") else set()
    assert {op["path"] for op in pod.patch} <= {"/spec/priority", "/spec/preemptionPolicy", *record, *gate}, pod.patch
    assert ({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": QUEUE_GATE}]} in pod.patch) == bool(gate)
    if kind == "Job":
        assert {"op": "add", "path": "/spec/containers/0/env/2/value", "value": "u"} in pod.patch


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_a_denial_reaches_who_applied_the_workload(kind):
    """A node selector that conflicts with the namespace rule (gpu-* runs on the gpu pool)."""
    spec = {**SPEC, "nodeSelector": {"batchgate.io/pool": "cpu"}}
    d = check(workload(kind, spec=spec), namespace="gpu-team")
    assert not d.allowed
    assert "nodeSelector batchgate.io/pool=cpu conflicts with namespace gpu-team" in d.message


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "CronJob"])
def test_update_of_the_template_is_decided(kind):
    old = check(workload(kind)).obj
    new = copy.deepcopy(old)
    shape = SHAPES[("batch" if kind == "CronJob" else "apps", kind)]
    spec = dig(new, shape.pod_spec)
    spec["priorityClassName"] = "batchgate-urgent"  # an admin-only class via UPDATE
    d = check(new, operation="UPDATE", old=old)
    assert not d.allowed and "reserved for admins" in d.message
    spec["priorityClassName"] = "batchgate-batch"
    spec["containers"].append({"name": "sidecar", "image": "busybox"})
    d = check(new, operation="UPDATE", old=old)
    assert d.allowed
    assert {"path": f"/{'/'.join(map(str, shape.pod_spec))}/containers/1/volumeMounts",
            "op": "add", "value": [{"name": "batchgate-shm", "mountPath": "/dev/shm"}]} in d.patch


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "CronJob"])
def test_update_that_leaves_the_template_alone_is_not_decided_again(kind):
    old = workload(kind)  # never admitted (made while the webhook was down): still left alone
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"note": "scaled"}
    if kind != "CronJob":
        new["spec"]["replicas"] = 5
    d = check(new, operation="UPDATE", old=old)
    assert d.allowed and not d.patch and not d.warnings


@pytest.mark.parametrize("kind", ["Pod", "Job"])
def test_immutable_pod_specs_are_not_touched_on_update(kind):
    old = check(workload(kind)).obj
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["extra"] = "x"
    if kind == "Pod":
        del new["spec"]["volumes"]  # what a pod admitted before batchgate looks like
    d = check(new, operation="UPDATE", old=old)
    assert d.allowed and not [op for op in d.patch if "/spec" in op["path"]]


def test_replicaset_of_a_deployment_is_left_as_its_deployment_made_it():
    dep = check(workload("Deployment")).obj
    rs = copy.deepcopy(dep)
    rs["kind"] = "ReplicaSet"
    rs["metadata"] = {"name": "w-1", "namespace": "demo", "labels": dep["metadata"].get("labels", {}),
                      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "w",
                                           "uid": "u", "controller": True}]}
    d = check(rs, user=CM)
    assert d.allowed and not d.patch and not d.warnings, (d.patch, d.warnings)


# -- the module's questions, on recorded shapes --------------------------------------------
def test_where_things_live():
    cj = workload("CronJob", labels={"batchgate.io/queue": "interactive", "batchgate.io/pod-group": "g"})
    cj["spec"]["jobTemplate"]["metadata"] = {"annotations": {"batchgate.io/time-limit": "2h"}}
    shape = shape_of("batch", "CronJob")
    assert requested_queue(cj, shape) == "interactive"
    assert [(p, w) for p, w in shape.time_limit_at if dig(cj, (*p, "annotations", "batchgate.io/time-limit"))] == [
        (("spec", "jobTemplate", "metadata"), True)]
    assert pod_group(cj, shape) == ("g", None)
    pod = {"metadata": {"ownerReferences": [{"kind": "RayCluster", "controller": "yes"},
                                            {"kind": "Job", "name": "j", "controller": True}]}}
    assert controller_kind(pod) == "Job" and controller_of(pod)["name"] == "j"
    assert shape_of("", "Pod").template_mutable is False and shape_of("batch", "Job").template_mutable is False
    assert all(shape_of("apps", k).template_mutable and not shape_of("apps", k).runs_to_completion
               for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"))
    assert shape_of("batchgate.io", "ScavengerJob") is None


def test_admission_records_live_where_nobody_can_change_them():
    """Pods and Jobs keep the record in their containers' env (immutable, also in a suspended
    Job's template on Kubernetes 1.27+, whose labels and annotations are not); kinds whose
    template may change keep none."""
    from webhook.workloads import Record, admission_record

    assert {k for k, s in SHAPES.items() if s.record_at is not None} == {("", "Pod"), ("batch", "Job")}
    env = Record("batch", "4h").env()
    pod_obj = {"spec": {"containers": [{"name": "a"}, {"name": "b", "env": [{"name": "X", "value": "1"}, *env]}]}}
    assert admission_record(pod_obj, SHAPES[("", "Pod")]) == Record("batch", "4h")
    assert admission_record({"spec": {"template": {"spec": pod_obj["spec"]}}}, SHAPES[("batch", "Job")]) == Record(
        "batch", "4h")
    assert admission_record(pod_obj, SHAPES[("apps", "Deployment")]) is None
    half = {"spec": {"containers": [{"env": env[:1]}]}}
    assert admission_record(half, SHAPES[("", "Pod")]) is None
    assert admission_record({"spec": {"containers": "nonsense"}}, SHAPES[("", "Pod")]) is None


# -- gangs and failure policies (Jobs as a current API server stores them) ---------------------
# spec of an Indexed Job as kube-apiserver 1.31 returns it (defaults filled in)
CURRENT_JOB_SPEC: dict[str, Any] = {
    "parallelism": 4, "completions": 4, "completionMode": "Indexed", "backoffLimit": 6,
    "manualSelector": False, "podReplacementPolicy": "Failed", "suspend": False,
    "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "0b4f3c1e-0d7e-4a43-9d0c-1f1b0a7e6b9d"}},
    "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]},
    "template": {"metadata": {"labels": {"batch.kubernetes.io/job-name": "train"}},
                 "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer"}]}},
}


def test_failure_policy_reads_what_the_job_declares():
    fp = failure_policy(CURRENT_JOB_SPEC)
    assert fp.backoff_limit == 6 and fp.restart_policy == "Never" and fp.backoff_limit_per_index is None
    assert fp.tolerates() == ()  # FailJob and Ignore-on-disruption: no pod may fail on its own
    assert fp.action_for((("main", 42),), frozenset()) == "FailJob"
    assert fp.action_for((("main", 1),), frozenset()) == "Count"
    assert fp.action_for((("sidecar", 42),), frozenset()) == "Count"  # the rule names container main
    assert fp.action_for((("main", 137),), frozenset({("DisruptionTarget", "True")})) == "Ignore"


def test_failure_policy_not_in_and_defaults():
    fp = failure_policy({"podFailurePolicy": {"rules": [
        {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}}]},
        "template": {"spec": {"restartPolicy": "Never"}}})
    assert fp.backoff_limit == 6  # absent: the API default
    assert fp.action_for((("c", 3),), frozenset()) == "Ignore"
    assert fp.action_for((("c", 1),), frozenset()) == "Count"
    assert fp.tolerates() == ("podFailurePolicy rules that Ignore exit codes",)
    assert failure_policy(None) == FailurePolicy() == failure_policy({"backoffLimit": True})


GANG_SHAPES = [
    ("indexed, all at once, nothing tolerated", CURRENT_JOB_SPEC, None, True, "Indexed Job whose indexes all run"),
    ("indexed with backoffLimitPerIndex", {**CURRENT_JOB_SPEC, "backoffLimitPerIndex": 1, "maxFailedIndexes": 2},
     None, False, "backoffLimitPerIndex: 1, maxFailedIndexes: 2"),
    ("indexed with a successPolicy", {**CURRENT_JOB_SPEC, "successPolicy": {"rules": [{"succeededCount": 1}]}},
     None, False, "successPolicy"),
    ("non-indexed, fixed completions", {"parallelism": 4, "completions": 4}, None, False, "interchangeable"),
    ("work queue", {"parallelism": 4}, None, False, "interchangeable"),
    ("asked", {"parallelism": 4}, "true", True, 'asks with batchgate.io/gang: "true"'),
    ("opted out", CURRENT_JOB_SPEC, "false", False, 'says batchgate.io/gang: "false"'),
    ("one pod", {"parallelism": 1}, "true", False, "one pod at a time"),
]


@pytest.mark.parametrize(("spec", "request_", "is_gang", "why"), [c[1:] for c in GANG_SHAPES],
                         ids=[c[0] for c in GANG_SHAPES])
def test_which_jobs_are_gangs(spec, request_, is_gang, why):
    g = job_gang(spec, request=request_, names_group=False, queue="batch", queue_gangs=False)
    assert g.is_gang is is_gang and why in g.why, g


def test_a_gang_queue_takes_failure_tolerant_jobs_and_says_which():
    g = job_gang({**CURRENT_JOB_SPEC, "backoffLimitPerIndex": 1}, request=None, names_group=False, queue="mpi",
                 queue_gangs=True)
    assert g.is_gang and g.by_queue and g.tolerates == ("backoffLimitPerIndex: 1",)
    assert not job_gang(CURRENT_JOB_SPEC, request="false", names_group=False, queue="mpi", queue_gangs=True).is_gang


@pytest.mark.parametrize(("value", "default", "expected"), [
    (3, None, 3), (0, 7, 0), (-2, None, -2),
    (True, None, None), (False, 0, 0),  # JSON true decodes to a Python int, and is not a number here
    ("3", None, None), (3.0, 1, 1), (None, 1, 1),
])
def test_json_int_is_the_one_reading_of_a_whole_number_in_json(value: Any, default: int | None, expected: int | None) -> None:
    from webhook.units import json_int

    assert (json_int(value) if default is None else json_int(value, default)) == expected
