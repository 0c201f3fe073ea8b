"""queue-access: who may use each queue (namespace allowedQueues and the queue's access) and
whole nodes in it, on CREATE and on the UPDATEs that add a queue or ask for whole nodes, for
every kind that makes pods; controller-made objects are not judged again; bad bundles fail
at load with file:line."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES
from tests.unit.conftest import checked_decide, decided, sealed, settings_error
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review
from webhook.rules import load_bundle
from webhook.yamlsrc import BundleError

QUEUE = "batchgate.io/queue"
EXCLUSIVE = "batchgate.io/exclusive"
ALICE = ("alice", ("devs", "system:authenticated"))
MALLORY = ("mallory", ("guests", "system:authenticated"))
ADMIN = ("carol", ("batchgate:admins", "system:authenticated"))
RS_CONTROLLER = ("system:serviceaccount:kube-system:replicaset-controller",
                 ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"))
RECONCILER = ("system:serviceaccount:batchgate-system:batchgate-reconciler",
              ("system:serviceaccounts", "system:serviceaccounts:batchgate-system", "system:authenticated"))
POLICY_DIRS = ("queue-access", "queue-priority", "node-selection")


def make_bundle(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Bundle:
    root = tmp_path / "bundle"
    root.mkdir(exist_ok=True)
    doc = yaml.safe_load((POLICIES / "bundle.yaml").read_text())
    edit(doc["spec"])
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    for name in POLICY_DIRS:
        (root / name).mkdir(exist_ok=True)
        (root / name / "policy.yaml").write_text((POLICIES / name / "policy.yaml").read_text())
    return load_bundle(root)


def queue(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(q for q in spec["queues"] if q["name"] == name)


def site(spec: dict[str, Any]) -> None:
    """interactive: group devs; batch: open, but whole nodes for group hpc only; scavenger:
    namespaces gpu-*, or the ServiceAccounts ci/*; plus a namespace rule closing interactive."""
    queue(spec, "interactive")["access"] = {"groups": ["devs"]}
    queue(spec, "batch")["exclusiveAccess"] = {"groups": ["hpc"]}
    queue(spec, "scavenger")["access"] = [{"namespaces": ["gpu-*"]}, {"serviceAccounts": ["ci/*"]}]
    spec["namespaces"] = [{"names": ["overnight"], "defaultQueue": "scavenger", "allowedQueues": ["scavenger"]}]


@pytest.fixture
def b(tmp_path: Path) -> Bundle:
    return make_bundle(tmp_path, site)


def run(bundle: Bundle, obj: dict[str, Any], who: tuple[str, tuple[str, ...]] = ALICE, *,
        namespace: str = "demo", old: dict[str, Any] | None = None) -> Decision:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    caller = Caller(operation="UPDATE" if old is not None else "CREATE", username=who[0], groups=who[1],
                    namespace=namespace)
    if old is None:
        return checked_decide(bundle, obj, caller)
    old = copy.deepcopy(old)
    old["metadata"]["namespace"] = namespace
    d = decided(synthetic_review(obj, caller, old_object=old), bundle)
    assert d.errors == []
    return d


def access_denials(d: Decision) -> list[str]:
    return [m.removeprefix("queue-access: ") for m in d.denials if m.startswith("queue-access: ")]


def pod(queue_name: str | None = None, *, exclusive: str | None = None, owner: str | None = None) -> dict[str, Any]:
    labels = {**({QUEUE: queue_name} if queue_name else {}), **({EXCLUSIVE: exclusive} if exclusive else {})}
    meta: dict[str, Any] = {"name": "p", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u1",
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def template(queue_name: str | None, exclusive: str | None = None) -> dict[str, Any]:
    p = pod(queue_name, exclusive=exclusive)
    return {"metadata": {"labels": p["metadata"]["labels"]}, "spec": p["spec"]}


def workload(kind: str, queue_name: str | None = None, *, on_template: bool = True,
             exclusive: str | None = None) -> dict[str, Any]:
    """``kind`` with the queue label on its pod template (or on itself)."""
    tmpl = template(queue_name if on_template else None, exclusive)
    labels = {QUEUE: queue_name} if queue_name and not on_template else {}
    meta = {"name": "w", "labels": labels}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": tmpl}}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": meta,
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": tmpl}}}}
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": "w"}}, "template": tmpl}
    if kind == "StatefulSet":
        spec["serviceName"] = "w"
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def scavengerjob() -> dict[str, Any]:
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "metadata": {"name": "s"},
            "spec": {"image": "busybox", "command": ["true"], "pods": 1, "duration": "1h",
                     "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}}


# -- who may use a queue -------------------------------------------------------------
def test_open_queue_is_open_to_everyone(b):
    assert run(b, pod("batch"), MALLORY).allowed
    assert run(b, pod(), MALLORY).allowed  # the default queue, batch


def test_group_grant_and_the_denial_says_who_may(b):
    assert run(b, pod("interactive"), ALICE).allowed
    d = run(b, pod("interactive"), MALLORY)
    assert not d.allowed
    assert access_denials(d) == [
        "queue 'interactive' is open to groups devs; you are mallory (groups guests) in namespace demo; "
        "ask an admin for access, or use batchgate.io/queue: one of batch"]


def test_namespace_globs_or_service_accounts(b):
    assert run(b, pod("scavenger"), MALLORY, namespace="gpu-lab").allowed
    assert not run(b, pod("scavenger"), MALLORY, namespace="demo").allowed
    ci = ("system:serviceaccount:ci:runner", ("system:serviceaccounts", "system:serviceaccounts:ci"))
    assert run(b, pod("scavenger"), ci, namespace="demo").allowed
    d = run(b, pod("scavenger"), ("system:serviceaccount:web:app", ("system:serviceaccounts",)), namespace="demo")
    assert access_denials(d) == [
        "queue 'scavenger' is open to namespaces gpu-*; or service accounts ci/*; you are service account "
        "web/app (groups system:serviceaccounts) in namespace demo; ask an admin for access, or use "
        "batchgate.io/queue: one of batch"]


def test_one_grant_needs_namespace_and_identity(tmp_path):
    def edit(spec: dict[str, Any]) -> None:
        queue(spec, "interactive")["access"] = {"namespaces": ["gpu-*"], "groups": ["hpc-gpu"],
                                               "users": ["bob"]}
        spec["namespaces"] = []
    bb = make_bundle(tmp_path, edit)
    assert run(bb, pod("interactive"), ("x", ("hpc-gpu",)), namespace="gpu-a").allowed
    assert run(bb, pod("interactive"), ("bob", ()), namespace="gpu-a").allowed
    assert not run(bb, pod("interactive"), ("bob", ()), namespace="demo").allowed
    d = run(bb, pod("interactive"), ("x", ("other",)), namespace="gpu-a")
    assert "queue 'interactive' is open to users bob or groups hpc-gpu in namespaces gpu-*; you are x " \
           "(groups other) in namespace gpu-a" in d.message


def test_none_is_admins_only_and_admins_pass_everything(tmp_path):
    def edit(spec: dict[str, Any]) -> None:
        queue(spec, "interactive")["access"] = "none"
        spec["namespaces"] = []
        queue(spec, "batch")["exclusiveAccess"] = "none"
    bb = make_bundle(tmp_path, edit)
    d = run(bb, pod("interactive"), ALICE)
    assert "queue 'interactive' is open to the bundle's admins only" in d.message
    assert run(bb, pod("interactive"), ADMIN).allowed
    assert run(bb, pod("batch", exclusive="true"), ADMIN).allowed
    assert not run(bb, pod("batch", exclusive="true"), ALICE).allowed


def test_namespace_allowed_queues_and_queue_access_both_apply(b):
    d = run(b, pod("batch"), ALICE, namespace="overnight")
    assert access_denials(d) == ["queue 'batch' is not available in namespace overnight; "
                                 "use batchgate.io/queue: one of scavenger"]
    # allowed by the namespace rule, but the queue is not open to alice in this namespace
    d = run(b, pod(), ALICE, namespace="overnight")
    assert "queue 'scavenger' is open to namespaces gpu-*" in d.message
    assert "no queue is open to you here; ask an admin" in d.message
    assert run(b, pod("batch"), ADMIN, namespace="overnight").allowed


def test_many_groups_are_counted_not_listed(b):
    groups = tuple(f"g{i}" for i in range(20))
    d = run(b, pod("interactive"), ("zed", groups))
    assert "you are zed (groups g0, g1, g2, g3, g4, g5, g6, g7 and 12 more) in namespace demo" in d.message


# -- whole nodes -----------------------------------------------------------------------
def test_whole_nodes_need_exclusive_access(b):
    d = run(b, pod("batch", exclusive="true"), ALICE)
    assert access_denials(d) == [
        "whole nodes (batchgate.io/exclusive: \"true\") in queue 'batch' are open to groups hpc; you are "
        "alice (groups devs) in namespace demo; leave batchgate.io/exclusive out"]
    assert run(b, pod("batch", exclusive="true"), ("h", ("hpc",))).allowed
    assert run(b, pod("batch", exclusive="false"), ALICE).allowed
    # no exclusiveAccess: whoever may use the queue may take whole nodes in it
    assert run(b, pod("interactive", exclusive="true"), ALICE).allowed


def test_shipped_bundle_keeps_whole_nodes_out_of_the_scavenger_queue(bundle):
    d = run(bundle, pod("scavenger", exclusive="true"), ALICE)
    assert "whole nodes (batchgate.io/exclusive: \"true\") in queue 'scavenger' are open to the bundle's " \
           "admins only" in d.message
    assert run(bundle, pod("batch", exclusive="true"), ALICE).allowed


# -- every kind that makes pods -----------------------------------------------------
KINDS = ["Pod", "Job", "CronJob", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("on_template", [True, False], ids=["template-label", "workload-label"])
def test_every_kind_is_judged_on_create(b, kind, on_template):
    obj = pod("interactive") if kind == "Pod" else workload(kind, "interactive", on_template=on_template)
    assert run(b, obj, ALICE).allowed
    d = run(b, obj, MALLORY)
    assert access_denials(d) and "queue 'interactive' is open to groups devs" in d.message


@pytest.mark.parametrize("kind", KINDS[1:])
def test_every_template_is_judged_for_whole_nodes(b, kind):
    d = run(b, workload(kind, "batch", exclusive="true"), ALICE)
    assert "whole nodes" in d.message, kind


def test_cronjob_job_template_labels_count(b):
    obj = workload("CronJob", "batch")
    obj["spec"]["jobTemplate"]["metadata"] = {"labels": {QUEUE: "interactive"}}
    assert "queue 'interactive' is open to groups devs" in run(b, obj, MALLORY).message
    obj["spec"]["jobTemplate"]["metadata"] = {"labels": {EXCLUSIVE: "true"}}
    assert "whole nodes" in run(b, obj, ALICE).message
    obj["spec"]["jobTemplate"]["metadata"] = {"labels": {QUEUE: "gpu"}}
    assert "queue 'gpu' does not exist" in run(b, obj, ALICE).message


def test_scavengerjob_is_judged_for_its_scavenger_queue(b):
    assert run(b, scavengerjob(), MALLORY, namespace="gpu-x").allowed
    d = run(b, scavengerjob(), MALLORY, namespace="demo")
    assert "queue 'scavenger' is open to namespaces gpu-*" in d.message
    labelled = scavengerjob()
    labelled["metadata"]["labels"] = {QUEUE: "interactive"}  # a ScavengerJob runs in the scavenger queue
    assert run(b, labelled, MALLORY, namespace="gpu-x").allowed


# -- controllers ---------------------------------------------------------------------
def test_controller_made_objects_are_not_judged_again(b):
    made = sealed(pod("interactive", exclusive="true", owner="ReplicaSet"))
    assert run(b, made, RS_CONTROLLER).allowed
    forged = run(b, made, MALLORY)  # a bare Pod claiming an owner is the user's Pod
    assert "queue 'interactive' is open to groups devs" in forged.message
    unsealed = run(b, pod("interactive", exclusive="true", owner="ReplicaSet"), RS_CONTROLLER)
    assert "queue 'interactive' is open to groups devs" in unsealed.message
    assert "from a template with no valid seal, so no one's grants apply" in unsealed.message
    job = workload("Job", "scavenger")
    job["metadata"]["ownerReferences"] = [{"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob",
                                           "name": "s", "uid": "u", "controller": True}]
    assert run(b, job, RECONCILER, namespace="demo").allowed
    del job["metadata"]["ownerReferences"]  # the reconciler's trust is for what it makes, not for it
    assert not run(b, job, RECONCILER, namespace="demo").allowed


def test_controllers_setting_loads_and_replaces_the_default(tmp_path):
    e = settings_error(tmp_path, "queue-access", "    controllers: {users: [a], teams: [b]}\n")
    assert re.search(r"queue-access/policy\.yaml:8: spec\.settings\.controllers\.teams: unknown field", str(e))


# -- UPDATE: whatever the order of requests -------------------------------------------
def test_relabelling_into_a_closed_queue_is_denied(b):
    for kind in KINDS:
        if kind in FIXED_KINDS:
            continue  # their queue does not change at all: test_a_pods_or_jobs_queue_is_fixed_once_it_exists
        old = workload(kind, "batch", on_template=False)
        new = workload(kind, "interactive", on_template=False)
        d = run(b, new, MALLORY, old=old)
        assert "queue 'interactive' is open to groups devs" in d.message, kind
        assert run(b, new, ALICE, old=old).allowed, kind


FIXED_KINDS = ("Pod", "Job")
GROUP = "batchgate.io/exclusive-group"


def _labelled(obj: dict[str, Any], where: str, key: str, value: str | None) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj["metadata"] if where == "object" else obj["spec"]["template"]["metadata"]
    labels = meta.setdefault("labels", {})
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
    return obj


@pytest.mark.parametrize(("kind", "where"), [("Pod", "object"), ("Job", "object"), ("Job", "template")])
@pytest.mark.parametrize(("key", "before", "after"), [
    (QUEUE, "scavenger", "batch"),  # out of the scavengers' cap
    (QUEUE, "batch", None),  # out of every exclusive pod's anti-affinity
    (QUEUE, None, "batch"),
    (GROUP, "job-big-0123456789", "job-other-9876543210"),  # into another job's exclusive group
    (GROUP, None, "job-other-9876543210"),
    (GROUP, "job-big-0123456789", None),
], ids=["queue-changed", "queue-removed", "queue-set", "group-changed", "group-set", "group-removed"])
def test_a_pods_or_jobs_queue_is_fixed_once_it_exists(b, kind, where, key, before, after):
    """Issue 27: relabelling running scavenger pods to batch took them out of the cap; removing the
    queue label (or taking another job's exclusive group) let a pod pinned to another job's exclusive
    node bind beside it. A Pod's or Job's queue and exclusive group are fixed at CREATE, even for
    those who may use every queue involved."""
    base = pod("batch") if kind == "Pod" else workload("Job", "batch", on_template=False)
    base = _labelled(_labelled(base, "object", QUEUE, None), where, QUEUE, None)
    old = _labelled(base, where, key, before)
    new = _labelled(base, where, key, after)
    if key == GROUP:
        old, new = (_labelled(o, where, QUEUE, "batch") for o in (old, new))
    d = run(b, new, ALICE, old=old)
    assert not d.allowed
    (msg,) = access_denials(d)
    assert msg.startswith(f"{key} of a {kind} cannot be set, changed or removed once it exists"), msg
    assert f"create a new {kind} with the label {QUEUE}" in msg
    assert run(b, new, ADMIN, old=old).allowed  # admins correct what they must
    assert run(b, old, ALICE, old=old).allowed  # an UPDATE leaving them alone passes


def test_kinds_whose_template_changes_may_relabel_it(b):
    """A Deployment's (or CronJob's) new pods are admitted, and judged, as they are made."""
    old = workload("Deployment", "batch")
    assert run(b, _labelled(old, "template", GROUP, "g-1"), ALICE, old=old).allowed
    assert run(b, workload("Deployment", "interactive"), ALICE, old=old).allowed


def test_template_relabel_of_apps_kinds_is_denied_or_rewritten(b):
    old = workload("Deployment", "batch", on_template=False)
    old["spec"]["template"]["metadata"]["labels"][QUEUE] = "batch"
    # template and workload both moved: judged
    new = workload("Deployment", "interactive", on_template=False)
    new["spec"]["template"]["metadata"]["labels"][QUEUE] = "interactive"
    assert not run(b, new, MALLORY, old=old).allowed
    # the template alone moved: the workload's label decides and queue-priority writes it back
    only_tmpl = copy.deepcopy(old)
    only_tmpl["spec"]["template"]["metadata"]["labels"][QUEUE] = "interactive"
    d = run(b, only_tmpl, MALLORY, old=old)
    assert d.allowed and d.obj is not None
    assert d.obj["spec"]["template"]["metadata"]["labels"][QUEUE] == "batch"
    # the workload's label removed, the template's moved: the template's queue is judged
    gone = copy.deepcopy(only_tmpl)
    del gone["metadata"]["labels"][QUEUE]
    assert "queue 'interactive'" in run(b, gone, MALLORY, old=old).message


def test_asking_for_whole_nodes_on_update_is_judged(b):
    old = workload("StatefulSet", "batch")
    new = workload("StatefulSet", "batch", exclusive="true")
    assert "whole nodes" in run(b, new, ALICE, old=old).message
    assert run(b, new, ("h", ("hpc",)), old=old).allowed
    # already exclusive, moved to a queue whose whole nodes are closed to the caller
    old2 = workload("StatefulSet", "interactive", exclusive="true")
    assert "whole nodes" in run(b, new, ALICE, old=old2).message


def test_updates_that_add_nothing_pass_after_a_queue_closes(b):
    """Work admitted before the queue closed (or by an admin) can still be scaled, annotated."""
    old = workload("Deployment", "interactive", exclusive="true")
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"note": "x"}
    assert run(b, new, MALLORY, old=old).allowed
    assert run(b, pod("interactive"), MALLORY, old=pod("interactive")).allowed


# -- bad bundles fail at load, at the line to fix --------------------------------------
def _bundle_error(tmp_path: Path, old: str, new: str) -> BundleError:
    root = tmp_path / "bad"
    root.mkdir()
    text = (POLICIES / "bundle.yaml").read_text()
    assert old in text
    (root / "bundle.yaml").write_text(text.replace(old, new, 1))
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    return e.value


BATCH = "      timeLimit: {default: 24h, max: 7d}\n"
BAD_ACCESS = [
    ("null", "      access:\n", r"queues\[1\]\.access: names nobody; leave the field out"),
    ("empty-list", "      access: []\n", r"queues\[1\]\.access: names nobody"),
    ("empty-map", "      access: {}\n", r"queues\[1\]\.access: names nobody; give at least one of"),
    ("empty-users", "      access: {users: []}\n", r"queues\[1\]\.access\.users: empty"),
    ("unknown-field", "      access: {accounts: [x]}\n", r"queues\[1\]\.access\.accounts: unknown field"),
    ("word", "      access: everyone\n", r"queues\[1\]\.access: expected `none`, a grant"),
    ("sa-as-user", "      access: {users: ['system:serviceaccount:ci:runner']}\n",
     r"access\.users\[0\]: a service account: list it under serviceAccounts"),
    ("sa-syntax", "      access: {serviceAccounts: [runner]}\n",
     r"access\.serviceAccounts\[0\]: expected namespace/name"),
    ("namespace-syntax", "      access: {namespaces: [Team_A]}\n", r"access\.namespaces\[0\]: 'Team_A' is not valid"),
    ("selector-empty", "      access: {namespaceSelector: {}}\n",
     r"access\.namespaceSelector: empty: a selector that selects every namespace"),
    ("selector-null", "      access: {namespaceSelector: }\n", r"access\.namespaceSelector: empty"),
    ("selector-field", "      access: {namespaceSelector: {matchLabel: {team: a}}}\n",
     r"access\.namespaceSelector\.matchLabel: unknown field; expected one of: matchLabels, matchExpressions"),
    ("selector-key", "      access: {namespaceSelector: {matchLabels: {'te am': a}}}\n",
     r"access\.namespaceSelector\.matchLabels\.te am: 'te am' is not a valid label key"),
    ("selector-value", "      access: {namespaceSelector: {matchLabels: {team: 'a b'}}}\n",
     r"access\.namespaceSelector\.matchLabels\.team: not a valid label value"),
    ("selector-number", "      access: {namespaceSelector: {matchLabels: {tier: 1}}}\n",
     r"matchLabels\.tier: expected a string \(quote it in YAML\)"),
    ("selector-operator", "      access: {namespaceSelector: {matchExpressions: [{key: team, operator: Equals}]}}\n",
     r"matchExpressions\[0\]\.operator: expected one of In, NotIn, Exists, DoesNotExist, got 'Equals'"),
    ("selector-in-no-values", "      access: {namespaceSelector: {matchExpressions: [{key: team, operator: In}]}}\n",
     r"matchExpressions\[0\]: operator In needs values"),
    ("selector-exists-values",
     "      access: {namespaceSelector: {matchExpressions: [{key: team, operator: Exists, values: [a]}]}}\n",
     r"matchExpressions\[0\]\.values: operator Exists takes no values"),
    ("selector-no-key", "      access: {namespaceSelector: {matchExpressions: [{operator: Exists}]}}\n",
     r"matchExpressions\[0\]\.key: required field is missing"),
    ("selector-empty-exprs", "      access: {namespaceSelector: {matchExpressions: []}}\n",
     r"namespaceSelector\.matchExpressions: empty"),
    ("exclusive-null", "      exclusiveAccess:\n", r"queues\[1\]\.exclusiveAccess: names nobody"),
    ("grant-in-list", "      access: [{groups: [a]}, {}]\n", r"queues\[1\]\.access\[1\]: names nobody"),
    ("default-closed", "      access: none\n", r"spec\.defaultQueue: the default queue 'batch' is open to the bundle's admins only"),
]


@pytest.mark.parametrize(("added", "pattern"), [c[1:] for c in BAD_ACCESS], ids=[c[0] for c in BAD_ACCESS])
def test_bad_access_fails_at_load_with_file_line(tmp_path, added, pattern):
    e = _bundle_error(tmp_path, BATCH, BATCH + added)
    assert re.search(pattern, str(e)), str(e)
    assert str(e).startswith(str(tmp_path / "bad" / "bundle.yaml") + ":")
    assert e.line is not None


def test_a_namespace_defaulting_to_a_queue_closed_to_it_is_refused(tmp_path):
    root = tmp_path / "bad2"
    root.mkdir()
    doc = yaml.safe_load((POLICIES / "bundle.yaml").read_text())
    queue(doc["spec"], "interactive")["access"] = {"namespaces": ["jupyter-*"]}
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(BundleError) as info:
        load_bundle(root)
    assert re.search(r"namespaces\[0\]\.defaultQueue: namespace notebooks defaults to queue 'interactive', "
                     r"which is open to namespaces jupyter-\*", str(info.value)), str(info.value)
    queue(doc["spec"], "interactive")["access"] = [{"namespaces": ["jupyter-*"]}, {"namespaces": ["notebooks"],
                                                                                   "groups": ["devs"]}]
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert load_bundle(root).queues["interactive"].access is not None
