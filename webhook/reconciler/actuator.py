"""The actuator: carries out the planner's actions against the API.

Per action, in this order:

1. the Event, named after what the action is about (``Action.event_name``):
   ``AlreadyExists`` means an earlier run (maybe one that crashed right
   after) already told the user, so it is not told twice. An action marked
   ``tell_after`` (a release: the Event says it happened) sends its Event last,
   once its writes went through, so a conflict leaves no Event behind;
2. the annotation merge patch, fenced by the resourceVersion the plan was made
   on (or the one our own previous patch of the same object returned): a
   ``409 Conflict`` means the object changed under us, so we re-read it and let
   the next pass re-plan on the fresh state;
3. deletions with the uid as precondition, so that a new object of the same
   name is never hit; ``404`` means someone (perhaps we, before a crash) got
   there first: done. A pod batchgate takes down from outside (a gang member
   starting over with its gang) first gets a ``DisruptionTarget`` condition
   (a status patch, as the taint manager and PodGC write it), so that its
   Job's podFailurePolicy can tell the interruption from a failure;
4. PodGroup writes; a PodGroup is only deleted after a live re-check that its
   workload is really gone (never on the word of a possibly stale cache).

Transient failures (no response, 429, 5xx) are retried with exponential
backoff and jitter; anything else fails the action, which the next pass
plans again. Each write's response goes back into the cache at once, so the
next pass does not plan on the old state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..contract import MANAGED_BY, MANAGED_BY_LABEL, POD_GROUP_LABEL
from ..units import format_time
from . import metrics
from .actions import Action, Delete, Mark
from .errors import AlreadyExists, Blocked, Conflict, Invalid, KubeError, NotFound, Transient
from .model import (
    DISRUPTION_TARGET,
    EVENT,
    JOB,
    KINDS,
    POD,
    POD_GROUP,
    Kind,
    Ref,
)
from .settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
Result = Literal["done", "conflict", "gone", "failed", "skipped"]
COMPONENT = "batchgate-reconciler"


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    result: Result
    error: str = ""


class Taken(KubeError):
    """A network object's name is held by an object batchgate did not make."""


class StillInUse(KubeError):
    """A PodGroup's workload turned out to exist after all (the cache was behind)."""


class Actuator:
    def __init__(
        self,
        api: Any,
        settings: Settings,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        observe: Callable[[Mapping[str, Any] | None], None] = lambda obj: None,
        forget: Callable[[str, Mapping[str, Any]], None] = lambda kind, obj: None,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.settings = settings
        self.is_leader = is_leader
        self.observe = observe
        self.forget = forget
        self.sleep = sleep
        self.wall = wall
        self.writes = 0  # write requests sent, for tests and the steady-state check
        self.changes = 0  # writes that succeeded (2xx)
        self.write_log: list[tuple[str, str]] = []  # (verb, resource/name) of each
        self._known_events: OrderedDict[str, None] = OrderedDict()
        self._foreign: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # names others hold
        self._host = socket.gethostname()

    # -- plumbing ------------------------------------------------------------------
    def _write(self, verb: str, resource: str, what: str, fn: Callable[[], T]) -> T:
        """Send one write, retrying transient failures; counts every request sent."""
        attempts = max(self.settings.api_attempts, 1)
        for attempt in range(attempts):
            self.writes += 1
            self.write_log.append((verb, f"{resource}/{what}"))
            metrics.WRITES.labels(verb, resource).inc()
            try:
                result = fn()
            except Transient as e:
                if attempt == attempts - 1:
                    raise
                pause = self.settings.api_backoff * (2**attempt) * (0.75 + 0.5 * random.random())
                log.info("retrying %s %s/%s in %.2fs: %s", verb, resource, what, pause, e)
                self.sleep(pause)
                continue
            self.changes += 1
            crash = self.settings.crash_after_writes
            if crash is not None and self.changes >= crash:
                log.error("test hook: exiting abruptly after %d successful writes", self.changes)
                logging.shutdown()
                os._exit(137)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _stub(ref: Ref) -> dict[str, Any]:
        return {"kind": ref.kind, "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}}

    def _refresh(self, ref: Ref) -> None:
        """Re-read an object after a conflict, so the next pass plans on what is there now."""
        kind = KINDS.get(ref.kind)
        if kind is None:
            return
        try:
            self.observe(self.api.get(kind, ref.namespace, ref.name))
        except NotFound:
            self.forget(ref.kind, self._stub(ref))
        except KubeError as e:
            log.info("re-reading %s: %s", ref, e)

    # -- the steps -------------------------------------------------------------------
    def _event(self, a: Action) -> None:
        name = a.event_name()
        if name in self._known_events:
            return
        t = a.target
        now = format_time(self.wall())
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": t.namespace or "default",
                         "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
            "involvedObject": {"apiVersion": t.api_version, "kind": t.kind, "namespace": t.namespace,
                               "name": t.name, "uid": t.uid},
            "reason": a.reason,
            "message": a.message[:1024],
            "type": a.event_type,
            "source": {"component": COMPONENT, "host": self._host},
            "reportingComponent": f"batchgate.io/{COMPONENT}",
            "reportingInstance": self.settings.identity or self._host,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        with contextlib.suppress(AlreadyExists):  # told before, perhaps by a run that crashed right after
            self._write("create", "events", name, lambda: self.api.create(EVENT, t.namespace or "default", body))
        self._known_events[name] = None
        if len(self._known_events) > 50_000:
            self._known_events.popitem(last=False)

    def _annotate(self, a: Action, rv: str) -> str:
        t = a.target
        kind = KINDS[t.kind]
        patch = {"metadata": {"resourceVersion": rv, "annotations": dict(a.annotations or {})}}
        resp = self._write("patch", kind.plural, t.name, lambda: self.api.merge_patch(kind, t.namespace, t.name, patch))
        self.observe(resp)
        return str((resp.get("metadata") or {}).get("resourceVersion") or "") if isinstance(resp, dict) else ""

    def _delete(self, d: Delete) -> None:
        ref = d.ref
        kind = self._kind(ref.kind)
        if not ref.uid and d.owner_uid:
            found = self._owned(d)
            if found is None:
                return
            ref = found
        if d.disruption is not None and not self._disrupt(d):
            return
        try:
            resp = self._write("delete", kind.plural, ref.name, lambda: self.api.delete(
                kind, ref.namespace, ref.name, uid=ref.uid, propagation=d.propagation))
        except NotFound:
            self.forget(ref.kind, self._stub(ref))
            return
        except Conflict:
            # The uid precondition failed: what we meant is gone, and a new object of
            # the same name is not ours to delete.
            self.forget(ref.kind, self._stub(ref))
            return
        # Still there only while terminating: a deletionTimestamp with a grace period to run or
        # finalizers to wait for. An unscheduled pod is deleted at once, yet its response shows
        # a deletionTimestamp (grace period 0): taking that in would keep a pod that is gone.
        md = (resp.get("metadata") or {}) if isinstance(resp, dict) else {}
        if isinstance(resp, dict) and resp.get("kind") == ref.kind and md.get("deletionTimestamp") \
                and (md.get("deletionGracePeriodSeconds") != 0 or md.get("finalizers")):
            self.observe(resp)
        else:
            self.forget(ref.kind, self._stub(ref))

    def _owned(self, d: Delete) -> Ref | None:
        """``d.ref`` read live (metadata only) with its uid, when one of its ownerReferences is
        ``d.owner_uid``; None when it is gone or someone else's (left alone)."""
        ref = d.ref
        try:
            md = self.api.get_metadata(self._kind(ref.kind), ref.namespace, ref.name).get("metadata") or {}
        except NotFound:
            return None
        owners = md.get("ownerReferences") or []
        if not any(isinstance(o, dict) and o.get("uid") == d.owner_uid for o in owners) or not md.get("uid"):
            log.warning("%s %s/%s is not owned by %s: left alone", ref.kind, ref.namespace, ref.name, d.owner_uid)
            return None
        return dataclasses.replace(ref, uid=str(md["uid"]))

    def _disrupt(self, d: Delete) -> bool:
        """Write ``d.disruption`` as the pod's DisruptionTarget condition (a strategic merge patch of
        its status: the other conditions stay), with its uid as precondition, before it is deleted,
        as kube-controller-manager's taint manager and PodGC do. False when the pod is gone, or the
        name now belongs to another pod: nothing of ours left to delete."""
        ref, why = d.ref, d.disruption
        assert why is not None
        condition = {"type": DISRUPTION_TARGET, "status": "True", "reason": why.reason,
                     "message": why.message[:1024], "lastTransitionTime": format_time(self.wall())}
        patch = {"metadata": {"uid": ref.uid}, "status": {"conditions": [condition]}}
        try:
            resp = self._write("patch", "pods/status", ref.name, lambda: self.api.strategic_patch(
                POD, ref.namespace, ref.name, patch, subresource="status"))
        except (NotFound, Conflict):
            self.forget(ref.kind, self._stub(ref))
            return False
        except Invalid:
            # A uid is immutable: the API server refuses the patch of a pod of the same name made since.
            try:
                now = self.api.get(POD, ref.namespace, ref.name)
            except NotFound:
                now = None
            if now is None or (now.get("metadata") or {}).get("uid") != ref.uid:
                self.forget(ref.kind, self._stub(ref))
                return False
            raise
        self.observe(resp)
        return True

    def _mark(self, m: Mark) -> None:
        """Merge ``m.annotations`` into ``m.ref``; its uid in the patch makes the API server refuse
        (uid is immutable) a new object of the same name. Gone: nothing left to mark."""
        ref = m.ref
        kind = KINDS[ref.kind]
        patch = {"metadata": {"uid": ref.uid, "annotations": dict(m.annotations)}}
        try:
            resp = self._write("patch", kind.plural, ref.name,
                               lambda: self.api.merge_patch(kind, ref.namespace, ref.name, patch))
        except NotFound:
            self.forget(ref.kind, self._stub(ref))
            return
        self.observe(resp)

    def _patch(self, a: Action, chained_rv: str | None) -> str:
        """The action's merge patch; a fence on the planned resourceVersion moves to the one our own
        previous write of this object in the batch returned (as for annotations)."""
        t = a.target
        kind = KINDS[t.kind]
        patch: dict[str, Any] = dict(a.patch or {})
        md = patch.get("metadata")
        if chained_rv and isinstance(md, dict) and md.get("resourceVersion"):
            patch["metadata"] = {**md, "resourceVersion": chained_rv}
        resp = self._write("patch", kind.plural + (f"/{a.subresource}" if a.subresource else ""), t.name,
                           lambda: self.api.merge_patch(kind, t.namespace or None, t.name, patch,
                                                        subresource=a.subresource))
        self.observe(resp)
        return str((resp.get("metadata") or {}).get("resourceVersion") or "") if isinstance(resp, dict) else ""

    def _evict(self, pod: Ref) -> None:
        """Evict; a pod already gone is done. ``Blocked`` (a budget says no, for now) goes up."""
        try:
            self._write("create", "pods/eviction", pod.name,
                        lambda: self.api.evict(pod.namespace, pod.name, uid=pod.uid))
        except (NotFound, Conflict):
            self.forget("Pod", self._stub(pod))
            return
        self._refresh(pod)  # the pod now has its deletionTimestamp (or is gone)

    def _missing(self, a: Action) -> Action | None:
        """The ``otherwise`` of the first requirement that does not exist (looked up live, metadata
        only, so a Secret's data is never read), or None when all are there."""
        for r in a.requires:
            kind = self._kind(r.ref.kind)
            try:
                self.api.get_metadata(kind, r.ref.namespace, r.ref.name)
            except NotFound:
                other: Action = r.otherwise
                return other
        return None

    def _kind(self, name: str) -> Kind:
        """The resource to write ``name`` objects to."""
        return KINDS[name]

    def _create(self, body: Mapping[str, Any]) -> None:
        """Create an object; AlreadyExists means an earlier run (maybe one that crashed) did."""
        kind = self._kind(str(body.get("kind")))
        body = {**body, "apiVersion": kind.api_version}
        md = body.get("metadata") or {}
        ns, name = md.get("namespace") or "", md.get("name") or ""
        try:
            self.observe(self._write("create", kind.plural, name, lambda: self.api.create(kind, ns, body)))
        except AlreadyExists:
            self._refresh(Ref(kind.api_version, kind.kind, ns, name, ""))

    def _check_unused(self, a: Action) -> None:
        """Before deleting a PodGroup: make sure, live, that nothing of its workload is left."""
        w = a.pod_group
        assert w is not None
        if w.owner is not None:
            with contextlib.suppress(NotFound):
                job = self.api.get(JOB, w.namespace, w.owner.name)
                if (job.get("metadata") or {}).get("uid") == w.owner.uid:
                    raise StillInUse(f"Job {w.namespace}/{w.owner.name} still exists")
        elif w.group:
            pods = self.api.list(POD, w.namespace, label_selector=f"{POD_GROUP_LABEL}={w.group}", limit=1)
            if pods.get("items"):
                raise StillInUse(f"pods of group {w.group} still exist in {w.namespace}")

    def _pod_group(self, a: Action) -> None:
        w = a.pod_group
        assert w is not None
        if w.op == "create":
            md: dict[str, Any] = {"name": w.name, "namespace": w.namespace,
                                  "labels": {MANAGED_BY_LABEL: MANAGED_BY, POD_GROUP_LABEL: w.group}}
            if w.owner is not None:
                md["ownerReferences"] = [{"apiVersion": w.owner.api_version, "kind": w.owner.kind,
                                          "name": w.owner.name, "uid": w.owner.uid}]
            body = {"apiVersion": POD_GROUP.api_version, "kind": POD_GROUP.kind, "metadata": md,
                    "spec": {"minMember": w.min_member}}
            try:
                self.observe(self._write("create", "podgroups", w.name,
                                         lambda: self.api.create(POD_GROUP, w.namespace, body)))
            except AlreadyExists:
                self._refresh(Ref(POD_GROUP.api_version, "PodGroup", w.namespace, w.name, ""))
        elif w.op == "update":
            patch = {"metadata": {"resourceVersion": w.resource_version}, "spec": {"minMember": w.min_member}}
            self.observe(self._write("patch", "podgroups", w.name,
                                     lambda: self.api.merge_patch(POD_GROUP, w.namespace, w.name, patch)))
        else:
            self._delete(Delete(Ref(POD_GROUP.api_version, "PodGroup", w.namespace, w.name, w.uid)))

    def _net(self, a: Action) -> None:
        """A workload's Service / hostfile ConfigMap / NetworkPolicy. Create; if the name is taken,
        adopt the object only when batchgate made it (a run that crashed before its cache saw
        it), else leave it to its owner. Update with the resourceVersion as fence."""
        w = a.net
        assert w is not None
        kind = KINDS[w.kind]
        if w.op == "delete":
            self._delete(Delete(Ref(kind.api_version, w.kind, w.namespace, w.name, w.uid)))
            return
        assert w.body is not None
        body = dict(w.body)
        if w.op == "create":
            if (w.kind, w.namespace, w.name) in self._foreign:
                return
            try:
                self.observe(self._write("create", kind.plural, w.name,
                                         lambda: self.api.create(kind, w.namespace, body)))
                return
            except AlreadyExists:
                have = self.api.get(kind, w.namespace, w.name)
                md = have.get("metadata") or {}
                if (md.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
                    self._foreign[(w.kind, w.namespace, w.name)] = None
                    if len(self._foreign) > 10_000:
                        self._foreign.popitem(last=False)
                    raise Taken(f"{w.kind} {w.namespace}/{w.name} exists and is not managed by batchgate; "
                                f"left alone") from None
                rv = str(md.get("resourceVersion") or "")
        else:
            rv = w.resource_version
        patch = {"metadata": {**body["metadata"], "resourceVersion": rv}}
        for key in ("spec", "data"):
            if key in body:
                patch[key] = body[key]
        if w.kind == "NetworkPolicy" and "egress" not in body["spec"]:
            patch["spec"] = {**body["spec"], "egress": None}
        self.observe(self._write("patch", kind.plural, w.name,
                                 lambda: self.api.merge_patch(kind, w.namespace, w.name, patch)))

    # -- the whole -------------------------------------------------------------------
    def execute(self, actions: Iterable[Action]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        new_rv: dict[str, str] = {}  # uid -> resourceVersion after our own patch in this batch
        conflicted: set[str] = set()
        for a in actions:
            uid = a.target.uid
            if not self.is_leader():
                outcomes.append(self._done(a, "skipped", "not the leader"))
                continue
            if uid in conflicted:
                outcomes.append(self._done(a, "conflict", "an earlier action on this object conflicted"))
                continue
            try:
                if a.requires:
                    other = self._missing(a)
                    if other is not None:
                        outcomes += self.execute([other])
                        continue
                if a.kind == "delete-podgroup":
                    self._check_unused(a)
                if a.evict is not None:
                    self._evict(a.evict)  # before the Event: a budget may say no
                if not a.quiet and not a.tell_after:
                    self._event(a)
                if a.annotations:
                    new_rv[uid] = self._annotate(a, new_rv.get(uid) or a.resource_version)
                if a.patch is not None:
                    new_rv[uid] = self._patch(a, new_rv.get(uid))
                for d in a.deletes:
                    self._delete(d)
                if a.mark is not None:
                    self._mark(a.mark)
                if a.create is not None:
                    self._create(a.create)
                if a.pod_group is not None:
                    self._pod_group(a)
                if a.net is not None:
                    self._net(a)
                if not a.quiet and a.tell_after:
                    self._event(a)
                outcomes.append(self._done(a, "done"))
            except (Conflict, StillInUse) as e:
                conflicted.add(uid)
                if isinstance(e, Conflict):
                    self._refresh(a.target)
                outcomes.append(self._done(a, "conflict", str(e)))
            except Blocked as e:
                outcomes.append(self._done(a, "failed", f"a PodDisruptionBudget does not allow it now: {e}"))
            except NotFound as e:
                self.forget(a.target.kind, self._stub(a.target))
                outcomes.append(self._done(a, "gone", str(e)))
            except KubeError as e:
                outcomes.append(self._done(a, "failed", str(e)))
        return outcomes

    def _done(self, a: Action, result: Result, error: str = "") -> Outcome:
        metrics.ACTIONS.labels(a.kind, result).inc()
        if result == "done":
            metrics.scavenger_action(a.kind, a.amount)
        fields = {"action": a.kind, "kind": a.target.kind, "namespace": a.target.namespace,
                  "name": a.target.name, "reason": a.reason, "outcome": result}
        if error:
            fields["error"] = error
        level = logging.INFO if result in ("done", "skipped") else logging.WARNING
        log.log(level, "%s %s: %s", a.reason, a.target, a.message if result == "done" else error,
                extra={"fields": fields})
        return Outcome(a, result, error)



