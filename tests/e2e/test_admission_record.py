"""The admission record against the real API server (issue 11, item 2).

The webhook records the queue and time limit a Pod or Job was admitted with in its
containers' env (``BATCHGATE_QUEUE``, ``BATCHGATE_TIME_LIMIT``), which the API server lets
nobody change afterwards. With UPDATE validation unreachable (it fails open) a user relabels
the Job to another queue and raises its limit, and removes a bare Pod's limit; the
reconciler still stops both: the Job at the maximum of the queue it was admitted to, the
Pod at the limit it was admitted with. Every step is read back from what the API server
stored.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cluster import now_rfc3339, require_components
from harness import (
    DEADLINE,
    QUEUE_LABEL,
    STARTED,
    TIME_LIMIT,
    assert_pod_sealed,
    create,
    epoch,
    events,
    gone_or_deleting,
    job,
    jobs_path,
    pod,
    pods_path,
)
from harness import (
    attempt as refused,
)

REPO = Path(__file__).resolve().parents[2]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def record(stored: dict[str, Any], *spec_path: str) -> dict[str, Any]:
    spec = stored
    for key in spec_path:
        spec = spec[key]
    return {k: v for c in spec["containers"] for k, v in env_of(c).items() if k.startswith("BATCHGATE_")}


@pytest.fixture
def lowered_bundle(tmp_path: Path) -> Path:
    """The shipped bundle with the interactive queue's maximum lowered to 20s: what the
    reconciler enforces for a Job admitted to interactive, whatever its label says later."""
    root = tmp_path / "policies"
    shutil.copytree(REPO / "policies", root)
    b = root / "bundle.yaml"
    text = b.read_text()
    old = "timeLimit: {default: 2h, max: 12h}"
    assert old in text
    b.write_text(text.replace(old, "timeLimit: {default: 10s, max: 20s}"))
    return root



def test_relabelled_or_removed_limits_are_still_enforced_from_the_record(
        kube, webhook_server, namespace, node, reconciler, outage, lowered_bundle):
    require_components(kube, "kube-controller-manager", "kube-scheduler")
    ns = namespace
    on_node = {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 5}

    # --- admitted (webhook up): interactive, 15s; the record is stored -----------------------
    create(kube, ns, job("train", labels={QUEUE_LABEL: "interactive"}, annotations={TIME_LIMIT: "15s"},
                         **on_node))
    create(kube, ns, pod("lone", labels={QUEUE_LABEL: "interactive"}, annotations={TIME_LIMIT: "15s"}, **on_node))
    jpath, ppath = jobs_path(ns, "train"), pods_path(ns, "lone")
    stored_job, stored_pod = kube.get(jpath), kube.get(ppath)
    # BATCHGATE_JOB_UID: empty (no value) on a Job's template and on a Pod no Job's controller made
    want = {"BATCHGATE_QUEUE": "interactive", "BATCHGATE_TIME_LIMIT": "15s", "BATCHGATE_JOB_UID": None}
    assert record(stored_job, "spec", "template", "spec") == want
    assert record(stored_pod, "spec") == want

    # --- nobody can change it: the API server refuses, webhook or not --------------------------
    forged = [{"name": "main", "image": stored_pod["spec"]["containers"][0]["image"],
               "env": [{"name": "BATCHGATE_QUEUE", "value": "scavenger"},
                       {"name": "BATCHGATE_TIME_LIMIT", "value": "30d"}]}]
    status, msg = refused(lambda: kube.request(
        "PATCH", ppath, {"spec": {"containers": forged}}, as_user="alice",
        content_type="application/strategic-merge-patch+json"))
    assert status == 422 and "Forbidden" in msg, (status, msg)
    status, msg = refused(lambda: kube.request(
        "PATCH", jpath, {"spec": {"template": {"spec": {"containers": forged}}}}, as_user="alice",
        content_type="application/strategic-merge-patch+json"))
    assert status == 422 and "field is immutable" in msg, (status, msg)

    # --- UPDATE validation unreachable: relabel + raise the Job, remove the Pod's limit ---------
    webhook_server.server.stop()
    assert webhook_server.server.refuses_connections()
    kube.patch(jpath, {"metadata": {"labels": {QUEUE_LABEL: "scavenger"}, "annotations": {TIME_LIMIT: "1h"}}},
               as_user="alice")
    kube.patch(ppath, {"metadata": {"labels": {QUEUE_LABEL: "no-such-queue"}, "annotations": {TIME_LIMIT: None}}},
               as_user="alice")
    outage.end()
    stored_job, stored_pod = kube.get(jpath), kube.get(ppath)
    assert (stored_job["metadata"]["labels"][QUEUE_LABEL], stored_job["metadata"]["annotations"][TIME_LIMIT]) == (
        "scavenger", "1h")
    assert TIME_LIMIT not in (stored_pod["metadata"].get("annotations") or {})
    assert stored_pod["metadata"]["labels"][QUEUE_LABEL] == "no-such-queue"
    assert record(stored_job, "spec", "template", "spec") == want and record(stored_pod, "spec") == want

    # --- the reconciler (interactive's maximum now 20s) stops both ------------------------------
    reconciler(args=("--policies", str(lowered_bundle))).wait_ready()  # before the 15s start running
    job_uid = stored_job["metadata"]["uid"]
    (jp,) = kube.wait_for_pods(ns, label_selector=f"controller-uid={job_uid}", count=1,
                               predicate=lambda p: p["spec"].get("nodeName") == node, timeout=60)
    # the Job's pod, mutated at its CREATE, keeps the template's record, with the uid of the Job
    # whose controller made it
    assert record(jp, "spec") == {**want, "BATCHGATE_JOB_UID": job_uid}
    assert_pod_sealed(webhook_server, jp, ns)  # the Job's own relabel does not touch its template's seal
    kube.wait_for(lambda: kube.get(ppath)["spec"].get("nodeName") == node, 60, message="lone scheduled")
    for name in (jp["metadata"]["name"], "lone"):
        kube.set_pod_phase(ns, name, "Running", {"main": {"running": {"startedAt": now_rfc3339()}}})

    ann = kube.wait_for(lambda: (a := kube.get(ppath)["metadata"].get("annotations") or {}).get(DEADLINE) and a,
                        30, message="the Pod's deadline")
    assert epoch(ann[DEADLINE]) - epoch(ann[STARTED]) == 15  # the admitted limit, the annotation being gone
    kube.wait_for(gone_or_deleting(kube, ppath, stored_pod["metadata"]["uid"]), 40, message="Pod stopped")
    (ev,) = events(kube, ns, uid=stored_pod["metadata"]["uid"], reason="TimeLimitExceeded")
    assert "annotation is gone: the 15s it was admitted with applies" in ev["message"], ev["message"]

    ann = kube.wait_for(lambda: (a := kube.get(jpath)["metadata"].get("annotations") or {}).get(DEADLINE) and a,
                        30, message="the Job's deadline")
    assert epoch(ann[DEADLINE]) - epoch(ann[STARTED]) == 20  # interactive's maximum, not 1h under scavenger
    kube.wait_for(gone_or_deleting(kube, jpath, job_uid), 40, message="Job stopped")
    (ev,) = events(kube, ns, uid=job_uid, reason="TimeLimitExceeded")
    assert "maximum 20s of queue interactive, the queue it was admitted to (its label says scavenger)" in ev["message"]
