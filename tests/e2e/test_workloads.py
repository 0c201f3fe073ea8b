"""Pod-level policies decide on workload templates, proven against a real API server: the
stored template is what `batchgate check` predicts, the pods the controller-manager makes from
it get exactly that (and the Deployment's ReplicaSet is not rewritten, so there is one), a
denial reaches whoever applied the workload, and a template UPDATE is decided too."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from cluster import KubeApiError, require_components, wait_for
from harness import (
    QUEUE_LABEL,
    assert_matches_prediction,
    container,
    create_and_read,
    deployment,
    expect_denied,
    predict,
    unique,
)

SHM = "/dev/shm"


@pytest.fixture(scope="module")
def ns(module_namespace: str) -> str:
    return module_namespace


def statefulset(name: str, **pod_spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name}, "spec": {
        # Parallel: no kubelet here makes pods Ready, which OrderedReady would wait for
        "replicas": 2, "serviceName": name, "podManagementPolicy": "Parallel", "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [container(memory="2Gi")], **pod_spec}}}}


def what_pods_get(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod["spec"]
    return {
        "queue": pod["metadata"]["labels"].get(QUEUE_LABEL),
        "class": spec.get("priorityClassName"),
        "token": spec.get("automountServiceAccountToken"),
        "shm": [next((m["name"] for m in c.get("volumeMounts") or [] if m["mountPath"] == SHM), None)
                for c in spec["containers"]],
        "shm_size": next((v["emptyDir"].get("sizeLimit") for v in spec.get("volumes") or []
                          if v["name"] == "batchgate-shm"), None),
    }


@pytest.mark.parametrize("make", [deployment, statefulset], ids=["Deployment", "StatefulSet"])
def test_pods_get_what_the_admitted_template_says(kube, webhook_server, ns, make):
    require_components(kube, "kube-controller-manager")
    name = unique(make.__name__[:6])
    obj = make(name)
    stored = create_and_read(kube, ns, obj)
    decision = predict(webhook_server, obj, namespace=ns)
    assert decision.allowed and decision.obj is not None
    assert_matches_prediction(stored, decision.obj, server_version=kube.server_version())
    template = {"metadata": stored["spec"]["template"]["metadata"], "spec": stored["spec"]["template"]["spec"]}
    want = what_pods_get(template)
    assert want["class"] == "batchgate-batch" and want["token"] is False and None not in want["shm"]

    uid = stored["metadata"]["uid"]
    if obj["kind"] == "Deployment":
        def replicasets():
            items = kube.get(f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]
            return [r for r in items if any(o["uid"] == uid for o in r["metadata"].get("ownerReferences") or [])]
        (rs,) = wait_for(lambda: replicasets() or None, 60, message="the Deployment's ReplicaSet")
        uid = rs["metadata"]["uid"]
    pods = kube.wait_for_pods(ns, count=obj["spec"].get("replicas", 1), timeout=90, predicate=lambda p: any(
        o["uid"] == uid for o in p["metadata"].get("ownerReferences") or []))
    for p in pods:
        assert what_pods_get(p) == want, p["metadata"]["name"]
    if obj["kind"] == "Deployment":
        time.sleep(3)  # a ReplicaSet rewritten at admission would make the controller create another
        owned = [r for r in kube.get(f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]
                 if any(o["uid"] == stored["metadata"]["uid"] for o in r["metadata"].get("ownerReferences") or [])]
        assert len(owned) == 1, [r["metadata"]["name"] for r in owned]


def test_denial_reaches_who_applied_the_deployment(kube, webhook_server):
    """A gpu-* namespace runs on the gpu pool (the bundle's namespace rule): a Deployment whose
    pods would be denied is itself denied, with the reason, not left failing to make pods."""
    gpu_ns = kube.create_namespace(prefix="gpu-e2e")
    try:
        obj = deployment(unique("conflict"), nodeSelector={"batchgate.io/pool": "cpu"})
        msg = expect_denied(kube, gpu_ns, obj, webhook="mutate.batchgate.io")
        assert "nodeSelector batchgate.io/pool=cpu conflicts with namespace" in msg
    finally:
        kube.delete_namespace(gpu_ns)


def test_template_update_is_decided(kube, webhook_server, ns):
    name = unique("upd")
    stored = create_and_read(kube, ns, deployment(name, replicas=0))
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"
    spec = copy.deepcopy(stored["spec"]["template"]["spec"])
    spec["priorityClassName"] = "batchgate-urgent"  # admin-only: denied on UPDATE as on CREATE
    with pytest.raises(KubeApiError) as info:
        kube.patch(path, {"spec": {"template": {"spec": {"priorityClassName": "batchgate-urgent"}}}},
                   as_user="alice")
    assert "'batchgate-urgent' is reserved for admins" in info.value.body["message"]
    containers = [*stored["spec"]["template"]["spec"]["containers"], container("sidecar")]
    kube.patch(path, {"spec": {"template": {"spec": {"containers": containers}}}},
               as_user="alice", content_type="application/strategic-merge-patch+json")
    after = kube.get(path)["spec"]["template"]["spec"]
    sidecar = next(c for c in after["containers"] if c["name"] == "sidecar")
    assert {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}[SHM] == "batchgate-shm"
    assert [v["name"] for v in after["volumes"]].count("batchgate-shm") == 1
    # scaling leaves the template alone: nothing is decided again, nothing changes
    kube.patch(path, {"spec": {"replicas": 0}, "metadata": {"annotations": {"note": "x"}}}, as_user="alice")
    assert kube.get(path)["spec"]["template"]["spec"] == after
