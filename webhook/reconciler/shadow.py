"""The shadow schedule: when each pending workload is expected to start (``squeue --start``).

A pure function of the snapshot, the maintenance windows and ``now``, like the
planner. It replays, in memory, what kube-scheduler will do as running work
ends, without scheduling anything itself:

- running (and bound) pods hold their requests on their node until their
  job's deadline (``batchgate.io/deadline``, else start + time limit); work
  without a time limit holds them for good; a pod being deleted, to the end
  of its grace period (``metadata.deletionTimestamp``), at least 30 s from now;
- a pending pod of something not modelled as work (a ReplicaSet's) holds its
  requests on the node kube-scheduler nominated it to after preempting there
  (``status.nominatedNodeName``): the room its victims free is its; not
  nominated, it is placed (no estimate is given for it) at its earliest fit,
  held to its time limit or for good: kube-scheduler binds it there as soon
  as room appears;
- maintenance windows block their nodes from start to end, and a job only
  starts on a node if its time limit (plus the admission margin) ends before
  the node's next window, as the ``maintenance-affinity`` policy makes
  kube-scheduler do;
- pending work is placed in the order kube-scheduler takes it (priority, then
  creation time), and all of it that is not gated before the queue's work of any
  priority (kube-scheduler binds it as room appears; gated work is no candidate
  until the queue releases it), each pod on a node that matches its ``nodeSelector``,
  required node affinity (the countdown expressions aside: the windows stand
  for them) and taints; a pod group's pods all start at the same time; every
  placement reserves its requests for its time limit, so later work is placed
  around it (no backfill ahead of its turn: what kube-scheduler serves first
  comes first).

The answer for each workload (its Job, or a bare pod): the expected start, or
why there is none: it can never fit (asks more than any matching node has, or
nothing matches), or it waits for work that has no time limit.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..contract import COUNTDOWN_LABEL
from ..kubefields import DEFAULT_SCHEDULER
from ..windows import Window
from .maintenance import read_cordoned
from .model import JobView, PodSched, PodView, Ref, Snapshot, job_of
from .runtimes import Predictor, corrected, job_key, pod_key

INF = float("inf")
DELETING_ALLOWANCE = 30.0  # seconds a pod being deleted is still counted on its node past its grace period
HORIZON = 60 * 86400  # beyond this, "unknown"
ROOMY = 1 << 62  # room for any number of pods (``_Node.room``)
KUBE_SCHEDULERS = frozenset({DEFAULT_SCHEDULER})  # the schedulerNames kube-scheduler serves, unless told


def _add(out: list[tuple[float, int, int]], start: float, end: float, cpu: int, mem: int) -> None:
    """Add ``cpu``/``mem`` from ``start`` to ``end`` to the step function of usage ``out``, in place:
    the same list ``_Node.steps`` would build from scratch (a breakpoint at every start and finite
    end), without sorting every reservation again."""
    ks = bisect.bisect_left(out, (start,))
    if ks == len(out) or out[ks][0] != start:
        _, uc, um = out[ks - 1] if ks > 0 else (start, 0, 0)
        out.insert(ks, (start, uc, um))
    if end < INF:
        ke = bisect.bisect_left(out, (end,))
        if ke == len(out) or out[ke][0] != end:
            _, uc, um = out[ke - 1] if ke > 0 else (end, 0, 0)
            out.insert(ke, (end, uc, um))
    else:
        ke = len(out)
    for k in range(ks, ke):  # a few steps: a loop costs less than a slice, a new list and a slice back
        t, uc, um = out[k]
        out[k] = (t, uc + cpu, um + mem)


def _first_start(free: list[tuple[float, float]], blocked: list[tuple[float, float]], t0: float, duration: float,
                 hold: float, margin: float, limit: float) -> float | None:
    """``_Node.earliest`` over the node's stretches with room (``free``) and its windows (``blocked``):
    the first time >= t0 and < ``limit`` in a stretch that leaves ``duration`` before it ends, past every
    window that ``hold`` plus ``margin`` from then would run into."""
    for since, until in free:  # a few (one per gap in the node's reservations): a scan beats a bisect
        if until <= t0:
            continue  # over by t0
        t = since if since > t0 else t0
        while t < limit:
            if t + duration > until or t >= until:
                break  # not room for all of it in this stretch: the next one
            clash = 0.0
            for ws, we in blocked:
                if ws < t + hold + margin and t < we:
                    clash = we
                    break
            if not clash:
                return t
            if clash == INF:
                return None
            t = clash  # within the window's stretch nothing fits: from its end
        else:
            return None
    return None


@dataclass(frozen=True, slots=True)
class Estimate:
    workload: Ref
    start: float | None  # None: unknown (see reason)
    reason: str  # why it waits (or why it never starts), for people
    never: bool = False  # it can never fit as it is: a Warning for the user
    priority: int = 0
    position: int = 0  # 1-based place in kube-scheduler's order among pending workloads
    pods: int = 1
    queued: bool = False  # waits in batchgate's queue (its start is when the queue releases it)
    reserved: bool = True  # its start is held for it (not so behind the head of an EASY queue: a guess)
    nodes: tuple[str, ...] = ()  # where it starts, when it starts now: the nodes the release narrows it to


@dataclass(slots=True)
class _Node:
    name: str
    cpu: int
    mem: int
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]
    blocked: list[tuple[float, float]]  # maintenance windows (start, end), sorted
    res: list[tuple[float, float, int, int]] = field(default_factory=list)  # (start, end, cpu, mem)
    _steps: list[tuple[float, int, int]] | None = None  # (from, cpu used, mem used), sorted; cached
    _undo: list[list[tuple[float, int, int]] | None] = field(default_factory=list)  # steps before each tentative reserve
    _free: dict[tuple[int, int], list[tuple[float, float]]] = field(default_factory=dict)  # per pod size; cached
    log: list[_Node] | None = None  # where a reservation taken back is told (the indexes of earliest starts read it)
    undone: int = 0  # reservations taken back (``unreserve``): what an index saw of ``res`` may be gone
    changes: int = 0  # reservations made and taken back: an index that saw fewer must ask the node again

    def reserve(self, start: float, end: float, cpu: int, mem: int, *, tentative: bool = False) -> None:
        """Hold ``cpu``/``mem`` from ``start`` to ``end``; a ``tentative`` one can be taken back
        (``unreserve``, last first) or kept (``keep``)."""
        self.res.append((start, end, cpu, mem))
        steps = self._steps
        if tentative:
            self._undo.append(steps[:] if steps is not None else None)
        if steps is not None:
            _add(steps, start, end, cpu, mem)
        self._free = {}
        self.changes += 1

    def unreserve(self) -> None:
        """Take back the last tentative reservation."""
        self.res.pop()
        self.undone += 1
        self._steps = self._undo.pop()
        self._free = {}
        self.changes += 1
        if self.log is not None:
            self.log.append(self)

    def keep(self) -> None:
        self._undo.clear()

    def steps(self) -> list[tuple[float, int, int]]:
        """Usage as a step function of time: from each breakpoint on, until the next."""
        if self._steps is None:
            delta: dict[float, list[int]] = {}
            for s, e, c, m in self.res:
                d = delta.setdefault(s, [0, 0])
                d[0] += c
                d[1] += m
                if e < INF:
                    d = delta.setdefault(e, [0, 0])
                    d[0] -= c
                    d[1] -= m
            out: list[tuple[float, int, int]] = []
            cpu = mem = 0
            for t in sorted(delta):
                cpu += delta[t][0]
                mem += delta[t][1]
                out.append((t, cpu, mem))
            self._steps = out
        return self._steps

    def free(self, cpu: int, mem: int) -> list[tuple[float, float]]:
        """The stretches of time ``[from, to)`` in which one more pod of this size has room (``to`` INF:
        for good), sorted; built in one sweep over the steps per size and change, so the pod shapes of
        one size (they differ by time limit) share it and each asks it for their duration cheaply."""
        out = self._free.get((cpu, mem))
        if out is None:
            out = []
            free_cpu, free_mem = self.cpu - cpu, self.mem - mem
            since: float | None = -INF if free_cpu >= 0 and free_mem >= 0 else None  # before the first step: empty
            for t, uc, um in self.steps():
                if uc <= free_cpu and um <= free_mem:
                    if since is None:
                        since = t
                elif since is not None:
                    out.append((since, t))
                    since = None
            if since is not None:
                out.append((since, INF))
            self._free[(cpu, mem)] = out
        return out

    def earliest(self, t0: float, duration: float, cpu: int, mem: int, margin: float,
                 before: float = INF, hold: float | None = None) -> float | None:
        """The first time >= t0 (and < ``before``, within ``HORIZON`` of t0) at which one more pod of this
        size can run for ``duration`` without its time limit (``hold``, else ``duration``) plus ``margin``
        running into a maintenance window: the first time in a stretch with room (``free``) that leaves
        ``duration`` before the stretch ends, past every window it would clash with.
        (``tests/unit/reconciler/test_shadow.py`` checks it against a sweep over the steps.)"""
        if cpu > self.cpu or mem > self.mem:
            return None
        free = self._free.get((cpu, mem))
        if free is None:
            free = self.free(cpu, mem)
        return _first_start(free, self.blocked, t0, duration, duration if hold is None else hold, margin,
                            min(before, t0 + HORIZON))

    def room(self, t: float, duration: float, cpu: int, mem: int, margin: float, hold: float) -> int:
        """How many pods of this size can start here at ``t`` together: as many times as ``earliest(t,
        ..., before=t + 1)`` answers ``t`` with each pod reserved in turn, in one look at the steps.
        A pod fits at ``t`` when the usage over [t, t + duration) leaves it room and no window
        clashes; each one reserved adds its size over all of that stretch. ``ROOMY``: no bound (a pod
        that asks for nothing, or reserves no time)."""
        if cpu > self.cpu or mem > self.mem:
            return 0
        for ws, we in self.blocked:
            if ws < t + hold + margin and t < we:
                if we:
                    return 0
                break  # as ``earliest``: a window ending at 0 does not count
        steps = self.steps()
        n = len(steps)
        k = bisect.bisect_right(steps, (t, INF, INF))
        uc, um = (steps[k - 1][1], steps[k - 1][2]) if k > 0 else (0, 0)
        until = t + duration
        while k < n:
            st, c, m = steps[k]
            if st >= until:
                break
            if c > uc:
                uc = c
            if m > um:
                um = m
            k += 1
        free_cpu, free_mem = self.cpu - cpu, self.mem - mem
        if uc > free_cpu or um > free_mem:
            return 0
        if not until > t:
            return ROOMY  # a reservation of no time adds nothing
        count = ROOMY
        if cpu:
            count = (free_cpu - uc) // cpu + 1
        if mem:
            count = min(count, (free_mem - um) // mem + 1)
        return count


def _tolerated(taints: tuple[tuple[str, str, str], ...], tolerations: tuple[tuple[str, str, str, str], ...],
               lasting_only: bool = False) -> bool:
    for key, value, effect in taints:
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if key == "node.kubernetes.io/unschedulable":
            continue  # cordons are modelled separately
        if lasting_only and key.startswith("node.kubernetes.io/"):
            continue  # the node's conditions (not-ready, unreachable, pressure): they come and go
        if not any((not k and op == "Exists") or ((k == key and (op == "Exists" or v == value))
                   and (not e or e == effect)) for k, op, v, e in tolerations):
            return False
    return True


def _requirement(labels: Mapping[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    v = labels.get(key)
    if op == "In":
        return v is not None and v in values
    if op == "NotIn":
        return v is None or v not in values
    if op == "Exists":
        return v is not None
    if op == "DoesNotExist":
        return v is None
    if op in ("Gt", "Lt"):
        try:
            have, want = int(v or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


class Placeable(Protocol):
    """What matching a pod to a node reads of the node (a ``_Node`` here, a ``NodeView``)."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def taints(self) -> tuple[tuple[str, str, str], ...]: ...


def matches(node: Placeable, sched: PodSched, *, lasting_only: bool = False) -> bool:
    """nodeSelector, required node affinity (countdown expressions aside) and taints (with
    ``lasting_only``, not those of the node's conditions, which come and go)."""
    for k, v in sched.node_selector:
        if node.labels.get(k) != v:
            return False
    if sched.terms:
        ok = False
        for exprs, fields in sched.terms:
            if all(k == COUNTDOWN_LABEL or _requirement(node.labels, k, op, vals) for k, op, vals in exprs) and all(
                    _requirement({"metadata.name": node.name}, k, op, vals) for k, op, vals in fields):
                ok = True
                break
        if not ok:
            return False
    return _tolerated(node.taints, sched.tolerations, lasting_only)


def _fmt_cpu(m: int) -> str:
    return f"{m // 1000}" if m % 1000 == 0 else f"{m}m"


def _fmt_mem(b: int) -> str:
    gi = b / 2**30
    return f"{gi:.1f}Gi".replace(".0Gi", "Gi") if b >= 2**30 else f"{b // 2**20}Mi"


@dataclass(slots=True)
class _Work:
    ref: Ref
    pods: list[PodView]
    sched: PodSched
    limit: int | None
    gang: bool
    predicted: float | None = None  # its runtime as predicted from earlier runs (runtimes.py)
    size: int = 0  # pods, when they do not exist yet (a queued or just released Job); else len(pods)
    rank: int = -1  # its place in batchgate's queue (queue.py); -1: kube-scheduler's to serve
    held: str = ""  # why it is not placed at all (its queue is on hold or stopped)
    queue: str = ""  # batchgate's queue it waits in
    promised: bool = False  # it holds a start-by: it reserves even behind the head of an EASY queue
    unschedulable: bool = False  # a quiet pod kube-scheduler found no node for (``PodView.unschedulable``)
    quiet: bool = False  # a pod of something not modelled as work (a ReplicaSet's): it holds room, no estimate
    ahead: bool = False  # not gated and not preempted for the queue's work: placed before all of the queue's


@dataclass(frozen=True, slots=True)
class Queued:
    """A workload waiting in batchgate's queue, as queue.py orders it: ``rank`` is its place."""

    ref: Ref
    sched: PodSched  # its pods' (priority: its class's)
    size: int
    limit: int | None
    rank: int
    job: JobView | None = None
    pods: tuple[PodView, ...] = ()  # a bare pod or a group of them
    held: str = ""
    queue: str = ""
    promised: bool = False  # it holds a start-by (queue.py): under EASY it keeps its reservation


class _Earliest:
    """For one pod shape (candidate nodes, size, duration): the earliest start from ``now`` on each
    node, kept from one workload to the next, so a placement does not mean asking every node
    again. A placement only adds reservations, and that can only make a node's earliest start later
    (or none): so a node that changed (its ``changes`` count is past the one its time was found at,
    ``known``) keeps its old time as a lower bound, stale, and is asked again (from that time on) only when a placement needs
    to know: when it comes first in ``order``, or when a gang tries a time at or after it. The
    answer is what a scan of every node gives: the earliest time, and among equals the first node
    in the candidates' order (``tests/unit/reconciler/test_shadow.py`` checks it against a scan,
    ``test_shadow_gangs.py`` the gangs against asking every node pod by pod).

    ``order`` holds the distinct times of the nodes that have one (a stale node's old time), sorted,
    and ``at`` for each of them the nodes with that time, in the candidates' order: so the first
    node at the first time, once asked, is the answer, and a gang trying a time finds the nodes that
    could take a pod then in one slice. A node whose time changes moves from one short list of node
    numbers to another, rather than through one long sorted list of (time, node) pairs, each of
    whose comparisons costs two. Each node starts at ``now``, stale. Per node it also keeps how many
    pods fit at a time (``rooms``, until the node changes), so trying a time mostly asks none again
    (``fit``)."""

    __slots__ = ("at", "cpu", "duration", "hold", "known", "limit", "log", "margin", "mem", "nodes", "now", "order",
                 "pos", "reach", "rooms", "seen", "size", "times", "undone")

    def __init__(self, nodes: list[_Node], log: list[_Node], now: float, duration: float, cpu: int, mem: int,
                 margin: float, hold: float | None = None) -> None:
        self.nodes, self.log = nodes, log
        self.now, self.duration, self.cpu, self.mem, self.margin = now, duration, cpu, mem, margin
        self.hold = hold
        self.size = (cpu, mem)  # the key of the nodes' stretches with room (``_Node.free``)
        self.reach = duration if hold is None else hold  # how long it keeps off a window
        self.limit = now + HORIZON
        self.pos: dict[str, int] | None = None  # node name -> its number; made when first needed (``_note_changes``)
        # No node can start a pod before now: that is every node's time until a placement needs to
        # know better, so a node is asked first when it is looked at (mostly after it has changed).
        self.times: list[float | None] = [now] * len(nodes)
        self.known = [-1] * len(nodes)  # per node: its ``changes`` when its time was found (-1: never, stale)
        self.order: list[float] = [now] if nodes else []  # the distinct times in ``times``, sorted
        self.at: dict[float, list[int]] = {now: list(range(len(nodes)))} if nodes else {}  # time -> its nodes, ascending
        self.rooms: list[dict[float, int] | None] = [None] * len(nodes)  # per node: pods that fit at a time, as known
        self.undone = [n.undone for n in nodes]  # reservations each node had taken back when its time was found
        self.seen = len(log)

    def _ask(self, i: int) -> float | None:
        node, old = self.nodes[i], self.times[i]
        # Nothing before the old time fits (more reserved never makes room), so the sweep may start
        # there, within the same horizon; unless a reservation was taken back since. What
        # ``node.earliest(since, ..., now + HORIZON, hold)`` answers (every node here is big enough,
        # and ``since`` is never before now), without its checks.
        undone = node.undone
        since = old if old is not None and self.undone[i] == undone else self.now
        free = node._free.get(self.size)
        if free is None:
            free = node.free(self.cpu, self.mem)
        t = _first_start(free, node.blocked, since, self.duration, self.reach, self.margin, self.limit)
        self.undone[i] = undone
        if t != old:
            self._move(i, old, t)
        self.times[i] = t
        self.known[i] = node.changes
        self.rooms[i] = None
        return t

    def _move(self, i: int, old: float | None, t: float | None) -> None:
        """Node ``i`` from the nodes at ``old`` to those at ``t`` (None: at no time)."""
        order, at = self.order, self.at
        if old is not None:
            nodes = at[old]
            if len(nodes) == 1:  # the last node at that time: the time goes
                del at[old]
                del order[bisect.bisect_left(order, old)]
            else:
                del nodes[bisect.bisect_left(nodes, i)]
        if t is not None:
            nodes_then = at.get(t)
            if nodes_then is None:
                at[t] = [i]
                bisect.insort(order, t)
            else:
                bisect.insort(nodes_then, i)

    def _note_changes(self) -> None:
        """Ask at once the nodes that took a reservation back: their old time is no lower bound (``lowest``)."""
        log = self.log
        if self.seen < len(log):
            if self.pos is None:
                self.pos = {n.name: i for i, n in enumerate(self.nodes)}
            for n in log[self.seen:]:
                i = self.pos.get(n.name)
                if i is not None and n.undone != self.undone[i]:
                    self._ask(i)
            self.seen = len(log)

    def _settle(self, until: float) -> bool:
        """Ask every stale node whose old time is ``until`` or sooner; whether any was asked."""
        self._note_changes()
        order, at, nodes, known = self.order, self.at, self.nodes, self.known
        asked = [i for t in order[:bisect.bisect_right(order, until)] for i in at[t] if nodes[i].changes != known[i]]
        for i in asked:
            self._ask(i)
        return bool(asked)

    def all_times(self) -> list[float | None]:
        """Every node's earliest start, up to date."""
        self._settle(INF)
        return self.times

    def best(self) -> tuple[float, _Node] | None:
        self._note_changes()
        order, at, nodes, known = self.order, self.at, self.nodes, self.known
        while order:
            t = order[0]
            i = at[t][0]
            if nodes[i].changes == known[i] or self._ask(i) == t:
                return t, self.nodes[i]
        return None

    def next_first(self, after: float) -> float | None:
        """The earliest start of any node that is later than ``after``, the nodes up to it asked."""
        order = self.order
        while True:
            q = bisect.bisect_right(order, after)
            if q == len(order):
                return None
            t = order[q]
            if not self._settle(t):
                return t

    def _room(self, i: int, t: float) -> int:
        rooms = self.rooms[i]
        if rooms is None:
            rooms = self.rooms[i] = {}
        k = rooms.get(t)
        if k is None:
            hold = self.duration if self.hold is None else self.hold
            k = rooms[t] = self.nodes[i].room(t, self.duration, self.cpu, self.mem, self.margin, hold)
        return k

    def lowest(self) -> float | None:
        """The earliest of the nodes' times as last asked: no node's earliest start is sooner (one a
        placement changed since can only have moved later), and it is that node's if it still has
        room then (``fit``)."""
        self._note_changes()
        return self.order[0] if self.order else None

    def fit(self, t: float, size: int) -> list[tuple[_Node, int]] | None:
        """Where ``size`` pods start together at ``t``: the nodes whose earliest start is ``t`` or
        sooner, in the candidates' order, each taking as many as fit there, as asking each node pod
        by pod does; None if they do not all fit. Only the nodes looked at are asked again if a
        placement changed them (one that moved past ``t`` takes no pod), not every node up to ``t``."""
        self._note_changes()
        order, at, room, nodes, known = self.order, self.at, self._room, self.nodes, self.known
        end = bisect.bisect_right(order, t)
        # The nodes up to t in the candidates' order (the nodes' own): all at one time, its list as it is
        # (a copy: asking a node may move it out), else merged.
        eligible = list(at[order[0]]) if end == 1 else sorted(i for s in order[:end] for i in at[s])
        placed: list[tuple[_Node, int]] = []
        need = size
        for i in eligible:
            if nodes[i].changes != known[i] and ((later := self._ask(i)) is None or later > t):  # moved past t: no room
                continue
            k = room(i, t)
            if k:
                take = min(k, need)
                placed.append((nodes[i], take))
                need -= take
                if not need:
                    return placed
        return None


@dataclass(slots=True)
class _Placer:
    nodes: dict[str, _Node]
    now: float
    margin: float
    log: list[_Node]
    candidates: dict[Any, list[_Node]] = field(default_factory=dict)  # per (selector, affinity, tolerations)
    indexes: dict[Any, _Earliest] = field(default_factory=dict)  # per pod shape


def recorded_limit(obj: JobView | PodView) -> int | None:
    """A workload's time limit without the queue policy: its annotation, else (removed or
    malformed) the one recorded at admission. The planner passes its own ``effective_limit``,
    which also applies the recorded queue's maximum, as the reconciler enforces it."""
    if obj.limit is not None:
        return obj.limit
    return obj.admitted.limit if obj.admitted is not None else None


def shadow_schedule(snapshot: Snapshot, now: float, windows: Iterable[Window], *,
                    margin: float = 300.0, runtimes: Predictor | None = None,
                    limit_of: Callable[[JobView | PodView], int | None] = recorded_limit,
                    queued: Iterable[Queued] = (), preempts_below: int | None = None,
                    class_values: Mapping[str, int] | None = None,
                    released: Callable[[JobView], bool] | None = None,
                    easy: Collection[str] = (),
                    kube_schedulers: Collection[str] = KUBE_SCHEDULERS) -> list[Estimate]:
    """Estimates for every pending workload, in kube-scheduler's order. With ``runtimes``, work
    is expected to run as long as predicted from earlier runs (never past its limit), not to its
    limit; see runtimes.py. ``limit_of``: a workload's time limit as the reconciler enforces it
    (``planner.effective_limit``), so estimates and deadlines agree.

    ``queued``: the workloads waiting in batchgate's queue, in its order (queue.py); their gated
    pods are theirs, not pending work of kube-scheduler's. Within a priority, what kube-scheduler
    already has comes first (it binds that as soon as there is room), then the queue, each placed
    at its earliest start around the reservations of all before it: conservative backfill. A Job
    the queue released (``released``: a Job of a gated queue) with fewer pods than it runs at once
    holds room for the missing ones (its controller is making them), with its class's value from
    ``class_values``.
    ``preempts_below``: running pods of lower priority hold no room (kube-scheduler preempts them
    for the queue's work: scavengers).
    ``easy``: queues backfilled EASY: behind the first of their workloads that cannot start now (the
    head), a workload that cannot start now reserves nothing (its estimate says ``reserved=False``),
    so later work may start if it delays no reservation but the head's; one that holds a promise
    (``Queued.promised``: a head before) keeps its reservation.
    ``kube_schedulers``: the ``spec.schedulerName``s kube-scheduler serves (the bundle's
    kubeSchedulerProfiles). A pending pod naming another (a released Job whose template does) is not
    kube-scheduler's to bind: it holds no room, or anyone could keep room from the queue for good with
    a pod no scheduler binds. Bound, it holds its room as any pod does."""
    if snapshot.nodes is None:
        return []
    ws = list(windows)
    nodes: dict[str, _Node] = {}
    for n in snapshot.nodes.values():
        blocked = sorted((w.start, w.end) for w in ws if w.end > now and w.covers(n.name, n.labels))
        if n.unschedulable and (not isinstance(n.maintenance, str) or read_cordoned(n.maintenance).was_unschedulable):  # type: ignore[union-attr]
            continue  # cordoned by someone else (before a window too): no telling when it comes back
        if n.ready not in (None, "True"):
            continue
        nodes[n.name] = _Node(n.name, n.cpu, n.mem, n.labels, n.taints, blocked)

    jobs_by_uid: dict[str, JobView] = {j.ref.uid: j for j in snapshot.jobs.values()}
    pending: dict[str, _Work] = {}
    live: dict[str, int] = {}  # a Job's uid -> its pods that hold or wait for room
    ended: set[str] = set()  # Jobs with a pod that ended: starting over or finishing, not being made
    for pod in snapshot.pods.values():
        job = job_of(snapshot, pod)  # its pods are its own only (not any naming its uid)
        if pod.terminal or pod.sched is None:
            if job is not None:
                ended.add(job.ref.uid)
            continue
        if job is not None:
            live[job.ref.uid] = live.get(job.ref.uid, 0) + 1
        if pod.gated and not pod.node:
            continue  # the queue's (``queued``)
        limit = limit_of(job if job is not None else pod)
        if pod.node:
            node = nodes.get(pod.node)
            if node is None:
                continue
            if preempts_below is not None and pod.sched.priority < preempts_below and not pod.deleting:
                continue
            deadline = (job.deadline_t if job is not None else pod.deadline_t)
            if pod.deleting:
                # to the end of its grace period, and no sooner than a short allowance from now:
                # a slow node (or none, with no kubelet) keeps it past that end
                end = max(pod.deleting_t or now, now + DELETING_ALLOWANCE)
            elif deadline is not None:
                end = max(deadline, now)
            elif limit is not None:
                end = max((pod.started or now) + limit, now)
            else:
                end = INF
            if runtimes is not None and end < INF and not pod.deleting:
                predicted = _predicted(runtimes, job, pod, limit)
                if predicted is not None:
                    recorded = job.started_at_t if job is not None else pod.started_at_t
                    started = min(recorded if recorded is not None else INF, pod.started or INF, now)
                    end = min(end, started + corrected(predicted, now - started, end - started))
            node.reserve(now, end, pod.sched.cpu, pod.sched.mem)
            continue
        if pod.deleting or pod.sched.scheduler not in kube_schedulers:
            continue
        if pod.owner is not None and job is None:
            # Owned by something not modelled as work (a ReplicaSet's pod is not a job). Nominated to
            # a node (kube-scheduler preempted there for it), the room its victims free is its own:
            # it holds it from now, to its time limit or for good. Not nominated, kube-scheduler binds
            # it wherever room appears first, before anything the queue holds: placed (quietly, no
            # estimate is its) at its earliest fit, with the pending work kube-scheduler has. One
            # kube-scheduler preempts for the queue's work, or that another gate holds, holds nothing.
            if preempts_below is not None and pod.sched.priority < preempts_below:
                continue
            node = nodes.get(pod.nominated) if pod.nominated else None
            if node is not None:
                node.reserve(now, now + limit if limit is not None else INF, pod.sched.cpu, pod.sched.mem)
            elif not pod.nominated and not pod.other_gates:
                pending[pod.ref.uid] = _Work(pod.ref, [pod], pod.sched, limit, gang=False, quiet=True,
                                             unschedulable=pod.unschedulable)
            continue
        ref = job.ref if job is not None else pod.ref
        w = pending.get(ref.uid)
        if w is None:
            predicted = None
            if runtimes is not None and limit is not None:
                predicted = _predicted(runtimes, job, pod, limit)
            pending[ref.uid] = _Work(ref, [pod], pod.sched, limit, gang=pod.group is not None, predicted=predicted)
        else:
            w.pods.append(pod)
            if pod.sched.priority > w.sched.priority or pod.sched.created < w.sched.created:
                w.sched = pod.sched

    making = released or (lambda job: False)
    for job in jobs_by_uid.values():  # Jobs whose pods are being made
        if not making(job):
            continue
        missing = job.wanted - live.get(job.ref.uid, 0)
        if (missing > 0 and not job.suspended and job.template is not None and job.ref.uid not in pending
                and job.ref.uid not in ended and job.template.scheduler in kube_schedulers):
            sched = _with_priority(job.template, job.priority_class, class_values)
            limit = limit_of(job)
            pending[job.ref.uid] = _Work(job.ref, [], sched, limit, gang=job.group is not None, size=missing,
                                         predicted=_predicted(runtimes, job, None, limit) if runtimes and limit else None)
    works = list(pending.values())
    for q in queued:
        predicted = None
        if runtimes is not None and q.limit is not None and (q.job is not None or q.pods):
            predicted = _predicted(runtimes, q.job, q.pods[0] if q.pods else None, q.limit)
        works.append(_Work(q.ref, list(q.pods), q.sched, q.limit, gang=True, predicted=predicted, size=q.size,
                           rank=q.rank, held=q.held, queue=q.queue, promised=q.promised))
    # What kube-scheduler has (not gated) goes first, whatever its priority, unless it is preempted for
    # the queue's work (``preempts_below``: scavengers): it binds as room appears, and the queue's work
    # is no candidate until released, so the room it takes is not the queue's to promise.
    for w in works:
        w.ahead = w.rank < 0 and (preempts_below is None or w.sched.priority >= preempts_below)
    order = sorted(works, key=lambda w: (not w.ahead, -w.sched.priority, w.rank, w.sched.created, w.ref.namespace,
                                         w.ref.name))
    log: list[_Node] = []  # from here on, each node tells its changes
    for node in nodes.values():
        node.log = log
    placer = _Placer(nodes, now, margin, log)
    out: list[Estimate] = []
    headed: set[str] = set()  # EASY queues whose head has reserved
    position = 0
    for work in order:
        if work.quiet:
            # kube-scheduler's as well, but one that found no node while the placement has room for
            # it now is kept off by what the placement does not model (inter-pod affinity, volume
            # topology, host ports): held only from a later start, or it would hold that room for ever
            _place(work, placer, 0, now_too=not work.unschedulable)
            continue
        position += 1
        behind = work.rank >= 0 and work.queue in headed and not work.promised
        e = _place(work, placer, position, reserve_later=not behind)
        if e.start is not None and e.start > now and work.rank >= 0 and work.queue in easy:
            if behind:
                e = dataclasses.replace(e, reserved=False)
            headed.add(work.queue)
        out.append(e)
    return out


def _with_priority(sched: PodSched, priority_class: str, class_values: Mapping[str, int] | None) -> PodSched:
    """A pod template's scheduling view with the priority its pods will get from their class."""
    value = (class_values or {}).get(priority_class)
    return sched if value is None or value == sched.priority else dataclasses.replace(sched, priority=value)


def _predicted(runtimes: Predictor, job: JobView | None, pod: PodView | None, limit: int | None) -> float | None:
    """How long the workload is expected to run: the user's own ``batchgate.io/expected-runtime``
    (the webhook keeps it within the limit), else the median runtime of earlier runs
    (``Predictor.likely``: a start time is a median); never past the limit."""
    own = job.expected_runtime if job is not None else pod.expected_runtime if pod is not None else None
    if own is not None:
        return float(min(own, limit)) if limit is not None else float(own)
    if job is None and pod is None:
        return None
    return runtimes.likely(job_key(job) if job is not None else pod_key(pod), limit)  # type: ignore[arg-type]


def _place(work: _Work, placer: _Placer, position: int, *, reserve_later: bool = True,
           now_too: bool = True) -> Estimate:
    """Its earliest start, reserved (one that starts after now only with ``reserve_later``, one that
    starts now only with ``now_too``: a single pod's)."""
    s = work.sched
    size = work.size or len(work.pods)
    now, margin = placer.now, placer.margin

    def est(start: float | None, reason: str, never: bool = False, nodes: tuple[str, ...] = ()) -> Estimate:
        return Estimate(work.ref, start, reason, never, s.priority, position, size, work.rank >= 0, nodes=nodes)

    if work.held:
        return est(None, work.held)
    if s.clipped:
        return est(None, "its node selector, node affinity and tolerations are too long to model")
    key = (s.node_selector, s.terms, s.tolerations)
    candidates = placer.candidates.get(key)
    if candidates is None:
        candidates = placer.candidates[key] = [n for n in placer.nodes.values() if matches(n, s)]
    if not candidates:
        return est(None, "no node matches its node selector, node affinity and tolerations", never=True)
    hold = float(work.limit) if work.limit is not None else INF  # the limit keeps it off nodes before a window
    duration = work.predicted if work.predicted is not None else hold  # how long it holds its resources
    if work.rank >= 0 and (shapes := _shapes(work)) is not None:
        return _place_mixed(work, shapes, placer, candidates, duration, hold, est, reserve_later)
    shape = (key, s.cpu, s.mem, duration, hold)
    index = placer.indexes.get(shape)
    if index is None:
        big = [n for n in candidates if n.cpu >= s.cpu and n.mem >= s.mem]
        index = placer.indexes[shape] = _Earliest(big, placer.log, now, duration, s.cpu, s.mem, margin, hold)
    if not index.nodes:
        largest = max(candidates, key=lambda n: (n.cpu, n.mem))
        return est(None, (f"each pod asks for cpu {_fmt_cpu(s.cpu)}, memory {_fmt_mem(s.mem)}; the largest node it "
                          f"may use ({largest.name}) has cpu {_fmt_cpu(largest.cpu)}, memory {_fmt_mem(largest.mem)}"),
                   never=True)
    if (work.gang or work.rank >= 0) and size > 1:
        return _place_gang(work, index, now, duration, margin, est, hold, reserve_later)
    best = index.best()
    if best is None:
        if duration == INF:
            return est(None, "it has no time limit, and a maintenance window or work without one is ahead on every "
                             "node it may use")
        return est(None, "waits for work without a time limit on every node it may use")
    t, n = best
    where = {n.name}  # the nodes its pods start on now, when it starts now
    if (t <= now and now_too) or (t > now and reserve_later):
        # Not a gang: kube-scheduler binds each pod where it fits, so each is reserved at its own
        # earliest start (all of them where the first fits would leave the other nodes looking free).
        n.reserve(t, t + duration, s.cpu, s.mem)
        for _ in range(size - 1):
            more = index.best()
            if more is None or not (more[0] <= now or reserve_later):
                break
            more[1].reserve(more[0], more[0] + duration, s.cpu, s.mem)
            if more[0] <= now:
                where.add(more[1].name)
    return est(t, "fits now", nodes=tuple(sorted(where))) if t <= now else est(t, _why(n, t))


def _shapes(work: _Work) -> list[tuple[int, int, int]] | None:
    """A queued pod group's pods as (cpu, mem, how many), the most cpu first; None when they are
    all alike (the placement of one shape, ``_place_gang``, places them)."""
    counts: dict[tuple[int, int], int] = {}
    for p in work.pods:
        if p.sched is not None:
            k = (p.sched.cpu, p.sched.mem)
            counts[k] = counts.get(k, 0) + 1
    if len(counts) < 2:
        return None
    return sorted(((c, m, k) for (c, m), k in counts.items()), reverse=True)


def _place_mixed(work: _Work, shapes: list[tuple[int, int, int]], placer: _Placer, candidates: list[_Node],
                 duration: float, hold: float, est: Callable[..., Estimate], reserve_later: bool) -> Estimate:
    """A pod group whose pods differ in size (bare pods of one group), all at one time, each pod
    placed as it is: at a candidate time each shape's pods take the room the shapes before them
    left (reserved tentatively, taken back if a later shape does not fit), so the group starts
    only when all of it fits, and is not kept waiting for room that pods of the largest cpu and
    the largest memory at once would need."""
    s = work.sched
    now, margin = placer.now, placer.margin
    key = (s.node_selector, s.terms, s.tolerations)
    parts: list[tuple[int, int, int, _Earliest]] = []
    for cpu, mem, count in shapes:
        shape = (key, cpu, mem, duration, hold)
        index = placer.indexes.get(shape)
        if index is None:
            big = [n for n in candidates if n.cpu >= cpu and n.mem >= mem]
            index = placer.indexes[shape] = _Earliest(big, placer.log, now, duration, cpu, mem, margin, hold)
        if not index.nodes:
            largest = max(candidates, key=lambda n: (n.cpu, n.mem))
            return est(None, (f"{count} of its pods ask for cpu {_fmt_cpu(cpu)}, memory {_fmt_mem(mem)} each; the "
                              f"largest node they may use ({largest.name}) has cpu {_fmt_cpu(largest.cpu)}, memory "
                              f"{_fmt_mem(largest.mem)}"), never=True)
        parts.append((cpu, mem, count, index))
    size = sum(count for _, _, count, _ in parts)

    def placed_at(t: float) -> Estimate | None:
        taken: list[_Node] = []
        for cpu, mem, count, index in parts:
            placed = index.fit(t, count)
            if placed is None:
                for n in reversed(taken):
                    n.unreserve()
                return None
            for n, k in placed:
                n.reserve(t, t + duration, cpu * k, mem * k, tentative=True)
                taken.append(n)
        if t <= now or reserve_later:
            for n in taken:
                n.keep()
        else:  # EASY: behind the head, a guess only
            for n in reversed(taken):
                n.unreserve()
        if t <= now:
            return est(t, "fits now, all pods together", nodes=tuple(sorted({n.name for n in taken})))
        return est(t, f"all {size} pods of the group fit together then")

    # As ``_place_gang``: first the times a pod of some shape could start on some node, then later
    # ones (``_later``).
    nodes = list({n.name: n for *_, index in parts for n in index.nodes}.values())
    times = sorted({t for *_, index in parts for t in index.all_times() if t is not None})
    for t in times:
        if (done := placed_at(t)) is not None:
            return done
    for batch in _later(nodes, times[-1], [(c, m) for c, m, _, _ in parts], duration, margin, hold) if times else ():
        for t in batch:
            if (done := placed_at(t)) is not None:
                return done
    return est(None, f"its {size} pods (one group) never fit together on the nodes they may use"
               if duration < INF else "waits for work without a time limit")


def _why(node: _Node, t: float) -> str:
    for _, e in node.blocked:
        if e == t:
            return f"a maintenance window on node {node.name} ends then"
    return f"resources on node {node.name} are free then"


def _next_freed(node: _Node, t: float) -> float | None:
    """The first time after ``t`` at which room on ``node`` grows: some of what is reserved there, or a
    maintenance window, ends."""
    steps = node.steps()
    ends = [e for _, e in node.blocked if e > t]
    for i in range(max(bisect.bisect_right(steps, (t, INF, INF)), 1), len(steps)):
        if steps[i][1] < steps[i - 1][1] or steps[i][2] < steps[i - 1][2]:
            ends.append(steps[i][0])
            break
    return min(ends, default=None)


def _place_gang(work: _Work, index: _Earliest, now: float, duration: float, margin: float,
                est: Callable[..., Estimate], hold: float, reserve_later: bool = True) -> Estimate:
    """All pods of the group at one time: the candidate times are when single pods could start
    on each node; at each, count how many fit together (several per node if room)."""
    s = work.sched
    size = work.size or len(work.pods)
    nodes = index.nodes

    def placed_at(t: float) -> Estimate | None:
        placed = index.fit(t, size)
        if placed is None:
            return None
        for n, k in placed if t <= now or reserve_later else ():  # EASY: behind the head, a guess only
            n.reserve(t, t + duration, s.cpu * k, s.mem * k)
        if t <= now:
            return est(t, "fits now, all pods together", nodes=tuple(sorted(n.name for n, _ in placed)))
        return est(t, f"all {size} pods of the group fit together then")

    # A node can only take a pod at t if one could start there at t or sooner (more reserved never
    # makes room): the others are not asked, with the same outcome. The first candidate times are
    # the nodes' earliest starts, in order. The earliest of the times as last asked comes first: if
    # the group fits then, some node has room then, so that is the first earliest start, and the
    # nodes changed since need not be asked.
    if (lowest := index.lowest()) is not None and (done := placed_at(lowest)) is not None:
        return done
    first = index.next_first(-INF)
    while first is not None:
        if (done := placed_at(first)) is not None:
            return done
        first = index.next_first(first)
    times = [t for t in index.all_times() if t is not None]
    for batch in _later(nodes, max(times), ((s.cpu, s.mem),), duration, margin, hold) if times else ():
        for t in batch:
            if (done := placed_at(t)) is not None:
                return done
    return est(None, f"its {size} pods (one group) never fit together on the nodes they may use"
               if duration < INF else "waits for work without a time limit")


def _later(nodes: list[_Node], last: float, shapes: Iterable[tuple[int, int]], duration: float, margin: float,
           hold: float) -> Iterator[list[float]]:
    """A gang's candidate times after the last tried (``last``), a batch at a time, sorted: the
    earliest starts of a pod of each of ``shapes`` (cpu, mem) on each node from when room grows next
    (something reserved or a window ends), then from the next such time after the last of those,
    and so on, 49 times at most. A node with room for one pod all along answers every later time
    with that time itself, so one second past the last time tried would crawl while the room the
    group waits for frees later on."""
    for _ in range(49):
        later = [c for n in nodes if (c := _next_freed(n, last)) is not None]
        if not later:
            return  # no room grows after the last time tried: nothing later fits either
        t0 = min(later)
        times = sorted({u for cpu, mem in shapes for n in nodes
                        if (u := n.earliest(t0, duration, cpu, mem, margin, INF, hold)) is not None})
        if not times:
            return
        yield times
        last = times[-1]
