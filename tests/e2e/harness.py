"""The real batchgate webhook, wired into the e2e API server as a cluster would have it, and
the helpers the tests share. The fixtures that use it are in ``conftest.py``:

* ``webhook_server`` (session): ``python -m webhook serve`` on a free loopback
  port, with a temporary copy of ``policies/`` and a generated CA; the cluster
  objects of ``manifests/`` a deployment brings (PriorityClasses, the
  ScavengerJob CRD, the RBAC that lets ``edit`` users create ScavengerJobs, ...)
  minus the Deployments; and the two webhook configurations rendered from
  ``manifests/`` by :func:`webhook.generate.webhook_configurations`, pointed at
  the local server. On Kubernetes < 1.21 the system namespaces get the
  ``batchgate.io/admission=disabled`` label, as docs/deploy.md tells admins.
  Before the fixture returns, a server-side dry-run Pod create has come back
  mutated: the API server really calls the webhook.
* ``module_namespace`` (module): one ordinary user namespace (no labels; alice
  and bob have ``edit``) shared by a module's tests, which use unique names.

Helpers for the tests: object builders, :func:`predict` (what
``batchgate check`` decides for the same request) and
:func:`assert_matches_prediction` (the stored object carries exactly the
batchgate fields the offline dry run predicts), :func:`expect_denied`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    IDENTITIES,
    REPO_ROOT,
    KubeApiError,
    _set_pdeathsig,
    free_port,
    tail,
    terminate_group,
    wait_for,
)

from tests.conftest import kustomize
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.generate import webhook_configurations
from webhook.offline import Caller, check_object
from webhook.rules import load_bundle
from webhook.seal import Keyring, parse_keyring
from webhook.units import parse_quantity, parse_time

PAUSE = "registry.k8s.io/pause:3.2"
QUEUE_LABEL = "batchgate.io/queue"
TIME_LIMIT = "batchgate.io/time-limit"
DISABLED_LABEL = "batchgate.io/admission"
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
# Kinds of manifests/ the e2e cluster gets. Deployments are left out: no kubelet
# would run their pods; the webhook configurations are registered with a URL
# client config instead (the Service has no endpoints here).
APPLIED_KINDS = {
    # kind: (API path prefix, plural, namespaced)
    "Namespace": ("/api/v1", "namespaces", False),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "PodDisruptionBudget": (None, "poddisruptionbudgets", True),  # policy/v1 or v1beta1
}
# Not applied with the rest of manifests/: the webhook runs as a process here and is registered by
# ``serving``; the ValidatingAdmissionPolicies (manifests/admission-policies.yaml) stay out of the
# e2e session's cluster and the benchmarks' (tests that change a pod template while the webhook is
# down, test_seal.py, rely on what they forbid): test_admission_policies.py and bench_apiserver.py
# install them for their own runs and remove them after.
NOT_APPLIED = {"Deployment", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
               "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


# --------------------------------------------------------------------------
# the webhook server process


class WebhookServer:
    """``python -m webhook serve`` as a child process (its own process group)."""

    def __init__(self, workdir: Path, *, policies: Path, port: int | None = None, args: tuple[str, ...] = (),
                 seal_keys: Path | None = None):
        self.workdir = workdir
        self.policies = policies
        self.args = args  # more `serve` flags
        self.cert_dir = workdir / "certs"
        # The admission seal's keys: by default made in cert_dir by the server; a second server that
        # judges what the session's server sealed must share its file.
        self.seal_keys = seal_keys
        self.port = port or free_port()
        self.log = workdir / "webhook.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode((self.cert_dir / "ca.crt").read_bytes()).decode()

    def start(self, timeout: float = 30) -> WebhookServer:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("webhook server already running")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env.pop("KUBECONFIG", None)
        args = [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1",
                "--port", str(self.port), "--policies", str(self.policies),
                "--cert-dir", str(self.cert_dir), *self.args]
        if self.seal_keys is not None:
            args += ["--seal-keys", str(self.seal_keys)]
        with open(self.log, "ab") as f:
            f.write(f"# {' '.join(args)}\n".encode())
            f.flush()
            self.proc = subprocess.Popen(
                args, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=f,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_set_pdeathsig,
            )
        self.wait_ready(timeout)
        return self

    def _get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        ctx = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            self.check_alive()
            if (self.cert_dir / "ca.crt").is_file():
                try:
                    status, body = self._get("/readyz")
                    if status == 200:
                        return
                    last = f"HTTP {status}: {body.strip()}"
                except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise RuntimeError(f"webhook not ready at {self.url}/readyz within {timeout:.0f}s "
                                   f"(last: {last})\n{tail(self.log)}")
            time.sleep(0.1)

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"webhook server is not running (exit code {code})\n{tail(self.log)}")

    def refuses_connections(self) -> bool:
        try:
            self._get("/healthz", timeout=2)
        except ConnectionRefusedError:
            return True
        except (OSError, http.client.HTTPException):
            return False
        return False

    def stop(self) -> None:
        """SIGTERM the server's process group, wait for it, SIGKILL if it lingers."""
        p, self.proc = self.proc, None
        if p is not None:
            terminate_group(p, grace=15)

    def metrics(self) -> dict[str, float]:
        """Prometheus samples, ``'name{labels}' -> value`` (labels as exposed)."""
        status, body = self._get("/metrics")
        assert status == 200, body
        out: dict[str, float] = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def mutate_outcomes(self) -> dict[str, float]:
        """CREATE requests on /mutate by outcome (allowed, mutated, denied)."""
        m = self.metrics()
        return {o: m.get(f'batchgate_admission_requests_total{{endpoint="/mutate",'
                         f'operation="CREATE",outcome="{o}"}}', 0.0)
                for o in ("allowed", "mutated", "denied")}


# --------------------------------------------------------------------------
# the session fixture


class Webhook:
    """What the tests get from ``webhook_server``."""

    def __init__(self, kube: Any, server: WebhookServer, bundle: Bundle,
                 mutating: dict[str, Any], validating: dict[str, Any], probe_namespace: str):
        self.kube = kube
        self.server = server
        self.bundle = bundle
        self.mutating = mutating
        self.validating = validating
        self.probe_namespace = probe_namespace

    @property
    def url(self) -> str:
        return self.server.url

    def register(self) -> None:
        self.kube.register_webhooks(self.mutating, self.validating)

    def probe(self) -> dict[str, Any]:
        """A server-side dry-run Pod create as alice in the probe namespace."""
        name = f"probe-{uuid.uuid4().hex[:6]}"
        return self.kube.request(
            "POST", f"/api/v1/namespaces/{self.probe_namespace}/pods", pod(name),
            as_user="alice", query={"dryRun": "All"})

    def wait_effective(self, timeout: float = 30) -> dict[str, Any]:
        """Until a dry-run Pod create comes back mutated by batchgate."""
        last: list[str] = []

        def mutated() -> dict[str, Any] | None:
            try:
                got = self.probe()
            except KubeApiError as exc:
                last[:] = [str(exc)]
                return None
            labels = got["metadata"].get("labels") or {}
            last[:] = [f"labels {labels}"]
            return got if QUEUE_LABEL in labels else None

        return wait_for(mutated, timeout, interval=0.2,
                        message=lambda: f"the API server to call the webhook (last: {last})")



@contextlib.contextmanager
def serving(kube: Any, workdir: Path, policies: Path, *, bundle: Bundle | None = None,
            probe_prefix: str = "e2e-probe") -> Iterator[Webhook]:
    """``batchgate serve`` on ``policies``, registered as the cluster's admission webhooks and in
    effect (a dry-run Pod create as alice comes back mutated) for the ``with`` block; then
    unregistered and stopped, and its probe namespace deleted. The e2e session's webhook and the
    benchmarks that run a control plane (bench_release, bench_scale) start it so."""
    probe_ns = kube.create_namespace(prefix=probe_prefix)
    server = WebhookServer(workdir, policies=policies).start()
    mutating, validating = webhook_configurations(server.ca_bundle, url=server.url)
    hook = Webhook(kube, server, bundle if bundle is not None else load_bundle(policies), mutating, validating,
                   probe_ns)
    try:
        hook.register()
        hook.wait_effective()
        yield hook
    finally:
        with contextlib.suppress(Exception):
            kube.delete_webhooks(mutating=mutating["metadata"]["name"], validating=validating["metadata"]["name"])
        server.stop()
        with contextlib.suppress(Exception):
            kube.delete_namespace(probe_ns)

def apply_object(kube: Any, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Create ``obj``, or replace it when it exists (as ``kubectl apply`` would end up)."""
    kind = obj["kind"]
    prefix, plural, namespaced = APPLIED_KINDS[kind]
    if prefix is None:
        prefix = f"/apis/{obj['apiVersion']}"
    meta = obj["metadata"]
    base = prefix + (f"/namespaces/{meta['namespace']}" if namespaced else "") + f"/{plural}"
    try:
        return kube.create(base, dict(obj))  # type: ignore[no-any-return]
    except KubeApiError as exc:
        if exc.status != 409:
            raise
    cur = kube.get(f"{base}/{meta['name']}")
    body = copy.deepcopy(dict(obj))
    body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
    if kind == "Service":  # clusterIP is immutable and allocated
        body.setdefault("spec", {})["clusterIP"] = cur["spec"].get("clusterIP")
    return kube.request("PUT", f"{base}/{meta['name']}", body)  # type: ignore[no-any-return]


def apply_manifests(kube: Any) -> list[dict[str, Any]]:
    """The cluster-side objects of manifests/."""
    objects = kustomize(REPO_ROOT / "manifests")
    kinds = {o["kind"] for o in objects}
    unknown = kinds - set(APPLIED_KINDS) - NOT_APPLIED
    assert not unknown, f"manifests/ has kinds the e2e fixture does not know how to apply: {unknown}"
    order = list(APPLIED_KINDS)
    applied = []
    for obj in sorted((o for o in objects if o["kind"] in APPLIED_KINDS),
                      key=lambda o: order.index(o["kind"])):
        applied.append(apply_object(kube, obj))
    return applied


def wait_crd_established(kube: Any, name: str, timeout: float = 30) -> None:
    def established() -> bool:
        crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in crd.get("status", {}).get("conditions") or [])

    wait_for(established, timeout, message=f"CRD {name} to be established")


def label_system_namespaces(kube: Any) -> None:
    """docs/deploy.md, Kubernetes 1.20: the system namespaces opt out by label."""
    for ns in SYSTEM_NAMESPACES:
        with contextlib.suppress(KubeApiError):  # kube-public may not exist yet
            kube.patch(f"/api/v1/namespaces/{ns}",
                       {"metadata": {"labels": {DISABLED_LABEL: "disabled"}}})


class Reconciler:
    """A ``batchgate reconcile`` process the ``reconciler`` fixture started."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, identity: str, *, leader_elect: bool = True) -> None:
        self.proc, self.log, self.identity, self.leader_elect = proc, log, identity, leader_elect

    def wait_ready(self, timeout: float = 90) -> Reconciler:
        """Until its cache is synced and, electing a leader, it leads: from then on its passes act.
        Starting a Python process takes seconds, many on a busy machine: a test whose clock (a
        time limit, a window's start) must not run out before the reconciler looks waits for this
        before starting that clock."""
        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"reconciler {self.identity} exited ({self.proc.returncode}):\n{self.logs()}")
            text = self.log.read_text(errors="replace")
            return "cache synced" in text and (not self.leader_elect or "acquired leadership" in text)

        wait_for(ready, timeout, message=lambda: f"reconciler {self.identity} to be ready; log:\n{self.logs()}")
        return self

    def kill(self, sig: int = signal.SIGKILL) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def logs(self, lines: int = 60) -> str:
        return tail(self.log, lines)


def start_reconciler(kube: Any, namespace: str, log: Path, *args: str, identity: str = "r1",
                     env: Mapping[str, str] | None = None, cluster_wide: bool = False,
                     kubeconfig: str | None = None, lease_namespace: str | None = None) -> Reconciler:
    """``batchgate reconcile`` on ``namespace`` (its lease there too, unless ``lease_namespace``;
    ``cluster_wide``: every namespace, the lease still there) as the admin (or whoever
    ``kubeconfig`` names), output to ``log``; ``args`` add flags (``--policies``, ...)."""
    scope = [] if cluster_wide else ["--namespace", namespace]
    cmd = [sys.executable, "-m", "webhook", "--log-level", "INFO", "reconcile",
           "--kubeconfig", kubeconfig or kube.kubeconfig("admin"), *scope,
           "--lease-namespace", lease_namespace or namespace, "--identity", identity, *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})})
    return Reconciler(proc, log, identity, leader_elect="--no-leader-elect" not in args)


def stop_reconcilers(started: list[Reconciler], lines: int = 60) -> None:
    """Kill every process a fixture started; their logs are printed (shown when the test fails)."""
    for r in started:
        with contextlib.suppress(Exception):
            r.kill()
        print(f"--- {r.log.name} (exit {r.proc.returncode}) ---\n{r.logs(lines)}")


# --------------------------------------------------------------------------
# objects


def attempt(fn: Callable[[], Any]) -> tuple[int, str]:
    """(HTTP status, message) of one API call: 200 and "" when it succeeded."""
    try:
        fn()
    except KubeApiError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return exc.status, str(body.get("message", exc))
    return 200, ""


def unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:5]}"


# Nodes a test makes for its own pods carry this taint, valued with the test's tag, and only that
# test's pods tolerate it. A label keeps the test's pods on its nodes, not others off them: other
# modules' pods still pending (their namespace being deleted) would land there, or one of higher
# priority make kube-scheduler preempt the test's pods, which, with no kubelet, stay Terminating.
OWN_NODES = "batchgate.io/e2e-own"


def own_taint(tag: str) -> list[dict[str, str]]:
    """The taints (for ``create_node``) of a node for the pods of the test tagged ``tag`` alone."""
    return [{"key": OWN_NODES, "value": tag, "effect": "NoSchedule"}]


def own_tolerations(tag: str) -> list[dict[str, str]]:
    """What the pods of the test tagged ``tag`` tolerate to run on its nodes (``own_taint``)."""
    return [{"key": OWN_NODES, "operator": "Equal", "value": tag, "effect": "NoSchedule"}]


def container(name: str = "main", *, cpu: str | None = None, memory: str | None = None,
              limits: bool = True, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": PAUSE, **extra}
    res: dict[str, Any] = {}
    if cpu or memory:
        amounts = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
        res["requests"] = dict(amounts)
        if limits:
            res["limits"] = dict(amounts)
        c["resources"] = res
    return c


def pod(name: str, *, labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None, containers: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": containers or [container()], "restartPolicy": "Never", **spec},
    }


def job(name: str | None, *, parallelism: int = 1, completions: int | None = None,
        labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
        template_labels: Mapping[str, str] | None = None, generate_name: str | None = None,
        containers: list[dict[str, Any]] | None = None, **pod_spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name} if name else {"generateName": generate_name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    template: dict[str, Any] = {"spec": {"containers": containers or [container()],
                                         "restartPolicy": "Never", **pod_spec}}
    if template_labels:
        template["metadata"] = {"labels": dict(template_labels)}
    spec: dict[str, Any] = {"parallelism": parallelism, "backoffLimit": 0, "template": template}
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def cronjob(name: str, *, parallelism: int = 1, labels: Mapping[str, str] | None = None,
            job_labels: Mapping[str, str] | None = None, api_version: str = "batch/v1",
            **pod_spec: Any) -> dict[str, Any]:
    """A CronJob that will not fire during a test run (batch/v1)."""
    inner = job("unused", parallelism=parallelism, **pod_spec)["spec"]
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    job_template: dict[str, Any] = {"spec": inner}
    if job_labels:
        job_template["metadata"] = {"labels": dict(job_labels)}
    return {"apiVersion": api_version, "kind": "CronJob", "metadata": meta,
            "spec": {"schedule": "0 0 1 1 *", "jobTemplate": job_template}}


GANG = {"batchgate.io/gang": "true"}  # a Job's label asking for its pods to be a gang


def deployment(name: str, *, replicas: int = 1, labels: Mapping[str, str] | None = None,
               **pod_spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [container()], **pod_spec}}}}


def pods_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def jobs_path(ns: str, name: str = "") -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


def path_of(obj: Mapping[str, Any], ns: str) -> str:
    kind = obj["kind"]
    plural = {"Pod": "pods", "Job": "jobs", "CronJob": "cronjobs", "ScavengerJob": "scavengerjobs",
              "Deployment": "deployments", "ReplicaSet": "replicasets", "StatefulSet": "statefulsets",
              "DaemonSet": "daemonsets",
              "ConfigMap": "configmaps"}[kind]
    api = obj["apiVersion"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    return f"{base}/namespaces/{ns}/{plural}"


def create(kube: Any, ns: str, obj: Mapping[str, Any], *, as_user: str = "alice",
           dry_run: bool = False) -> dict[str, Any]:
    query = {"dryRun": "All"} if dry_run else None
    return kube.request("POST", path_of(obj, ns), dict(obj), as_user=as_user,  # type: ignore[no-any-return]
                        query=query)


def create_and_read(kube: Any, ns: str, obj: Mapping[str, Any], *, as_user: str = "alice") -> dict[str, Any]:
    """Create as ``as_user`` and read back what the API server stored (as admin)."""
    created = create(kube, ns, obj, as_user=as_user)
    return kube.get(f"{path_of(obj, ns)}/{created['metadata']['name']}")  # type: ignore[no-any-return]


def expect_denied(kube: Any, ns: str, obj: Mapping[str, Any], *, as_user: str = "alice",
                  webhook: str = "", status: int | None = None) -> str:
    """Create must fail; returns the API server's message. Checks nothing was stored.

    ``webhook``: the webhook that must have denied (``create.validate.batchgate.io``
    or ``mutate.batchgate.io``); the message then has the form users see:
    ``admission webhook "<webhook>" denied the request: <policy>: <why>``.
    """
    with pytest.raises(KubeApiError) as info:
        create(kube, ns, obj, as_user=as_user)
    exc = info.value
    body = exc.body if isinstance(exc.body, dict) else {}
    message = str(body.get("message", exc))
    if status is not None:
        assert exc.status == status, f"HTTP {exc.status}, expected {status}: {message}"
    if webhook:
        assert f'admission webhook "{webhook}" denied the request: ' in message, message
    name = (obj.get("metadata") or {}).get("name")
    if name:
        assert not kube.exists(f"{path_of(obj, ns)}/{name}"), f"{name} was stored despite: {message}"
    return message


# --------------------------------------------------------------------------
# offline prediction vs. what the cluster stored


def groups_of(user: str) -> tuple[str, ...]:
    return tuple(IDENTITIES[user]) if user in IDENTITIES else ("system:authenticated",)


def predict(hook: Webhook, obj: Mapping[str, Any], *, user: str = "alice",
            namespace: str, operation: str = "CREATE") -> Decision:
    """What ``batchgate check`` (the same engine, offline) decides for this request, sealing with
    the server's keys (so that the admission seal is predicted too)."""
    return check_object(copy.deepcopy(dict(obj)), hook.bundle, Caller(
        operation=operation, username=user, groups=groups_of(user), namespace=namespace),
        keys=seal_keys(hook.server))


def seal_keys(server: WebhookServer) -> Keyring:
    """The admission seal's keys a webhook server runs with."""
    return parse_keyring((server.seal_keys or server.cert_dir / "seal.keys").read_text())


def assert_pod_sealed(hook: Webhook, pod: Mapping[str, Any], ns: str) -> None:
    """A pod a controller made carries its template's admission seal, and it verifies against the
    pod's own fields as the API server stored them (what the webhook checked at its CREATE)."""
    from webhook.seal import projection, verifies
    from webhook.workloads import shape_of

    shape = shape_of("", "Pod")
    assert shape is not None
    value = (pod["metadata"].get("annotations") or {}).get("batchgate.io/admitted")
    assert verifies(seal_keys(hook.server), value, projection(pod, shape, ns)), (pod["metadata"]["name"], value)


# Label and annotation keys the API server and controllers (not batchgate) add: a Job's
# template labels, a Deployment's revision, a ReplicaSet's pod-template-hash, the generation a
# DaemonSet's strategy records.
SERVER_KEYS = {"controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name",
               "deployment.kubernetes.io/revision", "pod-template-hash",
               "deprecated.daemonset.template.generation"}


def batchgate_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Pod, Job or CronJob that batchgate policies write."""
    kind = obj["kind"]
    out: dict[str, Any] = {"metadata": _meta(obj.get("metadata") or {})}
    spec = obj.get("spec") or {}
    if kind == "Pod":
        out["spec"] = _pod_spec(spec)
        return out
    if kind in ("Job", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        tmpl = spec.get("template") or {}
        out["template"] = {"metadata": _meta(tmpl.get("metadata") or {}),
                           "spec": _pod_spec(tmpl.get("spec") or {})}
        return out
    if kind == "CronJob":
        jt = spec.get("jobTemplate") or {}
        tmpl = (jt.get("spec") or {}).get("template") or {}
        out["jobTemplate"] = {"metadata": _meta(jt.get("metadata") or {}),
                              "template": {"metadata": _meta(tmpl.get("metadata") or {}),
                                           "spec": _pod_spec(tmpl.get("spec") or {})}}
        return out
    raise ValueError(f"no batchgate fields known for {kind}")


def _meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    def ours(m: Any) -> dict[str, Any]:
        return {k: v for k, v in (m or {}).items() if k not in SERVER_KEYS}

    return {"labels": ours(meta.get("labels")), "annotations": ours(meta.get("annotations"))}


POD_SPEC_FIELDS = ("priorityClassName", "priority", "preemptionPolicy", "automountServiceAccountToken",
                   "activeDeadlineSeconds", "nodeSelector", "affinity", "volumes", "runtimeClassName")


def _pod_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: spec.get(k) for k in POD_SPEC_FIELDS}
    for key in ("initContainers", "containers"):
        out[key] = [{"name": c.get("name"), "volumeMounts": c.get("volumeMounts"),
                     "resources": c.get("resources")} for c in spec.get(key) or []]
    return out


def assert_matches_prediction(stored: Mapping[str, Any], predicted: Mapping[str, Any], *,
                              server_version: tuple[int, int] = (1, 20)) -> None:
    """The stored object carries exactly the batchgate fields ``predicted`` has.

    Tolerated, because the API server does it after batchgate and the offline
    dry run states it does not simulate the server: defaulted fields inside
    volumes / mounts / affinity terms (e.g. a secret volume's defaultMode), and
    the Priority plugin's ``priority`` / ``preemptionPolicy`` on Pods when the
    prediction has none. Known and documented drift: on Kubernetes < 1.22 the API
    server drops ``namespaceSelector`` from pod (anti-)affinity terms
    (policies/node-selection/README.md).
    """
    want = batchgate_fields(predicted)
    got = batchgate_fields({"kind": predicted["kind"], **stored})  # list items have no kind
    if server_version < (1, 22):
        want = _drop_key(want, "namespaceSelector")
    problems: list[str] = []
    _compare(want, got, "", problems)
    assert not problems, "stored object differs from `batchgate check`'s prediction:\n  " + \
        "\n  ".join(problems)


def _drop_key(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return {k: _drop_key(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [_drop_key(v, key) for v in value]
    return value


def _compare(want: Any, got: Any, path: str, problems: list[str]) -> None:
    exact_maps = path.endswith((".labels", ".annotations", ".nodeSelector")) or path in (
        "metadata.labels", "metadata.annotations")
    if isinstance(want, dict) and isinstance(got, dict):
        if exact_maps and set(want) != set(got):
            problems.append(f"{path}: keys {sorted(set(got) - set(want))} stored but not predicted, "
                            f"{sorted(set(want) - set(got))} predicted but not stored")
        for k, v in want.items():
            sub = f"{path}.{k}" if path else k
            if v is None and k in ("priority", "preemptionPolicy") and path.endswith("spec"):
                continue  # the Priority plugin fills these on every Pod
            _compare(v, got.get(k), sub, problems)
        return
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            problems.append(f"{path}: predicted {len(want)} items {_names(want)}, "
                            f"stored {len(got)} {_names(got)}")
            return
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            _compare(w, g, f"{path}[{i}]", problems)
        return
    if want is None and got in (None, {}, []):
        return
    if ".resources." in path and isinstance(want, str | int) and isinstance(got, str | int):
        if parse_quantity(want) != parse_quantity(got):
            problems.append(f"{path}: predicted {want!r}, stored {got!r}")
        return
    if want != got:
        problems.append(f"{path}: predicted {json.dumps(want)}, stored {json.dumps(got)}")


def _names(items: list[Any]) -> list[Any]:
    return [i.get("name", i) if isinstance(i, dict) else i for i in items]


class Outage:
    """An outage of the shared webhook server, and its end: running again and effective."""

    def __init__(self, hook: Webhook) -> None:
        self.hook = hook

    def end(self) -> None:
        if self.hook.server.proc is None:
            self.hook.server.start()
        self.hook.wait_effective()


# reading back what the reconciler did

DEADLINE = "batchgate.io/deadline"
STARTED = "batchgate.io/started-at"


def gone_or_deleting(kube: Any, path: str, uid: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            obj = kube.get(path)
        except Exception as e:
            if getattr(e, "status", None) == 404:
                return True
            raise
        return obj["metadata"]["uid"] != uid or bool(obj["metadata"].get("deletionTimestamp"))
    return check


def events(kube: Any, ns: str, *, uid: str | None = None, reason: str | None = None) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items
            if (uid is None or e["involvedObject"].get("uid") == uid) and (reason is None or e["reason"] == reason)]


def epoch(ts: str) -> float:
    """Seconds since the epoch of an RFC 3339 timestamp as the API server writes it (webhook.units'
    parser, the reconciler's)."""
    t = parse_time(ts)
    assert t is not None, f"not a timestamp: {ts!r}"
    return t


# -- a module's own validating server ------------------------------------------------------------
def bundle_variant(root: Path, edit: Callable[[dict[str, Any]], None], policies: tuple[str, ...]) -> Path:
    """``root/policies``: the shipped bundle.yaml with ``edit`` applied to its spec, and only the
    named policy folders (a second server that judges what one module tests)."""
    folder = root / "policies"
    folder.mkdir()
    doc = yaml.safe_load((REPO_ROOT / "policies" / "bundle.yaml").read_text())
    edit(doc["spec"])
    (folder / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    for name in policies:
        shutil.copytree(REPO_ROOT / "policies" / name, folder / name)
    return folder


def scoped_validating(server: Any, config: str, hooks: Mapping[str, str], scope: str) -> dict[str, Any]:
    """The validating configuration ``config`` for a module's own ``server``: only the shipped
    webhooks named in ``hooks`` (renamed to their values), each asked only for objects in
    namespaces labelled ``scope: on`` (a Namespace by its own labels), failing closed, so that a
    test cannot pass because this server was not asked."""
    _, validating = webhook_configurations(server.ca_bundle, url=server.url)
    validating["metadata"]["name"] = config
    validating["webhooks"] = [h for h in validating["webhooks"] if h["name"] in hooks]
    for h in validating["webhooks"]:
        if h["name"] == "namespaces.validate.batchgate.io":
            h["objectSelector"] = {"matchLabels": {scope: "on"}}
        else:
            h["namespaceSelector"] = {"matchLabels": {scope: "on"}}
        h["name"] = hooks[h["name"]]
        h["failurePolicy"] = "Fail"
    return validating


# -- in-place resize (pods/resize) --------------------------------------------------------------
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def may_resize(kube: Any, ns: str, user: str) -> bool:
    """SelfSubjectAccessReview: may ``user`` patch pods/resize in ``ns``."""
    r = kube.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "patch", "resource": "pods", "subresource": "resize",
                                        "namespace": ns}}}, as_user=user)
    return bool(r["status"].get("allowed"))


def grant_resize(kube: Any, ns: str, user: str = "alice") -> None:
    """A Role in ``ns`` granting ``user`` pods/resize (what a cluster that hands its tenants in-place
    resize, e.g. for a vertical autoscaler of their own, gives them), in force when this returns."""
    kube.create(f"{RBAC}/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "resize"},
        "rules": [{"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["get", "patch", "update"]}]})
    kube.create(f"{RBAC}/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "resize"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "resize"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    wait_for(lambda: may_resize(kube, ns, user), 30, message=f"{user} may resize pods")


def cpu_to(cpu: str, *, limit: bool = True) -> dict[str, Any]:
    """A strategic merge patch for pods/resize: the main container's cpu request (and limit)."""
    amounts = {"requests": {"cpu": cpu}, **({"limits": {"cpu": cpu}} if limit else {})}
    return {"spec": {"containers": [{"name": "main", "resources": amounts}]}}


def stored_cpu(kube: Any, ns: str, name: str) -> tuple[str, str]:
    res = kube.get(pods_path(ns, name))["spec"]["containers"][0]["resources"]
    return res["requests"]["cpu"], res["limits"]["cpu"]
