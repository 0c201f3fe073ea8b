"""The batch queue on the real control plane (issue 23): work in a gated queue waits (Jobs
suspended, bare pods gated), the reconciler releases it in fair-share order, gangs whole, nothing
while the queue is on hold, and usage survives a kill -9 of the reconciler.

The e2e bundle's gated queue is ``queued`` (conftest.py: the shipped ``batch``, which the other
tests run ungated). Each test pins its work to a node of its own, so other nodes change nothing.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cluster import wait_for
from conftest import QUEUED
from harness import (
    GANG,
    container,
    create,
    epoch,
    events,
    job,
    jobs_path,
    own_taint,
    own_tolerations,
    pods_path,
    start_reconciler,
    stop_reconcilers,
)

from webhook.contract import QUEUE_GATE, QUEUED_ANNOTATION, START_BY_ANNOTATION
from webhook.reconciler.usage import KEY, parse

pytestmark = pytest.mark.usefixtures("webhook_server")


@pytest.fixture
def queue_node(kube: Any):
    """A 4-CPU node for this test's pods alone: they select it (label ``e2e-queue``) and tolerate its
    taint (``own_taint``, valued with its name), which keeps other pods off it."""
    name = f"bg-q-{uuid.uuid4().hex[:6]}"
    kube.create_node(name, cpu="4", memory="16Gi", labels={"e2e-queue": name}, taints=own_taint(name))
    yield name
    kube.delete_node(name)


def queued_job(name: str, node: str, cpu: str, *, parallelism: int = 1, labels: dict[str, str] | None = None) -> dict:
    return job(name, parallelism=parallelism, completions=parallelism,
               labels={"batchgate.io/queue": QUEUED, **(labels or {})},
               containers=[container(cpu=cpu, memory="1Gi")], nodeSelector={"e2e-queue": node},
               tolerations=own_tolerations(node))


def suspended(kube: Any, ns: str, name: str) -> bool:
    return kube.get(jobs_path(ns, name))["spec"].get("suspend") is True


def pods_of(kube: Any, ns: str, name: str) -> list[dict]:
    return kube.get(pods_path(ns), labelSelector=f"batch.kubernetes.io/job-name={name}")["items"]


def run_pods_of(kube: Any, ns: str, name: str, count: int) -> None:
    """Play kubelet for the Job's bound pods: running from now."""
    def bound() -> list[dict] | None:
        pods = [p for p in pods_of(kube, ns, name) if p["spec"].get("nodeName")]
        return pods if len(pods) >= count else None
    for p in wait_for(bound, 60, message=f"{count} pods of {ns}/{name} bound"):
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running",
                           {"main": {"running": {"startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}})


def finish(kube: Any, ns: str, name: str) -> None:
    for p in pods_of(kube, ns, name):
        kube.set_pod_phase(ns, p["metadata"]["name"], "Succeeded", {"main": 0})


def usage_of(kube: Any, ns: str) -> dict[str, float]:
    cm = kube.get(f"/api/v1/namespaces/{ns}/configmaps/batchgate-usage")
    return dict(parse(cm["data"][KEY]).billing)


@pytest.fixture
def policies(webhook_server: Any) -> Path:
    return Path(webhook_server.server.policies)


def reconcile(kube: Any, ns: str, tmp_path: Path, policies: Path, identity: str, started: list) -> Any:
    r = start_reconciler(kube, ns, tmp_path / f"{identity}-{len(started)}.log", "--policies", str(policies),
                         "--resync", "20s", identity=identity, cluster_wide=True)
    started.append(r)
    return r.wait_ready()


def fill(kube: Any, ns: str, node: str, tmp_path: Path, policies: Path, identity: str, started: list) -> None:
    """A reconciler started, and a Job of the gated queue taking all 4 CPUs of ``node`` released and
    running: the node is full from now on."""
    create(kube, ns, queued_job("full", node, "4"))
    reconcile(kube, ns, tmp_path, policies, identity, started)
    wait_for(lambda: not suspended(kube, ns, "full"), 60, message="the first Job released")
    run_pods_of(kube, ns, "full", 1)


def test_the_lighter_tenant_goes_first_and_usage_survives_a_kill(kube, namespace, queue_node, tmp_path, policies):
    """The queue with ``promise: fair-share`` (docs/admin/queues.md): the heavy tenant's Jobs were
    promised the end of hog's 24 h limit, and fair share may still put the light tenant's later Jobs
    ahead of them (under the default, ``deadline``, those promises would hold them back)."""
    heavy, light = namespace, kube.create_namespace(prefix="e2e-queue-light")
    policies = with_fair_share_promises(policies, tmp_path)
    started: list = []
    try:
        # what a pod of a gated queue gets at CREATE, read back: the gate; a Job: suspended and marked
        bare = create(kube, heavy, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "bare", "labels": {"batchgate.io/queue": QUEUED}},
            "spec": {"containers": [container(cpu="100m")], "nodeSelector": {"e2e-queue": "nowhere"}}})
        assert {"name": QUEUE_GATE} in bare["spec"]["schedulingGates"]
        stored = create(kube, heavy, queued_job("hog", queue_node, "4"))
        assert stored["spec"]["suspend"] is True and stored["metadata"]["annotations"][QUEUED_ANNOTATION] == "true"
        # ... and its owner cannot release it
        with pytest.raises(Exception, match="only batchgate's reconciler"):
            kube.request("PATCH", jobs_path(heavy, "hog"), {"spec": {"suspend": False}}, as_user="alice",
                         content_type="application/merge-patch+json")

        reconcile(kube, heavy, tmp_path, policies, "r1", started)
        wait_for(lambda: not suspended(kube, heavy, "hog"), 60, message="the first Job on an empty node released")
        run_pods_of(kube, heavy, "hog", 1)
        for i in range(3):  # the heavy tenant queues three more, early
            create(kube, heavy, queued_job(f"a{i}", queue_node, "2"))
        wait_for(lambda: usage_of(kube, heavy).get(heavy, 0) > 0, 60, message="the heavy tenant's usage stored")
        time.sleep(1)
        for i in range(2):  # the light tenant, later
            create(kube, light, queued_job(f"b{i}", queue_node, "2"))
        time.sleep(3)
        assert all(suspended(kube, heavy, f"a{i}") for i in range(3)) and suspended(kube, light, "b0")

        # usage outlives the reconciler: kill -9, start another, the stored figure goes on from where it was
        before = usage_of(kube, heavy)[heavy]
        started[0].kill()
        reconcile(kube, heavy, tmp_path, policies, "r2", started)
        wait_for(lambda: usage_of(kube, heavy)[heavy] > before, 60, message="usage accrued on top of the stored one")

        finish(kube, heavy, "hog")  # room for two 2-CPU Jobs: the light tenant's, though submitted later
        wait_for(lambda: not suspended(kube, light, "b0") and not suspended(kube, light, "b1"), 60,
                 message="the light tenant's Jobs released first")
        assert all(suspended(kube, heavy, f"a{i}") for i in range(3))
        events = kube.get(f"/api/v1/namespaces/{light}/events")["items"]
        assert any(e["reason"] == "Released" and e["involvedObject"]["name"] == "b0" for e in events)
        told = [e["message"] for e in kube.get(f"/api/v1/namespaces/{heavy}/events")["items"]
                if e["reason"] == "Queued" and e["involvedObject"]["name"] == "a0"]
        assert len(told) == 1 and f"waits in queue {QUEUED!r}" in told[0], told
    finally:
        stop_reconcilers(started)
        kube.delete_namespace(light)


def with_fair_share_promises(policies: Path, tmp_path: Path) -> Path:
    """The e2e bundle with the gated queue's ``promise: fair-share``."""
    return queue_edited(policies, tmp_path, "fair-share", "      state: open\n      promise: fair-share\n")


def in_state(policies: Path, tmp_path: Path, state: str) -> Path:
    """The e2e bundle with the gated queue in ``state``."""
    return queue_edited(policies, tmp_path, state, f"      state: {state}\n")


def queue_edited(policies: Path, tmp_path: Path, name: str, lines: str) -> Path:
    """The e2e bundle (a copy in ``tmp_path/name``) with the gated queue's ``state: open`` line
    replaced by ``lines``."""
    out = tmp_path / name
    shutil.copytree(policies, out)
    text = (out / "bundle.yaml").read_text()
    queue = f"    - name: {QUEUED}\n      priorityClass: batchgate-batch\n      timeLimit: {{default: 24h, max: 7d}}\n"
    assert queue + "      state: open\n" in text
    (out / "bundle.yaml").write_text(text.replace(queue + "      state: open\n", queue + lines))
    return out


def test_a_gang_starts_whole_and_a_held_queue_releases_nothing(kube, namespace, queue_node, tmp_path, policies):
    ns = namespace
    held = in_state(policies, tmp_path, "hold")
    started: list = []
    try:
        create(kube, ns, queued_job("half", queue_node, "2"))
        lost = queued_job("lost", "nowhere", "1")
        lost["spec"]["template"]["spec"]["volumes"] = [{"name": "data", "configMap": {"name": "not-there"}}]
        create(kube, ns, lost)
        reconcile(kube, ns, tmp_path, held, "held", started)
        # told at once, while it waits, not when its turn comes
        wait_for(lambda: [e for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
                          if e["reason"] == "VolumeMissing" and "ConfigMap " + ns + "/not-there" in e["message"]],
                 60, message="a Warning naming the missing ConfigMap")
        assert suspended(kube, ns, "half"), "a queue on hold released work"
        started[0].kill()

        reconcile(kube, ns, tmp_path, policies, "open", started)
        wait_for(lambda: not suspended(kube, ns, "half"), 60, message="released once the queue is open")
        run_pods_of(kube, ns, "half", 1)
        create(kube, ns, queued_job("gang", queue_node, "1", parallelism=3, labels=GANG))
        time.sleep(5)
        assert suspended(kube, ns, "gang") and not pods_of(kube, ns, "gang"), "3 pods released where 2 fit"
        finish(kube, ns, "half")
        wait_for(lambda: not suspended(kube, ns, "gang"), 60, message="the gang released when all 3 fit")
        run_pods_of(kube, ns, "gang", 3)  # all three bound together
    finally:
        stop_reconcilers(started)


def test_a_bare_pod_group_waits_until_its_most_cpu_and_its_most_memory_fit(kube, namespace, queue_node, tmp_path,
                                                                            policies):
    """A group of two bare pods: one asks for more cpu (2, 1Gi), the other for more memory (1, 12Gi);
    8Gi of the node's 16Gi are taken. Placed as the pod with more cpu alone (4 cpu, 2Gi), both
    would fit; together they need 13Gi. Each pod is placed as it is: the group waits gated, promised
    a start, and goes whole when the 8Gi are freed (on the one node, where two pods of the most cpu
    and the most memory, 24Gi, would never fit)."""
    ns = namespace
    started: list = []
    group = {"batchgate.io/queue": QUEUED, "batchgate.io/pod-group": "g", "batchgate.io/pod-group-size": "2"}
    names = ("g-0", "g-1")

    def gated(name: str) -> bool:
        return {"name": QUEUE_GATE} in (kube.get(pods_path(ns, name))["spec"].get("schedulingGates") or [])
    try:
        filler = queued_job("filler", queue_node, "100m")
        filler["spec"]["template"]["spec"]["containers"] = [container(cpu="100m", memory="8Gi")]
        create(kube, ns, filler)
        reconcile(kube, ns, tmp_path, policies, "r1", started)
        wait_for(lambda: not suspended(kube, ns, "filler"), 60, message="the filler released")
        run_pods_of(kube, ns, "filler", 1)
        for name, cpu, memory in (("g-0", "2", "1Gi"), ("g-1", "1", "12Gi")):
            create(kube, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": group},
                              "spec": {"containers": [container(cpu=cpu, memory=memory)],
                                       "nodeSelector": {"e2e-queue": queue_node},
                                       "tolerations": own_tolerations(queue_node)}})
        wait_for(lambda: any((kube.get(pods_path(ns, n))["metadata"].get("annotations") or {}).get(START_BY_ANNOTATION)
                             for n in names), 60, message="the group placed after the filler (a start-by)")
        assert gated("g-0") and gated("g-1"), "the group released where 13Gi do not fit"
        finish(kube, ns, "filler")
        wait_for(lambda: not gated("g-0") and not gated("g-1"), 60, message="the group released whole")
    finally:
        stop_reconcilers(started)


def start_by(kube: Any, ns: str, name: str) -> str | None:
    return (kube.get(jobs_path(ns, name))["metadata"].get("annotations") or {}).get(START_BY_ANNOTATION)


def test_backfill_holds_the_big_jobs_reservation_and_the_promise_survives_a_restart(
        kube, namespace, queue_node, tmp_path, policies):
    """Issue 24's case: a node busy for 3 more minutes; a job needing the whole node gets a start-by
    then; a short job that ends before it starts now (backfill), a long one that would delay it
    waits although it fits now; a later job of the same priority does not move the promise, nor
    does a restart of the reconciler."""
    ns = namespace
    started: list = []
    limit = "batchgate.io/time-limit"
    try:
        def timed(name: str, cpu: str, minutes: int) -> dict:
            j = queued_job(name, queue_node, cpu)
            j["metadata"]["annotations"] = {limit: f"{minutes}m"}
            return j

        create(kube, ns, timed("busy", "2", 3))
        reconcile(kube, ns, tmp_path, policies, "r1", started)
        wait_for(lambda: not suspended(kube, ns, "busy"), 60, message="busy released")
        run_pods_of(kube, ns, "busy", 1)
        wait_for(lambda: (kube.get(jobs_path(ns, "busy"))["metadata"].get("annotations") or {}).get(
            "batchgate.io/deadline"), 60, message="busy's deadline recorded")
        create(kube, ns, timed("big", "4", 60))
        promise = wait_for(lambda: start_by(kube, ns, "big"), 60, message="the big job's start-by")
        deadline = kube.get(jobs_path(ns, "busy"))["metadata"]["annotations"]["batchgate.io/deadline"]
        assert promise == deadline, (promise, deadline)  # when busy's time limit frees the node
        create(kube, ns, timed("short", "1", 1))
        create(kube, ns, timed("long", "1", 60))
        wait_for(lambda: not suspended(kube, ns, "short"), 60, message="the short job backfilled")
        create(kube, ns, timed("later", "4", 60))
        later = wait_for(lambda: start_by(kube, ns, "later"), 60, message="the later job's start-by")
        assert later > promise
        assert suspended(kube, ns, "long") and suspended(kube, ns, "big")
        assert start_by(kube, ns, "big") == promise

        started[0].kill()
        reconcile(kube, ns, tmp_path, policies, "r2", started)
        time.sleep(5)
        assert start_by(kube, ns, "big") == promise and suspended(kube, ns, "long")

        finish(kube, ns, "busy")  # ends early: the big job goes before its start-by
        run_pods_of(kube, ns, "short", 1)
        finish(kube, ns, "short")
        wait_for(lambda: not suspended(kube, ns, "big"), 60, message="the big job released")
        assert suspended(kube, ns, "long") and suspended(kube, ns, "later")
    finally:
        stop_reconcilers(started)


def test_a_promise_holds_against_a_later_lighter_arrival_that_would_delay_it(
        kube, namespace, queue_node, tmp_path, policies):
    """Issue 24: a start-by never moves later for later work of the same priority. The heavy tenant's
    Job fills the node for 3 minutes (its time limit) and its next Job, the whole node for an
    hour, is promised that end. A light tenant's Job of the same shape and priority arrives later:
    fair share ranks it ahead, and placed first it would take the node then and move the promise an
    hour later. The promise is at risk, so the heavy Job keeps its place (queue.place): its stored
    start-by is unchanged and no StartByMoved is told; the light Job is promised after it; when the
    node frees, the heavy Job is released, not the light one."""
    heavy, light = namespace, kube.create_namespace(prefix="e2e-queue-light")
    started: list = []

    def timed(name: str, minutes: int) -> dict:
        j = queued_job(name, queue_node, "4")
        j["metadata"]["annotations"] = {"batchgate.io/time-limit": f"{minutes}m"}
        return j
    try:
        create(kube, heavy, timed("full", 3))
        reconcile(kube, heavy, tmp_path, policies, "r1", started)
        wait_for(lambda: not suspended(kube, heavy, "full"), 60, message="the first Job released")
        run_pods_of(kube, heavy, "full", 1)
        uid = create(kube, heavy, timed("big", 60))["metadata"]["uid"]
        promise = wait_for(lambda: start_by(kube, heavy, "big"), 60, message="the heavy Job's start-by")
        wait_for(lambda: usage_of(kube, heavy).get(heavy, 0) > 0, 90, message="the heavy tenant's usage stored")
        create(kube, light, timed("small", 60))
        later = wait_for(lambda: (kube.get(jobs_path(light, "small"))["metadata"].get("annotations") or {}).get(
            START_BY_ANNOTATION), 60, message="the light Job's start-by")
        assert epoch(later) >= epoch(promise) + 59 * 60, (later, promise)  # after the heavy Job's hour
        time.sleep(3)  # passes after it: the promise stays
        assert start_by(kube, heavy, "big") == promise
        assert not events(kube, heavy, uid=uid, reason="StartByMoved")

        finish(kube, heavy, "full")
        wait_for(lambda: not suspended(kube, heavy, "big"), 60, message="the promised Job released")
        assert suspended(kube, light, "small")
    finally:
        stop_reconcilers(started)
        kube.delete_namespace(light)


def test_a_queue_put_on_hold_withdraws_its_promises_and_opened_again_promises_afresh(
        kube, namespace, queue_node, tmp_path, policies):
    """A held queue reserves nothing and nobody can date its opening (docs/admin/queues.md, States):
    the start-by of its waiting work is removed, with a Warning ``StartByWithdrawn`` saying the
    queue is on hold; opened again, the work is promised afresh."""
    ns = namespace
    started: list = []
    try:
        fill(kube, ns, queue_node, tmp_path, policies, "open", started)
        uid = create(kube, ns, queued_job("waits", queue_node, "2"))["metadata"]["uid"]
        promise = wait_for(lambda: start_by(kube, ns, "waits"), 60, message="the waiting Job's start-by")
        started[0].kill()

        reconcile(kube, ns, tmp_path, in_state(policies, tmp_path, "hold"), "held", started)
        wait_for(lambda: start_by(kube, ns, "waits") is None, 60, message="the promise withdrawn while on hold")
        (told,) = events(kube, ns, uid=uid, reason="StartByWithdrawn")
        assert told["type"] == "Warning" and f"its promised start {promise} is withdrawn" in told["message"]
        assert f"queue {QUEUED!r} is on hold" in told["message"], told["message"]
        assert suspended(kube, ns, "waits")
        started[1].kill()

        reconcile(kube, ns, tmp_path, policies, "reopened", started)
        again = wait_for(lambda: start_by(kube, ns, "waits"), 60, message="promised afresh once open")
        assert epoch(again) >= epoch(promise) - 60 and suspended(kube, ns, "waits")
    finally:
        stop_reconcilers(started)


def test_work_gated_before_its_namespace_was_excluded_is_released(kube, namespace, queue_node, tmp_path, policies):
    """An admin adds a namespace to the bundle's exclude after its work was gated: the gate and the
    queued suspension are batchgate's and nothing else would lift them, so the reconciler releases the
    work at once, whatever the room (the node here is full), with a Released Event saying why."""
    ns = namespace
    excluded = tmp_path / "excluded"
    shutil.copytree(policies, excluded)
    text = (excluded / "bundle.yaml").read_text()
    line = "    namespaces: [kube-system, kube-public, kube-node-lease, batchgate-system]\n"
    assert line in text
    (excluded / "bundle.yaml").write_text(text.replace(line, line.replace("]", f", {ns}]")))
    started: list = []
    try:
        fill(kube, ns, queue_node, tmp_path, policies, "managed", started)
        create(kube, ns, queued_job("held", queue_node, "2"))
        create(kube, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "gated", "labels": {"batchgate.io/queue": QUEUED}},
            "spec": {"containers": [container(cpu="2", memory="1Gi")], "nodeSelector": {"e2e-queue": queue_node},
                     "tolerations": own_tolerations(queue_node)}})
        wait_for(lambda: start_by(kube, ns, "held"), 60, message="the held Job placed behind the full node")
        assert suspended(kube, ns, "held")
        assert {"name": QUEUE_GATE} in kube.get(pods_path(ns, "gated"))["spec"]["schedulingGates"]
        started[0].kill()

        reconcile(kube, ns, tmp_path, excluded, "excluded", started)
        wait_for(lambda: not suspended(kube, ns, "held"), 60, message="the held Job released once excluded")
        stored = kube.get(jobs_path(ns, "held"))
        assert QUEUED_ANNOTATION not in (stored["metadata"].get("annotations") or {})
        wait_for(lambda: not any(g["name"] == QUEUE_GATE for g in
                                 kube.get(pods_path(ns, "gated"))["spec"].get("schedulingGates") or []),
                 60, message="the gated pod's gate lifted once excluded")
        why = [e["message"] for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
               if e["reason"] == "Released" and e["involvedObject"]["name"] in ("held", "gated")]
        assert len(why) == 2 and all("is excluded from batchgate now" in m for m in why), why
    finally:
        stop_reconcilers(started)


def easy_bundle(policies: Path, tmp_path: Path, backfill: str = "easy") -> Path:
    """The e2e bundle with ``backfill: easy`` (or another ``backfill``) on the gated queue."""
    easy = tmp_path / backfill
    shutil.copytree(policies, easy)
    text = (easy / "bundle.yaml").read_text()
    queue = f"    - name: {QUEUED}\n      priorityClass: batchgate-batch\n      timeLimit: {{default: 24h, max: 7d}}\n"
    assert queue + "      state: open\n" in text
    (easy / "bundle.yaml").write_text(text.replace(queue + "      state: open\n",
                                                   queue + f"      state: open\n      backfill: {backfill}\n"))
    return easy


def timed(name: str, node: str, cpu: str, minutes: int) -> dict:
    """A queued Job with a time limit of ``minutes``."""
    j = queued_job(name, node, cpu)
    j["metadata"]["annotations"] = {"batchgate.io/time-limit": f"{minutes}m"}
    return j


def deadline(kube: Any, ns: str, name: str) -> str | None:
    return (kube.get(jobs_path(ns, name))["metadata"].get("annotations") or {}).get("batchgate.io/deadline")


def promised(kube: Any, ns: str, node: str, name: str, until: str) -> str:
    """A job ``name`` for the whole node, an hour, queued; its start-by, ``until``'s deadline."""
    create(kube, ns, timed(name, node, "4", 60))
    promise: str = wait_for(lambda: start_by(kube, ns, name), 60, message=f"{name}'s start-by")
    assert promise == deadline(kube, ns, until), (promise, deadline(kube, ns, until))
    return promise


def busy(kube: Any, ns: str, node: str, jobs: tuple[tuple[str, str, int], ...], start: Any) -> None:
    """``jobs`` (name, CPUs, minutes) queued, a reconciler started (``start``), each released and
    running, its deadline recorded."""
    for name, cpu, minutes in jobs:
        create(kube, ns, timed(name, node, cpu, minutes))
    start()
    for name, _, _ in jobs:
        wait_for(lambda name=name: not suspended(kube, ns, name), 60, message=f"{name} released")
        run_pods_of(kube, ns, name, 1)
        wait_for(lambda name=name: deadline(kube, ns, name), 60, message=f"{name}'s deadline recorded")


def test_easy_backfill_releases_a_job_that_delays_only_the_second_and_the_promised_head_keeps_its_place(
        kube, namespace, queue_node, tmp_path, policies):
    """A queue with ``backfill: easy`` (docs/admin/queues.md): the 4-CPU node holds busy1 (2 CPUs,
    6 minutes) and busy2 (1 CPU, 20 minutes). The head needs the whole node: its start-by is busy2's
    deadline. The second (3 CPUs for 5 minutes) would fit from busy1's deadline, before the head; it
    is not the head, so it reserves nothing and gets no start-by, and the late job (1 CPU for 10
    minutes), which fits now and ends before the head's start but runs into the second's place, is
    released. Then a lighter account (no usage) queues a whole-node job: fair share ranks it ahead
    of the head, but the head keeps its place, its reservation and its promise (no StartByMoved):
    when the node frees, the head is released, and the newcomer becomes the head and gets its
    start-by, the head's deadline."""
    ns, light = namespace, kube.create_namespace(prefix="e2e-queue-light")
    started: list = []
    try:
        busy(kube, ns, queue_node, (("busy1", "2", 6), ("busy2", "1", 20)),
             lambda: reconcile(kube, ns, tmp_path, easy_bundle(policies, tmp_path), "easy", started))
        wait_for(lambda: usage_of(kube, ns).get(ns, 0) > 0, 60, message="the busy account's usage stored")
        promise = promised(kube, ns, queue_node, "head", "busy2")
        create(kube, ns, timed("second", queue_node, "3", 5))
        wait_for(lambda: events(kube, ns, reason="Queued", uid=kube.get(jobs_path(ns, "second"))["metadata"]["uid"]),
                 60, message="the second seen by a pass")
        create(kube, ns, timed("late", queue_node, "1", 10))
        wait_for(lambda: not suspended(kube, ns, "late"), 60, message="under easy, the late job released")
        run_pods_of(kube, ns, "late", 1)
        assert suspended(kube, ns, "second") and start_by(kube, ns, "second") is None, "behind the head: no promise"

        create(kube, light, timed("newcomer", queue_node, "4", 60))
        newcomer = kube.get(jobs_path(light, "newcomer"))["metadata"]["uid"]
        wait_for(lambda: events(kube, light, reason="Queued", uid=newcomer), 60, message="the newcomer seen by a pass")
        for name in ("busy1", "busy2", "late"):  # all end early: the node is free for one whole-node job
            finish(kube, ns, name)
        wait_for(lambda: not suspended(kube, ns, "head"), 60, message="the promised head released first")
        assert suspended(kube, light, "newcomer") and suspended(kube, ns, "second")
        head = kube.get(jobs_path(ns, "head"))
        assert head["metadata"]["annotations"][START_BY_ANNOTATION] == promise, "the promise never moved"
        told = [e["reason"] for e in events(kube, ns, uid=head["metadata"]["uid"]) if e["reason"].startswith("StartBy")]
        assert told == ["StartBy"], told
        run_pods_of(kube, ns, "head", 1)
        ends = wait_for(lambda: deadline(kube, ns, "head"), 60, message="the head's deadline recorded")
        nxt = wait_for(lambda: start_by(kube, light, "newcomer"), 60, message="the newcomer's start-by, as the head")
        assert abs(epoch(nxt) - epoch(ends)) <= 60, (nxt, ends)
        assert start_by(kube, ns, "second") is None
    finally:
        stop_reconcilers(started)
        kube.delete_namespace(light)


def test_promises_made_before_a_queue_turns_easy_stay_backed(kube, namespace, queue_node, tmp_path, policies):
    """The same node under conservative backfill: the head, the second and the late job are each
    promised a start, and the late job is held (it would delay the second). The admin turns the queue
    easy and the reconciler restarts: the promises made stay backed by reservations, so the late job
    is still held and no start-by moves; a tiny job that delays nobody is released (a pass ran)."""
    ns = namespace
    started: list = []
    try:
        busy(kube, ns, queue_node, (("busy1", "2", 6), ("busy2", "1", 20)),
             lambda: reconcile(kube, ns, tmp_path, policies, "conservative", started))
        promise = promised(kube, ns, queue_node, "head", "busy2")
        create(kube, ns, timed("second", queue_node, "3", 5))
        second = wait_for(lambda: start_by(kube, ns, "second"), 60, message="the second's start-by")
        assert second == deadline(kube, ns, "busy1"), (second, deadline(kube, ns, "busy1"))  # before the head's
        create(kube, ns, timed("late", queue_node, "1", 10))
        late = wait_for(lambda: start_by(kube, ns, "late"), 60, message="the late job placed (after the second)")
        assert suspended(kube, ns, "late"), "conservative backfill released a job that delays the second"

        started[0].kill()
        reconcile(kube, ns, tmp_path, easy_bundle(policies, tmp_path), "easy", started)
        create(kube, ns, timed("tiny", queue_node, "1", 1))
        wait_for(lambda: not suspended(kube, ns, "tiny"), 60, message="under easy, the tiny job released")
        assert suspended(kube, ns, "late") and suspended(kube, ns, "head") and suspended(kube, ns, "second")
        assert [start_by(kube, ns, n) for n in ("head", "second", "late")] == [promise, second, late]
        assert not events(kube, ns, reason="StartByMoved")
    finally:
        stop_reconcilers(started)


def test_a_user_cannot_grow_a_released_job_but_may_resize_it_queued(kube, namespace, queue_node, tmp_path, policies):
    """Kubernetes lets a running Job's parallelism grow: alice, whose Job the queue released with 2
    pods, would take room it never gave. The webhook refuses the raise (lowering frees room and
    passes); suspended, the Job is queued again and the queue plans the size it has then."""
    ns = namespace
    started: list = []
    patch = {"content_type": "application/merge-patch+json", "as_user": "alice"}
    j = job("j", parallelism=2, labels={"batchgate.io/queue": QUEUED},
            containers=[container(cpu="1", memory="1Gi")], nodeSelector={"e2e-queue": queue_node},
            tolerations=own_tolerations(queue_node))
    try:
        create(kube, ns, j)
        reconcile(kube, ns, tmp_path, policies, "r1", started)
        wait_for(lambda: not suspended(kube, ns, "j"), 60, message="j released with 2 pods")
        with pytest.raises(Exception, match=f"runs in queue '{QUEUED}'.*raising spec.parallelism from 2 to 50.*"
                                             r"suspend the Job \(spec.suspend: true\)"):
            kube.request("PATCH", jobs_path(ns, "j"), {"spec": {"parallelism": 50}}, **patch)
        assert kube.get(jobs_path(ns, "j"))["spec"]["parallelism"] == 2
        kube.request("PATCH", jobs_path(ns, "j"), {"spec": {"parallelism": 1}}, **patch)  # lowering frees room
        assert kube.get(jobs_path(ns, "j"))["spec"]["parallelism"] == 1

        # suspended with a new size in the same request: queued again, and the queue plans 5 pods
        # (4 CPUs: they do not fit), then 2 (they do)
        kube.request("PATCH", jobs_path(ns, "j"), {"spec": {"suspend": True, "parallelism": 5}}, **patch)
        stored = kube.get(jobs_path(ns, "j"))
        assert stored["spec"]["parallelism"] == 5 and stored["spec"]["suspend"] is True
        uid = stored["metadata"]["uid"]
        (told,) = wait_for(lambda: events(kube, ns, uid=uid, reason="Queued"), 60, message="j queued again")
        assert "room for all its 5 pods" in told["message"], told
        assert suspended(kube, ns, "j")
        kube.request("PATCH", jobs_path(ns, "j"), {"spec": {"parallelism": 2}}, **patch)
        wait_for(lambda: not suspended(kube, ns, "j"), 60, message="j released again at its new size")
        assert kube.get(jobs_path(ns, "j"))["spec"]["parallelism"] == 2
    finally:
        stop_reconcilers(started)


def test_backfill_start_by_releases_into_a_promises_room_to_spare_and_the_promise_holds(
        kube, namespace, queue_node, tmp_path, policies):
    """``backfill: start-by`` (docs/admin/queues.md): the 4-CPU node holds busy1 (2 CPUs, 20 minutes)
    and busy2 (2 CPUs, 6 minutes); big (the whole node, an hour) is promised busy1's deadline, long
    (2 CPUs, an hour) big's end. busy1 ends early: big's reservation moves to busy2's deadline, the
    start-bys stay. mid (2 CPUs, 10 minutes) fits now and would delay big's reservation, not its
    start-by nor long's: conservative backfill holds it (it is promised after big); restarted with
    ``backfill: start-by`` the reconciler releases it and holds long (it fits now too, but would
    start big an hour late), and no start-by moves."""
    ns = namespace
    started: list = []
    try:
        busy(kube, ns, queue_node, (("busy1", "2", 20), ("busy2", "2", 6)),
             lambda: reconcile(kube, ns, tmp_path, policies, "conservative", started))
        promise = promised(kube, ns, queue_node, "big", "busy1")
        create(kube, ns, timed("long", queue_node, "2", 60))
        long = wait_for(lambda: start_by(kube, ns, "long"), 60, message="long's start-by")
        finish(kube, ns, "busy1")  # big's reservation: busy2's deadline now; its promise stays
        create(kube, ns, timed("mid", queue_node, "2", 10))
        wait_for(lambda: start_by(kube, ns, "mid"), 60, message="mid placed behind big")
        assert suspended(kube, ns, "mid"), "conservative backfill released a job that delays big's reservation"

        started[0].kill()
        reconcile(kube, ns, tmp_path, easy_bundle(policies, tmp_path, "start-by"), "start-by", started)
        wait_for(lambda: not suspended(kube, ns, "mid"), 60, message="under start-by, mid released")
        time.sleep(3)  # passes after it
        assert suspended(kube, ns, "long") and suspended(kube, ns, "big")
        assert [start_by(kube, ns, n) for n in ("big", "long")] == [promise, long]
        assert not events(kube, ns, reason="StartByMoved")
    finally:
        stop_reconcilers(started)
