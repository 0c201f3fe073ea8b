"""Maintenance windows, planned: countdown labels, cordon and drain, and giving nodes back.

A pure function of the snapshot, ``now`` and the settings, like the rest of the
planner (webhook/reconciler/planner.py calls :func:`plan_maintenance`). What a
window *is* lives in :mod:`webhook.windows`.

**Before a window.** Every node with a window ahead (or on now) carries
``batchgate.io/maintenance-in-minutes``: whole minutes left before its earliest
window, rounded down with slack held back (``countdown_slack``, or 2 % of the
time left when that is more), so the value understates the time left until it
is rewritten, ``countdown_guard`` seconds before it would stop doing so. The
``maintenance-affinity`` policy gives time-limited pods a node affinity on it,
and kube-scheduler does the rest at bind time. The label goes when no window is
ahead any more. Only the first labelling of a node sends an Event; the
countdown moving does not.

**At its start.** Each node of the window is cordoned in one merge patch that
also records, in the node's ``batchgate.io/maintenance`` annotation, which
window did it and whether the node was unschedulable before; the patch is
fenced by the node's resourceVersion, so what is recorded is what was there.
Then every pod on it (but DaemonSet pods and static pods) is evicted through
the Eviction API, so PodDisruptionBudgets are honoured, until ``drain_timeout``
after the start; past it, a pod that a budget still protects is deleted, with
a Warning Event (and first, as the Eviction API would, a ``DisruptionTarget``
condition: a Job's podFailurePolicy can take it for an interruption). Every eviction is an Event on the pod's workload (its Job, or
the pod).

**At its end** (or when the window is deleted), a node that no active window
covers any more is given back as the annotation says it was: uncordoned, or
left cordoned if an admin had cordoned it before; the annotation goes in the
same patch. Everything needed to finish a drain or an end after a restart is on
the node, so a restart in the middle repeats nothing and misses nothing.

The windows' status (``state``, ``nodeCount``) is kept for ``kubectl get mw``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ..contract import COUNTDOWN_LABEL, MAINTENANCE_ANNOTATION, NEXT_MAINTENANCE_ANNOTATION
from ..units import format_time
from ..windows import Window, countdown, next_maintenance_text, next_window, slack_for
from .actions import Action, Delete, Disruption, Unplannable, unplannable
from .model import (
    REASON_MAINTENANCE_DRAIN,
    JobView,
    NodeView,
    PodView,
    Ref,
    Snapshot,
    WindowView,
    job_of,
    own_job,
)
from .settings import Settings


def not_drained(pod: PodView) -> bool:
    """A DaemonSet's pod or a static (mirror) pod: kubectl drain leaves them too. Only the real kinds
    count (``apps/v1`` DaemonSet; ``v1`` Node, the one the pod runs on), and only for a pod the
    webhook admitted as a service, with no admission record: anyone may write an ownerReference,
    and a user's bare Pod claiming a DaemonSet (``nope.example.com/v1 DaemonSet``, or even
    ``apps/v1`` with a uid the garbage collector has not got to yet) was recorded as a job at its
    CREATE, so it is drained like one (issue 27). The reconciler does not watch DaemonSets: the
    record, written where the caller was known, stands for having seen the owner."""
    o = pod.owner
    if o is None or pod.admitted is not None:
        return False
    return ((o.api_version == "apps/v1" and o.kind == "DaemonSet")
            or (o.api_version == "v1" and o.kind == "Node" and o.name == pod.node))


@dataclass(frozen=True, slots=True)
class Cordoned:
    """What ``batchgate.io/maintenance`` on a node says: which window cordoned it, and how it was."""

    window: str
    was_unschedulable: bool

    def text(self) -> str:
        return json.dumps({"window": self.window, "unschedulable": self.was_unschedulable},
                          separators=(",", ":"), sort_keys=True)


def read_cordoned(text: str | None) -> Cordoned | None:
    """The annotation, or None when absent. Unreadable (edited by hand): treated as ours, and the node
    as schedulable before, so the window's end still gives it back."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return Cordoned(window="?", was_unschedulable=False)
    return Cordoned(window=str(data.get("window") or "?"), was_unschedulable=data.get("unschedulable") is True)


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def plan_maintenance(snapshot: Snapshot, now: float, settings: Settings, *,
                     failed: list[Unplannable] | None = None) -> tuple[list[Action], float | None]:
    """The actions due at ``now`` for every window, and when to look again. ``failed``: where a node,
    window or job that cannot be planned is recorded (with a ``cannot-plan`` action, and nothing
    else planned for it) while the others go on; None: the error propagates."""

    def fail(ref: Ref, error: Exception, n: int) -> None:
        if failed is None:
            raise error
        del actions[n:]
        unplannable("maintenance", ref, error, failed, actions)

    if snapshot.windows is None or snapshot.nodes is None:
        return [], None  # the CRD is not installed, or nodes may not be read: nothing to go by
    actions: list[Action] = []
    wake: float | None = None
    windows: list[Window] = []
    for wv in snapshot.windows.values():
        if wv.window is not None:
            windows.append(wv.window)
        else:
            problems = "; ".join(wv.problems)
            actions.append(Action(
                kind="window-invalid", target=wv.ref, reason="InvalidMaintenanceWindow", event_type="Warning",
                message=f"ignored: the spec is invalid (was the webhook down when it was stored?): {problems}",
                key=wv.resource_version,
            ))
    if not windows and not any(n.maintenance is not None or COUNTDOWN_LABEL in n.labels
                               for n in snapshot.nodes.values()) \
            and not any(j.next_maintenance is not None for j in snapshot.jobs.values()) \
            and not any(p.next_maintenance is not None for p in snapshot.pods.values()):
        return actions, None  # the common case: nothing to do, nothing to clean up

    pods_on: dict[str, list[PodView]] = {}
    counts: dict[str, int] = {w.name: 0 for w in windows}
    upcoming: dict[str, Window] = {}  # node -> the earliest window that has not started yet
    for node in snapshot.nodes.values():
        n = len(actions)
        try:
            covering = [w for w in windows if w.covers(node.name, node.labels)]
            for w in covering:
                counts[w.name] += 1
                if w.start > now and (node.name not in upcoming or w.start < upcoming[node.name].start):
                    upcoming[node.name] = w
            wake = _min(wake, _node(actions, snapshot, node, covering, pods_on, now, settings))
        except Exception as e:
            fail(node.ref, e, n)

    _record_on_jobs(actions, snapshot, upcoming, fail)

    for wv in snapshot.windows.values():
        if wv.window is None:
            continue
        n = len(actions)
        try:
            wake = _min(wake, _window_status(actions, wv, counts[wv.window.name], now))
        except Exception as e:
            fail(wv.ref, e, n)
    return actions, wake


def _node(actions: list[Action], snapshot: Snapshot, node: NodeView, covering: list[Window],
          pods_on: dict[str, list[PodView]], now: float, settings: Settings) -> float | None:
    """One node: its countdown, and the cordon, drain or uncordon due; when to look again."""
    wake: float | None = None
    ahead = next_window(covering, node.name, node.labels, now)
    active = [w for w in covering if w.start <= now < w.end]
    wake = _min(wake, _countdown(actions, node, ahead, now, settings))
    state = read_cordoned(node.maintenance)
    if active:
        if state is None:
            _cordon(actions, node, min(active, key=lambda w: w.start))
        else:
            if not pods_on and snapshot.pods:
                for pod in snapshot.pods.values():
                    if pod.node:
                        pods_on.setdefault(pod.node, []).append(pod)
            first = min(active, key=lambda w: w.start)
            wake = _min(wake, _drain(actions, snapshot, node, first, pods_on.get(node.name, ()), now, settings))
        wake = _min(wake, max(w.end for w in active))
    elif state is not None:
        _uncordon(actions, node, state)
    for w in covering:
        if w.start > now:
            wake = _min(wake, w.start)
    return wake


def _window_status(actions: list[Action], wv: WindowView, count: int, now: float) -> float | None:
    """A window's status (state, node count), and when it changes next."""
    assert wv.window is not None
    state_now = wv.window.state(now)
    if (wv.state, wv.node_count) != (state_now, count):
        actions.append(Action(
            kind="window-status", target=wv.ref, reason="MaintenanceWindowStatus",
            message=f"{state_now}, {count} node(s)", quiet=True,
            patch={"status": {"state": state_now, "nodeCount": count}}, subresource="status",
        ))
    if state_now == "Scheduled":
        return wv.window.start
    if state_now == "Active":
        return wv.window.end
    return None


# -- the countdown ---------------------------------------------------------------------
def _countdown(actions: list[Action], node: NodeView, ahead: Window | None, now: float,
               settings: Settings) -> float | None:
    """Keep the node's countdown label right; returns when it must be rewritten."""
    current = node.labels.get(COUNTDOWN_LABEL)
    if ahead is None:
        if current is not None:
            actions.append(Action(
                kind="countdown", target=node.ref, reason="MaintenanceCountdown", quiet=True,
                message=f"no maintenance window ahead: label {COUNTDOWN_LABEL} removed",
                patch={"metadata": {"labels": {COUNTDOWN_LABEL: None}}},
            ))
        return None
    start = ahead.start
    slack = slack_for(start, now, minimum=settings.countdown_slack)
    fresh = countdown(start, now, slack=slack)
    value = int(current) if current is not None and current.isdigit() else None
    guard = settings.countdown_guard
    keep = value is not None and (
        (value == 0 and fresh == 0)
        or (value > 0 and value * 60 <= start - now - guard and value >= countdown(start, now, slack=2 * slack))
    )
    if not keep:
        value = fresh
        first = current is None
        actions.append(Action(
            kind="countdown", target=node.ref, reason="MaintenanceScheduled", quiet=not first,
            message=(f"{ahead.describe()} covers this node: from now on, jobs whose time limit would run "
                     f"into it do not start here (label {COUNTDOWN_LABEL}={fresh}, minutes left)"),
            key=ahead.uid or ahead.name,
            patch={"metadata": {"labels": {COUNTDOWN_LABEL: str(fresh)}}},
        ))
    assert value is not None
    return start - value * 60 - guard if value > 0 else None


# -- cordon, drain, give back ----------------------------------------------------------
def _cordon(actions: list[Action], node: NodeView, window: Window) -> None:
    state = Cordoned(window=window.name, was_unschedulable=node.unschedulable)
    before = " (it was already cordoned, and stays so after the window)" if node.unschedulable else ""
    actions.append(Action(
        kind="cordon", target=node.ref, reason="MaintenanceStarted",
        message=f"{window.describe()} started: node cordoned{before}; its pods are evicted",
        key=window.uid or window.name,
        patch={"metadata": {"resourceVersion": node.resource_version,
                            "annotations": {MAINTENANCE_ANNOTATION: state.text()}},
               "spec": {"unschedulable": True}},
    ))


def _workload(snapshot: Snapshot, pod: PodView) -> Ref:
    """Where an Event about the pod goes: its Job if it is one of a Job's pods, else the pod."""
    job = job_of(snapshot, pod)
    return job.ref if job is not None else pod.ref


def _drain(actions: list[Action], snapshot: Snapshot, node: NodeView, window: Window, pods: list[PodView] | tuple[()],
           now: float, settings: Settings) -> float | None:
    deadline = window.start + settings.drain_timeout
    wake: float | None = None
    for pod in sorted(pods, key=lambda p: (p.ref.namespace, p.ref.name)):
        if pod.deleting or pod.terminal or not_drained(pod):
            continue
        what = f"pod {pod.ref.name}" if _workload(snapshot, pod) != pod.ref else "the pod"
        if now < deadline:
            actions.append(Action(
                kind="evict", target=_workload(snapshot, pod), reason="MaintenanceEviction", event_type="Warning",
                message=(f"{what} is evicted from node {node.name}: {window.describe()} has started"),
                key=pod.ref.uid, evict=pod.ref,
            ))
            wake = _min(wake, deadline)
        else:
            actions.append(Action(
                kind="force-drain", target=_workload(snapshot, pod), reason="MaintenanceDrainDeadline",
                event_type="Warning",
                message=(f"{what} still ran on node {node.name} at {format_time(deadline)}, when the drain "
                         f"deadline of {window.describe()} passed (a PodDisruptionBudget kept refusing the "
                         f"eviction): deleting it"),
                key=pod.ref.uid, deletes=(_force_drain(pod, node, window),),
            ))
    return wake


def _force_drain(pod: PodView, node: NodeView, window: Window) -> Delete:
    """The pod is deleted from outside, as the Eviction API would have: with a DisruptionTarget
    condition first (unless it has one), which a Job's podFailurePolicy can match (a gang Job's
    Ignore rule: no failure counted) and by which the reconciler tells its gang it was interrupted."""
    if pod.disrupted:
        return Delete(pod.ref)
    return Delete(pod.ref, disruption=Disruption(
        REASON_MAINTENANCE_DRAIN, f"batchgate: {window.describe()} started on node {node.name} and its drain "
                                  f"deadline passed while a PodDisruptionBudget kept refusing the eviction"))


def _uncordon(actions: list[Action], node: NodeView, state: Cordoned) -> None:
    if state.was_unschedulable:
        message = f"maintenance window {state.window} is over: the node stays cordoned, as it was before"
    else:
        message = f"maintenance window {state.window} is over: the node is schedulable again"
    actions.append(Action(
        kind="uncordon", target=node.ref, reason="MaintenanceEnded", message=message,
        key=f"{state.window}/{node.resource_version}",
        patch={"metadata": {"resourceVersion": node.resource_version, "annotations": {MAINTENANCE_ANNOTATION: None}},
               "spec": {"unschedulable": True if state.was_unschedulable else None}},
    ))


# -- the next window, on the running jobs it concerns -------------------------------------------
def _record_on_jobs(actions: list[Action], snapshot: Snapshot, upcoming: dict[str, Window],
                    fail: Callable[[Ref, Exception, int], None]) -> None:
    """Keep ``batchgate.io/next-maintenance`` on each running time-limited job (a Job, or a pod
    that is a job of its own, ``model.own_job``): the earliest window not yet started on any node
    its pods run on. The webhook refuses an extension past it from that (it has no API access of
    its own). A job whose deadline already passes the window's start (the window was declared after
    it started) is told it will be evicted then."""
    # Only the nodes some window is ahead on matter: a pass over the pods finds, per Job (by uid; only
    # its own pods, ``job_of``: a pod naming another namespace's Job uid must not tie that Job to a
    # window on its node) and per bare pod, the earliest of them; the annotation text is made once
    # per (window, node).
    of_job: dict[str, tuple[Window, str]] = {}
    of_pod: dict[str, tuple[Window, str]] = {}
    if upcoming:
        up_get = upcoming.get
        for pod in snapshot.pods.values():
            node = pod.node
            if not node or pod.deleting:
                continue
            w = up_get(node)
            if w is None or pod.phase in ("Succeeded", "Failed"):
                continue
            if (job := job_of(snapshot, pod)) is not None:
                have = of_job.get(job.ref.uid)
                if have is None or w.start < have[0].start:
                    of_job[job.ref.uid] = (w, node)
            elif own_job(snapshot, pod):  # no controller, or admitted and no Job confirms it, as planned
                of_pod[pod.ref.uid] = (w, node)
    texts: dict[tuple[str, str], str] = {}
    workloads: list[tuple[JobView | PodView, dict[str, tuple[Window, str]]]] = [
        (j, of_job) for j in snapshot.jobs.values() if not j.deleting and not j.finished]
    workloads += [(p, of_pod) for p in snapshot.pods.values()
                  if not p.deleting and not p.terminal and own_job(snapshot, p)]
    for obj, best_of in workloads:
        if obj.time_limit is None and obj.next_maintenance is None:
            continue
        n = len(actions)
        try:
            _record_on_job(actions, obj, best_of.get(obj.ref.uid), texts)
        except Exception as e:
            fail(obj.ref, e, n)


def _record_on_job(actions: list[Action], obj: JobView | PodView, best: tuple[Window, str] | None,
                   texts: dict[tuple[str, str], str]) -> None:
    want = None
    if best is not None and obj.time_limit is not None:
        tkey = (best[0].name, best[1])
        want = texts.get(tkey)
        if want is None:
            want = texts[tkey] = next_maintenance_text(*best)
    if want == obj.next_maintenance:
        return
    if best is None:
        actions.append(Action(
            kind="record-maintenance", target=obj.ref, reason="MaintenanceAhead", quiet=True,
            message="no maintenance window ahead on its nodes any more", key="none",
            annotations={NEXT_MAINTENANCE_ANNOTATION: None}, resource_version=obj.resource_version,
        ))
        return
    w, node = best
    late = obj.deadline_t is not None and obj.deadline_t > w.start
    what = "Job" if isinstance(obj, JobView) else "Pod"
    message = (f"{w.describe()} covers node {node}, where this {what} runs"
               + (f": its deadline {obj.deadline} is later, so it will be evicted when the window starts"
                  if late else f"; time limit extensions that would run past {format_time(w.start)} are refused"))
    actions.append(Action(
        kind="record-maintenance", target=obj.ref, reason="MaintenanceAhead",
        event_type="Warning" if late else "Normal", quiet=not late, message=message,
        key=w.uid or w.name, annotations={NEXT_MAINTENANCE_ANNOTATION: want}, resource_version=obj.resource_version,
    ))
