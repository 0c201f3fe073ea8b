"""Services in a gated queue, on the real control plane (issue 23): a tenant cannot skip the queue by
running batch work as a Deployment or a DaemonSet. The pod its ReplicaSet's controller makes is stored
behind the gate and released by the reconciler as a one-pod workload, in queue order: behind an earlier
bare pod of its priority that waits for the same room. A DaemonSet's pod (bound by kube-scheduler, to
the node its controller's affinity names) waits the same way for room on its node. In a queue that is
not gated (``interactive``) a Deployment's pod starts at once; a queue that is draining refuses a new
Deployment or DaemonSet.

The e2e bundle's gated queue is ``queued`` (conftest.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import test_queue
from cluster import KubeApiError, wait_for
from conftest import QUEUED
from harness import (
    WebhookServer,
    bundle_variant,
    container,
    create,
    deployment,
    expect_denied,
    own_tolerations,
    pod,
    pods_path,
    scoped_validating,
    stop_reconcilers,
)
from test_queue import fill, finish

from webhook.contract import QUEUE_GATE

pytestmark = pytest.mark.usefixtures("webhook_server")


# test_queue's fixtures: the e2e bundle's policies directory, and a 4-CPU node of the test's own
policies = test_queue.policies
queue_node = test_queue.queue_node


def web(name: str, queue: str, node: str | None, cpu: str) -> dict[str, Any]:
    """A one-replica Deployment of ``queue`` asking ``cpu``, pinned to ``node`` (if any)."""
    labels = {"batchgate.io/queue": queue}
    pinned: dict[str, Any] = {"nodeSelector": {"e2e-queue": node}, "tolerations": own_tolerations(node)} if node else {}
    d = deployment(name, labels=labels, containers=[container(cpu=cpu, memory="1Gi")], **pinned)
    d["spec"]["template"]["metadata"]["labels"].update(labels)
    return d


def pod_of(kube: Any, ns: str, app: str) -> dict[str, Any] | None:
    pods = kube.get(pods_path(ns), labelSelector=f"app={app}")["items"]
    return pods[0] if pods else None


def gated(p: dict[str, Any]) -> bool:
    return {"name": QUEUE_GATE} in (p["spec"].get("schedulingGates") or [])


def test_a_deployments_pod_waits_behind_the_gate_and_goes_in_queue_order(kube, namespace, queue_node, tmp_path,
                                                                         policies):
    """The node is full (a released Job). An earlier bare pod and then a Deployment's pod of the gated
    queue, the same priority, each want the whole node: both wait gated. When the Job ends, the bare
    pod (earlier) is released and the service's pod stays behind the gate; when the bare pod ends,
    the service's pod is released and kube-scheduler binds it."""
    ns = namespace
    started: list = []
    try:
        fill(kube, ns, queue_node, tmp_path, policies, "r1", started)
        early = pod("early", labels={"batchgate.io/queue": QUEUED}, containers=[container(cpu="4", memory="1Gi")],
                    nodeSelector={"e2e-queue": queue_node}, tolerations=own_tolerations(queue_node))
        assert gated(create(kube, ns, early))
        time.sleep(1.1)  # a later creationTimestamp (seconds) for the service's pod
        create(kube, ns, web("web", QUEUED, queue_node, "4"))
        stored = wait_for(lambda: pod_of(kube, ns, "web"), 60, message="the Deployment's pod made")
        assert stored["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert gated(stored), stored["spec"]
        assert stored["spec"].get("priority") == kube.get(pods_path(ns, "early"))["spec"].get("priority")

        finish(kube, ns, "full")
        wait_for(lambda: not gated(kube.get(pods_path(ns, "early"))), 60, message="the earlier bare pod released")
        time.sleep(3)  # a pass or two more: the service's pod waits its turn
        svc = pod_of(kube, ns, "web")
        assert svc is not None and gated(svc) and not svc["spec"].get("nodeName")

        bound = wait_for(lambda: kube.get(pods_path(ns, "early"))["spec"].get("nodeName"), 60,
                         message="the bare pod bound")
        assert bound == queue_node
        kube.set_pod_phase(ns, "early", "Succeeded", {"main": 0})
        wait_for(lambda: (p := pod_of(kube, ns, "web")) is not None and not gated(p), 60,
                 message="the service's pod released once the room is free")
        wait_for(lambda: (p := pod_of(kube, ns, "web")) is not None and p["spec"].get("nodeName") == queue_node, 60,
                 message="the service's pod bound by kube-scheduler")
    finally:
        stop_reconcilers(started)


def test_a_services_pod_with_a_group_label_is_released_alone(kube, namespace, queue_node, tmp_path, policies):
    """A one-replica Deployment of the gated queue whose template says it is a group of 3
    (``batchgate.io/pod-group-size``): its ReplicaSet makes one pod, and will make no more. The queue
    releases that pod alone when it fits; waiting for the group's other two would be waiting for good."""
    ns = namespace
    started: list = []
    try:
        d = web("grouped", QUEUED, queue_node, "1")
        d["spec"]["template"]["metadata"]["labels"].update({"batchgate.io/pod-group-size": "3"})
        create(kube, ns, d)
        stored = wait_for(lambda: pod_of(kube, ns, "grouped"), 60, message="the Deployment's pod made")
        assert gated(stored), stored["spec"]
        test_queue.reconcile(kube, ns, tmp_path, policies, "r1", started)
        wait_for(lambda: (p := pod_of(kube, ns, "grouped")) is not None and not gated(p), 60,
                 message="the service's pod released alone")
        wait_for(lambda: (p := pod_of(kube, ns, "grouped")) is not None and p["spec"].get("nodeName") == queue_node,
                 60, message="the service's pod bound by kube-scheduler")
    finally:
        stop_reconcilers(started)


def daemonset(name: str, queue: str, node: str, cpu: str) -> dict[str, Any]:
    """A DaemonSet of ``queue`` asking ``cpu``, its nodeSelector matching ``node`` alone: the way to run
    one pod of batch work on a chosen node that a DaemonSet's pods were thought to give."""
    labels = {"batchgate.io/queue": queue}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "labels": labels}, "spec": {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name, **labels}},
                     "spec": {"containers": [container(cpu=cpu, memory="1Gi")], "nodeSelector": {"e2e-queue": node},
                              "tolerations": own_tolerations(node)}}}}


def test_a_daemonsets_pod_waits_behind_the_gate_for_room_on_its_node_and_is_bound_there(
        kube, namespace, queue_node, tmp_path, policies):
    """Since Kubernetes 1.12 the DaemonSet controller gives its pod a required node affinity to its node
    and kube-scheduler binds it: in a gated queue it is stored behind the gate (it would otherwise
    start at once, with no time limit), waits while its node is full, and is released when the node
    has room, its affinity as its controller wrote it (no narrowing repeats it), bound to that node."""
    ns = namespace
    started: list = []
    try:
        fill(kube, ns, queue_node, tmp_path, policies, "r1", started)
        create(kube, ns, daemonset("agent", QUEUED, queue_node, "2"))
        stored = wait_for(lambda: pod_of(kube, ns, "agent"), 60, message="the DaemonSet's pod made")
        assert stored["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
        assert gated(stored), stored["spec"]
        terms = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [queue_node]}]}], terms
        time.sleep(3)  # a pass or two: the node is full, so it waits
        p = pod_of(kube, ns, "agent")
        assert p is not None and gated(p) and not p["spec"].get("nodeName")

        finish(kube, ns, "full")
        wait_for(lambda: (p := pod_of(kube, ns, "agent")) is not None and not gated(p), 60,
                 message="the DaemonSet's pod released once its node has room")
        bound = wait_for(lambda: (p := pod_of(kube, ns, "agent")) is not None and p["spec"].get("nodeName"), 60,
                         message="the DaemonSet's pod bound by kube-scheduler")
        assert bound == queue_node
        p = pod_of(kube, ns, "agent")
        assert p is not None and p["spec"]["affinity"] == stored["spec"]["affinity"]
    finally:
        stop_reconcilers(started)


def test_an_interactive_deployment_starts_at_once(kube, namespace, node):
    """``interactive`` is not gated: the pod is stored without the gate and kube-scheduler binds it,
    no reconciler running."""
    create(kube, namespace, web("chat", "interactive", None, "100m"))
    stored = wait_for(lambda: pod_of(kube, namespace, "chat"), 60, message="the Deployment's pod made")
    assert not gated(stored), stored["spec"]
    wait_for(lambda: (p := pod_of(kube, namespace, "chat")) is not None and p["spec"].get("nodeName"), 60,
             message="the interactive pod bound")


SCOPE = "batchgate-e2e/queue-services"
HOOK = "create.queue-services-e2e.batchgate.io"
CONFIG = "batchgate-queue-services-e2e"


@pytest.fixture
def draining(kube: Any, namespace: str, webhook_server: Any, tmp_path: Path) -> Iterator[Callable[[], None]]:
    """Call it to have a validating server of this test's own judge CREATE in namespaces labelled
    ``SCOPE: on`` (failing closed) with the shipped bundle's queue ``batch`` draining, queue-gate its
    only policy; in force when the call returns."""
    def drain(spec: dict[str, Any]) -> None:
        next(q for q in spec["queues"] if q["name"] == "batch").update(state="drain", stateReason="storage move")
    policies = bundle_variant(tmp_path, drain, ("queue-gate",))
    server = WebhookServer(tmp_path, policies=policies, seal_keys=webhook_server.server.cert_dir / "seal.keys")
    server.start()
    validating = scoped_validating(server, CONFIG, {"create.validate.batchgate.io": HOOK}, SCOPE)

    def register() -> None:
        kube.register_webhooks(None, validating)
        probe = web("probe", "batch", None, "100m")

        def refused() -> bool:
            try:
                create(kube, namespace, probe, dry_run=True)
            except KubeApiError as exc:
                return HOOK in str(exc.body)
            return False
        wait_for(refused, 30, message="the draining server in force")

    try:
        yield register
    finally:
        with contextlib.suppress(Exception):
            kube.delete_webhooks(validating=CONFIG)
        server.stop()


@pytest.mark.namespace_labels({SCOPE: "on"})
def test_a_draining_queue_refuses_a_new_deployment_not_an_existing_ones_rollout(kube, namespace, draining):
    """A Deployment admitted before the drain rolls out a new ReplicaSet (made by its controller) in
    the draining queue; a Deployment, StatefulSet, ReplicaSet or DaemonSet a user creates there is refused,
    naming the queue and the reason."""
    ns = namespace
    create(kube, ns, web("old", "batch", None, "100m"))
    draining()
    for kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        obj = web(f"new-{kind.lower()}", "batch", None, "100m")
        obj["kind"] = kind
        if kind == "StatefulSet":
            obj["spec"]["serviceName"] = obj["metadata"]["name"]
        if kind == "DaemonSet":
            del obj["spec"]["replicas"]
        msg = expect_denied(kube, ns, obj)
        assert "queue 'batch' is draining (storage move)" in msg and HOOK in msg, msg
    kube.request("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/old",
                 {"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}}, as_user="alice",
                 content_type="application/merge-patch+json")
    wait_for(lambda: len(kube.get(f"/apis/apps/v1/namespaces/{ns}/replicasets", labelSelector="app=old")["items"]) == 2,
             60, message="the rollout's new ReplicaSet made in the draining queue")
