"""The HTTPS edge: aiohttp handlers around :func:`webhook.engine.decide`.

Everything here is plumbing: read the body within a cap, map malformed input to
a 4xx with a JSON message, call the engine, count and log, and keep the policy
bundle and the serving certificate fresh from their files. A bad new bundle or
certificate is logged and counted, and the last good one stays in force.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import signal
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import metrics
from .bundle import Bundle
from .certs import certificate_status, ensure_certs
from .engine import BadReview, Decision, Phase, decide, encode_review
from .rules import load_bundle
from .yamlsrc import BundleError

log = logging.getLogger(__name__)

# The API server refuses request bodies over 3 MiB and etcd stores objects up to
# 1.5 MiB; an AdmissionReview carries the object and, on UPDATE, the old one,
# plus a small envelope. 6 MiB admits every review a real API server can send.
MAX_BODY = 6 * 1024 * 1024
JSON_TYPES = ("application/json",)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8443
    policies: str = "policies"
    cert_dir: str = "certs"
    dns_names: tuple[str, ...] = ()
    workers: int = 1
    reload_interval: float = 2.0


@dataclass(slots=True)
class State:
    """What one server process has in force."""

    bundle: Bundle | None = None
    bundle_error: str = ""
    cert_ok: bool = False
    cert_detail: str = ""
    policies_stamp: tuple[Any, ...] = ()
    cert_stamp: tuple[Any, ...] = ()
    ssl_context: ssl.SSLContext | None = None
    cert_dir: Path = field(default_factory=lambda: Path("certs"))
    policies: Path = field(default_factory=lambda: Path("policies"))


STATE = web.AppKey("state", State)


# -- handlers -----------------------------------------------------------------
def make_app(state: State) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[STATE] = state
    app.router.add_post("/mutate", _admission("mutate"))
    app.router.add_post("/validate", _admission("validate"))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    return app


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=json.dumps({"error": message}), content_type="application/json")


def _admission(phase: Phase) -> Any:
    endpoint = "/" + phase
    latency = metrics.LATENCY.labels(endpoint)

    async def handler(request: web.Request) -> web.Response:
        started = time.perf_counter()
        state = request.app[STATE]
        if request.content_type not in JSON_TYPES:
            metrics.REQUESTS.inc(endpoint, "", "bad_request")
            return _error(415, f"content type must be application/json, got {request.content_type!r}")
        if request.content_length is not None and request.content_length > MAX_BODY:
            metrics.REQUESTS.inc(endpoint, "", "bad_request")
            return _error(413, f"body of {request.content_length} bytes exceeds the {MAX_BODY} byte cap")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            metrics.REQUESTS.inc(endpoint, "", "bad_request")
            return _error(413, f"body exceeds the {MAX_BODY} byte cap")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            metrics.REQUESTS.inc(endpoint, "", "bad_request")
            return _error(400, f"body is not valid JSON: {e}")
        bundle = state.bundle
        if bundle is None:  # only before the first successful load
            metrics.REQUESTS.inc(endpoint, "", "unavailable")
            return _error(503, "no policy bundle loaded yet")
        try:
            decision = decide(body, bundle, phase=phase)
        except BadReview as e:
            metrics.REQUESTS.inc(endpoint, "", "bad_request")
            log.info("bad admission request", extra={"fields": {"endpoint": endpoint, "error": str(e)}})
            return _error(400, str(e))
        _account(endpoint, body, decision)
        response = web.Response(body=encode_review(decision), content_type="application/json")
        latency.observe(time.perf_counter() - started)
        return response

    return handler


def _account(endpoint: str, body: dict[str, Any], decision: Decision) -> None:
    req = body["request"]
    operation = req["operation"]
    outcome = "denied" if not decision.allowed else "mutated" if decision.patch else "allowed"
    metrics.REQUESTS.inc(endpoint, operation, outcome)
    metrics.POLICY_DECISIONS.inc_each(tuple(decision.outcomes))
    if decision.errors or not decision.allowed:
        kind = req["kind"]["kind"]
        fields = {
            "uid": decision.uid,
            "kind": kind,
            "namespace": req.get("namespace", ""),
            "name": req.get("name", ""),
            "operation": operation,
            "user": (req.get("userInfo") or {}).get("username", ""),
        }
        for policy, tb in decision.errors:
            log.error("policy failed: %s", tb.strip().splitlines()[-1],
                      extra={"fields": {**fields, "policy": policy, "traceback": tb}})
        if not decision.allowed:
            log.info("denied", extra={"fields": {**fields, "message": decision.message}})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    problems = []
    if state.bundle is None:
        problems.append(f"no policy bundle: {state.bundle_error or 'not loaded'}")
    if not state.cert_ok:
        problems.append(f"serving certificate: {state.cert_detail}")
    if problems:
        return web.Response(status=503, text="\n".join(problems) + "\n")
    assert state.bundle is not None
    if state.bundle_error:  # still serving, on the last good bundle: ready, but say so
        return web.Response(text=f"ok bundle={state.bundle.fingerprint} stale: the policy files on disk "
                                 f"do not load: {state.bundle_error}\n")
    return web.Response(text=f"ok bundle={state.bundle.fingerprint}\n")


async def _metrics(request: web.Request) -> web.Response:
    data = generate_latest(metrics.REGISTRY)
    return web.Response(body=data, headers={"Content-Type": CONTENT_TYPE_LATEST})


# -- reloading ----------------------------------------------------------------
def _stamp(root: Path) -> tuple[Any, ...]:
    """Cheap change detector: every file's (path, mtime, size), following symlinks
    (a mounted ConfigMap swaps its ``..data`` symlink on update)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in ("samples", "__pycache__"))
        for name in sorted(filenames):
            if name.endswith((".yaml", ".yml")):
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except OSError:
                    continue
                out.append((dirpath, name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def reload_bundle(state: State) -> bool:
    """Load the bundle if its files changed; keep the last good one on failure."""
    stamp = _stamp(state.policies)
    if stamp == state.policies_stamp and state.bundle is not None:
        return False
    state.policies_stamp = stamp
    try:
        bundle = load_bundle(state.policies)
    except BundleError as e:
        state.bundle_error = str(e)
        metrics.BUNDLE_RELOADS.labels("failure").inc()
        metrics.BUNDLE_STALE.set(1 if state.bundle is not None else 0)
        kept = f"; keeping bundle {state.bundle.fingerprint}" if state.bundle else ""
        log.error("policy bundle rejected: %s%s", e, kept, extra={"fields": {"error": str(e)}})
        return False
    metrics.BUNDLE_STALE.set(0)
    if state.bundle is not None and state.bundle.fingerprint == bundle.fingerprint:
        state.bundle_error = ""  # the files are back to the bundle in force
        return False
    if state.bundle is not None:
        metrics.BUNDLE_INFO.remove(state.bundle.fingerprint)
    state.bundle, state.bundle_error = bundle, ""
    metrics.BUNDLE_RELOADS.labels("success").inc()
    metrics.BUNDLE_INFO.labels(bundle.fingerprint).set(1)
    log.info("policy bundle loaded", extra={"fields": {
        "fingerprint": bundle.fingerprint, "policies": ",".join(p.name for p in bundle.policies)}})
    return True


def reload_certificate(state: State) -> bool:
    cert, key = state.cert_dir / "tls.crt", state.cert_dir / "tls.key"
    try:
        stamp = tuple((os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in (cert, key))
    except OSError as e:
        state.cert_ok, state.cert_detail = False, f"cannot read {e.filename}"
        return False
    if stamp == state.cert_stamp:
        state.cert_ok, state.cert_detail = certificate_status(cert)  # expiry moves with time
        return False
    if state.ssl_context is None:
        state.ssl_context = _ssl_context()
    try:
        state.ssl_context.load_cert_chain(cert, key)  # applies to new handshakes only
    except (ssl.SSLError, OSError) as e:
        state.cert_stamp = stamp  # retry when the files change again, not on every poll
        metrics.CERT_RELOADS.labels("failure").inc()
        log.error("serving certificate rejected, keeping the previous one: %s", e)
        return False
    state.cert_stamp = stamp
    state.cert_ok, state.cert_detail = certificate_status(cert)
    metrics.CERT_RELOADS.labels("success").inc()
    try:
        from cryptography import x509

        expiry = x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc
        metrics.CERT_EXPIRY.set(expiry.timestamp())
    except ValueError:
        pass
    log.info("serving certificate loaded", extra={"fields": {"detail": state.cert_detail}})
    return True


def _ssl_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def _watch(app: web.Application, interval: float) -> None:
    state = app[STATE]
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval)
        try:
            await loop.run_in_executor(None, reload_bundle, state)
            reload_certificate(state)
        except Exception:  # never let the watcher die
            log.exception("reload check failed")


# -- running ------------------------------------------------------------------
def prepare(options: ServeOptions) -> State:
    """Load bundle and certificates once, before serving; raises on a bad bundle."""
    state = State(cert_dir=Path(options.cert_dir), policies=Path(options.policies))
    ensure_certs(state.cert_dir, dns_names=list(options.dns_names))
    state.bundle = load_bundle(state.policies)  # a bad bundle at start is fatal: nothing to serve
    state.policies_stamp = _stamp(state.policies)
    metrics.BUNDLE_RELOADS.labels("success").inc()
    metrics.BUNDLE_INFO.labels(state.bundle.fingerprint).set(1)
    if not reload_certificate(state):
        raise RuntimeError(f"cannot load the serving certificate from {state.cert_dir}: {state.cert_detail}")
    return state


def _serve_process(options: ServeOptions, state: State, reuse_port: bool) -> None:
    app = make_app(state)

    async def start_watch(app: web.Application) -> Any:
        task = asyncio.create_task(_watch(app, options.reload_interval))
        yield
        task.cancel()

    app.cleanup_ctx.append(start_watch)
    log.info("serving", extra={"fields": {
        "address": f"https://{options.host}:{options.port}", "pid": os.getpid(),
        "bundle": state.bundle.fingerprint if state.bundle else ""}})
    web.run_app(app, host=options.host, port=options.port, ssl_context=state.ssl_context,
                reuse_port=reuse_port, access_log=None, print=None, shutdown_timeout=10)


def run(options: ServeOptions) -> int:
    try:
        state = prepare(options)
    except BundleError as e:
        log.error("cannot serve: bad policy bundle: %s", e)
        print(f"batchgate: bundle error: {e}", flush=True)
        return 2
    except (OSError, RuntimeError, ValueError) as e:
        log.error("cannot serve: %s", e)
        return 2
    if options.workers <= 1:
        _serve_process(options, state, reuse_port=False)
        return 0
    # N processes, each with its own listening socket on the same port (SO_REUSEPORT):
    # the kernel spreads connections over them, so every core serves. Forked workers
    # inherit the state prepared above: the bundle is loaded and checked once.
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_serve_process, args=(options, state, True), daemon=False)
             for _ in range(options.workers)]
    for p in procs:
        p.start()

    def stop(signum: int, frame: Any) -> None:
        for p in procs:
            if p.is_alive() and p.pid:
                os.kill(p.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    for p in procs:
        p.join()
        code = code or (p.exitcode or 0)
    return code
