"""Where one admission review's CPU goes, stage by stage, in-process.

The HTTP benchmark (bench_webhook.py) says how fast the whole server is; this
one says which part of the engine costs what, for one real review: parsing the
JSON (the no-op handler pays this too), building the request context, each
mutating policy on its own, the JSONPatch, the response bytes, and the whole
``decide``. Stages are timed in alternation, several rounds, median kept, so
that noise from a shared machine hits them alike.

``--instructions`` counts CPU instructions under valgrind's callgrind instead
of timing: slow (about a minute) but the same figure on every run, busy
machine or not — the measure to compare two versions of the code by.

    python bench/bench_engine.py [--fixture FILE] [--rounds 5] [--instructions]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURES = Path(os.environ.get("BATCHGATE_FIXTURES") or ROOT / "tests" / "fixtures" / "admission-k8s-1.37")
DEFAULT_FIXTURE = FIXTURES / "pod-create-by-namespace-user.mutate.json"


def stages(fixture: Path, policies: Path) -> dict[str, Callable[[], object]]:
    from webhook.draft import Draft
    from webhook.engine import decide, encode_review, make_ctx
    from webhook.rules import load_bundle
    from webhook.server import answer

    raw = fixture.read_bytes()
    bundle = load_bundle(policies)
    body = json.loads(raw)
    req = body["request"]
    obj = req["object"]
    ctx = make_ctx(req, obj, bundle, req.get("namespace") or "")
    chosen = bundle.candidates(mutating=True, operation=ctx.operation, group=ctx.group,
                               version=ctx.version, kind=ctx.kind)
    out: dict[str, Callable[[], object]] = {
        "json.loads (the stdlib no-op pays it)": lambda: json.loads(raw),
        "orjson.loads (batchgate and the same-stack no-op)": lambda: orjson.loads(raw),
        "request context": lambda: make_ctx(req, obj, bundle, req.get("namespace") or ""),
    }
    for p in chosen:
        assert p.rule.mutate is not None
        out[f"  policy {p.name}"] = (lambda p=p: p.rule.mutate(p.settings, Draft(obj), ctx))  # type: ignore[misc]
    draft = Draft(obj)
    for p in chosen:
        p.rule.mutate(p.settings, draft, ctx)  # type: ignore[misc]
    decision = decide(body, bundle, phase="mutate")
    out["JSONPatch from the draft"] = draft.patch
    out["response bytes"] = lambda: encode_review(decision)
    out["decide (all of the engine)"] = lambda: decide(body, bundle, phase="mutate")
    out["whole review: webhook.server.answer (checks, parse, decide, bytes)"] = lambda: answer(raw, bundle, "mutate")
    return out


def timed(fns: dict[str, Callable[[], object]], rounds: int, budget: float) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            n, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < budget:
                for _ in range(50):
                    fn()
                n += 50
            samples[name].append(elapsed / n * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def instructions(fixture: Path, policies: Path, names: list[str], iterations: int) -> dict[str, float]:
    """Instructions per call: callgrind's total with N calls minus with none."""

    def total(name: str, n: int) -> int:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--fixture", str(fixture), "--policies", str(policies), "--_run", name, str(n)]
        err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        return int(re.search(r"Collected : (\d+)", err).group(1))  # type: ignore[union-attr]

    return {name: (total(name, iterations) - total(name, 0)) / iterations for name in names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", default=str(DEFAULT_FIXTURE))
    ap.add_argument("--policies", default=str(ROOT / "policies"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--instructions", action="store_true", help="count instructions with valgrind (slow, exact)")
    ap.add_argument("--_run", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    fixture, policies = Path(args.fixture), Path(args.policies)
    fns = stages(fixture, policies)
    if args._run:  # inside valgrind: run one stage N times
        fn = fns[args._run[0]]
        for _ in range(int(args._run[1])):
            fn()
        return 0
    print(f"fixture: {fixture.name}; bundle: {policies}")
    if args.instructions:
        if not shutil.which("valgrind"):
            print("bench: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
            return 2
        counts = instructions(fixture, policies, list(fns), 200)
        for name, n in counts.items():
            print(f"{name:<40} {n / 1000:>8.0f}k instructions")
        return 0
    micros = timed(fns, args.rounds, budget=0.2)
    for name, us in micros.items():
        print(f"{name:<40} {us:>8.1f} µs")
    print(f"(median of {args.rounds} alternating rounds; pid {os.getpid()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
