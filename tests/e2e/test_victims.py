"""Issue 25's case on the real control plane: node A holds one scavenger pod with the most unsaved
work, node B two that have just started (a checkpoint ago). An ordinary pod that needs a whole node
takes B's room when batchgate's queue releases it (the reconciler chooses the victims and narrows
the pod to B), where kube-scheduler alone (the same pod in an ungated queue) preempts A's: the
fewest victims.

The fake nodes have no kubelet: the test plays it, running pods and finishing deletions."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from cluster import wait_for
from conftest import QUEUED
from harness import (
    container,
    create,
    own_taint,
    own_tolerations,
    pods_path,
    start_reconciler,
    stop_reconcilers,
)

pytestmark = pytest.mark.usefixtures("webhook_server")
NOW = "%Y-%m-%dT%H:%M:%SZ"


def scavenger(name: str, node: str, key: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"batchgate.io/queue": "scavenger"}},
            "spec": {"containers": [container(cpu=cpu, memory="1Gi")], "nodeSelector": {"e2e-victims": node},
                     "tolerations": own_tolerations(key), "restartPolicy": "Never"}}


def ordinary(name: str, queue: str, key: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"batchgate.io/queue": queue}},
            "spec": {"containers": [container(cpu="4", memory="1Gi")], "restartPolicy": "Never",
                     "tolerations": own_tolerations(key),
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "e2e-victims-set", "operator": "In", "values": [key]}]}]}}}}}


def run(kube: Any, ns: str, name: str) -> None:
    wait_for(lambda: kube.get(pods_path(ns, name))["spec"].get("nodeName"), 60, message=f"{name} bound")
    kube.set_pod_phase(ns, name, "Running", {"main": {"running": {"startedAt": time.strftime(NOW, time.gmtime())}}})


def finish_deletions(kube: Any, ns: str) -> list[str]:
    """Play kubelet: pods being deleted go (their names)."""
    gone = []
    for p in kube.get(pods_path(ns))["items"]:
        if p["metadata"].get("deletionTimestamp"):
            kube.delete(pods_path(ns, p["metadata"]["name"]), body={"gracePeriodSeconds": 0})
            gone.append(p["metadata"]["name"])
    return gone


def deleting(kube: Any, ns: str) -> set[str]:
    return {p["metadata"]["name"] for p in kube.get(pods_path(ns))["items"] if p["metadata"].get("deletionTimestamp")}


@pytest.fixture
def two_nodes(kube: Any):
    """Two 4-CPU nodes for this test's pods alone (they tolerate ``own_taint``)."""
    key = uuid.uuid4().hex[:6]
    names = [f"bg-v{x}-{key}" for x in "ab"]
    for n in names:
        kube.create_node(n, cpu="4", memory="16Gi", labels={"e2e-victims": n, "e2e-victims-set": key},
                         taints=own_taint(key))
    yield key, names
    for n in names:
        kube.delete_node(n)


def scavengers(kube: Any, ns: str, key: str, a: str, b: str) -> None:
    create(kube, ns, scavenger("old", a, key, "4"))
    run(kube, ns, "old")
    time.sleep(30)  # two minutes of core-time unsaved on A
    for name in ("new1", "new2"):
        create(kube, ns, scavenger(name, b, key, "2"))
        run(kube, ns, name)


def test_kube_scheduler_alone_preempts_the_fewest_victims(kube, namespace, two_nodes):
    key, (a, b) = two_nodes
    scavengers(kube, namespace, key, a, b)
    create(kube, namespace, ordinary("whole", "batch", key))  # ungated in the e2e bundle
    victims = wait_for(lambda: deleting(kube, namespace) or None, 60, message="kube-scheduler to preempt")
    assert victims == {"old"}, victims  # one victim on A, though it loses the most work


def test_the_reconciler_takes_room_from_the_scavengers_that_lose_least(kube, namespace, two_nodes, tmp_path,
                                                                       webhook_server):
    key, (a, b) = two_nodes
    ns = namespace
    scavengers(kube, ns, key, a, b)
    stored = create(kube, ns, ordinary("whole", QUEUED, key))
    assert stored["spec"]["schedulingGates"]
    started = [start_reconciler(kube, ns, tmp_path / "r.log", "--policies", str(webhook_server.server.policies),
                                "--resync", "20s")]
    try:
        started[0].wait_ready()
        # the victims go first, then the pod is narrowed and released, in one pass
        pod = wait_for(lambda: (p := kube.get(pods_path(ns, "whole")))["spec"].get("schedulingGates") is None and p,
                       60, message="the pod released")
        victims = deleting(kube, ns)
        assert victims == {"new1", "new2"}, (victims, started[0].logs())
        told = {e["involvedObject"]["name"] for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
                if e["reason"] == "Preempted" and e.get("source", {}).get("component") == "batchgate-reconciler"}
        assert told >= victims, told
        for name in victims:
            cond = [c for c in kube.get(pods_path(ns, name))["status"].get("conditions", [])
                    if c["type"] == "DisruptionTarget"]
            # kube-scheduler before 1.36 may write its own reason over ours when it binds the released
            # pod on the node whose pods are still terminating (no kubelet finishes them here)
            assert cond and cond[0]["reason"] in ("PreemptionByBatchgate", "PreemptionByScheduler"), cond
            if kube.server_version() >= (1, 36):
                assert cond[0]["reason"] == "PreemptionByBatchgate", cond
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert {"key": "metadata.name", "operator": "In", "values": [b]} in terms["nodeSelectorTerms"][0]["matchFields"]
        finish_deletions(kube, ns)
        wait_for(lambda: kube.get(pods_path(ns, "whole"))["spec"].get("nodeName") == b, 60,
                 message="kube-scheduler to bind it on B")
        assert "old" not in deleting(kube, ns)
    finally:
        stop_reconcilers(started)
