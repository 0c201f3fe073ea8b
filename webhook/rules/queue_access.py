"""``queue-access``: who may use a queue, and who may take whole nodes in it.

Two checks, both must pass (the bundle's admins pass both):

- the namespace's ``allowedQueues`` (bundle ``namespaces:``), Kueue's LocalQueue-per-namespace;
- the queue's ``access`` (bundle ``queues[].access``), Slurm's AllowGroups/AllowAccounts: grants
  of namespaces (names, globs) and users, groups, service accounts; absent, the queue is open to
  all. A grant may also select namespaces by label (``namespaceSelector``), judged on the labels
  the reconciler publishes (:mod:`webhook.nsfacts`): an unpublished or stale namespace does not
  match. ``exclusiveAccess`` says the same for ``batchgate.io/exclusive: "true"`` in that queue.

Who is judged is whoever creates or updates the workload: a Pod, or any kind that makes pods
(templates are judged as the pods they will make), and a ScavengerJob (its scavenger queue).
Objects that a controller made from an owner admitted here (the bundle's ``controllers``, and
this policy's ``controllers``: the reconciler, which makes a ScavengerJob's Jobs) are not judged
again, since their creator is not the user, when their pod template carries a verifying admission
seal (``ctx.trusted``, webhook.seal); without one they are judged with no one's grants. On UPDATE only what the update adds is judged: a
queue the object did not name before, or whole nodes it did not ask for before (or in a queue
newly named), so that a queue closed later does not stall updates of running work, while
relabelling a workload or its template into a closed queue is denied like a CREATE. A Pod's or a
Job's queue label and exclusive group (``FIXED_LABELS``) may not change at all once it exists: its
class, record and placement were decided at CREATE, and an UPDATE must not undo them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..bundle import Access, Principals, parse_principals
from ..contract import EXCLUSIVE_GROUP_LABEL, EXCLUSIVE_LABEL, QUEUE_LABEL
from ..workloads import label_maps
from ..yamlsrc import Node
from .base import ALL_POD_TEMPLATE_KINDS, RECONCILER, Ctx, Finding, RuleType, Shape, deny

if TYPE_CHECKING:
    from ..bundle import Bundle

SHOWN_GROUPS = 8  # a caller's groups named in a denial; the rest are counted


@dataclass(frozen=True, slots=True)
class Settings:
    # Besides the bundle's controllers: identities that make workloads (with a controlling
    # owner) from an object this policy already judged.
    controllers: Principals = field(default_factory=lambda: Principals(service_accounts=(RECONCILER,)))


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("controllers",))
    controllers = parse_principals(node.get("controllers"))
    return Settings(controllers=controllers) if controllers is not None else Settings()


def asked(obj: Any, ctx: Ctx) -> tuple[set[str], bool]:
    """Every queue the object names (its label, a CronJob's Job template's, the pod template's),
    or the queue it defaults to when it names none; and whether it asks for whole nodes."""
    if ctx.shape is None:  # a ScavengerJob runs in the scavenger queue, whatever its labels
        return {ctx.queue_name}, False
    maps = label_maps(obj, ctx.shape)
    named = {q for m in maps if isinstance(q := m.get(QUEUE_LABEL), str)}
    return (named or {ctx.bundle.default_queue_for(ctx.namespace)},
            any(m.get(EXCLUSIVE_LABEL) == "true" for m in maps))


# Labels of a Pod or a Job (and its pod template) fixed at CREATE: the queue (judged, recorded in
# the env, and given its PriorityClass then) and the exclusive group; exclusive placement's
# anti-affinity matches other pods by both (policy node-selection: batchgate.io/queue Exists,
# exclusive-group NotIn [own]).
FIXED_LABELS = (QUEUE_LABEL, EXCLUSIVE_GROUP_LABEL)


def fixed_labels_changed(obj: Any, old: Any, shape: Shape) -> list[str]:
    """The FIXED_LABELS an UPDATE sets, changes or removes anywhere they reach the pods."""
    changed: list[str] = []
    for new_map, old_map in zip(label_maps(obj, shape), label_maps(old, shape), strict=True):
        changed += [k for k in FIXED_LABELS if new_map.get(k) != old_map.get(k) and k not in changed]
    return changed


def _fixed(obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    """A Pod's or Job's queue and exclusive group stay what they were at CREATE. Relabelling a
    running scavenger pod to batch took it out of the scavengers' cap; removing the queue label of a
    pod pinned to another job's exclusive node let kube-scheduler bind it there (issue 27). The
    kinds whose pod template may change (CronJob, apps kinds) may relabel it: their new pods are
    admitted, and judged, as they are made."""
    shape, old = ctx.shape, ctx.old_object
    if ctx.operation != "UPDATE" or shape is None or shape.template_mutable or old is None:
        return []
    changed = fixed_labels_changed(obj, old, shape)
    if not changed:
        return []
    was = next((q for m in label_maps(old, shape) if isinstance(q := m.get(QUEUE_LABEL), str)), None)
    return [deny(
        f"{' and '.join(changed)} of a {ctx.kind} cannot be set, changed or removed once it exists: "
        f"it was admitted{f' to queue {was!r}' if was else ''} at creation, where its priority class, "
        f"time limit and placement were decided (exclusive placement matches pods by these labels); "
        f"to run in another queue, create a new {ctx.kind} with the label {QUEUE_LABEL}"
    )]


def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    if ctx.admin or ctx.trusted or _made_by(settings, obj, ctx):
        return []
    fixed = _fixed(obj, ctx)
    if fixed:
        return fixed
    bundle = ctx.bundle
    named, exclusive = asked(obj, ctx)
    if ctx.operation == "UPDATE" and ctx.old_object is not None and ctx.old_judged:
        before, was_exclusive = asked(ctx.old_object, ctx)
        judged = named - before
        exclusive_in = named if exclusive and not was_exclusive else (judged if exclusive else set())
    else:
        judged, exclusive_in = named, (named if exclusive else set())
    findings: list[Finding] = []
    rule = ctx.namespace_rule
    for name in sorted(judged):
        queue = bundle.queues.get(name)
        if queue is None:
            if name != ctx.queue_name:  # the queue the workload runs in: queue-priority says it
                findings.append(deny(f"queue {name!r} does not exist; set the label {QUEUE_LABEL} to one "
                                     f"of: {', '.join(bundle.queues)}"))
            continue
        if rule and rule.allowed_queues is not None and name not in rule.allowed_queues:
            findings.append(deny(
                f"queue {name!r} is not available in namespace {ctx.namespace}; "
                f"use {QUEUE_LABEL}: one of {', '.join(rule.allowed_queues)}"
            ))
        elif queue.access is not None and not _admits(queue.access, ctx):
            findings.append(deny(
                f"queue {name!r} is open to {queue.access.describe()}; {_you(ctx)}; "
                f"{_why_not(queue.access, ctx)}{_open_here(ctx)}"
            ))
    for name in sorted(exclusive_in):
        queue = bundle.queues.get(name)
        access = queue.exclusive_access if queue is not None else None
        if access is not None and not _admits(access, ctx):
            findings.append(deny(
                f"whole nodes ({EXCLUSIVE_LABEL}: \"true\") in queue {name!r} are open to "
                f"{access.describe()}; {_you(ctx)}; {_why_not(access, ctx)}leave {EXCLUSIVE_LABEL} out"
            ))
    return findings


def _why_not(access: Access, ctx: Ctx) -> str:
    """A grant by namespace labels that could not be judged (labels not published yet, stale):
    said, so that the user knows to retry rather than to ask for access."""
    why = access.why_not(ctx.namespace, ctx.username, ctx.groups, ctx.bundle.namespace_facts) if ctx.bundle.selectors else ""
    return f"{why}; " if why else ""


def _made_by(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> bool:
    """An object with a controlling owner, made by one of this policy's own controllers."""
    owners = (obj.get("metadata") or {}).get("ownerReferences")
    controlled = isinstance(owners, list) and any(isinstance(o, dict) and o.get("controller") is True
                                                  for o in owners)
    return controlled and settings.controllers.contains(ctx.username, ctx.groups)


def _you(ctx: Ctx) -> str:
    if ctx.unsealed:
        return (f"a controller made this {ctx.kind} in namespace {ctx.namespace} from a template "
                "with no valid seal, so no one's grants apply")
    prefix = "system:serviceaccount:"
    who = (f"service account {ctx.username[len(prefix):].replace(':', '/', 1)}"
           if ctx.username.startswith(prefix) else ctx.username or "an anonymous caller")
    groups = [g for g in ctx.groups if g != "system:authenticated"]
    shown = ", ".join(groups[:SHOWN_GROUPS]) + (f" and {len(groups) - SHOWN_GROUPS} more"
                                                 if len(groups) > SHOWN_GROUPS else "")
    return f"you are {who} ({'groups ' + shown if groups else 'no groups'}) in namespace {ctx.namespace}"


def _open_here(ctx: Ctx) -> str:
    """The queues this caller may use in this namespace, for the denial."""
    rule = ctx.namespace_rule
    usable = [q.name for q in ctx.bundle.queues.values()
              if (rule is None or rule.allowed_queues is None or q.name in rule.allowed_queues)
              and _admits(q.access, ctx)]
    if not usable:
        return "no queue is open to you here; ask an admin"
    return f"ask an admin for access, or use {QUEUE_LABEL}: one of {', '.join(usable)}"


def _admits(access: Access | None, ctx: Ctx) -> bool:
    return access is None or access.admits(ctx.namespace, ctx.username, ctx.groups, ctx.bundle.namespace_facts)


TYPE = RuleType(
    name="queue-access",
    doc=(
        "Who may use a queue: the namespace's `allowedQueues` and the queue's `access` (namespaces, "
        "users, groups, service accounts; Slurm's AllowGroups/AllowAccounts), and who may take whole "
        "nodes in it (`exclusiveAccess` for `batchgate.io/exclusive`). Judged on CREATE and on every "
        "UPDATE that names a new queue or asks for whole nodes; admins may use every queue. A Pod's or "
        "Job's queue and exclusive group are fixed once it exists."
    ),
    parse=parse,
    validate=validate,
    default_kinds=(*ALL_POD_TEMPLATE_KINDS, ("batchgate.io", "v1alpha1", "ScavengerJob")),
    default_operations=("CREATE", "UPDATE"),
    default_failure_policy="Fail",
    sealed_check=True,
    order=10,
)
