"""The reflector's list/watch protocol against a scripted API: resume, bookmarks, 410 Gone, errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from reconbuild import pod

from webhook.reconciler.cache import Cache, Reflector, Store
from webhook.reconciler.errors import Forbidden, Gone, NotFound, Transient
from webhook.reconciler.model import POD, POD_GROUP, Kind, pod_view
from webhook.reconciler.settings import Settings


def ev(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def with_rv(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = rv
    return obj


class ScriptedApi:
    """``lists``: what each list returns (items, resourceVersion) or raises; ``watches``: per
    watch call, the events it streams (an exception object in it is raised there)."""

    def __init__(self, lists: list[Any], watches: list[list[Any]], stop: threading.Event) -> None:
        self.lists, self.watches, self.stop = lists, watches, stop
        self.list_calls = 0
        self.watch_from: list[str] = []

    def list(self, kind: Kind, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        self.list_calls += 1
        item = self.lists.pop(0)
        if isinstance(item, Exception):
            raise item
        items, rv = item
        return {"metadata": {"resourceVersion": rv}, "items": items}

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        self.watch_from.append(resource_version)
        if not self.watches:
            self.stop.set()
            return iter(())
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script

        def gen() -> Iterator[dict[str, Any]]:
            for e in script:
                if isinstance(e, Exception):
                    raise e
                yield e

        return _Closable(gen())


class _NoWait:
    def __init__(self, ev: threading.Event, pauses: list[float]) -> None:
        self.ev, self.pauses = ev, pauses

    def is_set(self) -> bool:
        return self.ev.is_set()

    def set(self) -> None:
        self.ev.set()

    def wait(self, t: float | None = None) -> bool:
        self.pauses.append(t or 0)
        return self.ev.is_set()


class _Closable:
    def __init__(self, it: Iterator[dict[str, Any]]) -> None:
        self.it = it

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.it

    def close(self) -> None:
        pass


def run(api: ScriptedApi, stop: threading.Event, kind: Kind = POD, optional: bool = False) -> Store[Any]:
    store: Store[Any] = Store(kind, pod_view)
    r = Reflector(api, store, settings=Settings(crd_recheck=0.01), on_change=lambda: None, stop=stop,  # type: ignore[arg-type]
                  optional=optional)
    pauses: list[float] = []
    r.stop_event = _NoWait(stop, pauses)  # type: ignore[assignment]  # backoff pauses are recorded, not slept
    r.run()  # in this thread; returns once the script is used up
    return store


def names(store: Store[Any]) -> list[str]:
    return sorted(k[1] for k in store.items())


def test_list_then_watch_resumes_from_the_last_version_and_bookmarks() -> None:
    stop = threading.Event()
    api = ScriptedApi(
        lists=[([pod("a")], "10")],
        watches=[
            [ev("ADDED", with_rv(pod("b"), "11")), ev("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
            [ev("DELETED", with_rv(pod("a"), "16")), ev("MODIFIED", with_rv(pod("b", phase="Failed"), "17"))],
        ],
        stop=stop,
    )
    store = run(api, stop)
    assert api.watch_from == ["10", "15", "17"]  # each re-watch from the last version seen
    assert api.list_calls == 1
    assert names(store) == ["b"] and store.items()[("demo", "b")].phase == "Failed"


def test_410_gone_relists_and_drops_what_vanished_meanwhile() -> None:
    stop = threading.Event()
    api = ScriptedApi(
        lists=[([pod("a"), pod("b")], "10"), ([pod("b"), pod("c")], "50")],
        watches=[[ev("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})], []],
        stop=stop,
    )
    store = run(api, stop)
    assert api.list_calls == 2
    assert api.watch_from == ["10", "50", "50"]
    assert names(store) == ["b", "c"]


def test_watch_start_gone_and_broken_streams() -> None:
    stop = threading.Event()
    api = ScriptedApi(
        lists=[([pod("a")], "10"), ([pod("a")], "20")],
        watches=[
            [ev("ADDED", with_rv(pod("b"), "11")), Transient("connection reset")],  # broken mid-stream
            Gone("expired", status=410),  # the resume point is too old by now
        ],
        stop=stop,
    )
    store = run(api, stop)
    # reconnect from the last event seen (not from scratch); relist when that is too old
    assert api.watch_from == ["10", "11", "20"]
    assert api.list_calls == 2
    assert names(store) == ["a"]


def test_optional_resource_absent_is_unknown_not_empty() -> None:
    stop = threading.Event()
    api = ScriptedApi(lists=[NotFound("no CRD", status=404)], watches=[], stop=stop)
    api.list = _stop_after(api.list, stop, 1)  # type: ignore[method-assign]
    store = run(api, stop, kind=POD_GROUP, optional=True)
    assert store.synced and store.absent


def test_required_resource_forbidden_is_retried_not_absent() -> None:
    stop = threading.Event()
    api = ScriptedApi(lists=[Forbidden("no", status=403), ([pod("a")], "5")], watches=[], stop=stop)
    store: Store[Any] = Store(POD, pod_view)
    r = Reflector(api, store, settings=Settings(), on_change=lambda: None, stop=stop)  # type: ignore[arg-type]
    pauses: list[float] = []
    r.stop_event = _NoWait(stop, pauses)  # type: ignore[assignment]
    r.run()
    assert len(pauses) == 1  # one backoff pause after the 403
    assert not store.absent and names(store) == ["a"]


def _stop_after(fn: Any, stop: threading.Event, n: int) -> Any:
    calls = [0]

    def wrapped(*a: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] >= n:
            stop.set()
        return fn(*a, **kw)

    return wrapped


def test_write_responses_do_not_go_back_in_time() -> None:
    store: Store[Any] = Store(POD, pod_view)
    store.replace([with_rv(pod("a"), "10")])
    assert store.upsert(with_rv(pod("a", phase="Failed"), "12"), only_newer=True)
    assert not store.upsert(with_rv(pod("a"), "11"), only_newer=True)  # an older write response
    assert store.items()[("demo", "a")].phase == "Failed"
    assert store.upsert(with_rv(pod("a"), "13"))  # the watch always wins


def test_a_write_response_read_after_the_watch_deleted_the_object_does_not_bring_it_back() -> None:
    """A DELETE, patch or GET response taken after the watch's DELETED event (the reflector runs on
    its own thread): no event will ever remove the object again, so the store keeps it out."""
    for late in ("delete response, still terminating", "patch response", "a GET before the deletion"):
        store: Store[Any] = Store(POD, pod_view)
        store.replace([with_rv(pod("a", uid="u-a"), "10")])
        gone = with_rv(pod("a", uid="u-a", deleting=True), "12")
        assert store.remove(gone)  # the watch: DELETED
        assert not store.upsert(with_rv(pod("a", uid="u-a", deleting=late.startswith("delete")), "11"),
                                only_newer=True), late
        assert store.items() == {}, late
        # a new pod of the same name (another uid) is a new object: it is taken
        assert store.upsert(with_rv(pod("a", uid="u-b"), "13"), only_newer=True)
        assert store.items()[("demo", "a")].ref.uid == "u-b"


def test_cache_waits_for_every_store_before_a_snapshot() -> None:
    c = Cache(api=None, settings=Settings())  # type: ignore[arg-type]
    assert not c.wait_synced(timeout=0.01)
    c.pods.replace([])
    c.jobs.replace([])
    c.nodes.mark_absent()
    assert not c.wait_synced(timeout=0.01)
    c.pod_groups.replace([])
    assert not c.wait_synced(timeout=0.01)
    c.windows.mark_absent()  # no MaintenanceWindow CRD
    assert not c.wait_synced(timeout=0.01)
    c.scavenger_jobs.mark_absent()  # no ScavengerJob CRD
    assert not c.wait_synced(timeout=0.01)
    c.net["Service"].replace([])
    c.net["ConfigMap"].replace([])
    c.net["NetworkPolicy"].mark_absent()  # e.g. not allowed to list them
    assert not c.wait_synced(timeout=0.01)
    c.mount_failures.mark_absent()  # not allowed to list Events
    assert c.wait_synced(timeout=0.01)
    snap = c.snapshot()
    assert snap.nodes is None and snap.pod_groups == {} and snap.windows is None and snap.scavenger_jobs is None
    assert snap.mount_failures is None, "no Events: a missing Secret is not known, rather than known absent"
    assert snap.net_objects is None, "one kind unknown: the network is not planned at all"


def test_the_events_it_lists_and_watches_are_the_kubelets_failed_mounts_only() -> None:
    """The API server filters the Events (RBAC cannot): list and watch carry the field selector."""
    from webhook.reconciler.cache import FAILED_MOUNT_EVENT
    from webhook.reconciler.mounts import EVENT_FIELDS, mount_failure_view

    seen: list[tuple[str, Any]] = []

    class Api:
        def list(self, kind: Kind, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
            seen.append(("list", kw.get("field_selector")))
            return {"metadata": {"resourceVersion": "5"}, "items": []}

        def watch(self, path: str, **kw: Any) -> Iterator[dict[str, Any]]:
            seen.append(("watch", (kw.get("query") or {}).get("fieldSelector")))
            stop.set()
            return iter(())

    stop = threading.Event()
    store: Store[Any] = Store(FAILED_MOUNT_EVENT, mount_failure_view)
    Reflector(Api(), store, settings=Settings(), on_change=lambda: None, stop=stop).run()  # type: ignore[arg-type]
    assert seen == [("list", EVENT_FIELDS), ("watch", EVENT_FIELDS)]

