"""job-network: hostnames, subdomains, hostfile stamps for Pods and Jobs (1.20 and Indexed Jobs)."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture
from tests.unit.conftest import (
    checked_decide,
    decided,
    load_sample,
    only,
    settings_error,
    with_settings,
)
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.jobnet import (
    hostfile_name,
    hostname_for,
    is_dns_label,
    parse_peers,
    service_name,
)
from webhook.offline import Caller, synthetic_review
from webhook.reconciler.settings import QueuePolicy

CONTROLLER = Caller(username="system:kube-controller-manager", namespace="demo")
NET = "batchgate.io/network"


@pytest.fixture(scope="module")
def jn(bundle: Bundle) -> Bundle:
    return only(bundle, "job-network")


def with_uid(obj: dict[str, Any], uid: str, caller: Caller) -> dict[str, Any]:
    review = synthetic_review(obj, caller)
    review["request"]["uid"] = uid
    return review


def pod_of_generate_name_job(size: str = "2") -> dict[str, Any]:
    """The Job controller's real Pod CREATE (1.20: generateName only), from a Job whose template
    the pod-group policy gave only the size (the Job itself had generateName)."""
    obj = copy.deepcopy(fixture("pod-create-by-job-controller.mutate.json")["request"]["object"])
    obj["metadata"]["labels"]["batchgate.io/pod-group-size"] = size
    return obj


# -- names --------------------------------------------------------------------------
@pytest.mark.parametrize(("group", "service"), [
    ("mpi-sim", "mpi-sim"),
    ("a" * 63, "a" * 63),
])
def test_service_is_the_group_name_when_it_can_be(group: str, service: str) -> None:
    assert service_name(group) == service


@pytest.mark.parametrize("group", ["3d-lattice", "run.v2", "Big_Run", "x" * 70, "-"])
def test_other_group_names_become_distinct_dns_1035_labels(group: str) -> None:
    s = service_name(group)
    assert len(s) <= 63 and s[0].isalpha() and is_dns_label(s), s
    assert service_name(s) == s, "idempotent: a Service name maps to itself"
    assert s != service_name(group + "x")


def test_hostname_is_the_pod_name_when_that_is_a_dns_label() -> None:
    assert hostname_for("mpi-sim-bk2xq") == "mpi-sim-bk2xq"
    h = hostname_for("run.v2-abcde")
    assert is_dns_label(h) and "." not in h


def test_peers_parse_in_order_without_repeats() -> None:
    assert parse_peers(" viz, post viz,,") == ("viz", "post")
    assert parse_peers(None) == () and parse_peers("") == ()


# -- pods ------------------------------------------------------------------------------
def test_generate_name_pod_gets_no_name_and_no_hostname(bundle: Bundle) -> None:
    """Full bundle, as the cluster runs it: pod-group names the group after the owner Job and
    job-network stamps the pod, but a pod with generateName only (a non-indexed Job's) is not
    given a name or a hostname: the API server picks its name after the webhooks, and its
    hostname would not outlive it anyway. Gang Jobs are Indexed (pod-group), whose pods come with
    ``<job>-<index>``."""
    obj = pod_of_generate_name_job()
    d = decided(with_uid(obj, "dacd21f1-732d-4369-9c06-0d61ea09518b", CONTROLLER), bundle, phase="check")
    assert d.allowed and not d.errors
    assert d.obj is not None
    assert "name" not in d.obj["metadata"] and d.obj["metadata"]["generateName"] == "mpi-sim2-"
    spec = d.obj["spec"]
    assert "hostname" not in spec and spec["subdomain"] == "mpi-sim2"
    assert d.obj["metadata"]["labels"][NET] == "mpi-sim2"
    assert not any(op["path"] in ("/metadata/name", "/spec/hostname") for op in d.patch)
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["BATCHGATE_NUM_HOSTS"]["value"] == "2"
    assert env["BATCHGATE_HOSTS"]["valueFrom"]["configMapKeyRef"] == {
        "name": "mpi-sim2-hostfile", "key": "hosts", "optional": False}
    # the request's uid no longer matters: another request gets the same patch
    other = decided(with_uid(obj, "0f0c3a55-0000-4000-8000-000000000001", CONTROLLER), bundle, phase="check")
    assert other.patch == d.patch
    # reinvocation: the stamped pod passes unchanged
    again = decided(synthetic_review(d.obj, CONTROLLER), bundle, phase="mutate")
    assert again.patch == []


def test_pod_with_a_name_keeps_it_as_its_hostname(jn: Bundle) -> None:
    d = checked_decide(jn, load_sample("job-network", "pod-opt-in.yaml"), Caller(namespace="demo"))
    assert d.obj is not None
    assert d.obj["spec"]["hostname"] == "ring-0" and "generateName" not in d.obj["metadata"]


def test_single_pod_and_unlabelled_pods_are_untouched(jn: Bundle) -> None:
    obj = pod_of_generate_name_job(size="1")
    d = checked_decide(jn, obj, CONTROLLER)
    assert d.patch == []


def test_existing_env_and_mounts_are_kept(jn: Bundle) -> None:
    pod = load_sample("job-network", "pod-opt-in.yaml")
    pod["spec"]["containers"][0]["env"] = [{"name": "BATCHGATE_SERVICE", "value": "mine"}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/batchgate/"}]
    d = checked_decide(jn, pod, Caller(namespace="demo"))
    assert d.obj is not None
    c = d.obj["spec"]["containers"][0]
    assert [e for e in c["env"] if e["name"] == "BATCHGATE_SERVICE"] == [{"name": "BATCHGATE_SERVICE", "value": "mine"}]
    assert c["volumeMounts"] == [{"name": "cfg", "mountPath": "/etc/batchgate/"}]


# -- Jobs -----------------------------------------------------------------------------
def test_dotted_job_name_gets_a_valid_service(jn: Bundle) -> None:
    job = load_sample("job-network", "job-mpi.yaml")
    job["metadata"]["name"] = "sim.v2"
    job["spec"]["template"]["metadata"]["labels"]["batchgate.io/pod-group"] = "sim.v2"
    d = checked_decide(jn, job, Caller(namespace="demo"))
    assert d.obj is not None
    sub = d.obj["spec"]["template"]["spec"]["subdomain"]
    assert sub == service_name("sim.v2") and is_dns_label(sub) and "." not in sub
    vol = d.obj["spec"]["template"]["spec"]["volumes"][0]
    assert vol["configMap"]["name"] == hostfile_name(sub)


def test_indexed_job_on_current_kubernetes(bundle: Bundle) -> None:
    """A recorded Indexed Job (batch/v1, completionMode Indexed, Kubernetes >= 1.22): the template is
    stamped like any Job's; its pods then come with hostname <job>-<index> and keep it."""
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "lattice", "namespace": "demo"},
        "spec": {
            "completionMode": "Indexed", "completions": 4, "parallelism": 4, "backoffLimit": 0,
            "template": {"metadata": {}, "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}]}},
        },
    }
    d = checked_decide(bundle, job, Caller(namespace="demo"))
    assert d.obj is not None
    t = d.obj["spec"]["template"]
    assert t["spec"]["subdomain"] == "lattice" and t["metadata"]["labels"][NET] == "lattice"
    assert "hostname" not in t["spec"], "the Job controller gives each index its hostname"
    assert t["metadata"]["annotations"]["batchgate.io/slots"] == "2"  # slots: cpu in the shipped bundle
    pod = load_sample("job-network", "pod-indexed-job.yaml")
    p = decided(synthetic_review(pod, CONTROLLER), bundle, phase="check")
    assert p.obj is not None
    assert p.obj["spec"]["hostname"] == "lattice-2" and "name" not in p.obj["metadata"]


def test_connect_to_from_job_metadata_is_normalized(jn: Bundle) -> None:
    job = load_sample("job-network", "job-connected.yaml")
    job["metadata"]["annotations"]["batchgate.io/connect-to"] = "viz, 3d.render"
    d = checked_decide(jn, job, Caller(namespace="demo"))
    assert d.obj is not None
    got = d.obj["spec"]["template"]["metadata"]["annotations"]["batchgate.io/connect-to"]
    assert got == f"viz,{service_name('3d.render')}"


def test_wait_for_hostfile_off_makes_references_optional(tmp_path: Path) -> None:
    b = with_settings(tmp_path, "job-network", {"waitForHostfile": False, "slots": 3})
    d = checked_decide(b, load_sample("job-network", "pod-opt-in.yaml"), Caller(namespace="demo"))
    assert d.obj is not None
    spec = d.obj["spec"]
    assert spec["volumes"][-1]["configMap"]["optional"] is True
    assert d.obj["metadata"]["annotations"]["batchgate.io/slots"] == "3"


def test_forged_network_label_is_denied(jn: Bundle) -> None:
    pod = load_sample("job-network", "pod-opt-in.yaml")
    pod["metadata"]["labels"][NET] = "Not A Service"
    d: Decision = checked_decide(jn, pod, Caller(namespace="demo"))
    assert not d.allowed and "must name a Service" in d.message


# -- settings ---------------------------------------------------------------------------
def test_isolation_is_off_in_the_shipped_bundle(bundle: Bundle) -> None:
    assert QueuePolicy.from_bundle(bundle).isolation == ()


def test_isolation_rules_parse(tmp_path: Path) -> None:
    b = with_settings(tmp_path, "job-network", {"isolation": [
        {"namespaces": ["hpc-*"], "egress": "restricted",
         "proxy": {"namespaceSelector": {"batchgate.io/role": "platform"}, "podSelector": {"app": "proxy"}}},
    ]})
    qp = QueuePolicy.from_bundle(b)  # what the reconciler reads from the bundle
    rule = qp.isolation_for("hpc-7")
    assert rule is not None and rule.egress == "restricted"
    assert rule.proxy is not None and rule.proxy.pod_selector == (("app", "proxy"),)
    assert qp.isolation_for("demo") is None


@pytest.mark.parametrize(("settings_yaml", "needle"), [
    ("    isolation:\n      - namespaces: [hpc]\n        proxy: {namespaceSelector: {}, podSelector: {app: p}}\n",
     "an empty selector would let every pod in"),
    ("    isolation:\n      - namespaces: [hpc]\n        egress: closed\n", "egress"),
    ("    isolation:\n      - namespaces: []\n", "name at least one namespace"),
    ("    slots: 0\n", "slots"),
    ("    mountPath: etc\n", "mountPath"),
])
def test_bad_settings_fail_at_load_with_file_line_field(tmp_path: Path, settings_yaml: str, needle: str) -> None:
    e = settings_error(tmp_path, "job-network", settings_yaml)
    assert needle in str(e) and "policy.yaml:" in str(e)


# -- connect-to is bounded, on UPDATE too (issue 27) ------------------------------------------------
MANY = ",".join(f"w{i}" for i in range(85_000))  # 85,000 names, about 570 KB (the were 255 KB)


def _stamped_pod(connect_to: str | None = None) -> dict[str, Any]:
    pod = load_sample("job-network", "pod-opt-in.mutated.yaml")
    if connect_to is not None:
        pod["metadata"]["annotations"]["batchgate.io/connect-to"] = connect_to
    return pod


def _update(bundle: Bundle, new: dict[str, Any], old: dict[str, Any]) -> Decision:
    return decided(synthetic_review(new, Caller(operation="UPDATE", namespace="demo"), old_object=old), bundle,
                   phase="check")


def test_connect_to_set_on_a_pod_update_is_validated_and_bounded(jn: Bundle) -> None:
    """Before: the policy ran on CREATE only, so a Pod UPDATE stored any connect-to, and the
    reconciler's pod view kept about 4.8 MiB of names for such a pod."""
    d = _update(jn, _stamped_pod(MANY), _stamped_pod())
    assert not d.allowed
    assert "annotation batchgate.io/connect-to names more than 64 workloads" in d.message, d.message[:300]
    assert len(d.message) < 1000
    d = _update(jn, _stamped_pod("viz, Other_Job"), _stamped_pod())
    assert not d.allowed and "'Other_Job' is not one" in d.message
    assert _update(jn, _stamped_pod("viz,post"), _stamped_pod()).allowed
    assert _update(jn, _stamped_pod(",".join(f"w{i}" for i in range(64))), _stamped_pod()).allowed


def test_an_update_that_leaves_connect_to_as_it_was_passes(jn: Bundle) -> None:
    """A pod stored with a value the policy refuses now (before the bound, or while the webhook
    was down) can still be labelled, lose its finalizers and be deleted."""
    old = _stamped_pod(MANY)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "hpc"
    d = _update(jn, new, old)
    assert d.allowed and d.patch == [], d.message[:300]


def test_connect_to_with_many_names_is_denied_at_create_quickly(jn: Bundle) -> None:
    """parse_peers was quadratic: 85,000 names took about a minute of the webhook's one thread."""
    job = load_sample("job-network", "job-connected.yaml")
    job["metadata"]["annotations"]["batchgate.io/connect-to"] = MANY
    t = time.perf_counter()
    d = checked_decide(jn, job, Caller(namespace="demo"))
    assert time.perf_counter() - t < 5
    assert not d.allowed and "names more than 64 workloads" in d.message
    assert parse_peers(MANY, most=65) == tuple(f"w{i}" for i in range(65))
