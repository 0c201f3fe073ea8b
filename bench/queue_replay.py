"""Queue replay: generated days of batch work, kube-scheduler alone against batchgate's queue.

    python bench/queue_replay.py                       # seeds 1-5, 24 h of arrivals
    python bench/queue_replay.py --seeds 1-2 --hours 12 --json
    python bench/queue_replay.py --model repeat --load 0.8    # bench_shadow.py's workload models

The same arrivals are replayed on the same cluster by two systems:

  kube     kube-scheduler alone: at every arrival or completion, the pending pods in priority then
           creation order, each bound to the first node with room (first fit; ``--kube-bind spread``:
           the emptiest node, its default LeastAllocated scoring). A gang's pods start
           one by one as room appears, and the gang computes from its last pod's start (its first
           pods hold their cores idle until then, as MPI ranks wait for their peers); the pods of a
           workload that is not a gang each compute from their own start.
  queue    batchgate's queue, by the product's own code: at every arrival or completion,
           ``queue.order()`` ranks the waiting workloads (priority, then the ``usage.factors``
           fair-share factor over the decayed usage plus the age factor), ``queue.as_queued`` and
           ``shadow.shadow_schedule`` place them in that order, each reserving all its pods at once
           at its earliest start for its time limit, around what runs (to its time limit) and the
           reservations of those ahead, and ``queue.to_release`` releases those whose reservation
           starts now, whole (conservative backfill: nothing starts that delays a reservation ahead
           of it); their pods are bound on the nodes the placement chose (``--bind planned``: the
           product narrows every release to them), or as kube-scheduler would bind them unnarrowed
           (``--bind spread``: the emptiest node first, its default LeastAllocated scoring;
           ``first-fit``: the first node with room, what this replay did before).
           ``--depth N`` places only the first N per pass (as Slurm's bf_max_job_test; the product
           places all). ``--placement simple`` uses the earlier re-implementation of the placement
           instead (cpu only, first fit; slow without a depth), ``greedy`` none
           (whatever fits now starts, in queue order: no reservations, no promises), to measure what
           each costs. Usage is accrued here: each account's allocated core-seconds, decayed with
           the half-life (``usage.Usage.at``), as the controller's ``accrue`` would with cpu weight
           1 and no memory weight, but continuously (the controller samples every minute).
  easy     the same, but the queue has backfill: easy (``shadow_schedule(easy=...)``): only the head
           of the queue (the first workload that cannot start now) reserves; the others start if
           they fit now without delaying the head's reservation; only the head gets a start-by, and
           keeps it: a workload promised once keeps its reservation and its place ahead of the
           unpromised (``queue.promised_ahead``) until it starts.
  keep     the queue, but a promise holds against later work of the same priority: workloads with
           a start-by are placed first (in the order of their start-bys), then the rest in queue
           order (what issue 24's wording asks; fair share then orders only the promises to come).
  yield    the queue, but promised work is placed first (in the order of its promises), except a
           workload ranked ahead of it that would start later so (to the limit) than in queue
           order: what a smarter placement keeps without making higher-ranked work wait (a bench
           counterfactual, three placements a pass).
  deadline the queue as the product runs it now: a promise is a deadline, not a place in line. A
           start-by never moves earlier (``--margin-h H``: only to H hours after the reservation);
           work is placed in fair-share order, and a promise placed past its start-by is promoted
           ahead of the unpromised work of its priority and the pass placed again
           (``queue.place``; at most ``--rounds`` times, the last with every promise first, as
           ``keep``). Under ``queue`` each promise first placed
           past its start-by records why (``_why_at_risk``); ``replay_measures.broken`` counts the
           promises not kept by cause.
  easy-deadline  a queue with ``backfill: easy`` as the product runs it by default (``promise: deadline``):
           ``easy``'s placement (only the head reserves and is promised) with ``deadline``'s promises (a
           start-by never moves earlier; a head placed past it is promoted and the pass placed again);
           ``easy`` is such a queue with ``promise: fair-share``.
  start-by ``deadline`` with ``backfill: start-by``: conservative backfill against the published
           start-bys (``queue.into_slack``): after the pass, a workload that does not start now is
           placed just before the first that does not, and starts now if every promised workload
           still starts by its start-by and every other no later than placed (only those whose pods
           fit the room free now, as ``planner.may_fit_now``; at most ``queue.SLACK_TRIES`` tries a
           pass, a shape that failed not tried again). The deadline
           systems need the shadow placement.

The model (each number a flag where it matters):

- Cluster: --nodes nodes of --node-cpu cores (default 20 x 32); cpu is the only resource.
- Accounts, one share each: ``heavy`` submits --heavy-load of the cluster's cores on average
  (and a backlog of --heavy-backlog workloads at time 0: early and much); --light accounts
  ``light-1..`` submit --light-load each. Poisson arrivals for --hours, whose rate follows the
  day (0.4x the mean at midnight, 1.6x at noon); then no more arrivals and both systems drain.
- Workloads: 1 pod (60 %) or 2-8 pods (40 %), of which --gang-share are gangs (all pods at
  once); pods of 1, 2, 4, 8 or 16 cores; time limit 1, 2, 4, 8 or 12 h; runtime lognormal
  (median 40 % of the limit, sigma 0.6), clipped to 2 %..100 % of the limit. One priority.
  Under the queue every workload is released whole (a Job's pods at once, as queue.py does).

Workload models (--model): ``accounts`` is the model above (fair share between one heavy and a
few light accounts); ``repeat`` and ``iid`` are bench_shadow.py's (30 users with weights 1/rank, one-pod
jobs of 1-32 cores, a third of them high priority; ``repeat``: users run their programs again,
runtimes scattered around the program's share of the limit; ``iid``: each runtime 50-100 % of the
limit afresh), offering --load of the cluster (bench_shadow.py's 0.6 and 0.8), on 20 x 64 cores.

Figures, per system:

- share: the window is every moment (arrival window and drain alike) at which each account has at
  least one workload waiting (not all of its pods started); per account, its share of the
  core-hours allocated (bound, idle or not) in that window, against its entitled share (its shares
  over all shares). deviation = share / entitled - 1, relative to the entitled share (+10 % of a
  20 % share is 22 %); goal: every account within +-10 %.
  carried_in: the part of the window's core-hours held by pods that started before the window
  (when some account had nothing waiting); contended_deviation: the deviation counting only the
  pods started inside the window (what the order decided while everyone waited).
- utilisation: allocated core-hours over capacity during the arrival window, each pod from its
  own start to its own end (replay_measures.utilisation; goal: the queue no more than 2 points
  below kube alone); useful utilisation: the same without the cores a gang's pods hold idle while
  they wait for the rest of the gang (kube only: the queue starts a gang whole). Idle room, of the
  capacity over the window: cores free while some workload waited (``free_while_waiting``), and
  of those, free while a waiting pod fit on some node (``room_while_waiting``: room kube alone
  would have bound; the queue leaves it for a reservation or a whole release).

Offline switches, to measure what each part of the queue costs (one at a time; the product has
none of them): ``--reserve runtime`` places running and waiting work for its actual runtime, not
its time limit (an oracle); ``--order fifo`` ranks by priority then arrival, not fair share;
``--split`` queues a workload that is not a gang pod by pod (the product releases a Job whole);
``--bind first-fit|spread`` leaves releases unnarrowed; ``--systems easy`` and ``--placement
greedy`` are EASY backfill and no reservations. The replay plans at every arrival and completion,
as the controller does (a pass on every change, at most one a second).
- wait: from arrival to the start of the workload's last pod; mean, p95, and the longest wait
  of a gang.
- promise (queue only, issue 24): a workload's start-by is its reservation's start at the
  first pass that saw it (those released at their first pass get none: they started on
  arrival). kept: the share of workloads that started by their start-by (+60 s, the
  START_BY_SLACK), among those given one and among all (a start within 60 s of arrival counts as
  kept; a workload that waited without a promise, e.g. beyond the depth, does not);
  tightness: the median of (start-by - arrival) / actual wait over those given one.
- issue 24's measures (bench/replay_measures.py, every definition there): promises kept among the
  clean (no later arrival ranked ahead while waiting) and among all, tightness beside the
  to-the-limit start (the first placement: every job to its time limit), the expected start's
  calibration and error (predicted runtimes: the median, the geometric mean of the last five runs
  of the same program that did not fail, else of the account, clamped to the limit and corrected
  once outlived, as runtimes.py's ``likely``; the forecast's work from the mean of the last two;
  under ``--placement shadow`` the planner's own estimate pass, ``shadow_schedule`` with
  ``runtimes.Predictor`` over the replay's runs; its wait stretched by forecast.py's 1 / (1 - rho)
  for the arrivals of the last --forecast-h hours that rank ahead, built from the replay's
  arrivals as the planner builds it from the cluster's; a backfilled one, ``forecast.backfilled``,
  for higher priorities only),
  utilisation, mean bounded slowdown (10 s), the longest wait of a gang.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_measures import Record, measures

from webhook.bundle import FairShare
from webhook.reconciler.forecast import WINDOW, Arrival, Forecast, backfilled, stretched
from webhook.reconciler.model import NodeView, PodSched, PodView, Ref, Snapshot
from webhook.reconciler.queue import (
    SLACK_TRIES,
    START_BY_SLACK,
    Waiting,
    as_queued,
    into_slack,
    order,
    promised_ahead,
    promised_first,
    to_release,
)
from webhook.reconciler.queue import place as place_keeping
from webhook.reconciler.runtimes import (
    KEEP,
    MEAN_OF,
    History,
    Predictor,
    Run,
    corrected,
    key_of,
    remember,
)
from webhook.reconciler.settings import QueuePolicy
from webhook.reconciler.shadow import shadow_schedule
from webhook.reconciler.usage import Usage, factors

HOUR = 3600.0
EPOCH = 1_800_000_000.0  # the replay's time 0, as the product's clock (its code reads 0.0 as "no time")
PLACEMENTS = ("shadow", "simple", "greedy")
BINDS = ("planned", "spread", "first-fit")
LIMITS_H = (1, 2, 4, 8, 12)
CORES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Params:
    nodes: int = 20
    node_cpu: int = 32
    hours: float = 24.0
    heavy_load: float = 0.8
    heavy_backlog: int = 40
    light: int = 4
    light_load: float = 0.22
    gang_share: float = 0.5
    depth: int = 0  # at most this many workloads placed per pass (as Slurm's bf_max_job_test); 0: all
    placement: str = "shadow"  # the queue's: shadow (the product's), simple, greedy (no reservations)
    forecast: float = WINDOW  # the expected start's forecast of arrivals ranking ahead (forecast.py); 0: none
    bind: str = "planned"  # shadow placement: where released pods are bound (BINDS)
    # offline switches (shadow placement), one at a time, to measure what each part of the queue costs:
    reserve: str = "limit"  # what running and waiting work is placed for: "limit", or "runtime" (an oracle)
    order: str = "fair"  # the queue's order: "fair" (queue.order), or "fifo" (priority, then arrival)
    split: bool = False  # a workload that is not a gang queued pod by pod (each pod a workload of its own)
    kube_bind: str = "first-fit"  # kube alone: each pod on the first node with room, or "spread" (LeastAllocated)
    # deadline: a start-by moves earlier only to within this many seconds of the reservation (< 0: never earlier)
    margin: float = -1.0
    rounds: int = 3  # deadline: a pass places again at most this often (queue.place; the last time, all promised first)
    slack_tries: int = SLACK_TRIES  # start-by: a pass places again at most this often for work to start now


@dataclass
class Work:
    wid: int
    account: str
    arrival: float
    pods: int
    cores: int
    limit: float
    runtime: float
    gang: bool
    starts: list[float] = field(default_factory=list)  # per pod, in the order they started
    nodes: list[int] = field(default_factory=list)  # per pod
    ends: list[float] = field(default_factory=list)  # per pod (kube: a gang's together, other pods each on its own)
    end: float | None = None  # when its last pod ends
    start_by: float | None = None  # queue: first reservation start (None: started at first pass)
    seen: bool = False
    prio: int = 0
    program: str = ""  # what runtimes are predicted by (with the account)
    to_limit: float | None = None  # the start at the first placement (every job to its time limit)
    expected: float | None = None  # the start at the first placement with predicted runtimes
    promised_at: float | None = None  # when start_by was given
    current: float | None = None  # its start-by as the reconciler rewrites it (moved by more than the slack)
    overtaken: bool = False  # a workload that arrived after its promise was ranked ahead of it
    by_priority: bool = False  # of those, one of a higher priority
    at_risk: str = ""  # the first pass that placed it past its first start-by: why (``_why_at_risk``)
    placed_at: float | None = None  # when its expected start was first placed
    raw_expected: float | None = None  # that placement's start, before the forecast's stretch
    load_ahead: float = 0.0  # the forecast's load of recent arrivals ranking ahead, then (counted as stretched)
    backfilled: bool = False  # that placement started it before work ranked ahead of it
    fails: bool = False  # it fails before its limit: no run to learn from (runtimes.finished_runs leaves it out)

    @property
    def started(self) -> float | None:
        return self.starts[-1] if len(self.starts) == self.pods else None


def generate(seed: int, p: Params) -> list[Work]:
    rng = random.Random(seed)
    mean_limit = sum(LIMITS_H) / len(LIMITS_H) * HOUR
    median_frac = 0.4
    mean_runtime = mean_limit * median_frac * math.exp(0.6 ** 2 / 2)
    mean_pods = 0.6 * 1 + 0.4 * 5
    mean_cores = sum(CORES) / len(CORES)
    core_s = mean_runtime * mean_pods * mean_cores  # per workload, roughly (the clip trims a little)
    capacity = p.nodes * p.node_cpu
    out: list[Work] = []

    def make(account: str, t: float) -> Work:
        pods = 1 if rng.random() < 0.6 else rng.randint(2, 8)
        cores = rng.choice(CORES)
        limit = rng.choice(LIMITS_H) * HOUR
        runtime = min(max(limit * median_frac * math.exp(rng.gauss(0, 0.6)), 0.02 * limit), limit)
        return Work(0, account, t, pods, cores, limit, runtime, pods > 1 and rng.random() < p.gang_share)

    accounts = [("heavy", p.heavy_load)] + [(f"light-{i + 1}", p.light_load) for i in range(p.light)]
    for _ in range(p.heavy_backlog):
        out.append(make("heavy", 0.0))
    end = p.hours * HOUR
    for account, load in accounts:
        rate = load * capacity / core_s  # workloads per second, mean
        t = 0.0
        while True:  # thinning: rate(t) = rate * (1 - 0.6 cos(2 pi t / day)), at most 1.6 rate
            t += rng.expovariate(rate * 1.6)
            if t >= end:
                break
            if rng.random() * 1.6 <= 1 - 0.6 * math.cos(2 * math.pi * t / 86400):
                out.append(make(account, t))
    out.sort(key=lambda w: (w.arrival, w.account))
    for i, w in enumerate(out):
        w.wid = i
    return out


def generate_model(seed: int, model: str, load: float, p: Params) -> list[Work]:
    """bench_shadow.py's ``repeat`` or ``iid`` day (one-pod jobs, a third high priority), as Works:
    each user is an account."""
    import bench_shadow

    jobs = bench_shadow.workload(random.Random(seed), model=model, hours=p.hours, load=load,
                                 capacity=p.nodes * p.node_cpu, sigma=bench_shadow.SIGMA)
    return [Work(j.id, j.user, j.arrive - bench_shadow.NOW, 1, j.cpu, j.limit, j.runtime, False, prio=j.prio,
                 program=j.program, fails=not j.ends_well and j.runtime < j.limit) for j in jobs]


class Cluster:
    def __init__(self, p: Params) -> None:
        self.free = [p.node_cpu] * p.nodes
        self.cap = p.node_cpu
        # node -> [(end by the time limit, cores)] of what runs there
        self.running: list[list[tuple[float, int]]] = [[] for _ in range(p.nodes)]

    def bind(self, n: int, cores: int, limit_end: float) -> None:
        assert self.free[n] >= cores
        self.free[n] -= cores
        self.running[n].append((limit_end, cores))

    def unbind(self, n: int, cores: int, limit_end: float) -> None:
        self.running[n].remove((limit_end, cores))
        self.free[n] += cores
        assert self.free[n] <= self.cap


class Result:
    def __init__(self, name: str, works: list[Work], accounts: list[str]) -> None:
        self.name = name
        self.works = works
        self.accounts = accounts
        self.used: dict[str, float] = {a: 0.0 for a in accounts}  # core-s while every account waited
        # of those, the core-s of pods started while every account waited (not carried into the window)
        self.used_contended: dict[str, float] = {a: 0.0 for a in accounts}
        self.all_waiting = 0.0  # seconds
        self.alloc_window = 0.0  # core-s within the arrival window
        self.idle_window = 0.0  # of those, held idle by a gang's pods waiting for the rest of it (kube)
        self.free_waiting = 0.0  # core-s free within the arrival window while some workload waited
        self.room_waiting = 0.0  # of those, while a pod of a waiting workload fit on a node (kube would bind it)
        self.used_window: dict[str, float] = {a: 0.0 for a in accounts}  # core-s per account, same window
        self.max_over = 0  # most cores ever bound on one node beyond its capacity (must stay 0)
        self.partial_gang_starts = 0  # gangs some of whose pods started at another time than the rest
        self.passes = 0  # queue passes that placed (those skipped as nothing could start are not counted)
        self.bind_misses = 0  # shadow: released by the placement, but its pods did not all fit where bound
        self.off_plan = 0  # shadow: released workloads bound (in part) on other nodes than the placement chose
        self.rounds: list[int] = []  # deadline: placements per pass


def _accrue(u: Usage, running: dict[str, float], now: float, half_life: int) -> Usage:
    billing = u.at(now, half_life) if u.sampled_at is not None else {}
    dt = now - u.sampled_at if u.sampled_at is not None else 0.0
    for a, cores in running.items():
        billing[a] = billing.get(a, 0.0) + cores * dt
    return Usage(now, billing)


def _place(cluster: Cluster, reserved: list[list[tuple[float, float, int]]], now: float,
           w: Work, length: float | None = None) -> tuple[float, list[int]] | None:
    """Earliest start at or after ``now`` when all of ``w``'s pods fit for its time limit (or
    ``length``), first fit on nodes, around what runs (to its limit) and ``reserved`` (per node:
    start, end, cores)."""
    times = {now}
    for n in range(len(cluster.free)):
        times.update(e for e, _ in cluster.running[n] if e > now)
        times.update(e for _, e, _ in reserved[n] if e > now)
    for t in sorted(times):
        t_end = t + (w.limit if length is None else length)
        chosen: list[int] = []
        for n in range(len(cluster.free)):
            # the most cores in use on n during [t, t_end): running (to its limit) then reservations
            events: list[tuple[float, int]] = []
            base = 0
            for e, c in cluster.running[n]:
                if e > t:
                    base += c
            for s, e, c in reserved[n]:
                if e > t and s < t_end:
                    if s <= t:
                        base += c
                    else:
                        events.append((s, c))
                        events.append((e, -c))
            peak = level = base
            for _, c in sorted(events, key=lambda x: (x[0], x[1])):
                level += c
                peak = max(peak, level)
            room = cluster.cap - peak
            while room >= w.cores and len(chosen) < w.pods:
                chosen.append(n)
                room -= w.cores
            if len(chosen) == w.pods:
                return t, chosen
    return None  # never fits (bigger than the cluster)


def _first_fit(cluster: Cluster, w: Work, among: Sequence[int] | None = None) -> list[int] | None:
    """Nodes for all of ``w``'s pods now, first fit (``among``: only those nodes)."""
    free = cluster.free[:]
    chosen: list[int] = []
    for n in range(len(free)) if among is None else among:
        while free[n] >= w.cores and len(chosen) < w.pods:
            chosen.append(n)
            free[n] -= w.cores
        if len(chosen) == w.pods:
            return chosen
    return None


def _spread(cluster: Cluster, w: Work) -> list[int] | None:
    """Nodes for all of ``w``'s pods now as kube-scheduler's default scoring binds them one by one
    (NodeResourcesFit LeastAllocated: the node with the most room left; the first among equals)."""
    free = cluster.free[:]
    chosen: list[int] = []
    for _ in range(w.pods):
        n = max(range(len(free)), key=lambda i: (free[i], -i))
        if free[n] < w.cores:
            return None
        chosen.append(n)
        free[n] -= w.cores
    return chosen


def _bind(cluster: Cluster, w: Work, how: str, planned: Sequence[str]) -> list[int] | None:
    """Where a released workload's pods are bound (``Params.bind``): ``planned``, kube-scheduler
    among the nodes its release was narrowed to (first fit there: any order fits, its pods are alike);
    ``spread`` and ``first-fit``, anywhere (not narrowed)."""
    if how == "planned":
        return _first_fit(cluster, w, sorted(int(n[1:]) for n in planned))
    return _spread(cluster, w) if how == "spread" else _first_fit(cluster, w)


class _Views:
    """The running pods and the nodes as the product's shadow schedule reads them (times from EPOCH)."""

    def __init__(self, p: Params) -> None:
        self.reserve = p.reserve
        self.nodes = {f"n{i}": NodeView(f"n{i}", "True", cpu=p.node_cpu * 1000) for i in range(p.nodes)}
        self.pods: dict[tuple[str, str], PodView] = {}

    def bind(self, w: Work, i: int) -> None:
        name = f"w{w.wid}-{i}"
        self.pods[(w.account, name)] = PodView(
            ref=Ref("v1", "Pod", w.account, name, name), resource_version="", owner=None, phase="Running",
            node=f"n{w.nodes[i]}", deleting=False, started=EPOCH + w.starts[i], failure=None, failed_at=None,
            interrupted=None, group=None, group_size=None, pod_group_name=None, queue="batch", time_limit=None,
            limit=_hold(w, self.reserve), started_at=None, deadline=None, warned_for=None, started_at_t=None,
            deadline_t=None, warned_t=None, sched=PodSched(w.cores * 1000, 0, 0, EPOCH + w.arrival, (), (), ()),
            program=_program(w))

    def unbind(self, w: Work, i: int) -> None:
        del self.pods[(w.account, f"w{w.wid}-{i}")]

    def snapshot(self) -> Snapshot:
        return Snapshot(pods=self.pods, jobs={}, nodes=self.nodes)


@dataclass
class _Run:
    """What a pass changes besides the cluster."""

    events: list[tuple[float, int, int, int]]  # (time, kind 0 end / 1 arrival, wid, pod index or -1: all pods)
    running_cores: dict[str, float]
    views: _Views | None
    all_waiting: bool = False  # at this pass, every account has work waiting
    contended: set[tuple[int, int]] = field(default_factory=set)  # (wid, pod) started while every account waited
    contended_cores: dict[str, float] = field(default_factory=dict)
    live: dict[int, Work] = field(default_factory=dict)  # running (for predicted ends)
    runs: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # the last KEEP runtimes, per (account, program) and (account, "")
    arrived: list[Work] = field(default_factory=list)  # every arrival so far, in order
    history: History = field(default_factory=dict)  # the same runs as runtimes.py keeps them (the shadow estimate's)

    def started(self, w: Work, i: int) -> None:
        self.running_cores[w.account] += w.cores
        if self.all_waiting:
            self.contended.add((w.wid, i))
            self.contended_cores[w.account] = self.contended_cores.get(w.account, 0.0) + w.cores

    def ended(self, w: Work, i: int) -> None:
        self.running_cores[w.account] -= w.cores
        if (w.wid, i) in self.contended:
            self.contended.discard((w.wid, i))
            self.contended_cores[w.account] -= w.cores


def simulate(works_in: Sequence[Work], p: Params, system: str, fair: FairShare | None = None) -> Result:
    fair = fair or FairShare()
    works = [Work(w.wid, w.account, w.arrival, w.pods, w.cores, w.limit, w.runtime, w.gang, prio=w.prio,
                  program=w.program, fails=w.fails) for w in works_in]
    if p.split and system != "kube":  # a workload that is not a gang queued pod by pod
        works = [Work(i, w.account, w.arrival, 1, w.cores, w.limit, w.runtime, False, prio=w.prio, program=w.program,
                      fails=w.fails)
                 if not w.gang else replace(w, wid=i)
                 for i, w in enumerate(x for w in works for x in ([w] if w.gang else [w] * w.pods))]
    accounts = sorted({w.account for w in works})
    res = Result(system, works, accounts)
    cluster = Cluster(p)
    window = p.hours * HOUR
    run = _Run([], {a: 0.0 for a in accounts}, _Views(p) if system != "kube" and p.placement == "shadow" else None)
    for w in sorted(works, key=lambda w: (w.arrival, w.wid)):
        heapq.heappush(run.events, (w.arrival, 1, w.wid, -1))
    pending: list[Work] = []  # waiting (some pods not started)
    running_cores = run.running_cores
    idle_cores = 0.0  # held by the pods of gangs not all started (kube)
    free_now = room_now = 0  # after the last pass: free cores while work waits; the same while a waiting pod fits
    usage = Usage()
    easy = system in ("easy", "easy-deadline")
    policy = QueuePolicy(gated=("batch",), fair_share=fair, easy=frozenset({"batch"}) if easy else frozenset())
    now = 0.0
    while run.events:
        t = run.events[0][0]
        # integrate over (now, t]
        dt = t - now
        if dt > 0:
            waiting_accounts = {w.account for w in pending}
            if len(waiting_accounts) == len(accounts):
                res.all_waiting += dt
                for a in accounts:
                    res.used[a] += running_cores[a] * dt
                    res.used_contended[a] += run.contended_cores.get(a, 0.0) * dt
            lo, hi = min(now, window), min(t, window)
            if hi > lo:
                res.alloc_window += sum(running_cores.values()) * (hi - lo)
                res.idle_window += idle_cores * (hi - lo)
                res.free_waiting += free_now * (hi - lo)
                res.room_waiting += room_now * (hi - lo)
                for a in accounts:
                    res.used_window[a] += running_cores[a] * (hi - lo)
        if system != "kube":
            usage = _accrue(usage, running_cores, t, fair.half_life)
        now = t
        while run.events and run.events[0][0] == now:
            _, kind, wid, pod = heapq.heappop(run.events)
            w = works[wid]
            if kind == 1:
                pending.append(w)
                run.arrived.append(w)
                continue
            for i in range(w.pods) if pod < 0 else (pod,):
                cluster.unbind(w.nodes[i], w.cores, w.starts[i] + w.limit if system != "kube" else math.inf)
                run.ended(w, i)
                if run.views is not None:
                    run.views.unbind(w, i)
            if pod < 0:  # the whole workload ended
                run.live.pop(w.wid, None)
            if pod < 0 and not w.fails:  # a run to learn from (failed work is none: runtimes.finished_runs)
                for key in ((w.account, _program(w)), (w.account, "")):
                    run.runs[key] = [*run.runs.get(key, [])[1 - KEEP:], w.runtime]
                if run.views is not None:
                    run.history = remember(run.history, [Run(key_of(w.account, "batch", _program(w)), str(w.wid),
                                                             EPOCH + w.starts[0], EPOCH + w.end)])
        run.all_waiting = len({w.account for w in pending}) == len(accounts)
        if system == "kube":
            idle_cores = _kube_pass(cluster, pending, now, run, spread=p.kube_bind == "spread")
        elif p.placement == "shadow":
            _shadow_pass(cluster, pending, now, run, usage, policy, p, res, keep=system == "keep",
                         yielding=system == "yield", deadline=system in DEADLINE, slack=system == "start-by")
        else:
            _queue_pass(cluster, pending, now, run, usage, fair, p, res, easy=easy, keep=system == "keep")
        res.max_over = max(res.max_over, max(-f for f in cluster.free))
        free_now = sum(cluster.free) if pending else 0
        room_now = free_now if pending and min(w.cores for w in pending) <= max(cluster.free) else 0
    for w in works:
        assert w.end is not None, f"workload {w.wid} never ran"
        if w.gang and len(set(w.starts)) > 1:
            res.partial_gang_starts += 1
    return res


def _kube_pass(cluster: Cluster, pending: list[Work], now: float, run: _Run, *, spread: bool = False) -> float:
    """kube-scheduler alone; returns the cores now held idle by gangs' pods waiting for the rest.
    ``spread``: each pod on the node with the most room (its default LeastAllocated scoring; the
    first among equals), else the first node with room."""
    smallest = min((w.cores for w in pending), default=0)
    for w in sorted(pending, key=lambda w: (-w.prio, w.arrival, w.wid)):  # priority, then creation order
        if max(cluster.free) < smallest:
            break
        while len(w.starts) < w.pods:
            if spread:
                n = max(range(len(cluster.free)), key=lambda i: (cluster.free[i], -i))
                n = n if cluster.free[n] >= w.cores else None
            else:
                n = next((i for i, f in enumerate(cluster.free) if f >= w.cores), None)
            if n is None:
                break
            cluster.bind(n, w.cores, math.inf)
            w.starts.append(now)
            w.nodes.append(n)
            run.started(w, len(w.starts) - 1)
            if not w.gang:  # a pod of its own: computes from its own start
                w.ends.append(now + w.runtime)
                heapq.heappush(run.events, (now + w.runtime, 0, w.wid, len(w.starts) - 1))
        if w.started is not None:
            if w.gang:  # computes from its last pod's start (its earlier pods held their cores idle)
                w.ends = [now + w.runtime] * w.pods
                heapq.heappush(run.events, (now + w.runtime, 0, w.wid, -1))
            w.end = max(w.ends)
    pending[:] = [w for w in pending if w.started is None]
    return float(sum(len(w.starts) * w.cores for w in pending if w.gang))


def _program(w: Work) -> str:
    return w.program or f"limit {w.limit:g}"  # the accounts model has no programs: its limit stands for one


def _predicted(w: Work, runs: dict[tuple[str, str], list[float]]) -> float:
    """runtimes.Predictor.predict's rule: the mean of the last two runs of the same program, else of
    the account's, clamped to the limit; without runs, the limit."""
    seen = (runs.get((w.account, _program(w))) or runs.get((w.account, "")) or [])[-MEAN_OF:]
    return min(sum(seen) / len(seen), w.limit) if seen else w.limit


def _likely(w: Work, runs: dict[tuple[str, str], list[float]]) -> float:
    """runtimes.Predictor.likely's: the geometric mean of the last five runs (the median), clamped to the
    limit; without runs, the limit."""
    seen = runs.get((w.account, _program(w))) or runs.get((w.account, ""))
    return min(math.exp(sum(math.log(max(x, 1.0)) for x in seen) / len(seen)), w.limit) if seen else w.limit


def _forecast(run: _Run, now: float, usage: Usage, fair: FairShare, pending: list[Work], p: Params) -> Forecast:
    """forecast.Forecast over the arrivals of the last ``p.forecast`` seconds, as the planner builds
    it from the workloads the cluster shows (``forecast.arrivals``): cores x pods x predicted runtime,
    the fair-share factors now."""
    lo = bisect.bisect_left(run.arrived, now - p.forecast, key=lambda w: w.arrival)
    recent = run.arrived[lo:]
    billing = usage.at(now, fair.half_life) if usage.sampled_at is not None else {}
    f = factors(billing, {w.account for w in pending} | {w.account for w in recent}, fair)
    return Forecast.of([Arrival(w.arrival, w.prio, w.account, w.cores * w.pods * _predicted(w, run.runs))
                        for w in recent], now=now, capacity=p.nodes * p.node_cpu, factors=f, window=p.forecast)


def _expected(cluster: Cluster, ranked: list[Work], now: float, live: dict[int, Work],
              runs: dict[tuple[str, str], list[float]], forecast: Forecast | None = None,
              scores: dict[int, float] | None = None) -> None:
    """The expected start of each workload not yet seen: the placement in queue order with predicted
    runtimes (a running job that outlived its prediction: ``runtimes.corrected``), as the reconciler's
    second shadow schedule (estimate=True) does; its wait stretched by ``forecast`` (the load of
    recent arrivals that rank ahead of it: its priority, its fair-share ``scores``), as the planner
    does."""
    view = Cluster.__new__(Cluster)
    view.free, view.cap = cluster.free, cluster.cap
    view.running = [[] for _ in cluster.free]
    for r in live.values():
        start = r.starts[0]
        end = start + corrected(_likely(r, runs), now - start, r.limit)
        for n in r.nodes:
            view.running[n].append((max(end, now), r.cores))
    reserved: list[list[tuple[float, float, int]]] = [[] for _ in cluster.free]
    last = max((i for i, w in enumerate(ranked) if not w.seen), default=-1)
    latest = -math.inf  # the latest start placed so far: one placed before it is backfilled (forecast.backfilled)
    for w in ranked[:last + 1]:
        length = _likely(w, runs)
        placed = _place(view, reserved, now, w, length)
        if placed is None:
            continue
        t, nodes = placed
        if not w.seen:
            w.placed_at, w.raw_expected, w.backfilled = now, t, t < latest
            w.load_ahead = 0.0 if forecast is None else forecast.load(w.prio) if w.backfilled else \
                forecast.load(w.prio, (scores or {}).get(w.wid), w.account)
            w.expected = stretched(t, now=now, load=w.load_ahead)
        latest = max(latest, t)
        for n in nodes:
            reserved[n].append((t, t + length, w.cores))


def _expected_shadow(run: _Run, ranked_works: list[Work], placed: list[Waiting], now: float, policy: QueuePolicy,
                     forecast: Forecast | None, scores: dict[int, float]) -> None:
    """The product's estimate pass (planner.py): ``shadow_schedule`` in queue order with the runtimes
    ``runtimes.Predictor`` predicts from the runs so far (each waiting workload predicted by its
    program, as the planner predicts a Job by its images), its wait stretched by ``forecast``; the
    expected start of each workload not yet seen."""
    assert run.views is not None
    queued = [replace(q, pods=(_pod_of(w),)) for q, w in zip(as_queued(placed, policy), ranked_works, strict=True)]
    estimates = shadow_schedule(run.views.snapshot(), EPOCH + now, (), queued=queued,
                                runtimes=Predictor.of(run.history))
    by_id = {w.wid: w for w in ranked_works}
    holes = backfilled(estimates)
    for e in estimates:
        w = by_id[int(e.workload.uid)]
        if w.seen or e.start is None:
            continue
        t = e.start - EPOCH
        w.placed_at, w.raw_expected, w.backfilled = now, t, e.workload.uid in holes
        w.load_ahead = 0.0 if forecast is None else forecast.load(w.prio) if w.backfilled else \
            forecast.load(w.prio, scores.get(w.wid), w.account)
        w.expected = stretched(t, now=now, load=w.load_ahead)


def _pod_of(w: Work) -> PodView:
    """A waiting workload's pod as the shadow schedule reads it for a prediction (its program)."""
    name = f"w{w.wid}"
    return PodView(
        ref=Ref("v1", "Pod", w.account, name, name), resource_version="", owner=None, phase="Pending",
        node=None, deleting=False, started=None, failure=None, failed_at=None, interrupted=None, group=None,
        group_size=None, pod_group_name=None, queue="batch", time_limit=None, limit=int(w.limit), started_at=None,
        deadline=None, warned_for=None, started_at_t=None, deadline_t=None, warned_t=None,
        sched=PodSched(w.cores * 1000, 0, w.prio, EPOCH + w.arrival, (), (), ()), program=_program(w))


def _rank(ranked_works: list[Work], *, easy: bool, keep: bool) -> list[Work]:
    """The queue's order as each system keeps promises, and which promises a later arrival overtook."""
    if keep:  # promised work first, in the order of its promises; then the rest in fair-share order
        ranked_works = sorted(ranked_works, key=lambda w: (-w.prio, w.start_by is None, w.start_by or 0.0))
    else:  # as queue.waiting: one promise (as it stands now) never ranked past another; under EASY a
        # promised workload keeps its place ahead of the unpromised
        ranked_works = promised_first(ranked_works, lambda w: w.current, lambda w: w.prio)
        if easy:
            ranked_works = promised_ahead(ranked_works, lambda w: w.current, lambda w: ("batch", w.prio))
    return ranked_works


def _mark_overtaken(ranked_works: list[Work]) -> None:
    """Which promises a later arrival overtook in the order placed (and whether of a higher priority)."""
    latest = -math.inf  # the latest arrival ranked ahead so far: a promise made before it is overtaken
    higher: dict[int, float] = {}  # the same, per priority ranked ahead
    for w in ranked_works:
        if w.promised_at is not None and latest > w.promised_at:
            w.overtaken = True
            w.by_priority = w.by_priority or any(t > w.promised_at for q, t in higher.items() if q > w.prio)
        latest = max(latest, w.arrival)
        higher[w.prio] = max(higher.get(w.prio, -math.inf), w.arrival)


def _why_at_risk(ranked_works: list[Work], estimates: list[Any], items: dict[int, Waiting], policy: QueuePolicy,
                 views: _Views, now: float, running: list[Work]) -> None:
    """At the first pass that places a promised workload past its first start-by (plus the slack),
    why, by placing the same pass again with the later arrivals ranked ahead of it moved to just
    behind it: ``other-room`` (it then keeps its promise and none of them starts later: a smarter
    placement had room for both), ``needed`` (it keeps its promise, but one of them starts later: the
    arrivals needed its room); else ``started-ahead`` (later arrivals of its priority already run:
    released ahead of it at earlier passes, their room is not the placement's to give back),
    ``cascade`` (promised work ahead of it is itself placed past its first start-by) or ``other``."""
    start = {int(e.workload.uid): e.start for e in estimates}
    for i, w in enumerate(ranked_works):
        s = start.get(w.wid)
        if (w.at_risk or w.start_by is None or w.promised_at is None or s is None
                or s - EPOCH <= w.start_by + START_BY_SLACK):
            continue
        ahead = [x for x in ranked_works[:i] if x.arrival > w.promised_at and x.prio == w.prio]
        otherwise = ("started-ahead" if any(x.arrival > w.promised_at and x.prio >= w.prio for x in running)
                     else "cascade" if any(x.start_by is not None and (start.get(x.wid) or 0.0) - EPOCH
                                           > x.start_by + START_BY_SLACK for x in ranked_works[:i])
                     else "other")
        if not ahead:
            w.at_risk = otherwise
            continue
        moved = {x.wid for x in ahead}
        order_b = [x for x in ranked_works[:i] if x.wid not in moved] + [w] + ahead + ranked_works[i + 1:]
        qs = [replace(q, promised=q_w.start_by is not None)
              for q, q_w in zip(as_queued([items[x.wid] for x in order_b], policy), order_b, strict=True)]
        b = {int(e.workload.uid): e.start for e in shadow_schedule(views.snapshot(), EPOCH + now, (), queued=qs)}
        bw = b.get(w.wid)
        if bw is None or bw - EPOCH > w.start_by + START_BY_SLACK:
            w.at_risk = otherwise
        elif all((b.get(x.wid) or math.inf) <= (start.get(x.wid) or math.inf) + START_BY_SLACK for x in ahead):
            w.at_risk = "other-room"
        else:
            w.at_risk = "needed"


def _yielding(ranked_works: list[Work], first: list[Work], starts_a: dict[int, float | None],
              starts_b: dict[int, float | None]) -> list[Work]:
    """``yield``: promised work first (``first``, placed: ``starts_b``), but a workload ranked ahead of
    promised work of its priority that starts later so than in queue order (``starts_a``) goes
    first, in queue order."""
    last: dict[int, int] = {}
    for i, w in enumerate(ranked_works):
        if w.current is not None:
            last[w.prio] = i
    ahead = []
    for i, w in enumerate(ranked_works):
        a, b = starts_a.get(w.wid), starts_b.get(w.wid)
        if i < last.get(w.prio, -1) and a is not None and (b is None or b > a + START_BY_SLACK):
            ahead.append(w)
    out = sorted(ahead, key=lambda w: -w.prio)  # stable: queue order within a priority
    taken = {w.wid for w in ahead}
    merged: list[Work] = []
    for prio in sorted({w.prio for w in first}, reverse=True):
        merged += [w for w in out if w.prio == prio] + [w for w in first if w.prio == prio and w.wid not in taken]
    return merged


def _first_seen(w: Work, t: float, now: float, *, easy: bool, reserved: bool, margin: float | None = None) -> None:
    """Record a placement's start ``t`` of ``w``: the first (to the limit, the promise) and, under EASY,
    the promise the head gets; the start-by as the reconciler rewrites it (``margin``, ``deadline``: it
    moves later as the reservation does, earlier only to ``margin`` seconds after it; negative: never)."""
    if not w.seen:
        w.seen = True
        w.to_limit = t
        if not easy:
            w.start_by = t if t > now else None
            w.promised_at = now if t > now else None
        w.expected = now if t <= now else min(w.expected if w.expected is not None else t, t)
    if easy and t > now and reserved and w.start_by is None:
        w.start_by, w.promised_at = t, now
    if t <= now or w.start_by is None:
        return
    if margin is None:
        if w.current is None or abs(t - w.current) > START_BY_SLACK:
            w.current = t
    elif w.current is None or t > w.current + START_BY_SLACK:
        w.current = t
    elif margin >= 0 and t + margin < w.current - START_BY_SLACK:
        w.current = t + margin


def _start(cluster: Cluster, w: Work, nodes: list[int], now: float, run: _Run) -> None:
    """Release ``w`` whole: all its pods bound now, on ``nodes``, ending together."""
    for n in nodes:
        cluster.bind(n, w.cores, now + w.limit)
    w.starts = [now] * w.pods
    w.nodes = list(nodes)
    w.end = now + w.runtime
    w.ends = [w.end] * w.pods
    heapq.heappush(run.events, (w.end, 0, w.wid, -1))
    run.live[w.wid] = w
    for i in range(w.pods):
        run.started(w, i)
        if run.views is not None:
            run.views.bind(w, i)


def _nothing_to_do(cluster: Cluster, pending: list[Work]) -> bool:
    """No pod of any waiting workload fits now, and every one has been given its start-by."""
    return not pending or (max(cluster.free) < min(w.cores for w in pending) and all(w.seen for w in pending))


def _hold(w: Work, reserve: str) -> int:
    """How long the placement holds ``w``'s room: its time limit, or (``--reserve runtime``, an oracle)
    its actual runtime."""
    return int(w.limit) if reserve == "limit" else math.ceil(w.runtime)


def _waiting(w: Work, reserve: str = "limit") -> Waiting:
    sched = PodSched(w.cores * 1000, 0, 0, EPOCH + w.arrival, (), (), ())
    return Waiting(Ref("batch/v1", "Job", w.account, f"w{w.wid}", str(w.wid)), "batch", w.account, w.prio,
                   EPOCH + w.arrival, w.pods, sched, _hold(w, reserve))


def _shadow_pass(cluster: Cluster, pending: list[Work], now: float, run: _Run, usage: Usage,
                 policy: QueuePolicy, p: Params, res: Result, *, keep: bool = False,
                 yielding: bool = False, deadline: bool = False, slack: bool = False) -> None:
    """The product's pass: ``queue.order``, ``shadow.shadow_schedule`` over what runs and every
    waiting workload, ``queue.to_release``; the released pods bound first fit. ``slack``:
    ``backfill: start-by`` (with ``deadline``)."""
    if _nothing_to_do(cluster, pending):
        return
    res.passes += 1
    fair = policy.fair_share
    at = EPOCH + now
    easy = bool(policy.easy)
    items = {w.wid: _waiting(w, p.reserve) for w in pending}
    ranked = order(list(items.values()), at, usage.at(now, fair.half_life), fair)
    if p.order == "fifo":
        ranked.sort(key=lambda q: (-q.priority, q.created, q.ref.name))
    scores = {int(item.ref.uid): item.score for item in ranked}
    by_id = {w.wid: w for w in pending}
    ranked_works = _rank([by_id[int(item.ref.uid)] for item in ranked], easy=easy, keep=keep)
    assert run.views is not None
    if yielding and not p.depth:
        def starts(ws: list[Work]) -> dict[int, float | None]:
            qs = [replace(q, promised=by_id[int(q.ref.uid)].start_by is not None)
                  for q in as_queued([items[w.wid] for w in ws], policy)]
            return {int(e.workload.uid): e.start for e in shadow_schedule(run.views.snapshot(), at, (), queued=qs)}  # type: ignore[union-attr]
        first = sorted(ranked_works, key=lambda w: (-w.prio, w.current is None, w.current or 0.0,
                                                    w.promised_at or 0.0))
        if first != ranked_works:
            ranked_works = _yielding(ranked_works, first, starts(ranked_works), starts(first))

    def place(ws: list[Work]) -> tuple[list[Waiting], list[Any]]:
        ranked = [items[w.wid] for w in ws]
        placed = ranked[:p.depth] if p.depth else ranked  # beyond the depth: neither reserved nor released
        queued = [replace(q, promised=by_id[int(q.ref.uid)].start_by is not None) for q in as_queued(placed, policy)]
        return placed, shadow_schedule(run.views.snapshot(), at, (), queued=queued, easy=policy.easy)  # type: ignore[union-attr]

    placed, estimates = place(ranked_works)
    if deadline:  # at-risk promises promoted and placed again (queue.place), as the product does
        ranked_works, estimates, rounds = place_keeping(
            ranked_works, lambda ws: place(ws)[1], lambda w: None if w.current is None else EPOCH + w.current,
            lambda w: w.prio, lambda w: str(w.wid), p.rounds)
        if slack:  # what jumps into a promise's room to spare overtakes no promise: it must keep them all
            _mark_overtaken(ranked_works)
            ranked_works, estimates, more = into_slack(
                ranked_works, estimates, lambda ws: place(ws)[1], lambda w: None if w.current is None else EPOCH + w.current,
                lambda w: str(w.wid), at, lambda w: sum(max(f, 0) // w.cores for f in cluster.free) >= w.pods,
                lambda w: (w.prio, (w.pods, w.cores, w.limit)), p.slack_tries)
            rounds += more
        placed = [items[w.wid] for w in ranked_works]
        placed = placed[:p.depth] if p.depth else placed
        res.rounds.append(rounds)
    if not slack:
        _mark_overtaken(ranked_works)
    if any(not w.seen for w in pending):
        fc = _forecast(run, now, usage, fair, pending, p) if p.forecast else None
        _expected_shadow(run, ranked_works[:len(placed)], placed, now, policy, fc, scores)
    for e in estimates:
        w = by_id[int(e.workload.uid)]
        if e.start is not None:
            _first_seen(w, e.start - EPOCH, now, easy=easy, reserved=e.reserved, margin=p.margin if deadline else None)
    if not keep and not yielding and not easy and not deadline and not p.depth:
        _why_at_risk(ranked_works, estimates, items, policy, run.views, now, list(run.live.values()))
    started: set[int] = set()
    where = {e.workload.uid: e.nodes for e in estimates}
    for item, _ in to_release(placed, estimates, at, policy):
        w = by_id[int(item.ref.uid)]
        nodes = _bind(cluster, w, p.bind, where.get(item.ref.uid, ()))
        if nodes is None:
            res.bind_misses += 1
            continue
        if not {f"n{n}" for n in nodes} <= set(where.get(item.ref.uid, ())):
            res.off_plan += 1
        _start(cluster, w, nodes, now, run)
        started.add(w.wid)
    pending[:] = [w for w in pending if w.wid not in started]


def _queue_pass(cluster: Cluster, pending: list[Work], now: float, run: _Run, usage: Usage, fair: FairShare,
                p: Params, res: Result, *, easy: bool = False, keep: bool = False) -> None:
    """The simplified placement (``simple``: reservations, at most ``depth``; ``greedy``: none, whatever
    fits now starts, in queue order)."""
    if _nothing_to_do(cluster, pending):
        return
    res.passes += 1
    sched = PodSched(0, 0, 0, 0.0, (), (), ())
    items = [Waiting(Ref("batch/v1", "Job", w.account, f"w{w.wid}", str(w.wid)), "batch", w.account, w.prio,
                     w.arrival, w.pods, sched, int(w.limit)) for w in pending]
    ranked = order(items, now, usage.at(now, fair.half_life), fair)
    by_id = {w.wid: w for w in pending}
    ranked_works = _rank([by_id[int(item.ref.uid)] for item in ranked], easy=easy, keep=keep)
    _mark_overtaken(ranked_works)
    reserved: list[list[tuple[float, float, int]]] = [[] for _ in cluster.free]
    started: set[int] = set()
    smallest = min(w.cores for w in pending)
    unseen = sum(1 for w in pending if not w.seen)
    if unseen and p.placement != "greedy":
        fc = _forecast(run, now, usage, fair, pending, p) if p.forecast else None
        _expected(cluster, ranked_works[:p.depth] if p.depth else ranked_works, now, run.live, run.runs, fc,
                  {int(item.ref.uid): item.score for item in ranked})
    head = False  # easy: the head has reserved
    for depth, w in enumerate(ranked_works):
        full = max(cluster.free) < smallest
        if (p.depth and depth >= p.depth) or (full and not unseen):
            break  # beyond the depth nothing is reserved; with no room now, only new promises are left to make
        if p.placement == "greedy":
            nodes = _first_fit(cluster, w)
            placed = (now, nodes) if nodes is not None else None
        else:
            placed = _place(cluster, reserved, now, w)
        if placed is None:
            if p.placement == "greedy" and not w.seen:
                w.seen, unseen = True, unseen - 1  # no reservations: no promise either
            continue
        t, nodes = placed
        if not w.seen:
            unseen -= 1
        reserves = not head or w.start_by is not None  # easy: the head, or one promised before
        _first_seen(w, t, now, easy=easy, reserved=reserves)
        if t <= now:
            _start(cluster, w, nodes, now, run)
            started.add(w.wid)
        elif easy and not reserves:
            continue  # behind the head: no reservation, no promise
        else:
            head = True
            for n in nodes:
                reserved[n].append((t, t + w.limit, w.cores))
    pending[:] = [w for w in pending if w.wid not in started]


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(int(q * len(s)), len(s) - 1)]


def figures(res: Result, p: Params, fair: FairShare) -> dict[str, Any]:
    total = sum(res.used.values())
    shares = sum(fair.shares_of(a) for a in res.accounts)
    share = {a: (res.used[a] / total if total else 0.0) for a in res.accounts}
    dev = {a: share[a] / (fair.shares_of(a) / shares) - 1 for a in res.accounts}
    total_c = sum(res.used_contended.values())
    dev_c = {a: res.used_contended[a] / total_c / (fair.shares_of(a) / shares) - 1 if total_c else 0.0
             for a in res.accounts}
    waits = [(w.started or 0.0) - w.arrival for w in res.works]
    gang_waits = [(w.started or 0.0) - w.arrival for w in res.works if w.gang]
    out: dict[str, Any] = {
        "system": res.name,
        "all_waiting_h": res.all_waiting / HOUR,
        "share": share,
        "deviation": dev,
        "max_abs_deviation": max(abs(d) for d in dev.values()) if total else None,
        "carried_in": 1 - total_c / total if total else None,  # of the window's core-hours, pods started before it
        "contended_deviation": dev_c,
        "max_abs_contended_deviation": max(abs(d) for d in dev_c.values()) if total_c else None,
        "window_share": {a: v / (sum(res.used_window.values()) or 1.0) for a, v in res.used_window.items()},
        "useful_utilisation": (res.alloc_window - res.idle_window) / (p.nodes * p.node_cpu * p.hours * HOUR),
        # idle room: of the capacity over the arrival window, cores free while work waited, and free while
        # a waiting pod fit on some node (what kube-scheduler would have bound)
        "free_while_waiting": res.free_waiting / (p.nodes * p.node_cpu * p.hours * HOUR),
        "room_while_waiting": res.room_waiting / (p.nodes * p.node_cpu * p.hours * HOUR),
        "mean_wait_h": statistics.fmean(waits) / HOUR,
        "p95_wait_h": _pct(waits, 0.95) / HOUR,
        "longest_gang_wait_h": max(gang_waits, default=0.0) / HOUR,
        "workloads": len(res.works),
        "max_over_capacity": res.max_over,
        "gangs_started_in_parts": res.partial_gang_starts,
        "passes": res.passes,
        "bind_misses": res.bind_misses,
        "off_plan": res.off_plan,
        # deadline: placements per pass (mean, most), and the share of passes that placed more than once
        "rounds_mean": statistics.fmean(res.rounds) if res.rounds else None,
        "rounds_max": max(res.rounds, default=None),
        "rounds_over_one": sum(r > 1 for r in res.rounds) / len(res.rounds) if res.rounds else None,
    }
    m = measures(records(res), capacity=p.nodes * p.node_cpu, window=p.hours * HOUR, slack=START_BY_SLACK)
    out.update({k: v for k, v in m.items() if k not in out})
    # utilisation: replay_measures' over the records, which must be the simulation's own core-seconds
    assert math.isclose(m["utilisation"], res.alloc_window / (p.nodes * p.node_cpu * p.hours * HOUR), abs_tol=1e-9)
    if res.name != "kube":  # the names the table has always had
        out["kept_among_promised"] = m["kept_promised"]
        out["kept_among_all"] = m["kept_all"]
        out["tightness_median"] = m["tightness"]
    return out


def records(res: Result) -> list[Record]:
    """What replay_measures reads of each workload."""
    return [Record(arrival=w.arrival, start=w.started or 0.0, end=w.end or 0.0, gang=w.gang,
                   pieces=tuple((s, w.cores) for s in w.starts), ends=tuple(w.ends), start_by=w.start_by,
                   to_limit=w.to_limit, expected=w.expected, overtaken=w.overtaken, by_priority=w.by_priority)
            for w in res.works]


SYSTEMS = ("kube", "queue", "easy", "keep", "yield", "deadline", "easy-deadline", "start-by")
DEADLINE = ("deadline", "easy-deadline", "start-by")  # the placement that holds promises as deadlines is the shadow placement's only


def run(seed: int, p: Params, fair: FairShare | None = None, *, model: str = "accounts", load: float = 0.6,
        systems: Sequence[str] = ("kube", "queue"),
        keep: dict[str, list[Record]] | None = None) -> list[dict[str, Any]]:
    """One seed under each system; ``keep`` collects each system's records (for ``pooled_rows``)."""
    fair = fair or FairShare()
    works = generate(seed, p) if model == "accounts" else generate_model(seed, model, load, p)
    rows = []
    for s in systems:
        res = simulate(works, p, s, fair)
        if keep is not None:
            keep.setdefault(s, []).extend(records(res))
        rows.append(dict(figures(res, p, fair), seed=seed, model=model, load=load if model != "accounts" else None))
    return rows


def pooled_rows(keep: dict[str, list[Record]], seeds: int, p: Params) -> list[dict[str, Any]]:
    """Issue 24's measures over the records of every seed together (utilisation: the mean of the seeds)."""
    return [dict(measures(rs, capacity=p.nodes * p.node_cpu * seeds, window=p.hours * HOUR, slack=START_BY_SLACK),
                 seed="all", system=s) for s, rs in keep.items()]


def _f(r: dict[str, Any], k: str, fmt: str) -> str:
    v = r.get(k)
    return format(v, fmt) if isinstance(v, float) else "-"


def measures_row(r: dict[str, Any]) -> str:
    """One line of issue 24's measures: a seed under one system."""
    def pct(k: str) -> str:
        return _f(r, k, ".0%")

    def num(k: str, fmt: str = ".2f") -> str:
        return _f(r, k, fmt)

    def mins(k: str) -> str:
        v = r.get(k)
        return f"{v / 60:.0f}" if isinstance(v, float) else "-"

    return (f"{r['seed']:>4} {r['system']:6} {pct('kept_clean'):>6} {pct('kept_promised'):>6} {pct('kept_all'):>6} "
            f"{pct('promised_share'):>5} {num('tightness'):>6} {num('tightness_to_limit'):>6} "
            f"{pct('calibration'):>5} {mins('mae'):>6} {mins('mae_to_limit'):>6} {pct('within_near'):>5} "
            f"{pct('within_near_to_limit'):>5} {r['utilisation']:>6.1%} {num('mean_bounded_slowdown', '.1f'):>7} "
            f"{r['longest_gang_wait'] / HOUR:>6.1f}")


MEASURES_HEADER = (f"{'seed':>4} {'system':6} {'k/cln':>6} {'k/prm':>6} {'k/all':>6} {'prm':>5} {'tight':>6} "
                   f"{'t/lim':>6} {'calib':>5} {'mae m':>6} {'lim m':>6} {'<10m':>5} {'l<10m':>5} {'util':>6} "
                   f"{'bsld':>7} {'gang h':>6}")


def row(r: dict[str, Any]) -> str:
    """One line of the table: a seed under one system."""
    heavy = "heavy" in r["deviation"]
    return (f"{r['seed']:>4} {r['system']:6} {r['all_waiting_h']:>10.1f} {format(r['deviation']['heavy'], '+9.0%') if r['all_waiting_h'] and heavy else '-':>9} "
            f"{_f(r, 'max_abs_deviation', '8.0%'):>8} {format(r['window_share']['heavy'], '9.0%') if heavy else '-':>9} {r['utilisation']:>6.1%} "
            f"{r['useful_utilisation']:>6.1%} "
            f"{r['mean_wait_h']:>8.2f} {r['p95_wait_h']:>8.2f} {r['longest_gang_wait_h']:>10.2f} "
            f"{_f(r, 'kept_among_promised', '9.0%'):>9} {_f(r, 'kept_among_all', '8.0%'):>8} "
            f"{_f(r, 'tightness_median', '6.2f'):>6}")


def _seeds(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--nodes", type=int, default=Params.nodes)
    ap.add_argument("--node-cpu", type=int, default=None, help="32 for the accounts model, else 64 (bench_shadow's)")
    ap.add_argument("--heavy-load", type=float, default=Params.heavy_load)
    ap.add_argument("--heavy-backlog", type=int, default=Params.heavy_backlog)
    ap.add_argument("--light", type=int, default=Params.light)
    ap.add_argument("--light-load", type=float, default=Params.light_load)
    ap.add_argument("--gang-share", type=float, default=Params.gang_share)
    ap.add_argument("--placement", choices=PLACEMENTS, default=Params.placement,
                    help="the queue's: shadow (the product's shadow_schedule), simple (a re-implementation with "
                         "--depth reservations, first fit), greedy (no reservations)")
    ap.add_argument("--bind", choices=BINDS, default=Params.bind,
                    help="shadow placement: released pods bound on the planned nodes (the product narrows "
                         "them), or unnarrowed: spread (kube-scheduler's default scoring), first-fit")
    ap.add_argument("--reserve", choices=("limit", "runtime"), default=Params.reserve,
                    help="offline: the product's placement holds room for each job's time limit, or for its actual "
                         "runtime (an oracle: what reserving from limits costs)")
    ap.add_argument("--kube-bind", choices=("first-fit", "spread"), default=Params.kube_bind,
                    help="kube alone: each pod on the first node with room, or on the emptiest (kube-scheduler's "
                         "default LeastAllocated scoring)")
    ap.add_argument("--order", choices=("fair", "fifo"), default=Params.order,
                    help="offline: the queue's order, fair share (queue.order) or priority then arrival")
    ap.add_argument("--split", action="store_true",
                    help="offline: workloads that are not gangs queued pod by pod (the product releases a Job whole)")
    ap.add_argument("--depth", type=int, default=Params.depth,
                    help="at most this many workloads placed per pass (0: all, as the product does)")
    dflt = FairShare()
    ap.add_argument("--half-life-h", type=float, default=dflt.half_life / HOUR, help="fairShare.halfLife")
    ap.add_argument("--age-weight", type=float, default=dflt.age_weight, help="fairShare.ageWeight")
    ap.add_argument("--max-age-h", type=float, default=dflt.max_age / HOUR, help="fairShare.maxAge")
    ap.add_argument("--forecast-h", type=float, default=Params.forecast / HOUR,
                    help="the expected start's forecast of arrivals that rank ahead, over this many hours "
                         "(webhook/reconciler/forecast.py); 0: none, the expected start as placed")
    ap.add_argument("--model", choices=("accounts", "repeat", "iid"), default="accounts",
                    help="workload model: the fair-share accounts, or bench_shadow.py's repeat / iid")
    ap.add_argument("--load", type=float, default=0.6, help="offered load, repeat and iid models (0.6, 0.8)")
    ap.add_argument("--systems", default="kube,queue", help=f"comma-separated, of {', '.join(SYSTEMS)}")
    ap.add_argument("--margin-h", type=float, default=-1.0,
                    help="deadline: a start-by moves earlier only to this many hours after its reservation "
                         "(negative: never earlier)")
    ap.add_argument("--rounds", type=int, default=Params.rounds,
                    help="deadline: a pass places again at most this often for promises at risk (the last time, every "
                         "promise first)")
    ap.add_argument("--slack-tries", type=int, default=Params.slack_tries,
                    help="start-by: a pass places again at most this often for work that may start now "
                         "(queue.SLACK_TRIES)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    node_cpu = a.node_cpu or (Params.node_cpu if a.model == "accounts" else 64)
    p = Params(nodes=a.nodes, node_cpu=node_cpu, hours=a.hours, heavy_load=a.heavy_load,
               heavy_backlog=a.heavy_backlog, light=a.light, light_load=a.light_load, gang_share=a.gang_share,
               depth=a.depth, placement=a.placement, forecast=a.forecast_h * HOUR, bind=a.bind, reserve=a.reserve,
               order=a.order, split=a.split, kube_bind=a.kube_bind,
               margin=a.margin_h * HOUR if a.margin_h >= 0 else -1.0, rounds=a.rounds, slack_tries=a.slack_tries)
    fair = FairShare(half_life=int(a.half_life_h * HOUR), age_weight=a.age_weight, max_age=int(a.max_age_h * HOUR))
    systems = [x for x in a.systems.split(",") if x]
    if any(x not in SYSTEMS for x in systems):
        ap.error(f"--systems: of {', '.join(SYSTEMS)}")
    if p.placement != "shadow" and any(x in DEADLINE for x in systems):
        ap.error("--systems deadline, easy-deadline, start-by: only with --placement shadow")
    keep: dict[str, list[Record]] = {}
    seeds = _seeds(a.seeds)
    rows = [r for s in seeds for r in run(s, p, fair, model=a.model, load=a.load, systems=systems, keep=keep)]
    pooled = pooled_rows(keep, len(seeds), p)
    if a.json:
        print(json.dumps(rows + pooled, indent=1))
        return 0
    print(f"{p.nodes} nodes x {p.node_cpu} cores, {p.hours:g} h of arrivals; " + (
          f"heavy {p.heavy_load:g} (+{p.heavy_backlog} at 0), {p.light} light x {p.light_load:g}"
          if a.model == "accounts" else f"model {a.model}, load {a.load:g}") + f"; placement {p.placement}, bind {p.bind}; forecast {p.forecast / HOUR:g} h; "
          f"half-life {a.half_life_h:g} h, age weight {a.age_weight:g} over {a.max_age_h:g} h")
    hdr = (f"{'seed':>4} {'system':6} {'all-wait h':>10} {'heavy dev':>9} {'max|dev|':>8} {'heavy win':>9} {'util':>6} "
           f"{'useful':>6} {'mean w h':>8} {'p95 w h':>8} {'gang max h':>10} {'kept/prom':>9} {'kept/all':>8} {'tight':>6}")
    print(hdr)
    for r in rows:
        print(row(r))
    print("issue 24's measures (bench/replay_measures.py): kept among the clean / the promised / all, share "
          "promised, tightness of the promise / of the to-the-limit start, calibration, median abs error (min) "
          "of the expected / to-the-limit start, within 10 min of each, utilisation, mean bounded slowdown "
          "(10 s), longest gang wait (h)")
    print(MEASURES_HEADER)
    for r in rows + pooled:
        print(measures_row(r))
    print("not kept among all, by cause (replay_measures.broken): waited unpromised / a higher priority went "
          "ahead / fair share did / none")
    for r in pooled:
        print(f"{r['seed']:>4} {r['system']:6} " + " / ".join(
            str(r[f"broken_{c}"]) for c in ("unpromised", "priority", "fair_share", "clean")))
    print("of the capacity over the arrival window, free while work waited / of that, while a waiting pod fit: " + ", ".join(
        f"{r['system']} {r['seed']}: {r['free_while_waiting']:.1%} / {r['room_while_waiting']:.1%}" for r in rows))
    for r in rows:
        if r["rounds_mean"] is not None:
            print(f"{r['system']} {r['seed']}: placements a pass {r['rounds_mean']:.2f} mean, {r['rounds_max']} most, "
                  f"more than one in {r['rounds_over_one']:.1%} of passes; mean wait {r['mean_wait_h']:.2f} h, "
                  f"heavy's share of the window {r['window_share'].get('heavy', 0.0):.1%}")
    if p.placement == "shadow":
        print("releases bound (in part) off the planned nodes / not bound at all: " + ", ".join(
            f"{r['system']} {r['seed']}: {r['off_plan']}/{r['bind_misses']}" for r in rows if r["system"] != "kube"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
