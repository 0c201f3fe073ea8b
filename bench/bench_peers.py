"""batchgate beside the admission layers a cluster admin would install instead, Kyverno and
Gatekeeper, each enforcing batchgate's shipped Pod policies (bench/peers/*/policy.yaml), on
the same real API server, on the same machine, in one run; with no webhooks and a no-op
webhook pair as the floor.

The peers are built from their Go modules by bench/peers/build.sh (pinned in
bench/peers/*/go.mod; cached in ~/.cache/batchgate/peers). The control plane is the e2e one
(tests/e2e/cluster.py: the binaries hack/kube-binaries.sh finds, $KUBE_VERSION default 1.37).
Each system runs in turn, its webhook server pinned to one core (``taskset``; Go's
GOMAXPROCS follows), and is stopped before the next starts. With ``--replicas N`` each server
runs as N processes on one port (batchgate ``--workers N``, the no-op pairs SO_REUSEPORT copies;
the Go peers GOMAXPROCS=N), free on every core, as a Deployment's replicas would share a node:
Pod creates only (the webhook-alone figures are one core's):

- ``none``: no webhooks. ``noop``: the stdlib no-op of bench_webhook.py on /mutate and
  /validate, registered with batchgate's webhook configurations (only the URL differs).
- ``batchgate``: ``batchgate serve`` on the shipped bundle, its webhook configurations and
  ValidatingAdmissionPolicies, as ``kubectl apply -k manifests/`` installs them.
- ``replay``: the no-op pair answering with batchgate's own answers: it asks a ``batchgate
  serve`` (never registered) once per path, kind and operation, then sends that answer (its
  JSONPatch and warnings) with each review's uid, parsing the review as the no-op does; with
  batchgate's admission policies. What the API server does with batchgate's mutation, without
  batchgate's policies: the floor of any webhook that makes the same changes (create only).
- ``kyverno``: Kyverno's admission controller out of cluster (``--serverIP``), its CRDs and
  ConfigMaps from its module's install manifest; it registers its own webhooks (from the
  policy: Pods on CREATE) with the certificate it makes. Admission reports off.
- ``gatekeeper``: Gatekeeper's manager as its controller-manager Deployment runs it
  (``--operation=webhook --operation=mutation-webhook``, plus ``--operation=generate``, the
  audit Deployment's part that makes a template's constraint CRD), its CRDs from its
  module's deploy manifest, a stand-in Pod of its name (its controllers own their status
  objects by it), our certificate (``--disable-cert-rotation``) and batchgate's webhook
  configurations pointed at /v1/mutate and /v1/admit.

``--rounds`` repeats it all (each system started afresh); each figure is the median over
the rounds.

Measured per system, in this order:

1. Pod create through the API server (server-side dry run, as ``alice``; ``wrk`` with 1 and
   with 16 kept-alive connections, --create-seconds each): p50, p99, mean ms. Every
   system must have mutated the Pod (priority class, /dev/shm, token off) and must deny an
   unknown queue before it is measured.
2. The webhook alone: the same AdmissionReview (a user's Pod create, the fixture
   bench_webhook.py uses) POSTed to its mutating endpoint by ``wrk`` on the other core.
   ``reviews_per_core``: reviews/s at saturation (16 connections; fewer until p99 < 100 ms).
   ``cpu_s_per_1000``: the server process's CPU seconds (user + system, its threads and
   children, /proc) per 1,000 reviews at a fixed rate (--rate, or half the server's
   saturation rate if that is lower; one connection, paced). ``validate_reviews_per_core``:
   the validating endpoint at saturation, sent the Pod as the system's own mutation left it.

    python bench/bench_peers.py [--json] [--create-seconds 10] [--duration 10] [--rate 50]
                                [--systems none,noop,batchgate,kyverno,gatekeeper]

``--json`` prints only {system: {version, reviews_per_core, cpu_s_per_1000, create: {"1":
{p50, p99, mean}, "16": {...}}}} on stdout (progress on stderr); bench/README.md's table
reads the same numbers. ``admission`` (per concurrency) says where each create's time went,
from the API server's /metrics before and after the measured creates: the whole request, each
admission step (``runs`` 2 for the mutating step: a webhook's mutation made the API server run
its mutating plugins again), each admission plugin, each webhook (``calls`` per create, ``ms``
per call, as the API server timed it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import http.client
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cluster  # noqa: E402
from bench_apiserver import NOOP_PAIR  # noqa: E402
from bench_webhook import FIXTURES, free_port, run_wrk, wait_ready  # noqa: E402
from harness import apply_manifests, pod, wait_crd_established  # noqa: E402

from webhook.generate import webhook_configurations  # noqa: E402

PEERS = ROOT / "bench" / "peers"
# batchgate-webhooks: batchgate's two webhooks without its ValidatingAdmissionPolicies, to show
# what the policies evaluated inside the API server add to a create (the default systems; also
# batchgate-base with --baseline, and policies / policies-base: the admission policies alone)
SYSTEMS = ("none", "noop", "replay", "batchgate", "batchgate-webhooks", "kyverno", "gatekeeper")
CONCURRENCY = (1, 16)
P99_BAR_MS = 100.0
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
# plural of each kind the peers' manifests and policies hold
PLURALS = {
    "Namespace": "namespaces", "ConfigMap": "configmaps",
    "CustomResourceDefinition": "customresourcedefinitions",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "ClusterPolicy": "clusterpolicies", "Assign": "assign", "AssignMetadata": "assignmetadata",
    "ConstraintTemplate": "constrainttemplates", "BatchgatePods": "batchgatepods",
}


def log(msg: str) -> None:
    print(f"bench-peers: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# the API server side


def path_of(obj: dict[str, Any], *, named: bool = False) -> str:
    api, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{ns}/{PLURALS[kind]}" + (f"/{meta['name']}" if named else "")


def apply(kube: cluster.LocalCluster, obj: dict[str, Any]) -> None:
    """Create ``obj``, or replace it (``kubectl apply`` without the merge)."""
    try:
        kube.create(path_of(obj), obj)
    except cluster.KubeApiError as e:
        if e.status != 409:
            raise
        body = copy.deepcopy(obj)
        body["metadata"]["resourceVersion"] = kube.get(path_of(obj, named=True))["metadata"]["resourceVersion"]
        kube.request("PUT", path_of(obj, named=True), body)


def manifest(path: Path, kinds: set[str]) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(path.read_text()) if o and o["kind"] in kinds]


def module_dir(peer: str, module: str) -> Path:
    out = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=PEERS / peer, check=True,
                         capture_output=True, text=True, env={**os.environ, "GOFLAGS": "-mod=readonly"})
    return Path(out.stdout.strip())


def dry_run_pod(kube: cluster.LocalCluster, namespace: str, labels: dict[str, str] | None = None
                ) -> tuple[int, dict[str, Any]]:
    try:
        return 201, kube.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                                 pod(f"probe-{uuid.uuid4().hex[:8]}", labels=labels),
                                 as_user="alice", query={"dryRun": "All"})
    except cluster.KubeApiError as e:
        return e.status, e.body if isinstance(e.body, dict) else {"message": str(e.body)}


def enforcing(kube: cluster.LocalCluster, namespace: str) -> str | None:
    """None when the Pod policies are in force (what was wrong, else)."""
    status, out = dry_run_pod(kube, namespace)
    if status != 201:
        return f"a Pod in queue batch was refused: {out.get('message')}"
    spec = out["spec"]
    if spec.get("priorityClassName") != "batchgate-batch" or spec.get("automountServiceAccountToken") is not False:
        return f"the Pod was not mutated (priorityClassName {spec.get('priorityClassName')!r})"
    if not any(v.get("emptyDir", {}).get("medium") == "Memory" for v in spec.get("volumes") or []):
        return "no /dev/shm volume"
    status, out = dry_run_pod(kube, namespace, {"batchgate.io/queue": "no-such-queue"})
    if status == 201:
        return "a Pod in an unknown queue was admitted"
    return None


def wait_enforcing(kube: cluster.LocalCluster, namespace: str, name: str, proc: subprocess.Popen[bytes] | None,
                   logf: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    why: str | None = "not checked"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode}):\n{cluster.tail(logf, 40)}")
        why = enforcing(kube, namespace)
        if why is None:
            return
        time.sleep(1)
    raise RuntimeError(f"{name}: policies not in force after {timeout:.0f}s: {why}\n{cluster.tail(logf, 40)}")


def creates(ctx: Ctx, concurrency: int, seconds: int) -> dict[str, float]:
    """Dry-run creates of one Pod by ``wrk`` with ``concurrency`` kept-alive connections (a
    dry run stores nothing, so the same name is created over and over), for ``seconds``."""
    t = ctx.kube._transports["alice"]
    body = ctx.work / "pod.json"
    body.write_text(json.dumps(pod("bench")))
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    r = run_wrk(t.port, body, duration=seconds, connections=concurrency, core=cores,
                path=f"{t.prefix}/api/v1/namespaces/{ctx.namespace}/pods?dryRun=All", authorization=f"Bearer {t.token}",
                timeout=60)
    return r


# --------------------------------------------------------------------------
# where a create's time goes, from the API server's own metrics

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# the histograms read (their _sum and _count): the whole request, each admission step (all
# mutating plugins, then all validating ones, the reinvocation pass counted as a second run of
# the first), each admission plugin, each webhook call (from the API server's side: writing the
# review, the round trip, reading the answer and applying its patch)
HISTOGRAMS = {
    "apiserver_request_duration_seconds": "request",
    "apiserver_admission_step_admission_duration_seconds": "step",
    "apiserver_admission_controller_admission_duration_seconds": "plugin",
    "apiserver_admission_webhook_admission_duration_seconds": "webhook",
}
Sample = tuple[str, tuple[tuple[str, str], ...], str]  # histogram, labels, "sum" | "count"


def scrape(kube: cluster.LocalCluster) -> dict[Sample, float]:
    """The API server's /metrics: the _sum and _count of HISTOGRAMS, by their labels."""
    text = kube.request("GET", "/metrics", accept="text/plain")
    out: dict[Sample, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        base, _, part = name.rpartition("_")
        if part in ("sum", "count") and base in HISTOGRAMS:
            out[(base, tuple(sorted(LABEL.findall(labels))), part)] = float(value)
    return out


def admission_breakdown(before: dict[Sample, float], after: dict[Sample, float]) -> dict[str, Any]:
    """Per Pod create between two scrapes: the API server's time for the whole request, each
    admission step (``runs``: 2 for the mutating step when a mutation made the API server run
    its mutating plugins again), each plugin, and each webhook (``calls`` per create, ``ms`` per
    call). Operation CREATE only; a peer's own writes (Events) are in the steps too."""
    sums: dict[tuple[str, str, str], list[float]] = {}
    for key, value in after.items():
        base, labels, part = key
        lab = dict(labels)
        kind = HISTOGRAMS[base]
        if kind == "request":
            if (lab.get("verb"), lab.get("resource"), lab.get("subresource", "")) != ("POST", "pods", ""):
                continue
            name = ""
        elif lab.get("operation") != "CREATE" or lab.get("rejected") != "false":
            continue
        else:
            name = lab["type"] if kind == "step" else f"{lab['name']} ({lab['type']})"
        acc = sums.setdefault((kind, name, part), [0.0])
        acc[0] += value - before.get(key, 0.0)
    creates = sums.get(("request", "", "count"), [0.0])[0]
    if not creates:
        return {}

    def figures(kind: str) -> dict[str, dict[str, float]]:
        names = sorted({n for k, n, _ in sums if k == kind})
        out = {}
        for n in names:
            total, count = sums.get((kind, n, "sum"), [0.0])[0], sums.get((kind, n, "count"), [0.0])[0]
            if count:
                out[n] = {"ms": round(total / creates * 1000, 3), "runs": round(count / creates, 2)}
        return out

    webhooks = {n: {"calls": f["runs"], "ms": round(f["ms"] / f["runs"], 3)} for n, f in figures("webhook").items()}
    return {"creates": int(creates), "request_ms": figures("request")[""]["ms"], "steps": figures("step"),
            "plugins": {n: f["ms"] for n, f in figures("plugin").items() if f["ms"] >= 0.001}, "webhooks": webhooks}


# --------------------------------------------------------------------------
# the webhook alone


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants, all threads (/proc)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(p.name)] = int(fields[1])
        times[int(p.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        cur = todo.pop()
        total += times.get(cur, 0.0)
        todo += [c for c, pp in parents.items() if pp == cur]
    return total


def fixed_rate(url: str, body: bytes, *, rate: float, seconds: float, pid: int) -> tuple[float, int]:
    """POST ``body`` at ``rate`` per second (paced, one kept-alive connection) for ``seconds``;
    the server tree's CPU seconds over that window and the reviews sent."""
    host, port, path = url_parts(url)
    conn = http.client.HTTPSConnection(host, port, context=insecure(), timeout=30)
    headers = {"Content-Type": "application/json"}
    n = int(rate * seconds)
    cpu0 = tree_cpu_seconds(pid)
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url} answered HTTP {resp.status}")
    cpu = tree_cpu_seconds(pid) - cpu0
    conn.close()
    return cpu, n


def insecure() -> Any:
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


def url_parts(url: str) -> tuple[str, int, str]:
    rest = url.removeprefix("https://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.rpartition(":")
    return host, int(port), "/" + path


def review_once(url: str, body: bytes) -> dict[str, Any]:
    host, port, path = url_parts(url)
    conn = http.client.HTTPSConnection(host, port, context=insecure(), timeout=30)
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{url} answered HTTP {resp.status}: {raw[:300]!r}")
    out: dict[str, Any] = json.loads(raw)["response"]
    return out


def saturation(url: str, body_file: Path, *, duration: int, core: str) -> dict[str, float]:
    """reviews/s at saturation with p99 under the bar: 16 connections, halved until it holds
    (at 1 connection the figure stands whatever its p99; ``p99`` says whether it held)."""
    _, port, path = url_parts(url)
    conns = 16
    while True:
        run_wrk(port, body_file, duration=2, connections=conns, core=core, path=path)  # warm-up
        r = run_wrk(port, body_file, duration=duration, connections=conns, core=core, path=path)
        r["connections"] = conns
        if r["p99"] < P99_BAR_MS or conns == 1:
            return r
        conns //= 2


# --------------------------------------------------------------------------
# the systems


@dataclass
class Ctx:
    kube: cluster.LocalCluster
    namespace: str
    work: Path
    certs: Path
    ca_bundle: str
    peers_dir: Path | None
    core: str
    batchgate_configs: tuple[dict[str, Any], dict[str, Any]]
    batchgate_policies: list[dict[str, Any]]
    profile: Path | None = None
    baseline: Path | None = None  # --baseline: another checkout, system batchgate-base
    replicas: int = 1  # --replicas: server processes per system (Go peers: GOMAXPROCS), on every core


@dataclass
class Running:
    version: str
    review_url: str | None = None
    validate_url: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    stop: Callable[[], None] = lambda: None
    pprof_port: int | None = None  # a Go peer's pprof, with --profile
    replicas: tuple[subprocess.Popen[bytes], ...] = ()  # the other server processes, with --replicas


def spawn(ctx: Ctx, name: str, args: list[str], env: dict[str, str] | None = None,
          cwd: Path = ROOT) -> tuple[subprocess.Popen[bytes], Path]:
    logf = ctx.work / f"{name}.log"
    f = open(logf, "ab")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(["taskset", "-c", ctx.core, *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=f,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "GOMAXPROCS": str(ctx.replicas), **(env or {})})
    return proc, logf


def stop_proc(proc: subprocess.Popen[bytes]) -> None:
    cluster.terminate_group(proc, grace=20)


def rename(configs: tuple[dict[str, Any], dict[str, Any]], prefix: str, url: str, paths: tuple[str, str]
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """batchgate's webhook configurations, named for another server at ``url`` + its paths."""
    out = copy.deepcopy(configs)
    for config, p in zip(out, paths, strict=True):
        config["metadata"]["name"] = f"{prefix}-{config['metadata']['name']}"
        for hook in config["webhooks"]:
            hook["clientConfig"]["url"] = url + p
    return out


def start_none(ctx: Ctx) -> Running:
    return Running(version="kube-apiserver " + ctx.kube.get("/version")["gitVersion"])


def listeners(port: int) -> int:
    """How many sockets listen on 127.0.0.1:``port`` (/proc/net/tcp, state 0A)."""
    mine = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return sum(1 for line in f if line.split()[1] == mine and line.split()[3] == "0A")


def wait_listeners(port: int, n: int, timeout: float = 60) -> None:
    """Until all ``n`` replicas listen: the API server keeps its connections, so one that came
    late would get none."""
    deadline = time.monotonic() + timeout
    while listeners(port) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{listeners(port)} of {n} replicas listen on port {port} after {timeout:.0f}s")
        time.sleep(0.2)


def spawn_replicas(ctx: Ctx, name: str, args: list[str]) -> tuple[list[subprocess.Popen[bytes]], Path]:
    """``ctx.replicas`` copies of a server that listens with SO_REUSEPORT (the kernel spreads the
    API server's connections over them, as a Service spreads them over a Deployment's pods)."""
    procs = [spawn(ctx, name, args)[0] for _ in range(ctx.replicas)]
    return procs, ctx.work / f"{name}.log"


def start_noop(ctx: Ctx) -> Running:
    (ctx.work / "noop.py").write_text(NOOP_PAIR)
    port = free_port()
    procs, _ = spawn_replicas(ctx, "noop", [sys.executable, str(ctx.work / "noop.py"), str(port), str(ctx.certs)])
    proc = procs[0]
    wait_ready(port)
    wait_listeners(port, ctx.replicas)
    configs = rename(ctx.batchgate_configs, "noop", f"https://127.0.0.1:{port}", ("/mutate", "/validate"))
    ctx.kube.register_webhooks(*configs)

    def stop() -> None:
        ctx.kube.delete_webhooks(configs[0]["metadata"]["name"], configs[1]["metadata"]["name"])
        for p in procs:
            stop_proc(p)

    time.sleep(2)  # the API server picks configurations up asynchronously
    import aiohttp
    return Running(version=f"stdlib no-op (Python {platform.python_version()}, aiohttp {aiohttp.__version__})",
                   review_url=f"https://127.0.0.1:{port}/mutate", validate_url=f"https://127.0.0.1:{port}/validate",
                   proc=proc, stop=stop, replicas=tuple(procs[1:]))


# The no-op pair, but each answer is batchgate's: asked once per (path, kind, operation) of a
# ``batchgate serve`` at argv[3], kept as the bytes before and after the uid, and sent with each
# review's uid. It reads each review as the no-op does, so the two differ only in the answer.
REPLAY_PAIR = r'''
import json, ssl, sys, urllib.request
from aiohttp import web

UPSTREAM = sys.argv[3]
PLACEHOLDER = "uid-placeholder-5f0c"
kept = {}

def ask(path, raw):
    req = urllib.request.Request(UPSTREAM + path, data=raw, headers={"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(req, context=ssl._create_unverified_context(), timeout=30).read())
    answer["response"]["uid"] = PLACEHOLDER
    head, tail = json.dumps(answer, separators=(",", ":")).split(json.dumps(PLACEHOLDER))
    return head.encode(), tail.encode()

async def handle(request):
    raw = await request.read()
    body = json.loads(raw)
    req = body["request"]
    key = (request.path, req["kind"]["kind"], req["operation"])
    if key not in kept:
        kept[key] = ask(request.path, raw)
    head, tail = kept[key]
    return web.Response(body=head + json.dumps(req["uid"]).encode() + tail, content_type="application/json")
''' + NOOP_PAIR[NOOP_PAIR.index("\nctx = ssl."):]  # the no-op pair's own server


def start_replay(ctx: Ctx) -> Running:
    """The no-op pair sending batchgate's answers (REPLAY_PAIR), with batchgate's admission
    policies: Pod creates only (its answers fit only the Pod it was asked about)."""
    upstream = free_port()
    bg, bg_log = spawn(ctx, "replay-batchgate", [sys.executable, "-m", "webhook", "--log-level", "WARNING", "serve",
                                                 "--host", "127.0.0.1", "--port", str(upstream),
                                                 "--policies", str(ROOT / "policies"), "--cert-dir", str(ctx.certs)],
                       env={"PYTHONPATH": str(ROOT)})
    wait_ready(upstream, timeout=60)
    (ctx.work / "replay.py").write_text(REPLAY_PAIR)
    port = free_port()
    procs, logf = spawn_replicas(ctx, "replay", [sys.executable, str(ctx.work / "replay.py"), str(port),
                                                 str(ctx.certs), f"https://127.0.0.1:{upstream}"])
    wait_ready(port)
    wait_listeners(port, ctx.replicas)
    configs = rename(ctx.batchgate_configs, "replay", f"https://127.0.0.1:{port}", ("/mutate", "/validate"))
    ctx.kube.register_webhooks(*configs)
    for o in ctx.batchgate_policies:
        apply(ctx.kube, o)

    def stop() -> None:
        ctx.kube.delete_webhooks(configs[0]["metadata"]["name"], configs[1]["metadata"]["name"])
        for o in ctx.batchgate_policies:
            ctx.kube.delete(path_of(o, named=True))
        for p in procs:
            stop_proc(p)
        stop_proc(bg)

    try:
        # the first Pod create it sees is the one measured (`creates`): batchgate's answers to it
        # are the ones kept; then the same check as every system's, on that Pod
        deadline = time.monotonic() + 60
        while True:
            try:
                out = ctx.kube.request("POST", f"/api/v1/namespaces/{ctx.namespace}/pods", pod("bench"),
                                       as_user="alice", query={"dryRun": "All"})
                break
            except cluster.KubeApiError as e:  # the configurations are picked up asynchronously
                if time.monotonic() > deadline:
                    raise RuntimeError(f"replay: the bench Pod was refused: {e}\n{cluster.tail(logf, 20)}") from e
                time.sleep(1)
        spec = out["spec"]
        if spec.get("priorityClassName") != "batchgate-batch" or spec.get("automountServiceAccountToken") is not False:
            raise RuntimeError(f"replay: the Pod was not mutated as batchgate mutates it: {json.dumps(spec)[:500]}"
                               f"\n{cluster.tail(logf, 20)}\n{cluster.tail(bg_log, 20)}")
    except BaseException:
        stop()
        raise
    return Running(version="the no-op pair sending batchgate's answers (replay)", proc=procs[0], stop=stop,
                   replicas=tuple(procs[1:]))


def start_batchgate(ctx: Ctx, admission_policies: bool = True, root: Path = ROOT) -> Running:
    """``batchgate serve`` of the checkout at ``root`` (this one, or --baseline's) on its bundle,
    with its admission policies."""
    port = free_port()
    proc, logf = spawn(ctx, "batchgate", [sys.executable, "-m", "webhook", "--log-level", "WARNING", "serve",
                                          "--host", "127.0.0.1", "--port", str(port),
                                          "--policies", str(root / "policies"), "--cert-dir", str(ctx.certs),
                                          "--workers", str(ctx.replicas)],
                       env={"PYTHONPATH": str(root)}, cwd=root)
    wait_ready(port, timeout=60)
    wait_listeners(port, ctx.replicas)
    configs = rename(ctx.batchgate_configs, "bench", f"https://127.0.0.1:{port}", ("/mutate", "/validate"))
    ctx.kube.register_webhooks(*configs)
    policies = (ctx.batchgate_policies if root == ROOT else batchgate_policies(root)) if admission_policies else []
    for o in policies:
        apply(ctx.kube, o)
    wait_enforcing(ctx.kube, ctx.namespace, "batchgate", proc, logf)
    version = subprocess.run([sys.executable, "-m", "webhook", "--version"], cwd=root, capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONPATH": str(root)}).stdout.strip()
    if not admission_policies:
        version += " (webhooks only, no admission policies)"
    if root != ROOT:
        version += f" ({root})"

    def stop() -> None:
        ctx.kube.delete_webhooks(configs[0]["metadata"]["name"], configs[1]["metadata"]["name"])
        for o in policies:
            ctx.kube.delete(path_of(o, named=True))
        stop_proc(proc)

    return Running(version=version, review_url=f"https://127.0.0.1:{port}/mutate",
                   validate_url=f"https://127.0.0.1:{port}/validate", proc=proc, stop=stop)


def peer_version(ctx: Ctx, peer: str) -> str:
    assert ctx.peers_dir is not None
    first = (ctx.peers_dir / f"{peer}.BUILD-INFO").read_text().splitlines()[0].split()
    return f"{first[1]} {first[2]}"


KYVERNO_ENV = {
    "KYVERNO_NAMESPACE": "kyverno", "KYVERNO_POD_NAME": "kyverno-bench", "INIT_CONFIG": "kyverno",
    "METRICS_CONFIG": "kyverno-metrics", "KYVERNO_SERVICEACCOUNT_NAME": "kyverno-admission-controller",
    "KYVERNO_ROLE_NAME": "kyverno:admission-controller", "KYVERNO_SVC": "kyverno-svc",
    "KYVERNO_DEPLOYMENT": "kyverno-admission-controller",
}


def delete_managed_webhooks(kube: cluster.LocalCluster, label: str) -> None:
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for item in kube.get(f"{ADMISSION}/{plural}", labelSelector=label)["items"]:
            kube.delete(f"{ADMISSION}/{plural}/{item['metadata']['name']}")


def start_kyverno(ctx: Ctx) -> Running:
    assert ctx.peers_dir is not None
    src = module_dir("kyverno", "github.com/kyverno/kyverno")
    install = manifest(src / "config" / "install-latest-testing.yaml", {"Namespace", "ConfigMap", "CustomResourceDefinition"})
    for o in install:
        apply(ctx.kube, o)
    for o in install:
        if o["kind"] == "CustomResourceDefinition":
            wait_crd_established(ctx.kube, o["metadata"]["name"], timeout=60)
    policy = manifest(PEERS / "kyverno" / "policy.yaml", {"ClusterPolicy"})
    for o in policy:
        apply(ctx.kube, o)
    port = free_port()
    pprof = free_port() if ctx.profile else None
    proc, logf = spawn(ctx, "kyverno", [
        str(ctx.peers_dir / "kyverno"), f"--kubeconfig={ctx.kube.kubeconfig('admin')}",
        *(["--profile", f"--profilePort={pprof}", "--profileAddress=127.0.0.1"] if pprof else []),
        f"--serverIP=127.0.0.1:{port}", "--webhookServerHost=127.0.0.1", f"--webhookServerPort={port}",
        f"--servicePort={port}",
        "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca",
        "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair",
        # the install manifest's flags, but for metrics (no ports to share) and admission reports
        # (each would be a write to the API server: left out, Kyverno's own work is measured)
        "--tlsKeyAlgorithm=RSA", "--resyncPeriod=15m", "--crdWatcher=false", "--disableMetrics=true",
        "--controllerRuntimeMetricsAddress=0", "--admissionReports=false", "--autoUpdateWebhooks=true",
        "--enableConfigMapCaching=true", "--enableDeferredLoading=true", "--dumpPayload=false",
        "--forceFailurePolicyIgnore=false", "--generateValidatingAdmissionPolicy=true",
        "--generateMutatingAdmissionPolicy=false", "--dumpPatches=false", "--maxAPICallResponseLength=2000000",
        "--loggingFormat=text", "--v=1", "--omitEvents=PolicyApplied,PolicySkipped",
        "--enablePolicyException=false", "--protectManagedResources=false",
    ], env=KYVERNO_ENV)

    def stop() -> None:
        stop_proc(proc)
        delete_managed_webhooks(ctx.kube, "webhook.kyverno.io/managed-by=kyverno")
        for o in policy:
            ctx.kube.delete(path_of(o, named=True))

    try:
        wait_enforcing(ctx.kube, ctx.namespace, "kyverno", proc, logf)
    except BaseException as e:
        stop()
        raise RuntimeError(f"{e}\n{cluster.tail(logf, 30)}") from e
    return Running(version=peer_version(ctx, "kyverno"), review_url=f"https://127.0.0.1:{port}/mutate/fail",
                   validate_url=f"https://127.0.0.1:{port}/validate/fail", proc=proc, stop=stop,
                   pprof_port=pprof)


def start_gatekeeper(ctx: Ctx) -> Running:
    assert ctx.peers_dir is not None
    src = module_dir("gatekeeper", "github.com/open-policy-agent/gatekeeper/v3")
    install = manifest(src / "deploy" / "gatekeeper.yaml", {"Namespace", "CustomResourceDefinition"})
    for o in install:
        apply(ctx.kube, o)
    for o in install:
        if o["kind"] == "CustomResourceDefinition":
            wait_crd_established(ctx.kube, o["metadata"]["name"], timeout=60)
    # Gatekeeper's controllers own their status objects by its Pod: a stand-in (never scheduled)
    ctx.kube.wait_for_service_account("gatekeeper-system")
    if not ctx.kube.exists("/api/v1/namespaces/gatekeeper-system/pods/gatekeeper-bench"):
        ctx.kube.create("/api/v1/namespaces/gatekeeper-system/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gatekeeper-bench"},
            "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "manager", "image": "gatekeeper", "securityContext": {
                         "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}})
    port = free_port()
    pprof = free_port() if ctx.profile else None
    proc, logf = spawn(ctx, "gatekeeper", [
        str(ctx.peers_dir / "gatekeeper"), f"--port={port}", "--host=127.0.0.1", f"--cert-dir={ctx.certs}",
        *(["--enable-pprof", f"--pprof-port={pprof}"] if pprof else []),
        "--disable-cert-rotation", f"--health-addr=127.0.0.1:{free_port()}", "--metrics-addr=0",
        f"--prometheus-port={free_port()}", "--shutdown-delay=0",
        # the controller-manager Deployment's flags
        "--logtostderr", "--exempt-namespace=gatekeeper-system", "--operation=webhook",
        "--operation=mutation-webhook", "--disable-opa-builtin={http.send}",
        # what the audit Deployment does besides auditing: make the constraint's CRD from the template
        "--operation=generate",
    ], env={"KUBECONFIG": ctx.kube.kubeconfig("admin"), "POD_NAMESPACE": "gatekeeper-system",
            "POD_NAME": "gatekeeper-bench", "NAMESPACE": "gatekeeper-system", "CONTAINER_NAME": "manager"})
    policy = [o for o in yaml.safe_load_all((PEERS / "gatekeeper" / "policy.yaml").read_text()) if o]
    configs = rename(ctx.batchgate_configs, "gatekeeper", f"https://127.0.0.1:{port}", ("/v1/mutate", "/v1/admit"))

    def stop() -> None:
        ctx.kube.delete_webhooks(configs[0]["metadata"]["name"], configs[1]["metadata"]["name"])
        stop_proc(proc)
        for o in policy:
            with contextlib.suppress(cluster.KubeApiError, KeyError):
                ctx.kube.delete(path_of(o, named=True))

    try:
        wait_ready(port, timeout=120)
        for o in policy:
            if o["kind"] == "BatchgatePods":  # its CRD comes from the template, made by Gatekeeper
                wait_crd_established(ctx.kube, "batchgatepods.constraints.gatekeeper.sh", timeout=120)
            apply(ctx.kube, o)
        ctx.kube.register_webhooks(*configs)
        wait_enforcing(ctx.kube, ctx.namespace, "gatekeeper", proc, logf)
    except BaseException as e:
        stop()
        raise RuntimeError(f"{e}\n{cluster.tail(logf, 30)}") from e
    return Running(version=peer_version(ctx, "gatekeeper"), review_url=f"https://127.0.0.1:{port}/v1/mutate",
                   validate_url=f"https://127.0.0.1:{port}/v1/admit", proc=proc, stop=stop,
                   pprof_port=pprof)


def start_baseline(ctx: Ctx) -> Running:
    if ctx.baseline is None:
        raise RuntimeError("batchgate-base needs --baseline DIR")
    return start_batchgate(ctx, root=ctx.baseline)


def start_policies(ctx: Ctx, root: Path = ROOT) -> Running:
    """batchgate's ValidatingAdmissionPolicies alone, no webhooks: what they cost the API server."""
    policies = ctx.batchgate_policies if root == ROOT else batchgate_policies(root)
    for o in policies:
        apply(ctx.kube, o)
    time.sleep(2)  # the API server picks policies up asynchronously (the warm-up creates follow)

    def stop() -> None:
        for o in policies:
            ctx.kube.delete(path_of(o, named=True))

    return Running(version="batchgate's admission policies alone, no webhooks" + (f" ({root})" if root != ROOT else ""),
                   stop=stop)


def batchgate_policies(root: Path) -> list[dict[str, Any]]:
    return manifest(root / "manifests" / "admission-policies.yaml",
                    {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})


STARTERS: dict[str, Callable[[Ctx], Running]] = {
    "none": start_none, "noop": start_noop, "replay": start_replay, "batchgate": start_batchgate,
    "batchgate-webhooks": lambda ctx: start_batchgate(ctx, admission_policies=False),
    "batchgate-base": start_baseline,
    "policies": start_policies,
    "policies-base": lambda ctx: start_policies(ctx, root=ctx.baseline) if ctx.baseline else start_baseline(ctx),
    "kyverno": start_kyverno, "gatekeeper": start_gatekeeper,
}


# --------------------------------------------------------------------------


@contextlib.contextmanager
def pinned(core: str) -> Iterator[None]:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(core)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# py-spy: $PYSPY, else the one `make bench-tools` puts beside this Python, else on PATH
_BESIDE = Path(sys.executable).parent / "py-spy"
PYSPY = os.environ.get("PYSPY") or (str(_BESIDE) if _BESIDE.exists() else "py-spy")


@contextlib.contextmanager
def profiling(ctx: Ctx, name: str, running: Running, seconds: int) -> Iterator[None]:
    """With --profile: a CPU profile of the server over the mutating saturation run (warm-up
    included) into the --profile dir: pprof for a Go peer, py-spy for a Python server."""
    if ctx.profile is None or running.proc is None:
        yield
        return
    ctx.profile.mkdir(parents=True, exist_ok=True)
    if running.pprof_port is not None:
        cmd = ["curl", "-s", "-o", str(ctx.profile / f"{name}.pprof"),
               f"http://127.0.0.1:{running.pprof_port}/debug/pprof/profile?seconds={seconds}"]
    else:
        cmd = [PYSPY, "record", "--pid", str(running.proc.pid), "--subprocesses", "--duration", str(seconds),
               "--rate", "200", "--format", "raw", "--nonblocking", "-o", str(ctx.profile / f"{name}.collapsed")]
    prof = subprocess.Popen(["taskset", "-c", ctx.core, *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        _, err = prof.communicate(timeout=seconds + 60)
        if prof.returncode:
            log(f"{name}: profiler failed: {err.decode()[-500:]}")
        else:
            log(f"{name}: profile in {ctx.profile}")


def measure(ctx: Ctx, name: str, args: argparse.Namespace, client_core: str, body_file: Path) -> dict[str, Any]:
    log(f"{name}: starting")
    t0 = time.monotonic()
    running = STARTERS[name](ctx)
    log(f"{name}: {running.version}, in force after {time.monotonic() - t0:.0f}s")
    version = running.version + (f" x{ctx.replicas}" if ctx.replicas > 1 and running.proc is not None else "")
    out: dict[str, Any] = {"version": version, "reviews_per_core": None, "cpu_s_per_1000": None,
                           "create": {}}
    try:
        servers = [p.pid for p in (running.proc, *running.replicas) if p is not None]
        apiserver = ctx.kube.procs["kube-apiserver"].pid
        for c in CONCURRENCY:
            creates(ctx, c, 2)  # warm-up
            before = scrape(ctx.kube)
            cpu0 = tree_cpu_seconds(apiserver), sum(map(tree_cpu_seconds, servers))
            r = creates(ctx, c, args.create_seconds)
            cpu1 = tree_cpu_seconds(apiserver), sum(map(tree_cpu_seconds, servers))
            out.setdefault("admission", {})[str(c)] = admission_breakdown(before, scrape(ctx.kube))
            # errors: creates refused (HTTP >= 400: a webhook's timeout, say) or left unanswered
            done = max(r["rps"] * args.create_seconds, 1)
            out["create"][str(c)] = {"p50": round(r["p50"], 2), "p99": round(r["p99"], 2),
                                     "mean": round(r["mean"], 2), "per_s": round(r["rps"]), "errors": r["errors"],
                                     # CPU ms per create: the API server's, the webhook servers'
                                     "cpu_ms": {"apiserver": round((cpu1[0] - cpu0[0]) / done * 1000, 3),
                                                "webhooks": round((cpu1[1] - cpu0[1]) / done * 1000, 3)}}
            log(f"{name}: create x{c}: {out['create'][str(c)]}")
            log(f"{name}: admission per create x{c}: {json.dumps(out['admission'][str(c)])}")
        if running.review_url is not None and running.proc is not None and ctx.replicas == 1 and not args.creates_only:
            body = body_file.read_bytes()
            answer = review_once(running.review_url, body)
            if not answer.get("allowed") or (name != "noop" and "patch" not in answer):
                raise RuntimeError(f"{name} did not mutate the review: {json.dumps(answer)[:500]}")
            patch = json.loads(base64.b64decode(answer.get("patch", "W10=")))
            out["patch_ops"] = len(patch)
            # the validating review: the same Pod as this system's mutation left it
            review = json.loads(body)
            review["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"], patch)
            validate_file = ctx.work / f"{name}.validate.json"
            validate_file.write_text(json.dumps(review))
            if running.validate_url is not None:
                answer = review_once(running.validate_url, validate_file.read_bytes())
                if not answer.get("allowed"):
                    raise RuntimeError(f"{name} denied its own mutated Pod: {json.dumps(answer)[:500]}")
            with pinned(client_core), profiling(ctx, name, running, args.duration + 2):
                sat = saturation(running.review_url, body_file, duration=args.duration, core=client_core)
                # fixed: --rate, or half the saturation rate for a server that cannot do twice that
                rate = min(args.rate, sat["rps"] / 2)
                cpu, n = fixed_rate(running.review_url, body, rate=rate, seconds=args.fixed_seconds,
                                    pid=running.proc.pid)
                vsat = (saturation(running.validate_url, validate_file, duration=args.duration, core=client_core)
                        if running.validate_url is not None else None)
            out["reviews_per_core"] = round(sat["rps"])
            out["saturation"] = {k: round(v, 2) for k, v in sat.items()}
            out["cpu_s_per_1000"] = round(cpu / n * 1000, 3)
            out["fixed_rate"] = round(rate, 1)
            log(f"{name}: {out['reviews_per_core']} reviews/s at p99 {sat['p99']:.1f} ms "
                f"({sat['connections']:.0f} conns, {sat['errors']:.0f} errors); "
                f"{out['cpu_s_per_1000']} CPU-s per 1000 at {rate:.0f}/s")
            if vsat is not None:
                out["validate_reviews_per_core"] = round(vsat["rps"])
                out["validate_saturation"] = {k: round(v, 2) for k, v in vsat.items()}
                log(f"{name}: validating: {out['validate_reviews_per_core']} reviews/s at p99 {vsat['p99']:.1f} ms "
                    f"({vsat['connections']:.0f} conns, {vsat['errors']:.0f} errors)")
    finally:
        running.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print only the results as JSON")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, in order (default: all)")
    ap.add_argument("--create-seconds", type=int, default=10, help="seconds of Pod creates per concurrency")
    ap.add_argument("--duration", type=int, default=10, help="seconds of saturation per system")
    ap.add_argument("--rate", type=float, default=50, help="reviews/s of the fixed-rate CPU measure")
    ap.add_argument("--fixed-seconds", type=float, default=20, help="seconds of the fixed-rate CPU measure")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over all systems; medians are reported")
    ap.add_argument("--profile", type=Path, help="write a CPU profile of each server's saturation run here "
                    "(pprof for the Go peers, py-spy - $PYSPY, else beside this Python (make bench-tools), else on PATH - "
                    "for the Python servers); "
                    "profiling costs CPU: measure without it")
    ap.add_argument("--creates-only", action="store_true", help="measure Pod creates only, not the webhook alone")
    ap.add_argument("--replicas", type=int, default=1,
                    help="server processes per system (batchgate --workers, the no-op pairs SO_REUSEPORT copies, "
                         "the Go peers GOMAXPROCS), free on every core, as a Deployment's replicas share a "
                         "node; the webhook-alone figures are measured only with 1 (pinned to one core)")
    ap.add_argument("--save", help="also write every round's figures, as JSON, to this file")
    ap.add_argument("--fixture", default=str(FIXTURES / "pod-create-by-namespace-user.mutate.json"))
    ap.add_argument("--baseline", type=Path, help="another checkout of batchgate (`git archive main | tar -x -C DIR`), "
                    "measured as system batchgate-base (its server, bundle and admission policies; this checkout's "
                    "webhook configurations) in the same run as this one: name it in --systems")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(STARTERS):
        ap.error(f"unknown systems {sorted(unknown)}; have {', '.join(STARTERS)}")
    if {"batchgate-base", "policies-base"} & set(systems) and args.baseline is None:
        ap.error("batchgate-base and policies-base need --baseline DIR")
    peers = [s for s in systems if s in ("kyverno", "gatekeeper")]
    peers_dir = None
    if peers:
        log(f"building or finding {', '.join(peers)} (bench/peers/build.sh)")
        built = subprocess.run(["bash", str(PEERS / "build.sh"), *peers], stdout=subprocess.PIPE, text=True)
        if built.returncode != 0:
            log("building the peers failed (above)")
            return 1
        peers_dir = Path(built.stdout.strip().splitlines()[-1])
    cpus = sorted(os.sched_getaffinity(0))
    server_core, client_core = str(cpus[0]), str(cpus[-1])
    if args.replicas > 1:
        server_core = ",".join(map(str, cpus))
    work = Path(tempfile.mkdtemp(prefix="batchgate-bench-peers-"))
    certs = work / "certs"
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--cert-dir", str(certs)], check=True,
                   capture_output=True, cwd=ROOT)
    body_file = Path(args.fixture)
    review = json.loads(body_file.read_text())
    kube = cluster.LocalCluster(cluster.find_binaries()).start()
    results: dict[str, Any] = {}
    try:
        apply_manifests(kube)
        wait_crd_established(kube, "scavengerjobs.batchgate.io")
        namespace = kube.create_namespace(prefix="bench")
        # the fixture's namespace, which the peers look up
        kube.create_namespace(review["request"]["namespace"], edit_users=())
        ca = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
        ctx = Ctx(kube=kube, namespace=namespace, work=work, certs=certs, ca_bundle=ca, peers_dir=peers_dir,
                  core=server_core, batchgate_configs=webhook_configurations(ca, url="https://unused"),
                  profile=args.profile, batchgate_policies=batchgate_policies(ROOT),
                  baseline=args.baseline.resolve() if args.baseline else None, replicas=args.replicas)
        log(f"Kubernetes {kube.get('/version')['gitVersion']}; webhooks on core {server_core}, "
            f"wrk and the fixed-rate client on core {client_core}; load average {os.getloadavg()[0]:.1f}")
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
        for round_ in range(args.rounds):
            for name in systems:
                if runs[name] and "error" in runs[name][-1]:
                    continue  # it failed once: it is reported, not retried
                log(f"round {round_ + 1}/{args.rounds}")
                try:
                    runs[name].append(measure(ctx, name, args, client_core, body_file))
                except Exception as e:  # a peer that will not run here is reported, the rest measured
                    log(f"{name}: FAILED: {e}")
                    runs[name].append({"version": None, "error": str(e)[:2000]})
        results = {name: combine(rs) for name, rs in runs.items()}
        log(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        kube.stop()
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "rounds"} for k, v in results.items()}, indent=2))
    else:
        report(results)
    return 0


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's figures: the median of each over the rounds (the rounds' own in ``rounds``)."""
    if "error" in rounds[-1]:
        return rounds[-1]

    def med(get: Callable[[dict[str, Any]], Any], digits: int | None = 2) -> Any:
        xs = [get(r) for r in rounds]
        return None if None in xs else round(statistics.median(xs), digits)

    out: dict[str, Any] = {"version": rounds[0]["version"],
                           "reviews_per_core": med(lambda r: r["reviews_per_core"], None),
                           "cpu_s_per_1000": med(lambda r: r["cpu_s_per_1000"], 3),
                           "create": {c: {k: med(lambda r, c=c, k=k: r["create"][c][k]) for k in ("p50", "p99", "mean")}
                                      for c in rounds[0]["create"]}}
    for c, figures in out["create"].items():
        figures["errors"] = sum(r["create"][c].get("errors", 0) for r in rounds)
        if all("cpu_ms" in r["create"][c] for r in rounds):
            figures["cpu_ms"] = {k: med(lambda r, c=c, k=k: r["create"][c]["cpu_ms"][k], 3) for k in ("apiserver", "webhooks")}
    if all("admission" in r for r in rounds):
        out["admission"] = median_tree([r["admission"] for r in rounds])
    if "validate_reviews_per_core" in rounds[0]:
        out["validate_reviews_per_core"] = med(lambda r: r["validate_reviews_per_core"], None)
    out["rounds"] = rounds
    return out


def median_tree(xs: list[Any]) -> Any:
    """The median of each number at the same place in several nested dicts (a key missing in
    some rounds: the median of the rounds that have it)."""
    if all(isinstance(x, dict) for x in xs):
        return {k: median_tree([x[k] for x in xs if k in x]) for k in sorted({k for x in xs for k in x})}
    return round(statistics.median(xs), 3)


def report(results: dict[str, Any]) -> None:
    def num(r: dict[str, Any], key: str, fmt: str) -> str:
        return "-" if r.get(key) is None else format(r[key], fmt)

    print(f"{'system':<11} {'version':<42} {'mutate/core':>11} {'validate/core':>13} {'CPU-s/1000':>10}  "
          f"{'create x1 p50/p99/mean':>23}  {'create x16 p50/p99/mean':>24}")
    for name, r in results.items():
        if r.get("error"):
            print(f"{name:<11} FAILED: {r['error'].splitlines()[0][:150]}")
            continue
        cells = ["/".join(f"{r['create'][c][k]:.1f}" for k in ("p50", "p99", "mean")) for c in ("1", "16")]
        print(f"{name:<11} {r['version']:<42} {num(r, 'reviews_per_core', ','):>11} "
              f"{num(r, 'validate_reviews_per_core', ','):>13} {num(r, 'cpu_s_per_1000', '.3f'):>10}  "
              f"{cells[0]:>23}  {cells[1]:>24}")
    print("(reviews per second on one core at p99 < 100 ms; CPU seconds per 1,000 mutating reviews at a fixed "
          "rate; Pod create through the API server in ms at 1 and 16 concurrent clients)")
    print("\nwhere a create's time goes at 1 client, per create, from the API server's metrics (ms; x N: runs or "
          "calls per create; webhooks: ms per call):")
    for name, r in results.items():
        a = (r.get("admission") or {}).get("1")
        if not a:
            continue
        steps = ", ".join(f"{k} {v['ms']:.2f} (x{v['runs']:g})" for k, v in a["steps"].items())
        hooks = ", ".join(f"{k} {v['ms']:.2f} (x{v['calls']:g})" for k, v in a["webhooks"].items())
        print(f"{name:<11} request {a['request_ms']:.2f}; steps: {steps}" + (f"; webhooks: {hooks}" if hooks else ""))


if __name__ == "__main__":
    sys.exit(main())
