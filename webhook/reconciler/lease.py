"""Leader election over a ``coordination.k8s.io/v1`` Lease.

Several replicas run; one acts. The decision is a pure function
(``lease_step``), tested with a fake clock; ``LeaderElector`` does the I/O.

As in client-go, expiry is judged by *our* clock, not by the holder's
``renewTime``: a candidate notes when it first saw the current record (holder
and renewTime) and takes over only after ``lease_duration`` passed without
that record changing. Clock skew between machines therefore does not matter,
only the rate of clocks. Every write carries the resourceVersion it was
decided on, so of two candidates racing for a free lease one gets 409 and
stays a follower.

The leader considers itself leader only until ``renew_deadline`` after the
start of its last successful renewal; that is shorter than ``lease_duration``,
so it has stopped acting before anyone else may start. On a clean exit it
releases the lease (empty holder), and a follower takes over at its next try
instead of waiting for expiry.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .errors import AlreadyExists, Conflict, KubeError, NotFound
from .model import LEASE
from .settings import Settings

log = logging.getLogger(__name__)

Decision = Literal["create", "renew", "acquire", "wait"]


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    duration: float
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str

    @staticmethod
    def from_object(obj: Mapping[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            duration=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=(obj.get("metadata") or {}).get("resourceVersion") or "",
        )


def lease_step(record: LeaseRecord | None, *, identity: str, observed_at: float, now: float) -> Decision:
    """What to do with the lease as it stands.

    ``observed_at``: our clock when we first saw this exact record (holder and
    renewTime) unchanged; ``now``: our clock now.
    """
    if record is None:
        return "create"
    if record.holder == identity:
        return "renew"
    if not record.holder:
        return "acquire"  # released
    if now - observed_at >= record.duration:
        return "acquire"  # the holder stopped renewing
    return "wait"


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: Any,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.api = api
        self.settings = settings
        self.identity = settings.identity
        self.clock = clock
        self.wall = wall
        self.on_change = on_change or (lambda leading: None)
        self._observed: tuple[str, str | None] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._record: LeaseRecord | None = None
        self._was_leader = False
        self._lock = threading.Lock()
        self.holder: str = ""  # who holds the lease, as last seen
        self.last_error: str = ""  # why the last round could not read or write the lease

    def is_leader(self) -> bool:
        r = self._renewed_at
        return r is not None and self.clock() - r < self.settings.renew_deadline

    def _body(self, record: LeaseRecord | None, *, acquire: bool) -> dict[str, Any]:
        s = self.settings
        now = micro_time(self.wall())
        transitions = record.transitions if record else 0
        if acquire and record is not None and record.holder != self.identity:
            transitions += 1
        md: dict[str, Any] = {"name": s.lease_name, "namespace": s.lease_namespace}
        if record is not None:
            md["resourceVersion"] = record.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(int(s.lease_duration), 1),
                "acquireTime": now if acquire or record is None or not record.acquire_time else record.acquire_time,
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }

    def try_once(self) -> bool:
        """One round: read the lease, then create / renew / acquire it or wait. Returns is_leader()."""
        s = self.settings
        with self._lock:
            started = self.clock()
            try:
                try:
                    obj = self.api.get(LEASE, s.lease_namespace, s.lease_name)
                    record: LeaseRecord | None = LeaseRecord.from_object(obj)
                except NotFound:
                    record = None
                if record is not None:
                    self.holder = record.holder
                    seen = (record.holder, record.renew_time)
                    if seen != self._observed:
                        self._observed, self._observed_at = seen, started
                decision = lease_step(record, identity=self.identity, observed_at=self._observed_at, now=started)
                if decision == "wait":
                    self._renewed_at = None
                elif decision == "create":
                    try:
                        self.api.create(LEASE, s.lease_namespace, self._body(None, acquire=True))
                    except NotFound as e:  # creating in a namespace that does not exist
                        raise NotFound(f"namespace {s.lease_namespace} does not exist (create it, or pass "
                                       "--lease-namespace or --no-leader-elect)", status=404) from e
                    self._renewed_at = started
                else:
                    self.api.replace(LEASE, s.lease_namespace, s.lease_name,
                                     self._body(record, acquire=decision == "acquire"))
                    self._renewed_at = started
                if decision != "wait":
                    self.holder = self.identity
            except (AlreadyExists, Conflict):
                self._renewed_at = None  # someone else got there first
                self.last_error = ""
            except KubeError as e:
                self.last_error = str(e)
                log.warning("lease %s/%s: %s", s.lease_namespace, s.lease_name, e)
            leading = self.is_leader()
            if leading != self._was_leader:
                self._was_leader = leading
                log.info("%s leadership", "acquired" if leading else "lost",
                         extra={"fields": {"identity": self.identity, "lease": f"{s.lease_namespace}/{s.lease_name}"}})
                self.on_change(leading)
            return leading

    def run(self, stop: threading.Event) -> None:
        """Try every ``retry_period`` (with a little jitter) until ``stop``."""
        while not stop.is_set():
            self.try_once()
            stop.wait(self.settings.retry_period * (0.9 + 0.2 * random.random()))

    def release(self) -> None:
        """Give the lease up (empty holder) if we hold it, so that a follower takes over at once."""
        s = self.settings
        with self._lock:
            if not self.is_leader():
                return
            self._renewed_at = None
            try:
                obj = self.api.get(LEASE, s.lease_namespace, s.lease_name)
                record = LeaseRecord.from_object(obj)
                if record.holder != self.identity:
                    return
                body = self._body(record, acquire=False)
                body["spec"].update(holderIdentity="", leaseDurationSeconds=1)
                self.api.replace(LEASE, s.lease_namespace, s.lease_name, body)
                log.info("released the lease", extra={"fields": {"identity": self.identity}})
            except KubeError as e:
                log.warning("releasing lease %s/%s: %s", s.lease_namespace, s.lease_name, e)
            if self._was_leader:
                self._was_leader = False
                self.on_change(False)
