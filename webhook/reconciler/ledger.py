"""Usage as accounting data: the ConfigMap ``batchgate-usage`` (usage.py has the document).

- The leader reads it before its first sample (a restart, a new leader: it goes on from the stored
  figures) and writes it every ``fairShare.interval``, fenced by its resourceVersion; a conflict
  (another writer) makes it read again and fold on top of what is stored. Followers write nothing.
- A document it cannot read is never overwritten: usage stops accruing, an error is logged and the
  metric says so, until an admin repairs or deletes it (deleting it starts usage from zero, as
  deleting a readable one does).
- A failed write keeps the figures in memory and is tried again at the next interval: at most the
  intervals since the last write are lost by a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..kubefields import COMPONENT_LABEL, PART_OF_LABEL
from . import metrics
from .errors import AlreadyExists, Conflict, KubeError, NotFound
from .kube import KubeApi
from .model import CONFIG_MAP, PodView
from .settings import QueuePolicy
from .usage import KEY, Usage, accrue, parse, render

log = logging.getLogger(__name__)
NAME = "batchgate-usage"


class Ledger:
    def __init__(self, api: KubeApi, namespace: str, clock: Callable[[], float]) -> None:
        self.api, self.namespace, self.clock = api, namespace, clock
        self.usage: Usage | None = None  # None: not read yet (or unreadable)
        self._rv = ""
        self.broken = ""  # why the stored document cannot be used

    def reset(self) -> None:
        """Forget what was read (leadership changed hands: read again before writing)."""
        self.usage, self._rv, self.broken = None, "", ""

    def billing(self, now: float, policy: QueuePolicy) -> dict[str, float]:
        """Each account's decayed usage now; read first when not read yet, so that a new leader's
        very first pass orders by the stored usage (not as if nobody had used anything)."""
        if self.usage is None and not self.broken:
            try:
                self._read()
            except KubeError as e:
                log.warning("cannot read usage from ConfigMap %s/%s (this pass orders without it): %s",
                            self.namespace, NAME, e)
        return self.usage.at(now, policy.fair_share.half_life) if self.usage is not None else {}

    def due_at(self, policy: QueuePolicy) -> float | None:
        if self.usage is None or self.usage.sampled_at is None:
            return None
        return self.usage.sampled_at + policy.fair_share.interval

    def step(self, pods: Iterable[PodView], policy: QueuePolicy, account_of: Callable[[PodView], str],
             queue_of: Callable[[PodView], str]) -> str:
        """Sample and store when an interval has passed: read, unchanged, written, conflict, broken, failed."""
        try:
            result = self._step(pods, policy, account_of, queue_of)
        except Conflict:
            self.usage, result = None, "conflict"
        except NotFound:  # deleted since it was read (an admin starting over): read again, from zero
            self.usage, self._rv, result = None, "", "conflict"
        except KubeError as e:
            log.warning("cannot store usage in ConfigMap %s/%s: %s", self.namespace, NAME, e)
            result = "failed"
        if result not in ("unchanged",):
            metrics.USAGE_WRITES.labels(result).inc()
        return result

    def _step(self, pods: Iterable[PodView], policy: QueuePolicy, account_of: Callable[[PodView], str],
              queue_of: Callable[[PodView], str]) -> str:
        if self.usage is None and not self._read():
            return "broken"
        assert self.usage is not None
        now = self.clock()
        fair = policy.fair_share
        if self.usage.sampled_at is not None and now - self.usage.sampled_at < fair.interval:
            return "unchanged"
        new = accrue(self.usage, pods, now, fair, account_of, queue_of)
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": NAME, "namespace": self.namespace,
                             "labels": {PART_OF_LABEL: "batchgate", COMPONENT_LABEL: "usage"}},
                "data": {KEY: render(new, fair)}}
        if self._rv:
            body["metadata"]["resourceVersion"] = self._rv  # type: ignore[index]
            resp = self.api.replace(CONFIG_MAP, self.namespace, NAME, body)
        else:
            try:
                resp = self.api.create(CONFIG_MAP, self.namespace, body)
            except AlreadyExists:
                raise Conflict("created meanwhile") from None
        self._rv = str((resp.get("metadata") or {}).get("resourceVersion") or "")
        self.usage = new
        log.debug("usage stored", extra={"fields": {"configmap": f"{self.namespace}/{NAME}",
                                                     "accounts": len(new.billing)}})
        return "written"

    def _read(self) -> bool:
        try:
            cm = self.api.get(CONFIG_MAP, self.namespace, NAME)
        except NotFound:
            self.usage, self._rv = Usage(), ""
            return True
        rv = str((cm.get("metadata") or {}).get("resourceVersion") or "")
        try:
            self.usage = parse((cm.get("data") or {}).get(KEY))
        except ValueError as e:
            if self.broken != str(e):
                log.error("ConfigMap %s/%s does not hold usage batchgate can read (%s): usage is not accrued, and "
                          "the document is left as it is; repair it, or delete it to start from zero",
                          self.namespace, NAME, e)
            self.broken = str(e)
            return False
        self._rv, self.broken = rv, ""
        return True
