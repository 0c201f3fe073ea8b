"""service-account-token: the token the API server injected is really gone, and nothing else."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, fixture
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
from webhook.offline import Caller, synthetic_review
from webhook.rules.service_account_token import MOUNT_PATH

POD_FIXTURES = sorted(p.name for p in FIXTURES.glob("pod-create-*.mutate.json"))


@pytest.fixture
def sat(bundle: Bundle) -> Bundle:
    return only(bundle, "service-account-token")


def make_bundle(tmp_path: Path, settings: dict[str, Any]) -> Bundle:
    return with_settings(tmp_path, "service-account-token", settings)


def run(bundle: Bundle, obj: dict[str, Any], *, namespace: str = "demo") -> Decision:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    caller = Caller(username="alice", groups=("devs", "system:authenticated"), namespace=namespace)
    return checked_decide(bundle, obj, caller)


def sample(name: str) -> dict[str, Any]:
    return load_sample("service-account-token", name)


def mounts_at_token_path(spec: dict[str, Any]) -> list[str]:
    return [m["name"] for key in ("initContainers", "containers") for c in spec.get(key) or []
            for m in c.get("volumeMounts") or [] if m["mountPath"].rstrip("/") == MOUNT_PATH]


@pytest.mark.parametrize("name", POD_FIXTURES)
def test_every_real_pod_loses_its_injected_token(sat, name):
    body = fixture(name)
    before = body["request"]["object"]["spec"]
    injected = set(mounts_at_token_path(before))  # kube-api-access-xxxxx (default-token-xxxxx before 1.21)
    assert injected, "the API server injected a token into this fixture"
    d = decided(body, sat, phase="mutate")
    spec = d.obj["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert mounts_at_token_path(spec) == []
    assert not any(v["name"] in injected for v in spec.get("volumes") or [])
    # everything else is as it was
    kept = [v for v in before.get("volumes") or [] if v["name"] not in injected]
    assert (spec.get("volumes") or []) == kept
    assert [c["name"] for c in spec["containers"]] == [c["name"] for c in before["containers"]]


def test_the_users_shm_volume_and_mount_survive(sat):
    d = decided(fixture("pod-create-user-priorityclass-shm-initcontainer.mutate.json"), sat, phase="mutate")
    assert d.obj["spec"]["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    assert d.obj["spec"]["containers"][1]["volumeMounts"] == [{"name": "shm", "mountPath": "/dev/shm"}]
    assert "volumeMounts" not in d.obj["spec"]["containers"][0], "an emptied list is dropped, not left []"
    assert "volumeMounts" not in d.obj["spec"]["initContainers"][0]


def test_job_template_gets_only_the_field(sat):
    d = decided(fixture("job-create.mutate.json"), sat, phase="mutate")
    assert d.patch == [{"op": "add", "path": "/spec/template/spec/automountServiceAccountToken", "value": False}]


def test_projected_volume_of_newer_api_servers(sat):
    d = run(sat, sample("pod-projected-token.yaml"))
    assert "volumes" not in d.obj["spec"] and mounts_at_token_path(d.obj["spec"]) == []


def _with(pod: dict[str, Any], volume: dict[str, Any], mount: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["volumes"] = [volume]
    pod["spec"]["containers"][0]["volumeMounts"] = [mount]
    return pod


TOKEN_MOUNT = {"name": "default-token-abcde", "readOnly": True, "mountPath": MOUNT_PATH}
LEGACY = {"name": "default-token-abcde", "secret": {"secretName": "default-token-abcde"}}


@pytest.mark.parametrize(("volume", "mount"), [
    pytest.param({"name": "my-token", "secret": {"secretName": "my-token"}}, {**TOKEN_MOUNT, "name": "my-token"},
                 id="secret-not-named-like-a-token"),
    pytest.param({"name": "builder-token-abcde", "secret": {"secretName": "builder-token-abcde"}},
                 {**TOKEN_MOUNT, "name": "builder-token-abcde"}, id="another-service-accounts-token"),
    pytest.param({**LEGACY, "secret": {"secretName": "default-token-abcde", "items": [{"key": "token", "path": "t"}]}},
                 TOKEN_MOUNT, id="secret-with-items"),
    pytest.param(LEGACY, {k: v for k, v in TOKEN_MOUNT.items() if k != "readOnly"}, id="writable-mount"),
    pytest.param(LEGACY, {**TOKEN_MOUNT, "subPath": "token"}, id="subpath-mount"),
    pytest.param({"name": "kube-api-access-abcde", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 600, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}}, {**TOKEN_MOUNT, "name": "kube-api-access-abcde"}, id="projected-with-audience"),
    pytest.param({"name": "kube-api-access-abcde", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}}]}}, {**TOKEN_MOUNT, "name": "kube-api-access-abcde"},
        id="projected-token-only"),
    pytest.param({"name": "kube-api-access", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt"}}, {"downwardAPI": {"items": []}}]}},
        {**TOKEN_MOUNT, "name": "kube-api-access"}, id="projected-without-random-suffix"),
])
def test_user_volumes_that_only_look_similar_are_left_alone(sat, volume, mount):
    pod = _with(sample("pod-legacy-token.yaml"), volume, mount)
    d = run(sat, pod)
    assert d.obj["spec"]["volumes"] == [volume]
    assert d.obj["spec"]["containers"][0]["volumeMounts"] == [mount]
    assert d.obj["spec"]["automountServiceAccountToken"] is False


def test_renamed_legacy_volume_when_the_secret_name_was_taken(sat):
    """The plugin appends -xxxxx to the volume name when a user volume already has the secret's name."""
    pod = _with(sample("pod-legacy-token.yaml"),
                {"name": "default-token-abcde-x7k2p", "secret": {"secretName": "default-token-abcde"}},
                {**TOKEN_MOUNT, "name": "default-token-abcde-x7k2p"})
    d = run(sat, pod)
    assert "volumes" not in d.obj["spec"]


def test_service_account_name_decides_the_legacy_name(tmp_path):
    pod = _with(sample("pod-legacy-token.yaml"),
                {"name": "builder-token-abcde", "secret": {"secretName": "builder-token-abcde"}},
                {**TOKEN_MOUNT, "name": "builder-token-abcde"})
    pod["spec"]["serviceAccountName"] = pod["spec"]["serviceAccount"] = "builder"
    d = run(make_bundle(tmp_path, {"keepDedicatedServiceAccounts": False}), pod)
    assert "volumes" not in d.obj["spec"]


def test_a_dedicated_service_account_keeps_what_the_plugin_injected(sat):
    """The shipped policy keeps the token of workloads that name their own account."""
    pod = _with(sample("pod-legacy-token.yaml"),
                {"name": "builder-token-abcde", "secret": {"secretName": "builder-token-abcde"}},
                {**TOKEN_MOUNT, "name": "builder-token-abcde"})
    pod["spec"]["serviceAccountName"] = pod["spec"]["serviceAccount"] = "builder"
    d = run(sat, pod)
    assert not d.patch


@pytest.mark.parametrize(("settings", "namespace", "account", "exempt"), [
    pytest.param({"exemptNamespaces": ["ci-*"]}, "ci-main", "default", True, id="namespace-glob"),
    pytest.param({"exemptNamespaces": ["ci-*"]}, "demo", "default", False, id="other-namespace"),
    pytest.param({"exemptServiceAccounts": ["demo/deployer"]}, "demo", "deployer", True, id="account"),
    pytest.param({"exemptServiceAccounts": ["demo/deployer"]}, "other", "deployer", False, id="account-other-ns"),
    pytest.param({"exemptServiceAccounts": ["*/argo-*"]}, "wf", "argo-workflow", True, id="account-glob"),
    pytest.param({"exemptServiceAccounts": ["demo/default"]}, "demo", None, True, id="empty-name-is-default"),
])
def test_exemptions(tmp_path, settings, namespace, account, exempt):
    b = make_bundle(tmp_path, settings)
    pod = sample("pod-legacy-token.yaml")
    if account is None:
        del pod["spec"]["serviceAccountName"], pod["spec"]["serviceAccount"]
    else:
        pod["spec"]["serviceAccountName"] = pod["spec"]["serviceAccount"] = account
    d = run(b, pod, namespace=namespace)
    assert (d.patch == []) is exempt


def test_automount_true_is_overridden_with_a_warning(sat):
    d = run(sat, sample("pod-automount-true.yaml"))
    assert d.obj["spec"]["automountServiceAccountToken"] is False
    assert d.warnings == [
        "service-account-token: automountServiceAccountToken: true overridden: workloads get no "
        "Kubernetes API token here; ask an admin to exempt service account demo/default if this one needs the API"
    ]


def test_update_is_not_touched(sat):
    pod = sample("pod-legacy-token.yaml")
    d = decided(synthetic_review(pod, Caller(operation="UPDATE", username="alice"), old_object=pod), sat, phase="check")
    assert d.patch == []


@pytest.mark.parametrize(("settings", "line", "field", "text"), [
    pytest.param("    exemptServiceAccounts: [deployer]\n", 8, "spec.settings.exemptServiceAccounts[0]",
                 "expected namespace/name", id="account-without-namespace"),
    pytest.param("    exemptServiceAccounts:\n      - ci/deployer\n      - a/b/c\n", 10,
                 "spec.settings.exemptServiceAccounts[1]", "expected namespace/name", id="second-entry"),
    pytest.param("    exemptNamespaces: ci-*\n", 8, "spec.settings.exemptNamespaces", "expected a list", id="not-a-list"),
    pytest.param("    exempt: [ci]\n", 8, "spec.settings.exempt", "unknown field", id="unknown-field"),
])
def test_bad_settings_name_file_line_field(tmp_path, settings, line, field, text):
    err = settings_error(tmp_path, "service-account-token", settings)
    assert err.file.endswith("service-account-token/policy.yaml")
    assert (err.line, err.field) == (line, field)
    assert text in err.message
