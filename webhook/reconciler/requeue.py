"""Re-queue a released Job whose planned node vanished (the way Kueue evicts a workload).

The queue releases a Job narrowed to the nodes its placement chose (``planner._go``: each of its
required node-affinity terms gains ``metadata.name In [nodes]``). Kubernetes keeps a started Job's
pod template as it is, so the narrowing lasts the Job's run: when a node of it is deleted, cordoned
or not ready, the Job's replacement pods could wait Pending for ever, until the time limit ends the
Job. So, on confirmed facts only (the Job was released from a gated queue and ran, its template
carries exactly the narrowing the release writes, kube-scheduler found no node for one of its
pending pods, and a node of the narrowing is gone, cordoned or not ready: for a gang any of them, so
the gang starts over whole; for other Jobs all of them, since otherwise the pod gets its turn on the
nodes left and running pods are not worth stopping), the reconciler takes the Job back into its
queue, in three writes, each planned from what the Job shows, so a crash between two finds the
next one to do:

1. ``requeue``: ``spec.suspend: true`` (the Job controller deletes its active pods), marked
   ``batchgate.io/queued`` (so its user cannot resume it: policy queue-gate) and
   ``batchgate.io/requeued-at`` (now), its deadline annotations removed; Warning Event
   ``Requeued`` naming the node.
2. ``requeue-reset``: ``status.startTime`` cleared (status subresource), as Kueue and JobSet do:
   Kubernetes lets a suspended Job's template change only while it has no start time. The Job
   controller of 1.37 clears it itself when it suspends a Job (the e2e sees no reset); this step
   only runs where it is still set.
3. ``requeue-unnarrow``: the narrowing removed from the template (the user's own terms again).

A released Job its user suspends (``spec.suspend: true``) in a gated queue goes back to the queue
the same way, as Kueue keeps a workload's ``suspend`` for itself: the webhook marks it
``batchgate.io/queued: suspended`` (policy queue-gate: so its user cannot resume it), and step 1 here
only writes ``requeued-at``, the mark ``"true"`` and the deadline annotations removed (Event
``Requeued``, Normal). Steps 2 and 3 follow where needed: a user may change what Kubernetes lets a
suspended Job change (its pods' node affinity, once the start time is gone), and the queue places
what it then asks for, in its turn.

It is then an ordinary queued Job (``queue.waiting`` leaves it out until step 3 is done): the next
pass places it and releases it, narrowed to nodes that exist. Its time limit counts afresh from its
next start (``planner._deadline`` leaves out the pods of the run before ``requeued-at``): the run it
lost is not held against it, nor the time it waited again.

Bare pods are not re-queued: a pod's scheduling gates cannot be added back nor its node affinity
loosened once it left the gate, so one narrowed to a node that vanished keeps waiting with
``NeverFits`` (its user deletes and resubmits it). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..contract import (
    DEADLINE_ANNOTATION,
    QUEUED_ANNOTATION,
    REQUEUED_AT_ANNOTATION,
    STARTED_AT_ANNOTATION,
    WARNED_FOR_ANNOTATION,
)
from ..kubefields import REQUIRED
from ..units import format_time
from .actions import Action
from .model import JobView, NodeView, PodView, Snapshot
from .queue import queue_of
from .scavenger import sj_owner
from .settings import QueuePolicy
from .victims import narrowing, unnarrowed_terms


def requeuing(job: JobView) -> bool:
    """A Job the queue is taking back (``plan_requeue``'s step 1 to do for one its user suspended, or
    steps 1 and 2 done, 3 not yet): it waits for its start time to be cleared and its old narrowing
    removed before it can be placed."""
    return job.queued and (job.user_suspended or (
        job.requeued_at is not None
        and (job.ran or (job.template is not None and narrowing(job.template) is not None))))


def vanished(node: str, nodes: Mapping[str, NodeView]) -> str | None:
    """Why ``node`` can take no pod now (deleted, cordoned, not ready), or None."""
    n = nodes.get(node)
    if n is None:
        return f"node {node} is gone"
    if n.unschedulable:
        return f"node {node} is cordoned"
    if n.ready not in (None, "True"):  # as the placement counts it (shadow.py): no Ready condition is no news
        return f"node {node} is not ready"
    return None


def _requeued(now: float) -> dict[str, str | None]:
    """The annotations of a Job the queue takes back: queued again, when, and its last run's dates gone
    (its time limit counts afresh from its next start)."""
    return {QUEUED_ANNOTATION: "true", REQUEUED_AT_ANNOTATION: format_time(now),
            STARTED_AT_ANNOTATION: None, DEADLINE_ANNOTATION: None, WARNED_FOR_ANNOTATION: None}


def plan_requeue(snapshot: Snapshot, now: float, policy: QueuePolicy, jobs: Iterable[JobView],
                 pods_of_job: Mapping[str, Sequence[PodView]]) -> list[Action]:
    """The next step of re-queueing each Job that needs it (module docstring). ``pods_of_job``: the
    pods each Job's controller made (``model.job_of``), by the Job's uid."""
    out: list[Action] = []
    nodes = snapshot.nodes
    for job in jobs:
        if job.deleting or job.finished or job.template is None:
            continue
        rv = job.resource_version
        if job.queued and job.user_suspended:
            out.append(Action(
                kind="requeue", target=job.ref, reason="Requeued", key=f"suspended/{rv}",
                message=(f"suspended by its user: the Job waits in queue {queue_of(job, policy)!r} again and is "
                         "released when its turn comes (its time limit counts afresh from then)"),
                patch={"metadata": {"resourceVersion": rv, "annotations": _requeued(now)}}))
            continue
        if requeuing(job):
            if job.ran:
                out.append(Action(
                    kind="requeue-reset", target=job.ref, reason="Requeued", quiet=True, key="reset",
                    message="re-queued: its start time cleared, so that its node affinity may change",
                    patch={"metadata": {"resourceVersion": rv}, "status": {"startTime": None}},
                    subresource="status"))
            else:
                terms = unnarrowed_terms(job.template)
                out.append(Action(
                    kind="requeue-unnarrow", target=job.ref, reason="Requeued", quiet=True, key="unnarrow",
                    message="re-queued: batchgate's narrowing to the nodes planned before removed",
                    patch={"metadata": {"resourceVersion": rv}, "spec": {"template": {"spec": {"affinity": {
                        "nodeAffinity": {REQUIRED: None if terms is None else {"nodeSelectorTerms": terms}}}}}}}))
            continue
        if nodes is None or job.suspended or job.queued or not job.ran:
            continue
        planned = narrowing(job.template)
        if planned is None or queue_of(job, policy) not in policy.gated or sj_owner(job, snapshot) is not None:
            continue
        stuck = next((p for p in sorted(pods_of_job.get(job.ref.uid, ()), key=lambda p: p.ref.name)
                      if p.unschedulable and not p.node and not p.deleting), None)
        if stuck is None:
            continue
        lost = [(n, why) for n in planned if (why := vanished(n, nodes)) is not None]
        if not lost or (job.group is None and len(lost) < len(planned)):
            continue  # a node it was kept to is left for its pod: it gets its turn there
        why = "; ".join(w for _, w in lost)
        kept = ", ".join(planned)
        q = queue_of(job, policy)
        out.append(Action(
            kind="requeue", target=job.ref, reason="Requeued", event_type="Warning",
            key=f"{stuck.ref.uid}/{','.join(n for n, _ in lost)}",
            message=(f"{why}: it was kept to {kept} when queue {q!r} released it, and its pod {stuck.ref.name} "
                     "cannot be placed there; re-queued: its pods are stopped, the Job waits in its queue again and "
                     "is released onto nodes that exist when its turn comes (its time limit counts afresh from "
                     "then)"),
            patch={"metadata": {"resourceVersion": rv, "annotations": _requeued(now)}, "spec": {"suspend": True}},
            tell_after=True))
    return out
