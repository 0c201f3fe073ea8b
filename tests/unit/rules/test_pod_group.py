"""pod-group: gang labels for Jobs, CronJobs, controller-made and bare Pods, per scheduler."""

from __future__ import annotations

import copy
import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import POLICIES, fixture
from tests.unit.conftest import decided
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review
from webhook.rules import load_bundle
from webhook.rules.pod_group import Settings, group_name
from webhook.workloads import pods_at_once
from webhook.yamlsrc import BundleError

GROUP, SIZE = "batchgate.io/pod-group", "batchgate.io/pod-group-size"
COSCHED = "scheduling.x-k8s.io/pod-group"
KUEUE, KUEUE_COUNT = "kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/pod-group-total-count"
VOLCANO = "scheduling.k8s.io/group-name"
GANG_KEY = "batchgate.io/gang"
GANG = {GANG_KEY: "true"}
CONTROLLER = "system:kube-controller-manager"


def with_schedulers(bundle: Bundle, *schedulers: str) -> Bundle:
    policy = next(p for p in bundle.policies if p.name == "pod-group")
    if schedulers:
        policy = dataclasses.replace(policy, settings=Settings(schedulers=schedulers))  # type: ignore[arg-type]
    return dataclasses.replace(bundle, policies=(policy,), mutating=(policy,), validating=(policy,))


@pytest.fixture(scope="module")
def pg(bundle: Bundle) -> Bundle:
    return with_schedulers(bundle)


def run(b: Bundle, obj: dict[str, Any], *, user: str = "alice", phase: str = "check") -> Decision:
    d = decided(synthetic_review(obj, Caller(username=user, namespace="demo")), b, phase=phase)  # type: ignore[arg-type]
    assert not d.errors, d.errors
    return d


def job(*, name: str | None = "mpi-sim2", parallelism: int | None = 2, completions: int | None = 2,
        template_labels: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(fixture("job-create.mutate.json")["request"]["object"])
    obj["metadata"].pop("managedFields")
    if name is None:
        del obj["metadata"]["name"]
        obj["metadata"]["generateName"] = "sweep-"
    else:
        obj["metadata"]["name"] = name
    for key, value in (("parallelism", parallelism), ("completions", completions)):
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    obj["spec"]["template"]["metadata"]["labels"].update(template_labels or {})
    obj["metadata"]["labels"].update(labels or {})
    obj["spec"].update(spec)
    return obj


def controller_pod(labels: dict[str, str], *, owner: str = "mpi-sim2") -> dict[str, Any]:
    obj = copy.deepcopy(fixture("pod-create-by-job-controller.mutate.json")["request"]["object"])
    obj["metadata"].pop("managedFields")
    obj["metadata"]["labels"].update(labels)
    obj["metadata"]["ownerReferences"][0]["name"] = owner
    return obj


def bare_pod(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(fixture("pod-create-by-user.mutate.json")["request"]["object"])
    obj["metadata"].pop("managedFields", None)
    obj["metadata"]["labels"].update(labels)
    if annotations:
        obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


def cronjob(parallelism: int, template_labels: dict[str, str] | None = None,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec = job(parallelism=parallelism, completions=parallelism, template_labels=template_labels)["spec"]
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "hourly", "namespace": "demo"},
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"metadata": {"labels": dict(GANG if labels is None else labels)},
                                                               "spec": spec}}}


def meta_at(obj: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node: Any = obj
    for key in path:
        node = node[key]
    return node  # type: ignore[no-any-return]


TEMPLATE = ("spec", "template", "metadata")
POD = ("metadata",)
CRON_TEMPLATE = ("spec", "jobTemplate", "spec", "template", "metadata")

# id, object, user, where the keys go, expected labels there (subset), keys that must be absent
CASES = [
    ("2-pod job asking to be a gang: named after the job", job(labels=GANG), "alice", TEMPLATE,
     {GROUP: "mpi-sim2", SIZE: "2", COSCHED: "mpi-sim2"}, ()),
    ("the request may sit in the pod template", job(template_labels=GANG), "alice", TEMPLATE,
     {GROUP: "mpi-sim2", SIZE: "2"}, ()),
    ("a 2-pod job that does not ask is no gang", job(), "alice", TEMPLATE, {}, (GROUP, SIZE, COSCHED)),
    ("size is min(parallelism, completions)", job(parallelism=4, completions=2, labels=GANG), "alice", TEMPLATE,
     {GROUP: "mpi-sim2", SIZE: "2"}, ()),
    ("completions unset (work queue), asked: size is parallelism", job(parallelism=3, completions=None, labels=GANG),
     "alice", TEMPLATE, {SIZE: "3"}, ()),
    ("work queue that does not ask: no gang", job(parallelism=3, completions=None), "alice", TEMPLATE,
     {}, (GROUP, SIZE, COSCHED)),
    ("completions above parallelism, not asked: no gang", job(parallelism=2, completions=10), "alice", TEMPLATE,
     {}, (GROUP, SIZE)),
    ("Indexed, all indexes at once, no per-index tolerance: a gang by its shape",
     job(parallelism=4, completions=4, completionMode="Indexed"), "alice", TEMPLATE, {GROUP: "mpi-sim2", SIZE: "4"}, ()),
    ("Indexed with backoffLimitPerIndex: no gang",
     job(parallelism=4, completions=4, completionMode="Indexed", backoffLimitPerIndex=1), "alice", TEMPLATE,
     {}, (GROUP, SIZE)),
    ("Indexed with a successPolicy: no gang",
     job(parallelism=4, completions=4, completionMode="Indexed",
         successPolicy={"rules": [{"succeededIndexes": "0"}]}), "alice", TEMPLATE, {}, (GROUP, SIZE)),
    ("Indexed, completions above parallelism: no gang",
     job(parallelism=2, completions=8, completionMode="Indexed"), "alice", TEMPLATE, {}, (GROUP, SIZE)),
    ("Indexed gang that opts out", job(parallelism=4, completions=4, completionMode="Indexed",
                                       labels={GANG_KEY: "false"}), "alice", TEMPLATE, {}, (GROUP, SIZE)),
    ("one-pod job is not a gang", job(parallelism=1, completions=1, labels=GANG), "alice", TEMPLATE, {},
     (GROUP, SIZE, COSCHED)),
    ("parallelism 4, completions 1: not a gang", job(parallelism=4, completions=1, labels=GANG), "alice", TEMPLATE,
     {}, (GROUP, SIZE, COSCHED)),
    ("generateName job: size only", job(name=None, labels=GANG), "alice", TEMPLATE, {SIZE: "2"}, (GROUP, COSCHED)),
    ("user's own group name in the template is a request, and kept", job(template_labels={GROUP: "campaign-7"}),
     "alice", TEMPLATE, {GROUP: "campaign-7", COSCHED: "campaign-7", SIZE: "2"}, ()),
    ("user's own PodGroup: left alone", job(template_labels={COSCHED: "mine"}, labels=GANG), "alice", TEMPLATE,
     {COSCHED: "mine"}, (GROUP, SIZE)),
    ("cronjob: size only in the pod template", cronjob(3), "alice", CRON_TEMPLATE, {SIZE: "3"}, (GROUP, COSCHED)),
    ("cronjob that does not ask: nothing", cronjob(3, labels={}), "alice", CRON_TEMPLATE, {}, (SIZE,)),
    ("cronjob of one pod: nothing", cronjob(1), "alice", CRON_TEMPLATE, {}, (SIZE,)),
    ("pod of a generateName job: named after its owner", controller_pod({SIZE: "2"}, owner="sweep-x7k2p"),
     CONTROLLER, POD, {GROUP: "sweep-x7k2p", SIZE: "2", COSCHED: "sweep-x7k2p"}, ()),
    ("pod from a mutated template: unchanged", controller_pod({GROUP: "mpi-sim2", SIZE: "2", COSCHED: "mpi-sim2"}),
     CONTROLLER, POD, {GROUP: "mpi-sim2", SIZE: "2", COSCHED: "mpi-sim2"}, ()),
    ("bare pod opting in", bare_pod({GROUP: "ring", SIZE: "3"}), "alice", POD,
     {GROUP: "ring", SIZE: "3", COSCHED: "ring"}, ()),
    ("bare pod, stale scheduler label corrected", bare_pod({GROUP: "ring", SIZE: "3", COSCHED: "old"}), "alice", POD,
     {COSCHED: "ring"}, ()),
    ("bare pod outside any group", bare_pod({}), "alice", POD, {}, (GROUP, SIZE, COSCHED)),
]


@pytest.mark.parametrize(("obj", "user", "where", "want", "absent"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_labels(pg, obj, user, where, want, absent):
    before = copy.deepcopy(obj)
    d = run(pg, obj, user=user)
    assert d.allowed, d.message
    labels = meta_at(d.obj, where).get("labels") or {}
    for key, value in want.items():
        assert labels.get(key) == value, (key, labels)
    for key in absent:
        assert key not in labels, (key, labels)
    assert obj == before, "the request object was modified in place"
    assert run(pg, d.obj, user=user, phase="mutate").patch == [], "not idempotent"


def test_a_cronjobs_jobs_get_distinct_groups(pg):
    cj = run(pg, cronjob(3)).obj
    groups = set()
    for name in ("hourly-29410620", "hourly-29410680"):  # two runs, as the CronJob controller names them
        made = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": "demo", **cj["spec"]["jobTemplate"]["metadata"]},
                "spec": copy.deepcopy(cj["spec"]["jobTemplate"]["spec"])}
        d = run(pg, made, user="system:serviceaccount:kube-system:cronjob-controller")
        labels = d.obj["spec"]["template"]["metadata"]["labels"]
        assert labels[GROUP] == labels[COSCHED] == name and labels[SIZE] == "3"
        groups.add(labels[GROUP])
    assert len(groups) == 2


def test_cronjob_with_a_fixed_group_name_is_warned(pg):
    d = run(pg, cronjob(3, {GROUP: "fixed"}))
    assert d.allowed
    assert any("every run shares it" in w for w in d.warnings), d.warnings


def test_job_template_size_follows_parallelism_with_a_warning(pg):
    d = run(pg, job(template_labels={SIZE: "8"}, labels=GANG))
    assert d.obj["spec"]["template"]["metadata"]["labels"][SIZE] == "2"
    assert any("replaced by '2'" in w for w in d.warnings), d.warnings


IGNORE_DISRUPTIONS = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def test_job_patch_is_exactly_the_labels_and_the_disruption_rule(pg):
    """The recorded Job came with completionMode: NonIndexed and podReplacementPolicy:
    TerminatingOrFailed, as the API server defaults them: a gang whose pods all run at once becomes
    Indexed, and a podFailurePolicy requires Failed."""
    assert run(pg, job(labels=GANG), phase="mutate").patch == [
        {"op": "add", "path": "/spec/template/metadata/labels/batchgate.io~1pod-group", "value": "mpi-sim2"},
        {"op": "add", "path": "/spec/template/metadata/labels/batchgate.io~1pod-group-size", "value": "2"},
        {"op": "add", "path": "/spec/template/metadata/labels/scheduling.x-k8s.io~1pod-group", "value": "mpi-sim2"},
        {"op": "replace", "path": "/spec/completionMode", "value": "Indexed"},
        {"op": "replace", "path": "/spec/podReplacementPolicy", "value": "Failed"},
        {"op": "add", "path": "/spec/podFailurePolicy", "value": {"rules": [IGNORE_DISRUPTIONS]}},
    ]


# -- a gang's podFailurePolicy: a pod stopped from outside is no failure --------------------------
EXIT_42 = {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}


def test_a_gang_job_ignores_disruptions_first_and_keeps_its_own_rules(pg):
    """The first matching rule decides: the Ignore rule goes before the Job's own, so an exit-code
    rule cannot take the SIGTERM exit of a member stopped from outside for a failure. A 1.29+ API
    server has defaulted podReplacementPolicy to TerminatingOrFailed before the webhook sees the Job;
    with a podFailurePolicy it must be Failed."""
    d = run(pg, job(labels=GANG, podFailurePolicy={"rules": [EXIT_42]}, podReplacementPolicy="TerminatingOrFailed"))
    assert d.obj["spec"]["podFailurePolicy"] == {"rules": [IGNORE_DISRUPTIONS, EXIT_42]}
    assert d.obj["spec"]["podReplacementPolicy"] == "Failed"
    assert d.warnings == []


def test_a_gang_job_that_decides_about_disruptions_itself_is_left_as_written(pg):
    own = {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    # podReplacementPolicy: Failed, as the API server defaults it for a Job with a podFailurePolicy
    obj = job(labels=GANG, podFailurePolicy={"rules": [EXIT_42, own]}, podReplacementPolicy="Failed",
              completionMode="Indexed")
    d = run(pg, copy.deepcopy(obj))
    assert {k: v for k, v in d.obj["spec"].items() if k != "template"} == {
        k: v for k, v in obj["spec"].items() if k != "template"}
    assert d.warnings == []


def test_a_gang_job_with_no_room_for_another_rule_is_warned(pg):
    rules = [{"action": "Count", "onExitCodes": {"operator": "In", "values": [i]}} for i in range(1, 21)]
    d = run(pg, job(labels=GANG, podFailurePolicy={"rules": rules}))
    assert d.obj["spec"]["podFailurePolicy"]["rules"] == rules
    assert len(d.warnings) == 1 and "has 20 rules, the most Kubernetes allows" in d.warnings[0], d.warnings


def test_a_gang_job_whose_pods_restart_in_place_gets_no_policy_and_a_warning(pg):
    obj = job(labels=GANG)
    obj["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    d = run(pg, obj)
    assert "podFailurePolicy" not in d.obj["spec"]  # the API server refuses one with OnFailure
    assert d.obj["spec"]["template"]["metadata"]["labels"][GROUP] == "mpi-sim2"
    assert any("can have no podFailurePolicy" in w and "restartPolicy: Never" in w for w in d.warnings), d.warnings


def test_no_disruption_rule_for_a_job_that_is_no_gang_nor_in_a_cronjob_template(pg):
    assert "podFailurePolicy" not in run(pg, job(parallelism=3, completions=None)).obj["spec"]
    d = run(pg, cronjob(3))  # each Job the CronJob makes gets it at its own admission
    assert "podFailurePolicy" not in d.obj["spec"]["jobTemplate"]["spec"]


# -- schedulers ---------------------------------------------------------------------------
SCHEDULERS = [
    ("coscheduling", ("coscheduling",), {COSCHED: "mpi-sim2"}, {}),
    ("kueue", ("kueue",), {KUEUE: "mpi-sim2"}, {KUEUE_COUNT: "2"}),
    ("volcano", ("volcano",), {}, {VOLCANO: "mpi-sim2"}),
    ("all three", ("coscheduling", "kueue", "volcano"), {COSCHED: "mpi-sim2", KUEUE: "mpi-sim2"},
     {KUEUE_COUNT: "2", VOLCANO: "mpi-sim2"}),
]


@pytest.mark.parametrize(("schedulers", "labels", "annotations"), [c[1:] for c in SCHEDULERS],
                         ids=[c[0] for c in SCHEDULERS])
def test_scheduler_keys(bundle, schedulers, labels, annotations):
    b = with_schedulers(bundle, *schedulers)
    d = run(b, job(template_labels=GANG))
    meta = d.obj["spec"]["template"]["metadata"]
    assert meta["labels"] == {"app": "mpi-sim", **GANG, GROUP: "mpi-sim2", SIZE: "2", **labels}
    assert (meta.get("annotations") or {}) == annotations
    assert run(b, d.obj, phase="mutate").patch == []


def test_volcano_user_managed_pod_is_left_alone(bundle):
    b = with_schedulers(bundle, "volcano")
    d = run(b, bare_pod({}, {VOLCANO: "their-group"}))
    assert d.patch == [] and d.allowed


def test_kueue_bare_pod_gets_total_count(bundle):
    d = run(with_schedulers(bundle, "kueue"), bare_pod({GROUP: "ring", SIZE: "3"}))
    assert d.obj["metadata"]["labels"][KUEUE] == "ring"
    assert d.obj["metadata"]["annotations"][KUEUE_COUNT] == "3"


# -- names and sizes ------------------------------------------------------------------------
NAMES = [
    ("short", "mpi-sim2", "mpi-sim2"),
    ("exactly 63", "a" * 63, "a" * 63),
    ("64 cut with hash", "a" * 64, None),
    ("dots are fine", "run.v2", "run.v2"),
]


@pytest.mark.parametrize(("name", "want"), [c[1:] for c in NAMES], ids=[c[0] for c in NAMES])
def test_group_name(name, want):
    got = group_name(name)
    assert len(got) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", got)
    if want is not None:
        assert got == want
    else:
        assert got != name and got.startswith(name[:40])


def test_long_names_that_share_a_prefix_stay_distinct():
    a, b = "x" * 70 + "-run-1", "x" * 70 + "-run-2"
    assert group_name(a) != group_name(b)
    assert group_name(a) == group_name(a)


def test_a_long_job_name_gives_a_valid_group(pg):
    name = "lattice-qcd-production-run-ensemble-b-beta-6-0-volume-48x96-nf2p1"
    labels = run(pg, job(name=name, labels=GANG)).obj["spec"]["template"]["metadata"]["labels"]
    assert labels[GROUP] == labels[COSCHED] == group_name(name)
    assert len(labels[GROUP]) <= 63 and labels[GROUP].startswith("lattice-qcd-production-run-ensemble")


@pytest.mark.parametrize(("spec", "want"), [
    ({}, 1), ({"parallelism": 5}, 5), ({"parallelism": 5, "completions": 3}, 3),
    ({"parallelism": 0}, 0), ({"parallelism": True}, 1),
], ids=["defaults", "parallelism", "fewer-completions", "suspended-by-zero", "not-an-int"])
def test_gang_size(spec, want):
    assert pods_at_once(spec) == want


# -- denials --------------------------------------------------------------------------------
DENIALS = [
    ("size zero", bare_pod({GROUP: "ring", SIZE: "0"}), "must be a positive whole number of pods, like \"4\"; got '0'"),
    ("size negative", bare_pod({GROUP: "ring", SIZE: "-2"}), "got '-2'"),
    ("size a word", bare_pod({GROUP: "ring", SIZE: "three"}), "got 'three'"),
    ("size with a leading zero", bare_pod({GROUP: "ring", SIZE: "03"}), "got '03'"),
    ("group without size", bare_pod({GROUP: "ring"}), "batchgate.io/pod-group='ring' needs batchgate.io/pod-group-size"),
    ("size without group", bare_pod({SIZE: "3"}), "batchgate.io/pod-group-size needs batchgate.io/pod-group"),
    ("bad size in a cronjob template", cronjob(1, {SIZE: "x"}),
     "label batchgate.io/pod-group-size in spec.jobTemplate.spec.template.metadata must be a positive whole number"),
    ("gang label neither true nor false", job(labels={GANG_KEY: "yes"}),
     'label batchgate.io/gang must be "true" or "false"; got \'yes\''),
    ("gang label bad in a cronjob's job template", cronjob(2, labels={GANG_KEY: "1"}), "got '1'"),
    ("opting out while naming the group", job(labels={GANG_KEY: "false"}, template_labels={GROUP: "g"}),
     'label batchgate.io/gang: "false" contradicts label batchgate.io/pod-group=\'g\''),
]


@pytest.mark.parametrize(("obj", "message"), [c[1:] for c in DENIALS], ids=[c[0] for c in DENIALS])
def test_denials(pg, obj, message):
    d = run(pg, obj)
    assert not d.allowed
    assert message in d.message, d.message


def test_invalid_group_name_in_a_label_is_denied(pg):
    obj = bare_pod({GROUP: "g" * 64, SIZE: "2"})
    d = run(pg, obj)
    assert not d.allowed and "must be a valid label value" in d.message


# -- settings -------------------------------------------------------------------------------
def _policy_file(tmp_path: Path, settings: str) -> tuple[Path, Path]:
    root = tmp_path / "policies"
    root.mkdir()
    shutil.copy(POLICIES / "bundle.yaml", root / "bundle.yaml")
    shutil.copytree(POLICIES / "pod-group", root / "pod-group")
    f = root / "pod-group" / "policy.yaml"
    text = f.read_text()
    f.write_text(text[: text.index("  settings:")] + "  settings:\n" + settings)
    return root, f


def test_settings_load(tmp_path):
    root, _ = _policy_file(tmp_path, "    schedulers: [volcano, kueue]\n")
    policy = next(p for p in load_bundle(root).policies if p.name == "pod-group")
    assert policy.settings == Settings(schedulers=("volcano", "kueue"))


def test_default_settings_are_coscheduling(tmp_path):
    root, _ = _policy_file(tmp_path, "    {}\n")
    policy = next(p for p in load_bundle(root).policies if p.name == "pod-group")
    assert policy.settings.schedulers == ("coscheduling",)


BAD_SETTINGS = [
    ("unknown scheduler", "    schedulers: [coscheduling, yunikorn]\n", "schedulers: [coscheduling, yunikorn]",
     r"spec\.settings\.schedulers\[1\]: expected one of coscheduling, kueue, volcano, got 'yunikorn'"),
    ("twice", "    schedulers: [kueue, kueue]\n", "schedulers: [kueue, kueue]", r"schedulers\[1\]: listed twice"),
    ("empty", "    schedulers: []\n", "schedulers: []", r"spec\.settings\.schedulers: name at least one"),
    ("not a list", "    schedulers: volcano\n", "schedulers: volcano", r"spec\.settings\.schedulers: expected a list"),
    ("unknown setting", "    schedulers: [kueue]\n    minMember: 2\n", "minMember: 2", r"spec\.settings\.minMember: unknown field"),
]


@pytest.mark.parametrize(("settings", "line_needle", "pattern"), [c[1:] for c in BAD_SETTINGS],
                         ids=[c[0] for c in BAD_SETTINGS])
def test_bad_settings_name_file_line_and_field(tmp_path, settings, line_needle, pattern):
    root, f = _policy_file(tmp_path, settings)
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    msg = str(e.value)
    assert msg.startswith(f"{f}:"), msg
    assert e.value.line == next(i for i, line in enumerate(f.read_text().splitlines(), 1) if line_needle in line), msg
    assert re.search(pattern, msg), msg


# -- which Jobs are gangs: the queue's setting, and what is said ----------------------------
def _gang_queue_bundle(tmp_path: Path) -> Bundle:
    root = tmp_path / "policies"
    root.mkdir()
    text = (POLICIES / "bundle.yaml").read_text()
    text = text.replace("    - name: batch\n      priorityClass: batchgate-batch\n",
                        "    - name: batch\n      priorityClass: batchgate-batch\n      gang: always\n")
    assert "gang: always" in text
    (root / "bundle.yaml").write_text(text)
    shutil.copytree(POLICIES / "pod-group", root / "pod-group")
    return load_bundle(root)


def test_a_gang_queue_makes_every_multi_pod_job_a_gang(tmp_path):
    b = _gang_queue_bundle(tmp_path)
    d = run(b, job(parallelism=3, completions=None))
    assert d.obj["spec"]["template"]["metadata"]["labels"][SIZE] == "3"
    assert d.warnings == []  # nothing in it tolerates a pod failing: nothing to say


def test_a_gang_queue_says_so_when_the_job_tolerates_failures(tmp_path):
    b = _gang_queue_bundle(tmp_path)
    d = run(b, job(parallelism=4, completions=4, completionMode="Indexed", backoffLimitPerIndex=2,
                   maxFailedIndexes=1))
    assert d.obj["spec"]["template"]["metadata"]["labels"][GROUP] == "mpi-sim2"
    assert len(d.warnings) == 1, d.warnings
    w = d.warnings[0]
    assert "runs as a gang because queue batch runs every multi-pod Job as a gang" in w
    assert "backoffLimitPerIndex: 2, maxFailedIndexes: 1" in w
    assert 'label it batchgate.io/gang: "false"' in w


def test_on_failure_restarts_are_a_declared_tolerance(tmp_path):
    b = _gang_queue_bundle(tmp_path)
    obj = job()
    obj["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    d = run(b, obj)
    assert any("restartPolicy: OnFailure" in w for w in d.warnings), d.warnings


def test_a_job_opts_out_of_its_gang_queue(tmp_path):
    b = _gang_queue_bundle(tmp_path)
    d = run(b, job(labels={GANG_KEY: "false"}, backoffLimitPerIndex=1))
    assert d.patch == [] and d.warnings == []


def test_a_stray_size_label_on_a_job_that_is_no_gang_is_removed_with_a_warning(pg):
    d = run(pg, job(parallelism=3, completions=None, template_labels={SIZE: "3"}))
    assert SIZE not in d.obj["spec"]["template"]["metadata"]["labels"]
    assert any("is not a gang because its pods are interchangeable" in w for w in d.warnings), d.warnings


def test_the_queue_setting_is_checked_at_load(tmp_path):
    root = tmp_path / "policies"
    root.mkdir()
    text = (POLICIES / "bundle.yaml").read_text().replace(
        "    - name: batch\n      priorityClass: batchgate-batch\n",
        "    - name: batch\n      priorityClass: batchgate-batch\n      gang: sometimes\n")
    f = root / "bundle.yaml"
    f.write_text(text)
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    assert str(e.value).startswith(f"{f}:") and "gang: expected one of auto, always, got 'sometimes'" in str(e.value)


def test_the_gang_label_means_nothing_on_a_pod_and_is_not_judged_there(pg):
    for obj, user in ((bare_pod({GANG_KEY: "yes"}), "alice"), (controller_pod({GANG_KEY: "yes"}), CONTROLLER)):
        d = run(pg, obj, user=user)
        assert d.allowed and d.patch == [], d.message


# -- Indexed gangs: stable hostnames <job>-<index> -----------------------------------
def test_a_gang_job_whose_pods_all_run_at_once_becomes_indexed(pg):
    """completionMode left out (offline) is set; NonIndexed, which the API server writes into every
    Job that leaves it out, is replaced."""
    spec = job(labels=GANG)
    spec["spec"].pop("completionMode", None)
    d = run(pg, spec)
    assert d.obj["spec"]["completionMode"] == "Indexed"
    assert not any("completionMode" in w for w in d.warnings)
    d = run(pg, job(labels=GANG, completionMode="NonIndexed"))
    assert d.obj["spec"]["completionMode"] == "Indexed"
    assert not any("completionMode" in w for w in d.warnings)


@pytest.mark.parametrize(("parallelism", "completions"), [(4, 2), (2, 4), (2, None)])
def test_a_gang_whose_indexes_do_not_all_run_at_once_is_not_made_indexed(pg, parallelism, completions):
    d = run(pg, job(labels=GANG, parallelism=parallelism, completions=completions, completionMode="NonIndexed"))
    assert d.obj["spec"]["completionMode"] == "NonIndexed"


def test_no_gang_no_completion_mode(pg):
    d = run(pg, job(completionMode="NonIndexed"))
    assert d.obj["spec"]["completionMode"] == "NonIndexed"
