"""A released Job whose planned node vanished is re-queued, on the real control plane (issue 23).

The queue narrows a release to the node its placement chose, and a started Job's pod template
cannot change: when that node is deleted while the Job runs, the Job controller's replacement pod
would wait Pending until the time limit. The reconciler suspends the Job again, clears its start
time, takes its narrowing out (read back from the stored Job) and leaves it queued; when room frees
on the other node it is released there, narrowed to it, and its pod is bound there.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from cluster import wait_for
from harness import create, epoch, events, jobs_path, stop_reconcilers
from test_queue import finish, pods_of, reconcile, run_pods_of, suspended
from test_queue_narrowing import bundle, name_terms, node_of, timed, two_nodes  # noqa: F401 (fixtures)

from webhook.contract import (
    QUEUED_ANNOTATION,
    QUEUED_BY_SUSPEND,
    REQUEUED_AT_ANNOTATION,
    STARTED_AT_ANNOTATION,
)

pytestmark = pytest.mark.usefixtures("webhook_server")


def terms(spec: dict) -> list[dict]:
    return (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []


def annotations(kube: Any, ns: str, name: str) -> dict[str, str]:
    return kube.get(jobs_path(ns, name))["metadata"].get("annotations") or {}


def test_a_job_whose_planned_node_is_deleted_is_re_queued_and_released_onto_another_node(
        kube, namespace, two_nodes, tmp_path, bundle):  # noqa: F811 (fixtures)
    ns = namespace
    tag, nodes = two_nodes
    started: list = []
    try:
        # b holds 2 of its 4 CPUs for an hour: the 3-CPU job fits only on a, and is kept to it
        create(kube, ns, timed("filler", tag, "2", 60, pin="b"))
        job = timed("j", tag, "3", 60)
        job["spec"]["backoffLimit"] = 3  # a pod failing leaves the Job running: its controller replaces the pod
        create(kube, ns, job)
        reconcile(kube, ns, tmp_path, bundle, "r1", started)
        for name in ("filler", "j"):
            wait_for(lambda name=name: not suspended(kube, ns, name), 60, message=f"{name} released")
        assert node_of(kube, ns, "j") == nodes["a"]
        kept = kube.get(jobs_path(ns, "j"))["spec"]["template"]["spec"]
        assert name_terms(kept) and all(t == [nodes["a"]] for t in name_terms(kept)), kept.get("affinity")
        run_pods_of(kube, ns, "filler", 1)
        run_pods_of(kube, ns, "j", 1)
        wait_for(lambda: annotations(kube, ns, "j").get(STARTED_AT_ANNOTATION), 60, message="j's deadline recorded")

        # its pod fails and node a goes away: the replacement can be placed nowhere (kept to a)
        (first,) = pods_of(kube, ns, "j")
        kube.set_pod_phase(ns, first["metadata"]["name"], "Failed", {"main": 1})
        kube.delete_node(nodes["a"])
        uid = kube.get(jobs_path(ns, "j"))["metadata"]["uid"]
        (told,) = wait_for(lambda: events(kube, ns, uid=uid, reason="Requeued"), 120, message="j's Requeued Event")
        assert told["type"] == "Warning", told
        assert f"node {nodes['a']} is gone" in told["message"] and "re-queued" in told["message"], told["message"]

        # stored: suspended, queued again, no start time, batchgate's narrowing gone (b is still too full)
        def requeued() -> dict | None:
            stored = kube.get(jobs_path(ns, "j"))
            spec = stored["spec"]["template"]["spec"]
            done = (stored["spec"].get("suspend") is True and not stored.get("status", {}).get("startTime")
                    and not any(name_terms(spec)))
            return stored if done else None
        stored = wait_for(requeued, 60, message="j suspended, its start time cleared and its narrowing removed")
        ann = stored["metadata"]["annotations"]
        assert QUEUED_ANNOTATION in ann and REQUEUED_AT_ANNOTATION in ann, ann
        assert STARTED_AT_ANNOTATION not in ann, ann  # the run it lost does not date it
        assert terms(stored["spec"]["template"]["spec"]) == [  # the Job's own terms, as before its release
            {k: v for k, v in t.items() if k != "matchFields"} for t in terms(kept)]
        wait_for(lambda: not [p for p in pods_of(kube, ns, "j") if p["status"].get("phase") in ("Pending", "Running")
                              and not p["metadata"].get("deletionTimestamp")],
                 60, message="j's pods stopped while it waits")

        # room on b: released again, narrowed to b, bound there; its limit counts from the new run
        finish(kube, ns, "filler")
        wait_for(lambda: not suspended(kube, ns, "j"), 60, message="j released again")
        again = name_terms(kube.get(jobs_path(ns, "j"))["spec"]["template"]["spec"])
        assert again and all(t == [nodes["b"]] for t in again), again
        bound = wait_for(lambda: [p for p in pods_of(kube, ns, "j") if p["spec"].get("nodeName") == nodes["b"]],
                         60, message="j's new pod bound on b")
        assert all(t == [nodes["b"]] for t in name_terms(bound[0]["spec"]))
        kube.set_pod_phase(ns, bound[0]["metadata"]["name"], "Running",
                           {"main": {"running": {"startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}})
        since = wait_for(lambda: annotations(kube, ns, "j").get(STARTED_AT_ANNOTATION), 60,
                         message="j's new deadline recorded")
        assert epoch(since) >= epoch(ann[REQUEUED_AT_ANNOTATION]), (since, ann[REQUEUED_AT_ANNOTATION])
        assert len(events(kube, ns, uid=uid, reason="Requeued")) == 1
    finally:
        stop_reconcilers(started)


def test_a_job_its_user_suspends_goes_back_to_the_queue_and_only_the_queue_resumes_it(
        kube, namespace, two_nodes, tmp_path, bundle):  # noqa: F811 (fixtures)
    """The hole of a Job's ``suspend``: alice suspends her released, running Job, edits what
    Kubernetes lets a suspended Job change, and resumes it: it would run again without its turn.
    Instead the suspended Job is marked queued (she cannot resume it), the queue takes it back as
    it re-queues its own (its deadline and narrowing gone) and releases it in its turn, narrowed
    once, its time limit counting from its new start."""
    ns = namespace
    tag, nodes = two_nodes
    started: list = []
    patch = {"content_type": "application/merge-patch+json", "as_user": "alice"}
    try:
        create(kube, ns, timed("j", tag, "3", 60))
        reconcile(kube, ns, tmp_path, bundle, "r1", started)
        wait_for(lambda: not suspended(kube, ns, "j"), 60, message="j released")
        run_pods_of(kube, ns, "j", 1)
        wait_for(lambda: annotations(kube, ns, "j").get(STARTED_AT_ANNOTATION), 60, message="j's deadline recorded")
        stop_reconcilers(started)  # so that what alice's requests alone leave is read back

        kube.request("PATCH", jobs_path(ns, "j"), {"spec": {"suspend": True}}, **patch)
        stored = kube.get(jobs_path(ns, "j"))
        assert stored["spec"]["suspend"] is True
        assert stored["metadata"]["annotations"][QUEUED_ANNOTATION] == QUEUED_BY_SUSPEND, stored["metadata"]
        with pytest.raises(Exception, match="only batchgate's reconciler"):
            kube.request("PATCH", jobs_path(ns, "j"), {"spec": {"suspend": False}}, **patch)
        with pytest.raises(Exception, match="only batchgate's reconciler"):  # nor by taking the mark off
            kube.request("PATCH", jobs_path(ns, "j"), {"spec": {"suspend": False}, "metadata": {
                "annotations": {QUEUED_ANNOTATION: None}}}, **patch)
        # what Kubernetes lets her change while it is suspended and its start time is gone: her
        # pods' node selector (the queue places what she then asks for). The Job controller
        # clears a suspended Job's start time on 1.37 but not on 1.34, whose API server then
        # keeps the template immutable: the hole is Kubernetes' own to close there.
        wait_for(lambda: any(c.get("type") == "Suspended" and c.get("status") == "True" for c in (
            kube.get(jobs_path(ns, "j")).get("status") or {}).get("conditions") or ()), 60,
            message="the Job controller saw the suspension")
        edit = {"spec": {"template": {"spec": {"nodeSelector": {"e2e-queue": tag, "e2e-pin": "b"}}}}}
        edited = not (kube.get(jobs_path(ns, "j")).get("status") or {}).get("startTime")
        if edited:
            kube.request("PATCH", jobs_path(ns, "j"), edit, **patch)
        else:
            with pytest.raises(Exception, match="immutable"):
                kube.request("PATCH", jobs_path(ns, "j"), edit, **patch)
        assert suspended(kube, ns, "j")

        # the queue takes it back and releases it in its turn, onto b, narrowed once
        reconcile(kube, ns, tmp_path, bundle, "r2", started)
        uid = kube.get(jobs_path(ns, "j"))["metadata"]["uid"]
        (told,) = wait_for(lambda: events(kube, ns, uid=uid, reason="Requeued"), 60, message="j's Requeued Event")
        assert told["type"] == "Normal" and "suspended by its user" in told["message"], told
        wait_for(lambda: not suspended(kube, ns, "j"), 60, message="j released again by the queue")
        stored = kube.get(jobs_path(ns, "j"))
        ann = stored["metadata"]["annotations"]
        assert QUEUED_ANNOTATION not in ann and REQUEUED_AT_ANNOTATION in ann, ann
        again = name_terms(stored["spec"]["template"]["spec"])
        target = nodes["b"] if edited else again[0][0] if again and again[0] else None
        assert target and all(t == [target] for t in again), again  # each term narrowed once
        (pod,) = wait_for(lambda: [p for p in pods_of(kube, ns, "j") if p["spec"].get("nodeName") == target
                                   and not p["metadata"].get("deletionTimestamp")], 60, message="j's new pod")
        kube.set_pod_phase(ns, pod["metadata"]["name"], "Running",
                           {"main": {"running": {"startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}})
        since = wait_for(lambda: annotations(kube, ns, "j").get(STARTED_AT_ANNOTATION), 60,
                         message="j's new deadline recorded")
        assert epoch(since) >= epoch(ann[REQUEUED_AT_ANNOTATION]), (since, ann[REQUEUED_AT_ANNOTATION])
    finally:
        stop_reconcilers(started)
