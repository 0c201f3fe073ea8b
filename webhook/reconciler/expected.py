"""Expected start times on pending workloads, from the shadow schedule.

``batchgate.io/expected-start`` (RFC 3339, or ``unknown``) and
``batchgate.io/expected-start-reason`` on each pending workload (its Job, or a
bare pod), so ``kubectl get -o yaml`` and ``batchgate queue`` show them. An
estimate is only rewritten when it moves by more than ``expected_start_slack``
(5 minutes) or turns known/unknown, and then an Event says so; a workload that
can never fit gets a Warning Event saying exactly why. When a workload starts,
its estimate is removed. A live workload whose pods another scheduler binds (their
``spec.schedulerName`` is not one of the bundle's ``kubeSchedulerProfiles``), and which does not wait
in batchgate's queue, gets no estimate (shadow.py places none of it) and no promise: an
expected start or a ``batchgate.io/start-by`` it carries (written before a profile left the bundle,
or forged while the webhook was down) is removed too. Pure, like the rest of the planner.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..contract import (
    EXPECTED_START_ANNOTATION,
    EXPECTED_START_REASON_ANNOTATION,
    START_BY_ANNOTATION,
)
from ..units import format_time, parse_time
from .actions import Action, EventType, Unplannable, unplannable
from .model import JobView, PodView, Snapshot
from .settings import Settings
from .shadow import Estimate

UNKNOWN = "unknown"


def plan_expected(snapshot: Snapshot, estimates: Iterable[Estimate], settings: Settings, *,
                  failed: list[Unplannable] | None = None) -> list[Action]:
    """``failed``: where workloads whose estimate cannot be written are recorded (each with a
    ``cannot-plan`` action) while the others go on; None: the error propagates."""
    actions: list[Action] = []
    objects: dict[str, JobView | PodView] = {j.ref.uid: j for j in snapshot.jobs.values()}
    seen: set[str] = set()
    for e in estimates:
        obj = objects.get(e.workload.uid)
        if obj is None:
            obj = snapshot.pods.get((e.workload.namespace, e.workload.name))
        if obj is None or obj.ref.uid != e.workload.uid:
            continue
        seen.add(obj.ref.uid)
        try:
            action = _expected(obj, e, settings)
        except Exception as error:
            if failed is None:
                raise
            unplannable("expected-start", obj.ref, error, failed, actions)
            continue
        if action is not None:
            actions.append(action)
    rest: list[JobView | PodView] = [*snapshot.jobs.values(), *snapshot.pods.values()]
    ours = settings.queues.kube_schedulers
    for o in rest:
        if o.ref.uid in seen or (o.expected_start is None and o.start_by is None):
            continue
        scheduler = others(o, ours) if o.start_by is not None else None
        if scheduler is not None:
            actions.append(Action(
                kind="expected-start", target=o.ref, reason="NotEstimated", quiet=True, key="others",
                message=(f"its pods name scheduler {scheduler!r}, which kube-scheduler does not serve (the bundle's "
                         "kubeSchedulerProfiles): batchgate neither estimates nor promises its start; expected start "
                         "and start-by removed"),
                annotations={EXPECTED_START_ANNOTATION: None, EXPECTED_START_REASON_ANNOTATION: None,
                             START_BY_ANNOTATION: None}, resource_version=o.resource_version,
            ))
        elif o.expected_start is not None:
            actions.append(Action(
                kind="expected-start", target=o.ref, reason="Started", quiet=True,
                message="no longer pending: estimate removed", key="gone",
                annotations={EXPECTED_START_ANNOTATION: None, EXPECTED_START_REASON_ANNOTATION: None}, resource_version=o.resource_version,
            ))
    return actions


def others(obj: JobView | PodView, kube_schedulers: Collection[str]) -> str | None:
    """The scheduler that binds a live workload's pods when it is not kube-scheduler (its
    ``spec.schedulerName``, or its template's, not in ``kube_schedulers``) and the workload does not wait
    in batchgate's queue (a gated pod, a queued Job: the queue places those); else None."""
    if isinstance(obj, JobView):
        sched = obj.template if not obj.finished and not obj.queued else None
    else:
        sched = obj.sched if not obj.terminal and not obj.gated else None
    return sched.scheduler if sched is not None and sched.scheduler not in kube_schedulers else None


def _expected(obj: JobView | PodView, e: Estimate, settings: Settings) -> Action | None:
    """The action that brings ``obj``'s recorded estimate to ``e``, or None when it is close enough."""
    want = format_time(e.start) if e.start is not None else UNKNOWN
    have = obj.expected_start
    have_t = parse_time(have) if have and have != UNKNOWN else None
    if have is not None and (
        (e.start is None and have == UNKNOWN)
        or (e.start is not None and have_t is not None and abs(have_t - e.start) <= settings.expected_start_slack)
    ):
        return None
    annotations = {EXPECTED_START_ANNOTATION: want, EXPECTED_START_REASON_ANNOTATION: e.reason[:512]}
    what = e.workload.kind
    etype: EventType
    if e.never:
        reason, etype, message = "NeverFits", "Warning", f"this {what} can never start as it is: {e.reason}"
    elif e.start is None:
        reason, etype, message = "ExpectedStartUnknown", "Normal", f"no start time can be given: {e.reason}"
    elif have_t is not None:
        reason, etype = "ExpectedStartMoved", "Normal"
        message = f"expected to start at {want} (was {have}): {e.reason}"
    else:
        reason, etype, message = "ExpectedStart", "Normal", f"expected to start at {want}: {e.reason}"
    return Action(
        kind="expected-start", target=obj.ref, reason=reason, event_type=etype,
        message=message, key=f"{want}|{e.reason}" if e.start is None else want,
        annotations=annotations, resource_version=obj.resource_version,
    )
