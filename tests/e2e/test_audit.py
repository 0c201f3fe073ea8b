"""`batchgate audit` on the real API server: what the bundle would do to what is already stored.

Objects stored while the webhook left their namespace out (opted out, then opted back in by an
admin) are reported with what the webhook would change and deny; objects the running webhook
admitted are reported with nothing, until the bundle changes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from cluster import REPO_ROOT
from harness import container, create, create_and_read, job, pod, unique

OPT_OUT = "batchgate.io/admission"


def audit(kube, *args: str) -> tuple[int, dict, str]:
    r = subprocess.run([sys.executable, "-m", "webhook", "audit", "--kubeconfig", kube.kubeconfig("admin"),
                        "-o", "json", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


def by_name(report: dict) -> dict[str, dict]:
    return {f"{i['kind']}/{i['name']}": i for i in report["items"]}


@pytest.mark.namespace_labels({OPT_OUT: "disabled"})
def test_objects_stored_while_the_webhook_was_off_are_reported(kube, webhook_server, namespace):
    bare, urgent, web, batch = unique("bare"), unique("urgent"), unique("web"), unique("batch")
    create(kube, namespace, pod(bare), as_user="admin")
    create(kube, namespace, pod(urgent, priorityClassName="batchgate-urgent"), as_user="admin")
    create(kube, namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": web},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": web}},
                 "template": {"metadata": {"labels": {"app": web}}, "spec": {"containers": [container()]}}}},
        as_user="admin")
    stored_job = create_and_read(kube, namespace, job(batch), as_user="admin")
    kube.wait_for_pods(namespace, label_selector=f"batch.kubernetes.io/job-name={batch}")
    # stored as sent: no webhook saw them
    assert "priorityClassName" not in stored_job["spec"]["template"]["spec"]

    code, report, err = audit(kube, "--namespace", namespace)
    assert code == 0 and report["items"] == [], "an opted-out namespace is left out, as the webhooks leave it"

    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {OPT_OUT: None}}})
    code, report, err = audit(kube, "--namespace", namespace)
    items = by_name(report)
    assert code == 1, err  # something would be denied
    assert "priorityClassName 'batchgate-urgent' is reserved for admins" in " ".join(items[f"Pod/{urgent}"]["denials"])
    for name, where in ((f"Pod/{bare}", "/spec"), (f"Deployment/{web}", "/spec/template"),
                        (f"Job/{batch}", "/spec/template")):
        item = items[name]
        assert not item["denials"], item
        paths = [op["path"] for op in item["changes"]]
        assert f"{where}/spec/priorityClassName" in paths or f"{where}/priorityClassName" in paths, paths
        assert "queue-priority" in item["mutatedBy"]
    # the Job's pod is decided through the Job, not on its own
    assert not [k for k in items if k.startswith(f"Pod/{batch}")]
    assert report["decidedThroughTheirMaker"] >= 1
    assert "listed" in err and "pods" in err  # progress on stderr

    # text output: one line per denial and change, as check words them
    r = subprocess.run([sys.executable, "-m", "webhook", "audit", "--kubeconfig", kube.kubeconfig("admin"),
                        "-n", namespace], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert r.returncode == 1
    assert f"denied: Pod {namespace}/{urgent}: " in r.stdout
    assert f"would change: Job {namespace}/{batch}: (" in r.stdout


def test_what_the_webhook_admitted_differs_only_under_a_changed_bundle(kube, webhook_server, module_namespace,
                                                                       tmp_path):
    name = unique("admitted")
    stored = create_and_read(kube, module_namespace, pod(name, containers=[container(memory="1Gi")]))
    assert stored["spec"].get("priorityClassName") == "batchgate-batch"  # the webhook admitted it

    code, report, err = audit(kube, "--namespace", module_namespace)
    assert code == 0, err
    assert f"Pod/{name}" not in by_name(report), by_name(report).get(f"Pod/{name}")

    # the same pod under a bundle whose shm policy now gives a quarter of the memory limit
    policies = tmp_path / "policies"
    shutil.copytree(REPO_ROOT / "policies", policies)
    shm = policies / "shm" / "policy.yaml"
    doc = yaml.safe_load(shm.read_text())
    doc["spec"]["settings"]["fractionOfMemoryLimit"] = 0.25
    shm.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, report, err = audit(kube, "--namespace", module_namespace, "--policies", str(policies))
    item = by_name(report)[f"Pod/{name}"]
    assert item["mutatedBy"] == ["shm"] and item["changes"], item
