"""Queue grants by namespace label (``namespaceSelector``): the selectors, the document the
reconciler publishes and the webhook reads (nsfacts), freshness, what the grants decide with and
without the labels, the protection of the labels themselves, the server's reload of the file,
and ``batchgate check --namespaces``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES
from tests.unit.conftest import checked_decide, decided
from tests.unit.rules.test_queue_access import ALICE, make_bundle, pod, queue
from webhook import metrics, nsfacts
from webhook.bundle import Bundle
from webhook.cli import main
from webhook.nsfacts import NamespaceSelector, document, needs_write, parse_facts, render, view
from webhook.offline import Caller, synthetic_review, with_namespace_labels
from webhook.server import ServeOptions, make_app, prepare, reload_facts
from webhook.yamlsrc import BundleError

NOW = 1_800_000_000.0
ADMIN = ("root", ("batchgate:admins",))


def sel(labels: dict[str, str] | None = None, *exprs: tuple[str, str, tuple[str, ...]]) -> NamespaceSelector:
    return NamespaceSelector(tuple(sorted((labels or {}).items())), tuple(exprs))


# -- selectors ------------------------------------------------------------------------------
@pytest.mark.parametrize(("selector", "labels", "expected"), [
    (sel({"team": "a"}), {"team": "a", "x": "y"}, True),
    (sel({"team": "a"}), {"team": "b"}, False),
    (sel({"team": "a"}), {}, False),
    (sel(None, ("tier", "In", ("gold", "silver"))), {"tier": "gold"}, True),
    (sel(None, ("tier", "In", ("gold", "silver"))), {}, False),
    (sel(None, ("tier", "NotIn", ("bronze",))), {}, True),  # as Kubernetes: a missing key is not in
    (sel(None, ("tier", "NotIn", ("bronze",))), {"tier": "bronze"}, False),
    (sel(None, ("gpu", "Exists", ())), {"gpu": ""}, True),
    (sel(None, ("gpu", "Exists", ())), {}, False),
    (sel(None, ("legacy", "DoesNotExist", ())), {}, True),
    (sel(None, ("legacy", "DoesNotExist", ())), {"legacy": "x"}, False),
    (sel({"team": "a"}, ("legacy", "DoesNotExist", ())), {"team": "a", "legacy": "1"}, False),  # all must hold
])
def test_selector_matches_as_kubernetes_label_selectors_do(selector, labels, expected):
    assert selector.matches(labels) is expected


def test_selector_describes_itself_as_kubectl_would():
    s = sel({"team": "a"}, ("tier", "In", ("gold", "silver")), ("x", "NotIn", ("1",)), ("gpu", "Exists", ()),
            ("legacy", "DoesNotExist", ()))
    assert s.describe() == "team=a,tier in (gold,silver),x notin (1),gpu,!legacy"
    assert s.label_keys() == {"team", "tier", "x", "gpu", "legacy"}


# -- the published document -----------------------------------------------------------------
def test_only_the_referenced_keys_are_published_for_every_namespace():
    doc = document({"b": {"team": "x", "secret-ish": "no"}, "a": {}}, ["team"], NOW, "abc")
    assert doc["namespaces"] == {"a": {}, "b": {"team": "x"}}
    assert doc["keys"] == ["team"] and doc["bundle"] == "abc" and doc["publishedAt"] == "2027-01-15T08:00:00Z"
    facts = parse_facts(render(doc))
    assert facts.published_at == NOW and facts.labels == {"a": {}, "b": {"team": "x"}}
    assert render(doc) == render(document({"a": {}, "b": {"team": "x"}}, ["team"], NOW, "abc"))  # deterministic


def test_a_write_only_when_the_facts_change_or_a_refresh_is_due():
    old = document({"a": {"team": "x"}}, ["team"], NOW, "abc")
    assert not needs_write(old, document({"a": {"team": "x"}}, ["team"], NOW + 10, "abc"), NOW + 10)
    assert needs_write(old, document({"a": {"team": "y"}}, ["team"], NOW + 10, "abc"), NOW + 10)  # relabelled
    assert needs_write(old, document({"a": {"team": "x"}, "b": {}}, ["team"], NOW + 10, "abc"), NOW + 10)  # new ns
    assert needs_write(old, document({"a": {"team": "x"}}, ["team", "tier"], NOW + 10, "d"), NOW + 10)  # new keys
    assert needs_write(old, document({"a": {"team": "x"}}, ["team"], NOW, "abc"), NOW + nsfacts.REFRESH + 1)
    assert needs_write(old, old, NOW - 3600)  # published "in the future": a clock went back
    assert needs_write(None, old, NOW)


BAD_FACTS = [
    ("not-json", "{", "not JSON"),
    ("a-list", "[]", "(top): expected an object"),
    ("wrong-kind", json.dumps({"kind": "ConfigMap"}), "kind: expected apiVersion"),
    ("no-time", json.dumps({**document({}, [], NOW, ""), "publishedAt": 5}), "publishedAt: expected an RFC 3339"),
    ("bad-time", json.dumps({**document({}, [], NOW, ""), "publishedAt": "yesterday"}), "not an RFC 3339 time"),
    ("naive-time", json.dumps({**document({}, [], NOW, ""), "publishedAt": "2026-01-01T00:00:00"}), "not an RFC 3339 time with a time zone"),
    ("bad-keys", json.dumps({**document({}, [], NOW, ""), "keys": "team"}), "keys: expected a list"),
    ("bad-ns", json.dumps({**document({}, ["t"], NOW, ""), "namespaces": {"Not_A_NS": {}}}), "not a namespace"),
    ("uncovered-key", json.dumps({**document({}, ["t"], NOW, ""), "namespaces": {"a": {"u": "1"}}}),
     "namespaces.a.u: a label key the document does not list"),
    ("bad-value", json.dumps({**document({}, ["t"], NOW, ""), "namespaces": {"a": {"t": 1}}}), "not a label value"),
    ("deep", "[" * 100000 + "]" * 100000, "not JSON"),
]


@pytest.mark.parametrize(("text", "needle"), [c[1:] for c in BAD_FACTS], ids=[c[0] for c in BAD_FACTS])
def test_a_corrupt_document_is_an_error_naming_the_field(text, needle):
    with pytest.raises(nsfacts.FactsError) as e:
        parse_facts(text, "namespaces.json")
    assert str(e.value).startswith("namespaces.json: ") and needle in str(e.value), str(e.value)


# -- freshness ------------------------------------------------------------------------------
TEAM_A = sel({"team": "a"})


def facts(labels: dict[str, dict[str, str]], keys: tuple[str, ...] = ("team",), at: float = NOW) -> nsfacts.Facts:
    return parse_facts(render(document(labels, keys, at, "abc")))


def test_the_view_holds_per_selector_the_matching_namespaces():
    v = view([TEAM_A], facts({"x": {"team": "a"}, "y": {"team": "b"}, "z": {}}), NOW + 60)
    assert v.state == "fresh" and v.selected[TEAM_A] == {"x"}
    assert v.selects(TEAM_A, "x") and not v.selects(TEAM_A, "y") and not v.selects(TEAM_A, "new")
    assert v.why_not(TEAM_A, "y") == ""  # known, and simply does not match
    assert "labels of namespace new not yet published by the reconciler" in v.why_not(TEAM_A, "new")
    assert "retry in a minute" in v.why_not(TEAM_A, "new")


def test_stale_or_future_or_missing_or_uncovered_facts_match_nothing():
    f = facts({"x": {"team": "a"}})
    old = view([TEAM_A], f, NOW + nsfacts.MAX_AGE + 1)
    assert old.state == "stale" and not old.selects(TEAM_A, "x")
    assert "is the reconciler running?" in old.why_not(TEAM_A, "x")
    future = view([TEAM_A], f, NOW - nsfacts.MAX_AGE - 1)
    assert future.state == "stale" and "in the future: clocks disagree" in future.why_not(TEAM_A, "x")
    none = view([TEAM_A], None, NOW, problem="/etc/x does not exist")
    assert none.state == "missing" and not none.selects(TEAM_A, "x") and "/etc/x does not exist" in none.why_not(TEAM_A, "x")
    tier = sel({"tier": "gold"})
    partly = view([TEAM_A, tier], f, NOW)
    assert partly.selects(TEAM_A, "x") and not partly.selects(tier, "x")
    assert "do not cover tier yet" in partly.why_not(tier, "x")
    assert nsfacts.is_stale(view([TEAM_A], f, NOW), NOW + nsfacts.MAX_AGE + 1)
    assert not nsfacts.is_stale(view([TEAM_A], f, NOW), NOW + 60)


# -- grants decide with the view --------------------------------------------------------------
def labelled(spec: dict[str, Any]) -> None:
    """interactive: namespaces labelled team=a (or tier in gold), any user; whole nodes in batch:
    group hpc in namespaces gpu-* labelled tier=gold."""
    queue(spec, "interactive")["access"] = [{"namespaceSelector": {"matchLabels": {"team": "a"}}},
                                            {"namespaceSelector": {"matchExpressions": [
                                                {"key": "tier", "operator": "In", "values": ["gold"]}]}}]
    queue(spec, "batch")["exclusiveAccess"] = {"namespaces": ["gpu-*"], "groups": ["hpc"],
                                               "namespaceSelector": {"matchLabels": {"tier": "gold"}}}


def guarded(tmp_path: Path, edit: Any) -> Bundle:
    """A bundle that grants by label carries the namespace-opt-out policy (else it does not load)."""
    (tmp_path / "bundle" / "namespace-opt-out").mkdir(parents=True, exist_ok=True)
    shutil.copy(POLICIES / "namespace-opt-out" / "policy.yaml", tmp_path / "bundle" / "namespace-opt-out")
    return make_bundle(tmp_path, edit)


@pytest.fixture
def lb(tmp_path: Path) -> Bundle:
    return guarded(tmp_path, labelled)


def test_a_bundle_granting_by_label_without_the_label_guard_is_refused_at_the_selector(tmp_path):
    with pytest.raises(BundleError) as e:
        make_bundle(tmp_path, labelled)  # the queue-access policy alone
    assert e.value.field == "spec.queues[0].access[0].namespaceSelector" and e.value.line
    assert "needs the namespace-opt-out policy" in str(e.value)
    assert "anyone who may label their namespace grants themselves the queue" in str(e.value)
    (tmp_path / "bundle" / "namespace-opt-out").mkdir(parents=True, exist_ok=True)
    only_update = yaml.safe_load((POLICIES / "namespace-opt-out" / "policy.yaml").read_text())
    only_update["spec"].setdefault("match", {})["operations"] = ["UPDATE"]
    (tmp_path / "bundle" / "namespace-opt-out" / "policy.yaml").write_text(yaml.safe_dump(only_update))
    with pytest.raises(BundleError, match="matching Namespace CREATE and UPDATE"):
        make_bundle(tmp_path, labelled)  # a guard that misses CREATE is no guard
    assert guarded(tmp_path, labelled).selector_keys == ("team", "tier")


def decide_in(bundle: Bundle, namespace: str, obj: dict[str, Any], who: tuple[str, tuple[str, ...]] = ALICE):
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    return checked_decide(bundle, obj, Caller(username=who[0], groups=who[1], namespace=namespace))


def test_the_bundle_knows_its_selectors_and_their_keys(lb):
    assert len(lb.selectors) == 3 and lb.selector_keys == ("team", "tier")
    assert lb.queues["interactive"].access.describe() == ("namespaces labelled team=a; or namespaces labelled "
                                                          "tier in (gold)")


def test_a_labelled_namespace_is_admitted_and_an_unlabelled_one_denied(lb):
    b = with_namespace_labels(lb, facts({"lab": {"team": "a"}, "demo": {}, "gold": {"tier": "gold"}},
                                        ("team", "tier")))
    assert decide_in(b, "lab", pod("interactive")).allowed
    assert decide_in(b, "gold", pod("interactive")).allowed
    d = decide_in(b, "demo", pod("interactive"))
    assert not d.allowed
    assert ("queue 'interactive' is open to namespaces labelled team=a; or namespaces labelled tier in (gold); "
            "you are alice (groups devs) in namespace demo; ask an admin for access, or use batchgate.io/queue: "
            "one of batch, scavenger") in d.message
    assert decide_in(b, "demo", pod("interactive"), ADMIN).allowed  # admins pass whatever the labels


def test_an_unpublished_namespace_is_denied_saying_to_retry(lb):
    b = with_namespace_labels(lb, facts({"lab": {"team": "a"}}, ("team", "tier")))
    d = decide_in(b, "brand-new", pod("interactive"))
    assert not d.allowed
    assert "labels of namespace brand-new not yet published by the reconciler" in d.message
    assert "retry in a minute" in d.message and "open to namespaces labelled team=a" in d.message


def test_without_labels_selector_grants_admit_nobody_and_names_still_work(tmp_path):
    def both(spec: dict[str, Any]) -> None:
        queue(spec, "interactive")["access"] = [{"namespaces": ["notebooks"]},
                                                {"namespaceSelector": {"matchLabels": {"team": "a"}}}]
    b = with_namespace_labels(guarded(tmp_path, both), None, "the webhook was started without --namespaces")
    assert decide_in(b, "notebooks", pod("interactive")).allowed
    d = decide_in(b, "lab", pod("interactive"))
    assert not d.allowed and "namespace labels are not usable: the webhook was started without --namespaces" in d.message
    stale = with_namespace_labels(guarded(tmp_path, both), None)
    assert not decide_in(stale, "lab", pod("interactive")).allowed


def test_names_and_selector_in_one_grant_must_both_hold(lb):
    b = with_namespace_labels(lb, facts({"gpu-1": {"tier": "gold"}, "gpu-2": {}, "cpu": {"tier": "gold"}},
                                        ("team", "tier")))
    hpc = ("h", ("hpc",))
    ex = pod("batch", exclusive="true")
    assert decide_in(b, "gpu-1", ex, hpc).allowed
    assert "open to groups hpc in namespaces gpu-* labelled tier=gold" in decide_in(b, "gpu-2", ex, hpc).message
    assert not decide_in(b, "cpu", ex, hpc).allowed


def test_retrying_is_suggested_only_when_the_labels_could_admit_the_caller(lb):
    """batch's whole nodes are for group hpc in gpu-* namespaces labelled tier=gold: for alice
    (not in hpc) the labels are beside the point, and the denial does not send her to retry."""
    b = with_namespace_labels(lb, facts({}, ("team", "tier")))  # gpu-1 not published
    ex = pod("batch", exclusive="true")
    assert "not yet published" in decide_in(b, "gpu-1", ex, ("h", ("hpc",))).message
    msg = decide_in(b, "gpu-1", ex, ALICE).message
    assert "open to groups hpc in namespaces gpu-* labelled tier=gold" in msg and "not yet published" not in msg


def test_a_grant_by_a_label_the_facts_do_not_cover_yet_denies_and_says_so(lb):
    b = with_namespace_labels(lb, facts({"gold": {}}, ("team",)))  # published for an older bundle
    d = decide_in(b, "gold", pod("interactive"))
    assert not d.allowed and "do not cover tier yet" in d.message


# -- the labels are the grant: only admins may set them ----------------------------------------
def ns_review(bundle: Bundle, new_labels: dict[str, str], old_labels: dict[str, str] | None,
              who: tuple[str, tuple[str, ...]] = ALICE):
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab", "labels": new_labels}}
    old = None if old_labels is None else {**obj, "metadata": {"name": "lab", "labels": old_labels}}
    caller = Caller(operation="CREATE" if old is None else "UPDATE", username=who[0], groups=who[1], namespace="")
    return decided(synthetic_review(obj, caller, old_object=old), bundle)


@pytest.mark.parametrize(("new", "old", "what"), [
    ({"team": "a"}, {}, "setting"),
    ({"team": "b"}, {"team": "a"}, "changing"),
    ({}, {"tier": "gold"}, "removing"),
    ({"team": "a"}, None, "setting"),  # a namespace created with it
])
def test_a_user_may_not_set_change_or_remove_a_label_that_grants_a_queue(lb, new, old, what):
    d = ns_review(lb, new, old)
    assert not d.allowed
    assert f"{what} the label" in d.message and "on a Namespace is for cluster admins only" in d.message
    assert "queue grants select namespaces by it (namespaceSelector of queue" in d.message
    assert ns_review(lb, new, old, ADMIN).allowed


def test_other_labels_stay_free(lb):
    assert ns_review(lb, {"team": "a", "owner": "bob"}, {"team": "a"}).allowed
    plain = load_shipped()
    assert ns_review(plain, {"team": "a"}, {}).allowed  # no selector reads team in the shipped bundle


def load_shipped() -> Bundle:
    from webhook.rules import load_bundle

    return load_bundle(POLICIES)


# -- the server reloads the file ---------------------------------------------------------------
def labelled_policies(tmp_path: Path) -> Path:
    """A copy of the shipped policies whose bundle.yaml grants by label (``labelled``)."""
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    doc = yaml.safe_load((policies / "bundle.yaml").read_text())
    labelled(doc["spec"])
    (policies / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return policies


@pytest.fixture
def served(tmp_path: Path):
    policies = labelled_policies(tmp_path)
    mount = tmp_path / "namespaces"
    mount.mkdir()
    return prepare(ServeOptions(policies=str(policies), cert_dir=str(tmp_path / "certs"), namespaces=str(mount)))


def _write(mount: Path, text: str, bump: int = 1) -> None:
    f = mount / nsfacts.KEY
    f.write_text(text)
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000_000))


async def test_the_server_reads_the_mounted_labels_keeps_the_last_good_and_says_when_stale(aiohttp_client, served):
    client = await aiohttp_client(make_app(served))
    mount = served.namespaces
    text = await (await client.get("/readyz")).text()
    assert "namespace labels missing:" in text and "does not exist" in text, text
    assert "batchgate_namespace_labels_unusable 1.0" in await (await client.get("/metrics")).text()
    now = 1_900_000_000.0
    _write(mount, render(document({"lab": {"team": "a"}}, ["team", "tier"], now, "abc")))
    assert reload_facts(served, now + 5) is True
    assert served.bundle.namespace_facts.selects(served.loaded.selectors[0], "lab")
    assert decided(synthetic_review({**pod("interactive"), "metadata": {"name": "p", "namespace": "lab",
                                     "labels": {"batchgate.io/queue": "interactive"}}},
                                    Caller(username="alice", namespace="lab")), served.bundle).allowed
    text = await (await client.get("/readyz")).text()
    assert "namespace labels published 2030-03-17T17:46:40Z for bundle abc, 1 namespaces" in text, text
    assert reload_facts(served, now + 10) is False  # nothing changed: no recomputation
    before = metrics.NAMESPACE_FACTS_RELOADS.labels("failure")._value.get()
    good = served.bundle.namespace_facts
    _write(mount, "{corrupt", bump=2)
    reload_facts(served, now + 20)
    assert served.bundle.namespace_facts is good  # the last good labels stay in force
    assert metrics.NAMESPACE_FACTS_RELOADS.labels("failure")._value.get() == before + 1
    assert "the file on disk is not in force" in await (await client.get("/readyz")).text()
    assert reload_facts(served, now + nsfacts.MAX_AGE + 1) is True  # they age out, without a file change
    v = served.bundle.namespace_facts
    assert v.state == "stale" and not v.selects(served.loaded.selectors[0], "lab")
    text = await (await client.get("/readyz")).text()
    assert (await client.get("/readyz")).status == 200 and "namespace labels stale:" in text
    assert "batchgate_namespace_labels_unusable 1.0" in await (await client.get("/metrics")).text()


# -- batchgate check --namespaces ---------------------------------------------------------------
def test_check_decides_with_the_published_labels(capsys, tmp_path):
    policies = labelled_policies(tmp_path)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump({**pod("interactive"), "metadata": {
        "name": "p", "labels": {"batchgate.io/queue": "interactive"}}}))
    published = document({"lab": {"team": "a"}, "demo": {}}, ["team", "tier"], NOW, "abc")
    configmap = tmp_path / "cm.yaml"
    configmap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "batchgate-namespaces"}, "data": {nsfacts.KEY: render(published)}}))
    raw = tmp_path / "namespaces.json"
    raw.write_text(render(published))
    base = ["check", "--policies", str(policies), "--user", "alice", "--groups", "devs"]
    for source in (configmap, raw, tmp_path):  # the ConfigMap, its file, the mounted directory
        assert main([*base, "--namespace", "lab", "--namespaces", str(source), str(manifest)]) == 0
        assert main([*base, "--namespace", "demo", "--namespaces", str(source), str(manifest)]) == 1
        assert "open to namespaces labelled team=a" in capsys.readouterr().err
    assert main([*base, "--namespace", "lab", str(manifest)]) == 1
    assert "batchgate check was run without --namespaces" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert main([*base, "--namespaces", str(bad), str(manifest)]) == 2
    assert "batchgate: namespace labels:" in capsys.readouterr().err


def test_a_selector_on_the_name_label_does_not_stop_namespace_creation(tmp_path):
    """Kubernetes 1.21+ sets kubernetes.io/metadata.name on every Namespace itself: a grant that
    selects by it must not make creating a namespace admin-only (its value is checked anyway)."""
    def by_name(spec: dict[str, Any]) -> None:
        queue(spec, "interactive")["access"] = {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["lab"]}]}}
    (tmp_path / "bundle" / "namespace-opt-out").mkdir(parents=True)
    shutil.copy(POLICIES / "namespace-opt-out" / "policy.yaml", tmp_path / "bundle" / "namespace-opt-out")
    b = make_bundle(tmp_path, by_name)
    assert ns_review(b, {"kubernetes.io/metadata.name": "lab"}, None).allowed
    assert "must be the namespace's own name" in ns_review(b, {"kubernetes.io/metadata.name": "kube-system"},
                                                           None).message


def test_serve_refuses_a_bad_max_age(capsys):
    assert main(["serve", "--namespace-labels-max-age", "soon"]) == 2
    assert "--namespace-labels-max-age" in capsys.readouterr().err
