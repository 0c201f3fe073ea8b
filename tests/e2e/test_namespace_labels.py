"""Queue grants by namespace label (``namespaceSelector``), end to end without giving the webhook
credentials: the reconciler watches real Namespaces and publishes the labels the bundle's selectors
read into the ConfigMap batchgate-namespaces; the test copies the ConfigMap's data into the
webhook's mounted directory as the kubelet would (there is no kubelet here); the API server calls
the webhook, which admits pods in labelled namespaces and denies the rest, saying why.

This module runs its own validating-only webhook server (the shipped bundle, with the queue
``interactive`` open to namespaces labelled ``batchgate-e2e/team=physics`` only), scoped by a
namespaceSelector to this module's namespaces, and its own reconciler, whose home namespace
holds its lease and the published ConfigMap.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import KubeApiError, wait_for
from harness import (
    QUEUE_LABEL,
    WebhookServer,
    bundle_variant,
    create,
    pod,
    scoped_validating,
    start_reconciler,
    stop_reconcilers,
    unique,
)

SCOPE = "batchgate-e2e/namespace-labels"
TEAM = "batchgate-e2e/team"
CREATE_HOOK = "create.nslabels-e2e.batchgate.io"
NAMESPACE_HOOK = "namespaces.nslabels-e2e.batchgate.io"
CONFIG = "batchgate-namespace-labels-e2e"
CONFIGMAP = "batchgate-namespaces"


def labelled(spec: dict[str, Any]) -> None:
    """interactive: open to namespaces labelled team=physics (the server runs queue-access and
    namespace-opt-out, which keeps that label an admin's to set)."""
    queues = {q["name"]: q for q in spec["queues"]}
    queues["interactive"]["access"] = {"namespaceSelector": {"matchLabels": {TEAM: "physics"}}}


class Mount:
    """The webhook's ConfigMap volume, written the way the kubelet's atomic writer does: a new
    timestamped directory, then the ``..data`` symlink swapped to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        (path / "namespaces.json").symlink_to("..data/namespaces.json")

    def project(self, data: dict[str, str]) -> None:
        version = self.path / f"..{time.time_ns()}"
        version.mkdir()
        for key, value in data.items():
            (version / key).write_text(value)
        tmp = self.path / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, self.path / "..data")


@pytest.fixture(scope="module")
def site(kube: Any, webhook_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("namespace-labels")
    policies = bundle_variant(workdir, labelled, ("queue-access", "namespace-opt-out"))
    mount = Mount(workdir / "namespaces")
    server = WebhookServer(workdir, policies=policies, args=("--namespaces", str(mount.path)),
                           seal_keys=webhook_server.server.cert_dir / "seal.keys").start()  # shares its seal keys
    validating = scoped_validating(server, CONFIG, {"create.validate.batchgate.io": CREATE_HOOK,
                                                    "namespaces.validate.batchgate.io": NAMESPACE_HOOK}, SCOPE)
    home = kube.create_namespace(prefix="e2e-nslabels-home", edit_users=())
    reconciler = start_reconciler(kube, home, workdir / "reconciler.log", "--policies", str(policies))
    try:
        kube.register_webhooks(None, validating)
        yield {"server": server, "mount": mount, "home": home, "reconciler": reconciler}
    finally:
        stop_reconcilers([reconciler])
        with contextlib.suppress(Exception):
            kube.delete_webhooks(validating=CONFIG)
        server.stop()
        with contextlib.suppress(Exception):
            kube.delete_namespace(home)


def published(kube: Any, home: str) -> dict[str, Any] | None:
    try:
        cm = kube.get(f"/api/v1/namespaces/{home}/configmaps/{CONFIGMAP}")
    except KubeApiError as exc:
        if exc.status == 404:
            return None
        raise
    return {"configmap": cm, "doc": json.loads(cm["data"]["namespaces.json"])}


def published_when(kube: Any, home: str, check: Any, what: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        got = published(kube, home)
        return got if got is not None and check(got["doc"]["namespaces"]) else None
    return wait_for(ready, 60, interval=0.5, message=f"the reconciler to publish {what}")  # type: ignore[no-any-return]


def denied(fn: Any, hook: str = CREATE_HOOK) -> str:
    with pytest.raises(KubeApiError) as info:
        fn()
    body = info.value.body if isinstance(info.value.body, dict) else {}
    message = str(body.get("message", info.value))
    assert info.value.status == 403, message
    assert f'admission webhook "{hook}" denied the request: ' in message, message
    return message


def interactive() -> dict[str, Any]:
    return pod(unique("p"), labels={QUEUE_LABEL: "interactive"})


def readyz(server: WebhookServer) -> str:
    return server._get("/readyz")[1]


def test_published_labels_admit_a_labelled_namespace_and_deny_the_rest(kube, site):
    server, mount, home = site["server"], site["mount"], site["home"]
    lab = kube.create_namespace(prefix="e2e-nslabels-lab", labels={SCOPE: "on", TEAM: "physics"})
    plain = kube.create_namespace(prefix="e2e-nslabels-plain", labels={SCOPE: "on"})
    try:
        # the reconciler publishes every namespace, with the selected key only (not SCOPE)
        got = published_when(kube, home, lambda ns: lab in ns and plain in ns, f"{lab} and {plain}")
        doc = got["doc"]
        assert doc["keys"] == [TEAM]
        assert doc["namespaces"][lab] == {TEAM: "physics"} and doc["namespaces"][plain] == {}
        assert got["configmap"]["metadata"]["namespace"] == home

        # before the kubelet has copied it, the webhook has no labels: selector grants admit nobody
        msg = denied(lambda: create(kube, lab, interactive(), dry_run=True))
        assert "namespace labels are not usable" in msg and "admit nobody" in msg
        assert "namespace labels missing" in readyz(server)

        mount.project(got["configmap"]["data"])
        wait_for(lambda: "namespace labels published" in readyz(server), 30, message="the webhook to load the labels")
        create(kube, lab, interactive(), dry_run=True)  # labelled: admitted
        msg = denied(lambda: create(kube, plain, interactive(), dry_run=True))
        assert f"queue 'interactive' is open to namespaces labelled {TEAM}=physics; you are alice (" in msg, msg
        assert (f") in namespace {plain}; ask an admin for access, or use batchgate.io/queue: one of batch, "
                "scavenger") in msg, msg

        # a namespace the webhook has no labels for yet is denied, saying to retry
        late = kube.create_namespace(prefix="e2e-nslabels-late", labels={SCOPE: "on", TEAM: "physics"})
        try:
            msg = denied(lambda: create(kube, late, interactive(), dry_run=True))
            assert f"labels of namespace {late} not yet published by the reconciler" in msg
            assert "retry in a minute" in msg

            # an admin labels the plain namespace: the published content changes, and once the
            # kubelet has copied it the namespace may use the queue
            before = got["configmap"]["metadata"]["resourceVersion"]
            kube.patch(f"/api/v1/namespaces/{plain}", {"metadata": {"labels": {TEAM: "physics"}}})
            again = published_when(kube, home, lambda ns: ns.get(plain) == {TEAM: "physics"} and late in ns,
                                   f"the new label of {plain}")
            assert again["configmap"]["metadata"]["resourceVersion"] != before
            mount.project(again["configmap"]["data"])
            wait_for(lambda: _admitted(kube, plain), 30, message=f"the webhook to admit {plain}")
            create(kube, late, interactive(), dry_run=True)
        finally:
            kube.delete_namespace(late)
    finally:
        for ns in (lab, plain):
            kube.delete_namespace(ns)


def _admitted(kube: Any, ns: str) -> bool:
    try:
        create(kube, ns, interactive(), dry_run=True)
    except KubeApiError:
        return False
    return True


def test_only_admins_may_set_a_label_that_grants_a_queue(kube, site, namespace_manager):
    user = namespace_manager
    ns = kube.create_namespace(prefix="e2e-nslabels-self", labels={SCOPE: "on"})
    path = f"/api/v1/namespaces/{ns}"
    try:
        kube.patch(path, {"metadata": {"labels": {"owner": "alice"}}}, as_user=user)  # other labels: free
        msg = denied(lambda: kube.patch(path, {"metadata": {"labels": {TEAM: "physics"}}}, as_user=user),
                     NAMESPACE_HOOK)
        assert f"setting the label {TEAM} on a Namespace is for cluster admins only" in msg
        assert "namespaceSelector of queue 'interactive'" in msg
        assert TEAM not in (kube.get(path)["metadata"].get("labels") or {})
        kube.patch(path, {"metadata": {"labels": {TEAM: "physics"}}})  # an admin may
        assert "removing the label" in denied(
            lambda: kube.patch(path, {"metadata": {"labels": {TEAM: None}}}, as_user=user), NAMESPACE_HOOK)
    finally:
        kube.delete_namespace(ns)
