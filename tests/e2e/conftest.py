"""Fixtures for the end-to-end tests against a real Kubernetes API server.

* ``kube`` (session): a started ``cluster.LocalCluster`` (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler on 127.0.0.1), or an
  ``ExistingCluster`` when ``USE_EXISTING_CLUSTER=true`` (uses ``$KUBECONFIG``).
* ``namespace`` (function): a fresh namespace name where ``alice`` and ``bob``
  have the ``edit`` ClusterRole; deleted after the test.
* ``admin_client`` / ``alice_client`` / ``bob_client``: ``kubernetes.client.ApiClient``.
* ``webhook_server`` (session): the real ``batchgate serve`` registered with the API server
  as a deployment would have it (``harness.py`` says what it brings);
* ``module_namespace`` (module): one ordinary user namespace shared by a module's tests.
* ``reconciler`` (function): starts ``batchgate reconcile`` processes for the test's namespace
  (killed after it; their logs printed, shown when it fails); ``node``: a big fake Node.
* ``kata_runtime_class`` / ``kata_big_runtime_class`` (session): RuntimeClasses with 250m / 300m
  CPU overhead.

Test modules import their helpers from ``cluster.py`` (the control plane) and
``harness.py`` (the webhook, object builders, predictions); both are assertion-rewritten.

Without binaries the tests are skipped with a message saying how to get
them, except with ``CI=true``, where that is an error.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
pytest.register_assert_rewrite("cluster", "harness")

import cluster as _cluster  # noqa: E402
from cluster import REPO_ROOT, wait_for  # noqa: E402
from harness import (  # noqa: E402
    Outage,
    Reconciler,
    Webhook,
    apply_manifests,
    label_system_namespaces,
    serving,
    start_reconciler,
    stop_reconcilers,
    wait_crd_established,
)

from webhook.rules import load_bundle  # noqa: E402

E2E_DIR = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs a real kube-apiserver (tests/e2e)")
    config.addinivalue_line(
        "markers",
        "namespace_labels(labels): labels for the namespace the `namespace` fixture makes",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kube():
    """The cluster handle for the whole session (see tests/e2e/cluster.py)."""
    if _cluster.use_existing_cluster():
        if not os.environ.get("KUBECONFIG"):
            pytest.fail("USE_EXISTING_CLUSTER=true needs KUBECONFIG", pytrace=False)
        c = _cluster.ExistingCluster()
        try:
            yield c
        finally:
            c.stop()
        return
    try:
        bindir = _cluster.find_binaries()
    except _cluster.BinariesUnavailable as exc:
        _cluster.unavailable(str(exc))
    c = _cluster.LocalCluster(bindir)
    try:
        c.start()
    except _cluster.ClusterStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def namespace(kube, request):
    """A fresh namespace (name yielded) with RoleBinding ``batchgate-e2e-edit``
    giving alice and bob ClusterRole ``edit``; deleted afterwards. Labels come
    from a ``@pytest.mark.namespace_labels({...})`` marker, if any."""
    marker = request.node.get_closest_marker("namespace_labels")
    labels = dict(marker.args[0]) if marker and marker.args else {}
    base = request.node.name.split("[")[0].lower().replace("_", "-")
    prefix = ("e2e-" + base.removeprefix("test-"))[:40].rstrip("-")
    name = kube.create_namespace(prefix=prefix, labels=labels)
    try:
        yield name
    finally:
        try:
            kube.delete_namespace(name)
        except Exception as exc:  # don't hide the test's own failure
            print(f"warning: deleting namespace {name}: {exc}", file=sys.stderr)


@pytest.fixture
def admin_client(kube):
    return kube.api_client("admin")


@pytest.fixture
def alice_client(kube):
    return kube.api_client("alice")


@pytest.fixture
def bob_client(kube):
    return kube.api_client("bob")


QUEUED = "queued"  # the gated queue of the e2e bundle (test_queue.py)


def ungate_batch_add_queued(bundle_yaml: Path, *, state: str = "open") -> None:
    """The e2e bundle: the shipped one, but ``batch`` ungated, so that tests of everything else run
    their Jobs without a reconciler releasing them, and a gated queue ``queued`` (the shipped
    ``batch`` as it is, with usage sampled every 5 s) for the queue's own tests."""
    text = bundle_yaml.read_text()
    batch = "    - name: batch\n      priorityClass: batchgate-batch\n      timeLimit: {default: 24h, max: 7d}\n"
    assert batch in text, "policies/bundle.yaml: the batch queue is not declared as the e2e bundle expects"
    text = text.replace(batch, batch + "      gated: false\n"
                        f"    - name: {QUEUED}\n      priorityClass: batchgate-batch\n"
                        f"      timeLimit: {{default: 24h, max: 7d}}\n      state: {state}\n")
    assert "    interval: 1m\n" in text
    bundle_yaml.write_text(text.replace("    interval: 1m\n", "    interval: 5s\n"))


@pytest.fixture(scope="session")
def webhook_server(kube: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    workdir = tmp_path_factory.mktemp("webhook")
    policies = workdir / "policies"
    shutil.copytree(REPO_ROOT / "policies", policies)
    ungate_batch_add_queued(policies / "bundle.yaml")
    bundle = load_bundle(policies)

    if kube.server_version() < (1, 21):
        label_system_namespaces(kube)
    apply_manifests(kube)
    wait_crd_established(kube, "scavengerjobs.batchgate.io")

    with serving(kube, workdir, policies, bundle=bundle) as hook:
        # The aggregated ClusterRole (rbac-users.yaml) lets `edit` users manage ScavengerJobs.
        wait_for(lambda: kube.can_i("create", "scavengerjobs", as_user="alice",
                                    namespace=hook.probe_namespace, group="batchgate.io"),
                 30, message="alice to be allowed to create ScavengerJobs (role aggregation)")
        yield hook


@pytest.fixture(scope="module")
def module_namespace(kube: Any, webhook_server: Webhook, request: pytest.FixtureRequest) -> Iterator[str]:
    """An ordinary user namespace for the whole module (tests use unique object names)."""
    stem = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    name = kube.create_namespace(prefix=f"e2e-{stem}"[:40])
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            kube.delete_namespace(name)


@pytest.fixture
def reconciler(kube: Any, namespace: str, tmp_path: Path) -> Iterator[Callable[..., Reconciler]]:
    """Start ``batchgate reconcile`` processes for this test's namespace; all are killed after it."""
    started: list[Reconciler] = []

    def start(identity: str = "r1", *, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Reconciler:
        log = tmp_path / f"reconciler-{identity}-{len(started)}.log"
        started.append(start_reconciler(kube, namespace, log, "--warning-lead", "4s", "--resync", "30s", *args,
                                         identity=identity, env=env))
        return started[-1]

    yield start
    stop_reconcilers(started)


@pytest.fixture
def outage(webhook_server: Webhook) -> Iterator[Outage]:
    """Stop the shared webhook server in a test (``webhook_server.server.stop()``); whatever
    happens, it runs again and is effective when the test ends."""
    o = Outage(webhook_server)
    try:
        yield o
    finally:
        o.end()


@pytest.fixture
def namespace_manager(kube: Any) -> Iterator[str]:
    """alice may create, label and delete Namespaces (cluster-wide namespace self-service); she is
    no batchgate admin."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    name = f"e2e-namespace-manager-{uuid.uuid4().hex[:6]}"
    kube.create(f"{rbac}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"],
                   "verbs": ["get", "list", "create", "update", "patch", "delete"]}]})
    kube.create(f"{rbac}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]})
    wait_for(lambda: kube.can_i("patch", "namespaces", as_user="alice"), 30, message="alice may patch namespaces")
    yield "alice"
    for kind in ("clusterrolebindings", "clusterroles"):
        with contextlib.suppress(Exception):
            kube.delete(f"{rbac}/{kind}/{name}")


@pytest.fixture
def node(kube: Any) -> Iterator[str]:
    """A fake Node with room for anything (64 CPUs, 256Gi), deleted after the test."""
    name = f"bg-node-{uuid.uuid4().hex[:6]}"
    kube.create_node(name, cpu="64", memory="256Gi")
    yield name
    with contextlib.suppress(Exception):
        kube.delete_node(name)


def runtime_class(kube: Any, name: str, cpu: str) -> Iterator[dict[str, Any]]:
    """A RuntimeClass ``name`` whose pods carry ``cpu`` of VM overhead (no runtime behind it:
    the RuntimeClass admission plugin copies the overhead into each Pod it stores)."""
    api = "node.k8s.io/v1"
    body = {"apiVersion": api, "kind": "RuntimeClass", "metadata": {"name": name},
            "handler": name, "overhead": {"podFixed": {"cpu": cpu, "memory": "160Mi"}}}
    try:
        kube.create(f"/apis/{api}/runtimeclasses", body)
    except _cluster.KubeApiError as exc:
        if exc.status != 409:
            raise
    yield body
    with contextlib.suppress(Exception):
        kube.delete(f"/apis/{api}/runtimeclasses/{name}")


@pytest.fixture(scope="session")
def kata_runtime_class(kube: Any) -> Iterator[dict[str, Any]]:
    """RuntimeClass ``kata``, 250m CPU overhead: what the shipped kata-cpu policy declares."""
    yield from runtime_class(kube, "kata", "250m")


@pytest.fixture(scope="session")
def kata_big_runtime_class(kube: Any) -> Iterator[dict[str, Any]]:
    """RuntimeClass ``kata-big``, 300m CPU overhead: more than the policy declares for kata*."""
    yield from runtime_class(kube, "kata-big", "300m")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failing e2e test, attach the control-plane log tails to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "kube" in getattr(item, "fixturenames", ()):
        c = item.funcargs.get("kube") if hasattr(item, "funcargs") else None
        if c is not None:
            try:
                c.check_alive()
                tails = c.log_tails(lines=25)
            except Exception as exc:  # a dead component says the most
                tails = str(exc)
            if tails:
                report.sections.append(("kube control plane logs", tails))
