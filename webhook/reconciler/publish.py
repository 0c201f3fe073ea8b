"""Publishing namespace labels for the webhook: the ConfigMap ``batchgate-namespaces``.

Queue grants may select namespaces by label (``namespaceSelector``); the webhook holds no API
credentials, so the reconciler, which watches Namespaces, writes the labels that the bundle's
selectors read (those keys only; ``webhook.nsfacts`` has the document) into a ConfigMap in
batchgate's own namespace, and the webhook mounts it.

- The leader writes; followers keep their cache warm and write nothing.
- A write happens when the published facts differ from the wanted ones (a namespace created,
  deleted or relabelled, the bundle's keys changed), and otherwise only to refresh
  ``publishedAt`` every ``namespace_labels_refresh`` seconds, so that the webhook can tell a
  live publisher from a dead one. A steady cluster costs one write per refresh.
- Every update is fenced by the ConfigMap's resourceVersion; a conflict (someone else wrote)
  re-reads it on the next step. A missing ConfigMap is created.
- A document past ``nsfacts.MAX_BYTES`` is not written: a Warning Event on the ConfigMap and the
  metric say so, the last published facts age out, and grants by label then admit nobody (names
  and globs still work). Nothing crashes.
- With no selector in the bundle nothing is published (and nothing is written).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import socket
from collections.abc import Callable
from typing import Any

from .. import nsfacts
from ..contract import MANAGED_BY, MANAGED_BY_LABEL
from ..kubefields import COMPONENT_LABEL, PART_OF_LABEL
from ..units import format_time
from . import metrics
from .cache import Store
from .errors import AlreadyExists, Conflict, KubeError, NotFound
from .kube import KubeApi
from .model import CONFIG_MAP, EVENT
from .settings import Settings

log = logging.getLogger(__name__)


class LabelPublisher:
    def __init__(self, api: KubeApi, settings: Settings, store: Store[dict[str, str]],
                 clock: Callable[[], float]) -> None:
        self.api = api
        self.settings = settings
        self.store = store
        self.clock = clock
        self.name = settings.namespace_labels
        self.namespace = settings.lease_namespace
        self._published: dict[str, Any] | None = None  # the document in the ConfigMap, as last read or written
        self._rv: str | None = None  # its resourceVersion; None: read it before writing
        self._warned: set[str] = set()
        self._retry_at = 0.0  # after a failed or refused write: not before (the loop's timer)

    def due_at(self) -> float | None:
        """When the published facts need a refresh (epoch s), for the loop's timer."""
        if not self.name or self._published is None:
            return None
        try:
            at = nsfacts.published_at(self._published)
        except nsfacts.FactsError:
            return None
        return max(at + self.settings.namespace_labels_refresh, self._retry_at)

    def step(self, keys: tuple[str, ...], bundle: str) -> str:
        """Publish if needed; the outcome (for tests and the metric): disabled, waiting, unchanged,
        created, updated, conflict, too-large, failed."""
        result = self._step(keys, bundle)
        if result in ("failed", "too-large"):
            wait = self.settings.retry_failed if result == "failed" else self.settings.namespace_labels_refresh
            self._retry_at = self.clock() + wait
        if result not in ("disabled", "waiting", "unchanged"):
            metrics.NAMESPACE_LABELS_PUBLISHED.labels(result).inc()
        return result

    def _step(self, keys: tuple[str, ...], bundle: str) -> str:
        if not self.name or not keys:
            return "disabled"
        if not self.store.synced or self.store.absent:
            if self.store.absent and "absent" not in self._warned:
                self._warned.add("absent")
                log.warning("cannot list Namespaces: namespace labels are not published, and queue grants "
                            "by namespaceSelector admit nobody")
            return "waiting"
        now = self.clock()
        wanted = nsfacts.document(self.store.items(), keys, now, bundle)
        if not nsfacts.needs_write(self._published, wanted, now, self.settings.namespace_labels_refresh):
            return "unchanged"
        text = nsfacts.render(wanted)
        size = len(text.encode())
        metrics.NAMESPACE_LABELS_BYTES.set(size)
        if size > nsfacts.MAX_BYTES:
            self._too_large(size, len(wanted["namespaces"]), keys, bundle)
            return "too-large"
        try:
            if self._rv is None:
                self._read()
                if not nsfacts.needs_write(self._published, wanted, now, self.settings.namespace_labels_refresh):
                    return "unchanged"
            return self._write(text, wanted)
        except Conflict:
            log.info("ConfigMap %s/%s changed under us; re-reading it", self.namespace, self.name)
            self._rv = None
            return "conflict"
        except KubeError as e:
            log.warning("cannot publish namespace labels to ConfigMap %s/%s: %s", self.namespace, self.name, e)
            self._rv = None
            return "failed"

    def _read(self) -> None:
        try:
            cm = self.api.get(CONFIG_MAP, self.namespace, self.name)
        except NotFound:
            self._rv, self._published = "", None  # "": create it
            return
        self._rv = str((cm.get("metadata") or {}).get("resourceVersion") or "")
        raw = (cm.get("data") or {}).get(nsfacts.KEY)
        try:
            self._published = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            self._published = None  # unreadable: overwrite it

    def _write(self, text: str, wanted: dict[str, Any]) -> str:
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         # not managed-by=batchgate: that label marks job networking's ConfigMaps
                         "labels": {PART_OF_LABEL: "batchgate", COMPONENT_LABEL: "namespace-labels"}},
            "data": {nsfacts.KEY: text},
        }
        if self._rv:
            body["metadata"]["resourceVersion"] = self._rv
            resp = self.api.replace(CONFIG_MAP, self.namespace, self.name, body)
            metrics.WRITES.labels("update", "configmaps").inc()
            result = "updated"
        else:
            try:
                resp = self.api.create(CONFIG_MAP, self.namespace, body)
            except AlreadyExists:  # created since we looked: read it, then update
                self._rv = None
                return "conflict"
            metrics.WRITES.labels("create", "configmaps").inc()
            result = "created"
        self._rv = str((resp.get("metadata") or {}).get("resourceVersion") or "")
        self._published = wanted
        log.info("namespace labels published", extra={"fields": {
            "configmap": f"{self.namespace}/{self.name}", "namespaces": len(wanted["namespaces"]),
            "keys": ",".join(wanted["keys"]), "bytes": len(text.encode()), "result": result}})
        return result

    def _too_large(self, size: int, count: int, keys: tuple[str, ...], bundle: str) -> None:
        message = (f"the labels {', '.join(keys)} of {count} namespaces make {size} bytes, more than the "
                   f"{nsfacts.MAX_BYTES} a ConfigMap can safely hold; not published, so the facts in force age "
                   "out and queue grants by namespaceSelector will admit nobody. Select on fewer label keys, "
                   "or grant by namespace name or glob")
        log.error("%s", message)
        name = f"{self.name}.bg-{hashlib.sha256(f'{bundle}|{keys}'.encode()).hexdigest()[:16]}"
        if name in self._warned:
            return
        now = format_time(self.clock())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": self.namespace,
                               "name": self.name},
            "reason": "NamespaceLabelsTooLarge", "message": message[:1024], "type": "Warning",
            "source": {"component": "batchgate-reconciler", "host": socket.gethostname()},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        with contextlib.suppress(AlreadyExists, KubeError):
            self.api.create(EVENT, self.namespace, event)
            metrics.WRITES.labels("create", "events").inc()
        self._warned.add(name)
