"""Released work is bound where the queue planned it, on the real control plane (issues 23, 24).

kube-scheduler's default scoring binds a pod on the emptiest node that fits: here that is the node
being emptied for a reserved whole-node job. The reconciler narrows every release to the nodes its
placement chose, so a short job that backfills is bound on the other node (its stored required node
affinity says so), and the big job starts on its node by its start-by. Room kube-scheduler preempted
for a pod of something the queue does not place (an interactive Deployment's) is that pod's: no
start-by counts on it.
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
    jobs_path,
    own_taint,
    own_tolerations,
    pod,
    pods_path,
    stop_reconcilers,
)
from test_queue import finish, pods_of, queued_job, reconcile, run_pods_of, start_by, suspended

from webhook.contract import START_BY_ANNOTATION

pytestmark = pytest.mark.usefixtures("webhook_server")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@pytest.fixture
def bundle(webhook_server: Any) -> Path:
    return Path(webhook_server.server.policies)


@pytest.fixture
def two_nodes(kube: Any):
    """Two 4-CPU nodes for this test's pods alone: labelled ``e2e-queue`` (its pods select them, told
    apart by ``e2e-pin``) and tainted (``own_taint``: its pods tolerate it, and no other pod lands
    there: one of higher priority pending would make kube-scheduler preempt busy-a or busy-b, whose
    victim, with no kubelet to end it, stays Terminating and frees its room at its grace period's
    end)."""
    tag = uuid.uuid4().hex[:6]
    names = {side: f"bg-n{side}-{tag}" for side in ("a", "b")}
    for side, name in names.items():
        kube.create_node(name, cpu="4", memory="16Gi", labels={"e2e-queue": tag, "e2e-pin": side},
                         taints=own_taint(tag))
    yield tag, names
    for name in names.values():
        kube.delete_node(name)


def timed(name: str, tag: str, cpu: str, minutes: int, pin: str | None = None) -> dict:
    j = queued_job(name, tag, cpu)
    j["metadata"]["annotations"] = {"batchgate.io/time-limit": f"{minutes}m"}
    if pin:
        j["spec"]["template"]["spec"]["nodeSelector"]["e2e-pin"] = pin
    return j


def node_of(kube: Any, ns: str, job: str) -> str:
    def bound() -> str | None:
        pods = [p for p in pods_of(kube, ns, job) if p["spec"].get("nodeName")]
        return pods[0]["spec"]["nodeName"] if pods else None
    return wait_for(bound, 60, message=f"a pod of {ns}/{job} bound")


def name_terms(spec: dict) -> list[list[str]]:
    """Per required node-affinity term, the node names its ``metadata.name In`` requirements allow."""
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(REQUIRED) or {}).get("nodeSelectorTerms")
    return [[v for f in t.get("matchFields") or () if f["key"] == "metadata.name" and f["operator"] == "In"
             for v in f["values"]] for t in terms or ()]


def busy(kube: Any, ns: str, tag: str, tmp_path: Path, bundle: Path, started: list) -> dict[str, str]:
    """a: 2 of 4 CPUs for 3 more minutes (busy-a); b: 3 of 4 for an hour (busy-b): both released by
    a reconciler started here and running, their deadlines recorded (returned by name)."""
    create(kube, ns, timed("busy-a", tag, "2", 3, pin="a"))
    create(kube, ns, timed("busy-b", tag, "3", 60, pin="b"))
    reconcile(kube, ns, tmp_path, bundle, "r1", started)
    deadlines = {}
    for name in ("busy-a", "busy-b"):
        wait_for(lambda name=name: not suspended(kube, ns, name), 60, message=f"{name} released")
        run_pods_of(kube, ns, name, 1)
    for name in ("busy-a", "busy-b"):
        deadlines[name] = wait_for(lambda name=name: (kube.get(jobs_path(ns, name))["metadata"].get(
            "annotations") or {}).get("batchgate.io/deadline"), 60, message=f"{name}'s deadline recorded")
    return deadlines


def test_backfill_is_bound_off_the_reserved_node_kube_scheduler_would_choose_and_the_big_job_starts_there(
        kube, namespace, two_nodes, tmp_path, bundle):
    ns = namespace
    tag, nodes = two_nodes
    started: list = []
    try:
        # a: 2 of 4 CPUs for 3 more minutes; b: 3 of 4 for an hour. a is the emptier node.
        busy(kube, ns, tag, tmp_path, bundle, started)

        # What kube-scheduler does with such a pod when nobody narrows it: the emptier node, a.
        probe = pod("probe", labels={"batchgate.io/queue": "batch"}, containers=[container(cpu="1", memory="1Gi")],
                    nodeSelector={"e2e-queue": tag}, tolerations=own_tolerations(tag))
        create(kube, ns, probe)
        chosen = wait_for(lambda: kube.get(pods_path(ns, "probe"))["spec"].get("nodeName"), 60,
                          message="the probe bound")
        assert chosen == nodes["a"], chosen
        kube.set_pod_phase(ns, "probe", "Succeeded", {"main": 0})  # holds nothing from here on

        create(kube, ns, timed("big", tag, "4", 60))  # the whole of a node: a, when busy-a's limit ends
        promise = wait_for(lambda: start_by(kube, ns, "big"), 60, message="the big job's start-by")
        deadline = kube.get(jobs_path(ns, "busy-a"))["metadata"]["annotations"]["batchgate.io/deadline"]
        assert promise == deadline, (promise, deadline)

        # 30 minutes: on a it would delay the big job; it fits now on b without delaying anything
        create(kube, ns, timed("short", tag, "1", 30))
        wait_for(lambda: not suspended(kube, ns, "short"), 60, message="the short job backfilled")
        assert node_of(kube, ns, "short") == nodes["b"]  # unnarrowed, kube-scheduler binds it on a
        stored = kube.get(jobs_path(ns, "short"))["spec"]["template"]["spec"]
        assert name_terms(stored) and all(t == [nodes["b"]] for t in name_terms(stored)), stored.get("affinity")
        (short_pod,) = pods_of(kube, ns, "short")
        assert all(t == [nodes["b"]] for t in name_terms(short_pod["spec"])), short_pod["spec"].get("affinity")
        uid = kube.get(jobs_path(ns, "short"))["metadata"]["uid"]
        (told,) = wait_for(lambda: events(kube, ns, uid=uid, reason="Released"), 60, message="short's Released Event")
        assert f"kept to the node planned for it ({nodes['b']})" in told["message"], told["message"]
        run_pods_of(kube, ns, "short", 1)
        assert suspended(kube, ns, "big") and start_by(kube, ns, "big") == promise

        finish(kube, ns, "busy-a")  # a is free: the big job goes there, short still running on b
        wait_for(lambda: not suspended(kube, ns, "big"), 60, message="the big job released")
        assert node_of(kube, ns, "big") == nodes["a"]
        assert time.time() <= epoch(promise), "released after its start-by"
        ann = kube.get(jobs_path(ns, "big"))["metadata"].get("annotations") or {}
        assert ann.get(START_BY_ANNOTATION) in (None, promise)
    finally:
        stop_reconcilers(started)


def test_room_kube_scheduler_preempts_for_an_interactive_session_is_the_sessions_not_a_promises(
        kube, namespace, two_nodes, tmp_path, bundle):
    """An interactive Deployment (ungated: kube-scheduler and its preemption serve it) wants a: kube-scheduler
    preempts busy-a for its pod and nominates it there (status.nominatedNodeName, read back). busy-a, being
    deleted, would free a 30 s from now, but that room is the session's: the big job is promised b, at
    busy-b's deadline."""
    ns = namespace
    tag, nodes = two_nodes
    started: list = []
    try:
        deadline = busy(kube, ns, tag, tmp_path, bundle, started)["busy-b"]

        session = {"batchgate.io/queue": "interactive"}
        web = deployment("web", labels=session, containers=[container(cpu="3", memory="1Gi")],
                         nodeSelector={"e2e-queue": tag, "e2e-pin": "a"}, tolerations=own_tolerations(tag))
        web["spec"]["template"]["metadata"]["labels"].update(session)
        create(kube, ns, web)
        wait_for(lambda: [p for p in kube.get(pods_path(ns), labelSelector="app=web")["items"]
                          if p["status"].get("nominatedNodeName") == nodes["a"]], 60,
                 message="the session's pod nominated to a")
        (victim,) = pods_of(kube, ns, "busy-a")
        assert victim["metadata"].get("deletionTimestamp"), "busy-a's pod not preempted"

        create(kube, ns, timed("big", tag, "4", 60))
        promise = wait_for(lambda: start_by(kube, ns, "big"), 60, message="the big job's start-by")
        assert promise == deadline, (promise, deadline)
    finally:
        stop_reconcilers(started)
