"""``time-limit-extension``: a running job's limit may change, within the queue maximum.

A user extends a running job with ``kubectl annotate --overwrite``; on UPDATE the
new value must be a duration within the maximum of the queue the job was
admitted to, and the annotation may not be removed; a longer limit that would run into
the next maintenance window on the job's nodes is refused with the window's name and
start (from what the reconciler recorded on the job). A separate policy type from
``time-limit`` because a policy has one set of operations, and the mutating
``time-limit`` must never run on UPDATE. Validate only. A changed
``batchgate.io/expected-runtime`` is checked as at CREATE (a duration, at most the limit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..contract import (
    NEXT_MAINTENANCE_ANNOTATION,
    QUEUE_LABEL,
    STARTED_AT_ANNOTATION,
    TIME_LIMIT_ANNOTATION,
)
from ..units import format_time, parse_time
from ..windows import read_next_maintenance
from ..workloads import admission_record, requested_queue
from .base import Ctx, Finding, RuleType, deny, dig, no_settings, warn
from .time_limit import (
    EXAMPLE,
    LOCATIONS,
    limit_problem,
    not_a_limit,
    read_limits,
    runtime_problems,
    seconds_or_none,
)

if TYPE_CHECKING:
    from ..bundle import Queue


def validate_extension(settings: None, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    old = ctx.old_object
    if old is None or ctx.kind not in LOCATIONS:
        return []
    queue = _admitted_queue(old, ctx)
    findings: list[Finding] = []
    record = admission_record(old, ctx.shape)
    label = requested_queue(obj, ctx.shape)
    if record is not None and label != requested_queue(old, ctx.shape) and label != record.queue:
        findings.append(warn(
            f"this {ctx.kind} was admitted to queue {record.queue!r} (recorded in its containers' "
            f"environment, BATCHGATE_QUEUE): its time limit stays within that queue's maximum "
            f"whatever the {QUEUE_LABEL} label says"))
    for (path, _, new), (_, _, before) in zip(read_limits(obj, ctx.kind), read_limits(old, ctx.kind), strict=True):
        if new == before:
            continue  # unrelated updates (labels, finalizers, ...) are none of our business
        where = "" if path == ("metadata",) else f" in {'.'.join(map(str, path))}"
        current = f"the current limit is {before}" if before is not None else "there was no limit"
        if new is None:
            findings.append(deny(
                f"removing {TIME_LIMIT_ANNOTATION}{where} is not allowed ({current}); keep it (also in a "
                f"manifest you apply again) or set another value, {EXAMPLE}"
            ))
        elif queue is not None and (problem := limit_problem(new, queue)) is not None:
            findings.append(deny(f"{problem}{where}; {current}"))
        elif queue is None and seconds_or_none(new) is None:
            findings.append(deny(f"{not_a_limit(new)}{where}; {current}"))
        elif path == ("metadata",) and (problem := _into_window(old, new, before)) is not None:
            findings.append(deny(problem))
    return findings + runtime_problems(obj, ctx.kind, old)


def _into_window(old: dict[str, Any], new: Any, before: Any) -> str | None:
    """Why a longer limit would run into the next maintenance window on the job's nodes.

    The webhook has no API access: the reconciler records on the running job when it started
    (``batchgate.io/started-at``) and the next window on its nodes
    (``batchgate.io/next-maintenance``); both are read from the stored object, which only the
    reconciler and admins may change. No clock is needed: the new deadline is started-at + limit.
    """
    ann = dig(old, ("metadata", "annotations")) or {}
    window = read_next_maintenance(ann.get(NEXT_MAINTENANCE_ANNOTATION))
    started = parse_time(ann.get(STARTED_AT_ANNOTATION))
    seconds, previous = seconds_or_none(new), seconds_or_none(before)
    if window is None or started is None or seconds is None:
        return None
    name, start, start_text, node = window
    if started + seconds <= start or (previous is not None and seconds <= previous):
        return None  # it fits, or it is no longer than before (the drain at the start stops it anyway)
    room = int(start - started) // 60 * 60
    hours, minutes = divmod(room // 60, 60)
    most = (f"at most {hours}h{minutes:02d}m" if minutes else f"at most {hours}h") if room > 0 else "no longer than now"
    return (f"{TIME_LIMIT_ANNOTATION} {new} would run this job until {format_time(started + seconds)}, into maintenance window "
            f"{name}, which starts at {start_text} on node {node} where it runs; its limit can be {most} "
            f"(it started at {ann.get(STARTED_AT_ANNOTATION)})")


def _admitted_queue(old: dict[str, Any], ctx: Ctx) -> Queue | None:
    """The queue the object was admitted to: as recorded at CREATE (webhook.workloads), which
    no relabelling changes; for objects without a record (admitted before batchgate recorded
    admissions), the label as it was before this request. A queue no longer in the bundle:
    the one the request resolves to."""
    record = admission_record(old, ctx.shape)
    name = record.queue if record is not None else requested_queue(old, ctx.shape)
    queue = ctx.bundle.queues.get(name) if isinstance(name, str) else None
    return queue or ctx.queue


TYPE = RuleType(
    name="time-limit-extension",
    doc=(
        "A running job's limit may be changed (`kubectl annotate --overwrite`) within the queue "
        "maximum; in a gated queue only shortened once released (policy `queue-gate`)."
    ),
    parse=no_settings,
    validate=validate_extension,
    default_operations=("UPDATE",),
)
