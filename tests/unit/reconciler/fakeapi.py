"""An in-memory stand-in for ``webhook.reconciler.kube.KubeApi``, for unit tests.

It keeps the API server's rules that the reconciler relies on: resourceVersion
fencing on patch/replace (409 Conflict), uid preconditions on delete (409),
AlreadyExists on create, 404s; and it records every write. ``fail`` injects
errors: a list of exceptions raised by the next calls of a verb.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from webhook.reconciler.errors import AlreadyExists, Blocked, Conflict, Invalid, KubeError, NotFound
from webhook.reconciler.model import KINDS, Kind


class FakeApi:
    def __init__(self, *, pod_group_crd: bool = False) -> None:
        self.pod_group_crd = pod_group_crd  # without it, podgroups 404 as on a cluster without the CRD
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name)
        self._rv = itertools.count(100)
        self._uid = itertools.count(1)
        self.calls: list[tuple[str, str, str, str]] = []  # (verb, plural, namespace, name)
        self.fail: dict[str, list[KubeError]] = {}
        self.blocked: set[str] = set()  # pods whose eviction a PodDisruptionBudget refuses

    # -- helpers for tests -------------------------------------------------------
    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store an object as a client would have created it (uid and resourceVersion assigned)."""
        o = copy.deepcopy(dict(obj))
        md = o.setdefault("metadata", {})
        md.setdefault("uid", f"uid-{next(self._uid)}")
        md["resourceVersion"] = str(next(self._rv))
        kind = KINDS[o["kind"]]
        self.objects[(kind.plural, md.get("namespace", "") if kind.namespaced else "", md["name"])] = o
        return copy.deepcopy(o)

    def writes(self) -> list[tuple[str, str, str, str]]:
        return [c for c in self.calls if c[0] != "get" and c[0] != "list"]

    def events(self) -> list[dict[str, Any]]:
        return [o for (plural, _, _), o in self.objects.items() if plural == "events"]

    def _maybe_fail(self, verb: str) -> None:
        errs = self.fail.get(verb)
        if errs:
            raise errs.pop(0)

    def _key(self, kind: Kind, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (kind.plural, (namespace or "") if kind.namespaced else "", name)

    # -- the KubeApi surface ----------------------------------------------------------
    def request(self, method: str, path: str, **kw: Any) -> Any:
        """Discovery: every API group version is served."""
        self.calls.append((method.lower(), path, "", ""))
        return {"kind": "APIResourceList", "groupVersion": path.removeprefix("/apis/")}

    def get_metadata(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.get(kind, namespace, name)
        return {"kind": "PartialObjectMetadata", "metadata": obj.get("metadata", {})}

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        self.calls.append(("get", kind.plural, namespace or "", name))
        self._maybe_fail("get")
        try:
            return copy.deepcopy(self.objects[self._key(kind, namespace, name)])
        except KeyError:
            raise NotFound(f"{kind.plural} {name!r} not found", status=404) from None

    def list(self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int = 500, continue_: str | None = None) -> dict[str, Any]:
        self.calls.append(("list", kind.plural, namespace or "", ""))
        self._maybe_fail("list")
        if kind.plural == "podgroups" and not self.pod_group_crd:
            raise NotFound("the server could not find the requested resource", status=404)
        items = [copy.deepcopy(o) for (plural, ns, _), o in self.objects.items()
                 if plural == kind.plural and (not namespace or ns == namespace)]
        if label_selector:
            k, _, v = label_selector.partition("=")
            items = [o for o in items if (o["metadata"].get("labels") or {}).get(k) == v]
        for term in (field_selector or "").split(","):
            if term:  # path=value, as the API server's field selectors on Events
                path, _, v = term.partition("=")
                items = [o for o in items if _field(o, path) == v]
        return {"metadata": {"resourceVersion": str(next(self._rv))}, "items": items}

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int,
              query: Mapping[str, Any] | None = None) -> _QuietWatch:
        """A watch on which nothing ever happens (tests feed changes through the cache)."""
        self.calls.append(("watch", path, "", resource_version))
        return _QuietWatch()

    def create(self, kind: Kind, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self.calls.append(("create", kind.plural, namespace or "", name))
        self._maybe_fail("create")
        if self._key(kind, namespace, name) in self.objects:
            raise AlreadyExists(f"{kind.plural} {name!r} already exists", status=409, reason="AlreadyExists")
        return self.put({**body, "kind": kind.kind})

    def replace(self, kind: Kind, namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("replace", kind.plural, namespace or "", name))
        self._maybe_fail("replace")
        cur = self.objects.get(self._key(kind, namespace, name))
        if cur is None:
            raise NotFound("not found", status=404)
        if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified", status=409, reason="Conflict")
        new = copy.deepcopy(dict(body))
        new["metadata"]["uid"] = cur["metadata"]["uid"]
        return self.put(new)

    def merge_patch(self, kind: Kind, namespace: str | None, name: str, patch: Mapping[str, Any], *,
                    subresource: str = "") -> dict[str, Any]:
        self.calls.append(("patch", kind.plural + (f"/{subresource}" if subresource else ""), namespace or "", name))
        self._maybe_fail("patch")
        cur = self.objects.get(self._key(kind, namespace, name))
        if cur is None:
            raise NotFound("not found", status=404)
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != cur["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified", status=409, reason="Conflict")
        new = merge(copy.deepcopy(cur), {k: v for k, v in patch.items()})
        new["metadata"].pop("resourceVersion", None)
        return self.put(new)

    def strategic_patch(self, kind: Kind, namespace: str | None, name: str, patch: Mapping[str, Any], *,
                        subresource: str = "") -> dict[str, Any]:
        """A strategic merge patch as the API server applies one to a pod: ``status.conditions`` are
        merged by ``type``; a ``metadata.uid`` other than the object's is refused (422: immutable)."""
        self.calls.append(("patch", kind.plural + (f"/{subresource}" if subresource else ""), namespace or "", name))
        self._maybe_fail("patch")
        cur = self.objects.get(self._key(kind, namespace, name))
        if cur is None:
            raise NotFound("not found", status=404)
        uid = (patch.get("metadata") or {}).get("uid")
        if uid is not None and uid != cur["metadata"]["uid"]:
            raise Invalid("metadata.uid: Invalid value: field is immutable", status=422, reason="Invalid")
        new = copy.deepcopy(cur)
        conditions = (patch.get("status") or {}).get("conditions")
        rest = {k: v for k, v in patch.items() if k != "status"}
        rest["status"] = {k: v for k, v in (patch.get("status") or {}).items() if k != "conditions"}
        merge(new, rest)
        if conditions is not None:
            have = new.setdefault("status", {}).setdefault("conditions", [])
            for c in conditions:
                old = next((x for x in have if x.get("type") == c.get("type")), None)
                if old is None:
                    have.append(copy.deepcopy(c))
                else:
                    old.update(copy.deepcopy(c))
        new["metadata"].pop("resourceVersion", None)
        return self.put(new)

    def evict(self, namespace: str, name: str, *, uid: str) -> None:
        """Eviction: ``blocked`` (pod names) answer 429 as a PodDisruptionBudget would; else the pod goes."""
        self.calls.append(("create", "pods/eviction", namespace, name))
        self._maybe_fail("evict")
        key = ("pods", namespace, name)
        cur = self.objects.get(key)
        if cur is None:
            raise NotFound("not found", status=404)
        if cur["metadata"]["uid"] != uid:
            raise Conflict("Precondition failed: UID in precondition", status=409, reason="Conflict")
        if name in self.blocked:
            raise Blocked("Cannot evict pod as it would violate the pod's disruption budget.", status=429)
        del self.objects[key]

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               propagation: str | None = None) -> dict[str, Any] | None:
        self.calls.append(("delete", kind.plural, namespace or "", name))
        self._maybe_fail("delete")
        key = self._key(kind, namespace, name)
        cur = self.objects.get(key)
        if cur is None:
            raise NotFound("not found", status=404)
        if uid and cur["metadata"]["uid"] != uid:
            raise Conflict("Precondition failed: UID in precondition", status=409, reason="Conflict")
        del self.objects[key]
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}


class _QuietWatch:
    def __init__(self) -> None:
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._closed.wait(30)
        return iter(())

    def close(self) -> None:
        self._closed.set()


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied to ``target`` in place, as the API server applies one."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


def _field(obj: Any, path: str) -> Any:
    if path == "source":  # an Event's: source.component, else reportingComponent
        return (obj.get("source") or {}).get("component") or obj.get("reportingComponent")
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj
