"""The hostile tenant (issue 27), against the real control plane.

Each test is one of the issue's attacks, made as an ordinary user: alice, impersonated, bound to
the built-in ``edit`` ClusterRole in her own namespace and nowhere else, through the session's
webhook (the shipped bundle). Each asserts the attack is refused, or harmless: what the API
server stored is read back, and the reconciler's own Controller, run in-process against the same
API server (its cache listed at the moment of a pass, its actions carried out by its actuator),
shows what it plans about it. docs/admin/security.md names these tests for its claims.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cluster import REPO_ROOT, KubeApiError, now_rfc3339, require_components, wait_for
from harness import (
    GANG,
    QUEUE_LABEL,
    TIME_LIMIT,
    container,
    create,
    create_and_read,
    events,
    job,
    jobs_path,
    own_taint,
    own_tolerations,
    pod,
    pods_path,
    unique,
)

from webhook.reconciler.actions import Action
from webhook.reconciler.controller import Controller
from webhook.reconciler.kube import KubeApi
from webhook.reconciler.scavenger import eligible_nodes
from webhook.reconciler.settings import QueuePolicy, Settings

HUGE = "99999999999999999999s"
EXCLUSIVE, GROUP = "batchgate.io/exclusive", "batchgate.io/exclusive-group"
SJ_PATH = "/apis/batchgate.io/v1alpha1/namespaces/{ns}/scavengerjobs"
MW_PATH = "/apis/batchgate.io/v1alpha1/maintenancewindows"
FIXED = "cannot be set, changed or removed once it exists"
NEXT_MAINTENANCE = "batchgate.io/next-maintenance"


# -- helpers -------------------------------------------------------------------------------------
@pytest.fixture
def api(kube: Any) -> Iterator[KubeApi]:
    client = KubeApi.connect(kube.kubeconfig("admin"))
    yield client
    client.close()


@pytest.fixture
def nodes(kube: Any) -> Iterator[Callable[..., str]]:
    """Fake nodes (no kubelet) made for one test, deleted after it; ``tainted``: for the test's own
    pods alone (``own_taint``, valued with the node's name: they tolerate ``own_tolerations(node)``)."""
    made: list[str] = []

    def make(cpu: str = "8", *, tainted: bool = False) -> str:
        name = unique("hostile-node")
        kube.create_node(name, cpu=cpu, memory="64Gi",
                         taints=own_taint(name) if tainted else ())
        made.append(name)
        return name

    yield make
    for n in made:
        with contextlib.suppress(Exception):
            kube.delete_node(n)


@pytest.fixture
def controller(api: KubeApi, webhook_server: Any) -> Callable[[str], Controller]:
    """The reconciler's Controller for one namespace, with the bundle the session's webhook serves."""
    queues = QueuePolicy.from_bundle(webhook_server.bundle)
    return lambda namespace: Controller(api, Settings(leader_elect=False, namespace=namespace, queues=queues))


def one_pass(c: Controller, namespace: str, *, execute: bool = True) -> list[Action]:
    """List everything, plan, and carry out what concerns this namespace and its nodes (the
    cluster's other objects are other tests'); the planned actions about this namespace."""
    c.cache.list_once()
    result = c.plan_now()
    mine = [a for a in result.actions if a.target.namespace in (namespace, "")]
    if execute:
        outcomes = c.actuator.execute(mine)
        assert all(o.result in ("done", "gone", "exists") for o in outcomes), [(o.action.line(), o.result)
                                                                                for o in outcomes]
    ours = [a for a in mine if a.target.namespace == namespace]
    assert [a.line() for a in ours if a.kind == "cannot-plan"] == []
    return ours


def refused(call: Callable[[], Any], *, says: str) -> str:
    """The request is refused by a batchgate webhook, with ``says`` in the message."""
    with pytest.raises(KubeApiError) as info:
        call()
    body = info.value.body if isinstance(info.value.body, dict) else {}
    message = str(body.get("message", info.value))
    assert info.value.status == 403, message
    # the webhook, or the ValidatingAdmissionPolicy that holds the same while it is down
    assert "batchgate.io\" denied the request" in message or "ValidatingAdmissionPolicy 'batchgate-" in message, message
    assert says in message, message
    return message


def scavengerjob(name: str, *, cpu: str = "500m", duration: str = "10m") -> dict[str, Any]:
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "metadata": {"name": name},
            "spec": {"image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"], "runAsUser": 65534,
                     "resources": {"limits": {"cpu": cpu, "memory": "256Mi"}}, "duration": duration}}


def owned_by(obj: dict[str, Any], api_version: str, kind: str, name: str = "x", uid: str = "0e5d3c9a") -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
                                           "controller": True}]
    return obj


def scavenger_pod(name: str, cpu: str, memory: str, **spec: Any) -> dict[str, Any]:
    """Guaranteed (scavenger-qos), in queue scavenger."""
    return pod(name, labels={QUEUE_LABEL: "scavenger"}, containers=[container(cpu=cpu, memory=memory)], **spec)


def patch_as_alice(kube: Any, path: str, body: dict[str, Any]) -> Callable[[], Any]:
    return lambda: kube.patch(path, body, as_user="alice")


def env_of(stored: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in stored["spec"]["containers"][0].get("env") or []}


# -- 1. one object that stopped the reconciler for every tenant ----------------------------------
def test_1_durations_past_the_bound_are_refused_and_no_pass_fails(kube, webhook_server, namespace, controller):
    """A ScavengerJob with duration 99999999999999999999s, and a bare Pod with a made-up owner that
    then drops it, names an unknown queue and takes the same limit: every step that would store the
    duration is refused, and a pass over the namespace plans without a CannotPlan."""
    refused(lambda: create(kube, namespace, scavengerjob("huge", duration=HUGE)), says="longer than 3650d")
    assert not kube.exists(SJ_PATH.format(ns=namespace) + "/huge")

    name = unique("bare")
    stored = create_and_read(kube, namespace, owned_by(pod(name, labels={QUEUE_LABEL: "batch"}),
                                                       "nope.example.com/v1", "Widget"))
    path = pods_path(namespace, name)
    assert stored["metadata"]["annotations"][TIME_LIMIT] == "1d"  # a job: the queue's default (item 6)
    kube.patch(path, {"metadata": {"ownerReferences": None}}, as_user="alice")  # nothing to refuse
    refused(patch_as_alice(kube, path, {"metadata": {"labels": {QUEUE_LABEL: "no-such-queue"}}}), says=FIXED)
    refused(patch_as_alice(kube, path, {"metadata": {"annotations": {TIME_LIMIT: HUGE}}}), says="3650d")
    now = kube.get(path)["metadata"]
    assert (now["labels"][QUEUE_LABEL], now["annotations"][TIME_LIMIT]) == ("batch", "1d")
    one_pass(controller(namespace), namespace)  # (asserts no CannotPlan)


# -- 2. unbounded memory from one annotation -----------------------------------------------------
def test_2_connect_to_with_thousands_of_names_is_refused_on_update(kube, webhook_server, namespace):
    """30,000 names (about 200 KB, under the API server's 256 KiB for all annotations) in
    batchgate.io/connect-to on a Pod UPDATE: refused; nothing stored."""
    name = unique("chatty")
    create(kube, namespace, pod(name))
    names = ",".join(f"w{i}" for i in range(30_000))
    path = pods_path(namespace, name)
    refused(patch_as_alice(kube, path, {"metadata": {"annotations": {"batchgate.io/connect-to": names}}}),
            says="at most 64")
    assert "batchgate.io/connect-to" not in (kube.get(path)["metadata"].get("annotations") or {})


# -- 3. one pending pod starving every tenant's ScavengerJobs ------------------------------------
def test_3_a_pod_that_can_never_fit_takes_no_share_and_is_told_so(kube, webhook_server, namespace, controller, nodes):
    nodes("8")
    hog = unique("hog")
    create(kube, namespace, scavenger_pod(hog, "100000", "1Ei", nodeSelector={"batchgate.io/e2e": "nowhere"}))
    create(kube, namespace, scavengerjob("md"))
    c = controller(namespace)
    first = one_pass(c, namespace)
    assert any(a.reason == "NeverFits" and a.target.name == hog for a in first), [a.line() for a in first]
    second = one_pass(c, namespace, execute=False)
    assert [a.kind for a in second if a.target.name == "md"] == ["sj-start"], [a.line() for a in second]


# -- 4. escaping the scavengers' cap by relabelling ----------------------------------------------
@pytest.mark.parametrize("relabel", ["batch", None], ids=["to-batch", "removed"])
def test_4_relabelling_running_scavenger_pods_is_refused_and_would_not_escape_the_cap(
        kube, webhook_server, namespace, controller, nodes, relabel):
    c = controller(namespace)
    c.cache.list_once()
    qp = c.settings.queues
    others = sum(n.cpu for n in eligible_nodes(c.cache.snapshot().nodes or {}, qp.scavenger_node_selector))
    nodes("4")  # room for the ScavengerJob, were the cap not used up
    full = 3 * (others + 4000) + 4000  # millicores: the hog's node; the hog alone is >= 75 % of them all
    a = nodes(f"{full}m")
    hog = unique("hog")
    create(kube, namespace, scavenger_pod(hog, f"{full}m", "64Mi", nodeName=a))
    kube.set_pod_phase(namespace, hog, "Running")
    path = pods_path(namespace, hog)
    refused(patch_as_alice(kube, path, {"metadata": {"labels": {QUEUE_LABEL: relabel}}}), says=FIXED)
    assert kube.get(path)["metadata"]["labels"][QUEUE_LABEL] == "scavenger"
    # stored all the same (by an admin here; by anyone while the UPDATE webhook is unreachable): the
    # reconciler counts the pod by its admission record and class, not by the label
    kube.patch(path, {"metadata": {"labels": {QUEUE_LABEL: relabel}}})
    assert (kube.get(path)["metadata"].get("labels") or {}).get(QUEUE_LABEL) == relabel
    create(kube, namespace, scavengerjob("md"))
    one_pass(c, namespace)
    second = one_pass(c, namespace, execute=False)
    waiting = [a for a in second if a.target.name == "md"]
    assert [a.kind for a in waiting] == ["sj-waiting"], [a.line() for a in second]
    assert "more than is left of the scavengers' share" in waiting[0].message


# -- 5. exclusive nodes --------------------------------------------------------------------------
def test_5_a_pod_waiting_for_an_exclusive_node_cannot_drop_out_of_its_anti_affinity(
        kube, webhook_server, namespace, nodes):
    """The original attack: bob's exclusive pod holds node X; alice's pod pinned to X waits
    (Unschedulable); alice removes its batchgate.io/queue label, which the anti-affinity term matches
    (Exists), and kube-scheduler used to bind it beside bob's. Now the UPDATE is refused, and so is
    taking bob's exclusive group; the pod still waits."""
    require_components(kube, "kube-scheduler")
    x = nodes("4", tainted=True)
    victim_ns = kube.create_namespace(prefix="e2e-hostile-victim", edit_users=("bob",))
    try:
        small = dict(tolerations=own_tolerations(x), containers=[container(cpu="100m", memory="64Mi")])
        v = unique("exclusive")
        create(kube, victim_ns, pod(v, labels={EXCLUSIVE: "true"}, nodeSelector={"kubernetes.io/hostname": x},
                                    **small), as_user="bob")
        wait_for(lambda: kube.get(pods_path(victim_ns, v))["spec"].get("nodeName") == x, 30,
                 message="the exclusive pod to be bound to its node")
        group = kube.get(pods_path(victim_ns, v))["metadata"]["labels"][GROUP]

        mine = unique("pinned")
        create(kube, namespace, pod(mine, nodeSelector={"kubernetes.io/hostname": x}, **small))
        path = pods_path(namespace, mine)

        def unschedulable() -> bool:
            conds = kube.get(path)["status"].get("conditions") or []
            return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)

        wait_for(unschedulable, 30, message="the pinned pod to be reported unschedulable")
        refused(patch_as_alice(kube, path, {"metadata": {"labels": {QUEUE_LABEL: None}}}), says=FIXED)
        refused(patch_as_alice(kube, path, {"metadata": {"labels": {GROUP: group}}}), says=FIXED)
        stored = kube.get(path)
        assert stored["metadata"]["labels"][QUEUE_LABEL] == "batch" and GROUP not in stored["metadata"]["labels"]
        # an UPDATE the scheduler reacts to (a new label of alice's own) and it still waits
        kube.patch(path, {"metadata": {"labels": {"mine": "yes"}}}, as_user="alice")
        wait_for(unschedulable, 30, message="the pinned pod to be re-tried and still unschedulable")
        assert not kube.get(path)["spec"].get("nodeName")
    finally:
        with contextlib.suppress(Exception):
            kube.delete_namespace(victim_ns)


# -- 6. made-up owners ---------------------------------------------------------------------------
def test_6a_a_pod_claiming_a_made_up_daemonset_is_a_job_and_is_drained(kube, webhook_server, namespace, controller,
                                                                       nodes):
    """A bare Pod naming nope.example.com/v1 DaemonSet as its controller used to be stored with no
    time limit, no record and no maintenance affinity, and the drain skipped it."""
    n = nodes("8", tainted=True)
    name = unique("daemon")
    obj = owned_by(pod(name, labels={QUEUE_LABEL: "interactive"}, nodeName=n), "nope.example.com/v1", "DaemonSet")
    stored = create_and_read(kube, namespace, obj)
    assert stored["metadata"]["annotations"][TIME_LIMIT] == "2h"  # interactive's default
    assert env_of(stored) == {"BATCHGATE_QUEUE": "interactive", "BATCHGATE_TIME_LIMIT": "2h", "BATCHGATE_JOB_UID": None}
    assert stored["spec"]["activeDeadlineSeconds"] > 0
    terms = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert "batchgate.io/maintenance-in-minutes" in str(terms)
    kube.set_pod_phase(namespace, name, "Running")

    window = unique("hostile-window")
    kube.create(MW_PATH, {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
                          "metadata": {"name": window},
                          "spec": {"start": now_rfc3339(-60), "end": now_rfc3339(3600), "nodes": [n],
                                   "reason": "e2e"}})
    try:
        c = controller(namespace)
        for _ in range(3):  # cordon, then drain
            planned = one_pass(c, namespace)
            if any(a.kind == "evict" for a in planned):
                break
        assert [(a.kind, a.evict.name if a.evict else None) for a in planned if a.kind == "evict"] == [("evict", name)]
        assert kube.get(pods_path(namespace, name))["metadata"].get("deletionTimestamp")
    finally:
        with contextlib.suppress(Exception):
            kube.delete(f"{MW_PATH}/{window}")


def test_6b_a_job_claiming_a_made_up_scavengerjob_gets_its_deadline_and_gang(kube, webhook_server, namespace,
                                                                            controller):
    """A Job owned by "a ScavengerJob" of any apiVersion used to get no deadline and no gang
    handling. Only a batchgate.io/v1alpha1 ScavengerJob the reconciler sees, with that uid, runs one."""
    require_components(kube, "kube-controller-manager")
    name = unique("sj-claim")
    obj = job(name, parallelism=2, labels=GANG, annotations={TIME_LIMIT: "1h"},
              nodeSelector={"batchgate.io/e2e": "nowhere"})
    obj["spec"]["backoffLimit"] = 3
    stored = create_and_read(kube, namespace, owned_by(obj, "nope.example.com/v1", "ScavengerJob"))
    uid = stored["metadata"]["uid"]
    members = kube.wait_for_pods(namespace, label_selector=f"controller-uid={uid}", count=2, timeout=60)
    first, second = sorted(p["metadata"]["name"] for p in members)
    kube.set_pod_phase(namespace, first, "Running")
    kube.set_pod_phase(namespace, second, "Running")
    c = controller(namespace)
    planned = one_pass(c, namespace)
    assert ("record-deadline", name) in [(a.kind, a.target.name) for a in planned], [a.line() for a in planned]
    assert kube.get(jobs_path(namespace, name))["metadata"]["annotations"].get("batchgate.io/deadline")

    kube.set_pod_phase(namespace, second, "Failed", {"main": 1})
    planned = one_pass(c, namespace, execute=False)
    assert ("gang-restart", name) in [(a.kind, a.target.name) for a in planned], [a.line() for a in planned]



# -- 8. re-parenting one's own pod to a colleague's Job ------------------------------------------
def bobs_job(kube: Any, namespace: str, limit: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """bob's Job (queue interactive, time limit ``limit``, its pod never bound) as stored, and the pod
    its controller made, whose record holds the Job's uid."""
    require_components(kube, "kube-controller-manager")
    stored = create_and_read(kube, namespace, job(unique("train"), labels={QUEUE_LABEL: "interactive"},
                                                  annotations={TIME_LIMIT: limit},
                                                  nodeSelector={"batchgate.io/e2e": "nowhere"}), as_user="bob")
    uid = stored["metadata"]["uid"]
    (own,) = kube.wait_for_pods(namespace, label_selector=f"controller-uid={uid}", count=1, timeout=60)
    assert env_of(own)["BATCHGATE_JOB_UID"] == uid
    return stored, own


def test_8_a_new_pod_re_parented_to_a_colleagues_job_neither_dates_nor_stops_it(kube, webhook_server, namespace,
                                                                                controller):
    """bob's Job (time limit 3s) waits with its pod unscheduled. alice creates a pod after it, runs
    it, and gives it (an UPDATE the API server allows: ownerReferences are hers to write) a
    controlling ownerReference to bob's Job. It used to date the Job from her pod's start and stop
    it 3 s later; the admission record says the Job controller did not make her pod (its
    BATCHGATE_JOB_UID is empty, the Job's own pod carries the Job's uid), so the Job is neither
    dated nor stopped."""
    stored, _ = bobs_job(kube, namespace, "3s")
    name, uid = stored["metadata"]["name"], stored["metadata"]["uid"]
    mine = unique("mine")
    create(kube, namespace, pod(mine, labels={QUEUE_LABEL: "interactive"}, nodeSelector={"batchgate.io/e2e": "nowhere"}))
    kube.set_pod_phase(namespace, mine, "Running")
    kube.patch(pods_path(namespace, mine), {"metadata": {"ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}]}}, as_user="alice")
    got = kube.get(pods_path(namespace, mine))
    assert got["metadata"]["ownerReferences"][0]["uid"] == uid
    assert got["metadata"]["creationTimestamp"] >= stored["metadata"]["creationTimestamp"]
    assert env_of(got)["BATCHGATE_JOB_UID"] is None  # recorded empty at her CREATE; env cannot change
    # her pod has run for longer than the Job's limit
    created = _epoch(got["metadata"]["creationTimestamp"])
    wait_for(lambda: time.time() > created + 5, 30, interval=0.5, message="5 s past her pod's creation")
    planned = one_pass(controller(namespace), namespace)
    on_job = [a.line() for a in planned if a.target.uid == uid or any(d.ref.uid == uid for d in a.deletes)]
    assert not any("TimeLimitExceeded" in line or "DeadlineSet" in line or "TimeLimitApproaching" in line
                   for line in on_job), on_job
    assert not any(d.ref.uid == uid for a in planned for d in a.deletes)
    after = kube.get(jobs_path(namespace, name))
    assert after["metadata"]["uid"] == uid and not after["metadata"].get("deletionTimestamp")
    assert not {"batchgate.io/started-at", "batchgate.io/deadline"} & set(after["metadata"].get("annotations") or {})



def test_8b_a_jobs_pod_whose_reference_is_rewritten_to_batch_v2_is_timed_as_a_job_of_its_own(
        kube, webhook_server, namespace, controller):
    """bob's Job made its pod (the record holds the Job's uid); alice rewrites the pod's controlling
    ownerReference to ``batch/v2``, same kind, name and uid. The garbage collector resolves no such
    Job and would leave the pod behind when the Job goes, so it is no pod of the Job (``model.owns``
    requires ``batch/v1`` ``Job``): it is timed alone, with the limit it was admitted with (its
    deadline stored on it), and it does not date bob's Job."""
    stored, own = bobs_job(kube, namespace, "1h")
    name, uid, pod_name = stored["metadata"]["name"], stored["metadata"]["uid"], own["metadata"]["name"]
    kube.set_pod_phase(namespace, pod_name, "Running")
    kube.patch(pods_path(namespace, pod_name), {"metadata": {"ownerReferences": [
        {"apiVersion": "batch/v2", "kind": "Job", "name": name, "uid": uid, "controller": True}]}}, as_user="alice")
    assert kube.get(pods_path(namespace, pod_name))["metadata"]["ownerReferences"][0]["apiVersion"] == "batch/v2"
    planned = one_pass(controller(namespace), namespace)
    deadlines = sorted((a.target.kind, a.target.name) for a in planned if a.kind == "record-deadline")
    assert deadlines == [("Pod", pod_name)], [a.line() for a in planned]
    assert "batchgate.io/deadline" in (kube.get(pods_path(namespace, pod_name))["metadata"].get("annotations") or {})
    assert "batchgate.io/deadline" not in (kube.get(jobs_path(namespace, name))["metadata"].get("annotations") or {})


def test_8c_a_pod_re_parented_into_a_colleagues_job_network_does_not_make_the_job_own_it(
        kube, webhook_server, namespace, controller):
    """bob's gang Job has its network (Service, hostfile) owned by the Job. alice creates a pod of
    the same pod group, so of the same network, and re-parents it to bob's Job. Her pod is no pod of
    the Job (``model.owns``: its record names no Job), so the Job is not the network's one owner any
    more: the pods own it together, as the planner times her pod as a job of its own; the stored
    Service says so."""
    require_components(kube, "kube-controller-manager")
    name = unique("mpi")
    stored = create_and_read(kube, namespace, job(name, parallelism=2, completions=2, labels=GANG,
                                                  nodeSelector={"batchgate.io/e2e": "nowhere"}), as_user="bob")
    uid = stored["metadata"]["uid"]
    kube.wait_for_pods(namespace, label_selector=f"controller-uid={uid}", count=2, timeout=60)
    c = controller(namespace)
    one_pass(c, namespace)
    owners = kube.get(f"/api/v1/namespaces/{namespace}/services/{name}")["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"]) for o in owners] == [("Job", uid)], owners
    mine = unique("mine")
    create(kube, namespace, pod(mine, labels={"batchgate.io/pod-group": name, "batchgate.io/pod-group-size": "2"},
                                nodeSelector={"batchgate.io/e2e": "nowhere"}), as_user="alice")
    kube.patch(pods_path(namespace, mine), {"metadata": {"ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}]}}, as_user="alice")
    assert kube.get(pods_path(namespace, mine))["metadata"]["labels"]["batchgate.io/network"] == name
    one_pass(c, namespace)
    owners = kube.get(f"/api/v1/namespaces/{namespace}/services/{name}")["metadata"]["ownerReferences"]
    assert {o["kind"] for o in owners} == {"Pod"} and mine in {o["name"] for o in owners}, owners


# -- 9. a pod naming another namespace's Job ------------------------------------------------------
def test_9_a_pod_naming_another_namespaces_job_ties_no_window_to_it_nor_shows_as_it(kube, webhook_server, namespace,
                                                                                     api, nodes):
    """alice's pod runs on a node that a maintenance window takes in 3 hours, and names bob's Job, in
    bob's namespace, as its controller. ownerReferences are namespace-local: the garbage collector
    reports OwnerRefInvalidNamespace and, for a ``batch/v1`` reference, deletes the pod within a
    second; with an apiVersion it cannot resolve (``batch/v2``) it leaves the pod alone. The
    reconciler took the pod for the Job's by the uid alone: it wrote alice's window into bob's
    Job (``batchgate.io/next-maintenance``, by which the webhook refuses his extensions past it), and
    ``batchgate queue`` listed bob's suspended Job as running on alice's node. Bob's own Job on the
    node gets the window, as it should, and so does alice's pod, a job of its own: admitted, no Job
    confirms it, so the planner times it alone, and ``batchgate queue`` lists it in her namespace."""
    require_components(kube, "kube-controller-manager")
    n = nodes("8", tainted=True)
    bobs = kube.create_namespace(prefix="e2e-hostile-9-bob", edit_users=("bob",))
    window = unique("hostile-window")
    try:
        victim = unique("train")
        obj = job(victim, labels={QUEUE_LABEL: "interactive"}, annotations={TIME_LIMIT: "1h"})
        obj["spec"]["suspend"] = True
        uid = create_and_read(kube, bobs, obj, as_user="bob")["metadata"]["uid"]
        own = unique("own")
        own_uid = create_and_read(kube, bobs, job(own, labels={QUEUE_LABEL: "interactive"}, annotations={TIME_LIMIT: "1h"},
                                                  nodeName=n, tolerations=own_tolerations(n)), as_user="bob")["metadata"]["uid"]
        (own_pod,) = kube.wait_for_pods(bobs, label_selector=f"controller-uid={own_uid}", count=1, timeout=60)
        kube.set_pod_phase(bobs, own_pod["metadata"]["name"], "Running")

        forged = unique("forged")
        forged_uid = create(kube, namespace, owned_by(pod(forged, labels={QUEUE_LABEL: "interactive"}, nodeName=n,
                                                          tolerations=own_tolerations(n)), "batch/v2", "Job", victim, uid))["metadata"]["uid"]
        kube.set_pod_phase(namespace, forged, "Running")
        kube.create(MW_PATH, {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
                              "metadata": {"name": window},
                              "spec": {"start": now_rfc3339(3 * 3600), "end": now_rfc3339(4 * 3600), "nodes": [n],
                                       "reason": "e2e"}})
        # the garbage collector has seen the reference, and left the pod
        wait_for(lambda: events(kube, namespace, uid=forged_uid, reason="OwnerRefInvalidNamespace"), 60,
                 message="the garbage collector's OwnerRefInvalidNamespace Event on the forged pod")

        # a reconciler that watches the whole cluster (one scoped to bob's namespace never sees alice's
        # pod); what it plans about bob's namespace is carried out
        c = Controller(api, Settings(leader_elect=False, queues=QueuePolicy.from_bundle(webhook_server.bundle)))
        c.cache.list_once()
        planned = [a for a in c.plan_now().actions if a.target.namespace in (bobs, namespace)]
        outcomes = c.actuator.execute(planned)
        assert all(o.result in ("done", "gone", "exists") for o in outcomes), [(o.action.line(), o.result)
                                                                                for o in outcomes]
        # alice's pod is a job of its own (admitted, and no Job confirms it), as the planner times it:
        # it is told the window on its node, as a bare pod is (model.own_job)
        assert sorted((a.target.kind, a.target.name) for a in planned if a.kind == "record-maintenance") == \
            sorted([("Job", own), ("Pod", forged)]), [a.line() for a in planned]
        still = kube.get(pods_path(namespace, forged))["metadata"]  # it was there for the pass, and is
        assert not still.get("deletionTimestamp") and still["ownerReferences"][0]["uid"] == uid
        assert window in (still.get("annotations") or {})[NEXT_MAINTENANCE]
        annotations = kube.get(jobs_path(bobs, victim))["metadata"].get("annotations") or {}
        assert NEXT_MAINTENANCE not in annotations, annotations
        assert window in (kube.get(jobs_path(bobs, own))["metadata"].get("annotations") or {})[NEXT_MAINTENANCE]

        for ns, want in ((bobs, {own: f"on {n}"}), (namespace, {forged: f"on {n}"})):
            out = subprocess.run([sys.executable, "-m", "webhook", "queue", "--namespace", ns, "-o", "json",
                                  "--kubeconfig", kube.kubeconfig("admin")],
                                 cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
            running = {r["name"]: r["reason"] for r in json.loads(out) if r["state"] == "Running"}
            assert running == want, running
    finally:
        with contextlib.suppress(Exception):
            kube.delete(f"{MW_PATH}/{window}")
        with contextlib.suppress(Exception):
            kube.delete_namespace(bobs)


def _epoch(ts: str) -> float:
    from webhook.reconciler.model import parse_time

    t = parse_time(ts)
    assert t is not None
    return t
