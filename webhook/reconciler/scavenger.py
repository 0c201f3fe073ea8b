"""ScavengerJobs: pure planning (no I/O, no clock, no ``kubernetes``).

The mechanism (design brief, docs/reconciler.md "Scavenger jobs"): a
ScavengerJob runs as a sequence of ``batch/v1`` Jobs it owns, one per
*segment*. A segment lasts at most ``spec.duration``; at its end the status
records the boundary (``priorityStartOverTimestamp``) *before* the segment's
Job is deleted with its pods' grace period (SIGTERM: the workload checkpoints
and exits), and the next segment's Job follows as soon as the old pods are
gone. So a pod's ``status.startTime`` is its last checkpoint, and the stock
kube-scheduler's own tie-break among equal-priority victims ("the latest
started goes first") *is* "the least progress since the last checkpoint goes
first". All scavenger classes are ``preemptionPolicy: Never`` and rank below
every ordinary class (the bundle checks it).

Stable API (the simulator in ``bench/`` imports these; keep the signatures):

``Need(pods, cpu_m, mem_b)``
    a gang: ``pods`` pods of ``cpu_m`` millicores and ``mem_b`` bytes each.
``Room(name, cpu_m, mem_b, pods)``
    free (or allocatable) room on one node; ``pods`` = free pod slots.
``Waiting(key, interrupted_count, created, need)``
    a ScavengerJob waiting to (re)start; ``key`` = (namespace, name), ``created`` epoch s.
``start_key(w)`` / ``start_order(waiting)``
    the start order: highest interruptedCount first ("better finish what we
    started"), then oldest, then namespace/name.
``place(need, free)``
    ``{node: pods}`` where all pods of the gang fit now, or None (all or none);
    fills the tightest node that still takes a pod first, so big holes stay big.
``take(free, placement, need)``
    ``free`` minus a placement (a new dict).
``cap_room(allocatable, used, share)``
    ``(cpu_m, mem_b)`` the scavengers may still add under ``share`` (0..1) of
    ``allocatable`` (cpu_m, mem_b), given what they ``used`` already.
``choose_starts(waiting, free, allocatable, used, share)``
    one ``Decision`` per waiting ScavengerJob, in start order: ``start``
    (with its placement), ``no-room``, ``over-cap`` or ``never-fits``.
    Backfill, like Kueue's BestEffortFIFO: when the head does not fit now, a
    later (smaller) one may start; nothing is reserved for the head.
``segment_end(start_over, duration)`` / ``standing(now, start_over, duration)``
    when the running segment ends; seed 002's "running priority" as the share
    (0..1) of ``duration`` done since the last checkpoint.
``victim_key(start_over)``
    how kube-scheduler ranks equal-priority victims: the largest key (the
    latest start, i.e. the least progress since the checkpoint) goes first.
``classify(pods, node_gone)``
    a segment's pods -> ``Verdict(kind, pod, why)``: ``failed`` (a pod failed
    by itself: non-zero exit, OOMKilled named, phase Failed), ``interrupted``
    (deleted from outside, preempted, evicted, DisruptionTarget, its node
    gone), ``succeeded`` (all pods exited 0), ``running`` (all running) or
    ``starting``. A pod failing by itself wins over siblings being deleted
    (the Job controller deletes them after the failure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .model import PodView


# -- resources ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Need:
    """A gang of ``pods`` identical pods, each requesting ``cpu_m`` millicores and ``mem_b`` bytes."""

    pods: int
    cpu_m: int
    mem_b: int

    @property
    def total(self) -> tuple[int, int]:
        return (self.pods * self.cpu_m, self.pods * self.mem_b)


@dataclass(frozen=True, slots=True)
class Room:
    """Room on one node: cpu millicores, memory bytes, pod slots."""

    name: str
    cpu_m: int
    mem_b: int
    pods: int = 110


def _fits(room: Room, need: Need) -> int:
    """How many of the gang's pods fit in ``room``."""
    n = room.pods
    if need.cpu_m > 0:
        n = min(n, room.cpu_m // need.cpu_m)
    if need.mem_b > 0:
        n = min(n, room.mem_b // need.mem_b)
    return max(n, 0)


def place(need: Need, free: Mapping[str, Room]) -> dict[str, int] | None:
    """Where all ``need.pods`` pods fit now, as ``{node: count}``; None when they do not (all or none).

    Best fit: nodes with the least free cpu (then memory, then name) that still take a pod
    are filled first, so the big holes stay for big gangs."""
    if need.pods <= 0:
        return {}
    left = need.pods
    out: dict[str, int] = {}
    for room in sorted(free.values(), key=lambda r: (r.cpu_m, r.mem_b, r.name)):
        n = _fits(room, need)
        if n <= 0:
            continue
        n = min(n, left)
        out[room.name] = n
        left -= n
        if left == 0:
            return out
    return None


def take(free: Mapping[str, Room], placement: Mapping[str, int], need: Need) -> dict[str, Room]:
    """``free`` with a placement's pods taken out (a new mapping; ``free`` is not changed)."""
    out = dict(free)
    for name, n in placement.items():
        r = out[name]
        out[name] = Room(name, r.cpu_m - n * need.cpu_m, r.mem_b - n * need.mem_b, r.pods - n)
    return out


def cap_room(allocatable: tuple[int, int], used: tuple[int, int], share: float) -> tuple[int, int]:
    """What the scavengers may still add: ``share`` of ``allocatable`` (cpu_m, mem_b) minus ``used``."""
    return (int(allocatable[0] * share) - used[0], int(allocatable[1] * share) - used[1])


# -- start order ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Waiting:
    key: tuple[str, str]  # (namespace, name)
    interrupted_count: int
    created: float  # metadata.creationTimestamp, epoch s
    need: Need


def start_key(w: Waiting) -> tuple[int, float, tuple[str, str]]:
    return (-w.interrupted_count, w.created, w.key)


def start_order(waiting: Iterable[Waiting]) -> list[Waiting]:
    """Highest interruptedCount first ("better finish what we started"), then oldest, then name."""
    return sorted(waiting, key=start_key)


DecisionKind = Literal["start", "no-room", "over-cap", "never-fits"]


@dataclass(frozen=True, slots=True)
class Decision:
    waiting: Waiting
    kind: DecisionKind
    placement: Mapping[str, int] | None = None
    why: str = ""


def _cpu(m: int) -> str:
    return f"{m // 1000}" if m % 1000 == 0 else f"{m}m"


def _mem(b: int) -> str:
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if b >= size and b % size == 0:
            return f"{b // size}{unit}"
    if b >= 1 << 30:
        return f"{b / (1 << 30):.1f}Gi"
    if b >= 1 << 20:
        return f"{b / (1 << 20):.1f}Mi"
    return str(b)


def describe(need: Need) -> str:
    each = f"{_cpu(need.cpu_m)} cpu, {_mem(need.mem_b)} memory"
    return f"{need.pods} pod{'s' if need.pods != 1 else ''} of {each}"


def choose_starts(
    waiting: Iterable[Waiting],
    free: Mapping[str, Room],
    allocatable: Mapping[str, Room],
    used: tuple[int, int],
    share: float,
) -> list[Decision]:
    """Which waiting ScavengerJobs start now, in start order.

    ``free``: room left now on each node the scavenger queue may use (allocatable minus the
    requests of the pods there); ``allocatable``: those nodes' allocatable (for "can never
    fit"); ``used``: (cpu_m, mem_b) the scavengers' pods request now; ``share``: the cap.
    A gang starts when it is under the cap and all its pods fit; later ones may backfill."""
    total = (sum(r.cpu_m for r in allocatable.values()), sum(r.mem_b for r in allocatable.values()))
    limit = (int(total[0] * share), int(total[1] * share))
    room = dict(free)
    cur = used
    out: list[Decision] = []
    for w in start_order(waiting):
        need = w.need
        tc, tm = need.total
        if tc > limit[0] or tm > limit[1]:
            out.append(Decision(w, "never-fits", why=(
                f"needs {describe(need)} ({_cpu(tc)} cpu, {_mem(tm)} in all), over the scavengers' share "
                f"{share:.0%} of the nodes they may use ({_cpu(limit[0])} cpu, {_mem(limit[1])})")))
            continue
        if place(need, allocatable) is None:
            out.append(Decision(w, "never-fits", why=(
                f"needs {describe(need)}, and not all of them fit even on the empty nodes it may use "
                f"({len(allocatable)} node{'s' if len(allocatable) != 1 else ''})")))
            continue
        cap_c, cap_m = cap_room(total, cur, share)
        if tc > cap_c or tm > cap_m:
            out.append(Decision(w, "over-cap", why=(
                f"waiting: the scavengers' share {share:.0%} leaves {_cpu(max(cap_c, 0))} cpu and "
                f"{_mem(max(cap_m, 0))}, it needs {_cpu(tc)} cpu and {_mem(tm)}")))
            continue
        where = place(need, room)
        if where is None:
            out.append(Decision(w, "no-room", why=f"waiting: {describe(need)} do not all fit on the free capacity now"))
            continue
        room = take(room, where, need)
        cur = (cur[0] + tc, cur[1] + tm)
        out.append(Decision(w, "start", placement=where))
    return out


# -- segments ------------------------------------------------------------------
def segment_end(start_over: float, duration: float) -> float:
    """When a segment that (re)started at ``start_over`` ends: the next checkpoint boundary."""
    return start_over + duration


def standing(now: float, start_over: float, duration: float) -> float:
    """Seed 002's "running priority" as a number: the share (0..1) of ``duration`` done since
    the last checkpoint. It grows with the segment and starts over at each boundary."""
    if duration <= 0:
        return 0.0
    return min(max((now - start_over) / duration, 0.0), 1.0)


def victim_key(start_over: float) -> float:
    """kube-scheduler's order among equal-priority victims (the latest started goes first) over
    segments: the largest key is preempted first. With segments, a pod's start is its last
    checkpoint, so this is "the least progress since the checkpoint goes first"."""
    return start_over


# -- failure vs interruption ---------------------------------------------------
VerdictKind = Literal["failed", "interrupted", "succeeded", "running", "starting"]


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    pod: PodView | None = None  # the pod that decided it (failed / interrupted)
    why: str = ""


def interruption(pod: PodView, node_gone: Callable[[str], bool]) -> str | None:
    """Why ``pod`` was stopped from outside, or None. Deletion (kube-scheduler preemption on
    1.20, eviction, ``kubectl delete``, the taint manager), a DisruptionTarget condition
    (newer Kubernetes), a kubelet reason (Evicted, NodeLost, Shutdown, ...), or its node gone."""
    if pod.interrupted is not None:
        return pod.interrupted
    if pod.deleting and pod.phase != "Succeeded":
        return f"pod {pod.ref.name} was deleted while {pod.phase.lower()} (preempted, evicted or deleted from outside)"
    if pod.node and pod.phase not in ("Succeeded", "Failed") and node_gone(pod.node):
        return f"node {pod.node} of pod {pod.ref.name} is gone"
    return None


def classify(pods: Sequence[PodView], expected: int, node_gone: Callable[[str], bool] = lambda n: False) -> Verdict:
    """What the pods of one segment say. ``expected``: the gang's size.

    A pod that failed by itself (and was not being deleted or disrupted) fails the whole
    ScavengerJob; this wins over siblings being deleted, which is what the Job controller
    does after a failure. Otherwise any interruption interrupts it."""
    failed: PodView | None = None
    interrupted: tuple[PodView, str] | None = None
    running = succeeded = 0
    for p in sorted(pods, key=lambda x: x.ref.name):
        why = interruption(p, node_gone)
        if why is not None:
            if interrupted is None:
                interrupted = (p, why)
            continue
        if p.failure is not None or p.phase == "Failed":
            if failed is None or (p.failed_at or 0) < (failed.failed_at or 0):
                failed = p
            continue
        if p.phase == "Succeeded":
            succeeded += 1
        elif p.phase == "Running":
            running += 1
    if failed is not None:
        return Verdict("failed", failed, failed.failure or "pod phase Failed")
    if interrupted is not None:
        return Verdict("interrupted", interrupted[0], interrupted[1])
    if expected > 0 and succeeded >= expected:
        return Verdict("succeeded")
    if expected > 0 and running + succeeded >= expected:
        return Verdict("running")
    return Verdict("starting")
