"""Pods batchgate must not touch, or touch differently: Windows pods, host IPC or /dev,
operators' service accounts, pods of operator custom resources."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from tests.unit.conftest import check, shipped_bundle, workload

SHM = "/dev/shm"


def shm_mounts(spec):
    return [next((m["name"] for m in c.get("volumeMounts") or [] if m["mountPath"] == SHM), None)
            for c in spec["containers"]]


def shm_volume(spec):
    return next((v for v in spec.get("volumes") or [] if v["name"] == "batchgate-shm"), None)


@pytest.mark.parametrize("extra", [
    {"nodeSelector": {"kubernetes.io/os": "windows"}},
    {"nodeSelector": {"beta.kubernetes.io/os": "windows"}},
    {"os": {"name": "windows"}},
    {"hostIPC": True},
], ids=["windows-selector", "windows-beta-selector", "windows-os-field", "host-ipc"])
@pytest.mark.parametrize("kind", ["Pod", "Deployment", "Job"])
def test_shm_leaves_windows_and_host_ipc_pods_alone(kind, extra):
    obj = workload(kind)
    spec = obj["spec"] if kind == "Pod" else obj["spec"]["template"]["spec"]
    spec.update(copy.deepcopy(extra))
    d = check(obj)
    assert d.allowed, d.message
    got = d.obj["spec"] if kind == "Pod" else d.obj["spec"]["template"]["spec"]
    assert shm_volume(got) is None and shm_mounts(got) == [None]


def test_shm_not_over_a_host_dev_mount():
    pod = workload("Pod")
    pod["spec"]["containers"].append({"name": "dev", "image": "busybox",
                                      "volumeMounts": [{"name": "hostdev", "mountPath": "/dev"}]})
    pod["spec"]["volumes"] = [{"name": "hostdev", "hostPath": {"path": "/dev"}}]
    d = check(pod)
    assert shm_mounts(d.obj["spec"]) == ["batchgate-shm", None]


def test_shm_sized_from_pod_level_resources():
    pod = workload("Pod")  # containers without limits: would fall back to the fixed 1Gi
    pod["spec"]["resources"] = {"limits": {"memory": "6Gi"}}
    d = check(pod)
    assert shm_volume(d.obj["spec"])["emptyDir"]["sizeLimit"] == "3Gi"  # fractionOfMemoryLimit 0.5


RAY_OWNER = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "raycluster", "uid": "u", "controller": True}


KUBERAY = "system:serviceaccount:ray-system:kuberay-operator"


def test_pods_of_operator_custom_resources_get_no_default_deadline():
    """When the operator is one of the bundle's controllers (docs/admin/security.md: operators
    that create Pods are listed by name)."""
    pod = workload("Pod", name="raycluster-head")
    pod["metadata"]["ownerReferences"] = [RAY_OWNER]
    b = shipped_bundle()
    listed = dataclasses.replace(b, controllers=dataclasses.replace(
        b.controllers, service_accounts=(*b.controllers.service_accounts, "ray-system/kuberay-operator")))
    d = check(pod, user=KUBERAY, bundle=listed)
    assert d.allowed, d.message
    assert "activeDeadlineSeconds" not in d.obj["spec"]
    assert "batchgate.io/time-limit" not in (d.obj["metadata"].get("annotations") or {})
    assert not any("time-limit" in w for w in d.warnings)


def test_a_custom_resource_owner_claimed_by_anyone_else_is_a_job():
    """Issue 27: anyone may write an ownerReference; an operator not listed, or a user, makes a
    job with the queue's default limit (and its record, its maintenance affinity)."""
    pod = workload("Pod", name="raycluster-head")
    pod["metadata"]["ownerReferences"] = [RAY_OWNER]
    for user in (KUBERAY, "alice"):
        d = check(pod, user=user)
        assert d.obj["metadata"]["annotations"]["batchgate.io/time-limit"] == "1d", user
        assert d.obj["spec"]["activeDeadlineSeconds"] == 7 * 86400 + 600, user


def test_a_limit_set_on_an_operators_pod_is_still_honoured_and_checked():
    pod = workload("Pod", name="raycluster-head")
    pod["metadata"]["ownerReferences"] = [RAY_OWNER]
    pod["metadata"]["annotations"] = {"batchgate.io/time-limit": "2h"}
    d = check(pod)
    assert d.allowed and d.obj["spec"]["activeDeadlineSeconds"] == 7 * 86400 + 600
    pod["metadata"]["annotations"] = {"batchgate.io/time-limit": "30d"}
    assert "exceeds the maximum" in check(pod).message


def test_job_owned_by_a_custom_resource_is_still_a_job():
    job = workload("Job")
    job["metadata"]["ownerReferences"] = [{**RAY_OWNER, "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}]
    d = check(job)
    assert d.obj["metadata"]["annotations"]["batchgate.io/time-limit"] == "1d"


@pytest.mark.parametrize("kind", ["Deployment", "Pod", "Job"])
def test_a_dedicated_service_account_keeps_its_token(kind):
    obj = workload(kind)
    spec = obj["spec"] if kind == "Pod" else obj["spec"]["template"]["spec"]
    spec["serviceAccountName"] = "my-operator"
    d = check(obj)
    got = d.obj["spec"] if kind == "Pod" else d.obj["spec"]["template"]["spec"]
    assert "automountServiceAccountToken" not in got
    del spec["serviceAccountName"]  # the namespace's default account: no token
    d = check(obj)
    got = d.obj["spec"] if kind == "Pod" else d.obj["spec"]["template"]["spec"]
    assert got["automountServiceAccountToken"] is False
