"""Throughput and latency of POST /mutate: batchgate beside two no-op webhooks, in one run.

Three servers, each pinned to one core with ``taskset``, speak HTTPS with the same
certificate on loopback; ``wrk`` (Debian package) runs on the other core and POSTs
a real AdmissionReview a kube-apiserver sent (shared/fixtures):

- ``stdlib no-op``: plain aiohttp, asyncio's default loop, the standard ``json``
  module; it parses the review and answers ``allowed``. The yardstick: what a naive
  Python webhook that does nothing costs.
- ``same-stack no-op``: the same no-op on batchgate's own stack (aiohttp on uvloop,
  orjson): what batchgate would cost if its policies were free.
- ``batchgate``: ``batchgate serve`` on the shipped bundle.

Rounds alternate the three servers so the machine's noise hits them alike; each
figure is the median over rounds, and the ratios are taken round by round.

``--instructions`` counts instead the CPU instructions each server spends per review
under valgrind's callgrind (counters zeroed after warm-up, then sequential POSTs on
one kept-alive connection): slow, but the same figure on a busy machine as on a quiet
one, which is how two versions of the edge are compared. Kernel time (sockets) is not
in it, so it is not the throughput ratio, only the user-space part of it. It counts the
two reviews of a Pod create apart: the mutating review (the fixture, to ``/mutate``) and
the validating one (the fixture's Pod as batchgate's patch left it, to ``/validate``).

    python bench/bench_webhook.py [--duration 10] [--rounds 3] [--connections 16] [--fixture FILE]
    python bench/bench_webhook.py --instructions [--requests 400] [--fixture FILE] [--mutate-only]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("BATCHGATE_FIXTURES") or ROOT / "tests" / "fixtures" / "admission-k8s-1.37")

STDLIB_NOOP = r'''
import json, ssl, sys
from aiohttp import web

async def handle(request):
    body = json.loads(await request.read())
    uid = body["request"]["uid"]
    out = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "response": {"uid": uid, "allowed": True}}
    return web.Response(body=json.dumps(out, separators=(",", ":")).encode(),
                        content_type="application/json")

ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.minimum_version = ssl.TLSVersion.TLSv1_2
ctx.load_cert_chain(sys.argv[2] + "/tls.crt", sys.argv[2] + "/tls.key")
app = web.Application(client_max_size=6 * 1024 * 1024)
app.router.add_post("/mutate", handle)
app.router.add_post("/validate", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=ctx, access_log=None, print=None,
            reuse_port=True)  # bench_peers --replicas runs several on one port
'''

SAME_STACK_NOOP = r'''
import ssl, sys
import orjson, uvloop
from aiohttp import web

async def handle(request):
    body = orjson.loads(await request.read())
    uid = body["request"]["uid"]
    out = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "response": {"uid": uid, "allowed": True}}
    return web.Response(body=orjson.dumps(out), content_type="application/json")

ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.minimum_version = ssl.TLSVersion.TLSv1_2
ctx.load_cert_chain(sys.argv[2] + "/tls.crt", sys.argv[2] + "/tls.key")
app = web.Application(client_max_size=6 * 1024 * 1024)
app.router.add_post("/mutate", handle)
app.router.add_post("/validate", handle)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=ctx, access_log=None, print=None,
            loop=uvloop.new_event_loop())
'''

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BENCH_BODY"), "rb")
wrk.body = f:read("*a")
f:close()
if os.getenv("BENCH_AUTH") then wrk.headers["Authorization"] = os.getenv("BENCH_AUTH") end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %d %.3f %.3f %.3f\\n", summary.requests, summary.duration,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.mean / 1000))
end
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not start")


def run_wrk(port: int, body: Path, *, duration: int, connections: int, core: str,
            path: str = "/mutate", authorization: str | None = None, timeout: int = 2) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA)
    cmd = ["taskset", "-c", core, "wrk", "-t1", f"-c{connections}", f"-d{duration}s", f"--timeout={timeout}s", "--latency",
           "-s", f.name, f"https://127.0.0.1:{port}{path}"]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "BENCH_BODY": str(body),
                                                            **({"BENCH_AUTH": authorization} if authorization else {})},
                         check=True).stdout
    os.unlink(f.name)
    line = next(ln for ln in out.splitlines() if ln.startswith("RESULT"))
    _, reqs, micros, errors, p50, p99, mean = line.split()
    return {"rps": int(reqs) / (int(micros) / 1e6), "p50": float(p50), "p99": float(p99),
            "mean": float(mean), "errors": int(errors)}


SERVERS = ("stdlib no-op", "same-stack no-op", "batchgate")


def server_cmd(name: str, port: int, tmp: Path) -> list[str]:
    if name == "stdlib no-op":
        return [sys.executable, str(tmp / "stdlib_noop.py"), str(port), str(tmp)]
    if name == "same-stack no-op":
        return [sys.executable, str(tmp / "same_stack_noop.py"), str(port), str(tmp)]
    return [sys.executable, "-m", "webhook", "--log-level", "WARNING", "serve", "--port", str(port),
            "--cert-dir", str(tmp)]


def validating_body(mutate: bytes) -> bytes:
    """The validating review of a create: the mutating review's object as batchgate's own patch
    (the shipped bundle, decided in-process) left it, as bench_peers.py sends it."""
    import base64

    import jsonpatch  # type: ignore[import-untyped]

    sys.path.insert(0, str(ROOT))
    from webhook.rules import load_bundle
    from webhook.server import answer

    review = json.loads(mutate)
    out = json.loads(answer(mutate, load_bundle(ROOT / "policies"), "mutate").body)["response"]
    patch = json.loads(base64.b64decode(out.get("patch", "W10=")))
    review["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"], patch)
    return json.dumps(review, separators=(",", ":")).encode()


def instructions(name: str, port: int, tmp: Path, bodies: dict[str, bytes], *, requests: int,
                 core: str) -> dict[str, float]:
    """Instructions per review of one server under callgrind, per endpoint (``bodies``: path ->
    review): after warm-up, per endpoint its counters are zeroed, ``requests`` sequential POSTs
    made, and the counters dumped."""
    out = tmp / f"callgrind.{port}"
    cmd = server_cmd(name, port, tmp)
    if name == "batchgate":
        cmd += ["--reload-interval", "100000"]  # no file polling inside the count
    proc = subprocess.Popen(["taskset", "-c", core, "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                             *cmd], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dumps: dict[str, Path] = {}
    try:
        wait_ready(port, timeout=600)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=120)

        def post(path: str) -> None:
            conn.request("POST", path, body=bodies[path], headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise RuntimeError(f"{name} answered {r.status}")

        for path in bodies:
            for _ in range(100):
                post(path)
        for path in bodies:
            before = set(tmp.iterdir())
            subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True)
            for _ in range(requests):
                post(path)
            subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True, capture_output=True)
            dumps[path] = next(p for p in set(tmp.iterdir()) - before if p.name.startswith(out.name + "."))
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    counts = {}
    for path, dump in dumps.items():  # the --dumps, not the exit's
        total = re.search(rb"^(?:summary|totals): (\d+)", dump.read_bytes(), re.M)
        if total is None:
            raise RuntimeError(f"no total in {dump}")
        counts[path] = int(total.group(1)) / requests
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10, help="seconds per saturation run (default 10)")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--fixture", default=str(FIXTURES / "pod-create-by-namespace-user.mutate.json"))
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    ap.add_argument("--instructions", action="store_true",
                    help="count CPU instructions per review under callgrind instead (slow, exact)")
    ap.add_argument("--requests", type=int, default=400, help="reviews counted with --instructions")
    ap.add_argument("--mutate-only", action="store_true",
                    help="with --instructions: only the mutating review (else also the validating review of "
                         "the Pod as batchgate's patch left it, POSTed to /validate)")
    args = ap.parse_args()
    if args.instructions and not shutil.which("valgrind"):
        print("bench: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    if not args.instructions and not shutil.which("wrk"):
        print("bench: wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    server_core, client_core = str(cpus[0]), str(cpus[-1])
    tmp = Path(tempfile.mkdtemp(prefix="batchgate-bench-"))
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--cert-dir", str(tmp)], check=True,
                   capture_output=True, cwd=ROOT)
    (tmp / "stdlib_noop.py").write_text(STDLIB_NOOP)
    (tmp / "same_stack_noop.py").write_text(SAME_STACK_NOOP)
    body = Path(args.fixture)
    json.loads(body.read_text())  # fail early on a bad fixture

    if args.instructions:
        mutate = body.read_bytes()
        bodies = {"/mutate": mutate}
        if not args.mutate_only:
            bodies["/validate"] = validating_body(mutate)
        counts = {name: instructions(name, free_port(), tmp, bodies, requests=args.requests, core=server_core)
                  for name in SERVERS}
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"fixture: {body.name}; CPU instructions per review under callgrind ({args.requests} sequential "
              "reviews after 100 warm-up, one kept-alive HTTPS connection)")
        print(f"{'':<17} {'mutating':>9} {'validating':>11}")
        for name in SERVERS:
            print(f"{name:<17} {counts[name]['/mutate'] / 1000:>8.1f}k"
                  + (f" {counts[name]['/validate'] / 1000:>10.1f}k" if "/validate" in bodies else ""))
        for path in bodies:
            above = counts["batchgate"][path] - counts["same-stack no-op"][path]
            print(f"{path}: batchgate above the same-stack no-op {above / 1000:.1f}k; instructions "
                  + ", ".join(f"{base} / batchgate {counts[base][path] / counts['batchgate'][path]:.2f}"
                              for base in ("stdlib no-op", "same-stack no-op")))
        return 0

    sat: dict[str, list[dict[str, float]]] = {k: [] for k in SERVERS}
    one: dict[str, list[dict[str, float]]] = {k: [] for k in SERVERS}
    for _ in range(args.rounds):
        for name in SERVERS:
            port = free_port()
            proc = subprocess.Popen(["taskset", "-c", server_core, *server_cmd(name, port, tmp)], cwd=ROOT)
            try:
                wait_ready(port)
                run_wrk(port, body, duration=2, connections=args.connections, core=client_core)  # warm-up
                sat[name].append(run_wrk(port, body, duration=args.duration,
                                         connections=args.connections, core=client_core))
                # One connection: the latency of a review itself, without queueing behind others.
                one[name].append(run_wrk(port, body, duration=max(3, args.duration // 2),
                                         connections=1, core=client_core))
            finally:
                proc.terminate()
                proc.wait(timeout=10)
    shutil.rmtree(tmp, ignore_errors=True)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print(f"fixture: {body.name}; {args.duration}s x {args.rounds} alternating rounds (medians), "
          f"servers on core {server_core}, wrk on core {client_core}")
    print(f"{'server':<17} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8}   {'1-conn/s':>8} {'1-conn p50':>10} "
          f"{'1-conn p99':>10} {'errors':>7}")
    for name in SERVERS:
        errors = sum(r["errors"] for r in sat[name] + one[name])
        print(f"{name:<17} {med(sat[name], 'rps'):>10.0f} {med(sat[name], 'p50'):>8.2f} {med(sat[name], 'p99'):>8.2f}   "
              f"{med(one[name], 'rps'):>8.0f} {med(one[name], 'p50'):>10.2f} {med(one[name], 'p99'):>10.2f} {errors:>7.0f}")
    print(f"(reviews/s, p50, p99 with {args.connections} connections, one core saturated; "
          "1-conn: one request at a time)")
    for base in ("stdlib no-op", "same-stack no-op"):
        ratios = [b["rps"] / n["rps"] for b, n in zip(sat["batchgate"], sat[base], strict=True)]
        print(f"throughput batchgate / {base}: {statistics.median(ratios):.2f} "
              f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
