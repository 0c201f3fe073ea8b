"""batchgate at cluster scale: kwok nodes and pods through the webhook and the reconciler on a
real control plane (Kubernetes $KUBE_VERSION, default 1.37).

Starts the e2e control plane (tests/e2e/cluster.py: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, built by hack/kube-build.sh), kwok managing the fake nodes (a scheduled pod turns
Running, node leases renewed), ``batchgate serve`` registered as the admission webhooks, and one
``batchgate reconcile`` over all namespaces. Then:

1. creates ``--nodes`` kwok nodes (32 cpu, 128Gi, 110 pods each);
2. creates ``--pods`` bare pods as an ordinary user (``alice``, ``--clients`` at once) over
   ``--namespaces`` namespaces, through the webhooks; kube-scheduler binds them, kwok runs them;
3. waits until every pod is Running and the reconciler has planned a pass over all of them;
4. watches ``--steady`` seconds of steady state (several resyncs of ``--resync``).

Prints: admission errors (must be 0), the create rate, time to all Running, the reconciler's
resident memory (now and peak), its planning-pass time (mean and max over the steady state),
and its API writes during the steady state (must be 0: nothing changed, so nothing to write).

    python bench/bench_scale.py [--nodes 500] [--pods 10000] [--steady 90] [--resync 20s]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT))

import cluster  # noqa: E402
from harness import apply_manifests, pod, serving, wait_crd_established  # noqa: E402

KWOK_STAGES = ("node-initialize.yaml", "node-heartbeat-with-lease.yaml", "pod-ready.yaml", "pod-delete.yaml")


def start_kwok(kube: cluster.LocalCluster, workdir: Path) -> subprocess.Popen[bytes]:
    stages = kube.bin_dir / "kwok-stages"
    home = workdir / "kwok-home"  # kwok also reads ~/.kwok/kwok.yaml: not the user's
    home.mkdir()
    log = open(workdir / "kwok.log", "wb")  # noqa: SIM115 - the process keeps it
    return subprocess.Popen([
        str(kube.bin_dir / "kwok"), f"--kubeconfig={kube.kubeconfig('admin')}",
        "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16",
        "--config=" + ",".join(str(stages / s) for s in KWOK_STAGES),
    ], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(home)}, start_new_session=True)


def kwok_node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "type": "kwok"}},
            "status": {"capacity": capacity, "allocatable": capacity}}


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[key] = out.get(key, 0.0) + float(value) if key in out else float(value)
    return out


def total(m: dict[str, float], name: str) -> float:
    return sum(v for k, v in m.items() if re.fullmatch(rf"{name}(\{{.*\}})?", k))


def rss_mib(pid: int) -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in status.splitlines()) if k in ("VmRSS", "VmHWM")}
    return kib["VmRSS"] / 1024, kib["VmHWM"] / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500, help="kwok nodes (default 500)")
    ap.add_argument("--pods", type=int, default=10_000, help="pods to create (default 10000)")
    ap.add_argument("--namespaces", type=int, default=20, help="namespaces the pods spread over (default 20)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent creating clients (default 16)")
    ap.add_argument("--resync", default="20s", help="the reconciler's --resync (default 20s)")
    ap.add_argument("--steady", type=float, default=90, help="seconds of steady state watched (default 90)")
    args = ap.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="batchgate-scale-"))
    kube = cluster.LocalCluster(extra_apiserver_args=["--max-requests-inflight=800",
                                                      "--max-mutating-requests-inflight=400"]).start()
    procs: list[subprocess.Popen[bytes]] = []
    webhook = contextlib.ExitStack()
    try:
        print(f"control plane {kube.get('/version')['gitVersion']} up in {kube.startup_seconds:.1f} s", flush=True)
        apply_manifests(kube)
        wait_crd_established(kube, "scavengerjobs.batchgate.io")
        procs.append(start_kwok(kube, workdir))
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(lambda i: kube.create("/api/v1/nodes", kwok_node(f"kwok-{i:04d}")), range(args.nodes)))

        def ready_nodes() -> int:
            items = kube.get("/api/v1/nodes", labelSelector="type=kwok")["items"]
            return sum(any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
                       and not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints") or [])
                       for n in items)
        cluster.wait_for(lambda: ready_nodes() == args.nodes, 600, interval=2, message="kwok nodes Ready")
        print(f"{args.nodes} kwok nodes Ready in {time.monotonic() - t0:.1f} s", flush=True)

        policies = ROOT / "policies"
        webhook.enter_context(serving(kube, workdir, policies, probe_prefix="scale-probe"))

        namespaces = [kube.create_namespace(prefix="scale") for _ in range(args.namespaces)]
        metrics_port = cluster.free_port()
        rlog = open(workdir / "reconciler.log", "wb")  # noqa: SIM115
        reconciler = subprocess.Popen(
            [sys.executable, "-m", "webhook", "--log-level", "WARNING", "reconcile",
             "--kubeconfig", kube.kubeconfig("admin"), "--no-leader-elect", "--resync", args.resync,
             "--metrics-port", str(metrics_port), "--policies", str(policies)],
            cwd=ROOT, stdout=rlog, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(reconciler)

        errors: list[str] = []

        def create(i: int) -> None:
            ns = namespaces[i % len(namespaces)]
            body = pod(f"p-{i:05d}", labels={"app": f"a{i % 50}"})
            try:
                kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body, as_user="alice")
            except cluster.KubeApiError as e:
                errors.append(str(e)[:300])

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(create, range(args.pods)))
        created_s = time.monotonic() - t0
        print(f"{args.pods} pod creates in {created_s:.1f} s ({args.pods / created_s:.0f}/s), "
              f"admission errors: {len(errors)}", flush=True)
        for e in errors[:5]:
            print(f"  {e}")

        def running() -> int:
            n = 0
            for ns in namespaces:
                n += sum((p.get("status") or {}).get("phase") == "Running"
                         for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"])
            return n
        cluster.wait_for(lambda: running() >= args.pods - len(errors), 1800, interval=5,
                         message="every pod Running")
        print(f"all Running {time.monotonic() - t0:.1f} s after the first create", flush=True)

        def planned_all() -> bool:
            m = metrics(metrics_port)
            return total(m, "batchgate_reconciler_cached_objects") > 0 and \
                m.get('batchgate_reconciler_cached_objects{resource="Pod"}', 0) >= args.pods - len(errors)
        cluster.wait_for(planned_all, 600, interval=2, message="the reconciler's cache holding every pod")
        # settled: the writes that the pods' arrival called for are done (a resync with none)
        resync = float(args.resync.rstrip("s"))
        t_settle = time.monotonic()
        last = total(metrics(metrics_port), "batchgate_reconciler_api_writes_total")
        while time.monotonic() - t_settle < 1800:
            time.sleep(resync + 2)
            now = total(metrics(metrics_port), "batchgate_reconciler_api_writes_total")
            if now == last:
                break
            last = now
        m = metrics(metrics_port)
        print(f"settled {time.monotonic() - t_settle:.0f} s after the cache held every pod; writes so far: "
              + ", ".join(f"{k.split('{', 1)[1].rstrip('}')}: {v:.0f}" for k, v in sorted(m.items())
                          if k.startswith("batchgate_reconciler_api_writes_total{") and v), flush=True)
        before, t1 = metrics(metrics_port), time.monotonic()
        time.sleep(args.steady)
        after, t2 = metrics(metrics_port), time.monotonic()
        passes = total(after, "batchgate_reconciler_passes_total") - total(before, "batchgate_reconciler_passes_total")
        writes = total(after, "batchgate_reconciler_api_writes_total") - total(before, "batchgate_reconciler_api_writes_total")
        plan_s = (total(after, "batchgate_reconciler_plan_seconds_sum") - total(before, "batchgate_reconciler_plan_seconds_sum"))
        rss, peak = rss_mib(reconciler.pid)
        for k, v in sorted(after.items()):
            if k.startswith("batchgate_reconciler_api_writes_total{") and v != before.get(k, 0):
                print(f"  steady-state writes {k.split('{', 1)[1].rstrip('}')}: {v - before.get(k, 0):.0f}")
        print(f"steady state, {t2 - t1:.0f} s: {passes:.0f} passes, {writes:.0f} API writes "
              f"({writes / passes if passes else float('nan'):.2f} per pass); "
              f"planning {plan_s / passes * 1000 if passes else float('nan'):.0f} ms per pass (mean)", flush=True)
        print(f"reconciler memory: {rss:.0f} MiB resident, {peak:.0f} MiB peak "
              f"({args.pods} pods, {args.nodes} nodes)", flush=True)
        return 0 if not errors and writes == 0 else 1
    finally:
        for p in procs:
            with contextlib.suppress(Exception):
                p.kill()
                p.wait(timeout=30)
        webhook.close()
        kube.stop()


if __name__ == "__main__":
    sys.exit(main())
