"""What the API server decides without batchgate: matchConditions and ValidatingAdmissionPolicies.

* **matchConditions** (manifests/base/*webhookconfiguration.yaml, generated from the bundle): a
  request the conditions hold back never reaches the webhook, one they let through does. A
  webhook server of this module's own, registered with the generated UPDATE webhook (asked only
  for this module's namespace), counts what it is sent.
* **ValidatingAdmissionPolicies** (manifests/admission-policies.yaml, generated from the bundle):
  installed as a deployment has them, then the session's webhook server is stopped (as in
  test_webhook_down.py: its port refuses connections, the webhook configurations stay). alice's
  update of a CronJob's job template or a Deployment's pod template to the admin-only class is
  still refused, bob's (an admin) is not; nor may alice set the reconciler's annotations or the
  opt-out label. (A Job's pod template takes no new priorityClassName at all, even suspended:
  Kubernetes refuses that itself, shown here too.) Meanwhile the Namespace webhook, which fails
  closed, no longer stops ordinary namespace work: kube-system & co. are left out, and a
  Namespace is sent only when someone who is not an admin sets or changes its labels.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import require_components, wait_for
from conftest import QUEUED
from harness import (
    QUEUE_LABEL,
    TIME_LIMIT,
    WebhookServer,
    attempt,
    container,
    cpu_to,
    create,
    create_and_read,
    cronjob,
    deployment,
    grant_resize,
    job,
    jobs_path,
    pod,
    pods_path,
    stored_cpu,
    unique,
)

from webhook.generate import webhook_configurations

REPO = Path(__file__).resolve().parents[2]
URGENT = "batchgate-urgent"
OPT_OUT = "batchgate.io/admission"
STARTED = "batchgate.io/started-at"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
SCOPE = "batchgate-e2e/conditions"
QUEUED_MARK = "batchgate.io/queued"
CONFIG = "batchgate-e2e-conditions"
HOOK = "update.validate.conditions.batchgate.io"
STRATEGIC = "application/strategic-merge-patch+json"



# -- matchConditions ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def counted(kube: Any, webhook_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A second `batchgate serve` on the shipped bundle, registered with the generated
    update.validate.batchgate.io (its rules and matchConditions as deployed), failing closed and
    asked only for objects in a namespace labelled with SCOPE: what it counts is this module's."""
    workdir = tmp_path_factory.mktemp("conditions")
    server = WebhookServer(workdir, policies=REPO / "policies",
                           seal_keys=webhook_server.server.cert_dir / "seal.keys").start()
    _, validating = webhook_configurations(server.ca_bundle, url=server.url)
    (hook,) = [h for h in validating["webhooks"] if h["name"] == "update.validate.batchgate.io"]
    assert hook["matchConditions"], "the generated UPDATE webhook has no matchConditions"
    hook.update(name=HOOK, failurePolicy="Fail", namespaceSelector={"matchLabels": {SCOPE: "on"}})
    validating.update(metadata={"name": CONFIG}, webhooks=[hook])
    ns = kube.create_namespace(prefix="e2e-conditions", labels={SCOPE: "on"})
    try:
        kube.register_webhooks(None, validating)
        yield {"server": server, "ns": ns}
    finally:
        with contextlib.suppress(Exception):
            kube.delete_webhooks(validating=CONFIG)
        server.stop()
        with contextlib.suppress(Exception):
            kube.delete_namespace(ns)


def _updates_seen(server: WebhookServer) -> float:
    """UPDATE reviews the server answered on /validate, whatever the outcome."""
    return sum(v for k, v in server.metrics().items()
               if k.startswith('batchgate_admission_requests_total{endpoint="/validate",operation="UPDATE"'))


def test_a_skipped_update_never_reaches_the_webhook_and_a_judged_one_does(kube, counted):
    server, ns = counted["server"], counted["ns"]
    name = unique("p")
    path = pods_path(ns, name)
    create(kube, ns, pod(name))
    # Until the API server has the configuration: an update the webhook must judge (a server-side
    # dry run of a time limit past the queue maximum) reaches this module's webhook.
    def reached() -> bool:
        before = _updates_seen(server)
        attempt(lambda: kube.request("PATCH", path, {"metadata": {"annotations": {TIME_LIMIT: "8d"}}}, as_user="alice",
                                     content_type="application/merge-patch+json", query={"dryRun": "All"}))
        return _updates_seen(server) > before

    wait_for(reached, 30, interval=0.3, message="the API server to call this module's webhook")

    skipped = [  # (what, patch, who): nothing any policy reads on UPDATE changes
        ("an unrelated label", {"metadata": {"labels": {"app": "x"}}}, "alice"),
        ("an unrelated annotation", {"metadata": {"annotations": {"note": "hello"}}}, "alice"),
        ("a finalizer", {"metadata": {"finalizers": ["example.com/keep"]}}, "admin"),
        ("the finalizer removed", {"metadata": {"finalizers": None}}, "admin"),
        ("a reconciler annotation, by an admin", {"metadata": {"annotations": {STARTED: "2030-01-01T00:00:00Z"}}},
         "admin"),
    ]
    for what, body, who in skipped:
        before = _updates_seen(server)
        kube.patch(path, body, as_user=who)
        assert _updates_seen(server) == before, f"{what}: the webhook was called"
    judged = [  # (what, patch, expected status): a policy reads it
        ("the queue label (fixed once a Pod exists)", {"metadata": {"labels": {QUEUE_LABEL: "interactive"}}}, 403),
        ("a time limit within the queue maximum", {"metadata": {"annotations": {TIME_LIMIT: "1h"}}}, 200),
        ("a time limit past it", {"metadata": {"annotations": {TIME_LIMIT: "8d"}}}, 403),
        ("a reconciler annotation, by alice", {"metadata": {"annotations": {STARTED: "2031-01-01T00:00:00Z"}}}, 403),
    ]
    for what, body, status in judged:
        before = _updates_seen(server)
        got, msg = attempt(lambda body=body: kube.patch(path, body, as_user="alice"))
        assert got == status, (what, got, msg)
        # a denial's reviews are answered before the API server answers: no wait needed
        assert _updates_seen(server) >= before + 1, f"{what}: the webhook was not called"


# -- ValidatingAdmissionPolicies ----------------------------------------------------------------
@pytest.fixture(scope="module")
def admission_policies(kube: Any, webhook_server: Any, module_namespace: str) -> Iterator[list[dict[str, Any]]]:
    """manifests/admission-policies.yaml applied as `kubectl apply -k manifests/` would, until
    they are in force (alice's dry-run forgery of a reconciler annotation on a Pod is denied by
    one of them, before the webhook would deny it) and the controller has type-checked them;
    removed after the module."""
    require_components(kube, "kube-controller-manager")  # type-checks them (status.typeChecking)
    objects = [o for o in yaml.safe_load_all((REPO / "manifests" / "admission-policies.yaml").read_text()) if o]
    assert {o["kind"] for o in objects} == set(PLURALS)
    # The probe's policy and binding go last and leave last: the API server learns policies and
    # bindings each from one watch, in the order they were written, so once the probe's are in
    # force every other one is too (waiting on one created mid-list raced the ones after it).
    probed = "batchgate-reconciler-annotations"
    objects = ([o for o in objects if o["metadata"]["name"] != probed]
               + [o for o in objects if o["metadata"]["name"] == probed])
    probe = unique("probe")
    create(kube, module_namespace, pod(probe))
    forged = {"metadata": {"annotations": {STARTED: "2030-01-01T00:00:00Z"}}}
    try:
        for o in objects:
            kube.create(f"{ADMISSION}/{PLURALS[o['kind']]}", o)

        def denied_by_a_policy() -> bool:
            status, msg = attempt(lambda: kube.request(
                "PATCH", pods_path(module_namespace, probe), forged, as_user="alice",
                content_type="application/merge-patch+json", query={"dryRun": "All"}))
            return status == 403 and f"ValidatingAdmissionPolicy '{probed}'" in msg

        wait_for(denied_by_a_policy, 30, interval=0.3, message="the admission policies to be in force")

        def checked() -> list[dict[str, Any]] | None:
            got = [kube.get(f"{ADMISSION}/validatingadmissionpolicies/{o['metadata']['name']}")
                   for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
            done = all((p.get("status") or {}).get("observedGeneration") == p["metadata"]["generation"] for p in got)
            return got if done else None

        for p in wait_for(checked, 60, message="the admission policies' type checking"):
            warnings = ((p.get("status") or {}).get("typeChecking") or {}).get("expressionWarnings")
            assert not warnings, f"{p['metadata']['name']}: CEL does not type-check: {warnings}"
        yield objects
    finally:
        for o in objects:
            with contextlib.suppress(Exception):
                kube.delete(f"{ADMISSION}/{PLURALS[o['kind']]}/{o['metadata']['name']}")
        # the API server drops them asynchronously: the next module's tests (which change what
        # they forbid while the webhook is down) must not meet them still in force
        with contextlib.suppress(Exception):
            wait_for(lambda: not denied_by_a_policy(), 30, interval=0.3, message="the admission policies gone")


def _refused_by(policy: str, status: int, msg: str, *parts: str) -> list[str]:
    out = [] if status == 403 else [f"HTTP {status}, expected 403: {msg}"]
    for part in (f"ValidatingAdmissionPolicy '{policy}'", *parts):
        if part not in msg:
            out.append(f"message lacks {part!r}: {msg}")
    return out


def test_what_holds_while_the_webhook_is_down(kube, webhook_server, admission_policies, namespace,
                                              namespace_manager, outage):
    ns = namespace
    cj, dep, suspended = unique("cj"), unique("dep"), unique("job")
    cj_path = f"/apis/batch/v1/namespaces/{ns}/cronjobs/{cj}"
    dep_path = f"/apis/apps/v1/namespaces/{ns}/deployments/{dep}"
    create_and_read(kube, ns, cronjob(cj, containers=[container()]))
    create_and_read(kube, ns, deployment(dep, replicas=0))
    create_and_read(kube, ns, {**job(suspended), "spec": {**job(suspended)["spec"], "suspend": True}})
    p0 = unique("p0")
    create(kube, ns, pod(p0))
    waiting, gated = unique("waiting"), unique("gated")  # in the e2e bundle's gated queue (conftest.py)
    assert create(kube, ns, job(waiting, labels={QUEUE_LABEL: QUEUED}))["spec"]["suspend"] is True
    # ... and a running Job of `batch`, gated in the shipped bundle the admission policies are made
    # from (the e2e webhook's bundle ungates it, so it runs as if released)
    released = unique("released")
    assert create(kube, ns, job(released, labels={QUEUE_LABEL: "batch"}))["spec"].get("suspend") is not True
    assert create(kube, ns, pod(gated, labels={QUEUE_LABEL: QUEUED}))["spec"]["schedulingGates"]
    own = f"e2e-ns-{uuid.uuid4().hex[:6]}"  # alice's own namespace (she may create and label them)
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": own}},
                as_user=namespace_manager)
    # a namespace an admin opted out, where alice may edit: no webhook and no admission policy
    # judges anything there (the policies by their bindings' namespaceSelector)
    opted_out = kube.create_namespace(prefix="e2e-opted-out", labels={OPT_OUT: "disabled"})
    p_out = unique("p-out")
    assert QUEUE_LABEL not in (create(kube, opted_out, pod(p_out))["metadata"].get("labels") or {})  # not mutated

    # --- the webhook is unreachable ---------------------------------------------------------------
    webhook_server.server.stop()
    assert webhook_server.server.refuses_connections()
    to_urgent = {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"priorityClassName": URGENT}}}}}}
    dep_urgent = {"spec": {"template": {"spec": {"priorityClassName": URGENT}}}}
    problems: list[str] = []
    reserved = f"'{URGENT}' is reserved for admins"

    status, msg = attempt(lambda: kube.patch(cj_path, to_urgent, as_user="alice"))
    problems += _refused_by("batchgate-queue-priority-cronjobs", status, msg, reserved)
    status, msg = attempt(lambda: kube.patch(dep_path, dep_urgent, as_user="alice"))
    problems += _refused_by("batchgate-queue-priority-templates", status, msg, reserved)
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, suspended), dep_urgent, as_user="alice"))
    if status != 422 or "field is immutable" not in msg:  # Kubernetes' own answer, for anyone
        problems.append(f"a Job's template took a new class: HTTP {status} {msg}")
    for path, spec in ((cj_path, ("jobTemplate", "spec", "template")), (dep_path, ("template",))):
        stored = kube.get(path)["spec"]
        for key in spec:
            stored = stored[key]
        if stored["spec"].get("priorityClassName") == URGENT:
            problems.append(f"{path}: the admin-only class was stored")

    # an update that leaves the class alone passes (UPDATE fails open: nothing else stops it)
    status, msg = attempt(lambda: kube.patch(cj_path, {"spec": {"schedule": "0 0 2 1 *"}}, as_user="alice"))
    if status != 200:
        problems.append(f"alice's schedule change: HTTP {status} {msg}")
    # an admin may take the class, and then alice may still change the rest
    for path, body in ((cj_path, to_urgent), (dep_path, dep_urgent)):
        status, msg = attempt(lambda path=path, body=body: kube.patch(path, body, as_user="bob"))
        if status != 200:
            problems.append(f"bob (an admin) taking the class on {path}: HTTP {status} {msg}")
    status, msg = attempt(lambda: kube.patch(cj_path, {"spec": {"schedule": "0 0 3 1 *"}}, as_user="alice"))
    if status != 200:
        problems.append(f"alice's change to bob's CronJob: HTTP {status} {msg}")

    # the reconciler's annotations: alice may not forge one, an admin may
    forged = {"metadata": {"annotations": {STARTED: "2030-01-01T00:00:00Z"}}}
    status, msg = attempt(lambda: kube.patch(pods_path(ns, p0), forged, as_user="alice"))
    problems += _refused_by("batchgate-reconciler-annotations", status, msg,
                            f"{STARTED} is written by the batchgate reconciler only")
    status, msg = attempt(lambda: kube.patch(pods_path(ns, p0), forged))
    if status != 200:
        problems.append(f"the admin's {STARTED}: HTTP {status} {msg}")
    # ... but in the opted-out namespace nothing of batchgate's judges her
    status, msg = attempt(lambda: kube.patch(pods_path(opted_out, p_out), forged, as_user="alice"))
    stored = (kube.get(pods_path(opted_out, p_out))["metadata"].get("annotations") or {}).get(STARTED)
    if status != 200 or stored != "2030-01-01T00:00:00Z":
        problems.append(f"alice's {STARTED} in an opted-out namespace: HTTP {status} {msg}, stored {stored!r}")

    # the batch queue: alice may not release her own waiting work; an admin may
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, waiting), {"spec": {"suspend": False}}, as_user="alice"))
    problems += _refused_by("batchgate-queue-gate-jobs", status, msg, "the Job waits in its queue, suspended")
    # ... nor grow her released, running Job (room the queue never gave); an admin may, and she may
    # lower it (it frees room)
    grow = {"spec": {"parallelism": 2}}
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, released), grow, as_user="alice"))
    problems += _refused_by("batchgate-queue-gate-jobs", status, msg, "the Job runs in queue 'batch'",
                            "raising spec.parallelism", "suspend the Job (spec.suspend: true)")
    if kube.get(jobs_path(ns, released))["spec"].get("parallelism") != 1:
        problems.append("alice's raised parallelism was stored")
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, released), grow, as_user="bob"))
    if status != 200:
        problems.append(f"bob (an admin) raising parallelism: HTTP {status} {msg}")
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, released), {"spec": {"parallelism": 1}}, as_user="alice"))
    if status != 200:
        problems.append(f"alice lowering parallelism: HTTP {status} {msg}")
    # ... nor suspend her released Job unmarked, to resume it at once (the webhook would mark it
    # queued: it goes back to its queue); marked as the webhook would, it is suspended, and stays so
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, released), {"spec": {"suspend": True}}, as_user="alice"))
    problems += _refused_by("batchgate-queue-gate-jobs", status, msg, "goes back to its queue when suspended")
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, released), {"spec": {"suspend": True}, "metadata": {
        "annotations": {QUEUED_MARK: "suspended"}}}, as_user="alice"))
    if status != 200:
        problems.append(f"alice's suspend, marked: HTTP {status} {msg}")
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, released), {"spec": {"suspend": False}}, as_user="alice"))
    problems += _refused_by("batchgate-queue-gate-jobs", status, msg, "the Job waits in its queue, suspended")
    if kube.get(jobs_path(ns, released))["spec"].get("suspend") is not True:
        problems.append("alice resumed the Job she suspended")
    # suspended, it is queued: she may resize it (the queue plans its new size)
    status, msg = attempt(lambda: kube.patch(jobs_path(ns, released), {"spec": {"parallelism": 3}}, as_user="alice"))
    if status != 200 or kube.get(jobs_path(ns, released))["spec"].get("parallelism") != 3:
        problems.append(f"alice resizing her suspended Job: HTTP {status} {msg}")
    status, msg = attempt(lambda: kube.patch(pods_path(ns, gated), {"spec": {"schedulingGates": None}}, as_user="alice"))
    problems += _refused_by("batchgate-queue-gate-pods", status, msg, "behind the scheduling gate batchgate.io/queue")
    status, msg = attempt(lambda: kube.patch(pods_path(ns, gated), {"spec": {"schedulingGates": None}}, as_user="bob"))
    if status != 200:
        problems.append(f"bob (an admin) releasing a pod: HTTP {status} {msg}")

    # a Pod's queue label, which exclusive placement's anti-affinity matches (issue 27): not
    # alice's to remove or change (test_hostile_tenant.py::test_5_... with the webhook up)
    for labels in ({QUEUE_LABEL: None}, {QUEUE_LABEL: "scavenger"}, {"batchgate.io/exclusive-group": "job-x-0123456789"}):
        status, msg = attempt(lambda labels=labels: kube.patch(pods_path(ns, p0), {"metadata": {"labels": labels}},
                                                               as_user="alice"))
        problems += _refused_by("batchgate-queue-access-pods", status, msg, "cannot be set, changed or removed once it exists")
    if kube.get(pods_path(ns, p0))["metadata"]["labels"].get(QUEUE_LABEL) != "batch":
        problems.append("the Pod's queue label was changed")

    # the opt-out label: not alice's, on her own namespace or kube-system; an admin's
    for target in (own, "kube-system"):
        status, msg = attempt(lambda target=target: kube.patch(
            f"/api/v1/namespaces/{target}", {"metadata": {"labels": {OPT_OUT: "disabled"}}}, as_user=namespace_manager))
        problems += _refused_by("batchgate-namespace-opt-out", status, msg, "is for cluster admins only")
    if OPT_OUT in (kube.get(f"/api/v1/namespaces/{own}")["metadata"].get("labels") or {}):
        problems.append("the opt-out label was stored")
    # ... while ordinary namespace work goes on: an ordinary namespace (not sent to the webhook),
    # kube-system relabelled (left out of the Namespace webhook); a label set by a user who is
    # not an admin is still sent, and the Namespace webhook still fails closed
    other = f"e2e-ns-{uuid.uuid4().hex[:6]}"
    status, msg = attempt(lambda: kube.create("/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}, as_user=namespace_manager))
    if status != 200:
        problems.append(f"alice's ordinary namespace while the webhook is down: HTTP {status} {msg}")
    status, msg = attempt(lambda: kube.patch("/api/v1/namespaces/kube-system",
                                             {"metadata": {"labels": {"e2e-outage": "yes"}}}))
    if status != 200:
        problems.append(f"relabelling kube-system while the webhook is down: HTTP {status} {msg}")
    status, msg = attempt(lambda: kube.patch(f"/api/v1/namespaces/{own}", {"metadata": {"labels": {"team": "cfd"}}},
                                             as_user=namespace_manager))
    if status != 500 or 'failed calling webhook "namespaces.validate.batchgate.io"' not in msg:
        problems.append(f"alice's label while the webhook is down: HTTP {status} {msg} (expected the webhook's 500)")

    outage.end()
    with contextlib.suppress(Exception):
        kube.patch("/api/v1/namespaces/kube-system", {"metadata": {"labels": {"e2e-outage": None}}})
    for n in (own, other, opted_out):
        with contextlib.suppress(Exception):
            kube.delete_namespace(n)
    assert not problems, "while the webhook was down:\n  " + "\n  ".join(problems)


def _resized_while_down(kube: Any, webhook_server: Any, outage: Any, ns: str, queue: str, *refusal: str) -> None:
    """alice (whom a Role grants pods/resize) resizes her 1-CPU Pod of ``queue`` while the webhook is
    down: raising is refused by batchgate-queue-gate-pods-resize (its message has each of ``refusal``)
    and nothing is stored; lowering passes, and so does an admin's raise; each read back."""
    name = unique("grow")
    grant_resize(kube, ns)
    create(kube, ns, pod(name, labels={QUEUE_LABEL: queue}, containers=[container(cpu="1", memory="64Mi")]))
    assert not kube.get(pods_path(ns, name))["spec"].get("schedulingGates")  # not waiting: as if released
    resize = pods_path(ns, name) + "/resize"

    def raise_refused_by_the_policy(dry_run: bool) -> tuple[int, str]:
        return attempt(lambda: kube.request("PATCH", resize, cpu_to("2"), content_type=STRATEGIC, as_user="alice",
                                            query={"dryRun": "All"} if dry_run else None))

    # the policies are created one after the other: this one (after the module's probe's) in force
    wait_for(lambda: "ValidatingAdmissionPolicy 'batchgate-queue-gate-pods-resize'" in raise_refused_by_the_policy(True)[1],
             30, interval=0.3, message="batchgate-queue-gate-pods-resize in force")
    webhook_server.server.stop()
    assert webhook_server.server.refuses_connections()
    problems: list[str] = []
    status, msg = raise_refused_by_the_policy(False)
    problems += _refused_by("batchgate-queue-gate-pods-resize", status, msg, *refusal)
    if stored_cpu(kube, ns, name) != ("1", "1"):
        problems.append(f"alice's raise was stored: {stored_cpu(kube, ns, name)}")
    status, msg = attempt(lambda: kube.request("PATCH", resize, cpu_to("500m"), content_type=STRATEGIC,
                                               as_user="alice"))
    if status != 200 or stored_cpu(kube, ns, name) != ("500m", "500m"):
        problems.append(f"alice lowering her pod: HTTP {status} {msg}")
    status, msg = attempt(lambda: kube.request("PATCH", resize, cpu_to("2"), content_type=STRATEGIC))
    if status != 200 or stored_cpu(kube, ns, name) != ("2", "2"):
        problems.append(f"the cluster admin raising it: HTTP {status} {msg}")
    outage.end()
    assert not problems, "while the webhook was down:\n  " + "\n  ".join(problems)


def test_a_released_pod_is_not_resized_bigger_while_the_webhook_is_down(kube, webhook_server, admission_policies,
                                                                          namespace, outage):
    """pods/resize of a released Pod of a gated queue (``batch`` in the shipped bundle the admission
    policies come from; the e2e webhook leaves it ungated, so the pod runs as if released): with the
    webhook down, batchgate-queue-gate-pods-resize refuses a raise, naming the queue."""
    _resized_while_down(kube, webhook_server, outage, namespace, "batch", "the Pod runs in queue 'batch'",
                        "raising them in place (pods/resize)", "delete it and submit it again")


def test_a_scavenger_pod_is_not_resized_bigger_while_the_webhook_is_down(kube, webhook_server, admission_policies,
                                                                          namespace, outage):
    """pods/resize of a Pod of the scavenger queue (not gated: the scavengers' share is what holds
    it): with the webhook down, batchgate-queue-gate-pods-resize refuses a raise of its requests and
    limits, naming the queue and why."""
    _resized_while_down(kube, webhook_server, outage, namespace, "scavenger",
                        "the Pod is a scavenger, in queue 'scavenger'",
                        "raising its requests or limits in place (pods/resize) would take more than the scavenger "
                        "policy allowed")


def test_a_running_scavengerjob_is_not_edited_bigger_while_the_webhook_is_down(kube, webhook_server,
                                                                             admission_policies, namespace, outage):
    """A ScavengerJob's spec edit goes to the UPDATE webhook, which fails open: with it down,
    batchgate-scavengerjob-running refuses alice's raise of spec.pods and of spec.resources of one
    that started a segment (its status.jobName, written here as the reconciler would), naming each
    field; nothing is stored. Lowering passes, and so does an admin's raise; each read back."""
    ns, name = namespace, unique("sj")
    path = f"/apis/batchgate.io/v1alpha1/namespaces/{ns}/scavengerjobs/{name}"
    kube.create(path.rsplit("/", 1)[0], {
        "apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob", "metadata": {"name": name},
        "spec": {"image": "registry.k8s.io/pause:3.2", "command": ["/pause"], "runAsUser": 1000, "pods": 2,
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}, "duration": "1h"}}, as_user="alice")
    kube.request("PATCH", path + "/status", {"status": {"phase": "Running", "segment": 1, "jobName": f"{name}-1"}},
                 content_type="application/merge-patch+json")
    merge = "application/merge-patch+json"

    def edit(spec: dict[str, Any], user: str = "alice", dry_run: bool = False) -> tuple[int, str]:
        return attempt(lambda: kube.request("PATCH", path, {"spec": spec}, content_type=merge, as_user=user,
                                            query={"dryRun": "All"} if dry_run else None))

    def stored() -> tuple[int, str]:
        spec = kube.get(path)["spec"]
        return spec["pods"], spec["resources"]["limits"]["cpu"]

    wait_for(lambda: "ValidatingAdmissionPolicy 'batchgate-scavengerjob-running'" in edit({"pods": 3}, dry_run=True)[1],
             30, interval=0.3, message="batchgate-scavengerjob-running in force")
    webhook_server.server.stop()
    assert webhook_server.server.refuses_connections()
    problems: list[str] = []
    status, msg = edit({"pods": 3})
    problems += _refused_by("batchgate-scavengerjob-running", status, msg, f"ScavengerJob {ns}/{name} is running",
                            "raising spec.pods from 2 to 3 while it runs", "delete it and submit it again")
    status, msg = edit({"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})
    problems += _refused_by("batchgate-scavengerjob-running", status, msg,
                            "raising a request or limit in spec.resources while it runs")
    if stored() != (2, "1"):
        problems.append(f"alice's raise was stored: {stored()}")
    status, msg = edit({"pods": 1, "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}})
    if status != 200 or stored() != (1, "500m"):
        problems.append(f"alice lowering it: HTTP {status} {msg}; stored {stored()}")
    status, msg = edit({"pods": 4}, user="admin")
    if status != 200 or stored() != (4, "500m"):
        problems.append(f"the cluster admin raising it: HTTP {status} {msg}; stored {stored()}")
    outage.end()
    assert not problems, "while the webhook was down:\n  " + "\n  ".join(problems)
