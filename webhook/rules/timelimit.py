"""Time limits: every job carries ``batchgate.io/time-limit``, within its queue's maximum.

The reconciler stops a job when its limit runs out; this module makes sure the
limit is there and sane when the job is admitted, and that later extensions stay
within policy. Two policy types, because a policy has one set of operations and
the mutating half must never run on UPDATE:

- ``time-limit`` (CREATE): defaults the annotation from the queue, copies it into
  pod templates (a Job's pods inherit nothing from the Job's own annotations),
  sets a kubelet-enforced backstop, and denies malformed or over-long limits.
- ``time-limit-extension`` (UPDATE, validate only): a user extends a running job
  with ``kubectl annotate --overwrite``; the new value must stay within the
  maximum, and the annotation may not be removed.

The backstop is the pod's ``activeDeadlineSeconds`` at the queue's *maximum*
plus a margin, not at the job's own limit: the kubelet enforces it even while
the reconciler is down, and on a running Pod it may only be lowered, so a
backstop at the limit itself would make every later extension impossible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contract import QUEUE_LABEL, TIME_LIMIT_ANNOTATION
from ..units import format_duration, parse_duration
from . import register
from .base import Ctx, Finding, Path, RuleType, deny, dig, no_settings, warn

if TYPE_CHECKING:
    from ..bundle import Bundle, Queue
    from ..draft import Draft
    from ..yamlsrc import Node

ANNOTATION = TIME_LIMIT_ANNOTATION
EXAMPLE = "e.g. 90m, 4h, 2d or 1h30m"

# Where each kind keeps the limit, outermost first. The outermost value the user
# set wins at CREATE and is copied to the writable places, so that the object a
# controller makes next (a CronJob's Job, a Job's Pod) carries it.
_LOCATIONS: dict[str, tuple[tuple[Path, bool], ...]] = {
    "Pod": ((("metadata",), True),),
    "Job": ((("metadata",), True), (("spec", "template", "metadata"), True)),
    # A CronJob's own metadata is read but not written: the CronJob controller
    # copies spec.jobTemplate.metadata into each Job, never the CronJob's.
    "CronJob": (
        (("metadata",), False),
        (("spec", "jobTemplate", "metadata"), True),
        (("spec", "jobTemplate", "spec", "template", "metadata"), True),
    ),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """``backstop``: set pod activeDeadlineSeconds to the queue maximum + ``backstop_margin``.

    ``exempt_owner_kinds``: Pods controlled by these kinds are services, not
    jobs, and get no time limit (a Deployment's pods would otherwise be killed
    by the backstop every week).
    """

    backstop: bool = True
    backstop_margin: int = 600  # seconds
    exempt_owner_kinds: tuple[str, ...] = ("ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController")


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("backstop", "backstopMargin", "exemptOwnerKinds"))
    d = Settings()
    b, m, e = node.get("backstop"), node.get("backstopMargin"), node.get("exemptOwnerKinds")
    return Settings(
        backstop=b.bool() if b else d.backstop,
        backstop_margin=m.parsed(parse_duration, expected="a duration like 10m or 1h") if m else d.backstop_margin,
        exempt_owner_kinds=tuple(
            n.str(pattern=r"[A-Z][A-Za-z0-9]*", hint="a Kind, e.g. ReplicaSet") for n in e.seq()
        ) if e else d.exempt_owner_kinds,
    )


def controller_kind(obj: dict[str, Any]) -> str | None:
    """Kind of the object's controlling owner, if any."""
    for ref in dig(obj, ("metadata", "ownerReferences")) or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind") or "")
    return None


def _where(path: Path) -> str:
    return ".".join(str(p) for p in path) + f".annotations[{ANNOTATION}]"


def _exempt(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> bool:
    return bool(ctx.shape and ctx.shape.is_pod and controller_kind(obj) in settings.exempt_owner_kinds)


def _read(obj: dict[str, Any], kind: str) -> list[tuple[Path, bool, Any]]:
    return [(path, writable, dig(obj, (*path, "annotations", ANNOTATION))) for path, writable in _LOCATIONS.get(kind, ())]


# -- time-limit: CREATE -------------------------------------------------------
def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    queue, shape = ctx.queue, ctx.shape
    if queue is None or shape is None or shape.kind not in _LOCATIONS or _exempt(settings, draft.root, ctx):
        return []
    findings: list[Finding] = []
    places = _read(draft.root, shape.kind)
    chosen = next((v for _, _, v in places if v is not None), None)
    if chosen is None and queue.default_time_limit is not None:
        chosen = format_duration(queue.default_time_limit)
        if not ctx.from_controller:
            findings.append(warn(
                f"no {ANNOTATION} annotation: queue {queue.name!r} default {chosen} applies"
                + (f" (the maximum is {format_duration(queue.max_time_limit)})" if queue.max_time_limit else "")
            ))
    if isinstance(chosen, str) and _duration(chosen) is not None:
        for path, writable, value in places:
            if writable and value != chosen:
                if value is not None:
                    findings.append(warn(f"{_where(path)} {value!r} replaced by {chosen!r} set on the {ctx.kind}"))
                draft.edit(*path, "annotations")[ANNOTATION] = chosen
    if settings.backstop and queue.max_time_limit is not None:
        findings += _backstop(settings, draft, ctx, queue)
    return findings


def _backstop(settings: Settings, draft: Draft, ctx: Ctx, queue: Queue) -> list[Finding]:
    assert ctx.shape is not None and queue.max_time_limit is not None
    cap = queue.max_time_limit + settings.backstop_margin
    path = ctx.shape.pod_spec
    spec = draft.get(*path)
    if not isinstance(spec, dict):
        return []
    current = spec.get("activeDeadlineSeconds")
    if current is None:
        draft.edit(*path)["activeDeadlineSeconds"] = cap
        return []
    if isinstance(current, int) and not isinstance(current, bool) and current > cap:
        draft.edit(*path)["activeDeadlineSeconds"] = cap
        return [warn(
            f"{'.'.join(map(str, path))}.activeDeadlineSeconds {current} lowered to {cap}: queue "
            f"{queue.name!r} allows at most {format_duration(queue.max_time_limit)} "
            f"(plus {format_duration(settings.backstop_margin)} grace)"
        )]
    return []  # the user's own, shorter deadline stands


def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    queue, shape = ctx.queue, ctx.shape
    if queue is None or shape is None or ctx.from_controller or _exempt(settings, obj, ctx):
        return []  # a controller's Pod comes from a template that was checked as the workload
    findings: list[Finding] = []
    seen: set[str] = set()
    for _, _, value in _read(obj, shape.kind):
        if value is None or value in seen:
            continue
        seen.add(value)
        if (problem := _problem(value, queue)) is not None:
            findings.append(deny(problem))
    return findings


def _duration(value: Any) -> int | None:
    try:
        return parse_duration(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _problem(value: Any, queue: Queue) -> str | None:
    seconds = _duration(value)
    if seconds is None:
        return f"{ANNOTATION} {value!r} is not a duration; write a number and a unit, {EXAMPLE}"
    if queue.max_time_limit is not None and seconds > queue.max_time_limit:
        return (
            f"{ANNOTATION} {value} exceeds the maximum of queue {queue.name!r}, "
            f"which is {format_duration(queue.max_time_limit)}"
        )
    return None


# -- time-limit-extension: UPDATE -----------------------------------------------
def validate_extension(settings: None, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    old = ctx.old_object
    if old is None or ctx.kind not in _LOCATIONS:
        return []
    queue = _admitted_queue(old, ctx)
    findings: list[Finding] = []
    for (path, _, new), (_, _, before) in zip(_read(obj, ctx.kind), _read(old, ctx.kind), strict=True):
        if new == before:
            continue  # unrelated updates (labels, finalizers, ...) are none of our business
        where = "" if path == ("metadata",) else f" in {'.'.join(map(str, path))}"
        current = f"the current limit is {before}" if before is not None else "there was no limit"
        if new is None:
            findings.append(deny(
                f"removing {ANNOTATION}{where} is not allowed ({current}); keep it (also in a "
                f"manifest you apply again) or set another value, {EXAMPLE}"
            ))
        elif queue is not None and (problem := _problem(new, queue)) is not None:
            findings.append(deny(f"{problem}{where}; {current}"))
        elif queue is None and _duration(new) is None:
            findings.append(deny(f"{ANNOTATION} {new!r} is not a duration; write a number and a unit, {EXAMPLE}"))
    return findings


def _admitted_queue(old: dict[str, Any], ctx: Ctx) -> Queue | None:
    """The queue the object was admitted to (a later relabel does not raise its maximum)."""
    name = (dig(old, ("metadata", "labels")) or {}).get(QUEUE_LABEL)
    if name is None and ctx.shape is not None and not ctx.shape.is_pod:
        name = (dig(old, (*ctx.shape.pod_meta, "labels")) or {}).get(QUEUE_LABEL)
    queue = ctx.bundle.queues.get(name) if isinstance(name, str) else None
    return queue or ctx.queue


register(RuleType(
    name="time-limit",
    doc="Default batchgate.io/time-limit from the queue, copy it into pod templates, set a "
        "kubelet backstop; deny malformed limits and limits over the queue maximum.",
    parse=parse,
    mutate=mutate,
    validate=validate,
    default_failure_policy="Fail",
    order=20,
))

register(RuleType(
    name="time-limit-extension",
    doc="On UPDATE, allow changing batchgate.io/time-limit only within the queue maximum; deny removing it.",
    parse=no_settings,
    validate=validate_extension,
    default_operations=("UPDATE",),
))
