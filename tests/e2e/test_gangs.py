"""Which Jobs are gangs, and what a gang member's failure does, against a real API server with the
stock controller-manager (issue 13 item 2).

The webhook decides at admission (a Job that does not ask is no gang); the reconciler runs
in-process (its Controller, every read and write against kube-apiserver), and the tests play the
kubelet through the status subresource. The pods stay unscheduled (a node selector nothing
matches), so a deleted pod is gone at once, as it would be after a kubelet stopped it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cluster import require_components
from harness import GANG, container, create_and_read, job, unique

from tests.conftest import POLICIES
from webhook.reconciler.controller import Controller
from webhook.reconciler.kube import KubeApi
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.rules import load_bundle

GROUP, SIZE, MARK = "batchgate.io/pod-group", "batchgate.io/pod-group-size", "batchgate.io/gang-restart"
NOWHERE = {"batchgate.io/e2e": "nowhere"}  # unschedulable: the pods stay unbound


@pytest.fixture(scope="module")
def ns(module_namespace: str) -> str:
    return module_namespace


@pytest.fixture
def api(kube: Any) -> Iterator[KubeApi]:
    client = KubeApi.connect(kube.kubeconfig("admin"))
    yield client
    client.close()


def reconcile(api: KubeApi, ns: str) -> list[str]:
    """Reconciler passes over ``ns`` (each a fresh list, so it sees what the API server has now),
    as the running loop makes them: a pass whose earlier write on the Job met the Job controller's
    own write (a Conflict on its deadline or expected-start bookkeeping) skips the Job's later
    actions, and the next pass plans them again from the fresh object. The lines of the pass in
    which nothing on the gang conflicted; a gang action must go through within a few passes."""
    queues = QueuePolicy.from_bundle(load_bundle(POLICIES))
    for _ in range(5):
        c = Controller(api, Settings(leader_elect=False, namespace=ns, queues=queues))
        c.cache.list_once()
        outcomes = c.actuator.execute(c.plan_now().actions)
        gang = [o for o in outcomes if o.action.kind.startswith("gang-")]
        if any(o.result == "conflict" for o in gang):
            continue
        assert all(o.result == "done" for o in gang), [(o.action.line(), o.error) for o in gang]
        return [o.action.line() for o in outcomes]
    raise AssertionError(f"a gang action conflicted in 5 passes: {[(o.action.line(), o.error) for o in gang]}")


def job_pods(kube: Any, ns: str, uid: str) -> list[dict[str, Any]]:
    return kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"controller-uid={uid}")["items"]  # type: ignore[no-any-return]


def active(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((p for p in pods if not p["metadata"].get("deletionTimestamp")
                   and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")),
                  key=lambda p: p["metadata"]["name"])


def exactly(n: int, pods: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return pods if len(pods) == n else None


def job_status(kube: Any, ns: str, name: str) -> dict[str, Any]:
    return kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}").get("status") or {}  # type: ignore[no-any-return]


def gang_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("gang-")]


def test_a_failure_tolerant_parallel_job_is_no_gang_and_survives_a_pod_failure(kube, webhook_server, ns, api):
    require_components(kube, "kube-controller-manager")
    name = unique("frames")
    body = job(name, parallelism=3, containers=[container(cpu="100m", memory="64Mi")], nodeSelector=NOWHERE)
    body["spec"]["backoffLimit"] = 4  # a work queue that retries a worker on its own
    stored = create_and_read(kube, ns, body)
    labels = stored["spec"]["template"]["metadata"].get("labels") or {}
    assert GROUP not in labels and SIZE not in labels, labels  # what the API server stored: no gang
    uid = stored["metadata"]["uid"]
    pods = kube.wait_for(lambda: exactly(3, active(job_pods(kube, ns, uid))), 60,
                         message="the Job's 3 pods")
    assert all(GROUP not in (p["metadata"].get("labels") or {}) for p in pods)
    for p in pods:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
    victim = pods[0]["metadata"]["name"]
    kube.set_pod_phase(ns, victim, "Failed", {"main": 1})

    assert gang_lines(reconcile(api, ns)) == []
    # the Job controller replaces the one worker; the others run on, the Job stays
    kube.wait_for(lambda: job_status(kube, ns, name).get("failed") == 1, 60, message="the failure counted")
    kube.wait_for(lambda: len(active(job_pods(kube, ns, uid))) == 3, 60, message="a replacement worker")
    survivors = {p["metadata"]["uid"] for p in active(job_pods(kube, ns, uid))}
    assert {p["metadata"]["uid"] for p in pods[1:]} <= survivors
    assert not kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")["metadata"].get("deletionTimestamp")


def test_an_explicit_gang_starts_over_together_then_fails_by_its_own_backoff_limit(kube, webhook_server, ns, api):
    require_components(kube, "kube-controller-manager")
    name = unique("ranks")
    body = job(name, parallelism=2, completions=2, labels=GANG,
               containers=[container(cpu="100m", memory="64Mi")], nodeSelector=NOWHERE)
    body["spec"]["backoffLimit"] = 1  # one restart of the whole gang, then the Job has failed
    stored = create_and_read(kube, ns, body)
    tmpl = stored["spec"]["template"]["metadata"]["labels"]
    assert tmpl[GROUP] == name and tmpl[SIZE] == "2"
    uid = stored["metadata"]["uid"]
    first = kube.wait_for(lambda: exactly(2, active(job_pods(kube, ns, uid))), 60,
                          message="the gang's 2 pods")
    for p in first:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
    failed, partner = first
    kube.set_pod_phase(ns, failed["metadata"]["name"], "Failed", {"main": 3})

    lines = gang_lines(reconcile(api, ns))
    assert len(lines) == 1 and lines[0].startswith("gang-restart") and f"Job {ns}/{name}" in lines[0], lines
    assert "1 of the 1 failures its backoffLimit allows" in lines[0]
    # what the API server has now: the partner went, the failed pod stays (its logs, the Job's
    # count) marked with its own uid, the Job stays
    pods = {p["metadata"]["uid"]: p for p in job_pods(kube, ns, uid)}
    assert partner["metadata"]["uid"] not in pods or pods[partner["metadata"]["uid"]]["metadata"].get("deletionTimestamp")
    kept = pods[failed["metadata"]["uid"]]
    assert kept["metadata"]["annotations"][MARK] == failed["metadata"]["uid"]
    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    (ev,) = [e for e in events if e["reason"] == "GangRestarted" and e["involvedObject"].get("uid") == uid]
    assert ev["type"] == "Warning" and failed["metadata"]["name"] in ev["message"] and "code 3" in ev["message"]

    # the Job controller makes the whole gang again; the failure it counted is dealt with
    second = kube.wait_for(lambda: exactly(2, active(job_pods(kube, ns, uid))), 90,
                           message="the gang made again")
    assert not {p["metadata"]["uid"] for p in second} & {p["metadata"]["uid"] for p in first}
    # The Job controller writes its count after it made the pods of the same sync (both at once
    # when the partner was gone before it looked): the count may come a moment after them.
    kube.wait_for(lambda: job_status(kube, ns, name).get("failed") == 1, 60,
                  message=lambda: f"the Job's one failure counted; status {job_status(kube, ns, name)}")
    assert gang_lines(reconcile(api, ns)) == []

    # a second failure spends the Job's backoffLimit: its controller fails the Job and stops its pods
    for p in second:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
    kube.set_pod_phase(ns, second[0]["metadata"]["name"], "Failed", {"main": 3})
    assert gang_lines(reconcile(api, ns)) == []  # not batchgate's to do

    def failed_condition() -> dict[str, Any] | None:
        conds = job_status(kube, ns, name).get("conditions") or []
        return next((c for c in conds if c["type"] == "Failed" and c["status"] == "True"), None)

    cond = kube.wait_for(failed_condition, 90, message="the Job failed by its own backoffLimit")
    assert cond["reason"] == "BackoffLimitExceeded"
    kube.wait_for(lambda: active(job_pods(kube, ns, uid)) == [], 60, message="its pods stopped by the Job controller")
    assert gang_lines(reconcile(api, ns)) == []
    job_obj = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")  # kept, with its Failed condition
    assert not job_obj["metadata"].get("deletionTimestamp")


IGNORE_DISRUPTIONS = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def disruption_target(p: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (p.get("status") or {}).get("conditions") or []
                 if c["type"] == "DisruptionTarget" and c["status"] == "True"), None)


def test_a_member_evicted_by_a_drain_is_an_interruption_and_a_non_zero_exit_a_failure(kube, webhook_server, ns, api):
    """Kubernetes 1.26+ counts every pod deleted before it ended as a failure of its Job, unless the
    Job's podFailurePolicy says otherwise. A gang Job gets the rule Ignore on DisruptionTarget from the
    webhook; Kubernetes marks the pods it preempts, evicts or loses with that condition, and batchgate
    the partners it takes down. With backoffLimit 0 any counted failure fails the Job at once: an
    eviction (what kubectl drain does, through the Eviction API) and the gang's restart cost nothing,
    a container exiting non-zero fails it."""
    require_components(kube, "kube-controller-manager")
    name = unique("halo")
    body = job(name, parallelism=2, completions=2, labels=GANG,
               containers=[container(cpu="100m", memory="64Mi")], nodeSelector=NOWHERE)
    body["spec"]["backoffLimit"] = 0
    stored = create_and_read(kube, ns, body)
    assert stored["spec"]["podFailurePolicy"]["rules"] == [IGNORE_DISRUPTIONS]  # as the API server stored it
    assert stored["spec"]["podReplacementPolicy"] == "Failed"
    uid = stored["metadata"]["uid"]
    first = kube.wait_for(lambda: exactly(2, active(job_pods(kube, ns, uid))), 60, message="the gang's 2 pods")
    for p in first:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
    evicted, partner = first
    kube.create(f"/api/v1/namespaces/{ns}/pods/{evicted['metadata']['name']}/eviction",
                {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": evicted["metadata"]["name"], "namespace": ns}})

    lines = gang_lines(reconcile(api, ns))
    assert len(lines) == 1 and lines[0].startswith("gang-interrupted") and f"Job {ns}/{name}" in lines[0], lines
    assert evicted["metadata"]["name"] in lines[0] and "EvictionByEvictionAPI" in lines[0], lines
    pods = {p["metadata"]["uid"]: p for p in job_pods(kube, ns, uid)}
    # The partner, while the Job controller has not let it go: marked by batchgate, then deleted.
    if (kept := pods.get(partner["metadata"]["uid"])) is not None:
        assert kept["metadata"].get("deletionTimestamp")
        cond = disruption_target(kept)
        assert cond is not None and cond["reason"] == "BatchgateGangRestart", kept["status"]
        assert evicted["metadata"]["name"] in cond["message"]
    # The evicted pod keeps the Eviction API's reason, and is marked as dealt with.
    if (ev := pods.get(evicted["metadata"]["uid"])) is not None:
        assert (disruption_target(ev) or {}).get("reason") == "EvictionByEvictionAPI", ev["status"]
        assert ev["metadata"]["annotations"][MARK] == evicted["metadata"]["uid"]

    second = kube.wait_for(lambda: exactly(2, active(job_pods(kube, ns, uid))), 90, message="the gang made again")
    assert not {p["metadata"]["uid"] for p in second} & {p["metadata"]["uid"] for p in first}
    old = {p["metadata"]["uid"] for p in first}
    kube.wait_for(lambda: not old & {p["metadata"]["uid"] for p in job_pods(kube, ns, uid)}, 60,
                  message="the Job controller let the old pods go")
    st = job_status(kube, ns, name)
    assert not st.get("failed") and not [c for c in st.get("conditions") or [] if c["type"] == "Failed"], st
    assert gang_lines(reconcile(api, ns)) == []

    # A container exiting non-zero is a failure: the Job's backoffLimit 0 fails it, batchgate does nothing.
    for p in second:
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running")
    kube.set_pod_phase(ns, second[0]["metadata"]["name"], "Failed", {"main": 3})
    assert gang_lines(reconcile(api, ns)) == []

    def failed_condition() -> dict[str, Any] | None:
        conds = job_status(kube, ns, name).get("conditions") or []
        return next((c for c in conds if c["type"] == "Failed" and c["status"] == "True"), None)

    cond = kube.wait_for(failed_condition, 90, message="the Job failed by its backoffLimit")
    assert cond["reason"] == "BackoffLimitExceeded"  # (the partner it then stops counts as failed too)
