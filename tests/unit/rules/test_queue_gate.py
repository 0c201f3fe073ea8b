"""queue-gate: what waits in a gated queue at CREATE (the gate on bare Pods, a suspended and marked
Job), what never waits, who may release on UPDATE (the hostile user may not), and queue states
that refuse new work. Beyond the suite: other gates kept, the annotation a user writes, custom
releasers, and the whole shipped bundle."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES
from tests.unit.conftest import (
    check,
    decided,
    load_sample,
    only,
    settings_error,
    shipped_bundle,
    workload,
)
from webhook.bundle import Bundle
from webhook.contract import KUEUE_QUEUE_LABEL, QUEUE_GATE, QUEUED_ANNOTATION, QUEUED_BY_SUSPEND
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review
from webhook.rules import load_bundle
from webhook.rules.queue_gate import gated, queued

RECONCILER = "system:serviceaccount:batchgate-system:batchgate-reconciler"
SA_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:batchgate-system", "system:authenticated")
ADMIN = ("batchgate:admins", "system:authenticated")
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


@pytest.fixture(scope="module")
def qg() -> Bundle:
    return only(shipped_bundle(), "queue-gate")


def bundle_with(tmp_path: Path, edit: Any, settings: dict[str, Any] | None = None) -> Bundle:
    """The shipped bundle.yaml edited by ``edit(spec)``, with queue-gate alone (``settings`` if given)."""
    root = tmp_path / "bundle"
    (root / "queue-gate").mkdir(parents=True)
    doc = yaml.safe_load((POLICIES / "bundle.yaml").read_text())
    edit(doc["spec"])
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    policy = yaml.safe_load((POLICIES / "queue-gate" / "policy.yaml").read_text())
    if settings is not None:
        policy["spec"]["settings"] = settings
    (root / "queue-gate" / "policy.yaml").write_text(yaml.safe_dump(policy))
    return load_bundle(root)


def set_queue(name: str, **fields: Any) -> Any:
    def edit(spec: dict[str, Any]) -> None:
        next(q for q in spec["queues"] if q["name"] == name).update(fields)
    return edit


def pod(queue: str = "batch", gates: list[str] | None = None, **labels: str) -> dict[str, Any]:
    p = workload("Pod", name="sim", labels={"batchgate.io/queue": queue, **labels})
    if gates:
        p["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return p


def job(queue: str = "batch", *, suspend: bool | None = None, annotation: str | None = None,
        **labels: str) -> dict[str, Any]:
    j = workload("Job", name="sim", labels={"batchgate.io/queue": queue})
    j["metadata"]["labels"] = {"batchgate.io/queue": queue, **labels}
    if suspend is not None:
        j["spec"]["suspend"] = suspend
    if annotation is not None:
        j["metadata"]["annotations"] = {QUEUED_ANNOTATION: annotation}
    return j


def update(b: Bundle, old: dict[str, Any], new: dict[str, Any], user: str = "alice",
           groups: tuple[str, ...] = ("system:authenticated",)) -> Decision:
    return check(new, old=old, operation="UPDATE", user=user, groups=groups, bundle=b)


def gate_names(obj: dict[str, Any] | None) -> list[str]:
    assert obj is not None
    return [g["name"] for g in obj["spec"].get("schedulingGates") or []]


# -- CREATE: what waits -------------------------------------------------------------------
def test_a_bare_pod_in_a_gated_queue_gets_the_gate_after_the_gates_it_has(qg: Bundle) -> None:
    d = check(pod(gates=["example.com/other"]), bundle=qg)
    assert d.allowed and gate_names(d.obj) == ["example.com/other", QUEUE_GATE]
    assert gated(d.obj) and not gated(pod())


def test_a_job_waits_suspended_and_marked_its_deadline_untouched(qg: Bundle) -> None:
    j = job(annotation="false")  # a value of the user's own is made ours
    j["spec"]["activeDeadlineSeconds"] = 3600
    d = check(j, bundle=qg)
    assert d.obj is not None
    assert d.obj["spec"]["suspend"] is True and d.obj["metadata"]["annotations"][QUEUED_ANNOTATION] == "true"
    assert d.obj["spec"]["activeDeadlineSeconds"] == 3600
    assert queued(d.obj) and not queued(j)


def test_a_job_already_suspended_and_marked_is_left_as_it_is(qg: Bundle) -> None:
    assert check(job(suspend=True, annotation="true"), bundle=qg).patch == []


def test_a_pod_from_a_made_up_owner_is_gated_one_from_the_job_controller_is_not(qg: Bundle) -> None:
    p = load_sample("queue-gate", "pod-from-job.yaml")
    assert gated(check(copy.deepcopy(p), bundle=qg).obj)
    mine = check(copy.deepcopy(p), user=JOB_CONTROLLER, groups=("system:serviceaccounts",), bundle=qg)
    assert mine.allowed and mine.patch == []


def test_kueue_workloads_are_left_to_kueue_where_the_bundle_says_it_runs(tmp_path: Path) -> None:
    kueue = bundle_with(tmp_path, lambda spec: None, {"otherQueueManagers": [KUEUE_QUEUE_LABEL]})
    j = check(job(**{KUEUE_QUEUE_LABEL: "team-a"}), bundle=kueue)
    assert j.patch == [] and not queued(j.obj)
    p = check(pod(**{KUEUE_QUEUE_LABEL: "team-a"}), bundle=kueue)
    assert p.patch == [] and not gated(p.obj)


def test_without_kueue_its_label_does_not_skip_the_queue(qg: Bundle) -> None:
    """The hostile user: a label nothing in the cluster acts on must not jump the queue."""
    assert queued(check(job(**{KUEUE_QUEUE_LABEL: "team-a"}), bundle=qg).obj)
    assert gated(check(pod(**{KUEUE_QUEUE_LABEL: "team-a"}), bundle=qg).obj)


@pytest.mark.parametrize("queue", ["interactive", "scavenger"])
def test_ungated_queues_hold_nothing(qg: Bundle, queue: str) -> None:
    assert check(pod(queue), bundle=qg).patch == []
    assert check(job(queue), bundle=qg).patch == []


def test_our_mark_on_a_job_of_an_ungated_queue_is_removed_its_suspend_is_the_users(qg: Bundle) -> None:
    d = check(job("interactive", suspend=True, annotation="true"), bundle=qg)
    assert d.obj is not None
    assert QUEUED_ANNOTATION not in (d.obj["metadata"].get("annotations") or {})
    assert d.obj["spec"]["suspend"] is True


def test_our_gate_on_a_pod_of_an_ungated_queue_goes_alone_and_an_emptied_list_goes_too(qg: Bundle) -> None:
    d = check(pod("interactive", gates=[QUEUE_GATE, "example.com/other"]), bundle=qg)
    assert gate_names(d.obj) == ["example.com/other"]
    d = check(pod("interactive", gates=[QUEUE_GATE]), bundle=qg)
    assert d.obj is not None and "schedulingGates" not in d.obj["spec"]


def test_a_gated_queue_can_be_made_ungated(tmp_path: Path) -> None:
    b = bundle_with(tmp_path, set_queue("batch", gated=False))
    assert check(pod(), bundle=b).patch == [] and check(job(), bundle=b).patch == []


def test_the_whole_shipped_bundle_gates_batch_work_and_not_system_namespaces() -> None:
    d = check(workload("Job", name="sim"))  # the default queue, batch
    assert queued(d.obj)
    d = check(workload("Pod", name="sim"), namespace="kube-system")
    assert not gated(d.obj)


# -- services' pods -------------------------------------------------------------------------
RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
SS_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"
DS_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
CONTROLLER_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")


def owned_pod(owner_kind: str, queue: str = "batch", api_version: str = "apps/v1") -> dict[str, Any]:
    """A pod as its controller makes it: the controlling ownerReference of ``owner_kind``."""
    p = pod(queue)
    p["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": owner_kind, "name": "web",
                                         "uid": "6f1c2a3e-0000-4000-8000-000000000002", "controller": True}]
    return p


@pytest.mark.parametrize("kind, controller", [("ReplicaSet", RS_CONTROLLER), ("StatefulSet", SS_CONTROLLER),
                                              ("DaemonSet", DS_CONTROLLER)])
def test_a_services_pods_wait_behind_the_gate_in_a_gated_queue_only(qg: Bundle, kind: str, controller: str) -> None:
    """Batch work run as a Deployment, StatefulSet or DaemonSet (a one-node nodeSelector: kube-scheduler
    binds its pods since Kubernetes 1.12) waits its turn, one pod a workload; in a queue that is not
    gated (interactive) it starts at once."""
    d = check(owned_pod(kind), user=controller, groups=CONTROLLER_GROUPS, bundle=qg)
    assert d.allowed and gate_names(d.obj) == [QUEUE_GATE]
    d = check(owned_pod(kind, "interactive"), user=controller, groups=CONTROLLER_GROUPS, bundle=qg)
    assert d.allowed and d.patch == []


def test_a_daemonsets_pod_with_its_node_affinity_is_gated_a_jobs_pod_is_not(qg: Bundle) -> None:
    """A DaemonSet's pod, as its controller makes it (a required node affinity to its node), waits like a
    ReplicaSet's, its affinity untouched; a Job's pods are not gated (the Job waited)."""
    p = owned_pod("DaemonSet")
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
    d = check(p, user=DS_CONTROLLER, groups=CONTROLLER_GROUPS, bundle=qg)
    assert d.allowed and gate_names(d.obj) == [QUEUE_GATE]
    assert d.obj["spec"]["affinity"] == p["spec"]["affinity"]
    d = check(owned_pod("Job", api_version="batch/v1"), user=JOB_CONTROLLER, groups=CONTROLLER_GROUPS, bundle=qg)
    assert d.allowed and d.patch == []


def test_a_service_owner_of_another_api_group_does_not_gate_a_controllers_pod(qg: Bundle) -> None:
    """Only Kubernetes' own ReplicaSet (apps): an operator's ``example.com/v1 ReplicaSet`` is its own
    business, as for every pod an operator makes."""
    d = check(owned_pod("ReplicaSet", api_version="example.com/v1"), user=RS_CONTROLLER, groups=CONTROLLER_GROUPS,
              bundle=qg)
    assert d.allowed and d.patch == []


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet", "DaemonSet", "Job"])
def test_a_pod_a_user_writes_claiming_a_controller_waits_as_a_bare_pod(qg: Bundle, kind: str) -> None:
    """The hostile user forging an owner skips nothing: not made by a controller, it is a bare Pod."""
    d = check(owned_pod(kind), bundle=qg)
    assert d.allowed and gate_names(d.obj) == [QUEUE_GATE]


@pytest.mark.parametrize("state, word", [("drain", "draining"), ("stop", "stopped")])
@pytest.mark.parametrize("kind", ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"])
def test_drain_and_stop_refuse_a_new_service_a_user_creates(tmp_path: Path, state: str, word: str, kind: str) -> None:
    b = bundle_with(tmp_path, set_queue("batch", state=state, stateReason="storage move"))
    d = check(workload(kind, name="web", labels={"batchgate.io/queue": "batch"}), bundle=b)
    assert not d.allowed and f"queue 'batch' is {word} (storage move)" in d.message
    assert check(workload(kind, name="web", labels={"batchgate.io/queue": "interactive"}), bundle=b).allowed


@pytest.mark.parametrize("state", ["drain", "stop"])
def test_drain_and_stop_let_a_deployments_rollout_and_its_pods_go_on(tmp_path: Path, state: str) -> None:
    """A Deployment admitted before makes a ReplicaSet in each rollout, and its ReplicaSets their pods:
    neither is new work (the pods still wait their turn behind the gate)."""
    b = bundle_with(tmp_path, set_queue("batch", state=state))
    rs = workload("ReplicaSet", name="web-1", labels={"batchgate.io/queue": "batch"})
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                          "uid": "6f1c2a3e-0000-4000-8000-000000000003", "controller": True}]
    deployment_controller = "system:serviceaccount:kube-system:deployment-controller"
    assert check(rs, user=deployment_controller, groups=CONTROLLER_GROUPS, bundle=b).allowed
    d = check(owned_pod("ReplicaSet"), user=RS_CONTROLLER, groups=CONTROLLER_GROUPS, bundle=b)
    assert d.allowed and gated(d.obj)
    assert not check(rs, bundle=b).allowed  # the same ReplicaSet from a user is new work


@pytest.mark.parametrize("state", ["drain", "stop"])
def test_drain_and_stop_let_a_daemonset_admitted_before_make_its_pods_which_wait(tmp_path: Path, state: str) -> None:
    """A DaemonSet admitted before makes a pod for each new node: not new work, it waits behind the gate
    (a draining queue releases it, a stopped one does not); a new DaemonSet is refused."""
    b = bundle_with(tmp_path, set_queue("batch", state=state))
    d = check(owned_pod("DaemonSet"), user=DS_CONTROLLER, groups=CONTROLLER_GROUPS, bundle=b)
    assert d.allowed and gated(d.obj)
    assert not check(workload("DaemonSet", name="agent", labels={"batchgate.io/queue": "batch"}), bundle=b).allowed


def test_a_service_is_neither_gated_nor_judged_on_update(qg: Bundle) -> None:
    """Its pods wait, not the service: no suspend, no mark, and an UPDATE is none of the queue's."""
    d = check(workload("Deployment", name="web", labels={"batchgate.io/queue": "batch"}), bundle=qg)
    assert d.allowed and d.patch == []
    old = workload("Deployment", name="web", labels={"batchgate.io/queue": "batch"})
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {QUEUED_ANNOTATION: "true"}
    assert update(qg, old, new).allowed


# -- UPDATE: only the releasers release -----------------------------------------------------
def test_the_hostile_user_cannot_remove_the_gate_even_keeping_others(qg: Bundle) -> None:
    old = pod(gates=["example.com/other", QUEUE_GATE])
    d = update(qg, old, pod(gates=["example.com/other"]))
    assert not d.allowed and "only batchgate's reconciler (or an admin) removes" in d.message
    assert not update(qg, old, pod()).allowed


def test_an_edit_that_keeps_the_gate_is_the_users_business(qg: Bundle) -> None:
    old = pod(gates=[QUEUE_GATE])
    new = pod(gates=[QUEUE_GATE], team="x")
    assert update(qg, old, new).allowed


def test_the_hostile_user_cannot_resume_a_queued_job_nor_drop_its_mark(qg: Bundle) -> None:
    old = job(suspend=True, annotation="true")
    resumed = update(qg, old, job(suspend=False, annotation="true"))
    assert not resumed.allowed and "only batchgate's reconciler (or an admin) resumes it" in resumed.message
    assert not update(qg, old, job(suspend=True)).allowed  # unmarked: the reconciler would never look at it
    assert not update(qg, old, job(suspend=False)).allowed


def test_the_hostile_user_cannot_mark_a_job_queued(qg: Bundle) -> None:
    d = update(qg, job(suspend=True), job(suspend=True, annotation="true"))
    assert not d.allowed and "written by batchgate only" in d.message


def test_a_user_may_suspend_and_resume_a_job_of_an_ungated_queue(qg: Bundle) -> None:
    d = update(qg, job("scavenger", suspend=False), job("scavenger", suspend=True))
    assert d.allowed and d.patch == []
    assert update(qg, job("scavenger", suspend=True), job("scavenger", suspend=False)).allowed
    assert update(qg, job(suspend=True), job(suspend=False)).allowed  # suspended, never marked: not queued


def test_a_job_its_user_suspends_in_a_gated_queue_goes_back_to_the_queue(qg: Bundle) -> None:
    """Kueue keeps a workload's suspend for itself: alice suspending her released Job marks it
    queued (the reconciler re-queues it), so her resume is refused like any queued Job's."""
    d = update(qg, job(suspend=False), job(suspend=True))
    assert d.allowed and d.obj is not None
    marked = d.obj
    assert marked["metadata"]["annotations"][QUEUED_ANNOTATION] == QUEUED_BY_SUSPEND and queued(marked)
    resumed = update(qg, marked, {**marked, "spec": {**marked["spec"], "suspend": False}})
    assert not resumed.allowed and "only batchgate's reconciler (or an admin) resumes it" in resumed.message
    # she may write the webhook's mark herself as she suspends; another value is written over
    assert update(qg, job(suspend=False), job(suspend=True, annotation=QUEUED_BY_SUSPEND)).allowed
    forged = update(qg, job(suspend=False), job(suspend=True, annotation="true"))
    assert forged.allowed and forged.obj is not None
    assert forged.obj["metadata"]["annotations"][QUEUED_ANNOTATION] == QUEUED_BY_SUSPEND
    # an edit of a Job that stays suspended or running is not a suspend: nothing marked
    assert update(qg, job(suspend=False), job(suspend=False, team="x")).patch == []


@pytest.mark.parametrize("who", [(RECONCILER, SA_GROUPS), ("root", ADMIN)])
def test_the_reconciler_and_admins_suspend_without_the_mark(qg: Bundle, who: tuple[str, tuple[str, ...]]) -> None:
    d = update(qg, job(suspend=False), job(suspend=True), *who)
    assert d.allowed and d.patch == []


def test_a_suspend_the_webhook_did_not_mark_is_refused_in_a_gated_queue_only(qg: Bundle) -> None:
    """What the validating webhook decides when the mutating one was not asked."""
    def validated(queue: str) -> Decision:
        caller = Caller(operation="UPDATE", username="alice", groups=("system:authenticated",), namespace="demo")
        review = synthetic_review(job(queue, suspend=True), caller, old_object=job(queue, suspend=False))
        return decided(review, qg, phase="validate")
    d = validated("batch")
    assert not d.allowed and "suspended, it goes back to the queue" in d.message, d.message
    assert validated("scavenger").allowed


def sized(j: dict[str, Any], parallelism: int | None, completions: int | None = None) -> dict[str, Any]:
    j = copy.deepcopy(j)
    for field, n in (("parallelism", parallelism), ("completions", completions)):
        if n is not None:
            j["spec"][field] = n
    return j


def test_the_hostile_user_cannot_raise_a_released_jobs_size(qg: Bundle) -> None:
    """Kubernetes lets a running Job's parallelism (and an elastic Indexed Job's completions) grow:
    room the queue never planned. Raising is refused in a gated queue; lowering frees room."""
    running = job(suspend=False)
    d = update(qg, sized(running, 2, 2), sized(running, 50, 2))
    assert not d.allowed, d.message
    assert ("queue 'batch'" in d.message and "spec.parallelism from 2 to 50" in d.message
            and "suspend the Job" in d.message and "ask an admin" in d.message), d.message
    d = update(qg, sized(running, 2, 2), sized(running, 4, 4))
    assert not d.allowed and "spec.parallelism from 2 to 4 and spec.completions from 2 to 4" in d.message
    assert not update(qg, running, sized(running, 2)).allowed  # unset is 1
    assert not update(qg, sized(running, 4, 2), sized(running, 4, 3)).allowed
    assert update(qg, sized(running, 4, 4), sized(running, 2, 2)).allowed  # lowering frees room
    assert update(qg, sized(running, 2), sized(job(suspend=False, team="x"), 2)).allowed  # size kept


def test_a_suspended_job_may_change_size_and_the_queue_plans_the_new_one(qg: Bundle) -> None:
    """Suspended (queued, or suspending now) the Job is the queue's to place again, at its new size:
    the reconciler's model reads the spec it is given."""
    from webhook.reconciler.model import job_view

    queued_job = job(suspend=True, annotation="true")
    assert update(qg, sized(queued_job, 2, 2), sized(queued_job, 50, 50)).allowed
    assert update(qg, sized(job(suspend=False), 2), sized(job(suspend=True, annotation=QUEUED_BY_SUSPEND), 50)).allowed
    view = job_view(sized(queued_job, 50, 50))
    assert view.queued and view.wanted == 50


@pytest.mark.parametrize("who", [(RECONCILER, SA_GROUPS), ("root", ADMIN)])
def test_the_reconciler_and_admins_may_raise_a_running_jobs_size(qg: Bundle, who: tuple[str, tuple[str, ...]]) -> None:
    assert update(qg, sized(job(suspend=False), 2), sized(job(suspend=False), 50), *who).allowed


def test_a_user_may_raise_a_job_of_an_ungated_queue(qg: Bundle) -> None:
    running = job("scavenger", suspend=False)
    assert update(qg, sized(running, 2), sized(running, 50)).allowed
    other = "system:serviceaccount:batchgate-system:someone-else"
    assert not update(qg, sized(job(suspend=False), 2), sized(job(suspend=False), 3), other, SA_GROUPS).allowed


@pytest.mark.parametrize("who", [(RECONCILER, SA_GROUPS), ("root", ADMIN)])
def test_the_reconciler_and_admins_release(qg: Bundle, who: tuple[str, tuple[str, ...]]) -> None:
    assert update(qg, pod(gates=[QUEUE_GATE]), pod(), *who).allowed
    assert update(qg, job(suspend=True, annotation="true"), job(suspend=False), *who).allowed


def test_another_service_account_does_not_release(qg: Bundle) -> None:
    other = "system:serviceaccount:batchgate-system:someone-else"
    assert not update(qg, pod(gates=[QUEUE_GATE]), pod(), other, SA_GROUPS).allowed


def test_releasers_from_the_settings_replace_the_default(tmp_path: Path) -> None:
    b = bundle_with(tmp_path, lambda spec: None, settings={"releasers": {"serviceAccounts": ["ops/releaser"]}})
    old, new = job(suspend=True, annotation="true"), job(suspend=False)
    assert update(b, old, new, "system:serviceaccount:ops:releaser", ("system:serviceaccounts",)).allowed
    assert not update(b, old, new, RECONCILER, SA_GROUPS).allowed


def test_settings_refuse_unknown_keys(tmp_path: Path) -> None:
    e = settings_error(tmp_path, "queue-gate", "    releaser: {users: [x]}\n")
    assert "policy.yaml:8" in str(e) and "releaser" in str(e)


# -- queue states ----------------------------------------------------------------------
@pytest.mark.parametrize("state, word", [("drain", "draining"), ("stop", "stopped")])
def test_drain_and_stop_refuse_new_work_quoting_the_reason(tmp_path: Path, state: str, word: str) -> None:
    b = bundle_with(tmp_path, set_queue("batch", state=state, stateReason="storage move"))
    for obj in (pod(), job()):
        d = check(obj, bundle=b)
        assert not d.allowed and f"queue 'batch' is {word} (storage move)" in d.message


@pytest.mark.parametrize("state", ["drain", "stop"])
def test_drain_and_stop_still_let_waiting_work_be_released_and_jobs_make_pods(tmp_path: Path, state: str) -> None:
    b = bundle_with(tmp_path, set_queue("batch", state=state))
    assert update(b, job(suspend=True, annotation="true"), job(suspend=False), RECONCILER, SA_GROUPS).allowed
    p = load_sample("queue-gate", "pod-from-job.yaml")
    assert check(p, user=JOB_CONTROLLER, groups=("system:serviceaccounts",), bundle=b).allowed


def test_hold_admits_and_gates(tmp_path: Path) -> None:
    b = bundle_with(tmp_path, set_queue("batch", state="hold"))
    d = check(pod(), bundle=b)
    assert d.allowed and gated(d.obj)


def test_a_state_in_another_queue_refuses_nothing_here(tmp_path: Path) -> None:
    b = bundle_with(tmp_path, set_queue("interactive", state="stop"))
    assert check(job(), bundle=b).allowed
    assert not check(pod("interactive"), bundle=b).allowed


# -- UPDATE: a released workload's time limit ---------------------------------------------
def limited(obj: dict[str, Any], limit: str | None) -> dict[str, Any]:
    o = copy.deepcopy(obj)
    if limit is not None:
        o["metadata"].setdefault("annotations", {})["batchgate.io/time-limit"] = limit
    return o


def test_a_released_pod_or_job_may_not_raise_its_time_limit_its_user_may_lower_it(qg: Bundle) -> None:
    """Backfill released it because it ends, by its limit, before a reservation: raising the limit
    while it runs pushes back the start the queue promised the work after it."""
    for old, is_job in ((pod(), False), (job(suspend=False), True)):
        d = update(qg, limited(old, "10m"), limited(old, "7d"))
        assert not d.allowed, d
        assert ("runs in queue 'batch', which placed it, and promised the work after it a start, for its time "
                "limit of 10m; raising batchgate.io/time-limit to 7d") in d.message
        assert ("suspend the Job" in d.message) is is_job and "ask an admin to extend it" in d.message
        assert update(qg, limited(old, "10m"), limited(old, "5m")).allowed  # lowering
        assert update(qg, limited(old, None), limited(old, "1h")).allowed  # no limit was longer still


def test_a_waiting_or_requeued_workload_may_change_its_time_limit_and_admins_may_raise_it(qg: Bundle) -> None:
    assert update(qg, limited(pod(gates=[QUEUE_GATE]), "10m"), limited(pod(gates=[QUEUE_GATE]), "7d")).allowed
    queued_job = job(suspend=True, annotation="true")
    assert update(qg, limited(queued_job, "10m"), limited(queued_job, "7d")).allowed
    # suspended in the same request: back to the queue, which plans the new limit
    requeue = update(qg, limited(job(suspend=False), "10m"), limited(job(suspend=True), "7d"))
    assert requeue.allowed, requeue
    assert update(qg, limited(pod(), "10m"), limited(pod(), "7d"), user="root", groups=("system:masters",)).allowed
    assert update(qg, limited(pod("scavenger"), "10m"), limited(pod("scavenger"), "7d")).allowed  # not gated


# -- in-place resize (pods/resize) ------------------------------------------------------------
def resized(b: Bundle, old: dict[str, Any], new: dict[str, Any], user: str = "alice",
            groups: tuple[str, ...] = ("system:authenticated",), sub: str = "resize") -> Decision:
    """An UPDATE through the Pod's subresource ``sub``, as the API server sends it."""
    from webhook.engine import decide

    review = synthetic_review(new, Caller("UPDATE", user, groups, "demo", subresource=sub), old_object=old)
    return decide(review, b, phase="validate")


def sized_pod(cpu: str, memory: str = "1Gi", *, limit: str | None = None, sidecar: str | None = None,
              pod_level: str | None = None, gates: list[str] | None = None, queue: str = "batch") -> dict[str, Any]:
    p = pod(queue, gates)
    p["spec"]["containers"] = [{"name": "main", "image": "busybox", "resources": {
        "requests": {"cpu": cpu, "memory": memory}, **({"limits": {"cpu": limit}} if limit else {})}}]
    if sidecar is not None:
        p["spec"]["initContainers"] = [{"name": "proxy", "image": "busybox", "restartPolicy": "Always",
                                        "resources": {"requests": {"cpu": sidecar}}}]
    if pod_level is not None:
        p["spec"]["resources"] = {"requests": {"cpu": pod_level}}
    return p


def test_a_released_pods_requests_cannot_be_raised_in_place(qg: Bundle) -> None:
    """The queue placed the pod, and promised the work after it a start, by what it requested; a
    resize that raises a request (any container's, a sidecar's, the pod-level one, one not
    requested before) is refused, naming the queue and what to do."""
    d = resized(qg, sized_pod("1"), sized_pod("4"))
    assert not d.allowed
    assert ("Pod demo/sim runs in queue 'batch', which placed it" in d.message
            and "the cpu request of container 'main' from 1 to 4 in place (pods/resize)" in d.message
            and "delete it and submit it again with the new requests" in d.message and "ask an admin" in d.message), d.message
    assert "memory request of container 'main' from 1Gi to 1536Mi" in resized(
        qg, sized_pod("1"), sized_pod("500m", "1536Mi")).message  # each resource on its own
    assert "init container 'proxy' from 100m to 200m" in resized(
        qg, sized_pod("1", sidecar="100m"), sized_pod("900m", sidecar="200m")).message  # each container on its own
    assert "the pod (spec.resources) from 2 to 3" in resized(
        qg, sized_pod("1", pod_level="2"), sized_pod("1", pod_level="3")).message
    grown = sized_pod("1")
    grown["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    assert "the nvidia.com/gpu request of container 'main' from 0 to 1" in resized(qg, sized_pod("1"), grown).message


def test_lowering_requests_or_raising_a_limit_in_place_is_allowed(qg: Bundle) -> None:
    """As Kubernetes allows it: lowering frees room; the queue counts requests, not limits."""
    d = resized(qg, sized_pod("2", limit="2"), sized_pod("1", "512Mi", limit="4"))
    assert d.allowed and d.patch == [], d.message
    assert resized(qg, sized_pod("1000m"), sized_pod("1")).allowed  # the same amount written otherwise


def test_a_request_is_its_limit_where_it_has_none(qg: Bundle) -> None:
    """Kubernetes defaults a Pod's missing request to its limit: a request set up to that limit raises nothing."""
    old, new = sized_pod("1", limit="2"), sized_pod("1", limit="2")
    del old["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    assert resized(qg, old, new).allowed
    new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    assert not resized(qg, old, new).allowed


@pytest.mark.parametrize("who", [(RECONCILER, SA_GROUPS), ("root", ADMIN)])
def test_the_reconciler_and_admins_may_raise_requests_in_place(qg: Bundle, who: tuple[str, tuple[str, ...]]) -> None:
    assert resized(qg, sized_pod("1"), sized_pod("4"), *who).allowed


def test_a_waiting_pod_or_one_of_an_ungated_queue_may_be_resized(qg: Bundle) -> None:
    """Behind the gate it is still the queue's to place, at the size it has when its turn comes."""
    assert resized(qg, sized_pod("1", gates=[QUEUE_GATE]), sized_pod("4", gates=[QUEUE_GATE])).allowed
    assert resized(qg, sized_pod("1", queue="interactive"), sized_pod("4", queue="interactive")).allowed


def guaranteed(cpu: str, memory: str = "1Gi", *, limit_cpu: str | None = None, limit_memory: str | None = None,
               queue: str = "scavenger", owner: bool = False) -> dict[str, Any]:
    """A Pod of ``queue`` with requests ``cpu``/``memory`` and limits the same unless given."""
    p = pod(queue)
    limits = {"cpu": limit_cpu or cpu, "memory": limit_memory or memory}
    p["spec"]["containers"] = [{"name": "main", "image": "busybox", "resources": {
        "requests": {"cpu": cpu, "memory": memory}, "limits": {k: v for k, v in limits.items() if v != "-"}}}]
    if owner:
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "lysozyme-md-5",
                                             "uid": "u1", "controller": True}]
    return p


def test_a_scavenger_pods_requests_and_limits_cannot_be_raised_in_place(qg: Bundle) -> None:
    """A scavenger (its queue is not gated) started when it fit within the scavengers' share, by what it
    was admitted with: a user raising its requests (Guaranteed stays Guaranteed: both) is refused, naming why."""
    d = resized(qg, guaranteed("1", owner=True), guaranteed("4", "2Gi", owner=True))
    assert not d.allowed
    assert ("Pod demo/sim is a scavenger, in queue 'scavenger': it runs on idle capacity, started when it fit "
            "within the scavengers' share" in d.message), d.message
    assert ("the cpu request of container 'main' from 1 to 4; the memory request of container 'main' from 1Gi "
            "to 2Gi; the cpu limit of container 'main' from 1 to 4; the memory limit of container 'main' from 1Gi "
            "to 2Gi in place (pods/resize) would take more than the scavenger policy allowed" in d.message), d.message
    assert "(lowering is allowed)" in d.message and "or ask an admin" in d.message
    # a limit alone (a Burstable scavenger, admitted while the webhook was down): raised or removed
    assert "the memory limit of container 'main' from 2Gi to 4Gi" in resized(
        qg, guaranteed("1", limit_memory="2Gi"), guaranteed("1", limit_memory="4Gi")).message
    assert "the memory limit of container 'main' from 2Gi to none" in resized(
        qg, guaranteed("1", limit_memory="2Gi"), guaranteed("1", limit_memory="-")).message


def test_a_scavenger_pod_may_be_lowered_and_admins_and_the_reconciler_may_raise_it(qg: Bundle) -> None:
    d = resized(qg, guaranteed("2", "2Gi"), guaranteed("1", "1Gi"))
    assert d.allowed and d.patch == [], d.message
    assert resized(qg, guaranteed("1"), guaranteed("1000m", "1024Mi")).allowed  # the same, written otherwise
    for who in ((RECONCILER, SA_GROUPS), ("root", ADMIN)):
        assert resized(qg, guaranteed("1"), guaranteed("4"), *who).allowed


def test_a_scavenger_behind_the_gate_of_a_gated_scavenger_queue_may_not_grow_either(tmp_path: Path) -> None:
    """The gate defers a gated queue's plan, not the scavengers' share: a scavenger is guarded either way."""
    b = bundle_with(tmp_path, set_queue("scavenger", gated=True))
    old, new = guaranteed("1"), guaranteed("2")
    for p in (old, new):
        p["spec"]["schedulingGates"] = [{"name": QUEUE_GATE}]
    assert "is a scavenger, in queue 'scavenger'" in resized(b, old, new).message


def test_only_the_resize_subresource_is_judged_and_only_by_its_judges() -> None:
    """Another subresource (status: the kubelet's) is left alone; a resize runs no policy but those
    that judge one (RuleType.resize), whatever else the bundle holds; the mutating phase none."""
    b = shipped_bundle()
    d = resized(b, sized_pod("1"), sized_pod("4"), sub="status")
    assert d.allowed and d.skipped == "subresource status"
    d = resized(b, sized_pod("1"), sized_pod("4"))
    assert not d.allowed and [name for name, _ in d.outcomes] == ["queue-gate"], d.outcomes
    from webhook.engine import decide

    review = synthetic_review(sized_pod("4"), Caller("UPDATE", "alice", ("system:authenticated",), "demo",
                                                     subresource="resize"), old_object=sized_pod("1"))
    assert decide(review, b, phase="mutate").skipped == "subresource resize"
