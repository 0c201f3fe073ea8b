"""What a Pod create pays, through a real kube-apiserver, for batchgate's webhooks
against a no-op webhook pair.

Starts the e2e control plane (tests/e2e/cluster.py: etcd, kube-apiserver 1.20.2,
controller manager, scheduler; binaries in ~/.cache/batchgate), applies the
manifests (CRDs, priority classes, RBAC) and starts two webhook servers with the
same certificate: ``batchgate serve`` on the shipped bundle, and the stdlib no-op
of bench_webhook.py answering ``allowed`` on /mutate and /validate. Both are
registered in turn with the same webhook configurations (same rules, same
failurePolicy, only the URL differs). ``alice`` then creates Pods (server-side dry
run: all admission, both webhooks, no etcd write) one at a time and the latency of
each create is measured; rounds alternate no webhooks / no-op pair / batchgate.

    python bench/bench_apiserver.py [--creates 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cluster  # noqa: E402
from bench_webhook import STDLIB_NOOP, free_port, wait_ready  # noqa: E402
from harness import (  # noqa: E402
    WebhookServer,
    apply_manifests,
    label_system_namespaces,
    pod,
    wait_crd_established,
)

from webhook.generate import webhook_configurations  # noqa: E402

NOOP_PAIR = STDLIB_NOOP.replace('app.router.add_post("/mutate", handle)',
                                'app.router.add_post("/mutate", handle)\napp.router.add_post("/validate", handle)')


def creates(kube: cluster.LocalCluster, namespace: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        body = pod(f"bench-{uuid.uuid4().hex[:8]}")
        started = time.perf_counter()
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body, as_user="alice",
                     query={"dryRun": "All"})
        out.append((time.perf_counter() - started) * 1000)
    return out


def p99(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.99) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--creates", type=int, default=300, help="Pod creates per setup per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="batchgate-bench-api-"))
    kube = cluster.LocalCluster(cluster.find_binaries()).start()
    server = noop = None
    try:
        if kube.server_version() < (1, 21):
            label_system_namespaces(kube)
        apply_manifests(kube)
        wait_crd_established(kube, "scavengerjobs.batchgate.io")
        namespace = kube.create_namespace(prefix="bench")
        kube.wait_for_service_account(namespace)
        server = WebhookServer(work, policies=ROOT / "policies").start()
        (work / "noop.py").write_text(NOOP_PAIR)
        port = free_port()
        noop = subprocess.Popen([sys.executable, str(work / "noop.py"), str(port), str(server.cert_dir)])
        wait_ready(port)
        setups = {
            "no webhooks": None,
            "no-op pair": webhook_configurations(server.ca_bundle, url=f"https://127.0.0.1:{port}"),
            "batchgate": webhook_configurations(server.ca_bundle, url=server.url),
        }
        names = setups["batchgate"][0]["metadata"]["name"], setups["batchgate"][1]["metadata"]["name"]  # type: ignore[index]
        results: dict[str, list[list[float]]] = {k: [] for k in setups}
        for _ in range(args.rounds):
            for name, configs in setups.items():
                if configs is None:
                    kube.delete_webhooks(mutating=names[0], validating=names[1])
                else:
                    kube.register_webhooks(*configs)
                time.sleep(2)  # the API server picks configurations up asynchronously
                creates(kube, namespace, 20)  # warm connections and caches
                results[name].append(creates(kube, namespace, args.creates))
        print(f"Pod create (server-side dry run, alice, one at a time): {args.creates} x {args.rounds} rounds")
        print(f"{'setup':<12} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        summary = {}
        for name, rounds in results.items():
            all_ = [x for r in rounds for x in r]
            summary[name] = (statistics.median(all_), p99(all_), statistics.fmean(all_))
            print(f"{name:<12} {summary[name][0]:>8.2f} {summary[name][1]:>8.2f} {summary[name][2]:>8.2f}")
        base, noop_s, bg = summary["no webhooks"], summary["no-op pair"], summary["batchgate"]
        print(f"create latency batchgate / no-op pair: p50 {bg[0] / noop_s[0]:.2f}, mean {bg[2] / noop_s[2]:.2f}")
        print(f"added by the webhooks (minus no webhooks), batchgate / no-op pair: "
              f"p50 {(bg[0] - base[0]) / (noop_s[0] - base[0]):.2f}, mean {(bg[2] - base[2]) / (noop_s[2] - base[2]):.2f}")
        return 0
    finally:
        if noop is not None:
            noop.terminate()
            noop.wait(10)
        if server is not None:
            server.stop()
        kube.stop()


if __name__ == "__main__":
    sys.exit(main())
