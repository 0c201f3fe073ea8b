"""A released Job whose planned node vanished is re-queued (requeue.py, through planner.plan).

The queue narrows every release to the nodes its placement chose; a started Job's template cannot
change, so a Job kept to a node that was deleted, cordoned or went not ready would wait Pending until
its time limit. On confirmed facts only, the reconciler suspends it again, clears its start time,
takes its narrowing out and leaves it queued: the next pass releases it onto nodes that exist."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.reconciler.reconbuild import HOUR, T0, group_labels, pod, running, terminated, ts
from tests.unit.reconciler.test_queue import POLICY, queued_job
from tests.unit.reconciler.test_shadow import node, snap
from webhook.contract import (
    DEADLINE_ANNOTATION,
    QUEUED_ANNOTATION,
    QUEUED_BY_SUSPEND,
    REQUEUED_AT_ANNOTATION,
    STARTED_AT_ANNOTATION,
    WARNED_FOR_ANNOTATION,
)
from webhook.reconciler.actions import Action
from webhook.reconciler.model import job_view, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings
from webhook.reconciler.victims import narrowed_terms, narrowing, unnarrowed_terms
from webhook.units import format_time

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TWO = [node("a"), node("b")]
OWN_TERM = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}


def released_job(name: str = "j", *, kept_to: tuple[str, ...] = ("a",), own: list[dict[str, Any]] | None = None,
                 gang: int = 0, pods: int = 1, **kw: Any) -> dict[str, Any]:
    """A Job the queue released narrowed to ``kept_to`` (its release patch applied), that ran."""
    j = queued_job(name, pods=pods, **kw)
    del j["metadata"]["annotations"][QUEUED_ANNOTATION]
    j["spec"]["suspend"] = False
    j["status"] = {"startTime": ts(-HOUR / 2), "active": pods}
    t = j["spec"]["template"]
    if gang:
        t["metadata"]["labels"].update(group_labels(name, gang))
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": sorted(kept_to)}]}]
    if own is not None:
        terms = [{**o, "matchFields": [*o.get("matchFields", []), *terms[0]["matchFields"]]} for o in own]
    t["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
    return j


def job_pod(name: str, job: dict[str, Any], *, node_name: str = "", phase: str = "Pending",
            unschedulable: bool = True, created: float = -HOUR / 4, **kw: Any) -> dict[str, Any]:
    conditions = ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
                  if unschedulable and phase == "Pending" else None)
    p = pod(name, owner=job, node=node_name, phase=phase, conditions=conditions,
            started=None if phase == "Pending" else -HOUR / 2, admitted=None, **kw)
    p["metadata"]["creationTimestamp"] = ts(created)
    return p


def acts(*objs: dict[str, Any], nodes: list[Any] = TWO, at: float = T0) -> list[Action]:
    return [a for a in plan(snap(*objs, nodes=nodes), at, Settings(queues=POLICY), estimate=False).actions
            if a.kind.startswith("requeue") or a.kind == "release"]


def gone(*names: str) -> list[Any]:
    return [n for n in TWO if n.name not in names]


def cordoned(name: str) -> list[Any]:
    out = []
    for n in TWO:
        out.append(n if n.name != name else type(n)(**{**{f: getattr(n, f) for f in n.__slots__},
                                                         "unschedulable": True}))
    return out


# -- the narrowing, read back ---------------------------------------------------------------------
@pytest.mark.parametrize("own", [None, [OWN_TERM], [OWN_TERM, {"matchFields": [
    {"key": "metadata.name", "operator": "NotIn", "values": ["c"]}]}]], ids=["no terms", "one", "two"])
def test_the_narrowing_the_release_writes_is_read_back_and_taken_out_exactly(own: Any) -> None:
    j = queued_job("j")
    if own is not None:
        j["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": own}}}
    sched = job_view(j).template
    assert sched is not None and narrowing(sched) is None
    j["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms":
                                                                              narrowed_terms(sched, ["b", "a"])}}}
    narrowed = job_view(j).template
    assert narrowed is not None and narrowing(narrowed) == ("a", "b")
    assert unnarrowed_terms(narrowed) == own


@pytest.mark.parametrize("terms", [
    [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b", "a"]}]}],  # not as we sort
    [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}],
    [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}, OWN_TERM],  # not in every term
    [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}],  # not the same nodes
], ids=["unsorted", "NotIn", "one term of two", "two node sets"])
def test_a_node_affinity_not_shaped_as_the_release_writes_it_is_no_narrowing(terms: Any) -> None:
    j = queued_job("j")
    j["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
    sched = job_view(j).template
    assert sched is not None and narrowing(sched) is None


# -- step 1: suspended and queued again -----------------------------------------------------------
@pytest.mark.parametrize("nodes, why", [(gone("a"), "node a is gone"), (cordoned("a"), "node a is cordoned")],
                         ids=["deleted", "cordoned"])
def test_a_job_kept_to_a_vanished_node_with_a_pod_that_cannot_be_placed_is_re_queued(nodes: Any, why: str) -> None:
    j = released_job()
    j["metadata"]["annotations"].update({STARTED_AT_ANNOTATION: ts(-HOUR / 2), DEADLINE_ANNOTATION: ts(HOUR / 2)})
    failed = job_pod("j-1", j, node_name="a", phase="Failed", containers=[terminated(1, started=-HOUR / 2)],
                     created=-HOUR / 2)
    (a,) = acts(j, failed, job_pod("j-2", j), nodes=nodes)
    assert a.kind == "requeue" and a.reason == "Requeued" and a.event_type == "Warning" and a.tell_after
    assert why in a.message and "j-2" in a.message and "'batch'" in a.message
    assert a.patch == {"metadata": {"resourceVersion": "20", "annotations": {
        QUEUED_ANNOTATION: "true", REQUEUED_AT_ANNOTATION: format_time(T0), STARTED_AT_ANNOTATION: None,
        DEADLINE_ANNOTATION: None, "batchgate.io/warned-for": None}}, "spec": {"suspend": True}}


def test_nothing_is_done_without_every_fact() -> None:
    j = released_job()
    stuck = job_pod("j-2", j)
    assert [a.kind for a in acts(j, stuck, nodes=gone("a"))] == ["requeue"]  # the case itself
    assert acts(j, stuck) == []  # its node is there: it waits for room like any pod
    assert acts(j, job_pod("j-2", j, unschedulable=False), nodes=gone("a")) == []  # not tried yet
    assert acts(j, job_pod("j-2", j, node_name="b", phase="Running"), nodes=gone("a")) == []  # placed
    assert acts(j, nodes=gone("a")) == []  # no pod waits
    deleting = job_pod("j-2", j)
    deleting["metadata"]["deletionTimestamp"] = ts(0)
    assert acts(j, deleting, nodes=gone("a")) == []
    stranger = job_pod("j-2", j)
    stranger["metadata"]["creationTimestamp"] = ts(-2 * HOUR)  # older than the Job: not its controller's
    assert acts(j, stranger, nodes=gone("a")) == []
    assert acts(j, stuck, nodes=None) == []  # type: ignore[arg-type]  # nodes unknown: nothing is confirmed


def test_only_jobs_the_queue_released_with_its_own_narrowing_are_re_queued() -> None:
    j = released_job()
    own_pin = copy.deepcopy(j)
    own_pin["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"][0][
        "matchFields"][0]["values"] = ["a", "a"]  # the user's own pin, not shaped as a release writes it
    assert acts(own_pin, job_pod("j-2", own_pin), nodes=gone("a")) == []
    other_queue = copy.deepcopy(j)
    other_queue["metadata"]["labels"]["batchgate.io/queue"] = "scavenger"
    other_queue["spec"]["template"]["metadata"]["labels"]["batchgate.io/queue"] = "scavenger"
    assert acts(other_queue, job_pod("j-2", other_queue), nodes=gone("a")) == []  # not a gated queue
    never_ran = copy.deepcopy(j)
    never_ran["status"] = {}
    assert acts(never_ran, job_pod("j-2", never_ran), nodes=gone("a")) == []
    finished = copy.deepcopy(j)
    finished["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    assert acts(finished, job_pod("j-2", finished), nodes=gone("a")) == []


def test_a_job_with_a_planned_node_left_waits_there_but_a_gang_starts_over_whole() -> None:
    j = released_job(kept_to=("a", "b"), pods=2)
    on_b = job_pod("j-1", j, node_name="b", phase="Running", created=-HOUR / 2)
    assert acts(j, on_b, job_pod("j-2", j), nodes=gone("a")) == []  # b is left for it: no running pod stopped
    assert [a.kind for a in acts(j, job_pod("j-2", j), nodes=[])] == ["requeue"]  # none left at all
    g = released_job("g", kept_to=("a", "b"), pods=2, gang=2)
    g_on_b = job_pod("g-1", g, node_name="b", phase="Running", created=-HOUR / 2)
    (a,) = acts(g, g_on_b, job_pod("g-2", g), nodes=gone("a"))
    assert a.kind == "requeue" and "node a is gone" in a.message  # the gang cannot be whole: all of it goes


def test_a_not_ready_node_counts_as_vanished() -> None:
    j = released_job()
    not_ready = [node("a"), node("b")]
    not_ready[0] = type(not_ready[0])(**{**{f: getattr(not_ready[0], f) for f in not_ready[0].__slots__},
                                         "ready": "Unknown"})
    (a,) = acts(j, job_pod("j-2", j), nodes=not_ready)
    assert "node a is not ready" in a.message


# -- steps 2 and 3, then the ordinary release -----------------------------------------------------
def requeued(j: dict[str, Any], *, started: bool) -> dict[str, Any]:
    """``j`` after the requeue patch (and, with ``started`` False, the start time cleared)."""
    r = copy.deepcopy(j)
    r["metadata"]["annotations"].update({QUEUED_ANNOTATION: "true", REQUEUED_AT_ANNOTATION: ts(-60)})
    r["metadata"]["resourceVersion"] = "31"
    r["spec"]["suspend"] = True
    if not started:
        r["status"].pop("startTime")
    return r


def test_the_start_time_is_cleared_then_the_narrowing_removed_then_it_is_released_onto_a_node_that_exists() -> None:
    j = released_job(own=[OWN_TERM])
    j["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"][0][
        "matchExpressions"][0]["values"] = ["z1"]
    step2 = requeued(j, started=True)
    (reset,) = acts(step2, nodes=gone("a"))
    assert reset.kind == "requeue-reset" and reset.quiet and reset.subresource == "status"
    assert reset.patch == {"metadata": {"resourceVersion": "31"}, "status": {"startTime": None}}

    step3 = requeued(j, started=False)
    (unnarrow,) = acts(step3, nodes=gone("a"))
    assert unnarrow.kind == "requeue-unnarrow" and unnarrow.quiet
    assert unnarrow.patch == {"metadata": {"resourceVersion": "31"}, "spec": {"template": {"spec": {"affinity": {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [OWN_TERM]}}}}}}}

    waiting = copy.deepcopy(step3)
    waiting["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] = [OWN_TERM]
    zoned = [node("b", labels={"zone": "z1"})]
    (release,) = acts(waiting, nodes=zoned)
    assert release.kind == "release"
    terms = release.patch["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [{**OWN_TERM, "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]


def test_a_job_kept_to_no_terms_of_its_own_loses_the_whole_required_affinity() -> None:
    (unnarrow,) = acts(requeued(released_job(), started=False), nodes=gone("a"))
    assert unnarrow.patch["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {REQUIRED: None}}


def test_a_job_being_re_queued_is_never_released_with_its_old_narrowing() -> None:
    for started in (True, False):
        out = acts(requeued(released_job(), started=started), nodes=[node("a"), node("b")])
        assert [a.kind for a in out] == ["requeue-reset" if started else "requeue-unnarrow"]


# -- the time limit -------------------------------------------------------------------------------
def deadlines(*objs: dict[str, Any], at: float = T0) -> list[Action]:
    return [a for a in plan(snap(*objs, nodes=TWO), at, Settings(queues=POLICY), estimate=False).actions
            if a.kind in ("record-deadline", "stop", "warn")]


def test_the_time_limit_counts_afresh_from_the_run_after_a_re_queue_and_not_while_it_waited() -> None:
    # limit 1h; the first run started 50 minutes before the re-queue, which was 2 hours ago
    j = released_job(created=-4 * HOUR)
    j["metadata"]["annotations"][REQUEUED_AT_ANNOTATION] = ts(-2 * HOUR)
    old = job_pod("j-1", j, node_name="a", phase="Failed", created=-3 * HOUR,
                  containers=[terminated(1, started=-2 * HOUR - 50 * 60, finished=-2 * HOUR - 60)])
    waiting = copy.deepcopy(j)
    waiting["spec"]["suspend"] = True
    waiting["metadata"]["annotations"][QUEUED_ANNOTATION] = "true"
    assert deadlines(waiting, old) == []  # waiting again: nothing counts
    new = job_pod("j-2", j, node_name="b", phase="Running", created=-10 * 60, containers=[running(-5 * 60)])
    (rec,) = deadlines(j, old, new)
    assert rec.kind == "record-deadline" and "counts from" in rec.message  # a first deadline, no extension
    assert rec.annotations == {STARTED_AT_ANNOTATION: ts(-5 * 60), DEADLINE_ANNOTATION: ts(55 * 60)}
    # without the re-queue the first run would have dated it: stopped long ago
    plain = copy.deepcopy(j)
    del plain["metadata"]["annotations"][REQUEUED_AT_ANNOTATION]
    assert [a.kind for a in deadlines(plain, old, new)] == ["stop"]


def test_a_pod_still_running_from_before_the_re_queue_still_dates_the_job() -> None:
    """Only pods that ended or are going are left out: a pod the suspension did not take keeps
    counting, so no view of the clocks can leave a running Job without a limit."""
    j = released_job(created=-4 * HOUR)
    j["metadata"]["annotations"][REQUEUED_AT_ANNOTATION] = ts(-60)
    old_running = job_pod("j-1", j, node_name="b", phase="Running", created=-2 * HOUR,
                          containers=[running(-2 * HOUR)])
    assert [a.kind for a in deadlines(j, old_running)] == ["stop"]


def test_a_recorded_start_before_the_re_queue_is_not_believed() -> None:
    j = released_job(created=-4 * HOUR)
    j["metadata"]["annotations"].update({REQUEUED_AT_ANNOTATION: ts(-30 * 60), STARTED_AT_ANNOTATION: ts(-3 * HOUR)})
    new = job_pod("j-2", j, node_name="b", phase="Running", created=-20 * 60, containers=[running(-10 * 60)])
    (rec,) = deadlines(j, new)
    assert rec.annotations is not None and rec.annotations[STARTED_AT_ANNOTATION] == ts(-10 * 60)


def test_views_read_the_facts() -> None:
    j = released_job()
    j["metadata"]["annotations"][REQUEUED_AT_ANNOTATION] = ts(-60)
    assert job_view(j).requeued_at == T0 - 60
    assert pod_view(job_pod("p", j)).unschedulable
    assert not pod_view(job_pod("p", j, unschedulable=False)).unschedulable


# -- a Job its user suspended (the webhook marked it queued: suspended) ---------------------------
def user_suspended(j: dict[str, Any], *, started: bool) -> dict[str, Any]:
    """``j`` as its user suspended it: marked by the webhook, its deadline annotations still there."""
    r = copy.deepcopy(j)
    r["metadata"]["annotations"].update({QUEUED_ANNOTATION: QUEUED_BY_SUSPEND, STARTED_AT_ANNOTATION: ts(-HOUR / 2),
                                         DEADLINE_ANNOTATION: ts(HOUR / 2)})
    r["metadata"]["resourceVersion"] = "31"
    r["spec"]["suspend"] = True
    if not started:
        r["status"].pop("startTime", None)
    return r


@pytest.mark.parametrize("started", [True, False])
def test_a_job_its_user_suspended_is_taken_back_as_the_queue_re_queues_its_own(started: bool) -> None:
    """Step 1 only marks it: re-queued now, its deadline gone; never released before that."""
    j = user_suspended(released_job(), started=started)
    (mark,) = acts(j, nodes=TWO)  # both nodes there: it would fit, but is not released as it is
    assert mark.kind == "requeue" and mark.reason == "Requeued" and mark.event_type != "Warning"
    assert "suspended by its user" in mark.message and "counts afresh" in mark.message
    assert mark.patch == {"metadata": {"resourceVersion": "31", "annotations": {
        QUEUED_ANNOTATION: "true", REQUEUED_AT_ANNOTATION: format_time(T0),
        STARTED_AT_ANNOTATION: None, DEADLINE_ANNOTATION: None, WARNED_FOR_ANNOTATION: None}}}
    # then as any re-queued Job: start time cleared (where still set), narrowing out, released
    after = copy.deepcopy(j)
    after["metadata"]["annotations"].update(mark.patch["metadata"]["annotations"])
    after["metadata"]["annotations"] = {k: v for k, v in after["metadata"]["annotations"].items() if v is not None}
    assert [a.kind for a in acts(after, nodes=TWO)] == ["requeue-reset" if started else "requeue-unnarrow"]


def test_a_job_suspended_by_its_user_before_it_ever_ran_is_unnarrowed_too() -> None:
    j = released_job()
    j["status"] = {}
    waiting = user_suspended(j, started=False)
    del waiting["metadata"]["annotations"][STARTED_AT_ANNOTATION]
    (mark,) = acts(waiting, nodes=TWO)
    assert mark.kind == "requeue"
    waiting["metadata"]["annotations"].update({QUEUED_ANNOTATION: "true", REQUEUED_AT_ANNOTATION: ts(0)})
    assert [a.kind for a in acts(waiting, nodes=TWO)] == ["requeue-unnarrow"]  # never narrowed twice
    assert job_view(user_suspended(j, started=False)).user_suspended and not job_view(waiting).ran
    assert not job_view(requeued(released_job(), started=False)).user_suspended
