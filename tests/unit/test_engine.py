"""The pure admission engine on every real request a kube-apiserver sent, and on bad ones."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json

import jsonpatch
import pytest

from tests.conftest import FIXTURES, fixture
from webhook.engine import BadReview, Decision, decide, encode_review, review, to_review
from webhook.rules.base import RuleType

ALL = sorted(p.name for p in FIXTURES.glob("*.json"))


@pytest.mark.parametrize("name", ALL)
def test_every_fixture_gets_a_well_formed_answer(name, bundle):
    body = fixture(name)
    original = copy.deepcopy(body)
    phase = "validate" if ".validate." in name else "mutate"
    out, decision = review(body, bundle, phase=phase)
    assert body == original, "the engine must not modify the request"
    resp = out["response"]
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert resp["uid"] == body["request"]["uid"]
    assert decision.errors == []
    if "patch" in resp:
        assert resp["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(resp["patch"]))
        assert patch, "an empty patch must be left out"
        obj = body["request"]["object"]
        assert jsonpatch.apply_patch(obj, patch) == decision.obj
    else:
        assert "patchType" not in resp


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("phase", ["mutate", "validate"])
def test_the_wire_encoding_is_the_review_document(name, phase, bundle):
    decision = decide(fixture(name), bundle, phase=phase)
    assert json.loads(encode_review(decision)) == to_review(decision)


@pytest.mark.parametrize("decision", [
    Decision(uid='q"uo\\te\u00e9', patch=[{"op": "add", "path": "/a~1b", "value": "ü\n"}], warnings=["naïve \"x\""]),
    Decision(uid="u", allowed=False, denials=["no: \u2603"], warnings=["w"]),
    Decision(uid="u", allowed=False),
    Decision(uid="u"),
], ids=["escapes", "denied", "denied-bare", "allowed-bare"])
def test_the_wire_encoding_escapes_what_json_must(decision):
    raw = encode_review(decision)
    raw.decode("utf-8")  # UTF-8 JSON (RFC 8259), as the API server reads it; escapes intact
    assert json.loads(raw) == to_review(decision)


@pytest.mark.parametrize("name", [n for n in ALL if n.endswith(".mutate.json") and "delete" not in n and "update" not in n])
def test_mutation_is_idempotent_on_reinvocation(name, bundle):
    body = fixture(name)
    first = decide(body, bundle, phase="mutate")
    again = copy.deepcopy(body)
    again["request"]["object"] = first.obj
    assert decide(again, bundle, phase="mutate").patch == []


def test_update_and_delete_are_never_mutated(bundle):
    for name in ("pod-update-label.mutate.json", "pod-delete.mutate.json"):
        d = decide(fixture(name), bundle, phase="mutate")
        assert d.allowed and d.patch == [], name


def test_dry_run_is_decided_identically(bundle):
    wet = fixture("pod-create-by-user.mutate.json")
    dry = fixture("pod-create-dryrun.mutate.json")
    dry["request"]["object"]["metadata"]["name"] = wet["request"]["object"]["metadata"]["name"]
    wet["request"]["object"]["metadata"].pop("managedFields", None)
    dry["request"]["object"]["metadata"].pop("managedFields", None)
    dry["request"]["object"]["metadata"]["annotations"] = wet["request"]["object"]["metadata"].get("annotations")
    a, b = decide(wet, bundle, phase="mutate"), decide(dry, bundle, phase="mutate")
    assert a.patch == b.patch and a.warnings == b.warnings


def test_excluded_namespace_is_untouched(bundle):
    body = fixture("pod-create-by-user.mutate.json")
    body["request"]["namespace"] = "kube-system"
    body["request"]["object"]["metadata"]["namespace"] = "kube-system"
    d = decide(body, bundle, phase="mutate")
    assert d.patch == [] and d.outcomes == [] and "excluded" in d.skipped


def _with(body, path, value):
    body = copy.deepcopy(body)
    node = body
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return body


_DELETE = object()
GOOD = fixture("pod-create-by-user.mutate.json")
BAD = [
    ("not-an-object", [1, 2], "JSON object"),
    ("wrong-kind", _with(GOOD, ["kind"], "Pod"), "kind must be AdmissionReview"),
    ("v1beta1", _with(GOOD, ["apiVersion"], "admission.k8s.io/v1beta1"), "admissionReviewVersions"),
    ("no-request", _with(GOOD, ["request"], _DELETE), "request is missing"),
    ("no-uid", _with(GOOD, ["request", "uid"], _DELETE), "uid"),
    ("empty-uid", _with(GOOD, ["request", "uid"], ""), "uid"),
    ("kind-not-object", _with(GOOD, ["request", "kind"], "Pod"), "request.kind"),
    ("unknown-operation", _with(GOOD, ["request", "operation"], "PATCH"), "operation"),
    ("object-is-a-list", _with(GOOD, ["request", "object"], []), "request.object"),
    ("create-without-object", _with(GOOD, ["request", "object"], None), "required for CREATE"),
    ("labels-not-object", _with(GOOD, ["request", "object", "metadata", "labels"], ["x"]), "labels"),
    ("namespace-not-string", _with(GOOD, ["request", "namespace"], 7), "namespace"),
    ("groups-not-a-list", _with(GOOD, ["request", "userInfo", "groups"], 5), r"userInfo\.groups"),
    ("username-not-string", _with(GOOD, ["request", "userInfo", "username"], ["a"]), r"userInfo\.username"),
    ("group-not-string", _with(GOOD, ["request", "kind", "group"], 1), r"request\.kind"),
    ("label-value-not-string", _with(GOOD, ["request", "object", "metadata", "labels", "app"], ["x"]),
     r"request\.object\.metadata\.labels must map strings to strings"),
    ("owner-references-not-list", _with(GOOD, ["request", "object", "metadata", "ownerReferences"], {"a": 1}),
     r"metadata\.ownerReferences must be a list of objects"),
    ("containers-not-list", _with(GOOD, ["request", "object", "spec", "containers"], {"name": "c"}),
     r"request\.object\.spec\.containers must be a list of objects"),
    ("limits-not-quantities", _with(GOOD, ["request", "object", "spec", "containers", 0, "resources"],
                                    {"limits": {"memory": ["1Gi"]}}),
     r"spec\.containers\[0\]\.resources\.limits must map resource names to quantities"),
    ("old-object-shape-checked-too", _with(_with(GOOD, ["request", "operation"], "UPDATE"),
                                           ["request", "oldObject"], {"metadata": {"labels": []}}),
     r"request\.oldObject\.metadata\.labels"),
]


@pytest.mark.parametrize(("body", "needle"), [(b, n) for _, b, n in BAD], ids=[i for i, _, _ in BAD])
def test_malformed_reviews_raise_bad_review(body, needle, bundle):
    with pytest.raises(BadReview, match=needle):
        decide(body, bundle, phase="mutate")


_REQ = "requiredDuringSchedulingIgnoredDuringExecution"
_TERM = {"labelSelector": {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "k", "operator": "Exists"}]},
         "namespaceSelector": {}, "topologyKey": "kubernetes.io/hostname"}
_NODE = {"nodeAffinity": {_REQ: {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "batchgate.io/maintenance-in-minutes", "operator": "DoesNotExist"}]},
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
AFFINITIES = [
    ("maintenance", _NODE),
    ("empty", {}),
    ("nulls", {"nodeAffinity": None, "podAffinity": {_REQ: None}, "podAntiAffinity": None}),
    ("pod-terms", {"podAffinity": {_REQ: [_TERM]}, "podAntiAffinity": {_REQ: [_TERM, {}]}}),
    ("all", {**_NODE, "podAffinity": {_REQ: [_TERM]}, "podAntiAffinity": {_REQ: [_TERM]}}),
    ("not-object", ["x"]),
    ("node-affinity-string", {"nodeAffinity": "x"}),
    ("required-list", {"nodeAffinity": {_REQ: []}}),
    ("terms-object", {"nodeAffinity": {_REQ: {"nodeSelectorTerms": {}}}}),
    ("term-string", {"nodeAffinity": {_REQ: {"nodeSelectorTerms": ["x"]}}}),
    ("match-expressions-object", {"nodeAffinity": {_REQ: {"nodeSelectorTerms": [{"matchExpressions": {}}]}}}),
    ("match-fields-of-strings", {"nodeAffinity": {_REQ: {"nodeSelectorTerms": [{"matchFields": ["x"]}]}}}),
    ("pod-affinity-list", {"podAffinity": []}),
    ("pod-required-object", {"podAntiAffinity": {_REQ: {}}}),
    ("pod-term-string", {"podAffinity": {_REQ: ["x"]}}),
    ("label-selector-string", {"podAffinity": {_REQ: [{"labelSelector": "a=b"}]}}),
    ("match-labels-not-strings", {"podAntiAffinity": {_REQ: [{"labelSelector": {"matchLabels": {"a": 1}}}]}}),
    ("match-labels-list", {"podAntiAffinity": {_REQ: [{"labelSelector": {"matchLabels": []}}]}}),
    ("pod-match-expressions-strings", {"podAffinity": {_REQ: [{"labelSelector": {"matchExpressions": ["x"]}}]}}),
    ("namespace-selector-list", {"podAffinity": {_REQ: [{"namespaceSelector": []}]}}),
    ("topology-key-number", {"podAntiAffinity": {_REQ: [{"topologyKey": 1}]}}),
]


WELL_FORMED = 5  # the first five of AFFINITIES


@pytest.mark.parametrize(("n", "affinity"), list(enumerate(a for _, a in AFFINITIES)), ids=[i for i, _ in AFFINITIES])
@pytest.mark.parametrize("phase", ["mutate", "validate"])
def test_the_affinity_fast_path_decides_as_the_walk(n, affinity, phase, bundle, monkeypatch):
    """check_shape's one-pass affinity check (every admitted Pod carries the maintenance
    affinity) passes exactly what the field-by-field walk passes, which names what is wrong."""
    from webhook import engine

    body = _with(GOOD, ["request", "object", "spec", "affinity"], affinity)

    def outcome():
        try:
            d = decide(body, bundle, phase=phase)
        except BadReview as e:
            return f"BadReview: {e}"
        return (d.allowed, d.patch, d.warnings, d.denials, d.outcomes)

    fast = outcome()
    monkeypatch.setattr(engine, "_affinity_ok", lambda a: False)  # always the walk
    assert fast == outcome()
    assert isinstance(fast, str) == (n >= WELL_FORMED), fast
    if n >= WELL_FORMED:
        assert "request.object.spec.affinity" in fast


def _exploding(bundle, failure_policy):
    def boom(settings, draft, ctx):
        draft.set("metadata", "labels", "half", "done")  # a change that must be rolled back
        raise RuntimeError("kaboom")

    rule = RuleType(name="boom", doc="", parse=lambda n, b: None, mutate=boom, order=1)
    policy = dataclasses.replace(bundle.policies[0], name="boom", rule=rule, failure_policy=failure_policy)
    return dataclasses.replace(bundle, policies=(policy,), mutating=(policy,), validating=())


def test_policy_exception_with_ignore_allows_with_warning(bundle):
    d = decide(GOOD, _exploding(bundle, "Ignore"), phase="mutate")
    assert d.allowed and d.patch == []
    assert any("boom" in w and GOOD["request"]["uid"] in w for w in d.warnings)
    assert d.errors and "kaboom" in d.errors[0][1]


def test_failed_policy_leaves_no_half_edit_but_others_stay(bundle):
    exploding = _exploding(bundle, "Ignore").policies[0]
    shm = next(p for p in bundle.policies if p.name == "shm")
    b = dataclasses.replace(bundle, policies=(shm, exploding), mutating=(shm, exploding), validating=())
    d = decide(GOOD, b, phase="mutate")
    paths = [op["path"] for op in d.patch]
    assert "/spec/volumes/-" in paths  # shm's edit survived
    assert not any("half" in p for p in paths)  # boom's half-edit is gone


def test_policy_exception_with_fail_denies_with_message(bundle):
    out, d = review(GOOD, _exploding(bundle, "Fail"), phase="mutate")
    assert not d.allowed
    assert out["response"]["status"]["code"] == 403
    assert "boom" in out["response"]["status"]["message"]
    assert "patch" not in out["response"]


def test_subresource_requests_are_left_alone(bundle):
    body = _with(GOOD, ["request", "subResource"], "status")
    assert decide(body, bundle, phase="mutate").patch == []


# -- the engine is total: any shape is a decision or a BadReview, never an exception ------
def _job() -> dict:
    return fixture("job-create.mutate.json")


def test_job_whose_template_labels_are_a_list_is_a_bad_review(bundle):
    body = _with(_job(), ["request", "object", "spec", "template", "metadata", "labels"], ["app", "sim"])
    with pytest.raises(BadReview, match=r"request\.object\.spec\.template\.metadata\.labels must map strings"):
        decide(body, bundle, phase="check")


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


ODD = ([], "x", 7, None, {}, [{"a": 1}], True)


@pytest.mark.parametrize("name", ["pod-create-by-user.mutate.json", "job-create.mutate.json",
                                  "pod-create-kata-runtimeclass-overhead.mutate.json",
                                  "pod-update-label.mutate.json"])
def test_any_shape_is_a_decision_or_a_bad_review(name, bundle):
    """Every field of a real request replaced by values of every other JSON type: each answer
    is a decision in which no policy failed, or a BadReview; nothing raises anything else."""
    body = fixture(name)
    decided = refused = 0
    for where in ("object", "oldObject"):
        if body["request"].get(where) is None:
            continue
        for path in list(_paths(body["request"][where]))[1:]:
            for value in ODD:
                odd = _with(body, ["request", where, *path], value)
                try:
                    d = decide(odd, bundle, phase="check")
                except BadReview:
                    refused += 1
                    continue
                assert d.errors == [], (path, value, d.errors)
                decided += 1
    assert decided and refused  # both kinds of answer were exercised


def test_the_unit_tiers_oracle_catches_a_patch_the_object_does_not_show(monkeypatch, bundle):
    """tests/unit/conftest.decided, which every rule test decides through, must be able to fail:
    a patch that jsonpatch applies to something else than the engine's object, or a second
    pass that patches again."""
    import tests.unit.conftest as unit

    body = fixture("pod-create-by-user.mutate.json")
    real = unit.decide(copy.deepcopy(body), bundle, phase="mutate")
    assert real.patch, "the fixture is patched: the oracle has something to check"
    unit.decided(copy.deepcopy(body), bundle, phase="mutate")  # the real engine passes

    lying = dataclasses.replace(real, patch=real.patch[:-1])
    monkeypatch.setattr(unit, "decide", lambda *a, **k: lying)
    with pytest.raises(AssertionError, match="differs from the engine's object"):
        unit.decided(copy.deepcopy(body), bundle, phase="mutate")

    restless = [real, dataclasses.replace(real, patch=[{"op": "add", "path": "/x", "value": 1}])]
    monkeypatch.setattr(unit, "decide", lambda *a, **k: restless.pop(0))
    with pytest.raises(AssertionError, match="second pass must be a no-op"):
        unit.decided(copy.deepcopy(body), bundle, phase="mutate")
