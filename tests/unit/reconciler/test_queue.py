"""The batch queue's back half (queue.py, through planner.plan as the controller runs it): the
order (priority, fair share, age), whole gangs, queue states, conservative backfill, scavengers
that hold no room, and the release patches."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.conftest import shipped_bundle
from tests.unit.reconciler.fakeapi import FakeApi
from tests.unit.reconciler.reconbuild import HOUR, T0, group_labels, record_env, ts
from tests.unit.reconciler.test_shadow import node, running, snap, waiting
from webhook.bundle import Account
from webhook.contract import QUEUE_GATE, QUEUED_ANNOTATION, START_BY_ANNOTATION
from webhook.reconciler import queue
from webhook.reconciler.actions import Action
from webhook.reconciler.actuator import Actuator
from webhook.reconciler.model import Snapshot
from webhook.reconciler.planner import effective_limit, plan
from webhook.reconciler.report import queue_rows
from webhook.reconciler.settings import QueuePolicy, Settings

DAY = 24 * HOUR
POLICY = QueuePolicy.from_bundle(shipped_bundle())
BATCH, INTERACTIVE, SCAVENGER = (POLICY.class_values[c] for c in
                                 ("batchgate-batch", "batchgate-interactive", "batchgate-scavenger"))


def gated(name: str, *, ns: str = "demo", gates: tuple[str, ...] = (QUEUE_GATE,), labels: dict[str, str] | None = None,
          priority: int = BATCH, **kw: Any) -> dict[str, Any]:
    """A bare pod waiting behind the gate in queue batch (``waiting``'s pod, gated)."""
    p = waiting(name, priority=priority, **kw)
    p["metadata"]["namespace"] = ns
    p["metadata"]["uid"] = f"uid-{ns}-{name}"
    p["metadata"]["labels"] = {"batchgate.io/queue": "batch", **(labels or {})}
    p["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return p


def queued_job(name: str, *, ns: str = "demo", pods: int = 1, cpu: str = "1", created: float = -HOUR,
               limit: str = "1h", rv: str = "20") -> dict[str, Any]:
    """A Job as the webhook leaves it in a gated queue: suspended, marked, no pods."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "resourceVersion": rv,
                     "creationTimestamp": ts(created), "labels": {"batchgate.io/queue": "batch"},
                     "annotations": {QUEUED_ANNOTATION: "true", "batchgate.io/time-limit": limit}},
        "spec": {"suspend": True, "parallelism": pods, "completions": pods,
                 "template": {"metadata": {"labels": {"batchgate.io/queue": "batch"}},
                              "spec": {"priorityClassName": "batchgate-batch", "restartPolicy": "Never",
                                       "containers": [{"name": "main", "image": "busybox",
                                                       "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}},
        "status": {},
    }


def busy(name: str, cpu: str, *, node_name: str = "n1", limit: str | None = "2h", priority: int = BATCH,
         started: float = -HOUR) -> dict[str, Any]:
    """A running pod holding ``cpu`` on ``node_name``; with the default limit it frees the node at +1h."""
    return running(name, node_name, limit=limit, cpu=cpu, priority=priority, started=started)


def released(s: Snapshot, policy: QueuePolicy = POLICY, usage: dict[str, float] | None = None) -> list[Action]:
    return [a for a in plan(s, T0, Settings(queues=policy), usage=usage).actions if a.kind == "release"]


def names(actions: list[Action]) -> list[str]:
    return sorted(a.target.name for a in actions)


def order(s: Snapshot, usage: dict[str, float] | None = None, policy: QueuePolicy = POLICY) -> list[str]:
    return [w.ref.name for w in queue.waiting(s, T0, policy, usage or {}, lambda o: None)]


ONE = [node("n1", cpu="4")]


# -- order -------------------------------------------------------------------------------
def test_priority_comes_first() -> None:
    s = snap(gated("old", cpu="4", created=-DAY), gated("urgent", cpu="4", priority=INTERACTIVE, created=-60),
             nodes=ONE)
    assert order(s) == ["urgent", "old"]
    assert names(released(s)) == ["urgent"]


def test_a_light_accounts_workload_goes_before_a_heavy_ones_submitted_earlier() -> None:
    s = snap(gated("heavy-1", ns="heavy", cpu="4", created=-2 * HOUR),
             gated("light-1", ns="light", cpu="4", created=-60), nodes=ONE)
    usage = {"heavy": 1000.0}
    assert order(s, usage) == ["light-1", "heavy-1"]
    assert names(released(s, usage=usage)) == ["light-1"]
    assert order(s) == ["heavy-1", "light-1"], "without usage the older goes first"


def test_usage_drifting_never_ranks_one_promise_past_another() -> None:
    """Both were promised, the heavy account's the earlier start. Usage that now favours the light
    account would rank its promised workload ahead of the heavy one's, moving that promise later
    with nothing having arrived: the two promised ones keep the order of their promises, in the
    places fair share gave them, and the newcomer keeps its place between them."""
    def promised(name: str, ns: str, start_by: float, created: float) -> dict[str, Any]:
        p = gated(name, ns=ns, cpu="4", created=created)
        p["metadata"]["annotations"] = {**p["metadata"].get("annotations", {}), START_BY_ANNOTATION: ts(start_by)}
        return p
    s = snap(promised("heavy-1", "heavy", HOUR, -2 * HOUR), promised("light-1", "light", 2 * HOUR, -HOUR),
             gated("light-2", ns="light", cpu="4", created=-60), nodes=ONE)
    usage = {"heavy": 1000.0}
    assert order(s, usage) == ["heavy-1", "light-2", "light-1"]
    assert [w.ref.name for w in queue.order(queue.waiting(s, T0, POLICY, {}, lambda o: None), T0, usage,
                                            POLICY.fair_share)][:2] == ["light-1", "light-2"], "fair share alone"


def test_promised_first_reorders_only_promised_places_within_a_priority() -> None:
    items = [("a", None, 1), ("b", 30.0, 1), ("c", None, 1), ("d", 10.0, 1), ("e", 5.0, 0)]
    out = queue.promised_first(items, lambda w: w[1], lambda w: w[2])
    assert [w[0] for w in out] == ["a", "d", "c", "b", "e"]


def test_shares_from_the_bundle_weigh_usage() -> None:
    """physics used twice chemistry's, with three times its shares: it is under its share, first."""
    accounts = (*POLICY.fair_share.accounts, Account("physics", ("phys-*",), 3.0), Account("chemistry", ("chem",), 1.0))
    policy = dataclasses.replace(POLICY, fair_share=dataclasses.replace(POLICY.fair_share, accounts=accounts))
    s = snap(gated("c", ns="chem", cpu="4", created=-2 * HOUR), gated("p", ns="phys-a", cpu="4", created=-60),
             nodes=ONE)
    usage = {"physics": 200.0, "chemistry": 100.0}
    assert order(s, usage, policy) == ["p", "c"]
    assert order(s, usage) == ["c", "p"], "as namespaces with one share each, chem used less"


def test_age_keeps_an_old_job_from_waiting_forever() -> None:
    usage = {"heavy": 1000.0}
    young = snap(gated("heavy-1", ns="heavy", cpu="4", created=-HOUR), gated("light-1", ns="light", cpu="4", created=-60),
                 nodes=ONE)
    assert order(young, usage) == ["light-1", "heavy-1"]
    max_age = POLICY.fair_share.max_age
    old = snap(gated("heavy-1", ns="heavy", cpu="4", created=-max_age),
               gated("light-1", ns="light", cpu="4", created=-60), nodes=ONE)
    assert order(old, usage) == ["heavy-1", "light-1"]
    w = {x.ref.name: x for x in queue.waiting(old, T0, POLICY, usage, lambda o: None)}
    assert w["heavy-1"].age == 1.0 and w["heavy-1"].factor == 0.25 and w["light-1"].factor == 1.0


# -- gangs -------------------------------------------------------------------------------
def test_a_three_pod_job_waits_while_two_fit_and_is_released_whole_when_three_do() -> None:
    two = snap(busy("r", "2"), queued_job("gang", pods=3), nodes=ONE)
    assert released(two) == []
    three = snap(busy("r", "1"), queued_job("gang", pods=3, rv="77"), nodes=ONE)
    (a,) = released(three)
    assert a.target.name == "gang" and a.target.kind == "Job" and a.reason == "Released"
    assert a.patch == {"metadata": {"resourceVersion": "77", "annotations": {QUEUED_ANNOTATION: None}},
                       "spec": {"suspend": False, "template": {"spec": {"affinity": {"nodeAffinity": {
                           "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                               {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}}}}
    assert "all 3 pods fit" in a.message and "kept to the node planned for it (n1)" in a.message


def test_a_gang_of_bare_pods_waits_until_all_its_pods_exist() -> None:
    pods = [gated(f"g-{i}", labels=group_labels("g", 3), created=-HOUR + i) for i in range(3)]
    s = snap(*pods[:2], nodes=ONE)
    assert released(s) == []
    (w,) = queue.waiting(s, T0, POLICY, {}, lambda o: None)
    assert "waits for all 3 pods of its group 'g' to exist (2 do)" in w.incomplete
    assert names(released(snap(*pods, nodes=ONE))) == ["g-0", "g-1", "g-2"]


def test_a_gang_of_bare_pods_is_released_only_whole() -> None:
    pods = [gated(f"g-{i}", cpu="2", labels=group_labels("g", 3), created=-HOUR + i) for i in range(3)]
    assert released(snap(*pods, nodes=ONE)) == []
    assert names(released(snap(*pods, nodes=[node("n1", cpu="4"), node("n2", cpu="2")]))) == ["g-0", "g-1", "g-2"]


def test_a_gang_of_bare_pods_of_different_sizes_is_placed_pod_by_pod_and_released_only_whole() -> None:
    """One pod asks for more cpu, the other for more memory: placed as the first alone (2 cpu, 1Gi
    each) both would fit beside the 8Gi already running; together they need 3 cpu and 13Gi, which
    do not: the gang waits, and its start is when the 8Gi are freed (+1h). Nor is each pod placed
    as asking for both maxima (2 cpu, 12Gi: 24Gi, more than the node has, "never fits"): on the
    empty node the two fit as they are, and go. The workload's shape is the maxima (what a
    preemption frees room for: enough for any of its pods)."""
    pods = [gated("g-0", cpu="2", mem="1Gi", labels=group_labels("g", 2), created=-HOUR),
            gated("g-1", cpu="1", mem="12Gi", labels=group_labels("g", 2), created=-HOUR + 1)]
    full = snap(running("r", "n1", limit="2h", cpu="0", mem="8Gi", priority=BATCH), *pods, nodes=ONE)
    assert released(full) == []
    (e,) = [e for e in plan(full, T0, Settings(queues=POLICY)).actions if e.kind == "start-by"]
    assert e.annotations == {START_BY_ANNOTATION: ts(HOUR)}
    (w,) = queue.waiting(snap(*pods, nodes=ONE), T0, POLICY, {}, lambda o: None)
    assert (w.sched.cpu, w.sched.mem) == (2000, 12 * 2**30)
    (a, b) = released(snap(*pods, nodes=ONE))
    assert (a.target.name, b.target.name) == ("g-0", "g-1") and "all 2 pods fit" in a.message
    # three sizes over two nodes: the 12Gi pod and the 2-cpu pod share n1, the 3-cpu pod takes n2
    third = gated("g-2", cpu="3", mem="1Gi", labels=group_labels("g", 3), created=-HOUR + 2)
    for p in pods:
        p["metadata"]["labels"].update(group_labels("g", 3))
    assert names(released(snap(*pods, third, nodes=[node("n1"), node("n2")]))) == ["g-0", "g-1", "g-2"]
    assert released(snap(*pods, third, nodes=ONE)) == []


# -- states ------------------------------------------------------------------------------
def _state(state: str) -> QueuePolicy:
    return dataclasses.replace(POLICY, states={**POLICY.states, "batch": state})


def test_hold_and_stop_release_nothing_drain_releases() -> None:
    s = snap(gated("p"), queued_job("j"), nodes=ONE)
    assert names(released(s)) == ["j", "p"]
    assert released(s, _state("hold")) == [] and released(s, _state("stop")) == []
    assert names(released(s, _state("drain"))) == ["j", "p"]


def test_a_queue_on_hold_reserves_nothing_for_the_queues_behind_it() -> None:
    """The held big job would otherwise hold the node for itself."""
    big = gated("big", cpu="4", created=-DAY)
    other = gated("small", cpu="4", created=-60)
    other["metadata"]["labels"]["batchgate.io/queue"] = "gpu"
    other["spec"]["containers"][0]["env"] = record_env("gpu", "1h")  # admitted to gpu
    policy = dataclasses.replace(POLICY, gated=(*POLICY.gated, "gpu"), states={**POLICY.states, "batch": "hold", "gpu": "open"},
                                 queue_classes={**POLICY.queue_classes, "gpu": "batchgate-batch"})
    assert names(released(snap(big, other, nodes=ONE), policy)) == ["small"]


def test_a_queue_no_longer_gated_releases_at_once_even_without_room() -> None:
    s = snap(busy("r", "4"), gated("p"), queued_job("j"), nodes=ONE)
    assert released(s) == []
    ungated = dataclasses.replace(POLICY, gated=tuple(q for q in POLICY.gated if q != "batch"))
    out = released(s, ungated)
    assert names(out) == ["j", "p"] and all("no longer holds work" in a.message for a in out)


# -- backfill ----------------------------------------------------------------------------
def test_conservative_backfill_a_short_job_before_a_big_ones_reservation_a_long_one_not() -> None:
    """The big job (first in order) can start at +1h when the running pod ends; half the node is
    free until then: a 30-minute job fits in that gap, a 2-hour one would push the big job back."""
    base = [busy("r", "2"), gated("big", cpu="4", created=-DAY)]
    short = gated("short", cpu="2", limit="30m", created=-60)
    long = gated("long", cpu="2", limit="2h", created=-60)
    assert names(released(snap(*base, short, nodes=ONE))) == ["short"]
    assert released(snap(*base, long, nodes=ONE)) == []


TWO = [node("n1", cpu="4"), node("n2", cpu="4")]
EASY = dataclasses.replace(POLICY, easy=frozenset({"batch"}))


def _head_second_and_a_late_job() -> Snapshot:
    """n1 is full until +1h, n2 half full until +90m. The head (oldest, the whole of a node for an
    hour) is reserved n1 from +1h; the second (the same shape) n2 from +90m; the late job fits now
    on n2 for 2 hours: it would delay the second's reservation, not the head's."""
    return snap(busy("r1", "4"), busy("r2", "2", node_name="n2", started=-30 * 60),
                gated("head", cpu="4", created=-DAY), gated("second", cpu="4", created=-2 * HOUR),
                gated("late", cpu="2", limit="2h", created=-60), nodes=TWO)


def test_easy_backfill_releases_a_job_that_delays_only_the_second_reservation() -> None:
    s = _head_second_and_a_late_job()
    assert released(s) == []  # conservative: it would delay the second
    assert names(released(s, EASY)) == ["late"]


def test_under_easy_only_the_head_is_promised_and_the_estimates_still_come() -> None:
    for policy, promised in ((POLICY, ["head", "late", "second"]), (EASY, ["head"])):
        acts = plan(_head_second_and_a_late_job(), T0, Settings(queues=policy), estimate=True).actions
        assert names([a for a in acts if a.kind == "start-by"]) == promised
        assert {"head", "second"} <= {a.target.name for a in acts if a.kind == "expected-start"}
    (head,) = [a for a in plan(_head_second_and_a_late_job(), T0, Settings(queues=EASY)).actions
               if a.kind == "start-by"]
    assert head.annotations == {"batchgate.io/start-by": ts(HOUR)}


def _promise(s: Snapshot, **start_by: float) -> Snapshot:
    """The snapshot with these pods' ``batchgate.io/start-by`` written (as an earlier pass would)."""
    for name, at in start_by.items():
        key, pod = next((k, p) for k, p in s.pods.items() if p.ref.name == name)
        s.pods[key] = dataclasses.replace(pod, start_by=ts(at))
    return s


def _start_bys(s: Snapshot, policy: QueuePolicy = EASY, usage: dict[str, float] | None = None) -> list[Action]:
    return [a for a in plan(s, T0, Settings(queues=policy), usage=usage).actions if a.kind == "start-by"]


def test_under_easy_a_promised_head_keeps_its_place_when_older_work_is_ranked_ahead_of_it() -> None:
    """The head was promised +1h. Usage now favours the second's account, which fair share alone
    ranks first: the second would become the head, reserve n1 from +1h and take the head's
    reservation, with nothing having arrived. The promised head keeps its place (and its
    reservation and promise: nothing to write); the second is behind it, unpromised; the late job
    delays only the second and is released."""
    s = _promise(_head_second_and_a_late_job(), head=HOUR)
    usage = {"demo": 1000.0}
    key, pod = next((k, p) for k, p in s.pods.items() if p.ref.name == "second")
    s.pods[key] = dataclasses.replace(pod, ref=dataclasses.replace(pod.ref, namespace="light"))
    fair = queue.order(queue.waiting(s, T0, EASY, {}, lambda o: None), T0, usage, EASY.fair_share)
    assert [w.ref.name for w in fair][:2] == ["second", "head"], "fair share alone"
    assert order(s, usage, EASY) == ["head", "second", "late"]
    assert _start_bys(s, usage=usage) == []
    assert names(released(s, EASY, usage)) == ["late"]


def test_promised_ahead_moves_only_unpromised_work_of_an_easy_queue_behind_its_last_promise() -> None:
    items = [("a", None, "q", 1), ("b", None, "c", 1), ("c", 10.0, "q", 1), ("d", None, "q", 1),
             ("e", 20.0, "q", 1), ("f", None, "q", 0), ("g", None, "q", 1)]
    out = queue.promised_ahead(items, lambda w: w[1], lambda w: (w[2], w[3]) if w[2] == "q" else None)
    assert [w[0] for w in out] == ["b", "c", "e", "a", "d", "f", "g"]
    assert queue.promised_ahead(items, lambda w: None, lambda w: (w[2], w[3])) == items


def test_under_easy_promises_made_before_stay_backed_by_reservations() -> None:
    """The queue was conservative (or these were heads): the head was promised +1h, the second
    +90m (n2, once r2 ends). Under EASY both keep their reservations: the late job, which would
    delay the second, is held, and neither promise moves; the late job gets none (not the head)."""
    s = _promise(_head_second_and_a_late_job(), head=HOUR, second=90 * 60)
    assert order(s, policy=EASY) == ["head", "second", "late"]
    assert released(s, EASY) == []
    assert _start_bys(s) == []
    assert names(released(_head_second_and_a_late_job(), EASY)) == ["late"], "without the promises: backfilled"


def test_under_easy_a_promise_moved_by_higher_priority_work_stays_backed_and_says_why() -> None:
    """The head was promised +1h; an interactive job (higher priority) arrives that needs the node
    too: it goes first and becomes the head (a promise of +1h). The old head keeps a reservation,
    after it: its start-by moves to +2h with a StartByMoved Warning naming the arrival, rather than
    staying +1h with nothing behind it."""
    s = _promise(snap(busy("r", "4"), gated("head", cpu="4", created=-DAY),
                      gated("urgent", cpu="4", priority=INTERACTIVE, created=-60), nodes=ONE), head=HOUR)
    acts = {a.target.name: a for a in _start_bys(s)}
    assert acts["urgent"].annotations == {START_BY_ANNOTATION: ts(HOUR)} and acts["urgent"].reason == "StartBy"
    moved = acts["head"]
    assert moved.annotations == {START_BY_ANNOTATION: ts(2 * HOUR)}
    assert moved.reason == "StartByMoved" and moved.event_type == "Warning"
    assert "1 workload ranked ahead of it arrived (of a higher priority" in moved.message


def test_easy_is_per_queue_and_a_gang_behind_the_head_reserves_nothing() -> None:
    """A two-pod gang behind the head is reserved both nodes from +2h, when the head is done; the
    late job (3 hours on n2) would delay it; under EASY the gang reserves nothing, so the late job
    starts; a queue not named easy is still conservative."""
    gang = [gated(f"g-{i}", cpu="4", created=-2 * HOUR, labels=group_labels("g", 2)) for i in range(2)]
    s = snap(busy("r1", "4"), busy("r2", "2", node_name="n2", started=-30 * 60),
             gated("head", cpu="4", created=-DAY), *gang, gated("late", cpu="2", limit="3h", created=-60), nodes=TWO)
    assert released(s) == []
    assert names(released(s, EASY)) == ["late"]
    assert released(s, dataclasses.replace(POLICY, easy=frozenset({"gpu"}))) == []


def test_running_scavengers_hold_no_room_the_queue_counts_on() -> None:
    s = snap(busy("scav", "4", priority=SCAVENGER, limit=None), gated("p", cpu="4"), nodes=ONE)
    assert queue.preempts_below(POLICY) == BATCH
    assert names(released(s)) == ["p"]
    same = snap(busy("peer", "4", priority=BATCH), gated("p", cpu="4"), nodes=ONE)
    assert released(same) == []


# -- the patches -------------------------------------------------------------------------
def test_a_pods_release_takes_only_our_gate_off_fenced_by_its_resource_version() -> None:
    p = gated("p", gates=("example.com/other", QUEUE_GATE))
    p["metadata"]["resourceVersion"] = "42"
    (a,) = released(snap(p, nodes=ONE))
    assert a.patch == {"metadata": {"resourceVersion": "42"}, "spec": {"schedulingGates": [{"name": "example.com/other"}]}}
    (b,) = released(snap(gated("q"), nodes=ONE))
    assert b.patch is not None and b.patch["spec"] == {"schedulingGates": None}


def test_what_is_not_gated_or_already_bound_is_not_the_queues() -> None:
    free = waiting("free")  # no gate: kube-scheduler's
    bound = gated("bound", gates=())
    bound["spec"]["nodeName"] = "n1"
    s = snap(free, bound, nodes=ONE)
    assert order(s) == [] and released(s) == []


def test_work_gated_before_its_namespace_was_excluded_is_released_at_once_whole() -> None:
    """The bundle excludes a namespace after its work was gated: the gate (or the queued suspension) is
    batchgate's and nobody else would lift it, so it goes at once, whatever the room, a gang whole and
    even before all its pods exist; it no longer waits in any queue, gets no promise and no Queued."""
    policy = dataclasses.replace(POLICY, excluded_namespaces=(*POLICY.excluded_namespaces, "legacy-*"))
    gang = [gated(f"g-{i}", ns="legacy-a", cpu="4", labels=group_labels("g", 3)) for i in range(2)]
    held = [busy("r", "4"), gated("p", ns="legacy-a", cpu="4"), queued_job("j", ns="legacy-b", cpu="4"), *gang]
    s = snap(*held, gated("mine", cpu="4"), nodes=ONE)
    out = released(s, policy)
    assert names(out) == ["g-0", "g-1", "j", "p"]
    assert all("namespace 'legacy-" in a.message and "excluded" in a.message for a in out)
    job_release = next(a for a in out if a.target.kind == "Job")
    assert job_release.patch is not None and job_release.patch["spec"] == {"suspend": False}
    assert job_release.patch["metadata"]["annotations"] == {QUEUED_ANNOTATION: None}
    assert order(s, policy=policy) == ["mine"]
    told = [a for a in plan(s, T0, Settings(queues=policy)).actions if a.kind in ("queued", "start-by")]
    assert {a.target.name for a in told} == {"mine"}
    # ... and before the bundle excluded it, the same work waited
    assert released(s) == []


def test_the_release_message_says_how_long_it_waited() -> None:
    (a,) = released(snap(gated("p", created=-3 * HOUR), nodes=ONE))
    assert a.message.endswith("released after waiting 3h00m") and a.amount == 3 * HOUR


def test_no_nodes_known_means_no_release() -> None:
    s = Snapshot.of(pods=snap(gated("p"), nodes=ONE).pods.values(), nodes=None)
    assert released(s) == []


def test_a_gang_released_in_part_has_the_rest_released_not_stranded() -> None:
    """A release of a pod group is one patch per pod: one that failed (a conflict, a timeout) must not
    leave the others gated for ever while the released ones hold their room."""
    pods = [gated(f"g-{i}", labels=group_labels("g", 3), created=-HOUR + i) for i in range(3)]
    del pods[0]["spec"]["schedulingGates"]  # released by the last pass; g-1 and g-2 were not
    s = snap(*pods, nodes=ONE)
    assert names(released(s)) == ["g-1", "g-2"]
    pods[0]["spec"]["nodeName"] = "n1"  # already bound: still the same gang
    pods[0]["status"] = {"phase": "Running"}
    assert names(released(snap(*pods, nodes=ONE))) == ["g-1", "g-2"]


def test_an_ungated_pod_of_another_queue_naming_the_group_releases_nothing() -> None:
    """A user cannot jump the queue by starting a pod of the same group name where nothing is gated."""
    pods = [gated(f"g-{i}", cpu="4", labels=group_labels("g", 2), created=-HOUR + i) for i in range(2)]
    decoy = running("decoy", "n1", limit="2h", cpu="4", priority=INTERACTIVE)
    decoy["metadata"]["labels"] = {"batchgate.io/queue": "interactive", **group_labels("g", 2)}
    decoy["spec"]["containers"][0]["env"] = record_env("interactive", "2h")
    assert released(snap(decoy, *pods, nodes=ONE)) == []


def test_with_scavengers_running_a_queue_no_longer_gated_still_releases_at_once() -> None:
    """Another queue still gated makes scavengers victims-to-be; that must not hold back the work of
    a queue that holds nothing any more (nor take room from scavengers for it)."""
    s = snap(busy("peer", "4"), busy("scav", "2", node_name="n2", priority=SCAVENGER, limit=None), gated("p", cpu="4"),
             nodes=[node("n1", cpu="4"), node("n2", cpu="2")])
    policy = dataclasses.replace(POLICY, gated=("gpu",), queue_classes={**POLICY.queue_classes, "gpu": "batchgate-batch"})
    out = released(s, policy)
    assert names(out) == ["p"] and "no longer holds work" in out[0].message


def test_with_scavengers_running_the_rest_of_a_gang_released_in_part_still_goes() -> None:
    pods = [gated(f"g-{i}", cpu="2", labels=group_labels("g", 3), created=-HOUR + i) for i in range(3)]
    del pods[0]["spec"]["schedulingGates"]
    pods[0]["spec"]["nodeName"] = "n1"
    pods[0]["status"] = {"phase": "Running"}
    s = snap(busy("peer", "2"), busy("scav", "2", node_name="n2", priority=SCAVENGER, limit=None), *pods,
             nodes=[node("n1", cpu="4"), node("n2", cpu="2")])
    assert names(released(s)) == ["g-1", "g-2"]


def test_a_release_that_conflicts_sends_no_released_event_the_one_that_goes_through_does() -> None:
    """The Event says the work was released: it follows the patch, so a conflict (the object changed
    since the pass read it) leaves none on work still waiting."""
    api = FakeApi()
    api.put(gated("p"))
    api.put(queued_job("j"))

    def release_now() -> list[str]:
        objs = [o for o in api.objects.values() if o["kind"] in ("Pod", "Job")]
        actions = released(snap(*objs, nodes=[node("n1", cpu="8")]))
        return [o.result for o in Actuator(api, Settings(api_attempts=1), sleep=lambda s: None,
                                           wall=lambda: T0).execute(actions)]

    planned = [o for o in api.objects.values() if o["kind"] in ("Pod", "Job")]
    actions = released(snap(*planned, nodes=[node("n1", cpu="8")]))
    for kind, name in (("pods", "p"), ("jobs", "j")):  # someone else writes both after the pass read them
        api.objects[(kind, "demo", name)]["metadata"]["resourceVersion"] = "999"
    outcomes = Actuator(api, Settings(api_attempts=1), sleep=lambda s: None, wall=lambda: T0).execute(actions)
    assert [o.result for o in outcomes] == ["conflict", "conflict"]
    assert [e for e in api.events() if e["reason"] == "Released"] == []
    assert release_now() == ["done", "done"]
    assert sorted(e["involvedObject"]["name"] for e in api.events() if e["reason"] == "Released") == ["j", "p"]
    assert api.objects[("jobs", "demo", "j")]["spec"]["suspend"] is False


def test_the_gathering_asks_each_namespace_once_and_answers_as_asking_per_workload() -> None:
    """``waiting`` matches a namespace's exclusion and account once per pass (cached per namespace):
    the same workloads, accounts and order as matching the bundle's patterns per workload."""
    accounts = (*POLICY.fair_share.accounts, Account("physics", ("phys-*",), 3.0), Account("chemistry", ("chem",), 1.0))
    policy = dataclasses.replace(POLICY, excluded_namespaces=(*POLICY.excluded_namespaces, "legacy-*"),
                                 fair_share=dataclasses.replace(POLICY.fair_share, accounts=accounts))
    gang = [gated(f"g-{i}", ns="phys-b", cpu="1", labels=group_labels("g", 2)) for i in range(2)]
    s = snap(gated("p1", ns="phys-a", created=-3 * HOUR), gated("p2", ns="phys-a", created=-HOUR),
             queued_job("j1", ns="phys-a", created=-2 * HOUR), gated("c1", ns="chem"), gated("o1", ns="other"),
             gated("x1", ns="legacy-a"), queued_job("x2", ns="legacy-a"), *gang, nodes=ONE)
    usage = {"physics": 200.0, "chemistry": 100.0}
    got = queue.waiting(s, T0, policy, usage, lambda o: None)
    # the plain answer: every gated pod's / queued Job's namespace matched against the patterns itself
    plain = {o.ref.name: policy.fair_share.account_of(o.ref.namespace)
             for o in (*s.pods.values(), *s.jobs.values()) if not policy.excluded(o.ref.namespace)}
    assert {w.ref.name: w.account for w in got} == {n: a for n, a in plain.items() if n != "g-1"} == {
        "p1": "physics", "p2": "physics", "j1": "physics", "g-0": "physics", "c1": "chemistry", "o1": "other"}
    assert [w.ref.name for w in got] == ["o1", "p1", "j1", "p2", "g-0", "c1"]  # by fair share (physics under its share), then age
    assert {w.ref.name for w in queue.unmanaged(s, policy, lambda o: None)} == {"x1", "x2"}
    # nothing carries over from one call (one bundle) to the next
    assert {w.ref.name: w.account for w in queue.waiting(s, T0, POLICY, usage, lambda o: None)} == {
        "p1": "phys-a", "p2": "phys-a", "j1": "phys-a", "g-0": "phys-b", "c1": "chem", "o1": "other",
        "x1": "legacy-a", "x2": "legacy-a"}


def test_a_resumed_jobs_pods_are_counted_one_node_each_so_nothing_is_released_into_their_room() -> None:
    """A non-gang Job's pods are placed one by one as kube-scheduler would, each where it fits: all
    four on the first node that has room for one would leave the second node looking free."""
    job = queued_job("wide", pods=4, cpu="2", created=-2 * HOUR)
    job["spec"]["suspend"] = False
    del job["metadata"]["annotations"][QUEUED_ANNOTATION]
    s = snap(job, gated("small", cpu="2", created=-HOUR), nodes=[node("n1", cpu="4"), node("n2", cpu="4")])
    assert names(released(s)) == []
    s = snap(job, gated("small", cpu="2", created=-HOUR), nodes=[node("n1", cpu="4"), node("n2", cpu="6")])
    assert names(released(s)) == ["small"]  # 2 cpu left beside the four pods


# -- a promise is a deadline, not a place in line ---------------------------------------
def _heavy_promised_and_a_light_arrival(start_by: float) -> Snapshot:
    """n1 is full until +1h. The heavy account's job (the whole node for an hour) was promised
    ``start_by``; a job of the light account arrives since, the same shape, which fair share ranks
    ahead of it (the heavy account used much)."""
    return _promise(snap(busy("r", "4"), gated("heavy-1", ns="heavy", cpu="4", created=-2 * HOUR),
                         gated("light-1", ns="light", cpu="4", created=-60), nodes=ONE), **{"heavy-1": start_by})


HEAVY = {"heavy": 1000.0}


def test_a_later_arrival_ranked_ahead_does_not_break_a_promise_it_would_delay() -> None:
    """heavy-1 was promised +1h, when n1 frees. Fair share ranks light-1 ahead, and placed first it
    would take n1 from +1h and move heavy-1's promise to +2h (a StartByMoved Warning for a later
    arrival of the same priority). heavy-1's promise is at risk: it goes ahead of the unpromised
    light-1 and keeps +1h; light-1 is promised +2h."""
    s = _heavy_promised_and_a_light_arrival(HOUR)
    assert order(s, HEAVY)[:2] == ["light-1", "heavy-1"], "fair share"
    acts = _start_bys(s, POLICY, HEAVY)
    assert [(a.target.name, a.reason, a.annotations) for a in acts] == [
        ("light-1", "StartBy", {START_BY_ANNOTATION: ts(2 * HOUR)})]


def test_a_later_arrival_ranked_ahead_goes_first_within_a_promises_room_to_spare() -> None:
    """heavy-1 was promised +3h (work since ended early): placed behind light-1 it starts at +2h,
    still by its promise, so fair share's order stands (light-1 from +1h) and heavy-1's start-by
    stays +3h: it never moves earlier, so the room to spare stays fair share's to give."""
    s = _heavy_promised_and_a_light_arrival(3 * HOUR)
    acts = _start_bys(s, POLICY, HEAVY)
    assert [(a.target.name, a.reason, a.annotations) for a in acts] == [
        ("light-1", "StartBy", {START_BY_ANNOTATION: ts(HOUR)})]


def test_a_queue_with_fair_share_promises_lets_the_later_arrival_move_a_promise_either_way() -> None:
    """``promise: fair-share``, as before deadlines: fair share places light-1 first, so heavy-1's
    promise of +1h moves to +2h with a StartByMoved naming the arrival; a promise of +3h moves
    earlier, to +2h, quietly."""
    fair = dataclasses.replace(POLICY, fair_promises=frozenset({"batch"}))
    moved = {a.target.name: a for a in _start_bys(_heavy_promised_and_a_light_arrival(HOUR), fair, HEAVY)}
    assert moved["light-1"].annotations == {START_BY_ANNOTATION: ts(HOUR)}
    assert moved["heavy-1"].annotations == {START_BY_ANNOTATION: ts(2 * HOUR)}
    assert moved["heavy-1"].reason == "StartByMoved" and "or a lighter fair-share account" in moved["heavy-1"].message
    earlier = {a.target.name: a for a in _start_bys(_heavy_promised_and_a_light_arrival(3 * HOUR), fair, HEAVY)}
    assert earlier["heavy-1"].annotations == {START_BY_ANNOTATION: ts(2 * HOUR)}
    assert earlier["heavy-1"].reason == "StartBy" and "earlier than promised" in earlier["heavy-1"].message


def test_promoted_moves_an_at_risk_promise_ahead_of_unpromised_work_of_its_priority_only() -> None:
    # (name, promise, priority): b and e are at risk
    items = [("u", None, 2), ("a", 5.0, 1), ("x", None, 1), ("b", 20.0, 1), ("y", None, 1), ("c", 30.0, 1),
             ("z", None, 1), ("e", 1.0, 0)]
    out = queue.promoted(items, lambda w: w[1], lambda w: w[2], lambda w: w[0] in ("b", "e"))
    assert [w[0] for w in out] == ["u", "a", "b", "x", "y", "c", "z", "e"]
    assert queue.promoted(items, lambda w: w[1], lambda w: w[2], lambda w: False) == items


def test_place_places_once_unless_a_promise_is_at_risk_and_at_most_rounds_times() -> None:
    """A pass places once when every promise holds; while some is at risk it promotes it and places
    again, at most ``rounds`` times, the last of them with every promise first."""
    from webhook.reconciler.shadow import Estimate

    items = [("x", None), ("p", 10.0), ("q", 5.0)]
    calls: list[list[str]] = []

    def schedule(late: set[str]) -> Any:
        def run(ws: list[tuple[str, float | None]]) -> list[Estimate]:
            calls.append([w[0] for w in ws])
            return [dataclasses.replace(_estimate(w[0]), start=100.0 if w[0] in late else 0.0) for w in ws]
        return run

    out, _, n = queue.place(items, schedule(set()), lambda w: w[1], lambda w: 1, lambda w: w[0])
    assert (out, n, len(calls)) == (items, 1, 1)
    calls.clear()
    out, _, n = queue.place(items, schedule({"p", "q"}), lambda w: w[1], lambda w: 1, lambda w: w[0], rounds=3)
    assert calls == [["x", "p", "q"], ["q", "p", "x"]] and n == 2, "both promoted; still late: nothing more to try"
    calls.clear()
    late = iter([{"p"}, {"q"}, {"x"}])
    moving: set[str] = set()

    def drifting(ws: list[tuple[str, float | None]]) -> list[Any]:
        moving.update(next(late, set()))
        return schedule(set(moving))(ws)
    out, _, n = queue.place(items, drifting, lambda w: w[1], lambda w: 1, lambda w: w[0], rounds=2)
    assert n == 3 and [w[0] for w in out] == ["q", "p", "x"], "placed again twice, the second time every promise first"


def _estimate(name: str) -> Any:
    from webhook.reconciler.model import Ref
    from webhook.reconciler.shadow import Estimate
    return Estimate(Ref("v1", "Pod", "demo", name, name), 0.0, "")


# -- services' pods (rules.queue_gate: a ReplicaSet's, StatefulSet's or DaemonSet's pods wait as bare pods do)
def service_pod(name: str, *, bound: bool = False, **kw: Any) -> dict[str, Any]:
    """A ReplicaSet's pod as its controller makes it, in queue batch: no admission record (the webhook
    records none for services' pods), though its template carries a time-limit annotation (1h);
    ``bound``: released and running on n1 since 2 hours ago, else gated."""
    p = busy(name, kw.pop("cpu", "4"), limit="1h", started=-2 * HOUR) if bound else gated(name, **kw)
    p["metadata"]["labels"] = {"batchgate.io/queue": "batch"}
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                         "uid": "uid-demo-web-1", "controller": True}]
    for c in p["spec"]["containers"]:
        c.pop("env", None)
    return p


def test_a_services_pod_waits_as_a_one_pod_workload_with_no_time_limit() -> None:
    """Whatever it is annotated, the reconciler never times a service's pod: the queue places it with
    no end (a bare pod with the same annotation has its limit)."""
    settings = Settings(queues=POLICY)
    s = snap(service_pod("web-1-abc", cpu="1"), gated("sim", cpu="1"), nodes=ONE)
    ws = {w.ref.name: w for w in queue.waiting(s, T0, POLICY, {}, lambda o: effective_limit(o, settings))}
    assert ws["web-1-abc"].size == 1 and ws["web-1-abc"].pods[0].owner is not None
    assert ws["web-1-abc"].limit is None and ws["sim"].limit == HOUR


def test_a_services_pod_waits_its_turn_behind_earlier_work_of_its_priority() -> None:
    s = snap(gated("early", cpu="4", created=-DAY), service_pod("web-1-abc", cpu="4", created=-60), nodes=ONE)
    assert order(s) == ["early", "web-1-abc"]
    assert names(released(s)) == ["early"]
    assert names(released(snap(service_pod("web-1-abc", cpu="4", created=-60), nodes=ONE))) == ["web-1-abc"]


def test_batchgate_queue_lists_a_waiting_services_pod_and_a_released_one_holds_its_room_for_good() -> None:
    """Released, it runs with no end: work waiting for its node waits for work without a time limit
    (a bare pod annotated alike would free the node at +1h... it ran 2h already, so at once)."""
    rows = {r["name"]: r for r in queue_rows(snap(service_pod("web-1-abc", cpu="4"), nodes=ONE), T0, queues=POLICY)}
    assert rows["web-1-abc"]["state"] == "Gated" and rows["web-1-abc"]["queue"] == "batch"
    s = snap(service_pod("web-1-abc", bound=True), gated("next", cpu="4"), nodes=ONE)
    assert released(s) == []
    (row,) = [r for r in queue_rows(s, T0, queues=POLICY) if r["name"] == "next"]
    assert row["start"] == "unknown" and "without a time limit" in row["reason"]
    bare = busy("r", "4", limit="1h", started=-2 * HOUR)  # past its limit: its room is the queue's now
    assert names(released(snap(bare, gated("next", cpu="4"), nodes=ONE))) == ["next"]


def test_the_ungated_metric_counts_bare_and_services_pods_a_daemonsets_too_not_a_jobs() -> None:
    """batchgate_queue_ungated_pods: pending pods of a gated queue that the webhook would have gated
    (it was down): a bare pod's, a ReplicaSet's and a DaemonSet's, not a Job's (the Job waited) nor one
    claiming a ReplicaSet of another API group."""
    from webhook.reconciler import metrics
    from webhook.reconciler.controller import Controller

    api = FakeApi()
    for name, owner in (("bare", None), ("web", ("apps/v1", "ReplicaSet")), ("agent", ("apps/v1", "DaemonSet")),
                        ("job", ("batch/v1", "Job")), ("fake", ("example.com/v1", "ReplicaSet"))):
        p = gated(name, gates=())
        del p["spec"]["schedulingGates"]
        if owner is not None:
            p["metadata"]["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": name,
                                                 "uid": f"uid-owner-{name}", "controller": True}]
        api.put(p)
    c = Controller(api, Settings(queues=POLICY, leader_elect=False), clock=lambda: T0)
    c.cache.list_once()
    c.plan_now()
    assert {s.labels["queue"]: s.value for s in metrics.QUEUE_UNGATED.collect()[0].samples} == {"batch": 3.0}


def daemon_pod(name: str, node_name: str, *, cpu: str = "2") -> dict[str, Any]:
    """A DaemonSet's pod as its controller makes it (Kubernetes 1.12+) in queue batch, gated: a required
    node affinity to ``node_name`` (matchFields metadata.name), the tolerations the controller adds
    (unschedulable among them), no time limit, no admission record."""
    p = gated(name, cpu=cpu, limit=None)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                         "uid": "uid-demo-agent", "controller": True}]
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}}
    p["spec"]["tolerations"] = [{"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": e}
                                for k, e in (("not-ready", "NoExecute"), ("unreachable", "NoExecute"),
                                             ("unschedulable", "NoSchedule"), ("disk-pressure", "NoSchedule"))]
    for c in p["spec"]["containers"]:
        c.pop("env", None)
    return p


def test_a_daemonsets_gated_pod_waits_for_room_on_its_own_node_never_another_and_is_released_then() -> None:
    """Its node affinity names n1: while n1 is full it waits (n2, empty, is not its node), listed as
    waiting in `batchgate queue`; when n1 has room it is released as a one-pod workload with no time
    limit, the gate taken off and nothing narrowed (its affinity already names its node)."""
    two = [node("n1", cpu="4"), node("n2", cpu="4")]
    settings = Settings(queues=POLICY)
    full = snap(busy("r", "4"), daemon_pod("agent-n1", "n1"), nodes=two)
    assert released(full) == []
    assert not [a for a in plan(full, T0, settings).actions if a.kind == "narrow"]
    (row,) = [r for r in queue_rows(full, T0, queues=POLICY) if r["name"] == "agent-n1"]
    assert row["state"] == "Gated" and row["queue"] == "batch"
    ws = {w.ref.name: w for w in queue.waiting(full, T0, POLICY, {}, lambda o: effective_limit(o, settings))}
    assert ws["agent-n1"].size == 1 and ws["agent-n1"].limit is None
    room = snap(busy("r", "2"), daemon_pod("agent-n1", "n1"), nodes=two)
    actions = plan(room, T0, settings).actions
    (rel,) = [a for a in actions if a.kind == "release"]
    assert rel.target.name == "agent-n1" and rel.patch["spec"] == {"schedulingGates": None}
    assert not [a for a in actions if a.kind == "narrow"]


def test_a_daemonsets_gated_pod_for_a_cordoned_node_waits_though_it_tolerates_the_cordon() -> None:
    """Its toleration of node.kubernetes.io/unschedulable lets kube-scheduler bind it to a cordoned node;
    the queue does not release it there until the node is uncordoned (n2, free, is not its node)."""
    from webhook.reconciler.model import node_view
    cordoned = node_view({"metadata": {"name": "n1", "uid": "uid-n1", "labels": {"kubernetes.io/hostname": "n1"}},
                          "spec": {"unschedulable": True, "taints": [
                              {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]},
                          "status": {"allocatable": {"cpu": "4", "memory": "16Gi"},
                                     "conditions": [{"type": "Ready", "status": "True"}]}})
    assert released(snap(daemon_pod("agent-n1", "n1"), nodes=[cordoned, node("n2", cpu="4")])) == []
    assert names(released(snap(daemon_pod("agent-n1", "n1"), nodes=[node("n1"), node("n2")]))) == ["agent-n1"]


# -- backfill: start-by ------------------------------------------------------------------------
START_BY = dataclasses.replace(POLICY, start_by_backfill=frozenset({"batch"}))


def _big_promised_and_a_short_job(limit: str, start_by: float | None = 3 * HOUR) -> Snapshot:
    """n1 (4 cpu) has 2 cpu free until +1h, when r ends. big (the whole node, 1h) waits ahead,
    reserved from +1h; a promise of ``start_by`` was published for it (work ahead ended early since,
    or nothing: None). ``short`` arrived later: 2 cpu for ``limit``, it fits now."""
    s = snap(busy("r", "2"), gated("big", cpu="4", created=-2 * HOUR), gated("short", cpu="2", limit=limit, created=-60),
             nodes=ONE)
    return _promise(s, big=start_by) if start_by is not None else s


def test_backfill_start_by_releases_work_that_delays_a_reservation_but_no_start_by() -> None:
    """short ends at +2h at the latest: it delays big's reservation (+1h) but not its start-by
    (+3h). Conservative holds it; ``backfill: start-by`` releases it, and big's promise stands."""
    s = _big_promised_and_a_short_job("2h")
    assert names(released(s)) == []
    assert names(released(s, START_BY)) == ["short"]
    assert _start_bys(s, START_BY) == [], "big's start-by does not move"


def test_backfill_start_by_holds_work_that_would_delay_a_start_by() -> None:
    """short for 4h would start big at +4h, past its start-by (+3h): held, as conservative holds it."""
    s = _big_promised_and_a_short_job("4h")
    assert names(released(s, START_BY)) == [] == names(released(s))


def test_backfill_start_by_holds_work_that_would_delay_a_reservation_not_yet_promised() -> None:
    """big holds no start-by yet (it is promised from this pass's placement): its reservation as
    placed is the one it is about to be given, and short would delay it."""
    s = _big_promised_and_a_short_job("2h", start_by=None)
    assert names(released(s, START_BY)) == []
    assert [(a.target.name, a.annotations) for a in _start_bys(s, START_BY)] == [
        ("big", {START_BY_ANNOTATION: ts(HOUR)}), ("short", {START_BY_ANNOTATION: ts(2 * HOUR)})]


def test_into_slack_tries_each_shape_once_and_keeps_every_bound() -> None:
    """``queue.into_slack`` over a fake schedule: a candidate is placed just before the first that
    does not start now; it goes if it starts now and no other starts later than its bound (a
    promise's start-by, else where it was placed); a shape that failed is not tried again."""
    from webhook.reconciler.shadow import Estimate

    now = 0.0
    # (name, promise, shape); placed: a now, p at 10 promised 30, q at 20 (no promise), x/y/z at 40
    items = [("a", None, "s"), ("p", 30.0, "big"), ("q", None, "s"), ("x", None, "t"), ("y", None, "t"),
             ("z", None, "u"), ("w", None, "u")]
    calls: list[list[str]] = []

    def schedule(ws: list[tuple[str, float | None, str]]) -> list[Estimate]:
        calls.append([w[0] for w in ws])
        at = {"a": 0.0, "p": 10.0, "q": 20.0, "x": 40.0, "y": 40.0, "z": 40.0, "w": 40.0}
        first = next(w[0] for w in ws if w[0] != "a")
        if first == "x":  # x now would start p at 25: by its promise
            at |= {"x": 0.0, "p": 25.0}
        if first == "y":  # y now would start q later: q holds no promise
            at |= {"y": 0.0, "q": 21.0}
        if first == "z":  # z now would start p at 31: past its promise
            at |= {"z": 0.0, "p": 31.0}
        return [dataclasses.replace(_estimate(w[0]), start=at[w[0]]) for w in ws]

    base = schedule(items)
    calls.clear()
    out, got, n = queue.into_slack(items, base, schedule, lambda w: w[1], lambda w: w[0], now,
                                   lambda w: w[0] in "xyzw", lambda w: (w[2], ()), tries=3)
    assert calls == [["a", "x", "p", "q", "y", "z", "w"], ["a", "x", "y", "p", "q", "z", "w"],
                     ["a", "x", "z", "p", "q", "y", "w"]], "w is of z's shape: not tried"
    assert [w[0] for w in out] == ["a", "x", "p", "q", "y", "z", "w"] and n == 3
    assert {e.workload.name: e.start for e in got}["x"] == 0.0
    calls.clear()
    queue.into_slack(items, base, schedule, lambda w: w[1], lambda w: w[0], now, lambda w: True,
                     lambda w: (w[2], ()), tries=1)
    assert len(calls) == 1, "at most ``tries`` placements"


def test_backfill_start_by_counts_the_start_by_of_work_behind_too() -> None:
    """busy2 frees 2 of n1's 4 cpu at +3m. big (the node, 1h) is promised +17m; long (2 cpu, 1h)
    ``long_by``; mid (2 cpu, 10m) fits now. Placed first, mid starts big at +10m (by its start-by)
    and long at +70m: released when long was promised +77m, held when long was promised +63m."""
    def jobs_promised(long_by: float) -> Snapshot:
        s = snap(busy("busy2", "2", limit="6m", started=-180), queued_job("big", cpu="4", created=-600, limit="60m"),
                 queued_job("long", cpu="2", created=-300, limit="60m"), queued_job("mid", cpu="2", created=-60, limit="10m"),
                 nodes=ONE)
        for name, at in (("big", 17 * 60), ("long", long_by), ("mid", 63 * 60)):
            key, j = next((k, j) for k, j in s.jobs.items() if j.ref.name == name)
            s.jobs[key] = dataclasses.replace(j, start_by=ts(at))
        return s
    assert names(released(jobs_promised(77 * 60), START_BY)) == ["mid"]
    assert names(released(jobs_promised(77 * 60))) == []
    assert names(released(jobs_promised(63 * 60), START_BY)) == []


def test_only_work_whose_pods_fit_the_room_free_now_is_tried_ahead_of_its_turn() -> None:
    """``planner.may_fit_now``: n1 has 2 of 4 cpu free (a scavenger's cpu counts as free: kube-scheduler
    preempts it for the queue's work); a workload of 2 pods of 1 cpu may fit, one of 3 cpu may not."""
    from webhook.reconciler.planner import may_fit_now

    s = snap(busy("r", "2"), busy("scav", "1", priority=SCAVENGER), gated("two", cpu="1"), gated("three", cpu="3"),
             nodes=ONE)
    ws = {w.ref.name: w for w in queue.waiting(s, T0, POLICY, {}, lambda o: None)}
    fits = may_fit_now(s, queue.preempts_below(POLICY))
    assert fits(dataclasses.replace(ws["two"], size=2)) and not fits(dataclasses.replace(ws["two"], size=3))
    assert not fits(ws["three"])
    assert not may_fit_now(s, None)(dataclasses.replace(ws["two"], size=2)), "the scavenger counted"


def test_placed_returns_the_order_kept_not_the_last_one_tried() -> None:
    """short (4h: tried ahead of its turn, it would start big past its start-by) is the last try of
    the pass and not kept: what the estimate pass places after is the order kept, big ahead."""
    s = _big_promised_and_a_short_job("4h")
    from webhook.reconciler.shadow import recorded_limit, shadow_schedule

    waiting = queue.order(queue.waiting(s, T0, START_BY, {}, recorded_limit), T0, {}, START_BY.fair_share)
    tried: list[list[str]] = []

    def schedule(qs: list[Any]) -> list[Any]:
        tried.append([q.ref.name for q in qs])
        return shadow_schedule(s, T0, (), queued=qs)
    items, queued, _ = queue.placed(waiting, schedule, START_BY, T0)
    assert tried == [["big", "short"], ["short", "big"]], "big, the first that does not start now, is not tried"
    assert [w.ref.name for w in items] == [q.ref.name for q in queued] == ["big", "short"]
