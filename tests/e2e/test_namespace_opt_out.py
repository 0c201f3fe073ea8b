"""Opting a namespace out is an admin act, enforced by the API server calling the webhook
(policy namespace-opt-out, webhook namespaces.validate.batchgate.io).

alice gets a ClusterRole that lets her create and relabel Namespaces (as a namespace
self-service setup would), but she is not one of the bundle's admins.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from cluster import KubeApiError
from harness import QUEUE_LABEL, create, pod, pods_path, unique

HOOK = "namespaces.validate.batchgate.io"
OPT_OUT = "batchgate.io/admission"


def denied(fn: Any) -> str:
    with pytest.raises(KubeApiError) as info:
        fn()
    body = info.value.body if isinstance(info.value.body, dict) else {}
    message = str(body.get("message", info.value))
    assert info.value.status == 403, message
    assert f'admission webhook "{HOOK}" denied the request: namespace-opt-out: ' in message, message
    return message


def test_only_admins_opt_a_namespace_out(kube, webhook_server, namespace_manager):
    user = namespace_manager
    ns = f"e2e-opt-out-{uuid.uuid4().hex[:6]}"
    path = f"/api/v1/namespaces/{ns}"
    try:
        # alice may make ordinary namespaces and relabel them ...
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns, "labels": {"team": "hpc"}}}, as_user=user)
        kube.patch(path, {"metadata": {"labels": {"team": "cfd"}}}, as_user=user)
        # ... but not label one out of batchgate, whether he creates or updates it,
        msg = denied(lambda: kube.patch(path, {"metadata": {"labels": {OPT_OUT: "disabled"}}}, as_user=user))
        assert "is for cluster admins only (group system:masters, group batchgate:admins)" in msg
        other = f"{ns}-b"
        denied(lambda: kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": other, "labels": {OPT_OUT: "disabled"}}}, as_user=user))
        assert not kube.exists(f"/api/v1/namespaces/{other}")
        # ... nor pose as kube-system: the API server keeps kubernetes.io/metadata.name the
        # namespace's own name, whatever the request says.
        kube.patch(path, {"metadata": {"labels": {"kubernetes.io/metadata.name": "kube-system"}}}, as_user=user)
        labels = kube.get(path)["metadata"].get("labels") or {}
        assert OPT_OUT not in labels and labels.get("kubernetes.io/metadata.name") == ns

        # An admin may; then alice may not take it back either, the admin may.
        kube.patch(path, {"metadata": {"labels": {OPT_OUT: "disabled"}}})
        assert "removing the label" in denied(
            lambda: kube.patch(path, {"metadata": {"labels": {OPT_OUT: None}}}, as_user=user))
        kube.patch(path, {"metadata": {"labels": {OPT_OUT: None}}})
        assert OPT_OUT not in (kube.get(path)["metadata"].get("labels") or {})
    finally:
        with contextlib.suppress(Exception):
            kube.delete_namespace(ns)


def test_what_the_label_would_have_bought(kube, webhook_server):
    """Why it matters: in a namespace an admin opted out, pods are not touched at all."""
    ns = kube.create_namespace(prefix="e2e-opted-out", labels={OPT_OUT: "disabled"})
    try:
        name = unique("p")
        create(kube, ns, pod(name))
        stored = kube.get(pods_path(ns, name))
        assert QUEUE_LABEL not in (stored["metadata"].get("labels") or {})
        assert stored["spec"].get("priorityClassName") != "batchgate-batch"
    finally:
        with contextlib.suppress(Exception):
            kube.delete_namespace(ns)
