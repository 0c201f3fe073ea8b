"""ScavengerJobs on a real control plane: kube-apiserver, the stock kube-scheduler and
kube-controller-manager 1.20 (Job controller, garbage collector), fake Nodes, and the
webhook admitting everything. ``batchgate reconcile`` runs as a separate process with a
copy of the bundle whose scavenger queue may use only this test's nodes. The test plays
the kubelet: it writes pod status and finishes terminating pods.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import KubeApiError, free_port, require_components
from harness import (
    Reconciler,
    container,
    cpu_to,
    grant_resize,
    pod,
    pods_path,
    start_reconciler,
    stop_reconcilers,
    stored_cpu,
    unique,
)

REPO = Path(__file__).resolve().parents[2]
API = "/apis/batchgate.io/v1alpha1"
POOL = "batchgate.io/e2e-scavenger-pool"


def sj_path(ns: str, name: str = "") -> str:
    return f"{API}/namespaces/{ns}/scavengerjobs" + (f"/{name}" if name else "")


def jobs_path(ns: str, name: str = "") -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


@pytest.fixture
def pool(kube: Any) -> Iterator[tuple[str, Callable[..., str]]]:
    """This test's nodes: labelled with a pool name that only its bundle's scavenger queue selects."""
    name = unique("pool")
    made: list[str] = []

    def make(cpu: str = "4", memory: str = "8Gi") -> str:
        n = unique("sj-node")
        kube.create_node(n, cpu=cpu, memory=memory, labels={POOL: name})
        made.append(n)
        return n

    yield name, make
    for n in made:
        with contextlib.suppress(Exception):
            kube.delete_node(n)


@pytest.fixture
def reconciler(kube: Any, namespace: str, tmp_path: Path, pool: tuple[str, Any]) -> Iterator[Callable[..., Reconciler]]:
    policies = tmp_path / "policies"
    shutil.copytree(REPO / "policies", policies)
    bundle = yaml.safe_load((policies / "bundle.yaml").read_text())
    for q in bundle["spec"]["queues"]:
        if q["name"] == "scavenger":
            q["nodeSelector"] = {POOL: pool[0]}
    bundle["spec"]["scavengers"].update({"unschedulableTimeout": "20s", "gracePeriod": "5s"})
    (policies / "bundle.yaml").write_text(yaml.safe_dump(bundle))
    started: list[Reconciler] = []

    def start(*, env: dict[str, str] | None = None, args: tuple[str, ...] = (), identity: str = "r1",
              guard: float | None = None) -> Reconciler:
        if guard is not None:
            bundle["spec"]["scavengers"]["guardCoreMinutes"] = guard
            (policies / "bundle.yaml").write_text(yaml.safe_dump(bundle))
        log = tmp_path / f"reconciler-{identity}-{len(started)}.log"
        started.append(start_reconciler(kube, namespace, log, "--policies", str(policies), "--resync", "20s", *args,
                                        env=env, identity=identity))
        return started[-1]

    yield start
    stop_reconcilers(started)


def scavengerjob(name: str, *, pods: int = 1, cpu: str = "1", duration: str = "1h",
                 volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "registry.k8s.io/pause:3.2", "command": ["/pause"], "runAsUser": 1000,
                            "resources": {"limits": {"cpu": cpu, "memory": "1Gi"}}, "pods": pods,
                            "duration": duration}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "metadata": {"name": name}, "spec": spec}


def status(kube: Any, ns: str, name: str) -> dict[str, Any]:
    return kube.get(sj_path(ns, name)).get("status") or {}  # type: ignore[no-any-return]


def wait_status(kube: Any, ns: str, name: str, pred: Callable[[dict[str, Any]], Any], what: str,
                timeout: float = 60, r: Reconciler | None = None, kubelet: bool = False) -> dict[str, Any]:
    """Until ``pred`` holds for the status; with ``kubelet``, playing the kubelet meanwhile (pods being
    deleted are finished), as a wait that needs a segment's pods gone must."""
    def check() -> dict[str, Any] | None:
        if kubelet:
            finish_terminating(kube, ns)
        st = status(kube, ns, name)
        return st if pred(st) else None

    return kube.wait_for(check, timeout,  # type: ignore[no-any-return]
                         message=f"{name}: {what}; status {status(kube, ns, name)}" + (f"\n{r.logs()}" if r else ""))


def seg_pods(kube: Any, ns: str, job: str) -> list[dict[str, Any]]:
    return kube.get(pods_path(ns), labelSelector=f"job-name={job}")["items"]  # type: ignore[no-any-return]


def run_segment(kube: Any, ns: str, job: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    """The Job controller makes the pods, kube-scheduler binds them; the kubelet (we) runs them, and
    meanwhile finishes pods being deleted: those of an earlier segment may still be going (see
    finish_terminating)."""
    def bound() -> list[dict[str, Any]] | None:
        finish_terminating(kube, ns)
        got = [p for p in seg_pods(kube, ns, job)
               if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
        return got if len(got) >= count else None

    pods: list[dict[str, Any]] = kube.wait_for(bound, timeout, message=f"{count} bound pod(s) of Job {job}")
    for p in pods:
        if (p.get("status") or {}).get("phase") != "Running":
            kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
    return pods


def finish_terminating(kube: Any, ns: str) -> int:
    """The kubelet: a pod being deleted is finished once its containers stopped. As a kubelet does
    since Kubernetes 1.27, its phase becomes terminal first (SIGTERM: exit 143, Failed), and only
    then is it deleted for good (grace period 0). A pod the Job controller made keeps its
    batch.kubernetes.io/job-tracking finalizer until that controller has counted it: it stays, in
    its terminal phase, while kube-controller-manager is away. It holds no room any more: kube-scheduler
    watches only pods that are not Succeeded or Failed, and the reconciler counts them the same way.
    Once is not always enough: when a pod is deleted from outside, the Job controller may make a
    replacement before the segment's Job is deleted (or on a cache that has not seen the deletion
    yet); the garbage collector deletes that pod later, and only a kubelet finishing it lets the next
    segment start. Returns how many pods it finished now."""
    n = 0
    for p in kube.get(pods_path(ns))["items"]:
        md, terminal = p["metadata"], (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if not md.get("deletionTimestamp") or (terminal and md.get("deletionGracePeriodSeconds") == 0):
            continue  # not being deleted, or finished (and kept by a finalizer)
        try:
            if not terminal:
                kube.set_pod_phase(ns, md["name"], "Failed", {c["name"]: 143 for c in p["spec"]["containers"]})
            kube.delete(pods_path(ns, md["name"]),
                        body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
        except KubeApiError as e:
            if e.status != 404:
                raise
            continue  # gone meanwhile
        n += 1
    return n


def events(kube: Any, ns: str, uid: str, reason: str | None = None) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e["involvedObject"].get("uid") == uid and (reason is None or e["reason"] == reason)]


# -- 1. lifecycle -----------------------------------------------------------------------
def test_lifecycle_queued_started_running_completed(kube, webhook_server, namespace, pool, reconciler):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler()
    sj = kube.create(sj_path(ns), scavengerjob("md", pods=2))
    st = wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    assert st["segment"] == 1 and st["interruptedCount"] == 0 and st["creationTimestamp"]
    # the status is written before the Job is created (so a crash in between is finished from it)
    job = kube.wait_for(lambda: kube.exists(jobs_path(ns, "md-1")) and kube.get(jobs_path(ns, "md-1")), 30,
                        message="Job md-1")
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ScavengerJob", sj["metadata"]["uid"], True)
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    pods = run_segment(kube, ns, "md-1", 2)
    for p in pods:  # Guaranteed, the scavenger class (never preempts), the gang's labels
        assert p["status"]["qosClass"] == "Guaranteed"
        assert p["spec"]["priorityClassName"] == "batchgate-scavenger" and p["spec"]["priority"] < 0
        assert p["spec"]["preemptionPolicy"] == "Never"
        assert p["metadata"]["labels"]["batchgate.io/pod-group-size"] == "2"
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    assert len(st["runningTimestamps"]) == 1 and st["priorityStartOverTimestamp"] and st["runningSegment"] == 1
    assert {c["type"]: c["status"] for c in st["conditions"]} == {"Running": "True", "Finished": "False"}
    assert st["observedGeneration"] == 1
    for p in pods:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Succeeded", {"main": 0})
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Completed", "Completed", r=r)
    assert st["finishedTimestamp"] and "completed" in st["message"]
    reasons = [e["reason"] for e in events(kube, ns, sj["metadata"]["uid"])]
    assert sorted(reasons) == ["Completed", "Queued", "Started", "Starting"], reasons
    # kubectl get sj: the printer columns tell the story
    table = kube.request("GET", sj_path(ns), accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    cols = [c["name"] for c in table["columnDefinitions"]]
    assert cols[:8] == ["Name", "Phase", "Pods", "Interrupted", "Segment", "Duration", "Start-Over", "Age"]
    row = dict(zip(cols, table["rows"][0]["cells"], strict=False))
    assert (row["Phase"], row["Pods"], row["Interrupted"], row["Segment"]) == ("Completed", 2, 0, 1)


def test_a_running_scavenger_pod_cannot_be_resized_bigger_by_its_user_smaller_it_may(
        kube, webhook_server, namespace, pool, reconciler):
    """A scavenger started when all its pods fit within the scavengers' share, by the resources it
    asked for; pods/resize (in-place resize, granted to alice here by a Role; Kubernetes keeps the pod
    Guaranteed, so requests and limits rise together) would let her take more idle capacity than the
    scavenger policy allowed. Raising is refused by queue-gate, saying why; the stored resources are
    unchanged. Lowering is allowed, and is no interruption: the ScavengerJob runs on."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    grant_resize(kube, ns)
    r = reconciler()
    kube.create(sj_path(ns), scavengerjob("md", cpu="1"), as_user="alice")
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    (p,) = run_segment(kube, ns, "md-1", 1)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    name = p["metadata"]["name"]
    # the kubelet (we) reports the resources it applied, as one that resizes in place (1.33+) does:
    # the API server refuses a resize of a running pod whose container statuses lack them
    running = kube.get(pods_path(ns, name))
    sized = {c["name"]: c["resources"] for c in running["spec"]["containers"]}
    statuses = [{**c, "resources": sized[c["name"]]} for c in running["status"]["containerStatuses"]]
    kube.patch(pods_path(ns, name) + "/status", {"status": {"containerStatuses": statuses}})
    resize = pods_path(ns, name) + "/resize"
    strategic = "application/strategic-merge-patch+json"
    with pytest.raises(KubeApiError) as e:
        kube.request("PATCH", resize, cpu_to("4"), content_type=strategic, as_user="alice")
    msg = str(e.value)
    assert (f"Pod {ns}/{name} is a scavenger, in queue 'scavenger': it runs on idle capacity, started when it "
            "fit within the scavengers' share" in msg
            and "the cpu request of container 'main' from 1 to 4" in msg
            and "the cpu limit of container 'main' from 1 to 4 in place (pods/resize) would take more than the "
                "scavenger policy allowed (lowering is allowed)" in msg), msg
    assert stored_cpu(kube, ns, name) == ("1", "1")
    kube.request("PATCH", resize, cpu_to("500m"), content_type=strategic, as_user="alice")
    assert stored_cpu(kube, ns, name) == ("500m", "500m")
    assert kube.get(pods_path(ns, name))["status"]["qosClass"] == "Guaranteed"
    st = status(kube, ns, "md")
    assert st["phase"] == "Running" and st["interruptedCount"] == 0, st
    # nor can an ephemeral container (kubectl debug) bring resources of its own: Kubernetes refuses
    # them, and it runs within the pod's limits (its cgroup)
    debug = {"spec": {"ephemeralContainers": [{"name": "debug", "image": "registry.k8s.io/pause:3.2",
                                               "resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}}]}}
    with pytest.raises(KubeApiError) as e:
        kube.request("PATCH", pods_path(ns, name) + "/ephemeralcontainers", debug, content_type=strategic)
    assert e.value.status == 422 and "resources" in str(e.value), e.value
    assert not kube.get(pods_path(ns, name))["spec"].get("ephemeralContainers")


def test_a_running_scavengerjob_cannot_be_edited_bigger_by_its_user_smaller_it_may(
        kube, webhook_server, namespace, pool, reconciler):
    """A ScavengerJob started when all its pods fit within the scavengers' share, by its spec; at each
    segment boundary the reconciler starts the next segment's Job from the spec without that check
    (only a start from waiting has it). So while it runs (status.jobName), alice's edit that raises
    spec.pods or spec.resources is refused by the scavengerjob policy, naming each raise and what to
    do; nothing is stored. Lowering is stored, and is no interruption: it runs on."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler()
    kube.create(sj_path(ns), scavengerjob("md", cpu="1"), as_user="alice")
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    run_segment(kube, ns, "md-1", 1)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    merge = "application/merge-patch+json"
    bigger = {"spec": {"pods": 2, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}}
    with pytest.raises(KubeApiError) as e:
        kube.request("PATCH", sj_path(ns, "md"), bigger, content_type=merge, as_user="alice")
    msg = str(e.value)
    assert e.value.status in (400, 403), e.value
    assert (f"ScavengerJob {ns}/md is running (Job md-1)" in msg
            and "raising spec.pods from 1 to 2, the cpu request of spec.resources from 1 to 2, the cpu limit of "
                "spec.resources from 1 to 2 while it runs would take more than the scavenger policy allowed" in msg
            and "delete it and submit it again with the new size (it waits until that fits)" in msg), msg
    spec = kube.get(sj_path(ns, "md"))["spec"]
    assert (spec["pods"], spec["resources"]["limits"]["cpu"]) == (1, "1"), spec
    smaller = {"spec": {"resources": {"limits": {"cpu": "500m", "memory": "512Mi"}}}}
    kube.request("PATCH", sj_path(ns, "md"), smaller, content_type=merge, as_user="alice")
    spec = kube.get(sj_path(ns, "md"))["spec"]
    assert (spec["pods"], spec["resources"]["limits"]) == (1, {"cpu": "500m", "memory": "512Mi"}), spec
    st = status(kube, ns, "md")
    assert st["phase"] == "Running" and st["jobName"] == "md-1" and st["interruptedCount"] == 0, st



def test_lowering_spec_pods_of_a_running_scavengerjob_releases_the_extra_pods_and_it_runs_on(
        kube, webhook_server, namespace, pool, reconciler):
    """As Slurm releases the extra nodes of a shrunk job and the job keeps running: alice lowers spec.pods
    of a running 3-pod ScavengerJob to 1. The segment ends now as at a boundary (its pods get SIGTERM
    to checkpoint; no interruption), and the next segment's Job runs 1 pod from the checkpoint, started
    at once without waiting its turn. Read back: the status, the Jobs, the pods, the Event."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler()
    sj = kube.create(sj_path(ns), scavengerjob("md", pods=3, cpu="1"), as_user="alice")
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    run_segment(kube, ns, "md-1", 3)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    kube.request("PATCH", sj_path(ns, "md"), {"spec": {"pods": 1}}, content_type="application/merge-patch+json",
                 as_user="alice")
    st = wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-2", "segment 2 after the shrink", r=r,
                     kubelet=True)
    assert (st["phase"], st["segment"], st["interruptedCount"], st["observedGeneration"]) == ("Running", 2, 0, 2), st
    assert "spec.pods lowered from 3 to 1: segment 1 ends now" in st["message"], st

    def next_job() -> dict[str, Any] | None:
        finish_terminating(kube, ns)  # the kubelet: segment 1's pods checkpoint and go
        return kube.get(jobs_path(ns, "md-2")) if kube.exists(jobs_path(ns, "md-2")) else None

    job = kube.wait_for(next_job, 60, message=lambda: f"Job md-2\n{r.logs()}")
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 1
    assert not kube.exists(jobs_path(ns, "md-1"))
    run_segment(kube, ns, "md-2", 1)
    st = wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 2, "segment 2 running", r=r)
    assert st["phase"] == "Running" and st["interruptedCount"] == 0 and len(st["runningTimestamps"]) == 1, st
    live = [p["metadata"]["name"] for p in kube.get(pods_path(ns))["items"]
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    assert [n for n in live if n.startswith("md-1-")] == [] and len([n for n in live if n.startswith("md-2-")]) == 1
    (ev,) = events(kube, ns, sj["metadata"]["uid"], "Resized")
    assert ev["type"] == "Normal" and "2 of them are released" in ev["message"], ev
    assert not events(kube, ns, sj["metadata"]["uid"], "Interrupted")


# -- 2. failure vs interruption -----------------------------------------------------------
def test_oomkilled_pod_fails_it_for_good(kube, webhook_server, namespace, pool, reconciler):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler()
    kube.create(sj_path(ns), scavengerjob("md", pods=2))
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    pods = run_segment(kube, ns, "md-1", 2)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    victim = pods[0]["metadata"]["name"]
    kube.set_pod_phase(ns, victim, "Failed", {"main": "OOMKilled"})
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Failed", "Failed", r=r)
    assert victim in st["message"] and "OOMKilled" in st["message"] and st["finishedTimestamp"]
    kube.wait_for(lambda: not kube.exists(jobs_path(ns, "md-1")) or
                  kube.get(jobs_path(ns, "md-1"))["metadata"].get("deletionTimestamp"), 30, message="Job deleted")
    time.sleep(3)
    assert status(kube, ns, "md")["phase"] == "Failed" and status(kube, ns, "md")["interruptedCount"] == 0


def test_external_delete_interrupts_all_pods_go_and_it_restarts(kube, webhook_server, namespace, pool, reconciler):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler()
    sj = kube.create(sj_path(ns), scavengerjob("md", pods=2))
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    pods = run_segment(kube, ns, "md-1", 2)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    kube.delete(pods_path(ns, pods[0]["metadata"]["name"]))  # kubectl delete pod: grace period
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Interrupted", "Interrupted", r=r)
    assert st["interruptedCount"] == 1 and len(st["interruptedTimestamps"]) == 1
    assert "deleted while running" in st["message"]
    for p in pods:  # every pod of it goes, at once
        kube.wait_for(lambda p=p: not kube.exists(pods_path(ns, p["metadata"]["name"])) or
                      kube.get(pods_path(ns, p["metadata"]["name"]))["metadata"].get("deletionTimestamp"),
                      30, message="all pods deleted")
    (ev,) = events(kube, ns, sj["metadata"]["uid"], "Interrupted")
    assert ev["type"] == "Warning" and pods[0]["metadata"]["name"] in ev["message"]
    st = wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-2", "restarted", r=r, kubelet=True)
    run_segment(kube, ns, "md-2", 2)
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "running again", r=r)
    assert st["interruptedCount"] == 1 and len(st["runningTimestamps"]) == 2


def test_the_workload_ends_its_segment_with_the_agreed_exit_code(kube, webhook_server, namespace, pool, reconciler):
    """spec.checkpointExitCode: the workload checkpoints, then exits with the agreed code. The
    Job controller (backoffLimit 0) fails the Job and deletes the sibling pod; batchgate takes
    it as a segment boundary, not a failure nor an interruption, and starts the next segment,
    whose pods are then the latest started. It never ends a segment at duration itself."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler()
    body = scavengerjob("md", pods=2, duration="5s")
    body["spec"]["checkpointExitCode"] = 3
    sj = kube.create(sj_path(ns), body)
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    pods = run_segment(kube, ns, "md-1", 2)
    env = pods[0]["spec"]["containers"][0]["env"]
    assert {"name": "BATCHGATE_CHECKPOINT_EXIT_CODE", "value": "3"} in env
    first = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    time.sleep(12)  # past duration: no SIGTERM boundary, the workload decides
    assert status(kube, ns, "md")["segment"] == 1 and not seg_pods(kube, ns, "md-1")[0]["metadata"].get(
        "deletionTimestamp")
    kube.set_pod_phase(ns, pods[0]["metadata"]["name"], "Failed", {"main": 3})  # checkpointed, exit 3
    st = wait_status(kube, ns, "md", lambda s: s.get("segment") == 2, "segment boundary", r=r)
    assert st["phase"] == "Running" and st["interruptedCount"] == 0 and "checkpoint code 3" in st["message"]
    assert st["priorityStartOverTimestamp"] > first["priorityStartOverTimestamp"]
    kube.wait_for(lambda: finish_terminating(kube, ns) or not [p for p in seg_pods(kube, ns, "md-1")
                                                               if p["status"].get("phase") == "Running"],
                  30, message="md-1's other pod gone")
    run_segment(kube, ns, "md-2", 2)
    st = wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 2, "segment 2 running", r=r)
    assert st["interruptedCount"] == 0 and len(st["runningTimestamps"]) == 1 and not st.get("interruptedTimestamps")
    reasons = sorted(e["reason"] for e in events(kube, ns, sj["metadata"]["uid"]))
    assert reasons == ["Queued", "SegmentEnded", "SegmentStarted", "Started", "Starting"], reasons



def test_a_checkpointed_pod_deleted_before_the_reconciler_looked_is_no_interruption(
        kube, webhook_server, namespace, pool, reconciler):
    """The workload exited with the agreed code; before any reconciler looked, the ended pod was
    evicted (DisruptionTarget written after its exit, as the Eviction API does) and deleted. The
    next reconciler sees only that: a segment boundary, interruptedCount 0. Then the Eviction API
    on the running next segment: one interruption, counted once, told from its DisruptionTarget."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler(identity="first")
    body = scavengerjob("md", pods=1, duration="1h")
    body["spec"]["checkpointExitCode"] = 3
    sj = kube.create(sj_path(ns), body)
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    (p1,) = run_segment(kube, ns, "md-1", 1)
    wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 1, "running", r=r)
    r.kill()  # nobody looks while the pod checkpoints, is marked and goes
    name = p1["metadata"]["name"]
    kube.set_pod_phase(ns, name, "Failed", {"main": 3})
    ended = kube.get(pods_path(ns, name))
    conditions = [*(ended["status"].get("conditions") or []),
                  {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                   "message": "Eviction API: evicting", "lastTransitionTime": time.strftime(
                       "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))}]
    kube.patch(pods_path(ns, name) + "/status", {"status": {"conditions": conditions}})
    kube.delete(pods_path(ns, name))  # a pod that ended goes at once (once the Job controller counted it)
    kube.wait_for(lambda: not kube.exists(pods_path(ns, name)), 30, message=f"pod {name} gone")
    job = kube.get(jobs_path(ns, "md-1"))  # what is left: the Job's record of the checkpoint
    assert [c["reason"] for c in job["status"]["conditions"] if c["type"] == "Failed"] == ["PodFailurePolicy"]
    r2 = reconciler(identity="second")
    st = wait_status(kube, ns, "md", lambda s: s.get("segment") == 2, "segment boundary", timeout=90, r=r2)
    assert st["interruptedCount"] == 0 and "checkpoint code 3" in st["message"], st
    (p2,) = run_segment(kube, ns, "md-2", 1)
    wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 2, "segment 2 running", r=r2)
    assert status(kube, ns, "md")["interruptedCount"] == 0

    kube.create(pods_path(ns, p2["metadata"]["name"]) + "/eviction",
                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": p2["metadata"]["name"]}})
    marked = kube.get(pods_path(ns, p2["metadata"]["name"]))
    assert marked["metadata"].get("deletionTimestamp")
    assert [c["reason"] for c in marked["status"]["conditions"] if c["type"] == "DisruptionTarget"] == \
        ["EvictionByEvictionAPI"]
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Interrupted", "Interrupted", r=r2)
    assert st["interruptedCount"] == 1 and "EvictionByEvictionAPI" in st["message"], st
    st = wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-3", "restarted", r=r2, kubelet=True)
    run_segment(kube, ns, "md-3", 1)
    st = wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 3, "segment 3 running", r=r2)
    assert st["interruptedCount"] == 1 and len(st["interruptedTimestamps"]) == 1
    assert len(events(kube, ns, sj["metadata"]["uid"], "Interrupted")) == 1


def test_a_declared_checkpoint_interval_runs_one_long_pod(kube, webhook_server, namespace, pool, reconciler):
    """spec.checkpoint.interval, duration left out: stored as written (the CRD schema takes it), the
    workload reads the interval, no FailJob rule (no exit code agreed), and no boundary past the
    interval: the one Job's pods keep running. Its guard (1 core-minute: 30 s of 2 cpus) is made once
    and kept: after the checkpoint its minAvailable is 0, then the pods again, the same budget.
    Both kinds at once are refused."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler(guard=1)
    body = scavengerjob("md", pods=1, cpu="2")
    del body["spec"]["duration"]
    body["spec"]["checkpoint"] = {"interval": "1m"}
    kube.create(sj_path(ns), body)
    assert kube.get(sj_path(ns, "md"))["spec"]["checkpoint"] == {"interval": "1m"}
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    (p,) = run_segment(kube, ns, "md-1", 1)
    assert {"name": "BATCHGATE_CHECKPOINT_INTERVAL_SECONDS", "value": "60"} in p["spec"]["containers"][0]["env"]
    assert "podFailurePolicy" not in kube.get(jobs_path(ns, "md-1"))["spec"]
    st = wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 1, "running", r=r)
    assert "no segment boundaries" in st["message"]
    started = time.monotonic()
    budget = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/md-1"
    wait_status(kube, ns, "md", lambda s: s.get("guardedSegment") == 1, "guarded", timeout=90, r=r)
    made = kube.get(budget)
    assert made["spec"]["minAvailable"] == 1
    kube.wait_for(lambda: kube.get(budget)["spec"]["minAvailable"] == 0, 120,
                  message=lambda: f"the budget lifted at the checkpoint\n{r.logs()}")
    assert status(kube, ns, "md").get("guardedSegment") == 1
    kube.wait_for(lambda: kube.get(budget)["spec"]["minAvailable"] == 1, 120,
                  message=lambda: f"the budget held again\n{r.logs()}")
    assert kube.get(budget)["metadata"]["uid"] == made["metadata"]["uid"]  # kept, never made again
    kube.wait_for(lambda: time.monotonic() - started > 75, 90, message="past the interval")
    assert status(kube, ns, "md")["segment"] == 1
    assert not kube.get(pods_path(ns, p["metadata"]["name"]))["metadata"].get("deletionTimestamp")
    both = scavengerjob("both", pods=1)
    both["spec"].update(checkpoint={"interval": "10m"}, checkpointExitCode=3)
    with pytest.raises(KubeApiError) as e:
        kube.create(sj_path(ns), both)
    assert "not both" in str(e.value)


def test_without_the_garbage_collector_a_boundary_and_a_left_over_pod_still_go(
        kube, webhook_server, namespace, pool, reconciler):
    """kube-controller-manager stopped (SIGSTOP: no garbage collector, no Job controller) across a
    segment boundary: the reconciler deletes the segment's pods with its Job (they get SIGTERM
    now), and a pod left over from the gone Job (as the Job controller makes when its cache has
    not seen the Job's deletion) by its uid; then it creates the next segment's Job. Left to the
    garbage collector, the next segment would wait for as long as it is away.

    On Kubernetes 1.26+ the Job controller's pods carry the job-tracking finalizer, which only that
    controller removes: while it is away the old pods are never gone from the API. They are gone
    from their nodes: the kubelet has stopped them and written their terminal phase, and
    kube-scheduler (whose pod informer lists only pods that are not Succeeded or Failed) has given
    their room back. That is what the next segment waits for, not for the objects to go."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    r = reconciler()
    sj = kube.create(sj_path(ns), scavengerjob("md", pods=2, duration="20s"))
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    pods = run_segment(kube, ns, "md-1", 2)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    job1 = kube.get(jobs_path(ns, "md-1"))
    kcm = kube.procs["kube-controller-manager"]
    kcm.send_signal(signal.SIGSTOP)
    try:
        assert status(kube, ns, "md")["segment"] == 1, "the boundary came before the controller-manager stopped"
        st = wait_status(kube, ns, "md", lambda s: s.get("segment") == 2, "segment boundary", timeout=90, r=r)
        assert st["jobName"] == "md-2" and st["interruptedCount"] == 0
        kube.wait_for(lambda: len(seg_pods(kube, ns, "md-1")) == 2 and all(
            p["metadata"].get("deletionTimestamp") for p in seg_pods(kube, ns, "md-1")), 30,
            message="md-1's pods deleted by the reconciler")
        # the Job controller's late replacement, owned by the gone Job md-1, on the node
        late = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "md-1-late", "labels": dict(pods[0]["metadata"]["labels"]),
                             "annotations": dict(pods[0]["metadata"].get("annotations") or {}),
                             "finalizers": list(pods[0]["metadata"].get("finalizers") or []),
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "md-1",
                                                  "uid": job1["metadata"]["uid"], "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "spec": {k: v for k, v in pods[0]["spec"].items()}}
        made = kube.create(pods_path(ns), late)
        finish_terminating(kube, ns)  # md-1's two pods saved and ended; md-1-late is not deleted yet
        gone = kube.wait_for(lambda: kube.exists(pods_path(ns, "md-1-late")) and kube.get(
            pods_path(ns, "md-1-late"))["metadata"].get("deletionTimestamp"), 60,
            message=f"md-1-late deleted by the reconciler\n{r.logs()}")
        assert gone
        assert kube.get(pods_path(ns, "md-1-late"))["metadata"]["uid"] == made["metadata"]["uid"]
        finish_terminating(kube, ns)
        kube.wait_for(lambda: kube.exists(jobs_path(ns, "md-2")), 60, message=f"Job md-2\n{r.logs()}")
        assert "LeftoverPodsDeleted" in r.logs(400) or "md-1-late" in r.logs(400)
        # md-1's pods ended but are still there, uncounted by the Job controller (its finalizer)
        left = seg_pods(kube, ns, "md-1")
        assert all(p["status"]["phase"] == "Failed" for p in left), [p["status"]["phase"] for p in left]
        if kube.server_version() >= (1, 26):
            assert len(left) == 3 and all(p["metadata"].get("finalizers") for p in left), left
    finally:
        kcm.send_signal(signal.SIGCONT)
    run_segment(kube, ns, "md-2", 2)
    st = wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 2, "segment 2 running", r=r)
    assert st["interruptedCount"] == 0 and not st.get("interruptedTimestamps")
    reasons = sorted(e["reason"] for e in events(kube, ns, sj["metadata"]["uid"]))
    assert reasons == ["Queued", "SegmentEnded", "SegmentStarted", "Started", "Starting"], reasons


def sj_metrics(port: int) -> dict[str, float]:
    """The reconciler's ScavengerJob samples, ``'name{labels}' -> value``."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("batchgate_scavengerjobs"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_metrics_move_on_transitions(kube, webhook_server, namespace, pool, reconciler):
    """started, wait time, segments, interrupted (with the core-seconds it threw away), completed,
    and the phase gauge, read from the reconciler's /metrics as the story goes on."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    port = free_port()
    r = reconciler(args=("--metrics-port", str(port)))

    def moved(what: str, pred: Callable[[dict[str, float]], bool]) -> dict[str, float]:
        got: dict[str, float] = {}

        def check() -> bool:
            nonlocal got
            with contextlib.suppress(OSError):
                got = sj_metrics(port)
            return pred(got)

        kube.wait_for(check, 40, message=lambda: f"metrics: {what}; now {got}\n{r.logs()}")
        return got

    def m(name: str) -> Callable[[dict[str, float]], float]:
        return lambda got: got.get(name, 0.0)

    started, waits = m("batchgate_scavengerjobs_started_total"), m("batchgate_scavengerjobs_wait_seconds_count")
    interrupted, lost = m("batchgate_scavengerjobs_interrupted_total"), \
        m("batchgate_scavengerjobs_preempted_core_seconds_total")
    segments, completed = m("batchgate_scavengerjobs_segments_total"), m("batchgate_scavengerjobs_completed_total")
    running, done = m('batchgate_scavengerjobs{phase="Running"}'), m('batchgate_scavengerjobs{phase="Completed"}')
    before = moved("served", lambda g: "batchgate_scavengerjobs_started_total" in g)
    assert started(before) == interrupted(before) == completed(before) == segments(before) == 0
    kube.create(sj_path(ns), scavengerjob("md", pods=2, duration="15s"))
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=r)
    pods = run_segment(kube, ns, "md-1", 2)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    got = moved("started", lambda g: started(g) == 1 and waits(g) == 1 and running(g) == 1)
    assert got["batchgate_scavengerjobs_wait_seconds_sum"] > 0 and interrupted(got) == 0
    # the segment boundary at 15 s: counted once, not as an interruption
    wait_status(kube, ns, "md", lambda s: s.get("segment") == 2, "segment boundary", timeout=40, r=r)
    kube.wait_for(lambda: finish_terminating(kube, ns) or not seg_pods(kube, ns, "md-1"), 30, message="md-1 gone")
    pods = run_segment(kube, ns, "md-2", 2)
    wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 2, "segment 2 running", r=r)
    got = moved("segment", lambda g: segments(g) == 1)
    assert started(got) == 1 and interrupted(got) == 0
    time.sleep(2)  # two pods of 1 cpu compute for a while before one is deleted from outside
    kube.delete(pods_path(ns, pods[0]["metadata"]["name"]))
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Interrupted", "Interrupted", r=r)
    waiting = m('batchgate_scavengerjobs{phase="Interrupted"}')
    got = moved("interrupted", lambda g: interrupted(g) == 1 and running(g) == 0 and waiting(g) == 1)
    assert lost(got) >= 2 * 2, got  # 2 cores for at least 2 s since the segment started
    assert started(got) == 1
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-3", "restarted", r=r, kubelet=True)
    pods = run_segment(kube, ns, "md-3", 2)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "running again", r=r)
    moved("started again", lambda g: started(g) == 2 and waits(g) == 2 and running(g) == 1)
    for p in pods:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Succeeded", {"main": 0})
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Completed", "Completed", r=r)
    got = moved("completed", lambda g: completed(g) == 1 and done(g) == 1 and running(g) == 0)
    assert interrupted(got) == 1 and m("batchgate_scavengerjobs_failed_total")(got) == 0


def test_missing_configmap_fails_it_naming_the_object(kube, webhook_server, namespace, pool, reconciler):
    ns, (_, node) = namespace, pool
    node()
    r = reconciler()
    kube.create(sj_path(ns), scavengerjob("md", volumes=[
        {"name": "params", "mountPath": "/etc/params", "configMap": {"name": "md-params"}}]))
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Failed", "Failed", r=r)
    assert f"ConfigMap {ns}/md-params does not exist" in st["message"]
    assert not kube.exists(jobs_path(ns, "md-1"))


def kubelet_failed_mount(pod: dict[str, Any], message: str) -> dict[str, Any]:
    """The Event a kubelet writes when it cannot mount a pod's volume (kwok mounts nothing)."""
    md, node = pod["metadata"], pod["spec"]["nodeName"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{md['name']}.{unique('mount')[-8:]}", "namespace": md["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": md["name"], "namespace": md["namespace"],
                               "uid": md["uid"], "resourceVersion": md["resourceVersion"]},
            "reason": "FailedMount", "message": message, "type": "Warning", "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": "kubelet", "host": node},
            "reportingComponent": "kubelet", "reportingInstance": node}


def test_a_missing_secret_fails_it_naming_the_secret_the_kubelet_could_not_mount(
        kube, webhook_server, namespace, pool, reconciler):
    """The reconciler may not read Secrets, so it does not look a ScavengerJob's up before a start;
    the kubelet, which cannot mount a missing one, says so in a Warning Event FailedMount on the pod.
    The ScavengerJob then fails, naming the Secret, and its Job goes (PRODUCT.md: a missing Secret
    fails it with a message saying which)."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node()
    r = reconciler()
    kube.create(sj_path(ns), scavengerjob("md", volumes=[
        {"name": "creds", "mountPath": "/etc/creds", "secret": {"secretName": "md-creds"}}]))
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "its segment started", r=r)
    (pod,) = kube.wait_for(lambda: [p for p in seg_pods(kube, ns, "md-1") if p["spec"].get("nodeName")] or None,
                           60, message="its pod bound")
    kube.create(f"/api/v1/namespaces/{ns}/events", kubelet_failed_mount(
        pod, 'MountVolume.SetUp failed for volume "creds" : secret "md-creds" not found'))
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Failed", "Failed", r=r)
    assert f"Secret {ns}/md-creds does not exist" in st["message"], st["message"]
    assert "volume 'creds'" in st["message"] and pod["metadata"]["name"] in st["message"], st["message"]
    assert any(c.get("reason") == "MissingVolumeSource" for c in st.get("conditions") or []), st
    kube.wait_for(lambda: not kube.exists(jobs_path(ns, "md-1"))
                  or kube.get(jobs_path(ns, "md-1"))["metadata"].get("deletionTimestamp"), 60,
                  message="its Job deleted")


def test_a_name_too_long_to_label_its_jobs_is_refused(kube, webhook_server, namespace):
    """Its name labels its Jobs and pods (63 characters at most): 64 used to be stored, and its Job's
    creation failed on every pass, forever. The policy refuses it (and the CRD's rule would, the
    webhook down); 63 is stored."""
    ns = namespace
    with pytest.raises(KubeApiError) as refused:
        kube.create(sj_path(ns), scavengerjob("x" * 64), as_user="alice")
    assert refused.value.status in (403, 422)
    assert "63" in str(refused.value.body) and not kube.exists(sj_path(ns, "x" * 64))
    kube.create(sj_path(ns), scavengerjob("y" * 63), as_user="alice")
    assert kube.exists(sj_path(ns, "y" * 63))


# -- 3. start order and the cap --------------------------------------------------------------
def test_start_order_interrupted_first_then_oldest_within_the_cap(kube, webhook_server, namespace, pool, reconciler):
    ns, (_, node) = namespace, pool
    node(cpu="4")  # 70 %: 2.8 cpu for scavengers; each of these needs 2
    kube.create(sj_path(ns), scavengerjob("oldest", cpu="2"))
    time.sleep(1.1)  # creationTimestamps have whole seconds
    kube.create(sj_path(ns), scavengerjob("again", cpu="2"))
    kube.patch(f"{sj_path(ns, 'again')}/status", {"status": {"phase": "Interrupted", "interruptedCount": 2}})
    kube.create(sj_path(ns), scavengerjob("small", cpu="500m"))
    kube.create(sj_path(ns), scavengerjob("huge", pods=2, cpu="2"))
    r = reconciler()
    wait_status(kube, ns, "again", lambda s: s.get("jobName") == "again-1", "interrupted one first", r=r)
    wait_status(kube, ns, "small", lambda s: s.get("jobName") == "small-1", "small one backfills", r=r)
    st = wait_status(kube, ns, "oldest", lambda s: "share" in s.get("message", ""), "waiting on the cap", r=r)
    assert not st.get("jobName") and st["phase"] == "Pending"
    st = wait_status(kube, ns, "huge", lambda s: "over the scavengers' share" in s.get("message", ""),
                     "can never fit", r=r)
    assert not kube.exists(jobs_path(ns, "oldest-1")) and not kube.exists(jobs_path(ns, "huge-1"))


# -- 4. preemption order ------------------------------------------------------------------------
def test_kube_scheduler_preempts_the_one_that_just_started_over_before_an_older_one(
        kube, webhook_server, namespace, pool, reconciler):
    """'b' is the older ScavengerJob and its first pod started first; 'a' started later. Then
    b reaches its duration: checkpoint, new segment, new pod. An ordinary pod needs room: the
    stock kube-scheduler preempts b (least progress since its checkpoint), not a."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (pool_name, make_node) = namespace, pool
    node = make_node(cpu="4")
    r = reconciler()
    kube.create(sj_path(ns), scavengerjob("b", duration="15s"))
    wait_status(kube, ns, "b", lambda s: s.get("jobName") == "b-1", "b started", r=r)
    run_segment(kube, ns, "b-1", 1)
    wait_status(kube, ns, "b", lambda s: s.get("phase") == "Running", "b running", r=r)
    time.sleep(2)
    kube.create(sj_path(ns), scavengerjob("a", duration="1h"))
    wait_status(kube, ns, "a", lambda s: s.get("jobName") == "a-1", "a started", r=r)
    (a_pod,) = run_segment(kube, ns, "a-1", 1)
    a_running = time.time()
    wait_status(kube, ns, "a", lambda s: s.get("phase") == "Running", "a running", r=r)
    # b's segment ends: status first, then its pod gets SIGTERM (we finish it), then segment 2
    wait_status(kube, ns, "b", lambda s: s.get("segment") == 2, "b's segment boundary", timeout=40, r=r)
    kube.wait_for(lambda: finish_terminating(kube, ns) or not seg_pods(kube, ns, "b-1"), 30,
                  message="b-1's pod gone")
    # Pod start times have whole seconds, and kube-scheduler keeps the earlier started of two pods of
    # one priority: b's new pod must start in a later second than a's (when b's segment ended
    # before a was running, both can be set running within one second).
    while time.time() < int(a_running) + 1:
        time.sleep(0.1)
    (b_pod,) = run_segment(kube, ns, "b-2", 1)
    st = wait_status(kube, ns, "b", lambda s: s.get("runningSegment") == 2, "b's segment 2 running", r=r)
    assert st["interruptedCount"] == 0 and len(st["runningTimestamps"]) == 1
    a_start = kube.get(pods_path(ns, a_pod["metadata"]["name"]))["status"]["startTime"]
    b_start = kube.get(pods_path(ns, b_pod["metadata"]["name"]))["status"]["startTime"]
    assert b_start > a_start  # b, the older ScavengerJob, is now the latest started
    # An ordinary pod needs 3 of the 4 cpus; a and b use 1 each: one must go.
    ordinary = pod(unique("urgent"), containers=[container(cpu="3", memory="1Gi")],
                   nodeSelector={POOL: pool_name}, priorityClassName="batchgate-batch")
    kube.create(pods_path(ns), ordinary)
    kube.wait_for(lambda: kube.get(pods_path(ns, b_pod["metadata"]["name"]))["metadata"].get("deletionTimestamp"),
                  30, message="kube-scheduler to preempt b")
    st = wait_status(kube, ns, "b", lambda s: s.get("phase") == "Interrupted", "b interrupted", r=r)
    assert st["interruptedCount"] == 1
    a_now = kube.get(pods_path(ns, a_pod["metadata"]["name"]))
    assert not a_now["metadata"].get("deletionTimestamp"), "a, older in its segment, must survive"
    assert status(kube, ns, "a")["phase"] == "Running"
    # kube-scheduler waits for its victim (and any replacement b's Job made meanwhile) to be gone
    bound = kube.wait_for(lambda: finish_terminating(kube, ns) >= 0 and
                          kube.get(pods_path(ns, ordinary["metadata"]["name"]))["spec"].get("nodeName"),
                          60, message="the ordinary pod bound")
    assert bound == node


def test_the_guard_steers_kube_scheduler_to_the_scavenger_with_less_unsaved_work(
        kube, webhook_server, namespace, pool, reconciler):
    """'free' (half a cpu) runs on node B; 'held' (3 cpu) starts later on node A. With the guard
    at 2 core-minutes, held is guarded after 40 s, free only after 240 s. An
    ordinary pod needs 2 cpu: on either node one scavenger pod must go, the same priority, one
    victim each; kube-scheduler alone would take the latest started, held. Its budget makes A
    the node with a PDB violation, so kube-scheduler preempts free instead."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (pool_name, make_node) = namespace, pool
    node_b = make_node(cpu="2")
    r = reconciler(guard=2)
    kube.create(sj_path(ns), scavengerjob("free", cpu="500m"))
    wait_status(kube, ns, "free", lambda s: s.get("jobName") == "free-1", "free started", r=r)
    (free_pod,) = run_segment(kube, ns, "free-1", 1)
    assert free_pod["spec"]["nodeName"] == node_b
    wait_status(kube, ns, "free", lambda s: s.get("phase") == "Running", "free running", r=r)
    free_start = time.monotonic()
    node_a = make_node(cpu="4")
    kube.create(sj_path(ns), scavengerjob("held", cpu="3"))
    wait_status(kube, ns, "held", lambda s: s.get("jobName") == "held-1", "held started", r=r)
    (held_pod,) = run_segment(kube, ns, "held-1", 1)
    assert held_pod["spec"]["nodeName"] == node_a
    wait_status(kube, ns, "held", lambda s: s.get("phase") == "Running", "held running", r=r)
    wait_status(kube, ns, "held", lambda s: s.get("guardedSegment") == 1, "held guarded", timeout=90, r=r)
    pdb = kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/held-1")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["metadata"]["ownerReferences"][0]["name"] == "held-1"
    kube.wait_for(lambda: (kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/held-1")
                           .get("status") or {}).get("observedGeneration"), 30, message="the disruption controller")
    assert not status(kube, ns, "free").get("guardedSegment")
    assert time.monotonic() - free_start < 230, "too slow to tell the two apart: free may be guarded too"
    a_start = kube.get(pods_path(ns, held_pod["metadata"]["name"]))["status"]["startTime"]
    b_start = kube.get(pods_path(ns, free_pod["metadata"]["name"]))["status"]["startTime"]
    assert a_start > b_start  # kube-scheduler's own tie-break would take held
    ordinary = pod(unique("urgent"), containers=[container(cpu="2", memory="1Gi")],
                   nodeSelector={POOL: pool_name}, priorityClassName="batchgate-batch")
    kube.create(pods_path(ns), ordinary)
    kube.wait_for(lambda: kube.get(pods_path(ns, free_pod["metadata"]["name"]))["metadata"].get("deletionTimestamp"),
                  30, message="kube-scheduler to preempt free")
    assert not kube.get(pods_path(ns, held_pod["metadata"]["name"]))["metadata"].get("deletionTimestamp")
    wait_status(kube, ns, "free", lambda s: s.get("phase") == "Interrupted", "free interrupted", r=r)
    finish_terminating(kube, ns)
    bound = kube.wait_for(lambda: kube.get(pods_path(ns, ordinary["metadata"]["name"]))["spec"].get("nodeName"),
                          60, message="the ordinary pod bound")
    assert bound == node_b and status(kube, ns, "held")["phase"] == "Running"


# -- 5. restarts: killed after every write ---------------------------------------------------------
def test_killed_after_every_single_write_nothing_doubled_nothing_lost(
        kube, webhook_server, namespace, pool, reconciler):
    """Each reconciler process dies right after its first successful write; the next one carries
    on, while the test plays kubelet. The story: queued, start, running, segment boundary, next
    segment, running, completed. Each Event exactly once; no second Job for a segment."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, make_node) = namespace, pool
    make_node(cpu="8")
    sj = kube.create(sj_path(ns), scavengerjob("md", duration="20s"))
    uid = sj["metadata"]["uid"]
    crashes = 0
    done = False
    for _ in range(40):
        rec = reconciler(env={"BATCHGATE_RECONCILER_CRASH_AFTER_WRITES": "1"})
        deadline = time.time() + 60
        while rec.alive() and time.time() < deadline:
            st = status(kube, ns, "md")
            job = st.get("jobName")
            finish_terminating(kube, ns)
            if job:
                for p in seg_pods(kube, ns, job):
                    phase = (p.get("status") or {}).get("phase")
                    if p["spec"].get("nodeName") and phase == "Pending" and not p["metadata"].get("deletionTimestamp"):
                        kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
                    if st.get("segment") == 2 and st.get("runningSegment") == 2 and phase == "Running":
                        kube.set_pod_phase(ns, p["metadata"]["name"], "Succeeded", {"main": 0})
            if st.get("phase") == "Completed":
                done = True
                break
            time.sleep(0.3)
        if done:
            with contextlib.suppress(subprocess.TimeoutExpired):
                rec.proc.wait(timeout=15)
            if not rec.alive() and rec.proc.returncode == 137:
                crashes += 1
            break
        assert not rec.alive(), f"no write within 60 s:\n{rec.logs()}"
        assert rec.proc.returncode == 137, rec.logs()
        crashes += 1
    assert done, status(kube, ns, "md")
    st = status(kube, ns, "md")
    assert st["interruptedCount"] == 0 and len(st["runningTimestamps"]) == 1 and st["segment"] == 2
    reasons = sorted(e["reason"] for e in events(kube, ns, uid))
    assert reasons == sorted(["Queued", "Starting", "Started", "SegmentEnded", "SegmentStarted",
                              "Completed"]), reasons
    assert all(e.get("count", 1) == 1 for e in events(kube, ns, uid))
    # Event + status + Job for the start, ...: every write made by a process that then died
    assert crashes >= 14, crashes
    with contextlib.suppress(KubeApiError):
        assert kube.get(jobs_path(ns, "md-2"))["metadata"]["ownerReferences"][0]["uid"] == uid


def lease_holder(kube: Any, ns: str) -> str:
    try:
        lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/batchgate-reconciler")
    except KubeApiError as e:
        if e.status == 404:
            return ""
        raise
    return lease["spec"].get("holderIdentity") or ""  # type: ignore[no-any-return]


def job_pods_created(kube: Any, ns: str) -> dict[str, int]:
    """Pods the Job controller created, per Job, from its SuccessfulCreate Events (they outlive the
    Jobs and pods, which are gone by the end)."""
    out: dict[str, int] = {}
    for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]:
        if e["involvedObject"].get("kind") == "Job" and e["reason"] == "SuccessfulCreate":
            name = e["involvedObject"]["name"]
            out[name] = out.get(name, 0) + e.get("count", 1)
    return out


def test_leader_killed_at_a_boundary_and_at_an_interruption_the_next_finishes(
        kube, webhook_server, namespace, pool, reconciler):
    """Two replicas with leader election. The leader is SIGKILLed (no release) the moment a
    segment boundary shows in the status, with the next segment's Job perhaps not made yet; the
    follower takes the Lease once it expired and finishes. A third replica joins; the new leader
    is killed the moment an interruption shows, and the third restarts the gang. Read back: one
    Job per segment, each with exactly its pods, every Event once, the status counters exact."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (_, node) = namespace, pool
    node(cpu="8")
    a = reconciler(identity="replica-a")
    kube.wait_for(lambda: lease_holder(kube, ns) == "replica-a", 30, message=lambda: f"replica-a leads\n{a.logs()}")
    b = reconciler(identity="replica-b")
    body = scavengerjob("md", pods=2, duration="1h")
    body["spec"]["checkpointExitCode"] = 3
    sj = kube.create(sj_path(ns), body)
    uid = sj["metadata"]["uid"]
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "started", r=a)
    pods = run_segment(kube, ns, "md-1", 2)
    wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 1, "running", r=a)

    # The workload checkpoints and ends its segment; the leader dies as soon as it recorded that.
    kube.set_pod_phase(ns, pods[0]["metadata"]["name"], "Failed", {"main": 3})
    kube.wait_for(lambda: status(kube, ns, "md").get("segment") == 2, 30, message=lambda: f"boundary\n{a.logs()}",
                  interval=0.05)
    a.kill()
    killed = time.monotonic()
    kube.wait_for(lambda: lease_holder(kube, ns) == "replica-b", 40, message=lambda: f"replica-b takes over\n{b.logs()}")
    assert time.monotonic() - killed >= 5  # it waited for the Lease to expire (15 s after a's last renewal)
    kube.wait_for(lambda: finish_terminating(kube, ns) or not [p for p in seg_pods(kube, ns, "md-1")
                                                               if p["status"].get("phase") == "Running"],
                  30, message="md-1's other pod gone")
    pods = run_segment(kube, ns, "md-2", 2)
    st = wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 2, "segment 2 running", r=b)
    assert st["interruptedCount"] == 0 and st["phase"] == "Running"

    # A third replica joins; a pod is deleted from outside; the leader dies once that is recorded.
    c = reconciler(identity="replica-c")
    kube.delete(pods_path(ns, pods[1]["metadata"]["name"]))
    kube.wait_for(lambda: status(kube, ns, "md").get("phase") == "Interrupted", 30,
                  message=lambda: f"interrupted\n{b.logs()}", interval=0.05)
    b.kill()
    kube.wait_for(lambda: lease_holder(kube, ns) == "replica-c", 40, message=lambda: f"replica-c takes over\n{c.logs()}")
    kube.wait_for(lambda: finish_terminating(kube, ns) or not seg_pods(kube, ns, "md-2"), 30, message="md-2 gone")
    st = wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-3", "restarted", r=c, kubelet=True)
    pods = run_segment(kube, ns, "md-3", 2)
    wait_status(kube, ns, "md", lambda s: s.get("runningSegment") == 3, "segment 3 running", r=c)
    for p in pods:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Succeeded", {"main": 0})
    st = wait_status(kube, ns, "md", lambda s: s.get("phase") == "Completed", "Completed", r=c)

    # Nothing lost: one boundary, one interruption, two starts, each recorded exactly once.
    assert (st["segment"], st["interruptedCount"]) == (3, 1), st
    assert len(st["interruptedTimestamps"]) == 1 and len(st["runningTimestamps"]) == 2, st
    evs = events(kube, ns, uid)
    reasons = sorted(e["reason"] for e in evs)
    assert reasons == sorted(["Queued", "Starting", "Started", "SegmentEnded", "SegmentStarted", "Interrupted",
                              "Starting", "Started", "Completed"]), reasons
    assert all(e.get("count", 1) == 1 for e in evs), evs
    assert {e["reportingInstance"] for e in evs} >= {"replica-a", "replica-c"}
    # Nothing doubled: one Job per segment, each with its 2 pods. The Job controller may replace
    # the pod deleted from outside before the segment's Job is deleted (it does not wait for
    # batchgate); that replacement is its own doing, once, and went with the Job.
    created = job_pods_created(kube, ns)
    assert created.keys() == {"md-1", "md-2", "md-3"} and created["md-1"] == created["md-3"] == 2, created
    assert created["md-2"] in (2, 3), created
    assert not [p for p in kube.get(pods_path(ns))["items"]
                if p["metadata"].get("labels", {}).get("job-name") in ("md-1", "md-2")]
    assert not kube.exists(jobs_path(ns, "md-4"))


# -- 6. the demo workload, run for real ---------------------------------------------------------
SPAN = 16384  # numbers the demo sieves between two looks at the clock and its stop flag


class ProcessKubelet:
    """A kubelet that really runs the ScavengerJob pods' containers as local processes: the pod's command
    and args, its env, and its volumes as directories (a ConfigMap's keys written out; a PVC
    bound to a hostPath PersistentVolume is that path), mount paths in the argv mapped to them.
    Bound pods start and turn Running; an exit is written as the pod's phase and exit code; a
    pod being deleted gets SIGTERM, and is gone once its process is."""

    def __init__(self, kube: Any, ns: str, root: Path, *, hold_first_resumed: bool = False) -> None:
        self.kube, self.ns, self.root = kube, ns, root
        # hold_first_resumed: the first run that resumes from a checkpoint is frozen (SIGSTOP) the
        # moment it says so, before it sieves anything, and stays frozen until its pod is deleted
        # (then SIGTERM and SIGCONT): an interruption mid-segment then happens whatever the speed.
        self.hold, self.held = hold_first_resumed, set[str]()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.output: dict[str, list[str]] = {}  # its lines so far, read as they come
        self.readers: dict[str, threading.Thread] = {}
        self.runs: list[tuple[str, int, str]] = []  # (pod, exit code, output), in the order they ended

    def _dirs(self, p: dict[str, Any]) -> dict[str, str]:
        dirs: dict[str, str] = {}
        for v in p["spec"].get("volumes") or []:
            if "configMap" in v:
                d = self.root / p["metadata"]["name"] / v["name"]
                d.mkdir(parents=True, exist_ok=True)
                cm = self.kube.get(f"/api/v1/namespaces/{self.ns}/configmaps/{v['configMap']['name']}")
                for key, text in (cm.get("data") or {}).items():
                    (d / key).write_text(text)
                dirs[v["name"]] = str(d)
            elif "persistentVolumeClaim" in v:
                pvc = self.kube.get(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/"
                                    f"{v['persistentVolumeClaim']['claimName']}")
                pv = self.kube.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
                dirs[v["name"]] = pv["spec"]["hostPath"]["path"]
        (c,) = p["spec"]["containers"]
        return {m["mountPath"]: dirs[m["name"]] for m in c.get("volumeMounts") or [] if m["name"] in dirs}

    def _start(self, p: dict[str, Any]) -> None:
        (c,) = p["spec"]["containers"]
        mounts = self._dirs(p)

        def local(arg: str) -> str:
            for path, d in mounts.items():
                if arg == path or arg.startswith(path.rstrip("/") + "/"):
                    return d + arg[len(path.rstrip("/")):]
            return arg

        argv = [local(a) for a in [*c.get("command", []), *c.get("args", [])]]
        if argv[0] == "python":
            argv[0] = sys.executable
        env = {e["name"]: e["value"] for e in c.get("env") or [] if "value" in e}
        name = p["metadata"]["name"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={"PATH": "/usr/bin:/bin", **env})
        lines: list[str] = []

        def read() -> None:
            for line in proc.stdout or ():
                lines.append(line)
                if self.hold and not self.held and "resumed from" in line:
                    proc.send_signal(signal.SIGSTOP)  # it has its handlers; it has not sieved yet
                    self.held.add(name)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self.procs[name], self.output[name], self.readers[name] = proc, lines, reader
        self.kube.set_pod_phase(self.ns, name, "Running")

    def code(self, proc: subprocess.Popen[str]) -> int:
        """The exit code as a container runtime reports it: 128 + N for a death by signal N."""
        rc = proc.returncode
        return 128 - rc if rc < 0 else rc

    def _ended(self, name: str, proc: subprocess.Popen[str]) -> None:
        self.readers[name].join(timeout=30)
        self.runs.append((name, self.code(proc), "".join(self.output[name])))

    def step(self) -> None:
        for p in self.kube.get(pods_path(self.ns), labelSelector="batchgate.io/scavengerjob")["items"]:
            name = p["metadata"]["name"]
            proc = self.procs.get(name)
            if p["metadata"].get("deletionTimestamp"):
                if proc is not None and proc.returncode is None:
                    if proc.poll() is None:  # still running: SIGTERM, and its grace period to save
                        proc.send_signal(signal.SIGTERM)
                        if name in self.held:
                            proc.send_signal(signal.SIGCONT)
                        proc.wait(timeout=60)
                    else:  # it had exited by itself before the deletion: report that first
                        self._report(name, proc)
                    self._ended(name, proc)
                with contextlib.suppress(KubeApiError):  # its containers are stopped: the pod is gone
                    self.kube.delete(pods_path(self.ns, name),
                                     body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
            elif proc is None and p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Pending":
                self._start(p)
            elif proc is not None and proc.returncode is None and proc.poll() is not None:
                self._report(name, proc)
                self._ended(name, proc)

    def _report(self, name: str, proc: subprocess.Popen[str]) -> None:
        code = self.code(proc)
        with contextlib.suppress(KubeApiError):  # 404: finished meanwhile
            self.kube.set_pod_phase(self.ns, name, "Succeeded" if code == 0 else "Failed", {"main": code})

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.send_signal(signal.SIGCONT)
                proc.wait()


def _dump(kube: Any, ns: str) -> str:
    """The namespace's pods, Jobs and Events as one line each, for a failure message."""
    out = []
    for p in kube.get(pods_path(ns))["items"]:
        md = p["metadata"]
        out.append(f"pod {md['name']} uid={md['uid']} owner={[o['name'] + '/' + o['uid'] for o in md.get('ownerReferences') or []]} "
                   f"del={md.get('deletionTimestamp')} node={p['spec'].get('nodeName')} phase={(p.get('status') or {}).get('phase')} "
                   f"start={(p.get('status') or {}).get('startTime')} created={md['creationTimestamp']}")
    for j in kube.get(jobs_path(ns))["items"]:
        out.append(f"job {j['metadata']['name']} del={j['metadata'].get('deletionTimestamp')} status={j.get('status')}")
    for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]:
        out.append(f"event {e.get('lastTimestamp') or e.get('eventTime')} {e['involvedObject'].get('name')} {e['reason']}: {e['message']}")
    return "\n".join(out)


def test_the_demo_checkpoints_ends_its_segments_and_resumes_after_an_interruption(
        kube, webhook_server, namespace, pool, reconciler, tmp_path):
    """The example manifests (examples/scavenger-demo: ConfigMap, PVC, ScavengerJob with
    checkpointExitCode) with the sieve cut to 10^8 and a checkpoint every 1.5 s. The workload
    really runs (a local process per pod, the PVC a directory): each segment ends after a
    checkpoint with the agreed code, the next resumes from it. In its second segment an
    ordinary pod needs the node: kube-scheduler preempts it, it gets SIGTERM and saves, and the
    restarted ScavengerJob resumes there, not from zero. The answer is the published one and
    every part of the range was sieved exactly once."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns, (pool_name, node) = namespace, pool
    node(cpu="4")
    demo = REPO / "examples" / "scavenger-demo"
    state = tmp_path / "pv"
    state.mkdir()
    cm = yaml.safe_load((demo / "configmap.yaml").read_text())
    pvc = yaml.safe_load((demo / "pvc.yaml").read_text())
    sj = yaml.safe_load((demo / "scavengerjob.yaml").read_text())
    for obj in (cm, pvc, sj):
        obj["metadata"]["namespace"] = ns
    pv_name = unique("demo-pv")
    kube.create("/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "16Mi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "hostPath": {"path": str(state)}, "persistentVolumeReclaimPolicy": "Retain",
                 "claimRef": {"namespace": ns, "name": pvc["metadata"]["name"]}}})
    try:
        kube.create(f"/api/v1/namespaces/{ns}/configmaps", cm)
        kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", pvc)
        kube.wait_for(lambda: kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/primes-state")
                      ["status"].get("phase") == "Bound", 60, message="the PVC bound to its PV")
        a = sj["spec"]["args"]
        a[a.index("--limit") + 1], a[a.index("--checkpoint-every") + 1] = "1e8", "1.5"
        a += ["--segment", str(SPAN)]  # small steps: a few seconds of compute, several segments
        assert sj["spec"]["checkpointExitCode"] == 75
        r = reconciler()
        made = kube.create(sj_path(ns), sj)
        kubelet = ProcessKubelet(kube, ns, tmp_path / "volumes", hold_first_resumed=True)
        urgent: str | None = None
        attempts = 0
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                kubelet.step()
                st = status(kube, ns, "primes-1e12")
                if st.get("phase") in ("Completed", "Failed"):
                    break
                saved_on_sigterm = 143 in [c for _, c, _ in kubelet.runs]
                if urgent is None and not saved_on_sigterm and kubelet.held \
                        and all(kubelet.procs[n].poll() is None for n in kubelet.held):
                    # its second segment has resumed and is held there, however fast the machine: an
                    # ordinary pod needs 3.5 of the 4 cpus
                    urgent = unique("urgent")
                    attempts += 1
                    kube.create(pods_path(ns), pod(urgent, containers=[container(cpu="3500m", memory="1Gi")],
                                                   nodeSelector={POOL: pool_name}, priorityClassName="batchgate-batch"))
                elif urgent and kube.get(pods_path(ns, urgent))["spec"].get("nodeName"):
                    # It got the node (the scavenger is gone: preempted, or its segment had just ended
                    # with 75 by itself, then no 143 and another try in a later segment); it ran, and
                    # is done: room again for the scavenger.
                    kube.delete(pods_path(ns, urgent),
                                body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
                    urgent = None
                time.sleep(0.1)
        finally:
            kubelet.stop()
        st = status(kube, ns, "primes-1e12")
        logs = "\n".join(f"--- {n} exit {c}\n{o}" for n, c, o in kubelet.runs)
        assert st.get("phase") == "Completed", f"{st}\n{logs}\n{r.logs(400)}\n{_dump(kube, ns)}"
        codes = [c for _, c, _ in kubelet.runs]
        # One run stopped by SIGTERM (saved); a try that found the segment ending by itself (exit
        # 75 just before kube-scheduler's DELETE) may count as an interruption too: at most one
        # per try.
        assert codes.count(143) == 1 and codes[-1] == 0 and set(codes) == {75, 143, 0}, logs
        assert 1 <= st["interruptedCount"] <= attempts, (st, attempts, logs)
        assert codes.count(75) >= 1, codes
        # Every run after the first resumed exactly where the one before it saved.
        first, *rest = [o for _, _, o in kubelet.runs]
        assert "no checkpoint, starting from 1" in first, first
        for before, after in zip([o for _, _, o in kubelet.runs], rest, strict=False):
            saved = before.rsplit("checkpoint", 1)[1]
            assert "resumed from checkpoint.json: " in after, after
            pos = after.split("(next ", 1)[1].split(",", 1)[0]
            assert f"next {pos}," in saved, (before, after)
        stopped = next(o for _, c, o in kubelet.runs if c == 143)
        assert "stopped by signal 15, checkpoint saved at" in stopped
        result = json.loads((state / "result.json").read_text())
        assert (result["count"], result["sum"]) == (5761455, 279209790387276) and result["runs"] == len(codes)
        assert json.loads((state / "checkpoint.json").read_text())["segments"] == -(-(10**8 - 1) // SPAN)
        reasons = [e["reason"] for e in events(kube, ns, made["metadata"]["uid"])]
        assert reasons.count("Interrupted") == st["interruptedCount"], reasons
        assert reasons.count("SegmentEnded") + reasons.count("Interrupted") == len(codes) - 1, (reasons, codes)
        assert reasons.count("Completed") == 1 and "Failed" not in reasons, reasons
        # each run one segment (and a segment whose pod never got to run, back to waiting, one more)
        assert st["segment"] == len(codes) + reasons.count("Unschedulable") + reasons.count("Requeued"), (st, codes)
    finally:
        with contextlib.suppress(KubeApiError):
            kube.delete(f"/api/v1/persistentvolumes/{pv_name}")
