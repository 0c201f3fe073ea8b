"""webhook.offline's audit: a stored object decided as a CREATE now (the listing is
webhook.reconciler.kube's; tests/e2e/test_audit.py runs the whole command on a real API server)."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import POLICIES
from webhook.contract import SEAL_ANNOTATION
from webhook.offline import Caller, audit_object, audit_skip, check_object
from webhook.rules import load_bundle

CALLER = Caller(username="batchgate-audit")
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "team-a", "uid": "u1", "resourceVersion": "7",
                    "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{"manager": "kubectl"}]},
       "spec": {"containers": [{"name": "c", "image": "busybox",
                                "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}}]},
       "status": {"phase": "Running"}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "team-a"},
       "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(POLICIES)


def admitted(obj, bundle):
    """What the webhook would have stored (sealed with the offline key, as a cluster seals with its own)."""
    decision = check_object(copy.deepcopy(obj), bundle, Caller(username="alice", namespace="team-a"))
    assert decision.allowed
    return {**decision.obj, "status": {"phase": "Running"}}


def test_stored_without_the_webhook_shows_what_it_would_change(bundle):
    finding = audit_object(POD, bundle, CALLER)
    assert finding.differs and not finding.denials
    assert {"queue-priority", "shm"} <= set(finding.mutated_by)
    assert any(op["path"] == "/spec/priorityClassName" for op in finding.changes)


def test_what_the_webhook_admitted_shows_nothing(bundle):
    for obj in (POD, JOB):
        finding = audit_object(admitted(obj, bundle), bundle, CALLER)
        assert not finding.differs, (finding.changes, finding.denials)


def test_a_seal_made_with_another_key_is_no_difference(bundle):
    job = admitted(JOB, bundle)
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert SEAL_ANNOTATION in annotations
    annotations[SEAL_ANNOTATION] = "cluster-key." + "A" * 43  # the cluster's own key, unknown here
    assert not audit_object(job, bundle, CALLER).differs
    del annotations[SEAL_ANNOTATION]
    assert not audit_object(job, bundle, CALLER).differs


def test_denials_are_reported_with_checks_words(bundle):
    urgent = copy.deepcopy(POD)
    urgent["spec"]["priorityClassName"] = "batchgate-urgent"
    finding = audit_object(urgent, bundle, CALLER)
    assert finding.denials and finding.changes == []
    assert finding.denials == check_object({k: v for k, v in urgent.items() if k != "status"}, bundle,
                                           Caller(username="batchgate-audit", namespace="team-a")).denials


@pytest.mark.parametrize(("owner", "skipped"), [
    ({"apiVersion": "batch/v1", "kind": "Job", "name": "j"}, True),
    ({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}, True),
    ({"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "name": "sj"}, True),
    ({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "t"}, False),
    (None, False),
])
def test_what_a_controller_made_is_decided_through_its_template(owner, skipped):
    pod = copy.deepcopy(POD)
    if owner:
        pod["metadata"]["ownerReferences"] = [{**owner, "uid": "x", "controller": True}]
    reason = audit_skip(pod)
    assert (reason is not None) == skipped
    if skipped:
        assert f"made by {owner['kind']} {owner['name']}" in reason


def test_the_batch_queues_hold_is_no_difference(bundle):
    """A released Pod or Job of a gated queue, decided as a CREATE, would be held again (gate,
    suspend, queued annotation): that is the queue's admission, not a difference to report."""
    pod, job = admitted(POD, bundle), admitted(JOB, bundle)
    assert pod["spec"].get("schedulingGates") and job["spec"].get("suspend") is True  # held at CREATE
    pod["spec"].pop("schedulingGates")  # released by the reconciler
    job["spec"]["suspend"] = False
    assert not audit_object(pod, bundle, CALLER).differs
    assert not audit_object(job, bundle, CALLER).differs
    # stored without the webhook: the policies' changes are reported, the hold is not
    finding = audit_object(POD, bundle, CALLER)
    assert "queue-gate" not in finding.mutated_by
    assert not any("schedulingGates" in op["path"] for op in finding.changes)
