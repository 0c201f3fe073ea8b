"""``time-limit-extension``: a running job's limit may change, within the queue maximum.

A user extends a running job with ``kubectl annotate --overwrite``; on UPDATE the
new value must be a duration within the maximum of the queue the job was
admitted to, and the annotation may not be removed. A separate policy type from
``time-limit`` because a policy has one set of operations, and the mutating
``time-limit`` must never run on UPDATE. Validate only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..contract import QUEUE_LABEL
from . import register
from .base import Ctx, Finding, RuleType, deny, dig, no_settings
from .time_limit import ANNOTATION, EXAMPLE, LOCATIONS, limit_problem, read_limits, seconds_or_none

if TYPE_CHECKING:
    from ..bundle import Queue


def validate_extension(settings: None, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    old = ctx.old_object
    if old is None or ctx.kind not in LOCATIONS:
        return []
    queue = _admitted_queue(old, ctx)
    findings: list[Finding] = []
    for (path, _, new), (_, _, before) in zip(read_limits(obj, ctx.kind), read_limits(old, ctx.kind), strict=True):
        if new == before:
            continue  # unrelated updates (labels, finalizers, ...) are none of our business
        where = "" if path == ("metadata",) else f" in {'.'.join(map(str, path))}"
        current = f"the current limit is {before}" if before is not None else "there was no limit"
        if new is None:
            findings.append(deny(
                f"removing {ANNOTATION}{where} is not allowed ({current}); keep it (also in a "
                f"manifest you apply again) or set another value, {EXAMPLE}"
            ))
        elif queue is not None and (problem := limit_problem(new, queue)) is not None:
            findings.append(deny(f"{problem}{where}; {current}"))
        elif queue is None and seconds_or_none(new) is None:
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
    name="time-limit-extension",
    doc=(
        "A running job's limit may be changed (`kubectl annotate --overwrite`) within the queue "
        "maximum."
    ),
    parse=no_settings,
    validate=validate_extension,
    default_operations=("UPDATE",),
))
