"""The reconciler acts only on what it has confirmed: owners in the pod's own
namespace, nodes confirmed gone by a live read, start times not before creation, a lowered queue
maximum warned about first, and ``--once`` saying what is wrong with its namespace or lease."""

from __future__ import annotations

import copy
import dataclasses
import io

import pytest
from fakeapi import FakeApi
from reconbuild import HOUR, T0, deadline_ann, group_labels, job, pod, snapshot, terminated, ts

from tests.unit.reconciler.test_planner_maintenance import mw
from tests.unit.reconciler.test_planner_maintenance import node as mw_node
from tests.unit.reconciler.test_runtimes import MIN, done_job
from tests.unit.reconciler.test_scavenger_controller import sj
from tests.unit.reconciler.test_shadow import node as shadow_node
from tests.unit.reconciler.test_shadow import running as shadow_running
from tests.unit.reconciler.test_shadow import snap as shadow_snap
from tests.unit.reconciler.test_shadow import waiting as shadow_waiting
from tests.unit.reconciler.test_shadow import with_spec
from webhook.contract import (
    DEADLINE_ANNOTATION,
    EXPECTED_START_ANNOTATION,
    NEXT_MAINTENANCE_ANNOTATION,
)
from webhook.reconciler import victims
from webhook.reconciler.controller import Controller
from webhook.reconciler.errors import NotFound, Transient
from webhook.reconciler.maintenance import plan_maintenance
from webhook.reconciler.model import Snapshot, job_of, job_view, pod_view, window_view
from webhook.reconciler.planner import plan
from webhook.reconciler.report import maintenance_rows, queue_rows
from webhook.reconciler.runtimes import finished_runs
from webhook.reconciler.scavenger import sj_view
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.reconciler.shadow import shadow_schedule

G = group_labels("mpi", 2)
FAILED = {"containers": [terminated(1)], "phase": "Failed"}


# -- owners -----------------------------------------------------------------------------------
def test_a_forged_owner_reference_to_another_namespaces_job_tears_nothing_down() -> None:
    victim = job("train", ns="team-b", template_labels=G)
    # Two pods in the attacker's namespace naming the victim Job's uid, one of them failed.
    forged = [pod(f"x-{i}", ns="team-a", owner=victim, labels=G, **(FAILED if i else {})) for i in range(2)]
    result = plan(snapshot(victim, *forged), T0 + 60, Settings())
    assert [a for a in result.actions if victim["metadata"]["uid"] in (a.target.uid, *(d.ref.uid for d in a.deletes))] == []
    assert not any(d.ref.name == "train" for a in result.actions for d in a.deletes)


def test_an_owner_reference_with_the_right_uid_but_another_name_confirms_nothing() -> None:
    victim = job("train", template_labels=G)
    liar = copy.deepcopy(victim)
    liar["metadata"]["name"] = "mine"
    forged = [pod(f"x-{i}", owner=liar, labels=G, **(FAILED if i else {})) for i in range(2)]
    assert plan(snapshot(victim, *forged), T0 + 60, Settings()).actions == []


@pytest.mark.parametrize("api_version", ["batch/v2", "example.com/v1"])
def test_an_owner_reference_of_another_api_version_confirms_nothing(api_version: str) -> None:
    """Same namespace, name and uid, but not ``batch/v1``: the garbage collector knows no such Job and
    leaves the pod alone, so batchgate takes it for no pod of the Job either (``model.owns``)."""
    j = job("train", template_labels=G)
    pods = [pod(f"train-{i}", owner=j, labels=G, **(FAILED if i else {})) for i in range(2)]
    for p in pods:
        p["metadata"]["ownerReferences"][0]["apiVersion"] = api_version
    s = snapshot(j, *pods)
    assert [job_of(s, pod_view(p)) for p in pods] == [None, None]
    assert plan(s, T0 + 60, Settings()).actions == []


def test_the_real_owner_still_tears_its_gang_down() -> None:
    j = job("train", template_labels=G)
    pods = [pod(f"train-{i}", owner=j, labels=G, **(FAILED if i else {})) for i in range(2)]
    kinds = [(a.kind, a.target.name) for a in plan(snapshot(j, *pods), T0 + 60, Settings()).actions]
    assert kinds == [("gang-restart", "train")]


def test_forged_pods_do_not_make_another_namespaces_job_older() -> None:
    victim = job("train", ns="team-b", annotations=deadline_ann("4h"))
    real = pod("train-0", ns="team-b", owner=victim, started=0)
    forged = pod("old", ns="team-a", owner=victim, started=-10 * HOUR)
    actions = plan(snapshot(victim, real, forged), T0 + 60, Settings()).actions
    assert [(a.kind, a.reason) for a in actions] == [("record-deadline", "DeadlineSet")]
    assert actions[0].annotations[DEADLINE_ANNOTATION] == ts(4 * HOUR)



# -- the same, everywhere a pod is taken for a Job's (model.job_of) ----------------------------
# An ownerReference is namespace-local: a pod in team-a naming the uid of team-b's Job "train" is no
# pod of it. The planner's deadlines and gangs asked ``owns`` already; these asked the uid alone.
def _in(ns: str, obj: dict) -> dict:
    obj["metadata"]["namespace"], obj["metadata"]["uid"] = ns, f"uid-{ns}-{obj['metadata']['name']}"
    return obj


def test_a_pod_naming_another_namespaces_job_neither_dates_its_run_nor_moves_the_estimates_it_feeds() -> None:
    """runtimes.finished_runs: a Job that completed before a started-at was recorded starts with its
    earliest pod. A forged pod that started 5 h ago made team-b's 20-minute run last 2 h 20 min, and
    the waiting work behind team-b's running job was expected to start 100 minutes later."""
    victim = done_job("before", ns="team-b", started=None, completed=-3 * HOUR + 20 * MIN, image="busybox")
    own = pod("before-0", ns="team-b", owner=victim, phase="Succeeded",
              containers=[terminated(0, started=-3 * HOUR, finished=-3 * HOUR + 20 * MIN)])
    forged = pod("x", ns="team-a", owner=victim, phase="Succeeded",
                 containers=[terminated(0, started=-5 * HOUR, finished=-4 * HOUR)])
    (run,) = finished_runs(Snapshot.of(pods=[pod_view(own), pod_view(forged)], jobs=[job_view(victim)]))
    assert (run.key, run.seconds) == (("team-b", "batch", "busybox"), 20 * MIN)
    s = shadow_snap(victim, own, forged, _in("team-b", shadow_running("r1", "n1", limit="2h", cpu="4", started=-10 * MIN)),
                    _in("team-b", shadow_waiting("w1", cpu="4")), nodes=[shadow_node("n1")])
    (a,) = [a for a in plan(s, T0, Settings()).actions if a.kind == "expected-start"]
    assert (a.target.name, a.annotations[EXPECTED_START_ANNOTATION]) == ("w1", ts(10 * MIN))  # type: ignore[index]


def test_a_pod_naming_another_namespaces_job_ties_no_maintenance_window_to_it() -> None:
    """maintenance._record_on_jobs: team-b's Job runs on n2; a forged pod on n1, where a window starts
    in 3 h, gave the Job batchgate.io/next-maintenance, and the webhook then refused to extend its
    time limit past that window (issue 27's kind of harm: another tenant's edit changes your job)."""
    victim = job("train", ns="team-b", annotations={"batchgate.io/time-limit": "8h"})
    own = pod("train-0", ns="team-b", owner=victim, node="n2")
    forged = pod("x", ns="team-a", owner=victim, node="n1")
    s = Snapshot.of(pods=[pod_view(own), pod_view(forged)], jobs=[job_view(victim)],
                    nodes=[mw_node("n1"), mw_node("n2")], windows=[window_view(mw("fw", 3 * HOUR, 5 * HOUR, nodes=["n1"]))])
    actions, _ = plan_maintenance(s, T0, Settings())
    assert [a.line() for a in actions if a.kind == "record-maintenance"] == []
    # its own pod on n1 ties it, as before
    s = dataclasses.replace(s, pods={**s.pods, ("team-b", "train-1"): pod_view(pod("train-1", ns="team-b", owner=victim,
                                                                                      node="n1"))})
    (a,) = [a for a in plan_maintenance(s, T0, Settings())[0] if a.kind == "record-maintenance"]
    assert a.target.name == "train" and '"window":"fw"' in a.annotations[NEXT_MAINTENANCE_ANNOTATION]  # type: ignore[index,operator]


def test_batchgate_queue_and_maintenance_show_no_forged_pod_as_another_namespaces_job() -> None:
    """report: team-b's Job has no pod running; a forged pod in team-a on n1 made ``batchgate queue``
    list team-b/train as Running on n1, and ``batchgate maintenance`` name team-b's Job as the one
    the window stops, instead of team-a's pod."""
    victim = job("train", ns="team-b", annotations=deadline_ann("8h", started=-HOUR, deadline=7 * HOUR))
    forged = pod("x", ns="team-a", owner=victim, node="n1", started=-HOUR)
    s = Snapshot.of(pods=[pod_view(forged)], jobs=[job_view(victim)], nodes=[shadow_node("n1")],
                    windows=[window_view(mw("fw", HOUR, 2 * HOUR, nodes=["n1"]))])
    assert [(r["namespace"], r["name"], r["state"]) for r in queue_rows(s, T0) if r["state"] == "Running"] == []
    (row,) = maintenance_rows(s, T0)
    assert row["stops"] == ["Pod team-a/x"]


def test_an_admitted_pod_no_job_confirms_is_listed_and_told_its_window_as_a_job_of_its_own() -> None:
    """The planner times an admitted pod whose Job owner is unconfirmed (here: another namespace's)
    alone, as a bare job (``model.own_job``): ``batchgate queue`` lists it as running, and it gets
    ``batchgate.io/next-maintenance`` for the window on its node, as a bare pod does. A pod of a
    ReplicaSet (no admission record) is no job and gets neither."""
    victim = job("train", ns="team-b", annotations={"batchgate.io/time-limit": "8h"})
    forged = pod("x", ns="team-a", owner=victim, node="n1", started=-HOUR, admitted=("batch", "8h"),
                 annotations=deadline_ann("8h", started=-HOUR, deadline=7 * HOUR))
    service = pod("web", ns="team-a", owner=victim, node="n1", started=-HOUR, admitted=None,
                  annotations={"batchgate.io/time-limit": "8h"})
    service["metadata"]["ownerReferences"][0].update({"apiVersion": "apps/v1", "kind": "ReplicaSet"})
    s = Snapshot.of(pods=[pod_view(forged), pod_view(service)], jobs=[job_view(victim)], nodes=[mw_node("n1")],
                    windows=[window_view(mw("fw", 3 * HOUR, 5 * HOUR, nodes=["n1"]))])
    assert [(a.kind, a.target.name) for a in plan(s, T0, Settings()).actions if a.kind == "record-deadline"] == []
    (a,) = [a for a in plan_maintenance(s, T0, Settings())[0] if a.kind == "record-maintenance"]
    assert (a.target.kind, a.target.namespace, a.target.name) == ("Pod", "team-a", "x")
    assert '"window":"fw"' in a.annotations[NEXT_MAINTENANCE_ANNOTATION]  # type: ignore[index,operator]
    rows = [(r["kind"], r["namespace"], r["name"], r["reason"]) for r in queue_rows(s, T0) if r["state"] == "Running"]
    assert rows == [("Pod", "team-a", "x", "on n1")]


def test_a_pod_naming_another_namespaces_job_does_not_join_its_estimate() -> None:
    """shadow.shadow_schedule: a forged pending pod asking for 64 CPUs joined team-b's waiting Job
    (older, so its requests stood for the Job's): the Job "never fits", and its expected start said so."""
    victim = job("train", ns="team-b", annotations={"batchgate.io/time-limit": "1h"})
    own = with_spec(pod("train-0", ns="team-b", owner=victim, phase="Pending", node="", started=None), cpu="1")
    forged = with_spec(pod("x", ns="team-a", owner=victim, phase="Pending", node="", started=None), cpu="64",
                       created=-2 * HOUR)
    got = {e.workload.name: (e.start, e.never, e.pods)
           for e in shadow_schedule(shadow_snap(victim, own, forged, nodes=[shadow_node("n1")]), T0, [])}
    assert got == {"train": (T0, False, 1)}, got


def test_a_scavenger_pod_naming_another_namespaces_segment_job_is_no_part_of_its_gang() -> None:
    """victims.scavenger_gangs: which pods a preemption takes together. A pod in mallory naming the uid
    of team-b's ScavengerJob segment Job joined that ScavengerJob's gang: evicting either took both."""
    real = sj("md", ns="team-b")
    real["metadata"]["uid"] = "sj-uid"
    segment = job("md-1", ns="team-b")
    segment["metadata"]["ownerReferences"] = [{"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob",
                                               "name": "md", "uid": "sj-uid", "controller": True}]
    own = _in("team-b", with_spec(pod("md-1-0", owner=segment, node="a", started=-600), cpu="2", priority=-1000))
    own["metadata"]["ownerReferences"][0]["uid"] = segment["metadata"]["uid"]
    forged = _in("mallory", with_spec(pod("x", owner=segment, node="b", started=-600), cpu="2", priority=-1000))
    snap = dataclasses.replace(
        Snapshot.of(pods=[pod_view(own), pod_view(forged)], jobs=[job_view(segment)],
                    nodes=[shadow_node("a"), shadow_node("b")]),
        scavenger_jobs={("team-b", "md"): sj_view(real)})
    gangs = {g.ref.namespace + "/" + g.ref.name: sorted(p.ref.name for p in g.pods)
             for g in victims.scavenger_gangs(snap, T0, 0, [])}
    assert gangs == {"team-b/md": ["md-1-0"], "mallory/x": ["x"]}, gangs


# -- clocks -----------------------------------------------------------------------------------
def _created(obj: dict, offset: float) -> dict:
    obj["metadata"]["creationTimestamp"] = ts(offset)
    return obj


def test_an_old_pod_re_parented_to_a_colleagues_job_neither_ages_it_nor_tears_it_down() -> None:
    """Same namespace: alice's own pod, running for ten days, gets an ownerReference to bob's Job
    (made an hour ago) by an UPDATE; it used to make the Job ten days old, past its limit, and stop
    it. Its creationTimestamp (the API server's, which no UPDATE changes) is older than the Job's:
    not the Job's pod. A failed one re-parented into a gang does not tear the gang down either."""
    victim = _created(job("train", annotations=deadline_ann("4h"), template_labels=G), -HOUR)
    real = _created(pod("train-0", owner=victim, started=-HOUR + 10, labels=G), -HOUR + 5)
    old = _created(pod("old", owner=victim, started=-10 * 24 * HOUR), -10 * 24 * HOUR)
    actions = plan(snapshot(victim, real, old), T0, Settings()).actions
    assert [(a.kind, a.reason) for a in actions] == [("record-deadline", "DeadlineSet")]
    assert actions[0].annotations[DEADLINE_ANNOTATION] == ts(-HOUR + 10 + 4 * HOUR)
    failed = _created(pod("old-failed", owner=victim, labels=G, **FAILED), -2 * HOUR)
    actions = plan(snapshot(victim, real, failed), T0, Settings()).actions
    assert not any(a.kind.startswith("gang") for a in actions), [a.kind for a in actions]
    # a pod of the Job created in the same second (or a little before, by another API server's clock)
    same = _created(pod("train-1", owner=victim, started=-HOUR + 3, labels=G), -HOUR - 2)
    (a,) = plan(snapshot(victim, real, same), T0, Settings()).actions
    assert a.annotations[DEADLINE_ANNOTATION] == ts(-HOUR + 3 + 4 * HOUR)


def _made_for(obj: dict, job_uid: str) -> dict:
    """The webhook's record of which Job's controller made the pod ("": none; on a Job: the empty
    entry of its template, which says the record is kept)."""
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    for c in spec["containers"]:
        c.setdefault("env", []).append({"name": "BATCHGATE_JOB_UID", **({"value": job_uid} if job_uid else {})})
    return obj


def test_a_new_pod_re_parented_to_a_colleagues_job_neither_dates_it_nor_joins_its_gang() -> None:
    """Issue 27: alice's pod, created after bob's Job (so its creationTimestamp proves nothing),
    running since then, is re-parented to the Job by an UPDATE. Its admission record says no Job's
    controller made it: it does not date the Job (whose own pod started 50 minutes later), and a
    failed one does not restart the Job's gang. The Job's own pod, which its controller made, does."""
    victim = _made_for(_created(job("train", annotations=deadline_ann("4h"), template_labels=G), -HOUR), "")
    uid = victim["metadata"]["uid"]
    real = _made_for(_created(pod("train-0", owner=victim, started=-600, labels=G, admitted=("batch", "4h")),
                              -700), uid)
    mine = _made_for(_created(pod("mine", owner=victim, started=-HOUR + 60, labels=G,
                                  admitted=("batch", "4h")), -HOUR + 30), "")
    def on_job(*objs: dict) -> list:
        return [a for a in plan(snapshot(victim, *objs), T0, Settings()).actions if a.target.uid == uid]

    (a,) = on_job(real, mine)  # (her pod, admitted with a limit and no Job's, gets its own deadline)
    assert (a.kind, a.reason) == ("record-deadline", "DeadlineSet")
    assert a.annotations[DEADLINE_ANNOTATION] == ts(-600 + 4 * HOUR)
    assert pod_view(real).made_for == uid and pod_view(mine).made_for == ""
    # its uid written by hand is no record: the webhook replaces it at CREATE (test_time_limit.py);
    # a pod with no Job uid entry at all is no Job's either
    unrecorded = _created(pod("bare", owner=victim, started=-HOUR + 60, labels=G, admitted=("batch", "4h")),
                          -HOUR + 30)
    (a,) = on_job(real, unrecorded)
    assert a.annotations[DEADLINE_ANNOTATION] == ts(-600 + 4 * HOUR)
    failed = _made_for(_created(pod("mine-failed", owner=victim, labels=G, admitted=("batch", "4h"), **FAILED),
                                -HOUR + 30), "")
    actions = plan(snapshot(victim, real, failed), T0, Settings()).actions
    assert not any(a.kind.startswith("gang") for a in actions), [a.kind for a in actions]
    # A Job admitted before the webhook recorded the maker: a pod made after it counts, as before.
    legacy = _created(job("train", annotations=deadline_ann("4h"), template_labels=G, uid=uid), -HOUR)
    (a,) = plan(snapshot(legacy, real, mine), T0, Settings()).actions
    assert a.target.uid == uid and a.annotations[DEADLINE_ANNOTATION] == ts(-HOUR + 60 + 4 * HOUR)


def test_a_node_clock_behind_cannot_make_a_pod_older_than_it_is() -> None:
    # Created 10 minutes ago by the API server's clock; the node says its container started 5h ago.
    p = _created(pod("p", started=-5 * HOUR, annotations=deadline_ann("1h")), -600)
    assert pod_view(p).started == T0 - 600
    actions = plan(snapshot(p), T0, Settings()).actions
    assert [(a.kind, a.reason) for a in actions] == [("record-deadline", "DeadlineSet")]
    assert actions[0].annotations[DEADLINE_ANNOTATION] == ts(-600 + HOUR)


def test_a_node_clock_ahead_cannot_postpone_a_deadline() -> None:
    p = pod("p", started=3 * HOUR, annotations=deadline_ann("1h"))  # "starts" 3h from now
    (a,) = plan(snapshot(p), T0, Settings(warning_lead=60)).actions
    assert a.annotations[DEADLINE_ANNOTATION] == ts(HOUR)


# -- a lowered queue maximum ---------------------------------------------------------------------
OLD = QueuePolicy(max_time_limit={"batch": 7 * 24 * HOUR}, default_queue="batch")
NEW = QueuePolicy(max_time_limit={"batch": 12 * HOUR}, default_queue="batch")


def test_lowering_a_queue_maximum_warns_first_and_stops_after_the_warning_lead() -> None:
    # A 3-day job, 20h in, deadline recorded under the old 7-day maximum; the bundle now says 12h.
    j = job("long", annotations=deadline_ann("3d", started=0, deadline=72 * HOUR))
    p = pod("long-0", owner=j, started=0)
    changed = T0 + 20 * HOUR
    s = Settings(queues=NEW, queues_since=changed, warning_lead=600)
    first = plan(snapshot(j, p), changed, s).actions
    assert [(a.kind, a.reason) for a in first] == [("record-deadline", "TimeLimitReduced"),
                                                  ("warn", "TimeLimitApproaching")]
    assert first[0].annotations[DEADLINE_ANNOTATION] == ts(20 * HOUR + 600)
    assert "maximum was lowered" in first[0].message
    # Recorded and warned: nothing until the lead is over, then it stops.
    j2 = job("long", annotations=deadline_ann("3d", started=0, deadline=20 * HOUR + 600, warned=20 * HOUR + 600))
    assert plan(snapshot(j2, p), changed + 300, s).actions == []
    assert [a.kind for a in plan(snapshot(j2, p), changed + 600, s).actions] == ["stop"]


def test_rewriting_the_recorded_deadline_does_not_renew_the_grace() -> None:
    p_later = job("long", annotations=deadline_ann("3d", started=0, deadline=72 * HOUR))  # forged back
    pod_ = pod("long-0", owner=p_later, started=0)
    s = Settings(queues=NEW, queues_since=T0 + 20 * HOUR, warning_lead=600)
    assert [a.kind for a in plan(snapshot(p_later, pod_), T0 + 21 * HOUR, s).actions] == ["stop"]


def test_without_a_change_a_job_past_the_maximum_stops_as_before() -> None:
    j = job("long", annotations=deadline_ann("3d"))
    p = pod("long-0", owner=j, started=0)
    assert [a.kind for a in plan(snapshot(j, p), T0 + 13 * HOUR, Settings(queues=NEW)).actions] == ["stop"]


def test_the_controller_dates_a_new_queue_policy_when_the_bundle_changes() -> None:
    now = [T0]
    policies = [OLD]
    c = Controller(FakeApi(), Settings(leader_elect=False, queues=OLD), clock=lambda: now[0],
                   reload_policy=lambda: policies[0])
    now[0] = T0 + 50
    c._reload()
    assert c.settings.queues_since is None  # unchanged: no new date
    policies[0] = NEW
    now[0] = T0 + 100
    c._reload()
    assert c.settings.queues == NEW and c.settings.queues_since == T0 + 100


# -- nodes ----------------------------------------------------------------------------------------
def _gang_on(node: str) -> tuple[FakeApi, Controller]:
    api = FakeApi()
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    j = api.put(job("mpi", template_labels=G))
    api.put(pod("mpi-0", owner=j, labels=G))
    api.put(pod("mpi-1", owner=j, labels=G, node=node))
    c = Controller(api, Settings(leader_elect=False), clock=lambda: T0 + 60)
    c.cache.list_once()
    return api, c


def test_a_node_missing_from_the_cache_but_alive_is_read_and_nothing_is_torn_down() -> None:
    api, c = _gang_on("node-2")
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}})  # the watch has not told us yet
    assert c.run_pass() == []
    assert ("get", "nodes", "", "node-2") in api.calls
    assert "node-2" in c.cache.snapshot().nodes  # read once, now cached


def test_a_node_that_cannot_be_read_is_not_taken_for_gone() -> None:
    api, c = _gang_on("node-2")
    api.fail["get"] = [Transient("no response", status=0)]
    assert c.run_pass() == []


def test_a_node_confirmed_gone_by_a_live_read_interrupts_the_gang() -> None:
    api, c = _gang_on("node-2")
    outcomes = c.run_pass()
    assert ("get", "nodes", "", "node-2") in api.calls
    assert [(o.action.kind, o.action.target.name) for o in outcomes] == [("gang-interrupted", "mpi")]
    assert "node node-2 is gone" in outcomes[0].action.message


# -- --once says what is wrong ---------------------------------------------------------------------
def test_once_with_a_namespace_that_does_not_exist_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi()
    c = Controller(api, Settings(leader_elect=False, namespace="tema-a"), out=io.StringIO())
    assert c.run_once() == 2
    assert "namespace tema-a does not exist" in capsys.readouterr().err
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tema-a"}})
    assert c.run_once() == 0


def test_once_with_a_lease_namespace_that_does_not_exist_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi()
    api.fail["create"] = [NotFound('namespaces "batchgate-sytem" not found', status=404)]
    c = Controller(api, Settings(lease_namespace="batchgate-sytem", identity="me"), out=io.StringIO())
    assert c.run_once() == 2
    err = capsys.readouterr().err
    assert "lease batchgate-sytem/batchgate-reconciler" in err
    assert "namespace batchgate-sytem does not exist" in err and "--no-leader-elect" in err
