"""Queue access and whole-node access (policy queue-access), proven against a real API server
and the stock controller-manager: who creates or updates a workload is judged, for every kind
that makes pods, on CREATE and on the UPDATEs that would move it into a closed queue or onto
whole nodes; pods the controllers make from an admitted template are not judged again, and a
user's Pod or ReplicaSet claiming a controller's owner is.

The session's webhook (the shipped bundle) mutates and validates as everywhere. This module
adds a second, validating-only webhook server whose bundle closes queues, scoped by a
namespaceSelector to this module's namespace, so nothing else in the session sees it:

- ``interactive``: open to the group ``hpc`` only (alice is in ``devs``; bob is an admin);
- ``scavenger``: open to the group ``devs``;
- ``batch``: open, but whole nodes in it only for the user ``carol``.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import KubeApiError, require_components, wait_for
from harness import (
    QUEUE_LABEL,
    WebhookServer,
    bundle_variant,
    container,
    create,
    create_and_read,
    cronjob,
    deployment,
    job,
    path_of,
    pod,
    scoped_validating,
    unique,
)

EXCLUSIVE = "batchgate.io/exclusive"
SCOPE = "batchgate-e2e/queue-access"
CREATE_HOOK = "create.access-e2e.batchgate.io"
UPDATE_HOOK = "update.access-e2e.batchgate.io"
CONFIG = "batchgate-queue-access-e2e"


def closed(spec: dict[str, Any]) -> None:
    """Access grants on the shipped queues (the server runs the queue-access policy alone)."""
    queues = {q["name"]: q for q in spec["queues"]}
    queues["interactive"]["access"] = {"groups": ["hpc"]}
    queues["scavenger"]["access"] = {"groups": ["devs"]}
    queues["batch"]["exclusiveAccess"] = {"users": ["carol"]}
    spec["namespaces"] = [r for r in spec["namespaces"] if r.get("defaultQueue") != "interactive"]


@pytest.fixture(scope="module")
def ns(kube: Any, webhook_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("queue-access")
    # The session server (which mutates, and so seals) and this one share the seal keys.
    server = WebhookServer(workdir, policies=bundle_variant(workdir, closed, ("queue-access",)),
                           seal_keys=webhook_server.server.cert_dir / "seal.keys").start()
    validating = scoped_validating(server, CONFIG, {"create.validate.batchgate.io": CREATE_HOOK,
                                                    "update.validate.batchgate.io": UPDATE_HOOK}, SCOPE)
    name = kube.create_namespace(prefix="e2e-queue-access", labels={SCOPE: "on"})
    try:
        kube.register_webhooks(None, validating)
        probe = pod(unique("probe"), labels={QUEUE_LABEL: "interactive"})
        wait_for(lambda: _refused(kube, name, probe), 30, interval=0.3,
                 message="the API server to call the queue-access webhook")
        yield name
    finally:
        with contextlib.suppress(Exception):
            kube.delete_webhooks(validating=CONFIG)
        server.stop()
        with contextlib.suppress(Exception):
            kube.delete_namespace(name)


def _refused(kube: Any, ns: str, obj: dict[str, Any]) -> bool:
    try:
        create(kube, ns, obj, dry_run=True)
    except KubeApiError as exc:
        return CREATE_HOOK in str((exc.body or {}).get("message", "")) if isinstance(exc.body, dict) else False
    return False


def denied(fn: Any, hook: str = CREATE_HOOK) -> str:
    with pytest.raises(KubeApiError) as info:
        fn()
    body = info.value.body if isinstance(info.value.body, dict) else {}
    message = str(body.get("message", info.value))
    assert info.value.status == 403, message
    assert f'admission webhook "{hook}" denied the request: queue-access: ' in message, message
    return message


def guaranteed() -> list[dict[str, Any]]:
    """Containers any queue takes (scavengers must be Guaranteed QoS)."""
    return [container(cpu="100m", memory="64Mi")]


def statefulset(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name}, "spec": {
        "replicas": 0, "serviceName": name, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name, **labels}}, "spec": {"containers": guaranteed()}}}}


def apps(kind: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    if kind == "StatefulSet":
        return statefulset(name, labels)
    obj = deployment(name, replicas=0)
    obj["kind"] = kind
    obj["spec"]["template"]["spec"]["containers"] = guaranteed()
    obj["spec"]["template"]["metadata"]["labels"].update(labels)
    if kind == "DaemonSet":
        del obj["spec"]["replicas"]
    return obj


def every_kind(name: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    j = job(name, parallelism=0, template_labels=labels, containers=guaranteed())
    cj = cronjob(name, containers=guaranteed())
    cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"] = {"labels": dict(labels)}
    return [pod(name, labels=labels, containers=guaranteed()), j, cj,
            *(apps(k, name, labels) for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"))]


# -- CREATE ----------------------------------------------------------------------------
def test_closed_queue_denied_for_every_kind_naming_who_may(kube, ns):
    for obj in every_kind(unique("ia"), {QUEUE_LABEL: "interactive"}):
        msg = denied(lambda o=obj: create(kube, ns, o))
        assert (f"queue 'interactive' is open to groups hpc; you are alice (groups devs) in namespace {ns}; "
                "ask an admin for access, or use batchgate.io/queue: one of batch, scavenger") in msg, obj["kind"]
        assert not kube.exists(f"{path_of(obj, ns)}/{obj['metadata']['name']}")
    for obj in every_kind(unique("sc"), {QUEUE_LABEL: "scavenger"}):  # open to devs
        create(kube, ns, obj, dry_run=True)
    for obj in every_kind(unique("adm"), {QUEUE_LABEL: "interactive"}):  # admins use every queue
        create(kube, ns, obj, as_user="bob", dry_run=True)


def test_whole_nodes_denied_for_every_template(kube, ns):
    for obj in every_kind(unique("ex"), {QUEUE_LABEL: "batch", EXCLUSIVE: "true"}):
        msg = denied(lambda o=obj: create(kube, ns, o))
        assert ("whole nodes (batchgate.io/exclusive: \"true\") in queue 'batch' are open to users carol; "
                f"you are alice (groups devs) in namespace {ns}; leave batchgate.io/exclusive out") in msg
    create(kube, ns, pod(unique("ex"), labels={QUEUE_LABEL: "batch", EXCLUSIVE: "false"}), dry_run=True)


# -- UPDATE, in every order ------------------------------------------------------------
def test_relabelling_a_job_is_denied_whatever_the_queue(kube, ns):
    """A Job's (and a Pod's) queue is fixed once it exists (issue 27): into a closed queue, or any."""
    name = unique("relabel")
    create(kube, ns, job(name, parallelism=0, labels={QUEUE_LABEL: "batch"}))
    path = f"{path_of(job(name), ns)}/{name}"
    for queue in ("interactive", "scavenger"):
        with pytest.raises(KubeApiError) as info:
            kube.patch(path, {"metadata": {"labels": {QUEUE_LABEL: queue}}}, as_user="alice")
        msg = str((info.value.body or {}).get("message", "")) if isinstance(info.value.body, dict) else ""
        assert info.value.status == 403, msg
        # this module's webhook and the session's both deny it; the API server names either
        assert ("queue-access: batchgate.io/queue of a Job cannot be set, changed or removed once it exists"
                in msg), msg
    assert kube.get(path)["metadata"]["labels"][QUEUE_LABEL] == "batch"
    # an update that names no new queue passes
    kube.patch(path, {"metadata": {"annotations": {"note": "x"}}}, as_user="alice")


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"])
def test_apps_template_updates_cannot_reach_a_closed_queue_or_whole_nodes(kube, ns, kind):
    name = unique(kind.lower()[:6])
    obj = apps(kind, name, {})
    obj["metadata"]["labels"] = {QUEUE_LABEL: "batch"}
    create(kube, ns, obj)
    path = f"{path_of(obj, ns)}/{name}"
    # workload and template moved together (the class left for the new queue's): judged as a
    # CREATE would be
    both = {"metadata": {"labels": {QUEUE_LABEL: "interactive"}},
            "spec": {"template": {"metadata": {"labels": {QUEUE_LABEL: "interactive"}},
                                  "spec": {"priorityClassName": None}}}}
    assert "queue 'interactive' is open to groups hpc" in denied(
        lambda: kube.patch(path, both, as_user="alice"), UPDATE_HOOK)
    # the template alone moved: the workload's label decides, the mutating webhook writes it back
    kube.patch(path, {"spec": {"template": {"metadata": {"labels": {QUEUE_LABEL: "interactive"}}}}},
               as_user="alice")
    assert kube.get(path)["spec"]["template"]["metadata"]["labels"][QUEUE_LABEL] == "batch"
    # whole nodes asked for after admission
    assert "whole nodes" in denied(lambda: kube.patch(
        path, {"spec": {"template": {"metadata": {"labels": {EXCLUSIVE: "true"}}}}}, as_user="alice"), UPDATE_HOOK)
    assert EXCLUSIVE not in kube.get(path)["spec"]["template"]["metadata"]["labels"]


def test_cronjob_job_template_update_is_judged(kube, ns):
    name = unique("cron")
    obj = cronjob(name, labels={QUEUE_LABEL: "batch"})
    create(kube, ns, obj)
    path = f"{path_of(obj, ns)}/{name}"
    msg = denied(lambda: kube.patch(path, {"spec": {"jobTemplate": {"metadata": {"labels": {EXCLUSIVE: "true"}}}}},
                                    as_user="alice"), UPDATE_HOOK)
    assert "whole nodes" in msg
    assert "queue 'interactive'" in denied(lambda: kube.patch(
        path, {"spec": {"jobTemplate": {"metadata": {"labels": {QUEUE_LABEL: "interactive"}}}}}, as_user="alice"),
        UPDATE_HOOK)


# -- controllers: their pods pass, a user's forged ones do not --------------------------
def _pods_of(kube: Any, ns: str, app: str, count: int) -> list[dict[str, Any]]:
    return kube.wait_for_pods(ns, label_selector=f"app={app}", count=count, timeout=90)


def test_controller_made_pods_pass_and_forged_owners_do_not(kube, ns):
    require_components(kube, "kube-controller-manager")
    # bob (an admin) may use the closed queue and whole nodes: the ReplicaSet the deployment
    # controller makes and the Pods the replicaset controller makes are not judged again
    name = unique("admin-web")
    labels = {QUEUE_LABEL: "interactive", EXCLUSIVE: "true"}
    obj = deployment(name, replicas=1, labels=labels)
    obj["spec"]["template"]["metadata"]["labels"].update(labels)
    create(kube, ns, obj, as_user="bob")
    (made,) = _pods_of(kube, ns, name, 1)
    assert made["metadata"]["labels"][QUEUE_LABEL] == "interactive"
    owner = made["metadata"]["ownerReferences"]
    assert owner[0]["kind"] == "ReplicaSet" and owner[0]["controller"] is True
    # the ReplicaSet kept the admitted template (whole nodes included), so there is one
    time.sleep(3)
    uid = kube.get(f"{path_of(obj, ns)}/{name}")["metadata"]["uid"]
    owned = [r for r in kube.get(f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]
             if any(o["uid"] == uid for o in r["metadata"].get("ownerReferences") or [])]
    assert len(owned) == 1, [r["metadata"]["name"] for r in owned]

    # alice's bare Pod copying that Pod's owner is alice's Pod
    forged = pod(unique("forged"), labels={"app": "forged", QUEUE_LABEL: "interactive"})
    forged["metadata"]["ownerReferences"] = owner
    assert "queue 'interactive' is open to groups hpc" in denied(lambda: create(kube, ns, forged))
    # so is her ReplicaSet claiming bob's Deployment as its controller
    dep = kube.get(f"{path_of(obj, ns)}/{name}")
    rs = apps("ReplicaSet", unique("forged-rs"), {QUEUE_LABEL: "interactive"})
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                          "uid": dep["metadata"]["uid"], "controller": True}]
    assert "queue 'interactive'" in denied(lambda: create(kube, ns, rs))


def test_order_of_requests_does_not_open_a_closed_queue(kube, ns):
    """alice's Deployment on an open queue, then every way to move it: denied at the UPDATE,
    so the pods the controllers make keep the admitted queue and no whole nodes."""
    require_components(kube, "kube-controller-manager")
    name = unique("order")
    obj = deployment(name, replicas=1, labels={QUEUE_LABEL: "scavenger"})
    obj["spec"]["template"]["spec"]["containers"] = guaranteed()
    stored = create_and_read(kube, ns, obj)
    assert stored["spec"]["template"]["metadata"]["labels"][QUEUE_LABEL] == "scavenger"
    path = f"{path_of(obj, ns)}/{name}"
    moved = copy.deepcopy(stored)
    moved["metadata"].pop("resourceVersion")  # unconditional: the controller writes status meanwhile
    for meta in (moved["metadata"], moved["spec"]["template"]["metadata"]):
        meta["labels"][QUEUE_LABEL] = "interactive"
    del moved["spec"]["template"]["spec"]["priorityClassName"]  # the new queue's class, then
    denied(lambda: kube.request("PUT", path, moved, as_user="alice"), UPDATE_HOOK)
    moved["metadata"]["labels"].pop(QUEUE_LABEL)  # no workload label: the template's queue is judged
    denied(lambda: kube.request("PUT", path, moved, as_user="alice"), UPDATE_HOOK)
    kube.patch(path, {"spec": {"replicas": 2}}, as_user="alice")  # what adds nothing passes
    pods = _pods_of(kube, ns, name, 2)
    time.sleep(1)
    for p in kube.wait_for_pods(ns, label_selector=f"app={name}", count=len(pods)):
        assert p["metadata"]["labels"][QUEUE_LABEL] == "scavenger", p["metadata"]["name"]
        assert EXCLUSIVE not in p["metadata"]["labels"]
