"""The reconciler publishes the namespace labels that queue grants select by (publish.py): only
the referenced keys, created if missing, written only when they change or a refresh is due,
fenced by resourceVersion, and never past the ConfigMap size limit (a Warning Event instead)."""

from __future__ import annotations

import io
import json
from typing import Any

from tests.unit.reconciler.fakeapi import FakeApi
from webhook import nsfacts
from webhook.reconciler.cache import Store, namespace_labels
from webhook.reconciler.errors import Conflict
from webhook.reconciler.model import CONFIG_MAP, NAMESPACE
from webhook.reconciler.publish import LabelPublisher
from webhook.reconciler.settings import Settings
from webhook.units import format_time

NS = "batchgate-system"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def setup(*namespaces: dict[str, Any]) -> tuple[FakeApi, LabelPublisher, Store[dict[str, str]], Clock]:
    api = FakeApi()
    store: Store[dict[str, str]] = Store(NAMESPACE, namespace_labels)
    store.replace(list(namespaces))
    clock = Clock()
    return api, LabelPublisher(api, Settings(lease_namespace=NS), store, clock), store, clock


def published(api: FakeApi) -> dict[str, Any]:
    cm = api.get(CONFIG_MAP, NS, "batchgate-namespaces")
    return json.loads(cm["data"][nsfacts.KEY])  # type: ignore[no-any-return]


def test_creates_the_configmap_with_only_the_referenced_keys():
    api, pub, _, _ = setup(namespace("lab", team="physics", owner="bob"), namespace("demo"))
    assert pub.step(("team",), "abc") == "created"
    doc = published(api)
    assert doc["namespaces"] == {"demo": {}, "lab": {"team": "physics"}}  # owner is not published
    assert doc["keys"] == ["team"] and doc["bundle"] == "abc" and doc["publishedAt"] == format_time(T0)
    facts = nsfacts.parse_facts(api.get(CONFIG_MAP, NS, "batchgate-namespaces")["data"][nsfacts.KEY])
    assert facts.labels["lab"] == {"team": "physics"}  # what the webhook reads back


def test_writes_only_on_change_or_refresh_each_fenced():
    api, pub, store, clock = setup(namespace("lab", team="physics"))
    assert pub.step(("team",), "abc") == "created"
    writes = len(api.writes())
    clock.now += 60
    assert pub.step(("team",), "abc") == "unchanged" and len(api.writes()) == writes  # steady: no write
    store.upsert(namespace("lab", team="chemistry"))  # relabelled
    assert pub.step(("team",), "abc") == "updated"
    assert published(api)["namespaces"]["lab"] == {"team": "chemistry"}
    store.upsert(namespace("new-one"))
    assert pub.step(("team",), "abc") == "updated" and "new-one" in published(api)["namespaces"]
    clock.now += 301  # nothing changed, but the refresh is due
    assert pub.due_at() is not None and pub.due_at() <= clock.now
    assert pub.step(("team",), "abc") == "updated"
    assert published(api)["publishedAt"] == format_time(clock.now)
    assert [c[0] for c in api.writes()] == ["create", "replace", "replace", "replace"]


def test_a_conflict_rereads_and_the_next_step_writes():
    api, pub, store, _ = setup(namespace("lab", team="physics"))
    pub.step(("team",), "abc")
    api.fail["replace"] = [Conflict("modified", status=409, reason="Conflict")]
    store.upsert(namespace("lab", team="x"))
    assert pub.step(("team",), "abc") == "conflict"
    assert pub.step(("team",), "abc") == "updated"
    assert ("get", "configmaps", NS, "batchgate-namespaces") in api.calls  # re-read for its resourceVersion


def test_an_existing_configmap_is_adopted_and_not_rewritten_when_it_already_says_the_same():
    api, pub, _, _ = setup(namespace("lab", team="physics"))
    doc = nsfacts.document({"lab": {"team": "physics"}}, ["team"], T0 - 10, "abc")
    api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "batchgate-namespaces", "namespace": NS},
             "data": {nsfacts.KEY: nsfacts.render(doc)}})
    assert pub.step(("team",), "abc") == "unchanged"
    assert api.writes() == []


def test_a_corrupt_configmap_is_overwritten():
    api, pub, _, _ = setup(namespace("lab", team="physics"))
    api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "batchgate-namespaces", "namespace": NS},
             "data": {nsfacts.KEY: "{garbage"}})
    assert pub.step(("team",), "abc") == "updated"
    assert published(api)["namespaces"] == {"lab": {"team": "physics"}}


def test_nothing_is_published_without_selectors_or_before_the_cache_is_synced():
    api, pub, _, _ = setup(namespace("lab", team="physics"))
    assert pub.step((), "abc") == "disabled" and api.calls == []
    unsynced: Store[dict[str, str]] = Store(NAMESPACE, namespace_labels)
    pub.store = unsynced
    assert pub.step(("team",), "abc") == "waiting"
    unsynced.mark_absent()  # may not list Namespaces
    assert pub.step(("team",), "abc") == "waiting" and api.writes() == []


def test_too_large_is_not_written_but_warned_once(monkeypatch):
    many = [namespace(f"ns-{i:05d}", team="x" * 60) for i in range(2000)]
    api, pub, _, _ = setup(*many)
    monkeypatch.setattr(nsfacts, "MAX_BYTES", 50_000)
    assert pub.step(("team",), "abc") == "too-large"
    assert pub.step(("team",), "abc") == "too-large"
    events = api.events()
    assert len(events) == 1 and events[0]["reason"] == "NamespaceLabelsTooLarge"
    assert events[0]["type"] == "Warning" and "grant by namespace name or glob" in events[0]["message"]
    assert not any(c[1] == "configmaps" for c in api.writes())


def test_the_controller_publishes_once_and_only_as_leader():
    import dataclasses

    from webhook.reconciler.controller import Controller
    from webhook.reconciler.settings import QueuePolicy

    api = FakeApi()
    api.put(namespace("lab", team="physics"))
    api.put(namespace("demo"))
    queues = dataclasses.replace(QueuePolicy(), namespace_label_keys=("team",), bundle="abc")
    c = Controller(api, Settings(leader_elect=False, lease_namespace=NS, queues=queues), clock=lambda: T0)
    assert c.run_once() == 0
    assert published(api)["namespaces"] == {"demo": {}, "lab": {"team": "physics"}}
    # a dry run, or a bundle without selectors, publishes nothing
    api2 = FakeApi()
    api2.put(namespace("lab", team="physics"))
    Controller(api2, Settings(leader_elect=False, lease_namespace=NS), clock=lambda: T0).run_once()
    dry = Controller(api2, Settings(leader_elect=False, lease_namespace=NS, queues=queues), dry_run=True,
                     out=io.StringIO(), clock=lambda: T0)
    dry.run_once()
    assert not any(c[1] == "configmaps" for c in api2.writes())
