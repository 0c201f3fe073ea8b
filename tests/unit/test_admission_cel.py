"""The CEL that manifests/ hands the API server agrees with the bundle (webhook.generate).

* matchConditions: whenever the API server would not call a webhook for a request its rules
  and namespaceSelector send it, ``webhook.engine.decide`` answers that request allowed, with
  no patch and no warning: skipping it changes nothing. (One deliberate exception, the Namespace
  webhook leaving kube-system & co. out: there the ValidatingAdmissionPolicy must deny what the
  engine denies.)
* ValidatingAdmissionPolicies: whatever one denies, the engine denies too (they may never stop
  what the webhook lets through); and for the rules they carry (who may set the opt-out label and
  the reconciler's annotations, admin-only priority classes) they deny what the engine's policy
  denies, so an outage of the webhook does not open them.

The requests: every suite case of policies/, the recorded AdmissionReviews of tests/fixtures, and
every sample, corpus and example object as a CREATE and as UPDATEs that each change one thing
(a finalizer, an unrelated label, the queue label, a time limit, a reconciler annotation, the pod
template, the spec, ...), sent by a user, an admin, a controller and the reconciler. The CEL runs
in cel-cpp here; tests/e2e/test_admission_policies.py runs it in a real kube-apiserver.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_expr_python import cel as celx
from cel_expr_python.ext import ext_strings

from tests.conftest import POLICIES, ROOT
from webhook.bundle import Bundle, load_bundle
from webhook.engine import BadReview, Decision, decide
from webhook.generate import (
    HOOKS,
    RESOURCES,
    admission_policies,
    creates_decided,
    webhook_objects,
)
from webhook.kubefields import NAMESPACE_NAME_LABEL
from webhook.offline import Caller, synthetic_review, with_namespace_labels
from webhook.rules import REGISTRY
from webhook.rules import load_bundle as load_default
from webhook.units import parse_quantity
from webhook.workloads import shape_of
from webhook.yamlsrc import load_documents

FIXTURES = ROOT / "tests" / "fixtures"  # admission-k8s-<version>/*.json: AdmissionReviews an API server sent
CORPUS = ROOT / "tests" / "corpus" / "manifests"
SA = "system:serviceaccount:"
CALLERS = {
    "alice": ("alice", ("devs", "system:authenticated")),
    "admin": ("root", ("batchgate:admins", "system:authenticated")),
    "job-controller": (f"{SA}kube-system:job-controller",
                       ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")),
    "reconciler": (f"{SA}batchgate-system:batchgate-reconciler",
                   ("system:serviceaccounts", "system:serviceaccounts:batchgate-system", "system:authenticated")),
}
NAMESPACES = ("team-a", "gpu-lab", "notebooks", "kube-system")


# -- CEL, as the API server runs it -----------------------------------------------------------
# cel-cpp (cel-expr-python): CEL's standard semantics, as cel-go has them in the API server
# (heterogeneous equality, short-circuits that absorb errors, the strings extension's join()).
# Kubernetes' quantity library (quantity(), isGreaterThan()), which cel-cpp lacks: a quantity as a
# double here (exact enough for the quantities of the tests' objects).
_QUANTITY = [
    celx.FunctionDecl("quantity", [celx.Overload("quantity_string", celx.Type.DOUBLE, [celx.Type.STRING],
                                                 impl=lambda s: float(parse_quantity(s)))]),
    celx.FunctionDecl("isGreaterThan", [celx.Overload("quantity_gt", celx.Type.BOOL, [celx.Type.DOUBLE, celx.Type.DOUBLE],
                                                      is_member=True, impl=lambda a, b: a > b)]),
]
_ENV = celx.NewEnv(variables={name: celx.Type.DYN for name in ("object", "oldObject", "request", "variables", "v")},
                   extensions=[ext_strings.ExtStrings()], functions=_QUANTITY)


@functools.cache
def _program(expression: str) -> Any:
    return _ENV.compile(expression)


def cel(expression: str, data: dict[str, Any]) -> Any:
    """Evaluate (``data``: variable -> JSON value); an evaluation error fails the test: the
    generated CEL must never err (a webhook's condition that errs fails closed or skips,
    depending on its failurePolicy; a ValidatingAdmissionPolicy's fails closed)."""
    result = _program(expression).eval(data=data)
    if result.type() == celx.Type.ERROR:
        raise AssertionError(f"CEL error {result.value()} in:\n{expression}")
    return result.plain_value()


def activation(review: dict[str, Any]) -> dict[str, Any]:
    req = review["request"]
    return {"object": req.get("object"), "oldObject": req.get("oldObject"),
            "request": {k: v for k, v in req.items() if k not in ("object", "oldObject")}}


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    for e in (selector or {}).get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values, "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return all(labels.get(k) == v for k, v in (selector or {}).get("matchLabels", {}).items())


def _sent(rules: list[dict[str, Any]], selector: dict[str, Any] | None, req: dict[str, Any]) -> bool:
    """The rules and namespaceSelector send this request (no namespace is opted out here)."""
    res = req["resource"]
    resource = res["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")
    if not any(res["group"] in r["apiGroups"] and resource in r["resources"] and req["operation"] in r["operations"]
               for r in rules):
        return False
    namespaced = bool(req.get("namespace")) and req["kind"]["kind"] != "Namespace"
    return not namespaced or _selects(selector, {NAMESPACE_NAME_LABEL: req["namespace"]})


@dataclasses.dataclass
class Hook:
    name: str
    phase: str
    config: dict[str, Any]

    def sent(self, req: dict[str, Any]) -> bool:
        return _sent(self.config["rules"], self.config.get("namespaceSelector"), req)

    def called(self, act: dict[str, Any]) -> tuple[bool, list[str]]:
        """Whether the API server calls it, and the conditions that said no."""
        no = [c["name"] for c in self.config.get("matchConditions", []) if not cel(c["expression"], act)]
        return not no, no


@dataclasses.dataclass
class Policy:
    """A ValidatingAdmissionPolicy with its binding (validationActions: Deny)."""

    name: str
    spec: dict[str, Any]
    binding: dict[str, Any]

    def denies(self, req: dict[str, Any], act: dict[str, Any]) -> str | None:
        """The message it denies with, or None."""
        c = self.spec["matchConstraints"]
        if not _sent(c["resourceRules"], c.get("namespaceSelector"), req):
            return None
        # the binding's namespaceSelector, intersected with the policy's match (no resourceRules of its own)
        bound = self.binding.get("matchResources", {})
        assert "resourceRules" not in bound, self.name
        if not _sent(c["resourceRules"], bound.get("namespaceSelector"), req):
            return None
        if not all(cel(m["expression"], act) for m in self.spec.get("matchConditions", [])):
            return None
        variables: dict[str, Any] = {}
        for v in self.spec.get("variables", []):
            variables[v["name"]] = cel(v["expression"], {**act, "variables": variables})
        scope = {**act, "variables": variables}
        for check in self.spec["validations"]:
            if not cel(check["expression"], scope):
                return str(cel(check["messageExpression"], scope) if "messageExpression" in check
                           else check["message"])
        return None


@dataclasses.dataclass
class Config:
    """What manifests/ would hold for one bundle."""

    bundle: Bundle
    hooks: list[Hook]
    policies: list[Policy]


@functools.cache
def config_for(root: str) -> Config:
    return config_of(_with_default_policies(root))


def config_of(bundle: Bundle) -> Config:
    mutating, validating = webhook_objects(bundle)
    hooks = [Hook(h["name"], "mutate", h) for h in mutating["webhooks"]] + \
            [Hook(h["name"], "validate", h) for h in validating["webhooks"]]
    objects = admission_policies(bundle)
    bindings = {o["spec"]["policyName"]: o["spec"] for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    policies = [Policy(o["metadata"]["name"], o["spec"], bindings[o["metadata"]["name"]]) for o in objects
                if o["kind"] == "ValidatingAdmissionPolicy"]
    return Config(bundle, hooks, policies)


def _with_default_policies(root: str) -> Bundle:
    """A suite's variant bundle.yaml runs with the default bundle's policies (as `batchgate test`)."""
    default = load_default(POLICIES)
    if Path(root) == POLICIES:
        bundle = default
    else:
        other = load_bundle(root, REGISTRY, deployable=False)
        bundle = dataclasses.replace(other, policies=default.policies, mutating=default.mutating,
                                     validating=default.validating)
    return with_namespace_labels(bundle, None, "not published")


# -- the requests -------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    id: str
    review: dict[str, Any]
    bundle_root: str = str(POLICIES)


def _load(path: Path) -> list[dict[str, Any]]:
    try:
        docs = load_documents(path.read_text(), str(path))
    except Exception:  # a deliberately malformed sample
        return []
    out = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "List":
            out += [i for i in d.get("items") or [] if isinstance(i, dict)]
        elif isinstance(d, dict):
            out.append(d)
    return out


def _case_object(base: Path, v: Any) -> dict[str, Any] | None:
    """A suite case's object: a sample file's path or the object itself."""
    if v is None:
        return None
    if isinstance(v, str):
        found = _load(base / v)
        return found[0] if len(found) == 1 else None
    return copy.deepcopy(v)  # type: ignore[no-any-return]


def _suite_cases() -> Iterator[Case]:
    for suite in sorted(POLICIES.glob("*/suite.yaml")):
        doc = yaml.safe_load(suite.read_text())
        base = suite.parent
        for i, case in enumerate(doc.get("cases") or []):
            o, old = _case_object(base, case.get("object")), _case_object(base, case.get("oldObject"))
            if o is None or (case.get("oldObject") is not None and old is None) or case.get("namespaceLabels"):
                continue
            r = case.get("request") or {}
            caller = Caller(operation=r.get("operation", "CREATE"), username=r.get("user", "alice"),
                            groups=tuple(r.get("groups", ("system:authenticated",))),
                            namespace=r.get("namespace", "default"), subresource=r.get("subResource", ""))
            root = str((base / case["bundle"]).resolve()) if case.get("bundle") else str(POLICIES)
            yield Case(f"suite:{suite.parent.name}[{i}]", synthetic_review(o, caller, old_object=old), root)


def _fixture_cases() -> Iterator[Case]:
    for path in sorted(FIXTURES.glob("*/*.json")):
        yield Case(f"fixture:{path.stem}", json.loads(path.read_text()))


def _objects() -> Iterator[tuple[str, dict[str, Any]]]:
    files = [*sorted(POLICIES.glob("*/samples/**/*.yaml")), *sorted(CORPUS.glob("*.yaml")),
             *sorted((ROOT / "examples").glob("**/*.yaml"))]
    kinds = {(h_group, h_kind) for h_group, h_kind in _routable_kinds()}
    for path in files:
        for j, o in enumerate(_load(path)):
            group = str(o.get("apiVersion") or "").rpartition("/")[0]
            if (group, o.get("kind")) in kinds and isinstance(o.get("metadata"), dict):
                yield f"{path.relative_to(ROOT)}#{j}", o


def _routable_kinds() -> set[tuple[str, str]]:
    from webhook.generate import RESOURCES

    return {(r.group, r.kind) for r in RESOURCES}


def _edit(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy with ``value`` at ``path`` (None: removed)."""
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node.get(key), dict) or node.get(key) is None else node
        if not isinstance(node, dict):
            return out
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return out


def _variants(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """UPDATEs of ``obj``, each changing one thing."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = str(obj["kind"])
    shape = shape_of(group, kind)
    meta = ("metadata",)
    ann, lab = (*meta, "annotations"), (*meta, "labels")
    out: list[tuple[str, dict[str, Any]]] = [
        ("unchanged", obj),
        ("finalizer", _edit(obj, (*meta, "finalizers"), ["example.com/keep"])),
        ("other label", _edit(obj, (*lab, "app.kubernetes.io/part-of"), "x")),
        ("other annotation", _edit(obj, (*ann, "kubectl.kubernetes.io/last-applied-configuration"), "{}")),
        ("queue interactive", _edit(obj, (*lab, "batchgate.io/queue"), "interactive")),
        ("queue scavenger", _edit(obj, (*lab, "batchgate.io/queue"), "scavenger")),
        ("queue removed", _edit(obj, (*lab, "batchgate.io/queue"), None)),
        ("exclusive", _edit(obj, (*lab, "batchgate.io/exclusive"), "true")),
        ("time limit 8d", _edit(obj, (*ann, "batchgate.io/time-limit"), "8d")),
        ("time limit 1h", _edit(obj, (*ann, "batchgate.io/time-limit"), "1h")),
        ("time limit removed", _edit(obj, (*ann, "batchgate.io/time-limit"), None)),
        ("expected runtime", _edit(obj, (*ann, "batchgate.io/expected-runtime"), "90d")),
        ("started-at", _edit(obj, (*ann, "batchgate.io/started-at"), "2030-01-01T00:00:00Z")),
        ("deadline removed", _edit(obj, (*ann, "batchgate.io/deadline"), None)),
        ("connect-to", _edit(obj, (*ann, "batchgate.io/connect-to"), "Not A Name")),
        ("network label", _edit(obj, (*lab, "batchgate.io/network"), "UPPER")),
        ("seal", _edit(obj, (*ann, "batchgate.io/admitted"), "v1.k.forged")),
        ("spec", _edit(obj, ("spec", "reason" if kind == "MaintenanceWindow" else "duration"), "12h")),
    ]
    if kind == "Namespace":
        out += [
            ("opt out", _edit(obj, (*lab, "batchgate.io/admission"), "disabled")),
            ("label grant key", _edit(obj, (*lab, "team"), "physics")),
            ("name label forged", _edit(obj, (*lab, NAMESPACE_NAME_LABEL), "kube-system")),
        ]
    if shape is not None and not shape.is_pod:
        pm, ps = tuple(map(str, shape.pod_meta)), tuple(map(str, shape.pod_spec))
        out += [
            ("template label", _edit(obj, (*pm, "labels", "app"), "y")),
            ("template queue", _edit(obj, (*pm, "labels", "batchgate.io/queue"), "scavenger")),
            ("template time limit", _edit(obj, (*pm, "annotations", "batchgate.io/time-limit"), "30d")),
            ("template admin class", _edit(obj, (*ps, "priorityClassName"), "batchgate-urgent")),
            ("template other class", _edit(obj, (*ps, "priorityClassName"), "system-node-critical")),
            ("template image", _edit(obj, (*ps, "containers"), [{"name": "main", "image": "busybox:2"}])),
        ]
        if kind == "CronJob":
            out.append(("job template queue", _edit(obj, ("spec", "jobTemplate", "metadata", "labels",
                                                          "batchgate.io/queue"), "interactive")))
    if shape is not None and shape.is_pod:
        out.append(("pod admin class", _edit(obj, ("spec", "priorityClassName"), "batchgate-urgent")))
    return out


def _resized(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """In-place resizes (pods/resize) of a Pod: every container's cpu request raised (limits with
    it), or its memory request lowered, or a request added where there was none, or its memory limit
    raised alone."""
    def each(change: Any) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        for key in ("initContainers", "containers"):
            for c in out.get("spec", {}).get(key) or []:
                if isinstance(c, dict):
                    change(c.setdefault("resources", {}))
        return out

    def up(r: dict[str, Any]) -> None:
        r.setdefault("requests", {})["cpu"] = "64"
        if "cpu" in (r.get("limits") or {}):
            r["limits"]["cpu"] = "64"

    def down(r: dict[str, Any]) -> None:
        if "memory" in (r.get("requests") or {}):
            r["requests"]["memory"] = "1Mi"

    def added(r: dict[str, Any]) -> None:
        r.setdefault("requests", {}).setdefault("ephemeral-storage", "1Gi")

    def limit(r: dict[str, Any]) -> None:  # a limit alone: a scavenger's may not rise either
        if "memory" in (r.get("limits") or {}):
            r["limits"]["memory"] = "64Gi"

    return [("resize cpu up", each(up)), ("resize memory down", each(down)), ("resize request added", each(added)),
            ("resize memory limit up", each(limit))]


def _running(obj: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """A ScavengerJob as stored once it started a segment (status.jobName), and edits of it: its
    pods or a resource raised (a request with its limit, a limit alone, one added), or lowered; and
    the same raise once it finished (rules.scavengerjob.grown_while_running)."""
    base = _edit(obj, ("status",), {"phase": "Running", "segment": 1, "jobName": "sj-1"})

    def res(change: Any) -> dict[str, Any]:
        out = copy.deepcopy(base)
        r = out.get("spec", {}).get("resources")
        if isinstance(r, dict):
            change(r)
        return out

    def up(r: dict[str, Any]) -> None:
        for key in ("requests", "limits"):
            if isinstance(r.get(key), dict) and "cpu" in r[key]:
                r[key]["cpu"] = "64"

    def limit(r: dict[str, Any]) -> None:
        if isinstance(r.get("limits"), dict):
            r["limits"]["memory"] = "64Gi"

    def added(r: dict[str, Any]) -> None:
        r.setdefault("limits", {})["nvidia.com/gpu"] = 1

    def down(r: dict[str, Any]) -> None:
        for key in ("requests", "limits"):
            if isinstance(r.get(key), dict) and "memory" in r[key]:
                r[key]["memory"] = "1Mi"

    done = _edit(base, ("status", "phase"), "Completed")
    pods = base.get("spec", {}).get("pods", 1)
    return base, [("running pods up", _edit(base, ("spec", "pods"), (pods if isinstance(pods, int) else 1) + 3)),
                  ("running pods down", _edit(base, ("spec", "pods"), 1)),
                  ("running cpu up", res(up)), ("running memory limit up", res(limit)),
                  ("running gpu added", res(added)), ("running memory down", res(down)),
                  ("waiting pods up", _edit(_edit(base, ("status", "jobName"), None), ("spec", "pods"), 99)),
                  ("finished pods up", _edit(done, ("spec", "pods"), 99))]


def _owned(obj: dict[str, Any]) -> dict[str, Any]:
    return _edit(obj, ("metadata", "ownerReferences"), [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "owner", "uid": "u-1", "controller": True}])


def _object_cases() -> Iterator[Case]:
    names = list(CALLERS)
    for n, (where, obj) in enumerate(_objects()):
        kind = obj["kind"]
        namespaces = [""] if kind in ("Namespace", "MaintenanceWindow") else [NAMESPACES[n % len(NAMESPACES)]]
        for ns in namespaces:
            base = copy.deepcopy(obj)
            if ns:
                base["metadata"]["namespace"] = ns
            for c in names:  # CREATE by each caller (a controller's with a controlling owner)
                user, groups = CALLERS[c]
                o = _owned(base) if c == "job-controller" else base
                yield Case(f"{where} CREATE by {c}", synthetic_review(
                    o, Caller("CREATE", user, groups, ns or "default")))
            for i, (what, new) in enumerate(_variants(base)):
                for c in (names if what == "unchanged" else dict.fromkeys(["alice", names[i % len(names)]])):
                    user, groups = CALLERS[c]
                    old, changed = (_owned(base), _owned(new)) if c == "job-controller" else (base, new)
                    yield Case(f"{where} UPDATE {what} by {c}", synthetic_review(
                        changed, Caller("UPDATE", user, groups, ns or "default"), old_object=old))
            running, edits = _running(base) if kind == "ScavengerJob" else (base, [])
            for i, (what, new) in enumerate(edits):
                for c in dict.fromkeys(["alice", names[(n + i) % len(names)]]):
                    user, groups = CALLERS[c]
                    old = running if what.startswith("running") else _edit(new, ("spec",), base.get("spec"))
                    yield Case(f"{where} UPDATE {what} by {c}", synthetic_review(
                        new, Caller("UPDATE", user, groups, ns or "default"), old_object=old))
            for i, (what, new) in enumerate(_resized(base) if kind == "Pod" else ()):
                for c in dict.fromkeys(["alice", names[(n + i) % len(names)]]):
                    user, groups = CALLERS[c]
                    old, changed = (_owned(base), _owned(new)) if c == "job-controller" else (base, new)
                    yield Case(f"{where} {what} by {c}", synthetic_review(
                        changed, Caller("UPDATE", user, groups, ns or "default", subresource="resize"), old_object=old))


@functools.lru_cache(maxsize=1)
def corpus() -> list[Case]:
    return [*_suite_cases(), *_fixture_cases(), *_object_cases()]


def _decide(case: Case, phase: str) -> Decision | None:
    try:
        return decide(case.review, config_for(case.bundle_root).bundle, phase=phase)  # type: ignore[arg-type]
    except BadReview:
        return None  # a body no API server sends (a deliberately malformed sample)


def _shown(case: Case, d: Decision) -> str:
    return (f"{case.id}: allowed={d.allowed} patch={json.dumps(d.patch)[:300]} warnings={d.warnings} "
            f"denials={d.denials} outcomes={d.outcomes}")


# -- the tests ----------------------------------------------------------------------------------
def test_the_corpus_is_big_and_varied():
    cases = corpus()
    ops = Counter(c.review["request"]["operation"] for c in cases)
    kinds = Counter(c.review["request"]["kind"]["kind"] for c in cases)
    assert len(cases) > 3000 and ops["CREATE"] > 500 and ops["UPDATE"] > 2000, (len(cases), ops)
    assert {"Pod", "Job", "CronJob", "Deployment", "StatefulSet", "DaemonSet", "ScavengerJob",
            "MaintenanceWindow", "Namespace"} <= set(kinds), kinds


def test_a_skipped_request_is_one_the_bundle_allows_unchanged():
    """Every request a webhook's rules send but its matchConditions hold back is allowed by the
    engine with no patch and no warning (the Namespace webhook's system namespaces aside: next
    test). And the conditions do hold back a good share of the UPDATEs."""
    problems: list[str] = []
    skipped: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    for case in corpus():
        req = case.review["request"]
        config = config_for(case.bundle_root)
        act = None
        for hook in config.hooks:
            if not hook.sent(req):
                continue
            act = act or activation(case.review)
            called, no = hook.called(act)
            sent[hook.name] += 1
            if called or "not-a-system-namespace" in no:  # the next test's
                continue
            skipped[hook.name] += 1
            d = _decide(case, hook.phase)
            if d is not None and (not d.allowed or d.patch or d.warnings):
                problems.append(f"{hook.name} skips ({', '.join(no)}) what the engine judges: {_shown(case, d)}")
    assert not problems, "\n".join(problems[:20]) + f"\n({len(problems)} in all)"
    for name in ("update.mutate.batchgate.io", "update.validate.batchgate.io", "namespaces.validate.batchgate.io"):
        assert skipped[name] > sent[name] // 4, (name, skipped[name], sent[name])


def test_a_request_that_is_judged_is_sent():
    """The other direction, as a check on the test: requests the engine changes or denies reach
    the webhook (else the previous test would pass by skipping nothing that matters)."""
    judged = called = 0
    for case in corpus():
        req = case.review["request"]
        for hook in config_for(case.bundle_root).hooks:
            if not hook.sent(req) or req.get("namespace") == "kube-system":
                continue
            d = _decide(case, hook.phase)
            if d is None or (d.allowed and not d.patch and not d.warnings):
                continue
            judged += 1
            called += hook.called(activation(case.review))[0]
    assert judged > 1000 and called == judged, (judged, called)


def test_system_namespaces_are_left_to_the_admission_policies():
    """The Namespace webhook leaves kube-system & co. out (so they can be created and relabelled
    while the webhook is down, as Kyverno and Gatekeeper do); there the ValidatingAdmissionPolicy
    denies what the engine denies."""
    config = config_for(str(POLICIES))
    (hook,) = [h for h in config.hooks if h.name == "namespaces.validate.batchgate.io"]
    checked = 0
    for name in ("kube-system", "kube-public", "kube-node-lease", "batchgate-system"):
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {NAMESPACE_NAME_LABEL: name}}}
        for labels in ({"batchgate.io/admission": "disabled"}, {"x": "y"}):
            new = _edit(ns, ("metadata", "labels"), {**ns["metadata"]["labels"], **labels})
            for c in ("alice", "admin"):
                user, groups = CALLERS[c]
                review = synthetic_review(new, Caller("UPDATE", user, groups, ""), old_object=ns)
                act = activation(review)
                assert hook.sent(review["request"]) and "not-a-system-namespace" in hook.called(act)[1]
                d = decide(review, config.bundle, phase="validate")
                denied = [p.denies(review["request"], act) for p in config.policies]
                assert any(denied) == (not d.allowed), (name, labels, c, d.denials, denied)
                checked += not d.allowed
    assert checked == 4  # alice's opt-out of each


def test_admission_policies_deny_only_what_the_engine_denies_and_all_of_what_they_carry():
    """VAP denies -> the engine denies. namespace-opt-out, reconciler-annotations: the engine's
    policy denies -> the VAP denies. queue-priority: an admin-only class denied by the engine
    (not on a controller's object, whose template the webhook judged) -> the VAP denies. queue-access:
    a Pod's or Job's queue or exclusive group changed (not on a controller's object) -> the VAP denies.
    "Carry" leaves out the CREATEs a fail-closed webhook always receives (generate.creates_decided):
    no VAP judges those, batchgate does or the create fails."""
    problems: list[str] = []
    denied_by: Counter[str] = Counter()
    decided: dict[str, set[tuple[str, str]]] = {}
    for case in corpus():
        req = case.review["request"]
        config = config_for(case.bundle_root)
        if req["operation"] not in ("CREATE", "UPDATE"):
            continue
        act = activation(case.review)
        vap = {p.name: m for p in config.policies if (m := p.denies(req, act)) is not None}
        d = _decide(case, "validate")
        if d is None:
            continue
        if vap and d.allowed:
            problems.append(f"VAP {sorted(vap)} denies what the engine allows: {_shown(case, d)}")
        if case.bundle_root not in decided:
            decided[case.bundle_root] = creates_decided(config.bundle)
        if req["operation"] == "CREATE" and (req["kind"].get("group") or "", req["kind"]["kind"]) in decided[case.bundle_root]:
            denied_by.update(vap.keys())
            continue  # a fail-closed webhook decides it: no VAP carries it
        denied_policies = {p for p, outcome in d.outcomes if outcome == "denied"}
        for name, carried in (("namespace-opt-out", "batchgate-namespace-opt-out"),
                              ("reconciler-annotations", "batchgate-reconciler-annotations")):
            if name in denied_policies and carried not in vap:
                problems.append(f"{carried} lets through what {name} denies: {_shown(case, d)}")
        owners = (req.get("object") or {}).get("metadata", {}).get("ownerReferences")
        if any("batchgate-urgent' is reserved for admins" in m for m in d.denials) and not owners \
                and not any(n.startswith("batchgate-queue-priority") for n in vap):
            problems.append(f"no VAP denies the admin-only class the engine denies: {_shown(case, d)}")
        if any(m.startswith("queue-access: ") and "cannot be set, changed or removed once it exists" in m
               for m in d.denials) and not owners and not any(n.startswith("batchgate-queue-access") for n in vap):
            problems.append(f"no VAP denies the fixed label the engine denies: {_shown(case, d)}")
        if any(m.startswith("scavengerjob: ") and " is running (Job " in m for m in d.denials) \
                and "batchgate-scavengerjob-running" not in vap:
            problems.append(f"no VAP denies the growth of a running ScavengerJob the engine denies: {_shown(case, d)}")
        if any(m.startswith("queue-gate: ") and "in place (pods/resize)" in m for m in d.denials) \
                and "batchgate-queue-gate-pods-resize" not in vap:
            problems.append(f"no VAP denies the resize the engine denies: {_shown(case, d)}")
        denied_by.update(vap.keys())
    assert not problems, "\n".join(problems[:20]) + f"\n({len(problems)} in all)"
    assert min(denied_by[n] for n in (p.name for p in config_for(str(POLICIES)).policies)) > 3, denied_by


def test_no_admission_policy_judges_a_create_that_a_fail_closed_webhook_always_receives():
    """Every workload CREATE goes to batchgate's mutating webhook (failurePolicy Fail, no
    matchCondition for it; a ScavengerJob's or MaintenanceWindow's to the validating one):
    batchgate decides it, or it fails while batchgate is unreachable, so
    the admission policies leave those CREATEs out (each would cost every create its CEL in the
    API server, bench/README.md). A Namespace CREATE, which the Namespace webhook's conditions
    may skip, stays judged."""
    bundle = config_for(str(POLICIES)).bundle
    decided = creates_decided(bundle)
    assert decided == {("", "Pod"), ("batch", "Job"), ("batch", "CronJob"), *(("apps", k) for k in (
        "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet")), ("batchgate.io", "ScavengerJob"),
        ("batchgate.io", "MaintenanceWindow")}
    plural = {(r.group, r.kind): r.plural for r in RESOURCES}
    sent = {(r["apiGroups"][0], res) for config in webhook_objects(bundle) for w in config["webhooks"]
            if w["failurePolicy"] == "Fail" and "matchConditions" not in w
            for r in w["rules"] if "CREATE" in r["operations"] for res in r["resources"]}
    assert {(g, plural[(g, k)]) for g, k in decided} == sent
    judged = {(r["apiGroups"][0], res, op) for p in admission_policies(bundle) if p["kind"] == "ValidatingAdmissionPolicy"
              for r in p["spec"]["matchConstraints"]["resourceRules"] for res in r["resources"] for op in r["operations"]}
    assert not {(g, res) for g, res, op in judged if op == "CREATE"} & {(g, plural[(g, k)]) for g, k in decided}
    assert ("", "namespaces", "CREATE") in judged
    assert ("", "pods", "UPDATE") in judged and ("apps", "deployments", "UPDATE") in judged


def test_webhook_rules_and_conditions_follow_the_bundle(tmp_path):
    """A bundle that excludes namespaces by glob, restricts a policy to some namespaces and
    drops the ScavengerJob policy: the rules and conditions change with it."""
    bundle = tmp_path / "policies"
    import shutil

    shutil.copytree(POLICIES, bundle)
    shutil.rmtree(bundle / "scavengerjob")
    doc = yaml.safe_load((bundle / "bundle.yaml").read_text())
    doc["spec"]["exclude"] = {"namespaces": ["kube-system", "kube-public", "kube-node-lease", "batchgate-system",
                                            "infra-*"]}
    (bundle / "bundle.yaml").write_text(yaml.safe_dump(doc))
    policy = yaml.safe_load((bundle / "job-network" / "policy.yaml").read_text())
    policy["spec"]["match"] = {"namespaces": ["hpc-*"]}
    (bundle / "job-network" / "policy.yaml").write_text(yaml.safe_dump(policy))
    config = config_of(with_namespace_labels(load_default(bundle), None, "not published"))
    hooks = {h.name: h for h in config.hooks}
    resources = {r for h in config.hooks for rule in h.config["rules"] for r in rule["resources"]}
    assert "scavengerjobs" in resources  # queue-access still judges a ScavengerJob's queue ...
    update = hooks["update.validate.batchgate.io"].config
    assert "scavengerjobs" not in {r for rule in update["rules"] for r in rule["resources"]}  # ... on CREATE only
    assert update["matchConditions"][0]["name"] == "not-in-an-excluded-namespace"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"batchgate.io/queue": "batch"}},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    user, groups = CALLERS["alice"]
    for ns, called in (("infra-dns", False), ("hpc-a", True), ("team-a", False)):
        new = _edit(pod, ("metadata", "annotations"), {"batchgate.io/slots": "0"})  # read by job-network only
        review = synthetic_review(new, Caller("UPDATE", user, groups, ns), old_object=pod)
        assert hooks["update.validate.batchgate.io"].called(activation(review))[0] is called, ns
        d = decide(review, config.bundle, phase="validate")
        assert d.allowed is not called, (ns, d.denials)


def test_every_condition_is_small_enough_and_named_once():
    for case_root in {c.bundle_root for c in corpus()}:
        config = config_for(case_root)
        for h in config.hooks:
            names = [c["name"] for c in h.config.get("matchConditions", [])]
            assert len(names) == len(set(names)) and len(names) <= 64, names
            for c in h.config.get("matchConditions", []):
                assert len(c["expression"]) < 10_000, (h.name, c["name"], len(c["expression"]))


@pytest.mark.parametrize(("glob", "value", "expected"), [
    ("team-*", "team-a", True), ("team-*", "teamx", False), ("t?am", "team", True), ("[ab]x", "bx", True),
    ("[!ab]x", "bx", False), ("a.b", "axb", False), ("a[", "a[", True), ("*", "", True), ("x*y", "x\ny", True),
])
def test_globs_become_the_same_regular_expressions(glob, value, expected):
    from webhook.generate import _matches
    from webhook.globs import matches

    assert matches((glob,), value) is expected
    assert cel(_matches("v", [glob]), {"v": value}) is expected


@pytest.mark.parametrize(("pattern", "user", "expected"), [
    ("ci/*", f"{SA}ci:runner", True), ("ci/*", f"{SA}cix:runner", False), ("*/runner", f"{SA}team-a:runner", True),
    ("team-*/run?er", f"{SA}team-b:runner", True), ("kube-system/job-controller", f"{SA}kube-system:job-controller", True),
    ("kube-system/job-controller", "kube-system/job-controller", False), ("a*", f"{SA}ab:c", True),
])
def test_service_account_globs_match_as_principals_do(pattern, user, expected):
    from webhook.bundle import Principals
    from webhook.generate import _caller_in

    assert Principals(service_accounts=(pattern,)).contains(user, ()) is expected
    req = {"userInfo": {"username": user}}
    assert cel(_caller_in(Principals(service_accounts=(pattern,))), {"request": req}) is expected


def test_hooks_cover_every_operation_a_policy_matches():
    bundle = load_default(POLICIES)
    ops = {op for p in bundle.policies for op in p.match.operations}
    assert ops <= {op for h in HOOKS for op in h.operations}
