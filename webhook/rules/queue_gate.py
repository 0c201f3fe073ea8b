"""The batch queue's front half: work in a gated queue waits until the reconciler releases it.

At CREATE, a bare Pod in a gated queue gets the scheduling gate ``batchgate.io/queue`` (kube-scheduler
leaves it alone until the gate is gone), and so does a pod the ReplicaSet, StatefulSet or DaemonSet
controller makes there (``from_service``: anyone may run batch work as a Deployment, or as a DaemonSet
with a one-node nodeSelector, whose pods kube-scheduler binds since Kubernetes 1.12; the reconciler
releases each such pod as a one-pod workload, with no time limit, as a service has none); a Job gets
``spec.suspend: true`` with the annotation ``batchgate.io/queued`` (no pods exist while it waits;
Kubernetes restarts the Job's ``activeDeadlineSeconds`` clock when it resumes, and batchgate's time
limit counts from the first container start, so waiting never counts against a limit). The reconciler (``reconciler/queue.py``)
releases each workload whole when its turn comes and all of it fits: it removes the gate, or
resumes the Job and drops the annotation.

Never gated: excluded namespaces (the engine never calls a policy there), queues with
``gated: false``, workloads another queue manager the cluster runs admits (``otherQueueManagers``:
their labels, e.g. Kueue's ``kueue.x-k8s.io/queue-name``; none by default, or anyone could skip the
queue by adding a label nothing else acts on), and the pods the Job controller makes from its Job's
template (the Job waited, not its pods). A service that must start at once goes in a queue with
``gated: false``.

On UPDATE only the ``releasers`` (the reconciler's ServiceAccount) and admins may take the gate off a
Pod, resume a queued Job or remove its annotation; nobody else may add the annotation, but for the
webhook's own: a Job its user suspends in a gated queue goes back to the queue, as Kueue keeps a
workload's ``suspend`` for itself. The webhook marks it queued (value ``suspended``: the reconciler
re-queues it as its own, ``reconciler/requeue.py``, its time limit counting afresh from its next start),
so its user cannot resume it; a suspend that arrives unmarked (the webhook was not asked) is refused. Nor
may they raise the ``spec.parallelism`` or ``spec.completions`` of a Job of a gated queue that is not
suspended (Kubernetes allows both on a running Job): the queue planned the room of the size it released,
and lowering frees room; a suspended Job is queued, and the queue plans whatever size it has then. Nor
may they raise the time limit of a released Pod or Job of a gated queue: the queue placed it, and
promised the work after it a start, by that limit (only admins extend it, as in Slurm). Kubernetes
itself refuses adding a scheduling gate to an existing pod. Nor may they raise, through ``pods/resize``
(in-place resize, Kubernetes 1.33+), what a released Pod of a gated queue requests: the queue placed it,
and promised the work after it a start, by the resources it requested (lowering is allowed, as Kubernetes
allows it; a gated Pod may change, the queue plans the size it has when its turn comes). Nor, in the
same way, the requests or limits of a Pod of a scavenger queue (a ScavengerJob's pods, waiting or not):
it runs on idle capacity, started only when it fit within the scavengers' share, by what it was admitted
with (``resize_guard`` picks the Pods a resize may not grow). A queue whose ``state`` is ``drain`` or
``stop`` refuses new Pods and Jobs, and the Deployments, ReplicaSets, StatefulSets and DaemonSets a user
creates (a rollout's ReplicaSets and the pods of services are made by their controllers, and go on), naming the
queue and the admin's reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..contract import (
    QUEUE_GATE,
    QUEUED_ANNOTATION,
    QUEUED_BY_SUSPEND,
    TIME_LIMIT_ANNOTATION,
)
from ..units import json_int
from ..workloads import SERVICE_KINDS, SERVICE_OWNER_KINDS, meta_entry, service_owned
from .base import CONTAINER_LISTS, RECONCILER, Ctx, Finding, RuleType, deny, resources_raised
from .time_limit import read_limits, seconds_or_none

if TYPE_CHECKING:
    from ..bundle import Bundle, Principals
    from ..draft import Draft
    from ..yamlsrc import Node

# Pods and Jobs wait; services (Deployments, ReplicaSets, StatefulSets, DaemonSets) are asked about only
# at CREATE in a queue that is draining or stopped (their pods wait as Pods do).
KINDS = (("", "v1", "Pod"), ("batch", "v1", "Job"), *SERVICE_KINDS)
WAITING_KINDS = ("Pod", "Job")  # the kinds that wait themselves; services wait by their pods


@dataclass(frozen=True, slots=True)
class Settings:
    writers: Principals  # who releases (``releasers`` in the policy), besides admins
    managers: tuple[str, ...] = ()  # labels by which other queue managers the cluster runs claim work


def parse(node: Node, bundle: Bundle) -> Settings:
    from ..bundle import Principals, parse_principals

    node.mapping(allowed=("releasers", "otherQueueManagers"))
    releasers = parse_principals(node.get("releasers")) if node.get("releasers") else None
    managers = node.req("otherQueueManagers").str_list() if node.get("otherQueueManagers") else ()
    return Settings(writers=releasers or Principals(service_accounts=(RECONCILER,)), managers=managers)


def _gates(spec: Any) -> list[Any]:
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    return gates if isinstance(gates, list) else []


def gated(pod: Any) -> bool:
    """Whether a Pod (as a dict) waits behind batchgate's gate."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    return any(isinstance(g, dict) and g.get("name") == QUEUE_GATE for g in _gates(spec))


def queued(job: Any) -> bool:
    """Whether a Job (as a dict) waits in batchgate's queue: suspended, with the annotation."""
    spec = job.get("spec") if isinstance(job, dict) else None
    return (meta_entry(job, ("metadata",), "annotations", QUEUED_ANNOTATION) is not None
            and isinstance(spec, dict) and spec.get("suspend") is True)


def suspending(old: Any, obj: Any) -> bool:
    """Whether an UPDATE turns a Job's ``spec.suspend`` true."""
    spec, was = obj.get("spec"), old.get("spec")
    return (isinstance(spec, dict) and spec.get("suspend") is True
            and not (isinstance(was, dict) and was.get("suspend") is True))


def raised(old: Any, obj: Any) -> list[tuple[str, int, int]]:
    """What an UPDATE of a Job that is not suspended after it raises: ``spec.parallelism`` (1 when
    unset) and ``spec.completions`` (where both are set), as (field, before, after)."""
    spec, was = obj.get("spec"), old.get("spec")
    if not isinstance(spec, dict) or spec.get("suspend") is True or not isinstance(was, dict):
        return []
    out = []
    before, after = json_int(was.get("parallelism"), 1), json_int(spec.get("parallelism"), 1)
    if after > before:
        out.append(("parallelism", before, after))
    was_done, done = json_int(was.get("completions")), json_int(spec.get("completions"))
    if was_done is not None and done is not None and done > was_done:
        out.append(("completions", was_done, done))
    return out


def lengthened(old: Any, obj: Any, kind: str) -> tuple[str, str] | None:
    """The time limit an UPDATE raises, as (before, after): both durations, the new one longer.
    Setting a limit where there was none shortens it; removing one or writing no duration is
    policy time-limit-extension's to refuse."""
    for (_, _, after), (_, _, before) in zip(read_limits(obj, kind), read_limits(old, kind), strict=True):
        if after != before:
            a, b = seconds_or_none(after), seconds_or_none(before)
            if a is not None and b is not None and a > b:
                return before, after
    return None


def requeues(settings: Settings, ctx: Ctx, obj: Any) -> bool:
    """Whether this UPDATE is a user suspending a Job of a gated queue: it goes back to the queue."""
    old = ctx.old_object
    return (ctx.kind == "Job" and old is not None and suspending(old, obj) and not ctx.admin
            and not settings.writers.contains(ctx.username, ctx.groups) and holds(settings, ctx, obj))


def from_service(ctx: Ctx, obj: Any) -> bool:
    """A Pod a ReplicaSet's, StatefulSet's or DaemonSet's controller made (``SERVICE_OWNER_KINDS``): it
    waits in a gated queue as a bare Pod does, one pod a workload (a DaemonSet's, for room on the one
    node its affinity names). A Pod a user writes with such an owner is not ``from_controller``, and
    waits as the bare Pod it is."""
    return ctx.from_controller and service_owned(obj, SERVICE_OWNER_KINDS)


def holds(settings: Settings, ctx: Ctx, obj: Any) -> bool:
    """Whether this new Pod or Job waits in the queue: not the pods a controller makes from its
    owner's template (a Job's: the Job waited), but a service's (a DaemonSet's too)."""
    q = ctx.queue
    if q is None or not q.gated or (ctx.from_controller and ctx.kind == "Pod" and not from_service(ctx, obj)):
        return False
    # A loop, not all() over a generator (~2k instructions to start, on every review of a Pod or
    # Job in a gated queue, where ``managers`` is usually empty).
    for label in settings.managers:
        if meta_entry(obj, ("metadata",), "labels", label) is not None:
            return False
    return True


def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    root = draft.root
    if ctx.kind not in WAITING_KINDS:
        return []  # a service waits by its pods
    if ctx.operation != "CREATE":
        if requeues(settings, ctx, root):
            draft.edit("metadata", "annotations")[QUEUED_ANNOTATION] = QUEUED_BY_SUSPEND
        return []
    hold = holds(settings, ctx, root)
    if ctx.kind == "Pod":
        gates = _gates(root.get("spec"))  # most Pods have none: no list comprehension to start
        mine = [i for i, g in enumerate(gates) if isinstance(g, dict) and g.get("name") == QUEUE_GATE] if gates else []
        if hold and not mine:
            draft.edit("spec", "schedulingGates", create=list).append({"name": QUEUE_GATE})
        elif not hold and mine:  # a gate of ours nobody would ever take off
            gates = draft.edit("spec", "schedulingGates", create=list)
            for i in reversed(mine):
                del gates[i]
            if not gates:
                draft.delete("spec", "schedulingGates")
        return []
    if hold:
        if meta_entry(root, ("metadata",), "annotations", QUEUED_ANNOTATION) != "true":
            draft.edit("metadata", "annotations")[QUEUED_ANNOTATION] = "true"
        if draft.get("spec", "suspend") is not True:
            draft.edit("spec")["suspend"] = True
    elif meta_entry(root, ("metadata",), "annotations", QUEUED_ANNOTATION) is not None:
        draft.delete("metadata", "annotations", QUEUED_ANNOTATION)
    return []


def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    q = ctx.queue
    if ctx.operation == "CREATE":
        # What a controller makes for work already admitted goes on: a released Job's pods, a service's
        # (its pods wait in the queue as ever), a Deployment's ReplicaSets in a rollout; a CronJob's new
        # Jobs are new work.
        if q is None or q.state not in ("drain", "stop") or (ctx.kind in ("Pod", "ReplicaSet") and ctx.from_controller):
            return []
        why = f" ({q.state_reason})" if q.state_reason else ""
        return [deny(f"queue {q.name!r} is {'draining' if q.state == 'drain' else 'stopped'}{why}: it takes no "
                     f"new work; the work waiting in it {'still runs' if q.state == 'drain' else 'stays queued'}; "
                     "choose another queue with the label batchgate.io/queue, or ask your admins when it reopens")]
    old = ctx.old_object
    if old is None or ctx.admin or settings.writers.contains(ctx.username, ctx.groups) or ctx.kind not in WAITING_KINDS:
        return []
    if ctx.kind == "Pod":
        if gated(old) and not gated(obj):
            return [deny(f"{ctx.subject} waits in queue {ctx.queue_name!r} behind the scheduling gate "
                         f"{QUEUE_GATE}, which only batchgate's reconciler (or an admin) removes, when its turn "
                         "comes; `batchgate queue` shows where it stands")]
        return _longer(settings, ctx, old, obj) if not gated(old) else []
    was = meta_entry(old, ("metadata",), "annotations", QUEUED_ANNOTATION) is not None
    mark = meta_entry(obj, ("metadata",), "annotations", QUEUED_ANNOTATION)
    now = mark is not None
    if requeues(settings, ctx, obj) and mark != QUEUED_BY_SUSPEND:
        return [deny(f"{ctx.subject} is in queue {ctx.queue_name!r}: suspended, it goes back to the queue, "
                     f"marked {QUEUED_ANNOTATION}: {QUEUED_BY_SUSPEND} (batchgate's webhook marks it; it did not "
                     "here), and only batchgate's reconciler (or an admin) resumes it, when its turn comes")]
    if not was and now and not (mark == QUEUED_BY_SUSPEND and suspending(old, obj)):
        return [deny(f"{QUEUED_ANNOTATION} is written by batchgate only (at creation, in a gated queue)")]
    if was and queued(old) and not queued(obj):
        return [deny(f"{ctx.subject} waits in queue {ctx.queue_name!r}; only batchgate's reconciler (or an admin) "
                     f"resumes it or removes {QUEUED_ANNOTATION}, when its turn comes; `batchgate queue` shows "
                     "where it stands")]
    up = raised(old, obj)
    if up and holds(settings, ctx, obj):
        what = " and ".join(f"spec.{f} from {a} to {b}" for f, a, b in up)
        return [deny(f"{ctx.subject} runs in queue {ctx.queue_name!r}, which gave it room for the size it released; "
                     f"raising {what} while it runs would take room the queue never gave (lowering is allowed); "
                     "suspend the Job (spec.suspend: true) to send it back to the queue with its new size, "
                     "or ask an admin")]
    if was and queued(old):
        return []  # waiting: the queue plans whatever limit it has when its turn comes
    return _longer(settings, ctx, old, obj)


def _longer(settings: Settings, ctx: Ctx, old: Any, obj: Any) -> list[Finding]:
    """A released Pod or Job of a gated queue whose user raises its time limit: the queue placed
    it, and promised the work after it a start, for the limit it had (a backfilled job fits a gap
    before a reservation by its limit); as Slurm, only an admin extends a running job. A Job its
    user suspends in the same request goes back to the queue, which plans the new limit."""
    spec = obj.get("spec")
    if ctx.kind == "Job" and isinstance(spec, dict) and spec.get("suspend") is True:
        return []
    up = lengthened(old, obj, ctx.kind)
    if up is None or not holds(settings, ctx, obj):
        return []
    back = ("suspend the Job (spec.suspend: true) in the same request to send it back to the queue with the "
            "new limit, or " if ctx.kind == "Job" else "")
    return [deny(f"{ctx.subject} runs in queue {ctx.queue_name!r}, which placed it, and promised the work after "
                 f"it a start, for its time limit of {up[0]}; raising {TIME_LIMIT_ANNOTATION} to {up[1]} while it "
                 f"runs would take room promised to others (lowering is allowed); {back}ask an admin to extend it")]


def grown(old: Any, obj: Any, *, limits: bool = False) -> list[tuple[str, str, str, str]]:
    """What an in-place resize raises, as (where, what, before, after): a container's request (or
    its limit where it has none) of a resource (``what``: "cpu request"), by container name, or the
    pod-level one; a resource not requested before counts as 0 before. With ``limits``, a limit
    raised or removed too ("memory limit"; removed: after is "none")."""
    spec, was = obj.get("spec"), old.get("spec")
    if not isinstance(spec, dict) or not isinstance(was, dict):
        return []
    pairs: list[tuple[str, Any, Any]] = []
    for key in CONTAINER_LISTS:
        items, before = spec.get(key), was.get(key)
        named = {c.get("name"): c for c in before if isinstance(c, dict)} if isinstance(before, list) else {}
        for c in items if isinstance(items, list) else ():
            if isinstance(c, dict) and c.get("name") in named:
                pairs.append((f"{'init container' if key == 'initContainers' else 'container'} {c.get('name')!r}",
                              named[c.get("name")], c))
    pairs.append(("the pod (spec.resources)", was, spec))
    return [(where, *r) for where, a, b in pairs for r in resources_raised(a, b, limits=limits)]


def resize_guard(settings: Settings, ctx: Ctx, obj: Any) -> Literal["scavenger", "queue"] | None:
    """Why the Pod of this ``pods/resize`` may not grow: ``"scavenger"``, a Pod of a scavenger queue
    (it runs on idle capacity within the scavengers' share, by what it was admitted with: neither its
    requests nor its limits may rise); ``"queue"``, a released Pod of a gated queue (placed by its
    requests); None, any other Pod, or a caller who may (an admin, a releaser, a listed controller
    making the Pod from its owner)."""
    old = ctx.old_object
    if old is None or ctx.admin or settings.writers.contains(ctx.username, ctx.groups) or (
            ctx.from_controller and ctx.kind == "Pod"):
        return None
    q = ctx.queue
    if q is not None and q.scavenger:
        return "scavenger"
    return "queue" if not gated(old) and holds(settings, ctx, obj) else None


def resize(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    """An in-place resize (``pods/resize``) by a user (not a releaser, not an admin) that raises what
    a protected Pod (``resize_guard``) requests, or for a scavenger its limits too: the queue placed a
    released Pod, and promised the work after it a start, by what it requested (it counts requests,
    as kube-scheduler does); a scavenger started when it fit within the scavengers' share."""
    guard = resize_guard(settings, ctx, obj)
    old = ctx.old_object
    if guard is None or old is None:
        return []
    up = grown(old, obj, limits=guard == "scavenger")
    if not up:
        return []
    what = "; ".join(f"the {res} of {where} from {a} to {b}" for where, res, a, b in up)
    if guard == "scavenger":
        return [deny(f"{ctx.subject} is a scavenger, in queue {ctx.queue_name!r}: it runs on idle capacity, started "
                     "when it fit within the scavengers' share of the cluster, by the resources it was admitted with; "
                     f"raising {what} in place (pods/resize) would take more than the scavenger policy allowed "
                     "(lowering is allowed); to run it bigger, submit it again with the new resources (it waits "
                     "until they fit), or ask an admin")]
    return [deny(f"{ctx.subject} runs in queue {ctx.queue_name!r}, which placed it, and promised the work after it "
                 f"a start, by the resources it requested; raising {what} in place (pods/resize) would take room "
                 "promised to others (lowering is allowed); to run it bigger, delete it and submit it again with "
                 "the new requests (it waits for its turn), or ask an admin")]


TYPE = RuleType(
    name="queue-gate",
    doc=(
        "Work in a gated queue waits for its turn: bare Pods and the pods of ReplicaSets, StatefulSets and "
        "DaemonSets get the scheduling gate `batchgate.io/queue`, Jobs `spec.suspend: true` and `batchgate.io/queued`; "
        "the reconciler releases each workload whole, in queue order (priority, fair share, age), when all "
        "of it fits. Only the reconciler and admins release; a queue in state `drain` or `stop` refuses "
        "new work."
    ),
    parse=parse,
    mutate=mutate,
    validate=validate,
    resize=resize,
    default_kinds=KINDS,
    default_operations=("CREATE", "UPDATE"),
    mutate_operations=("CREATE", "UPDATE"),
    mutate_update_kinds=("Job",),  # on UPDATE it marks a Job its user suspends, and nothing else
    default_failure_policy="Ignore",
    order=60,
)
