"""kata-cpu: the pod, VM overhead included, costs the CPU the user asked for."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture
from tests.unit.conftest import (
    check,
    checked_decide,
    decided,
    load_sample,
    only,
    settings_error,
    with_settings,
    workload,
)
from webhook.bundle import Bundle
from webhook.contract import KATA_OVERHEAD_CPU_ANNOTATION, KATA_REQUESTED_CPU_ANNOTATION
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review
from webhook.rules.kata_cpu import Infeasible, Settings, millis, plan, shrink
from webhook.workloads import shape_of
from webhook.yamlsrc import BundleError


def make_bundle(tmp_path: Path, settings: dict[str, Any] | None = None) -> Bundle:
    return with_settings(tmp_path, "kata-cpu", settings)


@pytest.fixture
def kata(bundle: Bundle) -> Bundle:
    """The shipped bundle with only this policy in it."""
    return only(bundle, "kata-cpu")


def run(bundle: Bundle, obj: dict[str, Any], *, operation: str = "CREATE") -> Decision:
    return checked_decide(bundle, obj, Caller(operation=operation, username="alice", namespace="demo"))


def sample(name: str) -> dict[str, Any]:
    return load_sample("kata-cpu", name)


def kata_pod(containers: list[tuple[str | None, str | None]], init: list[tuple[str | None, str | None]] = (),
             overhead: str = "250m", runtime: str = "kata") -> dict[str, Any]:
    def c(name: str, req: str | None, lim: str | None) -> dict[str, Any]:
        res: dict[str, Any] = {}
        if lim is not None:
            res["limits"] = {"cpu": lim}
        if req is not None:
            res["requests"] = {"cpu": req}
        return {"name": name, "image": "busybox", "resources": res}

    pod = sample("pod-kata.yaml")
    pod["spec"]["containers"] = [c(f"c{i}", r, lim) for i, (r, lim) in enumerate(containers)]
    if init:
        pod["spec"]["initContainers"] = [c(f"i{i}", r, lim) for i, (r, lim) in enumerate(init)]
    pod["spec"]["overhead"] = {"cpu": overhead}
    pod["spec"]["runtimeClassName"] = runtime
    return pod


def cpu(obj: dict[str, Any], key: str, i: int, kind: str) -> str | None:
    return (obj["spec"][key][i].get("resources") or {}).get(kind, {}).get("cpu")


# -- the arithmetic ------------------------------------------------------------------
@pytest.mark.parametrize(("values", "cut", "floor", "caps", "want"), [
    pytest.param([4000], 250, 100, None, [3750], id="one-container"),
    pytest.param([3000, 1000], 250, 100, None, [2813, 937], id="tie-goes-to-first"),
    pytest.param([1000, 1000, 1000], 100, 100, None, [967, 967, 966], id="thirds"),
    pytest.param([2000, 50], 250, 100, None, [1750, 50], id="below-floor-untouched"),
    pytest.param([2000, 110], 250, 100, None, [1760, 100], id="clamped-at-floor-others-give-more"),
    pytest.param([1000, 1000], 250, 100, [1000, 800], [950, 800], id="cap-respected"),
    pytest.param([350], 250, 100, None, [100], id="exactly-the-floor"),
])
def test_shrink(values, cut, floor, caps, want):
    got = shrink(values, cut, floor, caps)
    assert got == want
    assert sum(got) == sum(values) - cut


@pytest.mark.parametrize(("values", "cut", "floor"), [
    pytest.param([300], 250, 100, id="one-too-small"),
    pytest.param([150, 150], 250, 100, id="two-too-small"),
    pytest.param([50, 50], 1, 100, id="all-below-floor-already"),
])
def test_shrink_infeasible(values, cut, floor):
    with pytest.raises(Infeasible):
        shrink(values, cut, floor)


def test_shrink_properties_on_random_inputs():
    rnd = random.Random(20261121)
    for _ in range(3000):
        n = rnd.randint(1, 5)
        values = [rnd.choice([0, 10, 50, 100, 250, 333, 500, 1000, 1500, 3000, 7777, 16000]) for _ in range(n)]
        caps = [max(0, v - rnd.choice([0, 0, 1, 30, 200])) for v in values] if rnd.random() < 0.5 else None
        cut, floor = rnd.choice([1, 100, 250, 333, 1000]), rnd.choice([1, 100, 250])
        try:
            got = shrink(values, cut, floor, caps)
        except Infeasible:
            lows = [min(v, floor) for v in values]
            highs = [min(v, c) for v, c in zip(values, caps or values, strict=True)]
            # only when no vector within the bounds sums to the target
            feasible = sum(lows) <= sum(values) - cut <= sum(highs) and all(
                lo <= hi for lo, hi in zip(lows, highs, strict=True))
            assert not feasible, (values, cut, floor, caps)
            continue
        assert sum(got) == sum(values) - cut, (values, cut, floor, caps, got)
        for i, (v, g) in enumerate(zip(values, got, strict=True)):
            assert min(v, floor) <= g <= v, (values, cut, floor, got)
            if caps:
                assert g <= caps[i]


def test_pod_totals_stay_what_was_asked_on_random_pods():
    """Effective pod request (max(sum app, max init)) + overhead == what the user asked; same for limits."""
    rnd = random.Random(7)
    settings = Settings()
    checked = 0
    for _ in range(2000):
        app = []
        for _ in range(rnd.randint(1, 4)):
            r = rnd.choice([100, 250, 500, 1000, 2000, 3500, 8000])
            app.append((r, r + rnd.choice([0, 0, 0, 500, 1000])))
        init = [(r, r) for r in (rnd.choice([100, 500, 4000, 12000]) for _ in range(rnd.randint(0, 2)))]
        overhead = rnd.choice([100, 250, 500])

        def spec(app=app, init=init):
            return {
                "containers": [{"name": f"c{i}", "resources": {"requests": {"cpu": f"{r}m"}, "limits": {"cpu": f"{lim}m"}}}
                               for i, (r, lim) in enumerate(app)],
                "initContainers": [{"name": f"i{i}", "resources": {"requests": {"cpu": f"{r}m"}, "limits": {"cpu": f"{lim}m"}}}
                                   for i, (r, lim) in enumerate(init)],
            }

        try:
            p = plan(spec(), overhead, settings)
        except Infeasible:
            assert sum(r for r, _ in app) - overhead < sum(min(r, 100) for r, _ in app)
            continue
        checked += 1
        value = {**p.old, **p.new}
        for kind in ("requests", "limits"):
            before = max([sum(p.old[("containers", i, kind)] for i in range(len(app)))]
                         + [p.old[("initContainers", i, kind)] for i in range(len(init))])
            after = max([sum(value[("containers", i, kind)] for i in range(len(app)))]
                        + [value[("initContainers", i, kind)] for i in range(len(init))])
            if before - overhead >= 100:
                assert after + overhead == before, (app, init, overhead, kind, p.new)
        containers = [(key, i) for key, n in (("containers", len(app)), ("initContainers", len(init)))
                      for i in range(n)]
        for key, i in containers:
            assert value[(key, i, "requests")] <= value[(key, i, "limits")]
        if all(p.old[(k, i, "requests")] == p.old[(k, i, "limits")] for k, i in containers):
            assert all(value[(k, i, "requests")] == value[(k, i, "limits")] for k, i in containers), \
                "a Guaranteed pod stays Guaranteed"
    assert checked > 1000


@pytest.mark.parametrize(("text", "want"), [("250m", 250), ("4", 4000), ("0.5", 500), ("1.0001", 1001), ("100u", 1)])
def test_millis_rounds_up_like_the_api_server(text, want):
    assert millis(text) == want


# -- the rule on requests --------------------------------------------------------------
def test_real_fixture_loses_the_overhead(bundle):
    body = fixture("pod-create-kata-runtimeclass-overhead.mutate.json")
    d = decided(body, bundle, phase="mutate")
    c = d.obj["spec"]["containers"][0]["resources"]
    assert c["requests"]["cpu"] == c["limits"]["cpu"] == "3750m"
    assert json.loads(d.obj["metadata"]["annotations"][KATA_REQUESTED_CPU_ANNOTATION]) == {"c": {"limits": "4", "requests": "4"}}
    assert d.obj["spec"]["overhead"] == {"cpu": "250m", "memory": "160Mi"}, "overhead is the API server's"
    assert c["requests"]["memory"] == "4Gi"
    assert any("250m CPU of VM overhead" in w for w in d.warnings)


def test_fixture_without_runtime_class_is_untouched(kata):
    d = decided(fixture("pod-create-by-user.mutate.json"), kata, phase="mutate")
    assert d.patch == [] and d.warnings == []


@pytest.mark.parametrize(("containers", "init", "want_app", "want_init"), [
    pytest.param([("4", "4")], [], [("3750m", "3750m")], [], id="guaranteed"),
    pytest.param([("1", "2")], [], [("750m", "1750m")], [], id="burstable"),
    pytest.param([("2", None)], [], [("1750m", None)], [], id="no-limit"),
    pytest.param([("2", "2"), ("1", None)], [], [("1833m", "2"), ("917m", None)], [], id="one-unbounded-limits-kept"),
    pytest.param([("2", "2")], [("4", "4")], [("1750m", "1750m")], [("3750m", "3750m")], id="big-init-capped"),
    pytest.param([("2", "2")], [("500m", "500m")], [("1750m", "1750m")], [("500m", "500m")], id="small-init-kept"),
    pytest.param([("2", "2")], [("1900m", "1900m")], [("1750m", "1750m")], [("1750m", "1750m")], id="init-between"),
    pytest.param([("2", "2"), (None, None)], [], [("1750m", "2"), (None, None)], [], id="container-without-cpu"),
])
def test_subtract(kata, containers, init, want_app, want_init):
    d = run(kata, kata_pod(containers, init))
    assert d.allowed
    assert [(cpu(d.obj, "containers", i, "requests"), cpu(d.obj, "containers", i, "limits"))
            for i in range(len(containers))] == want_app
    assert [(cpu(d.obj, "initContainers", i, "requests"), cpu(d.obj, "initContainers", i, "limits"))
            for i in range(len(init))] == want_init


def test_infeasible_is_denied_with_the_numbers(kata):
    d = run(kata, kata_pod([("200m", "200m"), ("150m", "150m")]))
    assert not d.allowed
    assert "250m CPU of VM overhead" in d.message
    assert "(200m + 150m)" in d.message
    assert "below 100m" in d.message and "at least 450m" in d.message


@pytest.mark.parametrize("runtime", ["runc", "gvisor", "Kata"])
def test_other_runtime_classes_are_untouched(kata, runtime):
    assert run(kata, kata_pod([("4", "4")], runtime=runtime)).patch == []


def test_annotation_present_means_adjusted(kata):
    pod = kata_pod([("4", "4")])
    pod["metadata"]["annotations"] = {KATA_REQUESTED_CPU_ANNOTATION: '{"c0":{"limits":"4","requests":"4"}}'}
    assert run(kata, pod).patch == []


def test_zero_overhead_or_none(kata):
    assert run(kata, kata_pod([("4", "4")], overhead="0")).patch == []
    pod = kata_pod([("4", "4")])
    del pod["spec"]["overhead"]
    assert run(kata, pod).patch == []


def test_only_create(kata):
    pod = kata_pod([("4", "4")])
    d = decided(synthetic_review(pod, Caller(operation="UPDATE", username="alice", namespace="demo"), old_object=pod),
               kata, phase="check")
    assert d.patch == []


# -- settings ---------------------------------------------------------------------------
@pytest.mark.parametrize(("containers", "want"), [
    pytest.param([("4", "4")], [("3", "3")], id="3750m-to-3"),
    pytest.param([("3", "3"), ("1", "1")], [("2", "2"), ("937m", "937m")], id="below-one-cpu-kept"),
    pytest.param([("1", "4")], [("750m", "3")], id="burstable-request-below"),
    pytest.param([("4", None)], [("3750m", None)], id="no-limit-nothing-to-round"),
])
def test_whole_vcpu(tmp_path, containers, want):
    b = make_bundle(tmp_path, {"mode": "wholeVCPU"})
    d = run(b, kata_pod(containers))
    assert [(cpu(d.obj, "containers", i, "requests"), cpu(d.obj, "containers", i, "limits"))
            for i in range(len(containers))] == want


def test_runtime_class_globs_and_min_cpu(tmp_path):
    b = make_bundle(tmp_path, {"runtimeClasses": ["kata-qemu", "kata-fc*"], "minCPU": "1"})
    assert run(b, kata_pod([("4", "4")], runtime="kata")).patch == []
    assert cpu(run(b, kata_pod([("4", "4")], runtime="kata-fc-small")).obj, "containers", 0, "limits") == "3750m"
    d = run(b, kata_pod([("1", "1")], runtime="kata-qemu"))
    assert not d.allowed and "below 1" in d.message


def _bad(tmp_path: Path, settings_yaml: str) -> BundleError:
    return settings_error(tmp_path, "kata-cpu", settings_yaml)


@pytest.mark.parametrize(("settings", "line", "field", "text"), [
    pytest.param("    mode: round\n", 8, "spec.settings.mode", "expected one of subtract, wholeVCPU", id="mode"),
    pytest.param("    minCPU: lots\n", 8, "spec.settings.minCPU", "expected a CPU quantity", id="min-cpu-garbage"),
    pytest.param("    minCPU: 0.5m\n", 8, "spec.settings.minCPU", "whole millicores", id="min-cpu-fraction"),
    pytest.param("    runtimeClasses: kata\n", 8, "spec.settings.runtimeClasses", "expected a list", id="classes-not-list"),
    pytest.param("    runtimeClasses: []\n", 8, "spec.settings.runtimeClasses", "at least one", id="classes-empty"),
    pytest.param("    overhead: 1\n", 8, "spec.settings.overhead", "unknown field", id="unknown-field"),
    pytest.param("    overheads: [kata]\n", 8, "spec.settings.overheads", "expected a mapping", id="overheads-list"),
    pytest.param("    overheads:\n      kata: lots\n", 9, "spec.settings.overheads.kata", "expected a CPU quantity",
                 id="overheads-garbage"),
    pytest.param("    overheads:\n      kata: 0.5m\n", 9, "spec.settings.overheads.kata", "whole millicores",
                 id="overheads-fraction"),
])
def test_bad_settings_name_file_line_field(tmp_path, settings, line, field, text):
    err = _bad(tmp_path, settings)
    assert err.file.endswith("kata-cpu/policy.yaml")
    assert (err.line, err.field) == (line, field)
    assert text in err.message


# -- pod templates ---------------------------------------------------------------------------
TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")


def _kata_spec(containers: list[tuple[str | None, str | None]], runtime: str = "kata") -> dict[str, Any]:
    spec = copy.deepcopy(kata_pod(containers, runtime=runtime)["spec"])
    for key in ("overhead", "volumes", "tolerations", "priority", "serviceAccount", "serviceAccountName"):
        spec.pop(key, None)
    for c in spec["containers"]:
        c.pop("volumeMounts", None)
    return spec


def pod_made_from(obj: dict[str, Any], overhead: str) -> dict[str, Any]:
    """The Pod a controller makes from ``obj``'s template, as the API server stores it before
    webhooks: requests defaulted from limits, spec.overhead from the RuntimeClass."""
    group = obj["apiVersion"].rpartition("/")[0]
    shape = shape_of(group, obj["kind"])
    assert shape is not None
    meta, spec = shape.template(obj)
    spec = copy.deepcopy(spec)
    for c in spec["containers"]:
        res = c.setdefault("resources", {})
        for k, v in (res.get("limits") or {}).items():
            res.setdefault("requests", {}).setdefault(k, v)
    spec["overhead"] = {"cpu": overhead}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **copy.deepcopy(meta)}, "spec": spec}


def _cpus(pod: dict[str, Any]) -> list[tuple[str | None, str | None]]:
    return [(cpu(pod, "containers", i, "requests"), cpu(pod, "containers", i, "limits"))
            for i in range(len(pod["spec"]["containers"]))]


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_every_template_kind_gets_what_its_pods_would(kata, kind):
    """The template is adjusted with the declared overhead exactly as a Pod made from the
    unadjusted template is; a Pod made from the adjusted template is left as it is."""
    obj = workload(kind, spec=_kata_spec([("3", "3"), (None, "1")]))
    d = check(obj, bundle=kata)
    assert d.allowed and d.obj is not None
    assert any("pod template: runtimeClassName kata adds 250m" in w for w in d.warnings)
    direct = check(pod_made_from(obj, "250m"), bundle=kata)
    from_template = pod_made_from(d.obj, "250m")
    assert _cpus(from_template) == _cpus(direct.obj) == [("2813m", "2813m"), ("937m", "937m")]
    again = check(from_template, bundle=kata, user="system:serviceaccount:kube-system:replicaset-controller")
    assert again.patch == [] and again.warnings == []


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_a_template_whose_pods_would_be_denied_is_denied(kata, kind):
    d = check(workload(kind, spec=_kata_spec([("300m", "300m")])), bundle=kata)
    assert not d.allowed
    assert "pod template: runtimeClassName kata: the runtime class adds 250m CPU" in d.message
    assert "at least 350m" in d.message


def test_pods_of_adjusted_templates_match_direct_adjustment_on_random_templates(kata):
    """Whatever the containers: a Pod made from the adjusted template ends (after its own
    admission, with the real overhead, equal to or other than the declared one) with the CPU
    the Pod made from the unadjusted template gets, and a second pass changes nothing."""
    rnd = random.Random(13)
    compared = 0
    for _ in range(300):
        containers = []
        for _ in range(rnd.randint(1, 3)):
            r = rnd.choice([None, "150m", "500m", "1", "2500m", "4"])
            lim = rnd.choice([None, r, "4", "6"]) if r is not None else rnd.choice(["1", "3"])
            if r is not None and lim is not None and millis(lim) < millis(r):
                lim = r
            containers.append((r, lim))
        obj = workload(rnd.choice(TEMPLATE_KINDS), spec=_kata_spec(containers))
        real = rnd.choice(["250m", "250m", "300m", "100m"])
        direct = check(pod_made_from(obj, real), bundle=kata)
        d = check(obj, bundle=kata)
        if not d.allowed:
            assert real != "250m" or not direct.allowed
            continue
        made = check(pod_made_from(d.obj, real), bundle=kata)
        assert made.allowed == direct.allowed, (containers, real, made.message, direct.message)
        if made.allowed:
            compared += 1
            assert _cpus(made.obj) == _cpus(direct.obj), (containers, real)
    assert compared > 150


def test_templates_without_a_declared_overhead_are_left_to_their_pods(tmp_path):
    b = make_bundle(tmp_path, {"runtimeClasses": ["kata*"], "overheads": {"kata-qemu": "300m", "kata*": "250m"}})
    dep = workload("Deployment", spec=_kata_spec([("4", "4")], runtime="kata-clh"))
    assert cpu_of_template(check(dep, bundle=b).obj) == "3750m"  # kata*: 250m
    dep = workload("Deployment", spec=_kata_spec([("4", "4")], runtime="kata-qemu"))
    assert cpu_of_template(check(dep, bundle=b).obj) == "3700m"  # its own name beats the glob
    plain = make_bundle(tmp_path / "2", {"runtimeClasses": ["kata*"]})
    d = check(dep, bundle=plain)
    assert d.patch == [] and d.warnings == []


def cpu_of_template(obj: dict[str, Any]) -> str | None:
    return obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]  # type: ignore[no-any-return]


def test_a_forged_overhead_marker_with_a_bad_record_is_denied(kata):
    pod = kata_pod([("4", "4")])
    pod["metadata"]["annotations"] = {KATA_REQUESTED_CPU_ANNOTATION: "not json", KATA_OVERHEAD_CPU_ANNOTATION: "250m"}
    d = run(kata, pod)
    assert not d.allowed and KATA_REQUESTED_CPU_ANNOTATION in d.message


def test_the_opt_out_still_holds_for_templates(kata):
    """The annotation without the overhead marker: set by hand, the workload is left alone."""
    dep = workload("Deployment", spec=_kata_spec([("4", "4")]))
    dep["spec"]["template"]["metadata"]["annotations"] = {KATA_REQUESTED_CPU_ANNOTATION: "{}"}
    d = check(dep, bundle=kata)
    assert d.patch == [] and d.warnings == []


def test_a_template_update_that_drops_the_cpu_request_is_adjusted_from_the_limit(kata):
    first = check(workload("Deployment", spec=_kata_spec([("2", "2")])), bundle=kata).obj
    assert first is not None
    updated = copy.deepcopy(first)
    del updated["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    updated["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "3"
    d = check(updated, bundle=kata, operation="UPDATE", old=first)
    c = d.obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert (c["requests"]["cpu"], c["limits"]["cpu"]) == ("2750m", "2750m")
