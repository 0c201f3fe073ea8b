"""Benchmark: one planning pass over a cluster of 10,000 pods, and the snapshot's memory.

    python bench/bench_planner.py [--pods 10000] [--passes 50]

The cluster: 60 % of the pods belong to 4-pod gang Jobs (each with a recorded
deadline and a PodGroup), 40 % are bare pods with time limits; all running,
nothing due. Three figures per pass:

- steady: everything already recorded, the plan must be empty (and is checked);
- cold: nothing recorded yet (a first start), so every job needs an action; at most
  ``max_bookkeeping_per_pass`` (500) are planned per pass, the rest in the passes that
  follow; ``--unbounded`` plans all 5,500 in one pass;
- ingest: turning the raw API objects into the views the cache keeps (once per
  object change, not per pass).

Memory is measured with tracemalloc: the views the cache keeps for the whole
cluster (the raw JSON is dropped after conversion), and the raw dicts for
comparison.

``--live`` measures the real thing instead: a throw-away control plane
(tests/e2e/cluster.py; needs the e2e binaries), ``--pods`` running bare pods with
recorded deadlines in one namespace, and ``batchgate reconcile`` on it: the
resident memory of the process (against one watching an empty namespace), and
the API writes over several resyncs, which must be zero.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from webhook.contract import (
    COSCHEDULING_LABEL,
    DEADLINE_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_LABEL,
    STARTED_AT_ANNOTATION,
    TIME_LIMIT_ANNOTATION,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook.reconciler.model import (
    NodeView,
    Snapshot,
    job_view,
    pod_group_view,
    pod_view,
)
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.units import format_time

NOW = 1_714_600_000.0
GANG = 4


def _pod(i: int, ns: str, *, owner: dict[str, Any] | None, ann: dict[str, str], labels: dict[str, str],
         started: float) -> dict[str, Any]:
    name = f"pod-{i}"
    md: dict[str, Any] = {
        "name": name, "namespace": ns, "uid": f"0000-pod-{i:08d}", "resourceVersion": str(100000 + i),
        "creationTimestamp": format_time(started - 30), "labels": {"batchgate.io/queue": "batch", **labels},
        "annotations": ann,
    }
    if owner:
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                                  "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": md,
        "spec": {"nodeName": f"node-{i % 200}", "priorityClassName": "batchgate-batch", "priority": 1000,
                 "containers": [{"name": "main", "image": "registry.example/hpc/app:1.2",
                                 "resources": {"requests": {"cpu": "4", "memory": "8Gi"},
                                               "limits": {"cpu": "4", "memory": "8Gi"}}}]},
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": f"10.1.{i // 250}.{i % 250}",
            "startTime": format_time(started - 5), "qosClass": "Guaranteed",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": format_time(started)}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "app:1.2",
                                   "imageID": "sha256:abc", "containerID": f"containerd://{i:064d}",
                                   "state": {"running": {"startedAt": format_time(started)}}}],
        },
    }


def cluster(n_pods: int, *, recorded: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Raw pods, jobs and PodGroups; ``recorded``: the reconciler's annotations are already there."""
    pods: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    n_gang_pods = (n_pods * 6 // 10) // GANG * GANG
    limit, started = "24h", NOW - 3600
    state = {STARTED_AT_ANNOTATION: format_time(started), DEADLINE_ANNOTATION: format_time(started + 86400)} if recorded else {}
    for j in range(n_gang_pods // GANG):
        ns = f"team-{j % 40}"
        name = f"job-{j}"
        labels = {POD_GROUP_LABEL: name, POD_GROUP_SIZE_LABEL: str(GANG), COSCHEDULING_LABEL: name}
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "namespace": ns, "uid": f"0000-job-{j:08d}", "resourceVersion": str(j),
                            "annotations": {TIME_LIMIT_ANNOTATION: limit, **state}},
               "spec": {"parallelism": GANG, "template": {"metadata": {"labels": labels,
                                                                        "annotations": {TIME_LIMIT_ANNOTATION: limit}}}},
               "status": {"active": GANG}}
        jobs.append(job)
        groups.append({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                       "metadata": {"name": name, "namespace": ns, "uid": f"0000-pg-{j:08d}", "resourceVersion": "1",
                                    "labels": {MANAGED_BY_LABEL: MANAGED_BY, POD_GROUP_LABEL: name},
                                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                                         "uid": f"0000-job-{j:08d}"}]},
                       "spec": {"minMember": GANG}})
        for k in range(GANG):
            pods.append(_pod(len(pods), ns, owner=job, ann={TIME_LIMIT_ANNOTATION: limit}, labels=labels, started=started + k))
    while len(pods) < n_pods:
        ns = f"team-{len(pods) % 40}"
        pods.append(_pod(len(pods), ns, owner=None, ann={TIME_LIMIT_ANNOTATION: limit, **state}, labels={}, started=started))
    return pods, jobs, groups


def views(pods: list[dict[str, Any]], jobs: list[dict[str, Any]], groups: list[dict[str, Any]]) -> Snapshot:
    return Snapshot.of(
        pods=[pod_view(p) for p in pods], jobs=[job_view(j) for j in jobs],
        nodes=[NodeView(f"node-{i}", "True") for i in range(200)], pod_groups=[pod_group_view(g) for g in groups],
    )


def timed(fn: Any, passes: int) -> tuple[tuple[float, float, float], Any]:
    """((best, median, 90th percentile) ms, last result) over ``passes`` runs, in CPU time of
    this process (``time.process_time``): wall time on a shared machine measures the neighbours,
    and the best run is the closest to what an idle core does."""
    times = []
    result = None
    for _ in range(passes):
        t = time.process_time()
        result = fn()
        times.append((time.process_time() - t) * 1000)
    times.sort()
    p90 = times[max(int(len(times) * 0.9) - 1, 0)]
    return (times[0], statistics.median(times), p90), result


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _metric(port: int, name: str) -> float:
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return -1.0  # not serving yet
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name))


def live(n_pods: int) -> int:
    """The reconciler process against a real API server holding ``n_pods`` steady pods."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
    import cluster as kc  # the e2e harness

    t_start = time.time() - 3600
    s_start, s_deadline = format_time(t_start), format_time(t_start + 86400)
    with kc.LocalCluster() as kube:
        ns = kube.create_namespace(prefix="bench", edit_users=())
        empty = kube.create_namespace(prefix="bench-empty", edit_users=())

        def make(i: int) -> None:
            name = f"p-{i}"
            kube.create(f"/api/v1/namespaces/{ns}/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"batchgate.io/queue": "batch"},
                             "annotations": {TIME_LIMIT_ANNOTATION: "24h", STARTED_AT_ANNOTATION: s_start, DEADLINE_ANNOTATION: s_deadline}},
                # Never scheduled (no such scheduler) nor bound: no component but us looks at them.
                "spec": {"schedulerName": "bench-nobody", "containers": [{"name": "main", "image": "pause"}]},
            })
            kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {
                "phase": "Running", "startTime": s_start,
                "containerStatuses": [{"name": "main", "image": "pause", "imageID": "", "ready": True,
                                       "restartCount": 0, "state": {"running": {"startedAt": s_start}}}]}})

        t = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(make, range(n_pods)))
        print(f"created {n_pods} running pods in {time.perf_counter() - t:.0f}s")

        procs = {}
        for name, namespace in (("loaded", ns), ("empty", empty)):
            port = kc.free_port()
            procs[name] = (port, subprocess.Popen(
                [sys.executable, "-m", "webhook", "--log-level", "WARNING", "reconcile",
                 "--kubeconfig", kube.kubeconfig("admin"), "--namespace", namespace, "--lease-namespace", namespace,
                 "--identity", name, "--resync", "2s", "--metrics-port", str(port)],
                cwd=Path(__file__).resolve().parent.parent))
        try:
            port, proc = procs["loaded"]
            t = time.perf_counter()
            kc.wait_for(lambda: _metric(port, 'batchgate_reconciler_cached_objects{resource="Pod"}') >= n_pods,
                        300, interval=0.5, message="the reconciler's cache to fill")
            print(f"reconciler synced {n_pods} pods in {time.perf_counter() - t:.1f}s (list + start-up)")
            kc.wait_for(lambda: _metric(port, 'batchgate_reconciler_passes_total{trigger="resync"}') >= 2, 60,
                        interval=0.5, message="a first resync")
            writes = _metric(port, "batchgate_reconciler_api_writes_total")
            resyncs = _metric(port, 'batchgate_reconciler_passes_total{trigger="resync"}')
            kc.wait_for(lambda: _metric(port, 'batchgate_reconciler_passes_total{trigger="resync"}') >= resyncs + 5,
                        120, interval=0.5, message="five more resyncs")
            writes_after = _metric(port, "batchgate_reconciler_api_writes_total")
            plans = _metric(port, "batchgate_reconciler_plan_seconds_count")
            plan_s = _metric(port, "batchgate_reconciler_plan_seconds_sum")
            rss, rss_empty = _rss_mib(proc.pid), _rss_mib(procs["empty"][1].pid)
            print(f"API writes over 5 resyncs: {writes_after - writes:.0f} (writes since start: {writes_after:.0f})")
            print(f"planning: {plans:.0f} passes, {1000 * plan_s / max(plans, 1):.1f} ms each on average (wall)")
            print(f"resident memory: {rss:.0f} MiB with {n_pods} pods, {rss_empty:.0f} MiB watching an empty "
                  f"namespace: {(rss - rss_empty) * 1024 / n_pods:.1f} KiB per pod")
            return 0 if writes_after == writes else 1
        finally:
            for _, p in procs.values():
                p.kill()
                p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--passes", type=int, default=50)
    ap.add_argument("--unbounded", action="store_true", help="cold pass without the bookkeeping cap")
    ap.add_argument("--live", action="store_true", help="against a real API server (see above)")
    args = ap.parse_args()
    if args.live:
        return live(args.pods)
    settings = Settings(queues=QueuePolicy(max_time_limit={"batch": 7 * 86400}, default_queue="batch",
                                           excluded_namespaces=("kube-system", "kube-public", "batchgate-system")))

    raw = cluster(args.pods, recorded=True)
    (ingest_ms, _, _), snap = timed(lambda: views(*raw), 5)
    # The shadow schedule (expected starts) runs at most once per expected_start_interval and is
    # timed by bench_shadow.py; this is the pass that runs on every change.
    steady_t, steady = timed(functools.partial(plan, snap, NOW, settings, estimate=False), args.passes)
    if steady.actions:
        print(f"FAIL: a steady cluster planned {len(steady.actions)} actions, e.g. {steady.actions[0].line()}")
        return 1
    cold_raw = cluster(args.pods, recorded=False)
    cold_snap = views(*cold_raw)
    cold_settings = dataclasses.replace(settings, max_bookkeeping_per_pass=10**9) if args.unbounded else settings
    cold_t, cold = timed(functools.partial(plan, cold_snap, NOW, cold_settings, estimate=False), max(args.passes // 5, 3))

    n_cold, n_deferred = len(cold.actions), cold.deferred
    del snap, cold_snap, steady, cold
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    snap = views(*raw)
    view_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del snap
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    raw_again = cluster(args.pods, recorded=True)
    raw_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del raw_again

    n_jobs = len(raw[1])
    print(f"cluster: {args.pods} pods ({n_jobs} gang Jobs x {GANG} pods, {args.pods - n_jobs * GANG} bare pods), "
          f"{n_jobs} PodGroups, 200 nodes; Python {sys.version.split()[0]}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; ms of CPU per pass: best / median / p90")
    print(f"plan, steady (0 actions):      {steady_t[0]:6.1f} / {steady_t[1]:6.1f} / {steady_t[2]:6.1f}  ({args.passes} passes)")
    print(f"plan, cold start:              {cold_t[0]:6.1f} / {cold_t[1]:6.1f} / {cold_t[2]:6.1f}  "
          f"({n_cold} actions planned, {n_deferred} left to the next passes)")
    print(f"ingest (raw JSON -> views):    {ingest_ms:6.1f} ms for all objects, best of 5 (paid once per object change)")
    print(f"memory, snapshot views:        {view_bytes / 2**20:6.1f} MiB ({view_bytes / args.pods:.0f} B per pod, all objects)")
    print(f"memory, the same objects raw:  {raw_bytes / 2**20:6.1f} MiB (not kept)")
    budget = 50.0
    if steady_t[0] > budget:
        print(f"FAIL: over the {budget:.0f} ms budget")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
