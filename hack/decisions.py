"""Every decision batchgate makes on the recorded inputs, written down: the check that an
optimisation changed nothing a user or the API server can see.

Runs through the engine (``decide``) and the HTTP edge's body handler (``answer``):

- the real AdmissionReviews in the fixtures, as sent and varied (other callers, other
  namespaces, as an UPDATE of themselves and of a changed copy, as a DELETE), each phase;
- every object in the policies' samples, the corpus (tests/corpus/manifests) and examples/,
  as several callers (a user, an admin, the job controller, a workload's controller with an
  ownerReference), in several namespaces, as CREATE, UPDATE (of itself and of a changed
  copy) and DELETE, each phase, and its mutated result decided again;
- every case of every policy suite (policies/*/suite.yaml), against that policy alone;
- a seeded run of the fuzz generator (bench/fuzz_webhook.py) through ``answer``.

Each line holds one answer in full: allowed, message, warnings, the exact JSONPatch (op
order included), per-policy outcomes, which policies raised, why nothing ran, and the
response bytes (status and a hash of the body). Uids and the hash seed are fixed, so two
runs of the same code write the same file byte for byte.

    python hack/decisions.py [--out FILE]          # write the lines, print count and digest
    python hack/decisions.py --against main        # the same on a checkout of main; diff
"""

from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = Path(os.environ.get("BATCHGATE_DECISIONS_ROOT") or HERE.parent.parent)
sys.path.insert(0, str(ROOT))

CALLERS: dict[str, dict[str, Any]] = {
    "user": {"username": "alice", "groups": ["devs", "system:authenticated"]},
    "admin": {"username": "root", "groups": ["system:masters", "system:authenticated"]},
    "job-controller": {"username": "system:serviceaccount:kube-system:job-controller",
                       "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                  "system:authenticated"]},
    "kcm": {"username": "system:kube-controller-manager", "groups": ["system:authenticated"]},
}
NAMESPACES = ("demo", "notebooks", "gpu-a", "kube-system")
PHASES = ("mutate", "validate", "check")
OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "owner-job", "uid": "0000-owner",
         "controller": True, "blockOwnerDeletion": True}


def fixtures_dir() -> Path:
    """This checkout's recorded requests (or $BATCHGATE_FIXTURES), also for --against: the same
    inputs on both sides, whichever recordings the other checkout has."""
    return Path(os.environ.get("BATCHGATE_FIXTURES") or HERE.parent.parent / "tests" / "fixtures" / "admission-k8s-1.37")


def changed(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy with its metadata, and its pod template where it has one, changed: what an
    UPDATE that changes the template looks like from the old side."""
    old = copy.deepcopy(obj)
    meta = old.setdefault("metadata", {}) if isinstance(old.get("metadata", {}), dict) else {}
    if isinstance(meta.get("labels", {}), dict):
        meta.setdefault("labels", {})["decisions-old"] = "1"
    spec = old.get("spec")
    for path in (("template",), ("jobTemplate", "spec", "template")):
        node: Any = spec
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            tmeta = node.setdefault("metadata", {})
            if isinstance(tmeta, dict) and isinstance(tmeta.get("annotations", {}), dict):
                tmeta.setdefault("annotations", {})["decisions-old"] = "1"
    return old


def with_owner(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta["ownerReferences"] = [OWNER]
    return out


def review_of(obj: dict[str, Any], *, uid: str, caller: str, namespace: str, operation: str,
              old: dict[str, Any] | None) -> dict[str, Any]:
    from webhook.offline import Caller, synthetic_review

    info = CALLERS[caller]
    r = synthetic_review(obj, Caller(operation=operation, username=info["username"], groups=tuple(info["groups"]),
                                     namespace=namespace), old_object=old)
    r["request"]["uid"] = uid
    return r


def record(key: str, decision: Any) -> dict[str, Any]:
    from webhook.engine import encode_review

    body = encode_review(decision)
    return {
        "case": key,
        "allowed": decision.allowed,
        "message": decision.message,
        "warnings": decision.warnings,
        "patch": decision.patch,
        "outcomes": decision.outcomes,
        "errors": [p for p, _ in decision.errors],
        "skipped": decision.skipped,
        "response": hashlib.sha256(body).hexdigest()[:16],
    }


def decide_record(key: str, review: dict[str, Any], bundle: Any, phase: str) -> dict[str, Any]:
    from webhook.engine import BadReview, decide

    given = copy.deepcopy(review)
    try:
        decision = decide(given, bundle, phase=phase)  # type: ignore[arg-type]
    except BadReview as e:
        return {"case": key, "bad_review": str(e)}
    except RecursionError:
        return {"case": key, "bad_review": "RecursionError"}
    out = record(key, decision)
    if given != review:  # the engine must never change what it was sent
        out["input_modified"] = True
    return out


def answer_record(key: str, raw: bytes, bundle: Any, phase: str) -> dict[str, Any]:
    from webhook.server import answer

    a = answer(raw, bundle, phase, 3600.0)  # type: ignore[arg-type]
    return {"case": key, "status": a.status, "outcome": a.outcome,
            "body": a.body.decode("utf-8", "replace") if len(a.body) < 4096
            else hashlib.sha256(a.body).hexdigest()}


def objects() -> Iterator[tuple[str, dict[str, Any]]]:
    from webhook.offline import not_an_object, parse_manifests

    files = sorted((ROOT / "policies").glob("*/samples/*.y*ml"))
    files += sorted((ROOT / "tests" / "corpus" / "manifests").glob("*.y*ml"))
    files += sorted((ROOT / "examples").rglob("*.y*ml"))
    for f in files:
        try:
            docs = parse_manifests(f.read_text(), str(f))
        except Exception as e:  # a sample that is not YAML: nothing to decide
            print(f"decisions: skipping {f}: {e}", file=sys.stderr)
            continue
        for i, doc in enumerate(docs):
            if not_an_object(doc) is None and isinstance(doc, dict) and doc.get("kind") and doc.get("apiVersion"):
                yield f"{f.relative_to(ROOT)}#{i}", doc


def cases(bundle: Any) -> Iterator[dict[str, Any]]:
    # 1. the recorded AdmissionReviews: as sent, each phase, through answer() and decide()
    for f in sorted(fixtures_dir().glob("*.json")):
        raw = f.read_bytes()
        base = json.loads(raw)
        for phase in PHASES:
            if phase != "check":
                yield answer_record(f"fixture {f.name} {phase} answer", raw, bundle, phase)
            yield decide_record(f"fixture {f.name} {phase}", base, bundle, phase)
        req = base["request"]
        obj = req.get("object") or req.get("oldObject")
        for caller, info in CALLERS.items():
            for ns in NAMESPACES:
                for op in ("CREATE", "UPDATE-same", "UPDATE-changed"):
                    r = copy.deepcopy(base)
                    rq = r["request"]
                    rq["userInfo"] = dict(info)
                    rq["namespace"] = ns
                    if op != "CREATE":
                        rq["operation"] = "UPDATE"
                        rq["object"] = copy.deepcopy(obj)
                        rq["oldObject"] = copy.deepcopy(obj) if op == "UPDATE-same" else changed(obj)
                    elif rq["operation"] != "CREATE":
                        continue
                    for phase in PHASES:
                        key = f"fixture {f.name} as {caller} in {ns} {op} {phase}"
                        raw_r = json.dumps(r).encode()
                        yield answer_record(key + " answer", raw_r, bundle, phase) if phase != "check" \
                            else decide_record(key, r, bundle, phase)

    # 2. samples, corpus and examples, as several callers, namespaces and operations
    from webhook.engine import decide

    n = 0
    for name, obj in objects():
        for caller in CALLERS:
            subject = with_owner(obj) if caller in ("job-controller", "kcm") else obj
            for ns in NAMESPACES:
                for op in ("CREATE", "UPDATE-same", "UPDATE-changed", "DELETE"):
                    n += 1
                    uid = f"00000000-0000-4000-8000-{n:012d}"
                    operation = op.split("-")[0]
                    old = None if op == "CREATE" or op == "DELETE" else (
                        copy.deepcopy(subject) if op == "UPDATE-same" else changed(subject))
                    review = review_of(copy.deepcopy(subject), uid=uid, caller=caller, namespace=ns,
                                       operation=operation, old=old)
                    for phase in PHASES:
                        key = f"{name} as {caller} in {ns} {op} {phase}"
                        rec = decide_record(key, review, bundle, phase)
                        yield rec
                    if op == "CREATE":  # the mutated object, decided again (idempotence)
                        try:
                            first = decide(copy.deepcopy(review), bundle, phase="check")
                        except Exception:
                            continue
                        if first.allowed and first.obj is not None:
                            again = review_of(copy.deepcopy(first.obj), uid=uid, caller=caller,
                                              namespace=ns, operation="CREATE", old=None)
                            yield decide_record(f"{name} as {caller} in {ns} again", again, bundle, "check")

    # 3. the policy suites, each against its policy alone (as `batchgate test` runs them)
    yield from suite_cases(bundle)

    # 4. a seeded fuzz run through answer()
    spec = importlib.util.spec_from_file_location("fuzz_webhook", ROOT / "bench" / "fuzz_webhook.py")
    assert spec and spec.loader
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    rng = random.Random(12)
    bases = fuzz.reviews()
    paths = [[p for p, _ in fuzz.nodes(b)] for b in bases]
    for i in range(FUZZ_CASES):
        raw = fuzz.case(bases, paths, rng)
        phase = "mutate" if rng.random() < 0.5 else "validate"
        yield answer_record(f"fuzz {i} {phase}", raw, bundle, phase)


FUZZ_CASES = 3000


def suite_cases(bundle: Any) -> Iterator[dict[str, Any]]:
    import yaml

    from webhook.offline import _load_object, _only, suite_files
    from webhook.yamlsrc import read_file

    n = 0
    for path, policies in suite_files(bundle):
        if not path.is_file():
            continue
        subject = bundle if policies is None else _only(bundle, policies)
        doc = read_file(path)[0]
        raw_cases = yaml.safe_load(path.read_text())["cases"]
        for case_node, raw in zip(doc.req("cases").seq(), raw_cases, strict=True):
            n += 1
            obj = _load_object(case_node.req("object"), path.parent)
            old = _load_object(case_node.req("oldObject"), path.parent) if case_node.get("oldObject") else None
            req = raw.get("request") or {}
            from webhook.offline import Caller, synthetic_review

            caller = Caller(operation=req.get("operation", "CREATE"), username=req.get("user", "alice"),
                            groups=tuple(req.get("groups", ("system:authenticated",))),
                            namespace=req.get("namespace", "default"), dry_run=bool(req.get("dryRun", False)))
            review = synthetic_review(obj, caller, old_object=old)
            review["request"]["uid"] = f"00000000-0000-4000-9000-{n:012d}"
            phase = raw.get("phase") or "check"
            yield decide_record(f"suite {path.relative_to(ROOT)}: {raw['name']}", review, subject, phase)


def run(out: Path) -> tuple[int, str]:
    from webhook.rules import load_bundle

    bundle = load_bundle(ROOT / "policies")
    digest = hashlib.sha256()
    count = 0
    with out.open("w") as f:
        for rec in cases(bundle):
            line = json.dumps(rec, sort_keys=False, ensure_ascii=True) + "\n"
            f.write(line)
            digest.update(line.encode())
            count += 1
    return count, digest.hexdigest()


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # set iteration order (a message may name the first
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})  # problem)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="", help="where to write the lines (default: a temporary file)")
    ap.add_argument("--against", default="", metavar="REF",
                    help="also run this script on a checkout of REF (a git ref) and diff the two")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkstemp(prefix="decisions-", suffix=".jsonl")[1])
    count, digest = run(out)
    print(f"{count} decisions, sha256 {digest}: {out}")
    if not args.against:
        return 0
    with tempfile.TemporaryDirectory(prefix="decisions-ref-") as tmp:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", tmp, args.against],
                       check=True, capture_output=True)
        try:
            other = Path(tmp) / "decisions.jsonl"
            res = subprocess.run([sys.executable, str(HERE), "--out", str(other)], check=True, text=True,
                                 capture_output=True, env={**os.environ, "BATCHGATE_DECISIONS_ROOT": tmp})
            print(f"{args.against}: {res.stdout.strip()}")
            a, b = other.read_text().splitlines(), out.read_text().splitlines()
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", tmp], capture_output=True)
    if a == b:
        print("identical")
        return 0
    diff = list(difflib.unified_diff(a, b, args.against, "this checkout", lineterm="", n=0))
    print("\n".join(diff[:60]))
    print(f"... {sum(1 for d in diff if d.startswith('+') and not d.startswith('+++'))} lines differ")
    return 1


if __name__ == "__main__":
    sys.exit(main())
