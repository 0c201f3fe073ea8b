"""``batchgate queue`` and ``batchgate maintenance``: what runs, what waits, and until when.

Pure functions of a snapshot and ``now`` (the CLI lists the cluster, like
``batchgate reconcile --once``, and prints these), so what the command says is
what the reconciler's shadow schedule (shadow.py) computes, not a second guess.

``queue`` is Slurm's ``squeue --start``: running workloads with their start and
deadline, pending ones in the order they start (kube-scheduler's, and batchgate's
queue for the work it holds: queue.py) with their position, expected start and
the reason they wait. ``maintenance`` is ``scontrol show reservation`` plus what
each window will do: the running jobs it will stop (their deadline is after its
start) and the pending ones it holds back (they would start sooner without it).
``share`` is Slurm's ``sshare`` and ``usage`` a short ``sreport``, from the usage
the reconciler stores (usage.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..units import format_time, parse_time
from ..windows import Window
from . import queue
from .forecast import forecast
from .model import JobView, PodView, Snapshot, job_of, own_job
from .planner import effective_limit, may_fit_now
from .runtimes import Predictor, finished_runs, remember
from .settings import QueuePolicy, Settings
from .shadow import Estimate, Queued, shadow_schedule
from .usage import Usage, factors


def _windows(snapshot: Snapshot) -> list[Window]:
    return [w.window for w in (snapshot.windows or {}).values() if w.window is not None]


def _predictor(snapshot: Snapshot) -> Predictor:
    """Runtime predictions from the runs the cluster still shows (what the reconciler starts from)."""
    return Predictor.of(remember({}, finished_runs(snapshot)))


def _estimates(snapshot: Snapshot, now: float, windows: list[Window], predictor: Predictor,
               queues: QueuePolicy, usage: Mapping[str, float] | None = None) -> list[Estimate]:
    """The shadow schedule with the limits the reconciler enforces (the admission record, the queue's
    maximum), and the batch queue's waiting work in its order (fair share from ``usage``), as the
    planner places it."""
    settings = Settings(queues=queues)

    def limit_of(o: JobView | PodView) -> int | None:
        return effective_limit(o, settings)

    waiting = queue.waiting(snapshot, now, queues, usage or {}, limit_of)
    extra: dict[str, Any] = {"kube_schedulers": queues.kube_schedulers}
    if waiting or queues.gated:
        extra |= {"queued": [], "preempts_below": queue.preempts_below(queues),
                  "class_values": queues.class_values, "released": queue.released(queues)}
    if waiting:
        def to_limits(queued: list[Queued]) -> list[Estimate]:  # the order the planner places in
            return shadow_schedule(snapshot, now, windows, limit_of=limit_of, easy=queues.easy,
                                   **{**extra, "queued": queued})
        waiting, extra["queued"], _ = queue.placed(waiting, to_limits, queues, now,
                                                   may_fit_now(snapshot, extra["preempts_below"], queues))
    estimates = shadow_schedule(snapshot, now, windows, runtimes=predictor, limit_of=limit_of, **extra)
    # each wait stretched for the arrivals that rank ahead, as the planner does (forecast.py)
    return forecast(estimates, snapshot, now=now, policy=queues, usage=usage or {}, predictor=predictor,
                    limit_of=limit_of, scores={w.ref.uid: (w.account, w.score) for w in waiting})


def _by(start: float, obj: JobView | PodView | None) -> float:
    """An expected start never after the workload's start-by, as the planner writes it."""
    promise = parse_time(obj.start_by) if obj is not None and obj.start_by else None
    return min(start, promise) if promise is not None else start


def _t(t: float | None) -> str:
    return format_time(t) if t is not None else "-"


def queue_rows(snapshot: Snapshot, now: float, *, namespace: str | None = None,
               queues: QueuePolicy | None = None, usage: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """One row per workload (a Job, a Pod without a controller, a service's Pod the queue holds):
    pending first, in order. Work batchgate's queue holds is ``Gated`` (the queue's state beside
    it); a bare pod of a gated queue that carries no gate (admitted while the webhook was down)
    says so."""
    qp = queues or QueuePolicy()
    rows: list[dict[str, Any]] = []
    estimates = _estimates(snapshot, now, _windows(snapshot), _predictor(snapshot), qp, usage)
    objects: dict[str, JobView | PodView] = {j.ref.uid: j for j in snapshot.jobs.values()}
    for p in snapshot.pods.values():
        # as the planner times it: an admitted pod no Job confirms too; and a service's pod that waits in
        # the queue (one pod a workload, rules.queue_gate)
        if own_job(snapshot, p) or p.gated:
            objects[p.ref.uid] = p
    pending_uids = set()
    for e in estimates:
        pending_uids.add(e.workload.uid)
        obj = objects.get(e.workload.uid)
        if namespace and e.workload.namespace != namespace:
            continue
        name = queue.queue_of(obj, qp) if obj else qp.queue_for(e.workload.namespace, None)
        ungated = (not e.queued and isinstance(obj, PodView) and obj.owner is None and name in qp.gated
                   and not qp.excluded(obj.ref.namespace))
        rows.append({
            "namespace": e.workload.namespace, "name": e.workload.name, "kind": e.workload.kind,
            "queue": name, "queueState": qp.states.get(name, "open"),
            "priority": e.priority, "position": e.position, "state": "Gated" if e.queued else "Pending",
            "pods": e.pods, "start": _t(_by(e.start, obj)) if e.start is not None else "unknown",
            "startBy": (obj.start_by if obj is not None and obj.start_by else "-"), "deadline": "-",
            "reason": ("never fits: " if e.never else "")
            + ("not gated (admitted while batchgate's webhook was down), kube-scheduler's to start: " if ungated else "")
            + e.reason,
            "gated": e.queued, "ungated": ungated,
        })
    pods_of: dict[str, list[PodView]] = {}
    for p in snapshot.pods.values():
        if (job := job_of(snapshot, p)) is not None:
            pods_of.setdefault(job.ref.uid, []).append(p)
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
            "queue": queue.queue_of(obj, qp), "queueState": qp.states.get(queue.queue_of(obj, qp), "open"),
            "priority": sched.priority if sched else 0,
            "position": None, "state": "Running", "pods": len(live), "start": _t(started), "startBy": "-",
            "deadline": obj.deadline or "-", "reason": "on " + ",".join(sorted({p.node for p in live})),
            "gated": False, "ungated": False,
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
                job = job_of(snapshot, p)
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


def share_rows(stored: Usage, now: float, queues: QueuePolicy,
               waiting: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """``sshare``: per account, its shares and their part of all (``normShares``), its decayed usage
    now (``rawUsage``, weighted resource-seconds) and its part of all (``effectiveUsage``), and the
    fair-share factor ``2^(-effectiveUsage/normShares)``, computed as the reconciler does: among the
    accounts with usage or ``waiting`` work (accounts -> workloads waiting; None: not known, then
    among those with usage). The bundle's accounts without either are listed with factor 1 and no
    part (``normShares`` None)."""
    fair = queues.fair_share
    billing = stored.at(now, fair.half_life)
    competing = {a for a, v in billing.items() if v > 0} | {a for a, n in (waiting or {}).items() if n > 0}
    f = factors(billing, competing, fair)
    total_shares = sum(fair.shares_of(a) for a in competing) or 1.0
    total_use = sum(billing.get(a, 0.0) for a in competing)
    configured = {a.name: a for a in fair.accounts}
    rows = []
    for a in sorted(competing | set(configured)):
        inside = a in competing
        rows.append({
            "account": a, "namespaces": list(configured[a].namespaces) if a in configured else [a],
            "shares": fair.shares_of(a),
            "normShares": round(fair.shares_of(a) / total_shares, 6) if inside else None,
            "rawUsage": round(billing.get(a, 0.0)),
            "effectiveUsage": (round(billing.get(a, 0.0) / total_use, 6) if total_use > 0 else 0.0) if inside else None,
            "fairShare": round(f.get(a, 1.0), 6),
            "waiting": (waiting or {}).get(a, 0) if waiting is not None else None,
        })
    return rows


def usage_rows(stored: Usage, now: float, since: float) -> list[dict[str, Any]]:
    """``sreport``: core-hours and GPU-hours per account and queue over the (UTC) days from
    ``now - since`` on, undecayed, the most first."""
    first = format_time(now - since)[:10]
    sums: dict[tuple[str, str], list[float]] = {}
    for day, cells in stored.days.items():
        if day < first:
            continue
        for key, (cores, gpus) in cells.items():
            account, _, queue_name = key.partition("/")
            cell = sums.setdefault((account, queue_name), [0.0, 0.0])
            cell[0] += cores
            cell[1] += gpus
    rows = [{"account": a, "queue": q, "coreHours": round(c / 3600, 2), "gpuHours": round(g / 3600, 2)}
            for (a, q), (c, g) in sums.items()]
    return sorted(rows, key=lambda r: (-r["coreHours"], -r["gpuHours"], r["account"], r["queue"]))


def with_total(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Usage rows for the table, with a TOTAL row."""
    total = {"account": "TOTAL", "queue": "", "coreHours": round(sum(r["coreHours"] for r in rows), 2),
             "gpuHours": round(sum(r["gpuHours"] for r in rows), 2)}
    return [*rows, total]


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
                 ("position", "POS"), ("state", "STATE"), ("queueState", "QSTATE"), ("start", "START"),
                 ("startBy", "START-BY"), ("deadline", "DEADLINE"), ("reason", "REASON")]
QUEUE_WIDE = [*QUEUE_COLUMNS[:2], ("kind", "KIND"), ("pods", "PODS"), *QUEUE_COLUMNS[2:]]
SHARE_COLUMNS = [("account", "ACCOUNT"), ("shares", "SHARES"), ("normShares", "NORM SHARES"),
                 ("rawUsage", "RAW USAGE"), ("effectiveUsage", "EFFECTV USAGE"), ("fairShare", "FAIRSHARE"),
                 ("waiting", "WAITING")]
SHARE_WIDE = [*SHARE_COLUMNS, ("namespaces", "NAMESPACES")]
USAGE_COLUMNS = [("account", "ACCOUNT"), ("queue", "QUEUE"), ("coreHours", "CORE-HOURS"), ("gpuHours", "GPU-HOURS")]
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

