"""manifests/: valid Kubernetes objects, generated parts in step with the bundle, least
privilege, hardened pods, and webhook configurations that cannot brick a cluster."""

from __future__ import annotations

import base64
import copy
import json
import os
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import POLICIES, ROOT, kustomize
from webhook import __version__
from webhook.cli import build_parser, main
from webhook.generate import configmap_key, generated_manifests, webhook_configurations
from webhook.rules import load_bundle
from webhook.workloads import shape_of

MANIFESTS = ROOT / "manifests"
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "batchgate-system")
OPT_OUT = ("batchgate.io/admission", "disabled")
#: the failure policy of every webhook, as docs/admin/webhook-down.md explains it
FAILURE_POLICIES = {
    "mutate.batchgate.io": "Fail",
    "update.mutate.batchgate.io": "Ignore",
    "create.validate.batchgate.io": "Fail",
    "update.validate.batchgate.io": "Ignore",
    "namespaces.validate.batchgate.io": "Fail",
}
#: judges Namespaces themselves, so it must see every one (no namespaceSelector)
NAMESPACE_WEBHOOK = "namespaces.validate.batchgate.io"
#: (apiGroup, resource) -> verbs: everything the reconciler may do, cluster-wide
RECONCILER_RIGHTS = {
    ("", "pods"): {"get", "list", "watch", "patch", "delete"},
    ("", "pods/status"): {"patch"},  # a gang member's DisruptionTarget condition before its deletion
    ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("batch", "jobs/status"): {"patch"},  # a re-queued Job's startTime cleared (requeue.py)
    ("", "nodes"): {"get", "list", "watch", "patch"},
    ("", "pods/eviction"): {"create"},
    ("batchgate.io", "maintenancewindows"): {"get", "list", "watch"},
    ("batchgate.io", "maintenancewindows/status"): {"patch"},
    ("", "events"): {"create", "list", "watch"},  # list, watch: the kubelet's FailedMount
    ("batchgate.io", "scavengerjobs"): {"get", "list", "watch"},
    ("batchgate.io", "scavengerjobs/status"): {"patch"},
    ("", "persistentvolumeclaims"): {"get"},  # a ScavengerJob's volumes; no Secrets at all
    ("scheduling.x-k8s.io", "podgroups"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch"},  # get: ScavengerJob volumes too
    # (writes to Services, ConfigMaps, NetworkPolicies and PDBs: only managed-by=batchgate ones, by the
    # admission policy batchgate-reconciler-writes; tests/e2e/test_reconciler_rbac.py)
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"get", "create", "patch", "delete"},  # a ScavengerJob segment's guard
    ("", "namespaces"): {"get", "list", "watch"},  # labels for queue grants by namespaceSelector
}
VARIANTS = {"default": MANIFESTS}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: kustomize(path) for name, path in VARIANTS.items()}


@pytest.fixture(scope="module")
def objects(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered["default"]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_spec(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return one(objects, "Deployment", name)["spec"]["template"]["spec"]  # type: ignore[no-any-return]


# -- schemas -------------------------------------------------------------------------
def _schema_versions() -> list[str]:
    import kubernetes_validate.utils as kv_utils  # the test extras pin the 1.28.x releases

    return sorted(set(kv_utils.all_versions()), key=lambda v: tuple(map(int, v.split("."))))


def _targets(variant: str) -> list[str]:
    versions = _schema_versions()
    # The default variant needs 1.30+ (ValidatingAdmissionPolicy v1; webhook matchConditions are
    # 1.28+); this kubernetes-validate's newest schemas are 1.28's, the closest it has.
    return [versions[-1]]


# No schema for them in kubernetes-validate 1.28.x: tests/e2e/test_admission_policies.py has a
# 1.37 API server validate, compile and type-check them.
NO_SCHEMA = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_object_validates_against_the_kubernetes_openapi_schemas(variant, rendered):
    import kubernetes_validate

    failures = []
    for version in _targets(variant):
        for obj in rendered[variant]:
            if obj["kind"] in NO_SCHEMA:
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                failures.append(f"{version} {obj['kind']} {obj['metadata']['name']}: {e.message}")
    assert not failures, "\n".join(failures)


def test_the_schema_check_catches_a_misspelt_field(objects):
    """Strict mode is on: an unknown field (a typo) is an error, not silently dropped."""
    import kubernetes_validate

    bad = copy.deepcopy(one(objects, "Deployment", "batchgate-webhook"))
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesytem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, _targets("default")[-1], strict=True)


def test_cert_manager_component_adds_certificates_and_ca_injection(tmp_path):
    import kubernetes_validate

    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({  # kustomize wants relative paths
        "resources": [os.path.relpath(MANIFESTS, overlay)],
        "components": [os.path.relpath(MANIFESTS / "cert-manager", overlay)],
    }))
    objs = kustomize(overlay)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = one(objs, kind, "batchgate")
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            "batchgate-system/batchgate-webhook"
    serving = one(objs, "Certificate", "batchgate-webhook")
    assert serving["spec"]["secretName"] == _certs_secret(objs)
    service = one(objs, "Service", "batchgate-webhook")
    assert f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc" in serving["spec"]["dnsNames"]
    issuer = one(objs, "Issuer", serving["spec"]["issuerRef"]["name"])
    assert issuer["spec"]["ca"]["secretName"] == one(objs, "Certificate", "batchgate-ca")["spec"]["secretName"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):  # what it patched
        kubernetes_validate.validate(one(objs, kind, "batchgate"), _targets("default")[-1], strict=True)


# -- kustomize -----------------------------------------------------------------------
def _kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in MANIFESTS.rglob("kustomization.yaml"))


@pytest.mark.parametrize("directory", _kustomization_dirs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_kustomization_lists_every_file_and_only_existing_ones(directory):
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    listed = {*spec.get("resources", []), *spec.get("components", []),
              *(p["path"] for p in spec.get("patches", []) if "path" in p)}
    for entry in listed:
        assert (directory / entry).exists(), f"{directory}/kustomization.yaml lists missing {entry}"
    nested = {p.parent for p in directory.rglob("kustomization.yaml")} - {directory}
    files = {
        str(p.relative_to(directory)) for p in directory.rglob("*.yaml")
        if p.name != "kustomization.yaml" and not any(n in p.parents for n in nested)
    }
    listed_files = {e for e in listed if (directory / e).is_file()}
    assert files == listed_files, (
        f"not in {directory.name}/kustomization.yaml: {sorted(files - listed_files)}; "
        f"listed but not a file here: {sorted(listed_files - files)}"
    )


def test_generated_files_have_not_drifted_from_the_bundle():
    for name, text in generated_manifests(load_bundle(POLICIES)).items():
        path = MANIFESTS / name
        assert path.is_file(), f"{path} missing; run `batchgate manifests`"
        assert path.read_text() == text, f"{path} drifted from policies/; run `batchgate manifests`"


def test_generated_files_are_deterministic_and_marked():
    bundle = load_bundle(POLICIES)
    first, second = generated_manifests(bundle), generated_manifests(load_bundle(POLICIES))
    assert first == second
    for text in first.values():
        assert text.startswith("# generated by batchgate manifests; do not edit\n")


def test_priority_classes_are_the_bundles(objects):
    bundle = load_bundle(POLICIES)
    classes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PriorityClass"}
    assert sorted(classes) == sorted(bundle.priority_classes)  # kustomize sorts by kind, name
    for name, pc in bundle.priority_classes.items():
        got = classes[name]
        assert (got["value"], got["preemptionPolicy"], got["globalDefault"], got["description"]) == (
            pc.value, pc.preemption_policy, pc.global_default, pc.description)
    assert sum(o["globalDefault"] for o in classes.values()) <= 1


def test_the_global_default_class_does_not_count_as_the_users_choice(objects):
    """With a globalDefault PriorityClass installed, the Priority admission plugin (before any
    webhook) writes its name and value into every Pod that names no class. Such a Pod must
    still get its queue's class, not be denied for choosing one."""
    from webhook.offline import Caller, check_object

    default = next(o for o in objects if o["kind"] == "PriorityClass" and o["globalDefault"])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}],
                    "priorityClassName": default["metadata"]["name"], "priority": default["value"],
                    "preemptionPolicy": default["preemptionPolicy"]}}
    decision = check_object(pod, load_bundle(POLICIES), Caller(username="alice", namespace="demo"))
    assert decision.allowed, decision.denials
    assert decision.obj is not None
    assert (decision.obj["spec"]["priorityClassName"], decision.obj["spec"]["priority"]) == ("batchgate-batch", 1000)


@pytest.mark.parametrize("deployment", ["batchgate-webhook", "batchgate-reconciler"])
def test_the_mounted_configmap_is_the_bundle_again(deployment, objects, tmp_path):
    """Do what the kubelet does with the volume's items, then load the result."""
    data = one(objects, "ConfigMap", "batchgate-policies")["data"]
    spec = pod_spec(objects, deployment)
    volume = next(v for v in spec["volumes"] if v.get("configMap", {}).get("name") == "batchgate-policies")
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert mount["mountPath"] == "/etc/batchgate/policies"
    assert {i["key"] for i in volume["configMap"]["items"]} == set(data), "every key is mounted"
    for item in volume["configMap"]["items"]:
        target = tmp_path / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[item["key"]])
    mounted, source = load_bundle(tmp_path), load_bundle(POLICIES)
    assert mounted.fingerprint == source.fingerprint
    assert [p.name for p in mounted.policies] == [p.name for p in source.policies]


@pytest.mark.parametrize(("path", "key"), [
    ("bundle.yaml", "bundle.yaml"),
    ("queue-priority/policy.yaml", "queue-priority__policy.yaml"),
])
def test_configmap_keys(path, key):
    assert configmap_key(path) == key


def test_a_policy_folder_that_cannot_be_a_configmap_key_is_an_error():
    with pytest.raises(ValueError, match="ConfigMap key"):
        configmap_key("my policy/policy.yaml")


# -- least privilege -----------------------------------------------------------------------
def test_no_rbac_rule_uses_a_wildcard(objects):
    for obj in objects:
        for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), f"{obj['kind']} {obj['metadata']['name']}: {field} has *"
                assert not any("*" in v for v in rule.get(field, []) if v), obj["metadata"]["name"]


def _rights(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_the_reconciler_gets_exactly_what_it_uses(objects):
    assert _rights(one(objects, "ClusterRole", "batchgate-reconciler")) == RECONCILER_RIGHTS
    lease = one(objects, "Role", "batchgate-reconciler-leader-election")
    assert lease["metadata"]["namespace"] == "batchgate-system"
    named = [r for r in lease["rules"] if r.get("resourceNames")]
    unnamed = [r for r in lease["rules"] if not r.get("resourceNames")]
    assert [(r["resourceNames"], sorted(r["verbs"])) for r in named] == [(["batchgate-reconciler"], ["get", "update"])]
    assert [sorted(r["verbs"]) for r in unnamed] == [["create"]], "only create cannot be limited by name"
    labels = one(objects, "Role", "batchgate-reconciler-namespace-labels")
    assert labels["metadata"]["namespace"] == "batchgate-system"
    assert labels["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                                "resourceNames": ["batchgate-namespaces", "batchgate-usage"], "verbs": ["get", "update"]},
                               {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]


def test_the_webhook_mounts_the_published_namespace_labels_optionally(objects):
    """The reconciler publishes the ConfigMap (publish.py); the webhook reads it from a volume,
    which must not keep the webhook from starting before the ConfigMap exists."""
    spec = pod_spec(objects, "batchgate-webhook")
    volume = next(v for v in spec["volumes"] if v["name"] == "namespaces")
    assert volume["configMap"] == {"name": "batchgate-namespaces", "optional": True}
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "namespaces")
    assert mount == {"name": "namespaces", "mountPath": "/etc/batchgate/namespaces", "readOnly": True}
    parsed = build_parser().parse_args(spec["containers"][0]["args"])
    assert parsed.namespaces == mount["mountPath"]
    from webhook.reconciler.settings import Settings

    assert Settings().namespace_labels == volume["configMap"]["name"]


def test_the_webhook_has_no_api_access_and_no_token(objects):
    account = one(objects, "ServiceAccount", "batchgate-webhook")
    assert account["automountServiceAccountToken"] is False
    spec = pod_spec(objects, "batchgate-webhook")
    assert spec["serviceAccountName"] == "batchgate-webhook"
    assert spec["automountServiceAccountToken"] is False
    for obj in objects:
        for subject in obj.get("subjects", []) if obj["kind"].endswith("Binding") else []:
            assert subject["name"] != "batchgate-webhook", f"{obj['metadata']['name']} grants the webhook rights"


def test_every_binding_refers_to_a_role_and_account_that_exist(objects):
    names = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}
    for obj in objects:
        if not obj["kind"].endswith("Binding") or obj["kind"] in NO_SCHEMA:  # RBAC bindings
            continue
        ref = obj["roleRef"]
        ns = obj["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], ns, ref["name"]) in names
        for s in obj["subjects"]:
            if s["kind"] == "Group":  # only the read-only view of maintenance windows goes to a group
                assert (s["name"], ref["name"]) == ("system:authenticated", "batchgate-maintenancewindows-view")
                continue
            assert ("ServiceAccount", s["namespace"], s["name"]) in names


def test_everyone_may_read_maintenance_windows_and_nobody_but_admins_write_them(objects):
    view = one(objects, "ClusterRole", "batchgate-maintenancewindows-view")
    assert _rights(view) == {("batchgate.io", "maintenancewindows"): {"get", "list", "watch"},
                             ("batchgate.io", "maintenancewindows/status"): {"get", "list", "watch"}}


def test_users_who_may_edit_a_namespace_may_create_scavengerjobs_there(objects):
    edit = one(objects, "ClusterRole", "batchgate-scavengerjobs-edit")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert "create" in _rights(edit)[("batchgate.io", "scavengerjobs")]
    assert ("batchgate.io", "scavengerjobs/status") not in _rights(edit), "status belongs to the reconciler"


# -- hardened pods --------------------------------------------------------------------------
@pytest.mark.parametrize("deployment", ["batchgate-webhook", "batchgate-reconciler"])
def test_pods_are_hardened(deployment, objects):
    spec = pod_spec(objects, deployment)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["priorityClassName"] == "system-cluster-critical"
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["runAsNonRoot"] is True
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][part]), f"{c['name']}: {part}"
        assert c["image"] == f"batchgate:{__version__}"


@pytest.mark.parametrize("deployment", ["batchgate-webhook", "batchgate-reconciler"])
def test_replicated_spread_and_protected_by_a_pdb(deployment, objects):
    d = one(objects, "Deployment", deployment)
    assert d["spec"]["replicas"] >= 2
    labels = d["spec"]["template"]["metadata"]["labels"]
    spread = d["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert any(s["topologyKey"] == "kubernetes.io/hostname" for s in spread)
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"
            and o["metadata"]["namespace"] == d["metadata"]["namespace"]
            and o["spec"]["selector"]["matchLabels"].items() <= labels.items()]
    assert len(pdbs) == 1
    pdb = pdbs[0]["spec"]
    assert pdb.get("minAvailable", 0) >= 1 or pdb.get("maxUnavailable", 0) < d["spec"]["replicas"]


def test_webhook_probes_and_service(objects):
    spec = pod_spec(objects, "batchgate-webhook")
    c = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["scheme"], get["path"], ports[get["port"]]) == ("HTTPS", path, 8443)
    service = one(objects, "Service", "batchgate-webhook")
    assert service["spec"]["selector"].items() <= one(objects, "Deployment", "batchgate-webhook")["spec"]["template"]["metadata"]["labels"].items()
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "https")]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    certs = next(v for v in spec["volumes"] if v["name"] == mounts["/etc/batchgate/certs"])
    assert certs["secret"]["secretName"] == _certs_secret(objects)


def _certs_secret(objects: list[dict[str, Any]]) -> str:
    spec = pod_spec(objects, "batchgate-webhook")
    return next(v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v)  # type: ignore[no-any-return]


@pytest.mark.parametrize("deployment", ["batchgate-webhook", "batchgate-reconciler"])
def test_container_args_are_a_valid_batchgate_command_line(deployment, objects):
    args = pod_spec(objects, deployment)["containers"][0]["args"]
    parsed = build_parser().parse_args(args)
    assert parsed.command == {"batchgate-webhook": "serve", "batchgate-reconciler": "reconcile"}[deployment]
    assert parsed.policies == "/etc/batchgate/policies"


def test_reconciler_knows_who_it_is_for_leader_election(objects):
    env = {e["name"]: e for e in pod_spec(objects, "batchgate-reconciler")["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["BATCHGATE_LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


# -- webhook configurations ------------------------------------------------------------------
def _webhooks(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(o["kind"], w) for o in objects
            if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for w in o["webhooks"]]


def test_every_webhook_has_a_deliberate_failure_policy(objects):
    assert {w["name"]: w["failurePolicy"] for _, w in _webhooks(objects)} == FAILURE_POLICIES


def test_webhook_settings(objects):
    service = one(objects, "Service", "batchgate-webhook")
    for kind, w in _webhooks(objects):
        assert w["sideEffects"] == "None"
        assert w["admissionReviewVersions"] == ["v1"]
        assert 1 <= w["timeoutSeconds"] <= 5
        assert w["matchPolicy"] == "Equivalent"
        svc = w["clientConfig"]["service"]
        assert (svc["namespace"], svc["name"], svc["port"]) == (
            service["metadata"]["namespace"], service["metadata"]["name"], service["spec"]["ports"][0]["port"])
        assert svc["path"] == ("/mutate" if kind.startswith("Mutating") else "/validate")
        if kind.startswith("Mutating"):
            assert w["reinvocationPolicy"] == "IfNeeded"
            # UPDATE only of kinds whose pod template may change (never a Pod's spec), and of
            # Jobs, which queue-gate marks queued when their user suspends them
            for r in w["rules"]:
                if "UPDATE" in r["operations"]:
                    assert set(r["resources"]) <= {"deployments", "statefulsets", "replicasets",
                                                   "daemonsets", "cronjobs", "jobs"}, r


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector, as the API server evaluates namespaceSelector."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


@pytest.mark.parametrize(("labels", "called"), [
    pytest.param({"kubernetes.io/metadata.name": "kube-system"}, False, id="kube-system"),
    pytest.param({"kubernetes.io/metadata.name": "kube-public"}, False, id="kube-public"),
    pytest.param({"kubernetes.io/metadata.name": "kube-node-lease"}, False, id="kube-node-lease"),
    pytest.param({"kubernetes.io/metadata.name": "batchgate-system"}, False, id="batchgate-system"),
    pytest.param({"kubernetes.io/metadata.name": "ingress", OPT_OUT[0]: OPT_OUT[1]}, False, id="opted-out"),
    pytest.param({OPT_OUT[0]: OPT_OUT[1]}, False, id="kube-system-on-1.20-labelled"),
    pytest.param({"kubernetes.io/metadata.name": "demo"}, True, id="user-namespace"),
    pytest.param({}, True, id="user-namespace-on-1.20"),
    pytest.param({"kubernetes.io/metadata.name": "demo", OPT_OUT[0]: "enabled"}, True, id="other-label-value"),
])
def test_namespace_selector(labels, called, objects):
    for _, w in _workload_webhooks(objects):
        assert _selects(w["namespaceSelector"], labels) is called, w["name"]


def test_batchgate_namespace_is_left_out_also_on_1_20(objects):
    labels = one(objects, "Namespace", "batchgate-system")["metadata"]["labels"]
    for _, w in _workload_webhooks(objects):
        assert not _selects(w["namespaceSelector"], labels)
        assert not _selects(w["namespaceSelector"], {k: v for k, v in labels.items()
                                                     if k != "kubernetes.io/metadata.name"})


def test_webhooks_leave_out_every_namespace_the_bundle_excludes(objects):
    literal = {n for n in load_bundle(POLICIES).excluded_namespaces if not set(n) & set("*?[")}
    for _, w in _workload_webhooks(objects):
        for name in literal | set(SYSTEM_NAMESPACES):
            assert not _selects(w["namespaceSelector"], {"kubernetes.io/metadata.name": name}), (w["name"], name)


def _workload_webhooks(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(k, w) for k, w in _webhooks(objects) if w["name"] != NAMESPACE_WEBHOOK]


def test_namespaces_are_judged_whatever_their_labels(objects):
    """The opt-out label is checked on every Namespace: a namespaceSelector or objectSelector
    would skip the very request that adds it (or, on 1.20, a forged kubernetes.io/metadata.name).
    The system namespaces and batchgate's own are left out by name, in matchConditions (a name
    cannot be forged; tests/unit/test_admission_cel.py evaluates the condition)."""
    (w,) = [w for _, w in _webhooks(objects) if w["name"] == NAMESPACE_WEBHOOK]
    assert "namespaceSelector" not in w and "objectSelector" not in w
    (left_out,) = [c["expression"] for c in w["matchConditions"] if c["name"] == "not-a-system-namespace"]
    assert "object.metadata.name" in left_out and "labels" not in left_out
    for name in SYSTEM_NAMESPACES:
        assert f'"{name}"' in left_out
    assert w["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"],
                           "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}]
    assert w["failurePolicy"] == "Fail"
    others = {(g, r) for _, x in _workload_webhooks(objects) for rule in x["rules"]
              for g in rule["apiGroups"] for r in rule["resources"]}
    assert ("", "namespaces") not in others


def _covered(objects: list[dict[str, Any]], kind: str) -> set[tuple[str, str, str]]:
    """(group, resource, operation) the API server sends to webhooks of this kind."""
    return {(g, res, op) for k, w in _webhooks(objects) if k == kind for r in w["rules"]
            for g in r["apiGroups"] for res in r["resources"] for op in r["operations"]}


def _needed(mutating: bool) -> set[tuple[str, str, str]]:
    out = set()
    for policy in load_bundle(POLICIES).policies:
        if (policy.rule.mutate if mutating else policy.rule.validate) is None:
            continue
        for group, _version, kind in policy.match.kinds:
            assert "*" not in (group, kind), f"{policy.name}: a wildcard kind cannot be listed in a webhook"
            shape = shape_of(group, kind)
            out |= {(group, kind.lower() + "s", op) for op in policy.match.operations
                    # the engine skips pod-deciding policies on UPDATE of an immutable template
                    if not (op == "UPDATE" and policy.rule.decides_pod and shape and not shape.template_mutable)
                    # and mutates only on the type's mutate_operations (job-network validates on UPDATE)
                    and (not mutating or op in policy.rule.mutate_operations)
                    and (not mutating or op != "UPDATE" or policy.rule.mutate_update_kinds is None
                         or kind in policy.rule.mutate_update_kinds)}
            # an in-place resize (pods/resize) reaches the validating webhook of a policy that judges one
            if not mutating and policy.rule.resize is not None and (group, kind) == ("", "Pod") \
                    and "UPDATE" in policy.match.operations:
                out.add(("", "pods/resize", "UPDATE"))
    return out


@pytest.mark.parametrize(("kind", "mutating"), [
    ("MutatingWebhookConfiguration", True), ("ValidatingWebhookConfiguration", False)])
def test_webhook_rules_are_exactly_what_the_bundle_needs(kind, mutating, objects):
    """Every kind and operation a policy matches reaches the webhook, and nothing else does."""
    covered, needed = _covered(objects, kind), _needed(mutating)
    assert not needed - covered, f"policies match requests the API server never sends: {sorted(needed - covered)}"
    assert not covered - needed, f"requests sent to the webhook that no policy looks at: {sorted(covered - needed)}"


def test_in_place_resize_goes_to_the_validating_update_webhook_alone(objects):
    """pods/resize (Kubernetes 1.33+) is a subresource a rule on ``pods`` does not match: it is
    routed to update.validate (which fails open, as every UPDATE; the admission policy
    batchgate-queue-gate-pods-resize holds while it is down), and to no mutating webhook (the API
    server takes no patch on it); its condition sends only a raise by someone who is not exempt."""
    routed = {w["name"] for _, w in _webhooks(objects) for r in w["rules"] if "pods/resize" in r["resources"]}
    assert routed == {"update.validate.batchgate.io"}
    (w,) = [w for _, w in _webhooks(objects) if w["name"] == "update.validate.batchgate.io"]
    conditions = {c["name"]: c["expression"] for c in w["matchConditions"]}
    assert conditions["pods-resize"].startswith('!(has(request.subResource) && request.subResource == "resize")')
    assert "isGreaterThan" in conditions["pods-resize"] and "batchgate:admins" in conditions["pods-resize"]
    assert '!(has(request.subResource) && request.subResource == "resize")' in conditions["pods-update"]
    (vap,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
              and o["metadata"]["name"] == "batchgate-queue-gate-pods-resize"]
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/resize"], "operations": ["UPDATE"]}]
    # one validation per reason a Pod may not grow (rules.queue_gate.resize_guard): a released Pod of
    # a gated queue, a scavenger (the shipped bundle has both)
    gated, scavenger = (v["message"] for v in vap["spec"]["validations"])
    assert gated.startswith("queue-gate: the Pod runs in a gated queue,")
    assert scavenger.startswith("queue-gate: the Pod is a scavenger:") and "requests or limits" in scavenger
    assert [v["name"] for v in vap["spec"]["variables"]] == ["exempt", "scavenger"]


def test_a_running_scavengerjobs_growth_is_held_by_an_admission_policy_while_the_webhook_is_down(objects):
    """A ScavengerJob's spec edit goes to update.validate (fails open); batchgate-scavengerjob-running
    refuses a user's raise of spec.pods or of spec.resources of one that started a segment
    (status.jobName), one validation per field (rules.scavengerjob.grown_while_running)."""
    (w,) = [w for _, w in _webhooks(objects) if w["name"] == "update.validate.batchgate.io"]
    assert any("scavengerjobs" in r["resources"] for r in w["rules"]) and w["failurePolicy"] == "Ignore"
    (vap,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
              and o["metadata"]["name"] == "batchgate-scavengerjob-running"]
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["batchgate.io"], "apiVersions": ["v1alpha1"], "resources": ["scavengerjobs"],
         "operations": ["UPDATE"]}]
    variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    assert list(variables) == ["exempt", "running"] and "oldObject.status.jobName" in variables["running"]
    assert "batchgate:admins" in variables["exempt"] and "batchgate-reconciler" in variables["exempt"]
    pods, resources = (v["message"] for v in vap["spec"]["validations"])
    assert "raising spec.pods while it runs" in pods
    assert "raising a request or limit in spec.resources while it runs" in resources


def test_updates_fail_open_and_creates_fail_closed(objects):
    for _, w in _webhooks(objects):
        ops = {op for r in w["rules"] for op in r["operations"]}
        assert w["failurePolicy"] == ("Ignore" if ops == {"UPDATE"} else "Fail"), w["name"]
        assert "DELETE" not in ops and "CONNECT" not in ops


def test_only_updates_and_namespaces_have_match_conditions(objects):
    """CREATE of a workload is always sent (every CREATE is mutated: a queue, a class, a seal);
    UPDATEs and Namespaces only when something a policy reads may change (test_admission_cel)."""
    have = {w["name"] for _, w in _webhooks(objects) if w.get("matchConditions")}
    assert have == {"update.mutate.batchgate.io", "update.validate.batchgate.io", NAMESPACE_WEBHOOK}


def test_the_reconcilers_policies_bind_its_account_alone_everywhere_and_fail_closed(objects):
    """manifests/reconciler-policies.yaml: what RBAC cannot narrow (by label, by field) for the
    reconciler's ServiceAccount, in every namespace; nobody else is judged by them."""
    from webhook.generate import RECONCILER_USER

    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
                and "batchgate.io/guards" in o["metadata"].get("annotations", {})}
    bindings = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
                and o["metadata"]["name"] in policies}
    assert set(policies) == set(bindings) == {
        "batchgate-reconciler-pods", "batchgate-reconciler-jobs", "batchgate-reconciler-nodes",
        "batchgate-reconciler-writes"}
    assert RECONCILER_USER == "system:serviceaccount:batchgate-system:batchgate-reconciler"
    for name, p in policies.items():
        assert bindings[name]["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        assert p["spec"]["failurePolicy"] == "Fail"
        assert "namespaceSelector" not in p["spec"]["matchConstraints"]  # kube-system & co. too
        assert [c["expression"] for c in p["spec"]["matchConditions"]] == [
            f'(has(request.userInfo.username) ? request.userInfo.username : "") == "{RECONCILER_USER}"']
        assert all(v["reason"] == "Forbidden" and "batchgate reconciler" in v["message"]
                   for v in p["spec"]["validations"])
    # every write verb RBAC gives it on these resources is judged by one of them
    judged = {(r["apiGroups"][0], res, op) for p in policies.values()
              for r in p["spec"]["matchConstraints"]["resourceRules"] for res in r["resources"] for op in r["operations"]}
    verbs = {"create": "CREATE", "patch": "UPDATE", "update": "UPDATE", "delete": "DELETE"}
    for (group, resource), granted in RECONCILER_RIGHTS.items():
        if resource in ("pods", "pods/status", "jobs", "nodes", "services", "configmaps", "networkpolicies",
                        "poddisruptionbudgets"):
            for verb in granted & set(verbs):
                if (resource, verb) in (("pods", "delete"), ("jobs", "delete")):
                    continue  # stopping work is its job; uid preconditions keep it to what it planned
                assert (group, resource, verbs[verb]) in judged, (group, resource, verb)


def test_admission_policies_are_bound_to_deny_and_fail_closed(objects):
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
                and "batchgate.io/policy" in o["metadata"].get("annotations", {})}
    bindings = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
                and o["metadata"]["name"] in policies}
    assert set(policies) == set(bindings) == {
        "batchgate-queue-priority-templates", "batchgate-queue-priority-cronjobs",
        "batchgate-namespace-opt-out", "batchgate-reconciler-annotations",
        "batchgate-queue-access-pods", "batchgate-queue-access-jobs", "batchgate-queue-gate-pods", "batchgate-queue-gate-jobs",
        "batchgate-queue-gate-pods-resize", "batchgate-scavengerjob-running"}
    for name, p in policies.items():
        assert p["apiVersion"] == "admissionregistration.k8s.io/v1"
        binding = bindings[name]["spec"]
        assert {k: v for k, v in binding.items() if k != "matchResources"} == {
            "policyName": name, "validationActions": ["Deny"]}
        assert p["spec"]["failurePolicy"] == "Fail"
        ops = {op for r in p["spec"]["matchConstraints"]["resourceRules"] for op in r["operations"]}
        assert ops <= {"CREATE", "UPDATE"}
        for v in p["spec"]["validations"]:
            assert v["reason"] == "Forbidden" and v["message"].startswith(p["metadata"]["annotations"][
                "batchgate.io/policy"].split()[0] + ": ")
        # the namespaces the webhooks leave out, these leave out too (the engine judges nothing
        # there), by the binding's namespaceSelector: the API server evaluates a policy's for
        # every request before its resource rules, a binding's only for the requests they match
        assert "namespaceSelector" not in p["spec"]["matchConstraints"]
        selector = binding.get("matchResources", {}).get("namespaceSelector")
        if name != "batchgate-namespace-opt-out":
            assert binding["matchResources"] == {"namespaceSelector": selector}
            for ns in SYSTEM_NAMESPACES:
                assert not _selects(selector, {"kubernetes.io/metadata.name": ns})
            assert not _selects(selector, {"kubernetes.io/metadata.name": "demo", OPT_OUT[0]: OPT_OUT[1]})
            assert _selects(selector, {"kubernetes.io/metadata.name": "demo"})
        else:  # ... but a Namespace is judged whatever its name (kube-system's opt-out label too)
            assert selector is None


def test_webhook_configurations_for_a_bundle_are_the_files_for_the_shipped_one():
    from_files = webhook_configurations("Q0E=", url="https://127.0.0.1:9443")
    assert webhook_configurations("Q0E=", url="https://127.0.0.1:9443", bundle=load_bundle(POLICIES)) == from_files


@pytest.mark.parametrize(("url", "service", "expected"), [
    pytest.param("https://127.0.0.1:9443/", None, {"url": "https://127.0.0.1:9443/mutate"}, id="url"),
    pytest.param(None, "e2e/hook", {"service": {"namespace": "e2e", "name": "hook", "path": "/mutate", "port": 443}}, id="service"),
    pytest.param(None, None, {"service": {"namespace": "batchgate-system", "name": "batchgate-webhook", "path": "/mutate", "port": 443}}, id="as-deployed"),
])
def test_webhook_configurations_helper(url, service, expected):
    mutating, validating = webhook_configurations("Q0E=", url=url, service=service)
    assert mutating["webhooks"][0]["clientConfig"] == {**expected, "caBundle": "Q0E="}
    for w in validating["webhooks"]:
        client = w["clientConfig"]
        assert client["caBundle"] == "Q0E="
        assert (client.get("url") or client["service"]["path"]).endswith("/validate")
    assert [w["failurePolicy"] for w in validating["webhooks"]] == ["Fail", "Ignore", "Fail"]


def test_webhook_configurations_helper_refuses_url_and_service():
    with pytest.raises(ValueError, match="not both"):
        webhook_configurations("Q0E=", url="https://127.0.0.1:1", service="a/b")


@pytest.mark.parametrize("which", ["mutating", "validating"])
def test_certs_patch_sets_the_ca_bundle_in_every_webhook(which, tmp_path, capsys):
    code = main(["certs", "--cert-dir", str(tmp_path), "--service", "batchgate-system/batchgate-webhook",
                 "--patch", which])
    assert code == 0
    patch = json.loads(capsys.readouterr().out)
    ca = base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()
    configs = dict(zip(("mutating", "validating"), webhook_configurations("", service=None), strict=True))
    patched = jsonpatch.apply_patch(configs[which], patch)
    assert [w["clientConfig"]["caBundle"] for w in patched["webhooks"]] == [ca] * len(patched["webhooks"])


# -- the CRD --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def crd(objects):
    return one(objects, "CustomResourceDefinition", "scavengerjobs.batchgate.io")


def test_crd_shape(crd):
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"]) == (
        "batchgate.io", "Namespaced", "ScavengerJob", "scavengerjobs")
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase" and columns["Interrupted"] == ".status.interruptedCount"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Running", "Interrupted", "Completed", "Failed"]
    assert {"interruptedCount", "creationTimestamp", "runningTimestamps", "interruptedTimestamps",
            "finishedTimestamp", "priorityStartOverTimestamp", "message"} <= set(status)


def test_crd_spec_fields_are_the_webhooks(crd):
    from webhook.rules.scavengerjob import SPEC_FIELDS, VOLUME_FIELDS

    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == set(SPEC_FIELDS)
    assert set(spec["properties"]["volumes"]["items"]["properties"]) == set(VOLUME_FIELDS)
    assert spec["x-kubernetes-preserve-unknown-fields"] is True, "typos reach the webhook's message"


def test_the_crds_bounds_are_the_parsers(crd):
    """The CRD is written by hand; its bounds (checked by the API server, before the webhook and
    while it is down) are the contract's constants the parser (rules.scavengerjob) uses."""
    from webhook.contract import SCAVENGERJOB_MAX_CHECKPOINT_EXIT_CODE, SCAVENGERJOB_MAX_NAME

    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert [v["rule"] for v in schema["x-kubernetes-validations"]] == [
        f"size(self.metadata.name) <= {SCAVENGERJOB_MAX_NAME}"]
    code = schema["properties"]["spec"]["properties"]["checkpointExitCode"]
    assert (code["minimum"], code["maximum"]) == (1, SCAVENGERJOB_MAX_CHECKPOINT_EXIT_CODE)


def test_maintenance_window_crd_is_cluster_scoped_with_the_contracts_fields(objects):
    from webhook.windows import SPEC_FIELDS

    spec = one(objects, "CustomResourceDefinition", "maintenancewindows.batchgate.io")["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"], spec["names"]["shortNames"]) == (
        "batchgate.io", "Cluster", "MaintenanceWindow", "maintenancewindows", ["mw"])
    (version,) = spec["versions"]
    assert (version["name"], version["subresources"]) == ("v1alpha1", {"status": {}})
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {"Start": ".spec.start", "End": ".spec.end", "Nodes": ".status.nodeCount",
                       "State": ".status.state", "Reason": ".spec.reason", "Message": ".status.message"}
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(schema["spec"]["properties"]) == set(SPEC_FIELDS)
    assert schema["spec"]["x-kubernetes-preserve-unknown-fields"] is True, "typos reach the webhook's message"
    assert schema["status"]["properties"]["state"]["enum"] == ["Scheduled", "Active", "Finished"]


def test_maintenance_windows_are_validated_on_create_and_update(objects):
    hooks = {h["name"]: h for h in one(objects, "ValidatingWebhookConfiguration", "batchgate")["webhooks"]}
    for name, op in (("create.validate.batchgate.io", "CREATE"), ("update.validate.batchgate.io", "UPDATE")):
        assert {"apiGroups": ["batchgate.io"], "apiVersions": ["v1alpha1"], "resources": ["maintenancewindows"],
                "operations": [op], "scope": "Cluster"} in hooks[name]["rules"]


def _json_schema(node: Any) -> Any:
    """The CRD's OpenAPI v3 schema as plain JSON Schema (nullable, int-or-string)."""
    if isinstance(node, list):
        return [_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    return out


def test_every_scavengerjob_the_webhook_allows_fits_the_crd(crd):
    import jsonschema

    from webhook.rules.scavengerjob import scavengerjob_problems

    schema = _json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    allowed = 0
    for path in sorted((POLICIES / "scavengerjob" / "samples").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        if obj.get("kind") != "ScavengerJob" or scavengerjob_problems(obj):
            continue
        allowed += 1
        jsonschema.validate(obj, schema)
    assert allowed >= 2


# -- the image --------------------------------------------------------------------------------
def test_dockerfile():
    text = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) >= 2, "multi-stage"
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in lines
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    entrypoint = json.loads(next(line for line in lines if line.startswith("ENTRYPOINT "))[len("ENTRYPOINT "):])
    cmd = json.loads(next(line for line in lines if line.startswith("CMD "))[len("CMD "):])
    assert entrypoint == ["batchgate"]
    assert build_parser().parse_args(cmd).command == "serve"
    assert build_parser().parse_args(["reconcile"]).command == "reconcile"


def test_dockerignore_keeps_keys_and_git_out():
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in lines, "an allow-list"
    assert not any(line.startswith("!certs") or line.startswith("!.git") for line in lines)
