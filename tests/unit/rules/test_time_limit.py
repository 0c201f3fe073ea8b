"""time-limit (CREATE: default, copy, backstop, deny)."""

from __future__ import annotations

import copy
import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import POLICIES, fixture
from tests.unit.conftest import decided, only, sealed
from webhook.bundle import Bundle
from webhook.engine import Decision, decide
from webhook.offline import Caller, synthetic_review
from webhook.rules import load_bundle
from webhook.workloads import SERVICE_OWNER_KINDS, SHAPES, admission_record, service_owned
from webhook.yamlsrc import BundleError

ANN = "batchgate.io/time-limit"
DAY, HOUR, MINUTE = 86400, 3600, 60
BATCH_BACKSTOP = 7 * DAY + 10 * MINUTE  # batch max 7d + the default 10m margin
CONTROLLER = "system:kube-controller-manager"


@pytest.fixture(scope="module")
def tl(bundle: Bundle) -> Bundle:
    return only(bundle, "time-limit")


def run(b: Bundle, obj: dict[str, Any], *, op: str = "CREATE", user: str = "alice",
        old: dict[str, Any] | None = None, phase: str = "check") -> Decision:
    review = synthetic_review(obj, Caller(operation=op, username=user, namespace="demo"), old_object=old)
    d = decided(review, b, phase=phase)  # type: ignore[arg-type]
    assert not d.errors, d.errors
    return d


# -- objects, in the shapes the API server sends (tests/fixtures) ---------------------
def job(annotations: dict[str, str] | None = None, template_annotations: dict[str, str] | None = None,
        queue: str | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(fixture("job-create.mutate.json")["request"]["object"])
    obj["metadata"].pop("managedFields")
    obj["metadata"]["annotations"] = dict(annotations or {})
    obj["metadata"]["labels"] = {"batchgate.io/queue": queue} if queue else {}
    if template_annotations is not None:
        obj["spec"]["template"]["metadata"]["annotations"] = dict(template_annotations)
    return obj


def pod(annotations: dict[str, str] | None = None, *, queue: str | None = None,
        deadline: int | None = None, owner: str | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(fixture("pod-create-by-user.mutate.json")["request"]["object"])
    obj["metadata"].pop("managedFields", None)
    obj["metadata"]["annotations"] = dict(annotations or {})
    if queue:
        obj["metadata"]["labels"]["batchgate.io/queue"] = queue
    if deadline is not None:
        obj["spec"]["activeDeadlineSeconds"] = deadline
    if owner:
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1" if owner != "Job" else "batch/v1", "kind": owner, "name": "owner-1",
             "uid": "0b6f1e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "controller": True, "blockOwnerDeletion": True}]
    return obj


def cronjob(job_annotations: dict[str, str] | None = None, own: dict[str, str] | None = None) -> dict[str, Any]:
    j = job()
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "demo", "annotations": dict(own or {})},
        "spec": {"schedule": "0 2 * * *", "concurrencyPolicy": "Forbid",
                 "jobTemplate": {"metadata": {"annotations": dict(job_annotations or {})}, "spec": j["spec"]}},
    }


def ann_at(obj: dict[str, Any], *path: str) -> Any:
    node: Any = obj
    for key in (*path, "annotations"):
        node = (node or {}).get(key)
    return (node or {}).get(ANN)


# -- CREATE: what is written where -------------------------------------------------------
MUTATIONS = [
    # id, object, user, {location path: expected annotation}, (spec path, expected deadline), warning or None
    ("bare pod, no limit: batch default + backstop", pod(), "alice",
     {("metadata",): "1d"}, (("spec",), BATCH_BACKSTOP), "queue 'batch' default 1d applies (the maximum is 7d)"),
    ("interactive pod: its queue's default and maximum", pod(queue="interactive"), "alice",
     {("metadata",): "2h"}, (("spec",), 12 * HOUR + 10 * MINUTE), "queue 'interactive' default 2h"),
    ("scavenger pod: 30d maximum", pod({ANN: "3d"}, queue="scavenger"), "alice",
     {("metadata",): "3d"}, (("spec",), 30 * DAY + 10 * MINUTE), None),
    ("user's limit kept as written", pod({ANN: "1h30m"}), "alice",
     {("metadata",): "1h30m"}, (("spec",), BATCH_BACKSTOP), None),
    ("smaller own deadline kept", pod({ANN: "4h"}, deadline=600), "alice",
     {("metadata",): "4h"}, (("spec",), 600), None),
    ("deadline equal to the backstop kept", pod({ANN: "4h"}, deadline=BATCH_BACKSTOP), "alice",
     {("metadata",): "4h"}, (("spec",), BATCH_BACKSTOP), None),
    ("larger own deadline lowered", pod({ANN: "4h"}, deadline=BATCH_BACKSTOP + 1), "alice",
     {("metadata",): "4h"}, (("spec",), BATCH_BACKSTOP), f"activeDeadlineSeconds {BATCH_BACKSTOP + 1} lowered to {BATCH_BACKSTOP}"),
    ("job without limit: job + template + template backstop", job(), "alice",
     {("metadata",): "1d", ("spec", "template", "metadata"): "1d"},
     (("spec", "template", "spec"), BATCH_BACKSTOP), "default 1d applies"),
    ("job limit copied into the template", job({ANN: "6h"}), "alice",
     {("metadata",): "6h", ("spec", "template", "metadata"): "6h"}, (("spec", "template", "spec"), BATCH_BACKSTOP), None),
    ("template-only limit copied onto the job", job(template_annotations={ANN: "5h"}), "alice",
     {("metadata",): "5h", ("spec", "template", "metadata"): "5h"}, (("spec", "template", "spec"), BATCH_BACKSTOP), None),
    ("job wins over a disagreeing template", job({ANN: "6h"}, {ANN: "2h"}), "alice",
     {("metadata",): "6h", ("spec", "template", "metadata"): "6h"}, (("spec", "template", "spec"), BATCH_BACKSTOP),
     "'2h' replaced by '6h' set on the Job"),
    ("cronjob: jobTemplate limit copied to the pod template", cronjob({ANN: "3h"}), "alice",
     {("metadata",): None, ("spec", "jobTemplate", "metadata"): "3h",
      ("spec", "jobTemplate", "spec", "template", "metadata"): "3h"},
     (("spec", "jobTemplate", "spec", "template", "spec"), BATCH_BACKSTOP), None),
    ("cronjob: its own annotation is read, not written", cronjob(own={ANN: "2h"}), "alice",
     {("metadata",): "2h", ("spec", "jobTemplate", "metadata"): "2h",
      ("spec", "jobTemplate", "spec", "template", "metadata"): "2h"},
     (("spec", "jobTemplate", "spec", "template", "spec"), BATCH_BACKSTOP), None),
    ("cronjob without limit: default in the jobTemplate", cronjob(), "alice",
     {("metadata",): None, ("spec", "jobTemplate", "metadata"): "1d",
      ("spec", "jobTemplate", "spec", "template", "metadata"): "1d"},
     (("spec", "jobTemplate", "spec", "template", "spec"), BATCH_BACKSTOP), "default 1d applies"),
    ("controller's pod without limit: defaulted silently", pod(owner="Job"), CONTROLLER,
     {("metadata",): "1d"}, (("spec",), BATCH_BACKSTOP), None),
]


@pytest.mark.parametrize(("obj", "user", "where", "deadline", "warning"), [c[1:] for c in MUTATIONS],
                         ids=[c[0] for c in MUTATIONS])
def test_create_writes(tl, obj, user, where, deadline, warning):
    d = run(tl, obj, user=user)
    assert d.allowed, d.message
    for path, want in where.items():
        assert ann_at(d.obj, *path) == want, path
    spec_path, seconds = deadline
    node: Any = d.obj
    for key in spec_path:
        node = node[key]
    assert node.get("activeDeadlineSeconds") == seconds
    if warning is None:
        assert d.warnings == []
    else:
        assert any(warning in w for w in d.warnings), d.warnings
    assert ann_at(obj, "metadata") == (obj["metadata"].get("annotations") or {}).get(ANN)  # input untouched
    again = run(tl, d.obj, user=user, phase="mutate")
    assert again.patch == [], "not idempotent"


@pytest.mark.parametrize("owner", ["ReplicaSet", "StatefulSet", "DaemonSet"])
def test_service_pods_are_exempt(tl, owner):
    d = run(tl, pod({ANN: "not a duration"}, owner=owner), user=CONTROLLER)
    assert d.allowed and d.patch == []


@pytest.mark.parametrize("owner", ["ReplicaSet", "StatefulSet", "DaemonSet"])
def test_a_user_pod_merely_claiming_a_service_owner_is_not_exempt(tl, owner):
    """Anyone may write an ownerReference: only a controller's Pod is a service's."""
    d = run(tl, pod(owner=owner))
    assert d.obj["metadata"]["annotations"][ANN] == "1d"
    assert d.obj["spec"]["activeDeadlineSeconds"] == BATCH_BACKSTOP
    assert not run(tl, pod({ANN: "not a duration"}, owner=owner)).allowed


def test_the_patch_is_what_the_api_server_gets(tl):
    d = run(tl, job({ANN: "6h"}), phase="mutate")
    seal = d.obj["spec"]["template"]["metadata"]["annotations"]["batchgate.io/admitted"]
    assert d.obj == sealed(d.obj)  # the seal a controller's copy of the template will verify
    assert d.patch == [
        {"op": "add", "path": "/spec/template/metadata/annotations", "value": {ANN: "6h", "batchgate.io/admitted": seal}},
        {"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [
            {"name": "BATCHGATE_QUEUE", "value": "batch"}, {"name": "BATCHGATE_TIME_LIMIT", "value": "6h"},
            {"name": "BATCHGATE_JOB_UID"}]},
        {"op": "add", "path": "/spec/template/spec/activeDeadlineSeconds", "value": BATCH_BACKSTOP},
    ]


# -- CREATE: denials ---------------------------------------------------------------------
DENIALS = [
    ("over the batch maximum", pod({ANN: "8d"}), "8d exceeds the maximum of queue 'batch', which is 7d"),
    ("over by one minute", pod({ANN: "10081m"}), "exceeds the maximum of queue 'batch', which is 7d"),
    ("over the interactive maximum", pod({ANN: "13h"}, queue="interactive"), "queue 'interactive', which is 12h"),
    ("words", pod({ANN: "4 hours"}), "'4 hours' is not a duration; write a number and a unit, e.g. 90m, 4h, 2d"),
    ("no unit", pod({ANN: "240"}), "'240' is not a duration"),
    ("zero", pod({ANN: "0h"}), "'0h' is not a duration"),
    ("empty", pod({ANN: ""}), "'' is not a duration"),
    ("job over the maximum", job({ANN: "30d"}), "30d exceeds the maximum of queue 'batch'"),
    ("template over the maximum", job(template_annotations={ANN: "8d"}), "8d exceeds the maximum"),
    ("cronjob over the maximum", cronjob({ANN: "8d"}), "8d exceeds the maximum"),
]


@pytest.mark.parametrize(("obj", "message"), [c[1:] for c in DENIALS], ids=[c[0] for c in DENIALS])
def test_create_denials(tl, obj, message):
    d = run(tl, obj)
    assert not d.allowed
    assert message in d.message, d.message
    assert d.patch == []


def test_exactly_the_maximum_is_allowed(tl):
    assert run(tl, pod({ANN: "7d"})).allowed
    assert run(tl, pod({ANN: "168h"})).allowed


def test_one_value_in_two_places_is_reported_once(tl):
    d = run(tl, job({ANN: "8d"}, {ANN: "8d"}))
    assert len(d.denials) == 1, d.denials


def test_controller_pods_are_not_denied(tl):
    # Their template was checked as the workload; denying the Pod would only stall the Job.
    # (A template over the maximum is never sealed: a Pod from one is judged.)
    assert run(tl, sealed(pod({ANN: "8d"}, owner="Job")), user=CONTROLLER).allowed
    assert not run(tl, pod({ANN: "8d"}, owner="Job"), user=CONTROLLER).allowed
    assert not run(tl, pod({ANN: "8d"}, owner="Job"), user="alice").allowed


def test_unknown_queue_is_left_to_queue_priority(tl):
    d = run(tl, pod(queue="nightly"))
    assert d.allowed and d.patch == []


# -- UPDATE: the mutating half never runs --------------------------------------------------
def test_the_whole_bundle_does_not_mutate_on_update(bundle):
    old = job({ANN: "1d"}, {ANN: "1d"}, queue="batch")
    new = job({ANN: "6d"}, {ANN: "1d"}, queue="batch")
    new["spec"]["template"]["spec"].pop("activeDeadlineSeconds", None)
    d = run(bundle, new, op="UPDATE", old=old, phase="mutate")
    # queue-gate alone mutates on UPDATE, and only a Job its user suspends (not this one)
    assert d.patch == [] and [o for o in d.outcomes if o[0] != "queue-gate"] == [], d.outcomes


def test_time_limit_type_may_not_be_configured_for_update(tmp_path):
    root = _tmp_bundle(tmp_path, "time-limit")
    f = root / "time-limit" / "policy.yaml"
    f.write_text(f.read_text().replace("  type: time-limit\n", "  type: time-limit\n  match:\n    operations: [CREATE, UPDATE]\n"))
    with pytest.raises(BundleError, match=r"spec\.match\.operations\[1\]: policy type 'time-limit' mutates"):
        load_bundle(root)


# -- settings ------------------------------------------------------------------------------
def _tmp_bundle(tmp_path: Path, *policies: str) -> Path:
    root = tmp_path / "policies"
    root.mkdir(parents=True)
    shutil.copy(POLICIES / "bundle.yaml", root / "bundle.yaml")
    for name in policies:
        shutil.copytree(POLICIES / name, root / name)
    return root


def _with_settings(tmp_path: Path, settings: str) -> Path:
    root = _tmp_bundle(tmp_path, "time-limit")
    f = root / "time-limit" / "policy.yaml"
    text = f.read_text()
    head = text[: text.index("  settings:")]
    f.write_text(head + "  settings:\n" + settings)
    return root


def test_backstop_can_be_turned_off_and_its_margin_set(tmp_path):
    b = load_bundle(_with_settings(tmp_path, "    backstop: false\n"))
    assert "activeDeadlineSeconds" not in run(b, pod({ANN: "1h"})).obj["spec"]
    b = load_bundle(_with_settings(tmp_path / "m", "    backstopMargin: 1h\n"))
    assert run(b, pod({ANN: "1h"})).obj["spec"]["activeDeadlineSeconds"] == 7 * DAY + HOUR


def test_exempt_owner_kinds_setting(tmp_path):
    b = load_bundle(_with_settings(tmp_path, "    exemptOwnerKinds: [StatefulSet]\n"))
    assert run(b, pod(owner="StatefulSet"), user=CONTROLLER).patch == []
    assert run(b, pod(owner="ReplicaSet"), user=CONTROLLER).patch != []


def test_queue_without_maximum_gets_no_backstop_and_without_default_no_annotation(bundle):
    batch = dataclasses.replace(bundle.queues["batch"], default_time_limit=None, max_time_limit=None)
    b = only(dataclasses.replace(bundle, queues={**bundle.queues, "batch": batch}), "time-limit")
    d = run(b, pod())
    assert d.allowed and d.patch == []
    assert run(b, pod({ANN: "400d"})).allowed  # no maximum to exceed
    # ... but the parser's own bound (issue 27: a limit past it overflowed the reconciler's dates)
    d = run(b, pod({ANN: "99999999999999999999s"}))
    assert not d.allowed
    assert ("'99999999999999999999s' is longer than 3650d, the longest duration batchgate accepts"
            in d.message), d.message
    d = run(b, pod({ANN: "2h", "batchgate.io/expected-runtime": "9999999w"}))
    assert not d.allowed and "batchgate.io/expected-runtime '9999999w' is longer than 3650d" in d.message


BAD_SETTINGS = [
    ("margin not a duration", "    backstopMargin: ten minutes\n",
     r"spec\.settings\.backstopMargin: expected a duration like 10m or 1h"),
    ("backstop not a bool", "    backstop: yes please\n", r"spec\.settings\.backstop: expected true or false"),
    ("unknown setting", "    backstopMargn: 10m\n", r"spec\.settings\.backstopMargn: unknown field"),
    ("owner kind not a Kind", "    exemptOwnerKinds: [replicaset]\n",
     r"spec\.settings\.exemptOwnerKinds\[0\]: 'replicaset' is not valid: a Kind"),
    ("owner kinds not a list", "    exemptOwnerKinds: ReplicaSet\n", r"spec\.settings\.exemptOwnerKinds: expected a list"),
]


@pytest.mark.parametrize(("settings", "pattern"), [c[1:] for c in BAD_SETTINGS], ids=[c[0] for c in BAD_SETTINGS])
def test_bad_settings_name_file_line_and_field(tmp_path, settings, pattern):
    root = _with_settings(tmp_path, settings)
    f = root / "time-limit" / "policy.yaml"
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    msg = str(e.value)
    assert msg.startswith(f"{f}:"), msg
    bad_line = next(i for i, line in enumerate(f.read_text().splitlines(), 1) if line == settings.rstrip("\n"))
    assert e.value.line == bad_line, msg
    assert re.search(pattern, msg), msg


# -- the admission record (issue 11): queue and limit in every container's env ------------------
def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


RECORD = ("BATCHGATE_QUEUE", "BATCHGATE_TIME_LIMIT")


def test_every_container_gets_the_record_init_containers_do_not(tl):
    obj = job({ANN: "6h"}, queue="interactive")
    spec = obj["spec"]["template"]["spec"]
    spec["containers"].append({"name": "side", "image": "busybox", "env": [{"name": "X", "value": "1"}]})
    spec["initContainers"] = [{"name": "init", "image": "busybox"}]
    d = run(tl, obj)
    got = d.obj["spec"]["template"]["spec"]
    for c in got["containers"]:
        assert {k: env_of(c)[k] for k in RECORD} == {"BATCHGATE_QUEUE": "interactive", "BATCHGATE_TIME_LIMIT": "6h"}
    assert env_of(got["containers"][1])["X"] == "1" and got["containers"][1]["env"][0]["name"] == "X"
    assert "env" not in got["initContainers"][0]


def test_a_record_in_the_request_is_replaced_not_trusted(tl):
    obj = pod({ANN: "2h"})
    obj["spec"]["containers"][0]["env"] = [
        {"name": "BATCHGATE_QUEUE", "value": "scavenger"}, {"name": "A", "value": "a"},
        {"name": "BATCHGATE_TIME_LIMIT", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "BATCHGATE_QUEUE", "value": "scavenger"}]
    d = run(tl, obj)
    assert d.obj["spec"]["containers"][0]["env"] == [
        {"name": "BATCHGATE_QUEUE", "value": "batch"}, {"name": "A", "value": "a"},
        {"name": "BATCHGATE_TIME_LIMIT", "value": "2h"}, {"name": "BATCHGATE_JOB_UID"}]


def test_a_pod_from_an_admitted_template_gets_only_its_jobs_uid_from_the_record(tl):
    admitted = run(tl, job({ANN: "6h"})).obj
    assert admitted["spec"]["template"]["spec"]["containers"][0]["env"][-1] == {"name": "BATCHGATE_JOB_UID"}
    pod_obj = pod({ANN: "6h"}, owner="Job")
    pod_obj["spec"]["containers"] = copy.deepcopy(admitted["spec"]["template"]["spec"]["containers"])
    pod_obj["spec"]["activeDeadlineSeconds"] = BATCH_BACKSTOP
    d = run(tl, pod_obj, user=CONTROLLER, phase="mutate")
    assert d.patch == [{"op": "add", "path": "/spec/containers/0/env/2/value", "value": JOB_UID}]


JOB_UID = "0b6f1e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b"  # pod(owner=...)'s owner


@pytest.mark.parametrize(("user", "owner", "api_version", "written", "want"), [
    (CONTROLLER, "Job", "batch/v1", None, JOB_UID),
    ("system:serviceaccount:kube-system:job-controller", "Job", "batch/v1", "forged", JOB_UID),
    ("alice", "Job", "batch/v1", None, None),  # a user's Pod claiming a colleague's Job
    ("alice", "Job", "batch/v1", JOB_UID, None),  # ... and writing its uid into the record
    ("alice", None, None, JOB_UID, None),  # ... to re-parent it later
    (CONTROLLER, "Job", "nope.example.com/v1", None, None),  # a Job of another group
    (CONTROLLER, "ReplicaSet", "apps/v1", JOB_UID, "no record"),
], ids=["job-controller", "job-controller-replaces-a-forged-one", "user-claiming-a-job", "user-forging-the-uid",
        "user-forging-it-unowned", "other-group", "replicaset"])
def test_the_record_names_the_job_only_on_the_job_controllers_pods(tl, user, owner, api_version, written, want):
    """Issue 27: which Job's controller made a pod is recorded where nobody can change it (its
    env, at CREATE): the uid from the controlling ownerReference when the Job controller creates
    it, empty for anyone else, whatever the request carried; a Job's template holds the empty
    entry its controller's pods copy."""
    obj = pod({ANN: "1h"}, owner=owner)
    if owner is not None and api_version != "batch/v1":
        obj["metadata"]["ownerReferences"][0]["apiVersion"] = api_version
    if written is not None:
        obj["spec"]["containers"][0]["env"] = [{"name": "BATCHGATE_JOB_UID", "value": written}]
    d = run(tl, obj, user=user)
    env = env_of(d.obj["spec"]["containers"][0])
    if want == "no record":
        assert "BATCHGATE_JOB_UID" not in env
    else:
        assert "BATCHGATE_JOB_UID" in env and env["BATCHGATE_JOB_UID"] == want
        record = admission_record(d.obj, SHAPES[("", "Pod")])
        assert record is not None and record.job == (want or "")
    # the reinvocation changes nothing
    assert run(tl, d.obj, user=user, phase="mutate").patch == []


def test_service_pods_lose_a_record_someone_wrote(tl):
    obj = pod(owner="ReplicaSet")
    obj["spec"]["containers"][0]["env"] = [{"name": "BATCHGATE_QUEUE", "value": "batch"},
                                           {"name": "BATCHGATE_TIME_LIMIT", "value": "1h"}]
    d = run(tl, obj, user=CONTROLLER)
    assert d.obj["spec"]["containers"][0]["env"] == []


def test_cronjobs_carry_no_record_their_jobs_do(tl):
    d = run(tl, cronjob({ANN: "6h"}))
    spec = d.obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert all(not set(RECORD) & set(env_of(c)) for c in spec["containers"])


def test_a_job_controllers_pod_keeps_the_jobs_record_not_its_edited_labels(tl):
    """Kubernetes 1.23+: a suspended Job that never started may have its template's labels and
    annotations edited (not its env). The Job controller's Pod then carries the edited limit,
    and the record from the Job's CREATE: the record stays."""
    admitted = run(tl, job({ANN: "2h"}, queue="interactive")).obj
    pod_obj = pod({ANN: "30d"}, queue="scavenger", owner="Job")
    pod_obj["spec"]["containers"] = copy.deepcopy(admitted["spec"]["template"]["spec"]["containers"])
    d = run(tl, pod_obj, user=CONTROLLER)
    assert {k: env_of(d.obj["spec"]["containers"][0])[k] for k in RECORD} == {
        "BATCHGATE_QUEUE": "interactive", "BATCHGATE_TIME_LIMIT": "2h"}
    # a user's Pod claiming a Job owner is recorded from what it asks for
    mine = copy.deepcopy(pod_obj)
    d = run(tl, mine)
    assert d.allowed and {k: env_of(d.obj["spec"]["containers"][0])[k] for k in RECORD} == {
        "BATCHGATE_QUEUE": "scavenger", "BATCHGATE_TIME_LIMIT": "30d"}


def _owned_by(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": "owner-1",
                                           "uid": "0b6f1e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "controller": True}]
    return obj


@pytest.mark.parametrize(("api_version", "kind"), [
    ("nope.example.com/v1", "DaemonSet"),  # a made-up group with a built-in kind's name
    ("apps/v2", "DaemonSet"),
    ("ray.io/v1", "RayCluster"),  # any custom resource, claimed by a user
])
@pytest.mark.parametrize("user", ["alice", CONTROLLER], ids=["by-a-user", "by-a-controller"])
def test_a_made_up_owner_makes_no_service_and_no_operators_pod_unless_a_controller_made_it(
        tl, api_version, kind, user):
    """Issue 27: a bare Pod naming nope.example.com/v1 DaemonSet with controller: true was stored
    with no time limit, no record and no maintenance affinity (the drain skipped it too). Only the
    real apps DaemonSet is a service's controller, and only a listed controller's Pod is exempt: an
    operator's Pod (custom-resource owner) only when a listed controller made it."""
    d = run(tl, _owned_by(pod(), api_version, kind), user=user)
    if user == CONTROLLER:  # trusted to have made it for its owner
        assert d.patch == []
        return
    assert d.obj["metadata"]["annotations"][ANN] == "1d"
    assert admission_record(d.obj, SHAPES[("", "Pod")]) is not None
    assert d.obj["spec"]["activeDeadlineSeconds"] == BATCH_BACKSTOP


def test_the_real_daemonset_made_by_its_controller_is_still_a_service(tl):
    assert run(tl, _owned_by(pod(), "apps/v1", "DaemonSet"), user=CONTROLLER).patch == []


@pytest.mark.parametrize(("api_version", "kind", "owned"), [
    ("apps/v1", "DaemonSet", True), ("v1", "ReplicationController", True),
    ("nope.example.com/v1", "DaemonSet", False), ("v1", "DaemonSet", False), ("apps/v1", "Deployment", False),
])
def test_only_the_real_kinds_are_services_controllers(api_version, kind, owned):
    assert service_owned(_owned_by(pod(), api_version, kind), SERVICE_OWNER_KINDS) is owned



def test_an_owner_uid_that_is_not_a_string_records_no_job(tl):
    """Found by the fuzz tier: a Job owner's uid nested deep (not a string) made the record's
    str() recurse (the policy failed, closed); it records no Job instead."""
    deep: Any = "x"
    for _ in range(990):
        deep = [deep]
    obj = pod({ANN: "1h"}, owner="Job")
    obj["metadata"]["ownerReferences"][0]["uid"] = deep
    d = decide(synthetic_review(obj, Caller(username=CONTROLLER, namespace="demo")), tl, phase="mutate")
    assert d.errors == []
    assert {"name": "BATCHGATE_JOB_UID"} in d.obj["spec"]["containers"][0]["env"]


def test_an_expected_runtime_is_held_to_the_limit_at_its_place_else_the_outermost(tl: Bundle) -> None:
    """runtime_problems reads the time limits only once it meets an expected runtime: the one in a
    Job's pod template is held to the template's own limit, else to the Job's."""
    runtime = "batchgate.io/expected-runtime"
    d = run(tl, job({ANN: "4h"}, {runtime: "5h"}), phase="validate")
    assert not d.allowed and f"{runtime} 5h is longer than the job's time limit 4h:" in d.message, d.message
    assert d.message.endswith("in spec.template.metadata"), d.message
    d = run(tl, job({ANN: "4h"}, {ANN: "6h", runtime: "5h"}), phase="validate")
    assert not any(runtime in m for m in d.denials), d.denials
    assert run(tl, job({ANN: "4h"}, {ANN: "4h"}), phase="validate").allowed  # no runtime: nothing read
