"""What the planner decides: ``Action`` records, and how they print.

An action is one user-visible step: one Kubernetes Event (``reason`` and
``message`` on ``target``) plus the writes that carry it out (an annotation
merge patch fenced by ``resource_version``, deletions fenced by uid, a
PodGroup write). ``key`` says what the action is *about* (the deadline it
enforces, the pod whose failure it reports); the Event's name derives from it,
so running the same action twice, e.g. after a crash, finds the Event already
there instead of sending a second one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from .model import Ref
from .runtimes import Run

ActionKind = Literal[
    "record-deadline",  # write started-at / deadline annotations (first time, or after an extension)
    "warn",  # the deadline is near: Warning Event, remember it in batchgate.io/warned-for
    "stop",  # the deadline has passed: delete the job with its grace period
    "gang-failed",  # a pod of a group failed: tear the whole group down
    "gang-interrupted",  # a pod of a group was stopped from outside: tear the group down so it starts over
    "gang-restart",  # a pod of a Job's group failed within the Job's budget: the group starts over together
    "create-podgroup",
    "update-podgroup",
    "delete-podgroup",
    # maintenance windows (maintenance.py)
    "countdown",  # (re)label a node with the minutes left before its next window; no Event unless new
    "cordon",  # window started: mark the node unschedulable, remembering how it was
    "evict",  # window started: evict a pod from a cordoned node (PodDisruptionBudgets honoured)
    "force-drain",  # the drain deadline passed and a budget still blocks: delete the pod
    "uncordon",  # window over: the node back as it was before
    "window-status",  # MaintenanceWindow status: state and node count
    "window-invalid",  # a stored MaintenanceWindow whose spec does not parse: Warning Event, ignored
    "record-maintenance",  # batchgate.io/next-maintenance on a running job (extensions are checked against it)
    "expected-start",  # batchgate.io/expected-start on a pending workload, from the shadow schedule
    "release",  # the batch queue (queue.py): a waiting workload's turn came and it fits: gate off / Job resumed
    "narrow",  # ... a gated pod's node affinity narrowed to the nodes made free for it (before its release)
    "preempt",  # ... scavengers that lose least deleted (DisruptionTarget first) to make room for released work
    "start-by",  # ... batchgate.io/start-by on a waiting workload: its reservation's start, the promise
    "queued",  # ... a workload waits in it: an Event saying so (or that a volume it mounts is missing), once
    "requeue",  # ... a released Job whose planned node vanished (or its user suspended): marked queued again (requeue.py)
    "requeue-reset",  # ... then its status.startTime cleared, so that its template may change
    "requeue-unnarrow",  # ... then batchgate's narrowing taken out of its template: an ordinary queued Job
    # ScavengerJobs (scavenger.py); each writes the status (fenced) and, where it says so, a Job
    "sj-queued",  # first seen: status Pending, waiting to start
    "sj-waiting",  # why it still waits (no room, over the cap, can never fit): status message
    "sj-start",  # its turn and it fits: status, then create the segment's Job
    "sj-running",  # all pods of the first segment after waiting run: Running, runningTimestamps
    "sj-segment-running",  # all pods of a later segment run: priorityStartOverTimestamp
    "sj-segment",  # a segment boundary (duration over, checkpoint exit code, spec.pods lowered): status, then delete its Job (SIGTERM: checkpoint)
    "sj-resume",  # the old segment's pods are gone: create the next segment's Job
    "sj-interrupted",  # a pod was deleted / preempted / evicted / lost: all pods go, it waits again
    "sj-unschedulable",  # its pods stayed unscheduled past the timeout: Job deleted, it waits again
    "sj-failed",  # a pod failed by itself, a volume is missing, or the spec is unusable: for good
    "sj-completed",  # all pods exited 0
    "sj-cleanup",  # a Job of an earlier segment is still there: delete it
    "sj-guard-create",  # its unsaved work reached the guard: create the segment's PodDisruptionBudget
    "sj-guard",  # the segment's PodDisruptionBudget exists (seen live): status guardedSegment
    "sj-unguard",  # a pod of it is on a node being emptied (or drained before it checkpoints): status, then delete the budget
    "sj-guard-set",  # a declared interval: the budget's minAvailable, every pod while unsaved work is dear, 0 after a checkpoint
    # job networking (network.py): a workload's Service, hostfile ConfigMap, NetworkPolicy
    "create-network",
    "update-network",
    "delete-network",
    # an object that cannot be planned (a value no view should have let through, a bug): a Warning
    # Event on it, nothing else; the rest of the pass goes on (issue 27)
    "cannot-plan",
    # a pending pod in the scavenger queue that can never be placed: a Warning Event NeverFits on it,
    # nothing else (it takes no share of the scavengers' cap)
    "never-fits",
]
# Kinds planned on every pass while their condition holds, whose writes need no record on the object:
# Events, and the guard's setting (one idempotent patch per change: a restart repeats it once). The
# controller carries out each (target uid, key) once.
TELL_ONCE = frozenset({"cannot-plan", "never-fits", "queued", "sj-guard-set"})
EventType = Literal["Normal", "Warning"]
Propagation = Literal["Background", "Foreground", "Orphan"]


class Disruption(NamedTuple):
    """The DisruptionTarget condition batchgate puts on a pod before it deletes it (as
    kube-controller-manager's taint manager and PodGC do): the pod is stopped from outside, so a
    Job's podFailurePolicy may take it for an interruption instead of counting a failure."""

    reason: str  # CamelCase, one of model.OWN_DISRUPTION_REASONS
    message: str


class Delete(NamedTuple):
    ref: Ref  # ref.uid is the precondition: a new object of the same name is never hit
    propagation: Propagation | None = None
    disruption: Disruption | None = None  # a pod: this condition is written first (status patch)
    # An object the cache does not hold (ref.uid unknown, e.g. a segment's guard): read live first,
    # deleted with the uid read as precondition, and only when an ownerReference has this uid.
    owner_uid: str = ""


class PodGroupWrite(NamedTuple):
    op: Literal["create", "update", "delete"]
    namespace: str
    name: str
    min_member: int = 0
    group: str = ""  # the batchgate.io/pod-group the PodGroup is for
    owner: Ref | None = None  # the Job, as ownerReference, so it also goes when we are down
    uid: str = ""  # update / delete: the PodGroup's uid
    resource_version: str = ""  # update: optimistic concurrency


class Mark(NamedTuple):
    """Annotations merged into another object once the action's deletes are done (a crash before
    leaves it unmarked, so the action is planned again and finished)."""

    ref: Ref  # ref.uid goes into the patch: a new object of the same name is refused
    annotations: Mapping[str, str]


class Requirement(NamedTuple):
    """An object that must exist before an action may run (checked live, metadata only);
    when it does not, ``otherwise`` (an Action) runs instead."""

    ref: Ref  # api_version, kind, namespace, name; uid unused
    otherwise: Any
class NetWrite(NamedTuple):
    """Write one of a workload's network objects (``kind``: Service, ConfigMap, NetworkPolicy)."""

    op: Literal["create", "update", "delete"]
    kind: str
    namespace: str
    name: str
    body: Mapping[str, Any] | None = None  # create / update: the whole desired object
    uid: str = ""  # update / delete: precondition
    resource_version: str = ""  # update: optimistic concurrency


class Action(NamedTuple):
    """Immutable; a NamedTuple because a cold start plans one per job and these are
    three times cheaper to make than frozen dataclasses."""

    kind: ActionKind
    target: Ref  # the object the Event is about
    reason: str  # Event reason, CamelCase
    message: str  # Event message, for the user
    event_type: EventType = "Normal"
    key: str = ""  # what this action is about; the Event name derives from it
    annotations: Mapping[str, str | None] | None = None  # merge patch of target's annotations
    resource_version: str = ""  # target's, fences the annotation patch
    deletes: tuple[Delete, ...] = ()
    pod_group: PodGroupWrite | None = None
    patch: Mapping[str, Any] | None = None  # merge patch of target (fenced when it holds a resourceVersion)
    subresource: str = ""  # of the patch, e.g. "status"
    evict: Ref | None = None  # a pod to evict through the Eviction API (429: a budget forbids it, for now)
    quiet: bool = False  # no Event (e.g. a countdown label moving by a few minutes)
    create: Mapping[str, Any] | None = None  # an object to create after the patch and deletes (AlreadyExists: done)
    requires: tuple[Requirement, ...] = ()  # checked first; a missing one runs its ``otherwise`` instead
    amount: float = 0.0  # for metrics: seconds waited (sj-running), core-seconds lost (sj-interrupted)
    net: NetWrite | None = None
    mark: Mark | None = None  # after the deletes
    # the Event only once the writes went through: it reports a change (a release) that a conflict
    # would leave unmade, where the other Events announce what the writes then carry out
    tell_after: bool = False

    def event_name(self) -> str:
        digest = hashlib.sha256(f"{self.target.uid}|{self.reason}|{self.key}".encode()).hexdigest()[:16]
        return f"{self.target.name[:200]}.bg-{digest}"

    def line(self) -> str:
        """One line for ``--dry-run`` and logs."""
        return f"{self.kind:<16} {self.target!s:<48} {self.reason}: {self.message}"


@dataclass(frozen=True, slots=True)
class Unplannable:
    """One object (or, with ``ref`` None, a whole concern) a pass could not plan, and why: what
    the controller counts (``batchgate_reconciler_unplannable_objects``) and logs."""

    concern: str  # "deadline", "gang", "pod-groups", "expected-start", "scavengerjob", "maintenance", "network"
    ref: Ref | None
    error: str


# What each concern is, in an Event's words ("could not plan its deadline").
CONCERNS = {"deadline": "deadline", "gang": "pod group's failure handling", "pod-groups": "PodGroup",
            "expected-start": "expected start", "scavengerjob": "ScavengerJob", "maintenance": "maintenance",
            "network": "network objects", "queue": "place in the batch queue",
            "requeue": "re-queueing of released Jobs whose planned node vanished or whose users suspended them"}


def unplannable(concern: str, ref: Ref | None, error: BaseException, failed: list[Unplannable],
                actions: list[Action]) -> None:
    """Record that ``ref`` (or the whole ``concern``) could not be planned this pass: into ``failed``,
    and, for an object, a Warning Event on it (named after the error, so it is told once)."""
    text = f"{type(error).__name__}: {error}"[:300]
    failed.append(Unplannable(concern, ref, text))
    if ref is None:
        return
    actions.append(Action(
        kind="cannot-plan", target=ref, reason="CannotPlan", event_type="Warning",
        key=f"{concern}|{hashlib.sha256(text.encode()).hexdigest()[:12]}",
        message=(f"batchgate could not plan its {CONCERNS.get(concern, concern)} ({text}); it is left as it is "
                 f"until it changes. Other objects are not affected; please report this to the cluster admins"),
    ))


@dataclass(frozen=True, slots=True)
class Plan:
    """``actions`` to run now; ``wake_at``: when the next one falls due if nothing changes
    (epoch s); ``deferred``: bookkeeping actions held back for the next pass (see
    ``Settings.max_bookkeeping_per_pass``); ``runs``: the jobs this pass stops at their
    deadline, as runs for the runtime history (runtimes.py: censored, they ran at least that long);
    ``unplannable``: what this pass could not plan (each object of it also has a ``cannot-plan``
    action), so that one object costs itself, never the pass; ``waiting``: (queue, account) of each
    workload waiting in batchgate's queue (queue.py), for the metrics."""

    actions: list[Action]
    wake_at: float | None = None
    deferred: int = 0
    runs: tuple[Run, ...] = ()
    unplannable: tuple[Unplannable, ...] = ()
    waiting: tuple[tuple[str, str], ...] = ()
