"""Issue 27: what one tenant stores must cost that tenant's object, never the reconciler.

Each case is an object a user with ``edit`` in their own namespace can store (while the webhook
admitted it, or was down): the views bound what they keep and refuse what no arithmetic should
see, and the planner plans every other object as if it were not there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from reconbuild import (
    HOUR,
    T0,
    deadline_ann,
    group_labels,
    job,
    pod,
    record_env,
    snapshot,
    terminated,
)
from test_fuzz_reconciler import fuzz
from test_scavenger_controller import SETTINGS, World, sj

from webhook.reconciler import metrics
from webhook.reconciler.cache import Store
from webhook.reconciler.model import POD, Snapshot, pod_view
from webhook.reconciler.planner import plan
from webhook.reconciler.scavenger import job_name, sj_view
from webhook.reconciler.settings import Settings
from webhook.units import format_time

deep_size = fuzz.deep_size  # bytes a view keeps (bench/fuzz_reconciler.py bounds every view with it)
HUGE = "99999999999999999999s"  # admitted before issue 27: parse_duration had no upper bound


# -- durations: bounded in the views -------------------------------------------------------------
def test_a_scavengerjob_with_a_duration_past_the_bound_fails_alone_and_the_others_run():
    """Before: admitted, started, and once its pods ran, the status message (format_time of the
    segment's end) overflowed; plan() raised and every pass failed, for every tenant."""
    w = World(sj("huge", duration=HUGE, cpu="1"), sj("other", cpu="1"))
    w.step()  # both queued
    w.step()
    for name in w.jobs():
        w.run_job(name)
    w.step(60)
    w.step(60)
    huge, other = w.sj("huge")["status"], w.sj("other")["status"]
    assert huge["phase"] == "Failed", huge
    assert f"spec.duration: '{HUGE}' is longer than 3650d, the longest duration batchgate accepts" in huge["message"]
    assert other["phase"] == "Running", other


def test_a_scavengerjob_whose_name_cannot_label_its_jobs_fails_alone_naming_it():
    """Before: its Job's label batchgate.io/scavengerjob was invalid, and its creation was retried
    every pass, forever (issue 27). Now the policy and the CRD refuse the name; one stored before
    fails at once with the reason, and no Job is tried."""
    long = "x" * 64
    w = World(sj(long, cpu="1"), sj("other", cpu="1"))
    w.step()
    w.step()
    st = w.sj(long)["status"]
    assert st["phase"] == "Failed", st
    assert "metadata.name: 64 characters, more than 63" in st["message"]
    assert list(w.jobs()) == ["other-1"]
    assert ("create", "jobs", "demo", job_name(long, 1)) not in w.api.writes()
    assert sj_view(sj("y" * 63)).problems == ()


def test_one_the_webhook_would_have_refused_fails_invalidspec_in_its_words_and_no_job_is_made():
    """Issue 21: stored while the webhook was down with an unknown field and requests below limits,
    it used to run; now it fails with the words the scavengerjob policy would have refused it with."""
    from webhook.rules.scavengerjob import scavengerjob_problems

    bad = sj("typo", cpu="1")
    bad["spec"]["priority"] = 100
    bad["spec"]["resources"]["requests"] = {"cpu": "500m", "memory": "1Gi"}
    w = World(bad, sj("other", cpu="1"))
    w.step()
    w.step()
    st = w.sj("typo")["status"]
    problems = scavengerjob_problems(bad)
    assert [p.split(":")[0] for p in problems] == ["spec.priority", "spec.resources.requests.cpu"]
    assert st["phase"] == "Failed" and st["message"] == "invalid spec: " + "; ".join(problems), st
    assert list(w.jobs()) == ["other-1"]


def test_the_scavengerjob_view_refuses_what_the_policy_refuses():
    obj = sj("big", pods=10_001, duration="30m")
    assert sj_view(obj).need is None
    assert "spec.pods: 10001 is more than 10000" in "; ".join(sj_view(obj).problems)
    obj = sj("big", cpu="100000", mem="1Ei")
    assert sj_view(obj).need is None and "the most a scavenger pod may ask for" in sj_view(obj).problems[0]
    assert sj_view(sj("ok", pods=10_000, cpu="10000", mem="1Pi", duration="3650d")).problems == ()


def test_a_bare_pod_with_a_limit_past_the_bound_does_not_stop_the_pass():
    """Before: a bare Pod (no record: made with a custom-resource owner, which it then dropped)
    relabelled to an unknown queue with this limit overflowed the deadline computation."""
    hostile = pod("hostile", labels={"batchgate.io/queue": "no-such-queue"}, admitted=None,
                  annotations={"batchgate.io/time-limit": HUGE})
    late = pod("late", annotations=deadline_ann("1h"))
    assert pod_view(hostile).limit is None  # not a limit batchgate accepts: as malformed
    result = plan(snapshot(hostile, late), T0 + 2 * HOUR, Settings())
    assert [(a.kind, a.target.name) for a in result.actions] == [("stop", "late")]


# -- one object that cannot be planned: an Event and a metric for it, never the pass ----------
def _absurd(view: Any, **changes: Any) -> Any:
    """A view carrying what no view lets through any more: whatever the next bug in a view lets
    through must cost that object alone too."""
    return dataclasses.replace(view, **changes)


def test_a_job_that_cannot_be_planned_costs_itself_an_event_and_the_others_are_planned():
    hostile = _absurd(pod_view(pod("hostile", annotations=deadline_ann("1h"))), limit=10**20)
    late = pod_view(pod("late", annotations=deadline_ann("1h")))
    result = plan(Snapshot.of(pods=[hostile, late]), T0 + 2 * HOUR, Settings())
    assert [(a.kind, a.target.name, a.reason) for a in result.actions] == [
        ("cannot-plan", "hostile", "CannotPlan"), ("stop", "late", "TimeLimitExceeded")]
    told = result.actions[0]
    assert told.event_type == "Warning" and "OverflowError" in told.message and "its deadline" in told.message
    assert [(u.concern, u.ref.name if u.ref else None) for u in result.unplannable] == [("deadline", "hostile")]


def test_a_scavengerjob_that_cannot_be_planned_fails_no_pass_and_is_told_once(monkeypatch):
    w = World(sj("huge", cpu="1"), sj("other", cpu="1"))
    store = w.c.cache.scavenger_jobs
    real = store._convert
    store._convert = lambda o: (_absurd(real(o), duration=10**20) if o["metadata"]["name"] == "huge"
                                else real(o))
    w.step()
    w.step()
    for name in w.jobs():
        w.run_job(name)
    assert w.step(60) == ["sj-running"]  # other; huge cannot be planned (its message's date overflows)
    assert w.sj("other")["status"]["phase"] == "Running"
    assert w.sj("huge")["status"]["phase"] == "Pending"  # left as it is
    told = w.events("CannotPlan")
    assert len(told) == 1 and "its ScavengerJob" in told[0] and "OverflowError" in told[0], told
    assert metrics.UNPLANNABLE.labels("scavengerjob")._value.get() == 1
    writes = len(w.api.writes())
    w.step(60)
    assert len(w.api.writes()) == writes  # told once: no Event written again, nothing else to do
    assert len(w.events("CannotPlan")) == 1


# -- views: what the API server stores, however odd, becomes a view or is left out ------------
def test_views_take_any_annotation_text_without_raising():
    o = pod("odd", labels={"batchgate.io/network": "svc", "batchgate.io/pod-group": "g",
                           "batchgate.io/pod-group-size": "4"},
            annotations={"batchgate.io/slots": "\u00b2", "batch.kubernetes.io/job-completion-index": "9" * 5000})
    o["spec"]["subdomain"] = "svc"
    v = pod_view(o)  # before: int('\u00b2') and a 5,000-digit int() raised, and the whole list failed
    assert v.network is not None and v.network.slots == 1 and v.network.index is None and v.index is None
    o["metadata"]["labels"]["batchgate.io/pod-group-size"] = "\u0663"  # ARABIC-INDIC DIGIT THREE: not ours
    assert pod_view(o).group_size is None


def test_an_object_whose_view_fails_is_left_out_and_the_rest_is_listed(caplog):
    def convert(o: Mapping[str, Any]) -> Any:
        if o["metadata"]["name"] == "bad":
            raise ValueError("no view for this one")
        return pod_view(o)

    store = Store(POD, convert)
    before = metrics.UNREADABLE.labels("pods")._value.get()
    store.replace([pod("good"), pod("bad"), pod("also-good")])
    assert sorted(k[1] for k in store.items()) == ["also-good", "good"]
    assert metrics.UNREADABLE.labels("pods")._value.get() == before + 1
    assert "pod demo/bad left out of the reconciler's view" in caplog.text
    assert store.upsert(pod("bad")) is False and ("demo", "bad") not in store.items()
    store.upsert(pod("good"))
    assert ("demo", "good") in store.items()


def test_a_node_that_cannot_be_planned_does_not_keep_the_others_cordoned():
    """The issue's worst case: a failing pass meant no maintenance uncordon for anyone."""
    from test_planner_maintenance import mw, node, window_view

    w = mw("fw", -2 * HOUR, -1, nodes=["n1", "n2"])
    bad = _absurd(node("n1", unschedulable=True, cordoned={"window": "fw"}), maintenance=12345)
    good = node("n2", unschedulable=True, cordoned={"window": "fw", "unschedulable": False})
    result = plan(Snapshot.of(nodes=[bad, good], windows=[window_view(w)]), T0, Settings())
    assert [(a.kind, a.target.name) for a in result.actions if a.kind != "window-status"] == [
        ("cannot-plan", "n1"), ("uncordon", "n2")]
    assert [u.concern for u in result.unplannable] == ["maintenance"]


# -- views: memory per object is bounded whatever is stored ---------------------------------------
def _networked(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    o = pod(name, labels={"batchgate.io/network": "svc", "batchgate.io/pod-group": "svc",
                          "batchgate.io/pod-group-size": "2"}, annotations=annotations)
    o["spec"]["subdomain"] = "svc"
    o["spec"]["hostname"] = name
    return o


def test_a_pod_view_keeps_at_most_64_peers_and_flags_the_rest():
    """Before: 85,000 names of connect-to (written on an UPDATE, which the policy did not check)
    were kept, about 4.8 MiB per pod: a hundred such pods pushed the reconciler past its 512 Mi."""
    many = ",".join(f"w{i}" for i in range(85_000))
    v = pod_view(_networked("p", {"batchgate.io/connect-to": many}))
    assert v.network is not None
    assert v.network.connect_to == tuple(f"w{i}" for i in range(64))
    assert v.network.connect_to_dropped == 85_000 - 64
    odd = pod_view(_networked("q", {"batchgate.io/connect-to": "viz,Not_A_Service," + "x" * 100}))
    assert odd.network is not None and odd.network.connect_to == ("viz",) and odd.network.connect_to_dropped == 2


HOSTILE = [
    ("connect-to of 85,000 names", {"annotations": {"batchgate.io/connect-to": ",".join(
        f"w{i}" for i in range(85_000))}}),
    ("every annotation the view reads, 40 KB each", {"annotations": {k: "9" * 40_000 for k in (
        "batchgate.io/time-limit", "batchgate.io/started-at", "batchgate.io/deadline", "batchgate.io/warned-for",
        "batchgate.io/next-maintenance", "batchgate.io/expected-start", "batchgate.io/expected-runtime",
        "batchgate.io/slots")}}),
    ("an image name of 1 MB", {"image": "r/" + "a" * 1_000_000}),
    ("10,000 tolerations and affinity terms", {"sched": True}),
    # found by bench/fuzz_reconciler.py: the API server bounds no ownerReference name, and status
    # texts (reason, message, phase) were kept whole
    ("an owner's name of 1 MB", {"owner": "x" * 1_000_000}),
    ("an eviction message of 1 MB", {"status": {"reason": "Evicted", "message": "m" * 1_000_000}}),
    ("a DisruptionTarget message of 1 MB", {"status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "x" * 1_000_000, "message": "m" * 1_000_000}]}}),
    ("a terminated reason of 1 MB", {"status": {"phase": "Failed", "containerStatuses": [
        {"name": "main", "state": {"terminated": {"exitCode": 1, "reason": "r" * 1_000_000}}}]}}),
    ("a phase of 1 MB", {"status": {"phase": "P" * 1_000_000}}),
]


@pytest.mark.parametrize("stored", [c[1] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_a_pod_view_stays_small_whatever_is_stored(stored: dict[str, Any]) -> None:
    o = _networked("p", stored.get("annotations", {}))
    if "owner" in stored:
        o["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": stored["owner"],
                                             "uid": stored["owner"], "controller": True}]
    o["status"].update(stored.get("status", {}))
    if "image" in stored:
        o["spec"]["containers"][0]["image"] = stored["image"]
    if stored.get("sched"):
        o["spec"]["tolerations"] = [{"key": f"k{i}", "operator": "Exists"} for i in range(10_000)]
        o["spec"]["nodeSelector"] = {f"k{i}": "v" for i in range(10_000)}
        o["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": f"k{i}", "operator": "In", "values": ["a", "b"]}]}
                                  for i in range(10_000)]}}}
    plain = deep_size(pod_view(_networked("p", {})))
    view = pod_view(o)
    assert deep_size(view) < plain + 16 * 1024
    assert view.sched is not None and view.sched.clipped is bool(stored.get("sched"))  # placement unknown


def test_the_views_memos_never_keep_long_texts():
    from webhook import units
    from webhook.reconciler import model

    before = units._parse_time.cache_info().currsize, len(model._LIMITS)
    for i in range(100):
        text = f"{i}" + "9" * 100_000
        assert units.parse_time(text) is None and model.limit_seconds(text) is None
    assert (units._parse_time.cache_info().currsize, len(model._LIMITS)) == before


# -- the scavenger cap counts what is bound ----------------------------------------------------
def _scavenger_pod(name: str, *, cpu: str, mem: str, node: str = "", selector: dict[str, str] | None = None,
                   phase: str = "Pending", owner: str | None = None, record: bool = True,
                   priority_class: str | None = "batchgate-scavenger") -> dict[str, Any]:
    """A user's Guaranteed pod in queue scavenger, as admission stored it (scavenger-qos lets it in;
    queue-priority gives it the class, time-limit the record); ``owner``: the kind of a custom
    resource that controls it (an operator's pod)."""
    res = {"cpu": cpu, "memory": mem}
    container: dict[str, Any] = {"name": "main", "image": "busybox", "resources": {"requests": res, "limits": res}}
    if record:
        container["env"] = record_env("scavenger", "24h")
    spec: dict[str, Any] = {"containers": [container]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    md: dict[str, Any] = {"name": name, "namespace": "mallory", "labels": {"batchgate.io/queue": "scavenger"},
                          "creationTimestamp": format_time(T0 - 60)}
    if owner:
        md["ownerReferences"] = [{"apiVersion": "example.com/v1", "kind": owner, "name": "x", "uid": "u-x",
                                  "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": {"phase": phase}}


def test_a_pending_pod_that_can_never_fit_is_reported_not_counted_against_the_cap():
    """Before: one Pending pod asking cpu 100000 with a node selector nothing matches counted
    against the scavengers' 70 % cap forever (every non-terminal scavenger pod counted, bound or
    not), so no ScavengerJob of any tenant ever started again."""
    w = World(sj("md", cpu="1"), nodes=1)
    w.api.put(_scavenger_pod("hog", cpu="100000", mem="1Ei", selector={"pool": "nowhere"}))
    w.step()
    assert w.step() == ["sj-start"], w.sj("md")["status"]
    # a bare pod: its expected-start estimate tells it (expected.py), once
    (told,) = w.events("NeverFits")
    assert "can never start as it is: no node matches its node selector, node affinity and tolerations" in told


@pytest.mark.parametrize(("pod_kw", "settings", "why"), [
    pytest.param({"selector": {"pool": "nowhere"}, "owner": "RayCluster"}, SETTINGS,
                 "no node matches its node selector, node affinity and tolerations", id="operator-pod"),
    pytest.param({"owner": "RayCluster"}, SETTINGS,
                 "it asks for cpu 100000, memory 1Ei; the largest node it may use (n0) has cpu 8, memory 16Gi",
                 id="operator-pod-too-big"),
    pytest.param({}, dataclasses.replace(SETTINGS, expected_start=False),
                 "it asks for cpu 100000, memory 1Ei; the largest node it may use (n0) has cpu 8, memory 16Gi",
                 id="bare-pod-without-estimates"),
])
def test_a_pending_scavenger_pod_that_can_never_fit_is_told_so_once(pod_kw, settings, why):
    """Pods the expected-start estimates do not cover (an operator's; or estimates off) are told by
    the ScavengerJob concern itself."""
    w = World(sj("md", cpu="1"), nodes=1, settings=settings)
    w.api.put(_scavenger_pod("hog", cpu="100000", mem="1Ei", **pod_kw))
    w.step()
    assert w.step() == ["sj-start"]
    (told,) = w.events("NeverFits")
    assert told == (f"this pod can never be scheduled as it is: {why}. It takes no share of the scavengers' cap; "
                    f"delete it, or make it ask for what a node has"), told
    writes = len(w.api.writes())
    w.step(60)
    assert len(w.api.writes()) == writes and len(w.events("NeverFits")) == 1  # told once


def test_a_node_condition_taint_does_not_make_a_pod_never_fit():
    from webhook.reconciler.model import NodeView
    from webhook.reconciler.scavenger import never_fits

    p = pod_view(_scavenger_pod("p", cpu="1", mem="1Gi"))
    n = NodeView("n0", "False", cpu=8000, mem=16 << 30, taints=(("node.kubernetes.io/not-ready", "", "NoSchedule"),))
    assert never_fits(p, {"n0": n}) is None
    tainted = dataclasses.replace(n, taints=(("gpu", "yes", "NoSchedule"),))
    assert never_fits(p, {"n0": tainted}) == "no node matches its node selector, node affinity and tolerations"


def test_only_bound_scavenger_pods_count_against_the_cap():
    """A pod that could fit but is not bound (yet: kube-scheduler will place it, or never will for
    reasons batchgate cannot see) takes no share; bound, it does."""
    pending = _scavenger_pod("other", cpu="5", mem="1Gi")
    w = World(sj("md", cpu="1"), nodes=1)  # 8 cpu, cap 5.6: 5 + 2 would be over it
    w.api.put(pending)
    w.step()
    assert w.step() == ["sj-start"]
    assert not w.events("NeverFits")  # it fits n0
    w2 = World(sj("md", cpu="1"), nodes=1)
    w2.api.put(_scavenger_pod("other", cpu="5", mem="1Gi", node="n0", phase="Running"))
    w2.step()
    assert w2.step() == ["sj-waiting"]
    assert "more than is left of the scavengers' share" in w2.sj("md")["status"]["message"]


# -- the scavengers' cap: membership by what cannot change once a pod exists -----------------------
def _relabelled(obj: dict[str, Any], queue: str | None) -> dict[str, Any]:
    labels = obj["metadata"]["labels"]
    if queue is None:
        del labels["batchgate.io/queue"]
    else:
        labels["batchgate.io/queue"] = queue
    return obj


@pytest.mark.parametrize("label", ["batch", None], ids=["relabelled-batch", "label-removed"])
def test_relabelling_running_scavenger_pods_does_not_take_them_out_of_the_cap(label):
    """Before: relabelling one's running scavenger pods to batchgate.io/queue=batch (or removing the
    label), which the webhook admitted on UPDATE, took them out of the cap's count: 16 of 16 CPUs
    used by scavengers against a cap of 11.2. The record and the class still say scavenger."""
    w = World(sj("md", cpu="1"), nodes=1)  # 8 cpu, cap 5.6
    w.api.put(_relabelled(_scavenger_pod("hog", cpu="5", mem="1Gi", node="n0", phase="Running"), label))
    w.step()
    assert w.step() == ["sj-waiting"]
    assert "more than is left of the scavengers' share" in w.sj("md")["status"]["message"]


@pytest.mark.parametrize(("record", "priority_class"), [
    (True, None), (False, "batchgate-scavenger")], ids=["by-the-record", "by-the-class"])
def test_either_immutable_fact_makes_a_pod_a_scavenger(record, priority_class):
    w = World(sj("md", cpu="1"), nodes=1)
    w.api.put(_relabelled(_scavenger_pod("hog", cpu="5", mem="1Gi", node="n0", phase="Running",
                                         record=record, priority_class=priority_class), "batch"))
    w.step()
    assert w.step() == ["sj-waiting"]


def test_a_pod_only_labelled_scavenger_takes_no_share():
    """The other way round: a batch pod relabelled scavenger (no scavenger record, not the class)
    does not eat the scavengers' share."""
    w = World(sj("md", cpu="1"), nodes=1)
    w.api.put(_scavenger_pod("batchy", cpu="5", mem="1Gi", node="n0", phase="Running", record=False,
                             priority_class="batchgate-batch"))
    w.step()
    assert w.step() == ["sj-start"]


# -- made-up owners: an owner counts only when the reconciler has seen it exist -------------------
def _owned_job(api_version: str, kind: str, name: str, uid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A gang Job with a 1h limit, started two hours ago, one member failed, claiming ``owner``."""
    g = group_labels("mpi", 2)
    j = job("mpi", annotations=deadline_ann("1h"), template_labels=g)
    j["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
                                         "controller": True}]
    members = [pod("mpi-a", owner=j, labels=g),
               pod("mpi-b", owner=j, labels=g, phase="Failed",
                   containers=[terminated(1, started=0, finished=60)])]
    return j, members


def _sj_snapshot(*objs: dict[str, Any]) -> Snapshot:
    real = sj("real", ns="demo")
    real["metadata"]["uid"] = "sj-uid"
    s = snapshot(*objs)
    return dataclasses.replace(s, scavenger_jobs={("demo", "real"): sj_view(real)})


@pytest.mark.parametrize("owner", [
    ("nope.example.com/v1", "ScavengerJob", "real", "sj-uid"),
    ("batchgate.io/v1alpha1", "ScavengerJob", "ghost", "ghost-uid"),
    ("batchgate.io/v1alpha1", "ScavengerJob", "real", "another-uid"),
], ids=["made-up-group", "none-of-that-name", "not-that-uid"])
def test_a_job_claiming_a_scavengerjob_it_is_not_gets_its_deadline_and_its_gang_handled(owner):
    """Before: a Job owned by "a ScavengerJob" of any apiVersion got no deadline and no gang
    handling. Only a batchgate.io/v1alpha1 ScavengerJob the reconciler sees, with that uid, runs one."""
    j, members = _owned_job(*owner)
    result = plan(_sj_snapshot(j, *members), T0 + 2 * HOUR, Settings())
    assert ("stop", "mpi") in [(a.kind, a.target.name) for a in result.actions]
    fresh = plan(_sj_snapshot(j, *members), T0 + 120, Settings())
    assert any(a.reason == "GangRestarted" for a in fresh.actions), fresh.actions


def test_a_real_scavengerjobs_job_is_left_to_its_controller():
    j, members = _owned_job("batchgate.io/v1alpha1", "ScavengerJob", "real", "sj-uid")
    result = plan(_sj_snapshot(j, *members), T0 + 2 * HOUR, Settings())
    assert [a for a in result.actions if a.target.name == "mpi"] == []


# -- found by bench/fuzz_reconciler.py (issue 27's fuzz tier) ---------------------------------------
def test_the_cache_lists_the_others_when_an_objects_name_is_not_a_string():
    """Before: the Store keyed objects by their raw name, and a list there raised out of the list
    call (no view guard covered the key), failing the list for everyone."""
    store = Store(POD, pod_view)
    odd = pod("odd")
    odd["metadata"]["name"] = ["not", "a", "name"]
    store.replace([odd, pod("fine")])
    assert ("demo", "fine") in store.items()


@pytest.mark.parametrize(("where", "value"), [
    (("spec", "nodeName"), {"a": 1}), (("metadata", "namespace"), ["demo"]), (("metadata", "uid"), ["u"]),
    (("metadata", "labels", "batchgate.io/pod-group"), ["g"]),
])
def test_a_pass_takes_views_of_values_of_wrong_types(where: tuple[str, ...], value: Any):
    """Before: a view kept such a value in a Ref, a node name or a group, and the planner's
    indexes raised TypeError (unhashable) out of plan(): every pass failed."""
    odd = pod("odd", labels={"batchgate.io/pod-group": "g", "batchgate.io/pod-group-size": "2"},
              annotations=deadline_ann("1h"))
    node: Any = odd
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = value
    late = pod("late", annotations=deadline_ann("1h"))
    result = plan(snapshot(odd, late, nodes=["node-1"]), T0 + 2 * HOUR, Settings(leader_elect=False))
    assert any(a.target.name == "late" for a in result.actions)


def test_a_maintenance_window_names_twenty_problems_however_many_it_has():
    """Before: each of 5,000 bad node names of 10 KB was quoted whole in the view's problems (50 MB)."""
    from webhook.reconciler.model import window_view

    obj = {"metadata": {"name": "w"}, "spec": {"start": "2026-11-24T06:00:00Z", "end": "garbage" * 10_000,
                                               "nodes": ["Not A Node " * 1000] * 5000}}
    v = window_view(obj)
    assert v.window is None and len(v.problems) == 21 and v.problems[-1] == "... and 4981 more problems"
    assert sum(map(len, v.problems)) < 20 * 1024


def test_a_scavengerjob_view_keeps_no_large_spec_and_a_bounded_status():
    """Before: the view kept the whole spec (a 1 MB command is storable) and every status list and text."""
    obj = sj("big")
    obj["spec"]["command"] = ["x" * 1000] * 1000
    obj["status"] = {"message": "m" * 1_000_000, "runningTimestamps": ["2026-01-01T00:00:00Z"] * 10_000,
                     "conditions": [{"type": "Running", "status": "True", "message": "m" * 10_000}] * 1000,
                     "jobName": "j" * 100_000}
    v = sj_view(obj)
    assert v.spec == {} and any("more than the 65536 a ScavengerJob's spec may have" in p for p in v.problems)
    assert len(v.running_ts) == 100 and len(v.conditions) <= 8 and "message" not in v.conditions[0]
    assert len(v.message) < 1100 and len(v.job_name) < 300
    assert sj_view(sj("small")).spec["command"] == ["sim"]  # an ordinary spec is kept as it is


def test_a_node_view_cuts_its_maintenance_annotation_and_takes_only_text_taints():
    from webhook.reconciler.model import node_view

    v = node_view({"metadata": {"name": "n", "annotations": {"batchgate.io/maintenance": "x" * 1_000_000}},
                   "spec": {"taints": [{"key": [1] * 1000, "value": "v", "effect": "NoSchedule"}] * 1000},
                   "status": {"conditions": [{"type": "Ready", "status": "T" * 1_000_000}]}})
    assert v.maintenance is not None and len(v.maintenance) < 1100
    assert v.ready is not None and len(v.ready) < 100
    assert v.taints[0] == ("", "v", "NoSchedule")


def test_a_job_view_keeps_only_the_failure_rules_the_api_server_takes():
    """Found by the fuzz: a gang Job's podFailurePolicy was kept whatever its actions and lengths."""
    from webhook.reconciler.model import job_view

    rules = [{"action": "x" * 100_000, "onExitCodes": {"operator": "In", "values": [1]}}] * 100
    rules += [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": list(range(1, 10_000))}}] * 100
    obj = {"metadata": {"name": "j", "namespace": "demo"}, "spec": {
        "podFailurePolicy": {"rules": rules[90:]},
        "template": {"metadata": {"labels": {"batchgate.io/pod-group": "g"}}, "spec": {}}}}
    policy = job_view(obj).failure_policy
    assert [r.action for r in policy.rules] == ["FailJob"] * 10  # of the first 20 rules, those with known actions
    assert len(policy.rules[0].exit_codes) == 255
    obj["spec"]["podFailurePolicy"] = {"rules": {"not": "a list"}}
    assert job_view(obj).failure_policy.rules == ()
