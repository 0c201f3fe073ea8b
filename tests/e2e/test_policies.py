"""Every mutation and denial of the default policy catalogue, on a real API server.

Objects are created through the API server as an ordinary user (alice, group
``devs``) unless a case is about admins (bob, group ``batchgate:admins``), and
what the server *stored* is read back and checked: the built-in admission
plugins (ServiceAccount, Priority, RuntimeClass) run before the webhook, and
only the stored object shows that batchgate's patch survived them. For every
mutated kind, the stored batchgate fields must also equal what the offline dry
run (``batchgate check``, :func:`webhook.offline.check_object`) predicts, so
the CLI and the cluster cannot drift apart unnoticed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import KubeApiError, require_components, wait_for
from harness import (
    GANG,
    QUEUE_LABEL,
    TIME_LIMIT,
    assert_matches_prediction,
    container,
    create,
    create_and_read,
    cronjob,
    deployment,
    expect_denied,
    job,
    jobs_path,
    own_taint,
    own_tolerations,
    pod,
    pods_path,
    predict,
    seal_keys,
    unique,
)

from webhook.contract import RECORD_JOB_UID_ENV

REPO = Path(__file__).resolve().parents[2]
CREATE_HOOK = "create.validate.batchgate.io"
UPDATE_HOOK = "update.validate.batchgate.io"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
BACKSTOP_BATCH = 7 * 86400 + 600  # queue batch max 7d + backstopMargin 10m


@pytest.fixture(scope="module")
def ns(module_namespace: str) -> str:
    return module_namespace


def stored_and_predicted(kube: Any, hook: Any, ns: str, obj: dict[str, Any], *,
                         user: str = "alice", plugin_fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create ``obj`` as ``user``, read back the stored object, and check it against
    the offline prediction. ``plugin_fields`` are merged into the spec of the offline
    input to stand for a built-in admission plugin (RuntimeClass overhead)."""
    stored = create_and_read(kube, ns, obj, as_user=user)
    offline_input = copy.deepcopy(obj)
    offline_input["spec"].update(plugin_fields or {})
    decision = predict(hook, offline_input, user=user, namespace=ns)
    assert decision.allowed, f"offline check denies what the cluster admitted: {decision.message}"
    assert decision.obj is not None
    assert_matches_prediction(stored, decision.obj, server_version=kube.server_version())
    return stored


def mounts(c: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}


# --------------------------------------------------------------------------
# queue-priority


@pytest.mark.parametrize(("labels", "klass", "value", "preemption"), [
    pytest.param({}, "batchgate-batch", 1000, "PreemptLowerPriority", id="no-queue-label-batch"),
    pytest.param({QUEUE_LABEL: "interactive"}, "batchgate-interactive", 10000,
                 "PreemptLowerPriority", id="interactive"),
    pytest.param({QUEUE_LABEL: "scavenger"}, "batchgate-scavenger", -1000, "Never", id="scavenger"),
])
def test_queue_priority_class_and_integer_priority(kube, webhook_server, ns, labels, klass, value,
                                                   preemption):
    # scavengers must be Guaranteed (scavenger-qos), so every pod here is
    obj = pod(unique("prio"), labels=labels, containers=[container(cpu="100m", memory="64Mi")])
    stored = stored_and_predicted(kube, webhook_server, ns, obj)
    spec = stored["spec"]
    assert stored["metadata"]["labels"][QUEUE_LABEL] == (labels.get(QUEUE_LABEL) or "batch")
    assert spec["priorityClassName"] == klass
    # the Priority plugin ran before the webhook and wrote the globalDefault's 0:
    assert spec["priority"] == value
    assert spec["preemptionPolicy"] == preemption
    pc = kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{klass}")
    assert (pc["value"], pc["preemptionPolicy"]) == (value, preemption)


def test_admin_only_class_denied_for_alice_naming_the_queues(kube, webhook_server, ns):
    obj = pod(unique("urgent"), priorityClassName="batchgate-urgent")
    msg = expect_denied(kube, ns, obj, webhook=CREATE_HOOK)
    assert "priorityClassName 'batchgate-urgent' is reserved for admins" in msg
    for queue, klass in (("interactive", "batchgate-interactive"), ("batch", "batchgate-batch"),
                         ("scavenger", "batchgate-scavenger")):
        assert f"{queue} -> {klass}" in msg, msg


def test_admin_only_class_allowed_for_batchgate_admins(kube, webhook_server, ns):
    obj = pod(unique("urgent"), priorityClassName="batchgate-urgent")
    stored = stored_and_predicted(kube, webhook_server, ns, obj, user="bob")
    assert stored["spec"]["priorityClassName"] == "batchgate-urgent"
    assert stored["spec"]["priority"] == 100000
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "batch"


def test_unknown_queue_denied_listing_the_queues(kube, webhook_server, ns):
    msg = expect_denied(kube, ns, pod(unique("gpu"), labels={QUEUE_LABEL: "gpu"}),
                        webhook=CREATE_HOOK)
    assert ("queue 'gpu' does not exist; set the label batchgate.io/queue to one of: "
            + ", ".join(webhook_server.bundle.queues)) in msg


# --------------------------------------------------------------------------
# shm


def test_shm_in_every_container_including_init(kube, webhook_server, ns):
    obj = pod(unique("shm"),
              initContainers=[container("stage-in")],
              containers=[container("a", cpu="100m", memory="1Gi"),
                          container("b", cpu="100m", memory="1Gi")])
    stored = stored_and_predicted(kube, webhook_server, ns, obj)
    spec = stored["spec"]
    shm = [v for v in spec["volumes"] if v["name"] == "batchgate-shm"]
    # half the pod's memory limit (2Gi): fractionOfMemoryLimit 0.5
    assert shm == [{"name": "batchgate-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    for c in spec["initContainers"] + spec["containers"]:
        assert mounts(c).get("/dev/shm") == "batchgate-shm", c["name"]


def test_shm_no_memory_limit_gets_fixed_size(kube, webhook_server, ns):
    stored = stored_and_predicted(kube, webhook_server, ns, pod(unique("shm")))
    shm = [v for v in stored["spec"]["volumes"] if v["name"] == "batchgate-shm"]
    assert shm[0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}


def test_shm_users_own_dev_shm_is_kept(kube, webhook_server, ns):
    own = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}
    obj = pod(unique("ownshm"),
              initContainers=[container("stage-in")],
              containers=[container("main", volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}])],
              volumes=[own])
    stored = stored_and_predicted(kube, webhook_server, ns, obj)
    spec = stored["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["shm"]["emptyDir"] == own["emptyDir"]
    assert mounts(spec["containers"][0])["/dev/shm"] == "shm"
    # the init container had none: it gets batchgate's, under a name no user volume has
    assert mounts(spec["initContainers"][0])["/dev/shm"] == "batchgate-shm"
    assert [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]].count("/dev/shm") == 1


# --------------------------------------------------------------------------
# service-account-token


def test_service_account_token_really_gone(kube, webhook_server, ns):
    obj = pod(unique("sat"), initContainers=[container("init")])
    # what the ServiceAccount plugin does to a pod without batchgate: a dry run as admin in
    # kube-system (never sent to batchgate) shows the injected volume
    plain = kube.request("POST", pods_path("kube-system"), obj, query={"dryRun": "All"})
    assert any(v["name"].startswith("kube-api-access-") for v in plain["spec"].get("volumes") or []), \
        "the ServiceAccount plugin injected no token here; the test would prove nothing"

    stored = stored_and_predicted(kube, webhook_server, ns, obj)
    spec = stored["spec"]
    assert spec["automountServiceAccountToken"] is False
    names = [v["name"] for v in spec.get("volumes") or []]
    assert not [n for n in names if "token" in n or n.startswith("kube-api-access-")], names
    for c in spec["initContainers"] + spec["containers"]:
        assert SA_MOUNT not in mounts(c), c


def test_service_account_token_job_template(kube, webhook_server, ns):
    stored = stored_and_predicted(kube, webhook_server, ns, job(unique("satjob")))
    assert stored["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


# --------------------------------------------------------------------------
# kata-cpu


def test_kata_cpu_gives_back_the_vm_overhead(kube, webhook_server, ns, kata_runtime_class):
    obj = pod(unique("kata"), runtimeClassName="kata",
              containers=[container("c", cpu="4", memory="4Gi")])
    overhead = kata_runtime_class["overhead"]["podFixed"]
    # offline, the RuntimeClass plugin's spec.overhead is given by hand (offline.py says so)
    stored = stored_and_predicted(kube, webhook_server, ns, obj, plugin_fields={"overhead": overhead})
    spec = stored["spec"]
    assert spec["overhead"] == {"cpu": "250m", "memory": "160Mi"}
    res = spec["containers"][0]["resources"]
    # subtract: 4 CPUs asked, 250m VM overhead -> the container keeps 3750m (requests and limits)
    assert res["requests"]["cpu"] == "3750m"
    assert res["limits"]["cpu"] == "3750m"
    assert res["requests"]["memory"] == res["limits"]["memory"] == "4Gi"  # cpu only
    recorded = json.loads(stored["metadata"]["annotations"]["batchgate.io/kata-requested-cpu"])
    assert recorded == {"c": {"limits": "4", "requests": "4"}}


def test_kata_cpu_too_small_denied(kube, webhook_server, ns, kata_runtime_class):
    obj = pod(unique("kata"), runtimeClassName="kata",
              containers=[container("c", cpu="300m", memory="1Gi")])
    msg = expect_denied(kube, ns, obj, webhook="mutate.batchgate.io")
    assert "runtimeClassName kata" in msg and "250m" in msg, msg


# --------------------------------------------------------------------------
# pod-group


def gang_labels(meta: dict[str, Any]) -> dict[str, str]:
    keys = ("batchgate.io/pod-group", "batchgate.io/pod-group-size", "scheduling.x-k8s.io/pod-group")
    labels = meta.get("labels") or {}
    return {k: labels[k] for k in keys if k in labels}


def test_pod_group_job_template_and_controller_pods(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    name = unique("gang")
    stored = stored_and_predicted(kube, webhook_server, ns, job(name, parallelism=3, labels=GANG))
    want = {"batchgate.io/pod-group": name, "batchgate.io/pod-group-size": "3",
            "scheduling.x-k8s.io/pod-group": name}
    assert gang_labels(stored["spec"]["template"]["metadata"]) == want
    uid = stored["metadata"]["uid"]
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={uid}", count=3, timeout=60)
    assert len(pods) == 3
    for p in pods:
        assert gang_labels(p["metadata"]) == want, p["metadata"]["name"]


def test_pod_group_generate_name_job_named_by_its_pods(kube, webhook_server, ns):
    """A Job created with generateName has no name at admission: its template gets only the
    size, and its Pods (which arrive with only generateName) are named after the real Job."""
    require_components(kube, "kube-controller-manager")
    obj = job(None, generate_name="gang-gen-", parallelism=3, labels=GANG)
    created = create(kube, ns, obj)
    real = created["metadata"]["name"]
    stored = kube.get(jobs_path(ns, real))
    tmpl = stored["spec"]["template"]["metadata"]
    assert gang_labels(tmpl) == {"batchgate.io/pod-group-size": "3"}
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={stored['metadata']['uid']}",
                              count=3, timeout=60)
    want = {"batchgate.io/pod-group": real, "batchgate.io/pod-group-size": "3",
            "scheduling.x-k8s.io/pod-group": real}
    for p in pods:
        assert p["metadata"]["generateName"] == f"{real}-"
        assert gang_labels(p["metadata"]) == want, p["metadata"]["name"]
    # offline, for the Pod as the Job controller sends it
    p = pods[0]
    as_sent = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": p["metadata"]["generateName"],
        "labels": dict(tmpl.get("labels") or {}),
        "annotations": dict(tmpl.get("annotations") or {}),
        "ownerReferences": p["metadata"]["ownerReferences"]},
        "spec": copy.deepcopy(stored["spec"]["template"]["spec"])}
    decision = predict(webhook_server, as_sent, user="system:serviceaccount:kube-system:job-controller",
                       namespace=ns)
    assert decision.allowed and decision.obj is not None, decision.message
    assert_matches_prediction(p, decision.obj, server_version=kube.server_version())


def test_pod_group_bad_size_denied(kube, webhook_server, ns):
    obj = pod(unique("gang"), labels={"batchgate.io/pod-group": "g", "batchgate.io/pod-group-size": "0"})
    msg = expect_denied(kube, ns, obj, webhook=CREATE_HOOK)
    assert "label batchgate.io/pod-group-size must be a positive whole number of pods" in msg, msg


# --------------------------------------------------------------------------
# time-limit and time-limit-extension


def test_time_limit_default_and_backstop_on_pod(kube, webhook_server, ns):
    stored = stored_and_predicted(kube, webhook_server, ns, pod(unique("tl")))
    assert stored["metadata"]["annotations"][TIME_LIMIT] == "1d"  # batch default 24h
    assert stored["spec"]["activeDeadlineSeconds"] == BACKSTOP_BATCH


def test_time_limit_default_and_backstop_on_job(kube, webhook_server, ns):
    stored = stored_and_predicted(kube, webhook_server, ns,
                                  job(unique("tl"), labels={QUEUE_LABEL: "interactive"}))
    assert stored["metadata"]["annotations"][TIME_LIMIT] == "2h"
    tmpl = stored["spec"]["template"]
    assert tmpl["metadata"]["annotations"][TIME_LIMIT] == "2h"
    assert tmpl["spec"]["activeDeadlineSeconds"] == 12 * 3600 + 600
    assert "activeDeadlineSeconds" not in stored["spec"]  # the Job's own is not touched


def test_time_limit_users_value_is_kept(kube, webhook_server, ns):
    stored = stored_and_predicted(kube, webhook_server, ns,
                                  pod(unique("tl"), annotations={TIME_LIMIT: "90m"}))
    assert stored["metadata"]["annotations"][TIME_LIMIT] == "90m"


def test_time_limit_over_maximum_denied(kube, webhook_server, ns):
    msg = expect_denied(kube, ns, job(unique("tl"), annotations={TIME_LIMIT: "8d"}),
                        webhook=CREATE_HOOK)
    assert "batchgate.io/time-limit 8d exceeds the maximum of queue 'batch', which is 7d" in msg


def test_time_limit_malformed_denied_with_example(kube, webhook_server, ns):
    msg = expect_denied(kube, ns, pod(unique("tl"), annotations={TIME_LIMIT: "4 hours"}),
                        webhook=CREATE_HOOK)
    assert "batchgate.io/time-limit '4 hours' is not a duration" in msg
    assert "e.g. 90m, 4h, 2d or 1h30m" in msg


@pytest.fixture
def running_job(kube, webhook_server, ns):
    name = unique("ext")
    create(kube, ns, job(name, annotations={TIME_LIMIT: "1d"}))
    return name


@pytest.mark.parametrize(("value", "denial"), [
    pytest.param("3d", None, id="extend-within-max"),
    pytest.param("2h", None, id="shorten"),
    pytest.param("7d", None, id="exactly-max"),
    pytest.param("8d", "8d exceeds the maximum of queue 'batch', which is 7d; the current limit is 1d",
                 id="over-max"),
    pytest.param("6 days", "is not a duration", id="malformed"),
    pytest.param(None, "removing batchgate.io/time-limit is not allowed (the current limit is 1d)",
                 id="removed"),
])
def test_time_limit_extension_by_annotating_the_job(kube, ns, running_job, value, denial):
    path = jobs_path(ns, running_job)
    patch = {"metadata": {"annotations": {TIME_LIMIT: value}}}
    if denial is None:
        kube.patch(path, patch, as_user="alice")
        assert kube.get(path)["metadata"]["annotations"][TIME_LIMIT] == value
        return
    with pytest.raises(KubeApiError) as info:
        kube.patch(path, patch, as_user="alice")
    msg = info.value.body["message"]
    assert info.value.status == 403, msg
    assert f'admission webhook "{UPDATE_HOOK}" denied the request: time-limit-extension: ' in msg
    assert denial in msg, msg
    assert kube.get(path)["metadata"]["annotations"][TIME_LIMIT] == "1d"


def test_reconciler_annotations_are_not_forgeable(kube, ns, running_job):
    """reconciler-annotations: alice may not move started-at; an admin (the reconciler in this
    cluster runs as one) may."""
    path = jobs_path(ns, running_job)
    forged = {"metadata": {"annotations": {"batchgate.io/started-at": "2030-01-01T00:00:00Z"}}}
    with pytest.raises(KubeApiError) as info:
        kube.patch(path, forged, as_user="alice")
    msg = info.value.body["message"]
    assert info.value.status == 403, msg
    assert f'admission webhook "{UPDATE_HOOK}" denied the request: reconciler-annotations: ' in msg
    assert "batchgate.io/started-at is written by the batchgate reconciler only" in msg
    assert "batchgate.io/started-at" not in kube.get(path)["metadata"]["annotations"]
    kube.patch(path, forged, as_user="admin")
    assert kube.get(path)["metadata"]["annotations"]["batchgate.io/started-at"] == "2030-01-01T00:00:00Z"


def test_label_update_of_existing_pod_keeps_working(kube, webhook_server, ns):
    name = unique("relabel")
    create(kube, ns, pod(name))
    before = kube.get(pods_path(ns, name))
    kube.patch(pods_path(ns, name), {"metadata": {"labels": {"team": "physics"}}}, as_user="alice")
    after = kube.get(pods_path(ns, name))
    assert after["metadata"]["labels"]["team"] == "physics"
    assert after["spec"] == before["spec"]
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]


# --------------------------------------------------------------------------
# nodes for the scheduling tests (tainted, harness.own_taint: only the pods that tolerate it land
# there, so other tests' pending pods cannot change what is on them)

EXCLUSIVE = "batchgate.io/exclusive"
GROUP = "batchgate.io/exclusive-group"
OWN = "policies"  # the tag of this module's nodes


def anti_affinity_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return (((spec.get("affinity") or {}).get("podAntiAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution") or [])


@pytest.fixture
def two_nodes(kube):
    """Two tainted fake nodes only this test's pods tolerate (other tests' pending pods
    must not land there and change what "other pods" are)."""
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    names = [unique("excl-node") for _ in range(2)]
    for n in names:
        kube.create_node(n, cpu="4", memory="8Gi", taints=own_taint(OWN))
    yield names
    for n in names:
        kube.delete_node(n)


def scheduled_node(kube, ns: str, name: str, timeout: float = 30) -> str:
    return wait_for(lambda: kube.get(pods_path(ns, name))["spec"].get("nodeName"), timeout,
                    message=f"pod {ns}/{name} to be scheduled")


def force_delete(kube, ns: str, names: list[str]) -> None:
    """No kubelet confirms deletions here: delete with grace 0 and wait until gone."""
    for n in names:
        kube.delete(pods_path(ns, n), body={"kind": "DeleteOptions", "apiVersion": "v1",
                                            "gracePeriodSeconds": 0})
    for n in names:
        wait_for(lambda n=n: not kube.exists(pods_path(ns, n)), 30, message=f"pod {n} gone")


# --------------------------------------------------------------------------
# the other workload kinds: CronJob, Deployment (and the Pods its ReplicaSet makes)


def test_cronjob_template_carries_everything_for_its_jobs(kube, webhook_server, ns):
    stored = stored_and_predicted(kube, webhook_server, ns, cronjob(unique("cron"), parallelism=2, job_labels=GANG))
    jt = stored["spec"]["jobTemplate"]
    tmpl = jt["spec"]["template"]
    assert jt["metadata"]["annotations"][TIME_LIMIT] == "1d"
    assert tmpl["metadata"]["annotations"][TIME_LIMIT] == "1d"
    labels = tmpl["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "batch"
    # each run is its own Job: the group is named per Job, so the template has only the size
    assert labels["batchgate.io/pod-group-size"] == "2" and "batchgate.io/pod-group" not in labels
    spec = tmpl["spec"]
    assert spec["priorityClassName"] == "batchgate-batch"
    assert spec["automountServiceAccountToken"] is False
    assert spec["activeDeadlineSeconds"] == BACKSTOP_BATCH
    assert "batchgate-shm" in {v["name"] for v in spec["volumes"]}


def test_deployment_pods_are_services_without_time_limit(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    name = unique("svc")
    stored = stored_and_predicted(kube, webhook_server, ns,
                                  deployment(name, labels={QUEUE_LABEL: "interactive"}))
    tmpl = stored["spec"]["template"]
    assert tmpl["metadata"]["labels"][QUEUE_LABEL] == "interactive"
    assert tmpl["spec"]["priorityClassName"] == "batchgate-interactive"
    (p,) = kube.wait_for_pods(ns, label_selector=f"app={name}", count=1, timeout=60)
    assert [o["kind"] for o in p["metadata"]["ownerReferences"]] == ["ReplicaSet"]
    spec = p["spec"]
    assert (spec["priorityClassName"], spec["priority"]) == ("batchgate-interactive", 10000)
    # time-limit's exemptOwnerKinds: a ReplicaSet's Pods are services, not jobs
    assert TIME_LIMIT not in (p["metadata"].get("annotations") or {})
    assert "activeDeadlineSeconds" not in spec
    # shm and service-account-token act on the Pod itself (they do not mutate apps templates)
    assert spec["automountServiceAccountToken"] is False
    assert not [v for v in spec["volumes"] if "token" in v["name"]], spec["volumes"]
    assert mounts(spec["containers"][0]).get("/dev/shm") == "batchgate-shm"


# --------------------------------------------------------------------------
# namespace rules of the default bundle: notebooks / jupyter-* default to interactive;
# gpu-* allow batch and scavenger only, on nodes batchgate.io/pool=gpu


@pytest.fixture(scope="module")
def jupyter_ns(kube, webhook_server):
    name = kube.create_namespace(name=unique("jupyter"))
    yield name
    kube.delete_namespace(name)


@pytest.fixture(scope="module")
def gpu_ns(kube, webhook_server):
    name = kube.create_namespace(name=unique("gpu"))
    yield name
    kube.delete_namespace(name)


def test_namespace_default_queue(kube, webhook_server, jupyter_ns):
    stored = stored_and_predicted(kube, webhook_server, jupyter_ns, pod(unique("nb")))
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "interactive"
    assert (stored["spec"]["priorityClassName"], stored["spec"]["priority"]) == (
        "batchgate-interactive", 10000)
    assert stored["metadata"]["annotations"][TIME_LIMIT] == "2h"


def test_namespace_node_selector_stored(kube, webhook_server, gpu_ns):
    stored = stored_and_predicted(kube, webhook_server, gpu_ns,
                                  pod(unique("train"), nodeSelector={"disktype": "ssd"}))
    assert stored["spec"]["nodeSelector"] == {"disktype": "ssd", "batchgate.io/pool": "gpu"}
    stored = stored_and_predicted(kube, webhook_server, gpu_ns, job(unique("train")))
    assert stored["spec"]["template"]["spec"]["nodeSelector"] == {"batchgate.io/pool": "gpu"}


def test_namespace_node_selector_conflict_denied(kube, webhook_server, gpu_ns):
    msg = expect_denied(kube, gpu_ns, pod(unique("train"), nodeSelector={"batchgate.io/pool": "cpu"}),
                        webhook="mutate.batchgate.io", status=403)
    assert (f"nodeSelector batchgate.io/pool=cpu conflicts with namespace {gpu_ns}, which runs only "
            "on nodes with batchgate.io/pool=gpu; remove batchgate.io/pool from nodeSelector") in msg


def test_namespace_closed_queue_denied_for_users_open_for_admins(kube, webhook_server, gpu_ns):
    obj = pod(unique("nb"), labels={QUEUE_LABEL: "interactive"})
    msg = expect_denied(kube, gpu_ns, obj, webhook=CREATE_HOOK)
    assert (f"queue 'interactive' is not available in namespace {gpu_ns}; use batchgate.io/queue: "
            "one of batch, scavenger") in msg
    stored = stored_and_predicted(kube, webhook_server, gpu_ns, obj, user="bob")
    assert stored["spec"]["priorityClassName"] == "batchgate-interactive"


def test_namespace_node_selector_schedules_onto_the_pool(kube, webhook_server, gpu_ns):
    require_components(kube, "kube-scheduler", "kube-controller-manager")
    taint = own_taint(OWN)
    plain, gpu = unique("cpu-node"), unique("gpu-node")
    kube.create_node(plain, cpu="8", taints=taint)
    kube.create_node(gpu, cpu="8", labels={"batchgate.io/pool": "gpu"}, taints=taint)
    try:
        names = [unique("train") for _ in range(3)]
        for n in names:
            create(kube, gpu_ns, pod(n, tolerations=own_tolerations(OWN),
                                     containers=[container(cpu="100m", memory="64Mi")]))
        assert {scheduled_node(kube, gpu_ns, n) for n in names} == {gpu}
        force_delete(kube, gpu_ns, names)
    finally:
        kube.delete_node(plain)
        kube.delete_node(gpu)


# --------------------------------------------------------------------------
# scavenger-qos


def test_scavenger_not_guaranteed_denied_naming_the_container(kube, webhook_server, ns):
    obj = pod(unique("scav"), labels={QUEUE_LABEL: "scavenger"},
              initContainers=[container("stage-in", cpu="100m", memory="64Mi")],
              containers=[container("sim", cpu="500m", memory="1Gi", limits=False)])
    obj["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "1Gi"}
    msg = expect_denied(kube, ns, obj, webhook=CREATE_HOOK)
    assert "queue 'scavenger' runs scavengers, which must be Guaranteed QoS" in msg
    assert "container 'sim' (spec.containers[0]): cpu request 500m != limit 1" in msg, msg
    assert "stage-in" not in msg  # it is Guaranteed


def test_scavenger_job_without_limits_denied(kube, webhook_server, ns):
    obj = job(unique("scav"), labels={QUEUE_LABEL: "scavenger"},
              containers=[container("sim", cpu="1", memory="1Gi", limits=False)])
    msg = expect_denied(kube, ns, obj, webhook=CREATE_HOOK)
    assert "container 'sim' (spec.template.spec.containers[0]): no cpu limit (set it to the request, 1)" \
        in msg, msg


def test_scavenger_guaranteed_allowed(kube, webhook_server, ns):
    obj = pod(unique("scav"), labels={QUEUE_LABEL: "scavenger"},
              containers=[container("sim", cpu="1", memory="1Gi")])
    stored = stored_and_predicted(kube, webhook_server, ns, obj)
    assert stored["status"]["qosClass"] == "Guaranteed"
    assert stored["spec"]["priorityClassName"] == "batchgate-scavenger"


# --------------------------------------------------------------------------
# scavengerjob


def sample(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((REPO / "policies/scavengerjob/samples" / name).read_text())
    obj["metadata"].pop("namespace", None)
    return obj


def test_scavengerjob_example_accepted(kube, webhook_server, ns):
    obj = sample("scavengerjob-gromacs.yaml")
    obj["metadata"]["name"] = unique("md")
    stored = create_and_read(kube, ns, obj)
    assert stored["spec"]["pods"] == 2 and stored["spec"]["image"] == obj["spec"]["image"]


def test_scavengerjob_invalid_denied_naming_every_bad_field(kube, webhook_server, ns):
    obj = sample("scavengerjob-invalid.yaml")
    # Two of the sample's mistakes never reach the webhook on a real API server: the CRD
    # schema refuses `command: gmx mdrun` (a string) and, on 1.20, `image: ""` (an empty
    # required string), with 422 (test_scavengerjob_schema_errors_come_first). Mistakes of
    # the same fields that the schema lets through stand in for them.
    obj["spec"]["command"] = []
    obj["spec"]["image"] = "gromacs 2023"
    obj["metadata"]["name"] = name = unique("broken")
    msg = expect_denied(kube, ns, obj, webhook=CREATE_HOOK, status=403)
    for part in (
        f"invalid ScavengerJob {ns}/{name}",
        "spec.priority: unknown field",
        "spec.image: must be a container image",
        "spec.command: must be a non-empty list of strings",
        "spec.resources.limits.memory: required (equal to spec.resources.requests.memory, 8Gi)",
        "spec.resources.requests.cpu: 2 must equal spec.resources.limits.cpu (4)",
        "spec.volumes[0]: needs exactly one of persistentVolumeClaim, configMap, secret",
        "spec.volumes[1].mountPath: /data/ is already mounted by spec.volumes[0]",
        "spec.volumes[2].name: 'data' is also the name of spec.volumes[0]",
        "spec.volumes[2].mountPath: required, an absolute path like /data, got 'relative/path'",
        "spec.pods: must be a whole number >= 1, got 0",
        "spec.runAsUser: must be a user id >= 1 (scavengers never run as root), got 0",
        "spec.duration",
    ):
        assert part in msg, f"{part!r} not in {msg}"
    decision = predict(webhook_server, {**obj, "metadata": {**obj["metadata"], "namespace": ns}},
                       namespace=ns)
    assert msg == f'admission webhook "{CREATE_HOOK}" denied the request: {decision.message}'


@pytest.mark.parametrize(("field", "value", "says"), [
    pytest.param("command", "gmx mdrun", "spec.command in body must be of type array", id="command-string"),
    pytest.param("image", 42, "spec.image in body must be of type string", id="image-number"),
])
def test_scavengerjob_schema_errors_come_first(kube, webhook_server, ns, field, value, says):
    """Type errors never reach the webhook: the CRD schema answers 422 first."""
    obj = sample("scavengerjob-gromacs.yaml")
    obj["spec"][field] = value
    obj["metadata"]["name"] = unique("schema")
    msg = expect_denied(kube, ns, obj, status=422)
    assert says in msg, msg
    assert "admission webhook" not in msg


def test_scavengerjob_spec_update_validated(kube, webhook_server, ns):
    obj = sample("scavengerjob-gromacs.yaml")
    obj["metadata"]["name"] = name = unique("md")
    path = f"/apis/batchgate.io/v1alpha1/namespaces/{ns}/scavengerjobs/{name}"
    create(kube, ns, obj)
    with pytest.raises(KubeApiError) as info:
        kube.patch(path, {"spec": {"runAsUser": 0}}, as_user="alice")
    assert info.value.status == 403
    msg = info.value.body["message"]
    assert f'admission webhook "{UPDATE_HOOK}" denied the request: scavengerjob: ' in msg
    assert "spec.runAsUser: must be a user id >= 1" in msg
    kube.patch(path, {"metadata": {"labels": {"team": "md"}}}, as_user="alice")  # not spec: fine
    assert kube.get(path)["spec"]["runAsUser"] == 1000


# --------------------------------------------------------------------------
# node-selection: exclusive whole nodes (needs kube-scheduler)


def test_exclusive_pod_stored_with_group_and_term(kube, webhook_server, ns):
    name = unique("excl")
    stored = stored_and_predicted(kube, webhook_server, ns, pod(name, labels={EXCLUSIVE: "true"}))
    labels = stored["metadata"]["labels"]
    assert labels[EXCLUSIVE] == "true"
    group = labels[GROUP]
    assert group.startswith(f"pod-{name}-")
    terms = anti_affinity_terms(stored["spec"])
    assert len(terms) == 1
    term = terms[0]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchExpressions"] == [
        {"key": QUEUE_LABEL, "operator": "Exists"},
        {"key": GROUP, "operator": "NotIn", "values": [group]},
    ]
    if kube.server_version() < (1, 22):
        assert "namespaceSelector" not in term  # dropped by the 1.20 API server (README)
    else:
        assert term["namespaceSelector"] == {}


def test_exclusive_bad_value_denied(kube, webhook_server, ns):
    msg = expect_denied(kube, ns, pod(unique("excl"), labels={EXCLUSIVE: "yes"}),
                        webhook="mutate.batchgate.io")
    assert "label batchgate.io/exclusive must be \"true\" or \"false\", got 'yes'" in msg


def test_forged_exclusive_group_removed(kube, webhook_server, ns):
    stored = stored_and_predicted(kube, webhook_server, ns,
                                  pod(unique("forge"), labels={GROUP: "job-other-0123456789"}))
    assert GROUP not in stored["metadata"]["labels"]
    assert not anti_affinity_terms(stored["spec"])


def test_exclusive_job_does_not_share_nodes_either_way(kube, webhook_server, ns, two_nodes,
                                                       namespace):
    n1, n2 = two_nodes
    ordinary = dict(tolerations=own_tolerations(OWN), containers=[container(cpu="100m", memory="64Mi")])

    # an ordinary queued pod already runs on n1
    a = unique("ordinary")
    create(kube, ns, pod(a, nodeSelector={"kubernetes.io/hostname": n1}, **ordinary))
    assert scheduled_node(kube, ns, a) == n1

    # (1) the exclusive Job's pods avoid n1, and pack onto the one free node together
    jname = unique("excl-job")
    stored_job = stored_and_predicted(kube, webhook_server, ns, job(
        jname, parallelism=2, labels={EXCLUSIVE: "true", **GANG}, tolerations=own_tolerations(OWN),
        containers=[container(cpu="100m", memory="64Mi")]))
    tmpl = stored_job["spec"]["template"]
    group = tmpl["metadata"]["labels"][GROUP]
    assert group.startswith(f"job-{jname}-")
    assert len(anti_affinity_terms(tmpl["spec"])) == 1
    uid = stored_job["metadata"]["uid"]
    job_pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={uid}", count=2, timeout=60)
    for p in job_pods:
        # the Job controller's pods belong to the Job's group, with the same term
        assert p["metadata"]["labels"][GROUP] == group
        assert anti_affinity_terms(p["spec"]) == anti_affinity_terms(tmpl["spec"])
    for p in job_pods:
        assert scheduled_node(kube, ns, p["metadata"]["name"]) == n2

    # (2) an ordinary pod created afterwards goes to n1, not beside the exclusive job
    b = unique("ordinary")
    create(kube, ns, pod(b, **ordinary))
    assert scheduled_node(kube, ns, b) == n1
    # and one that can only go to n2 waits, for the exclusive pods' anti-affinity
    c = unique("ordinary")
    create(kube, ns, pod(c, nodeSelector={"kubernetes.io/hostname": n2}, **ordinary))

    def unschedulable():
        conds = kube.get(pods_path(ns, c))["status"].get("conditions") or []
        return next((x for x in conds if x["type"] == "PodScheduled" and x["status"] == "False"
                     and x.get("reason") == "Unschedulable"), None)

    cond = wait_for(unschedulable, 30, message=f"pod {c} to be reported unschedulable")
    assert "anti-affinity" in cond["message"], cond
    assert not kube.get(pods_path(ns, c))["spec"].get("nodeName")

    # another namespace's pod: the term's namespaceSelector ({} = all namespaces) is dropped
    # by API servers before 1.22, so there exclusivity holds within the namespace only (README)
    d = unique("other-ns")
    create(kube, namespace, pod(d, nodeSelector={"kubernetes.io/hostname": n2}, **ordinary))
    if kube.server_version() < (1, 22):
        assert scheduled_node(kube, namespace, d) == n2
    else:
        pod_d = lambda: kube.get(pods_path(namespace, d))  # noqa: E731
        wait_for(lambda: any(x["type"] == "PodScheduled" and x.get("reason") == "Unschedulable"
                             for x in pod_d()["status"].get("conditions") or []), 30,
                 message=f"pod {d} to be unschedulable")
    force_delete(kube, namespace, [d])

    # once the exclusive job is gone, n2 takes ordinary pods again
    kube.delete(jobs_path(ns, jname), body={"kind": "DeleteOptions", "apiVersion": "v1",
                                            "propagationPolicy": "Orphan"})
    force_delete(kube, ns, [p["metadata"]["name"] for p in job_pods])
    if requeues_when_repelling_pod_leaves(kube):
        # the exclusive pods' deletion sends the waiting pod back to scheduling
        assert scheduled_node(kube, ns, c, timeout=60) == n2
        force_delete(kube, ns, [a, b, c])
    else:
        # the waiting pod is retried at the scheduler's unschedulable-pods flush, up to 5
        # minutes on; a pod created now shows that nothing holds n2 any more
        e = unique("ordinary")
        create(kube, ns, pod(e, nodeSelector={"kubernetes.io/hostname": n2}, **ordinary))
        assert scheduled_node(kube, ns, e) == n2
        force_delete(kube, ns, [a, b, c, e])


def requeues_when_repelling_pod_leaves(kube: Any) -> bool:
    """Whether kube-scheduler retries a pod at once when a running pod whose required
    anti-affinity kept it off a node goes away. Before 1.36 (1.34.4 and 1.35.4, the newest of
    theirs, included) the InterPodAffinity queueing hint checks only the waiting pod's own
    terms against the pod that went (kubernetes/kubernetes#134393, fixed for 1.36 by #135325),
    and the waiting pod is retried only by the flush of pods unschedulable for longer than
    --pod-max-in-unschedulable-pods-duration (5 minutes). See policies/node-selection/README.md."""
    return bool(kube.server_version() >= (1, 36))


@pytest.fixture(scope="module")
def exclusive_job_pods(kube, webhook_server, ns):
    """An exclusive 2-pod Job, its Pods, and the webhook's /mutate CREATE answers for them."""
    require_components(kube, "kube-controller-manager")
    before = webhook_server.server.mutate_outcomes()
    stored = create_and_read(kube, ns, job(unique("excl-np"), parallelism=2,
                                           labels={EXCLUSIVE: "true", **GANG}))
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={stored['metadata']['uid']}", count=2)
    after = webhook_answers(webhook_server, before, 3)
    return pods, {k: after[k] - before[k] for k in after}


def controller_patch(hook, p: dict[str, Any], ns: str) -> list[dict[str, Any]]:
    """The patch batchgate answers for this stored Pod, sent as the Job controller sent it.
    (What is stored is what the webhook saw: a patch that changed nothing survived.)"""
    from webhook.engine import decide
    from webhook.offline import Caller, synthetic_review

    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        k: v for k, v in p["metadata"].items()
        if k in ("generateName", "labels", "annotations", "ownerReferences")}, "spec": p["spec"]}
    obj["spec"] = {k: v for k, v in obj["spec"].items() if k != "nodeName"}
    user = "system:serviceaccount:kube-system:job-controller"
    return decide(synthetic_review(obj, Caller(username=user, groups=("system:serviceaccounts",),
                                               namespace=ns)), hook.bundle, phase="mutate",
                  keys=seal_keys(hook.server)).patch


def test_exclusive_job_pods_get_no_patch_of_their_own(kube, webhook_server, ns, exclusive_job_pods):
    """README e2e item 2: the Job controller's Pods of an exclusive Job need no patch of their
    own but the record's Job uid. Below 1.22 the API server drops namespaceSelector from the
    stored template; node-selection must treat that as the same term, or it would re-patch every
    Pod forever."""
    pods, answered = exclusive_job_pods
    # the Job, and each Pod for the record's Job uid only: the rest comes with the template (no
    # completions given, so not Indexed: no stable hostname, and none picked per pod)
    assert answered["mutated"] == 1 + len(pods), answered
    for p in pods:
        assert "hostname" not in p["spec"]
        assert controller_patch(webhook_server, p, ns) == []
        # as the Job controller sent it (the template's record, with no Job uid): the uid is all
        sent = copy.deepcopy(p)
        for c in sent["spec"]["containers"]:
            c["env"] = [{"name": e["name"]} if e["name"] == RECORD_JOB_UID_ENV else e for e in c.get("env") or []]
        patch = controller_patch(webhook_server, sent, ns)
        assert patch and all("/env" in op["path"] for op in patch), patch


def webhook_answers(hook, before: dict[str, float], n: int) -> dict[str, float]:
    """/mutate CREATE outcomes once ``n`` more requests than ``before`` were answered."""
    def answered():
        m = hook.server.mutate_outcomes()
        return m if sum(m.values()) >= sum(before.values()) + n else None

    return wait_for(answered, 10, message=f"the webhook to have answered {n} more requests")
