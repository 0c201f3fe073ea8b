"""A hostile tenant of a gated queue (issue 23: "a user cannot release their own workload by editing
it", "a user cannot remove the gate nor add someone else's"), on the real API server: sequences of
requests that the other queue tests do not try, each made as alice (ClusterRole ``edit`` in her
namespace; for in-place resize, which ``edit`` does not grant, also a Role granting ``pods/resize``),
each reading back what was stored.

The e2e bundle's gated queue is ``queued`` (conftest.py). The admin stands in for the reconciler's
release where a test needs released work (a gate removed by an admin is the admin's choice).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from cluster import KubeApiError, wait_for
from conftest import QUEUED
from harness import (
    RBAC,
    container,
    cpu_to,
    create,
    grant_resize,
    job,
    jobs_path,
    may_resize,
    own_taint,
    own_tolerations,
    pod,
    pods_path,
    stored_cpu,
)

from webhook.contract import QUEUE_GATE, QUEUED_ANNOTATION

pytestmark = pytest.mark.usefixtures("webhook_server")

LIMIT = "batchgate.io/time-limit"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


@pytest.fixture
def own_node(kube: Any):
    """A 4-CPU node for this test's pods alone (``own_taint``, valued with its name)."""
    name = f"bg-qh-{uuid.uuid4().hex[:6]}"
    kube.create_node(name, cpu="4", memory="16Gi", labels={"e2e-queue": name}, taints=own_taint(name))
    yield name
    kube.delete_node(name)


def placed(node: str) -> dict[str, Any]:
    return {"nodeSelector": {"e2e-queue": node}, "tolerations": own_tolerations(node)}


def refused(fn: Any) -> str:
    with pytest.raises(KubeApiError) as e:
        fn()
    return str(e.value)


def gates(kube: Any, ns: str, name: str) -> list[str]:
    return [g["name"] for g in kube.get(pods_path(ns, name))["spec"].get("schedulingGates") or []]


def released_pod(kube: Any, ns: str, name: str, node: str, cpu: str = "1") -> dict[str, Any]:
    """alice's bare Pod of the gated queue, gated at CREATE, released by an admin and bound."""
    create(kube, ns, pod(name, labels={"batchgate.io/queue": QUEUED},
                         containers=[container(cpu=cpu, memory="1Gi")], **placed(node)))
    assert gates(kube, ns, name) == [QUEUE_GATE]
    kube.request("PATCH", pods_path(ns, name), {"spec": {"schedulingGates": None}}, content_type=MERGE)
    return wait_for(lambda: (p := kube.get(pods_path(ns, name)))["spec"].get("nodeName") and p, 60,  # type: ignore[no-any-return]
                    message=f"{name} bound")


def released_job(kube: Any, ns: str, name: str, node: str, **annotations: str) -> dict[str, Any]:
    """alice's Job of the gated queue, queued at CREATE, released by an admin."""
    create(kube, ns, job(name, labels={"batchgate.io/queue": QUEUED}, annotations=annotations or None,
                         containers=[container(cpu="1", memory="1Gi")], **placed(node)))
    stored = kube.get(jobs_path(ns, name))
    assert stored["spec"]["suspend"] is True and QUEUED_ANNOTATION in stored["metadata"]["annotations"]
    kube.request("PATCH", jobs_path(ns, name),
                 {"metadata": {"annotations": {QUEUED_ANNOTATION: None}}, "spec": {"suspend": False}},
                 content_type=MERGE)
    return kube.get(jobs_path(ns, name))  # type: ignore[no-any-return]


# -- probes that hold --------------------------------------------------------------------------

def test_the_gate_cannot_be_taken_off_by_any_patch_kind_nor_with_other_edits(kube, namespace, own_node):
    """JSON patch removing the gate beside a label edit, a strategic merge patch: each refused by
    queue-gate; a server-side apply forcing an empty list removes nothing; the gate is still there."""
    ns, name = namespace, "held"
    create(kube, ns, pod(name, labels={"batchgate.io/queue": QUEUED}, **placed(own_node)))
    ops = [{"op": "add", "path": "/metadata/labels/extra", "value": "x"},
           {"op": "remove", "path": "/spec/schedulingGates/0"}]
    assert "behind the scheduling gate" in refused(
        lambda: kube.request("PATCH", pods_path(ns, name), ops, content_type=JSON_PATCH, as_user="alice"))
    assert "behind the scheduling gate" in refused(lambda: kube.request(
        "PATCH", pods_path(ns, name), {"metadata": {"labels": {"extra": "y"}},
                                       "spec": {"$setElementOrder/schedulingGates": [],
                                                "schedulingGates": [{"name": QUEUE_GATE, "$patch": "delete"}]}},
        content_type=STRATEGIC, as_user="alice"))
    # applied with force, an empty list takes nothing from the manager that wrote the gate
    applied = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"schedulingGates": []}}
    kube.request("PATCH", pods_path(ns, name), applied, content_type=APPLY, as_user="alice",
                 query={"fieldManager": "alice", "force": "true"})
    assert gates(kube, ns, name) == [QUEUE_GATE]


def test_a_pod_naming_its_node_cannot_skip_the_gate(kube, namespace, own_node):
    """spec.nodeName bypasses kube-scheduler; in a gated queue the pod still gets the gate, and the API
    server refuses a gated pod with a node name: nothing is created."""
    ns = namespace
    msg = refused(lambda: create(kube, ns, pod("direct", labels={"batchgate.io/queue": QUEUED},
                                               nodeName=own_node, **placed(own_node))))
    assert "nodeName" in msg, msg
    assert not [p for p in kube.get(pods_path(ns))["items"] if p["metadata"]["name"] == "direct"]


def test_a_user_cannot_bind_a_gated_pod(kube, namespace, own_node):
    ns, name = namespace, "bind-me"
    create(kube, ns, pod(name, labels={"batchgate.io/queue": QUEUED}, **placed(own_node)))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
               "target": {"apiVersion": "v1", "kind": "Node", "name": own_node}}
    assert 'cannot create resource "pods/binding"' in refused(
        lambda: kube.request("POST", pods_path(ns, name) + "/binding", binding, as_user="alice"))
    stored = kube.get(pods_path(ns, name))
    assert not stored["spec"].get("nodeName") and gates(kube, ns, name) == [QUEUE_GATE]


def test_a_queued_job_cannot_be_resumed_by_server_side_apply_with_force(kube, namespace, own_node):
    ns, name = namespace, "apply-me"
    create(kube, ns, job(name, labels={"batchgate.io/queue": QUEUED}, **placed(own_node)))
    applied = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {"suspend": False}}
    assert "waits in queue" in refused(lambda: kube.request(
        "PATCH", jobs_path(ns, name), applied, content_type=APPLY, as_user="alice",
        query={"fieldManager": "alice", "force": "true"}))
    assert kube.get(jobs_path(ns, name))["spec"]["suspend"] is True


def test_a_job_managed_by_another_controller_is_still_queued(kube, namespace, own_node):
    ns, name = namespace, "managed"
    j = job(name, labels={"batchgate.io/queue": QUEUED}, **placed(own_node))
    j["spec"]["managedBy"] = "example.com/mine"
    create(kube, ns, j)
    stored = kube.get(jobs_path(ns, name))
    assert stored["spec"]["suspend"] is True and stored["metadata"]["annotations"][QUEUED_ANNOTATION] == "true"


def test_the_gate_written_twice_or_in_another_case_changes_nothing(kube, namespace, own_node):
    """Our gate twice at CREATE is refused by the API server (gate names are unique); a look-alike
    (``batchgate.io/Queue``) is the user's own gate, beside which ours is added: it holds only its
    own pod, and the user may take it off, ours stays."""
    ns = namespace
    twice = pod("twice", labels={"batchgate.io/queue": QUEUED}, **placed(own_node))
    twice["spec"]["schedulingGates"] = [{"name": QUEUE_GATE}, {"name": QUEUE_GATE}]
    assert "schedulingGates" in refused(lambda: create(kube, ns, twice))
    alike = pod("alike", labels={"batchgate.io/queue": QUEUED}, **placed(own_node))
    alike["spec"]["schedulingGates"] = [{"name": "batchgate.io/Queue"}]
    create(kube, ns, alike)
    assert gates(kube, ns, "alike") == ["batchgate.io/Queue", QUEUE_GATE]
    kube.request("PATCH", pods_path(ns, "alike"), [{"op": "remove", "path": "/spec/schedulingGates/0"}],
                 content_type=JSON_PATCH, as_user="alice")
    assert gates(kube, ns, "alike") == [QUEUE_GATE]


def test_edit_grants_no_pods_resize(kube, namespace):
    """The aggregated ``edit`` and ``admin`` ClusterRoles of this Kubernetes do not grant pods/resize
    (read back from the API server, so each KUBE_VERSION run checks its own); alice, with ``edit``,
    is refused by RBAC before any admission."""
    for role in ("edit", "admin"):
        rules = kube.get(f"{RBAC}/clusterroles/{role}")["rules"]
        granted = [r for r in rules if "" in r.get("apiGroups", []) and
                   ({"pods/resize", "pods/*", "*"} & set(r.get("resources", [])))]
        assert not granted, (role, granted)
    assert not may_resize(kube, namespace, "alice")


def test_a_released_pod_cannot_be_resized_bigger_by_its_user_smaller_it_may(kube, namespace, own_node):
    """The queue placed a 1-CPU pod on a 4-CPU node, and promised the work after it a start, by what
    it requested; pods/resize (in-place resize, granted here by a Role) would let its user take the
    node's other 3 CPUs. Raising is refused by queue-gate, naming the queue and what to do; the
    stored requests are unchanged. Lowering frees room and is allowed; an admin may raise."""
    ns, name = namespace, "grow"
    grant_resize(kube, ns)
    released_pod(kube, ns, name, own_node)
    resize = pods_path(ns, name) + "/resize"
    msg = refused(lambda: kube.request("PATCH", resize, cpu_to("2"), content_type=STRATEGIC, as_user="alice"))
    assert (f"runs in queue '{QUEUED}', which placed it" in msg
            and "raising the cpu request of container 'main' from 1 to 2 in place (pods/resize)" in msg
            and "delete it and submit it again with the new requests" in msg and "ask an admin" in msg), msg
    assert stored_cpu(kube, ns, name) == ("1", "1")
    kube.request("PATCH", resize, cpu_to("500m"), content_type=STRATEGIC, as_user="alice")
    assert stored_cpu(kube, ns, name) == ("500m", "500m")
    kube.request("PATCH", resize, cpu_to("2"), content_type=STRATEGIC)  # the admin
    assert stored_cpu(kube, ns, name) == ("2", "2")


def test_a_gated_pod_may_be_resized_and_kubernetes_keeps_a_guaranteed_pod_guaranteed(kube, namespace, own_node):
    """Behind the gate the pod is still the queue's to place, at the size it has when its turn
    comes: its user may resize it. And requests == limits (what scavenger-qos demands at CREATE)
    cannot be undone in place: Kubernetes refuses a resize that changes a pod's QoS class, even an
    admin's."""
    ns, name = namespace, "waiting"
    grant_resize(kube, ns)
    create(kube, ns, pod(name, labels={"batchgate.io/queue": QUEUED},
                         containers=[container(cpu="1", memory="1Gi")], **placed(own_node)))
    assert gates(kube, ns, name) == [QUEUE_GATE]
    resize = pods_path(ns, name) + "/resize"
    kube.request("PATCH", resize, cpu_to("2"), content_type=STRATEGIC, as_user="alice")
    assert stored_cpu(kube, ns, name) == ("2", "2") and gates(kube, ns, name) == [QUEUE_GATE]
    msg = refused(lambda: kube.request("PATCH", resize, cpu_to("1", limit=False), content_type=STRATEGIC))
    assert "QOS" in msg.upper(), msg
    assert stored_cpu(kube, ns, name) == ("2", "2")


# -- the hole this file found: a released workload's time limit raised by its user ------------

def test_a_released_job_cannot_raise_its_time_limit_but_may_lower_it_or_requeue_with_it(kube, namespace, own_node):
    """A workload released by backfill fits a gap before a reserved job's start by its time limit;
    raising the limit after release (time-limit-extension allows it up to the queue's maximum) would
    push back the start the queue promised the work after it. Lowering passes; suspended in the same
    request, the Job goes back to the queue, which plans the new limit; a queued Job may change it."""
    ns, name = namespace, "longer"
    released_job(kube, ns, name, own_node, **{LIMIT: "10m"})
    patch = {"content_type": MERGE, "as_user": "alice"}
    msg = refused(lambda: kube.request("PATCH", jobs_path(ns, name), {"metadata": {"annotations": {LIMIT: "7d"}}},
                                       **patch))
    assert (f"runs in queue '{QUEUED}', which placed it, and promised the work after it a start, for its time "
            "limit of 10m; raising batchgate.io/time-limit to 7d") in msg and "ask an admin to extend it" in msg, msg
    assert kube.get(jobs_path(ns, name))["metadata"]["annotations"][LIMIT] == "10m"
    kube.request("PATCH", jobs_path(ns, name), {"metadata": {"annotations": {LIMIT: "5m"}}}, **patch)
    kube.request("PATCH", jobs_path(ns, name), {"metadata": {"annotations": {LIMIT: "2h"}},
                                                "spec": {"suspend": True}}, **patch)
    stored = kube.get(jobs_path(ns, name))
    assert stored["metadata"]["annotations"][LIMIT] == "2h"
    assert stored["metadata"]["annotations"][QUEUED_ANNOTATION] == "suspended"
    kube.request("PATCH", jobs_path(ns, name), {"metadata": {"annotations": {LIMIT: "3h"}}}, **patch)
    assert kube.get(jobs_path(ns, name))["metadata"]["annotations"][LIMIT] == "3h"


def test_a_released_pod_cannot_raise_its_time_limit_a_gated_one_may(kube, namespace, own_node):
    ns, name = namespace, "longer-pod"
    patch = {"content_type": MERGE, "as_user": "alice"}
    create(kube, ns, pod(name, labels={"batchgate.io/queue": QUEUED}, annotations={LIMIT: "10m"},
                         **placed(own_node)))
    kube.request("PATCH", pods_path(ns, name), {"metadata": {"annotations": {LIMIT: "20m"}}}, **patch)  # waiting
    kube.request("PATCH", pods_path(ns, name), {"spec": {"schedulingGates": None}}, content_type=MERGE)
    msg = refused(lambda: kube.request("PATCH", pods_path(ns, name), {"metadata": {"annotations": {LIMIT: "7d"}}},
                                       **patch))
    assert "time limit of 20m; raising batchgate.io/time-limit to 7d" in msg and "suspend" not in msg, msg
    assert kube.get(pods_path(ns, name))["metadata"]["annotations"][LIMIT] == "20m"
