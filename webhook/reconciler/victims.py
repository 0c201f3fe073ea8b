"""Which scavengers make room for released work: the reconciler chooses, not kube-scheduler.

When the queue releases ordinary work that fits only on room scavengers hold, kube-scheduler would
preempt by its own rules, node by node: the fewest and lowest-priority victims on one node, the
latest started first. It cannot see what batchgate knows: a scavenger's unsaved work (core-seconds
since its last checkpoint), that a gang spans nodes and goes whole, that a node will be drained for
maintenance soon anyway. Here the planner picks the whole gangs that lose least for the room the
workload needs, on the nodes it may use; the actions then (1) delete the victims' pods with a
``DisruptionTarget`` condition saying why (an interruption of the ScavengerJob, which waits and
resumes from its checkpoint), (2) narrow the waiting workload's required node affinity to the nodes
chosen (allowed while a pod is gated or a Job suspended and never started), and (3) release it; so
kube-scheduler binds it where the room was made. Pure: no I/O, no clock.

Cost of a gang (``scavenger.gang_loss``, the one rule, which bench/scavenger_sim.py and the guard
use too): its unsaved core-seconds plus a restart's worth (``RESTART_COST`` seconds of its cores).
A gang on a node whose maintenance window starts within ``scavenger.SOON`` is interrupted then
anyway, paying the restart and losing what it has not saved by then: taking it now costs only the
work it would have saved at its checkpoints before the drain (a declared ``checkpoint.interval``, or
the end of its segment), and nothing when it reaches none. Not "nothing" whenever a window is near (the rule before): a gang
about to checkpoint 50 minutes before its drain still has that work to save; the simulator always
charged it, and the two now agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..windows import Window
from .model import NodeView, PodSched, PodView, Ref, Snapshot, job_of
from .scavenger import drain_in, gang_loss, sj_owner
from .scavenger import unsaved as unsaved_since
from .shadow import matches

RESTART_COST = 30.0  # seconds of a gang's cores a restart costs (image pull, startup, reading the checkpoint)


@dataclass(frozen=True, slots=True)
class Gang:
    """Scavenger pods that go together: a ScavengerJob's running segment, a pod group, a pod."""

    ref: Ref  # the ScavengerJob, else the first pod
    pods: tuple[PodView, ...]
    unsaved: float  # core-seconds since its last checkpoint
    cost: float


@dataclass(slots=True)
class Choice:
    nodes: tuple[str, ...]  # where the workload's pods go
    evict: tuple[Gang, ...]  # whole gangs, cheapest first
    cost: float = 0.0


@dataclass(slots=True)
class Room:
    """Free room per node after what runs, with the scavengers' part of it told apart."""

    free: dict[str, list[int]]  # node -> [cpu, mem] free now
    gangs: list[Gang]
    on: dict[str, list[int]] = field(default_factory=dict)  # node -> indexes of gangs with pods there
    evicted: set[int] = field(default_factory=set)


def scavenger_gangs(snapshot: Snapshot, now: float, below: int, windows: Iterable[Window],
                    start_over: Mapping[str, float] | None = None,
                    intervals: Mapping[str, float] | None = None,
                    periods: Mapping[str, float | None] | None = None) -> list[Gang]:
    """Running pods with a priority below ``below`` (the scavengers), as gangs. ``start_over``:
    a ScavengerJob's uid -> its running segment's start (its last checkpoint), from its status;
    ``intervals``: its declared ``spec.checkpoint.interval`` (one long pod: the unsaved work is the
    time since the last multiple of it, not since the start); ``periods``: how often it checkpoints
    (``scavenger.checkpoint_period``: the interval, or its segments' duration), for a coming drain."""
    windows = list(windows)
    groups: dict[tuple[str, ...], list[PodView]] = {}
    owners: dict[tuple[str, ...], Ref] = {}
    for p in snapshot.pods.values():
        if not p.node or p.terminal or p.deleting or p.sched is None or p.sched.priority >= below:
            continue
        # its own Job (``job_of``: a pod naming another namespace's Job uid is none of its pods), run
        # by a ScavengerJob the reconciler sees, with the name and uid the Job's ownerReference
        # names: a Job claiming another's uid is no part of its gang (issue 27)
        job = job_of(snapshot, p)
        sj = sj_owner(job, snapshot) if job is not None else None
        if sj is not None:
            key: tuple[str, ...] = ("sj", sj.ref.uid)
            owners[key] = sj.ref
        elif p.group:
            key = ("group", p.ref.namespace, p.group)
        else:
            key = ("pod", p.ref.uid)
        groups.setdefault(key, []).append(p)
        owners.setdefault(key, p.ref)
    out = []
    for key, pods in groups.items():
        since = (start_over or {}).get(key[1]) if key[0] == "sj" else None
        interval = (intervals or {}).get(key[1]) if key[0] == "sj" else None
        period = (periods or {}).get(key[1]) if key[0] == "sj" else None
        drain = drain_in(pods, snapshot.nodes, windows, now)
        unsaved = cost = 0.0
        for p in pods:
            c = p.cpu_m / 1000
            began = since if since is not None else (p.started if p.started is not None else now)
            u = unsaved_since(now - began, interval)
            unsaved += c * u
            cost += gang_loss(unsaved_s=u, cores=c, restart_s=RESTART_COST, interval=period, drain_in=drain)
        out.append(Gang(owners[key], tuple(sorted(pods, key=lambda p: p.ref.name)), unsaved, cost))
    return sorted(out, key=lambda g: (g.cost, len(g.pods), g.ref.namespace, g.ref.name))


def room(snapshot: Snapshot, gangs: Sequence[Gang]) -> Room:
    """Free room on each ready, schedulable node after every running pod, scavengers included."""
    free: dict[str, list[int]] = {}
    for n in (snapshot.nodes or {}).values():
        if n.ready in (None, "True") and not n.unschedulable:
            free[n.name] = [n.cpu, n.mem]
    for p in snapshot.pods.values():
        if p.node in free and not p.terminal and p.sched is not None:
            f = free[p.node]
            f[0] -= p.sched.cpu
            f[1] -= p.sched.mem
    r = Room(free, list(gangs))
    for i, g in enumerate(gangs):
        for node in {p.node for p in g.pods}:
            r.on.setdefault(node, []).append(i)
    return r


def _fit(f: list[int], cpu: int, mem: int) -> int:
    if f[0] < cpu or f[1] < mem:
        return 0
    return min(f[0] // cpu if cpu > 0 else 1 << 30, f[1] // mem if mem > 0 else 1 << 30)


def choose(r: Room, sched: PodSched, size: int, nodes: Mapping[str, NodeView]) -> Choice | None:
    """Nodes for ``size`` pods of ``sched`` and the cheapest gangs to evict for them (none when they
    fit in free room); None when even evicting every scavenger there would not make room. Takes
    what it chooses out of ``r``, so the next workload of the pass sees the room that is left."""
    candidates = [n for n in r.free if n in nodes and matches(nodes[n], sched)]

    def placement() -> dict[str, int]:
        out: dict[str, int] = {}
        left = size
        for n in sorted(candidates, key=lambda n: (-_fit(r.free[n], sched.cpu, sched.mem), n)):
            k = min(_fit(r.free[n], sched.cpu, sched.mem), left)
            if k > 0:
                out[n] = k
                left -= k
            if left == 0:
                break
        return out

    evict: list[int] = []
    place = placement()
    while sum(place.values()) < size:
        # per node, the cheapest gangs there whose going lets at least one more pod in (a gang goes
        # whole, so what it frees elsewhere counts too); the node with the lowest cost per pod wins
        have = sum(place.values())
        best: tuple[float, int, list[int]] | None = None
        for n in candidates:
            step = _cheapest_on(r, n, candidates, sched, have, size)
            if step is not None and (best is None or (step[0], len(step[1])) < (best[0], len(best[2]))):
                best = (step[0], n, step[1])  # type: ignore[assignment]
        if best is None:
            for i in evict:  # put back what was taken
                _evict(r, i, sign=-1)
            return None
        for i in best[2]:
            _evict(r, i, sign=1)
            evict.append(i)
        place = placement()
    for n, k in place.items():
        r.free[n][0] -= k * sched.cpu
        r.free[n][1] -= k * sched.mem
    gangs = tuple(r.gangs[i] for i in evict)
    return Choice(tuple(sorted(place)), gangs, sum(g.cost for g in gangs))


def free_for(r: Room, sched: PodSched, nodes: Sequence[str]) -> int:
    """How many pods of ``sched`` fit in the free room of ``nodes`` now, no scavenger taken."""
    return sum(_fit(r.free[n], sched.cpu, sched.mem) for n in nodes if n in r.free)


def _evict(r: Room, i: int, *, sign: int) -> None:
    for p in r.gangs[i].pods:
        if p.node in r.free and p.sched is not None:
            r.free[p.node][0] += sign * p.sched.cpu
            r.free[p.node][1] += sign * p.sched.mem
    if sign > 0:
        r.evicted.add(i)
    else:
        r.evicted.discard(i)


def _fits_now(r: Room, candidates: Sequence[str], sched: PodSched) -> int:
    return sum(_fit(r.free[n], sched.cpu, sched.mem) for n in candidates)


def _cheapest_on(r: Room, node: str, candidates: Sequence[str], sched: PodSched, have: int,
                 size: int) -> tuple[float, list[int]] | None:
    """(cost per pod gained, gangs) of the cheapest gangs on ``node`` whose going lets more pods in."""
    chosen: list[int] = []
    cost = 0.0
    before = _fits_now(r, candidates, sched)
    for i in sorted((i for i in r.on.get(node, ()) if i not in r.evicted), key=lambda i: (r.gangs[i].cost, i)):
        _evict(r, i, sign=1)
        chosen.append(i)
        cost += r.gangs[i].cost
        gained = min(_fits_now(r, candidates, sched), size) - max(before, have)
        if gained > 0:
            for j in chosen:
                _evict(r, j, sign=-1)
            return cost / gained, chosen
    for j in chosen:
        _evict(r, j, sign=-1)
    return None


def _reqs(items: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[dict[str, Any]]:
    """Node selector requirements as a view keeps them, written out as the API takes them."""
    return [{"key": k, "operator": op, **({"values": list(vs)} if vs else {})} for k, op, vs in items]


def narrowed_terms(sched: PodSched, nodes: Sequence[str]) -> list[dict[str, Any]]:
    """The required node affinity's terms, each narrowed to ``nodes`` (a ``metadata.name`` field
    requirement added to every term, or one term of it alone when there were none): what
    Kubernetes lets a gated pod or a suspended Job's template gain."""
    field_req = {"key": "metadata.name", "operator": "In", "values": sorted(nodes)}
    reqs = _reqs
    if not sched.terms:
        return [{"matchFields": [field_req]}]
    out = []
    for exprs, fields in sched.terms:
        term: dict[str, Any] = {"matchFields": [*reqs(fields), field_req]}
        if exprs:
            term["matchExpressions"] = reqs(exprs)
        out.append(term)
    return out


def confined(sched: PodSched, nodes: Sequence[str]) -> bool:
    """Whether ``sched``'s own required node affinity already keeps it within ``nodes``: every term
    names its nodes (``metadata.name In``), all among them. A DaemonSet's pod, to whose node its
    controller gives it such a term: narrowing it would add nothing."""
    if sched.clipped or not sched.terms:
        return False
    among = set(nodes)
    return all(any(k == "metadata.name" and op == "In" and vals and among.issuperset(vals) for k, op, vals in fields)
               for _exprs, fields in sched.terms)


def narrowing(sched: PodSched) -> tuple[str, ...] | None:
    """The nodes ``narrowed_terms`` kept ``sched`` to, when its required node affinity has exactly that
    shape: every term ends with the same ``metadata.name In [nodes]`` field requirement (nodes sorted,
    none twice), as the queue's release wrote it; else None. The inverse is ``unnarrowed_terms``."""
    if sched.clipped or not sched.terms:
        return None
    last = sched.terms[0][1][-1] if sched.terms[0][1] else None
    if last is None or last[0] != "metadata.name" or last[1] != "In" or not last[2]:
        return None
    nodes = last[2]
    if list(nodes) != sorted(set(nodes)):
        return None
    for _exprs, fields in sched.terms:
        if not fields or fields[-1] != last:
            return None
    return nodes


def unnarrowed_terms(sched: PodSched) -> list[dict[str, Any]] | None:
    """``sched``'s required node affinity terms without the narrowing ``narrowing`` found (each term's
    last field requirement): the workload's own terms again; None when it had none (the narrowing was
    the one term ``narrowed_terms`` made)."""
    reqs = _reqs
    out = []
    for exprs, fields in sched.terms:
        term: dict[str, Any] = {}
        if exprs:
            term["matchExpressions"] = reqs(exprs)
        if fields[:-1]:
            term["matchFields"] = reqs(fields[:-1])
        out.append(term)
    if len(out) == 1 and not out[0]:
        return None
    return out
