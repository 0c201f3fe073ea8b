"""From fits to released: how long waiting work stays gated once its room is free, on the real
control plane (Kubernetes $KUBE_VERSION, default 1.37; issue 23 item 8, goal under 2 s).

Starts the e2e control plane (tests/e2e/cluster.py: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler), the manifests, ``batchgate serve`` registered as the admission webhooks with the
shipped bundle (queue ``batch`` is gated), and one ``batchgate reconcile`` over all namespaces (no
leader election, ``--log-format json``). Per kind of workload, a 4-CPU node of its own:

* ``pod``: one bare pod of 4 CPUs (scheduling gate);
* ``job``: a Job of one 4-CPU pod (created suspended);
* ``gang-pods``: a pod group of two bare 2-CPU pods (``batchgate.io/pod-group``, size 2);
* ``gang-job``: a gang Job of two 2-CPU pods (``batchgate.io/gang``).

Each repetition: a running pod (queue ``interactive``, ungated, bound to the node, Running) fills
the node; the workload is created in queue ``batch`` and waits (the reconciler has written its
``batchgate.io/start-by``); after a random 0-3 s (so the room frees at any moment of the
reconciler's passes), the running pod is deleted (grace period 0) or finishes (phase Succeeded),
alternately. The figure is the time from sending that write (the API server may tell its
watchers before this script has its response, so the write itself is included) to the moment a
watch of this script receives the workload released as stored: every pod's ``batchgate.io/queue``
gate gone, or the Job's ``spec.suspend`` false. The reconciler's log says when its release action
was done (the patch, then the ``Released`` Event), which splits the figure into the reconciler's
share (its watch, its pass, the patch) and the watch's delivery to this script.

    python bench/bench_release.py [--reps 10] [--kinds pod,job,gang-pods,gang-job] [--json]
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT))

import cluster  # noqa: E402
from harness import (  # noqa: E402
    GANG,
    apply_manifests,
    container,
    job,
    jobs_path,
    pod,
    pods_path,
    serving,
    wait_crd_established,
)

from webhook.contract import QUEUE_GATE, START_BY_ANNOTATION  # noqa: E402

KINDS = ("pod", "job", "gang-pods", "gang-job")
QUEUE = "batch"  # gated in the shipped bundle
NODE_CPU = 4
NOW = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}


class Watcher:
    """Watches the namespace's pods and Jobs; records, per object name, when it was first seen
    released (time.time() at arrival)."""

    def __init__(self, kube: Any, ns: str) -> None:
        from kubernetes import client

        self.kube, self.ns = kube, ns
        self.core = client.CoreV1Api(kube.api_client("admin"))
        self.batch = client.BatchV1Api(kube.api_client("admin"))
        self.seen: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(kind,), daemon=True) for kind in ("Pod", "Job")]
        for t in self.threads:
            t.start()

    @staticmethod
    def released(kind: str, obj: dict[str, Any]) -> bool:
        spec = obj.get("spec") or {}
        if kind == "Job":
            return spec.get("suspend") is False
        return not any(g.get("name") == QUEUE_GATE for g in spec.get("schedulingGates") or [])

    def _run(self, kind: str) -> None:
        from kubernetes import watch

        lister = self.core.list_namespaced_pod if kind == "Pod" else self.batch.list_namespaced_job
        path = pods_path(self.ns) if kind == "Pod" else jobs_path(self.ns)
        while not self.stop.is_set():
            rv = self.kube.get(path)["metadata"]["resourceVersion"]
            w = watch.Watch()
            try:
                for ev in w.stream(lister, self.ns, resource_version=rv, timeout_seconds=60,
                                   allow_watch_bookmarks=True):
                    at = time.time()
                    obj = ev["raw_object"]
                    if ev["type"] in ("ADDED", "MODIFIED") and self.released(kind, obj):
                        key = (kind, obj["metadata"]["name"])
                        with self.lock:
                            self.seen.setdefault(key, at)
                    if self.stop.is_set():
                        break
            except Exception as e:  # an expired watch: list again
                if not self.stop.is_set():
                    print(f"watch {kind}: {e}; again", file=sys.stderr, flush=True)
            finally:
                w.stop()

    def when(self, kind: str, name: str) -> float | None:
        with self.lock:
            return self.seen.get((kind, name))


def filler(name: str, node: str) -> dict[str, Any]:
    """The running pod that takes the whole node: ungated queue, bound by name (no scheduler)."""
    return pod(name, labels={"batchgate.io/queue": "interactive"}, nodeName=node,
               containers=[container(cpu=str(NODE_CPU), memory="1Gi")])


def workload(kind: str, name: str, node: str) -> tuple[dict[str, Any] | list[dict[str, Any]], list[tuple[str, str]]]:
    """The waiting workload (one object, or a pod group's pods) and the (kind, name) of what
    must be seen released."""
    sel = {"bench-release": node}
    q = {"batchgate.io/queue": QUEUE}
    if kind == "pod":
        return pod(name, labels=q, nodeSelector=sel, containers=[container(cpu=str(NODE_CPU), memory="1Gi")]), \
            [("Pod", name)]
    if kind == "job":
        return job(name, labels=q, nodeSelector=sel, containers=[container(cpu=str(NODE_CPU), memory="1Gi")]), \
            [("Job", name)]
    if kind == "gang-pods":
        members = [pod(f"{name}-{i}", labels={**q, "batchgate.io/pod-group": name, "batchgate.io/pod-group-size": "2"},
                       nodeSelector=sel, containers=[container(cpu=str(NODE_CPU // 2), memory="1Gi")]) for i in range(2)]
        return members, [("Pod", m["metadata"]["name"]) for m in members]
    return job(name, parallelism=2, completions=2, labels={**q, **GANG}, nodeSelector=sel,
               containers=[container(cpu=str(NODE_CPU // 2), memory="1Gi")]), [("Job", name)]


def start_by_written(kube: Any, ns: str, kind: str, name: str) -> bool:
    if kind in ("job", "gang-job"):
        obj = kube.get(jobs_path(ns, name))
    else:
        obj = kube.get(pods_path(ns, name if kind == "pod" else f"{name}-0"))
    return START_BY_ANNOTATION in (obj["metadata"].get("annotations") or {})


def released_at(log: Path, names: set[str]) -> dict[str, float]:
    """From the reconciler's JSON log: when each release action was done (its log line)."""
    out: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if '"Released' not in line:
            continue
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            f = rec.get("fields") or rec
            if f.get("reason") == "Released" and f.get("outcome") == "done" and f.get("name") in names:
                ts = rec["ts"]
                t = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) + float(ts[19:-1] or 0)
                out[f["name"]] = t
    return out


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def summary(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50": statistics.median(xs), "p95": pct(xs, 95), "max": max(xs), "min": min(xs)}


def one(kube: Any, ns: str, watcher: Watcher, kind: str, node: str, rep: int, rng: random.Random,
        log: Path) -> dict[str, Any]:
    name = f"{kind}-{rep}"
    fill = f"fill-{kind}-{rep}"
    kube.request("POST", pods_path(ns), filler(fill, node), as_user="alice")
    kube.set_pod_phase(ns, fill, "Running", {"main": {"running": {
        "startedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}})
    objs, watched = workload(kind, name, node)
    for o in objs if isinstance(objs, list) else [objs]:
        path = pods_path(ns) if o["kind"] == "Pod" else jobs_path(ns)
        kube.request("POST", path, o, as_user="alice")
    cluster.wait_for(lambda: start_by_written(kube, ns, kind, name), 120, interval=0.2,
                     message=f"{name} waiting with its start-by")
    assert all(watcher.when(k, n) is None for k, n in watched), f"{name} released while the node was full"
    time.sleep(rng.uniform(0, 3))
    how = "delete" if rep % 2 == 0 else "finish"
    fits = time.time()  # the request that frees the room is sent (the API server may tell watchers before us)
    if how == "delete":
        kube.request("DELETE", pods_path(ns, fill), NOW)
    else:
        kube.set_pod_phase(ns, fill, "Succeeded", {"main": 0})

    def seen() -> float | None:
        ts = [watcher.when(k, n) for k, n in watched]
        return max(ts) if all(t is not None for t in ts) else None  # type: ignore[type-var]
    at = cluster.wait_for(seen, 120, interval=0.05, message=f"{name} released")
    names = {n for _k, n in watched}
    patched = cluster.wait_for(lambda: (lambda got: got if set(got) >= names else None)(released_at(log, names)),
                               10, interval=0.1, message=f"the reconciler's log of {name}'s release")
    rec = max(patched.values())
    out = {"kind": kind, "rep": rep, "freed_by": how, "seconds": at - fits,
           "reconciler_seconds": (rec - fits) if rec is not None else None}
    cleanup(kube, ns, kind, name)
    return out


def cleanup(kube: Any, ns: str, kind: str, name: str) -> None:
    """Everything of this repetition gone (pods at once: no kubelet would end them; the Job
    controller's tracking finalizer taken off, as no kubelet would report them ended)."""
    if kind in ("job", "gang-job"):
        kube.delete(jobs_path(ns, name), body={"kind": "DeleteOptions", "apiVersion": "v1",
                                               "propagationPolicy": "Background"})
        cluster.wait_for(lambda: not kube.exists(jobs_path(ns, name)), 60, interval=0.2, message="job gone")

    def gone() -> bool:
        items = kube.get(pods_path(ns))["items"]
        for p in items:
            path = pods_path(ns, p["metadata"]["name"])
            with contextlib.suppress(cluster.KubeApiError):
                if p["metadata"].get("finalizers"):
                    kube.patch(path, {"metadata": {"finalizers": None}})
                kube.delete(path, body=NOW)
        return not items
    cluster.wait_for(gone, 60, interval=0.5, message="pods gone")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10, help="repetitions per kind (default 10)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"kinds of workload (default {','.join(KINDS)})")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random waits (default 1)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if bad := [k for k in kinds if k not in KINDS]:
        ap.error(f"unknown kinds {bad}")
    rng = random.Random(args.seed)

    workdir = Path(tempfile.mkdtemp(prefix="batchgate-release-"))
    kube = cluster.LocalCluster().start()
    procs: list[subprocess.Popen[bytes]] = []
    webhook = contextlib.ExitStack()
    watcher = None
    rows: list[dict[str, Any]] = []
    say: Callable[[str], None] = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else \
        (lambda s: print(s, flush=True))
    try:
        version = kube.get("/version")["gitVersion"]
        say(f"control plane {version} up in {kube.startup_seconds:.1f} s")
        apply_manifests(kube)
        wait_crd_established(kube, "scavengerjobs.batchgate.io")
        policies = ROOT / "policies"
        webhook.enter_context(serving(kube, workdir, policies, probe_prefix="release-probe"))
        ns = kube.create_namespace(prefix="release")
        nodes = {}
        for kind in kinds:
            nodes[kind] = f"bench-release-{kind}"
            kube.create_node(nodes[kind], cpu=str(NODE_CPU), memory="16Gi", labels={"bench-release": nodes[kind]})
        log = workdir / "reconciler.log"
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "webhook", "--log-level", "INFO", "--log-format", "json", "reconcile",
                 "--kubeconfig", kube.kubeconfig("admin"), "--no-leader-elect", "--policies", str(policies)],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        cluster.wait_for(lambda: "cache synced" in log.read_text(errors="replace"), 120, message="reconciler ready")
        watcher = Watcher(kube, ns)
        for kind in kinds:
            for rep in range(args.reps):
                r = one(kube, ns, watcher, kind, nodes[kind], rep, rng, log)
                rows.append(r)
                rec = r["reconciler_seconds"]
                say(f"{kind:>9} rep {rep:>2} ({r['freed_by']:>6}): released {r['seconds'] * 1000:7.0f} ms after it fit"
                    + (f" (the reconciler logged its release at {rec * 1000:.0f} ms)" if rec is not None else ""))
        result: dict[str, Any] = {"kubernetes": version, "reps": args.reps, "seed": args.seed, "kinds": {}}
        for kind in [*kinds, "all"]:
            xs = [r["seconds"] for r in rows if kind in ("all", r["kind"])]
            rs = [r["reconciler_seconds"] for r in rows if kind in ("all", r["kind"]) and r["reconciler_seconds"] is not None]
            result["kinds"][kind] = {"released": summary(xs), "reconciler": summary(rs) if rs else None}
        result["rows"] = rows
        with contextlib.suppress(OSError):
            result["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"\nfrom fits to released (s), Kubernetes {version}, {args.reps} repetitions per kind:")
            print(f"{'kind':>9} {'p50':>7} {'p95':>7} {'max':>7}   reconciler's log p50 / max")
            for kind, v in result["kinds"].items():
                s, r = v["released"], v["reconciler"]
                print(f"{kind:>9} {s['p50']:7.3f} {s['p95']:7.3f} {s['max']:7.3f}"
                      + (f"   {r['p50']:.3f} / {r['max']:.3f}" if r else ""))
        return 0 if result["kinds"]["all"]["released"]["max"] < 2.0 else 1
    finally:
        if watcher is not None:
            watcher.stop.set()
        for p in procs:
            with contextlib.suppress(Exception):
                p.kill()
                p.wait(timeout=30)
        webhook.close()
        kube.stop()


if __name__ == "__main__":
    sys.exit(main())
