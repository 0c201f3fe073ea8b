"""Promises count only on room the queue will get, on the real control plane (issue 24).

kube-scheduler binds a pending pod that is not gated as soon as room appears, before the queue
releases anything: a Deployment's pod of the queue's priority, waiting with no room and nominated
nowhere (kube-scheduler does not preempt work of its own priority), takes the node when the batch
work on it ends, and keeps it (a service has no time limit). No start-by may count on that room.
And a promise whose work fits nowhere any more (the node it counted on deleted) is withdrawn with a
Warning, and made afresh when room comes back.

A pending pod naming a scheduler kube-scheduler does not serve (``nobody``) is never bound: it keeps
no room from the queue (issue 23's hostile tenant), so a gated Job is released onto its node; and
it keeps no expected start or start-by of batchgate's (none is made for it; one it carries goes).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cluster import wait_for
from harness import (
    container,
    create,
    deployment,
    epoch,
    events,
    own_taint,
    own_tolerations,
    pod,
    pods_path,
    stop_reconcilers,
)
from test_queue import deadline, reconcile, run_pods_of, start_by, suspended, timed

from webhook.contract import (
    EXPECTED_START_ANNOTATION,
    EXPECTED_START_REASON_ANNOTATION,
    START_BY_ANNOTATION,
)

pytestmark = pytest.mark.usefixtures("webhook_server")


@pytest.fixture
def policies(webhook_server: Any) -> Path:
    return Path(webhook_server.server.policies)


@pytest.fixture
def own_node(kube: Any):
    """A 4-CPU node for this test's pods alone (label ``e2e-queue``, ``own_taint``), made by the
    test when it calls the second item (again after deleting it), deleted after it."""
    name = f"bg-qp-{uuid.uuid4().hex[:6]}"
    yield name, lambda: kube.create_node(name, cpu="4", memory="16Gi", labels={"e2e-queue": name},
                                         taints=own_taint(name))
    kube.delete_node(name)


def busy(kube: Any, ns: str, own_node: tuple[str, Any], tmp_path: Any, policies: Any, started: list) -> str:
    """The node made, a reconciler started, and a 4-CPU Job of the gated queue with a 3-minute
    limit released and running on it; its deadline (when the node frees)."""
    node, make = own_node
    make()
    create(kube, ns, timed("busy", node, "4", 3))
    reconcile(kube, ns, tmp_path, policies, "r", started)
    wait_for(lambda: not suspended(kube, ns, "busy"), 60, message="busy released")
    run_pods_of(kube, ns, "busy", 1)
    return wait_for(lambda: deadline(kube, ns, "busy"), 60, message="busy's deadline recorded")


def test_a_pending_service_pod_takes_the_room_that_frees_first_and_no_promise_counts_on_it(
        kube, namespace, own_node, tmp_path, policies):
    ns, queue_node = namespace, own_node[0]
    started: list = []
    try:
        end = busy(kube, ns, own_node, tmp_path, policies, started)
        svc = {"batchgate.io/queue": "batch"}  # ungated in the e2e bundle; the gated queue's class
        web = deployment("web", labels=svc, containers=[container(cpu="2", memory="1Gi")],
                         nodeSelector={"e2e-queue": queue_node}, tolerations=own_tolerations(queue_node))
        web["spec"]["template"]["metadata"]["labels"].update(svc)
        create(kube, ns, web)

        def unschedulable() -> dict | None:
            for p in kube.get(pods_path(ns), labelSelector="app=web")["items"]:
                if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                       for c in p["status"].get("conditions") or ()):
                    return p
            return None
        pod = wait_for(unschedulable, 60, message="the service's pod pending with no room")
        assert pod["spec"].get("priority") == kube.get(
            "/apis/scheduling.k8s.io/v1/priorityclasses/batchgate-batch")["value"]
        assert not pod["status"].get("nominatedNodeName") and not pod["spec"].get("schedulingGates")

        uid = create(kube, ns, timed("big", queue_node, "3", 60))["metadata"]["uid"]
        wait_for(lambda: events(kube, ns, uid=uid, reason="Queued"), 60, message="the big job planned")
        time.sleep(3)  # a pass or two more
        # busy's end is the service's: the big job fits only beside the service, which has no limit
        assert start_by(kube, ns, "big") is None, (start_by(kube, ns, "big"), end)
        assert not events(kube, ns, uid=uid, reason="StartBy") and suspended(kube, ns, "big")

        kube.delete(f"/apis/apps/v1/namespaces/{ns}/deployments/web", body={"propagationPolicy": "Foreground"})
        promise = wait_for(lambda: start_by(kube, ns, "big"), 60, message="the big job promised once the service goes")
        assert promise == end, (promise, end)
    finally:
        stop_reconcilers(started)


def test_a_promise_whose_node_is_deleted_is_withdrawn_and_made_afresh_when_room_comes_back(
        kube, namespace, own_node, tmp_path, policies):
    ns, (name, make) = namespace, own_node
    started: list = []
    try:
        end = busy(kube, ns, own_node, tmp_path, policies, started)
        uid = create(kube, ns, timed("waits", name, "4", 60))["metadata"]["uid"]
        promise = wait_for(lambda: start_by(kube, ns, "waits"), 60, message="the waiting Job's start-by")
        assert promise == end

        kube.delete_node(name)
        wait_for(lambda: start_by(kube, ns, "waits") is None, 60, message="the promise withdrawn")
        (told,) = events(kube, ns, uid=uid, reason="StartByWithdrawn")
        assert told["type"] == "Warning", told
        assert told["message"].startswith(f"its promised start {promise} is withdrawn: no node it may use has "
                                          "room for it any more (no node matches"), told["message"]
        assert suspended(kube, ns, "waits")

        make()  # the node is back, empty: busy (re-queued or not) goes first, the waiting Job behind it
        again = wait_for(lambda: start_by(kube, ns, "waits") or (None if suspended(kube, ns, "waits") else "released"),
                         90, message="promised afresh (or released) once the node is back")
        if again != "released":
            assert epoch(again) > time.time() - 60
    finally:
        stop_reconcilers(started)


def test_a_pending_pod_no_scheduler_binds_keeps_no_room_from_the_queue(kube, namespace, own_node, tmp_path, policies):
    """A tenant's bare pod of an ungated queue asks for the whole node and names a scheduler nobody
    runs: it sits Pending for good. The gated Job that needs the whole node is released onto it and
    bound all the same (the placement keeps room only for what kube-scheduler binds)."""
    ns, (node, make) = namespace, own_node
    started: list = []
    try:
        make()
        hog = pod("hog", labels={"batchgate.io/queue": "batch"}, containers=[container(cpu="4", memory="1Gi")],
                  schedulerName="nobody", nodeSelector={"e2e-queue": node}, tolerations=own_tolerations(node))
        create(kube, ns, hog)
        stored = kube.get(pods_path(ns, "hog"))
        assert stored["spec"]["schedulerName"] == "nobody" and not stored["spec"].get("schedulingGates")
        create(kube, ns, timed("big", node, "4", 60))
        reconcile(kube, ns, tmp_path, policies, "r", started)
        wait_for(lambda: not suspended(kube, ns, "big"), 60, message="the gated Job released beside the hog")
        run_pods_of(kube, ns, "big", 1)  # bound by kube-scheduler onto the node the hog asked for
        assert not kube.get(pods_path(ns, "hog"))["spec"].get("nodeName")  # still pending: nobody binds it
    finally:
        stop_reconcilers(started)


def test_a_pod_of_another_scheduler_loses_the_estimate_and_start_by_it_carries(
        kube, namespace, own_node, tmp_path, policies):
    """A pending pod naming a scheduler kube-scheduler does not serve carries batchgate's expected start
    and start-by (an admin's copy here: as written before a profile left the bundle, or forged while the
    webhook was down). batchgate neither estimates nor promises its start: the reconciler removes all
    three annotations, read back from the API server, and tells it nothing; the pod stays as it was."""
    ns, (node, make) = namespace, own_node
    started: list = []
    ours = {EXPECTED_START_ANNOTATION: "2030-01-01T00:00:00Z", EXPECTED_START_REASON_ANNOTATION: "forged",
            START_BY_ANNOTATION: "2030-01-01T00:00:00Z"}
    try:
        make()
        other = pod("elsewhere", labels={"batchgate.io/queue": "batch"}, annotations={**ours, "keep": "me"},
                    containers=[container(cpu="1", memory="1Gi")], schedulerName="nobody",
                    nodeSelector={"e2e-queue": node}, tolerations=own_tolerations(node))
        uid = create(kube, ns, other, as_user="admin")["metadata"]["uid"]  # only an admin (or the reconciler) may
        stored = kube.get(pods_path(ns, "elsewhere"))
        assert ours.items() <= stored["metadata"]["annotations"].items() and not stored["spec"].get("schedulingGates")
        reconcile(kube, ns, tmp_path, policies, "r", started)

        def cleaned() -> dict | None:
            got = kube.get(pods_path(ns, "elsewhere"))
            return got if not (got["metadata"].get("annotations") or {}).keys() & ours.keys() else None
        got = wait_for(cleaned, 90, message="batchgate's annotations removed from the other scheduler's pod")
        assert got["metadata"]["annotations"]["keep"] == "me"  # the rest stays (the time limit the webhook set too)
        assert got["spec"]["schedulerName"] == "nobody" and not got["spec"].get("nodeName")
        assert not [e for e in events(kube, ns, uid=uid) if e["reason"].startswith(("ExpectedStart", "StartBy"))]
    finally:
        stop_reconcilers(started)
