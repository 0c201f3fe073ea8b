"""The HTTPS edge: aiohttp handlers around :func:`webhook.engine.decide`.

Everything here is plumbing: read the body within a cap, map malformed input to
a 4xx with a JSON message, call the engine, count and log, and keep the policy
bundle and the serving certificate fresh from their files. A bad new bundle or
certificate is logged and counted, and the last good one stays in force.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import errno
import logging
import multiprocessing
import os
import queue
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import metrics, nsfacts
from .bundle import Bundle
from .certs import certificate_status, ensure_certs, ensure_seal_keys
from .engine import BadReview, Decision, OutOfBudget, Phase, decide, dumps, encode_review, to_review
from .rules import load_bundle
from .seal import OFFLINE, Keyring, SealKeyError, parse_keyring
from .units import format_time
from .yamlsrc import BundleError

log = logging.getLogger(__name__)

# The API server refuses request bodies over 3 MiB and etcd stores objects up to
# 1.5 MiB; an AdmissionReview carries the object and, on UPDATE, the old one,
# plus a small envelope. 6 MiB admits every review a real API server can send.
MAX_BODY = 6 * 1024 * 1024
# Objects and arrays per review, counted on the raw bytes before parsing: what a
# body costs in memory is its containers (~200 bytes each parsed), not its bytes.
# 1.5 MiB objects of the densest real kind (a Pod of env entries) have ~50,000.
MAX_CONTAINERS = 250_000
MAX_DEPTH = 1024  # nesting; orjson's own limit (a deeper body is a JSONDecodeError)
INLINE_BODY = 64 * 1024  # larger reviews are decided off the event loop, one at a time
LARGE_IN_FLIGHT = 4  # large bodies read and held at once (4 x 6 MiB buffered at most)
READ_TIMEOUT = 10.0  # seconds to receive a body once its headers are in
IDLE_TIMEOUT = 30.0  # seconds a connection may sit without a request (or with half a request)
REVIEW_BUDGET = 1.0  # seconds of policy work per review before policies answer with their failure mode
JSON_TYPES = ("application/json",)
# How the server runs its connections: no access log (observed() logs), idle
# connections (also ones stuck half-way through their headers) closed after IDLE_TIMEOUT.
RUNNER_SETTINGS: dict[str, Any] = {"access_log": None, "shutdown_timeout": 10, "keepalive_timeout": IDLE_TIMEOUT}


@dataclass(frozen=True, slots=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8443
    policies: str = "policies"
    cert_dir: str = "certs"
    dns_names: tuple[str, ...] = ()
    workers: int = 1
    reload_interval: float = 2.0
    review_budget: float = REVIEW_BUDGET
    namespaces: str | None = None  # the published namespace labels (file, or the mounted directory)
    namespace_labels_max_age: float = nsfacts.MAX_AGE
    # The admission seal's keys (webhook.seal): a file of "<id> <base64 key>" lines, the first signs.
    # None: <cert_dir>/seal.keys, made with a fresh key when absent (for a local server only: the
    # replicas of a deployment must share one file, mounted from a Secret).
    seal_keys: str | None = None


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
    review_budget: float = REVIEW_BUDGET
    # namespace labels for grants by namespaceSelector (nsfacts): the last good ones, why the
    # file on disk is not in force (missing, bad), and the bundle as loaded (state.bundle is
    # that bundle with the view of the labels for its selectors)
    namespaces: Path | None = None
    namespace_labels_max_age: float = nsfacts.MAX_AGE
    facts: nsfacts.Facts | None = None
    facts_error: str = ""
    facts_stamp: tuple[Any, ...] | None = None  # None: never looked
    loaded: Bundle | None = None
    keys: Keyring = OFFLINE  # replaced by prepare() with the server's own before it serves
    keys_path: Path | None = None
    keys_stamp: tuple[Any, ...] = ()


STATE = web.AppKey("state", State)
LARGE = web.AppKey("large", asyncio.Semaphore)


# -- the answer to one body (no HTTP here: the handler, the fuzz test and the table test call it)
@dataclass(slots=True)
class Answer:
    status: int
    body: bytes
    outcome: str  # allowed, mutated, denied, bad_request, unavailable
    request: dict[str, Any] | None = None  # the parsed request, when it was an AdmissionReview
    decision: Decision | None = None
    error: str = ""  # the message of a 4xx/5xx, for the log


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


def _bad(status: int, message: str) -> Answer:
    return Answer(status, error_body(message), "bad_request", error=message)


def answer(raw: bytes, bundle: Bundle | None, phase: Phase, budget: float = REVIEW_BUDGET,
           arm: Callable[[], None] | None = None, keys: Keyring = OFFLINE) -> Answer:
    """Decide one raw body: a review's answer, or a 4xx/503 with a JSON message. Total:
    whatever the bytes, this returns (the fuzz test holds it to that). ``arm`` is called
    when the policies start: from then on the caller may raise OutOfBudget in here."""
    if len(raw) > MAX_BODY:
        return _bad(413, f"body of {len(raw)} bytes exceeds the {MAX_BODY} byte cap")
    # Each counted bracket is a byte: a body no longer than the cap cannot pass it, and the
    # count (a scan of every byte, twice) is skipped for the reviews real API servers send.
    containers = raw.count(b"{") + raw.count(b"[") if len(raw) > MAX_CONTAINERS else 0
    if containers > MAX_CONTAINERS:
        return _bad(413, f"body has {containers} JSON objects and arrays, more than the {MAX_CONTAINERS} "
                         "a review of the largest object Kubernetes stores can have")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        detail = f"nesting deeper than {MAX_DEPTH} levels" if "depth" in str(e) or "recursion" in str(e) else str(e)
        return _bad(400, f"body is not valid JSON: {detail}")
    if bundle is None:  # only before the first successful load
        return Answer(503, error_body("no policy bundle loaded yet"), "unavailable", error="no policy bundle loaded yet")
    deadline = time.perf_counter() + budget
    try:
        if arm is not None:
            arm()
        decision = decide(body, bundle, phase=phase, over_budget=lambda: time.perf_counter() > deadline,
                          keys=keys)
        out = encode_review(decision)
    except BadReview as e:
        return _bad(400, str(e))
    except RecursionError:  # orjson parses 1024 levels; Python code can go ~1000 deep
        return _bad(400, "request nests too deeply to review")
    except OutOfBudget:  # interrupted between policies (building the patch): fail closed
        uid = body["request"]["uid"]
        decision = Decision(uid=uid, allowed=False, denials=[
            f"the review ran out of its {budget:g} s time budget; ask an admin to check the webhook logs (uid {uid})"])
        return Answer(200, dumps(to_review(decision)), "denied", body["request"], decision)
    req = body["request"]
    outcome = "denied" if not decision.allowed else "mutated" if decision.patch else "allowed"
    return Answer(200, out, outcome, req, decision)


class LargeReviews:
    """One thread that decides the large reviews, one at a time, off the event loop.

    A large review's budget is enforced, not only asked for between policies: when
    it runs out, :class:`OutOfBudget` is raised inside the thread (CPython delivers
    an asynchronous exception between bytecodes), so a policy stuck in a long loop
    stops there and answers with its failure mode.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Answer], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = 0  # id of the job being decided, 0 between jobs
        self._thread = threading.Thread(target=self._serve, name="large-reviews", daemon=True)
        self._thread.start()

    def submit(self, raw: bytes, bundle: Bundle | None, phase: Phase, budget: float,
               keys: Keyring) -> Future[Answer]:
        future: Future[Answer] = Future()
        self._jobs.put((future, (raw, bundle, phase, budget, keys)))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _interrupt(self, job: int) -> None:
        with self._lock:
            if self._running == job and self._thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident),
                                                           ctypes.py_object(OutOfBudget))

    def _serve(self) -> None:
        job = 0
        while True:
            item = self._jobs.get()
            if item is None:
                return
            future, (raw, bundle, phase, budget, keys) = item
            job += 1
            timers: list[threading.Timer] = []

            def arm(job: int = job, budget: float = budget, timers: list[threading.Timer] = timers) -> None:
                with self._lock:
                    self._running = job
                timers.append(threading.Timer(budget, self._interrupt, (job,)))
                timers[0].start()

            result: Answer | None = None
            try:
                try:
                    result = answer(raw, bundle, phase, budget, arm, keys)
                finally:
                    with self._lock:
                        self._running = 0
                        for t in timers:
                            t.cancel()
                        # drop an interruption that arrived after the review was done
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident or 0), None)
            except OutOfBudget:  # landed just as answer() returned: keep its result
                pass
            except Exception as e:  # never let the thread die
                future.set_exception(e)
                continue
            if result is None:  # cannot happen: answer() handles OutOfBudget once armed
                result = Answer(503, error_body("review interrupted"), "unavailable", error="review interrupted")
            future.set_result(result)


WORKER = web.AppKey("worker", LargeReviews)


# -- handlers -----------------------------------------------------------------
# A handler answers a request: an admission handler with the Answer to the review, the others
# with their response. observed() turns it into what aiohttp registers.
Handler = Callable[[web.Request], Awaitable[web.StreamResponse | Answer]]


def make_app(state: State) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[STATE] = state
    app[LARGE] = asyncio.Semaphore(LARGE_IN_FLIGHT)
    app[WORKER] = LargeReviews()
    add_route(app, "POST", "/mutate", _admission("mutate", state))
    add_route(app, "POST", "/validate", _admission("validate", state))
    add_route(app, "GET", "/healthz", _healthz)
    add_route(app, "GET", "/readyz", _readyz)
    add_route(app, "GET", "/metrics", _metrics)
    # Any other path, or another method on a known one: a JSON 404 or 405, timed like the rest.
    app.router.add_route("*", "/{path:.*}", observed("other", _not_found))

    async def stop_worker(app: web.Application) -> None:
        app[WORKER].stop()

    app.on_cleanup.append(stop_worker)
    return app


def add_route(app: web.Application, method: str, path: str, handler: Handler) -> None:
    """Serve ``handler`` on ``method path`` (a GET also on HEAD), observed; the path's other
    methods answer 405."""
    served = observed(path, handler)
    app.router.add_route(method, path, served)
    if method == "GET":
        app.router.add_route("HEAD", path, served)
    app.router.add_route("*", path, observed(path, _not_allowed))


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=error_body(message), content_type="application/json")


def observed(path: str, handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``handler`` timed, counted and logged, errors included: the handlers only answer.

    An admission handler returns its :class:`Answer` (the parsed request and the Decision
    when it got that far), counted and logged here and then sent; nothing here reads the
    body again. A wrapper around each handler rather than an aiohttp middleware: the same
    work without the middleware chain aiohttp runs around every request (20k fewer CPU
    instructions per review under callgrind, 1,098k -> 1,078k through HTTPS).
    """

    async def timed(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            result = await handler(request)
            if isinstance(result, Answer):
                _account(path, result)
                result = _respond(result)
            response = result
        except web.HTTPException as e:  # aiohttp's own, such as a 413 from the body reader
            response = _error(e.status, e.reason)
        except asyncio.CancelledError:
            metrics.observe_http(path, 499, time.perf_counter() - started)  # the client went away
            raise
        except Exception as e:  # a bug: say so, never with the traceback on the wire
            log.exception("request failed", extra={"fields": {"path": path}})
            response = _error(500, f"internal error: {type(e).__name__}")
        if not request.content.is_eof():
            # Answered before the whole body came in (a 413 by its Content-Length, a 415, 404, 405,
            # 408): what is left of it is not read, so this connection cannot carry another
            # request. Say so (Connection: close) rather than keep it alive: aiohttp would read
            # the rest for up to 10 s and then close it unannounced, and a client that reuses
            # connections (the API server) would send its next review into the closed socket.
            response.force_close()
        metrics.observe_http(path, response.status, time.perf_counter() - started)
        return response

    return timed


async def _not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


async def _not_allowed(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMethodNotAllowed(request.method, ())


def _admission(phase: Phase, state: State) -> Handler:
    """``state``: the app's (app[STATE], the same object for the app's life), held here rather
    than looked up per review through request.app (three Python-level calls, ~2k instructions)."""

    async def handler(request: web.Request) -> Answer:
        if request.content_type not in JSON_TYPES:
            return _bad(415, f"content type must be application/json, got {request.content_type!r}")
        length = request.content_length
        if length is not None and length > MAX_BODY:
            return _bad(413, f"body of {length} bytes exceeds the {MAX_BODY} byte cap")
        if length is not None and length <= INLINE_BODY:
            # the whole body came with the headers (the common case): nothing to wait for
            raw = await request.read() if request.content.is_eof() else await _read(request)
            if isinstance(raw, Answer):
                return raw
            return answer(raw, state.bundle, phase, state.review_budget, keys=state.keys)
        # A large (or chunked) body: at most LARGE_IN_FLIGHT held at once, decided in the
        # worker thread so the event loop keeps answering health probes and small reviews.
        app = request.app
        async with app[LARGE]:
            raw = await _read(request)
            if isinstance(raw, Answer):
                return raw
            seen = await asyncio.wrap_future(app[WORKER].submit(raw, state.bundle, phase, state.review_budget,
                                                                state.keys))
            del raw
        return seen

    return handler


async def _read(request: web.Request) -> bytes | Answer:
    """The body, or the answer for a client too slow to send it (408) or a chunked body past
    the cap (413)."""
    try:
        async with asyncio.timeout(READ_TIMEOUT):
            return await request.read()
    except TimeoutError:
        return _bad(408, f"body not received within {READ_TIMEOUT:g} s")
    except web.HTTPRequestEntityTooLarge:
        return _bad(413, f"body exceeds the {MAX_BODY} byte cap")


def _respond(seen: Answer) -> web.Response:
    return web.Response(status=seen.status, body=seen.body, content_type="application/json")


_OUTCOME = itemgetter(1)  # of a (policy, outcome) pair


def _account(endpoint: str, seen: Answer) -> None:
    req, decision = seen.request, seen.decision
    if req is None or decision is None:
        metrics.REQUESTS.inc(endpoint, "", seen.outcome)
        if seen.outcome == "bad_request":
            log.info("bad admission request", extra={"fields": {
                "endpoint": endpoint, "status": seen.status, "error": seen.error[:300]}})
        return
    operation = req["operation"]
    metrics.REQUESTS.inc(endpoint, operation, seen.outcome)
    metrics.POLICY_DECISIONS.inc_each(tuple(decision.outcomes))
    # A policy out of time adds a denial or a warning (engine._fail), so only a review with
    # warnings is scanned for one; map() over itemgetter: the scan runs in C (a generator here
    # cost 7k instructions a review)
    if decision.errors or not decision.allowed or (
            decision.warnings and "timeout" in map(_OUTCOME, decision.outcomes)):
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
        timed_out = [p for p, o in decision.outcomes if o == "timeout"]
        if timed_out:
            log.error("review ran out of its time budget", extra={"fields": {**fields, "policies": ",".join(timed_out)}})
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
    labels = namespace_labels_status(state)
    if state.bundle_error:  # still serving, on the last good bundle: ready, but say so
        return web.Response(text=f"ok bundle={state.bundle.fingerprint} stale: the policy files on disk "
                                 f"do not load: {state.bundle_error}\n{labels}")
    return web.Response(text=f"ok bundle={state.bundle.fingerprint}\n{labels}")


def namespace_labels_status(state: State) -> str:
    """A line for /readyz when the bundle grants queues by namespace label: whether the labels the
    reconciler publishes are in force, and if not why ('' when the bundle has no such grants).
    Never a reason to be unready: names and globs work without them, and selector grants fail
    closed."""
    if state.bundle is None or not state.bundle.selectors:
        return ""
    v = state.bundle.namespace_facts
    if v.state != "fresh":
        return f"namespace labels {v.state}: {v.reason}; grants by namespaceSelector admit nobody\n"
    line = (f"namespace labels published {format_time(v.published_at or 0)} for bundle {v.bundle or '?'}, "
            f"{len(v.known)} namespaces")
    if v.uncovered:
        line += f"; not covering {', '.join(sorted({k for ks in v.uncovered.values() for k in ks}))} yet"
    if state.facts_error:
        line += f"; the file on disk is not in force: {state.facts_error}"
    return line + "\n"


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
    state.loaded, state.bundle, state.bundle_error = bundle, bundle, ""
    update_view(state, time.time(), force=True)
    metrics.BUNDLE_RELOADS.labels("success").inc()
    metrics.BUNDLE_INFO.labels(bundle.fingerprint).set(1)
    log.info("policy bundle loaded", extra={"fields": {
        "fingerprint": bundle.fingerprint, "policies": ",".join(p.name for p in bundle.policies)}})
    return True


FACTS_LIMIT = 4 * 1024 * 1024  # bytes read of the labels file (a ConfigMap holds 1 MiB)


def facts_file(path: Path) -> Path:
    """``--namespaces``: the file, or the mounted ConfigMap's directory holding namespaces.json."""
    return path / nsfacts.KEY if path.is_dir() else path


def reload_facts(state: State, now: float) -> bool:
    """Read the published namespace labels if their file changed (a bad or missing file keeps
    the last good labels, which then age out), and recompute what the bundle's selectors match
    when they changed or turned stale. True when the view in force changed."""
    changed = False
    if state.namespaces is not None:
        file = facts_file(state.namespaces)
        try:
            st = os.stat(file)
            stamp: tuple[Any, ...] = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = ()
        if stamp != state.facts_stamp:
            state.facts_stamp = stamp
            changed = state.facts is None  # a new reason why there are none; else the last good stay
            if not stamp:
                state.facts_error = (f"{file} does not exist: the reconciler has not published the ConfigMap "
                                     f"{nsfacts.CONFIGMAP} yet, or it is not mounted")
            else:
                try:
                    with open(file, "rb") as f:
                        raw = f.read(FACTS_LIMIT + 1)
                    if len(raw) > FACTS_LIMIT:
                        raise nsfacts.FactsError(f"{file}: larger than {FACTS_LIMIT} bytes")
                    state.facts, state.facts_error = nsfacts.parse_facts(raw, str(file)), ""
                    changed = True
                    metrics.NAMESPACE_FACTS_RELOADS.labels("success").inc()
                    log.info("namespace labels loaded", extra={"fields": {
                        "published": format_time(state.facts.published_at), "bundle": state.facts.bundle,
                        "namespaces": len(state.facts.labels)}})
                except (OSError, nsfacts.FactsError) as e:
                    state.facts_error = str(e)
                    metrics.NAMESPACE_FACTS_RELOADS.labels("failure").inc()
                    log.error("namespace labels rejected, keeping the last good ones: %s", e,
                              extra={"fields": {"error": str(e)}})
    return update_view(state, now, force=changed)


def update_view(state: State, now: float, *, force: bool = False) -> bool:
    """Put the bundle in force with the view of the labels for its selectors: per selector the
    namespaces it matches, computed here, once, not per review."""
    loaded = state.loaded
    metrics.NAMESPACE_FACTS_AGE.set(now - state.facts.published_at if state.facts is not None else -1)
    if loaded is None:
        return False
    current = state.bundle.namespace_facts if state.bundle is not None else nsfacts.NO_FACTS
    if not force and not nsfacts.is_stale(current, now, state.namespace_labels_max_age):
        return False
    if loaded.selectors:
        problem = state.facts_error or ("" if state.namespaces is not None
                                        else "the webhook was started without --namespaces")
        view = nsfacts.view(loaded.selectors, state.facts, now, state.namespace_labels_max_age, problem)
        state.bundle = dataclasses.replace(loaded, namespace_facts=view)
        if view.state != "fresh" and current.state == "fresh":
            log.warning("namespace labels %s: %s; grants by namespaceSelector admit nobody", view.state,
                        view.reason)
    else:
        view, state.bundle = nsfacts.NO_FACTS, loaded
    metrics.NAMESPACE_FACTS_UNUSABLE.set(1 if loaded.selectors and view.state != "fresh" else 0)
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


def reload_keys(state: State) -> bool:
    """Load the seal keys if their file changed; keep the keys in force when it cannot be read or
    parsed (a Secret being rewritten, a bad edit), saying so in the log."""
    path = state.keys_path
    if path is None:
        return False
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == state.keys_stamp:
            return False
        keys = parse_keyring(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SealKeyError) as e:
        if state.keys is OFFLINE:
            raise RuntimeError(f"cannot load the admission seal keys: {e}") from e
        log.error("seal keys rejected, keeping the ones in force: %s", e)
        state.keys_stamp = ()
        return False
    state.keys, state.keys_stamp = keys, stamp
    log.info("seal keys loaded", extra={"fields": {"signing": keys.current,
                                                   "verifying": ",".join(k for k, _ in keys.keys)}})
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
            await loop.run_in_executor(None, reload_facts, state, time.time())
            reload_certificate(state)
            reload_keys(state)
        except Exception:  # never let the watcher die
            log.exception("reload check failed")


# -- running ------------------------------------------------------------------
def prepare(options: ServeOptions) -> State:
    """Load bundle and certificates once, before serving; raises on a bad bundle."""
    state = State(cert_dir=Path(options.cert_dir), policies=Path(options.policies),
                  review_budget=options.review_budget,
                  namespaces=Path(options.namespaces) if options.namespaces else None,
                  namespace_labels_max_age=options.namespace_labels_max_age)
    ensure_certs(state.cert_dir, dns_names=list(options.dns_names))
    if options.seal_keys is None:
        state.keys_path = ensure_seal_keys(state.cert_dir / "seal.keys")
    else:
        state.keys_path = Path(options.seal_keys)
        if not state.keys_path.is_file():
            raise RuntimeError(f"seal keys {state.keys_path}: no such file; mount the batchgate-seal Secret "
                               "there (docs/admin/deploy.md), or make one with `batchgate seal-key > FILE`")
    reload_keys(state)  # raises: without its keys the server cannot tell admitted templates
    state.bundle = state.loaded = load_bundle(state.policies)  # a bad bundle at start is fatal: nothing to serve
    reload_facts(state, time.time())  # missing or bad labels are not fatal: selector grants fail closed
    update_view(state, time.time(), force=True)
    state.policies_stamp = _stamp(state.policies)
    metrics.BUNDLE_RELOADS.labels("success").inc()
    metrics.BUNDLE_INFO.labels(state.bundle.fingerprint).set(1)
    if not reload_certificate(state):
        raise RuntimeError(f"cannot load the serving certificate from {state.cert_dir}: {state.cert_detail}")
    return state


def _listen(options: ServeOptions, reuse_port: bool) -> socket.socket:
    """The listening socket, bound before anything says "serving": a port already in use is one
    clear error at start, not a traceback from inside the event loop."""
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((options.host, options.port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _serve_process(options: ServeOptions, state: State, reuse_port: bool,
                   sock: socket.socket | None = None) -> None:
    app = make_app(state)
    sock = sock or _listen(options, reuse_port)

    async def start_watch(app: web.Application) -> Any:
        task = asyncio.create_task(_watch(app, options.reload_interval))
        yield
        task.cancel()

    app.cleanup_ctx.append(start_watch)
    log.info("serving", extra={"fields": {
        "address": f"https://{options.host}:{options.port}", "pid": os.getpid(),
        "bundle": state.bundle.fingerprint if state.bundle else ""}})
    web.run_app(app, sock=sock, ssl_context=state.ssl_context, print=None, loop=_new_loop(), **RUNNER_SETTINGS)


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop (libuv) when installed: the same asyncio API, less overhead per request."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - it is a dependency; keep serving without it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


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
    try:
        sock = _listen(options, reuse_port=options.workers > 1)
    except OSError as e:
        why = "address already in use (another server on it? choose --port)" if e.errno == errno.EADDRINUSE \
            else (e.strerror or str(e))
        log.error("cannot serve on %s:%s: %s", options.host, options.port, why)
        print(f"batchgate: cannot serve on {options.host}:{options.port}: {why}", file=sys.stderr, flush=True)
        return 2
    if options.workers <= 1:
        _serve_process(options, state, reuse_port=False, sock=sock)
        return 0
    sock.close()  # the check is done; each worker listens on its own socket (SO_REUSEPORT)
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
