"""Informer-style cache: list, then watch from the list's resourceVersion.

One ``Reflector`` thread per resource keeps a ``Store`` of views (see
``model``) current:

- list (paginated) and replace the store; the store is then *synced*;
- watch from the last resourceVersion seen (bookmarks included), re-watching
  when the server ends the request, and relisting on ``410 Gone`` (the
  version is too old) or when the stream reports an error;
- on any other failure, back off (1 s doubling to 30 s) and try again.

Optional resources are those that may not be there: the PodGroup CRD (404 until
someone installs it; checked again every ``crd_recheck`` seconds) and nodes
(403 without cluster-wide read). Their store is then *absent*, which the
snapshot reports as ``None`` ("unknown"), so the planner never mistakes "not
visible" for "none exist".

The planner must never see a half-filled cache (it would delete the PodGroups
of every Job not listed yet), so ``Cache.snapshot()`` is only used once
``wait_synced()`` returned True.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from . import metrics
from .errors import Forbidden, Gone, KubeError, NotFound
from .kube import KubeApi, WatchStream
from .model import (
    JOB,
    MAINTENANCE_WINDOW,
    NAMESPACE,
    NET_KINDS,
    NODE,
    POD,
    POD_GROUP,
    SCAVENGER_JOB,
    VIEW_OF,
    Kind,
    Snapshot,
)
from .mounts import EVENT_FIELDS, mount_failure_view
from .scavenger import sj_view
from .settings import Settings

log = logging.getLogger(__name__)
V = TypeVar("V")


def _rv_int(rv: str) -> int | None:
    return int(rv) if rv.isdigit() else None


# The Events the cache keeps: the kubelet's Warning FailedMount on pods (mounts.py)
FAILED_MOUNT_EVENT = Kind("v1", "Event", "events", fields=EVENT_FIELDS)

TOMBSTONES = 10_000  # uids of removed objects a store remembers (the newest this many)


def _meta(obj: Any) -> Mapping[str, Any]:
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    return md if isinstance(md, Mapping) else {}


def _text(value: Any) -> str:
    """A name, namespace, uid or resourceVersion as a key (the API server stores strings; whatever
    else reaches a store keys as "" rather than failing the whole list)."""
    return value if isinstance(value, str) else ""


class Store(Generic[V]):
    """Views by key, thread-safe.

    A write's response (``upsert(only_newer=True)``) may be taken after the watch already
    delivered the object's deletion: a DELETE response that still shows the pod (an unscheduled
    pod is gone at once, yet the response carries a deletionTimestamp; a graceful one the
    kubelet finished meanwhile), a patch or GET read just before the deletion. No watch event
    ever removes such an object again, so the store keeps the uids of what it removed
    (tombstones) and takes no write response of a removed uid (uids are never reused)."""

    def __init__(self, kind: Kind, convert: Callable[[Mapping[str, Any]], V]) -> None:
        self.kind = kind
        self._convert = convert
        self._items: dict[Any, V] = {}
        self._rvs: dict[Any, str] = {}
        self._uids: dict[Any, str] = {}
        self._removed: OrderedDict[str, None] = OrderedDict()  # tombstones: uids removed, oldest first
        self._lock = threading.Lock()
        self.synced = False
        self.absent = False

    def _key(self, obj: Mapping[str, Any]) -> Any:
        md = _meta(obj)
        if not self.kind.namespaced:
            return _text(md.get("name"))
        return (_text(md.get("namespace")), _text(md.get("name")))

    def replace(self, objects: list[Mapping[str, Any]]) -> None:
        self.replace_pages([objects])

    def replace_pages(self, pages: Iterable[list[Mapping[str, Any]]]) -> None:
        """Replace everything with the objects of ``pages``, converting each page as it comes
        (so that a 10,000-pod list never holds all the raw JSON at once)."""
        items, rvs, uids = {}, {}, {}
        for page in pages:
            for o in page:
                view = self._view(o)
                if view is None:
                    continue
                k = self._key(o)
                md = _meta(o)
                items[k] = view
                rvs[k] = _text(md.get("resourceVersion"))
                uids[k] = _text(md.get("uid"))
        with self._lock:
            self._items, self._rvs, self._uids = items, rvs, uids
            self.synced, self.absent = True, False

    def _view(self, obj: Mapping[str, Any]) -> V | None:
        """``obj``'s view, or None when it has none: one object the views cannot read (whatever a
        user stored that no view foresaw) is left out, logged and counted, and never stops the
        list, the watch, or the reconciler for everyone else (issue 27)."""
        try:
            return self._convert(obj)
        except Exception as e:
            md = _meta(obj)
            where = f"{md.get('namespace')}/{md.get('name')}" if self.kind.namespaced else str(md.get("name"))
            log.warning("%s %s left out of the reconciler's view: %s: %s", self.kind.kind.lower(), where,
                        type(e).__name__, str(e)[:200],
                        extra={"fields": {"resource": self.kind.plural, "namespace": md.get("namespace"),
                                          "name": md.get("name"), "uid": md.get("uid")}})
            metrics.UNREADABLE.labels(self.kind.plural).inc()
            return None

    def mark_absent(self) -> None:
        with self._lock:
            self._items, self._rvs, self._uids = {}, {}, {}
            self.synced, self.absent = True, True

    def upsert(self, obj: Mapping[str, Any], *, only_newer: bool = False) -> bool:
        """Store ``obj``; with ``only_newer``, not when the stored version is newer (for write responses)."""
        md = _meta(obj)
        k = self._key(obj)
        rv = _text(md.get("resourceVersion"))
        view = self._view(obj)
        uid = _text(md.get("uid"))
        with self._lock:
            if only_newer and uid and uid in self._removed:
                return False  # deleted already: a late response must not bring it back
            if only_newer and self._uids.get(k) == uid:
                old, new = _rv_int(self._rvs.get(k, "")), _rv_int(rv)
                if old is not None and new is not None and new <= old:
                    return False
            if view is None:  # no view of what it is now: not the old one either
                if k in self._items:
                    del self._items[k], self._rvs[k], self._uids[k]
                return False
            self._items[k] = view
            self._rvs[k] = rv
            self._uids[k] = uid
        return True

    def remove(self, obj: Mapping[str, Any]) -> bool:
        """Drop ``obj`` (a watch's DELETED, or one we deleted / found gone); its uid is remembered."""
        md = _meta(obj)
        k = self._key(obj)
        uid = _text(md.get("uid"))
        with self._lock:
            if uid:
                self._removed[uid] = None
                self._removed.move_to_end(uid)
                if len(self._removed) > TOMBSTONES:
                    self._removed.popitem(last=False)
            if k not in self._items or (uid and self._uids.get(k) != uid):
                return False
            del self._items[k], self._rvs[k], self._uids[k]
        return True

    def items(self) -> dict[Any, V]:
        with self._lock:
            return dict(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Reflector(threading.Thread):
    def __init__(
        self,
        api: KubeApi,
        store: Store[Any],
        *,
        settings: Settings,
        on_change: Callable[[], None],
        stop: threading.Event,
        optional: bool = False,
    ) -> None:
        super().__init__(name=f"reflector-{store.kind.plural}", daemon=True)
        self.api = api
        self.store = store
        self.kind = store.kind
        self.settings = settings
        self.on_change = on_change
        self.stop_event = stop
        self.optional = optional
        self.namespace = settings.namespace if self.kind.namespaced else None
        self.resource_version: str | None = None
        self._stream: WatchStream | None = None

    def list_now(self) -> None:
        """List every object (paginated) into the store; absent if optional and unavailable."""
        meta: dict[str, Any] = {}

        def pages() -> Iterator[list[Mapping[str, Any]]]:
            cont: str | None = None
            while True:
                page = self.api.list(self.kind, self.namespace, limit=500, continue_=cont,
                                     label_selector=self.kind.selector or None, field_selector=self.kind.fields or None)
                meta.clear()
                meta.update(page.get("metadata") or {})
                yield page.get("items") or []
                cont = meta.get("continue") or None
                if not cont:
                    return

        try:
            self.store.replace_pages(pages())
        except (NotFound, Forbidden) as e:
            if not self.optional:
                raise
            if not self.store.absent or not self.store.synced:
                log.info("%s not available (%s); treating as unknown", self.kind.plural, e.status,
                         extra={"fields": {"resource": self.kind.plural}})
            self.store.mark_absent()
            self.resource_version = None
            self.on_change()
            return
        self.resource_version = meta.get("resourceVersion") or ""
        metrics.RELISTS.labels(self.kind.plural).inc()
        self.on_change()

    def stop(self) -> None:
        self.stop_event.set()
        if self._stream is not None:
            self._stream.close()

    def run(self) -> None:
        backoff = 1.0
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self.list_now()
                    if self.store.absent:
                        self.stop_event.wait(self.settings.crd_recheck)
                        continue
                assert self.resource_version is not None
                self._watch(self.resource_version)
                backoff = 1.0
            except Gone:
                log.info("%s: resourceVersion too old; relisting", self.kind.plural)
                self.resource_version = None
            except Exception as e:
                if self.stop_event.is_set():
                    break
                log.warning("%s: %s; retrying in %.0fs", self.kind.plural, e, backoff,
                            extra={"fields": {"resource": self.kind.plural}})
                if isinstance(e, NotFound | Forbidden) and self.optional:
                    self.resource_version = None  # e.g. the CRD went away: relist decides
                self.stop_event.wait(backoff * (0.8 + 0.4 * random.random()))
                backoff = min(backoff * 2, 30.0)

    def _watch(self, rv: str) -> None:
        query = {k: v for k, v in (("labelSelector", self.kind.selector), ("fieldSelector", self.kind.fields)) if v}
        selected = {"query": query} if query else {}
        stream = self.api.watch(self.kind.path(self.namespace), resource_version=rv,
                                timeout_seconds=self.settings.watch_timeout, **selected)
        self._stream = stream
        try:
            if self.stop_event.is_set():
                return
            for ev in stream:
                kind = ev.get("type")
                obj = ev.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        raise Gone(obj.get("message") or "expired", status=410)
                    raise KubeError(f"watch error: {obj.get('message')}", status=code or 0)
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    if new_rv:
                        self.resource_version = new_rv
                    continue
                if kind in ("ADDED", "MODIFIED"):
                    self.store.upsert(obj)
                elif kind == "DELETED":
                    self.store.remove(obj)
                if new_rv:
                    self.resource_version = new_rv
                self.on_change()
        finally:
            self._stream = None
            stream.close()


def namespace_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """A Namespace as the cache keeps it: its labels (for publish.py)."""
    labels = (obj.get("metadata") or {}).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


class Cache:
    """Pods, Jobs, Nodes, PodGroups and MaintenanceWindows (the last three optional), and batchgate's
    own Services, ConfigMaps and NetworkPolicies (optional, label-selected), each behind a reflector."""

    def __init__(self, api: KubeApi, settings: Settings, *, on_change: Callable[[], None] | None = None,
                 namespaces: bool = False) -> None:
        self.api = api
        self.settings = settings
        self._on_change = on_change or (lambda: None)
        self._stop = threading.Event()
        self.pods: Store[Any] = Store(POD, VIEW_OF["Pod"])
        self.jobs: Store[Any] = Store(JOB, VIEW_OF["Job"])
        self.nodes: Store[Any] = Store(NODE, VIEW_OF["Node"])
        self.pod_groups: Store[Any] = Store(POD_GROUP, VIEW_OF["PodGroup"])
        self.windows: Store[Any] = Store(MAINTENANCE_WINDOW, VIEW_OF["MaintenanceWindow"])
        self.scavenger_jobs: Store[Any] = Store(SCAVENGER_JOB, sj_view)
        # the kubelet's FailedMount Events naming a missing Secret (optional: list and watch of Events)
        self.mount_failures: Store[Any] = Store(FAILED_MOUNT_EVENT, mount_failure_view)
        # Job networking: batchgate's own Services, ConfigMaps, NetworkPolicies (label-selected)
        self.net: dict[str, Store[Any]] = {k.kind: Store(k, VIEW_OF[k.kind]) for k in NET_KINDS}
        self.stores = {"Pod": self.pods, "Job": self.jobs, "Node": self.nodes, "PodGroup": self.pod_groups,
                       "MaintenanceWindow": self.windows, "ScavengerJob": self.scavenger_jobs, **self.net,
                       # not "Event": the Events the reconciler writes are none of these
                       "FailedMount": self.mount_failures}
        # Namespaces' labels, for publish.py (optional: 403 without cluster-wide read)
        self.namespaces: Store[dict[str, str]] = Store(NAMESPACE, namespace_labels)
        if namespaces:
            self.stores["Namespace"] = self.namespaces
        self.reflectors = [
            Reflector(api, self.pods, settings=settings, on_change=self._changed, stop=self._stop),
            Reflector(api, self.jobs, settings=settings, on_change=self._changed, stop=self._stop),
            Reflector(api, self.nodes, settings=settings, on_change=self._changed, stop=self._stop, optional=True),
            Reflector(api, self.pod_groups, settings=settings, on_change=self._changed, stop=self._stop, optional=True),
            Reflector(api, self.windows, settings=settings, on_change=self._changed, stop=self._stop, optional=True),
            Reflector(api, self.scavenger_jobs, settings=settings, on_change=self._changed, stop=self._stop,
                      optional=True),
            *(Reflector(api, st, settings=settings, on_change=self._changed, stop=self._stop, optional=True)
              for st in self.net.values()),
            Reflector(api, self.mount_failures, settings=settings, on_change=self._changed, stop=self._stop,
                      optional=True),
        ]
        if namespaces:
            self.reflectors.append(Reflector(api, self.namespaces, settings=settings, on_change=self._changed,
                                             stop=self._stop, optional=True))
        self._synced = threading.Condition()

    def _changed(self) -> None:
        with self._synced:
            self._synced.notify_all()
        self._on_change()

    def list_once(self) -> None:
        """List everything synchronously (``--once``); raises KubeError."""
        for r in self.reflectors:
            r.list_now()

    def start(self) -> None:
        for r in self.reflectors:
            r.start()

    def stop(self) -> None:
        self._stop.set()
        for r in self.reflectors:
            r.stop()

    def synced(self) -> bool:
        return all(s.synced for s in self.stores.values())

    def wait_synced(self, timeout: float | None = None) -> bool:
        with self._synced:
            return self._synced.wait_for(lambda: self.synced() or self._stop.is_set(), timeout) and self.synced()

    def snapshot(self) -> Snapshot:
        nodes = None if self.nodes.absent else self.nodes.items()
        return Snapshot(
            pods=self.pods.items(),
            jobs=self.jobs.items(),
            nodes=nodes,
            pod_groups=None if self.pod_groups.absent else self.pod_groups.items(),
            windows=None if self.windows.absent else self.windows.items(),
            scavenger_jobs=None if self.scavenger_jobs.absent else self.scavenger_jobs.items(),
            net_objects=None if any(st.absent for st in self.net.values()) else {
                (kind, ns, name): v for kind, st in self.net.items() for (ns, name), v in st.items().items()},
            mount_failures=None if self.mount_failures.absent else self.mount_failures.items(),
        )

    def observe(self, obj: Mapping[str, Any] | None) -> None:
        """A write's response: the object as it is now, so the next pass does not plan on stale data."""
        if not isinstance(obj, Mapping):
            return
        store = self.stores.get(obj.get("kind") or "")
        if store is None or store.absent:
            return
        if store.upsert(obj, only_newer=True):
            self._changed()

    def forget(self, kind: str, obj: Mapping[str, Any]) -> None:
        """An object we deleted (or found gone)."""
        store = self.stores.get(kind)
        if store is not None and store.remove(obj):
            self._changed()

    def sizes(self) -> dict[str, int]:
        return {k: len(s) for k, s in self.stores.items()}
