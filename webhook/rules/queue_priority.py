"""Queues and priority: every workload runs in a queue, and gets that queue's class.

The Priority admission plugin runs *before* webhooks and has already written
``spec.priority`` (0, or the globalDefault class's value) and
``preemptionPolicy`` into a Pod. A webhook that sets ``priorityClassName`` must
therefore also set the integer priority and preemption policy of that class, or
the stored Pod would carry a class name with the wrong number.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..contract import QUEUE_LABEL
from ..draft import Draft
from ..workloads import meta_entry

if TYPE_CHECKING:
    from ..bundle import Bundle
from .base import ALL_POD_TEMPLATE_KINDS, Ctx, Finding, RuleType, deny, dig, no_settings, warn


def mutate(settings: None, draft: Draft, ctx: Ctx) -> list[Finding]:
    queue, shape = ctx.queue, ctx.shape
    if queue is None or shape is None:
        return []
    findings: list[Finding] = []
    bundle = ctx.bundle
    pc = bundle.priority_classes[queue.priority_class]
    if meta_entry(draft.root, ("metadata",), "labels", QUEUE_LABEL) != queue.name:
        draft.edit("metadata", "labels")[QUEUE_LABEL] = queue.name
        # Said only when nobody chose a queue: not when the label is on the pod template (the
        # queue then was chosen), not on pods a controller made from an admitted template.
        if not ctx.queue_explicit and not ctx.from_controller:
            findings.append(_defaulted("" if shape.is_pod else ctx.kind, queue.name, pc.name, pc.value))
    if not shape.is_pod and meta_entry(draft.root, shape.pod_meta, "labels", QUEUE_LABEL) != queue.name:
        draft.edit(*shape.pod_meta, "labels")[QUEUE_LABEL] = queue.name
    spec = draft.get(*shape.pod_spec)
    if not isinstance(spec, dict):
        spec = {}  # nothing to read; the edit below makes the spec (or fails as set would)
    chosen = _chosen(spec.get("priorityClassName"), ctx)
    if chosen not in (None, "", pc.name):
        return findings  # the user's own class: validate() decides whether they may
    changes: dict[str, Any] = {}
    if chosen != pc.name:
        changes["priorityClassName"] = pc.name
    if shape.is_pod:
        if spec.get("priority") != pc.value:
            changes["priority"] = pc.value
        if spec.get("preemptionPolicy") != pc.preemption_policy:
            changes["preemptionPolicy"] = pc.preemption_policy
    if changes:
        draft.edit(*shape.pod_spec).update(changes)
    return findings


@functools.lru_cache(maxsize=256)  # keyed by workload kinds and the bundle's queues: ~6k instructions saved
def _defaulted(kind: str, queue: str, priority_class: str, priority: int) -> Finding:
    """The warning that nobody chose a queue (``kind`` empty for a Pod); Findings are frozen."""
    where = f" on the {kind} or its pod template" if kind else ""
    return warn(f"no {QUEUE_LABEL} label{where}; using queue {queue!r} (priority class {priority_class}, "
                f"priority {priority})")


def validate(settings: None, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    bundle = ctx.bundle
    if ctx.queue is None:
        return [deny(
            f"queue {ctx.queue_name!r} does not exist; set the label {QUEUE_LABEL} to one of: "
            f"{', '.join(bundle.queues)}"
        )]
    # Whether this caller may use the queue is the policy queue-access's to say.
    if ctx.shape is None:
        return []
    spec = dig(obj, ctx.shape.pod_spec) or {}
    chosen = _chosen(spec.get("priorityClassName"), ctx)
    if not chosen or chosen == ctx.queue.priority_class or ctx.admin or ctx.trusted:
        return []
    pc = bundle.priority_classes.get(chosen)
    reason = "is reserved for admins" if pc and pc.admin_only else (
        f"does not belong to queue {ctx.queue.name!r}" if pc else "is not one batchgate manages"
    )
    if pc is None:  # e.g. system-node-critical on an agent DaemonSet: infrastructure, not work
        return [deny(
            f"priorityClassName {chosen!r} {reason}; infrastructure that needs it is exempted by "
            f"running in a namespace the bundle excludes (spec.exclude.namespaces, or labelled "
            f"batchgate.io/admission=disabled by an admin) or by being applied by an admin; "
            f"batch work leaves priorityClassName out and chooses a queue with the label "
            f"{QUEUE_LABEL} ({_queue_menu(bundle)})"
        )]
    return [deny(
        f"priorityClassName {chosen!r} {reason}; leave priorityClassName out and choose a queue "
        f"with the label {QUEUE_LABEL} ({_queue_menu(bundle)})"
    )]


def _chosen(name: Any, ctx: Ctx) -> Any:
    """The class the user chose. On a Pod, the globalDefault class is the Priority plugin's
    choice, not the user's: the plugin runs before webhooks and writes that class's name
    (and value) into every Pod that names none, so it counts as no choice and the queue's
    class replaces it."""
    if ctx.shape is not None and ctx.shape.is_pod and isinstance(name, str):
        pc = ctx.bundle.priority_classes.get(name)
        if pc is not None and pc.global_default:
            return None
    return name


def _queue_menu(bundle: Bundle) -> str:
    return ", ".join(f"{q.name} -> {q.priority_class}" for q in bundle.queues.values()
                     if not bundle.priority_classes[q.priority_class].admin_only)


TYPE = RuleType(
    name="queue-priority",
    doc=(
        "Every workload runs in a queue (`batchgate.io/queue`: interactive, batch, scavenger; "
        "else the namespace's or bundle's default) and gets the queue's PriorityClass; Pods also "
        "get the class's integer `priority` and `preemptionPolicy` (the Priority admission plugin "
        "wrote 0 before the webhook ran). Users may not pick other classes (admins may); who may use "
        "which queue is `queue-access`."
    ),
    parse=no_settings,
    mutate=mutate,
    validate=validate,
    default_kinds=ALL_POD_TEMPLATE_KINDS,
    default_operations=("CREATE", "UPDATE"),
    mutate_operations=("CREATE", "UPDATE"),
    decides_pod=True,
    default_failure_policy="Fail",
    sealed_check=True,
    order=10,
)
