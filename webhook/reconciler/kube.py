"""The reconciler's only door to the API server.

Built on the official ``kubernetes`` client for what it is good at (kubeconfig
and in-cluster credentials, TLS, token refresh, connection pooling), but speaking
raw JSON over REST paths rather than through generated models: the cache
converts objects into its own small views anyway, a watch stream must be read
line by line as it arrives, and merge patches with a ``resourceVersion`` fence
need an exact Content-Type. Every failure leaves this module as one of the
project's own ``errors`` (``raise NotFound(...) from e``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import Blocked, KubeError, Transient, error_for
from .model import POD, Kind

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class WatchStream:
    """The events of one watch request, as dicts; ``close()`` from any thread ends it."""

    def __init__(self, response: Any, method: str, path: str) -> None:
        self._resp = response
        self._closed = threading.Event()
        self._where = (method, path)

    def close(self) -> None:
        self._closed.set()
        shutdown = getattr(self._resp, "shutdown", None)  # urllib3 >= 2.3: unblocks a pending read
        if shutdown is not None:
            with contextlib.suppress(Exception):
                shutdown()
        with contextlib.suppress(Exception):
            self._resp.close()
            self._resp.release_conn()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buf = b""
        try:
            for chunk in self._resp.stream(amt=None, decode_content=True):
                if self._closed.is_set():
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buf.strip() and not self._closed.is_set():
                yield json.loads(buf)
        except json.JSONDecodeError as e:
            raise Transient(f"watch stream: bad JSON: {e}", method=self._where[0], path=self._where[1]) from e
        except Exception as e:
            if self._closed.is_set():
                return
            raise Transient(f"watch stream broke: {type(e).__name__}: {e}",
                            method=self._where[0], path=self._where[1]) from e
        finally:
            with contextlib.suppress(Exception):
                self._resp.release_conn()


def _quiet(api_client: Any) -> Any:
    """No urllib3 retries: each would log a warning, and the reconciler retries on its own
    (the next pass, the watch's backoff) with one line per failure."""
    api_client.configuration.retries = False
    api_client.rest_client.pool_manager.connection_pool_kw["retries"] = False
    return api_client


def _connection_problem(e: Exception, host: str) -> str:
    """One line for a request that got no HTTP answer: 'cannot connect to HOST: connection refused'."""
    text = " ".join(str(e).split())
    if "Connection refused" in text:
        return f"cannot connect to {host}: connection refused (is the API server up? is the kubeconfig's server right?)"
    if "Name or service not known" in text or "Temporary failure in name resolution" in text:
        return f"cannot connect to {host}: unknown host name"
    if "timed out" in text.lower():
        return f"no answer from {host}: timed out"
    return f"{type(e).__name__}: {text[:300]}"


class KubeApi:
    """JSON over REST with the credentials of a ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, *, timeout: float = 30.0) -> None:
        self.client = api_client
        self.timeout = timeout

    @staticmethod
    def connect(kubeconfig: str | None = None, *, timeout: float = 30.0) -> KubeApi:
        """``kubeconfig`` if given; else in-cluster credentials; else ``$KUBECONFIG`` / ~/.kube/config.
        Whatever goes wrong is one ``KubeError`` line naming the file and what was tried."""
        import os

        from kubernetes import client
        from kubernetes import config as kube_config

        config: Any = kube_config  # untyped library: its functions are called as documented
        if not kubeconfig:
            try:
                cfg = client.Configuration()
                config.load_incluster_config(client_configuration=cfg)
                return KubeApi(_quiet(client.ApiClient(cfg)), timeout=timeout)
            except config.ConfigException:
                pass
        tried = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        first = tried.split(os.pathsep)[0]
        if not any(os.path.isfile(f) for f in tried.split(os.pathsep) if f):
            where = "" if kubeconfig else (
                " (not in a cluster either: no service-account token mounted; tried "
                + ("$KUBECONFIG" if os.environ.get("KUBECONFIG") else "the default ~/.kube/config") + ")")
            raise KubeError(f"no kubeconfig at {tried}{where}; pass --kubeconfig FILE")
        try:
            return KubeApi(_quiet(config.new_client_from_config(config_file=kubeconfig or None)), timeout=timeout)
        except Exception as e:  # YAML errors, missing keys, unreadable files, bad base64: the library's many kinds
            detail = " ".join(str(e).split())
            raise KubeError(f"kubeconfig {first} is not usable: {detail[:300]}") from e

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

    # -- raw -------------------------------------------------------------------
    def _send(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
              content_type: str | None = None, timeout: Any = None, accept: str = "application/json") -> Any:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        try:
            request = self.client.param_serialize(
                method, path, query_params=list((query or {}).items()) or None, header_params=headers,
                body=body, auth_settings=["BearerToken"],
            )
            return self.client.call_api(*request, _request_timeout=timeout or self.timeout)
        except ApiException as e:  # raised before any response, e.g. TLS trouble
            raise Transient(f"{e.reason or e}", status=0, method=method, path=path) from e
        except Exception as e:  # urllib3: connection refused, timeouts, ...
            raise Transient(_connection_problem(e, self.client.configuration.host), method=method, path=path) from e

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                content_type: str | None = None, timeout: float | None = None,
                accept: str = "application/json") -> Any:
        """One request; the decoded JSON body on 2xx, else a ``KubeError`` subclass."""
        resp = self._send(method, path, query=query, body=body, content_type=content_type, timeout=timeout,
                          accept=accept)
        try:
            data = resp.read()
        except Exception as e:
            raise Transient(f"reading the response: {type(e).__name__}: {e}", method=method, path=path) from e
        status = resp.status
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = None
        if 200 <= status < 300:
            return decoded
        reason, message = "", (data or b"").decode("utf-8", "replace")[:300]
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            reason, message = decoded.get("reason") or "", decoded.get("message") or message
        raise error_for(status, reason or resp.reason or "", message, method=method, path=path)

    def request_object(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """:meth:`request` whose 2xx body must be a JSON object (every read and write of one)."""
        decoded = self.request(method, path, **kw)
        if not isinstance(decoded, dict):
            raise Transient(f"expected a JSON object, got {type(decoded).__name__}", method=method, path=path)
        return decoded

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int,
              query: Mapping[str, Any] | None = None) -> WatchStream:
        """Start a watch from ``resource_version``; HTTP errors raise before any event."""
        q = {**(query or {}), "watch": "true", "resourceVersion": resource_version,
             "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        resp = self._send("GET", path, query=q, timeout=(10.0, timeout_seconds + 30.0))
        if not 200 <= resp.status < 300:
            data = resp.read()
            try:
                st = json.loads(data)
            except ValueError:
                st = {}
            raise error_for(resp.status, st.get("reason", "") if isinstance(st, dict) else "",
                            st.get("message", "") if isinstance(st, dict) else "", method="GET", path=path)
        return WatchStream(resp.response, "GET", path)

    # -- by kind -----------------------------------------------------------------
    def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        return self.request_object("GET", kind.path(namespace, name))

    def get_metadata(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any]:
        """Only the object's metadata (PartialObjectMetadata): whether a Secret exists, without its data."""
        return self.request_object("GET", kind.path(namespace, name),
                                   accept="application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")

    def list(self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, limit: int = 500, continue_: str | None = None) -> dict[str, Any]:
        q: dict[str, Any] = {"limit": str(limit)}
        if label_selector:
            q["labelSelector"] = label_selector
        if field_selector:
            q["fieldSelector"] = field_selector
        if continue_:
            q["continue"] = continue_
        return self.request_object("GET", kind.path(namespace), query=q)

    def list_all(self, kind: Kind, namespace: str | None = None, *, limit: int = 500) -> Iterator[dict[str, Any]]:
        """Every object of ``kind`` (in ``namespace``, else everywhere), page by page, each with its
        apiVersion and kind (a list's items come without them)."""
        cont: str | None = None
        while True:
            page = self.list(kind, namespace, limit=limit, continue_=cont)
            for item in page.get("items") or ():
                if isinstance(item, dict):
                    yield {"apiVersion": kind.api_version, "kind": kind.kind, **item}
            cont = (page.get("metadata") or {}).get("continue") or None
            if not cont:
                return

    def create(self, kind: Kind, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request_object("POST", kind.path(namespace), body=dict(body))

    def replace(self, kind: Kind, namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request_object("PUT", kind.path(namespace, name), body=dict(body))

    def merge_patch(self, kind: Kind, namespace: str | None, name: str, patch: Mapping[str, Any], *,
                    subresource: str = "") -> dict[str, Any]:
        """JSON merge patch; put ``metadata.resourceVersion`` in it to fence it (409 when stale)."""
        path = kind.path(namespace, name) + (f"/{subresource}" if subresource else "")
        return self.request_object("PATCH", path, body=dict(patch), content_type=MERGE_PATCH)

    def strategic_patch(self, kind: Kind, namespace: str | None, name: str, patch: Mapping[str, Any], *,
                        subresource: str = "") -> dict[str, Any]:
        """Strategic merge patch (built-in kinds only): lists with a merge key, such as a pod's
        ``status.conditions`` (by ``type``), are merged entry by entry instead of replaced, so one
        condition is written without taking the others' places. ``metadata.uid`` in it is a
        precondition (the API server refuses to change a uid)."""
        path = kind.path(namespace, name) + (f"/{subresource}" if subresource else "")
        return self.request_object("PATCH", path, body=dict(patch), content_type=STRATEGIC_MERGE_PATCH)

    def evict(self, namespace: str, name: str, *, uid: str) -> None:
        """Evict a pod through the Eviction API (PodDisruptionBudgets apply), uid as precondition.

        Raises ``Blocked`` when a budget forbids it now (429), ``NotFound`` when the pod is gone.
        """
        path = POD.path(namespace, name) + "/eviction"
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}}}
        try:
            self.request("POST", path, body=body)
        except Transient as e:
            if e.status == 429:
                raise Blocked(e.args[0], status=429, reason=e.reason, method=e.method, path=e.path) from e
            raise

    def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None,
               propagation: str | None = None) -> dict[str, Any] | None:
        """Delete with the object's own grace period; ``uid`` as precondition (409 when it differs)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if propagation:
            body["propagationPolicy"] = propagation
        deleted = self.request("DELETE", kind.path(namespace, name), body=body)
        return deleted if isinstance(deleted, dict) else None
