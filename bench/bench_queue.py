"""Benchmark: a planning pass of the batch queue (issue 23) with 10,000 waiting pods.

    python bench/bench_queue.py [--workloads 2000] [--accounts 500] [--nodes 500] [--passes 10] [--json]
    python bench/bench_queue.py --instructions ['queue' 'queue, next pass' ...]
    python bench/bench_queue.py --backfill start-by      # the gated queues with backfill: start-by

The cluster: ``--nodes`` 32-core nodes, each with a running 16-core pod (3 h limit left, its
deadline recorded), and ``--workloads`` waiting workloads from ``--accounts`` accounts, 10,000
pods in all: a third queued Jobs of 4 pods, a third gangs of 10 gated bare pods, a third single
gated pods; each account has usage. Per pass, CPU time (``time.process_time``) of
``planner.plan`` with the cyclic collector paused, as the controller runs it: ``queue``, an ordinary pass with the queue (gathering, ordering, placing every
waiting workload with reservations, releases, promises): the first pass on this cluster, which
promises every workload and tells each it waits; ``queue, next pass``, the pass after it, once the
controller carried that one out (its annotations, patches and told Events recorded, ``settle``) and
one running pod finished, a second later: the pass a busy cluster runs most of the time; ``queue+estimates``, the pass that also
estimates expected starts (at most once a minute); ``no-queue+estimates``, the same pods waiting
ungated in kube-scheduler's queue, estimated in its order: the placement work without the queue,
so the queue's own cost shows. The goal: a pass under 100 ms CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.unit.reconciler.fakeapi import merge
from webhook.contract import QUEUE_GATE, QUEUED_ANNOTATION
from webhook.contract import TIME_LIMIT_ANNOTATION as TIME_LIMIT
from webhook.reconciler.actions import TELL_ONCE, Action
from webhook.reconciler.controller import collector_paused
from webhook.reconciler.model import NodeView, Snapshot, job_view, node_view, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.rules import load_bundle
from webhook.units import format_time

NOW = 1_714_600_000.0
ROOT = Path(__file__).resolve().parent.parent


def _container(cpu: str) -> dict[str, Any]:
    return {"name": "main", "image": "registry.example/hpc/app:1.2",
            "resources": {"requests": {"cpu": cpu, "memory": "4Gi"}, "limits": {"cpu": cpu, "memory": "4Gi"}}}


def _md(name: str, ns: str, uid: str, created: float, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1", "creationTimestamp": format_time(created),
            "labels": {"batchgate.io/queue": "batch", **extra.pop("labels", {})}, **extra}


@dataclass
class Cluster:
    """The benchmark's objects as the API server would store them, and each account's usage."""

    pods: dict[str, dict[str, Any]]  # by uid
    jobs: dict[str, dict[str, Any]]
    nodes: list[NodeView]
    usage: dict[str, float]
    waiting_pods: int
    told: set[tuple[str, str]] = field(default_factory=set)  # the controller's TELL_ONCE record

    def snapshot(self) -> Snapshot:
        return Snapshot.of(pods=[pod_view(p) for p in self.pods.values()],
                           jobs=[job_view(j) for j in self.jobs.values()], nodes=self.nodes)


def cluster(workloads: int, accounts: int, nodes: int, *, gated: bool) -> Cluster:
    node_objs: list[NodeView] = []
    pods: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for i in range(nodes):
        node_objs.append(node_view({"metadata": {"name": f"node-{i}", "uid": f"n{i}", "labels": {}},
                                    "status": {"allocatable": {"cpu": "32", "memory": "256Gi"},
                                               "conditions": [{"type": "Ready", "status": "True"}]}}))
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": _md(
            f"run-{i}", "ops", f"run-{i}", NOW - 3600,
            annotations={"batchgate.io/time-limit": "4h", "batchgate.io/deadline": format_time(NOW + 3 * 3600)}),
            "spec": {"nodeName": f"node-{i}", "priority": 1000, "containers": [_container("16")]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "main", "state": {"running": {
                "startedAt": format_time(NOW - 3600)}}}]}})
    gate = [{"name": QUEUE_GATE}] if gated else []
    count = 0
    for w in range(workloads):
        ns = f"acct-{w % accounts}"
        created = NOW - 10 * (workloads - w)
        ann = {"batchgate.io/time-limit": f"{1 + w % 8}h"}
        kind = w % 3
        if kind == 0:  # a queued Job of 4 pods (no pods yet); ungated: its 4 pending pods
            uid = f"job-{w}"
            if gated:
                jobs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": _md(
                    f"job-{w}", ns, uid, created, annotations={**ann, QUEUED_ANNOTATION: "true"}),
                    "spec": {"suspend": True, "parallelism": 4, "completions": 4, "template": {"spec": {
                        "priorityClassName": "batchgate-batch", "containers": [_container("2")]}}}})
            else:
                jobs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": _md(f"job-{w}", ns, uid, created,
                                                                                      annotations=ann),
                             "spec": {"parallelism": 4, "completions": 4, "template": {"spec": {
                                 "containers": [_container("2")]}}}})
                for k in range(4):
                    pods.append(_pending(f"job-{w}-{k}", ns, created, ann, [], owner=uid))
            count += 4
        elif kind == 1:  # a gang of 10 bare pods
            for k in range(10):
                p = _pending(f"gang-{w}-{k}", ns, created, ann, gate)
                p["metadata"]["labels"].update({"batchgate.io/pod-group": f"g{w}", "batchgate.io/pod-group-size": "10"})
                pods.append(p)
            count += 10
        else:
            pods.append(_pending(f"pod-{w}", ns, created, ann, gate))
            count += 1
    usage = {f"acct-{a}": float(1000 * (a % 17 + 1)) for a in range(accounts)}
    return Cluster({p["metadata"]["uid"]: p for p in pods}, {j["metadata"]["uid"]: j for j in jobs}, node_objs,
                   usage, count)


def settle(c: Cluster, actions: list[Action]) -> None:
    """What the controller writes for ``actions``, written: annotations and patches on the stored
    objects (a new resourceVersion each), and each TELL_ONCE action recorded as told. Released work
    stays as the release left it (ungated pods pending, resumed Jobs without pods yet): the state
    the next pass sees before kube-scheduler and the Job controller act on it."""
    for a in actions:
        if a.deletes or a.evict or a.create or a.pod_group or a.net or a.mark:
            raise SystemExit(f"bench_queue cannot settle {a.kind} (it writes more than annotations and patches)")
        obj = (c.pods if a.target.kind == "Pod" else c.jobs)[a.target.uid]
        md = obj["metadata"]
        if a.annotations:
            merge(md.setdefault("annotations", {}), dict(a.annotations))
        if a.patch is not None:
            merge(obj, {k: v for k, v in a.patch.items() if k != "metadata"}
                   | {"metadata": {k: v for k, v in a.patch.get("metadata", {}).items() if k != "resourceVersion"}})
        if a.annotations or a.patch is not None:
            md["resourceVersion"] = str(int(md["resourceVersion"]) + 1)
        if a.kind in TELL_ONCE:
            c.told.add((a.target.uid, a.key))


def finish_one(c: Cluster, when: float) -> None:
    """The one change before the next pass: the first running pod succeeds, freeing half its node."""
    pod = c.pods["run-0"]
    pod["status"] = {"phase": "Succeeded", "containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": 0, "startedAt": format_time(NOW - 3600), "finishedAt": format_time(when)}}}]}
    pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)


def _pending(name: str, ns: str, created: float, ann: dict[str, str], gates: list[dict[str, str]],
             owner: str | None = None) -> dict[str, Any]:
    md = _md(name, ns, f"u-{name}", created, annotations=ann)
    if owner:
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": owner,
                                  "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"priority": 1000, "schedulingGates": gates, "containers": [_container("2")]},
            "status": {"phase": "Pending"}}


def measure(snap: Snapshot, usage: dict[str, float], settings: Settings, passes: int, *, estimate: bool,
            now: float = NOW, told: set[tuple[str, str]] | None = None) -> tuple[float, list[Action]]:
    times: list[float] = []
    actions: list[Action] = []
    for _ in range(passes):
        t = time.process_time()
        with collector_paused():  # as the controller plans
            result = plan(snap, now, settings, estimate=estimate, usage=usage, told=told or frozenset())
        times.append(time.process_time() - t)
        actions = result.actions
    return statistics.median(times) * 1000, actions


def bind(c: Cluster, actions: list[Action], when: float) -> None:
    """What kube-scheduler and the Job controller do with the work ``actions`` released: a released
    Job's pods are made, and every released pod is bound (first fit, in the order released) and
    starts at ``when``."""
    free = {f"node-{i}": 32_000 for i in range(len(c.nodes))}
    for p in c.pods.values():
        if p["spec"].get("nodeName") and p["status"].get("phase") == "Running":
            free[p["spec"]["nodeName"]] -= _millicores(p)
    started: list[dict[str, Any]] = []
    for a in actions:
        if a.kind != "release":
            continue
        if a.target.kind == "Pod":
            started.append(c.pods[a.target.uid])
            continue
        job = c.jobs[a.target.uid]
        md, tmpl = job["metadata"], job["spec"]["template"]["spec"]
        for k in range(job["spec"]["parallelism"]):
            pod = _pending(f"{md['name']}-{k}", md["namespace"], when, {TIME_LIMIT: md["annotations"][TIME_LIMIT]}, [],
                           owner=md["uid"])
            pod["spec"] = {**pod["spec"], "priorityClassName": tmpl["priorityClassName"], "priority": 1000,
                           "containers": tmpl["containers"]}
            c.pods[pod["metadata"]["uid"]] = pod
            started.append(pod)
    nodes = iter(sorted(free, key=lambda n: int(n.split("-")[1])))
    node = next(nodes)
    for pod in started:
        need = _millicores(pod)
        while free[node] < need:
            node = next(nodes)  # StopIteration: released more than fits (a placement that overcommits)
        free[node] -= need
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "startTime": format_time(when), "containerStatuses": [
            {"name": "main", "state": {"running": {"startedAt": format_time(when)}}}]}
        pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)


def _millicores(pod: dict[str, Any]) -> int:
    return sum(int(float(ct["resources"]["requests"]["cpu"]) * 1000) for ct in pod["spec"]["containers"])


def next_pass(c: Cluster, settings: Settings) -> tuple[Snapshot, float]:
    """The snapshot of a pass on the cluster in its steady state, and when: the controller carried
    out a first pass (the one with the estimates, as its first is), what it released was bound and
    started a second later, the controller carried out the passes that followed (the new deadlines
    recorded), and then one running pod finished: the pass that change starts."""
    first = plan(c.snapshot(), NOW, settings, estimate=True, usage=c.usage).actions
    settle(c, first)
    bind(c, first, NOW + 1)
    for _ in range(100):  # and its bookkeeping held back for the passes right after (max_bookkeeping_per_pass)
        then = plan(c.snapshot(), NOW + 1, settings, estimate=False, usage=c.usage, told=c.told)
        settle(c, then.actions)
        if not then.deferred:
            break
    later = NOW + 2
    finish_one(c, later)
    return c.snapshot(), later


ROWS = {"queue": (True, False), "queue, next pass": (True, False), "queue+estimates": (True, True),
        "no-queue+estimates": (False, True)}  # name: (gated, estimate)


def setup(name: str, a: argparse.Namespace, settings: Settings) -> tuple[Cluster, Snapshot, float]:
    """The row's cluster, the snapshot its pass plans on, and when."""
    c = cluster(a.workloads, a.accounts, a.nodes, gated=ROWS[name][0])
    if name == "queue, next pass":
        snap, now = next_pass(c, settings)
        return c, snap, now
    return c, c.snapshot(), NOW


def run(a: argparse.Namespace, settings: Settings) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, (_gated, estimate) in ROWS.items():
        c, snap, now = setup(name, a, settings)
        ms, actions = measure(snap, c.usage, settings, a.passes, estimate=estimate, now=now, told=c.told)
        out[name] = {"pass_cpu_ms": round(ms, 1), "pods_waiting": c.waiting_pods, "workloads": a.workloads,
                     "accounts": a.accounts, "nodes": a.nodes, "actions": len(actions),
                     "by_kind": dict(sorted(Counter(x.kind for x in actions).items()))}
    return out


def instructions(a: argparse.Namespace, names: list[str], passes: int = 2) -> dict[str, float]:
    """Instructions per pass under valgrind's callgrind, with ``PYTHONHASHSEED=0`` (the machine's
    load does not change them): the row's snapshot is made and pickled outside valgrind, then loaded
    and planned ``passes`` times under it, minus loaded and not planned."""

    def total(path: Path, n: int) -> int:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--backfill", a.backfill, "--_load", str(path), str(n)]
        err = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stderr
        return int(re.search(r"Collected : (\d+)", err).group(1))  # type: ignore[union-attr]

    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = Path(tmp) / "row.pickle"
            subprocess.run([sys.executable, __file__, "--workloads", str(a.workloads), "--accounts", str(a.accounts),
                            "--nodes", str(a.nodes), "--backfill", a.backfill, "--_save", name, str(path)],
                           check=True, env=env)
            out[name] = (total(path, passes) - total(path, 0)) / passes
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=int, default=2000, help="waiting workloads (default 2000: 10,000 pods)")
    ap.add_argument("--accounts", type=int, default=500, help="accounts (namespaces) they come from (default 500)")
    ap.add_argument("--nodes", type=int, default=500, help="32-core nodes, each half busy (default 500)")
    ap.add_argument("--passes", type=int, default=10, help="passes measured; the median is printed (default 10)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--instructions", nargs="*", metavar="ROW", choices=list(ROWS),
                    help="instructions per pass of these rows (default: queue and queue, next pass) under "
                         "valgrind's callgrind instead (slow: minutes a row; exact)")
    ap.add_argument("--backfill", choices=("conservative", "start-by"), default="conservative",
                    help="the gated queues' backfill (the shipped bundle's: conservative)")
    ap.add_argument("--_save", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_load", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    queues = QueuePolicy.from_bundle(load_bundle(ROOT / "policies"))
    if a.backfill == "start-by":
        queues = dataclasses.replace(queues, start_by_backfill=frozenset(queues.gated))
    settings = Settings(queues=queues)
    if a._save:  # a row's pass, to plan under valgrind
        c, snap, now = setup(a._save[0], a, settings)
        Path(a._save[1]).write_bytes(pickle.dumps((snap, now, ROWS[a._save[0]][1], c.usage, c.told)))
        return
    if a._load:  # inside valgrind: plan it N times
        snap, now, estimate, usage, told = pickle.loads(Path(a._load[0]).read_bytes())
        for _ in range(int(a._load[1])):
            with collector_paused():  # as the controller plans
                plan(snap, now, settings, estimate=estimate, usage=usage, told=told)
        return
    if a.instructions is not None:
        counts = instructions(a, a.instructions or ["queue", "queue, next pass"])
        if a.json:
            print(json.dumps({k: {"instructions_per_pass": round(v)} for k, v in counts.items()}, indent=2))
        else:
            for name, v in counts.items():
                print(f"{name:20} {v / 1e6:>10.0f} M instructions per pass")
        return
    out = run(a, settings)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{'':20} {'pass CPU ms (median)':>21} {'actions':>8}")
    for name, r in out.items():
        print(f"{name:20} {r['pass_cpu_ms']:>21} {r['actions']:>8}")
    print(f"{out['queue']['pods_waiting']} pods in {a.workloads} workloads from {a.accounts} accounts on {a.nodes} nodes")


if __name__ == "__main__":
    main()
