"""Job networking against a real API server: what the webhook stamps is what gets stored.

Every member of a multi-pod Job (pods from ``generateName`` on 1.20) is stored with
hostname == its name and the Job's Service as subdomain; the names the webhook
chose are accepted by the API server as the pods' names.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.register_assert_rewrite("server_fixtures")
from cluster import require_components  # noqa: E402
from server_fixtures import container, create, create_and_read, job, pod, unique  # noqa: E402

from webhook.jobnet import service_name  # noqa: E402

pytest_plugins = ["server_fixtures"]
NET = "batchgate.io/network"


@pytest.fixture(scope="module")
def ns(module_namespace: str) -> str:
    return module_namespace


def assert_member(p: dict[str, Any], service: str, size: int) -> None:
    spec, md = p["spec"], p["metadata"]
    assert spec["hostname"] == md["name"], "hostname = pod name"
    assert spec["subdomain"] == service and md["labels"][NET] == service
    assert {"name": "batchgate-hostfile", "configMap": {"name": f"{service}-hostfile", "optional": False,
                                                        "defaultMode": 420}} in spec["volumes"]
    for c in spec["containers"]:
        env = {e["name"]: e for e in c["env"]}
        assert env["BATCHGATE_NUM_HOSTS"]["value"] == str(size)
        assert env["BATCHGATE_HOSTS"]["valueFrom"]["configMapKeyRef"]["name"] == f"{service}-hostfile"
        assert {"name": "batchgate-hostfile", "mountPath": "/etc/batchgate", "readOnly": True} in c["volumeMounts"]


def test_job_pods_are_named_by_the_webhook_and_use_it_as_hostname(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    name = unique("mpi")
    created = create(kube, ns, job(name, parallelism=3, completions=3,
                                   containers=[container(cpu="100m", memory="64Mi")]))
    assert created["spec"]["template"]["spec"]["subdomain"] == name
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={created['metadata']['uid']}", count=3)
    names = {p["metadata"]["name"] for p in pods}
    assert len(names) == 3
    for p in pods:
        assert re.fullmatch(rf"{name}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", p["metadata"]["name"])
        assert_member(p, name, 3)


def test_generate_name_job_with_a_dotted_name_gets_valid_service_and_hostnames(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    created = create(kube, ns, job(None, generate_name="sim.v2-", parallelism=2,
                                   containers=[container(cpu="100m", memory="64Mi")]))
    job_name = created["metadata"]["name"]
    assert "subdomain" not in created["spec"]["template"]["spec"], "named on the pods: the Job had no name yet"
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={created['metadata']['uid']}", count=2)
    service = service_name(job_name)
    assert service != job_name and "." not in service
    for p in pods:
        assert p["metadata"]["name"].startswith(f"{job_name}-")
        assert p["spec"]["subdomain"] == service and p["metadata"]["labels"][NET] == service
        assert "." not in p["spec"]["hostname"] and len(p["spec"]["hostname"]) <= 63


def test_bare_pods_of_a_group_keep_their_names_as_hostnames(kube, webhook_server, ns):
    group = unique("ring")
    labels = {"batchgate.io/pod-group": group, "batchgate.io/pod-group-size": "2"}
    stored = [create_and_read(kube, ns, pod(f"{group}-{i}", labels=labels)) for i in range(2)]
    for i, p in enumerate(stored):
        assert p["metadata"]["name"] == f"{group}-{i}"
        assert_member(p, group, 2)


def test_the_name_follows_the_request_uid_not_the_object(kube, webhook_server, ns):
    """Two identical generateName pods: two requests, two names (what the API server would do)."""
    group = unique("twin")
    body = pod("x", labels={"batchgate.io/pod-group": group, "batchgate.io/pod-group-size": "2"})
    body["metadata"] = {**body["metadata"], "generateName": f"{group}-"}
    del body["metadata"]["name"]
    a, b = (create(kube, ns, body) for _ in range(2))
    assert a["metadata"]["name"] != b["metadata"]["name"]
    for p in (a, b):
        assert p["spec"]["hostname"] == p["metadata"]["name"]
        assert len(p["metadata"]["name"]) == len(group) + 1 + 5
