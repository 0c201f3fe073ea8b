"""node-selection: queue/namespace nodeSelectors and exclusive whole-node placement."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES, fixture
from tests.unit.conftest import checked_decide, decided, load_sample, only, settings_error
from webhook.bundle import Bundle, LabelSelector
from webhook.engine import Decision
from webhook.kubefields import REQUIRED
from webhook.offline import Caller, synthetic_review
from webhook.rules import load_bundle
from webhook.rules.node_selection import EXCLUSIVE_GROUP_LABEL, is_exclusive_term
from webhook.yamlsrc import BundleError

CONTROLLER = {"user": "system:kube-controller-manager", "groups": ("system:authenticated",)}


def make_bundle(tmp_path: Path, *, settings: dict[str, Any] | None = None,
                spec: Callable[[dict[str, Any]], None] | None = None,
                policies: tuple[str, ...] = ("node-selection",)) -> Bundle:
    """The shipped bundle.yaml, edited by ``spec``, with only ``policies``."""
    root = tmp_path / "bundle"
    root.mkdir()
    doc = yaml.safe_load((POLICIES / "bundle.yaml").read_text())
    if spec:
        spec(doc["spec"])
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    for name in policies:
        policy = yaml.safe_load((POLICIES / name / "policy.yaml").read_text())
        if settings is not None and name == "node-selection":
            policy["spec"]["settings"] = settings
        (root / name).mkdir()
        (root / name / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    return load_bundle(root)


def pools(spec: dict[str, Any]) -> None:
    """interactive queue -> pool=interactive; namespaces gpu-* -> accelerator=a100 (batch, scavenger only)."""
    for q in spec["queues"]:
        if q["name"] == "interactive":
            q["nodeSelector"] = {"node.example.org/pool": "interactive"}
    spec["namespaces"] = [{"names": ["gpu-*"], "allowedQueues": ["batch", "scavenger"],
                           "nodeSelector": {"node.example.org/accelerator": "a100"}}]


def run(bundle: Bundle, obj: dict[str, Any], *, user: str = "alice",
        groups: tuple[str, ...] = ("devs", "system:authenticated"), namespace: str | None = None,
        operation: str = "CREATE") -> Decision:
    obj = copy.deepcopy(obj)
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    caller = Caller(operation=operation, username=user, groups=groups, namespace=namespace or "demo")
    return checked_decide(bundle, obj, caller)


def sample(name: str) -> dict[str, Any]:
    return load_sample("node-selection", name)


def with_labels(obj: dict[str, Any], labels: dict[str, str], *, template: bool = False) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj["spec"]["template"]["metadata"] if template else obj["metadata"]
    meta.setdefault("labels", {}).update(labels)
    return obj


SPEC_PATH = {"Pod": ("spec",), "Job": ("spec", "template", "spec"),
             "CronJob": ("spec", "jobTemplate", "spec", "template", "spec")}
META_PATH = {"Pod": ("metadata",), "Job": ("spec", "template", "metadata"),
             "CronJob": ("spec", "jobTemplate", "spec", "template", "metadata")}


def at(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


WORKLOADS = {
    "Pod": lambda: sample("pod-plain.yaml"),
    "Job": lambda: yaml.safe_load((POLICIES / "service-account-token" / "samples" / "job.yaml").read_text()),
    "CronJob": lambda: yaml.safe_load((POLICIES / "service-account-token" / "samples" / "cronjob.yaml").read_text()),
}


# -- nodeSelector ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", WORKLOADS)
def test_queue_selector_is_merged_into_the_pod_spec(tmp_path, kind):
    b = make_bundle(tmp_path, spec=pools)
    obj = with_labels(WORKLOADS[kind](), {"batchgate.io/queue": "interactive"})
    at(obj, SPEC_PATH[kind])["nodeSelector"] = {"kubernetes.io/arch": "amd64"}
    d = run(b, obj)
    assert d.allowed
    assert at(d.obj, SPEC_PATH[kind])["nodeSelector"] == {
        "kubernetes.io/arch": "amd64", "node.example.org/pool": "interactive"}
    assert any("node.example.org/pool=interactive (queue 'interactive')" in w for w in d.warnings)


def test_namespace_selector_is_merged(tmp_path):
    b = make_bundle(tmp_path, spec=pools)
    d = run(b, sample("pod-plain.yaml"), namespace="gpu-team")
    assert d.obj["spec"]["nodeSelector"] == {"node.example.org/accelerator": "a100"}
    assert any("namespace gpu-team" in w for w in d.warnings)


def test_no_rule_no_change(tmp_path):
    b = make_bundle(tmp_path, spec=pools)
    d = run(b, sample("pod-plain.yaml"), namespace="demo")  # batch queue, no namespace rule
    assert d.patch == [] and d.warnings == []


def test_same_value_is_no_change(tmp_path):
    b = make_bundle(tmp_path, spec=pools)
    obj = sample("pod-plain.yaml")
    obj["spec"]["nodeSelector"] = {"node.example.org/accelerator": "a100"}
    d = run(b, obj, namespace="gpu-lab")
    assert d.patch == [] and d.warnings == []


def test_conflict_is_denied_by_default(tmp_path):
    b = make_bundle(tmp_path, spec=pools)
    obj = sample("pod-plain.yaml")
    obj["spec"]["nodeSelector"] = {"node.example.org/accelerator": "t4", "zone": "a"}
    d = run(b, obj, namespace="gpu-lab")
    assert not d.allowed
    assert d.message == (
        "node-selection: nodeSelector node.example.org/accelerator=t4 conflicts with namespace gpu-lab, "
        "which runs only on nodes with node.example.org/accelerator=a100; "
        "remove node.example.org/accelerator from nodeSelector")


def test_conflict_is_overridden_when_configured(tmp_path):
    b = make_bundle(tmp_path, spec=pools, settings={"onConflict": "override"})
    obj = sample("pod-plain.yaml")
    obj["spec"]["nodeSelector"] = {"node.example.org/accelerator": "t4", "zone": "a"}
    d = run(b, obj, namespace="gpu-lab")
    assert d.allowed
    assert d.obj["spec"]["nodeSelector"] == {"node.example.org/accelerator": "a100", "zone": "a"}
    assert any("node.example.org/accelerator=t4 replaced by node.example.org/accelerator=a100" in w
               for w in d.warnings)


def test_controller_pod_is_never_denied_for_a_conflict(tmp_path):
    """The template was admitted under an older bundle; denying would make the Job controller retry forever."""
    b = make_bundle(tmp_path, spec=pools)
    obj = sample("pod-from-exclusive-job.yaml")
    obj["spec"]["nodeSelector"] = {"node.example.org/accelerator": "t4"}
    d = run(b, obj, namespace="gpu-lab", **CONTROLLER)
    assert d.allowed
    assert d.obj["spec"]["nodeSelector"] == {"node.example.org/accelerator": "a100"}


def test_namespace_wins_for_an_admin_in_a_queue_closed_there(tmp_path):
    def spec(s: dict[str, Any]) -> None:
        pools(s)
        for q in s["queues"]:
            if q["name"] == "interactive":
                q["nodeSelector"] = {"node.example.org/accelerator": "none"}

    b = make_bundle(tmp_path, spec=spec)
    obj = with_labels(sample("pod-plain.yaml"), {"batchgate.io/queue": "interactive"})
    d = run(b, obj, namespace="gpu-lab", user="root", groups=("system:masters",))
    assert d.obj["spec"]["nodeSelector"] == {"node.example.org/accelerator": "a100"}


def test_update_is_not_touched(tmp_path):
    b = make_bundle(tmp_path, spec=pools)
    obj = sample("pod-plain.yaml")
    obj["metadata"]["namespace"] = "gpu-lab"
    d = decided(synthetic_review(obj, Caller(operation="UPDATE", username="alice"), old_object=obj), b, phase="check")
    assert d.patch == []


# -- exclusive placement ------------------------------------------------------------------
def terms(obj: dict[str, Any], kind: str = "Pod") -> list[dict[str, Any]]:
    return at(obj, SPEC_PATH[kind])["affinity"]["podAntiAffinity"][REQUIRED]  # type: ignore[no-any-return]


def selector_of(term: dict[str, Any]) -> LabelSelector:
    sel = term["labelSelector"]
    return LabelSelector(sel.get("matchLabels", {}), tuple(
        (e["key"], e["operator"], frozenset(e.get("values", ()))) for e in sel.get("matchExpressions", ())))


@pytest.mark.parametrize(("labels", "repelled"), [
    pytest.param({"batchgate.io/queue": "batch"}, True, id="ordinary-queued-pod"),
    pytest.param({"batchgate.io/queue": "scavenger", "app": "x"}, True, id="scavenger"),
    pytest.param({"batchgate.io/queue": "batch", "batchgate.io/exclusive": "true",
                  EXCLUSIVE_GROUP_LABEL: "job-other-0123456789"}, True, id="another-exclusive-job"),
    pytest.param({"batchgate.io/queue": "batch", "batchgate.io/exclusive": "true",
                  EXCLUSIVE_GROUP_LABEL: "SELF"}, False, id="same-job"),
    pytest.param({"k8s-app": "kube-proxy"}, False, id="node-daemon-not-queued"),
    pytest.param({}, False, id="unlabelled-system-pod"),
])
def test_the_term_repels_exactly_other_queued_pods(bundle, labels, repelled):
    """Evaluated with label-selector semantics (NotIn matches pods without the key)."""
    d = run(only(bundle, "node-selection"), sample("pod-exclusive.yaml"))
    group = d.obj["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL]
    (term,) = terms(d.obj)
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["namespaceSelector"] == {}, "all namespaces (Kubernetes >= 1.22)"
    other = {k: (group if v == "SELF" else v) for k, v in labels.items()}
    assert selector_of(term).matches(other) is repelled
    # Symmetry: the scheduler checks an existing exclusive pod's term against the incoming pod,
    # so the same selector decides the other direction; our own pod carries the queue label too.
    assert not selector_of(term).matches({**d.obj["metadata"]["labels"], "batchgate.io/queue": "batch"})


def test_job_and_its_controller_pods_share_one_group(bundle):
    """The real Job and the real Pod the Job controller made for it (shared fixtures)."""
    job = fixture("job-create.mutate.json")
    job["request"]["object"]["metadata"]["labels"]["batchgate.io/exclusive"] = "true"
    dj = decided(job, bundle, phase="check")
    assert dj.allowed
    template = dj.obj["spec"]["template"]
    group = template["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL]
    assert template["metadata"]["labels"]["batchgate.io/exclusive"] == "true"
    assert re.fullmatch(r"job-mpi-sim2-[0-9a-f]{10}", group)

    pod = fixture("pod-create-by-job-controller.mutate.json")
    req = pod["request"]
    req["userInfo"] = {"username": "system:kube-controller-manager", "groups": ["system:authenticated"]}
    req["object"]["metadata"]["labels"].update(template["metadata"]["labels"])
    req["object"]["spec"]["affinity"] = template["spec"]["affinity"]
    dp = decided(pod, bundle, phase="check")
    assert dp.allowed
    assert dp.obj["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL] == group
    assert terms(dp.obj) == terms(dj.obj, "Job")
    assert not any(op["path"].startswith(("/spec/affinity", "/metadata/labels/batchgate.io~1exclusive"))
                   for op in dp.patch)


def test_a_user_pod_does_not_inherit_the_group_of_an_owner_it_names(bundle):
    d = run(bundle, sample("pod-from-exclusive-job.yaml"))
    assert d.obj["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL].startswith("pod-mpi-sim2")


@pytest.mark.parametrize("name", ["x" * 253, "a.b.c", "Ab_Cd" * 20, "solver-", "0"])
def test_group_is_a_valid_label_value(tmp_path, bundle, name):
    obj = sample("pod-exclusive.yaml")
    obj["metadata"]["name"] = name
    group = run(bundle, obj).obj["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL]
    assert len(group) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", group)


def test_same_name_in_two_namespaces_gives_two_groups(bundle):
    a = run(bundle, sample("pod-exclusive.yaml"), namespace="team-a").obj["metadata"]["labels"]
    b = run(bundle, sample("pod-exclusive.yaml"), namespace="team-b").obj["metadata"]["labels"]
    assert a[EXCLUSIVE_GROUP_LABEL] != b[EXCLUSIVE_GROUP_LABEL]


def test_stale_exclusive_terms_are_replaced_not_duplicated(bundle):
    obj = sample("pod-exclusive.mutated.yaml")
    stale = copy.deepcopy(terms(obj)[0])
    stale["labelSelector"]["matchExpressions"][-1]["values"] = ["job-old-0000000000"]
    obj["spec"]["affinity"]["podAntiAffinity"][REQUIRED] = [stale, stale]
    d = run(bundle, obj)
    assert [is_exclusive_term(t) for t in terms(d.obj)] == [True]
    assert terms(d.obj) == terms(sample("pod-exclusive.mutated.yaml"))


def test_switched_off_exclusive_warns_and_adds_nothing(tmp_path):
    b = make_bundle(tmp_path, settings={"exclusive": {"enabled": False}})
    d = run(b, sample("pod-exclusive.yaml"))
    assert d.patch == []
    assert any("exclusive placement is switched off" in w for w in d.warnings)


def test_custom_other_pods_topology_and_namespace_scope(tmp_path):
    b = make_bundle(tmp_path, settings={"exclusive": {
        "topologyKey": "topology.example.org/chassis", "acrossNamespaces": False,
        "otherPods": {"matchLabels": {"tier": "compute"}},
    }})
    d = run(b, sample("pod-exclusive.yaml"))
    (term,) = terms(d.obj)
    group = d.obj["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL]
    assert term == {
        "labelSelector": {
            "matchLabels": {"tier": "compute"},
            "matchExpressions": [{"key": EXCLUSIVE_GROUP_LABEL, "operator": "NotIn", "values": [group]}],
        },
        "topologyKey": "topology.example.org/chassis",
    }


@pytest.mark.parametrize("kind", ["Job", "CronJob"])
def test_label_on_the_workload_or_its_template(bundle, kind):
    for template in (False, True):
        obj = with_labels(WORKLOADS[kind](), {"batchgate.io/exclusive": "true"},
                          template=template and kind == "Job")
        if template and kind == "CronJob":
            at(obj, META_PATH[kind]).setdefault("labels", {})["batchgate.io/exclusive"] = "true"
        d = run(bundle, obj)
        labels = at(d.obj, META_PATH[kind])["labels"]
        assert labels["batchgate.io/exclusive"] == "true"
        assert labels[EXCLUSIVE_GROUP_LABEL].startswith(kind.lower() + "-")
        assert len(terms(d.obj, kind)) == 1


# -- settings errors --------------------------------------------------------------------------
def _bad(tmp_path: Path, settings_yaml: str) -> BundleError:
    return settings_error(tmp_path, "node-selection", settings_yaml)


@pytest.mark.parametrize(("settings", "line", "field", "text"), [
    pytest.param("    onConflict: replace\n", 8, "spec.settings.onConflict", "expected one of deny, override",
                 id="on-conflict"),
    pytest.param("    exclusive: {enabled: yes please}\n", 8, "spec.settings.exclusive.enabled",
                 "expected true or false", id="enabled"),
    pytest.param("    exclusive:\n      topologyKey: 'not a key'\n", 9, "spec.settings.exclusive.topologyKey",
                 "not valid", id="topology-key"),
    pytest.param("    exclusive:\n      otherPods:\n        matchExpressions:\n          - {key: tier, operator: In}\n",
                 11, "spec.settings.exclusive.otherPods.matchExpressions[0]", "operator In needs values",
                 id="in-without-values"),
    pytest.param("    exclusive:\n      otherPods:\n        matchLabels: {batchgate.io/exclusive-group: x}\n",
                 10, "spec.settings.exclusive.otherPods.matchLabels.batchgate.io/exclusive-group",
                 "managed by the policy", id="reserved-key"),
    pytest.param("    nodeSelector: {a: b}\n", 8, "spec.settings.nodeSelector", "unknown field", id="unknown"),
])
def test_bad_settings_name_file_line_field(tmp_path, settings, line, field, text):
    err = _bad(tmp_path, settings)
    assert err.file.endswith("node-selection/policy.yaml")
    assert (err.line, err.field) == (line, field)
    assert text in err.message


def test_each_job_of_a_cronjob_gets_its_own_group(bundle):
    """The CronJob controller copies the jobTemplate, group label and term included; the Job's own
    admission regroups it by the Job's name, so overlapping runs do not share nodes either."""
    cron = run(bundle, sample("cronjob-exclusive-template.yaml"),
               user="system:kube-controller-manager", groups=("system:authenticated",)).obj
    job_spec = cron["spec"]["jobTemplate"]["spec"]
    cron_group = job_spec["template"]["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "nightly-27301440", "namespace": "demo",
                        "ownerReferences": [{"apiVersion": "batch/v1beta1", "kind": "CronJob", "name": "nightly",
                                             "uid": "5b1f3a", "controller": True}]},
           "spec": copy.deepcopy(job_spec)}
    d = run(bundle, job, user="system:kube-controller-manager", groups=("system:authenticated",))
    group = d.obj["spec"]["template"]["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL]
    assert group != cron_group and group.startswith("job-nightly-27301440-")
    assert terms(d.obj, "Job")[-1]["labelSelector"]["matchExpressions"][-1]["values"] == [group]
    assert sum(is_exclusive_term(t) for t in terms(d.obj, "Job")) == 1


def test_a_deployments_replicaset_keeps_the_admitted_template(bundle):
    """The deployment controller finds its ReplicaSet by comparing templates: the ReplicaSet it
    makes from an exclusive Deployment's template must not be regrouped, or it makes another
    ReplicaSet, and another (seen on a real controller-manager). Its Pods get their own group."""
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "demo"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {
               "metadata": {"labels": {"app": "web", "batchgate.io/exclusive": "true"}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    admitted = run(bundle, dep).obj["spec"]["template"]
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": "web-5d8f9", "namespace": "demo", "labels": dict(admitted["metadata"]["labels"]),
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                            "uid": "9c1d", "controller": True}]},
          "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": copy.deepcopy(admitted)}}
    d = run(bundle, rs, **CONTROLLER)
    assert d.obj["spec"]["template"] == admitted and d.patch == []
    # a user's ReplicaSet claiming the same owner is regrouped by its own name
    mine = run(bundle, rs).obj["spec"]["template"]["metadata"]["labels"][EXCLUSIVE_GROUP_LABEL]
    assert mine.startswith("replicaset-web-5d8f9-")
