"""Seeded fuzz of the webhook's edge: every body gets a 200 review or a 4xx with a
JSON message, never a 5xx, never a hang.

Cases are built from the real AdmissionReviews in the fixtures: mutated (values
swapped for wrong types, absurd quantities and durations, huge strings and lists,
deep nesting, fields deleted), cut short, byte-flipped, or raw garbage. Each goes
through ``webhook.server.answer`` - what the HTTPS handler runs on a body - and
is timed; a case slower than ``--hang`` seconds counts as a hang.

``--https`` sends the same cases through the real HTTPS edge instead (``webhook.server``'s
app on aiohttp and uvloop, TLS, in a thread of this process) over one kept-alive connection,
as the API server sends them: every request must get a response, and a connection may close
only after a response that said so (``Connection: close``); a case that gets no response, or a
close after a response that promised keep-alive, is a failure.

    python bench/fuzz_webhook.py [--cases 100000] [--seed 1] [--https]

The unit tier runs a short seeded run of each (tests/unit/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import http.client
import json
import logging
import os
import random
import re
import select
import ssl
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webhook import server  # noqa: E402
from webhook.bundle import Bundle  # noqa: E402
from webhook.rules import load_bundle  # noqa: E402
from webhook.server import answer  # noqa: E402

FIXTURES = Path(os.environ.get("BATCHGATE_FIXTURES") or ROOT / "tests" / "fixtures" / "admission-k8s-1.37")

ABSURD: list[Any] = [
    None, True, False, 0, -1, 2**63, -(2**63) - 1, 10**40, 1.5, 1e308, -0.0, "", " ", "x",
    "1e999999999", "1e10000000", "9" * 60 + "Ei", "-1", "NaN", "Infinity", "1e-999", "0.000000001n",
    "99999999999999999999999h", "1h" * 40, "\u0000", "\ud7ff\ue000", "../../etc", "a" * 300,
    [], {}, [None], {"": None}, [[[]]], {"a": {"b": {"c": {}}}},
]
KEYS = ["apiVersion", "kind", "request", "uid", "operation", "object", "oldObject", "metadata", "spec",
        "labels", "annotations", "containers", "resources", "limits", "memory", "cpu", "group", "version",
        "userInfo", "groups", "username", "namespace", "name", "subResource", "dryRun", "template",
        "initContainers", "volumes", "overhead", "runtimeClassName", "ownerReferences"]


def reviews() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]


def nodes(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from nodes(v, (*path, i))


def put(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def deep(depth: int, rng: random.Random) -> str:
    """A placeholder for ``depth`` levels of nesting, spliced into the bytes after
    encoding (the stdlib encoder itself stops near 1000 levels)."""
    return f"@@DEEP{depth}:{rng.randrange(2)}@@"


DEEP = re.compile(rb'"@@DEEP(\d+):(\d)@@"')


def splice(raw: bytes) -> bytes:
    def nest(m: re.Match[bytes]) -> bytes:
        depth, kind = int(m.group(1)), m.group(2)
        return (b"[" * depth + b"1" + b"]" * depth) if kind == b"0" else (b'{"a":' * depth + b"{}" + b"}" * depth)
    return DEEP.sub(nest, raw)


def value(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.55:
        return copy.deepcopy(rng.choice(ABSURD))
    if r < 0.7:
        return deep(rng.choice([5, 50, 500, 990, 1030, 3000]), rng)
    if r < 0.8:
        return [rng.choice(ABSURD[:20])] * rng.choice([100, 1000, 10_000, 100_000])
    if r < 0.88:
        return rng.choice(["x", "1Gi", "\u00e9", "a:b"]) * rng.choice([1000, 10_000, 100_000])
    if r < 0.9:
        return "x" * 2_000_000
    return {rng.choice(KEYS): copy.deepcopy(rng.choice(ABSURD)) for _ in range(rng.randint(1, 5))}


def get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def mutated(base: dict[str, Any], paths: list[tuple[Any, ...]], rng: random.Random) -> Any:
    doc = copy.deepcopy(base)
    for _ in range(rng.randint(1, 4)):
        path = rng.choice(paths)  # a place in the original; earlier edits may have removed it
        try:
            node = get(doc, path)
        except (KeyError, IndexError, TypeError):
            continue
        r = rng.random()
        try:
            if r < 0.6 or not path:
                doc = put(doc, path, value(rng))
            elif r < 0.8 and isinstance(node, dict | list) and node:
                key = rng.choice(list(node.keys()) if isinstance(node, dict) else range(len(node)))
                del node[key]
            elif isinstance(node, dict):
                node[rng.choice(KEYS)] = value(rng)
            else:
                doc = put(doc, path, {rng.choice(KEYS): node})
        except TypeError:  # the place is inside a string an earlier edit put there
            continue
    return doc


def case(bases: list[dict[str, Any]], paths: list[list[tuple[Any, ...]]], rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.7:
        i = rng.randrange(len(bases))
        return splice(json.dumps(mutated(bases[i], paths[i], rng)).encode())
    raw = json.dumps(rng.choice(bases)).encode()
    if r < 0.8:
        return raw[: rng.randrange(len(raw))]
    if r < 0.9:
        data = bytearray(raw)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if r < 0.95:
        return rng.choice([b"[" * 100_000, b'{"a":' * 50_000, b"{}" * 1_000_000, b"[" + b"{}," * 300_000 + b"{}]",
                           b"NaN", b"1e999", b'"\\ud800"', b"\xff" * 100, b"", b"   ", b"null", b"[]", b"0" * 5000])
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 2000)))


def run(cases: int, seed: int, bundle: Bundle, *, hang: float = 2.0) -> dict[str, Any]:
    rng = random.Random(seed)
    bases = reviews()
    paths = [[p for p, _ in nodes(b)] for b in bases]
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    slowest = 0.0
    for i in range(cases):
        raw = case(bases, paths, rng)
        phase = "mutate" if rng.random() < 0.5 else "validate"
        started = time.perf_counter()
        try:
            out = answer(raw, bundle, phase)  # type: ignore[arg-type]
        except Exception as e:  # the edge would turn this into a 500
            statuses[500] += 1
            failures.append(f"case {i}: raised {type(e).__name__}: {e}"[:300])
            continue
        took = time.perf_counter() - started
        slowest = max(slowest, took)
        failures += judged(i, out.status, out.body, took, hang, statuses)
        # what the edge logs as "policy failed": a policy that raised (the review failed closed)
        failures += [f"case {i}: policy {policy} raised: {tb.strip().splitlines()[-1]}"[:300]
                     for policy, tb in (out.decision.errors if out.decision is not None else ())]
    return {"cases": cases, "seed": seed, "statuses": dict(sorted(statuses.items())),
            "slowest_s": round(slowest, 4), "failures": failures}


def judged(i: int, status: int, body: bytes, took: float, hang: float, statuses: Counter[int]) -> list[str]:
    """Count one answer's status; its failure, if any: a 5xx or slower than ``hang``; any other
    non-200 must carry a JSON ``error`` message (a KeyError or a decode error escapes otherwise)."""
    statuses[status] += 1
    if status >= 500 or took > hang:
        return [f"case {i}: status {status} in {took:.3f} s: {body[:200]!r}"]
    if status != 200:
        json.loads(body)["error"]
    return []


# -- through the HTTPS edge ------------------------------------------------------------------
@contextlib.contextmanager
def https_server(policies: Path = ROOT / "policies") -> Iterator[tuple[int, ssl.SSLContext]]:
    """``webhook.server``'s app served over TLS on a free port, as ``batchgate serve`` runs it
    (the same runner settings, uvloop), in a thread; yields the port and a client context."""
    with tempfile.TemporaryDirectory() as tmp:
        state = server.prepare(server.ServeOptions(policies=str(policies), cert_dir=tmp))
        loop = server._new_loop()
        ready = threading.Event()
        holder: dict[str, Any] = {}

        async def start() -> None:
            from aiohttp import web

            runner = web.AppRunner(server.make_app(state), **{**server.RUNNER_SETTINGS, "shutdown_timeout": 1})
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=state.ssl_context)
            await site.start()
            holder["runner"], holder["port"] = runner, runner.addresses[0][1]

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(start())
            ready.set()
            loop.run_forever()
            # connections still reading what is left of an abandoned body (aiohttp's lingering close)
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.close()

        thread = threading.Thread(target=serve, name="fuzz-https", daemon=True)
        thread.start()
        ready.wait(30)
        client = ssl.create_default_context(cafile=str(Path(tmp) / "ca.crt"))
        client.check_hostname = False
        try:
            yield holder["port"], client
        finally:
            asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(60)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)


def closed_by_peer(sock: Any) -> bool:
    """Whether the server closed a kept-alive connection (checked before reusing it)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLWantReadError, BlockingIOError):
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


class Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}"[:300])


def abandoned(conn: http.client.HTTPSConnection, raw: bytes, rng: random.Random, i: int) -> list[str]:
    """Send the headers and part of a body the server answers without reading (declared past the
    cap, not JSON, or to no admission path), then stop: the answer must come, and must say the
    connection closes (its body is not read to the end, so it can carry no other request)."""
    path, ctype, length = rng.choice([("/mutate", "application/json", server.MAX_BODY + 1 + len(raw)),
                                      ("/validate", "text/plain", len(raw) + 1),
                                      ("/nowhere", "application/json", len(raw) + 1)])
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", ctype)
        conn.putheader("Content-Length", str(length))
        conn.endheaders(raw[: rng.randrange(len(raw) + 1)])
        resp = conn.getresponse()
        resp.read()
    except (http.client.HTTPException, OSError) as e:
        return [f"case {i}: no response to a body cut short ({type(e).__name__}: {e})"]
    if resp.status < 400 or resp.status >= 500:
        return [f"case {i}: status {resp.status} for a body cut short on {path}"]
    if (resp.getheader("Connection") or "").lower() != "close":
        return [f"case {i}: {resp.status} before its body was in, without Connection: close"]
    return []


def run_https(cases: int, seed: int, *, hang: float = 5.0, policies: Path = ROOT / "policies") -> dict[str, Any]:
    """The same cases as :func:`run`, through the HTTPS edge over kept-alive connections."""
    rng = random.Random(seed)
    bases = reviews()
    paths = [[p for p, _ in nodes(b)] for b in bases]
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    logged = Logged()
    watched = [logging.getLogger(n) for n in ("webhook", "aiohttp")]
    for lg in watched:
        lg.addHandler(logged)
    slowest, connections, on_connection = 0.0, 1, 0
    try:
        with https_server(policies) as (port, context):
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
            for i in range(cases):
                raw = case(bases, paths, rng)
                phase = "mutate" if rng.random() < 0.5 else "validate"
                if conn.sock is not None and closed_by_peer(conn.sock):
                    failures.append(f"case {i - 1}: connection closed after its response without Connection: close")
                    conn.close()
                if conn.sock is None:
                    connections += 1 if i else 0
                    on_connection = 0
                on_connection += 1
                started = time.perf_counter()
                if rng.random() < 0.03:  # a body that stops half-way, answered before it is all in
                    failures += abandoned(conn, raw, rng, i)
                    conn.close()
                    continue
                try:
                    conn.request("POST", f"/{phase}", body=raw, headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                except (http.client.HTTPException, OSError) as e:
                    failures.append(f"case {i}: no response ({type(e).__name__}: {e}), {len(raw)} bytes, "
                                    f"request {on_connection} of its connection")
                    conn.close()
                    continue
                took = time.perf_counter() - started
                slowest = max(slowest, took)
                failures += judged(i, resp.status, data, took, hang, statuses)
            conn.close()
    finally:
        for lg in watched:
            lg.removeHandler(logged)
    return {"cases": cases, "seed": seed, "statuses": dict(sorted(statuses.items())),
            "slowest_s": round(slowest, 4), "connections": connections, "failures": failures,
            "logged": logged.lines}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hang", type=float, default=None,
                    help="seconds after which a case counts as a hang (default 2, 5 with --https)")
    ap.add_argument("--https", action="store_true", help="through the HTTPS edge, over kept-alive connections")
    args = ap.parse_args()
    started = time.monotonic()
    if args.https:
        result = run_https(args.cases, args.seed, hang=args.hang or 5.0)
        what = (f"{result['connections']} connections (each closed after a response saying so), "
                f"{len(result['failures'])} failures (no response, unannounced close, 5xx or hangs), "
                f"{len(result['logged'])} warnings logged")
    else:
        result = run(args.cases, args.seed, load_bundle(ROOT / "policies"), hang=args.hang or 2.0)
        what = f"{len(result['failures'])} failures (5xx or hangs)"
    print(f"{result['cases']} cases, seed {result['seed']}, {time.monotonic() - started:.0f} s: "
          f"statuses {result['statuses']}, slowest case {result['slowest_s']} s, {what}")
    for line in result["failures"][:20]:
        print("  " + line)
    for line in result.get("logged", [])[:20]:  # what the server logged at WARNING or above
        print("  logged: " + line)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
