"""Fixtures for the end-to-end tests against a real Kubernetes API server.

* ``kube`` (session): a started ``cluster.LocalCluster`` (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler on 127.0.0.1), or an
  ``ExistingCluster`` when ``USE_EXISTING_CLUSTER=true`` (uses ``$KUBECONFIG``).
* ``namespace`` (function): a fresh namespace name where ``alice`` and ``bob``
  have the ``edit`` ClusterRole; deleted after the test.
* ``admin_client`` / ``alice_client`` / ``bob_client``: ``kubernetes.client.ApiClient``.

Without binaries the tests are skipped with a message saying how to get
them, except with ``CI=true``, where that is an error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster as _cluster

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
