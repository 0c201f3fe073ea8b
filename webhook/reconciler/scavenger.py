"""ScavengerJobs: pure planning (no I/O, no clock, no ``kubernetes``).

The mechanism (docs/dev/reconciler.md "Scavenger jobs", bench/README.md "Scavenger preemption"): a
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
    when the running segment ends; how far the running segment has got, as the share
    (0..1) of ``duration`` done since the last checkpoint (the protection a longer
    run has earned).
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

import bisect
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from ..contract import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_LABEL,
    QUEUE_LABEL,
    SCAVENGERJOB_LABEL,
    SEGMENT_LABEL,
)
from ..rules.scavengerjob import FINISHED, parse_scavengerjob
from ..units import (
    format_duration,
    format_memory,
    format_time,
    json_int,
    parse_time,
)
from ..windows import Window
from .actions import Action, ActionKind, Delete, Requirement, Unplannable, unplannable
from .model import (
    PDB,
    SCAVENGER_JOB,
    JobView,
    NodeView,
    PodView,
    Ref,
    Snapshot,
    cut,
    ref_of,
)
from .mounts import MountFailure
from .settings import QueuePolicy, Settings
from .shadow import matches


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


def _place_sorted(need: Need, order: Sequence[tuple[int, int, str]], free: Mapping[str, Room]) -> dict[str, int] | None:
    """``place`` over ``order``, the free rooms already sorted by (cpu, memory, name), with
    ``order``'s cpu and memory equal to ``free``'s. The same answer as ``place``, cheaper: the
    rooms with less cpu than one pod needs (a prefix of ``order``) are skipped by bisection."""
    if need.pods <= 0:
        return {}
    left = need.pods
    out: dict[str, int] = {}
    cpu, mem = need.cpu_m, need.mem_b
    for i in range(bisect.bisect_left(order, (cpu,)) if cpu > 0 else 0, len(order)):
        c, m, name = order[i]
        if mem > 0 and m < mem:
            continue
        n = free[name].pods
        if cpu > 0 and c // cpu < n:
            n = c // cpu
        if mem > 0 and m // mem < n:
            n = m // mem
        if n <= 0:
            continue
        if n > left:
            n = left
        out[name] = n
        left -= n
        if left == 0:
            return out
    return None


def _fits_anywhere(need: Need, rooms: Mapping[tuple[int, int, int], int]) -> bool:
    """``place(need, ...) is not None`` over rooms counted by (cpu, memory, pods)."""
    total = 0
    for (c, m, k), count in rooms.items():
        total += count * _fits(Room("", c, m, k), need)
        if total >= need.pods:
            return True
    return need.pods <= 0


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
    # the free rooms in best-fit order, kept sorted as starts take from them (no sort per start)
    order = sorted((r.cpu_m, r.mem_b, r.name) for r in room.values())
    cur = used
    out: list[Decision] = []
    ever: dict[Need, bool] = {}  # need -> fits the empty nodes at all
    shapes: dict[tuple[int, int, int], int] = {}  # the empty nodes, counted by (cpu, memory, pods)
    for r in allocatable.values():
        shapes[(r.cpu_m, r.mem_b, r.pods)] = shapes.get((r.cpu_m, r.mem_b, r.pods), 0) + 1
    # Needs that did not fit this pass: room only shrinks, so they never will, nor will any need
    # at least as big in pods, cpu and memory per pod.
    no_room: set[Need] = set()
    no_room_min: list[Need] = []
    for w in start_order(waiting):
        need = w.need
        tc, tm = need.total
        if tc > limit[0] or tm > limit[1]:
            out.append(Decision(w, "never-fits", why=(
                f"needs {describe(need)} ({_cpu(tc)} cpu, {_mem(tm)} in all), over the scavengers' share "
                f"{share:.0%} of the nodes they may use ({_cpu(limit[0])} cpu, {_mem(limit[1])})")))
            continue
        fits = ever.get(need)
        if fits is None:
            fits = ever[need] = _fits_anywhere(need, shapes)
        if not fits:
            out.append(Decision(w, "never-fits", why=(
                f"needs {describe(need)}, and not all of them fit even on the empty nodes it may use "
                f"({len(allocatable)} node{'s' if len(allocatable) != 1 else ''})")))
            continue
        cap_c, cap_m = cap_room(total, cur, share)
        if tc > cap_c or tm > cap_m:
            out.append(Decision(w, "over-cap", why=(
                f"waiting: it needs {_cpu(tc)} cpu and {_mem(tm)}, more than is left of the scavengers' share "
                f"({share:.0%} of the cluster)")))
            continue
        where = None if need in no_room or any(
            need.pods >= n.pods and need.cpu_m >= n.cpu_m and need.mem_b >= n.mem_b for n in no_room_min
        ) else _place_sorted(need, order, room)
        if where is None:
            if need not in no_room:
                no_room.add(need)
                no_room_min.append(need)
            out.append(Decision(w, "no-room", why=f"waiting: {describe(need)} do not all fit on the free capacity now"))
            continue
        for name in where:
            r = room[name]
            order.pop(bisect.bisect_left(order, (r.cpu_m, r.mem_b, name)))
        room = take(room, where, need)
        for name in where:
            r = room[name]
            bisect.insort(order, (r.cpu_m, r.mem_b, name))
        cur = (cur[0] + tc, cur[1] + tm)
        out.append(Decision(w, "start", placement=where))
    return out


# -- segments ------------------------------------------------------------------
def segment_end(start_over: float, duration: float) -> float:
    """When a segment that (re)started at ``start_over`` ends: the next checkpoint boundary."""
    return start_over + duration


def standing(now: float, start_over: float, duration: float) -> float:
    """The "running priority" a segment has earned, as a number: the share (0..1) of ``duration`` done since
    the last checkpoint. It grows with the segment and starts over at each boundary."""
    if duration <= 0:
        return 0.0
    return min(max((now - start_over) / duration, 0.0), 1.0)


def victim_key(start_over: float) -> float:
    """kube-scheduler's order among equal-priority victims (the latest started goes first) over
    segments: the largest key is preempted first. With segments, a pod's start is its last
    checkpoint, so this is "the least progress since the checkpoint goes first"."""
    return start_over


# -- unsaved work ------------------------------------------------------------------
def unsaved(elapsed: float, interval: float | None) -> float:
    """The work since the last checkpoint as the reconciler can know it, ``elapsed`` after the pods
    started: with a declared checkpoint ``interval`` (spec.checkpoint.interval: one long pod), the time
    since the last multiple of it; without (segments: each starts at a checkpoint), all of ``elapsed``.
    The workload's own restart (reading its checkpoint) is not known, so it is counted as work."""
    elapsed = max(elapsed, 0.0)
    return elapsed % interval if interval else elapsed


SOON = 3600.0  # a maintenance window starting within this is counted as the drain of its nodes' scavengers


def gang_loss(*, unsaved_s: float, cores: float, restart_s: float, interval: float | None = None,
              drain_in: float | None = None) -> float:
    """Core-seconds an eviction now throws away: the unsaved work and a restart, of every core of
    the gang. A gang whose node is drained in ``drain_in`` seconds (a maintenance window within
    ``SOON``) is interrupted then anyway, paying the restart and losing its unsaved work at that
    time: evicting it now costs only the work it would have saved at its checkpoints (every
    ``interval`` from its last one; None: none before the drain) before the drain, and nothing when
    it reaches none. A drain further off is not counted: the window may move, the gang may end first.
    The reconciler's victims (victims.py), its guard (``_guard``) and bench/scavenger_sim.py use it."""
    if drain_in is None or drain_in > SOON:
        return (unsaved_s + restart_s) * cores
    period = interval or float("inf")
    at_drain = (unsaved_s + max(drain_in, 0.0)) % period if period != float("inf") else unsaved_s + drain_in
    return max(unsaved_s - at_drain, 0.0) * cores


# -- failure vs interruption ---------------------------------------------------
VerdictKind = Literal["failed", "checkpointed", "interrupted", "succeeded", "running", "starting"]


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


def checkpointed_itself(pod: PodView, checkpoint_code: int | None) -> bool:
    """``pod`` exited with the agreed checkpoint code by itself: whatever came after (deleted by
    the Job controller, by the garbage collector, by a person, or marked DisruptionTarget by an
    eviction of the ended pod) is no interruption. A DisruptionTarget from before its exit (preempted,
    it saved on SIGTERM and exited with the code) still is one, counted from that condition."""
    if checkpoint_code is None or pod.exit_code != checkpoint_code:
        return False
    return not pod.disrupted or pod.disrupted_at is None or pod.failed_at is None \
        or pod.disrupted_at >= pod.failed_at


def classify(pods: Sequence[PodView], expected: int, node_gone: Callable[[str], bool] = lambda n: False,
             checkpoint_code: int | None = None) -> Verdict:
    """What the pods of one segment say. ``expected``: the gang's size.

    A pod that failed by itself (and was not being deleted or disrupted) fails the whole
    ScavengerJob; this wins over siblings being deleted, which is what the Job controller
    does after a failure. A pod that exited with ``checkpoint_code`` (the workload's agreed
    "checkpointed, end this segment" code) ends the segment (``checkpointed``): it wins over
    siblings being deleted, not over a real failure. Otherwise any interruption interrupts it."""
    checkpointed: PodView | None = None
    failed: PodView | None = None
    interrupted: tuple[PodView, str] | None = None
    running = succeeded = 0
    for p in sorted(pods, key=lambda x: x.ref.name):
        why = None if checkpointed_itself(p, checkpoint_code) else interruption(p, node_gone)
        if why is not None:
            if interrupted is None:
                interrupted = (p, why)
            continue
        if checkpoint_code is not None and p.exit_code == checkpoint_code:
            if checkpointed is None:
                checkpointed = p
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
    if checkpointed is not None:
        return Verdict("checkpointed", checkpointed, f"pod {checkpointed.ref.name} exited with the agreed "
                                                     f"checkpoint code {checkpoint_code}")
    if interrupted is not None:
        return Verdict("interrupted", interrupted[0], interrupted[1])
    if expected > 0 and succeeded >= expected:
        return Verdict("succeeded")
    if expected > 0 and running + succeeded >= expected:
        return Verdict("running")
    return Verdict("starting")


# ==============================================================================
# The controller's plan: ScavengerJob views + snapshot -> actions
# ==============================================================================
#
# State lives in the ScavengerJob's status (written through the status subresource,
# fenced by resourceVersion) and in the Jobs it owns, named ``<name>-<segment>``:
#
#   status.segment         the segment whose Job should exist (0: none yet)
#   status.jobName         that Job's name while it should exist; "" while waiting
#   status.runningSegment  the last segment whose pods were all seen running
#
# Every transition writes the status *before* it deletes or creates a Job, so a
# deletion the controller makes is never taken for an interruption, and a crash
# between the two writes is finished by the next pass from the status alone:
# ``jobName`` set but no Job -> create it (or, if that segment had run, the Job was
# deleted from outside: an interruption); a Job of another segment -> delete it.
# Job creation is idempotent (fixed names: AlreadyExists), and Event names derive
# from the segment, so nothing is doubled.

PHASES = ("Pending", "Running", "Interrupted", "Completed", "Failed")
# Completed and Failed (rules.scavengerjob.FINISHED) are final: nothing here starts, resumes or re-queues
# a finished ScavengerJob, whatever its spec says since (so its user may edit it bigger: it never runs again).
MAX_TIMESTAMPS = 100  # runningTimestamps / interruptedTimestamps keep the newest this many


@dataclass(frozen=True, slots=True)
class SJView:
    ref: Ref
    resource_version: str
    generation: int
    created: float
    deleting: bool
    spec: Mapping[str, Any]
    need: Need | None  # None: resources unusable (see problems)
    duration: int | None
    problems: tuple[str, ...]
    checkpoint_code: int | None  # spec.checkpointExitCode: the workload ends its segments itself
    checkpoint_interval: int | None  # spec.checkpoint.interval, s: one long pod that checkpoints every interval
    phase: str  # "" until first written
    interrupted_count: int
    segment: int
    job_name: str
    running_segment: int
    start_over: float | None
    guarded_segment: int  # status.guardedSegment: the segment whose guard (PDB) was confirmed made
    running_ts: tuple[str, ...]
    interrupted_ts: tuple[str, ...]
    finished: str | None
    message: str
    conditions: tuple[Mapping[str, Any], ...]
    observed_generation: int | None
    creation_ts: str | None  # status.creationTimestamp as written


def _strs(v: Any) -> tuple[str, ...]:
    """A status list of timestamps: the newest ``MAX_TIMESTAMPS`` (all the reconciler writes), each cut."""
    return tuple(cut(x, 64) for x in v[-MAX_TIMESTAMPS:] if isinstance(x, str)) if isinstance(v, list) else ()


# What a view keeps of a ScavengerJob's spec (to make its Jobs from), as JSON: a real one is a few
# hundred bytes. A larger one is a problem of the ScavengerJob, and its spec is not kept.
MAX_SPEC_BYTES = 64 * 1024
MAX_SPEC_PROBLEMS = 20


def _conditions_kept(v: Any) -> tuple[Mapping[str, Any], ...]:
    """Of status.conditions, what _conditions() reads: type, status and lastTransitionTime of ours."""
    return tuple({k: cut(c[k], 64) for k in ("type", "status", "lastTransitionTime") if isinstance(c.get(k), str)}
                 for c in (v if isinstance(v, list) else ())[:8]
                 if isinstance(c, dict) and c.get("type") in ("Running", "Finished"))


def sj_view(obj: Mapping[str, Any]) -> SJView:
    """The reconciler's view of a ScavengerJob. Its spec is read by the admission rule's own parse
    (rules.scavengerjob.parse_scavengerjob): one stored with problems (while the webhook was down, or
    before a bound existed) fails ``InvalidSpec`` with the words the webhook would have refused it with."""
    md = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    st = obj.get("status") or {}
    parsed = parse_scavengerjob(obj)
    # The webhook's words, each cut and at most MAX_SPEC_PROBLEMS of them: what a view keeps of a
    # hostile spec stays small (the status message is cut anyway).
    problems = [cut(p) for p in parsed.problems[:MAX_SPEC_PROBLEMS]]
    if len(parsed.problems) > MAX_SPEC_PROBLEMS:
        problems.append(f"... and {len(parsed.problems) - MAX_SPEC_PROBLEMS} more problems")
    size = len(json.dumps(spec, default=str)) if isinstance(spec, dict) else 0
    if size > MAX_SPEC_BYTES:
        problems.append(f"spec: {size} bytes as JSON, more than the {MAX_SPEC_BYTES} a ScavengerJob's spec may have")
        spec = {}
    need: Need | None = None
    if not problems and parsed.pods is not None and parsed.cpu_milli is not None and parsed.memory is not None:
        need = Need(parsed.pods, parsed.cpu_milli, parsed.memory)
    ok = need is not None
    phase = str(st.get("phase")) if st.get("phase") in PHASES else ""
    return SJView(
        ref=ref_of(SCAVENGER_JOB, md),
        resource_version=md.get("resourceVersion") or "",
        generation=json_int(md.get("generation"), 1),
        created=parse_time(md.get("creationTimestamp")) or 0.0,
        deleting=bool(md.get("deletionTimestamp")),
        spec=spec if isinstance(spec, dict) else {},
        need=need,
        duration=parsed.duration if ok else None,
        problems=tuple(problems),
        checkpoint_code=parsed.checkpoint_code if ok else None,
        checkpoint_interval=parsed.checkpoint_interval if ok else None,
        phase=phase,
        interrupted_count=json_int(st.get("interruptedCount"), 0),
        segment=json_int(st.get("segment"), 0),
        job_name=cut(st["jobName"], 253) if isinstance(st.get("jobName"), str) else "",
        running_segment=json_int(st.get("runningSegment"), 0),
        start_over=parse_time(st.get("priorityStartOverTimestamp")),
        guarded_segment=json_int(st.get("guardedSegment"), 0),
        running_ts=_strs(st.get("runningTimestamps")),
        interrupted_ts=_strs(st.get("interruptedTimestamps")),
        finished=st.get("finishedTimestamp") if isinstance(st.get("finishedTimestamp"), str) else None,
        message=cut(st["message"]) if isinstance(st.get("message"), str) else "",
        conditions=_conditions_kept(st.get("conditions")),
        observed_generation=st.get("observedGeneration") if isinstance(st.get("observedGeneration"), int) else None,
        creation_ts=st.get("creationTimestamp") if isinstance(st.get("creationTimestamp"), str) else None,
    )


def guard_due(start_over: float, cores: float, guard: float) -> float:
    """When a segment that (re)started at ``start_over`` with ``cores`` has ``guard`` core-seconds
    of work since its checkpoint (its restart included: the model needs no workload's figures)."""
    return start_over + guard / cores if cores > 0 else float("inf")


def node_leaving(node: NodeView | None) -> bool:
    """A node being emptied: cordoned (kubectl drain, batchgate's maintenance drain) or tainted
    NoSchedule / NoExecute (cluster-autoscaler's ToBeDeletedByClusterAutoscaler, the taint
    manager). A guard there would only hold the drain off."""
    return node is not None and (node.unschedulable or any(e in ("NoSchedule", "NoExecute")
                                                           for _k, _v, e in node.taints))


def guard_body(sj: SJView, job: JobView, segment: int) -> dict[str, Any]:
    """The guard of a running segment: a PodDisruptionBudget over its pods that allows no
    disruption (all of them must stay available). kube-scheduler's preemption prefers the node whose victims violate the fewest
    budgets, so it takes a gang that has little unsaved work before a guarded one (it still
    preempts guarded pods when nothing else makes room: a budget never holds ordinary work
    back). Owned by the segment's Job, it goes with it at the next boundary or interruption."""
    return {
        "apiVersion": PDB.api_version, "kind": "PodDisruptionBudget",
        "metadata": {
            "name": job.ref.name, "namespace": sj.ref.namespace,
            "labels": {SCAVENGERJOB_LABEL: sj.ref.name, SEGMENT_LABEL: str(segment), MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job.ref.name, "uid": job.ref.uid}],
        },
        # minAvailable = every pod (not maxUnavailable 0: the disruption controller can count
        # a Job's pods only for an absolute minAvailable, it has no scale to read)
        "spec": {"minAvailable": segment_size(job),
                 "selector": {"matchLabels": {SCAVENGERJOB_LABEL: sj.ref.name, SEGMENT_LABEL: str(segment)}}},
    }


def checkpoint_period(sj: SJView) -> float | None:
    """How often the ScavengerJob checkpoints, as far as the reconciler knows: its declared
    ``checkpoint.interval``, else its segments' ``duration`` (each boundary is a checkpoint); None
    when the workload ends its segments itself (``checkpointExitCode``) or the spec is unusable."""
    if sj.checkpoint_interval is not None:
        return float(sj.checkpoint_interval)
    return float(sj.duration) if sj.duration and sj.checkpoint_code is None else None


def drain_in(pods: Sequence[PodView], nodes: Mapping[str, NodeView] | None, windows: Iterable[Window],
             now: float) -> float | None:
    """Seconds until the first maintenance window starting within ``SOON`` drains a node of these
    pods (0 when one is on already); None when none does. A gang goes whole: its first drain counts."""
    known = nodes or {}
    times = [max(w.start - now, 0.0) for w in windows if w.end > now and w.start - now < SOON
             for p in pods if p.node and w.covers(p.node, known[p.node].labels if p.node in known else {})]
    return min(times) if times else None


def _guard(sj: SJView, job: JobView, seg: int, pods: Sequence[PodView], now: float, qp: QueuePolicy,
           nodes: Mapping[str, NodeView] | None, windows: Sequence[Window], actions: list[Action],
           wake: list[float]) -> None:
    """Guard a running segment once its unsaved work reaches ``qp.scavengers.guard`` core-seconds;
    lift the guard while one of its pods is on a node being emptied, or while a maintenance window
    will drain it before its next checkpoint (it loses its work then anyway: ``gang_loss`` is 0, so
    it is the cheapest room there is, for kube-scheduler too). Both are confirmed facts:
    ``guardedSegment`` is written only after the budget was seen to exist (a live GET), and the
    budget goes with the Job anyway. With a declared ``checkpoint.interval`` the budget, once made,
    stays for the segment: its ``minAvailable`` is every pod while the interval's unsaved work is
    dear and 0 (every disruption allowed) from each checkpoint until then, one patch per change."""
    if qp.scavengers.guard <= 0 or sj.need is None:
        return
    ref = Ref(PDB.api_version, "PodDisruptionBudget", sj.ref.namespace, job.ref.name, "")
    leaving = [p.node for p in pods if p.node and nodes is not None and node_leaving(nodes.get(p.node))]
    size = segment_size(job)
    cores = size * sj.need.cpu_m / 1000
    start = sj.start_over if sj.start_over is not None else now
    drain = drain_in(pods, nodes, windows, now) if not leaving else None
    period = checkpoint_period(sj)
    now_unsaved = unsaved(now - start, sj.checkpoint_interval)
    doomed = drain is not None and gang_loss(unsaved_s=now_unsaved, cores=1.0, restart_s=0.0, interval=period,
                                             drain_in=drain) == 0
    if doomed and drain is not None and period:
        # what it will have unsaved at the drain stays the same until its next checkpoint, while what it
        # has unsaved now grows: once past that, taking it now costs something again
        wake.append(now + max((now_unsaved + drain) % period - now_unsaved, 0.0) + 1)
    guarded = sj.guarded_segment == seg
    if guarded and (leaving or doomed):
        why = (f"node {leaving[0]} is being emptied" if leaving else
               f"a maintenance window drains it in {format_duration(int(drain or 0))}, before its next checkpoint")
        actions.append(_act("sj-unguard", sj, "GuardLifted",
                            f"segment {seg}: {why}; the PodDisruptionBudget {ref.name} that held its gang is deleted",
                            now, phase="Running", key=f"unguard/{seg}", quiet=True, status={"guardedSegment": None},
                            deletes=(Delete(ref, owner_uid=job.ref.uid),)))
        return
    if leaving or doomed:
        return
    key = f"{seg}"
    if sj.checkpoint_interval is not None:
        # One long pod: its unsaved work starts over at every declared checkpoint, and so does the
        # guard (held from the same core-seconds of unsaved work in each interval, lifted at the checkpoint).
        interval = sj.checkpoint_interval
        hold = qp.scavengers.guard / cores if cores > 0 else float("inf")
        if hold >= interval:
            return  # never that much unsaved work
        k = int(max(now - start, 0.0) // interval)
        begins = start + k * interval
        held = now >= begins + hold
        if guarded:
            want = size if held else 0
            gone = _act("sj-unguard", sj, "GuardLifted", f"segment {seg}: its PodDisruptionBudget {ref.name} is "
                        "gone; it is made again when its unsaved work is dear", now, phase="Running",
                        key=f"unguard/{seg}/gone", quiet=True, status={"guardedSegment": None})
            actions.append(Action(
                kind="sj-guard-set", target=ref, reason="GuardSet", quiet=True, key=f"{sj.ref.uid}/{seg}/{k}/{want}",
                message=(f"segment {seg}: minAvailable {want} on the PodDisruptionBudget {ref.name} ("
                         + ("its unsaved work is dear again)" if held else
                            f"it checkpointed, every {format_duration(interval)}: cheap until its unsaved work is dear)")),
                patch={"spec": {"minAvailable": want}}, requires=(Requirement(ref, gone),)))
            wake.append(begins + interval if held else begins + hold)
            return
        if not held:
            wake.append(begins + hold)
            return
        due, key = begins + hold, f"{seg}/{k}"
    elif guarded:
        return
    else:
        due = guard_due(start, cores, qp.scavengers.guard)
    if now < due:
        wake.append(due)
        return
    create = Action(kind="sj-guard-create", target=sj.ref, reason="GuardCreated", key=f"guard/{key}", quiet=True,
                    message=f"segment {seg}: creating the PodDisruptionBudget {ref.name}",
                    create=guard_body(sj, job, seg))
    msg = (f"segment {seg}: {qp.scavengers.guard / 60:g} core-minutes of work since its checkpoint; "
           f"PodDisruptionBudget {ref.name} asks kube-scheduler to preempt others first")
    actions.append(_act("sj-guard", sj, "Guarded", msg, now, phase="Running", key=f"guard/{key}", quiet=True,
                        status={"guardedSegment": seg}, requires=(Requirement(ref, create),)))
    wake.append(now + 2)  # the budget is not watched: look again for it to confirm


def job_name(sj: str, segment: int) -> str:
    """``<name>-<segment>``, shortened with a hash to 63 characters (a Job's name is its pods' label)."""
    suffix = f"-{segment}"
    if len(sj) + len(suffix) <= 63:
        return sj + suffix
    digest = hashlib.sha256(sj.encode()).hexdigest()[:6]
    return f"{sj[:63 - len(suffix) - 7].rstrip('-.')}-{digest}{suffix}"


def segment_size(job: JobView) -> int:
    """How many pods the segment run by ``job`` has: the gang it was made with (job_body's pod-group-size
    label on its template, which Kubernetes keeps as it was; 1 without). Not the ScavengerJob's spec, which
    its user may have lowered since (and an admin raised): the spec makes the next segment."""
    return job.group_size or 1


def current_job(sj: SJView, jobs: Iterable[JobView]) -> JobView | None:
    """The Job of the segment the status names (``jobName``), when it exists and is not being deleted."""
    return next((j for j in jobs if j.ref.name == sj.job_name and not j.deleting), None) if sj.job_name else None


def job_body(sj: SJView, segment: int, qp: QueuePolicy) -> dict[str, Any]:
    """The ``batch/v1`` Job of one segment: all pods at once (parallelism = completions = pods),
    no retries (a failure fails the ScavengerJob), Guaranteed QoS (requests = limits), the
    scavenger queue's class and nodes, owned by the ScavengerJob."""
    spec = sj.spec
    name = job_name(sj.ref.name, segment)
    pods = sj.need.pods if sj.need else 1
    res = spec.get("resources") or {}
    limits = dict(res.get("limits") or {})
    requests = {**limits, **(res.get("requests") or {})}
    labels = {QUEUE_LABEL: qp.scavengers.queue, SCAVENGERJOB_LABEL: sj.ref.name, SEGMENT_LABEL: str(segment),
              MANAGED_BY_LABEL: MANAGED_BY}
    tlabels = dict(labels)
    if pods > 1:
        tlabels.update({POD_GROUP_LABEL: name, POD_GROUP_SIZE_LABEL: str(pods)})
    container: dict[str, Any] = {
        "name": "main", "image": spec.get("image"), "command": list(spec.get("command") or []),
        "resources": {"limits": limits, "requests": requests},
    }
    if spec.get("args"):
        container["args"] = list(spec["args"])
    if spec.get("env"):
        container["env"] = [dict(e) for e in spec["env"]]
    job_spec: dict[str, Any] = {}
    if sj.checkpoint_interval is not None:  # the contract, where the workload can read it
        container.setdefault("env", []).append({"name": "BATCHGATE_CHECKPOINT_INTERVAL_SECONDS",
                                                "value": str(sj.checkpoint_interval)})
    if sj.checkpoint_code is not None:  # the contract, where the workload can read it
        container.setdefault("env", []).append({"name": "BATCHGATE_CHECKPOINT_EXIT_CODE",
                                                "value": str(sj.checkpoint_code)})
        # The Job's own record of the checkpoint, for when the pod is gone before a pass saw it
        # (a pod that ended is deleted at once): condition Failed, reason PodFailurePolicy.
        job_spec["podFailurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": {
            "containerName": "main", "operator": "In", "values": [sj.checkpoint_code]}}]}
    volumes, mounts = [], []
    for v in spec.get("volumes") or ():
        mounts.append({"name": v["name"], "mountPath": v["mountPath"], **({"readOnly": True} if v.get("readOnly") else {})})
        if "persistentVolumeClaim" in v:
            src: dict[str, Any] = {"persistentVolumeClaim": {"claimName": v["persistentVolumeClaim"]["claimName"]}}
        elif "configMap" in v:
            src = {"configMap": {"name": v["configMap"]["name"]}}
        else:
            src = {"secret": {"secretName": v["secret"]["secretName"]}}
        volumes.append({"name": v["name"], **src})
    if mounts:
        container["volumeMounts"] = mounts
    user = spec.get("runAsUser")
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": qp.scavengers.grace_period,
        "containers": [container],
        "securityContext": {"runAsNonRoot": True, **({"runAsUser": user} if isinstance(user, int) else {})},
        "automountServiceAccountToken": False,
    }
    if qp.scavenger_class:
        pod_spec["priorityClassName"] = qp.scavenger_class
    if qp.scavenger_node_selector:
        pod_spec["nodeSelector"] = dict(qp.scavenger_node_selector)
    if volumes:
        pod_spec["volumes"] = volumes
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": name, "namespace": sj.ref.namespace, "labels": labels,
            "ownerReferences": [{"apiVersion": sj.ref.api_version, "kind": "ScavengerJob", "name": sj.ref.name,
                                 "uid": sj.ref.uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, **job_spec,
                 "template": {"metadata": {"labels": tlabels}, "spec": pod_spec}},
    }


def missing_message(kind: str, namespace: str, name: str, how: str = "") -> str:
    """What a ScavengerJob failed for a missing volume source says (reason MissingVolumeSource)."""
    return (f"{kind} {namespace}/{name} does not exist{f' ({how})' if how else ''}; the ScavengerJob cannot "
            "run without it")


def secret_volumes(sj: SJView) -> set[tuple[str, str]]:
    """(volume, Secret) of each Secret volume in its spec: its pods' volumes have the same names."""
    out = set()
    for v in sj.spec.get("volumes") or ():
        src = v.get("secret") if isinstance(v, dict) else None
        if isinstance(src, dict) and isinstance(v.get("name"), str) and isinstance(src.get("secretName"), str):
            out.add((v["name"], src["secretName"]))
    return out


def missing_secret_of(sj: SJView, pods: Sequence[PodView], told: Sequence[tuple[PodView, MountFailure]],
                      ) -> tuple[MountFailure, PodView] | None:
    """The kubelet's word that a Secret this ScavengerJob mounts does not exist: a FailedMount Event
    about one of ``pods`` (its current segment's) still waiting to start on its node, from that
    node's kubelet, naming a Secret the spec mounts on that very volume. Anyone who may write Events
    in the namespace can write one; so it can only ever name a Secret the ScavengerJob mounts,
    about a pod that is not running."""
    if not told:
        return None
    wanted = secret_volumes(sj)
    current = {p.ref.uid for p in pods}
    for p, f in sorted(told, key=lambda t: (t[0].ref.name, t[1].secret)):
        if (p.ref.uid in current and p.node and f.host == p.node and f.namespace == p.ref.namespace
                and not p.terminal and not p.deleting and p.started is None and p.phase == "Pending"
                and (f.volume, f.secret) in wanted):
            return f, p
    return None


def required_objects(sj: SJView) -> list[tuple[str, str]]:
    """(kind, name) of the PVCs and ConfigMaps its volumes need, looked up before a start. Not its
    Secrets: the reconciler holds no right to read Secrets (a ``get`` would read their data too,
    in every namespace, the seal key's included); a missing one keeps the pods in
    ContainerCreating, and the kubelet's FailedMount Event naming it fails the ScavengerJob
    (``missing_secret_of``, mounts.py)."""
    out = []
    for v in sj.spec.get("volumes") or ():
        if not isinstance(v, dict):
            continue
        if isinstance(v.get("persistentVolumeClaim"), dict):
            out.append(("PersistentVolumeClaim", str(v["persistentVolumeClaim"].get("claimName"))))
        elif isinstance(v.get("configMap"), dict):
            out.append(("ConfigMap", str(v["configMap"].get("name"))))
    return out


# -- status writes ----------------------------------------------------------------
def _conditions(sj: SJView, phase: str, reason: str, message: str, now: float) -> list[dict[str, Any]]:
    old = {c.get("type"): c for c in sj.conditions}
    want = [
        ("Running", "True" if phase == "Running" else "False"),
        ("Finished", "True" if phase in FINISHED else "False"),
    ]
    out = []
    for type_, status in want:
        prev = old.get(type_) or {}
        same = prev.get("status") == status
        out.append({
            "type": type_, "status": status, "reason": reason,
            "message": message[:1024],
            "lastTransitionTime": prev.get("lastTransitionTime") if same and prev.get("lastTransitionTime")
            else format_time(now),
        })
    return out


def _status(sj: SJView, now: float, *, phase: str, reason: str, message: str,
            **fields: Any) -> dict[str, Any]:
    """A fenced status merge patch: the given fields plus phase, message, conditions, observedGeneration."""
    st: dict[str, Any] = {
        "phase": phase, "message": message, "observedGeneration": sj.generation,
        "conditions": _conditions(sj, phase, reason, message, now),
    }
    if sj.creation_ts is None:
        st["creationTimestamp"] = format_time(sj.created)
        st.setdefault("interruptedCount", sj.interrupted_count)
    st.update(fields)
    return {"metadata": {"resourceVersion": sj.resource_version}, "status": st}


def _act(kind: ActionKind, sj: SJView, reason: str, message: str, now: float, *, phase: str, key: str,
         warning: bool = False, quiet: bool = False, status: Mapping[str, Any] | None = None,
         deletes: tuple[Delete, ...] = (), create: Mapping[str, Any] | None = None,
         requires: tuple[Requirement, ...] = (), amount: float = 0.0, event_reason: str = "") -> Action:
    return Action(
        kind=kind, target=sj.ref, reason=event_reason or reason, message=message,
        event_type="Warning" if warning else "Normal", key=key, quiet=quiet,
        patch=_status(sj, now, phase=phase, reason=reason, message=message, **dict(status or {})),
        subresource="status", deletes=deletes, create=create, requires=requires, amount=amount,
    )


def _append(ts: tuple[str, ...], t: float) -> list[str]:
    return [*ts, format_time(t)][-MAX_TIMESTAMPS:]


# -- the pass ---------------------------------------------------------------------
@dataclass(slots=True)
class _SJState:
    sj: SJView
    jobs: list[JobView]
    pods: list[PodView]
    # the kubelet's FailedMount Events about its pods naming a missing Secret (mounts.py)
    mount_failures: list[tuple[PodView, MountFailure]] = field(default_factory=list)


def eligible_nodes(nodes: Mapping[str, NodeView], selector: Iterable[tuple[str, str]]) -> list[NodeView]:
    """Nodes the scavenger queue may use: matching its nodeSelector, Ready, schedulable, untainted."""
    sel = tuple(selector)
    return [n for n in nodes.values()
            if n.ready == "True" and not n.unschedulable
            and not any(effect in ("NoSchedule", "NoExecute") for _k, _v, effect in n.taints)
            and all(n.labels.get(k) == v for k, v in sel)]


def sj_owner(job: JobView, snapshot: Snapshot) -> SJView | None:
    """The ScavengerJob that runs ``job`` as one of its segments, when the reconciler has seen it
    exist: a ``batchgate.io/v1alpha1`` ScavengerJob in the Job's namespace with the name and uid
    its controlling ownerReference names. Anyone who may create Jobs may write any
    ownerReference; one naming "a ScavengerJob" of another group, or none that exists, is no
    ScavengerJob's, and the Job gets its deadline and gang handling like any other (issue 27)."""
    o = job.owner
    sjs = snapshot.scavenger_jobs
    if o is None or sjs is None or o.kind != "ScavengerJob" or o.api_version != SCAVENGER_JOB.api_version:
        return None
    sj = sjs.get((job.ref.namespace, o.name))
    return sj if sj is not None and sj.ref.uid == o.uid else None


def is_scavenger(pod: PodView, qp: QueuePolicy) -> bool:
    """Whether a pod is one of the scavengers (their cap, NeverFits), by what nobody can change once
    the pod exists: the queue the webhook recorded at admission (``webhook.workloads``), or the
    scavenger queue's PriorityClass (a pod's priority is immutable, and is what makes it yield to
    everyone; a ScavengerJob's pods get it from the Job the reconciler made). Never the
    ``batchgate.io/queue`` label: whoever may update a pod may change it, and relabelling running
    scavenger pods to ``batch`` (or removing the label) took them out of the cap (issue 27)."""
    admitted = pod.admitted
    if admitted is not None and admitted.queue == qp.scavengers.queue:
        return True
    return bool(qp.scavenger_class) and pod.priority_class == qp.scavenger_class


def plan_scavengers(snapshot: Snapshot, now: float, settings: Settings, *,
                    failed: list[Unplannable] | None = None) -> tuple[list[Action], float | None]:
    """ScavengerJob actions due at ``now``, and when to look again (a segment's end, a timeout).
    ``failed``: where ScavengerJobs that cannot be planned are recorded (each with a ``cannot-plan``
    action, and nothing else planned for it) while the others go on; None: the error propagates."""
    sjs = snapshot.scavenger_jobs
    if not sjs:
        return [], None
    qp = settings.queues
    by_uid = {sj.ref.uid: _SJState(sj, [], []) for sj in sjs.values() if not qp.excluded(sj.ref.namespace)}
    job_owner: dict[str, str] = {}
    job_ref: dict[str, Ref] = {}
    for j in snapshot.jobs.values():
        o = j.owner
        st0 = by_uid.get(o.uid) if o is not None and o.kind == "ScavengerJob" \
            and o.api_version == SCAVENGER_JOB.api_version else None
        # Only a real owner: same namespace and name as the reference says (a forged
        # ownerReference to another namespace's ScavengerJob uid confirms nothing).
        if st0 is not None and o is not None and st0.sj.ref.namespace == j.ref.namespace \
                and st0.sj.ref.name == o.name:
            st0.jobs.append(j)
            job_owner[j.ref.uid] = st0.sj.ref.uid
            job_ref[j.ref.uid] = j.ref
    # Pods: by their Job; pods whose Job is already gone (background deletion) by the
    # ScavengerJob label and the Job name they point at.
    names: dict[tuple[str, str], _SJState] = {(s.sj.ref.namespace, s.sj.ref.name): s for s in by_uid.values()}
    nodes = snapshot.nodes
    windows = [w.window for w in (snapshot.windows or {}).values() if w.window is not None]
    used_c = used_m = 0
    bound: dict[str, tuple[int, int, int]] = {}  # node -> (cpu, mem, pods) taken by live pods
    actions: list[Action] = []
    for p in snapshot.pods.values():
        if p.terminal:
            continue
        if p.node:
            c, m, k = bound.get(p.node, (0, 0, 0))
            bound[p.node] = (c + p.cpu_m, m + p.mem_b, k + 1)
            # The cap counts what is bound: a pending pod takes nothing yet, and one that never binds
            # (it can never fit, or waits for what batchgate cannot see) must not hold the share for
            # good (issue 27). The ScavengerJobs' own gangs still unplaced are counted below.
            if is_scavenger(p, qp):
                used_c, used_m = used_c + p.cpu_m, used_m + p.mem_b
        elif is_scavenger(p, qp) and nodes and not p.deleting and not qp.excluded(p.ref.namespace) \
                and not _estimated(p, settings):
            told = _never_fits_event(p, nodes, failed)
            if told is not None:
                actions.append(told)
        o = p.owner
        if o is None or o.kind != "Job":
            continue
        uid = job_owner.get(o.uid)
        if uid is not None:
            jr = job_ref[o.uid]
            if jr.namespace == p.ref.namespace and jr.name == o.name:
                by_uid[uid].pods.append(p)
        elif p.segment is not None:
            st = names.get((p.ref.namespace, o.name.rsplit("-", 1)[0]))
            if st is not None and o.name == job_name(st.sj.ref.name, p.segment):
                st.pods.append(p)
    if snapshot.mount_failures:
        reported: dict[str, list[MountFailure]] = {}
        for f in snapshot.mount_failures.values():
            reported.setdefault(f.pod_uid, []).append(f)
        for st in by_uid.values():
            st.mount_failures = [(p, f) for p in st.pods for f in reported.get(p.ref.uid, ())]
    # Pods of the terminal phases were skipped above; the classification needs them too.
    for p in snapshot.pods.values():
        o = p.owner
        if p.terminal and o is not None and o.uid in job_owner:
            jr = job_ref[o.uid]
            if jr.namespace == p.ref.namespace and jr.name == o.name:
                by_uid[job_owner[o.uid]].pods.append(p)

    def gone(node: str) -> bool:
        return nodes is not None and node not in nodes

    wake: list[float] = []
    waiting: list[Waiting] = []
    waiting_sj: dict[tuple[str, str], SJView] = {}
    pending_need: list[Need] = []  # gangs started but not all placed: they will take room
    for st in sorted(by_uid.values(), key=lambda s: (s.sj.ref.namespace, s.sj.ref.name)):
        n_actions, n_wake = len(actions), len(wake)
        try:
            w = _one(st, now, qp, gone, actions, wake, nodes, windows)
        except Exception as e:
            if failed is None:
                raise
            del actions[n_actions:], wake[n_wake:]
            unplannable("scavengerjob", st.sj.ref, e, failed, actions)
            continue
        if w is not None:
            waiting.append(w)
            waiting_sj[w.key] = st.sj
        elif st.sj.job_name and st.sj.need is not None and st.sj.phase not in FINISHED:
            live = [p for p in st.pods if not p.terminal and not p.deleting]
            unbound = sum(1 for p in live if not p.node)
            cur = current_job(st.sj, st.jobs)
            size = segment_size(cur) if cur is not None else st.sj.need.pods  # not made yet: from the spec
            missing = max(size - len(live), 0) + unbound
            if missing:
                # started by choose_starts under the cap, not all bound yet: they count (their bound
                # pods counted above, by the class job_body gives them)
                pending_need.append(Need(missing, st.sj.need.cpu_m, st.sj.need.mem_b))
                used_c, used_m = used_c + missing * st.sj.need.cpu_m, used_m + missing * st.sj.need.mem_b

    if waiting and nodes is not None:
        elig = eligible_nodes(nodes, qp.scavenger_node_selector)
        alloc = {n.name: Room(n.name, n.cpu, n.mem, n.max_pods or 110) for n in elig}
        free: dict[str, Room] = {}
        for n in elig:
            c, m, k = bound.get(n.name, (0, 0, 0))
            free[n.name] = Room(n.name, n.cpu - c, n.mem - m, (n.max_pods or 110) - k)
        for need in pending_need:
            where = place(need, free)
            if where is not None:
                free = take(free, where, need)
        for d in choose_starts(waiting, free, alloc, (used_c, used_m), qp.scavengers.max_share):
            sj = waiting_sj[d.waiting.key]
            try:
                a = _start(sj, now, qp, d) if d.kind == "start" else _wait(sj, now, d)
            except Exception as e:
                if failed is None:
                    raise
                unplannable("scavengerjob", sj.ref, e, failed, actions)
                continue
            if a is not None:
                actions.append(a)
    return actions, (min(wake) if wake else None)


def never_fits(pod: PodView, nodes: Mapping[str, NodeView]) -> str | None:
    """Why a pending ``pod`` can never be placed as the nodes are - no node matches its node
    selector, required node affinity and tolerations (the taints of node conditions aside: they
    come and go), or each that does is too small by allocatable - for people; None when some node
    may take it, or when that cannot be told (no nodes, a node reporting no allocatable, placement
    rules too long to keep)."""
    s = pod.sched
    if s is None or s.clipped or not nodes:
        return None
    may = [n for n in nodes.values() if matches(n, s, lasting_only=True)]
    if not may:
        return "no node matches its node selector, node affinity and tolerations"
    if any((n.cpu == 0 and n.mem == 0) or (s.cpu <= n.cpu and s.mem <= n.mem) for n in may):
        return None
    largest = max(may, key=lambda n: (n.cpu, n.mem, n.name))
    return (f"it asks for cpu {_cpu(s.cpu)}, memory {format_memory(Fraction(s.mem))}; the largest node it may use "
            f"({largest.name}) has cpu {_cpu(largest.cpu)}, memory {format_memory(Fraction(largest.mem))}")


def _estimated(pod: PodView, settings: Settings) -> bool:
    """Whether the shadow schedule estimates ``pod``'s start (expected.py), and so already tells a
    pod that can never fit (Event NeverFits): a bare pod or a Job's, with estimates on."""
    return settings.expected_start and (pod.owner is None or pod.owner.kind == "Job")


def _never_fits_event(pod: PodView, nodes: Mapping[str, NodeView], failed: list[Unplannable] | None) -> Action | None:
    """A Warning Event NeverFits on a pending scavenger pod that can never be placed (told once)."""
    try:
        why = never_fits(pod, nodes)
    except Exception as e:
        if failed is None:
            raise
        out: list[Action] = []
        unplannable("scavengerjob", pod.ref, e, failed, out)
        return out[0]
    if why is None:
        return None
    return Action(kind="never-fits", target=pod.ref, reason="NeverFits", event_type="Warning", key="never-fits",
                  message=(f"this pod can never be scheduled as it is: {why}. It takes no share of the scavengers' "
                           f"cap; delete it, or make it ask for what a node has"))


def _start(sj: SJView, now: float, qp: QueuePolicy, d: Decision) -> Action:
    seg = sj.segment + 1
    name = job_name(sj.ref.name, seg)
    where = ", ".join(f"{n} ({k})" if k > 1 else n for n, k in sorted((d.placement or {}).items()))
    phase = sj.phase if sj.phase in ("Pending", "Interrupted") else "Pending"
    again = f" (after {sj.interrupted_count} interruption{'s' if sj.interrupted_count != 1 else ''})" \
        if sj.interrupted_count else ""
    msg = f"starting{again}: Job {name}, {describe(sj.need or Need(1, 0, 0))}; room on {where}"
    requires = []
    for kind, obj in required_objects(sj):
        why = missing_message(kind, sj.ref.namespace, obj)
        requires.append(Requirement(
            Ref("v1", kind, sj.ref.namespace, obj, ""),
            _act("sj-failed", sj, "MissingVolumeSource", why, now, phase="Failed", key=f"missing/{kind}/{obj}",
                 warning=True, event_reason="Failed",
                 status={"finishedTimestamp": format_time(now), "jobName": None}),
        ))
    return _act("sj-start", sj, "Starting", msg, now, phase=phase, key=f"start/{seg}",
                status={"segment": seg, "jobName": name}, create=job_body(sj, seg, qp), requires=tuple(requires))


def _wait(sj: SJView, now: float, d: Decision) -> Action | None:
    phase = sj.phase or "Pending"
    msg = d.why
    if sj.interrupted_count and phase == "Interrupted":
        msg = f"interrupted {sj.interrupted_count} time{'s' if sj.interrupted_count != 1 else ''}; {msg}"
    if sj.message == msg and sj.observed_generation == sj.generation:
        return None
    never = d.kind == "never-fits"
    return _act("sj-waiting", sj, "CannotFit" if never else "Waiting", msg, now, phase=phase,
                key=f"wait/{hashlib.sha256(msg.encode()).hexdigest()[:12]}", warning=never, quiet=not never)


def _one(st: _SJState, now: float, qp: QueuePolicy, gone: Callable[[str], bool],
         actions: list[Action], wake: list[float],
         nodes: Mapping[str, NodeView] | None = None, windows: Sequence[Window] = ()) -> Waiting | None:
    """Plan one ScavengerJob; a ``Waiting`` when it is waiting for its turn to start."""
    sj = st.sj
    if sj.deleting:
        return None  # its Jobs go with it (ownerReferences)
    current = current_job(sj, st.jobs)
    for j in st.jobs:
        if j is not current and not j.deleting and not (sj.phase == "Completed" and j.ref.name == sj.job_name):
            actions.append(Action(
                kind="sj-cleanup", target=sj.ref, reason="SegmentJobDeleted", quiet=True, key=j.ref.uid,
                message=f"deleting Job {j.ref.name}: it is not the current segment's",
                deletes=(Delete(j.ref, "Background"),)))
    if sj.phase in FINISHED:
        return None
    left = leftovers(sj, current, st.pods)
    if left:
        # Not left to the garbage collector: it gets to them when it gets to them (never while
        # kube-controller-manager is down), and until they are gone this ScavengerJob waits.
        names = ", ".join(p.ref.name for p in left)
        actions.append(Action(
            kind="sj-cleanup", target=sj.ref, reason="LeftoverPodsDeleted", quiet=True,
            key="pods/" + hashlib.sha256(",".join(sorted(p.ref.uid for p in left)).encode()).hexdigest()[:12],
            message=f"deleting pod{'s' if len(left) != 1 else ''} {names}: left over from a Job that is gone or "
                    f"not the current segment's",
            deletes=tuple(Delete(p.ref) for p in left)))
    if not sj.phase:
        msg = "waiting for room to start"
        actions.append(_act("sj-queued", sj, "Queued", msg, now, phase="Pending", key="queued",
                            status={"interruptedCount": sj.interrupted_count, "segment": sj.segment,
                                    "jobName": None, "runningTimestamps": [], "interruptedTimestamps": []}))
        return None  # the next pass sees it stored, and plans its start on a fenced status
    if sj.problems or sj.need is None or sj.duration is None:
        why = "invalid spec: " + "; ".join(sj.problems)
        actions.append(_act("sj-failed", sj, "InvalidSpec", why, now, phase="Failed", key="invalid",
                            warning=True, event_reason="Failed",
                            status={"finishedTimestamp": format_time(now), "jobName": None},
                            deletes=tuple(Delete(j.ref, "Background") for j in st.jobs if not j.deleting)))
        return None
    seg = sj.segment
    cur_pods = [p for p in st.pods if p.segment == seg and (current is None or p.owner is None
                                                             or p.owner.uid == current.ref.uid)]
    # "Gone", for the room a segment's pods held, is what kube-scheduler counts: a pod that ended
    # (Succeeded or Failed) holds none, its pod informer lists only the others. Such a pod may stay
    # (Kubernetes 1.26+: the Job controller's job-tracking finalizer, for as long as that controller
    # is away); one being deleted that has not ended still runs on its node, holding its room, and
    # may still be writing the checkpoint the next segment starts from.
    old_live = [p for p in st.pods if p not in cur_pods and not p.terminal]
    dels = tuple(Delete(p.ref) for p in cur_pods if not p.deleting and not p.terminal)
    job_del = (Delete(current.ref, "Background"),) if current is not None else ()
    ran = sj.running_segment == seg and seg > 0

    if not sj.job_name:  # waiting for its turn
        if any(not p.terminal for p in st.pods):
            return None  # its old pods still hold their room; start when they are gone
        return Waiting((sj.ref.namespace, sj.ref.name), sj.interrupted_count, sj.created, sj.need)

    if current is None:
        if ran:
            # The segment's Job vanished (deleted from outside, pods and all): an interruption.
            _interrupt(sj, now, "its Job was deleted from outside", sj.need.pods, dels, (), actions)
            return None
        if old_live:
            return None  # the previous segment's pods are still checkpointing
        name = sj.job_name
        # No Event: SegmentEnded (or Starting, when a crash came between its status and its
        # Job) told the story, and SegmentStarted / Started will when the pods run.
        actions.append(Action(
            kind="sj-resume", target=sj.ref, reason="SegmentJobCreated", key=f"job/{seg}", quiet=True,
            message=f"segment {seg}: creating Job {name}",
            create=job_body(sj, seg, qp)))
        return None

    # The segment is judged by the gang it runs (its Job's), not by a spec edited since.
    n_pods = segment_size(current)
    v = classify(cur_pods, n_pods, gone, sj.checkpoint_code)
    if sj.checkpoint_code is not None and current.failed_by_policy and v.kind != "failed" and not (
            v.kind == "interrupted" and v.pod is not None and v.pod.interrupted is not None):
        # The pod that exited with the agreed code is gone (deleted after it ended: at once), and what is
        # left is its siblings, which the Job controller deletes: the Job's condition tells the checkpoint.
        v = Verdict("checkpointed", None, f"Job {current.ref.name} records a pod that exited with the agreed "
                                          f"checkpoint code {sj.checkpoint_code}")
    if v.kind == "checkpointed":
        # The workload checkpointed and ended its segment itself: a boundary, not a failure.
        # Status first (so the deletion of the rest is never an interruption), then the Job
        # (siblings still running get SIGTERM); the next segment starts when they are gone.
        nxt = seg + 1
        name = job_name(sj.ref.name, nxt)
        msg = (f"segment {seg} ended at the workload's checkpoint ({v.why}); segment {nxt} (Job {name}) starts "
               f"when its pods are gone")
        actions.append(_act("sj-segment", sj, "SegmentEnded", msg, now, phase="Running", key=f"segment/{seg}",
                            status={"segment": nxt, "jobName": name, "priorityStartOverTimestamp": format_time(now)},
                            deletes=(*job_del, *dels)))
        return None
    if v.kind == "failed":
        assert v.pod is not None
        msg = f"pod {v.pod.ref.name} failed: {v.why}; the ScavengerJob failed for good"
        actions.append(_act("sj-failed", sj, "PodFailed", msg, now, phase="Failed", key=f"failed/{seg}",
                            warning=True, event_reason="Failed",
                            status={"finishedTimestamp": format_time(now)}, deletes=job_del))
        return None
    if v.kind == "interrupted":
        started = any(p.started is not None or p.phase == "Running" for p in cur_pods)
        if ran or started:
            _interrupt(sj, now, v.why, n_pods, dels, job_del, actions)
            return None
        msg = f"its pods were stopped before they ran ({v.why}); waiting to start again"
        actions.append(_act("sj-unschedulable", sj, "Requeued", msg, now, phase=sj.phase if sj.phase != "Running"
                            else "Pending", key=f"requeued/{seg}", warning=True,
                            status={"jobName": None}, deletes=(*job_del, *dels)))
        return None
    if ran and v.kind in ("starting", "running"):
        # Every pod of this segment was seen running; now one is missing, not running, or
        # started after them all: a pod was deleted and finished terminating before any pass
        # saw it going (a workload that saves on SIGTERM in a blink, a busy reconciler), and
        # the Job controller is replacing it. That is an interruption of the whole gang.
        later = [p for p in cur_pods if p.started is not None and sj.start_over is not None
                 and p.started > sj.start_over]
        if v.kind == "starting" or later:
            why = (f"a pod of running segment {seg} is gone (deleted before this controller saw it go: "
                   f"preempted, evicted or deleted from outside)")
            if later:
                why += f"; the Job controller replaced it with {later[0].ref.name}"
            _interrupt(sj, now, why, n_pods, dels, job_del, actions)
            return None
    if sj.need.pods < n_pods and v.kind in ("starting", "running"):
        # Its user lowered spec.pods: as Slurm releases a shrunk job's extra nodes and the job runs on,
        # the segment ends now as at a boundary (SIGTERM: its pods checkpoint; no interruption), and the
        # next one starts from that checkpoint with the smaller gang as soon as they are gone, without
        # waiting its turn (it takes less than it held). A raise (an admin's) waits for the next segment.
        nxt = seg + 1
        name = job_name(sj.ref.name, nxt)
        want = sj.need.pods
        msg = (f"spec.pods lowered from {n_pods} to {want}: segment {seg} ends now, its {n_pods} pods get SIGTERM "
               f"to checkpoint and {n_pods - want} of them are released; segment {nxt} (Job {name}, {want} "
               f"pod{'s' if want != 1 else ''}) starts from the checkpoint when they are gone")
        fields: dict[str, Any] = {"segment": nxt, "jobName": name}
        if ran:
            fields["priorityStartOverTimestamp"] = format_time(now)
        actions.append(_act("sj-segment", sj, "Resized", msg, now, phase=sj.phase, key=f"segment/{seg}",
                            status=fields, deletes=(*job_del, *dels)))
        return None
    if v.kind == "succeeded":
        msg = f"completed: all {n_pods} pod{'s' if n_pods != 1 else ''} exited 0 in segment {seg}"
        actions.append(_act("sj-completed", sj, "Completed", msg, now, phase="Completed", key="completed",
                            status={"finishedTimestamp": format_time(now)}))
        return None
    if v.kind == "running":
        latest = max((p.started for p in cur_pods if p.started is not None), default=now)
        if sj.running_segment != seg:
            fresh = sj.phase != "Running"
            since = parse_time(sj.interrupted_ts[-1]) if sj.interrupted_ts else None
            waited = now - (since if since is not None and sj.phase == "Interrupted" else sj.created)
            if sj.checkpoint_interval is not None:
                nxt_at = (f"one long pod{'s' if n_pods != 1 else ''}, no segment boundaries: it checkpoints every "
                          f"{format_duration(sj.checkpoint_interval)} from its start")
            elif sj.checkpoint_code is None:
                nxt_at = f"next checkpoint boundary at {format_time(segment_end(latest, sj.duration))}"
            else:
                nxt_at = f"it ends the segment itself after a checkpoint (exit code {sj.checkpoint_code})"
            msg = f"running segment {seg} ({n_pods} pod{'s' if n_pods != 1 else ''}) since {format_time(latest)}; {nxt_at}"
            status: dict[str, Any] = {"runningSegment": seg, "priorityStartOverTimestamp": format_time(latest)}
            if fresh:
                status["runningTimestamps"] = _append(sj.running_ts, latest)
            actions.append(_act("sj-running" if fresh else "sj-segment-running", sj,
                                "Started" if fresh else "SegmentStarted", msg, now, phase="Running",
                                key=f"running/{seg}", status=status, amount=waited if fresh else 0.0))
            if sj.checkpoint_interval is None:
                wake.append(segment_end(latest, sj.duration))
            return None
        _guard(sj, current, seg, cur_pods, now, qp, nodes, windows, actions, wake)
        if sj.checkpoint_code is not None or sj.checkpoint_interval is not None:
            return None  # the workload ends its segments itself, or runs as one long pod
        start_over = sj.start_over if sj.start_over is not None else latest
        due = segment_end(start_over, sj.duration)
        if now >= due:
            nxt = seg + 1
            name = job_name(sj.ref.name, nxt)
            msg = (f"segment {seg} reached its duration ({format_duration(sj.duration)}): its pods get SIGTERM to "
                   f"checkpoint; segment {nxt} (Job {name}) starts when they are gone")
            actions.append(_act("sj-segment", sj, "SegmentEnded", msg, now, phase="Running", key=f"segment/{seg}",
                                status={"segment": nxt, "jobName": name,
                                        "priorityStartOverTimestamp": format_time(now)},
                                deletes=(*job_del, *dels)))
        else:
            wake.append(due)
        return None
    # starting: pods not all running yet
    missing = missing_secret_of(sj, cur_pods, st.mount_failures)
    if missing is not None:
        f, p = missing
        why = missing_message("Secret", sj.ref.namespace, f.secret,
                              f"the kubelet cannot mount volume {f.volume!r} of pod {p.ref.name}: FailedMount")
        actions.append(_act("sj-failed", sj, "MissingVolumeSource", why, now, phase="Failed",
                            key=f"missing/Secret/{f.secret}", warning=True, event_reason="Failed",
                            status={"finishedTimestamp": format_time(now)}, deletes=job_del))
        return None
    unbound = [p for p in cur_pods if not p.node and not p.terminal]
    if unbound or len(cur_pods) < n_pods:
        created = current.created if current.created is not None else now
        due = created + qp.scavengers.unschedulable_timeout
        if now >= due:
            msg = (f"{len(unbound) + max(n_pods - len(cur_pods), 0)} of {n_pods} pods not scheduled within "
                   f"{format_duration(qp.scavengers.unschedulable_timeout)}; Job {current.ref.name} deleted, waiting for room")
            actions.append(_act("sj-unschedulable", sj, "Unschedulable", msg, now,
                                phase=sj.phase if sj.phase in ("Pending", "Interrupted") else "Pending",
                                key=f"unschedulable/{seg}", warning=True, status={"jobName": None},
                                deletes=(*job_del, *dels)))
        else:
            wake.append(due)
    return None


def leftovers(sj: SJView, current: JobView | None, pods: Iterable[PodView]) -> list[PodView]:
    """Pods of ``sj`` still pending or running, not being deleted, that are not its current
    segment's: the status says so (an earlier segment, or this one while it waits with no
    ``jobName``; segments only grow, so a status read late still says so) and they are not the
    current Job's. A Job controller's replacement made after its Job was deleted (on a cache
    that had not seen the deletion), or pods of a Job the garbage collector has not got to yet."""
    cur = current.ref.uid if current is not None else None
    return [p for p in pods
            if not p.terminal and not p.deleting and p.segment is not None
            and (p.owner is None or p.owner.uid != cur)
            and (p.segment < sj.segment or (p.segment == sj.segment and not sj.job_name))]


def _interrupt(sj: SJView, now: float, why: str, size: int, dels: tuple[Delete, ...],
               job_del: tuple[Delete, ...], actions: list[Action]) -> None:
    """``size``: the segment's gang (``segment_size``)."""
    assert sj.need is not None
    n = sj.interrupted_count + 1
    since = sj.start_over
    lost = 0.0
    if since is not None and sj.running_segment == sj.segment:
        lost = unsaved(now - since, sj.checkpoint_interval) * size * sj.need.cpu_m / 1000
    msg = (f"interrupted ({why}); all {size} pod{'s' if size != 1 else ''} of segment "
           f"{sj.segment} go, and it waits to run again (interruption {n})")
    actions.append(_act("sj-interrupted", sj, "Interrupted", msg, now, phase="Interrupted",
                        key=f"interrupted/{sj.segment}", warning=True, amount=lost,
                        status={"interruptedCount": n, "interruptedTimestamps": _append(sj.interrupted_ts, now),
                                "jobName": None},
                        deletes=(*job_del, *dels)))


def phase_counts(snapshot: Snapshot) -> dict[str, int]:
    """ScavengerJobs by phase (for the gauge)."""
    out = dict.fromkeys(PHASES, 0)
    for sj in (snapshot.scavenger_jobs or {}).values():
        out[sj.phase or "Pending"] = out.get(sj.phase or "Pending", 0) + 1
    return out
