"""Benchmark: maintenance windows and expected start times.

    python bench/bench_shadow.py [--passes 20] [--seed 1]

Two figures:

1. **Planning pass** with 10,000 pods and 20 maintenance windows: 250 nodes (64 CPU,
   256 GiB) in 25 racks, a window per rack for 20 of them (1 h to 40 h ahead, 4 h long),
   9,000 running pods with time limits and recorded deadlines spread over the next day,
   1,000 pending pods (priorities 0 / 1000 / 10000; a quarter of them in 4-pod gang
   Jobs). CPU time of ``plan()`` (deadlines, gangs, countdowns, drains, the shadow
   schedule and the estimates), best / median / p90, and of the shadow schedule alone.

2. **Accuracy of the estimates**: a generated day of arrivals (Poisson, 0.6 a minute,
   sizes 1-32 CPU, time limits 30 m to 8 h, each job really running 50-100 % of its
   limit, a third of jobs high priority) replayed on 20 nodes of 64 CPU with one 2-hour
   maintenance window on 4 of them. A greedy list scheduler, like kube-scheduler (at each
   arrival or completion, the pending jobs in priority-then-age order, each placed now if
   it fits, keeping long jobs off nodes whose window they would run into), gives the
   true start times; at each arrival the shadow schedule is asked for that job's
   estimate, from the state at that moment (running work frees its node at its
   deadline, not at its unknown real end). The error of a job that waited is
   |estimate - true start| / true wait; median and p90 over those jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook.reconciler.model import (
    NodeView,
    Snapshot,
    format_time,
    job_view,
    node_view,
    pod_view,
    window_view,
)
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings
from webhook.reconciler.shadow import shadow_schedule

NOW = 1_764_000_000.0
HOUR = 3600.0


def node(name: str, cpu: int, rack: str) -> NodeView:
    return node_view({"metadata": {"name": name, "uid": f"uid-{name}", "labels": {"rack": rack}},
                      "status": {"allocatable": {"cpu": str(cpu), "memory": "256Gi"},
                                 "conditions": [{"type": "Ready", "status": "True"}]}})


def pod(name: str, *, cpu: int, limit: float, node_name: str = "", started: float | None = None,
        priority: int = 0, created: float = NOW, owner: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    ann = {"batchgate.io/time-limit": f"{int(limit // 60)}m"}
    if started is not None and owner is None:
        ann["batchgate.io/started-at"] = format_time(started)
        ann["batchgate.io/deadline"] = format_time(started + limit // 60 * 60)
    md: dict[str, Any] = {"name": name, "namespace": "bench", "uid": f"uid-{name}", "resourceVersion": "1",
                          "creationTimestamp": format_time(created), "annotations": ann, "labels": labels or {}}
    if owner is not None:
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                                  "uid": owner["metadata"]["uid"], "controller": True}]
    status: dict[str, Any] = {"phase": "Pending"}
    if started is not None:
        status = {"phase": "Running", "startTime": format_time(started),
                  "containerStatuses": [{"name": "m", "state": {"running": {"startedAt": format_time(started)}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"nodeName": node_name, "priority": priority,
                     "containers": [{"name": "m", "resources": {"requests": {"cpu": str(cpu), "memory": "1Gi"}}}]},
            "status": status}


def window(name: str, start: float, end: float, rack: str | None = None, nodes: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"start": format_time(start), "end": format_time(end)}
    if rack:
        spec["nodeSelector"] = {"matchLabels": {"rack": rack}}
    if nodes:
        spec["nodes"] = nodes
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
            "metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


# -- 1. the planning pass ------------------------------------------------------------------
def big_cluster(rng: random.Random) -> Snapshot:
    nodes = [node(f"n{i}", 64, f"r{i % 25}") for i in range(250)]
    pods: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for i in range(9000):
        limit = rng.choice((2, 4, 8, 24)) * HOUR
        pods.append(pod(f"run-{i}", cpu=1, limit=limit, node_name=f"n{i % 250}",
                        started=NOW - rng.uniform(0, limit * 0.9)))
    i = 0
    while i < 1000:
        prio = rng.choice((0, 1000, 1000, 10000))
        created = NOW - rng.uniform(0, 6 * HOUR)
        if i % 4 == 0 and i + 4 <= 1000 and rng.random() < 0.25:
            j = {"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": f"gang-{i}", "namespace": "bench", "uid": f"uid-gang-{i}", "resourceVersion": "1",
                              "annotations": {"batchgate.io/time-limit": "4h"}}}
            jobs.append(j)
            for k in range(4):
                pods.append(pod(f"gang-{i}-{k}", cpu=16, limit=4 * HOUR, priority=prio, created=created, owner=j,
                                labels={"batchgate.io/pod-group": f"gang-{i}", "batchgate.io/pod-group-size": "4"}))
            i += 4
            continue
        pods.append(pod(f"wait-{i}", cpu=rng.choice((2, 4, 8, 16)), limit=rng.choice((1, 2, 4, 8)) * HOUR,
                        priority=prio, created=created))
        i += 1
    windows = [window(f"w{r}", NOW + (1 + 2 * r) * HOUR, NOW + (5 + 2 * r) * HOUR, rack=f"r{r}") for r in range(20)]
    return Snapshot.of(pods=[pod_view(p) for p in pods], jobs=[job_view(j) for j in jobs], nodes=nodes,
                       windows=[window_view(w) for w in windows])


def settle(snap: Snapshot, actions: list[Any]) -> Snapshot:
    """The snapshot once a pass's labels and annotations are written (the steady state)."""
    pods, jobs, nodes = dict(snap.pods), dict(snap.jobs), dict(snap.nodes or {})
    fields = {"batchgate.io/next-maintenance": "next_maintenance", "batchgate.io/expected-start": "expected_start"}
    for a in actions:
        t = a.target
        if t.kind == "Node" and a.patch and "labels" in a.patch.get("metadata", {}):
            n = nodes[t.name]
            nodes[t.name] = dataclasses.replace(n, labels={**n.labels, **a.patch["metadata"]["labels"]})
        for key, value in (a.annotations or {}).items():
            if key in fields:
                store = pods if t.kind == "Pod" else jobs
                obj = store[(t.namespace, t.name)]
                store[(t.namespace, t.name)] = dataclasses.replace(obj, **{fields[key]: value})  # type: ignore[type-var]
    return dataclasses.replace(snap, pods=pods, jobs=jobs, nodes=nodes)


def cpu_ms(fn: Any, passes: int) -> tuple[float, float, float]:
    times = []
    for _ in range(passes):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1000)
    times.sort()
    return times[0], statistics.median(times), times[max(int(len(times) * 0.9) - 1, 0)]


# -- 2. the replay ---------------------------------------------------------------------------
def replay(rng: random.Random, *, hours: float = 24, rate_per_min: float = 0.6, n_nodes: int = 20,
           node_cpu: int = 64, margin: float = 300.0) -> list[float]:
    nodes = [node(f"n{i}", node_cpu, "a" if i < 4 else "b") for i in range(n_nodes)]
    mw = window("mw", NOW + 10 * HOUR, NOW + 12 * HOUR, rack="a")
    mw_view = window_view(mw)
    assert mw_view.window is not None
    win = mw_view.window
    jobs: list[dict[str, Any]] = []
    t = NOW
    while t < NOW + hours * HOUR:
        t += rng.expovariate(rate_per_min / 60)
        limit = rng.choice((30, 60, 120, 240, 480)) * 60.0
        jobs.append({"id": len(jobs), "arrive": t, "cpu": rng.choice((1, 2, 4, 8, 16, 32)), "limit": limit,
                     "runtime": limit * rng.uniform(0.5, 1.0), "prio": 1000 if rng.random() < 1 / 3 else 0,
                     "start": None, "node": None, "estimate": None})
    free = {n.name: node_cpu for n in nodes}
    running: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    events = sorted((j["arrive"], 0, j["id"]) for j in jobs)
    import heapq

    heapq.heapify(events)

    def fits_window(n: str, at: float, limit: float) -> bool:
        return not (win.covers(n, {"rack": "a" if int(n[1:]) < 4 else "b"}) and win.start < at + limit + margin
                    and at < win.end)

    def schedule(at: float) -> None:
        pending.sort(key=lambda j: (-j["prio"], j["arrive"]))
        for j in list(pending):
            for n in sorted(free, key=lambda x: -free[x]):
                if free[n] >= j["cpu"] and fits_window(n, at, j["limit"]):
                    free[n] -= j["cpu"]
                    j["start"], j["node"] = at, n
                    running.append(j)
                    pending.remove(j)
                    heapq.heappush(events, (at + j["runtime"], 1, j["id"]))
                    break

    def snapshot(at: float) -> Snapshot:
        pods = [pod(f"j{j['id']}", cpu=j["cpu"], limit=j["limit"], node_name=j["node"], started=j["start"])
                for j in running]
        pods += [pod(f"j{j['id']}", cpu=j["cpu"], limit=j["limit"], priority=j["prio"], created=j["arrive"])
                 for j in pending]
        return Snapshot.of(pods=[pod_view(p) for p in pods], nodes=nodes, windows=[mw_view])

    while events:
        at, kind, jid = heapq.heappop(events)
        j = jobs[jid]
        if kind == 1:
            running.remove(j)
            free[j["node"]] += j["cpu"]
            schedule(at)
            continue
        pending.append(j)
        schedule(at)
        if j in pending:  # it waits: what does the shadow schedule say?
            est = {e.workload.name: e.start for e in shadow_schedule(snapshot(at), at, [win], margin=margin)}
            j["estimate"] = est.get(f"j{jid}")
    errors = []
    for j in jobs:
        if j["estimate"] is not None and j["start"] is not None and j["start"] > j["arrive"]:
            errors.append(abs(j["estimate"] - j["start"]) / (j["start"] - j["arrive"]))
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip-replay", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    snap = big_cluster(rng)
    settings = Settings()
    windows = [w.window for w in (snap.windows or {}).values() if w.window is not None]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
    snap = settle(snap, plan(snap, NOW, settings).actions)  # what a first pass records, recorded
    whole = cpu_ms(lambda: plan(snap, NOW, settings), args.passes)
    shadow = cpu_ms(lambda: shadow_schedule(snap, NOW, windows), args.passes)
    without = cpu_ms(lambda: plan(snap, NOW, Settings(expected_start=False)), args.passes)
    n_est = len(shadow_schedule(snap, NOW, windows))
    print("10,000 pods (9,000 running, 1,000 pending), 250 nodes, 20 windows, steady (recorded); "
          "ms of CPU: best / median / p90")
    print(f"  plan(), with the shadow schedule:    {whole[0]:7.1f} / {whole[1]:7.1f} / {whole[2]:7.1f}")
    print(f"  plan(), without (estimates off):     {without[0]:7.1f} / {without[1]:7.1f} / {without[2]:7.1f}")
    print(f"  shadow schedule alone ({n_est} workloads): {shadow[0]:7.1f} / {shadow[1]:7.1f} / {shadow[2]:7.1f}")
    if not args.skip_replay:
        errors = replay(random.Random(args.seed))
        errors.sort()
        med = statistics.median(errors)
        p90 = errors[int(len(errors) * 0.9) - 1]
        print(f"replay of a day ({len(errors)} jobs that waited): error of the estimate made on arrival, as a share "
              f"of the real wait: median {med:.0%}, p90 {p90:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
