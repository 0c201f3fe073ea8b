"""The admission seal, proven against a real API server and the stock controller-manager: a
user's Deployment and StatefulSet are admitted and sealed (the stored template carries
``batchgate.io/admitted``, and the pods the controllers make from it verify and pass); a
StatefulSet template changed to an admin-only class while the webhook is unreachable (UPDATE
fails open) is stored, but the pod its controller then makes is denied (FailedCreate, and no pod
with that class exists); updating the template again while the webhook is up seals it anew and
the controller's pods are made."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from cluster import KubeApiError, require_components, wait_for
from harness import QUEUE_LABEL, container, create_and_read, deployment, events, seal_keys, unique

from webhook.seal import OFFLINE, projection, verifies
from webhook.workloads import shape_of

SEAL = "batchgate.io/admitted"
URGENT = "batchgate-urgent"
STS = ("apps", "StatefulSet")


@pytest.fixture(scope="module")
def ns(module_namespace: str) -> str:
    return module_namespace


def statefulset(name: str, **pod_spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name}, "spec": {
        # Parallel: no kubelet here makes pods Ready, which OrderedReady would wait for
        "replicas": 1, "serviceName": name, "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [container(memory="256Mi")], **pod_spec}}}}


def owned_by(uid: str) -> Any:
    return lambda o: any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or [])


def session_keys(webhook_server: Any) -> Any:
    return seal_keys(webhook_server.server)


def assert_sealed(keys: Any, obj: dict[str, Any], ns: str, kind: tuple[str, str] = ("", "Pod")) -> str:
    """The seal on ``obj``'s pod (template) verifies with the server's keys, not the offline one."""
    shape = shape_of(*kind)
    assert shape is not None
    value = shape.template(obj)[0].get("annotations", {}).get(SEAL)
    assert isinstance(value, str) and value.startswith(keys.current + "."), value
    assert verifies(keys, value, projection(obj, shape, ns))
    assert not verifies(OFFLINE, value, projection(obj, shape, ns))
    return value


def test_deployment_is_sealed_and_its_pods_pass(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    keys = session_keys(webhook_server)
    stored = create_and_read(kube, ns, deployment(unique("sealed")))
    value = assert_sealed(keys, stored, ns, ("apps", "Deployment"))
    (rs,) = wait_for(lambda: [r for r in kube.get(f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]
                              if owned_by(stored["metadata"]["uid"])(r)] or None, 60, message="the ReplicaSet")
    assert rs["spec"]["template"]["metadata"]["annotations"][SEAL] == value  # copied, not rewritten
    (p,) = kube.wait_for_pods(ns, count=1, timeout=90, predicate=owned_by(rs["metadata"]["uid"]))
    assert p["metadata"]["annotations"][SEAL] == value
    assert_sealed(keys, p, ns)
    assert p["spec"]["priorityClassName"] == "batchgate-batch"


def test_template_changed_during_an_outage_makes_no_pod_until_admitted(kube, webhook_server, ns, outage):
    require_components(kube, "kube-controller-manager")
    keys = session_keys(webhook_server)
    name = unique("sts")
    path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}"
    stored = create_and_read(kube, ns, statefulset(name))
    uid = stored["metadata"]["uid"]
    sealed_before = assert_sealed(keys, stored, ns, STS)
    (first,) = kube.wait_for_pods(ns, count=1, timeout=90, predicate=owned_by(uid))
    assert first["spec"]["priorityClassName"] == "batchgate-batch"
    assert_sealed(keys, first, ns)

    # --- the webhook is unreachable: UPDATE fails open, the template takes the admin-only class --
    webhook_server.server.stop()
    assert webhook_server.server.refuses_connections()
    kube.patch(path, {"spec": {"template": {"spec": {"priorityClassName": URGENT}}}}, as_user="alice")
    outage.end()
    changed = kube.get(path)
    assert changed["spec"]["template"]["spec"]["priorityClassName"] == URGENT  # stored unjudged
    assert changed["spec"]["template"]["metadata"]["annotations"][SEAL] == sealed_before  # the old seal
    # The controller replaces its pod with one from the new template (RollingUpdate); make sure it
    # has to, whatever it already did while the webhook was down.
    with contextlib.suppress(KubeApiError):  # gone already: the controller replaced it
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}-0")

    def denied() -> list[dict[str, Any]] | None:
        found = [e for e in events(kube, ns, uid=uid, reason="FailedCreate") if URGENT in e["message"]]
        return found or None

    (event, *_) = wait_for(denied, 90, message="the StatefulSet's FailedCreate for the unsealed template")
    msg = event["message"]
    assert "'batchgate-urgent' is reserved for admins" in msg, msg
    assert "no valid batchgate.io/admitted seal" in msg and "update its pod template while the webhook is up" in msg
    pods = [p for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"] if owned_by(uid)(p)]
    assert all(p["spec"].get("priorityClassName") != URGENT for p in pods), pods

    # --- updated again while the webhook is up: judged as alice, sealed, pods made -------------
    kube.patch(path, {"spec": {"template": {"spec": {"priorityClassName": None},
                                            "metadata": {"labels": {QUEUE_LABEL: "batch"}}}}}, as_user="alice")
    resealed = kube.get(path)
    value = assert_sealed(keys, resealed, ns, STS)
    # judged again, as it was first: the same fields, so the same seal (it covers what was judged)
    assert value == sealed_before and resealed["spec"]["template"]["spec"]["priorityClassName"] == "batchgate-batch"
    (p,) = kube.wait_for_pods(ns, count=1, timeout=120, predicate=lambda p: owned_by(uid)(p) and (
        p["metadata"].get("annotations") or {}).get(SEAL) == value and not p["metadata"].get("deletionTimestamp"))
    assert p["spec"]["priorityClassName"] == "batchgate-batch"

    # --- an admin may take the class: judged as bob, sealed, and the pod is made with it --------
    kube.patch(path, {"spec": {"template": {"spec": {"priorityClassName": URGENT}}}}, as_user="bob")
    by_admin = kube.get(path)
    value = assert_sealed(keys, by_admin, ns, STS)
    with contextlib.suppress(KubeApiError):  # gone already: the controller replaced it
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}-0")
    (p,) = kube.wait_for_pods(ns, count=1, timeout=120, predicate=lambda p: owned_by(uid)(p) and (
        p["metadata"].get("annotations") or {}).get(SEAL) == value and not p["metadata"].get("deletionTimestamp"))
    assert p["spec"]["priorityClassName"] == URGENT


def test_deployment_template_changed_during_an_outage_gets_no_replicaset(kube, webhook_server, ns, outage):
    """The deployment controller's new ReplicaSet for a template changed without admission is
    judged with no one's grants: the admin-only class is denied, and the Deployment says so."""
    require_components(kube, "kube-controller-manager")
    name = unique("dep")
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"
    stored = create_and_read(kube, ns, deployment(name))
    uid = stored["metadata"]["uid"]
    assert_sealed(session_keys(webhook_server), stored, ns, ("apps", "Deployment"))

    def replicasets() -> list[dict[str, Any]]:
        return [r for r in kube.get(f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"] if owned_by(uid)(r)]

    wait_for(lambda: replicasets() or None, 60, message="the Deployment's first ReplicaSet")
    webhook_server.server.stop()
    assert webhook_server.server.refuses_connections()
    kube.patch(path, {"spec": {"template": {"spec": {"priorityClassName": URGENT}}}}, as_user="alice")
    outage.end()

    def denied() -> list[dict[str, Any]] | None:
        found = [e for e in events(kube, ns, uid=uid) if e["reason"] == "ReplicaSetCreateError"
                 and "'batchgate-urgent' is reserved for admins" in e["message"]]
        return found or None

    (event, *_) = wait_for(denied, 90, message="the Deployment's ReplicaSetCreateError for the unsealed template")
    assert "no valid batchgate.io/admitted seal" in event["message"], event["message"]
    assert all(r["spec"]["template"]["spec"].get("priorityClassName") != URGENT for r in replicasets())
