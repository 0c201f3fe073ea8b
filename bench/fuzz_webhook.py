"""Seeded fuzz of the webhook's edge: every body gets a 200 review or a 4xx with a
JSON message, never a 5xx, never a hang.

Cases are built from the real AdmissionReviews in the fixtures: mutated (values
swapped for wrong types, absurd quantities and durations, huge strings and lists,
deep nesting, fields deleted), cut short, byte-flipped, or raw garbage. Each goes
through ``webhook.server.answer`` - what the HTTPS handler runs on a body - and
is timed; a case slower than ``--hang`` seconds counts as a hang.

    python bench/fuzz_webhook.py [--cases 100000] [--seed 1]

The unit tier runs a short seeded run of the same generator (tests/unit/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
        statuses[out.status] += 1
        if out.status >= 500 or took > hang:
            failures.append(f"case {i}: status {out.status} in {took:.3f} s: {out.body[:200]!r}")
        elif out.status != 200:
            json.loads(out.body)["error"]
    return {"cases": cases, "seed": seed, "statuses": dict(sorted(statuses.items())),
            "slowest_s": round(slowest, 4), "failures": failures}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hang", type=float, default=2.0, help="seconds after which a case counts as a hang")
    args = ap.parse_args()
    started = time.monotonic()
    result = run(args.cases, args.seed, load_bundle(ROOT / "policies"), hang=args.hang)
    print(f"{result['cases']} cases, seed {result['seed']}, {time.monotonic() - started:.0f} s: "
          f"statuses {result['statuses']}, slowest case {result['slowest_s']} s, "
          f"{len(result['failures'])} failures (5xx or hangs)")
    for line in result["failures"][:20]:
        print("  " + line)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
