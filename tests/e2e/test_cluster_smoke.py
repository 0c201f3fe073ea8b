"""Smoke tests for the e2e control plane itself (tests/e2e/cluster.py).

They check the things later e2e tests rely on: ServiceAccount and Priority
admission, the Job controller, the scheduler binding to harness-made nodes,
faked pod status, and RBAC separating an ordinary user from admin.
"""

from __future__ import annotations

import uuid

import pytest
from cluster import KubeApiError, require_components

PAUSE = "registry.k8s.io/pause:3.2"

# These tests check the bare cluster: keep batchgate's own webhooks (which other
# e2e modules register for the whole session) out of their namespaces, with the
# opt-out label that batchgate's webhook configurations honour.
pytestmark = pytest.mark.namespace_labels({"batchgate.io/admission": "disabled"})


def _pod(name: str, **spec_extra) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [{"name": "main", "image": PAUSE}],
            "restartPolicy": "Never",
            **spec_extra,
        },
    }


def test_pod_by_alice_gets_token_volume_and_priority(kube, namespace, alice_client):
    from kubernetes import client

    core = client.CoreV1Api(alice_client)
    created = core.create_namespaced_pod(namespace, _pod("hello"))
    # read back what is stored, via plain REST, as admin
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/hello")
    assert created.metadata.uid == pod["metadata"]["uid"]

    vols = pod["spec"].get("volumes") or []
    token_vols = [v for v in vols if v["name"].startswith("kube-api-access-")]
    assert token_vols, f"no kube-api-access volume injected: {vols}"
    sources = token_vols[0]["projected"]["sources"]
    assert any("serviceAccountToken" in s for s in sources), sources  # a bound, expiring token
    mounts = pod["spec"]["containers"][0].get("volumeMounts") or []
    assert any(
        m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount" for m in mounts
    ), mounts
    assert pod["spec"]["serviceAccountName"] == "default"
    assert pod["spec"]["priority"] == 0
    # DefaultTolerationSeconds admission ran as well
    keys = {t.get("key") for t in pod["spec"].get("tolerations") or []}
    assert "node.kubernetes.io/not-ready" in keys


def test_job_controller_makes_pods(kube, namespace):
    require_components(kube, "kube-controller-manager")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "par"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "backoffLimit": 0,
            "template": {"spec": {
                "containers": [{"name": "main", "image": PAUSE}],
                "restartPolicy": "Never",
            }},
        },
    }
    created = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job, as_user="alice")
    uid = created["metadata"]["uid"]
    pods = kube.wait_for_pods(namespace, label_selector=f"controller-uid={uid}", count=2,
                              timeout=60)
    assert len(pods) == 2
    for p in pods:
        owners = p["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"]) for o in owners] == [("Job", "par")]
        assert p["metadata"]["name"].startswith("par-")
        assert p["metadata"].get("generateName") == "par-"


def test_scheduler_binds_pod_to_harness_node(kube, namespace):
    require_components(kube, "kube-controller-manager", "kube-scheduler")
    node_name = f"e2e-node-{uuid.uuid4().hex[:6]}"
    kube.create_node(node_name, cpu="4", memory="8Gi",
                     labels={"batchgate.io/pool": "smoke-" + node_name})
    try:
        pod = _pod("sched", nodeSelector={"batchgate.io/pool": "smoke-" + node_name})
        pod["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        }
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod, as_user="bob")
        bound = kube.wait_for(
            lambda: kube.get(f"/api/v1/namespaces/{namespace}/pods/sched")["spec"].get("nodeName"),
            timeout=60, message="pod sched to be bound by kube-scheduler")
        assert bound == node_name

        # a pod that fits nowhere stays unbound and gets an Unschedulable condition
        big = _pod("too-big", nodeSelector={"batchgate.io/pool": "smoke-" + node_name})
        big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "64"}}
        kube.create(f"/api/v1/namespaces/{namespace}/pods", big)

        def unschedulable():
            p = kube.get(f"/api/v1/namespaces/{namespace}/pods/too-big")
            conds = p["status"].get("conditions") or []
            return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                       for c in conds) and p
        p = kube.wait_for(unschedulable, timeout=60, message="too-big to be Unschedulable")
        assert not p["spec"].get("nodeName")
    finally:
        kube.delete_node(node_name)


def test_set_pod_phase_oomkilled(kube, namespace, admin_client):
    kube.create(f"/api/v1/namespaces/{namespace}/pods", _pod("oom"), as_user="alice")
    kube.set_pod_phase(namespace, "oom", "Running")
    running = kube.get(f"/api/v1/namespaces/{namespace}/pods/oom")
    assert running["status"]["phase"] == "Running"
    assert "running" in running["status"]["containerStatuses"][0]["state"]

    kube.set_pod_phase(namespace, "oom", "Failed", {"main": "OOMKilled"}, reason="OOMKilled")

    from kubernetes import client

    pod = client.CoreV1Api(admin_client).read_namespaced_pod("oom", namespace)
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "OOMKilled"
    (cs,) = pod.status.container_statuses
    assert cs.name == "main"
    assert cs.state.terminated is not None
    assert cs.state.terminated.reason == "OOMKilled"
    assert cs.state.terminated.exit_code == 137
    assert cs.state.running is None


def test_set_pod_phase_exit_code(kube, namespace):
    kube.create(f"/api/v1/namespaces/{namespace}/pods", _pod("exit3"))
    kube.set_pod_phase(namespace, "exit3", "Failed", {"main": 3})
    st = kube.get(f"/api/v1/namespaces/{namespace}/pods/exit3")["status"]
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert (st["phase"], term["exitCode"], term["reason"]) == ("Failed", 3, "Error")
    with pytest.raises(ValueError):
        kube.set_pod_phase(namespace, "exit3", "Failed", {"nope": "OOMKilled"})


def _priority_class(name: str) -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": 1000,
        "globalDefault": False,
        "description": "batchgate e2e smoke",
    }


def test_alice_cannot_create_priorityclass_but_admin_can(kube, alice_client):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = f"e2e-pc-{uuid.uuid4().hex[:6]}"
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    with pytest.raises(KubeApiError) as err:
        kube.create(path, _priority_class(name), as_user="alice")
    assert err.value.status == 403, err.value
    assert 'User "alice"' in str(err.value)
    # the same through the kubernetes client
    with pytest.raises(ApiException) as err2:
        client.SchedulingV1Api(alice_client).create_priority_class(_priority_class(name))
    assert err2.value.status == 403
    assert not kube.can_i("create", "priorityclasses", group="scheduling.k8s.io",
                          as_user="alice")
    assert not kube.can_i("create", "priorityclasses", group="scheduling.k8s.io",
                          as_user="bob")
    try:
        made = kube.create(path, _priority_class(name), as_user="admin")
        assert made["value"] == 1000
    finally:
        kube.delete(f"{path}/{name}")


def test_identities(kube, namespace):
    def whoami(identity):
        # 1.20 has no SelfSubjectReview; a denied request names the user
        try:
            kube.get("/api/v1/nodes", as_user=identity)
        except KubeApiError as exc:
            return exc.status, exc.body.get("message", "")
        return 200, ""

    assert whoami("admin")[0] == 200
    status, msg = whoami("alice")
    assert status == 403 and 'User "alice"' in msg
    status, msg = whoami("bob")
    assert status == 403 and 'User "bob"' in msg
    for who in ("alice", "bob"):
        assert kube.can_i("create", "pods", namespace=namespace, as_user=who)
        assert kube.can_i("create", "jobs", group="batch", namespace=namespace, as_user=who)
        assert not kube.can_i("create", "pods", namespace="kube-system", as_user=who)


def test_register_webhooks_create_and_replace(kube):
    name = f"batchgate-e2e-smoke-{uuid.uuid4().hex[:6]}"

    def cfg(kind_key: str, timeout: int) -> dict:
        return {
            "metadata": {"name": name},
            "webhooks": [{
                "name": f"{kind_key}.smoke.batchgate.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "timeoutSeconds": timeout,
                "clientConfig": {"url": "https://127.0.0.1:1/never"},
                # match nothing real: a namespace label nobody has
                "namespaceSelector": {"matchLabels": {"batchgate.io/e2e-smoke": name}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                           "operations": ["CREATE"], "resources": ["pods"]}],
            }],
        }

    try:
        out = kube.register_webhooks(cfg("mutate", 5), cfg("validate", 5))
        assert set(out) == {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
        out2 = kube.register_webhooks(cfg("mutate", 7), None)
        got = kube.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}")
        assert got["webhooks"][0]["timeoutSeconds"] == 7
        assert got["metadata"]["uid"] == out["mutatingwebhookconfigurations"]["metadata"]["uid"]
        assert out2["mutatingwebhookconfigurations"]["metadata"]["resourceVersion"] != \
            out["mutatingwebhookconfigurations"]["metadata"]["resourceVersion"]
    finally:
        kube.delete_webhooks(mutating=name, validating=name)
