"""Deadlines against the admission record (issue 11, item 2): the queue and limit a workload was
admitted with, in its containers' env, count whatever its labels and annotations say later."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from reconbuild import HOUR, T0, deadline_ann, job, pod, snapshot, ts

from webhook.contract import DEADLINE_ANNOTATION, STARTED_AT_ANNOTATION
from webhook.reconciler.model import job_view, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import QueuePolicy, Settings

DAY = 24 * HOUR
QUEUES = QueuePolicy(max_time_limit={"batch": 7 * DAY, "interactive": 12 * HOUR, "scavenger": 30 * DAY},
                     default_queue="batch")
SETTINGS = Settings(warning_lead=600, queues=QUEUES)
Q = "batchgate.io/queue"


def kinds(objects: list[dict[str, Any]], now: float, settings: Settings = SETTINGS) -> list[tuple[str, str, str]]:
    return [(a.kind, a.target.name, a.reason) for a in plan(snapshot(*objects), T0 + now, settings).actions]


def first(objects: list[dict[str, Any]], now: float, settings: Settings = SETTINGS) -> Any:
    return plan(snapshot(*objects), T0 + now, settings).actions[0]


# -- relabelled, then extended: the recorded queue's maximum still caps it ------------------
@pytest.mark.parametrize("label", ["scavenger", "no-such-queue", ""])
def test_relabelled_then_raised_job_is_capped_at_the_admitted_queue(label):
    """Admitted to interactive (max 12h) with 2h; then relabelled and raised to 20d while UPDATE
    validation was unreachable: stopped at 12h, not at 20d (scavenger's 30d, or the default's 7d)."""
    j = job("train", labels={Q: label} if label else None, annotations=deadline_ann("20d"),
            admitted=("interactive", "2h"))
    a = pod("a", owner=j, started=0)
    assert kinds([j, a], 12 * HOUR - 1) == [("record-deadline", "train", "DeadlineSet"),
                                              ("warn", "train", "TimeLimitApproaching")]
    stop = first([j, a], 12 * HOUR)
    assert (stop.kind, stop.reason) == ("stop", "TimeLimitExceeded")
    assert "over the maximum 12h of queue interactive" in stop.message
    if label:
        assert f"its label says {label}" in stop.message


def test_without_a_record_the_label_decides_as_before():
    j = job("train", labels={Q: "scavenger"}, annotations=deadline_ann("20d"), admitted=None)
    assert kinds([j, pod("a", owner=j, started=0)], 12 * HOUR)[0][2] == "AdmissionUnrecorded"
    assert kinds([j, pod("a", owner=j, started=0)], 20 * DAY)[0] == ("stop", "train", "TimeLimitExceeded")


def test_an_extension_within_the_admitted_queue_maximum_still_counts():
    j = job("train", annotations=deadline_ann("10h", started=0, deadline=4 * HOUR), admitted=("batch", "4h"))
    a = first([j, pod("a", owner=j, started=0)], HOUR)
    assert (a.reason, a.annotations) == ("TimeLimitExtended", {DEADLINE_ANNOTATION: ts(10 * HOUR)})


# -- the annotation removed or broken: the admitted limit applies -------------------------------
@pytest.mark.parametrize("annotations,says", [
    ({}, "gone"),
    ({"batchgate.io/time-limit": "forever"}, "not a duration ('forever')"),
], ids=["removed", "malformed"])
def test_removed_limit_falls_back_to_the_admitted_one(annotations, says):
    j = job("train", annotations={**annotations, STARTED_AT_ANNOTATION: ts(0), DEADLINE_ANNOTATION: ts(4 * HOUR)},
            admitted=("batch", "4h"))
    a = pod("a", owner=j, started=0)
    assert kinds([j, a], 3 * HOUR) == []  # the recorded deadline stands
    stop = first([j, a], 4 * HOUR)
    assert (stop.kind, stop.reason) == ("stop", "TimeLimitExceeded")
    assert f"annotation is {says}: the 4h it was admitted with applies" in stop.message


def test_removed_after_an_extension_returns_to_the_admitted_limit():
    j = job("train", annotations={STARTED_AT_ANNOTATION: ts(0), DEADLINE_ANNOTATION: ts(10 * HOUR)}, admitted=("batch", "4h"))
    a = first([j, pod("a", owner=j, started=0)], HOUR)
    assert (a.kind, a.reason, a.annotations) == ("record-deadline", "TimeLimitReduced", {DEADLINE_ANNOTATION: ts(4 * HOUR)})


def test_bare_pod_with_the_annotation_removed_is_still_stopped():
    p = pod("p", started=0, annotations={}, admitted=("interactive", "1h"))
    assert kinds([p], 10) == [("record-deadline", "p", "DeadlineSet")]
    assert kinds([p], HOUR) == [("stop", "p", "TimeLimitExceeded")]
    # before: no annotation, no record -> not ours
    assert kinds([pod("p", started=0, annotations={}, admitted=None)], 10 * DAY) == []


def test_admitted_queue_gone_from_the_bundle_falls_back_to_the_label():
    p = pod("p", started=0, labels={Q: "interactive"}, annotations=deadline_ann("2d"), admitted=("retired", "2d"))
    assert kinds([p], 12 * HOUR)[0] == ("stop", "p", "TimeLimitExceeded")


# -- unrecorded workloads: as before, with a Warning Event once ---------------------------------
def test_unrecorded_workload_gets_a_warning_with_its_first_deadline_only():
    p = pod("p", started=0, annotations=deadline_ann("1h"), admitted=None)
    a = first([p], 10)
    assert (a.kind, a.reason, a.event_type) == ("record-deadline", "AdmissionUnrecorded", "Warning")
    assert "no admission record" in a.message and "BATCHGATE_QUEUE" in a.message
    recorded = pod("p", started=0, annotations=deadline_ann("1h", started=0, deadline=HOUR), admitted=None)
    assert kinds([recorded], 10) == []
    assert first([pod("p", started=0, annotations=deadline_ann("1h"))], 10).reason == "DeadlineSet"


# -- Pods whose owner is not a Job of ours ----------------------------------------------------
def _owned(p: dict[str, Any], kind: str, name: str = "web-1", uid: str = "rs-uid") -> dict[str, Any]:
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
                                         "controller": True}]
    return p


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet", "DaemonSet", "RayCluster"])
def test_admitted_pod_with_another_owner_is_a_job_of_its_own(kind):
    """A user's Pod claiming a service owner gets a limit (and a record) at admission; an
    operator's Pod with a limit of its own too: the reconciler enforces it, not only the kubelet."""
    p = _owned(pod("p", started=0, annotations=deadline_ann("1h")), kind)
    assert kinds([p], HOUR) == [("stop", "p", "TimeLimitExceeded")]


def test_service_pods_without_a_record_are_left_alone():
    """What a ReplicaSet's controller makes carries no limit and no record; an annotation someone
    adds later is not a record."""
    p = _owned(pod("p", started=0, annotations=deadline_ann("1h"), admitted=None), "ReplicaSet")
    assert kinds([p], 10 * DAY) == []


def test_pod_claiming_a_job_that_is_not_ours_is_judged_alone():
    other = job("train", ns="other", annotations=deadline_ann("30d"))
    p = pod("p", started=0, owner=other, annotations=deadline_ann("1h"))  # uid of a Job in another namespace
    assert kinds([other, p], HOUR) == [("stop", "p", "TimeLimitExceeded")]


def test_pods_of_a_job_follow_the_job_not_their_own_record():
    """Extended on the Job: its pods, admitted with the old limit, are not stopped by it."""
    j = job("train", annotations=deadline_ann("10h", started=0, deadline=10 * HOUR), admitted=("batch", "4h"))
    p = pod("a", owner=j, started=0, annotations=deadline_ann("4h"))
    assert kinds([j, p], 5 * HOUR) == []


# -- recorded objects -----------------------------------------------------------------------
# A Job as a 1.30 API server stores it: suspended and never started, so the template's labels
# and annotations were editable (AllowMutableSchedulingDirectives) - here relabelled to the
# scavenger queue and given 30d - while the containers' env is not.
SUSPENDED_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "sim", "namespace": "demo", "uid": "0c1a2b3c-0000-4000-8000-00000000aaaa",
                 "resourceVersion": "5123", "generation": 3, "creationTimestamp": ts(-HOUR),
                 "labels": {Q: "scavenger"}, "annotations": {"batchgate.io/time-limit": "30d"}},
    "spec": {
        "parallelism": 1, "completions": 1, "completionMode": "Indexed", "backoffLimit": 6, "suspend": True,
        "manualSelector": False, "podReplacementPolicy": "TerminatingOrFailed",
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "0c1a2b3c-0000-4000-8000-00000000aaaa"}},
        "template": {
            "metadata": {"labels": {"batch.kubernetes.io/controller-uid": "0c1a2b3c-0000-4000-8000-00000000aaaa",
                                    "batch.kubernetes.io/job-name": "sim", Q: "scavenger",
                                    "controller-uid": "0c1a2b3c-0000-4000-8000-00000000aaaa", "job-name": "sim"},
                         "annotations": {"batchgate.io/time-limit": "30d"}},
            "spec": {"containers": [{"name": "sim", "image": "busybox", "command": ["sleep", "infinity"],
                                     "env": [{"name": "BATCHGATE_QUEUE", "value": "interactive"},
                                             {"name": "BATCHGATE_TIME_LIMIT", "value": "2h"}],
                                     "resources": {}, "terminationMessagePath": "/dev/termination-log",
                                     "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                     "securityContext": {}, "schedulerName": "default-scheduler", "activeDeadlineSeconds": 43800,
                     "priorityClassName": "batchgate-interactive", "schedulingGates": []}},
    },
    "status": {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended",
                               "message": "Job suspended", "lastProbeTime": ts(-HOUR),
                               "lastTransitionTime": ts(-HOUR)}]},
}
# Its pod once resumed (1.30: Indexed, with the completion index, a scheduling gate removed).
INDEXED_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "sim-0-x7k2p", "generateName": "sim-0-", "namespace": "demo",
                 "uid": "0c1a2b3c-0000-4000-8000-00000000bbbb", "resourceVersion": "5200",
                 "creationTimestamp": ts(-10),
                 "labels": {"batch.kubernetes.io/job-completion-index": "0", "batch.kubernetes.io/job-name": "sim",
                            Q: "scavenger", "job-name": "sim"},
                 "annotations": {"batch.kubernetes.io/job-completion-index": "0", "batchgate.io/time-limit": "30d"},
                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "sim",
                                      "uid": "0c1a2b3c-0000-4000-8000-00000000aaaa", "controller": True,
                                      "blockOwnerDeletion": True}]},
    "spec": {"nodeName": "node-1", "containers": copy.deepcopy(
        SUSPENDED_JOB["spec"]["template"]["spec"]["containers"])},
    "status": {"phase": "Running", "startTime": ts(-5),
               "conditions": [{"type": "PodReadyToStartContainers", "status": "True"}],
               "containerStatuses": [{"name": "sim", "ready": True, "restartCount": 0, "started": True,
                                      "state": {"running": {"startedAt": ts(0)}}}]},
}


def test_recorded_suspended_job_whose_template_labels_were_edited_keeps_its_admission():
    view = job_view(SUSPENDED_JOB)
    assert view.admitted is not None and (view.admitted.queue, view.admitted.limit) == ("interactive", 2 * HOUR)
    assert view.queue == "scavenger" and view.limit == 30 * DAY
    resumed = copy.deepcopy(SUSPENDED_JOB)
    resumed["spec"]["suspend"] = False
    resumed["status"] = {"startTime": ts(0), "active": 1}
    assert kinds([resumed, INDEXED_POD], 12 * HOUR - 1)[0] == ("record-deadline", "sim", "DeadlineSet")
    stop = first([resumed, INDEXED_POD], 12 * HOUR)
    assert (stop.kind, stop.target.name) == ("stop", "sim")
    assert "maximum 12h of queue interactive" in stop.message


def test_recorded_pod_reads_its_record_and_only_plain_values_count():
    assert pod_view(INDEXED_POD).admitted is not None
    forged = copy.deepcopy(INDEXED_POD)
    forged["spec"]["containers"][0]["env"] = [
        {"name": "BATCHGATE_QUEUE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batchgate.io/queue']"}}},
        {"name": "BATCHGATE_TIME_LIMIT", "value": "2h"}]
    assert pod_view(forged).admitted is None
