"""The reconciler acts only on confirmed facts, against a real API server.

These tests drive the reconciler's own Controller in-process against kube-apiserver, so that
what its cache holds at the moment of a pass is under the test's control: a forged
ownerReference naming another namespace's Job, a node the cache has not seen. Every read and
write (the live node read, the deletes) goes to the real API server.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import require_components

from tests.conftest import POLICIES
from webhook.reconciler.controller import Controller
from webhook.reconciler.kube import KubeApi
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.rules import load_bundle

OPT_OUT = {"batchgate.io/admission": "disabled"}  # the webhook is not under test here
pytestmark = pytest.mark.namespace_labels(OPT_OUT)
PAUSE = "registry.k8s.io/pause:3.2"
GROUP, SIZE = "batchgate.io/pod-group", "batchgate.io/pod-group-size"


@pytest.fixture
def api(kube: Any) -> Iterator[KubeApi]:
    client = KubeApi.connect(kube.kubeconfig("admin"))
    yield client
    client.close()


def controller(api: KubeApi, namespace: str | None) -> Controller:
    queues = QueuePolicy.from_bundle(load_bundle(POLICIES))
    return Controller(api, Settings(leader_elect=False, namespace=namespace, queues=queues))


def pod(name: str, *, node: str, labels: dict[str, str], owner: dict[str, Any] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "labels": labels}
    if owner is not None:
        md["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": PAUSE}]}}


def alive(kube: Any, path: str, uid: str) -> bool:
    try:
        obj = kube.get(path)
    except Exception as e:
        if getattr(e, "status", None) == 404:
            return False
        raise
    return obj["metadata"]["uid"] == uid and not obj["metadata"].get("deletionTimestamp")


def test_a_forged_owner_reference_to_another_namespaces_job_tears_nothing_down(kube, namespace, api):
    """A user writes pods whose controlling ownerReference names a Job of another namespace (its
    uid is readable by anyone who may list Jobs there), labels them as that Job's pod group, and
    fails one. The reconciler must not tear the victim's Job down."""
    require_components(kube, "kube-controller-manager")
    victim_ns = kube.create_namespace(prefix="e2e-victim", labels=OPT_OUT)
    try:
        labels = {GROUP: "train", SIZE: "2"}
        job = kube.create(f"/apis/batch/v1/namespaces/{victim_ns}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 6, "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": PAUSE}],
                         "nodeSelector": {"batchgate.io/e2e": "nowhere"}}}},  # Pending: never finishes
        })
        uid = job["metadata"]["uid"]
        # The garbage collector deletes a pod whose owner is not in its namespace within a second
        # (it looks the owner up there), unless it cannot resolve the owner's apiVersion: the
        # attacker's way to keep forged pods around. Should it still be faster, try again, so
        # that the pass below surely sees them and this test can fail.
        forged = {"apiVersion": "batch/v1beta9", "kind": "Job", "name": "train", "uid": uid,
                  "controller": True, "blockOwnerDeletion": False}
        for attempt in range(10):
            names = [f"x{attempt}-0", f"x{attempt}-1"]
            for n in names:
                kube.create(f"/api/v1/namespaces/{namespace}/pods", pod(n, node="nowhere", labels=labels, owner=forged))
            kube.set_pod_phase(namespace, names[1], "Failed", {"main": 1})
            c = controller(api, None)
            c.cache.list_once()
            seen = [p for p in c.cache.snapshot().pods.values()
                    if p.ref.namespace == namespace and p.ref.name in names and not p.deleting
                    and p.owner is not None and p.owner.uid == uid]
            if len(seen) == 2 and any(p.failure for p in seen):
                break
        else:
            pytest.fail("the garbage collector removed the forged pods before any pass could see them")
        result = c.plan_now()
        # (PodGroup bookkeeping for the victim's own Job may be planned when the CRD is installed.)
        touching = [a.line() for a in result.actions if a.kind in ("gang-failed", "gang-restart", "gang-interrupted", "stop")
                    and (a.target.uid == uid or any(d.ref.uid == uid or d.ref.namespace == victim_ns for d in a.deletes))]
        assert touching == []
        c.actuator.execute([a for a in result.actions if a.target.namespace in (namespace, victim_ns)])
        assert alive(kube, f"/apis/batch/v1/namespaces/{victim_ns}/jobs/train", uid)
    finally:
        with contextlib.suppress(Exception):
            kube.delete_namespace(victim_ns)


def test_a_node_missing_from_the_cache_is_confirmed_gone_by_a_live_read(kube, namespace, api):
    """The cache has not seen a node (a lagging or re-listing watch): its pods are not lost
    until a live read says the node is gone; then the group is torn down."""
    late = f"bg-late-{uuid.uuid4().hex[:6]}"
    other = f"bg-node-{uuid.uuid4().hex[:6]}"
    kube.create_node(other, wait_schedulable=False)
    try:
        labels = {GROUP: "ranks", SIZE: "2"}
        pods = [kube.create(f"/api/v1/namespaces/{namespace}/pods", pod(f"rank-{i}", node=n, labels=labels))
                for i, n in enumerate((other, late))]
        c = controller(api, namespace)
        c.cache.list_once()  # pods listed; node `late` does not exist yet
        kube.create_node(late, wait_schedulable=False)  # now it does, but the cache does not know
        assert late not in (c.cache.snapshot().nodes or {})
        teardowns = [a.line() for a in c.plan_now().actions if a.kind.startswith("gang-")]
        assert teardowns == []  # (a PodGroup may be planned when the CRD is installed)
        assert late in (c.cache.snapshot().nodes or {})  # the live read put it in the cache
        for p in pods:
            assert alive(kube, f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}", p["metadata"]["uid"])

        kube.delete_node(late)  # really gone now
        c.cache.forget("Node", {"metadata": {"name": late}})
        result = c.plan_now()
        gang = [a for a in result.actions if a.kind.startswith("gang-")]
        assert sorted((a.kind, a.target.name) for a in gang) == [
            ("gang-interrupted", "rank-0"), ("gang-interrupted", "rank-1")]
        assert f"node {late} is gone" in gang[0].message
        outcomes = c.actuator.execute(gang)
        assert all(o.result in ("done", "gone") for o in outcomes), [(o.action.line(), o.result) for o in outcomes]
        for p in pods:
            assert not alive(kube, f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}", p["metadata"]["uid"])
    finally:
        for n in (other, late):
            with contextlib.suppress(Exception):
                kube.delete_node(n)


def test_once_says_what_is_wrong_with_its_namespace_or_lease(kube, namespace):
    import subprocess
    import sys

    from tests.conftest import ROOT

    base = [sys.executable, "-m", "webhook", "reconcile", "--kubeconfig", kube.kubeconfig("admin"), "--once"]
    missing = subprocess.run([*base, "--namespace", "no-such-ns", "--lease-namespace", namespace],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2, missing.stderr
    assert "namespace no-such-ns does not exist (--namespace)" in missing.stderr
    lease = subprocess.run([*base, "--namespace", namespace, "--lease-namespace", "no-such-lease-ns"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert lease.returncode == 2, lease.stderr
    assert "lease no-such-lease-ns/batchgate-reconciler: " in lease.stderr
    assert "namespace no-such-lease-ns does not exist" in lease.stderr
    fine = subprocess.run([*base, "--namespace", namespace, "--lease-namespace", namespace],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert fine.returncode == 0, fine.stderr


def test_an_old_pod_re_parented_to_a_colleagues_job_does_not_make_it_old(kube, namespace, api):
    """alice's own pod, running since before bob's Job existed, is given (by alice's UPDATE, which
    the API server allows: ownerReferences and labels are hers to write) a controlling
    ownerReference to that Job and its job-controller labels. Its creationTimestamp stays what it
    was: the reconciler does not take it for the Job's pod, so the Job does not look as old as the
    pod, and is not stopped at once (issue 27)."""
    import time

    from cluster import now_rfc3339

    pods = f"/api/v1/namespaces/{namespace}/pods"
    old = kube.create(pods, pod("old", node="nowhere", labels={}), as_user="alice")
    kube.set_pod_phase(namespace, "old", "Running", {"main": {"running": {"startedAt": now_rfc3339(-10 * 86400)}}})
    created = kube.get(f"{pods}/old")["metadata"]["creationTimestamp"]
    # The Job must be made more than the creation slack (5 s) after the pod: wait until the API
    # server's clock says so (a probe object's creationTimestamp).
    def later() -> bool:
        probe = kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "clock-"}})
        return bool(probe["metadata"]["creationTimestamp"] > created) and _seconds(
            probe["metadata"]["creationTimestamp"]) - _seconds(created) > 6
    kube.wait_for(lambda: later() or time.sleep(1), 30, message="the API server's clock to move on")
    job = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "annotations": {"batchgate.io/time-limit": "3s"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": PAUSE}],
            "nodeSelector": {"batchgate.io/e2e": "nowhere"}}}}}, as_user="bob")
    uid = job["metadata"]["uid"]
    kube.patch(f"{pods}/old", {"metadata": {
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid, "controller": True}],
        "labels": {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                   "batch.kubernetes.io/job-name": "train", "job-name": "train"}}}, as_user="alice")
    stored = kube.get(f"{pods}/old")["metadata"]
    assert stored["ownerReferences"][0]["uid"] == uid and stored["creationTimestamp"] == created == \
        old["metadata"]["creationTimestamp"]
    c = controller(api, namespace)
    c.cache.list_once()
    result = c.plan_now()
    on_job = [a.line() for a in result.actions if a.target.uid == uid or any(d.ref.uid == uid for d in a.deletes)]
    assert not any("TimeLimitExceeded" in line or "DeadlineSet" in line for line in on_job), on_job
    c.actuator.execute(result.actions)
    assert alive(kube, f"/apis/batch/v1/namespaces/{namespace}/jobs/train", uid)
    assert "batchgate.io/started-at" not in (kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/train")
                                             ["metadata"].get("annotations") or {})


def _seconds(ts: str) -> float:
    from webhook.units import parse_time

    t = parse_time(ts)
    assert t is not None
    return t
