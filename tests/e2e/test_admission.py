"""How the webhook sits in the API server's request path, seen from a user's side.

UPDATE and DELETE go through untouched, a server-side dry run returns the mutated
object and stores nothing, Pods made by the Job controller carry batchgate's
fields, a denial reads exactly as ``admission webhook "<name>" denied the
request: <policy>: <message>`` with the message ``batchgate check`` gives, and
the system namespaces are never touched.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from cluster import KubeApiError, require_components, wait_for
from harness import (
    GANG,
    QUEUE_LABEL,
    TIME_LIMIT,
    assert_matches_prediction,
    container,
    create,
    job,
    jobs_path,
    pod,
    pods_path,
    predict,
    unique,
)

from webhook.contract import RECORD_JOB_UID_ENV

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
VOLATILE_META = ("resourceVersion", "managedFields", "labels")


@pytest.fixture(scope="module")
def ns(module_namespace: str) -> str:
    return module_namespace


def assert_batchgate_pod(p: dict[str, Any], *, queue: str = "batch", klass: str = "batchgate-batch",
                         priority: int = 1000) -> None:
    """The fields every Pod admitted by the default bundle carries."""
    spec = p["spec"]
    assert p["metadata"]["labels"][QUEUE_LABEL] == queue
    assert p["metadata"]["annotations"][TIME_LIMIT]
    assert (spec["priorityClassName"], spec["priority"]) == (klass, priority)
    assert spec["automountServiceAccountToken"] is False
    assert not [v for v in spec.get("volumes") or [] if "token" in v["name"]], spec.get("volumes")
    assert "batchgate-shm" in {v["name"] for v in spec["volumes"]}
    for c in spec["containers"]:
        paths = {m["mountPath"] for m in c.get("volumeMounts") or []}
        assert "/dev/shm" in paths and SA_MOUNT not in paths, c
    assert spec["activeDeadlineSeconds"] > 0


def test_update_label_patch_is_not_mutated(kube, webhook_server, ns):
    name = unique("upd")
    create(kube, ns, pod(name))
    before = kube.get(pods_path(ns, name))
    kube.patch(pods_path(ns, name), {"metadata": {"labels": {"kubectl-label": "yes"}}}, as_user="alice")
    after = kube.get(pods_path(ns, name))
    assert after["metadata"]["labels"] == {**before["metadata"]["labels"], "kubectl-label": "yes"}
    assert after["spec"] == before["spec"]
    strip = lambda m: {k: v for k, v in m.items() if k not in VOLATILE_META}  # noqa: E731
    assert strip(after["metadata"]) == strip(before["metadata"])


def test_delete_works(kube, webhook_server, ns):
    name = unique("del")
    create(kube, ns, pod(name))
    kube.request("DELETE", pods_path(ns, name), as_user="alice")
    # an unscheduled pod goes at once (no kubelet has to confirm)
    wait_for(lambda: not kube.exists(pods_path(ns, name)), 30, message=f"pod {name} to go")


def test_server_side_dry_run_returns_mutated_and_stores_nothing(kube, webhook_server, ns):
    name = unique("dry")
    obj = pod(name)
    before = webhook_server.server.mutate_outcomes()
    got = create(kube, ns, obj, dry_run=True)
    assert_batchgate_pod(got)
    assert not kube.exists(pods_path(ns, name)), "a dry run stored the pod"
    after = webhook_server.server.mutate_outcomes()
    assert after["mutated"] == before["mutated"] + 1, "the dry run did not reach the webhook"
    decision = predict(webhook_server, obj, namespace=ns)
    assert decision.obj is not None
    assert_matches_prediction(got, decision.obj, server_version=kube.server_version())


def test_job_controller_pods_carry_batchgate_fields_without_own_patch(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    name = unique("ctl")
    before = webhook_server.server.mutate_outcomes()
    created = create(kube, ns, job(name, parallelism=2, completions=2,
                                   labels={QUEUE_LABEL: "interactive", **GANG},
                                   containers=[container(cpu="100m", memory="128Mi")]))
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={created['metadata']['uid']}", count=2)
    for p in pods:
        assert [(o["kind"], o["name"]) for o in p["metadata"]["ownerReferences"]] == [("Job", name)]
        assert_batchgate_pod(p, queue="interactive", klass="batchgate-interactive", priority=10000)
        assert p["metadata"]["annotations"][TIME_LIMIT] == "2h"
        assert p["metadata"]["labels"]["batchgate.io/pod-group"] == name
        # a gang Job is Indexed: the Job controller names the host <job>-<index> itself
        index = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert p["spec"]["hostname"] == f"{name}-{index}"
    # the template was mutated once, as the Job; each gang Pod's only patch of its own is the
    # record's Job uid (issue 27: which Job's controller made it); everything else came with the
    # template, their hostnames from the Job controller
    for p in pods:
        for c in p["spec"]["containers"]:
            env = {e["name"]: e.get("value", "") for e in c.get("env") or []}
            assert env[RECORD_JOB_UID_ENV] == created["metadata"]["uid"], c.get("env")
    target = before["mutated"] + before["allowed"] + 3

    def answered():
        m = webhook_server.server.mutate_outcomes()
        return m if m["mutated"] + m["allowed"] >= target else None

    after = wait_for(answered, 10, message="the webhook's answers for the Job and its Pods")
    assert after["mutated"] - before["mutated"] == 3, (before, after)


@pytest.mark.parametrize(("obj", "webhook"), [
    pytest.param(pod("unknown-queue", labels={QUEUE_LABEL: "gpu"}),
                 "create.validate.batchgate.io", id="validating-pod"),
    pytest.param(job("too-long", annotations={TIME_LIMIT: "9d"}),
                 "create.validate.batchgate.io", id="validating-job"),
    pytest.param(pod("not-exclusive", labels={"batchgate.io/exclusive": "maybe"}),
                 "mutate.batchgate.io", id="mutating-pod"),
])
def test_denial_is_what_the_user_sees(kube, webhook_server, ns, obj, webhook):
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = unique(obj["metadata"]["name"])
    with pytest.raises(KubeApiError) as info:
        create(kube, ns, obj)
    body = info.value.body
    assert info.value.status == 403
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure",
                                                                         "Forbidden", 403)
    decision = predict(webhook_server, obj, namespace=ns)
    assert not decision.allowed
    # exactly batchgate check's message, behind the API server's prefix
    assert body["message"] == f'admission webhook "{webhook}" denied the request: {decision.message}'
    assert not kube.exists(f"{pods_path(ns) if obj['kind'] == 'Pod' else jobs_path(ns)}/"
                           f"{obj['metadata']['name']}")


def test_update_denial_is_what_the_user_sees(kube, webhook_server, ns):
    name = unique("upd-deny")
    create(kube, ns, pod(name))
    old = kube.get(pods_path(ns, name))
    with pytest.raises(KubeApiError) as info:
        kube.patch(pods_path(ns, name), {"metadata": {"annotations": {TIME_LIMIT: "30d"}}},
                   as_user="alice")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][TIME_LIMIT] = "30d"
    decision = predict_update(webhook_server, new, old, namespace=ns)
    assert info.value.status == 403
    assert info.value.body["message"] == (
        f'admission webhook "update.validate.batchgate.io" denied the request: {decision.message}')


def predict_update(hook, new: dict[str, Any], old: dict[str, Any], *, namespace: str):
    from webhook.engine import decide
    from webhook.offline import Caller, synthetic_review

    review = synthetic_review(new, Caller(operation="UPDATE", username="alice",
                                          groups=("devs", "system:authenticated"),
                                          namespace=namespace), old_object=old)
    return decide(review, hook.bundle, phase="validate")


def test_kube_system_pods_untouched(kube, webhook_server):
    name = unique("sys")
    created = create(kube, "kube-system", pod(name), as_user="admin")
    try:
        p = kube.get(pods_path("kube-system", name))
        labels = p["metadata"].get("labels") or {}
        assert QUEUE_LABEL not in labels
        assert TIME_LIMIT not in (p["metadata"].get("annotations") or {})
        names = {v["name"] for v in p["spec"].get("volumes") or []}
        assert "batchgate-shm" not in names
        assert any(n.startswith("kube-api-access-") for n in names), names  # the plugin's token stays
        assert p["spec"]["priorityClassName"] == "batchgate-default"  # the globalDefault class
        assert p["spec"]["priority"] == 0
        assert created["metadata"]["uid"] == p["metadata"]["uid"]
    finally:
        kube.delete(pods_path("kube-system", name))


