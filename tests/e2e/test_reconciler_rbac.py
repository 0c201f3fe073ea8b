"""The reconciler's rights on a real API server: RBAC as shipped, narrowed by admission.

manifests/ is applied (the session's ``webhook_server`` fixture does, RBAC included), and this
module adds the ValidatingAdmissionPolicies of manifests/reconciler-policies.yaml. Then, as the
ServiceAccount ``batchgate-system/batchgate-reconciler`` itself (a token from the TokenRequest
API):

* **What RBAC lets it do** - SubjectAccessReviews (``kubectl auth can-i --as``) for what it
  needs and what it must not have (no Secrets anywhere, no pod creation, no update of the
  bundle's ConfigMap, no tokens, no RBAC), and a SelfSubjectRulesReview (``kubectl auth can-i
  --list``) of a user namespace that must be exactly the expected rules.
* **What admission refuses of what RBAC allows** - writes that RBAC lets through and the
  policies refuse, each with its message: a pod's image, label or a foreign annotation, a pod's
  phase; a Job that is not a ScavengerJob's, runs as another ServiceAccount, mounts a host path;
  a Job's parallelism; a node's taints or other labels; a ConfigMap, Service, NetworkPolicy or
  PodDisruptionBudget not labelled managed-by=batchgate (and the bundle's ConfigMap in
  batchgate-system); next to the same writes done as the reconciler does them, allowed.
* **It works with them** - ``batchgate reconcile`` running as that ServiceAccount starts a
  ScavengerJob (its Job passes the policies and the webhook), stops a pod at its deadline,
  makes a 2-pod Job's network objects and publishes the namespace labels, with no write
  refused (the log says which, if one is).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import KubeApiError, _Transport, now_rfc3339, wait_for
from conftest import QUEUED
from harness import (
    Reconciler,
    attempt,
    container,
    job,
    jobs_path,
    pod,
    pods_path,
    start_reconciler,
    stop_reconcilers,
    unique,
)
from test_reconciler import make_running_pod
from test_scavengerjobs import POOL, run_segment, scavengerjob, sj_path, wait_status

from webhook.generate import NAMESPACE, RECONCILER, RECONCILER_USER, reconciler_policies

SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
AS = "batchgate-reconciler-sa"  # the identity this module adds to the cluster handle
# ... and a ServiceAccount of the same namespace that RBAC gives nothing of its own (the webhook's):
# what every ServiceAccount may do (self reviews, reading maintenance windows, trust bundles)
BASELINE = "batchgate-webhook-sa"
MANAGED = {"app.kubernetes.io/managed-by": "batchgate"}


@pytest.fixture(scope="module")
def account(kube: Any, webhook_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The policies installed, a token of the reconciler's ServiceAccount as identity ``AS`` of
    ``kube``; yields a kubeconfig file for it."""
    objects = reconciler_policies()
    for o in objects:
        path = f"{ADMISSION}/{PLURALS[o['kind']]}"
        with contextlib.suppress(KubeApiError):
            kube.delete(f"{path}/{o['metadata']['name']}")
        kube.create(path, o)
    def token_of(account: str) -> str:
        return str(kube.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
                               {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                "spec": {"expirationSeconds": 3600}})["status"]["token"])

    token = token_of(RECONCILER)
    kube._transports[AS] = _Transport(kube.server, ca_file=str(kube.pki["ca.crt"]), token=token)
    kube._transports[BASELINE] = _Transport(kube.server, ca_file=str(kube.pki["ca.crt"]),
                                            token=token_of("batchgate-webhook"))
    config = json.loads(Path(kube.kubeconfig("admin")).read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp_path_factory.mktemp("reconciler-sa") / "kubeconfig.yaml"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    # A policy takes effect once the API server's informer has it: wait for one refusal.
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("probe"), "namespace": "default"}}
    kube.wait_for(lambda: attempt(lambda: kube.request("POST", "/api/v1/namespaces/default/configmaps", probe,
                                                       as_user=AS, query={"dryRun": "All"}))[0] == 403,
                  30, message="the reconciler's admission policies to take effect")
    try:
        yield str(path)
    finally:
        kube._transports.pop(AS, None)
        kube._transports.pop(BASELINE, None)
        for o in objects:
            with contextlib.suppress(KubeApiError):
                kube.delete(f"{ADMISSION}/{PLURALS[o['kind']]}/{o['metadata']['name']}")



def may(kube: Any, verb: str, resource: str, *, namespace: str = "", group: str = "", name: str = "",
        subresource: str = "") -> bool:
    """A SubjectAccessReview for the reconciler's ServiceAccount (kubectl auth can-i --as)."""
    attrs = {"verb": verb, "resource": resource, "group": group, "namespace": namespace, "name": name,
             "subresource": subresource}
    review = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": RECONCILER_USER, "groups": SA_GROUPS,
                 "resourceAttributes": {k: v for k, v in attrs.items() if v}}})
    return bool(review["status"].get("allowed"))


# -- 1. RBAC ----------------------------------------------------------------------------------
USER_NS = "{ns}"
ALLOWED = [
    ("list", "pods", "", "", "", ""), ("watch", "pods", "", "", "", ""), ("patch", "pods", "", USER_NS, "", ""),
    ("delete", "pods", "", USER_NS, "", ""), ("patch", "pods", "", USER_NS, "", "status"),
    ("create", "pods", "", USER_NS, "", "eviction"),
    ("create", "jobs", "batch", USER_NS, "", ""), ("patch", "jobs", "batch", USER_NS, "", ""),
    ("delete", "jobs", "batch", USER_NS, "", ""),
    ("patch", "nodes", "", "", "", ""), ("create", "events", "", USER_NS, "", ""),
    ("list", "events", "", "", "", ""), ("watch", "events", "", "", "", ""),
    ("get", "persistentvolumeclaims", "", USER_NS, "", ""), ("get", "configmaps", "", USER_NS, "", ""),
    ("create", "services", "", USER_NS, "", ""), ("delete", "networkpolicies", "networking.k8s.io", USER_NS, "", ""),
    ("create", "poddisruptionbudgets", "policy", USER_NS, "", ""),
    ("patch", "scavengerjobs", "batchgate.io", USER_NS, "", "status"),
    ("update", "configmaps", "", NAMESPACE, "batchgate-namespaces", ""),
    ("update", "configmaps", "", NAMESPACE, "batchgate-usage", ""),
    ("update", "leases", "coordination.k8s.io", NAMESPACE, "batchgate-reconciler", ""),
]
REFUSED = [
    ("get", "secrets", "", USER_NS, "", ""), ("list", "secrets", "", "", "", ""),
    ("get", "secrets", "", NAMESPACE, "batchgate-seal", ""), ("get", "secrets", "", "kube-system", "", ""),
    ("watch", "secrets", "", "", "", ""),
    ("create", "pods", "", USER_NS, "", ""), ("update", "pods", "", USER_NS, "", ""),
    ("create", "pods", "", USER_NS, "", "exec"), ("get", "pods", "", USER_NS, "", "log"),
    ("update", "jobs", "batch", USER_NS, "", ""), ("create", "deployments", "apps", USER_NS, "", ""),
    ("delete", "configmaps", "", USER_NS, "", ""), ("delete", "services", "", USER_NS, "", ""),
    ("update", "configmaps", "", NAMESPACE, "batchgate-policies", ""),
    ("update", "leases", "coordination.k8s.io", NAMESPACE, "other", ""),
    ("create", "serviceaccounts", "", USER_NS, "default", "token"),
    ("impersonate", "serviceaccounts", "", "kube-system", "", ""), ("impersonate", "users", "", "", "", ""),
    ("create", "rolebindings", "rbac.authorization.k8s.io", USER_NS, "", ""),
    ("escalate", "clusterroles", "rbac.authorization.k8s.io", "", "", ""),
    ("patch", "namespaces", "", "", "", ""), ("delete", "nodes", "", "", "", ""),
    ("patch", "nodes", "", "", "", "status"), ("update", "scavengerjobs", "batchgate.io", USER_NS, "", ""),
    ("patch", "validatingadmissionpolicies", "admissionregistration.k8s.io", "", "", ""),
    ("delete", "validatingwebhookconfigurations", "admissionregistration.k8s.io", "", "", ""),
]


def _ids(rows: list[tuple[str, ...]]) -> list[str]:
    return [" ".join(p for p in (v, r + (f"/{s}" if s else ""), n, ns) if p) for v, r, _, ns, n, s in rows]


@pytest.mark.parametrize(("verb", "resource", "group", "ns", "name", "sub"), ALLOWED, ids=_ids(ALLOWED))
def test_rbac_gives_the_reconciler_what_it_uses(kube, account, module_namespace, verb, resource, group, ns, name,
                                                sub):
    assert may(kube, verb, resource, group=group, namespace=ns.format(ns=module_namespace), name=name,
               subresource=sub)


@pytest.mark.parametrize(("verb", "resource", "group", "ns", "name", "sub"), REFUSED, ids=_ids(REFUSED))
def test_rbac_gives_the_reconciler_nothing_else(kube, account, module_namespace, verb, resource, group, ns, name,
                                                sub):
    assert not may(kube, verb, resource, group=group, namespace=ns.format(ns=module_namespace), name=name,
                   subresource=sub)


#: ``kubectl auth can-i --list -n <user namespace>`` as the reconciler: (group, resource) -> verbs
IN_A_USER_NAMESPACE = {
    ("", "pods"): {"get", "list", "watch", "patch", "delete"},
    ("", "pods/status"): {"patch"},
    ("", "pods/eviction"): {"create"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("batch", "jobs/status"): {"patch"},
    ("", "nodes"): {"get", "list", "watch", "patch"},
    ("batchgate.io", "maintenancewindows"): {"get", "list", "watch"},
    ("batchgate.io", "maintenancewindows/status"): {"patch"},
    ("", "events"): {"create", "list", "watch"},
    ("batchgate.io", "scavengerjobs"): {"get", "list", "watch"},
    ("batchgate.io", "scavengerjobs/status"): {"patch"},
    ("", "persistentvolumeclaims"): {"get"},
    ("scheduling.x-k8s.io", "podgroups"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch"},
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"get", "create", "patch", "delete"},
    ("", "namespaces"): {"get", "list", "watch"},
}


def _rules(kube: Any, ns: str, *, as_user: str = AS) -> tuple[dict[tuple[str, str], set[str]], list[dict[str, Any]]]:
    review = kube.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                          {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                           "spec": {"namespace": ns}}, as_user=as_user)
    out: dict[tuple[str, str], set[str]] = {}
    named = []
    for rule in review["status"]["resourceRules"]:
        if rule.get("resourceNames"):
            named.append(rule)
            continue
        for g in rule.get("apiGroups") or [""]:
            for r in rule.get("resources") or []:
                out.setdefault((g, r), set()).update(rule["verbs"])
    return out, named


def _with_everyones(kube: Any, ns: str, want: dict[tuple[str, str], set[str]]) -> dict[tuple[str, str], set[str]]:
    """``want`` plus what every ServiceAccount may do: the webhook's rules (it has none of its own)."""
    everyone, named = _rules(kube, ns, as_user=BASELINE)
    assert named == []
    return {k: set(want.get(k, set())) | everyone.get(k, set()) for k in {*want, *everyone}}


def test_can_i_list_in_a_user_namespace_is_exactly_what_it_uses(kube, account, module_namespace):
    rules, named = _rules(kube, module_namespace)
    assert rules == _with_everyones(kube, module_namespace, IN_A_USER_NAMESPACE)
    assert named == []


def test_can_i_list_in_its_own_namespace_adds_only_its_lease_and_configmaps_by_name(kube, account):
    rules, named = _rules(kube, NAMESPACE)
    want = {**IN_A_USER_NAMESPACE, ("coordination.k8s.io", "leases"): {"create"}}
    assert rules == _with_everyones(kube, NAMESPACE, want)
    by_name = sorted((r["resources"][0], tuple(sorted(r["resourceNames"])), tuple(sorted(r["verbs"])))
                     for r in named)
    assert by_name == [("configmaps", ("batchgate-namespaces", "batchgate-usage"), ("get", "update")),
                       ("leases", ("batchgate-reconciler",), ("get", "update"))]


# -- 2. admission ---------------------------------------------------------------------------------
def as_reconciler(kube: Any, method: str, path: str, body: Any = None, *, dry_run: bool = True,
                  content_type: str | None = None) -> tuple[int, str]:
    return attempt(lambda: kube.request(method, path, body, as_user=AS, content_type=content_type,
                                        query={"dryRun": "All"} if dry_run else None))


def sj_owner(uid: str = "0b1c2d3e-0000-4000-8000-000000000001") -> list[dict[str, Any]]:
    return [{"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "name": "md", "uid": uid,
             "controller": True, "blockOwnerDeletion": True}]


def segment_job(name: str) -> dict[str, Any]:
    """A Job as reconciler/scavenger.py's job_body makes it."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"batchgate.io/queue": "scavenger", **MANAGED},
                         "ownerReferences": sj_owner()},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
                "metadata": {"labels": {"batchgate.io/queue": "scavenger", **MANAGED}},
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.2",
                                         "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                                       "requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}


def _edit(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    at = out
    for k in path[:-1]:
        at = at[k] if not isinstance(at, list) else at[int(k)]
    at[path[-1] if not isinstance(at, list) else int(path[-1])] = value
    return out


T = ("spec", "template", "spec")
JOB_CASES = [
    pytest.param((), None, "", id="a segment as the reconciler makes it"),
    pytest.param(("metadata", "ownerReferences"), [], "creates only the Jobs of ScavengerJobs", id="no owner"),
    pytest.param(("metadata", "ownerReferences", "0", "kind"), "Deployment", "creates only the Jobs of ScavengerJobs",
                 id="another owner"),
    pytest.param((*T, "serviceAccountName"), "builder", "default ServiceAccount", id="another ServiceAccount"),
    pytest.param((*T, "serviceAccount"), "builder", "default ServiceAccount", id="another ServiceAccount, old field"),
    # (automountServiceAccountToken: true is no case: the webhook's service-account-token policy
    # makes it false before the policies run)
    pytest.param((*T, "volumes"), [{"name": "root", "hostPath": {"path": "/"}}], "no host namespace",
                 id="a host path"),
    pytest.param((*T, "hostNetwork"), True, "no host namespace", id="the host network"),
    pytest.param((*T, "containers", "0", "securityContext"), {"privileged": True}, "no container securityContext",
                 id="privileged"),
    pytest.param(("metadata", "labels"), {"batchgate.io/queue": "scavenger"}, "app.kubernetes.io/managed-by",
                 id="not labelled"),
]


@pytest.mark.parametrize(("path", "value", "refused"), JOB_CASES)
def test_the_reconciler_creates_only_scavengerjob_segments(kube, account, module_namespace, path, value, refused):
    body = segment_job(unique("seg"))
    if path:
        body = _edit(body, path, value)
    status, message = as_reconciler(kube, "POST", jobs_path(module_namespace), body)
    if not refused:
        assert status == 200, message
    else:
        assert status == 403 and "batchgate-reconciler-jobs" in message and refused in message, message


def test_the_reconciler_creates_no_job_in_a_system_namespace(kube, account):
    status, message = as_reconciler(kube, "POST", jobs_path("kube-system"), segment_job(unique("seg")))
    assert status == 403 and "no Job in a system namespace" in message, message


@pytest.fixture(scope="module")
def stored(kube: Any, account: str, module_namespace: str) -> Iterator[dict[str, dict[str, Any]]]:
    """Objects as users and admins made them, for the reconciler to write to."""
    ns = module_namespace
    suspended = job(unique("j"))
    suspended["spec"]["suspend"] = True
    made = {
        "pod": kube.create(pods_path(ns), pod(unique("p"), labels={"batchgate.io/queue": "batch"})),
        "job": kube.create(jobs_path(ns), suspended),
        "gated": kube.create(pods_path(ns), pod(unique("gated"), labels={"batchgate.io/queue": QUEUED})),
        "cm": kube.create(f"/api/v1/namespaces/{ns}/configmaps",
                          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("users")}}),
        "np": kube.create(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
                          {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                           "metadata": {"name": unique("users")}, "spec": {"podSelector": {}}}),
    }
    node = unique("rbac-node")
    kube.create_node(node)
    made["node"] = kube.get(f"/api/v1/nodes/{node}")
    yield made
    with contextlib.suppress(Exception):
        kube.delete_node(node)


def _owner(obj: dict[str, Any]) -> list[dict[str, Any]]:
    md = obj["metadata"]
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": md["name"], "uid": md["uid"]}]


def test_pod_writes_are_its_annotations_the_queue_gate_and_disruption_target(kube, stored):
    p = stored["pod"]
    path = pods_path(p["metadata"]["namespace"], p["metadata"]["name"])
    cases = [
        ({"metadata": {"annotations": {"batchgate.io/deadline": now_rfc3339(3600)}}}, ""),
        ({"metadata": {"annotations": {"batchgate.io/gang-restart": p["metadata"]["uid"]}}}, ""),
        ({"metadata": {"annotations": {"example.com/note": "x"}}}, "only its own annotations"),
        ({"metadata": {"annotations": {"batchgate.io/time-limit": "30d"}}}, "only its own annotations"),
        ({"metadata": {"labels": {"batchgate.io/queue": "scavenger"}}}, "only its own annotations"),
        ({"spec": {"containers": [{"name": "main", "image": "evil.example.com/miner"}]}},
         "nothing in a pod's spec"),
        ({"spec": {"activeDeadlineSeconds": 1}}, "nothing in a pod's spec"),
    ]
    for patch, refused in cases:
        status, message = as_reconciler(kube, "PATCH", path, patch,
                                        content_type="application/strategic-merge-patch+json")
        if refused:
            assert status == 403 and refused in message, (patch, status, message)
        else:
            assert status == 200, (patch, message)
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "BatchgateGangRestart",
                 "message": "m", "lastTransitionTime": now_rfc3339()}
    ok = {"status": {"conditions": [condition]}}
    status, message = as_reconciler(kube, "PATCH", f"{path}/status", ok,
                                    content_type="application/strategic-merge-patch+json")
    assert status == 200, message
    status, message = as_reconciler(kube, "PATCH", f"{path}/status", {"status": {"phase": "Failed"}})
    assert status == 403 and "DisruptionTarget condition" in message, message


AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}


def test_a_gated_pods_placement_may_be_narrowed_before_its_gate_goes(kube, stored):
    g = stored["gated"]
    assert {"name": "batchgate.io/queue"} in g["spec"]["schedulingGates"]  # the e2e bundle's gated queue
    path = pods_path(g["metadata"]["namespace"], g["metadata"]["name"])
    # (Kubernetes lets a gated pod's scheduling directives only narrow: a node selector key added)
    got = as_reconciler(kube, "PATCH", path, {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}})
    assert got == (200, ""), got[1][:2000]
    assert as_reconciler(kube, "PATCH", path, {"spec": {"schedulingGates": None}}) == (200, "")


def test_job_writes_are_its_annotations_and_suspend(kube, stored):
    j = stored["job"]
    path = jobs_path(j["metadata"]["namespace"], j["metadata"]["name"])
    release = {"metadata": {"annotations": {"batchgate.io/queued": None}}, "spec": {"suspend": False}}
    assert as_reconciler(kube, "PATCH", path, release) == (200, "")  # the queue releasing it
    assert as_reconciler(kube, "PATCH", path, {"metadata": {"annotations": {"batchgate.io/expected-start": "unknown"}}}
                         ) == (200, "")
    status, message = as_reconciler(kube, "PATCH", path, {"spec": {"parallelism": 5}})
    assert status == 403 and "spec.suspend" in message, message
    narrow = {"spec": {"template": {"spec": {"affinity": AFFINITY}}}}
    assert as_reconciler(kube, "PATCH", path, narrow) == (200, "")  # suspended: the queue narrows it
    tolerate = {"spec": {"template": {"spec": {"tolerations": [{"operator": "Exists"}]}}}}
    status, message = as_reconciler(kube, "PATCH", path, tolerate)
    assert status == 403 and "its node affinity" in message, message


def test_a_job_it_re_queues_is_suspended_then_only_its_start_time_cleared(kube, account, module_namespace):
    """The queue's re-queue (reconciler/requeue.py): a running Job suspended and marked queued again,
    then, through the status subresource, its startTime cleared while suspended, nothing else."""
    ns = module_namespace
    name = unique("rq")
    running = job(name, nodeSelector={"batchgate.io/e2e-no-such-node": "x"})  # its pod waits: nothing runs
    running["metadata"]["annotations"] = {"batchgate.io/started-at": "2024-05-01T10:00:00Z"}
    kube.create(jobs_path(ns), running)
    path = jobs_path(ns, name)
    requeue = {"metadata": {"annotations": {"batchgate.io/queued": "true", "batchgate.io/started-at": None,
                                            "batchgate.io/requeued-at": "2024-05-01T11:00:00Z"}},
               "spec": {"suspend": True}}
    assert as_reconciler(kube, "PATCH", path, requeue) == (200, "")
    status = f"{path}/status"
    started = wait_for(lambda: kube.get(path).get("status", {}).get("startTime"), 60, message="its start time")
    kube.patch(path, {"spec": {"suspend": True}})
    wait_for(lambda: not any(kube.get(path).get("status", {}).get(k) for k in ("active", "terminating")), 60,
             message="its pods stopped")
    if not kube.get(path).get("status", {}).get("startTime"):  # the Job controller cleared it: as if it had not
        kube.patch(status, {"status": {"startTime": started}})
    got = as_reconciler(kube, "PATCH", status, {"status": {"startTime": None}})
    assert got == (200, ""), (got[1][-400:], kube.get(path)["spec"].get("suspend"))
    got, message = as_reconciler(kube, "PATCH", status, {"status": {"startTime": None, "failed": 3}})
    assert got == 403 and "nothing else in a Job's status" in message, message
    kube.patch(path, {"spec": {"suspend": False}})
    got, message = as_reconciler(kube, "PATCH", status, {"status": {"startTime": None}})
    assert got != 200, message  # a Job that runs keeps its start time


def test_node_writes_are_the_countdown_and_the_cordon(kube, stored):
    path = f"/api/v1/nodes/{stored['node']['metadata']['name']}"
    for patch in ({"spec": {"unschedulable": True}},
                  {"metadata": {"labels": {"batchgate.io/maintenance-in-minutes": "30"},
                                "annotations": {"batchgate.io/maintenance": "{}"}}}):
        assert as_reconciler(kube, "PATCH", path, patch) == (200, ""), patch
    for patch, refused in (({"metadata": {"labels": {"pool": "gpu"}}}, "only its own annotations and labels"),
                           ({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}, "spec.unschedulable")):
        status, message = as_reconciler(kube, "PATCH", path, patch)
        assert status == 403 and refused in message, (patch, message)


def test_writes_to_objects_it_did_not_make_are_refused(kube, stored, module_namespace):
    ns = module_namespace
    owner = _owner(stored["pod"])
    cm = stored["cm"]["metadata"]["name"]
    np = stored["np"]["metadata"]["name"]
    refused = [
        ("PATCH", f"/api/v1/namespaces/{ns}/configmaps/{cm}", {"data": {"hostfile": "x"}}),
        ("PATCH", f"/api/v1/namespaces/{NAMESPACE}/configmaps/batchgate-policies", {"data": {"bundle.yaml": "x"}}),
        ("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "batchgate-policies-2", "labels": MANAGED,
                                                                "ownerReferences": owner}}),
        ("POST", f"/api/v1/namespaces/{ns}/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("cm"), "ownerReferences": owner}}),
        ("POST", f"/api/v1/namespaces/{ns}/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("cm"), "labels": MANAGED}}),
        ("POST", "/api/v1/namespaces/kube-system/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("cm"), "labels": MANAGED,
                                                                "ownerReferences": owner}}),
        ("POST", f"/api/v1/namespaces/{ns}/services",
         {"apiVersion": "v1", "kind": "Service", "metadata": {"name": unique("svc"), "labels": MANAGED,
                                                              "ownerReferences": owner},
          "spec": {"type": "NodePort", "ports": [{"port": 80}]}}),
        ("DELETE", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{np}", None),
        ("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
         {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": unique("pdb"),
                                                                                 "ownerReferences": owner},
          "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}),
    ]
    for method, path, body in refused:
        status, message = as_reconciler(kube, method, path, body)
        assert status == 403 and "batchgate-reconciler-writes" in message, (method, path, status, message)
    allowed = [
        ("POST", f"/api/v1/namespaces/{ns}/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": unique("hosts"), "labels": MANAGED,
                                                                "ownerReferences": owner}}),
        ("POST", f"/api/v1/namespaces/{ns}/services",
         {"apiVersion": "v1", "kind": "Service", "metadata": {"name": unique("svc"), "labels": MANAGED,
                                                              "ownerReferences": owner},
          "spec": {"clusterIP": "None", "selector": {"batchgate.io/network": "x"}}}),
        ("POST", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
         {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
          "metadata": {"name": unique("np"), "labels": MANAGED, "ownerReferences": owner},
          "spec": {"podSelector": {"matchLabels": {"batchgate.io/network": "x"}}}}),
        ("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
         {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
          "metadata": {"name": unique("pdb"), "labels": MANAGED, "ownerReferences": owner},
          "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}),
        ("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps",
         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "batchgate-usage"}}),
    ]
    for method, path, body in allowed:
        assert as_reconciler(kube, method, path, body) == (200, ""), (method, path)


# -- 3. the reconciler at work with these rights ---------------------------------------------------
@pytest.fixture
def pool(kube: Any) -> Iterator[tuple[str, Any]]:
    """A node of this test's own scavenger pool (as in test_scavengerjobs)."""
    name, made = unique("pool"), []

    def make() -> str:
        made.append(unique("sj-node"))
        kube.create_node(made[-1], cpu="4", memory="8Gi", labels={POOL: name})
        return made[-1]

    yield name, make
    for n in made:
        with contextlib.suppress(Exception):
            kube.delete_node(n)


@pytest.fixture
def as_account(kube: Any, account: str, namespace: str, tmp_path: Path, pool: Any) -> Iterator[Any]:
    """``batchgate reconcile`` as the ServiceAccount, watching this test's namespace, its Lease and
    ConfigMap in batchgate-system (the test_scavengerjobs bundle: the scavenger queue on ``pool``)."""
    import shutil

    import yaml

    policies = tmp_path / "policies"
    shutil.copytree(Path(__file__).resolve().parents[2] / "policies", policies)
    bundle = yaml.safe_load((policies / "bundle.yaml").read_text())
    for q in bundle["spec"]["queues"]:
        if q["name"] == "scavenger":
            q["nodeSelector"] = {POOL: pool[0]}
        if q["name"] == "interactive":  # a grant by namespace label: the labels are published
            q["access"] = {"namespaceSelector": {"matchLabels": {"batchgate.io/e2e-team": "physics"}}}
    (policies / "bundle.yaml").write_text(yaml.safe_dump(bundle))
    network = policies / "job-network" / "policy.yaml"  # this namespace isolated: NetworkPolicies too
    doc = yaml.safe_load(network.read_text())
    doc["spec"]["settings"]["isolation"] = [{"namespaces": [namespace], "egress": "open"}]
    network.write_text(yaml.safe_dump(doc))
    started: list[Reconciler] = []

    def start() -> Reconciler:
        started.append(start_reconciler(kube, namespace, tmp_path / "reconciler.log", "--policies", str(policies),
                                        "--resync", "20s", "--warning-lead", "4s", kubeconfig=account,
                                        lease_namespace=NAMESPACE).wait_ready())
        return started[-1]

    yield start
    stop_reconcilers(started)


def test_the_reconciler_does_its_work_with_these_rights(kube, webhook_server, namespace, pool, as_account):
    ns, (_, node) = namespace, pool
    n = node()
    kube.create(f"/api/v1/namespaces/{ns}/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "params"}, "data": {"a": "1"}})
    r = as_account()
    # A ScavengerJob starts: the PVC/ConfigMap check, its Job through the policies and the webhook.
    kube.create(sj_path(ns), scavengerjob("md", volumes=[
        {"name": "params", "mountPath": "/etc/params", "configMap": {"name": "params"}},
        {"name": "creds", "mountPath": "/etc/creds", "secret": {"secretName": "creds"}}]))
    wait_status(kube, ns, "md", lambda s: s.get("jobName") == "md-1", "its segment started", r=r)
    (seg,) = run_segment(kube, ns, "md-1", 1)
    wait_status(kube, ns, "md", lambda s: s.get("phase") == "Running", "Running", r=r)
    assert seg["spec"]["automountServiceAccountToken"] is False
    # A pod past its time limit (started 20s ago, limit 10s): deadline written, then deleted.
    short = unique("short")
    make_running_pod(kube, ns, short, node=n, limit="10s", started_offset=-20)
    kube.wait_for(lambda: not kube.exists(pods_path(ns, short))
                  or kube.get(pods_path(ns, short))["metadata"].get("deletionTimestamp"),
                  60, message=lambda: f"the pod stopped at its deadline; log:\n{r.logs()}")
    # A gang of 2: its headless Service, hostfile ConfigMap and NetworkPolicy, labelled and owned.
    two = job(unique("net"), parallelism=2, completions=2, labels={"batchgate.io/gang": "true"},
              containers=[container(cpu="100m", memory="64Mi")])
    service = kube.create(jobs_path(ns), two, as_user="alice")["metadata"]["name"]
    for path in (f"/api/v1/namespaces/{ns}/services/{service}",
                 f"/api/v1/namespaces/{ns}/configmaps/{service}-hostfile",
                 f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{service}"):
        kube.wait_for(lambda path=path: kube.exists(path), 60, message=lambda path=path: f"{path}; log:\n{r.logs()}")
        assert kube.get(path)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "batchgate"
    # The namespace labels (the bundle grants by one), published in batchgate-system, this namespace's too.
    kube.wait_for(lambda: ns in kube.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/batchgate-namespaces")
                  .get("data", {}).get("namespaces.json", "") if kube.exists(
                      f"/api/v1/namespaces/{NAMESPACE}/configmaps/batchgate-namespaces") else False, 60,
                  message=lambda: f"the published namespace labels; log:\n{r.logs()}")
    log = r.log.read_text(errors="replace")
    assert "Forbidden" not in log and "forbidden" not in log, r.logs(200)
    assert "outcome\": \"failed" not in log, r.logs(200)
