"""The work that will arrive and rank ahead: a stretch of the expected start's wait.

The shadow schedule (shadow.py, with predicted runtimes) places the work that waits now. Work
that arrives later and ranks ahead of a waiting workload (a higher priority; under fair share, an
account whose factor now ranks it ahead) is placed before it at later passes and pushes it later:
in bench/queue_replay.py's ``repeat`` and ``iid`` days three workloads in four started after their
expected start. No estimate made now knows those arrivals; the cluster's recent past says how much
of them to expect.

Queueing theory gives the size of the push. While a tagged job waits for the work ahead of it,
work that ranks ahead keeps arriving at ``rho`` of the cluster's capacity and is served first, so
the time until the tagged job's turn is the delay busy period ``W / (1 - rho)`` (the factor in
Cobham's formula for the waits of priority classes). The expected start's wait (expected start
minus now) is stretched by ``1 / (1 - rho)``, with ``rho`` measured, not assumed:

- ``rho``: the cpu-seconds (cores per pod x pods x predicted runtime, else time limit) of the
  workloads created in the last ``WINDOW`` (6 h) that rank ahead of this one, over the cluster's
  cpu-seconds in that time (ready, schedulable nodes' allocatable cpu x ``WINDOW``). *Ranks ahead*:
  a higher priority; or the same priority and an account whose fair-share factor now is above the
  waiting workload's score (factor plus age: what queue.order sorts by; work not in a gated queue
  has no score and only higher priorities count). Its own account's later work never ranks ahead
  (its score is at least its account's factor; ``Forecast.load`` leaves its account out, as the
  factor summed again here can come out a last bit above a score without age). Work whose pods
  name a scheduler kube-scheduler does not serve (``spec.schedulerName`` not among the bundle's
  ``kubeSchedulerProfiles``: Volcano, a scheduler of one's own) is no arrival: its scheduler binds it
  in its own order, ahead of nothing kube-scheduler or the queue places (shadow.py places none of
  it either).
- at most ``MOST`` (0.5: a stretch of at most 2), so a burst does not make the estimate endless
  (in the replay a cap of 0.5 calibrates as well as 0.75 with a smaller error: the busiest hours
  overshot);
- never after the start-by (the promise; the planner caps every estimate so), and a start that is
  now stays now;
- for a workload the placement starts earlier than work placed ahead of it (``backfilled``), only
  the arrivals of a higher priority count. It starts in room the work ranked ahead of it cannot
  use then; the arrivals of its own priority that fair share ranks ahead queue behind their
  accounts' work already placed ahead of it (the same factor, more age), which could not use
  that room, while a higher priority's are placed before all of it and take room as it frees. In
  the replay's fair-share day (one priority) six workloads in ten that waited were backfilled, and
  they started at a median half their placed wait whatever the load ahead, while those placed in
  their turn started at 1.2-2.4 times it: stretching both made 69 % start before their estimate;
  in ``repeat`` at load 0.8 the backfilled low-priority work was pushed by the high-priority
  arrivals (bench/README.md).

What it does not correct: in the replay even top-priority work, which nothing ranks ahead of,
starts at a median 1.6-1.8 times its estimated wait at load 0.8 (the placement picks the node predicted to
free first, and the earliest of several noisy predictions is early); bench/README.md has the
figures.

One pass sums the arrivals once per (priority, account), then answers each workload by bisection:
about 4 ms of CPU for 10,000 pods (the shadow schedule: 120 ms). Pure: the snapshot, the usage
and ``now`` come in.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .model import JobView, PodView, Snapshot, job_of
from .runtimes import Predictor, job_key, pod_key
from .settings import QueuePolicy
from .shadow import Estimate
from .usage import factors

WINDOW = 6 * 3600.0  # how far back the arrivals are counted
MOST = 0.5  # the largest load ahead counted: a stretch of at most 1 / (1 - MOST) = 2


@dataclass(frozen=True, slots=True)
class Arrival:
    """A workload created within the window, as the forecast counts it."""

    created: float
    priority: int
    account: str | None  # its fair-share account; None: no queue with fair share orders it
    work: float  # cpu-seconds: cores per pod x pods x predicted runtime (else its time limit)


@dataclass(frozen=True, slots=True)
class Forecast:
    """The load of recent arrivals, summed for one pass; ``load`` answers per waiting workload."""

    capacity: float  # cpu-seconds the cluster offered over the window
    priorities: tuple[int, ...]  # the arrivals' priorities, ascending
    above: tuple[float, ...]  # per priority: the work of all arrivals of a higher priority
    own: tuple[float, ...]  # per priority: the work of its arrivals
    # per priority: its accounts' fair-share factors ascending, and the work of the accounts from
    # each one on (suffix sums), for a bisection by score
    factors: tuple[tuple[float, ...], ...]
    from_factor: tuple[tuple[float, ...], ...]
    window: float = WINDOW
    # per priority: each account's (fair-share factor, work), to leave a workload's own account out
    accounts: tuple[Mapping[str, tuple[float, float]], ...] = ()

    @staticmethod
    def of(arrivals: Iterable[Arrival], *, now: float, capacity: float, factors: Mapping[str, float],
           window: float = WINDOW) -> Forecast:
        """``capacity``: the cluster's cpu (cores, the unit of ``Arrival.work``'s cpu-seconds);
        ``factors``: each account's fair-share factor now (an account missing has 1.0, as in
        ``queue.order``: nothing used yet)."""
        per: dict[int, dict[str | None, float]] = {}
        for a in arrivals:
            if a.created >= now - window and a.work > 0:  # one stamped ahead of our clock: arrived now
                accounts = per.setdefault(a.priority, {})
                accounts[a.account] = accounts.get(a.account, 0.0) + a.work
        priorities = tuple(sorted(per))
        above: list[float] = []
        total = 0.0
        for p in reversed(priorities):
            above.append(total)
            total += sum(per[p].values())
        fs: list[tuple[float, ...]] = []
        suffix: list[tuple[float, ...]] = []
        own: list[dict[str, tuple[float, float]]] = []
        for p in priorities:
            # work no fair share orders (no account) never ranks ahead within its priority
            own.append({acc: (factors.get(acc, 1.0), w) for acc, w in per[p].items() if acc is not None})
            ranked = sorted(own[-1].values())
            sums = [0.0] * (len(ranked) + 1)
            for i in range(len(ranked) - 1, -1, -1):
                sums[i] = sums[i + 1] + ranked[i][1]
            fs.append(tuple(f for f, _ in ranked))
            suffix.append(tuple(sums))
        return Forecast(max(capacity, 0.0) * window, priorities, tuple(reversed(above)),
                        tuple(sum(per[p].values()) for p in priorities), tuple(fs), tuple(suffix), window,
                        tuple(own))

    def load(self, priority: int, score: float | None = None, account: str | None = None) -> float:
        """The share of the cluster that arrived ranking ahead of a workload of ``priority`` with
        fair-share ``score`` (None: fair share does not order it, only higher priorities rank ahead)
        in ``account``, whose own later work never ranks ahead of it (its score is its account's
        factor plus its age: a workload placed as it arrives has the factor alone, and the
        factor computed again here may differ from it in the last bit)."""
        if self.capacity <= 0:
            return 0.0
        k = bisect.bisect_left(self.priorities, priority)
        if k < len(self.priorities) and self.priorities[k] == priority:
            work = self.above[k]
            if score is not None:
                work += self.from_factor[k][bisect.bisect_right(self.factors[k], score)]
                factor, mine = self.accounts[k].get(account, (0.0, 0.0)) if account is not None else (0.0, 0.0)
                if factor > score:  # counted above: its own account's
                    work -= mine
        elif k < len(self.priorities):  # none of its priority: those from the next one up
            work = self.above[k] + self.own[k]
        else:
            work = 0.0
        return work / self.capacity


def stretched(start: float, *, now: float, load: float, start_by: float | None = None) -> float:
    """``start`` with its wait stretched by ``1 / (1 - load)`` (``load`` at most ``MOST``), never
    after ``start_by``; a start that is now (or past) stays."""
    if start <= now or load <= 0:
        return start if start_by is None else min(start, start_by)
    t = now + (start - now) / (1.0 - min(load, MOST))
    return t if start_by is None else min(t, start_by)


def backfilled(estimates: Iterable[Estimate]) -> frozenset[str]:
    """The workloads (uids) placed to start before a workload placed ahead of them (``estimates`` in
    the order they were placed, as ``shadow_schedule`` returns them: priority, then the queue's
    order): each starts in room the work ranked ahead of it cannot use then, so the later arrivals
    that rank ahead, placed like that work, do not push it either; the others start in their turn,
    once all the work ahead has started, and are pushed by every arrival placed ahead of them."""
    out: set[str] = set()
    latest = -math.inf  # the latest start placed so far
    for e in estimates:
        if e.start is None:
            continue
        if e.start < latest:
            out.add(e.workload.uid)
        latest = max(latest, e.start)
    return frozenset(out)


def stretch_of(load: float) -> float:
    return 1.0 / (1.0 - min(max(load, 0.0), MOST))


def arrivals(snapshot: Snapshot, *, now: float, policy: QueuePolicy, predictor: Predictor | None,
             limit_of: Callable[[JobView | PodView], int | None], window: float = WINDOW) -> list[Arrival]:
    """The workloads the snapshot shows that were created in the last ``window``: each Job (its
    pods' requests from its template, else from a pod of it that is still there; as many pods as it
    runs at once, or has) and each bare pod; the work of each at its predicted runtime (its own
    ``expected-runtime``, else runtimes.py's prediction), else its time limit; one with neither is
    left out. Jobs and pods deleted (or being deleted) are not counted: a Job's
    ``ttlSecondsAfterFinished`` shorter than ``window`` makes the forecast low. Nor is work whose pods
    another scheduler binds (their ``schedulerName`` not in ``policy.kube_schedulers``)."""
    since = now - window
    fair = policy.fair_share
    ours = policy.kube_schedulers
    one_pod: dict[str, PodView] = {}
    pods_of: dict[str, int] = {}
    out: list[Arrival] = []
    for pod in snapshot.pods.values():
        if pod.sched is None or pod.deleting:
            continue
        if pod.owner is not None:  # a Job's counts with its Job; one of something else is no batch work
            job = job_of(snapshot, pod)
            if job is not None:
                one_pod.setdefault(job.ref.uid, pod)
                pods_of[job.ref.uid] = pods_of.get(job.ref.uid, 0) + 1
            continue
        if pod.created is not None and pod.created >= since and pod.sched.scheduler in ours:
            seconds = _runtime(pod, predictor, limit_of(pod))
            if seconds is not None:
                out.append(Arrival(pod.created, pod.sched.priority, fair.account_of(pod.ref.namespace),
                                   pod.sched.cpu / 1000 * seconds))
    for job in snapshot.jobs.values():
        if job.created is None or job.created < since or job.deleting:
            continue
        made = one_pod.get(job.ref.uid)
        sched = job.template if job.template is not None else made.sched if made is not None else None
        seconds = _runtime(job, predictor, limit_of(job))
        if sched is None or seconds is None or sched.scheduler not in ours:
            continue
        n = max(job.wanted, pods_of.get(job.ref.uid, 0), 1)
        out.append(Arrival(job.created, policy.class_values.get(job.priority_class, sched.priority),
                           fair.account_of(job.ref.namespace), sched.cpu / 1000 * n * seconds))
    return out


def _runtime(obj: JobView | PodView, predictor: Predictor | None, limit: int | None) -> float | None:
    """How long ``obj`` is expected to run: its own ``expected-runtime``, else the prediction, else its
    limit (never past the limit)."""
    own = obj.expected_runtime
    if own is None and predictor is not None:
        predicted = predictor.predict(job_key(obj) if isinstance(obj, JobView) else pod_key(obj), limit)
    else:
        predicted = float(own) if own is not None else None
    if predicted is None:
        return float(limit) if limit is not None else None
    return min(predicted, float(limit)) if limit is not None else predicted


def capacity(snapshot: Snapshot) -> float:
    """The cpu cores of the ready, schedulable nodes."""
    return sum(n.cpu for n in (snapshot.nodes or {}).values()
               if n.ready in (None, "True") and not n.unschedulable) / 1000


def forecast(estimates: Sequence[Estimate], snapshot: Snapshot, *, now: float, policy: QueuePolicy,
             usage: Mapping[str, float], scores: Mapping[str, tuple[str, float]],
             predictor: Predictor | None, limit_of: Callable[[JobView | PodView], int | None],
             window: float = WINDOW) -> list[Estimate]:
    """``estimates`` (in the order they were placed, as ``shadow_schedule`` returns them) with each
    wait stretched by the load of recent arrivals ranking ahead (``stretched``, without the
    start-by: the caller caps), the reason saying by how much; one ``backfilled`` only for the
    arrivals of a higher priority.
    ``scores``: the queue's waiting workloads (uid: account, score as queue.order ranks them);
    ``usage``: the accounts' decayed usage, whose fair-share factors rank a newcomer."""
    recent = arrivals(snapshot, now=now, policy=policy, predictor=predictor, limit_of=limit_of, window=window)
    if not recent:
        return list(estimates)
    accounts = {a.account for a in recent if a.account is not None} | {a for a, _ in scores.values()}
    fc = Forecast.of(recent, now=now, capacity=capacity(snapshot),
                     factors=factors(usage, accounts, policy.fair_share), window=window)
    out: list[Estimate] = []
    holes = backfilled(estimates)
    for e in estimates:
        if e.start is None or e.start <= now:
            out.append(e)
            continue
        ranked = scores.get(e.workload.uid)
        if ranked is not None and e.workload.uid not in holes:
            load = fc.load(e.priority, ranked[1], ranked[0])
        else:  # backfilled: only the higher priorities' arrivals take its room
            load = fc.load(e.priority)
        if load <= 0:
            out.append(e)
            continue
        out.append(dataclasses.replace(e, start=stretched(e.start, now=now, load=load), reason=(
            f"{e.reason}; later by x{stretch_of(load):.2f} for the work that ranks ahead of it and arrives "
            f"while it waits ({load:.0%} of the cluster's cpu arrived so in the last {window / 3600:g} h)")))
    return out
