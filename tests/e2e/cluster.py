"""A throw-away Kubernetes control plane on loopback, for end-to-end tests.

``LocalCluster`` starts etcd, kube-apiserver, kube-controller-manager and
kube-scheduler (Kubernetes $KUBE_VERSION, default 1.37) on 127.0.0.1 with free ports and a temporary directory,
and tears everything down again (process groups, atexit, parent-death signal),
so no process outlives the test session.

``ExistingCluster`` talks to a cluster given by ``$KUBECONFIG`` instead
(``USE_EXISTING_CLUSTER=true``); the ordinary users are then played through
impersonation by the kubeconfig's own identity.

``BATCHGATE_E2E_KEEP=1`` keeps the temporary directory (each component's log is
there); ``BATCHGATE_E2E_SCHEDULER_V=5`` runs kube-scheduler at that log level.

Both offer the same helpers:

* ``request(method, path, body=None, as_user="admin")`` — plain JSON REST
  (independent of the ``kubernetes`` client's version), plus ``get``,
  ``create``, ``patch``, ``delete``.
* ``api_client(identity)`` — a ``kubernetes.client.ApiClient`` for ``admin``,
  ``alice`` or ``bob``; ``kubeconfig(identity)`` — the path of its kubeconfig.
* ``create_node(...)``, ``set_pod_phase(...)``, ``register_webhooks(...)``,
  ``create_namespace(...)``, ``wait_for(...)``.

Identities (see ``IDENTITIES``):

* ``admin`` — groups ``system:masters``;
* ``alice`` — groups ``devs``, ``system:authenticated``: an ordinary user;
* ``bob``   — groups ``batchgate:admins``, ``system:authenticated``.

Nobody but ``admin`` has any rights until a binding grants them;
``create_namespace`` binds ``alice`` and ``bob`` to the ``edit`` ClusterRole in
the namespace it makes.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import copy
import ctypes
import datetime as _dt
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
KUBE_BINARIES_SH = REPO_ROOT / "hack" / "kube-binaries.sh"

#: name -> groups. Tokens are generated per cluster (``LocalCluster.tokens``).
IDENTITIES: dict[str, list[str]] = {
    "admin": ["system:masters"],
    "alice": ["devs", "system:authenticated"],
    "bob": ["batchgate:admins", "system:authenticated"],
}

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class BinariesUnavailable(RuntimeError):
    """No control-plane binaries could be found (or built)."""


class ClusterStartError(RuntimeError):
    """The control plane did not come up; the message carries the log tails."""


class KubeApiError(RuntimeError):
    """An API request answered with an HTTP error; ``status`` is the HTTP code."""

    def __init__(self, status: int, method: str, path: str, body: Any):
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        msg = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {msg}")


# --------------------------------------------------------------------------
# binaries


def find_binaries(allow_build: bool | None = None, timeout: float = 3600) -> Path:
    """Return the directory with etcd, kube-apiserver, ... via hack/kube-binaries.sh.

    Building from source (minutes, needs root and apt) only happens when
    ``allow_build`` is true, or when it is None and ``BATCHGATE_E2E_BUILD=1``.
    Raises BinariesUnavailable with the script's message otherwise.
    """
    if allow_build is None:
        allow_build = os.environ.get("BATCHGATE_E2E_BUILD") == "1"
    env = dict(os.environ)
    if not allow_build:
        env["BATCHGATE_NO_BUILD"] = "1"
    env.pop("USE_EXISTING_CLUSTER", None)
    try:
        proc = subprocess.run(
            ["bash", str(KUBE_BINARIES_SH)],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BinariesUnavailable(f"{KUBE_BINARIES_SH}: {exc}") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        err = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise BinariesUnavailable(
            f"no Kubernetes control-plane binaries ({KUBE_BINARIES_SH} exited "
            f"{proc.returncode}): {err}\n"
            "Run `hack/e2e-deps.sh` (builds Kubernetes $KUBE_VERSION, default 1.37, from Go "
            "modules once, ~10 min), or set "
            "KUBEBUILDER_ASSETS, or USE_EXISTING_CLUSTER=true with KUBECONFIG, "
            "or BATCHGATE_E2E_BUILD=1 to build from the test run."
        )
    bindir = Path(lines[-1])
    for b in ("etcd", "kube-apiserver"):
        if not os.access(bindir / b, os.X_OK):
            raise BinariesUnavailable(f"{bindir}/{b} is missing or not executable")
    return bindir


# --------------------------------------------------------------------------
# small utilities


def binary_version(path: Path) -> tuple[int, int]:
    """(major, minor) of a Kubernetes binary, from ``--version`` ("Kubernetes v1.37.2")."""
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60).stdout
    try:
        major, minor = out.split("v", 1)[1].split(".")[:2]
        return int(major), int(minor)
    except (IndexError, ValueError):
        raise BinariesUnavailable(f"{path} --version said {out.strip()!r}, not 'Kubernetes vX.Y.Z'") from None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_rfc3339(offset_seconds: float = 0) -> str:
    t = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=offset_seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 200 * lines))
            data = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<{path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30,
    interval: float = 0.2,
    message: str | Callable[[], str] = "condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; return that.

    KubeApiError 404 from the predicate counts as "not yet". Raises
    TimeoutError naming ``message`` (and the last error) after ``timeout``.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = message() if callable(message) else message
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {msg}{extra}")
        time.sleep(interval)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate_group(p: subprocess.Popen, grace: float) -> None:  # type: ignore[type-arg]
    """SIGTERM the process group a child leads, wait up to ``grace`` seconds, then SIGKILL
    it and wait 5 more (raises TimeoutExpired if even that does not end it)."""
    if p.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=5)


def _mark_owner(d: Path) -> None:
    (d / "owner.pid").write_text(str(os.getpid()))


def reap_stale_dirs() -> list[Path]:
    """Remove temp dirs of earlier sessions whose owning process is gone (a
    SIGKILLed pytest cannot clean up; its etcd data would sit in /dev/shm)."""
    removed = []
    bases = {Path(tempfile.gettempdir()), Path("/dev/shm")}
    if os.environ.get("BATCHGATE_E2E_TMPDIR"):
        bases.add(Path(os.environ["BATCHGATE_E2E_TMPDIR"]))
    for base in bases:
        with contextlib.suppress(OSError):
            for d in base.glob("batchgate-e2e-*"):
                try:
                    pid = int((d / "owner.pid").read_text().strip())
                except (OSError, ValueError):
                    continue
                if pid != os.getpid() and not _pid_alive(pid):
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d)
    return removed


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent


# --------------------------------------------------------------------------
# certificates (cryptography)


def _make_pki(d: Path) -> dict[str, Path]:
    """CA, API server serving cert, service-account key pair; returns file paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def key():
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def write_key(k, path: Path):
        path.write_bytes(
            k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)

    now = _dt.datetime.now(_dt.UTC) - _dt.timedelta(minutes=5)
    later = now + _dt.timedelta(days=2)

    ca_key = key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "batchgate-e2e-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=True,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = key()
    sans = [
        x509.DNSName(n)
        for n in (
            "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", SERVICE_IP)]
    srv_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = key()

    files = {
        "ca.crt": d / "ca.crt",
        "ca.key": d / "ca.key",
        "apiserver.crt": d / "apiserver.crt",
        "apiserver.key": d / "apiserver.key",
        "sa.key": d / "sa.key",
        "sa.pub": d / "sa.pub",
    }
    files["ca.crt"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    write_key(ca_key, files["ca.key"])
    files["apiserver.crt"].write_bytes(srv_cert.public_bytes(serialization.Encoding.PEM))
    write_key(srv_key, files["apiserver.key"])
    write_key(sa_key, files["sa.key"])
    files["sa.pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return files


# --------------------------------------------------------------------------
# a minimal JSON REST transport (stdlib only)


class _Transport:
    def __init__(
        self,
        server: str,
        *,
        ca_file: str | None = None,
        ca_data: bytes | None = None,
        verify: bool = True,
        token: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ):
        u = urllib.parse.urlsplit(server)
        self.scheme = u.scheme
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.token = token
        self.headers = list(headers)
        self.ctx: ssl.SSLContext | None = None
        if self.scheme == "https":
            ctx = ssl.create_default_context(
                cafile=ca_file, cadata=ca_data.decode() if ca_data else None
            )
            if not verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if cert_file:
                ctx.load_cert_chain(cert_file, key_file)
            self.ctx = ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str | None = None,
        query: Mapping[str, Any] | None = None,
        timeout: float = 30,
        accept: str = "application/json",
    ) -> Any:
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        # 429 with Retry-After is the API server saying "not yet" (a CRD's storage still
        # initialising, priority and fairness): a client waits and asks again, as client-go does
        for attempt in range(10):
            try:
                return self._once(method, path, body, content_type, timeout, accept)
            except KubeApiError as e:
                if e.status != 429 or attempt == 9:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def _once(self, method: str, path: str, body: Any, content_type: str | None, timeout: float,
              accept: str) -> Any:
        if self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, context=self.ctx, timeout=timeout
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.putrequest(method, self.prefix + path)
            conn.putheader("Accept", accept)
            if self.token:
                conn.putheader("Authorization", f"Bearer {self.token}")
            for k, v in self.headers:
                conn.putheader(k, v)
            data = None
            if body is not None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                if content_type is None:
                    content_type = (
                        "application/merge-patch+json" if method == "PATCH" else "application/json"
                    )
                conn.putheader("Content-Type", content_type)
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders(data)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        if resp.status >= 400:
            raise KubeApiError(resp.status, method, path, parsed)
        return parsed


# --------------------------------------------------------------------------
# helpers shared by local and existing clusters


def _resource_path(api_version: str, kind_plural: str, namespace: str | None, name: str | None):
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    p = base
    if namespace:
        p += f"/namespaces/{namespace}"
    p += f"/{kind_plural}"
    if name:
        p += f"/{name}"
    return p


def _default_container_state(phase: str) -> dict:
    if phase == "Running":
        return {"running": {"startedAt": now_rfc3339(-5)}}
    if phase == "Succeeded":
        return {"terminated": {"exitCode": 0, "reason": "Completed"}}
    if phase == "Failed":
        return {"terminated": {"exitCode": 1, "reason": "Error"}}
    return {"waiting": {"reason": "ContainerCreating"}}


def container_state(spec: Any) -> dict:
    """Normalise a container state spec for ``set_pod_phase``.

    Accepts a full ``ContainerState`` dict (``{"terminated": {...}}``), the
    shorthands ``"running"``, ``"waiting"``, ``"OOMKilled"``, ``"Completed"``,
    ``"Error"``, or an int exit code (0 -> Completed, else Error).
    """
    if isinstance(spec, Mapping):
        st = copy.deepcopy(dict(spec))
    elif isinstance(spec, bool):
        raise TypeError("container state must be a dict, a shorthand string or an exit code")
    elif isinstance(spec, int):
        st = {"terminated": {"exitCode": spec, "reason": "Completed" if spec == 0 else "Error"}}
    elif isinstance(spec, str):
        key = spec.lower()
        if key == "running":
            st = {"running": {}}
        elif key == "waiting":
            st = {"waiting": {"reason": "ContainerCreating"}}
        elif key == "oomkilled":
            st = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
        elif key == "completed":
            st = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        elif key == "error":
            st = {"terminated": {"exitCode": 1, "reason": "Error"}}
        else:
            raise ValueError(f"unknown container state shorthand {spec!r}")
    else:
        raise TypeError(f"bad container state {spec!r}")
    if "running" in st:
        st["running"].setdefault("startedAt", now_rfc3339(-5))
    if "terminated" in st:
        st["terminated"].setdefault("exitCode", 1)
        st["terminated"].setdefault("startedAt", now_rfc3339(-5))
        st["terminated"].setdefault("finishedAt", now_rfc3339())
    return st


class _ClusterBase:
    """API helpers; subclasses provide ``_transports`` and ``kubeconfig()``."""

    server: str
    _transports: dict[str, _Transport]
    _api_clients: dict[str, Any]

    # ---- raw REST ------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *, as_user: str = "admin",
                content_type: str | None = None, query: Mapping[str, Any] | None = None,
                timeout: float = 30, accept: str = "application/json") -> Any:
        """JSON REST call as ``as_user``; raises KubeApiError on HTTP errors.

        PATCH bodies default to ``application/merge-patch+json``; ``accept`` e.g. a Table
        (what kubectl get prints: ``application/json;as=Table;v=v1;g=meta.k8s.io``).
        """
        try:
            t = self._transports[as_user]
        except KeyError:
            raise KeyError(f"unknown identity {as_user!r}; have {sorted(self._transports)}") from None
        return t.request(method, path, body, content_type=content_type, query=query,
                         timeout=timeout, accept=accept)

    def get(self, path: str, *, as_user: str = "admin", **query: Any) -> Any:
        return self.request("GET", path, as_user=as_user, query=query or None)

    def create(self, path: str, body: Any, *, as_user: str = "admin") -> Any:
        return self.request("POST", path, body, as_user=as_user)

    def patch(self, path: str, body: Any, *, as_user: str = "admin",
              content_type: str = "application/merge-patch+json") -> Any:
        return self.request("PATCH", path, body, as_user=as_user, content_type=content_type)

    def delete(self, path: str, *, as_user: str = "admin", missing_ok: bool = True,
               body: Any = None) -> Any:
        try:
            return self.request("DELETE", path, body, as_user=as_user)
        except KubeApiError as exc:
            if exc.status == 404 and missing_ok:
                return None
            raise

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
            return True
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise

    def can_i(self, verb: str, resource: str, *, as_user: str, namespace: str | None = None,
              group: str = "") -> bool:
        """SelfSubjectAccessReview as ``as_user``."""
        attrs: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attrs["namespace"] = namespace
        r = self.create(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
             "spec": {"resourceAttributes": attrs}},
            as_user=as_user,
        )
        return bool(r["status"].get("allowed"))

    wait_for = staticmethod(wait_for)

    def server_version(self) -> tuple[int, int]:
        v = self.get("/version")
        minor = "".join(ch for ch in v.get("minor", "0") if ch.isdigit()) or "0"
        return int(v.get("major", "1")), int(minor)

    @property
    def kubelet_version(self) -> str:
        """What a fake node says its kubelet is: the control plane's own version."""
        if not hasattr(self, "_kubelet_version"):
            self._kubelet_version = self.get("/version").get("gitVersion", "v0.0.0")
        return self._kubelet_version

    # ---- kubernetes client ---------------------------------------------

    def kubeconfig(self, identity: str = "admin") -> str:
        raise NotImplementedError

    @property
    def kubeconfigs(self) -> dict[str, str]:
        return {i: self.kubeconfig(i) for i in IDENTITIES}

    def api_client(self, identity: str = "admin"):
        """A cached ``kubernetes.client.ApiClient`` acting as ``identity``."""
        if identity not in self._api_clients:
            from kubernetes import config

            self._api_clients[identity] = config.new_client_from_config(
                config_file=self.kubeconfig(identity)
            )
        return self._api_clients[identity]

    def _close_api_clients(self) -> None:
        for c in self._api_clients.values():
            with contextlib.suppress(Exception):
                c.close()
        self._api_clients.clear()

    # ---- namespaces ----------------------------------------------------

    def create_namespace(self, name: str | None = None, *, prefix: str = "e2e",
                         edit_users: Iterable[str] = ("alice", "bob"),
                         labels: Mapping[str, str] | None = None,
                         wait_service_account: bool = True, timeout: float = 60) -> str:
        """Make a namespace, bind ``edit_users`` to ClusterRole ``edit`` there,
        wait until its ``default`` ServiceAccount is usable; return the name."""
        if name is None:
            name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.create("/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(labels or {})},
        })
        users = list(edit_users)
        if users:
            self.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{name}/rolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "batchgate-e2e-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}
                             for u in users],
            })
        if wait_service_account:
            self.wait_for_service_account(name, timeout=timeout)
        return name

    def wait_for_service_account(self, namespace: str, name: str = "default",
                                 timeout: float = 60) -> dict:
        """Wait for the ServiceAccount and, before Kubernetes 1.24, its token
        secret (the ServiceAccount admission plugin rejects pods until then)."""
        need_token = self.server_version() < (1, 24) and self._has_token_controller()

        def ready():
            sa = self.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
            return sa if (sa.get("secrets") or not need_token) else None

        return wait_for(ready, timeout, message=f"ServiceAccount {namespace}/{name} with token")

    def _has_token_controller(self) -> bool:
        return True

    def delete_namespace(self, name: str, *, wait: bool = False, timeout: float = 60) -> None:
        self.delete(f"/api/v1/namespaces/{name}")
        if wait:
            wait_for(lambda: not self.exists(f"/api/v1/namespaces/{name}"), timeout,
                     message=f"namespace {name} to go away")

    # ---- nodes ---------------------------------------------------------

    def create_node(self, name: str, cpu: str = "4", memory: str = "8Gi", *,
                    labels: Mapping[str, str] | None = None,
                    taints: Iterable[Mapping[str, Any]] = (),
                    pods: str = "110", extra_capacity: Mapping[str, str] | None = None,
                    wait_schedulable: bool = True, timeout: float = 30) -> dict:
        """Create a Node (no kubelet behind it) and mark it Ready via the status
        subresource. With ``wait_schedulable`` wait until the node lifecycle
        controller removed the ``node.kubernetes.io/not-ready`` taint that the
        TaintNodesByCondition admission plugin puts on new nodes."""
        capacity = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi"}
        capacity.update(extra_capacity or {})
        all_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "batchgate.io/e2e-fake-node": "true",
        }
        all_labels.update(labels or {})
        self.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        })
        node = self.mark_node_ready(name, capacity=capacity)
        if wait_schedulable:
            def schedulable():
                n = self.get(f"/api/v1/nodes/{name}")
                keys = {t.get("key") for t in (n.get("spec", {}).get("taints") or [])}
                bad = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
                return n if not (keys & bad) else None

            node = wait_for(schedulable, timeout,
                            message=f"node {name} to lose its not-ready taint")
        return node

    def mark_node_ready(self, name: str, *, capacity: Mapping[str, str] | None = None,
                        ready: bool = True) -> dict:
        """Post a kubelet-like status (conditions with a fresh heartbeat)."""
        ts = now_rfc3339()

        def cond(type_: str, status: str, reason: str, msg: str) -> dict:
            return {"type": type_, "status": status, "reason": reason, "message": msg,
                    "lastHeartbeatTime": ts, "lastTransitionTime": ts}

        status: dict[str, Any] = {
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "fake"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "fake"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "fake"),
                cond("Ready", "True" if ready else "False",
                     "KubeletReady" if ready else "KubeletNotReady", "batchgate e2e fake node"),
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux",
                "kubeletVersion": self.kubelet_version, "kubeProxyVersion": "",
                "containerRuntimeVersion": "fake://0", "kernelVersion": "", "osImage": "fake",
                "bootID": "", "machineID": "", "systemUUID": "",
            },
        }
        if capacity is not None:
            status["capacity"] = dict(capacity)
            status["allocatable"] = dict(capacity)
        return self.patch(f"/api/v1/nodes/{name}/status", {"status": status})

    def delete_node(self, name: str) -> None:
        self.delete(f"/api/v1/nodes/{name}")

    # ---- pods ----------------------------------------------------------

    def set_pod_phase(self, namespace: str, name: str, phase: str,
                      container_states: Mapping[str, Any] | None = None, *,
                      init_container_states: Mapping[str, Any] | None = None,
                      reason: str | None = None, message: str | None = None,
                      as_user: str = "admin") -> dict:
        """Play kubelet: set ``status.phase`` and the container statuses of a pod
        through the status subresource.

        ``container_states`` maps container names to a state (see
        ``container_state``: a ContainerState dict, ``"OOMKilled"``, an exit
        code, ...); containers not named get a default for ``phase``.
        Example: ``set_pod_phase(ns, "p", "Failed", {"main": "OOMKilled"})``.
        """
        if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            raise ValueError(f"bad pod phase {phase!r}")
        states = dict(container_states or {})
        init_states = dict(init_container_states or {})
        pod = self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        spec = pod.get("spec", {})
        names = {c["name"] for c in spec.get("containers", [])}
        unknown = (set(states) - names)
        if unknown:
            raise ValueError(f"pod {namespace}/{name} has no containers {sorted(unknown)}; "
                             f"it has {sorted(names)}")

        def statuses(containers, given, default):
            out = []
            for c in containers:
                st = container_state(given[c["name"]]) if c["name"] in given else default()
                out.append({
                    "name": c["name"], "image": c.get("image", ""), "imageID": "",
                    "containerID": f"fake://{c['name']}",
                    "ready": phase == "Running" and "running" in st,
                    "started": "running" in st, "restartCount": 0, "state": st,
                })
            return out

        status: dict[str, Any] = {
            "phase": phase,
            "containerStatuses": statuses(spec.get("containers", []), states,
                                          lambda: _default_container_state(phase)),
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = statuses(
                spec["initContainers"], init_states,
                lambda: {"terminated": {"exitCode": 0, "reason": "Completed",
                                        "startedAt": now_rfc3339(-10),
                                        "finishedAt": now_rfc3339(-5)}}
                if phase != "Pending" else {"waiting": {"reason": "PodInitializing"}},
            )
        if not pod.get("status", {}).get("startTime") and phase != "Pending":
            status["startTime"] = now_rfc3339(-5)
        if reason is not None:
            status["reason"] = reason
        if message is not None:
            status["message"] = message
        for st in status["containerStatuses"]:
            if "terminated" in st["state"]:
                t = st["state"]["terminated"]
                t.setdefault("startedAt", now_rfc3339(-5))
                t.setdefault("finishedAt", now_rfc3339())
            if "running" in st["state"]:
                st["state"]["running"].setdefault("startedAt", now_rfc3339(-5))
        return self.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                          {"status": status}, as_user=as_user)

    def wait_for_pods(self, namespace: str, *, label_selector: str | None = None,
                      count: int = 1, predicate: Callable[[dict], bool] | None = None,
                      timeout: float = 60) -> list[dict]:
        """Poll until at least ``count`` pods match; return them."""
        def poll():
            q = {"labelSelector": label_selector} if label_selector else None
            items = self.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=q)["items"]
            if predicate:
                items = [p for p in items if predicate(p)]
            return items if len(items) >= count else None

        return wait_for(poll, timeout,
                        message=f"{count} pod(s) in {namespace} matching {label_selector!r}")

    # ---- admission webhooks -------------------------------------------

    def register_webhooks(self, mutating_config: Mapping[str, Any] | None = None,
                          validating_config: Mapping[str, Any] | None = None) -> dict[str, dict]:
        """Create or replace a MutatingWebhookConfiguration and/or a
        ValidatingWebhookConfiguration (full objects as dicts, apiVersion
        admissionregistration.k8s.io/v1). The API server picks changes up
        asynchronously (typically well under a second)."""
        out: dict[str, dict] = {}
        for kind, plural, cfg in (
            ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", mutating_config),
            ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations",
             validating_config),
        ):
            if cfg is None:
                continue
            body = copy.deepcopy(dict(cfg))
            body.setdefault("apiVersion", "admissionregistration.k8s.io/v1")
            body.setdefault("kind", kind)
            name = body.get("metadata", {}).get("name")
            if not name:
                raise ValueError(f"{kind} needs metadata.name")
            base = "/apis/admissionregistration.k8s.io/v1/" + plural
            try:
                cur = self.get(f"{base}/{name}")
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                out[plural] = self.create(base, body)
            else:
                body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                out[plural] = self.request("PUT", f"{base}/{name}", body)
        return out

    def delete_webhooks(self, mutating: str | None = None, validating: str | None = None) -> None:
        base = "/apis/admissionregistration.k8s.io/v1/"
        if mutating:
            self.delete(base + "mutatingwebhookconfigurations/" + mutating)
        if validating:
            self.delete(base + "validatingwebhookconfigurations/" + validating)


# --------------------------------------------------------------------------
# the local control plane


_LIVE: set[LocalCluster] = set()
_SIGTERM_INSTALLED = False


def _stop_all() -> None:
    for c in list(_LIVE):
        with contextlib.suppress(Exception):
            c.stop()


atexit.register(_stop_all)


def _install_sigterm_handler() -> None:
    """Turn SIGTERM into KeyboardInterrupt so pytest tears fixtures down."""
    global _SIGTERM_INSTALLED
    if _SIGTERM_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        def handler(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")
        signal.signal(signal.SIGTERM, handler)
    _SIGTERM_INSTALLED = True


class LocalCluster(_ClusterBase):
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on loopback.

    Use as a context manager, or ``start()`` / ``stop()``.
    ``components`` tells which ones run (an envtest asset dir may lack the
    controller manager and scheduler).
    """

    def __init__(self, bin_dir: str | os.PathLike | None = None, *,
                 workdir: str | os.PathLike | None = None, keep_workdir: bool | None = None,
                 start_timeout: float | None = None, verbosity: int = 1,
                 extra_apiserver_args: Iterable[str] = ()):
        self.bin_dir = Path(bin_dir) if bin_dir else find_binaries()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(
            tempfile.mkdtemp(prefix="batchgate-e2e-", dir=os.environ.get("BATCHGATE_E2E_TMPDIR"))
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._own_workdir:
            _mark_owner(self.workdir)
        self.keep_workdir = (os.environ.get("BATCHGATE_E2E_KEEP") == "1"
                             if keep_workdir is None else keep_workdir)
        self.start_timeout = start_timeout or float(
            os.environ.get("BATCHGATE_E2E_START_TIMEOUT", "90"))
        self.verbosity = verbosity
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.components = [c for c in CONTROL_PLANE if os.access(self.bin_dir / c, os.X_OK)]
        self.binary_version = binary_version(self.bin_dir / "kube-apiserver")
        self.procs: dict[str, subprocess.Popen] = {}
        self._args: dict[str, list[str]] = {}
        self.logs: dict[str, Path] = {}
        self.tokens = {name: secrets.token_hex(16) for name in IDENTITIES}
        self._transports = {}
        self._api_clients = {}
        self._kubeconfigs: dict[str, str] = {}
        self._etcd_dir: Path | None = None
        self.ports: dict[str, int] = {}
        self.server = ""
        self.pki: dict[str, Path] = {}
        self._stopped = False
        self.timings: dict[str, float] = {}  # seconds after start() until each was ready
        self.startup_seconds = 0.0

    # ---- lifecycle -----------------------------------------------------

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        _install_sigterm_handler()
        reap_stale_dirs()
        _LIVE.add(self)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        t0 = time.monotonic()
        deadline = t0 + self.start_timeout
        for c in ("etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler"):
            self.ports[c] = free_port()
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        pki_dir = self.workdir / "pki"
        pki_dir.mkdir(exist_ok=True)
        self.pki = _make_pki(pki_dir)
        self._write_identities()

        # etcd: data on tmpfs when we can (fast fsync), else in the workdir
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.workdir
        self._etcd_dir = Path(tempfile.mkdtemp(prefix="batchgate-e2e-etcd-", dir=base))
        _mark_owner(self._etcd_dir)
        ec, ep = self.ports["etcd-client"], self.ports["etcd-peer"]
        self._spawn("etcd", [
            "--name=default",
            f"--data-dir={self._etcd_dir}",
            f"--listen-client-urls=http://127.0.0.1:{ec}",
            f"--advertise-client-urls=http://127.0.0.1:{ec}",
            f"--listen-peer-urls=http://127.0.0.1:{ep}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ep}",
            f"--initial-cluster=default=http://127.0.0.1:{ep}",
            "--initial-cluster-state=new",
            "--log-level=warn",
        ], env_extra={"ETCD_UNSUPPORTED_ARCH": os.environ.get("ETCD_UNSUPPORTED_ARCH", "")})
        self._wait_http(f"http://127.0.0.1:{ec}/health", "etcd", deadline)
        self.timings["etcd"] = time.monotonic() - t0

        pki = self.pki
        cert_dir = self.workdir / "certs"
        cert_dir.mkdir(exist_ok=True)
        self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{ec}",
            f"--secure-port={self.ports['apiserver']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={cert_dir}",
            f"--tls-cert-file={pki['apiserver.crt']}",
            f"--tls-private-key-file={pki['apiserver.key']}",
            f"--client-ca-file={pki['ca.crt']}",
            f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,Priority,RuntimeClass,"
            "DefaultTolerationSeconds,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
            "ResourceQuota",
            "--allow-privileged=true",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--profiling=false",
            # current API servers refuse a loopback advertise address for the `kubernetes`
            # Service's endpoints; nothing here reaches the API server through that Service
            *([] if self.binary_version < (1, 24) else ["--endpoint-reconciler-type=none"]),
            f"--v={self.verbosity}",
            *self.extra_apiserver_args,
        ])
        # Start the controller manager and the scheduler as soon as the API
        # server answers at all (they wait up to 10s for it to turn healthy),
        # then wait for /readyz: saves seconds on a 2-core machine.
        self._wait_http(f"{self.server}/livez", "kube-apiserver", deadline, token="admin",
                        any_answer=True)
        self.timings["kube-apiserver-listening"] = time.monotonic() - t0

        old = self.binary_version < (1, 24)
        common = [
            "--bind-address=127.0.0.1",
            *(["--port=0"] if old else []),  # no insecure HTTP port (gone in 1.24; 1.20 has one by default)
            "--leader-elect=false",
            f"--kubeconfig={self._kubeconfigs['admin']}",
            f"--authentication-kubeconfig={self._kubeconfigs['admin']}",
            f"--authorization-kubeconfig={self._kubeconfigs['admin']}",
            # don't look for a requestheader CA in kube-system (none is configured;
            # the lookup only fills the logs with errors)
            "--authentication-skip-lookup=true",
            f"--v={self.verbosity}",
        ]
        if "kube-controller-manager" in self.components:
            kcm_certs = self.workdir / "kcm-certs"
            kcm_certs.mkdir(exist_ok=True)
            self._spawn("kube-controller-manager", [
                *common,
                f"--secure-port={self.ports['controller-manager']}",
                f"--cert-dir={kcm_certs}",
                "--controllers=*",
                f"--service-account-private-key-file={pki['sa.key']}",
                f"--root-ca-file={pki['ca.crt']}",
                # each controller as its own ServiceAccount in kube-system (as kubeadm
                # clusters run it): Pods the Job controller makes come from
                # system:serviceaccount:kube-system:job-controller, which the bundle's
                # `controllers` trusts, not from the harness's admin identity
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={pki['ca.crt']}",
                f"--cluster-signing-key-file={pki['ca.key']}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # fake nodes post no heartbeats: keep them Ready for the session
                "--node-monitor-grace-period=2h",
                "--node-startup-grace-period=2h",
                *(["--pod-eviction-timeout=2h"] if old else []),  # removed in 1.27
            ])
        if "kube-scheduler" in self.components:
            sched_certs = self.workdir / "scheduler-certs"
            sched_certs.mkdir(exist_ok=True)
            self._spawn("kube-scheduler", [
                *common,
                f"--secure-port={self.ports['scheduler']}",
                f"--cert-dir={sched_certs}",
                # its queueing decisions ("Event is not making pod schedulable") show from 5
                *([f"--v={v}"] if (v := os.environ.get("BATCHGATE_E2E_SCHEDULER_V")) else []),
            ])

        self._wait_http(f"{self.server}/readyz", "kube-apiserver", deadline, token="admin",
                        only=("etcd", "kube-apiserver"))
        self.timings["kube-apiserver"] = time.monotonic() - t0
        # if they gave up on an API server that was slow to turn healthy, go again
        for name in ("kube-controller-manager", "kube-scheduler"):
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                self._spawn(name, self._args[name])

        if "kube-controller-manager" in self.components:
            try:
                self.wait_for_service_account(
                    "default", timeout=max(1.0, deadline - time.monotonic()))
            except TimeoutError as exc:
                self._fail(f"{exc} (is kube-controller-manager working?)")
            self.timings["default-serviceaccount"] = time.monotonic() - t0
        self.check_alive()
        self.startup_seconds = time.monotonic() - t0

    def _has_token_controller(self) -> bool:
        return "kube-controller-manager" in self.components

    def _spawn(self, name: str, args: list[str], env_extra: Mapping[str, str] | None = None):
        log = self.workdir / f"{name}.log"
        self.logs[name] = log
        self._args[name] = list(args)
        env = dict(os.environ)
        env.update({k: v for k, v in (env_extra or {}).items() if v})
        # components must not pick up the caller's cluster config
        env.pop("KUBECONFIG", None)
        with open(log, "ab") as f:
            f.write(f"# {self.bin_dir / name} {' '.join(args)}\n".encode())
            f.flush()
            self.procs[name] = subprocess.Popen(
                [str(self.bin_dir / name), *args],
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                cwd=self.workdir, env=env, start_new_session=True,
                preexec_fn=_set_pdeathsig,
            )

    def _wait_http(self, url: str, what: str, deadline: float, token: str | None = None,
                   any_answer: bool = False, only: Iterable[str] | None = None):
        u = urllib.parse.urlsplit(url)
        t = _Transport(f"{u.scheme}://{u.netloc}",
                       ca_file=str(self.pki["ca.crt"]) if u.scheme == "https" else None,
                       token=self.tokens[token] if token else None)
        last = ""
        while True:
            self.check_alive(only)
            try:
                t.request("GET", u.path, timeout=5)
                return
            except KubeApiError as exc:
                if any_answer:
                    return
                last = str(exc)
            except (OSError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                self._fail(f"{what} not ready at {url} within {self.start_timeout:.0f}s "
                           f"(last: {last})")
            time.sleep(0.2)

    def check_alive(self, only: Iterable[str] | None = None) -> None:
        """Raise ClusterStartError (with log tails) if a component (of ``only``,
        default all) has exited."""
        for name, p in self.procs.items():
            if only is not None and name not in only:
                continue
            rc = p.poll()
            if rc is not None:
                self._fail(f"{name} exited with code {rc}")

    def _fail(self, why: str) -> None:
        raise ClusterStartError(f"local control plane failed: {why}\n\n{self.log_tails()}")

    def log_tails(self, lines: int = 30, components: Iterable[str] | None = None) -> str:
        out = []
        for name in components or self.logs:
            if name in self.logs:
                out.append(f"----- {name} ({self.logs[name]}) -----\n"
                           f"{tail(self.logs[name], lines)}")
        return "\n".join(out)

    def stop(self) -> None:
        """Kill all components (their whole process groups) and remove temp dirs."""
        if self._stopped:
            return
        self._stopped = True
        self._close_api_clients()
        # One at a time, clients before servers: a kube-apiserver whose etcd is
        # already gone takes its time to shut down.
        for name in reversed(list(self.procs)):
            with contextlib.suppress(subprocess.TimeoutExpired):
                terminate_group(self.procs[name], grace=10)
        # anything else left in those groups
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        if self._etcd_dir:
            shutil.rmtree(self._etcd_dir, ignore_errors=True)
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif self.keep_workdir:
            print(f"batchgate e2e: kept {self.workdir}", file=sys.stderr)
        _LIVE.discard(self)

    # ---- identities ----------------------------------------------------

    def _write_identities(self) -> None:
        lines = []
        for name, groups in IDENTITIES.items():
            lines.append(f'{self.tokens[name]},{name},uid-{name},"{",".join(groups)}"')
        tok = self.workdir / "tokens.csv"
        tok.write_text("\n".join(lines) + "\n")
        tok.chmod(0o600)
        ca_data = base64.b64encode(self.pki["ca.crt"].read_bytes()).decode()
        for name in IDENTITIES:
            kc = {
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "batchgate-e2e", "cluster": {
                    "server": self.server, "certificate-authority-data": ca_data}}],
                "users": [{"name": name, "user": {"token": self.tokens[name]}}],
                "contexts": [{"name": name, "context": {
                    "cluster": "batchgate-e2e", "user": name, "namespace": "default"}}],
                "current-context": name,
            }
            path = self.workdir / f"kubeconfig-{name}.yaml"
            path.write_text(json.dumps(kc, indent=2))  # JSON is YAML
            path.chmod(0o600)
            self._kubeconfigs[name] = str(path)
            self._transports[name] = _Transport(
                self.server, ca_file=str(self.pki["ca.crt"]), token=self.tokens[name])

    def kubeconfig(self, identity: str = "admin") -> str:
        return self._kubeconfigs[identity]

    def __repr__(self) -> str:
        return f"<LocalCluster {self.server or '(not started)'} {self.workdir}>"


# --------------------------------------------------------------------------
# an existing cluster (USE_EXISTING_CLUSTER=true)


class ExistingCluster(_ClusterBase):
    """A cluster from a kubeconfig. ``admin`` is the kubeconfig's identity;
    ``alice`` and ``bob`` are played by impersonating them (the kubeconfig's
    identity needs the ``impersonate`` verb, as cluster-admin has)."""

    components: list[str] = list(CONTROL_PLANE)

    def __init__(self, kubeconfig: str | None = None, context: str | None = None):
        import yaml
        from kubernetes import client, config

        self.source_kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or str(
            Path.home() / ".kube" / "config")
        self.workdir = Path(tempfile.mkdtemp(prefix="batchgate-e2e-existing-"))
        cfg = client.Configuration()
        config.load_kube_config(config_file=self.source_kubeconfig, context=context,
                                client_configuration=cfg)
        self.server = cfg.host
        token = None
        auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if auth:
            token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
        common = dict(ca_file=cfg.ssl_ca_cert, verify=bool(cfg.verify_ssl), token=token,
                      cert_file=cfg.cert_file, key_file=cfg.key_file)
        self.tokens: dict[str, str] = {}
        self._api_clients = {}
        self._transports = {"admin": _Transport(self.server, **common)}
        self._kubeconfigs = {"admin": self.source_kubeconfig}
        raw = yaml.safe_load(Path(self.source_kubeconfig).read_text())
        ctx_name = context or raw.get("current-context")
        ctx = next(c for c in raw["contexts"] if c["name"] == ctx_name)["context"]
        user = next(u for u in raw["users"] if u["name"] == ctx["user"])["user"]
        for name, groups in IDENTITIES.items():
            if name == "admin":
                continue
            groups = [g for g in groups if g != "system:authenticated"]  # implied
            self._transports[name] = _Transport(
                self.server, **common,
                headers=[("Impersonate-User", name)] + [("Impersonate-Group", g) for g in groups])
            kc = copy.deepcopy(raw)
            u = copy.deepcopy(user)
            u["as"] = name
            u["as-groups"] = groups
            kc["users"] = [{"name": f"as-{name}", "user": u}]
            kc["contexts"] = [{"name": name, "context": {**ctx, "user": f"as-{name}"}}]
            kc["current-context"] = name
            path = self.workdir / f"kubeconfig-{name}.yaml"
            path.write_text(yaml.safe_dump(kc))
            path.chmod(0o600)
            self._kubeconfigs[name] = str(path)

    def api_client(self, identity: str = "admin"):
        if identity not in self._api_clients:
            from kubernetes import config

            c = config.new_client_from_config(config_file=self.source_kubeconfig)
            if identity != "admin":
                # the Python client ignores `as`/`as-groups` in kubeconfigs
                c.set_default_header("Impersonate-User", identity)
                groups = [g for g in IDENTITIES[identity] if g != "system:authenticated"]
                if groups:
                    c.set_default_header("Impersonate-Group", groups[0])
            self._api_clients[identity] = c
        return self._api_clients[identity]

    def kubeconfig(self, identity: str = "admin") -> str:
        return self._kubeconfigs[identity]

    def log_tails(self, lines: int = 30, components: Iterable[str] | None = None) -> str:
        return ""

    def check_alive(self) -> None:
        return None

    def stop(self) -> None:
        self._close_api_clients()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"<ExistingCluster {self.server}>"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(msg: str) -> None:
    """Skip the current test, or fail it when ``CI=true`` (nothing may skip in CI)."""
    import pytest

    if in_ci():
        pytest.fail(f"CI=true and the e2e cluster lacks something: {msg}", pytrace=False)
    pytest.skip(msg)


def require_components(kube: _ClusterBase, *names: str) -> None:
    """Skip (fail in CI) when the control plane lacks a component (envtest asset
    dirs may have no kube-controller-manager / kube-scheduler)."""
    missing = [n for n in names if n not in getattr(kube, "components", CONTROL_PLANE)]
    if missing:
        unavailable(f"control plane has no {', '.join(missing)} ({kube!r})")


def use_existing_cluster() -> bool:
    return os.environ.get("USE_EXISTING_CLUSTER", "").lower() == "true"


if __name__ == "__main__":  # manual use: python tests/e2e/cluster.py
    with LocalCluster() as c:
        print(f"server {c.server} up in {c.startup_seconds:.1f}s; kubeconfigs:")
        for ident in IDENTITIES:
            print(f"  {ident}: {c.kubeconfig(ident)}")
        print("Ctrl-C to stop")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
