"""Maintenance windows on a real API server: the CRD and its validation, the countdown on
nodes, and kube-scheduler keeping long jobs off a window's nodes.

The reconciler runs as a separate process (``batchgate reconcile``), as in
test_reconciler.py; kube-scheduler is the stock one, and nodes are fake (no kubelet).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("server_fixtures")  # imported here before it loads as a plugin
import yaml  # noqa: E402
from cluster import KubeApiError  # noqa: E402
from server_fixtures import unique  # noqa: E402

pytest_plugins = ["server_fixtures"]

REPO = Path(__file__).resolve().parents[2]
MW = "/apis/batchgate.io/v1alpha1/maintenancewindows"
CREATE_HOOK = "create.validate.batchgate.io"
UPDATE_HOOK = "update.validate.batchgate.io"


def sample(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((REPO / "policies/maintenance-window/samples" / name).read_text())
    return obj


@pytest.fixture
def windows(kube: Any):
    """Create MaintenanceWindows as the cluster admin; all are deleted after the test."""
    made: list[str] = []

    def create(obj: dict[str, Any], *, as_user: str = "admin") -> dict[str, Any]:
        out: dict[str, Any] = kube.create(MW, obj, as_user=as_user)
        made.append(obj["metadata"]["name"])
        return out

    yield create
    for name in made:
        with contextlib.suppress(Exception):
            kube.delete(f"{MW}/{name}")


# -- 1. the CRD and the maintenance-window policy ------------------------------------
def test_a_valid_window_is_stored_cluster_wide_and_everyone_may_read_it(kube, webhook_server, windows):
    obj = sample("window-rack7.yaml")
    obj["metadata"]["name"] = name = unique("rack7")
    stored = windows(obj)
    assert stored["spec"] == obj["spec"]
    assert "namespace" not in stored["metadata"]
    assert kube.get(f"{MW}/{name}", as_user="alice")["spec"]["reason"] == "BIOS and BMC firmware update"
    assert not kube.can_i("create", "maintenancewindows", group="batchgate.io", as_user="alice")


def test_an_invalid_window_is_denied_naming_every_bad_field(kube, webhook_server):
    obj = sample("window-invalid.yaml")
    obj["metadata"]["name"] = name = unique("broken")
    obj["spec"]["reason"] = "typed wrong"  # `reason: 42` never reaches the webhook: the CRD schema says 422
    with pytest.raises(KubeApiError) as info:
        kube.create(MW, obj)
    assert info.value.status == 403
    msg = info.value.body["message"]
    assert f'admission webhook "{CREATE_HOOK}" denied the request: maintenance-window: ' in msg
    for part in (
        f"invalid MaintenanceWindow {name}",
        "spec.end: 2026-11-24T06:00:00Z must be after spec.start (2026-11-24T10:00:00Z)",
        "spec.nodeSelector.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist",
        "spec.nodes[0]: 'Node_1' is not a node name",
        "spec.drain: unknown field",
    ):
        assert part in msg, f"{part!r} not in {msg}"
    assert not kube.exists(f"{MW}/{name}")


def test_an_edit_that_breaks_a_stored_window_is_denied(kube, webhook_server, windows):
    obj = sample("window-names-only.yaml")
    obj["metadata"]["name"] = name = unique("dimm")
    windows(obj)
    with pytest.raises(KubeApiError) as info:
        kube.patch(f"{MW}/{name}", {"spec": {"end": "2026-11-24T05:00:00Z"}})
    assert info.value.status == 403
    assert f'admission webhook "{UPDATE_HOOK}" denied the request: maintenance-window: ' in info.value.body["message"]
    assert "spec.end: 2026-11-24T05:00:00Z must be after spec.start" in info.value.body["message"]
    kube.patch(f"{MW}/{name}", {"spec": {"reason": "two DIMMs"}})  # a valid edit is fine
    assert kube.get(f"{MW}/{name}")["spec"]["reason"] == "two DIMMs"
