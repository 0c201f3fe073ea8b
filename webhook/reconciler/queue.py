"""The batch queue's back half: release waiting work in queue order, whole, when it fits.

The webhook (policy ``queue-gate``) holds every workload of a gated queue at CREATE: a Job
suspended and marked ``batchgate.io/queued``, a bare Pod behind the scheduling gate
``batchgate.io/queue``. Each pass, this module

1. gathers the waiting workloads: queued Jobs (their pods do not exist yet: the pod template times
   the pods they run at once) and gated pods (a pod group's members together; a group waits until
   all its pods exist);
2. orders them as Slurm's multifactor plugin would: priority (the queue's class) first, then the
   fair-share factor of the account (``usage.factors``: Slurm's classic ``2^(-U/S)``) plus the age
   factor (``min(age / maxAge, 1) * ageWeight``, so old work never waits forever), then age;
3. places them, in that order and after what kube-scheduler already has, on the shadow schedule
   (shadow.py): every workload reserves room at its earliest start, all its pods at once, around
   the reservations of those ahead of it; what can start now without moving any of those
   reservations is released (conservative backfill): the gate comes off every pod, or the Job
   resumes. kube-scheduler binds them. A queue with ``backfill: easy`` reserves only for its head
   (the first of its workloads that cannot start now): what fits now starts unless it delays the
   head, and only the head gets a start-by; a workload promised once keeps its place and its
   reservation until it starts (``promised_ahead``), so its promise holds as under conservative.
   A promise (``batchgate.io/start-by``) is a deadline, not a place in line: it never moves
   earlier, and a promised workload the placement would start after it is moved ahead of the
   unpromised work of its priority and the queue placed again (``place``); fair share orders
   everything else, within the room to spare the promises leave.

Queues on ``hold`` or ``stop`` release nothing and reserve nothing: their promises are withdrawn
(``plan_start_by``); a queue no longer gated (or gone from the bundle) releases what still waits in
it at once, and so does a namespace the bundle now excludes (``unmanaged``: the hold is
batchgate's, nobody else would lift it). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..bundle import FairShare
from ..contract import QUEUED_ANNOTATION, START_BY_ANNOTATION
from ..kubefields import REQUIRED
from ..units import format_elapsed, format_time, parse_time
from ..workloads import service_kind
from .actions import Action, EventType, Requirement
from .model import JobView, PodSched, PodView, Ref, Snapshot, admitted_queue
from .settings import QueuePolicy
from .shadow import Estimate, Queued
from .usage import factors

W = TypeVar("W")
HELD = {"hold": "is on hold: it releases nothing until an admin opens it",
        "stop": "is stopped: it releases nothing until an admin opens it"}


@dataclass(frozen=True, slots=True)
class Waiting:
    """One workload waiting in the queue, with what orders it."""

    ref: Ref
    queue: str
    account: str
    priority: int
    created: float
    size: int  # pods it runs at once
    sched: PodSched
    limit: int | None
    job: JobView | None = None
    pods: tuple[PodView, ...] = ()
    incomplete: str = ""  # a pod group not all of whose pods exist yet
    rest: bool = False  # the gated rest of a pod group released in part (a patch that failed): released at once
    factor: float = 1.0  # fair share
    age: float = 0.0  # 0..1
    score: float = 0.0  # factor + ageWeight * age: the order within a priority


def waits_alone(pod: PodView) -> bool:
    """Whether a pod of a gated queue waits there as a workload of its own, behind the gate the webhook
    gives it (rules.queue_gate.holds): a bare pod, or a ReplicaSet's, StatefulSet's or DaemonSet's
    (Kubernetes' own, ``workloads.SERVICE_OWNER_KINDS``; a DaemonSet's pod waits for room on the one node its
    controller's node affinity names). Not a Job's (the Job waited)."""
    owner = pod.owner
    return owner is None or service_kind(owner.api_version.rpartition("/")[0], owner.kind)


def queue_of(obj: JobView | PodView, policy: QueuePolicy) -> str:
    """The queue a workload waits in: the one recorded at admission (nobody can change it), else the
    label, else the namespace's default."""
    return policy.queue_for(obj.ref.namespace, admitted_queue(obj))


def waiting(snapshot: Snapshot, now: float, policy: QueuePolicy, usage: Mapping[str, float],
            limit_of: Callable[[JobView | PodView], int | None]) -> list[Waiting]:
    """Every waiting workload, in queue order (``order``'s, each scored as it is gathered)."""
    items = _gather(snapshot, policy, limit_of, excluded=False, scored=(now, usage))
    items.sort(key=_rank)
    ranked = promised_first(items, _promised_at, lambda w: w.priority)
    return promised_ahead(ranked, _promised_at, lambda w: (w.queue, w.priority) if w.queue in policy.easy else None)


def unmanaged(snapshot: Snapshot, policy: QueuePolicy,
              limit_of: Callable[[JobView | PodView], int | None]) -> list[Waiting]:
    """Work held by batchgate's gate (or suspended and marked queued) in a namespace the bundle now
    excludes: gated while it was batchgate's, and nobody else would ever lift the hold. Released at
    once, whole, whatever the room (``plan_unmanaged``), as if it had never been queued."""
    return _gather(snapshot, policy, limit_of, excluded=True)


def plan_unmanaged(items: list[Waiting], now: float) -> list[Action]:
    """Release what ``unmanaged`` found, saying why."""
    return [a for w in items for a in release(
        w, f"namespace {w.ref.namespace!r} is excluded from batchgate now (the bundle's exclude): "
           "batchgate no longer queues its work", now)]


def _by_created_name(p: PodView) -> tuple[float, str]:
    return (p.created or 0.0, p.ref.name)


def _gather(snapshot: Snapshot, policy: QueuePolicy, limit_of: Callable[[JobView | PodView], int | None], *,
            excluded: bool, scored: tuple[float, Mapping[str, float]] | None = None) -> list[Waiting]:
    """The waiting workloads of the namespaces batchgate manages (``excluded`` False) or of those the
    bundle excludes (True), unordered; ``scored``: (now, usage) to give each its fair-share factor,
    age and score (``scores``) as it is made, rather than make it again in ``order``."""
    # A namespace's exclusion and account are glob matches against the bundle's patterns: asked once
    # per namespace in this call, not once per pod and per workload.
    fair = policy.fair_share
    seen: dict[str, bool] = {}
    accounts: dict[str, str] = {}

    def other_side(ns: str) -> bool:
        v = seen.get(ns)
        if v is None:
            seen[ns] = v = policy.excluded(ns) != excluded
        return v

    def account_of(ns: str) -> str:
        a = accounts.get(ns)
        if a is None:
            accounts[ns] = a = fair.account_of(ns)
        return a

    jobs: list[tuple[JobView, PodSched]] = []
    for job in snapshot.jobs.values():
        if not job.queued or job.deleting or job.finished or job.template is None or other_side(job.ref.namespace):
            continue
        prio = policy.class_values.get(job.priority_class, job.template.priority)
        jobs.append((job, job.template if job.template.priority == prio else replace(job.template, priority=prio)))
    groups: dict[tuple[str, str], list[PodView]] = {}
    ungated: list[PodView] = []  # bare pods of a group not gated (counted below for the groups that wait)
    seen_get, add, keep = seen.get, groups.setdefault, ungated.append
    for pod in snapshot.pods.values():
        if not pod.gated:
            if pod.group and pod.owner is None and not pod.deleting and not pod.terminal:
                keep(pod)
            continue
        if pod.node or pod.deleting or pod.terminal or pod.sched is None:
            continue
        ns = pod.ref.namespace
        side = seen_get(ns)  # other_side, without a call per pod
        if side is None:
            side = other_side(ns)
        if side:
            continue
        # A pod group is bare pods (no owner); a service's pods wait one by one, whatever group label their
        # template gives them (an OrderedReady StatefulSet makes its next pod only when this one is Ready,
        # a rollout's new ReplicaSet one surge pod at a time: waiting for all of a group would be for good).
        add((ns, pod.group) if pod.group and pod.owner is None else (ns, "\0" + pod.ref.uid), []).append(pod)
    out_of_gate: dict[tuple[str, str, str], int] = {}  # (namespace, group, queue) -> its bare pods not gated
    for pod in ungated:
        key = (pod.ref.namespace, pod.group or "")
        if key in groups:
            key3 = (key[0], key[1], queue_of(pod, policy))
            out_of_gate[key3] = out_of_gate.get(key3, 0) + 1
    score = None
    if scored is not None:
        competing = {account_of(ns) for ns, _ in groups} | {account_of(j.ref.namespace) for j, _ in jobs}
        score = scores(scored[0], scored[1], competing, fair)
    out: list[Waiting] = []
    for job, sched in jobs:
        account, created = account_of(job.ref.namespace), job.created or 0.0
        factor, age, total = score(account, created) if score is not None else (1.0, 0.0, 0.0)
        out.append(Waiting(job.ref, queue_of(job, policy), account, sched.priority, created, job.wanted, sched,
                           limit_of(job), job, (), "", False, factor, age, total))
    for members in groups.values():
        if len(members) > 1:
            members.sort(key=_by_created_name)
        first = members[0]
        head = first.sched
        assert head is not None
        sched, cpu, mem = head, head.cpu, head.mem
        # The group's shape: the most cpu and the most memory any of its pods asks (what a preemption
        # frees room for, enough for each pod); the placement places each pod as it is (shadow's
        # ``_place_mixed``), so the group goes only when all of it fits, and not later.
        for m in members:
            o = m.sched
            assert o is not None
            if o.cpu > sched.cpu or (o.cpu == sched.cpu and o.mem > sched.mem):
                sched = o  # the largest pod's placement rules (the first such)
            if o.cpu > cpu:
                cpu = o.cpu
            if o.mem > mem:
                mem = o.mem
        if cpu != sched.cpu or mem != sched.mem:
            sched = replace(sched, cpu=cpu, mem=mem)
        ns, q = first.ref.namespace, queue_of(first, policy)
        if first.group and first.owner is None:
            want = first.group_size or len(members)
            loose = out_of_gate.get((ns, first.group, q), 0)
        else:
            want, loose = len(members), 0
        have = len(members) + loose
        incomplete = (f"waits for all {want} pods of its group {first.group!r} to exist ({have} do)"
                      if have < want else "")
        account, created = account_of(ns), first.created or 0.0
        factor, age, total = score(account, created) if score is not None else (1.0, 0.0, 0.0)
        out.append(Waiting(first.ref, q, account, head.priority, created, max(len(members), 1), sched,
                           limit_of(first), None, tuple(members), incomplete, loose > 0 and not incomplete,
                           factor, age, total))
    return out


def promised_first(items: list[W], promise: Callable[[W], float | None], priority: Callable[[W], int]) -> list[W]:
    """Among workloads of one priority that hold a promise (``promise``: its start-by), the earlier
    promise first, in the places they already hold. Fair share and age still rank the work not yet
    promised, so a newcomer may go ahead of a promise (a higher-ranked arrival: ``StartByMoved`` says
    so); but usage drifting between passes never ranks one promised workload past another, which
    would move its promise later with no arrival at all (bench/queue_replay.py found it)."""
    out = list(items)
    groups: dict[int, list[int]] = {}
    promises: dict[int, float] = {}  # each asked once
    for i, w in enumerate(items):
        p = promise(w)
        if p is not None:
            promises[i] = p
            groups.setdefault(priority(w), []).append(i)
    for places in groups.values():
        ranked = sorted(places, key=lambda i: (promises[i] or 0.0, i))
        for place, i in zip(places, ranked, strict=True):
            out[place] = items[i]
    return out


def promoted(items: list[W], promise: Callable[[W], float | None], priority: Callable[[W], int],
             at_risk: Callable[[W], bool]) -> list[W]:
    """A promise is a deadline, not a place in line: a promised workload the placement would start
    after its start-by (``at_risk``) moves ahead of the unpromised work of its priority ranked ahead
    of it, to just before the first workload of its priority that holds no promise or a later one
    (in the order of the promises: the earlier first). Nothing else moves; a promise with room to
    spare keeps the place fair share gives it, so fair share still reorders work within the slack
    the promises leave."""
    risky = sorted((i for i, w in enumerate(items) if promise(w) is not None and at_risk(w)),
                   key=lambda i: (-priority(items[i]), promise(items[i]) or 0.0, i))
    if not risky:
        return items
    moving = set(risky)
    out = [w for i, w in enumerate(items) if i not in moving]
    for i in risky:  # the earliest promise of the highest priority first
        w, p, prio = items[i], promise(items[i]) or 0.0, priority(items[i])
        at = next((j for j, x in enumerate(out) if priority(x) < prio or (priority(x) == prio and (
            (q := promise(x)) is None or q > p))), len(out))
        out.insert(at, w)
    return out


def promised_ahead(items: list[W], promise: Callable[[W], float | None],
                   easy: Callable[[W], tuple[str, int] | None]) -> list[W]:
    """In an EASY queue (``easy``: its queue and priority, else None) a workload keeps its place once
    promised: work of its queue and priority that holds no promise and is ranked ahead of one that
    does moves to just behind the last that does, in its order. Under EASY only the head is
    promised, and the work behind it holds none; fair share drifting between passes (or a newcomer
    of a lighter account) would otherwise rank it ahead of the head, and the head's promise would
    move later, or lose its reservation, with nothing of higher priority having arrived (the
    replay's fair-share day kept 95.6 % of such promises before, 100 % now: bench/README.md). Only
    unpromised work moves, and only later: no other reservation can move later for it. Maui's
    ``RESERVATIONPOLICY HIGHEST`` does the same: a job that once had a priority reservation keeps it
    until it runs."""
    last: dict[tuple[str, int], int] = {}
    for i, w in enumerate(items):
        key = easy(w)
        if key is not None and promise(w) is not None:
            last[key] = i
    if not last:
        return items
    out: list[W] = []
    moved: dict[tuple[str, int], list[W]] = {}
    for i, w in enumerate(items):
        key = easy(w)
        if key is not None and key in last and i < last[key] and promise(w) is None:
            moved.setdefault(key, []).append(w)
            continue
        out.append(w)
        if key is not None and last.get(key) == i:
            out += moved.pop(key, [])
    return out


def scores(now: float, usage: Mapping[str, float], accounts: Iterable[str],
           fair: FairShare) -> Callable[[str, float], tuple[float, float, float]]:
    """(fair-share factor, age factor, score) of a workload of an account made at a time, among
    ``accounts``: the score, ``factor + ageWeight * age``, orders work within a priority."""
    f = factors(usage, accounts, fair)
    max_age, weight = fair.max_age, fair.age_weight

    def score(account: str, created: float) -> tuple[float, float, float]:
        age = min(max(now - created, 0.0) / max_age, 1.0) if max_age > 0 else 0.0
        factor = f.get(account, 1.0)
        return factor, age, factor + weight * age
    return score


def _rank(w: Waiting) -> tuple[int, float, float, str, str]:
    return (-w.priority, -w.score, w.created, w.ref.namespace, w.ref.name)


def order(items: list[Waiting], now: float, usage: Mapping[str, float], fair: FairShare) -> list[Waiting]:
    """Priority, then fair share plus age, then age (then name, for a stable order)."""
    score = scores(now, usage, {w.account for w in items}, fair)
    scored = []
    for w in items:
        factor, age, total = score(w.account, w.created)
        scored.append(replace(w, factor=factor, age=age, score=total))
    return sorted(scored, key=_rank)


def as_queued(items: list[Waiting], policy: QueuePolicy) -> list[Queued]:
    """What the shadow schedule places, ``rank`` their order; held ones reserve nothing."""
    out = []
    for rank, w in enumerate(items):
        state = policy.states.get(w.queue, "open")
        held = (f"queue {w.queue!r} {HELD[state]}" if state in HELD else w.incomplete)
        out.append(Queued(w.ref, w.sched, w.size, w.limit, rank, job=w.job, pods=w.pods, held=held, queue=w.queue,
                          promised=_promise_of(w) is not None))
    return out


def preempts_below(policy: QueuePolicy) -> int | None:
    """Running pods below every gated queue's class hold no room the queue counts on (kube-scheduler
    preempts them for its work): scavengers, in the default bundle."""
    classes = [policy.class_values[c] for q, c in policy.queue_classes.items()
               if q in policy.gated and c in policy.class_values]
    return min(classes) if classes else None


def released(policy: QueuePolicy) -> Callable[[JobView], bool]:
    """Jobs of a gated queue that run (or are about to): their missing pods are being made."""
    def test(job: JobView) -> bool:
        return not job.queued and queue_of(job, policy) in policy.gated
    return test


def to_release(items: list[Waiting], estimates: list[Estimate], now: float,
               policy: QueuePolicy) -> list[tuple[Waiting, str]]:
    """What the placement says starts now, in queue order, and why; a queue no longer gated
    releases everything."""
    by_uid = {w.ref.uid: w for w in items}
    go: list[tuple[Waiting, str]] = []
    for e in estimates:
        w = by_uid.get(e.workload.uid)
        if w is None or not e.queued:
            continue
        if w.rest:  # the gang's release was decided: finish it, or its released part waits for ever
            go.append((w, f"the rest of its group {w.pods[0].group!r} (released in part before)"))
        elif w.queue not in policy.gated:
            go.append((w, f"queue {w.queue!r} no longer holds work" if w.queue in policy.states
                       else f"queue {w.queue!r} no longer exists"))
        elif e.start is not None and e.start <= now and not w.incomplete and policy.states.get(w.queue, "open") in ("open", "drain"):
            go.append((w, f"its turn in queue {w.queue!r} came and all {w.size} pod{'s' if w.size != 1 else ''} fit"))
    return go


def release(w: Waiting, why: str, now: float, affinity: list[dict[str, Any]] | None = None) -> list[Action]:
    """Release a workload: resume its Job, or take the gate off each of its pods. ``affinity``: the
    required node affinity's terms to narrow it to first (victims.narrowed_terms)."""
    waited = max(now - w.created, 0.0)
    message = f"{why}; released after waiting {format_elapsed(int(waited))}"
    required = ({"affinity": {"nodeAffinity": {REQUIRED: {
        "nodeSelectorTerms": affinity}}}} if affinity is not None else {})
    if w.job is not None:
        spec: dict[str, Any] = {"suspend": False}
        if required:  # a suspended Job that never ran may change its template's scheduling directives
            spec["template"] = {"spec": required}
        return [Action(
            kind="release", target=w.ref, reason="Released", message=message, key="release",
            patch={"metadata": {"resourceVersion": w.job.resource_version, "annotations": {QUEUED_ANNOTATION: None}},
                   "spec": spec},
            amount=waited, tell_after=True)]
    out = []
    for pod in w.pods:
        if required:  # a gated pod may gain node affinity; then the gate goes (the fence follows our patch)
            out.append(Action(kind="narrow", target=pod.ref, reason="Narrowed", quiet=True, key="narrow",
                              message=f"kept to the nodes planned for it: {why}",
                              patch={"metadata": {"resourceVersion": pod.resource_version}, "spec": required}))
        gates = [{"name": g} for g in pod.other_gates] or None
        out.append(Action(
            kind="release", target=pod.ref, reason="Released", message=message, key="release",
            patch={"metadata": {"resourceVersion": pod.resource_version}, "spec": {"schedulingGates": gates}},
            amount=waited, tell_after=True))
    return out


def plan_release(items: list[Waiting], estimates: list[Estimate], now: float, policy: QueuePolicy) -> list[Action]:
    """``to_release`` and ``release``, with no scavenger to make room from."""
    return [a for w, why in to_release(items, estimates, now, policy) for a in release(w, why, now)]


QUEUED_KEY = "queued"  # the key of a workload's one Queued notice (the controller tells it once)


def plan_notices(items: list[Waiting], estimates: list[Estimate], policy: QueuePolicy, *,
                 skip: Container[str] = frozenset(), told: Container[tuple[str, str]] = frozenset()) -> list[Action]:
    """Tell each waiting workload, once, that it waits and why; when a volume it mounts does not
    exist, a Warning naming it instead, at once rather than when its turn comes. The controller
    sends each once (``TELL_ONCE``); the Event's name makes a restart find it sent. No notice is
    made for the uids in ``skip`` (released this pass) nor for one the controller already told
    (``told``: (target uid, key) of the TELL_ONCE actions it carried out, which it would drop)."""
    why: dict[str, Estimate] | None = None
    out = []
    for position, w in enumerate(items, 1):
        uid = w.ref.uid
        if uid in skip or (uid, QUEUED_KEY) in told:
            continue
        if why is None:
            why = {e.workload.uid: e for e in estimates}
        e = why.get(uid)
        reason = e.reason if e is not None else ""
        state = policy.states.get(w.queue, "open")
        message = (f"waits in queue {w.queue!r} for its turn and room for all its {w.size} pod"
                   f"{'s' if w.size != 1 else ''} (when queued: position {position} of {len(items)}, fair-share "
                   f"factor {w.factor:.2f}{'' if state == 'open' else f', queue {state}'}"
                   f"{': ' + reason if reason else ''}); `batchgate queue` shows where it stands")
        mounts = w.job.mounts if w.job is not None else w.pods[0].mounts if w.pods else ()
        requires = tuple(Requirement(Ref("v1", kind, w.ref.namespace, name, ""), Action(
            kind="queued", target=w.ref, reason="VolumeMissing", event_type="Warning", key=f"missing/{kind}/{name}",
            message=(f"{kind} {w.ref.namespace}/{name}, which it mounts, does not exist; it waits in queue "
                     f"{w.queue!r}, but would not start when its turn comes: create it, or fix the workload")))
            for kind, name in mounts)
        out.append(Action(kind="queued", target=w.ref, reason="Queued", message=message, key=QUEUED_KEY,
                          requires=requires))
    return out


START_BY_SLACK = 60.0  # a promise is rewritten when the reservation moves later by more than this
PROMOTION_ROUNDS = 3  # a pass places again at most this often for promises at risk (the last time: all first)
SLACK_TRIES = 2  # backfill: start-by places again at most this often a pass, one workload tried each time


def at_risk(items: list[W], estimates: list[Estimate], promise: Callable[[W], float | None],
            uid: Callable[[W], str]) -> set[str]:
    """The uids of the promised workloads the placement starts after their start-by (and its slack)."""
    start = {e.workload.uid: e.start for e in estimates if e.start is not None}
    out = set()
    for w in items:
        p = promise(w)
        s = start.get(uid(w)) if p is not None else None
        if s is not None and p is not None and s > p + START_BY_SLACK:
            out.add(uid(w))
    return out


def place(items: list[W], schedule: Callable[[list[W]], list[Estimate]], promise: Callable[[W], float | None],
          priority: Callable[[W], int], uid: Callable[[W], str],
          rounds: int = PROMOTION_ROUNDS, *, now: float | None = None, slack: Callable[[W], bool] | None = None,
          shape: Callable[[W], Shape] | None = None, tries: int = SLACK_TRIES) -> tuple[list[W], list[Estimate], int]:
    """Place ``items`` (``schedule``: the shadow schedule of them in this order) keeping promises as
    deadlines: while some promise would start after its start-by, it is ``promoted`` ahead of the
    unpromised work of its priority and the queue placed again, at most ``rounds`` times, the last
    of them with every promised workload first (in the order of the promises, the rest behind in
    theirs). A pass with no promise at risk places once; one that promotes stops as soon as no new
    promise is at risk. Returns the order placed, its estimates and how many placements it took."""
    estimates = schedule(items)
    risky: set[str] = set()
    n = 1
    while n <= rounds:
        risk = at_risk(items, estimates, promise, uid)
        if risk <= risky:
            break
        risky.update(risk)
        n += 1
        if n > rounds:  # bounded: every promise first
            items = sorted(items, key=lambda w: (-priority(w), (p := promise(w)) is None, p or 0.0))
        else:
            items = promoted(items, promise, priority, lambda w: uid(w) in risky)
        estimates = schedule(items)
    if slack is not None and now is not None:
        items, estimates, more = into_slack(items, estimates, schedule, promise, uid, now, slack,
                                            shape or (lambda w: (uid(w), ())), tries)
        n += more
    return items, estimates, n


def into_slack(items: list[W], estimates: list[Estimate], schedule: Callable[[list[W]], list[Estimate]],
               promise: Callable[[W], float | None], uid: Callable[[W], str], now: float,
               slack: Callable[[W], bool], shape: Callable[[W], Shape],
               tries: int = SLACK_TRIES) -> tuple[list[W], list[Estimate], int]:
    """Backfill against the reservations users were given (``backfill: start-by``): a workload of
    such a queue (``slack``) that does not start now in the placement ``estimates`` of ``items``
    starts now if placing it just before the first workload that does not start now delays no
    reservation: every workload that holds a promise (``promise``: its ``batchgate.io/start-by``)
    still starts by it (or, one already placed past it, no later than placed), and every other
    workload (none promised yet, or a queue whose promises are not deadlines) no later than placed.
    Conservative backfill, with each reservation its published start: the room to spare between a
    reservation and its start-by, which ``place`` already lets fair share give to later work ranked
    ahead, may go to work that starts now. A big job is not starved: it starts by its start-by.
    At most ``tries`` more placements; a workload whose ``shape`` is of the kind of one that failed
    and no smaller in any of its sizes (pods, cpu, memory, time limit) is not tried again in the
    pass. Returns the order placed, its estimates and how many placements it took."""
    start = {e.workload.uid: e.start for e in estimates}
    bound: dict[str, float] = {}  # per uid: the latest start that delays no reservation
    spare = False  # some promise has room to spare: without, nothing can go that conservative holds
    for w in items:
        u = uid(w)
        s = start.get(u)
        if s is not None:
            p = promise(w)
            bound[u] = s if p is None or s <= now else max(p, s)
            spare = spare or bound[u] > s
    n, failed = 0, list[Shape]()
    if not spare:
        return items, estimates, n
    for w in list(items):
        if n >= tries:
            break
        s = start.get(uid(w))
        if s is None or s <= now or not slack(w) or _dominated(shape(w), failed):
            continue
        me = uid(w)
        head = next(i for i, x in enumerate(items) if (t := start.get(uid(x))) is not None and t > now)
        if uid(items[head]) == me:
            continue  # first of those that do not start now: placed so already
        trial = [*items[:head], w, *(x for x in items[head:] if uid(x) != me)]
        n += 1
        got = schedule(trial)
        starts = {e.workload.uid: e.start for e in got}
        mine = starts.get(me)
        if mine is not None and mine <= now and all(
                (t := starts.get(u)) is not None and t <= b for u, b in bound.items() if u != me):
            items, estimates, start = trial, got, starts
            bound[me] = mine  # released now: a later one may not take that back
        else:
            failed.append(shape(w))
    return items, estimates, n


Shape = tuple[Hashable, tuple[float, ...]]  # (what must be equal, sizes), for into_slack


def _dominated(shape: Shape, failed: Iterable[Shape]) -> bool:
    """``shape`` is of the kind of a failed one and at least as big in every size."""
    return any(k == shape[0] and all(a <= b for a, b in zip(sizes, shape[1], strict=True)) for k, sizes in failed)


def placed(items: list[Waiting], schedule: Callable[[list[Queued]], list[Estimate]],
           policy: QueuePolicy, now: float | None = None,
           may_fit: Callable[[Waiting], bool] = lambda w: True) -> tuple[list[Waiting], list[Queued], list[Estimate]]:
    """``place`` the waiting workloads (``schedule``: the shadow schedule of them as ``as_queued``
    gives them), their promises their ``batchgate.io/start-by`` (none held in a queue with
    ``promise: fair-share``); at ``now``, the work of a queue with ``backfill: start-by`` starts in
    the room its promises leave (``into_slack``; ``may_fit``: false for a workload that cannot fit
    now whatever it goes ahead of, not tried). Returns the order placed, as waiting and as
    queued (what the estimate pass places after it), and its estimates."""
    fair = policy.fair_promises
    slack = policy.start_by_backfill
    last: list[Queued] = []

    def promise(w: Waiting) -> float | None:
        return None if w.queue in fair else _promised_at(w)

    def run(ws: list[Waiting]) -> list[Estimate]:
        last[:] = as_queued(ws, policy)
        return schedule(last)
    items, estimates, _ = place(items, run, promise, lambda w: w.priority, lambda w: w.ref.uid, now=now,
                                slack=(lambda w: w.queue in slack and not w.rest and may_fit(w)) if slack else None,
                                shape=_shape)
    if slack and (len(last) != len(items) or any(q.ref.uid != w.ref.uid for q, w in zip(last, items, strict=True))):
        last[:] = as_queued(items, policy)  # the last placement was a try not kept (into_slack)
    return items, last, estimates


def _shape(w: Waiting) -> Shape:
    """Where a workload may go, and its sizes: one of the same kind, bigger in none, fits where it fits."""
    return ((w.queue, replace(w.sched, cpu=0, mem=0, created=0.0)),
            (w.size, w.sched.cpu, w.sched.mem, w.limit if w.limit is not None else math.inf))


def plan_start_by(items: list[Waiting], estimates: list[Estimate], now: float,
                  policy: QueuePolicy) -> list[Action]:
    """``batchgate.io/start-by`` on each waiting workload: its reservation's start (placed with the
    time limits of everything running and ahead of it, which the reconciler enforces) when first
    placed. It is a deadline, not a place in line: it never moves earlier (work ending before its
    limit leaves it room to spare, which fair share may give to later work ranked ahead, as long
    as ``place`` finds the promise still kept), and later only with a Warning saying why
    (higher-priority work ranked ahead arrived, or room it counted on is gone: a node lost or
    cordoned, a maintenance window declared); in a queue with ``promise: fair-share`` it moves with
    its reservation, earlier quietly, and later too for a lighter account's arrival ranked ahead.
    A queue on hold or stopped reserves nothing and releases nothing until an admin opens it, which no one can
    date: its workloads' promises are withdrawn (the annotation removed, with a Warning saying
    so), as Slurm's backfill reserves nothing for the jobs of a partition that is not up; the
    first pass after it opens promises them afresh. So is the promise of a workload the placement
    finds room for nowhere (a node it counted on lost or cordoned: it fits no node it may use, or
    only behind work without a time limit), until it fits again."""
    placed = {e.workload.uid: e for e in estimates}
    unpromised_ahead: list[int] = []  # per rank, how many ranked ahead have no promise: counted once, when first asked
    texts: dict[float, str] = {}  # a promise's time as written: most promises share a few
    out = []
    etype: EventType
    states = policy.states
    for rank, w in enumerate(items):
        state = states.get(w.queue)
        if state in HELD:
            out += _withdraw(w, f"queue {w.queue!r} {HELD[state]}, and reserves nothing for it meanwhile",
                             "when the queue opens", policy)
            continue
        e = placed.get(w.ref.uid)
        if e is not None and e.start is None:  # placed nowhere: nothing is reserved behind its promise
            out += _withdraw(w, (f"nothing is reserved for it while it {w.incomplete}" if w.incomplete else
                                 f"no node it may use has room for it any more ({e.reason})"), "when it fits", policy)
            continue
        if e is None or e.start is None or e.start <= now or not e.reserved:
            continue  # not placed (no nodes known), released now, or behind the head of an EASY queue
        target = w.job if w.job is not None else w.pods[0] if w.pods else None
        if target is None:
            continue
        have_text = _promise_of(w)
        have = parse_time(have_text) if have_text else None
        want = max(e.start, now)
        if have is not None and (abs(want - have) if w.queue in policy.fair_promises else want - have) <= START_BY_SLACK:
            continue  # a deadline never moves earlier (the room to spare is fair share's to use)
        want_text = texts.get(want)
        if want_text is None:
            texts[want] = want_text = format_time(want)
        if have is None:
            reason, etype, message = "StartBy", "Normal", (
                f"will start by {want_text} at the latest (its reservation in queue {w.queue!r}), unless "
                "higher-priority work arrives, a node is lost or a maintenance window is declared")
        elif want < have:  # promise: fair-share
            reason, etype, message = "StartBy", "Normal", f"will start by {want_text}, earlier than promised"
        else:
            # every waiting workload gets its promise at the first pass that sees it: one ranked ahead
            # without one arrived since
            if not unpromised_ahead:
                count = 0
                for x in items:
                    unpromised_ahead.append(count)
                    count += _promise_of(x) is None
            ahead = unpromised_ahead[rank]
            cause = (f"{ahead} workload{'s' if ahead != 1 else ''} ranked ahead of it arrived (of a higher "
                     "priority" + (", or a lighter fair-share account)" if w.queue in policy.fair_promises else ")")
                     if ahead
                     else "room it counted on is gone (a node lost or cordoned, a maintenance window declared, or "
                          "work ahead of it ran longer than its time limit allowed for)")
            reason, etype, message = "StartByMoved", "Warning", (
                f"its promised start {format_time(have)} moved to {want_text}: {cause}; {e.reason}")
        out.append(Action(kind="start-by", target=target.ref, reason=reason, event_type=etype, message=message,
                          key=want_text, annotations={START_BY_ANNOTATION: want_text},
                          resource_version=target.resource_version))
    return out


def _withdraw(w: Waiting, why: str, again: str, policy: QueuePolicy) -> list[Action]:
    """Take back the promise of a workload nothing is reserved behind any more (``why``): its queue
    holds, or the placement has room for it nowhere (a node it counted on lost or cordoned, a
    group's pod gone); it is promised afresh ``again``. Not for work released at once (a queue no
    longer gated, the rest of a gang released in part), which its release patches instead."""
    have = _promise_of(w)
    target = w.job if w.job is not None else w.pods[0] if w.pods else None
    if have is None or target is None or w.rest or w.queue not in policy.gated:
        return []
    return [Action(kind="start-by", target=target.ref, reason="StartByWithdrawn", event_type="Warning",
                   message=f"its promised start {have} is withdrawn: {why}; it is promised a start again {again}",
                   key=f"withdrawn/{have}", annotations={START_BY_ANNOTATION: None},
                   resource_version=target.resource_version)]


def _promised_at(w: Waiting) -> float | None:
    text = _promise_of(w)
    return parse_time(text) if text else None


def _promise_of(w: Waiting) -> str | None:
    target = w.job if w.job is not None else w.pods[0] if w.pods else None
    return target.start_by if target is not None else None

