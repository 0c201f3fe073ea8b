"""The planner: cluster snapshot + now -> the actions that are due.

A pure function of its inputs (no I/O, no clock, no ``kubernetes``), so the
unit tests drive it with plain data and a fake clock, and a steady cluster
gives an empty plan: every decision compares what *should* be recorded on an
object with what *is*, and acts only on a difference.

Three concerns, each a loop over an index built once per pass:

**Deadlines.** A job is a Job, or a Pod without a controller. Its time limit
(``batchgate.io/time-limit``) counts from when its first pod started running
(the earliest container start). The start and the resulting deadline are
recorded on the object (``batchgate.io/started-at``, ``batchgate.io/deadline``)
so they survive restarts of the reconciler and of the pods; the recorded start
is only trusted where it is not later than what the pods show. Past the
deadline the job is deleted (with its grace period; a Job's pods follow by
background propagation); ``warning_lead`` before it, a Warning Event is sent
once per deadline (``batchgate.io/warned-for``). A longer limit written by
the user (the webhook keeps it within policy) moves the deadline: an Event
says so. A deadline that passed while the reconciler was down is simply
found past on the next pass.

**Gangs.** Pods labelled ``batchgate.io/pod-group`` form a group per owner (a
Job, or bare pods). When a member of a Job's group *fails* (phase Failed), the
Job's own failure policy decides, as its controller applies it
(``podFailurePolicy``, ``backoffLimit``, ``backoffLimitPerIndex``): where it says
the Job (or the index) has failed, the Job controller fails it and stops its
pods, and nothing is left to do here; otherwise the group starts over together
(``gang-restart``): its running members are deleted, the Job makes them again,
and the failed pod is kept (its logs, the controller's count) and marked
``batchgate.io/gang-restart: <its uid>`` once the deletes are done, so it
triggers nothing again. Container restarts under ``restartPolicy: OnFailure`` or
``Always`` are not pod failures. Bare groups have no budget: every member is
deleted. When a member is *interrupted* (evicted, preempted, its node gone) that
is not the job's fault: the members are deleted but the Job stays, so its
controller starts the whole group over (unless its podFailurePolicy fails it for
that). On current Kubernetes such a member is usually being deleted already,
with a ``DisruptionTarget`` condition (preemption, the Eviction API, the taint
manager, PodGC): its partners created before that go too, and it is marked
instead of deleted. Members being deleted for any other reason (by batchgate, by
a user, with their Job) trigger nothing, and the member that caused a teardown
is deleted (or marked) last, so a teardown cut short by a crash is found again
and finished with the same cause (and the same Event names).

Every member batchgate takes down that has not ended gets a ``DisruptionTarget``
condition first (reason ``BatchgateGangRestart``, or ``BatchgateGangTeardown``
for bare pods), as kube-controller-manager's taint manager and PodGC write it.
Since Kubernetes 1.26 the Job controller counts every pod deleted before it
ended as failed; with the rule the webhook gives gang Jobs
(podFailurePolicy ``Ignore`` on ``DisruptionTarget``) a restart costs the Job
the one failure that caused it, and an interruption none.

**PodGroups.** With the coscheduling CRD installed, each group has a PodGroup
(minMember = the group size) for as long as its workload exists: the Job (the
PodGroup also gets it as ownerReference), or any member pod of a bare group.
Only PodGroups batchgate created (``app.kubernetes.io/managed-by``) are ever
changed or deleted.

**Job networking** (``network``): per multi-pod workload a headless Service,
the hostfile ConfigMap and, in isolated namespaces, a NetworkPolicy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contract import (
    DEADLINE_ANNOTATION,
    GANG_RESTART_ANNOTATION,
    STARTED_AT_ANNOTATION,
    TIME_LIMIT_ANNOTATION,
    WARNED_FOR_ANNOTATION,
)
from ..units import format_duration, format_elapsed, format_time
from ..windows import Window
from . import queue, victims
from .actions import (
    Action,
    ActionKind,
    Delete,
    Disruption,
    Mark,
    Plan,
    PodGroupWrite,
    Unplannable,
    unplannable,
)
from .expected import plan_expected
from .forecast import forecast
from .maintenance import plan_maintenance
from .model import (
    REASON_GANG_RESTART,
    REASON_GANG_TEARDOWN,
    REASON_PREEMPTED,
    JobView,
    PodGroupView,
    PodView,
    Ref,
    Snapshot,
    job_of,
    owns,
)
from .network import plan_network
from .requeue import plan_requeue, requeuing
from .runtimes import History, Predictor, Run, finished_runs, job_key, pod_key, remember
from .scavenger import checkpoint_period, plan_scavengers, sj_owner
from .settings import QueuePolicy, Settings
from .shadow import Estimate, Queued, shadow_schedule


@dataclass(slots=True)
class _Pass:
    now: float
    settings: Settings
    actions: list[Action]
    wake_at: float | None = None
    stopped: set[str] | None = None  # uids of jobs this pass deletes (deadline, gang failure)
    budget: int = 0  # bookkeeping actions (records, PodGroup writes) this pass may still plan
    deferred: int = 0  # bookkeeping actions left for the next pass
    runs: list[Run] = field(default_factory=list)  # jobs stopped at their deadline: runs that hit their limit
    failed: list[Unplannable] = field(default_factory=list)  # what could not be planned (each costs only itself)

    def undo(self, concern: str, ref: Ref | None, error: Exception, actions: int, runs: int) -> None:
        """``ref`` (or the whole ``concern``) raised while planned: take back what it planned so far
        (``actions`` and ``runs`` are the lengths before it) and record it (a ``cannot-plan`` action)."""
        del self.actions[actions:]
        del self.runs[runs:]
        if ref is not None and self.stopped is not None:
            self.stopped.discard(ref.uid)
        unplannable(concern, ref, error, self.failed, self.actions)

    def spend(self) -> bool:
        """Whether one more bookkeeping action fits in this pass (else it is counted as deferred)."""
        if self.budget > 0:
            self.budget -= 1
            return True
        self.deferred += 1
        return False


def plan(snapshot: Snapshot, now: float, settings: Settings, *, estimate: bool = True,
         history: History | None = None, usage: Mapping[str, float] | None = None,
         told: Container[tuple[str, str]] = frozenset()) -> Plan:
    """Everything due at ``now`` (epoch seconds), and when to look again. ``estimate``: also run
    the shadow schedule for expected start times (the controller does so at most every
    ``expected_start_interval``: it costs more than the rest of a pass on a busy cluster).
    ``history``: the runs the controller remembers (runtimes.py), besides those the snapshot shows.
    ``usage``: each account's decayed usage now (usage.py), for the batch queue's fair share.
    ``told``: (target uid, key) of the ``TELL_ONCE`` actions the controller carried out, which it
    drops from every plan: the queue's notices among them are not made at all."""
    p = _Pass(now=now, settings=settings, actions=[], stopped=set(), budget=settings.max_bookkeeping_per_pass)
    queues = settings.queues
    excluded_cache: dict[str, bool] = {}

    def excluded(ns: str) -> bool:
        v = excluded_cache.get(ns)
        if v is None:
            excluded_cache[ns] = v = queues.excluded(ns)
        return v

    # One pass over the pods builds every index the three concerns need.
    jobs_by_uid: dict[str, JobView] = {}
    for j in snapshot.jobs.values():
        if not excluded(j.ref.namespace):
            jobs_by_uid[j.ref.uid] = j
    pods_of_job: dict[str, list[PodView]] = {}
    bare_timed: list[PodView] = []
    groups: dict[tuple[str, str, str], list[PodView]] = {}
    job_pods_get, groups_get, excluded_get = pods_of_job.get, groups.get, excluded_cache.get
    for pod in snapshot.pods.values():
        ns = pod.ref.namespace
        ex = excluded_get(ns)
        if ex is None:
            ex = excluded(ns)
        if ex:
            continue
        owner = pod.owner
        if owner is None:
            if pod.time_limit is not None or pod.admitted is not None:
                bare_timed.append(pod)
            owner_uid = ""
        else:
            owner_uid = owner.uid
            if job_of(snapshot, pod) is not None:
                lst = job_pods_get(owner_uid)
                if lst is None:
                    pods_of_job[owner_uid] = [pod]
                else:
                    lst.append(pod)
            else:
                if owner.kind == "Job":
                    # Not its Job's (another namespace, another name, made before the Job): never
                    # in the Job's gang; a group of such pods is nobody's to act on.
                    owner_uid = f"unconfirmed:{owner_uid}"
                if pod.admitted is not None:
                    # Admitted with a time limit, and no Job of ours runs it: a Pod a user made
                    # claiming some owner, an operator's Pod with a limit of its own. The webhook
                    # records no limit for the Pods of services (ReplicaSets, StatefulSets,
                    # DaemonSets made by their controllers), so those never come here.
                    bare_timed.append(pod)
        group = pod.group
        if group is not None:
            gkey = (ns, group, owner_uid)
            g = groups_get(gkey)
            if g is None:
                groups[gkey] = [pod]
            else:
                g.append(pod)

    # One object that cannot be planned (it raises: a value no view should have let through, a
    # bug) costs that object a cannot-plan Event and the metric, never the pass: what it planned so
    # far is taken back and the loop goes on. Whole concerns are guarded the same way below, and
    # the concerns with loops of their own (ScavengerJobs, maintenance, network) isolate per object.
    actions, runs = p.actions, p.runs
    no_pods: tuple[PodView, ...] = ()
    for job in jobs_by_uid.values():
        # A ScavengerJob's Jobs are its segments; its controller (scavenger.py) runs them.
        if ((job.time_limit is not None or job.admitted is not None) and not job.deleting and not job.finished
                and sj_owner(job, snapshot) is None):
            n, r = len(actions), len(runs)
            try:
                _deadline(p, job, pods_of_job.get(job.ref.uid, no_pods), True)
            except Exception as e:
                p.undo("deadline", job.ref, e, n, r)
    for pod in bare_timed:
        # most of them wait (gated, pending): not started, nothing counts yet (as _deadline would find)
        if pod.started is None and pod.started_at_t is None and pod.phase != "Running":
            continue
        if not pod.deleting and not pod.terminal:
            n, r = len(actions), len(runs)
            try:
                _deadline(p, pod, (pod,), False)
            except Exception as e:
                p.undo("deadline", pod.ref, e, n, r)

    nodes = snapshot.nodes
    for (_ns, group, owner_uid), members in groups.items():
        # Fast path: nothing wrong with any member.
        for m in members:
            if ((m.failure is not None and not m.restarted) or m.interrupted is not None
                    or (nodes and m.node and m.node not in nodes)):
                n, r = len(actions), len(runs)
                try:
                    _gang(p, group, owner_uid, members, jobs_by_uid, snapshot)
                except Exception as e:
                    owner_job = jobs_by_uid.get(owner_uid)
                    p.undo("gang", owner_job.ref if owner_job is not None else m.ref, e, n, r)
                break

    if snapshot.pod_groups is not None:
        n, r = len(actions), len(runs)
        try:
            _pod_groups(p, snapshot, jobs_by_uid, pods_of_job, groups, excluded)
        except Exception as e:
            p.undo("pod-groups", None, e, n, r)

    windows = [w.window for w in (snapshot.windows or {}).values() if w.window is not None]
    limit_of: Callable[[JobView | PodView], int | None] = lambda o: effective_limit(o, settings)  # noqa: E731
    # what kube-scheduler binds (the pending pods the placement counts), queue or none
    queue_args: dict[str, Any] = {"kube_schedulers": queues.kube_schedulers}
    promised: dict[str, float] = {}  # a waiting workload's reservation (start-by), by uid
    to_limits: list[Estimate] | None = None  # the queue's placement (every workload to its time limit)
    waiting: list[queue.Waiting] = []
    n, r = len(actions), len(runs)
    try:
        if queues.gated:
            p.actions += plan_requeue(snapshot, now, queues, jobs_by_uid.values(), pods_of_job)
    except Exception as e:
        p.undo("requeue", None, e, n, r)
    n, r = len(actions), len(runs)
    try:
        # a Job being re-queued waits for its old narrowing to go before it can be placed
        waiting = [w for w in queue.waiting(snapshot, now, queues, usage or {}, limit_of)
                   if w.job is None or not requeuing(w.job)]
        p.actions += queue.plan_unmanaged(queue.unmanaged(snapshot, queues, limit_of), now)
        if snapshot.nodes is not None:  # placing needs the nodes; what waits is known without them
            if waiting or queues.gated:
                queue_args |= {"queued": [], "preempts_below": queue.preempts_below(queues),
                               "class_values": queues.class_values, "released": queue.released(queues)}
            if waiting:
                def schedule(queued: list[Queued]) -> list[Estimate]:
                    return shadow_schedule(snapshot, now, windows, limit_of=limit_of, easy=queues.easy,
                                           **{**queue_args, "queued": queued})
                # a promise the placement would break is promoted and the queue placed again (queue.place)
                waiting, queue_args["queued"], placed = queue.placed(
                    waiting, schedule, queues, now, may_fit_now(snapshot, queue_args["preempts_below"], queues))
                # under EASY the placement is no estimate of the rest: the estimate pass places them all
                to_limits = placed if not queues.easy else None
                promised = {e.workload.uid: e.start for e in placed if e.queued and e.reserved and e.start is not None}
                released = _release(snapshot, now, queues, windows, queue.to_release(waiting, placed, now, queues),
                                    {e.workload.uid: e.nodes for e in placed if e.nodes})
                targets = {a.target.uid for a in released}
                gone = targets | {w.ref.uid for w in waiting if w.pods and w.pods[0].ref.uid in targets}
                p.actions += released
                p.actions += queue.plan_notices(waiting, placed, queues, skip=gone, told=told)
                p.actions += queue.plan_start_by(waiting, placed, now, queues)
    except Exception as e:
        p.undo("queue", None, e, n, r)
        queue_args = {"kube_schedulers": queues.kube_schedulers}
        to_limits = None

    if estimate and settings.expected_start and snapshot.nodes is not None:
        predictor = None
        n, r = len(actions), len(runs)
        try:
            if settings.runtime_prediction:
                predictor = Predictor.of(remember(history or {}, finished_runs(snapshot)))
            if to_limits is not None and (predictor is None or (not predictor.history and not _own_runtimes(snapshot))):
                estimates = to_limits  # nothing predicts a runtime shorter than a limit: the same placement
            else:
                estimates = shadow_schedule(snapshot, now, windows, runtimes=predictor, limit_of=limit_of,
                                            **queue_args)
            estimates = forecast(estimates, snapshot, now=now, policy=queues, usage=usage or {}, predictor=predictor,
                                 limit_of=limit_of, scores={w.ref.uid: (w.account, w.score) for w in waiting})
            # the likely start is never after the promise (predicted runtimes end no later than limits)
            estimates = [dataclasses.replace(e, start=min(e.start, promised[e.workload.uid]))
                         if e.start is not None and e.workload.uid in promised else e for e in estimates]
            p.actions += plan_expected(snapshot, estimates, settings, failed=p.failed)
        except Exception as e:
            p.undo("expected-start", None, e, n, r)

    concerns: list[tuple[str, Callable[[], tuple[list[Action], float | None]]]] = []
    if snapshot.scavenger_jobs:
        concerns.append(("scavengerjob", lambda: plan_scavengers(snapshot, now, settings, failed=p.failed)))
    if snapshot.windows is not None:
        concerns.append(("maintenance", lambda: plan_maintenance(snapshot, now, settings, failed=p.failed)))
    for concern, planned in concerns:
        try:
            c_actions, c_wake = planned()
        except Exception as e:
            p.undo(concern, None, e, len(actions), len(runs))
            continue
        p.actions += c_actions
        if c_wake is not None and (p.wake_at is None or c_wake < p.wake_at):
            p.wake_at = c_wake

    if snapshot.net_objects is not None:
        try:
            n_actions = plan_network(snapshot, isolation_for=queues.isolation_for, excluded=excluded, failed=p.failed)
        except Exception as e:
            p.undo("network", None, e, len(actions), len(runs))
            n_actions = []
        for a in n_actions:
            if a.kind in ("delete-network", "cannot-plan") or p.spend():
                p.actions.append(a)

    # Order matters and is kept: an object's actions in the order they were planned
    # (record before warn), a teardown's cause last.
    if p.deferred:
        p.wake_at = now  # the rest right after this batch
    return Plan(actions=p.actions, wake_at=p.wake_at, deferred=p.deferred, runs=tuple(p.runs),
                unplannable=tuple(p.failed), waiting=tuple((w.queue, w.account) for w in waiting))


def _release(snapshot: Snapshot, now: float, queues: QueuePolicy, windows: Sequence[Window],
             go: list[tuple[queue.Waiting, str]], planned: Mapping[str, tuple[str, ...]]) -> list[Action]:
    """Release what the queue says starts now, each narrowed to the nodes the placement chose for it
    (``planned``: by uid; ``_narrowed``), so kube-scheduler cannot spread it onto room reserved for
    work ahead of it, nor break a gang up. Where it fits only on room scavengers hold, the gangs
    on those nodes that lose least go first (victims.py) and it is narrowed to the nodes made free;
    one that no eviction makes room for waits. Work of a queue no longer gated goes at once, as it
    is; so does the rest of a pod group released in part when the placement has no room for it now."""
    below = queue.preempts_below(queues)
    gangs = []
    if go and below is not None and snapshot.nodes is not None:
        start_over = {sj.ref.uid: sj.start_over for sj in (snapshot.scavenger_jobs or {}).values()
                      if getattr(sj, "start_over", None) is not None}
        intervals = {sj.ref.uid: sj.checkpoint_interval for sj in (snapshot.scavenger_jobs or {}).values()
                     if getattr(sj, "checkpoint_interval", None) is not None}
        periods = {sj.ref.uid: checkpoint_period(sj) for sj in (snapshot.scavenger_jobs or {}).values()}
        gangs = victims.scavenger_gangs(snapshot, now, below, windows, start_over, intervals, periods)
    if not gangs:
        return [a for w, why in go for a in _go(w, why, now, _narrowed(w, planned, queues))]
    assert snapshot.nodes is not None
    room = victims.room(snapshot, gangs)
    out: list[Action] = []
    taken: set[str] = set()
    for w, why in go:
        nodes = _narrowed(w, planned, queues)
        if w.rest or w.queue not in queues.gated:  # released whatever the room: no queue holds it any more
            out += _go(w, why, now, nodes)
            continue
        # on the nodes planned for it when they have the room free; the placement counts no scavenger,
        # so where some would have to make room, the victims are chosen anywhere, as before
        mine = nodes is not None and victims.free_for(room, w.sched, nodes) >= w.size
        choice = victims.choose(room, w.sched, w.size, {n: snapshot.nodes[n] for n in nodes or () if n in snapshot.nodes}
                                if mine else snapshot.nodes)
        if choice is None:
            continue  # the room the placement counted on is not there (yet): it waits
        narrowable = not w.sched.clipped and not (w.job is not None and w.job.ran)
        if not choice.evict or not narrowable:
            out += _go(w, why, now, nodes if mine else choice.nodes if narrowable else None)
            continue
        where = ", ".join(choice.nodes)
        for g in choice.evict:
            if g.ref.uid in taken:
                continue
            taken.add(g.ref.uid)
            why_g = (f"batchgate took its room on {where} for {w.ref.kind} {w.ref.namespace}/{w.ref.name} (queue "
                     f"{w.queue!r}): of the scavengers there, it loses least ({g.unsaved / 60:.0f} core-minutes since "
                     "its checkpoint); it waits and resumes from its checkpoint")
            out.append(Action(kind="preempt", target=g.ref, reason="Preempted", event_type="Warning", message=why_g,
                              key=f"preempt/{w.ref.uid}", deletes=tuple(
                                  Delete(p.ref, disruption=Disruption(REASON_PREEMPTED, why_g[:1024])) for p in g.pods)))
        out += queue.release(w, f"{why} on {where}, made free of {len(choice.evict)} scavenger gang"
                                f"{'s' if len(choice.evict) != 1 else ''}", now,
                             affinity=_narrowing(w, choice.nodes))
    return out


def may_fit_now(snapshot: Snapshot, below: int | None,
                queues: QueuePolicy | None = None) -> Callable[[queue.Waiting], bool]:
    """Whether a waiting workload's pods could fit in the room free now, on any nodes (every bound pod
    counted but those kube-scheduler preempts for the queue's work, ``below``): needed to start now,
    so ``backfill: start-by`` places again only for those (``queue.into_slack``). With ``queues`` and
    no queue of theirs so set, nobody is tried: the room is not counted."""
    if queues is not None and not queues.start_by_backfill:
        return _anyone
    free = victims.room(snapshot, ()).free
    for p in snapshot.pods.values():
        if below is not None and p.node in free and not p.terminal and p.sched is not None and p.sched.priority < below:
            free[p.node][0] += p.sched.cpu
            free[p.node][1] += p.sched.mem
    cpu = [max(f[0], 0) for f in free.values()] or [0]
    mem = [max(f[1], 0) for f in free.values()] or [0]
    most, total = (max(cpu), max(mem)), (sum(cpu), sum(mem))

    def test(w: queue.Waiting) -> bool:
        c, m = w.sched.cpu, w.sched.mem
        return c <= most[0] and m <= most[1] and w.size * c <= total[0] and w.size * m <= total[1]
    return test


def _anyone(w: queue.Waiting) -> bool:
    return True


def _narrowed(w: queue.Waiting, planned: Mapping[str, tuple[str, ...]], queues: QueuePolicy) -> tuple[str, ...] | None:
    """The nodes ``w`` is released onto: those the placement chose for it now. None, released as it is:
    a queue that no longer holds work (its work goes as if it had never been queued), no nodes planned
    now (the rest of a pod group, which goes whatever the room), placement rules too long to model, a
    Job that ran before (Kubernetes refuses a change to its template: it would never be released), or
    work asking for GPUs or other extended resources, which the placement does not count (kept to a
    node whose GPUs are taken, it would wait there while another node has them free)."""
    nodes = planned.get(w.ref.uid)
    if not nodes or w.queue not in queues.gated or w.sched.clipped or (w.job is not None and w.job.ran):
        return None
    if w.job.extended if w.job is not None else any(p.extended for p in w.pods):
        return None
    return nodes


def _go(w: queue.Waiting, why: str, now: float, nodes: Sequence[str] | None) -> list[Action]:
    """Release ``w``, its required node affinity narrowed to ``nodes`` (``victims.narrowed_terms``:
    each of its own terms gains a node-name requirement, which only tightens it, as Kubernetes allows
    on a gated pod and on a suspended Job that never ran): so kube-scheduler, which spreads pods to
    the emptiest node, cannot bind it on room reserved for work ranked ahead of it, nor scatter a
    gang so that part of it does not fit. None: released as it is."""
    if nodes is None:
        return queue.release(w, why, now)
    return queue.release(w, f"{why}, kept to the node{'s' if len(nodes) != 1 else ''} planned for it "
                            f"({', '.join(nodes)})", now, affinity=_narrowing(w, nodes))


def _narrowing(w: queue.Waiting, nodes: Sequence[str]) -> list[dict[str, Any]] | None:
    """The required node affinity terms that keep ``w`` to ``nodes`` (``victims.narrowed_terms``); None
    where its pods' own affinity already does (``victims.confined``: a DaemonSet's pod names its node),
    so no patch adds the same requirement twice. A Job is always narrowed: its requeue takes the
    narrowing out again as the last field requirement of each term (``victims.narrowing``)."""
    if w.job is None and all(p.sched is not None and victims.confined(p.sched, nodes) for p in w.pods):
        return None
    return victims.narrowed_terms(w.sched, nodes)


def _own_runtimes(snapshot: Snapshot) -> bool:
    """Whether any workload says how long it runs (``batchgate.io/expected-runtime``)."""
    return (any(j.expected_runtime is not None for j in snapshot.jobs.values())
            or any(p.expected_runtime is not None for p in snapshot.pods.values()))


# -- deadlines -------------------------------------------------------------
def _limit(obj: JobView | PodView, settings: Settings) -> tuple[int, int, str, str] | None:
    """(limit, effective limit, queue, note) of a job, or None when it has none we may enforce.

    The limit is the annotation (users extend it there; the webhook keeps it within the
    queue's maximum), else - removed, or made malformed while UPDATE validation was
    unreachable - the limit recorded at admission. The queue whose maximum caps it is the one
    recorded at admission: relabelling cannot move a job under another queue's maximum. A
    workload without a record (admitted before batchgate recorded admissions, or while its
    webhook was bypassed) is judged by its labels and annotation, as it always was; one with
    neither a record nor a valid annotation is not ours to guess about."""
    admitted = obj.admitted
    if admitted is None and isinstance(obj, PodView) and obj.owner is not None:
        # A service's pod (the webhook records no limit for a ReplicaSet's, a StatefulSet's...), or a pod
        # its owner made while the webhook was down: never timed (the pass times an owned pod only by
        # its record), so the queue and the placement hold its room with no end, whatever it is annotated.
        return None
    limit = obj.limit
    note = ""
    if limit is None:
        if admitted is None or admitted.limit is None:
            return None
        limit = admitted.limit
        now_says = "gone" if obj.time_limit is None else f"not a duration ({obj.time_limit!r})"
        note = f" (its {TIME_LIMIT_ANNOTATION} annotation is {now_says}: the {admitted.time_limit} it was admitted with applies)"
    qp = settings.queues
    if admitted is not None and admitted.queue in qp.max_time_limit:
        queue = admitted.queue
    else:
        queue = qp.queue_for(obj.ref.namespace, obj.queue)
    effective = limit
    if settings.enforce_queue_max:
        cap = qp.max_time_limit.get(queue)
        if cap is not None and limit > cap:
            effective = cap
            asked = format_duration(limit) if obj.limit is None else obj.time_limit
            relabelled = (f", the queue it was admitted to (its label says {obj.queue})"
                          if admitted is not None and obj.queue and obj.queue != queue else "")
            note += (f" (the requested {asked} is over the maximum {format_duration(cap)} of queue "
                     f"{queue}{relabelled}; {format_duration(cap)} applies)")
    return limit, effective, queue, note


def effective_limit(obj: JobView | PodView, settings: Settings) -> int | None:
    """The time limit the reconciler enforces on a job (``_limit``), in seconds, or None."""
    limits = _limit(obj, settings)
    return limits[1] if limits is not None else None


def _deadline(p: _Pass, obj: JobView | PodView, pods: Sequence[PodView], is_job: bool) -> None:
    now = p.now
    # The hot path compares numbers only; strings are made when there is something to say. What
    # has not started (most of what waits) needs no limit looked up.
    started = obj.started_at_t
    if isinstance(obj, JobView) and obj.requeued_at is not None:
        # Re-queued (requeue.py): nothing counts while it waits again, and then only its new run: the
        # pods of the run before (made before it was suspended, and ended or going) date it no more.
        if obj.suspended:
            return
        requeued = obj.requeued_at
        if started is not None and started < requeued:
            started = None
        pods = [x for x in pods if x.created is None or x.created >= requeued or not (x.terminal or x.deleting)]
    for pod in pods:
        t = pod.started
        if t is None:
            if pod.phase != "Running":
                continue
            t = now  # running, but no start time reported yet: count from now
        elif t > now:
            t = now  # a node clock ahead of ours: the pod cannot have started in the future
        # A recorded start later than what the pods show is not believed (nobody gains
        # time by editing the annotation); an earlier one stands (pods come and go).
        if started is None or t < started:
            started = t
    if started is None:
        return  # not started: nothing counts yet
    limits = _limit(obj, p.settings)
    if limits is None:
        return  # the webhook denies malformed limits; one that slipped by is not ours to guess
    limit, effective, _queue, note = limits
    capped = effective < limit
    started = float(int(started))

    settings = p.settings
    deadline = started + effective
    what = "Job" if is_job else "Pod"
    # A queue maximum lowered in the bundle never ends a job without the usual warning:
    # its deadline is at least ``warning_lead`` after the reconciler took up the new
    # maximum (``queues_since``), and never later than it was. The grace hangs on when the
    # policy changed, not on annotations, so editing them cannot renew it.
    since = settings.queues_since
    if capped and since is not None and deadline < since + settings.warning_lead:
        before = obj.deadline_t if obj.deadline_t is not None else started + limit
        if deadline < before:
            deadline = float(int(min(before, since + settings.warning_lead)))
            note += f"; the queue's maximum was lowered, so after the usual warning: at {format_time(deadline)}"

    if now >= deadline:
        deadline_s = format_time(deadline)
        p.actions.append(Action(
            kind="stop",
            target=obj.ref,
            reason="TimeLimitExceeded",
            message=(f"time limit {format_duration(effective)} ran out at {deadline_s} (running since "
                     f"{format_time(started)}){note}; deleting the {what}"),
            event_type="Warning",
            key=deadline_s,
            deletes=(Delete(obj.ref, "Background" if is_job else None),),
        ))
        assert p.stopped is not None
        p.stopped.add(obj.ref.uid)
        # It ran (at least) until its deadline: a run for the history, the one a prediction needs most
        # (the program runs into its limit), though its Job or pod is gone after this.
        key = job_key(obj) if isinstance(obj, JobView) else pod_key(obj)
        p.runs.append(Run(key, obj.ref.uid, started, max(deadline, started), censored=True))
        return

    rv = obj.resource_version
    if (obj.started_at_t != started or obj.deadline_t != deadline) and p.spend():
        deadline_s, started_s = format_time(deadline), format_time(started)
        old = obj.deadline_t
        if old is None:
            reason, message = "DeadlineSet", (
                f"time limit {format_duration(effective)} counts from {started_s}, when the first pod "
                f"started running; the {what} will be stopped at {deadline_s}{note}")
            if obj.admitted is None:
                reason = "AdmissionUnrecorded"
                message += (f". It carries no admission record (BATCHGATE_QUEUE, BATCHGATE_TIME_LIMIT in its "
                            f"{'pod template' if is_job else 'containers'}): it was admitted before batchgate "
                            f"recorded admissions or while its webhook was bypassed, so its labels and "
                            f"annotations count, and removing the annotation would end the limit")
        elif deadline != old:
            reason = "TimeLimitExtended" if deadline > old else "TimeLimitReduced"
            message = (f"time limit is now {format_duration(effective)}{note}: the deadline moves from "
                       f"{obj.deadline} to {deadline_s}")
        else:
            reason, message = "DeadlineSet", f"deadline {deadline_s} (time limit {format_duration(effective)} from {started_s})"
        changes: dict[str, str | None] = {}
        if obj.started_at_t != started or obj.started_at != started_s:
            changes[STARTED_AT_ANNOTATION] = started_s
        if obj.deadline_t != deadline or obj.deadline != deadline_s:
            changes[DEADLINE_ANNOTATION] = deadline_s
        p.actions.append(Action(
            kind="record-deadline", target=obj.ref, reason=reason, message=message,
            event_type="Warning" if reason == "AdmissionUnrecorded" else "Normal",
            key=deadline_s, annotations=changes, resource_version=rv,
        ))

    if obj.warned_t != deadline:
        warn_at = deadline - settings.warning_lead
        if now >= warn_at:
            deadline_s = format_time(deadline)
            p.actions.append(Action(
                kind="warn", target=obj.ref, reason="TimeLimitApproaching",
                message=(f"the time limit runs out at {deadline_s} (in {format_elapsed(int(deadline - now))}); the {what} "
                         f"will then be deleted. To ask for more time, raise its batchgate.io/time-limit "
                         f"annotation (within the queue's maximum)"),
                event_type="Warning", key=deadline_s,
                annotations={WARNED_FOR_ANNOTATION: deadline_s}, resource_version=rv,
            ))
        elif p.wake_at is None or warn_at < p.wake_at:
            p.wake_at = warn_at
    if p.wake_at is None or deadline < p.wake_at:
        p.wake_at = deadline



# -- gangs -----------------------------------------------------------------
def _cause_order(pod: PodView) -> tuple[float, str]:
    return (pod.failed_at if pod.failed_at is not None else float("inf"), pod.ref.name)


def _gang(
    p: _Pass,
    group: str,
    owner_uid: str,
    members: list[PodView],
    jobs_by_uid: dict[str, JobView],
    snapshot: Snapshot,
) -> None:
    stopped = p.stopped
    assert stopped is not None
    job: JobView | None = None
    if owner_uid:
        job = jobs_by_uid.get(owner_uid)
        owner = members[0].owner
        # Only Jobs and bare pods: for other owners we cannot tell whether they are
        # already finishing, nor how to tear them down. And only a Job that really is the
        # owner: anyone may write an ownerReference naming another namespace's Job uid.
        if (job is None or owner is None or owner.kind != "Job" or job.deleting or job.finished
                or sj_owner(job, snapshot) is not None):
            return
        if not owns(job, members[0]):
            return
        if owner_uid in stopped:
            return
    live = [m for m in members if not m.deleting and m.ref.uid not in stopped]
    if not live:
        return
    nodes = snapshot.nodes

    def interruption(m: PodView) -> str | None:
        if m.interrupted is not None:
            return m.interrupted
        if nodes and m.node and m.phase != "Succeeded" and m.node not in nodes:
            return f"node {m.node} is gone"
        return None

    failed: list[PodView] = []
    interrupted: list[tuple[PodView, str]] = []
    for m in live:
        why = interruption(m) if not m.restarted else None
        if why is not None:
            interrupted.append((m, why))
        elif m.failure is not None and not m.restarted:
            failed.append(m)
    for m in members:
        # A member that Kubernetes is taking down from outside (preempted, evicted by a drain, the
        # taint manager's or PodGC's doing: it carries their DisruptionTarget condition, and is being
        # deleted) leaves its partners running without it: they start over with it. Only partners it
        # ran with, created before it was disrupted: the Job's replacements made since are the next
        # start (and a mark another component wrote over batchgate's own, on a member batchgate took
        # down, finds none).
        if m.deleting and m.interrupted is not None and not m.restarted and m.disrupted_at is not None \
                and m.ref.uid not in stopped \
                and any(not x.terminal and x.created is not None and x.created <= m.disrupted_at for x in live):
            interrupted.append((m, m.interrupted))
    kind: ActionKind
    if job is not None and failed:
        # As the Job controller counts it: a pod has failed once its phase says so (a container that
        # exited while a sidecar runs on is counted when the pod ends).
        if done := [m for m in failed if m.phase == "Failed"]:
            _job_gang_failed(p, job, group, min(done, key=_cause_order), live, members)
            return
        failed = []
    if failed:
        cause = min(failed, key=_cause_order)
        text = f"pod {cause.ref.name} of pod group {group} failed: {cause.failure}"
        kind, reason = "gang-failed", "GangFailed"
    elif interrupted and p.settings.teardown_interrupted_groups:
        cause, why = min(interrupted, key=lambda t: _cause_order(t[0]))
        if job is not None and (cause.terminal or cause.deleting) \
                and job.failure_policy.action_for(cause.exits, cause.conditions) == "FailJob":
            return  # the Job's own podFailurePolicy fails it for this: its controller stops the pods
        text = f"pod {cause.ref.name} of pod group {group} was interrupted ({why})"
        kind, reason = "gang-interrupted", "GangInterrupted"
    else:
        return

    others = sorted((m for m in live if m is not cause), key=lambda m: m.ref.name)
    # The cause goes last: a teardown cut short is found again with the same cause. One that is
    # being deleted already is marked instead, once the others are deleted, so it triggers nothing
    # again while it terminates.
    last: tuple[Delete, ...] = (() if cause.deleting else (Delete(cause.ref),) if kind == "gang-failed"
                                else (_take_down(cause, job, text),))
    mark = Mark(cause.ref, {GANG_RESTART_ANNOTATION: cause.ref.uid}) if cause.deleting else None
    if job is not None:
        p.actions.append(Action(
            kind="gang-interrupted", target=job.ref, reason=reason, event_type="Warning",
            message=(f"{text}; deleting " + (f"the other {len(others)}" if cause.deleting else f"all {len(others) + 1}")
                     + " pods of the group so that the Job starts them over together"),
            key=cause.ref.uid,
            deletes=(*(_take_down(m, job, text) for m in others), *last), mark=mark,
        ))
    else:
        # Bare pods: each is its own workload, so each gets the Event; the cause goes last.
        for m in others:
            p.actions.append(Action(
                kind=kind, target=m.ref, reason=reason, event_type="Warning",
                message=f"{text}; the whole group is torn down: deleting this pod",
                key=cause.ref.uid, deletes=(_take_down(m, job, text),),
            ))
        p.actions.append(Action(
            kind=kind, target=cause.ref, reason=reason, event_type="Warning",
            message=f"{text}; the whole group is torn down" + ("" if cause.deleting else ": deleting this pod"),
            key=cause.ref.uid, deletes=last, mark=mark,
        ))


def _take_down(m: PodView, job: JobView | None, why: str) -> Delete:
    """Delete a gang member batchgate takes down because of another member (or, for an interruption
    Kubernetes did not mark, because of itself). Unless it already ended (its Job controller has
    judged it) or carries a DisruptionTarget condition already, that condition is written first, as
    kube-controller-manager's taint manager and PodGC do: the Job's podFailurePolicy (the webhook
    gives gang Jobs ``Ignore`` on it) then takes it for the interruption it is. Without it, a Job
    counts every pod deleted before it ended as failed (Kubernetes 1.26+, pod tracking finalizers):
    one restart would spend the Job's backoffLimit once per member."""
    if m.terminal or m.disrupted:
        return Delete(m.ref)
    reason = REASON_GANG_RESTART if job is not None else REASON_GANG_TEARDOWN
    return Delete(m.ref, disruption=Disruption(reason, f"batchgate: {why}; the pod group starts over together"
                                               if job is not None else f"batchgate: {why}; the pod group is torn down"))


def _job_gang_failed(p: _Pass, job: JobView, group: str, cause: PodView, live: list[PodView],
                     members: list[PodView]) -> None:
    """A member of a Job's gang failed. The Job's own failure policy decides, as its controller
    applies it: where that says the Job (or the index) has failed, the controller fails it and stops
    its pods, and nothing is left to do here. Otherwise the controller would replace just this pod
    while the others run on without it: the whole group starts over instead. Its running members
    are deleted (the controller makes them again, and the gang scheduler places them together)
    and the failed pod, kept for its logs and for the controller's count, is marked as dealt with.
    Every restart follows a failure the Job counts against its backoffLimit, or one its
    podFailurePolicy says to Ignore (the user's choice, as without batchgate): nothing loops
    beyond what the Job allows."""
    policy = job.failure_policy
    action = policy.action_for(cause.exits, cause.conditions)
    if action in ("FailJob", "FailIndex"):
        return
    if action == "Count":
        counted = [m for m in members if m.failure is not None and policy.action_for(m.exits, m.conditions) == "Count"]
        if policy.backoff_limit_per_index is not None and cause.index is not None:
            if sum(1 for m in counted if m.index == cause.index) > policy.backoff_limit_per_index:
                return  # the index has failed by the Job's backoffLimitPerIndex
            budget = f"index {cause.index} may fail {policy.backoff_limit_per_index} times (backoffLimitPerIndex)"
        else:
            spent = max(job.failed, len(counted))
            if spent > policy.backoff_limit:
                return  # past backoffLimit: the Job controller fails the Job and deletes its pods
            budget = f"{spent} of the {policy.backoff_limit} failures its backoffLimit allows"
    else:
        budget = "its podFailurePolicy ignores this failure"
    others = sorted((m for m in live if m is not cause and not m.terminal), key=lambda m: m.ref.name)
    n = 1 + sum(1 for m in members if m.restarted)
    stopping = f"deleting its {len(others)} running pods so that" if others else "so that"
    why = f"pod {cause.ref.name} of pod group {group} failed: {cause.failure}"
    p.actions.append(Action(
        kind="gang-restart", target=job.ref, reason="GangRestarted", event_type="Warning",
        message=(f"{why}; the group starts over together (restart {n}; {budget}): {stopping} the Job makes "
                 f"them again"),
        key=cause.ref.uid, deletes=tuple(_take_down(m, job, why) for m in others),
        mark=Mark(cause.ref, {GANG_RESTART_ANNOTATION: cause.ref.uid}),
    ))


# -- PodGroups -------------------------------------------------------------
@dataclass(slots=True)
class _Want:
    name: str
    group: str
    size: int
    owner: Ref | None  # the Job; None for bare pods
    workload: Ref  # where the Event goes


def _pod_groups(
    p: _Pass,
    snapshot: Snapshot,
    jobs_by_uid: dict[str, JobView],
    pods_of_job: dict[str, list[PodView]],
    groups: dict[tuple[str, str, str], list[PodView]],
    excluded: Callable[[str], bool],
) -> None:
    existing = snapshot.pod_groups or {}
    want: dict[tuple[str, str], _Want] = {}
    stopped = p.stopped or set()
    for job in jobs_by_uid.values():
        if job.ref.uid in stopped:
            continue  # deleted this pass: its PodGroup would only outlive it
        name, group, size = job.pod_group_name, job.group, job.group_size
        if name is None or group is None or size is None:
            # The template may lack the group (a Job with generateName): the pods have it.
            pods = pods_of_job.get(job.ref.uid)
            first = next((x for x in pods or () if x.group and x.group_size and x.pod_group_name), None)
            if first is None:
                continue
            name, group, size = first.pod_group_name, first.group, first.group_size
        assert name is not None and group is not None and size is not None
        want.setdefault((job.ref.namespace, name), _Want(name, group, size, job.ref, job.ref))
    for (ns, _group, owner_uid), members in groups.items():
        if owner_uid:
            continue  # Job groups come from their Job (above); other owners are not ours
        first = min(members, key=lambda m: m.ref.name)
        if first.pod_group_name is None or first.group is None or first.group_size is None:
            continue
        want.setdefault((ns, first.pod_group_name), _Want(first.pod_group_name, first.group, first.group_size, None, first.ref))

    for key, w in want.items():
        pg = existing.get(key)
        ns = key[0]
        if pg is None:
            if not p.spend():
                continue
            p.actions.append(Action(
                kind="create-podgroup", target=w.workload, reason="PodGroupCreated",
                message=f"created PodGroup {w.name} (minMember {w.size}) so that the group's pods are scheduled together",
                key=w.name,
                pod_group=PodGroupWrite("create", ns, w.name, min_member=w.size, group=w.group, owner=w.owner),
            ))
        elif not pg.managed or pg.deleting:
            continue
        elif w.owner is not None and pg.owner is not None and pg.owner.uid != w.owner.uid:
            # Left over from an earlier Job of the same name: replace it (created next pass).
            p.actions.append(_delete_pod_group(pg, f"it belonged to an earlier {pg.owner.kind} {pg.owner.name}"))
        elif pg.min_member != w.size and p.spend():
            p.actions.append(Action(
                kind="update-podgroup", target=w.workload, reason="PodGroupResized",
                message=f"PodGroup {w.name}: minMember {pg.min_member} -> {w.size}",
                key=f"{w.name}/{w.size}",
                pod_group=PodGroupWrite("update", ns, w.name, min_member=w.size, group=w.group,
                                        uid=pg.ref.uid, resource_version=pg.resource_version),
            ))
    for key, pg in existing.items():
        if key in want or not pg.managed or pg.deleting:
            continue
        if excluded(key[0]):
            continue
        gone = f"its {pg.owner.kind} {pg.owner.name} is gone" if pg.owner else "no pod of the group is left"
        p.actions.append(_delete_pod_group(pg, gone))


def _delete_pod_group(pg: PodGroupView, why: str) -> Action:
    return Action(
        kind="delete-podgroup", target=pg.ref, reason="PodGroupDeleted",
        message=f"deleted PodGroup {pg.ref.name}: {why}", key=pg.ref.uid,
        pod_group=PodGroupWrite("delete", pg.ref.namespace, pg.ref.name, group=pg.group or "",
                                owner=pg.owner, uid=pg.ref.uid),
    )
