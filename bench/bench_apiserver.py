"""What a Pod create pays, through a real kube-apiserver, for batchgate's webhooks against
a no-op webhook pair; and what an update that no policy reads pays with and without the
webhooks' matchConditions.

Starts the e2e control plane (tests/e2e/cluster.py: etcd, kube-apiserver, controller
manager, scheduler, as hack/kube-binaries.sh finds them: $KUBEBUILDER_ASSETS, else the
cache for $KUBE_VERSION, default 1.37), applies the manifests (CRDs, priority classes, RBAC)
and starts two webhook servers with the same certificate: ``batchgate serve`` on the shipped
bundle, and the stdlib no-op of bench_webhook.py answering ``allowed`` on /mutate and
/validate. ``alice`` then sends requests one at a time (server-side dry run: all of
admission, no etcd write) and the latency of each is measured; rounds alternate the setups.

- Pod creates: no webhooks; the no-op pair (batchgate's webhook configurations, only the URL
  differs); batchgate (its webhook configurations and its ValidatingAdmissionPolicies, as
  ``kubectl apply -k manifests/`` installs them).
- Pod updates that change only an unrelated label (what controllers and users do all day):
  no webhooks; batchgate's configurations without their matchConditions (every UPDATE of the
  rules is sent, as before they existed); batchgate as shipped (the conditions hold it back).

    python bench/bench_apiserver.py [--creates 300] [--updates 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

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

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}

NOOP_PAIR = STDLIB_NOOP  # it answers on /mutate and /validate: the pair's two webhooks
assert 'add_post("/validate", handle)' in NOOP_PAIR


def creates(kube: cluster.LocalCluster, namespace: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        body = pod(f"bench-{uuid.uuid4().hex[:8]}")
        started = time.perf_counter()
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body, as_user="alice",
                     query={"dryRun": "All"})
        out.append((time.perf_counter() - started) * 1000)
    return out


def updates(kube: cluster.LocalCluster, path: str, n: int) -> list[float]:
    """PATCHes of an unrelated label (a new value each time: a real change) on a stored Pod."""
    out = []
    for _ in range(n):
        body = {"metadata": {"labels": {"bench": uuid.uuid4().hex[:8]}}}
        started = time.perf_counter()
        kube.request("PATCH", path, body, as_user="alice", content_type="application/merge-patch+json",
                     query={"dryRun": "All"})
        out.append((time.perf_counter() - started) * 1000)
    return out


def p99(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.99) - 1)]


Configs = tuple[dict[str, Any], dict[str, Any]]


class Setups:
    """Switches the API server between setups: webhook configurations and admission policies."""

    def __init__(self, kube: cluster.LocalCluster, names: tuple[str, str], policies: list[dict[str, Any]]):
        self.kube, self.names, self.policies = kube, names, policies

    def use(self, configs: Configs | None, *, policies: bool = False) -> None:
        if configs is None:
            self.kube.delete_webhooks(mutating=self.names[0], validating=self.names[1])
        else:
            self.kube.register_webhooks(*configs)
        for o in self.policies:
            path = f"{ADMISSION}/{PLURALS[o['kind']]}"
            if policies and not self.kube.exists(f"{path}/{o['metadata']['name']}"):
                self.kube.create(path, o)
            elif not policies:
                self.kube.delete(f"{path}/{o['metadata']['name']}")
        time.sleep(2)  # the API server picks configurations and policies up asynchronously


def without_conditions(configs: Configs) -> Configs:
    out = copy.deepcopy(configs)
    for config in out:
        for hook in config["webhooks"]:
            hook.pop("matchConditions", None)
    return out


def reviews(server: WebhookServer, operation: str) -> float:
    """Reviews of ``operation`` batchgate answered, on both endpoints, whatever the outcome."""
    return sum(v for k, v in server.metrics().items()
               if k.startswith("batchgate_admission_requests_total{") and f'operation="{operation}"' in k)


def run(setups: Setups, which: dict[str, tuple[Configs | None, bool]], rounds: int, server: WebhookServer,
        operation: str, measure: Callable[[int], list[float]], n: int
        ) -> tuple[dict[str, list[list[float]]], dict[str, float]]:
    """Latencies per setup (rounds alternate the setups) and the reviews batchgate was sent."""
    results: dict[str, list[list[float]]] = {k: [] for k in which}
    sent = dict.fromkeys(which, 0.0)
    for _ in range(rounds):
        for name, (configs, with_policies) in which.items():
            setups.use(configs, policies=with_policies)
            measure(20)  # warm connections and caches
            before = reviews(server, operation)
            results[name].append(measure(n))
            sent[name] += reviews(server, operation) - before
    return results, sent


def summarize(title: str, results: dict[str, list[list[float]]], sent: dict[str, float]
              ) -> dict[str, tuple[float, float, float]]:
    print(title)
    print(f"{'setup':<34} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'reviews sent to batchgate':>26}")
    summary = {}
    for name, rounds in results.items():
        all_ = [x for r in rounds for x in r]
        summary[name] = (statistics.median(all_), p99(all_), statistics.fmean(all_))
        print(f"{name:<34} {summary[name][0]:>8.2f} {summary[name][1]:>8.2f} {summary[name][2]:>8.2f} "
              f"{sent[name]:>26.0f}")
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--creates", type=int, default=300, help="Pod creates per setup per round")
    ap.add_argument("--updates", type=int, default=300, help="Pod label updates per setup per round")
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
        batchgate = webhook_configurations(server.ca_bundle, url=server.url)
        policies = [o for o in yaml.safe_load_all((ROOT / "manifests" / "admission-policies.yaml").read_text()) if o]
        setups = Setups(kube, (batchgate[0]["metadata"]["name"], batchgate[1]["metadata"]["name"]), policies)
        version = ".".join(map(str, kube.server_version()))

        create_setups: dict[str, tuple[Configs | None, bool]] = {
            "no webhooks": (None, False),
            "no-op pair": (webhook_configurations(server.ca_bundle, url=f"https://127.0.0.1:{port}"), False),
            "batchgate webhooks": (batchgate, False),
            "batchgate (+ admission policies)": (batchgate, True),
        }
        results, sent = run(setups, create_setups, args.rounds, server, "CREATE",
                            lambda n: creates(kube, namespace, n), args.creates)
        title = (f"Pod create on Kubernetes {version} (server-side dry run, alice, one at a time): "
                 f"{args.creates} x {args.rounds} rounds")
        summary = summarize(title, results, sent)
        base, noop_s, bg = summary["no webhooks"], summary["no-op pair"], summary["batchgate (+ admission policies)"]
        print(f"create latency batchgate / no-op pair: p50 {bg[0] / noop_s[0]:.2f}, mean {bg[2] / noop_s[2]:.2f}")
        print(f"added by the webhooks (minus no webhooks), batchgate / no-op pair: "
              f"p50 {(bg[0] - base[0]) / (noop_s[0] - base[0]):.2f}, mean {(bg[2] - base[2]) / (noop_s[2] - base[2]):.2f}")

        setups.use(batchgate, policies=True)
        stored = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("bench-updated"), as_user="alice")
        path = f"/api/v1/namespaces/{namespace}/pods/{stored['metadata']['name']}"
        update_setups: dict[str, tuple[Configs | None, bool]] = {
            "no webhooks": (None, False),
            "admission policies only": (None, True),
            "batchgate without matchConditions": (without_conditions(batchgate), True),
            "batchgate": (batchgate, True),
        }
        results, sent = run(setups, update_setups, args.rounds, server, "UPDATE",
                            lambda n: updates(kube, path, n), args.updates)
        title = (f"\nPod update of an unrelated label on Kubernetes {version} (server-side dry run, alice): "
                 f"{args.updates} x {args.rounds} rounds")
        summary = summarize(title, results, sent)
        base, unconditioned, bg = (summary["no webhooks"], summary["batchgate without matchConditions"],
                                   summary["batchgate"])
        print(f"update latency batchgate / without matchConditions: p50 {bg[0] / unconditioned[0]:.2f}, "
              f"mean {bg[2] / unconditioned[2]:.2f}; batchgate / no webhooks: p50 {bg[0] / base[0]:.2f}")
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
