"""The reconciler against a real API server: deadlines, restarts, gangs, PodGroups, leadership.

Each test runs ``batchgate reconcile`` as a separate process (the real thing:
CLI, client, watch, lease), scoped with ``--namespace`` to the test's own
namespace, and plays the kubelet through the status subresource. Every process
started here is killed by pid at the end of its test.

Waiting is done by polling the API for the state we expect (``kube.wait_for``);
where a test must prove that something did *not* happen, it waits for a
*barrier*: a probe pod whose deadline annotation shows that the reconciler has
planned on everything that came before it.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from cluster import free_port, now_rfc3339, require_components
from harness import DEADLINE, STARTED, epoch, events, gone_or_deleting

# The reconciler is under test here, not the webhook: should an earlier module of the
# session have registered the webhook, it leaves these namespaces alone (the reconciler
# does not: it excludes namespaces by the bundle's names only).
pytestmark = pytest.mark.namespace_labels({"batchgate.io/admission": "disabled"})

REPO = Path(__file__).resolve().parents[2]
PAUSE = "registry.k8s.io/pause:3.2"
TL = "batchgate.io/time-limit"
WARNED = "batchgate.io/warned-for"
GROUP = "batchgate.io/pod-group"
SIZE = "batchgate.io/pod-group-size"
COSCHED = "scheduling.x-k8s.io/pod-group"


# The reconciler processes (the ``reconciler`` fixture) and a big fake node (``node``) are in
# conftest.py: other modules start reconcilers the same way.


def pod_body(name: str, *, node: str | None = None, annotations: dict[str, str] | None = None,
             labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as the webhook admits it: with a limit, also the admission record (queue and limit
    in the env, webhook.workloads), so the reconciler sees what it sees in production."""
    main: dict[str, Any] = {"name": "main", "image": PAUSE}
    if (annotations or {}).get(TL):
        main["env"] = [{"name": "BATCHGATE_QUEUE", "value": (labels or {}).get("batchgate.io/queue", "batch")},
                       {"name": "BATCHGATE_TIME_LIMIT", "value": (annotations or {})[TL]}]
    spec: dict[str, Any] = {"containers": [main], "restartPolicy": "Never", "terminationGracePeriodSeconds": 5}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}}, "spec": spec}


def make_running_pod(kube: Any, ns: str, name: str, *, node: str, limit: str | None = None,
                     labels: dict[str, str] | None = None, started_offset: float = 0) -> dict[str, Any]:
    created = kube.create(f"/api/v1/namespaces/{ns}/pods",
                          pod_body(name, node=node, annotations={TL: limit} if limit else None, labels=labels))
    kube.set_pod_phase(ns, name, "Running", {"main": {"running": {"startedAt": now_rfc3339(started_offset)}}})
    return created  # type: ignore[no-any-return]


def pod_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}"


def reasons(kube: Any, ns: str, uid: str) -> list[str]:
    return sorted(e["reason"] for e in events(kube, ns, uid=uid))


def annotations(kube: Any, path: str) -> dict[str, str]:
    return kube.get(path)["metadata"].get("annotations") or {}  # type: ignore[no-any-return]


def barrier(kube: Any, ns: str, node: str, timeout: float = 30) -> None:
    """A probe pod with a time limit; once its deadline is recorded, the reconciler has
    planned on every change made before it."""
    name = f"probe-{uuid.uuid4().hex[:6]}"
    make_running_pod(kube, ns, name, node=node, limit="1h")
    kube.wait_for(lambda: DEADLINE in annotations(kube, pod_path(ns, name)), timeout,
                  message=f"the reconciler to record the probe {name}")


def wait_until(t: float) -> None:
    """Let wall-clock time pass until ``t`` (for "it did not happen before the deadline" checks)."""
    while time.time() < t:
        time.sleep(min(0.2, max(t - time.time(), 0)))


# -- deadlines ----------------------------------------------------------------
def test_deadline_warns_then_stops_the_pod_once(kube, namespace, node, reconciler):
    r = reconciler().wait_ready()  # before the 10s start running
    created = make_running_pod(kube, namespace, "sim", node=node, limit="10s")
    uid, path = created["metadata"]["uid"], pod_path(namespace, "sim")

    ann = kube.wait_for(lambda: (a := annotations(kube, path)).get(DEADLINE) and a, 30,
                        message=f"deadline annotation; reconciler log:\n{r.logs()}")
    assert epoch(ann[DEADLINE]) - epoch(ann[STARTED]) == 10
    deadline = epoch(ann[DEADLINE])

    kube.wait_for(lambda: annotations(kube, path).get(WARNED) == ann[DEADLINE], 30, message="warning recorded")
    kube.wait_for(gone_or_deleting(kube, path, uid), 40, message=f"pod stopped; log:\n{r.logs()}")
    stop_seen = time.time()
    assert stop_seen >= deadline

    kube.wait_for(lambda: "TimeLimitExceeded" in reasons(kube, namespace, uid), 10, message="the stop Event")
    assert reasons(kube, namespace, uid) == ["DeadlineSet", "TimeLimitApproaching", "TimeLimitExceeded"]
    (warning,) = events(kube, namespace, uid=uid, reason="TimeLimitApproaching")
    (exceeded,) = events(kube, namespace, uid=uid, reason="TimeLimitExceeded")
    assert warning["type"] == exceeded["type"] == "Warning"
    assert epoch(warning["firstTimestamp"]) <= deadline <= epoch(exceeded["firstTimestamp"]) + 1
    assert "time limit 10s ran out" in exceeded["message"]
    assert r.alive()


def test_job_deadline_deletes_the_job_and_its_pods(kube, namespace, node, reconciler):
    require_components(kube, "kube-controller-manager", "kube-scheduler")
    # Up before the 8s start running: one that starts later stops the Job at once, never recording it.
    reconciler().wait_ready()
    job = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "annotations": {TL: "8s"}},
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                 "template": {"metadata": {"annotations": {TL: "8s"}},
                              "spec": {"containers": [{"name": "main", "image": PAUSE}],
                                       "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node}}}},
    })
    uid = job["metadata"]["uid"]
    pods = kube.wait_for_pods(namespace, label_selector=f"controller-uid={uid}", count=2,
                              predicate=lambda p: p["spec"].get("nodeName") == node, timeout=60)
    for p in pods:
        kube.set_pod_phase(namespace, p["metadata"]["name"], "Running",
                           {"main": {"running": {"startedAt": now_rfc3339()}}})
    jpath = f"/apis/batch/v1/namespaces/{namespace}/jobs/train"
    ann = kube.wait_for(lambda: (a := annotations(kube, jpath)).get(DEADLINE) and a, 30, message="Job deadline")
    assert epoch(ann[DEADLINE]) - epoch(ann[STARTED]) == 8
    kube.wait_for(gone_or_deleting(kube, jpath, uid), 40, message="Job deleted")
    for p in pods:
        kube.wait_for(gone_or_deleting(kube, pod_path(namespace, p["metadata"]["name"]), p["metadata"]["uid"]),
                      60, message="pods deleted with the Job (background propagation)")
    assert [e["reason"] for e in events(kube, namespace, uid=uid, reason="TimeLimitExceeded")] == ["TimeLimitExceeded"]


def test_extension_moves_the_deadline_and_is_recorded(kube, namespace, node, reconciler):
    reconciler().wait_ready()  # before the 12s start running
    created = make_running_pod(kube, namespace, "long", node=node, limit="12s")
    uid, path = created["metadata"]["uid"], pod_path(namespace, "long")
    first = kube.wait_for(lambda: annotations(kube, path).get(DEADLINE), 30, message="deadline")
    kube.patch(path, {"metadata": {"annotations": {TL: "1h"}}})
    new = kube.wait_for(lambda: (d := annotations(kube, path).get(DEADLINE)) != first and d, 30,
                        message="new deadline")
    assert epoch(new) - epoch(first) == 3600 - 12
    (ev,) = events(kube, namespace, uid=uid, reason="TimeLimitExtended")
    assert first in ev["message"] and new in ev["message"]
    wait_until(epoch(first) + 3)  # past the old deadline ...
    barrier(kube, namespace, node)  # ... and the reconciler has looked since
    assert not kube.get(path)["metadata"].get("deletionTimestamp")
    assert "TimeLimitExceeded" not in reasons(kube, namespace, uid)


def test_unrecorded_pod_gets_a_warning_with_its_deadline(kube, namespace, node, reconciler):
    """A Pod without the admission record (admitted before batchgate recorded admissions): its
    annotation still counts, and its first deadline comes as a Warning that says so."""
    reconciler().wait_ready()
    body = pod_body("old", node=node, annotations={TL: "1h"})
    del body["spec"]["containers"][0]["env"]
    created = kube.create(f"/api/v1/namespaces/{namespace}/pods", body)
    kube.set_pod_phase(namespace, "old", "Running", {"main": {"running": {"startedAt": now_rfc3339()}}})
    path = pod_path(namespace, "old")
    ann = kube.wait_for(lambda: (a := annotations(kube, path)).get(DEADLINE) and a, 30, message="deadline")
    assert epoch(ann[DEADLINE]) - epoch(ann[STARTED]) == 3600
    (ev,) = events(kube, namespace, uid=created["metadata"]["uid"], reason="AdmissionUnrecorded")
    assert ev["type"] == "Warning" and "no admission record" in ev["message"]


# -- restarts -------------------------------------------------------------------
def test_deadline_that_passed_while_down_is_enforced_on_start(kube, namespace, node, reconciler):
    r = reconciler("r1", args=("--warning-lead", "1m")).wait_ready()  # before the 8s start running
    created = make_running_pod(kube, namespace, "sim", node=node, limit="8s")
    uid, path = created["metadata"]["uid"], pod_path(namespace, "sim")
    ann = kube.wait_for(lambda: (a := annotations(kube, path)).get(WARNED) and a, 30, message="deadline and warning")
    assert r.kill() == -signal.SIGKILL  # killed without a chance to release the lease
    wait_until(epoch(ann[DEADLINE]) + 2)
    assert not kube.get(path)["metadata"].get("deletionTimestamp")  # nobody was there to act
    reconciler("r1").wait_ready()  # same identity: it may renew its own lease at once
    kube.wait_for(gone_or_deleting(kube, path, uid), 30, message="stopped after the restart")
    kube.wait_for(lambda: "TimeLimitExceeded" in reasons(kube, namespace, uid), 10, message="stop Event")
    assert reasons(kube, namespace, uid) == ["DeadlineSet", "TimeLimitApproaching", "TimeLimitExceeded"]


def test_killed_after_every_single_write_nothing_missed_nothing_repeated(kube, namespace, node, reconciler):
    """Each process dies right after its first successful write; the next one carries on.
    Six writes make the whole story (Event + annotation for the deadline, Event +
    annotation for the warning, Event + deletion for the stop), so six crashes.
    All use one identity, so each may renew the lease its dead predecessor held."""
    # 90s: the three processes up to the warning's Event (due 30s in, with a 1m lead) start one
    # after another, each in several seconds on a busy machine (8 s each seen at load 15), and
    # must all be done before the deadline, or the stop overtakes the warning.
    created = make_running_pod(kube, namespace, "sim", node=node, limit="90s")
    uid, path = created["metadata"]["uid"], pod_path(namespace, "sim")
    stopped = gone_or_deleting(kube, path, uid)
    crashes = 0
    for _ in range(12):
        r = reconciler("r1", env={"BATCHGATE_RECONCILER_CRASH_AFTER_WRITES": "1"}, args=("--warning-lead", "1m"))
        # the one that makes the stop waits for the deadline, up to 90s after the pod started
        kube.wait_for(lambda r=r: not r.alive() or stopped(), 150, message="a crash or the stop")
        if stopped() and r.alive():
            # The stop is the last write, and the API server shows it before the process
            # that made it has finished dying: give it the moment, then count it.
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.proc.wait(timeout=15)
        if r.alive():
            break
        assert r.proc.returncode == 137, r.logs()
        crashes += 1
        if stopped():
            break
    assert stopped()
    assert crashes == 6
    assert reasons(kube, namespace, uid) == ["DeadlineSet", "TimeLimitApproaching", "TimeLimitExceeded"]


# -- gangs ----------------------------------------------------------------------
def gang_job(kube: Any, ns: str, node: str, name: str, size: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    labels = {GROUP: name, SIZE: str(size), COSCHED: name}
    job = kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        # backoffLimit > 0: with 0, the Job controller itself would fail the Job at the
        # first failed pod and delete the rest, leaving nothing for the reconciler to do.
        "spec": {"parallelism": size, "completions": size, "backoffLimit": 6,
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "main", "image": PAUSE}], "restartPolicy": "Never",
                                       "nodeSelector": {"kubernetes.io/hostname": node}}}},
    })
    uid = job["metadata"]["uid"]
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={uid}", count=size,
                              predicate=lambda p: p["spec"].get("nodeName") == node, timeout=60)
    for p in pods:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
    return job, sorted(pods, key=lambda p: p["metadata"]["name"])


def test_oomkilled_member_restarts_the_gang_and_keeps_the_job(kube, namespace, node, reconciler):
    require_components(kube, "kube-controller-manager", "kube-scheduler")
    reconciler().wait_ready()
    job, pods = gang_job(kube, namespace, node, "mpi", 3)
    barrier(kube, namespace, node)
    jpath = f"/apis/batch/v1/namespaces/{namespace}/jobs/mpi"
    assert not kube.get(jpath)["metadata"].get("deletionTimestamp")  # all running: nothing happens
    victim = pods[1]
    kube.set_pod_phase(namespace, victim["metadata"]["name"], "Failed", {"main": "OOMKilled"})
    for p in (pods[0], pods[2]):
        kube.wait_for(gone_or_deleting(kube, pod_path(namespace, p["metadata"]["name"]), p["metadata"]["uid"]),
                      30, message="the other members deleted")
    vpath = pod_path(namespace, victim["metadata"]["name"])
    kube.wait_for(lambda: annotations(kube, vpath).get("batchgate.io/gang-restart") == victim["metadata"]["uid"],
                  30, message="the failed member marked as dealt with (and kept)")
    assert not kube.get(vpath)["metadata"].get("deletionTimestamp")
    assert not kube.get(jpath)["metadata"].get("deletionTimestamp")  # within backoffLimit 6: the Job stays
    (ev,) = events(kube, namespace, uid=job["metadata"]["uid"], reason="GangRestarted")
    assert victim["metadata"]["name"] in ev["message"] and "OOMKilled" in ev["message"]
    assert ev["involvedObject"]["kind"] == "Job" and "restart 1" in ev["message"]
    assert events(kube, namespace, uid=job["metadata"]["uid"], reason="GangFailed") == []


def test_bare_pod_group_exit_code_and_success_told_apart(kube, namespace, node, reconciler):
    reconciler().wait_ready()
    labels = {GROUP: "ranks", SIZE: "3"}
    pods = [make_running_pod(kube, namespace, f"rank-{i}", node=node, labels=labels) for i in range(3)]
    kube.set_pod_phase(namespace, "rank-0", "Succeeded", {"main": 0})  # done early: no failure
    barrier(kube, namespace, node)
    assert all(not kube.get(pod_path(namespace, f"rank-{i}"))["metadata"].get("deletionTimestamp") for i in range(3))
    kube.set_pod_phase(namespace, "rank-2", "Failed", {"main": 3})
    for p in pods:
        kube.wait_for(gone_or_deleting(kube, pod_path(namespace, p["metadata"]["name"]), p["metadata"]["uid"]),
                      30, message="the whole bare group deleted")
    msgs = [e["message"] for e in events(kube, namespace, reason="GangFailed")]
    assert len(msgs) == 3 and all("rank-2" in m and "exited with code 3" in m for m in msgs)


def test_evicted_member_restarts_the_gang_and_keeps_the_job(kube, namespace, node, reconciler):
    require_components(kube, "kube-controller-manager", "kube-scheduler")
    reconciler().wait_ready()
    job, pods = gang_job(kube, namespace, node, "mpi", 2)
    kube.set_pod_phase(namespace, pods[0]["metadata"]["name"], "Failed", reason="Evicted",
                       message="The node was low on resource: memory.")
    for p in pods:
        kube.wait_for(gone_or_deleting(kube, pod_path(namespace, p["metadata"]["name"]), p["metadata"]["uid"]),
                      30, message="group members deleted")
    (ev,) = events(kube, namespace, uid=job["metadata"]["uid"], reason="GangInterrupted")
    assert "Evicted" in ev["message"]
    jpath = f"/apis/batch/v1/namespaces/{namespace}/jobs/mpi"
    assert not kube.get(jpath)["metadata"].get("deletionTimestamp")
    assert events(kube, namespace, uid=job["metadata"]["uid"], reason="GangFailed") == []


# -- PodGroups --------------------------------------------------------------------
PODGROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io", "scope": "Namespaced",
        "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "shortNames": ["pg"]},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "minMember": {"type": "integer", "format": "int32"},
                    "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"},
                    "minResources": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": True}},
                }},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}


@pytest.fixture(scope="session")
def podgroup_crd(kube: Any) -> str:
    """The coscheduling PodGroup CRD, installed once (left in place: other tests' reconcilers
    are scoped to their own namespaces)."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.x-k8s.io"
    if not kube.exists(path):
        kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", PODGROUP_CRD)

    def established() -> bool:
        conds = kube.get(path).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    kube.wait_for(established, 30, message="PodGroup CRD established")
    kube.wait_for(lambda: kube.exists("/apis/scheduling.x-k8s.io/v1alpha1/podgroups"), 30, message="PodGroup API")
    return "/apis/scheduling.x-k8s.io/v1alpha1"


def test_pod_group_lives_as_long_as_its_workload(kube, namespace, node, reconciler, podgroup_crd):
    require_components(kube, "kube-controller-manager", "kube-scheduler")
    reconciler().wait_ready()
    pgs = f"{podgroup_crd}/namespaces/{namespace}/podgroups"
    # A Job's group: created with the right minMember, owned by the Job; a wrong minMember is put right.
    job, _ = gang_job(kube, namespace, node, "mpi", 3)
    pg = kube.wait_for(lambda: kube.get(f"{pgs}/mpi"), 30, message="PodGroup for the Job")
    assert pg["spec"]["minMember"] == 3
    assert [(o["kind"], o["uid"]) for o in pg["metadata"]["ownerReferences"]] == [("Job", job["metadata"]["uid"])]
    kube.patch(f"{pgs}/mpi", {"spec": {"minMember": 1}})
    kube.wait_for(lambda: kube.get(f"{pgs}/mpi")["spec"]["minMember"] == 3, 30, message="minMember restored")

    # A bare group: kept while any member exists, removed after the last.
    labels = {GROUP: "ranks", SIZE: "2", COSCHED: "ranks"}
    for i in range(2):
        make_running_pod(kube, namespace, f"rank-{i}", node=node, labels=labels)
    kube.wait_for(lambda: kube.get(f"{pgs}/ranks")["spec"]["minMember"] == 2, 30, message="bare PodGroup")
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    kube.delete(pod_path(namespace, "rank-0"), body=now)
    barrier(kube, namespace, node)
    assert kube.exists(f"{pgs}/ranks")
    kube.delete(pod_path(namespace, "rank-1"), body=now)
    kube.wait_for(lambda: not kube.exists(f"{pgs}/ranks"), 30, message="bare PodGroup removed after its pods")
    assert events(kube, namespace, reason="PodGroupDeleted")

    # The Job's group goes when the Job goes.
    kube.delete(f"/apis/batch/v1/namespaces/{namespace}/jobs/mpi", body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
    kube.wait_for(lambda: not kube.exists(f"{pgs}/mpi"), 60, message="Job PodGroup removed after the Job")


# -- leadership and idempotence ---------------------------------------------------
def lease_holder(kube: Any, ns: str) -> str:
    try:
        return kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/batchgate-reconciler")["spec"].get(
            "holderIdentity") or ""
    except Exception as e:
        if getattr(e, "status", None) == 404:
            return ""
        raise


def test_two_replicas_one_leader_takeover_and_release(kube, namespace, node, reconciler):
    a = reconciler("replica-a").wait_ready()
    kube.wait_for(lambda: lease_holder(kube, namespace) == "replica-a", 30, message="replica-a leads")
    b = reconciler("replica-b")
    created = make_running_pod(kube, namespace, "one", node=node, limit="1h")
    path = pod_path(namespace, "one")
    kube.wait_for(lambda: DEADLINE in annotations(kube, path), 30, message="recorded by the leader")
    (ev,) = events(kube, namespace, uid=created["metadata"]["uid"], reason="DeadlineSet")
    assert ev["reportingInstance"] == "replica-a"

    a.kill(signal.SIGKILL)  # no release: b must wait for the lease to expire
    killed = time.monotonic()
    kube.wait_for(lambda: lease_holder(kube, namespace) == "replica-b", 40, message="replica-b takes over")
    assert time.monotonic() - killed >= 10  # not before the lease could have expired
    created2 = make_running_pod(kube, namespace, "two", node=node, limit="1h")
    kube.wait_for(lambda: DEADLINE in annotations(kube, pod_path(namespace, "two")), 30, message="b acts")
    (ev2,) = events(kube, namespace, uid=created2["metadata"]["uid"], reason="DeadlineSet")
    assert ev2["reportingInstance"] == "replica-b"

    assert b.kill(signal.SIGTERM) == 0  # a clean exit releases the lease
    assert lease_holder(kube, namespace) == ""


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def test_steady_cluster_zero_writes_per_resync(kube, namespace, node, reconciler):
    port = free_port()
    reconciler(args=("--resync", "1s", "--metrics-port", str(port))).wait_ready()
    for i in range(3):
        make_running_pod(kube, namespace, f"p{i}", node=node, limit="1h", labels={GROUP: "g", SIZE: "3"})
    for i in range(3):
        kube.wait_for(lambda i=i: DEADLINE in annotations(kube, pod_path(namespace, f"p{i}")), 30, message="recorded")
    kube.wait_for(lambda: metric(port, "batchgate_reconciler_actions_total") >= 3, 10, message="actions counted")
    # The pass that recorded the deadlines may still be writing the rest of its plan (the group's
    # PodGroup, when the CRD is installed). Passes run one after another and are counted as they
    # start: once a resync pass starts after this point, every earlier pass has made its writes.
    resyncs = metric(port, 'batchgate_reconciler_passes_total{trigger="resync"}')
    kube.wait_for(lambda: metric(port, 'batchgate_reconciler_passes_total{trigger="resync"}') > resyncs, 20,
                  message="a resync pass after the writes")
    writes = metric(port, "batchgate_reconciler_api_writes_total")
    resyncs = metric(port, 'batchgate_reconciler_passes_total{trigger="resync"}')
    kube.wait_for(lambda: metric(port, 'batchgate_reconciler_passes_total{trigger="resync"}') >= resyncs + 3, 20,
                  message="three more resyncs")
    assert metric(port, "batchgate_reconciler_api_writes_total") == writes


def test_once_and_dry_run(kube, namespace, node):
    created = make_running_pod(kube, namespace, "p", node=node, limit="2h")
    path = pod_path(namespace, "p")
    base = [sys.executable, "-m", "webhook", "reconcile", "--kubeconfig", kube.kubeconfig("admin"),
            "--namespace", namespace, "--lease-namespace", namespace, "--once"]
    dry = subprocess.run([*base, "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    (line,) = dry.stdout.splitlines()
    assert line.startswith("record-deadline") and f"Pod {namespace}/p" in line and "DeadlineSet" in line
    assert DEADLINE not in annotations(kube, path)
    assert events(kube, namespace, uid=created["metadata"]["uid"]) == []
    assert lease_holder(kube, namespace) == ""  # a dry run never takes the lease

    once = subprocess.run(base, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert once.returncode == 0, once.stderr
    assert DEADLINE in annotations(kube, path)
    assert reasons(kube, namespace, created["metadata"]["uid"]) == ["DeadlineSet"]
    assert lease_holder(kube, namespace) == ""  # taken for the pass, released after

    again = subprocess.run([*base, "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.stdout.strip() == "nothing to do"
