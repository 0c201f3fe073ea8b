"""Bundle loading: the shipped bundle loads; every kind of mistake names file, line and field."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import POLICIES
from webhook.rules import load_bundle
from webhook.yamlsrc import BundleError


def test_shipped_bundle_scavenger_settings(bundle):
    sv = bundle.scavengers
    assert (sv.queue, sv.max_share, sv.unschedulable_timeout, sv.grace_period) == ("scavenger", 0.7, 300, 60)


def test_the_guard_is_read_once_into_core_seconds_and_the_reconciler_takes_the_bundles_settings(bundle):
    from webhook.reconciler.settings import QueuePolicy

    assert bundle.scavengers.guard == 20 * 60  # guardCoreMinutes: 20
    assert QueuePolicy.from_bundle(bundle).scavengers is bundle.scavengers


ANOTHER_SCAVENGER_QUEUE = """    - name: leftovers
      priorityClass: batchgate-scavenger
      scavenger: true
"""


@pytest.mark.parametrize(("edits", "queue"), [
    ((), "scavenger"),  # named in spec.scavengers.queue
    ((("    queue: scavenger\n", "    queue: leftovers\n"),), "leftovers"),  # the first scavenger queue
    # not named: the scavenger queue called so, not the first one (which the webhook took, alone)
    ((("  scavengers:\n    queue: scavenger\n", "  scavengers:\n"),), "scavenger"),
])
def test_the_webhook_and_the_reconciler_put_scavengerjobs_in_the_same_queue(tmp_bundle, edits, queue):
    """One answer, Bundle.scavengers.queue: the webhook judges a ScavengerJob for it and the
    reconciler makes its Jobs in it."""
    from webhook.reconciler.settings import QueuePolicy

    path = tmp_bundle / "bundle.yaml"
    _edit(path, "    - name: scavenger\n", ANOTHER_SCAVENGER_QUEUE + "    - name: scavenger\n")
    for old, new in edits:
        _edit(path, old, new)
    b = load_bundle(tmp_bundle, deployable=False)
    assert [q.name for q in b.queues.values() if q.scavenger] == ["leftovers", "scavenger"]
    assert b.queue_for("batchgate.io", "ScavengerJob", None, "demo") == (queue, True)
    assert QueuePolicy.from_bundle(b).scavengers.queue == queue


def test_shipped_bundle_loads(bundle):
    assert set(bundle.queues) >= {"interactive", "batch", "scavenger"}
    assert bundle.default_queue == "batch"
    assert "kube-system" in bundle.excluded_namespaces
    from webhook.rules import REGISTRY

    folders = sorted(p.parent.name for p in POLICIES.glob("*/policy.yaml"))
    assert sorted(p.name for p in bundle.policies) == folders  # every folder is a policy
    assert all(p.rule is REGISTRY[p.name] for p in bundle.policies)  # of the type it names


def test_every_ordinary_class_ranks_above_every_scavenger_class(bundle):
    pcs = bundle.priority_classes
    ordinary = [pcs[q.priority_class].value for q in bundle.queues.values() if not q.scavenger]
    scav = [pcs[q.priority_class] for q in bundle.queues.values() if q.scavenger]
    assert scav and all(s.preemption_policy == "Never" for s in scav)
    assert min(ordinary) > max(s.value for s in scav)


@pytest.fixture
def tmp_bundle(tmp_path: Path) -> Path:
    root = tmp_path / "policies"
    root.mkdir()
    shutil.copy(POLICIES / "bundle.yaml", root / "bundle.yaml")
    (root / "shm").mkdir()
    shutil.copy(POLICIES / "shm" / "policy.yaml", root / "shm" / "policy.yaml")
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"test setup: {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


BUNDLE_ERRORS = [
    ("unknown-field", "  defaultQueue: batch", "  defaultQueue: batch\n  defaultQeue: batch", "defaultQeue",
     r"spec\.defaultQeue: unknown field"),
    ("bad-duration", "default: 2h, max: 12h", "default: 2 hours, max: 12h", "2 hours",
     r"spec\.queues\[0\]\.timeLimit\.default: expected a duration"),
    ("default-over-max", "default: 2h, max: 12h", "default: 20h, max: 12h", "20h",
     r"timeLimit\.default: the default time limit exceeds the maximum"),
    ("unknown-class", "priorityClass: batchgate-batch", "priorityClass: batchgate-bach", "batchgate-bach",
     r"spec\.queues\[1\]\.priorityClass: unknown priority class"),
    ("scavenger-preempts", "value: -1000\n      preemptionPolicy: Never", "value: -1000\n      preemptionPolicy: PreemptLowerPriority",
     "priorityClass: batchgate-scavenger", r"preemptionPolicy must be Never"),
    ("scavenger-outranks", "value: -1000", "value: 5000", "priorityClass: batchgate-scavenger",
     r"must rank below ordinary class"),
    ("value-not-int", "value: 1000\n", "value: high\n", "value: high", r"value: expected an integer"),
    ("missing-default-queue", "defaultQueue: batch", "defaultQueue: nightly", "defaultQueue: nightly",
     r"default queue 'nightly' is not declared"),
    ("invalid-yaml", "  queues:", "  queues: [", None, r"invalid YAML"),
    ("scavenger-share-over-100", "maxShare: 70%", "maxShare: 170%", "maxShare",
     r"spec\.scavengers\.maxShare: expected a share of the cluster like 70%.*170% is not over 0 and at most 100%"),
    ("scavenger-share-word", "maxShare: 70%", "maxShare: most", "maxShare", r"'most' is not a share"),
    ("scavenger-queue-not-scavenger", "    queue: scavenger\n", "    queue: batch\n", "queue: batch",
     r"spec\.scavengers\.queue: must be a scavenger queue \(scavenger: true\); those: scavenger"),
    ("scavenger-timeout", "unschedulableTimeout: 5m", "unschedulableTimeout: soon", "soon",
     r"unschedulableTimeout: expected a duration"),
    ("scavenger-guard-negative", "guardCoreMinutes: 20", "guardCoreMinutes: -5", "guardCoreMinutes",
     r"spec\.scavengers\.guardCoreMinutes: expected core-minutes of unsaved work, a number >= 0 .*'-5' is not"),
    ("scavenger-guard-word", "guardCoreMinutes: 20", "guardCoreMinutes: lots", "guardCoreMinutes",
     r"'lots' is not a number"),
    ("scavenger-unknown", "gracePeriod: 60s", "gracePeriod: 60s\n    maxShares: 1", "maxShares",
     r"spec\.scavengers\.maxShares: unknown field"),
    # the batch queue: queue states, gating, fair share
    ("queue-bad-state", "timeLimit: {default: 24h, max: 7d}", "timeLimit: {default: 24h, max: 7d}\n      state: paused",
     "state: paused", r"spec\.queues\[1\]\.state: expected one of open, hold, drain, stop"),
    ("queue-bad-backfill", "timeLimit: {default: 24h, max: 7d}", "timeLimit: {default: 24h, max: 7d}\n      backfill: greedy",
     "backfill: greedy", r"spec\.queues\[1\]\.backfill: expected one of conservative, easy, start-by"),
    ("queue-start-by-backfill-fair-promise", "timeLimit: {default: 24h, max: 7d}",
     "timeLimit: {default: 24h, max: 7d}\n      backfill: start-by\n      promise: fair-share",
     "backfill: start-by", r"spec\.queues\[1\]\.backfill: backfill: start-by .* needs promise: deadline"),
    ("queue-bad-promise", "timeLimit: {default: 24h, max: 7d}", "timeLimit: {default: 24h, max: 7d}\n      promise: place",
     "promise: place", r"spec\.queues\[1\]\.promise: expected one of deadline, fair-share"),
    ("queue-gated-not-bool", "      gated: false", "      gated: maybe", "gated: maybe", r"spec\.queues\[0\]\.gated: expected true or false"),
    ("fair-share-bad-weight", "weights: {cpu: 1,", "weights: {cpu: -1,", "weights:",
     r"spec\.fairShare\.weights\.cpu: .*a number from 0 to"),
    ("fair-share-weight-word", "weights: {cpu: 1,", "weights: {cpu: lots,", "weights:", r"a number from 0 to"),
    ("fair-share-duplicate-account", "accounts: []",
     "accounts:\n      - {name: phys, namespaces: [a], shares: 1}\n      - {name: phys, namespaces: [b]}",
     "namespaces: [b]", r"spec\.fairShare\.accounts\[1\]\.name: duplicate account"),
    ("fair-share-zero-shares", "accounts: []", "accounts:\n      - {name: phys, namespaces: [a], shares: 0}",
     "shares: 0", r"spec\.fairShare\.accounts\[0\]\.shares: more than 0"),
    ("fair-share-account-without-namespaces", "accounts: []", "accounts:\n      - {name: phys, shares: 2}",
     "name: phys", r"namespaces"),
    ("fair-share-half-life-short", "halfLife: 7d", "halfLife: 10s", "halfLife: 10s", r"spec\.fairShare\.halfLife: at least 60 s"),
    ("fair-share-half-life-word", "halfLife: 7d", "halfLife: a week", "halfLife: a week", r"halfLife: expected a duration"),
    ("scheduler-profiles-empty", "kubeSchedulerProfiles: [default-scheduler]", "kubeSchedulerProfiles: []",
     "kubeSchedulerProfiles", r"spec\.kubeSchedulerProfiles: name at least one profile"),
    ("scheduler-profiles-bad-name", "kubeSchedulerProfiles: [default-scheduler]",
     "kubeSchedulerProfiles: [default-scheduler, Gpu_Packing]", "kubeSchedulerProfiles",
     r"spec\.kubeSchedulerProfiles\[1\]: 'Gpu_Packing' is not valid: a scheduler name"),
    ("scheduler-profiles-duplicate", "kubeSchedulerProfiles: [default-scheduler]",
     "kubeSchedulerProfiles: [default-scheduler, default-scheduler]", "kubeSchedulerProfiles",
     r"spec\.kubeSchedulerProfiles\[1\]: duplicate profile"),
    ("scheduler-profiles-not-a-list", "kubeSchedulerProfiles: [default-scheduler]",
     "kubeSchedulerProfiles: default-scheduler", "kubeSchedulerProfiles",
     r"spec\.kubeSchedulerProfiles: expected a list"),
    ("fair-share-unknown", "maxAge: 7d", "maxAge: 7d\n    decay: 2", "decay: 2", r"spec\.fairShare\.decay: unknown field"),
]


@pytest.mark.parametrize(("old", "new", "line_needle", "pattern"), [c[1:] for c in BUNDLE_ERRORS],
                         ids=[c[0] for c in BUNDLE_ERRORS])
def test_bundle_yaml_errors_name_file_line_field(tmp_bundle, old, new, line_needle, pattern):
    f = tmp_bundle / "bundle.yaml"
    _edit(f, old, new)
    with pytest.raises(BundleError) as e:
        load_bundle(tmp_bundle)
    msg = str(e.value)
    assert msg.startswith(str(f) + ":"), msg
    assert re.search(pattern, msg), msg
    if line_needle:
        assert e.value.line == _line_of(f, line_needle), msg


POLICY_ERRORS = [
    ("unknown-type", "type: shm", "type: shmem", r"spec\.type: unknown policy type"),
    ("bad-quantity", "size: 1Gi", "size: lots", r"spec\.settings\.size: expected a quantity"),
    ("bad-fraction", "fractionOfMemoryLimit: 0.5", "fractionOfMemoryLimit: 2", r"fractionOfMemoryLimit: expected a number"),
    ("unknown-setting", "size: 1Gi", "size: 1Gi\n    sise: 2Gi", r"spec\.settings\.sise: unknown field"),
    ("bad-failure-policy", "type: shm", "type: shm\n  failurePolicy: Maybe", r"failurePolicy: expected one of Ignore, Fail"),
    ("mutate-on-delete", "type: shm", "type: shm\n  match:\n    operations: [DELETE]", r"may only run on CREATE, UPDATE"),
    ("bad-kind", "type: shm", "type: shm\n  match:\n    kinds: [a/b/c/d]", r"expected Kind, version/Kind"),
    ("wrong-api-version", "apiVersion: batchgate.io/v1alpha1", "apiVersion: v1", r"apiVersion: expected batchgate.io/v1alpha1"),
]


@pytest.mark.parametrize(("old", "new", "pattern"), [c[1:] for c in POLICY_ERRORS], ids=[c[0] for c in POLICY_ERRORS])
def test_policy_errors_name_file_line_field(tmp_bundle, old, new, pattern):
    f = tmp_bundle / "shm" / "policy.yaml"
    _edit(f, old, new)
    with pytest.raises(BundleError) as e:
        load_bundle(tmp_bundle)
    msg = str(e.value)
    assert msg.startswith(f"{f}:"), msg
    assert e.value.line is not None and e.value.line > 0
    assert re.search(pattern, msg), msg


def test_duplicate_policy_names_are_rejected(tmp_bundle):
    shutil.copytree(tmp_bundle / "shm", tmp_bundle / "shm2")
    with pytest.raises(BundleError, match="duplicate policy name"):
        load_bundle(tmp_bundle)


def test_missing_bundle_yaml(tmp_path):
    with pytest.raises(BundleError, match=r"bundle\.yaml"):
        load_bundle(tmp_path)


def test_match_selects_by_namespace_label_user(tmp_bundle):
    _edit(tmp_bundle / "shm" / "policy.yaml", "type: shm",
          "type: shm\n  match:\n    namespaces: ['team-*']\n    selector:\n      matchExpressions:\n"
          "        - {key: shm, operator: NotIn, values: ['off']}\n  exclude:\n    users: [robot]")
    from webhook.engine import decide
    from webhook.offline import Caller, synthetic_review

    b = load_bundle(tmp_bundle)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {}},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    def mutated(ns, labels=None, user="alice"):
        obj = {**pod, "metadata": {"name": "p", "labels": labels or {}}}
        return bool(decide(synthetic_review(obj, Caller(namespace=ns, username=user)), b, phase="mutate").patch)
    assert mutated("team-a")
    assert not mutated("other")
    assert not mutated("team-a", {"shm": "off"})
    assert not mutated("team-a", user="robot")


# -- every way a bundle can fail is file:line, never a crash ------------------------------
def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


_BOMB = "".join(
    f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else ', '.join(['lol'] * 9)}]\n" for i in range(9)
)

LOAD_ERRORS = [
    ("unquoted-bad-date", "default: 2h, max: 12h", "default: 2024-13-45, max: 12h", "2024-13-45",
     r"cannot read '2024-13-45' as timestamp: month must be in 1\.\.12"),
    ("unknown-tag", "  defaultQueue: batch", "  defaultQueue: !queue batch", "!queue",
     r"could not determine a constructor for the tag '!queue'"),
    ("python-tag", "  defaultQueue: batch", "  defaultQueue: !!python/object/apply:os.system [true]",
     "python/object", r"could not determine a constructor"),
    ("deep-nesting", "  defaultQueue: batch", "  defaultQueue: batch\n  junk: " + _deep(100000), "junk:",
     # refused at file:line whoever stops it: our depth check, or PyYAML's own scanner limit
     # (6.0.4+: "exceeded maximum nesting depth"); what matters is no crash, no load
     r"(?i)\bnest"),
    ("alias-bomb", "  defaultQueue: batch", "  defaultQueue: batch\n  junk:\n" + _BOMB, None,
     r"expands to more than 200000 nodes \(aliases included\)"),
    ("binary-garbage", "  defaultQueue: batch", "  defaultQueue: batch\n  x: \x07", None, r"invalid YAML"),
]


@pytest.mark.parametrize(("old", "new", "line_needle", "pattern"), [c[1:] for c in LOAD_ERRORS],
                         ids=[c[0] for c in LOAD_ERRORS])
def test_yaml_the_loader_did_not_anticipate_is_still_file_line(tmp_bundle, old, new, line_needle, pattern):
    f = tmp_bundle / "bundle.yaml"
    _edit(f, old, new)
    with pytest.raises(BundleError) as e:
        load_bundle(tmp_bundle)
    msg = str(e.value)
    assert msg.startswith(f"{f}:"), msg
    assert e.value.line is not None and e.value.line > 0, msg
    assert re.search(pattern, msg), msg
    if line_needle:
        assert e.value.line == _line_of(f, line_needle), msg


def test_bad_date_in_a_policy_file_names_its_line(tmp_bundle):
    f = tmp_bundle / "shm" / "policy.yaml"
    _edit(f, "size: 1Gi", "size: 2023-02-30")
    with pytest.raises(BundleError, match=r"day is out of range") as e:
        load_bundle(tmp_bundle)
    assert str(e.value).startswith(f"{f}:{_line_of(f, '2023-02-30')}:")


def test_aliases_within_bounds_still_load(tmp_bundle):
    _edit(tmp_bundle / "bundle.yaml", "      timeLimit: {default: 2h, max: 12h}",
          "      timeLimit: &tl {default: 2h, max: 12h}")
    _edit(tmp_bundle / "bundle.yaml", "      timeLimit: {default: 24h, max: 7d}", "      timeLimit: *tl")
    assert load_bundle(tmp_bundle).queues["batch"].max_time_limit == 12 * 3600


def test_backfill_is_conservative_unless_a_queue_says_easy(tmp_bundle):
    from webhook.reconciler.settings import QueuePolicy

    assert {q.backfill for q in load_bundle(tmp_bundle).queues.values()} == {"conservative"}
    _edit(tmp_bundle / "bundle.yaml", "      timeLimit: {default: 24h, max: 7d}",
          "      timeLimit: {default: 24h, max: 7d}\n      backfill: easy")
    b = load_bundle(tmp_bundle)
    assert b.queues["batch"].backfill == "easy" and QueuePolicy.from_bundle(b).easy == frozenset({"batch"})


def test_backfill_start_by_is_a_queue_setting_the_reconciler_reads(tmp_bundle):
    from webhook.reconciler.settings import QueuePolicy

    assert QueuePolicy.from_bundle(load_bundle(tmp_bundle)).start_by_backfill == frozenset()
    _edit(tmp_bundle / "bundle.yaml", "      timeLimit: {default: 24h, max: 7d}",
          "      timeLimit: {default: 24h, max: 7d}\n      backfill: start-by")
    b = load_bundle(tmp_bundle)
    policy = QueuePolicy.from_bundle(b)
    assert b.queues["batch"].backfill == "start-by"
    assert policy.start_by_backfill == frozenset({"batch"}) and policy.easy == frozenset()


def test_promises_are_deadlines_unless_a_queue_says_fair_share(tmp_bundle):
    from webhook.reconciler.settings import QueuePolicy

    assert {q.promise for q in load_bundle(tmp_bundle).queues.values()} == {"deadline"}
    _edit(tmp_bundle / "bundle.yaml", "      timeLimit: {default: 24h, max: 7d}",
          "      timeLimit: {default: 24h, max: 7d}\n      promise: fair-share")
    b = load_bundle(tmp_bundle)
    assert b.queues["batch"].promise == "fair-share" and QueuePolicy.from_bundle(b).fair_promises == frozenset({"batch"})


def test_kube_scheduler_profiles_default_to_default_scheduler_and_the_bundle_may_name_more(tmp_bundle):
    from webhook.reconciler.settings import QueuePolicy

    f = tmp_bundle / "bundle.yaml"
    assert QueuePolicy.from_bundle(load_bundle(tmp_bundle)).kube_schedulers == frozenset({"default-scheduler"})
    _edit(f, "kubeSchedulerProfiles: [default-scheduler]", "kubeSchedulerProfiles: [default-scheduler, gpu-packing]")
    b = load_bundle(tmp_bundle)
    assert b.kube_scheduler_profiles == ("default-scheduler", "gpu-packing")
    assert QueuePolicy.from_bundle(b).kube_schedulers == frozenset({"default-scheduler", "gpu-packing"})
    _edit(f, "  kubeSchedulerProfiles: [default-scheduler, gpu-packing]\n", "")
    assert load_bundle(tmp_bundle).kube_scheduler_profiles == ("default-scheduler",)  # absent: the default


def test_an_error_no_check_anticipated_still_names_the_file(tmp_bundle, monkeypatch):
    import webhook.bundle as b

    def broken(*args, **kwargs):
        raise KeyError("settings")
    monkeypatch.setattr(b, "_parse_policy", broken)
    with pytest.raises(BundleError, match=r"cannot load: KeyError") as e:
        load_bundle(tmp_bundle)
    assert e.value.file == str(tmp_bundle / "shm" / "policy.yaml") and e.value.line == 1


def test_oversized_file_is_refused(tmp_bundle):
    f = tmp_bundle / "bundle.yaml"
    f.write_text(f.read_text() + "#" * (5 * 1024 * 1024) + "\n")
    with pytest.raises(BundleError, match=r"larger than \d+ bytes"):
        load_bundle(tmp_bundle)


# -- semantically dangerous bundles are refused with the reason ----------------------------------
ADMINS = "  admins:\n    groups: [system:masters, \"batchgate:admins\"]"
CONTROLLERS = "  controllers:\n    users: [system:kube-controller-manager]"
DANGEROUS = [
    ("admin-authenticated", ADMINS, "  admins:\n    groups: [system:masters, system:authenticated]",
     "system:authenticated", r"spec\.admins\.groups\[1\]: grants admin rights to every authenticated user"),
    ("admin-unauthenticated", ADMINS, "  admins:\n    groups: [system:unauthenticated]",
     "system:unauthenticated", r"grants admin rights to every anonymous caller"),
    ("admin-all-serviceaccounts", ADMINS, "  admins:\n    groups: [system:serviceaccounts]",
     "system:serviceaccounts", r"grants admin rights to every service account"),
    ("admin-sa-group-glob", ADMINS, "  admins:\n    groups: [\"system:serviceaccounts:*\"]",
     "system:serviceaccounts", r"the service accounts of any namespace"),
    ("admin-group-star", ADMINS, "  admins:\n    groups: [\"*\"]", "groups:", r"grants admin rights to every"),
    ("admin-system-star", ADMINS, "  admins:\n    groups: [\"system:*\"]", "groups:", r"grants admin rights to every"),
    ("admin-user-star", ADMINS, "  admins:\n    users: [\"*\"]", "users:", r"spec\.admins\.users\[0\]: grants admin"),
    ("admin-anonymous", ADMINS, "  admins:\n    users: [system:anonymous]", "users:", r"anonymous callers"),
    ("admin-sa-user-glob", ADMINS, "  admins:\n    users: [\"system:serviceaccount:*\"]", "users:",
     r"service accounts of any namespace"),
    ("admin-sa-any-namespace", ADMINS, "  admins:\n    serviceAccounts: [\"*/default\"]", "serviceAccounts:",
     r"service accounts of any matching namespace"),
    ("controller-authenticated", CONTROLLERS, "  controllers:\n    groups: [system:authenticated]",
     "system:authenticated", r"spec\.controllers\.groups\[0\]: grants controller trust"),
    ("controller-sa-team-glob", "      - kube-system/job-controller\n", "      - \"team-*/ci\"\n",
     "team-*/ci", r"name the namespace exactly"),
    ("exclude-everything", "    namespaces: [kube-system, kube-public, kube-node-lease, batchgate-system]",
     "    namespaces: [kube-system, \"*\"]", "namespaces: [kube-system, \"*\"]",
     r"spec\.exclude\.namespaces\[1\]: excludes every namespace"),
    ("exclude-prefix-star", "    namespaces: [kube-system, kube-public, kube-node-lease, batchgate-system]",
     "    namespaces: [kube-system, \"b*\"]", "namespaces: [kube-system, \"b*\"]", r"excludes every namespace"),
    ("no-queues", "  queues:\n", "  queues: []\n  unused:\n", "queues: []", r"declare at least one queue"),
]


@pytest.mark.parametrize(("old", "new", "line_needle", "pattern"), [c[1:] for c in DANGEROUS],
                         ids=[c[0] for c in DANGEROUS])
def test_dangerous_bundles_are_refused_with_the_reason(tmp_bundle, old, new, line_needle, pattern):
    f = tmp_bundle / "bundle.yaml"
    if old == "  queues:\n":  # drop the whole queue list
        text = f.read_text()
        start, end = text.index("  queues:\n"), text.index("  # Per-namespace")
        f.write_text(text[:start] + "  queues: []\n" + text[end:].replace("defaultQueue: batch", "", 1)
                     .replace("allowedQueues: [batch, scavenger]", "").replace("defaultQueue: interactive", ""))
    else:
        _edit(f, old, new)
    with pytest.raises(BundleError) as e:
        load_bundle(tmp_bundle)
    msg = str(e.value)
    assert msg.startswith(f"{f}:"), msg
    assert re.search(pattern, msg), msg
    assert e.value.line == _line_of(f, line_needle), msg


def test_narrow_admins_and_exclusions_still_load(tmp_bundle):
    f = tmp_bundle / "bundle.yaml"
    _edit(f, ADMINS, "  admins:\n    groups: [\"batchgate:admins\", \"system:serviceaccounts:batchgate-system\"]\n"
          "    serviceAccounts: [\"batchgate-system/*\"]\n    users: [\"ops-*\"]")
    _edit(f, "namespaces: [kube-system, kube-public, kube-node-lease, batchgate-system]",
          "namespaces: [kube-system, \"kube-*\", \"*-system\"]")
    b = load_bundle(f.parent)
    assert b.admins.contains("system:serviceaccount:batchgate-system:x", [])
    assert not b.admins.contains("system:serviceaccount:team-a:default", ["system:serviceaccounts"])


def test_a_namespace_and_a_queue_asking_for_different_node_labels_are_refused(tmp_path: Path) -> None:
    """Checked by the bundle whatever its policies: such pods could never be scheduled."""
    root = tmp_path / "policies"
    root.mkdir()
    doc = yaml.safe_load((POLICIES / "bundle.yaml").read_text())
    next(q for q in doc["spec"]["queues"] if q["name"] == "batch")["nodeSelector"] = {"node.example.org/gpu": "none"}
    doc["spec"]["namespaces"] = [{"names": ["gpu-*"], "allowedQueues": ["batch"],
                                  "nodeSelector": {"node.example.org/gpu": "a100"}}]
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    err = e.value
    assert (err.file, err.field) == (str(root / "bundle.yaml"), "spec.namespaces[0].nodeSelector.node.example.org/gpu")
    assert "node.example.org/gpu: a100" in (root / "bundle.yaml").read_text().splitlines()[err.line - 1]
    assert "queue 'batch' (allowed there) requires node.example.org/gpu=none" in err.message
    doc["spec"]["namespaces"][0]["allowedQueues"] = ["scavenger"]  # batch not usable there: no conflict
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert load_bundle(root).namespaces[0].node_selector == {"node.example.org/gpu": "a100"}


def test_controllers_default_to_the_pod_making_controllers_not_all_of_kube_system(tmp_bundle):
    f = tmp_bundle / "bundle.yaml"
    text = f.read_text()
    start = text.index("  controllers:\n")
    end = text.index("  # Never touched")
    f.write_text(text[:start] + text[end:])
    b = load_bundle(tmp_bundle)
    sa = "system:serviceaccount:kube-system:"
    for c in ("job-controller", "replicaset-controller", "statefulset-controller", "daemon-set-controller",
              "deployment-controller", "cronjob-controller"):
        assert b.controllers.contains(sa + c, ["system:serviceaccounts"]), c
    assert b.controllers.contains("system:kube-controller-manager", [])
    for other in ("coredns", "default", "kube-proxy", "namespace-controller"):
        assert not b.controllers.contains(sa + other, ["system:serviceaccounts", "system:serviceaccounts:kube-system"])
    assert load_bundle(POLICIES).controllers == b.controllers  # the shipped bundle says the same
