"""``time-limit``: every job carries ``batchgate.io/time-limit``, within its queue's maximum.

The reconciler stops a job when its limit runs out; this policy type makes sure
the limit is there and sane when the job is admitted (CREATE only: it mutates).
It defaults the annotation from the queue, copies it into pod templates (a Job's
pods inherit nothing from the Job's own annotations), sets a kubelet-enforced
backstop, and denies malformed or over-long limits. Later changes of the limit
are :mod:`webhook.rules.time_limit_extension`'s business.

It also records what the workload was admitted with - the queue and the limit, and on a Pod
which Job's controller made it - where nobody can change it afterwards (``BATCHGATE_QUEUE``,
``BATCHGATE_TIME_LIMIT`` and ``BATCHGATE_JOB_UID`` in every container of a Pod or a Job's
template; where, per kind, is :mod:`webhook.workloads`'s knowledge). Labels, annotations and
ownerReferences stay editable by whoever may update the object, and UPDATE validation fails
open; the record is what the reconciler and the extension check trust: relabelling the queue or
removing the annotation cannot raise the limit, re-parenting a pod cannot make it a Job's.

The backstop is the pod's ``activeDeadlineSeconds`` at the queue's *maximum*
plus a margin, not at the job's own limit: the kubelet enforces it even while
the reconciler is down, and on a running Pod it may only be lowered, so a
backstop at the limit itself would make every later extension impossible.

``batchgate.io/expected-runtime``, the user's own guess of how long the job runs, is optional;
where it is set (wherever a limit may be) it must be a duration no longer than the limit
there. Expected start times count on it (the reconciler's shadow schedule).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..contract import EXPECTED_RUNTIME_ANNOTATION, TIME_LIMIT_ANNOTATION
from ..units import MAX_DURATION, DurationTooLong, format_duration, parse_duration, shown
from ..workloads import (
    RECORD_ENV,
    SERVICE_OWNER_KINDS,
    SHAPES,
    Record,
    Shape,
    admission_record,
    controller_group_kind,
    controller_kind,
    controller_of,
    meta_entry,
    owned_by_custom_resource,
    service_owned,
)
from .base import Ctx, Finding, Path, RuleType, deny, dig, warn

if TYPE_CHECKING:
    from ..bundle import Bundle, Queue
    from ..draft import Draft
    from ..yamlsrc import Node

EXAMPLE = "e.g. 90m, 4h, 2d or 1h30m"

# Where each kind keeps the limit, outermost first (webhook.workloads). The outermost value the
# user set wins at CREATE and is copied to the writable places, so that the object a controller
# makes next (a CronJob's Job, a Job's Pod) carries it.
LOCATIONS: dict[str, tuple[tuple[Path, bool], ...]] = {
    s.kind: s.time_limit_at for s in SHAPES.values() if s.time_limit_at
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
    exempt_owner_kinds: tuple[str, ...] = SERVICE_OWNER_KINDS
    # Pods controlled by a custom resource (a RayCluster's head, a Spark driver, an operator's
    # workers): their lifetime is the operator's; a default limit would kill them weekly. A
    # limit the user set on the pod template is still honoured and checked.
    exempt_custom_resource_owners: bool = True


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("backstop", "backstopMargin", "exemptOwnerKinds", "exemptCustomResourceOwners"))
    d = Settings()
    b, m, e = node.get("backstop"), node.get("backstopMargin"), node.get("exemptOwnerKinds")
    return Settings(
        backstop=b.bool() if b else d.backstop,
        backstop_margin=m.parsed(parse_duration, expected="a duration like 10m or 1h") if m else d.backstop_margin,
        exempt_owner_kinds=tuple(
            n.str(pattern=r"[A-Z][A-Za-z0-9]*", hint="a Kind, e.g. ReplicaSet") for n in e.seq()
        ) if e else d.exempt_owner_kinds,
        exempt_custom_resource_owners=node.opt("exemptCustomResourceOwners", lambda n: n.bool(),
                                               d.exempt_custom_resource_owners),
    )


def _where(path: Path) -> str:
    return ".".join(str(p) for p in path) + f".annotations[{TIME_LIMIT_ANNOTATION}]"


def _exempt(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> bool:
    """A service's Pod: controlled by an exempt kind (Kubernetes' own in their real API group) *and*
    made by a controller; or an operator's Pod with a custom-resource owner and no limit of its
    own, made by a controller the bundle lists. Anyone may write an ownerReference: a Pod a user
    submits claiming a ReplicaSet, a ``nope.example.com/v1 DaemonSet`` or any custom resource is
    a job like any other (issue 27), with a limit, a record and the maintenance affinity."""
    if not (ctx.shape and ctx.shape.is_pod and ctx.from_controller):
        return False
    if service_owned(obj, settings.exempt_owner_kinds):
        return True
    return (settings.exempt_custom_resource_owners and owned_by_custom_resource(obj)
            and all(v is None for _, _, v in read_limits(obj, "Pod")))


def read_limits(obj: dict[str, Any], kind: str) -> list[tuple[Path, bool, Any]]:
    return [(path, writable, meta_entry(obj, path, "annotations", TIME_LIMIT_ANNOTATION)) for path, writable in LOCATIONS.get(kind, ())]


def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    queue, shape = ctx.queue, ctx.shape
    if shape is None or shape.kind not in LOCATIONS:
        return []
    if queue is None or _exempt(settings, draft.root, ctx):
        _record(draft, shape, None)  # no limit here: nor may the pod carry a record someone wrote
        return []
    findings: list[Finding] = []
    places = read_limits(draft.root, shape.kind)
    chosen = None  # the outermost limit set
    for _, _, value in places:
        if value is not None:
            chosen = value
            break
    if chosen is None and queue.default_time_limit is not None:
        chosen, defaulted = _default(queue.name, queue.default_time_limit, queue.max_time_limit)
        if not ctx.from_controller:
            findings.append(defaulted)
    record = None
    if isinstance(chosen, str) and seconds_or_none(chosen) is not None:
        for path, writable, value in places:
            if writable and value != chosen:
                if value is not None:
                    findings.append(warn(f"{_where(path)} {value!r} replaced by {chosen!r} set on the {ctx.kind}"))
                draft.edit(*path, "annotations")[TIME_LIMIT_ANNOTATION] = chosen
        record = Record(queue.name, chosen)
    if shape.is_pod and ctx.from_controller and controller_kind(draft.root) == "Job":
        # The Job controller copied the Job's record, written by this webhook at the Job's
        # CREATE into a template nobody can change; the Pod's labels and annotations, copied
        # from template metadata that a suspended, never-started Job lets anyone edit
        # (Kubernetes 1.23+), are not a better source. (A CronJob's Jobs, by contrast, are
        # recorded afresh: a CronJob's template is anyone's to edit.)
        record = admission_record(draft.root, shape) or record
    if record is not None:
        # Which Job's controller made the pod: the Job uid its controller wrote as the controlling
        # ownerReference, on a Pod that controller creates; "" on any other Pod (a user's claiming
        # a Job owner included) and in a Job's template. The reconciler counts a pod for a Job only
        # with the Job's uid here: an ownerReference anyone may rewrite later, or the Job
        # controller's adoption of a pod someone labelled, confirms nothing (issue 27).
        job = ""
        if shape.is_pod and ctx.from_controller and controller_group_kind(draft.root) == ("batch", "Job"):
            made_by = controller_of(draft.root)
            uid = made_by.get("uid") if made_by is not None else None
            job = uid if isinstance(uid, str) else ""  # str() of a nested value would recurse
        if record.job != job:
            record = replace(record, job=job)
    pod = _record(draft, shape, record)
    if settings.backstop and queue.max_time_limit is not None:
        findings += _backstop(settings, draft, ctx, queue, pod if shape.record_at == shape.pod_spec else None)
    return findings


@functools.lru_cache(maxsize=256)  # keyed by the bundle's queues: a few entries, each ~9k instructions saved
def _default(queue: str, default: int, most: int | None) -> tuple[str, Finding]:
    """A queue's default limit as written, and the warning that it applies (Findings are frozen)."""
    chosen = format_duration(default)
    return chosen, warn(f"no {TIME_LIMIT_ANNOTATION} annotation: queue {queue!r} default {chosen} applies"
                        + (f" (the maximum is {format_duration(most)})" if most else ""))


def _record(draft: Draft, shape: Shape, record: Record | None) -> dict[str, Any] | None:
    """Write the admission record (webhook.workloads) into every container, replacing entries of
    the same names that the request carried; with ``record`` None, remove such entries. A
    controller's copy of an admitted template already carries it: nothing changes then.
    Returns the pod spec (at ``shape.record_at``) where it was edited, for the backstop to
    write into without another walk from the root (~7k instructions a Pod, ~13k a Job)."""
    if shape.record_at is None:
        return None
    containers = draft.get(*shape.record_at, "containers")
    if not isinstance(containers, list):
        return None
    pod = edited = None  # the pod spec and its containers, once edited
    for i, c in enumerate(containers):
        if type(c) is not dict:
            continue  # not a container: the API server refuses the object anyway
        env = c.get("env")
        if env is None:  # the common case: nothing to keep, nothing to replace
            if record is not None:
                if edited is None:
                    pod = draft.edit(*shape.record_at)
                    edited = draft.child(pod, "containers")
                draft.child(edited, i)["env"] = record.env()
            continue
        if type(env) is not list:
            continue
        if record is None and not any(type(e) is dict and e.get("name") in RECORD_ENV for e in env):
            continue
        # In place where the entries are (a reinvocation, or a controller's copy, changes
        # nothing), once each, appended where missing.
        want = {e["name"]: e for e in record.env()} if record is not None else {}
        new, seen = [], set()
        for e in env:
            name = e.get("name") if type(e) is dict else None
            if name in RECORD_ENV:
                if name in want and name not in seen:
                    new.append(want[name])
                seen.add(name)
            else:
                new.append(e)
        new += [e for name, e in want.items() if name not in seen]
        if new != env:
            if edited is None:
                pod = draft.edit(*shape.record_at)
                edited = draft.child(pod, "containers")
            draft.child(edited, i)["env"] = new
    return pod


def _backstop(settings: Settings, draft: Draft, ctx: Ctx, queue: Queue, pod: dict[str, Any] | None) -> list[Finding]:
    """``pod``: the pod spec, edited already (or None)."""
    assert ctx.shape is not None and queue.max_time_limit is not None
    cap = queue.max_time_limit + settings.backstop_margin
    path = ctx.shape.pod_spec
    spec = pod if pod is not None else draft.get(*path)
    if not isinstance(spec, dict):
        return []
    current = spec.get("activeDeadlineSeconds")
    if current is None:
        (pod if pod is not None else draft.edit(*path))["activeDeadlineSeconds"] = cap
        return []
    if isinstance(current, int) and not isinstance(current, bool) and current > cap:
        (pod if pod is not None else draft.edit(*path))["activeDeadlineSeconds"] = cap
        return [warn(
            f"{'.'.join(map(str, path))}.activeDeadlineSeconds {current} lowered to {cap}: queue "
            f"{queue.name!r} allows at most {format_duration(queue.max_time_limit)} "
            f"(plus {format_duration(settings.backstop_margin)} grace)"
        )]
    return []  # the user's own, shorter deadline stands


def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    queue, shape = ctx.queue, ctx.shape
    if queue is None or shape is None or ctx.trusted or _exempt(settings, obj, ctx):
        return []  # a controller's Pod comes from a template that was checked as the workload
    findings: list[Finding] = []
    seen: set[str] = set()
    for _, _, value in read_limits(obj, shape.kind):
        if value is None or value in seen:
            continue
        seen.add(value)
        if (problem := limit_problem(value, queue)) is not None:
            findings.append(deny(problem))
    findings += runtime_problems(obj, shape.kind)
    return findings


def runtime_problems(obj: dict[str, Any], kind: str, old: dict[str, Any] | None = None) -> list[Finding]:
    """``batchgate.io/expected-runtime`` wherever it is set (with ``old``: where it changed): a
    duration, no longer than the time limit at the same place (else the outermost one)."""
    locations = LOCATIONS.get(kind, ())
    findings: list[Finding] = []
    limits: list[Any] = []  # the time limits, read at the first expected runtime met (most objects: none)
    outer = None
    for i, (path, _) in enumerate(locations):
        value = dig(obj, (*path, "annotations", EXPECTED_RUNTIME_ANNOTATION))
        if value is None or (old is not None and value == dig(old, (*path, "annotations", EXPECTED_RUNTIME_ANNOTATION))):
            continue
        if not limits:
            limits = [dig(obj, (*at, "annotations", TIME_LIMIT_ANNOTATION)) for at, _ in locations]
            outer = next((v for v in limits if v is not None), None)
        limit = limits[i]
        where = "" if path == ("metadata",) else f" in {'.'.join(map(str, path))}"
        if (problem := runtime_problem(value, limit if limit is not None else outer)) is not None:
            findings.append(deny(f"{problem}{where}"))
    return findings


def runtime_problem(value: Any, limit: Any) -> str | None:
    seconds = seconds_or_none(value)
    if seconds is None:
        return too_long(EXPECTED_RUNTIME_ANNOTATION, value) or (
            f"{EXPECTED_RUNTIME_ANNOTATION} {shown(value)} is not a duration; write how long you expect the job to run, "
            f"{EXAMPLE}")
    most = seconds_or_none(limit)
    if most is not None and seconds > most:
        return (f"{EXPECTED_RUNTIME_ANNOTATION} {value} is longer than the job's time limit {limit}: it is how long you "
                f"expect the job to run, at most its limit (raise {TIME_LIMIT_ANNOTATION} too if it needs more time)")
    return None


def seconds_or_none(value: Any) -> int | None:
    try:
        return parse_duration(value) if isinstance(value, str) else None
    except ValueError:
        return None


def too_long(what: str, value: Any) -> str | None:
    """The denial for a duration past the parser's bound (``units.MAX_DURATION``), naming it."""
    if not isinstance(value, str):
        return None
    try:
        parse_duration(value)
    except DurationTooLong:
        return (f"{what} {shown(value)} is longer than {format_duration(MAX_DURATION)}, the longest duration "
                f"batchgate accepts (ask for what the job needs, {EXAMPLE})")
    except ValueError:
        return None
    return None


def not_a_limit(value: Any) -> str:
    """Why ``value`` is no time limit at all (malformed, or past the bound)."""
    return too_long(TIME_LIMIT_ANNOTATION, value) or (
        f"{TIME_LIMIT_ANNOTATION} {shown(value)} is not a duration; write a number and a unit, {EXAMPLE}")


def limit_problem(value: Any, queue: Queue) -> str | None:
    seconds = seconds_or_none(value)
    if seconds is None:
        return not_a_limit(value)
    if queue.max_time_limit is not None and seconds > queue.max_time_limit:
        return (
            f"{TIME_LIMIT_ANNOTATION} {value} exceeds the maximum of queue {queue.name!r}, "
            f"which is {format_duration(queue.max_time_limit)}"
        )
    return None


TYPE = RuleType(
    name="time-limit",
    doc=(
        "`batchgate.io/time-limit` defaulted per queue, denied above the queue maximum or when "
        "malformed; kubelet backstop via `activeDeadlineSeconds`; the admitted queue and limit "
        "recorded in the containers' env (`BATCHGATE_QUEUE`, `BATCHGATE_TIME_LIMIT`, and on a Job "
        "controller's Pod its Job's uid, `BATCHGATE_JOB_UID`); an optional "
        "`batchgate.io/expected-runtime` checked to be a duration within the limit."
    ),
    parse=parse,
    mutate=mutate,
    validate=validate,
    default_failure_policy="Fail",
    sealed_check=True,
    order=20,
)
