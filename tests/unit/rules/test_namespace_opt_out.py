"""namespace-opt-out: only admins (and `writers`) set or remove batchgate.io/admission on a
Namespace, or give it a kubernetes.io/metadata.name other than its name."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import decided, load_sample, settings_error, with_settings
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review

POLICY = "namespace-opt-out"
OPT_OUT = "batchgate.io/admission"


def run(b: Bundle, obj: dict[str, Any], old: dict[str, Any] | None, *, user: str = "alice",
        groups: tuple[str, ...] = ("devs", "system:authenticated"), namespace: str = "") -> Decision:
    caller = Caller(operation="UPDATE" if old is not None else "CREATE", username=user, groups=groups,
                    namespace=namespace)
    review = synthetic_review(obj, caller, old_object=old)
    review["request"]["kind"] = {"group": "", "version": "v1", "kind": "Namespace"}
    review["request"]["resource"] = {"group": "", "version": "v1", "resource": "namespaces"}
    d = decided(review, b, phase="validate")
    assert d.errors == [] and d.patch == []
    return d


@pytest.fixture
def shipped(tmp_path: Path) -> Bundle:
    return with_settings(tmp_path, POLICY, None)


@pytest.mark.parametrize("value", ["disabled", "enabled", ""])
def test_setting_the_label_to_any_value_is_for_admins(shipped: Bundle, value: str) -> None:
    plain = load_sample(POLICY, "namespace-team-a.yaml")
    labelled = copy.deepcopy(plain)
    labelled["metadata"]["labels"][OPT_OUT] = value
    for old in (plain, None):  # UPDATE and CREATE
        d = run(shipped, labelled, old)
        assert not d.allowed and f"setting the label {OPT_OUT} on a Namespace is for cluster admins only" in d.message
        assert run(shipped, labelled, old, user="root", groups=("batchgate:admins",)).allowed
        assert run(shipped, labelled, old, user="kubernetes-admin", groups=("system:masters",)).allowed


def test_removing_or_changing_it_is_for_admins_too(shipped: Bundle) -> None:
    out = load_sample(POLICY, "namespace-team-a-opted-out.yaml")
    plain = load_sample(POLICY, "namespace-team-a.yaml")
    assert "removing the label" in run(shipped, plain, out).message
    changed = copy.deepcopy(out)
    changed["metadata"]["labels"][OPT_OUT] = "enabled"
    assert not run(shipped, changed, out).allowed


def test_an_opted_out_namespace_may_still_get_other_label_changes(shipped: Bundle) -> None:
    out = load_sample(POLICY, "namespace-team-a-opted-out.yaml")
    other = copy.deepcopy(out)
    other["metadata"]["labels"]["team"] = "cfd"
    assert run(shipped, other, out).allowed


@pytest.mark.parametrize("name", ["kube-system", "batchgate-system"])
def test_kube_system_itself_is_judged_although_its_namespace_is_excluded(shipped: Bundle, name: str) -> None:
    """The engine skips objects *in* excluded namespaces; a Namespace named like one is not."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {OPT_OUT: "disabled"}}}
    bare = copy.deepcopy(ns)
    del bare["metadata"]["labels"][OPT_OUT]
    assert not run(shipped, bare, ns, namespace=name).allowed


def test_a_forged_metadata_name_label_is_denied_the_real_one_passes(shipped: Bundle) -> None:
    posing = load_sample(POLICY, "namespace-posing-as-kube-system.yaml")
    d = run(shipped, posing, None)
    assert not d.allowed and "must be the namespace's own name ('team-a'), not 'kube-system'" in d.message
    assert run(shipped, load_sample(POLICY, "namespace-team-a.yaml"), None).allowed


def test_writers_may(tmp_path: Path) -> None:
    b = with_settings(tmp_path, POLICY, {"writers": {"serviceAccounts": ["argocd/argocd-application-controller"]}})
    plain = load_sample(POLICY, "namespace-team-a.yaml")
    out = load_sample(POLICY, "namespace-team-a-opted-out.yaml")
    sa = "system:serviceaccount:argocd:argocd-application-controller"
    assert run(b, out, plain, user=sa, groups=("system:serviceaccounts",)).allowed
    assert not run(b, out, plain).allowed


def test_settings_errors_name_the_field(tmp_path: Path) -> None:
    e = settings_error(tmp_path, POLICY, "    writes: {}\n")
    assert "spec.settings.writes: unknown field" in str(e)


def _isolating(tmp_path: Path) -> Bundle:
    """The shipped bundle with namespace-opt-out and a job-network policy isolating hpc-* with a
    proxy in namespaces labelled batchgate.io/role=platform (and DNS in those labelled dns=yes)."""
    from tests.unit.conftest import POLICIES
    from webhook.rules import load_bundle

    root = tmp_path / "isolating"
    root.mkdir()
    (root / "bundle.yaml").write_text((POLICIES / "bundle.yaml").read_text())
    for name in (POLICY, "job-network"):
        (root / name).mkdir()
        text = (POLICIES / name / "policy.yaml").read_text()
        (root / name / "policy.yaml").write_text(text)
    import yaml

    doc = yaml.safe_load((root / "job-network" / "policy.yaml").read_text())
    doc["spec"]["settings"]["isolation"] = [{
        "namespaces": ["hpc-*"], "egress": "restricted",
        "proxy": {"namespaceSelector": {"batchgate.io/role": "platform"}, "podSelector": {"app": "proxy"}},
        "dns": {"namespaceSelector": {"dns": "yes"}, "podSelector": {"k8s-app": "kube-dns"}}}]
    (root / "job-network" / "policy.yaml").write_text(yaml.safe_dump(doc))
    return load_bundle(root)


@pytest.mark.parametrize("key", ["batchgate.io/role", "dns"])
def test_the_labels_isolation_lets_in_by_are_for_admins(tmp_path: Path, key: str) -> None:
    """Before (issue 27): a tenant who may label their namespace labelled it batchgate.io/role=platform,
    and their pods labelled app=proxy reached every isolated workload of every namespace."""
    b = _isolating(tmp_path)
    assert ("batchgate.io/role", "job-network") in b.policy_label_keys
    plain = load_sample(POLICY, "namespace-team-a.yaml")
    labelled = copy.deepcopy(plain)
    labelled["metadata"]["labels"][key] = "platform" if key != "dns" else "yes"
    for old in (plain, None):
        d = run(b, labelled, old)
        assert not d.allowed and f"setting the label {key} on a Namespace is for cluster admins only" in d.message
        assert "policy job-network selects namespaces by it" in d.message
        assert run(b, labelled, old, user="root", groups=("batchgate:admins",)).allowed
    assert "removing the label" in run(b, plain, labelled).message
    other = copy.deepcopy(plain)
    other["metadata"]["labels"]["team"] = "b"
    assert run(b, other, plain).allowed  # a key nothing selects by stays free


def test_the_admission_policy_protects_them_too(tmp_path: Path) -> None:
    from webhook.generate import admission_policies

    (opt_out,) = [p for p in admission_policies(_isolating(tmp_path))
                  if p["kind"] == "ValidatingAdmissionPolicy" and p["metadata"]["name"] == "batchgate-namespace-opt-out"]
    messages = [v["message"] for v in opt_out["spec"]["validations"]]
    assert any("batchgate.io/role, dns" in m and "policy job-network selects" in m for m in messages), messages
