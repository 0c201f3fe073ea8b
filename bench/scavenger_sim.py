"""Scavenger preemption: a day of ordinary work over a cluster kept full by checkpointing
scavengers, and how much scavenger work each victim order throws away.

    python bench/scavenger_sim.py                   # the comparison (5 seeds), then the planning pass
    python bench/scavenger_sim.py --sweep           # the same under other checkpoint / segment / restart settings
    python bench/scavenger_sim.py --planning-pass   # only the CPU time of one planning pass
    python bench/scavenger_sim.py --boundary sigterm --segment 30   # SIGTERM at duration instead

Orders compared, on the same cluster, the same ordinary arrivals, the same ScavengerJobs:

  stock     (a) each ScavengerJob runs as one long pod per gang member that checkpoints every
                C minutes inside; kube-scheduler picks the victims by its own rules.
  segments  (b) batchgate's design (docs/dev/reconciler.md, "Scavenger jobs"): a pod boundary at a checkpoint every
                S minutes, so a pod's status.startTime is its last checkpoint and the
                scheduler's "latest start goes first" is "least progress since the checkpoint".
  tiers     (c) segments, and a ScavengerJob interrupted k times gets scavenger class
                min(k, T-1) of T `Never` classes (all below ordinary work) for its next pods.
  gangs     (f) segments, and a gang of P pods gets scavenger class log2(P) (1 pod: 0, 2: 1,
                4: 2, ...; --tiers classes): kube-scheduler takes the node with the lowest
                highest-victim priority, so single pods before pieces of big gangs. Measured,
                not adopted.
  guard     (e) segments, and a PodDisruptionBudget (disruptionsAllowed 0) on every gang whose
                unsaved work (compute since its checkpoint x its cores) reached --guard
                core-minutes. kube-scheduler ranks nodes by fewest PDB violations first and, on a
                node, sends the pods that violate none first; so the held gangs go last. Built:
                bundle spec.scavengers.guardCoreMinutes (the controller counts from the pods'
                start, the restart included; drains lift it, which this model has none of).
  oracle    (d) long pods as in (a), but the victims are the whole gangs, on one node, whose
                loss (compute since their checkpoint plus the restart, all their pods on all
                nodes) is least; it knows what no scheduler can see.
  victims       (issue 25) guard, and the reconciler picks the victims of the work it releases
                (gated queues: batch work, --gated): the whole scavenger gangs, on one node,
                that lose least by what it can know (webhook.reconciler.scavenger.choose_victims:
                the time since the pods' start, the restart included, + an assumed 30 s restart,
                x the gang's cores); interactive work is left to kube-scheduler and the guard.
  declared      (issue 25) spec.checkpoint.interval: long pods, no boundaries, that checkpoint every
                --checkpoint minutes counted from the container's start (the first interval holds
                the restart: that is the contract the reconciler reads the unsaved work from); the
                guard held from the interval's unsaved work; kube-scheduler's victims.
  combined      (issue 25) declared + the reconciler's victims: batchgate's default (DEFAULT_ORDER).

--json prints, per order, lost / waste / useful against the stock order (mean, min, max of the
days' ratios) and marks the default order; --restarts 10,30,120 adds other restart costs;
--markdown FILE renders the README's tables from that JSON.

The figure is scavenger work lost to preemption (core-hours of compute done since the last
checkpoint of every gang torn down), and the waste: that plus the restarts it and the
segment boundaries cost (R minutes of every pod of the gang per restart).

The model (each assumption a flag where it matters):

- Cluster: --nodes identical nodes (--node-cpu cores, 4 GiB memory per core, 110 pods);
  no selectors, taints or affinity, no node failures.
- Ordinary work: jobs arrive by a Poisson process whose rate follows the day (lowest at
  midnight, 1.6x the mean at noon), sized so ordinary pods request --load of the cluster's
  cpu on average (so about 0.9 at noon): 1-8 pods of 1-16 cores and 2-8 GiB per core,
  lognormal run times (median 30 min, clipped to 1 min..12 h); 25 % interactive (priority
  10000), 75 % batch (1000). A job's pods are scheduled one by one (a Job's pods, no gang);
  a preempted ordinary pod is recreated by its Job and starts over.
- kube-scheduler 1.20: one pod at a time, pending pods by priority then age; Filter = cpu,
  memory and pod-count fit; Score = NodeResourcesLeastAllocated + BalancedAllocation, a
  random pick among the best; PostFilter = DefaultPreemption: per node, every lower-priority
  pod removed, then reprieved most important first (higher priority, then earlier start;
  PDB-violating ones first); across nodes fewest PDB violations, lowest highest-victim
  priority, smallest sum of priorities, fewest victims, latest start of the highest-priority
  victims, then map order (random). All nodes are candidates (fewer than 100). Victims go at
  once and the preemptor binds (the grace period is the same under every order and is not
  modelled). Scavenger pods never preempt (preemptionPolicy Never).
- batchgate: when one pod of a gang is preempted, the whole gang goes (an interruption) and
  waits again. Every --planner-interval minutes the real planner
  (webhook.reconciler.scavenger.choose_starts) picks what starts: highest interruptedCount
  first, then oldest; all pods fit or none; all scavengers within --share of the cluster;
  backfill. Its pods are then placed by the scheduler model above. ScavengerJobs: a backlog
  that fills the share, and new ones arriving all day; 1-4 pods of 1-8 cores, 3-30 hours of
  compute each.
- Workloads: each (re)start costs --restart minutes before computing (container start,
  reading the checkpoint); a checkpoint every --checkpoint minutes of compute, itself free.
  Stopped from outside, a workload loses its compute since the last checkpoint: it cannot
  save on SIGTERM (a workload is a black box to batchgate; --sigterm-save gives that share of the workloads a
  save on SIGTERM, which makes their interruptions free under every order).
- Segments: with --boundary exit (default), a segment ends right after the workload's
  checkpoint number --segment/--checkpoint of that segment (spec.checkpointExitCode: the
  workload exits with the agreed code after it), so a boundary costs the restart only. With
  --boundary sigterm, the controller ends it --segment minutes after its pods started (SIGTERM
  at spec.duration) and a workload that cannot save on SIGTERM loses its compute since its last
  checkpoint (counted as "boundary loss"). The next segment starts at once where it fits, else
  waits (not an interruption).
- Diagnostics, not designs, of the guard order (kube-scheduler's node choice is steered by which
  gangs are held): --guard-keep holds every running gang but the given share with the least
  unsaved work, cluster-wide, instead of a threshold; --guard-node leaves unguarded, on each
  node, the least-unsaved gangs until they and the free room make the given cores, and holds
  every other gang; --guard-tiers adds scavenger classes by the gang's cores (1-2, 3-8, 9+; a
  class is fixed at a segment's start). The output counts the preemptions that found no node
  without a PDB-violating victim and what they lost.
- Diagnostics, not designs: --ideal-node-pick replaces kube-scheduler's choice among candidate
  nodes by the node whose victims' whole gangs lose least (the per-node victims stay
  kube-scheduler's); --placement pack binds scavenger pods where choose_starts placed them
  (best fit, as a required node affinity would) instead of kube-scheduler's spreading score.
- The day: 24 hours measured after a --warmup (4 h) that fills the cluster and is not counted.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import heapq
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook.reconciler.scavenger import (
    Need,
    Room,
    Waiting,
    cap_room,
    choose_starts,
    gang_loss,
    unsaved,
)

GI = 1 << 30
MAX_INT32 = 2**31 - 1
INTERACTIVE, BATCH, SCAVENGER = 10_000, 1_000, -1_000
MAX_PODS = 110


# == the victim model: kube-scheduler 1.20 DefaultPreemption ================================
@dataclass(slots=True, eq=False)
class SimPod:
    """A bound (or pending) pod as the scheduler sees it. ``start`` is status.startTime."""

    uid: int
    owner: Hashable  # the gang (ScavengerJob) or the ordinary pod itself
    cpu_m: int
    mem_b: int
    priority: int
    start: float = 0.0
    node: str = ""
    pdb: str | None = None  # the PodDisruptionBudget that selects it, if any


@dataclass(slots=True, eq=False)
class SimNode:
    name: str
    cpu_m: int
    mem_b: int
    max_pods: int = MAX_PODS
    pods: dict[int, SimPod] = field(default_factory=dict)
    free_cpu: int = -1
    free_mem: int = -1

    def __post_init__(self) -> None:
        if self.free_cpu < 0:
            self.free_cpu = self.cpu_m - sum(p.cpu_m for p in self.pods.values())
            self.free_mem = self.mem_b - sum(p.mem_b for p in self.pods.values())

    def fits(self, pod: SimPod) -> bool:
        return pod.cpu_m <= self.free_cpu and pod.mem_b <= self.free_mem and len(self.pods) < self.max_pods

    def bind(self, pod: SimPod) -> None:
        self.pods[pod.uid] = pod
        self.free_cpu -= pod.cpu_m
        self.free_mem -= pod.mem_b
        pod.node = self.name

    def unbind(self, pod: SimPod) -> None:
        del self.pods[pod.uid]
        self.free_cpu += pod.cpu_m
        self.free_mem += pod.mem_b
        pod.node = ""


def importance(p: SimPod) -> tuple[int, float]:
    """Sort key, most important first: higher priority, then earlier start (MoreImportantPod)."""
    return (-p.priority, p.start)


def pdb_split(pods: Sequence[SimPod], budgets: dict[str, int]) -> tuple[list[SimPod], list[SimPod]]:
    """filterPodsWithPDBViolation: walking the pods in order, each takes one disruption from
    its budget; those that take it below zero would violate it."""
    left = dict(budgets)
    violating: list[SimPod] = []
    fine: list[SimPod] = []
    for p in pods:
        if p.pdb is not None and p.pdb in left:
            left[p.pdb] -= 1
            if left[p.pdb] < 0:
                violating.append(p)
                continue
        fine.append(p)
    return violating, fine


def select_victims_on_node(node: SimNode, preemptor: SimPod,
                           budgets: dict[str, int] | None = None) -> tuple[list[SimPod], int] | None:
    """selectVictimsOnNode: the pods kube-scheduler would delete on ``node`` so ``preemptor``
    fits, most important first, and how many of them violate a PDB; None if none would do."""
    potential = [p for p in node.pods.values() if p.priority < preemptor.priority]
    if not potential:
        return None
    cpu = node.free_cpu + sum(p.cpu_m for p in potential)
    mem = node.free_mem + sum(p.mem_b for p in potential)
    slots = node.max_pods - len(node.pods) + len(potential)
    if preemptor.cpu_m > cpu or preemptor.mem_b > mem or slots < 1:
        return None
    potential.sort(key=importance)
    violating, fine = pdb_split(potential, budgets or {})
    victims: list[SimPod] = []
    n_violating = 0
    for group, violates in ((violating, True), (fine, False)):
        for p in group:  # reprieve p if the preemptor still fits with p back on the node
            if preemptor.cpu_m <= cpu - p.cpu_m and preemptor.mem_b <= mem - p.mem_b and slots - 1 >= 1:
                cpu, mem, slots = cpu - p.cpu_m, mem - p.mem_b, slots - 1
            else:
                victims.append(p)
                n_violating += violates
    return victims, n_violating


def earliest_start_of_highest(victims: Sequence[SimPod]) -> float:
    """GetEarliestPodStartTime: the earliest start among the highest-priority victims."""
    top = max(p.priority for p in victims)
    return min(p.start for p in victims if p.priority == top)


def pick_one_node(candidates: Sequence[tuple[str, list[SimPod], int]]) -> str:
    """pickOneNodeForPreemption over (node, victims, PDB violations), in map order."""
    best = list(candidates)
    for key in (
        lambda c: c[2],  # fewest PDB violations
        lambda c: c[1][0].priority,  # lowest highest-priority victim (victims[0], as the scheduler reads it)
        lambda c: sum(p.priority + MAX_INT32 + 1 for p in c[1]),  # smallest sum of priorities
        lambda c: len(c[1]),  # fewest victims
    ):
        low = min(key(c) for c in best)
        best = [c for c in best if key(c) == low]
        if len(best) == 1:
            return best[0][0]
    chosen, latest = best[0][0], earliest_start_of_highest(best[0][1])
    for name, victims, _ in best[1:]:  # the latest "earliest start of the highest-priority victims"
        t = earliest_start_of_highest(victims)
        if t > latest:
            chosen, latest = name, t
    return chosen


def stock_preemption(nodes: Iterable[SimNode], preemptor: SimPod,
                     budgets: dict[str, int] | None = None) -> tuple[str, list[SimPod]] | None:
    """DefaultPreemption's choice: the node and the pods it deletes, or None."""
    candidates = []
    for n in nodes:
        found = select_victims_on_node(n, preemptor, budgets)
        if found is not None and found[0]:
            candidates.append((n.name, found[0], found[1]))
    if not candidates:
        return None
    name = pick_one_node(candidates)
    return name, next(v for n, v, _ in candidates if n == name)


@dataclass(frozen=True, slots=True)
class _Group:
    owner: Hashable
    priority: int
    cost: float
    cpu_m: int
    mem_b: int
    pods: int


def oracle_on_node(node: SimNode, preemptor: SimPod, cost: Callable[[Hashable], float],
                   budget: list[int]) -> tuple[tuple[int, float, int], list[Hashable]] | None:
    """The whole gangs on ``node`` (all below the preemptor's priority) whose removal makes
    room at the least (highest victim priority, cost, number of gangs); exact search, up
    to ``budget[0]`` steps (decremented; the caller counts exhausted budgets)."""
    groups: dict[Hashable, list[SimPod]] = {}
    for p in node.pods.values():
        if p.priority < preemptor.priority:
            groups.setdefault(p.owner, []).append(p)
    if not groups:
        return None
    gs = [_Group(o, max(p.priority for p in ps), cost(o), sum(p.cpu_m for p in ps),
                 sum(p.mem_b for p in ps), len(ps)) for o, ps in groups.items()]
    need_cpu = preemptor.cpu_m - node.free_cpu
    need_mem = preemptor.mem_b - node.free_mem
    need_slots = len(node.pods) + 1 - node.max_pods
    for top in sorted({g.priority for g in gs}):
        allowed = sorted((g for g in gs if g.priority <= top), key=lambda g: (g.cost, g.cpu_m))
        if sum(g.cpu_m for g in allowed) < need_cpu or sum(g.mem_b for g in allowed) < need_mem \
                or sum(g.pods for g in allowed) < need_slots:
            continue
        best: list[tuple[float, int, list[Hashable]]] = []
        suffix = [(0, 0, 0)] * (len(allowed) + 1)
        for i in range(len(allowed) - 1, -1, -1):
            c, m, s = suffix[i + 1]
            suffix[i] = (c + allowed[i].cpu_m, m + allowed[i].mem_b, s + allowed[i].pods)

        def dfs(i: int, cpu: int, mem: int, slots: int, spent: float, chosen: list[Hashable],
                allowed: list[_Group] = allowed, suffix: list[tuple[int, int, int]] = suffix,
                best: list[tuple[float, int, list[Hashable]]] = best) -> None:
            if cpu <= 0 and mem <= 0 and slots <= 0:
                if not best or (spent, len(chosen)) < best[0][:2]:
                    best[:] = [(spent, len(chosen), list(chosen))]
                return
            if i == len(allowed) or budget[0] <= 0:
                return
            budget[0] -= 1
            if best and spent + allowed[i].cost > best[0][0]:
                return  # sorted by cost: nothing after i is cheaper
            c, m, s = suffix[i]
            if c < cpu or m < mem or s < slots:
                return
            g = allowed[i]
            chosen.append(g.owner)
            dfs(i + 1, cpu - g.cpu_m, mem - g.mem_b, slots - g.pods, spent + g.cost, chosen)
            chosen.pop()
            dfs(i + 1, cpu, mem, slots, spent, chosen)

        dfs(0, need_cpu, need_mem, need_slots, 0.0, [])
        if best:
            spent, count, owners = best[0]
            return (top, spent, count), owners
    return None


# == the reconciler's victims (issue 25) ======================================================
# The reconciler's choice as webhook/reconciler/victims.py makes it on the cluster (the same cost,
# scavenger.gang_loss: unsaved work since the pods' start + a 30 s restart, x the gang's cores; a gang
# whose node is drained within the hour costs only what it would save before the drain), here as an
# exact search per node where victims.choose is greedy (the
# cheapest gangs on a node until the pod fits, the node with the lowest cost per pod): the
# simulated days measure the order, not that search.
@dataclass(frozen=True, slots=True)
class Holder:
    """A running scavenger gang that could give way: its ``loss`` (``gang_loss``) and the room its
    pods hold on each node, ``{node: (cpu_m, mem_b, pods)}``."""

    key: tuple[str, str]
    loss: float
    on: Mapping[str, tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class Victims:
    node: str
    gangs: tuple[tuple[str, str], ...]
    loss: float


def choose_victims(pod: Need, free: Mapping[str, Room], holders: Iterable[Holder], *,
                   budget: int = 20_000) -> Victims | None:
    """The node and the whole gangs to evict so that one pod of ``pod`` fits there, at the least
    loss (then the fewest gangs, then the node's name); None when evicting scavengers makes room
    nowhere. ``free``: the room left on each node the pod may use. An exact search per node (a
    gang evicted frees its pods on every node, but only the chosen node's room is counted), cut
    after ``budget`` steps a node (the best found so far stands)."""
    by_node: dict[str, list[tuple[float, int, int, int, tuple[str, str]]]] = {}
    for h in holders:
        for name, (c, m, k) in h.on.items():
            if name in free:
                by_node.setdefault(name, []).append((h.loss, c, m, k, h.key))
    # The nodes by their greedy answer (the cheapest gangs until the pod fits), so the exact
    # search on the best of them first bounds the search on the others.
    tries: list[tuple[float, str, list[tuple[float, int, int, int, tuple[str, str]]], tuple[int, int, int]]] = []
    for name, room in free.items():
        gangs = by_node.get(name, [])
        need = (pod.cpu_m - room.cpu_m, pod.mem_b - room.mem_b, 1 - room.pods)
        gangs.sort()
        c, m, k, greedy = need[0], need[1], need[2], 0.0
        for g in gangs:
            if c <= 0 and m <= 0 and k <= 0:
                break
            c, m, k, greedy = c - g[1], m - g[2], k - g[3], greedy + g[0]
        if c <= 0 and m <= 0 and k <= 0:
            tries.append((greedy, name, gangs, need))
    best: Victims | None = None
    for greedy, name, gangs, need in sorted(tries, key=lambda t: (t[0], t[1])):
        if best is not None and gangs and gangs[0][0] > best.loss:
            continue
        found = _cheapest(gangs, need, budget, best.loss if best is not None else greedy)
        if found is not None and (best is None or (found[0], len(found[1])) < (best.loss, len(best.gangs))):
            best = Victims(name, found[1], found[0])
    return best


def _cheapest(gangs: Sequence[tuple[float, int, int, int, tuple[str, str]]], need: tuple[int, int, int],
              budget: int, bound: float) -> tuple[float, tuple[tuple[str, str], ...]] | None:
    """The cheapest subset of ``gangs`` (sorted by loss) covering ``need`` (cpu, memory, pods), at
    most ``bound``; depth-first, including before excluding, so the first answers are cheap."""
    suffix = [(0, 0, 0)] * (len(gangs) + 1)
    for i in range(len(gangs) - 1, -1, -1):
        c, m, k = suffix[i + 1]
        suffix[i] = (c + gangs[i][1], m + gangs[i][2], k + gangs[i][3])
    best: list[tuple[float, int, tuple[tuple[str, str], ...]]] = []
    steps = [budget]
    chosen: list[tuple[str, str]] = []

    def dfs(i: int, cpu: int, mem: int, slots: int, spent: float) -> None:
        if cpu <= 0 and mem <= 0 and slots <= 0:
            if (spent, len(chosen)) < (best[0][0], best[0][1]) if best else spent <= bound:
                best[:] = [(spent, len(chosen), tuple(chosen))]
            return
        if i == len(gangs) or steps[0] <= 0:
            return
        steps[0] -= 1
        if spent + gangs[i][0] > (best[0][0] if best else bound):
            return  # sorted by loss: nothing after i is cheaper
        c, m, k = suffix[i]
        if c < cpu or m < mem or k < slots:
            return
        g = gangs[i]
        chosen.append(g[4])
        dfs(i + 1, cpu - g[1], mem - g[2], slots - g[3], spent + g[0])
        chosen.pop()
        dfs(i + 1, cpu, mem, slots, spent)

    dfs(0, *need, 0.0)
    return (best[0][0], best[0][2]) if best else None


def gang_tier(pods: int, cpu_m: int, tiers: int) -> int:
    """The gangs order's scavenger class (0 lowest) for a gang of ``pods`` pods: log2 of its pods."""
    return min(max(pods - 1, 0).bit_length(), tiers - 1)


# == the workload model ========================================================================
@dataclass(frozen=True, slots=True)
class Params:
    nodes: int = 48
    node_cpu: int = 32  # cores; memory is 4 GiB per core
    load: float = 0.55  # mean share of the cluster's cpu that ordinary pods request
    hours: float = 24.0
    warmup: float = 4.0  # hours before the day, not counted
    checkpoint: float = 10.0  # minutes of compute between checkpoints
    segment: float = 10.0  # minutes of compute per segment (a multiple of checkpoint)
    restart: float = 0.5  # minutes lost at every (re)start before computing
    tiers: int = 4
    share: float = 0.7
    sigterm_save: float = 0.0
    planner_interval: float = 1.0  # minutes
    sj_per_hour: float = 4.0
    oracle_budget: int = 50_000  # search steps per node per preemption
    guard: float = 20.0  # the guard order: a PDB holds a gang whose unsaved work is >= this many core-min
    pick: str = "stock"  # "ideal": across nodes, the node whose victims' gangs lose least (a diagnostic)
    boundary: str = "exit"  # "exit": right after a checkpoint; "sigterm": at --segment after the pod started
    placement: str = "spread"  # "pack": scavenger pods bound where choose_starts placed them (best fit)
    guard_keep: float = 0.0  # diagnostic: guard every running gang but this share, the least unsaved (rank)
    guard_node: float = 0.0  # diagnostic: per node, leave unguarded the least-unsaved gangs until this many cores
    guard_tiers: bool = False  # diagnostic: guard plus scavenger classes by the gang's cores (1-2, 3-8, 9+)
    gated: str = "batch"  # whose room the reconciler takes (victims, combined): "batch", "all" or "none"
    victim_restart: float = 0.5  # the restart the reconciler's victim choice assumes (minutes; it cannot see it)


@dataclass(frozen=True, slots=True)
class OrdinaryJob:
    arrival: float  # minutes
    pods: int
    cpu_m: int
    mem_b: int
    duration: float
    priority: int


@dataclass(frozen=True, slots=True)
class SJSpec:
    id: int
    arrival: float
    pods: int
    cpu_m: int
    mem_b: int
    work: float  # minutes of compute to finish
    sigterm_save: bool


def _weighted(rng: random.Random, table: Sequence[tuple[float, float]]) -> float:
    r = rng.random() * sum(w for _, w in table)
    for value, w in table:
        r -= w
        if r < 0:
            return value
    return table[-1][0]


POD_COUNTS = ((1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1))
POD_CPUS = ((1, 0.3), (2, 0.25), (4, 0.2), (8, 0.15), (16, 0.1))
GIB_PER_CPU = ((2, 1.0), (4, 1.0), (8, 1.0))
SJ_PODS = ((1, 0.5), (2, 0.25), (4, 0.25))
SJ_CPUS = ((1, 0.2), (2, 0.3), (4, 0.3), (8, 0.2))


def _ordinary_job(rng: random.Random, arrival: float, node_mem_gib: int) -> OrdinaryJob:
    interactive = rng.random() < 0.25
    pods = int(_weighted(rng, POD_COUNTS))
    cpu = int(_weighted(rng, POD_CPUS))
    mem_gib = min(cpu * int(_weighted(rng, GIB_PER_CPU)), node_mem_gib * 3 // 4)
    median = 20.0 if interactive else 30.0
    duration = min(max(rng.lognormvariate(math.log(median), 1.0), 1.0), 720.0)
    return OrdinaryJob(arrival, pods, cpu * 1000, mem_gib * GI, duration, INTERACTIVE if interactive else BATCH)


def day_profile(minute: float) -> float:
    """Arrival rate relative to the mean: 0.4 at midnight, 1.6 at noon."""
    return 1.0 + 0.6 * math.sin(2 * math.pi * (minute / 1440.0 - 0.25))


def ordinary_trace(p: Params, seed: int) -> list[OrdinaryJob]:
    """The ordinary jobs of the warm-up and the day (thinning a Poisson process)."""
    rng = random.Random(f"ordinary-{seed}")
    node_mem_gib = p.node_cpu * 4
    sample = [_ordinary_job(random.Random(f"size-{seed}-{i}"), 0.0, node_mem_gib) for i in range(4000)]
    core_minutes = statistics.fmean(j.pods * j.cpu_m / 1000 * j.duration for j in sample)
    rate = p.load * p.nodes * p.node_cpu / core_minutes  # jobs per minute, on average
    out = []
    t, end = -p.warmup * 60, p.hours * 60
    peak = rate * 1.6
    while True:
        t += rng.expovariate(peak)
        if t >= end:
            return out
        if rng.random() < day_profile(t) / 1.6:
            out.append(_ordinary_job(rng, t, node_mem_gib))


def scavenger_trace(p: Params, seed: int) -> list[SJSpec]:
    """A backlog that more than fills the share at the start, then arrivals all day."""
    rng = random.Random(f"scavengers-{seed}")
    out: list[SJSpec] = []

    def one(arrival: float) -> SJSpec:
        cpu = int(_weighted(rng, SJ_CPUS))
        return SJSpec(len(out), arrival, int(_weighted(rng, SJ_PODS)), cpu * 1000, cpu * 4 * GI,
                      rng.uniform(180.0, 1800.0), rng.random() < p.sigterm_save)

    cores = 0.0
    while cores < 1.5 * p.share * p.nodes * p.node_cpu:
        sj = one(-p.warmup * 60 + len(out) * 1e-3)
        out.append(sj)
        cores += sj.pods * sj.cpu_m / 1000
    t = -p.warmup * 60
    while True:
        t += rng.expovariate(p.sj_per_hour / 60.0)
        if t >= p.hours * 60:
            return out
        out.append(one(t))


# == the simulation ============================================================================
@dataclass(slots=True, eq=False)
class SJ:
    spec: SJSpec
    interrupted: int = 0
    saved: float = 0.0  # minutes of compute checkpointed
    pods: list[SimPod] = field(default_factory=list)
    run_start: float = 0.0  # the current pods' start
    gen: int = 0  # invalidates scheduled stops
    done: bool = False
    stopped_by: str = ""  # why its last pods went: "", "boundary" or "interruption"

    @property
    def cores(self) -> float:
        return self.spec.pods * self.spec.cpu_m / 1000


@dataclass(slots=True)
class Outcome:
    lost: float = 0.0  # core-minutes of compute since the last checkpoint, thrown away
    restart_interrupted: float = 0.0  # core-minutes of restarts after interruptions
    restart_boundary: float = 0.0  # core-minutes of restarts at segment boundaries
    boundary_lost: float = 0.0  # core-minutes since the last checkpoint thrown away by SIGTERM boundaries
    useful: float = 0.0  # core-minutes of scavenger compute kept
    interruptions: int = 0
    preemptions: int = 0  # preemption decisions that hit at least one scavenger
    completed: int = 0
    ordinary_preempted: int = 0
    ordinary_lost: float = 0.0  # core-minutes of ordinary pods preempted (they start over)
    ordinary_wait: list[float] = field(default_factory=list)
    interrupt_counts: list[int] = field(default_factory=list)
    unplaced: int = 0  # planner said start, the scheduler could not place every pod
    violating: int = 0  # preemptions of scavengers whose victims violate a PodDisruptionBudget (guard)
    violating_lost: float = 0.0  # core-minutes lost in those
    oracle_exhausted: int = 0
    reconciler_picks: int = 0  # preemptions whose victims the reconciler chose (victims, combined)

    @property
    def waste(self) -> float:
        return self.lost + self.restart_interrupted + self.restart_boundary + self.boundary_lost


Order = str  # one of ORDERS
ORDERS: tuple[Order, ...] = ("stock", "segments", "tiers", "gangs", "guard", "oracle", "victims", "declared", "combined")
DEFAULT_ORDER: Order = "combined"  # batchgate's default (issue 25)
SEGMENTED = ("segments", "tiers", "gangs", "guard", "victims")  # pod boundaries at checkpoints
GUARDED = ("guard", "victims", "declared", "combined")  # a PodDisruptionBudget on gangs with unsaved work
RECONCILER = ("victims", "combined")  # the reconciler picks the victims for the work it releases
DECLARED = ("declared", "combined")  # long pods that declare spec.checkpoint.interval


class Sim:
    """One day under one victim order."""

    def __init__(self, p: Params, order: Order, seed: int, jobs: list[OrdinaryJob], sjs: list[SJSpec]) -> None:
        self.p, self.order = p, order
        self.segments = order in SEGMENTED
        self.rng = random.Random(f"scheduler-{seed}")
        self.nodes = [SimNode(f"node-{i:03d}", p.node_cpu * 1000, p.node_cpu * 4 * GI) for i in range(p.nodes)]
        self.by_name = {n.name: n for n in self.nodes}
        self.alloc = {n.name: Room(n.name, n.cpu_m, n.mem_b, n.max_pods) for n in self.nodes}
        self.total = (sum(n.cpu_m for n in self.nodes), sum(n.mem_b for n in self.nodes))
        self.events: list[tuple[float, int, str, object, int]] = []
        self.seq = 0
        self.uid = 0
        self.pending: list[tuple[int, float, int, SimPod, float]] = []  # (-priority, arrival, uid, pod, duration)
        self.ends: dict[int, float] = {}  # ordinary pod uid -> end time
        self.sjs = [SJ(s) for s in sjs]
        self.waiting: set[int] = set()
        self.scav_used = [0, 0]
        self.out = Outcome()
        self.counting = False
        self.dirty = False  # something was freed since pending pods were last tried
        self.plan_dirty = True  # something was freed or arrived since the planner's last pass
        self._where: dict[int, dict[str, int]] = {}
        for j in jobs:
            self._at(j.arrival, "arrive", j)
        for s in self.sjs:
            self._at(s.spec.arrival, "sj-arrive", s)
        t = -p.warmup * 60
        while t < p.hours * 60:
            self._at(t, "plan", None)
            t += p.planner_interval
        self._at(0.0, "count", None)

    # -- plumbing -------------------------------------------------------------------------
    def _at(self, t: float, kind: str, what: object, gen: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, what, gen))

    def _pod(self, owner: Hashable, cpu_m: int, mem_b: int, priority: int) -> SimPod:
        self.uid += 1
        return SimPod(self.uid, owner, cpu_m, mem_b, priority)

    def _score(self, n: SimNode, pod: SimPod) -> float:
        cpu = (n.free_cpu - pod.cpu_m) / n.cpu_m
        mem = (n.free_mem - pod.mem_b) / n.mem_b
        return (cpu + mem) / 2 + 1 - abs(cpu - mem)  # LeastAllocated + BalancedAllocation

    def _place(self, pod: SimPod) -> SimNode | None:
        best: list[SimNode] = []
        top = -1.0
        for n in self.nodes:
            if n.fits(pod):
                s = self._score(n, pod)
                if s > top + 1e-12:
                    best, top = [n], s
                elif s > top - 1e-12:
                    best.append(n)
        if not best:
            return None
        return best[0] if len(best) == 1 else self.rng.choice(best)

    # -- scavengers -----------------------------------------------------------------------
    def _priority(self, sj: SJ) -> int:
        if self.order == "tiers":
            return SCAVENGER + min(sj.interrupted, self.p.tiers - 1)
        if self.order == "gangs":
            return SCAVENGER + gang_tier(sj.spec.pods, sj.spec.pods * sj.spec.cpu_m, self.p.tiers)
        if self.order == "guard" and self.p.guard_tiers:
            return SCAVENGER + min(max(sj.spec.pods * sj.spec.cpu_m // 1000 - 1, 0).bit_length() // 2, 2)
        return SCAVENGER

    def _start(self, sj: SJ, now: float) -> bool:
        """Create and place the gang's pods (all or none); schedule its next stop."""
        pods = [self._pod(sj, sj.spec.cpu_m, sj.spec.mem_b, self._priority(sj)) for _ in range(sj.spec.pods)]
        placed: list[tuple[SimNode, SimPod]] = []
        where = list(self._where.pop(sj.spec.id, {}).items()) if self.p.placement == "pack" else []
        if self.p.placement == "pack" and not where:
            from webhook.reconciler.scavenger import place as _pl
            got = _pl(Need(sj.spec.pods, sj.spec.cpu_m, sj.spec.mem_b),
                      {n.name: Room(n.name, n.free_cpu, n.free_mem, n.max_pods - len(n.pods)) for n in self.nodes})
            where = list((got or {}).items())
        targets = [self.by_name[nm] for nm, k in where for _ in range(k)]
        for i, pod in enumerate(pods):
            pod.pdb = f"sj{sj.spec.id}"
            n = targets[i] if i < len(targets) and targets[i].fits(pod) else self._place(pod)
            if n is None:
                for m, q in placed:
                    m.unbind(q)
                return False
            pod.start = now
            n.bind(pod)
            placed.append((n, pod))
        sj.pods, sj.run_start = pods, now
        self.scav_used[0] += sj.spec.pods * sj.spec.cpu_m
        self.scav_used[1] += sj.spec.pods * sj.spec.mem_b
        self.waiting.discard(sj.spec.id)
        if self.counting and sj.stopped_by:
            restart = self.p.restart * sj.cores
            if sj.stopped_by == "boundary":
                self.out.restart_boundary += restart
            else:
                self.out.restart_interrupted += restart
        left = sj.spec.work - sj.saved
        compute_from = now + self.p.restart
        if self.segments and left > self.p.segment:
            at = now + self.p.segment if self.p.boundary == "sigterm" else compute_from + self.p.segment
            self._at(at, "boundary", sj, sj.gen)
        else:
            self._at(compute_from + left, "sj-done", sj, sj.gen)
        return True

    def _release(self, sj: SJ) -> None:
        self.plan_dirty = True
        for pod in sj.pods:
            if pod.node:
                self.by_name[pod.node].unbind(pod)
        self.scav_used[0] -= sj.spec.pods * sj.spec.cpu_m
        self.scav_used[1] -= sj.spec.pods * sj.spec.mem_b
        sj.pods = []
        sj.gen += 1

    def _unsaved(self, sj: SJ, now: float) -> tuple[float, float]:
        """(compute that a stop now would keep, compute it would lose)."""
        progress = max(0.0, now - sj.run_start - self.p.restart)
        if sj.spec.sigterm_save:
            return progress, 0.0
        if self.order in DECLARED:  # every interval from the container's start: the first one includes the restart
            kept = max(math.floor((now - sj.run_start) / self.p.checkpoint + 1e-9) * self.p.checkpoint
                       - self.p.restart, 0.0)
        else:
            kept = math.floor(progress / self.p.checkpoint + 1e-9) * self.p.checkpoint
        return kept, progress - kept

    def _interrupt(self, sj: SJ, now: float) -> None:
        kept, lost = self._unsaved(sj, now)
        sj.saved += kept
        if self.counting:
            self.out.lost += lost * sj.cores
            self.out.useful += kept * sj.cores
            self.out.interruptions += 1
        sj.interrupted += 1
        sj.stopped_by = "interruption"
        self._release(sj)
        self.waiting.add(sj.spec.id)
        self.dirty = True

    def _budgets(self, now: float) -> dict[str, int] | None:
        """The guard order's PodDisruptionBudgets at ``now`` (one per gang, selecting its pods):
        disruptionsAllowed 0 for every running gang whose compute since its checkpoint, over all
        its pods, is >= ``guard`` core-minutes; the others are not held. Assumes the controller
        and the disruption controller keep them current to the second."""
        if self.order not in GUARDED or self.p.guard < 0:
            return None
        run = [sj for sj in self.sjs if sj.pods]
        if self.order == "guard":  # as issue 14 measured it: the exact unsaved work
            loss = {sj.spec.id: self._unsaved(sj, now)[1] * sj.cores for sj in run}
        else:  # what the reconciler can know: from the pods' start (and the declared interval)
            loss = {sj.spec.id: self._known_unsaved(sj, now) * sj.cores for sj in run}
        if self.p.guard_keep > 0:  # rank: all but the least-unsaved share, cluster-wide
            run.sort(key=lambda s: loss[s.spec.id])
            held = run[int(len(run) * self.p.guard_keep):]
        elif self.p.guard_node > 0:  # per node: the least-unsaved gangs left unguarded up to guard_node cores
            on: dict[str, dict[int, SJ]] = {}
            for sj in run:
                for pod in sj.pods:
                    on.setdefault(pod.node, {})[sj.spec.id] = sj
            free: set[int] = set()
            for name, gangs in on.items():
                room = self.by_name[name].free_cpu
                for sj in sorted(gangs.values(), key=lambda s: loss[s.spec.id]):
                    if room >= self.p.guard_node * 1000:
                        break
                    free.add(sj.spec.id)
                    room += sum(p.cpu_m for p in sj.pods if p.node == name)
            held = [sj for sj in run if sj.spec.id not in free]
        else:
            held = [sj for sj in run if loss[sj.spec.id] >= self.p.guard]
        return {f"sj{sj.spec.id}": 0 for sj in held}

    def _known_unsaved(self, sj: SJ, now: float) -> float:
        """The unsaved minutes the reconciler can know (webhook.reconciler.scavenger.unsaved): since
        the pods' start (the restart included, it cannot see it), over the declared interval for
        long pods; the whole segment for segments."""
        return unsaved(now - sj.run_start, None if self.segments else self.p.checkpoint)

    def _gated(self, pod: SimPod) -> bool:
        """Released by the reconciler (a gated queue): batch work by default (--gated)."""
        return self.p.gated == "all" or (self.p.gated == "batch" and pod.priority == BATCH)

    def _reconciler_victims(self, pod: SimPod, now: float) -> tuple[SimNode, list[Hashable]] | None:
        """The reconciler's choice (webhook.reconciler.scavenger.choose_victims): whole gangs, on
        the node where they lose least by what it can know."""
        holders = []
        by_key: dict[tuple[str, str], SJ] = {}
        for sj in self.sjs:
            if not sj.pods:
                continue
            on: dict[str, tuple[int, int, int]] = {}
            for q in sj.pods:
                c, m, k = on.get(q.node, (0, 0, 0))
                on[q.node] = (c + q.cpu_m, m + q.mem_b, k + 1)
            key = ("sim", str(sj.spec.id))
            by_key[key] = sj
            holders.append(Holder(key, gang_loss(unsaved_s=self._known_unsaved(sj, now), cores=sj.cores,
                                                 restart_s=self.p.victim_restart), on))
        free = {n.name: Room(n.name, n.free_cpu, n.free_mem, n.max_pods - len(n.pods)) for n in self.nodes}
        chosen = choose_victims(Need(1, pod.cpu_m, pod.mem_b), free, holders, budget=self.p.oracle_budget)
        if chosen is None:
            return None
        return self.by_name[chosen.node], [by_key[k] for k in chosen.gangs]

    def _oracle_cost(self, owner: Hashable, now: float) -> float:
        if isinstance(owner, SJ):
            return (self._unsaved(owner, now)[1] + self.p.restart) * owner.cores
        pod = owner
        assert isinstance(pod, SimPod)
        return (now - pod.start) * pod.cpu_m / 1000  # an ordinary pod starts over

    # -- ordinary pods --------------------------------------------------------------------
    def _preempt(self, pod: SimPod, now: float) -> SimNode | None:
        order = self.nodes[:]
        self.rng.shuffle(order)  # Go map order
        victims_owners: list[Hashable]
        violating = False  # the chosen victims include PDB-violating pods (kube-scheduler's own choice only)
        mine = self._reconciler_victims(pod, now) if self.order in RECONCILER and self._gated(pod) else None
        if mine is not None:
            node, victims_owners = mine
            if self.counting:
                self.out.reconciler_picks += 1
        elif self.order == "oracle":
            best: tuple[tuple[int, float, int], str, list[Hashable]] | None = None
            for n in order:
                budget = [self.p.oracle_budget]
                found = oracle_on_node(n, pod, lambda o: self._oracle_cost(o, now), budget)
                if budget[0] <= 0:
                    self.out.oracle_exhausted += 1
                if found is not None and (best is None or found[0] < best[0]):
                    best = (found[0], n.name, found[1])
            if best is None:
                return None
            node, victims_owners = self.by_name[best[1]], best[2]
        elif self.p.pick == "ideal":
            cands = []
            for n in order:
                found = select_victims_on_node(n, pod, self._budgets(now))
                if found is not None and found[0]:
                    owners = list(dict.fromkeys(v.owner for v in found[0]))
                    top = max(v.priority for v in found[0])
                    cost = sum(self._oracle_cost(o, now) for o in owners)
                    cands.append(((top, cost, len(owners)), n.name, owners))
            if not cands:
                return None
            best2 = min(cands, key=lambda c: c[0])
            node, victims_owners = self.by_name[best2[1]], best2[2]
        else:
            budgets = self._budgets(now)
            chosen = stock_preemption(order, pod, budgets)
            if chosen is None:
                return None
            node = self.by_name[chosen[0]]
            victims_owners = list(dict.fromkeys(v.owner for v in chosen[1]))
            violating = bool(budgets) and any(v.pdb in budgets for v in chosen[1])  # type: ignore[operator]
        lost_before = self.out.lost
        hit = False
        for owner in victims_owners:
            if isinstance(owner, SJ):
                self._interrupt(owner, now)
                hit = True
            else:
                assert isinstance(owner, SimPod)
                self._evict_ordinary(owner, now)
        if hit and self.counting:
            self.out.preemptions += 1
            if violating:
                self.out.violating += 1
                self.out.violating_lost += self.out.lost - lost_before
        return node

    def _evict_ordinary(self, pod: SimPod, now: float) -> None:
        self.by_name[pod.node].unbind(pod)
        self.plan_dirty = True
        duration = self.ends.pop(pod.uid) - pod.start
        if self.counting:
            self.out.ordinary_preempted += 1
            self.out.ordinary_lost += (now - pod.start) * pod.cpu_m / 1000
        again = self._pod(None, pod.cpu_m, pod.mem_b, pod.priority)
        again.owner = again
        bisect.insort(self.pending, (-again.priority, now, again.uid, again, duration))

    def _schedule_pending(self, now: float) -> None:
        keep = []
        for item in self.pending:
            _, arrival, _, pod, duration = item
            node = self._place(pod) or self._preempt(pod, now)
            if node is None:
                keep.append(item)
                continue
            assert node.fits(pod)
            pod.start = now
            node.bind(pod)
            self.ends[pod.uid] = now + duration
            self._at(now + duration, "pod-end", pod)
            if self.counting:
                self.out.ordinary_wait.append(now - arrival)
        self.pending = keep

    # -- the run --------------------------------------------------------------------------
    def _plan(self, now: float) -> None:
        """The controller's pass. Skipped when it could not start anything (nothing freed or
        arrived since the last pass, or no node with room for the smallest waiting pod):
        choose_starts would decide the same, only slower."""
        if not self.waiting or not self.plan_dirty:
            return
        self.plan_dirty = False
        holes = [(n.free_cpu, n.free_mem, n.max_pods - len(n.pods)) for n in self.nodes
                 if n.free_cpu > 0 and n.free_mem > 0 and len(n.pods) < n.max_pods]
        cap_cpu, cap_mem = cap_room(self.total, (self.scav_used[0], self.scav_used[1]), self.p.share)

        def could_start(s: SJSpec) -> bool:
            if s.pods * s.cpu_m > cap_cpu or s.pods * s.mem_b > cap_mem:
                return False
            room = 0
            for c, m, slots in holes:
                room += min(c // s.cpu_m, m // s.mem_b, slots)
                if room >= s.pods:
                    return True
            return False

        # Only those under the cap whose pods all fit now: the others cannot start, and in
        # choose_starts one that does not start changes nothing for the rest (backfill).
        maybe = [i for i in self.waiting if could_start(self.sjs[i].spec)]
        if not maybe:
            return
        free = {n.name: Room(n.name, n.free_cpu, n.free_mem, n.max_pods - len(n.pods)) for n in self.nodes}
        by_key = {("sim", f"sj-{i:05d}"): self.sjs[i] for i in maybe}
        waiting = [Waiting(k, s.interrupted, s.spec.arrival * 60, Need(s.spec.pods, s.spec.cpu_m, s.spec.mem_b))
                   for k, s in by_key.items()]
        for d in choose_starts(waiting, free, self.alloc, (self.scav_used[0], self.scav_used[1]), self.p.share):
            if d.kind == "start" and d.placement is not None:
                self._where[by_key[d.waiting.key].spec.id] = dict(d.placement)
            if d.kind == "start" and not self._start(by_key[d.waiting.key], now):
                self.out.unplaced += 1

    def run(self) -> Outcome:
        end = self.p.hours * 60
        while self.events:
            t, _, kind, what, gen = heapq.heappop(self.events)
            if t >= end:
                break
            if kind == "arrive":
                job = what
                assert isinstance(job, OrdinaryJob)
                for _ in range(job.pods):
                    pod = self._pod(None, job.cpu_m, job.mem_b, job.priority)
                    pod.owner = pod
                    bisect.insort(self.pending, (-pod.priority, t, pod.uid, pod, job.duration))
                self._schedule_pending(t)
            elif kind == "pod-end":
                pod = what
                assert isinstance(pod, SimPod)
                if self.ends.get(pod.uid) == t:
                    del self.ends[pod.uid]
                    self.by_name[pod.node].unbind(pod)
                    self.dirty = self.plan_dirty = True
            elif kind in ("boundary", "sj-done"):
                sj = what
                assert isinstance(sj, SJ)
                if gen != sj.gen:
                    continue
                kept = t - sj.run_start - self.p.restart
                if kind == "boundary" and self.p.boundary == "sigterm":
                    kept, thrown = self._unsaved(sj, t)  # SIGTERM at duration: since the last checkpoint is lost
                    if self.counting:
                        self.out.boundary_lost += thrown * sj.cores
                sj.saved += kept
                if self.counting:
                    self.out.useful += kept * sj.cores
                self._release(sj)
                if kind == "sj-done" or sj.saved >= sj.spec.work - 1e-9:
                    sj.done = True
                    if self.counting:
                        self.out.completed += 1
                else:  # the next segment at once, where it fits; else it waits its turn
                    sj.stopped_by = "boundary"
                    self._schedule_pending(t)  # pending ordinary pods come first
                    if not self._start(sj, t):
                        self.waiting.add(sj.spec.id)
                    continue
                self.dirty = True
            elif kind == "sj-arrive":
                sj = what
                assert isinstance(sj, SJ)
                self.waiting.add(sj.spec.id)
                self.plan_dirty = True
            elif kind == "plan":
                if self.dirty and self.pending:
                    self._schedule_pending(t)
                self.dirty = False
                self._plan(t)
            elif kind == "count":
                self.counting = True
        self.out.interrupt_counts = [s.interrupted for s in self.sjs if s.spec.arrival < end]
        return self.out


def simulate(p: Params, order: Order, seed: int) -> Outcome:
    return Sim(p, order, seed, ordinary_trace(p, seed), scavenger_trace(p, seed)).run()


# == reporting =================================================================================
def _h(core_minutes: float) -> float:
    return core_minutes / 60.0


def _simulate(args: tuple[Params, Order, int]) -> Outcome:
    return simulate(*args)


def run_days(p: Params, seeds: Sequence[int], orders: Sequence[Order], *, jobs: int = 1) -> dict[Order, list[Outcome]]:
    """Every order (stock first) over the same days, in ``jobs`` processes."""
    orders = ["stock", *[o for o in orders if o != "stock"]]
    work = [(p, o, seed) for seed in seeds for o in orders]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            done = list(pool.map(_simulate, work))
    else:
        done = [_simulate(w) for w in work]
    results: dict[Order, list[Outcome]] = {o: [] for o in orders}
    for (_, o, _), r in zip(work, done, strict=True):
        results[o].append(r)
    return results


def summary(results: dict[Order, list[Outcome]]) -> dict[str, dict[str, object]]:
    """Per order, its days against the stock order's (mean, min, max of the days' ratios) and its
    own daily means; ``default`` marks batchgate's default order. What ``--json`` prints."""
    stock = results["stock"]
    out: dict[str, dict[str, object]] = {}
    for o, rs in results.items():
        def stat(f: Callable[[Outcome], float], rs: list[Outcome] = rs) -> dict[str, float] | None:
            xs = [f(r) / f(b) for r, b in zip(rs, stock, strict=True) if f(b)]
            if not xs:
                return None  # nothing to compare with (a day with no preemption)
            return {"mean": round(statistics.fmean(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}

        n = len(rs)
        out[o] = {
            "lost_vs_stock": stat(lambda r: r.lost), "waste_vs_stock": stat(lambda r: r.waste),
            "useful_vs_stock": stat(lambda r: r.useful),
            "lost_core_h": round(_h(sum(r.lost for r in rs) / n), 1),
            "restarts_core_h": round(_h(sum(r.restart_interrupted + r.restart_boundary for r in rs) / n), 1),
            "waste_core_h": round(_h(sum(r.waste for r in rs) / n), 1),
            "useful_core_h": round(_h(sum(r.useful for r in rs) / n), 1),
            "interruptions": round(sum(r.interruptions for r in rs) / n, 1),
            "reconciler_picks": round(sum(r.reconciler_picks for r in rs) / n, 1),
            "default": o == DEFAULT_ORDER,
        }
    return out


ORDER_LABELS = {
    "stock": "stock (a): long pods, kube-scheduler's victims",
    "segments": "segments (b): a pod boundary at each checkpoint",
    "tiers": "tiers (c)", "gangs": "gangs (f)",
    "guard": "guard (e): segments + PodDisruptionBudgets, the default before issue 25",
    "oracle": "oracle (d): long pods, the gangs that lose least (all work)",
    "victims": "victims: guard + the reconciler picks the victims of batch work",
    "declared": "declared: long pods (spec.checkpoint.interval) + the guard",
    "combined": "combined: declared + the reconciler picks the victims",
}


def markdown(doc: dict[str, object]) -> str:
    """The README's tables, from ``--json``'s output."""
    def cell(d: object) -> str:
        if not isinstance(d, dict):
            return "-"
        return f"{d['mean']:.2f} ({d['min']:.2f}..{d['max']:.2f})"

    lines = ["| order | lost vs stock | waste vs stock | useful vs stock | lost, core-h | restarts, core-h | waste, "
             "core-h | useful, core-h | interruptions |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    orders = doc["orders"]
    assert isinstance(orders, dict)
    for o, r in orders.items():
        name = ORDER_LABELS.get(o, o) + (", **batchgate's default**" if r["default"] else "")
        lines.append(f"| {name} | {cell(r['lost_vs_stock'])} | {cell(r['waste_vs_stock'])} | "
                     f"{cell(r['useful_vs_stock'])} | {r['lost_core_h']:,.0f} | {r['restarts_core_h']:,.0f} | "
                     f"{r['waste_core_h']:,.0f} | {r['useful_core_h']:,.0f} | {r['interruptions']:,.0f} |")
    sweep = doc.get("by_restart_s")
    if isinstance(sweep, dict) and len(sweep) > 1:
        lines += ["", "| restart | order | lost vs stock | waste vs stock | useful vs stock |",
                  "| ---: | --- | ---: | ---: | ---: |"]
        for restart, by_order in sweep.items():
            for o, r in by_order.items():
                if o != "stock":
                    lines.append(f"| {restart} s | {o}{' (default)' if r['default'] else ''} | "
                                 f"{cell(r['lost_vs_stock'])} | {cell(r['waste_vs_stock'])} | "
                                 f"{cell(r['useful_vs_stock'])} |")
    return "\n".join(lines)


def compare(p: Params, seeds: Sequence[int], orders: Sequence[Order] = ORDERS, *,
            out: Callable[[str], None] = print, jobs: int = 1,
            results: dict[Order, list[Outcome]] | None = None) -> dict[Order, list[Outcome]]:
    """Every order over the same days; per day means, and each order's ratio to the stock order
    day by day (mean, min..max over the seeds)."""
    if results is None:
        results = run_days(p, seeds, orders, jobs=jobs)
    orders = list(results)
    stock = results["stock"]

    def ratio(rs: list[Outcome], f: Callable[[Outcome], float]) -> str:
        xs = [f(r) / f(b) for r, b in zip(rs, stock, strict=True) if f(b)]
        if not xs:
            return "-"
        return f"{statistics.fmean(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})" if len(xs) > 1 else f"{xs[0]:.2f}"

    out(f"{'order':<9} {'lost core-h':>11} {'lost vs stock':>17} {'boundary loss':>13} {'restarts':>14} "
        f"{'waste core-h':>12} {'waste vs stock':>17} {'interruptions':>13} {'loss/interr.':>12} {'useful core-h':>13} "
        f"{'done':>5}")
    for o in orders:
        rs = results[o]
        n = len(rs)

        def mean(f: Callable[[Outcome], float], rs: list[Outcome] = rs, n: int = n) -> float:
            return sum(f(r) for r in rs) / n

        interruptions = sum(r.interruptions for r in rs)
        out(f"{o:<9} {_h(mean(lambda r: r.lost)):>11.0f} {ratio(rs, lambda r: r.lost):>17} "
            f"{_h(mean(lambda r: r.boundary_lost)):>13.0f} "
            f"{_h(mean(lambda r: r.restart_interrupted)):>6.0f} + {_h(mean(lambda r: r.restart_boundary)):>5.0f} "
            f"{_h(mean(lambda r: r.waste)):>12.0f} {ratio(rs, lambda r: r.waste):>17} {interruptions / n:>13.0f} "
            f"{sum(r.lost for r in rs) / interruptions if interruptions else 0:>12.1f} "
            f"{_h(mean(lambda r: r.useful)):>13.0f} {sum(r.completed for r in rs) / n:>5.1f}")
    out("(per day, mean of seeds " + ",".join(str(x) for x in seeds) + "; ratios: mean (min..max) of the days' "
        "ratios; restarts = after interruptions + at boundaries; loss/interr. in core-min)")
    for o in orders:
        rs = results[o]
        picks, hits = sum(r.violating for r in rs), sum(r.preemptions for r in rs)
        if picks:
            lost = sum(r.violating_lost for r in rs)
            out(f"{o}: {picks / len(rs):.0f} preemptions a day ({picks / hits:.0%}) found no node without a "
                f"PDB-violating victim; they lost {_h(lost / len(rs)):.0f} core-h a day "
                f"({lost / sum(r.lost for r in rs):.0%} of the loss; {lost / picks:.0f} core-min each, the others "
                f"{(sum(r.lost for r in rs) - lost) / max(hits - picks, 1):.0f})")
    return results


def per_seed(results: dict[Order, list[Outcome]], *, out: Callable[[str], None] = print) -> None:
    out("lost core-h per seed: " + "; ".join(
        f"{o} " + " ".join(f"{_h(r.lost):.0f}" for r in rs) for o, rs in results.items()))


# == one planning pass =========================================================================
def planning_pass_fixture(n_sjs: int = 1000, n_pods: int = 10_000, n_nodes: int = 500) -> tuple[
        list[Waiting], list[tuple[str, int, int]], dict[str, Room], tuple[int, int]]:
    """A busy cluster: 500 nodes of 64 cores, 10,000 pods requesting 94 % of the cpu (a third
    of the ScavengerJobs are running among them, 20 % of the pods), and the other two thirds
    of 1,000 ScavengerJobs waiting; about half of those fit, the others have no room (the
    slow path: each looks at every node)."""
    rng = random.Random("planning-pass")
    alloc = {f"node-{i:04d}": Room(f"node-{i:04d}", 64_000, 256 * GI, MAX_PODS) for i in range(n_nodes)}
    names = list(alloc)
    pods = [(names[i % n_nodes], rng.choice((2000, 3000, 4000)), rng.choice((2, 4, 8)) * GI)
            for i in range(n_pods)]
    waiting = [Waiting((f"team-{i % 20}", f"sj-{i:05d}"), rng.choice((0, 0, 0, 1, 2, 5)), 1.7e9 + i,
                       Need(rng.choice((1, 1, 2, 4)), rng.choice((1000, 2000, 4000, 8000)), rng.choice((2, 4, 8)) * GI))
               for i in range(n_sjs * 2 // 3)]
    used = (sum(c for _, c, _ in pods[: n_pods // 5]), sum(m for _, _, m in pods[: n_pods // 5]))
    return waiting, pods, alloc, used


def planning_pass(waiting: list[Waiting], pods: list[tuple[str, int, int]], alloc: dict[str, Room],
                  used: tuple[int, int]) -> int:
    """Free room per node from the pods' requests, then the start decisions."""
    cpu = dict.fromkeys(alloc, 0)
    mem = dict.fromkeys(alloc, 0)
    count = dict.fromkeys(alloc, 0)
    for node, c, m in pods:
        cpu[node] += c
        mem[node] += m
        count[node] += 1
    free = {n: Room(n, r.cpu_m - cpu[n], r.mem_b - mem[n], r.pods - count[n]) for n, r in alloc.items()}
    return sum(d.kind == "start" for d in choose_starts(waiting, free, alloc, used, 0.7))


def controller_snapshot(n_sjs: int = 1000, n_pods: int = 10_000, n_nodes: int = 500) -> tuple[object, float]:
    """The same busy cluster as the reconciler's cache would hold it: 500 Nodes, 1,000
    ScavengerJobs (a third running a segment with their Jobs and pods, the rest waiting), and
    ordinary pods up to 10,000 pods in all; views built by the model's own converters."""
    from webhook.contract import SCAVENGERJOB_LABEL, SEGMENT_LABEL
    from webhook.reconciler.model import (
        Snapshot,
        job_view,
        node_view,
        pod_view,
    )
    from webhook.reconciler.scavenger import job_name, sj_view
    from webhook.units import format_time

    rng = random.Random("planning-pass")
    now = 1.7e9
    nodes = [node_view({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:04d}", "uid": f"n{i}"},
                        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}) for i in range(n_nodes)]
    sjs, jobs, pods = [], [], []

    def pod_obj(name: str, ns: str, cpu: int, mem_gib: int, labels: dict[str, str], owner: dict[str, object] | None,
                prio: int) -> dict[str, object]:
        md: dict[str, object] = {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": labels,
                                 "creationTimestamp": format_time(now - 900)}
        if owner:
            md["ownerReferences"] = [owner]
        res = {"cpu": f"{cpu}m", "memory": f"{mem_gib}Gi"}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
                "spec": {"nodeName": f"node-{len(pods) % n_nodes:04d}", "priority": prio,
                         # what admission stores: the class (a pod is a scavenger by it, not by its label)
                         "priorityClassName": "batchgate-scavenger" if prio == SCAVENGER else "batchgate-batch",
                         "containers": [{"name": "main", "image": "x", "resources": {"requests": res, "limits": res}}]},
                "status": {"phase": "Running", "startTime": format_time(now - 600),
                           "containerStatuses": [{"name": "main", "state": {"running": {
                               "startedAt": format_time(now - 600)}}}]}}

    for i in range(n_sjs):
        ns, name = f"team-{i % 20}", f"sj-{i:05d}"
        n_p, cpu, mem = rng.choice((1, 1, 2, 4)), rng.choice((1000, 2000, 4000, 8000)), rng.choice((2, 4, 8))
        spec = {"image": "registry.example.org/sim:1", "command": ["sim"], "runAsUser": 1000, "pods": n_p,
                "resources": {"limits": {"cpu": f"{cpu}m", "memory": f"{mem}Gi"}}, "duration": "30m"}
        md = {"name": name, "namespace": ns, "uid": f"uid-{name}", "generation": 1,
              "creationTimestamp": format_time(now - 86400 + i)}
        count = rng.choice((0, 0, 0, 1, 2, 5))
        if i % 3:
            status = {"phase": "Interrupted" if count else "Pending", "interruptedCount": count, "segment": 0,
                      "observedGeneration": 1}
        else:
            jn = job_name(name, 1)
            status = {"phase": "Running", "interruptedCount": count, "segment": 1, "runningSegment": 1,
                      "jobName": jn, "priorityStartOverTimestamp": format_time(now - 600),
                      "runningTimestamps": [format_time(now - 600)], "observedGeneration": 1}
            labels = {SCAVENGERJOB_LABEL: name, SEGMENT_LABEL: "1", "batchgate.io/queue": "scavenger"}
            jobs.append(job_view({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": jn, "namespace": ns, "uid": f"uid-{jn}", "labels": labels,
                "creationTimestamp": format_time(now - 620),
                "ownerReferences": [{"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "name": name,
                                     "uid": f"uid-{name}", "controller": True}]},
                "spec": {"parallelism": n_p, "completions": n_p, "template": {"metadata": {"labels": labels}}}}))
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": jn, "uid": f"uid-{jn}", "controller": True}
            for k in range(n_p):
                pods.append(pod_view(pod_obj(f"{jn}-{k}", ns, cpu, mem, labels, owner, SCAVENGER)))
        sjs.append(sj_view({"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "metadata": md,
                            "spec": spec, "status": status}))
    while len(pods) < n_pods:
        i = len(pods)
        pods.append(pod_view(pod_obj(f"work-{i}", f"team-{i % 20}", rng.choice((2000, 3000, 4000)),
                                     rng.choice((2, 4, 8)), {"batchgate.io/queue": "batch"}, None, BATCH)))
    return Snapshot.of(pods=pods, jobs=jobs, nodes=nodes, scavenger_jobs=sjs), now


def time_controller_pass(rounds: int = 20, *, out: Callable[[str], None] = print) -> float:
    """CPU time of the controller's own pure pass, plan_scavengers(snapshot, now, settings)."""
    from webhook.reconciler.scavenger import plan_scavengers
    from webhook.reconciler.settings import Settings

    snap, now = controller_snapshot()
    settings = Settings(leader_elect=False)
    actions, _ = plan_scavengers(snap, now, settings)  # type: ignore[arg-type]
    kinds: dict[str, int] = {}
    for act in actions:
        kinds[act.kind] = kinds.get(act.kind, 0) + 1
    samples = []
    gc.disable()
    try:
        for _ in range(rounds):
            t0 = time.process_time()
            plan_scavengers(snap, now, settings)  # type: ignore[arg-type]
            samples.append((time.process_time() - t0) * 1000)
    finally:
        gc.enable()
    out(f"plan_scavengers over 1,000 ScavengerJobs (334 running, 666 waiting), 10,000 pods, 500 nodes "
        f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}): {min(samples):.1f} ms CPU best, "
        f"{statistics.median(samples):.1f} ms median of {rounds}")
    return statistics.median(samples)


def time_planning_pass(rounds: int = 30, *, out: Callable[[str], None] = print) -> float:
    fixture = planning_pass_fixture()
    started = planning_pass(*fixture)
    samples = []
    gc.disable()
    try:
        for _ in range(rounds):
            t0 = time.process_time()
            planning_pass(*fixture)
            samples.append((time.process_time() - t0) * 1000)
    finally:
        gc.enable()
    out(f"planning pass (free room from 10,000 pods on 500 nodes, then choose_starts over 667 waiting of "
        f"1,000 ScavengerJobs, {started} start): {min(samples):.1f} ms CPU best, "
        f"{statistics.median(samples):.1f} ms median of {rounds}")
    return statistics.median(samples)


# == CLI =======================================================================================
def _params(a: argparse.Namespace) -> Params:
    return Params(nodes=a.nodes, load=a.load, checkpoint=a.checkpoint, segment=a.segment, restart=a.restart,
                  tiers=a.tiers, share=a.share, sigterm_save=a.sigterm_save, hours=a.hours, warmup=a.warmup,
                  guard=a.guard, boundary=a.boundary, pick="ideal" if a.ideal_node_pick else "stock",
                  placement=a.placement, guard_keep=a.guard_keep, guard_node=a.guard_node, guard_tiers=a.guard_tiers,
                  gated=a.gated)


def _json(p: Params, seeds: list[int], orders: list[Order], a: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    others = sorted({float(x) for x in a.restarts.split(",") if x.strip()} - {p.restart * 60})
    restarts = [p.restart * 60, *others]  # the main figure first
    by: dict[str, dict[str, dict[str, object]]] = {}
    sweep_orders = [o.strip() for o in a.sweep_orders.split(",") if o.strip()] or orders
    for r in restarts:
        results = run_days(replace(p, restart=r / 60), seeds, orders if r == p.restart * 60 else sweep_orders,
                           jobs=a.jobs)
        compare(p, seeds, out=lambda line: print(line, file=sys.stderr), results=results)
        by[f"{r:g}"] = summary(results)
    doc = {"seeds": seeds, "params": asdict(p), "default": DEFAULT_ORDER, "restart_s": p.restart * 60,
           "orders": by[f"{p.restart * 60:g}"], "by_restart_s": dict(sorted(by.items(), key=lambda kv: float(kv[0])))}
    print(json.dumps(doc, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="days simulated per order, seeds 1..N (default 5)")
    ap.add_argument("--nodes", type=int, default=48)
    ap.add_argument("--load", type=float, default=0.55, help="mean share of cpu ordinary pods request (default 0.55)")
    ap.add_argument("--checkpoint", type=float, default=10.0, help="minutes of compute between checkpoints (10)")
    ap.add_argument("--segment", type=float, default=10.0, help="minutes of compute per segment, a multiple of --checkpoint (10)")
    ap.add_argument("--restart", type=float, default=0.5, help="minutes lost at each (re)start (0.5)")
    ap.add_argument("--tiers", type=int, default=4, help="scavenger classes for the tiers order (4)")
    ap.add_argument("--share", type=float, default=0.7, help="the scavengers' cap (0.7)")
    ap.add_argument("--sigterm-save", type=float, default=0.0, help="share of workloads that save on SIGTERM (0)")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--guard", type=float, default=20.0,
                    help="guard order: hold a gang with a PDB from this many core-minutes of unsaved work (20)")
    ap.add_argument("--boundary", choices=("exit", "sigterm"), default="exit",
                    help="segments end right after a checkpoint (exit, default) or at --segment after start (sigterm)")
    ap.add_argument("--ideal-node-pick", action="store_true",
                    help="diagnostic: across nodes, pick the one whose victims' gangs lose least")
    ap.add_argument("--placement", choices=("spread", "pack"), default="spread",
                    help="scavenger pods: kube-scheduler's spreading score (default) or the planner's best fit")
    ap.add_argument("--guard-keep", type=float, default=0.0, metavar="SHARE",
                    help="diagnostic: the guard order holds every running gang but this share, the least unsaved")
    ap.add_argument("--guard-node", type=float, default=0.0, metavar="CORES",
                    help="diagnostic: the guard order leaves unguarded, per node, the least-unsaved gangs up to "
                         "CORES of room (free included) and holds the rest")
    ap.add_argument("--guard-tiers", action="store_true",
                    help="diagnostic: the guard order plus scavenger classes by the gang's cores (1-2, 3-8, 9+)")
    ap.add_argument("--gated", choices=("batch", "all", "none"), default="batch",
                    help="victims, combined: whose room the reconciler takes (batch work: gated by default; "
                         "interactive work is left to kube-scheduler's preemption and the guard)")
    ap.add_argument("--orders", default=",".join(ORDERS), help=f"orders to compare (default {','.join(ORDERS)})")
    ap.add_argument("--json", action="store_true",
                    help="print the comparison as JSON (per order, lost/waste/useful vs stock: mean, min, max over "
                         "the seeds; the default order marked) instead of the tables")
    ap.add_argument("--restarts", default="",
                    help="also under these restart costs, seconds, comma-separated (e.g. 10,30,120): by_restart_s")
    ap.add_argument("--sweep-orders", default="", help="the orders for the other --restarts (default: --orders)")
    ap.add_argument("--markdown", metavar="JSON", help="print the README's tables from a saved --json output")
    ap.add_argument("--jobs", type=int, default=1, help="processes to simulate in (1)")
    ap.add_argument("--sweep", action="store_true", help="also run other checkpoint / segment / restart settings")
    ap.add_argument("--planning-pass", action="store_true", help="only time one planning pass")
    a = ap.parse_args(argv)
    if a.markdown:
        import json

        print(markdown(json.loads(Path(a.markdown).read_text())))
        return 0
    if a.planning_pass:
        time_controller_pass()
        time_planning_pass()
        return 0
    if a.segment < a.checkpoint or abs(a.segment / a.checkpoint - round(a.segment / a.checkpoint)) > 1e-9:
        ap.error("--segment must be a multiple of --checkpoint")
    p = _params(a)
    seeds = list(range(1, a.seeds + 1))
    print(f"{p.nodes} nodes x {p.node_cpu} cores, ordinary load {p.load:.0%} of cpu on average, scavengers capped "
          f"at {p.share:.0%}; checkpoint every {p.checkpoint:g} min, segments of {p.segment:g} min, restart "
          f"{p.restart:g} min, boundaries {'right after a checkpoint' if p.boundary == 'exit' else 'by SIGTERM'}, "
          f"{p.tiers} tiers, guard from {p.guard:g} core-min, placement {p.placement}"
          f"{', ideal node pick' if p.pick == 'ideal' else ''}; {p.hours:g} h after {p.warmup:g} h of warm-up; "
          f"{len(seeds)} seeds", file=sys.stderr if a.json else sys.stdout)
    t0 = time.process_time()
    orders = [o.strip() for o in a.orders.split(",") if o.strip()]
    bad = [o for o in orders if o not in ORDERS]
    if bad:
        ap.error(f"--orders: unknown {', '.join(bad)} (known: {', '.join(ORDERS)})")
    if a.json:
        return _json(p, seeds, orders, a)
    results = compare(p, seeds, orders, jobs=a.jobs)
    per_seed(results)
    if a.sweep:
        for change in ({"checkpoint": 10.0, "segment": 30.0}, {"checkpoint": 30.0, "segment": 30.0},
                       {"checkpoint": 5.0, "segment": 5.0}, {"restart": 2.0}, {"tiers": 2},
                       {"load": 0.7}, {"sigterm_save": 1.0}, {"boundary": "sigterm", "segment": 30.0}):
            q = replace(p, **change)  # type: ignore[arg-type]
            print(f"\n-- {', '.join(f'{k}={v}' for k, v in change.items())}")
            compare(q, seeds, orders)
    print(f"(simulation: {time.process_time() - t0:.1f} s CPU)")
    time_controller_pass()
    time_planning_pass()
    return 0


if __name__ == "__main__":
    sys.exit(main())
