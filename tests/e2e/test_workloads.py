"""Pod-level policies decide on workload templates, proven against a real API server: the
stored template is what `batchgate check` predicts, the pods the controller-manager makes from
it get exactly that (Deployment, StatefulSet, DaemonSet, and a CronJob through its Job; the
Deployment's ReplicaSet is not rewritten, so there is one), a denial reaches whoever applied
the workload, and a template UPDATE is decided too. kata-cpu included: a Kata Deployment's pods
cost what was asked, overhead included, and one whose pods could not is refused when applied."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from cluster import KubeApiError, require_components, wait_for
from harness import (
    QUEUE_LABEL,
    assert_matches_prediction,
    assert_pod_sealed,
    container,
    create_and_read,
    cronjob,
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
        "kata": {k: v for k, v in (pod["metadata"].get("annotations") or {}).items() if k.startswith(KATA)},
    }


KATA = "batchgate.io/kata-"


def cpus(spec: dict[str, Any]) -> list[tuple[str | None, str | None]]:
    """(request, limit) CPU of each container, as stored."""
    return [((c.get("resources") or {}).get("requests", {}).get("cpu"),
             (c.get("resources") or {}).get("limits", {}).get("cpu")) for c in spec["containers"]]


def owned_by(uid: str):
    return lambda p: any(o["uid"] == uid for o in p["metadata"].get("ownerReferences") or [])


def template_of(stored: dict[str, Any]) -> dict[str, Any]:
    t = stored["spec"]["jobTemplate"]["spec"]["template"] if stored["kind"] == "CronJob" else stored["spec"]["template"]
    return {"metadata": t["metadata"], "spec": t["spec"]}


def stored_as_predicted(kube: Any, hook: Any, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    stored = create_and_read(kube, ns, obj)
    decision = predict(hook, obj, namespace=ns)
    assert decision.allowed and decision.obj is not None
    assert_matches_prediction(stored, decision.obj, server_version=kube.server_version())
    return stored


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
        assert_pod_sealed(webhook_server, p, ns)
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


def kata_containers() -> list[dict[str, Any]]:
    """CPU limits only (the API server defaults each Pod's requests to them): 1 and 500m."""
    return [{"name": "web", "image": "registry.k8s.io/pause:3.2", "resources": {"limits": {"cpu": "1", "memory": "256Mi"}}},
            {"name": "log", "image": "registry.k8s.io/pause:3.2", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}]


def deployment_pods(kube: Any, ns: str, stored: dict[str, Any], count: int) -> list[dict[str, Any]]:
    uid = stored["metadata"]["uid"]

    def replicasets():
        return [r for r in kube.get(f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"] if owned_by(uid)(r)]

    (rs,) = wait_for(lambda: replicasets() or None, 60, message="the Deployment's ReplicaSet")
    return kube.wait_for_pods(ns, count=count, timeout=90, predicate=owned_by(rs["metadata"]["uid"]))


def test_kata_deployment_pods_cost_what_was_asked(kube, webhook_server, ns, kata_runtime_class,
                                                  kata_big_runtime_class):
    """The Deployment is stored adjusted as `batchgate check` predicts, with the overhead the
    policy declares (250m); the pods the controller-manager makes on RuntimeClass kata (250m
    overhead, copied into each pod by the RuntimeClass plugin) keep exactly the template's
    CPU: containers + overhead = what was asked. On kata-big (300m, more than declared) the
    webhook adjusts each pod again from the recorded originals, so the total still holds."""
    require_components(kube, "kube-controller-manager")
    name = unique("kata")
    obj = deployment(name, replicas=2, runtimeClassName="kata")
    obj["spec"]["template"]["spec"]["containers"] = kata_containers()
    stored = stored_as_predicted(kube, webhook_server, ns, obj)
    template = template_of(stored)
    assert cpus(template["spec"]) == [("833m", "833m"), ("417m", "417m")]
    assert template["metadata"]["annotations"][KATA + "overhead-cpu"] == "250m"
    for p in deployment_pods(kube, ns, stored, 2):
        assert p["spec"]["overhead"]["cpu"] == "250m"
        assert cpus(p["spec"]) == cpus(template["spec"]), p["metadata"]["name"]
        assert what_pods_get(p) == what_pods_get(template)

    big = deployment(unique("kata-big"), replicas=1, runtimeClassName="kata-big")
    big["spec"]["template"]["spec"]["containers"] = kata_containers()
    stored = stored_as_predicted(kube, webhook_server, ns, big)
    assert cpus(template_of(stored)["spec"]) == [("833m", "833m"), ("417m", "417m")]  # declared: 250m
    (p,) = deployment_pods(kube, ns, stored, 1)
    assert p["spec"]["overhead"]["cpu"] == "300m"
    assert cpus(p["spec"]) == [("800m", "800m"), ("400m", "400m")]  # 1500m asked = 1200m + 300m
    assert p["metadata"]["annotations"][KATA + "overhead-cpu"] == "300m"


def test_kata_deployment_whose_pods_would_be_denied_is_denied(kube, webhook_server, ns, kata_runtime_class):
    obj = deployment(unique("kata-tiny"), runtimeClassName="kata",
                     containers=[container("c", cpu="300m", memory="64Mi")])
    msg = expect_denied(kube, ns, obj, webhook="mutate.batchgate.io")
    assert "kata-cpu: pod template: runtimeClassName kata: the runtime class adds 250m CPU" in msg, msg
    assert "at least 350m" in msg, msg


def test_daemonset_pods_get_what_the_admitted_template_says(kube, webhook_server, ns):
    """The DaemonSet controller makes one pod per eligible node: on a node of this test's own
    (the DaemonSet selects it by label), that pod gets what `batchgate check` predicted."""
    require_components(kube, "kube-controller-manager")
    name = unique("ds")
    node = f"e2e-{name}"
    kube.create_node(node, cpu="4", memory="8Gi", labels={"batchgate.io/e2e-daemonset": name})
    try:
        obj = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name}, "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [container(cpu="250m", memory="1Gi")],
                                  "nodeSelector": {"batchgate.io/e2e-daemonset": name}}}}}
        stored = stored_as_predicted(kube, webhook_server, ns, obj)
        template = template_of(stored)
        want = what_pods_get(template)
        assert want["class"] == "batchgate-batch" and want["token"] is False and None not in want["shm"]
        (p,) = kube.wait_for_pods(ns, count=1, timeout=90, predicate=owned_by(stored["metadata"]["uid"]))
        assert what_pods_get(p) == want
        assert_pod_sealed(webhook_server, p, ns)
        assert cpus(p["spec"]) == cpus(template["spec"])
        assert "activeDeadlineSeconds" not in p["spec"]  # a service's pods get no time limit
    finally:
        kube.delete_node(node)


def test_cronjob_pods_get_what_the_admitted_template_says(kube, webhook_server, ns, kata_runtime_class):
    """Through both controllers: the CronJob controller (it polls every 10 s on 1.20) makes a
    Job at the next minute, the Job controller its pod; the pod gets what `batchgate check`
    predicted for the CronJob's template, the time limit and the kata-cpu adjustment included."""
    require_components(kube, "kube-controller-manager")
    name = unique("cron")
    obj = cronjob(name, runtimeClassName="kata", containers=[container(cpu="2", memory="1Gi")])
    obj["spec"].update(schedule="*/1 * * * *", concurrencyPolicy="Forbid", startingDeadlineSeconds=50)
    stored = stored_as_predicted(kube, webhook_server, ns, obj)
    template = template_of(stored)
    want = what_pods_get(template)
    assert want["class"] == "batchgate-batch" and want["token"] is False and None not in want["shm"]
    assert want["kata"] and cpus(template["spec"]) == [("1750m", "1750m")]
    uid = stored["metadata"]["uid"]
    try:
        (job,) = wait_for(lambda: [j for j in kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
                                   if owned_by(uid)(j)] or None, 80, message="the CronJob's Job")
        (p,) = kube.wait_for_pods(ns, count=1, timeout=60, predicate=owned_by(job["metadata"]["uid"]))
        assert what_pods_get(p) == want
        assert_pod_sealed(webhook_server, p, ns)  # CronJob -> Job -> Pod
        assert cpus(p["spec"]) == cpus(template["spec"]) and p["spec"]["overhead"]["cpu"] == "250m"
        assert p["spec"].get("activeDeadlineSeconds") == template["spec"].get("activeDeadlineSeconds")
    finally:
        kube.delete(f"/apis/batch/v1/namespaces/{ns}/cronjobs/{name}")
