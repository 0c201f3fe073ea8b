"""Maintenance windows on a real API server: the CRD and its validation, the countdown on
nodes, and kube-scheduler keeping long jobs off a window's nodes.

The reconciler runs as a separate process (``batchgate reconcile``), as in
test_reconciler.py; kube-scheduler is the stock one, and nodes are fake (no kubelet).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import KubeApiError, now_rfc3339, require_components, wait_for
from harness import (
    Reconciler,
    container,
    create,
    epoch,
    job,
    own_taint,
    own_tolerations,
    pod,
    pods_path,
    start_reconciler,
    stop_reconcilers,
    unique,
)

REPO = Path(__file__).resolve().parents[2]
MW = "/apis/batchgate.io/v1alpha1/maintenancewindows"
CREATE_HOOK = "create.validate.batchgate.io"
UPDATE_HOOK = "update.validate.batchgate.io"
COUNTDOWN = "batchgate.io/maintenance-in-minutes"
MAINT_ANN = "batchgate.io/maintenance"
OWN = "maintenance"  # the tag of this module's nodes (harness.own_taint)
TOLERATE = own_tolerations(OWN)


def sample(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((REPO / "policies/maintenance-window/samples" / name).read_text())
    return obj


@pytest.fixture
def windows(kube: Any):
    """Create MaintenanceWindows as the cluster admin; all are deleted after the test."""
    made: list[str] = []

    def create(obj: dict[str, Any], *, as_user: str = "admin") -> dict[str, Any]:
        out: dict[str, Any] = kube.create(MW, obj, as_user=as_user)
        made.append(obj["metadata"]["name"])
        return out

    yield create
    for name in made:
        with contextlib.suppress(Exception):
            kube.delete(f"{MW}/{name}")


# -- 1. the CRD and the maintenance-window policy ------------------------------------
def test_a_valid_window_is_stored_cluster_wide_and_everyone_may_read_it(kube, webhook_server, windows):
    obj = sample("window-rack7.yaml")
    obj["metadata"]["name"] = name = unique("rack7")
    stored = windows(obj)
    assert stored["spec"] == obj["spec"]
    assert "namespace" not in stored["metadata"]
    assert kube.get(f"{MW}/{name}", as_user="alice")["spec"]["reason"] == "BIOS and BMC firmware update"
    assert not kube.can_i("create", "maintenancewindows", group="batchgate.io", as_user="alice")


def test_an_invalid_window_is_denied_naming_every_bad_field(kube, webhook_server):
    obj = sample("window-invalid.yaml")
    obj["metadata"]["name"] = name = unique("broken")
    obj["spec"]["reason"] = "typed wrong"  # `reason: 42` never reaches the webhook: the CRD schema says 422
    with pytest.raises(KubeApiError) as info:
        kube.create(MW, obj)
    assert info.value.status == 403
    msg = info.value.body["message"]
    assert f'admission webhook "{CREATE_HOOK}" denied the request: maintenance-window: ' in msg
    for part in (
        f"invalid MaintenanceWindow {name}",
        "spec.end: 2026-11-24T06:00:00Z must be after spec.start (2026-11-24T10:00:00Z)",
        "spec.nodeSelector.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist",
        "spec.nodes[0]: 'Node_1' is not a node name",
        "spec.drain: unknown field",
    ):
        assert part in msg, f"{part!r} not in {msg}"
    assert not kube.exists(f"{MW}/{name}")


def test_an_edit_that_breaks_a_stored_window_is_denied(kube, webhook_server, windows):
    obj = sample("window-names-only.yaml")
    obj["metadata"]["name"] = name = unique("dimm")
    windows(obj)
    with pytest.raises(KubeApiError) as info:
        kube.patch(f"{MW}/{name}", {"spec": {"end": "2026-11-24T05:00:00Z"}})
    assert info.value.status == 403
    assert f'admission webhook "{UPDATE_HOOK}" denied the request: maintenance-window: ' in info.value.body["message"]
    assert "spec.end: 2026-11-24T05:00:00Z must be after spec.start" in info.value.body["message"]
    kube.patch(f"{MW}/{name}", {"spec": {"reason": "two DIMMs"}})  # a valid edit is fine
    assert kube.get(f"{MW}/{name}")["spec"]["reason"] == "two DIMMs"


# -- the reconciler and nodes -----------------------------------------------------------
@pytest.fixture
def reconciler(kube: Any, module_namespace: str, tmp_path: Path) -> Iterator[Callable[..., Reconciler]]:
    started: list[Reconciler] = []

    def start(*args: str) -> Reconciler:
        log = tmp_path / f"reconciler-{len(started)}.log"
        started.append(start_reconciler(kube, module_namespace, log, "--resync", "20s", *args,
                                        identity=f"r{len(started)}"))
        return started[-1]

    yield start
    stop_reconcilers(started, lines=80)


@pytest.fixture
def nodes(kube: Any) -> Iterator[Callable[..., str]]:
    """Fake nodes tainted (``own_taint``) so that only this module's pods (which tolerate it) land there."""
    made: list[str] = []

    def make(stem: str, *, cpu: str = "2", unschedulable: bool = False) -> str:
        name = unique(stem)
        kube.create_node(name, cpu=cpu, memory="8Gi",
                         taints=own_taint(OWN))
        if unschedulable:
            kube.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
        made.append(name)
        return name

    yield make
    for n in made:
        with contextlib.suppress(Exception):
            kube.delete_node(n)


def node_labels(kube: Any, name: str) -> dict[str, str]:
    return kube.get(f"/api/v1/nodes/{name}")["metadata"].get("labels") or {}


def window_obj(name: str, *, start: float, end: float, nodes: list[str], reason: str = "e2e") -> dict[str, Any]:
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow", "metadata": {"name": name},
            "spec": {"start": now_rfc3339(start), "end": now_rfc3339(end), "nodes": nodes, "reason": reason}}


def timed_pod(name: str, limit: str, cpu: str) -> dict[str, Any]:
    return pod(name, annotations={"batchgate.io/time-limit": limit}, containers=[container(cpu=cpu, memory="1Gi")],
               tolerations=TOLERATE)


def scheduled_on(kube: Any, ns: str, name: str, timeout: float = 30) -> str:
    return wait_for(lambda: kube.get(pods_path(ns, name))["spec"].get("nodeName"), timeout,  # type: ignore[no-any-return]
                    message=f"pod {ns}/{name} to be scheduled")


def scheduler_keeps_off(kube: Any, ns: str, node: str) -> bool:
    """Whether kube-scheduler refuses a 4 h pod (it may go nowhere else) on ``node``; the probe is
    deleted either way."""
    probe = timed_pod(unique("probe"), "4h", "10m")
    probe["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    name = create(kube, ns, probe)["metadata"]["name"]

    def decided() -> str | None:
        p = kube.get(pods_path(ns, name))
        if p["spec"].get("nodeName"):
            return "bound"
        conds = (p.get("status") or {}).get("conditions") or []
        return "refused" if any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                                for c in conds) else None

    try:
        return wait_for(decided, 60, message=f"kube-scheduler to decide on probe {name}") == "refused"  # type: ignore[no-any-return]
    finally:
        kube.delete(pods_path(ns, name), body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})


def events_for(kube: Any, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e["involvedObject"].get("name") == name and e["reason"] == reason]


# -- 2. before a window: kube-scheduler keeps long jobs off its nodes ----------------------
def test_kube_scheduler_keeps_a_long_job_off_a_windows_nodes_and_lets_a_short_one_on(
        kube, webhook_server, module_namespace, windows, nodes, reconciler):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns = module_namespace
    soon, free = nodes("mw-soon"), nodes("mw-free")
    windows(window_obj(unique("mw"), start=2 * 3600, end=3 * 3600, nodes=[soon]))
    reconciler().wait_ready()
    value = wait_for(lambda: node_labels(kube, soon).get(COUNTDOWN), 30, message="the countdown on the window's node")
    assert 110 <= int(value) <= 118, value  # 2 h, rounded down, some slack held back
    assert COUNTDOWN not in node_labels(kube, free)
    # kube-scheduler filters on its own cache of the nodes, which may lag the API server: until a
    # 4 h probe that may only go on the window's node is refused there, that cache has no label.
    wait_for(lambda: scheduler_keeps_off(kube, ns, soon), 120, interval=0,
             message="kube-scheduler to see the countdown on the window's node")

    # 4 h cannot finish before the window: only the free node will do (1.5 of its 2 CPUs)
    long = create(kube, ns, timed_pod(unique("long"), "4h", "1500m"))["metadata"]["name"]
    assert scheduled_on(kube, ns, long) == free
    # 30 m fits before the window; the free node is full: it goes on the window's node
    short = create(kube, ns, timed_pod(unique("short"), "30m", "1"))["metadata"]["name"]
    assert scheduled_on(kube, ns, short) == soon
    # Another 4 h job waits: the window's node has room (1 CPU) but not time; the free one has 0.5
    waiting = create(kube, ns, timed_pod(unique("waiting"), "4h", "800m"))["metadata"]["name"]

    def unschedulable() -> bool:
        conds = kube.get(pods_path(ns, waiting)).get("status", {}).get("conditions") or []
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)

    wait_for(unschedulable, 30, message="the scheduler to find no node for the waiting 4h pod")
    message = next(c for c in kube.get(pods_path(ns, waiting))["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "node affinity" in message["message"], message  # kube-scheduler's own words
    assert not kube.get(pods_path(ns, waiting))["spec"].get("nodeName")
    # The decision is made at bind time: once the window is gone (its label with it), the same
    # pod, admitted long before, is bound to that node.
    for name in [w["metadata"]["name"] for w in kube.get(MW)["items"] if soon in w["spec"].get("nodes", [])]:
        kube.delete(f"{MW}/{name}")
    wait_for(lambda: COUNTDOWN not in node_labels(kube, soon), 30, message="the countdown to go")
    assert scheduled_on(kube, ns, waiting, timeout=60) == soon


# -- 3. at the start: cordon and drain; at the end: the nodes back as they were ------------
def finish_terminating(kube: Any, ns: str) -> None:
    """Play kubelet: pods being deleted (evicted) are gone once their containers stopped."""
    for p in kube.get(pods_path(ns))["items"]:
        if p["metadata"].get("deletionTimestamp"):
            kube.delete(pods_path(ns, p["metadata"]["name"]),
                        body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})


def test_a_window_cordons_drains_and_gives_the_nodes_back_as_they_were(
        kube, webhook_server, module_namespace, windows, nodes, reconciler):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns = module_namespace
    a, b = nodes("mw-a", cpu="8"), nodes("mw-b", unschedulable=True)  # b: cordoned by an admin before
    on_a = {"nodeSelector": {"kubernetes.io/hostname": a}, "tolerations": TOLERATE}
    solo_body, guarded_body = timed_pod(unique("solo"), "1h", "100m"), timed_pod(unique("guarded"), "1h", "100m")
    guarded_body["metadata"]["labels"] = {"app": "guarded"}
    for body in (solo_body, guarded_body):
        body["spec"]["nodeSelector"] = on_a["nodeSelector"]
    solo = create(kube, ns, solo_body)["metadata"]["name"]
    guarded = create(kube, ns, guarded_body)["metadata"]["name"]
    job_name = unique("train")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job_name,
           "annotations": {"batchgate.io/time-limit": "1h"}},
           "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", **on_a,
                                                             "containers": [container(cpu="100m", memory="1Gi")]}}}}
    create(kube, ns, job)
    job_pod = wait_for(lambda: next((p["metadata"]["name"] for p in kube.get(pods_path(ns))["items"]
                                     if p["metadata"].get("labels", {}).get("job-name") == job_name), None), 30,
                       message="the Job's pod")
    for name in (solo, guarded, job_pod):
        node = scheduled_on(kube, ns, name)
        assert node in (a,), f"{name} on {node}"  # b is cordoned; the taint keeps everyone else off a
        kube.set_pod_phase(ns, name, "Running")
    kube.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    wait_for(lambda: kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/guarded")
             .get("status", {}).get("expectedPods") == 1, 30, message="the disruption controller to see the pod")

    drain = 30  # seconds of PDB-honouring evictions; generous, as the machine may be busy
    # Up before the window is made: the window must be seen ahead of its start (MaintenanceScheduled),
    # and starting a reconciler may take longer than the time to its start on a busy machine.
    first = reconciler("--drain-timeout", f"{drain}s", "--no-leader-elect").wait_ready()
    mw = unique("mw")
    stored = windows(window_obj(mw, start=15, end=100, nodes=[a, b], reason="firmware"))
    start, end = (epoch(stored["spec"][k]) for k in ("start", "end"))
    wait_for(lambda: MAINT_ANN in (kube.get(f"/api/v1/nodes/{a}")["metadata"].get("annotations") or {}), 45,
             message="node a cordoned by the window")
    # A restart in the middle of the drain: the new process finishes it, repeating nothing.
    first.kill()
    reconciler("--drain-timeout", f"{drain}s", "--no-leader-elect").wait_ready()
    # The first process may have died before it reached node b: the second one must get there.
    wait_for(lambda: all(MAINT_ANN in (kube.get(f"/api/v1/nodes/{n}")["metadata"].get("annotations") or {})
                         for n in (a, b)), 30, message="both nodes cordoned by the window after the restart")
    node_a, node_b = kube.get(f"/api/v1/nodes/{a}"), kube.get(f"/api/v1/nodes/{b}")
    assert node_a["spec"]["unschedulable"] is True and node_b["spec"]["unschedulable"] is True
    assert json.loads(node_b["metadata"]["annotations"][MAINT_ANN]) == {"unschedulable": True, "window": mw}

    def evicted(name: str) -> bool:
        p = kube.get(pods_path(ns, name))
        return bool(p["metadata"].get("deletionTimestamp"))

    wait_for(lambda: evicted(solo) and evicted(job_pod), 30, message="solo and the Job's pod evicted")
    guarded_gone = evicted(guarded)
    if time.time() < start + drain:  # seen before the drain deadline: only then does the budget give
        assert not guarded_gone, "the budget holds until the drain deadline"
    wait_for(lambda: evicted(guarded), drain + 30, message="the guarded pod deleted at the drain deadline")
    # the eviction comes first (a budget may refuse it), its Event right after
    for name in (solo, job_name):  # the Job's on the workload
        wait_for(lambda name=name: events_for(kube, ns, name, "MaintenanceEviction"), 30,
                 message=f"the MaintenanceEviction Event of {name}")
    assert len(events_for(kube, ns, solo, "MaintenanceEviction")) == 1
    assert len(events_for(kube, ns, job_name, "MaintenanceEviction")) == 1
    (forced,) = events_for(kube, ns, guarded, "MaintenanceDrainDeadline")
    assert forced["type"] == "Warning" and "drain deadline" in forced["message"]
    finish_terminating(kube, ns)
    # The Job's replacement pod cannot go anywhere while the window lasts.
    state = state_of(kube, MW + "/" + mw)
    if time.time() < end:  # seen before the window's end
        assert state == "Active", state

    # At the end: a is schedulable again, b stays cordoned as the admin left it.
    wait_for(lambda: not kube.get(f"/api/v1/nodes/{a}")["spec"].get("unschedulable"), 120,
             message="node a given back at the window's end")
    # the nodes are given back one by one: b's record may go a moment after a is schedulable
    wait_for(lambda: all(MAINT_ANN not in (kube.get(f"/api/v1/nodes/{x}")["metadata"].get("annotations") or {})
                         for x in (a, b)), 30, message="both nodes' maintenance records removed")
    node_b = kube.get(f"/api/v1/nodes/{b}")
    assert node_b["spec"]["unschedulable"] is True
    wait_for(lambda: COUNTDOWN not in node_labels(kube, a) and COUNTDOWN not in node_labels(kube, b), 30,
             message="countdown labels removed")
    wait_for(lambda: state_of(kube, MW + "/" + mw) == "Finished", 30, message="the window Finished")
    node_events = [e for e in kube.get("/api/v1/namespaces/default/events")["items"]
                   if e["involvedObject"].get("name") in (a, b) and e["reason"].startswith("Maintenance")]
    reasons = sorted((e["involvedObject"]["name"] == a, e["reason"]) for e in node_events)
    assert reasons == sorted([(True, "MaintenanceScheduled"), (True, "MaintenanceStarted"), (True, "MaintenanceEnded"),
                              (False, "MaintenanceScheduled"), (False, "MaintenanceStarted"),
                              (False, "MaintenanceEnded")]), reasons
    ended_b = next(e for e in node_events if e["involvedObject"]["name"] == b and e["reason"] == "MaintenanceEnded")
    assert "stays cordoned" in ended_b["message"]


def state_of(kube: Any, path: str) -> str | None:
    return (kube.get(path).get("status") or {}).get("state")  # type: ignore[no-any-return]


# -- 4. extensions that would run into a window are refused ----------------------------------
def test_an_extension_into_a_window_on_the_jobs_node_is_refused_with_its_name_and_start(
        kube, webhook_server, module_namespace, windows, nodes, reconciler):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns = module_namespace
    n = nodes("mw-ext")
    name = unique("sim")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name,
           "annotations": {"batchgate.io/time-limit": "1h"}},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": n}, "tolerations": TOLERATE,
               "containers": [container(cpu="100m", memory="1Gi")]}}}}
    create(kube, ns, job)
    job_pod = wait_for(lambda: next((p["metadata"]["name"] for p in kube.get(pods_path(ns))["items"]
                                     if p["metadata"].get("labels", {}).get("job-name") == name), None), 30,
                       message="the Job's pod")
    assert scheduled_on(kube, ns, job_pod) == n
    kube.set_pod_phase(ns, job_pod, "Running")
    mw = unique("mw")
    windows(window_obj(mw, start=3 * 3600, end=4 * 3600, nodes=[n], reason="PSU swap"))
    reconciler().wait_ready()
    path = f"/apis/batch/v1/namespaces/{ns}/jobs/{name}"

    def recorded() -> Any:
        ann = kube.get(path)["metadata"].get("annotations") or {}
        return ann.get("batchgate.io/next-maintenance") and ann.get("batchgate.io/started-at") and ann

    ann = wait_for(recorded, 30, message="the next window recorded on the running Job")
    assert json.loads(ann["batchgate.io/next-maintenance"])["window"] == mw
    start = kube.get(f"{MW}/{mw}")["spec"]["start"]
    with pytest.raises(KubeApiError) as info:
        kube.patch(path, {"metadata": {"annotations": {"batchgate.io/time-limit": "5h"}}}, as_user="alice")
    assert info.value.status == 403
    msg = info.value.body["message"]
    assert f'admission webhook "{UPDATE_HOOK}" denied the request: time-limit-extension: ' in msg
    assert f"into maintenance window {mw}, which starts at {start} on node {n}" in msg, msg
    # the record cannot be edited away by the user
    with pytest.raises(KubeApiError) as info:
        kube.patch(path, {"metadata": {"annotations": {"batchgate.io/next-maintenance": None}}}, as_user="alice")
    assert "written by the batchgate reconciler only" in info.value.body["message"]
    # an extension that ends before the window is fine
    kube.patch(path, {"metadata": {"annotations": {"batchgate.io/time-limit": "2h"}}}, as_user="alice")
    assert kube.get(path)["metadata"]["annotations"]["batchgate.io/time-limit"] == "2h"
    # 6. `batchgate maintenance` lists the window; the job ends before it, so it stops nothing
    wait_for(lambda: (kube.get(path)["metadata"].get("annotations") or {}).get("batchgate.io/deadline", "")
             > ann["batchgate.io/deadline"], 30, message="the extended deadline recorded")
    (row,) = [r for r in cli(kube, "maintenance", "-o", "json") if r["name"] == mw]
    assert (row["state"], row["nodes"], row["reason"], row["stops"]) == ("Scheduled", [n], "PSU swap", [])


# -- 5. expected start times ---------------------------------------------------------------
def test_pending_work_gets_an_expected_start_and_never_fitting_work_a_warning(
        kube, webhook_server, module_namespace, nodes, reconciler):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns = module_namespace
    n = nodes("mw-est", cpu="2")

    def on_n(name: str, limit: str, cpu: str) -> dict[str, Any]:
        body = timed_pod(unique(name), limit, cpu)
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": n}
        return body

    running = create(kube, ns, on_n("holder", "1h", "2"))["metadata"]["name"]
    assert scheduled_on(kube, ns, running) == n
    kube.set_pod_phase(ns, running, "Running")
    waiting = create(kube, ns, on_n("next", "1h", "2"))["metadata"]["name"]
    huge = create(kube, ns, on_n("huge", "1h", "64"))["metadata"]["name"]
    reconciler().wait_ready()

    def ann(name: str, key: str) -> Any:
        return (kube.get(pods_path(ns, name))["metadata"].get("annotations") or {}).get(key)

    deadline = wait_for(lambda: ann(running, "batchgate.io/deadline"), 30, message="the running pod's deadline")
    expected = wait_for(lambda: ann(waiting, "batchgate.io/expected-start"), 30, message="an expected start")
    assert expected == deadline, (expected, deadline)  # the node frees when the running pod's limit runs out
    assert "resources on node" in ann(waiting, "batchgate.io/expected-start-reason")
    wait_for(lambda: events_for(kube, ns, waiting, "ExpectedStart"), 30, message="the ExpectedStart Event")
    assert wait_for(lambda: ann(huge, "batchgate.io/expected-start"), 30, message="huge's estimate") == "unknown"
    (warning,) = wait_for(lambda: events_for(kube, ns, huge, "NeverFits"), 30, message="the NeverFits Event")
    assert warning["type"] == "Warning"
    assert f"each pod asks for cpu 64, memory 1Gi; the largest node it may use ({n}) has cpu 2" in warning["message"]

    # 6. `batchgate queue` says the same, like squeue --start
    rows = {r["name"]: r for r in cli(kube, "queue", "--namespace", ns, "-o", "json")}
    assert rows[waiting]["state"] == "Pending" and rows[waiting]["start"] == deadline
    assert rows[waiting]["position"] < rows[huge]["position"] or rows[huge]["position"] < rows[waiting]["position"]
    assert rows[huge]["start"] == "unknown" and rows[huge]["reason"].startswith("never fits: ")
    assert rows[running]["state"] == "Running" and rows[running]["deadline"] == deadline
    table = cli(kube, "queue", "--namespace", ns, raw=True)
    assert table.splitlines()[0].split()[:4] == ["NAMESPACE", "NAME", "QUEUE", "PRIORITY"] and waiting in table


def test_recent_work_of_a_higher_priority_makes_the_expected_start_later(
        kube, webhook_server, module_namespace, nodes, reconciler):
    """The expected start counts on work that will arrive and go first (forecast.py): an urgent pod
    created a moment ago (by the admin: users may not pick that class) makes a waiting pod's expected
    start later than the moment the node it waits for frees, at most twice the wait, and the stored
    reason says by how much."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns = module_namespace
    n = nodes("fc-wait", cpu="2")
    m = nodes("fc-urgent", cpu="8")

    def on(node_name: str, name: str, cpu: str, **spec: Any) -> dict[str, Any]:
        body = timed_pod(unique(name), "1h", cpu)
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
        body["spec"].update(spec)
        return body

    def ann(name: str, key: str) -> Any:
        return (kube.get(pods_path(ns, name))["metadata"].get("annotations") or {}).get(key)

    urgent = create(kube, ns, on(m, "urgent", "8", priorityClassName="batchgate-urgent"), as_user="admin")
    urgent_name = urgent["metadata"]["name"]
    try:
        running = create(kube, ns, on(n, "holder", "2"))["metadata"]["name"]
        assert scheduled_on(kube, ns, running) == n
        kube.set_pod_phase(ns, running, "Running")
        waiting = create(kube, ns, on(n, "next", "2"))["metadata"]["name"]
        reconciler().wait_ready()
        deadline = wait_for(lambda: ann(running, "batchgate.io/deadline"), 30, message="the running pod's deadline")
        expected = wait_for(lambda: ann(waiting, "batchgate.io/expected-start"), 30, message="an expected start")
        assert epoch(deadline) < epoch(expected) <= epoch(deadline) + 3600, (expected, deadline)
        reason = ann(waiting, "batchgate.io/expected-start-reason")
        assert f"resources on node {n} are free then; later by x" in reason, reason
        assert "for the work that ranks ahead of it and arrives while it waits" in reason
    finally:
        kube.delete(pods_path(ns, urgent_name))  # a deleting pod counts no more: the tests after see none


# -- 5b. expected start times from how long earlier runs took ---------------------------
def test_an_expected_start_goes_by_how_long_a_finished_job_of_the_same_program_ran(
        kube, webhook_server, module_namespace, nodes, reconciler):
    """Slurm's squeue --start would say the waiting job starts when the running one's hour is up;
    a Job of the same program that finished a moment ago took seconds, and the estimate says so.
    The reconciler starts after that Job finished: what it knows, it reads from the API server."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns = module_namespace
    n = nodes("mw-hist", cpu="2")
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"

    def sim(stem: str) -> tuple[str, str]:
        body = job(unique(stem), annotations={"batchgate.io/time-limit": "1h"},
                   containers=[container(cpu="2", memory="1Gi", image="registry.example/e2e/sim:1")],
                   nodeSelector={"kubernetes.io/hostname": n}, tolerations=TOLERATE)
        made = kube.create(jobs, body)
        return made["metadata"]["name"], made["metadata"]["uid"]

    def pod_of(uid: str) -> dict[str, Any]:
        (p,) = kube.wait_for_pods(ns, label_selector=f"controller-uid={uid}",
                                  predicate=lambda p: p["spec"].get("nodeName") == n, timeout=60)
        return p

    def job_ann(name: str, key: str) -> Any:
        return (kube.get(f"{jobs}/{name}")["metadata"].get("annotations") or {}).get(key)

    made: list[str] = []
    try:
        first, first_uid = sim("first")
        made.append(first)
        p = pod_of(first_uid)["metadata"]["name"]
        began = now_rfc3339()
        kube.set_pod_phase(ns, p, "Running", {"main": {"running": {"startedAt": began}}})
        time.sleep(15)
        kube.set_pod_phase(ns, p, "Succeeded", {"main": {"terminated": {
            "exitCode": 0, "reason": "Completed", "startedAt": began, "finishedAt": now_rfc3339()}}})
        done = wait_for(lambda: kube.get(f"{jobs}/{first}").get("status", {}).get("completionTime"), 60,
                        message="the Job controller to complete the first Job")
        took = epoch(done) - epoch(began)
        assert 15 <= took < 120, took

        holder, holder_uid = sim("holder")
        made.append(holder)
        kube.set_pod_phase(ns, pod_of(holder_uid)["metadata"]["name"], "Running",
                           {"main": {"running": {"startedAt": now_rfc3339()}}})
        waiting, _ = sim("next")
        made.append(waiting)
        reconciler().wait_ready()

        deadline = wait_for(lambda: job_ann(holder, "batchgate.io/deadline"), 30, message="the holder's deadline")
        started = job_ann(holder, "batchgate.io/started-at")
        expected = wait_for(lambda: job_ann(waiting, "batchgate.io/expected-start"), 30,
                            message="an expected start on the waiting Job")
        seen = time.time()
        # Not the holder's deadline (an hour after its start): the first Job's runtime from the
        # holder's start, or, once the holder has outlived that, halfway from then to its deadline.
        assert epoch(expected) < epoch(deadline) - 20 * 60, (expected, deadline)
        latest = (seen - epoch(started) + 3600) / 2
        assert epoch(started) + took - 1 <= epoch(expected) <= epoch(started) + max(took, latest) + 1, \
            (expected, started, took)
        assert "resources on node" in job_ann(waiting, "batchgate.io/expected-start-reason")
        # `batchgate queue` reads the same history from the API server
        row = next(r for r in cli(kube, "queue", "--namespace", ns, "-o", "json") if r["name"] == waiting)
        assert row["state"] == "Pending" and epoch(row["start"]) < epoch(deadline) - 20 * 60, row
    finally:
        for name in made:  # no history left behind for the module's other tests
            with contextlib.suppress(Exception):
                kube.delete(f"{jobs}/{name}", body={"apiVersion": "v1", "kind": "DeleteOptions",
                                                    "propagationPolicy": "Background"})


# -- 5c. the user's own expected runtime --------------------------------------------------
def test_an_expected_start_goes_by_the_users_own_expected_runtime(
        kube, webhook_server, module_namespace, nodes, reconciler):
    """A Job says it expects to run 10 minutes of its 1h limit (batchgate.io/expected-runtime,
    checked by the webhook: a duration, at most the limit): the Job waiting behind it is
    expected to start 10 minutes after it started, not an hour after."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    ns = module_namespace
    n = nodes("mw-own", cpu="2")
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"

    def body(stem: str, **ann: str) -> dict[str, Any]:
        return job(unique(stem), annotations={"batchgate.io/time-limit": "1h", **ann},
                   containers=[container(cpu="2", memory="1Gi", image="registry.example/e2e/own:1")],
                   nodeSelector={"kubernetes.io/hostname": n}, tolerations=TOLERATE)

    def job_ann(name: str, key: str) -> Any:
        return (kube.get(f"{jobs}/{name}")["metadata"].get("annotations") or {}).get(key)

    # the webhook: longer than the limit, or not a duration, is denied at CREATE
    for value, says in (("2h", "batchgate.io/expected-runtime 2h is longer than the job's time limit 1h"),
                        ("a while", "batchgate.io/expected-runtime 'a while' is not a duration")):
        with pytest.raises(KubeApiError) as info:
            kube.create(jobs, body("bad", **{"batchgate.io/expected-runtime": value}), as_user="alice")
        assert info.value.status == 403
        assert "time-limit: " in info.value.body["message"], info.value.body["message"]
        assert says in info.value.body["message"], info.value.body["message"]

    made: list[str] = []
    try:
        holder = kube.create(jobs, body("holder", **{"batchgate.io/expected-runtime": "10m"}), as_user="alice")
        holder_name = holder["metadata"]["name"]
        made.append(holder_name)
        (p,) = kube.wait_for_pods(ns, label_selector=f"controller-uid={holder['metadata']['uid']}",
                                  predicate=lambda p: p["spec"].get("nodeName") == n, timeout=60)
        kube.set_pod_phase(ns, p["metadata"]["name"], "Running", {"main": {"running": {"startedAt": now_rfc3339()}}})
        waiting = kube.create(jobs, body("next"), as_user="alice")["metadata"]["name"]
        made.append(waiting)
        # ... and on UPDATE: an estimate past the limit is refused, a new one within it taken
        path = f"{jobs}/{holder_name}"
        with pytest.raises(KubeApiError) as info:
            kube.patch(path, {"metadata": {"annotations": {"batchgate.io/expected-runtime": "3h"}}}, as_user="alice")
        assert info.value.status == 403
        assert "time-limit-extension: batchgate.io/expected-runtime 3h is longer" in info.value.body["message"]
        kube.patch(path, {"metadata": {"annotations": {"batchgate.io/expected-runtime": "12m"}}}, as_user="alice")
        reconciler()

        started = wait_for(lambda: job_ann(holder_name, "batchgate.io/started-at"), 30,
                           message="the holder's recorded start")
        expected = wait_for(lambda: job_ann(waiting, "batchgate.io/expected-start"), 30,
                            message="an expected start on the waiting Job")
        assert epoch(expected) == epoch(started) + 12 * 60, (expected, started)  # not started + 1h
        assert "resources on node" in job_ann(waiting, "batchgate.io/expected-start-reason")
        row = next(r for r in cli(kube, "queue", "--namespace", ns, "-o", "json") if r["name"] == waiting)
        assert row["start"] == expected, row
    finally:
        for name in made:
            with contextlib.suppress(Exception):
                kube.delete(f"{jobs}/{name}", body={"apiVersion": "v1", "kind": "DeleteOptions",
                                                    "propagationPolicy": "Background"})


def cli(kube: Any, *args: str, raw: bool = False) -> Any:
    out = subprocess.run([sys.executable, "-m", "webhook", *args, "--kubeconfig", kube.kubeconfig("admin")],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    return out if raw else json.loads(out)
