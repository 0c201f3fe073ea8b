"""``batchgate queue`` and ``batchgate maintenance``: what runs, what waits, and until when.

Pure functions of a snapshot and ``now`` (the CLI lists the cluster, like
``batchgate reconcile --once``, and prints these), so what the command says is
what the reconciler's shadow schedule (shadow.py) computes, not a second guess.

``queue`` is Slurm's ``squeue --start``: running workloads with their start and
deadline, pending ones in the order kube-scheduler serves them with their
position, expected start and the reason they wait. ``maintenance`` is
``scontrol show reservation`` plus what each window will do: the running jobs
it will stop (their deadline is after its start) and the pending ones it holds
back (they would start sooner without it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..units import format_time
from ..windows import Window
from .model import JobView, PodView, Snapshot
from .planner import effective_limit
from .queue import queue_of
from .runtimes import Predictor, finished_runs, remember
from .settings import QueuePolicy, Settings
from .shadow import Estimate, shadow_schedule


def _windows(snapshot: Snapshot) -> list[Window]:
    return [w.window for w in (snapshot.windows or {}).values() if w.window is not None]


def _predictor(snapshot: Snapshot) -> Predictor:
    """Runtime predictions from the runs the cluster still shows (what the reconciler starts from)."""
    return Predictor.of(remember({}, finished_runs(snapshot)))


def _estimates(snapshot: Snapshot, now: float, windows: list[Window], predictor: Predictor,
               queues: QueuePolicy) -> list[Estimate]:
    """The shadow schedule with the limits the reconciler enforces (the admission record, the queue's maximum)."""
    settings = Settings(queues=queues)
    return shadow_schedule(snapshot, now, windows, runtimes=predictor,
                           limit_of=lambda o: effective_limit(o, settings))


def _t(t: float | None) -> str:
    return format_time(t) if t is not None else "-"


def queue_rows(snapshot: Snapshot, now: float, *, namespace: str | None = None,
               queues: QueuePolicy | None = None) -> list[dict[str, Any]]:
    """One row per workload (a Job, or a Pod without a controller): pending first, in order."""
    qp = queues or QueuePolicy()
    rows: list[dict[str, Any]] = []
    estimates = _estimates(snapshot, now, _windows(snapshot), _predictor(snapshot), qp)
    objects: dict[str, JobView | PodView] = {j.ref.uid: j for j in snapshot.jobs.values()}
    for p in snapshot.pods.values():
        if p.owner is None:
            objects[p.ref.uid] = p
    pending_uids = set()
    for e in estimates:
        pending_uids.add(e.workload.uid)
        obj = objects.get(e.workload.uid)
        if namespace and e.workload.namespace != namespace:
            continue
        rows.append({
            "namespace": e.workload.namespace, "name": e.workload.name, "kind": e.workload.kind,
            "queue": queue_of(obj, qp) if obj else qp.queue_for(e.workload.namespace, None),
            "priority": e.priority, "position": e.position, "state": "Pending", "pods": e.pods,
            "start": _t(e.start) if e.start is not None else "unknown", "deadline": "-",
            "reason": ("never fits: " if e.never else "") + e.reason,
        })
    pods_of: dict[str, list[PodView]] = {}
    for p in snapshot.pods.values():
        if p.owner is not None and p.owner.kind == "Job":
            pods_of.setdefault(p.owner.uid, []).append(p)
    running: list[dict[str, Any]] = []
    for uid, obj in objects.items():
        if uid in pending_uids or (namespace and obj.ref.namespace != namespace):
            continue
        pods = pods_of.get(uid, []) if isinstance(obj, JobView) else [obj]
        live = [p for p in pods if p.node and not p.terminal]
        if not live:
            continue
        started = obj.started_at_t if obj.started_at_t is not None else min(
            (p.started for p in live if p.started is not None), default=None)
        sched = next((p.sched for p in live if p.sched is not None), None)
        running.append({
            "namespace": obj.ref.namespace, "name": obj.ref.name, "kind": obj.ref.kind,
            "queue": queue_of(obj, qp), "priority": sched.priority if sched else 0,
            "position": None, "state": "Running", "pods": len(live), "start": _t(started),
            "deadline": obj.deadline or "-", "reason": "on " + ",".join(sorted({p.node for p in live})),
        })
    running.sort(key=lambda r: (r["deadline"] == "-", r["deadline"], r["namespace"], r["name"]))
    return rows + running


def maintenance_rows(snapshot: Snapshot, now: float, *, queues: QueuePolicy | None = None) -> list[dict[str, Any]]:
    """One row per window, with the jobs it will stop and those it holds back."""
    qp = queues or QueuePolicy()
    windows = _windows(snapshot)
    nodes = snapshot.nodes or {}
    predictor = _predictor(snapshot)
    with_all = {e.workload.uid: e for e in _estimates(snapshot, now, windows, predictor, qp)}
    out: list[dict[str, Any]] = []
    jobs_by_uid = {j.ref.uid: j for j in snapshot.jobs.values()}
    for wv in sorted((snapshot.windows or {}).values(), key=lambda v: (v.window.start if v.window else 0, v.ref.name)):
        w = wv.window
        if w is None:
            out.append({"name": wv.ref.name, "state": "Invalid", "start": "-", "end": "-", "nodes": [],
                        "reason": "; ".join(wv.problems), "stops": [], "holds": []})
            continue
        covered = sorted(n.name for n in nodes.values() if w.covers(n.name, n.labels))
        stops: set[str] = set()
        if w.end > now:
            for p in snapshot.pods.values():
                if not p.node or p.node not in covered or p.terminal or p.deleting:
                    continue
                job = jobs_by_uid.get(p.owner.uid) if p.owner is not None and p.owner.kind == "Job" else None
                obj: JobView | PodView = job if job is not None else p
                if obj.deadline_t is None or obj.deadline_t > w.start:
                    stops.add(f"{obj.ref.kind} {obj.ref.namespace}/{obj.ref.name}")
        without = {e.workload.uid: e for e in _estimates(snapshot, now, [x for x in windows if x is not w],
                                                         predictor, qp)}
        holds = sorted(
            f"{e.workload.kind} {e.workload.namespace}/{e.workload.name}"
            for uid, e in with_all.items()
            if (o := without.get(uid)) is not None and o.start is not None and (e.start is None or e.start > o.start + 60)
        )
        out.append({"name": w.name, "state": w.state(now), "start": w.start_text, "end": w.end_text,
                    "nodes": covered, "reason": w.reason, "stops": sorted(stops), "holds": holds})
    return out


# -- printing ---------------------------------------------------------------------------
def table(rows: Iterable[Mapping[str, Any]], columns: list[tuple[str, str]]) -> str:
    """kubectl-style: upper-case headers, columns padded to their widest cell."""
    cells = [[h for _, h in columns]] + [[_cell(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    return "\n".join("   ".join(c[i].ljust(widths[i]) for i in range(len(columns))).rstrip() for c in cells) + "\n"


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return ",".join(map(str, v)) or "-"
    return str(v)


QUEUE_COLUMNS = [("namespace", "NAMESPACE"), ("name", "NAME"), ("queue", "QUEUE"), ("priority", "PRIORITY"),
                 ("position", "POS"), ("state", "STATE"), ("start", "START"), ("deadline", "DEADLINE"),
                 ("reason", "REASON")]
QUEUE_WIDE = [*QUEUE_COLUMNS[:2], ("kind", "KIND"), ("pods", "PODS"), *QUEUE_COLUMNS[2:]]
MAINTENANCE_COLUMNS = [("name", "NAME"), ("start", "START"), ("end", "END"), ("state", "STATE"), ("nodes", "NODES"),
                       ("stops", "STOPS"), ("holds", "HOLDS BACK"), ("reason", "REASON")]


def render(rows: list[dict[str, Any]], output: str, columns: list[tuple[str, str]],
           wide: list[tuple[str, str]] | None = None) -> str:
    if output == "json":
        return json.dumps(rows, indent=2) + "\n"
    return table(rows, wide if output == "wide" and wide else columns)


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Maintenance rows for the table: counts instead of long lists."""
    out = []
    for r in rows:
        r = dict(r)
        r["nodes"] = len(r["nodes"])
        r["stops"], r["holds"] = len(r["stops"]), len(r["holds"])
        out.append(r)
    return out

