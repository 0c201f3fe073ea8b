"""The ``batchgate`` command line (also ``python -m webhook``).

Exit codes everywhere: 0 success / allowed, 1 denied or tests failed, 2 usage or
bundle error (argparse's own convention for usage).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from . import __version__

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
# Generated certificates: certs/ of a source checkout, else certs/ in the working directory
# (never inside site-packages); the same for the manifests/ a checkout has.
SOURCE_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "policies").is_dir()
DEFAULT_CERTS = REPO_ROOT / "certs" if SOURCE_CHECKOUT else Path("certs")
DEFAULT_MANIFESTS = REPO_ROOT / "manifests" if SOURCE_CHECKOUT else Path("manifests")
KUBECONFIG_HELP = "kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)"
POLICIES_HELP = ("policy bundle directory (default: $BATCHGATE_POLICIES, else the bundle shipped with "
                 "batchgate, the repository's policies/)")
USAGE_NAMESPACE_HELP = ("the namespace batchgate runs in, where the reconciler stores usage in the ConfigMap "
                        "batchgate-usage (its --lease-namespace; default batchgate-system)")


def _cluster_flags(p: argparse.ArgumentParser, *, usage: bool = False) -> None:
    """The flags of a command that reads the cluster with the bundle: --kubeconfig and --policies,
    and (``usage``: queue, share, usage) --batchgate-namespace, where the usage ConfigMap is."""
    p.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    p.add_argument("--policies", default=None, help=POLICIES_HELP)
    if usage:
        p.add_argument("--batchgate-namespace", default=None, metavar="NAMESPACE", help=USAGE_NAMESPACE_HELP)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="batchgate",
        description="Admission policy layer and reconciler for HPC and batch work on Kubernetes.",
    )
    p.add_argument("--version", action="version", version=f"batchgate {__version__}")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="log line format: text, or json (one object per line) (default text)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("serve", help="run the HTTPS admission webhook",
                       description="Serve POST /mutate and /validate (AdmissionReview v1), /healthz, "
                       "/readyz and /metrics over HTTPS. With no arguments: the bundled policies on "
                       "127.0.0.1:8443, with a self-signed CA and serving certificate generated into "
                       "certs/ when absent. Policy and certificate files are reloaded when they change; "
                       "a bad new bundle is logged and the last good one stays in force.")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8443, help="port (default 8443)")
    s.add_argument("--policies", default=None, help=POLICIES_HELP)
    s.add_argument("--cert-dir", default=str(DEFAULT_CERTS),
                   help="directory with ca.crt, tls.crt, tls.key (generated when absent; default certs/)")
    s.add_argument("--dns-name", action="append", default=[], metavar="NAME",
                   help="extra SAN for a generated serving certificate (repeatable; default: none beyond "
                   "localhost and 127.0.0.1)")
    s.add_argument("--workers", type=int, default=1, help="processes sharing the port (default 1)")
    s.add_argument("--reload-interval", type=float, default=2.0,
                   help="seconds between checks for changed policy / certificate files (default 2)")
    s.add_argument("--review-budget", type=float, default=1.0, metavar="SECONDS",
                   help="policy work per review; past it, the policies not yet run answer with their "
                   "failurePolicy (Fail: deny, Ignore: skip with a warning) (default 1)")
    s.add_argument("--namespaces", default=None, metavar="PATH",
                   help="the namespace labels the reconciler publishes (ConfigMap batchgate-namespaces, "
                   "mounted: its directory or its namespaces.json), for queue grants by namespaceSelector; "
                   "reloaded when it changes. Without it, or while the file is missing, stale or bad, such "
                   "grants admit nobody (names and globs still work) (default: none)")
    s.add_argument("--namespace-labels-max-age", default="15m", metavar="DURATION",
                   help="published namespace labels older than this are stale and admit nobody (default 15m; "
                   "the reconciler republishes every 5m)")
    s.add_argument("--seal-keys", default=os.environ.get("BATCHGATE_SEAL_KEYS") or None, metavar="FILE",
                   help="keys of the admission seal on admitted pod templates ('<id> <base64 key>' lines, "
                   "the first signs, all verify; reloaded when the file changes); a missing file is an "
                   "error (default: $BATCHGATE_SEAL_KEYS, else CERT_DIR/seal.keys, made with a fresh key "
                   "when absent: for one local server, since replicas must share their keys)")

    sk = sub.add_parser("seal-key", help="print a new admission seal key line",
                        description="Print '<id> <base64 key>' with 32 random bytes, for the seal key file "
                        "the webhook reads (--seal-keys; in a cluster the Secret batchgate-seal, key 'keys'). "
                        "Rotation: append the new line, let every replica load it, then move it first.")
    del sk

    c = sub.add_parser("check", help="offline dry run of manifests against the bundle",
                       description="Decide manifests as the cluster would: the admitted objects on "
                       "stdout (-o json: always one List), warnings, denials and skipped inputs on stderr. "
                       "Directories are read as kubectl apply -f reads them (-R: recursively); documents that are no "
                       "Kubernetes objects (kustomization.yaml) are skipped with a note. Exit 0 all allowed, 1 any "
                       "denial, 2 usage or bundle error, an unusable input (unreadable, invalid YAML, an object "
                       "without apiVersion or kind) or no objects at all; "
                       "every other document is still decided. What the API server would refuse in names, "
                       "namespaces, labels and annotations is reported too (invalid:, exit 1); nothing else of its "
                       "validation is. Limits per object (a document or a List item): 3 MiB, 200,000 YAML nodes; per "
                       "input: 128 MiB, 5,000,000 nodes. Note: the API server's own plugins (service-account token injection, "
                       "Priority, RuntimeClass overhead) run before webhooks in a cluster and not here. Admitted pod "
                       "templates show the admission seal (batchgate.io/admitted) made with the published "
                       "key 'offline', which no cluster accepts: a cluster's webhook seals with its own.")
    c.add_argument("files", nargs="+", metavar="FILE",
                   help="YAML or JSON manifests, or directories of them (their .json, .yaml and .yml files, "
                   "as kubectl apply -f DIR); - for stdin")
    c.add_argument("-R", "--recursive", action="store_true",
                   help="also the files in directories' subdirectories (as kubectl apply -R)")
    c.add_argument("--policies", default=None, help=POLICIES_HELP)
    c.add_argument("-o", "--output", choices=("yaml", "json", "diff"), default="yaml",
                   help="the admitted objects as yaml (default; one document each), json (one List) or diff "
                   "(unified diff of submitted and admitted)")
    c.add_argument("--operation", choices=("CREATE", "UPDATE", "DELETE"), default="CREATE",
                   help="the operation the objects are sent with (default CREATE; an UPDATE carries no old "
                   "object, a DELETE carries the object as the old one, as the API server sends it)")
    c.add_argument("--user", default="batchgate-check", help="requesting user (default batchgate-check)")
    c.add_argument("--groups", default="system:authenticated",
                   help="comma-separated groups of the user (default system:authenticated)")
    c.add_argument("--namespace", default="default", help="namespace for objects without one (default default)")
    c.add_argument("--namespaces", default=None, metavar="FILE",
                   help="namespace labels for queue grants by namespaceSelector, as the reconciler publishes "
                   "them: the ConfigMap (kubectl get configmap -n batchgate-system batchgate-namespaces -o yaml), "
                   "its namespaces.json, or a directory holding that; taken as current. Without it such "
                   "grants admit nobody, as in the webhook before the labels are published (default: none)")

    t = sub.add_parser("test", help="run the bundle's own test suites",
                       description="Run every policy's suite.yaml (and the bundle's suite.yaml). "
                       "Fails when a policy has no suite or no README. One policy's suite alone: "
                       "batchgate test policies/shm (its folder), or --policy shm. "
                       "Exit 0 all passed, 1 failures, 2 bundle error.")
    t.add_argument("directory", nargs="?", default=None,
                   help="bundle directory, or one policy's folder in it to run that suite alone "
                   "(default: $BATCHGATE_POLICIES, else the bundle shipped with batchgate)")
    t.add_argument("--policy", action="append", default=[], metavar="NAME",
                   help="run only this policy's suite (repeatable; default: every suite, the bundle's too)")
    t.add_argument("-v", "--verbose", action="store_true", help="list every case (default: only failures)")

    ce = sub.add_parser("certs", help="create the CA and serving certificate; print the caBundle",
                        description="Create (or keep, while valid for more than --renew-before) a "
                        "self-signed CA and a serving certificate for the given DNS names, then print "
                        "the base64 caBundle for the webhook configurations.")
    ce.add_argument("--cert-dir", default=str(DEFAULT_CERTS), help="output directory (default certs/)")
    ce.add_argument("--dns-name", action="append", default=[], metavar="NAME",
                    help="SAN for the serving certificate (repeatable); localhost and 127.0.0.1 are always in "
                    "(default: no others)")
    ce.add_argument("--service", default=None, metavar="NAMESPACE/NAME",
                    help="add the Service DNS names (name.namespace.svc, ...cluster.local) (default: none)")
    ce.add_argument("--force", action="store_true", help="issue a new serving certificate now")
    ce.add_argument("--renew-before", default="720h", help="renew when expiring within this (default 720h)")
    ce.add_argument("--patch", choices=("mutating", "validating"), default=None,
                    help="print, instead of the bare caBundle, a JSON Patch that sets it in every webhook "
                    "of the batchgate Mutating- or ValidatingWebhookConfiguration, for "
                    "`kubectl patch ... --type=json -p \"$(batchgate certs ... --patch mutating)\"` (default: the "
                    "bare caBundle)")
    ce.add_argument("--manifests", default=None, metavar="DIR",
                    help="where the webhook configurations are, for --patch (default: the manifests/ "
                    "shipped with batchgate, the repository's in a checkout)")

    r = sub.add_parser("reconcile", help="run the reconciler (deadlines, gangs, maintenance, scavengers)")
    r.add_argument("--once", action="store_true", help="one planning pass, then exit")
    r.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    _cluster_flags(r)
    r.add_argument("--namespace", default=None, help="watch and act in this namespace only (default: all)")
    r.add_argument("--warning-lead", default=None, metavar="DURATION",
                   help="warn users this long before their deadline (default 10m)")
    r.add_argument("--resync", default=None, metavar="DURATION",
                   help="plan at least this often when nothing changes (default 5m)")
    r.add_argument("--lease-namespace", default=None,
                   help="namespace of the leader-election Lease (default $POD_NAMESPACE, else batchgate-system)")
    r.add_argument("--lease-name", default=None, help="name of the Lease (default batchgate-reconciler)")
    r.add_argument("--identity", default=None, help="this replica's name in the Lease (default $POD_NAME, else host_pid)")
    r.add_argument("--no-leader-elect", action="store_true",
                   help="act without holding the Lease (only when a single replica runs)")
    r.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus /metrics on this port (default: off)")
    r.add_argument("--drain-timeout", default=None, metavar="DURATION",
                   help="after a maintenance window starts, evictions honour PodDisruptionBudgets this long; "
                   "then pods still on its nodes are deleted (default 15m)")

    q = sub.add_parser("queue", help="pending and running work with expected start times (like squeue --start)",
                       description="List pending workloads (Jobs, and Pods without a controller) in the order "
                       "they start (kube-scheduler's: priority, then age; in a gated queue batchgate's: priority, "
                       "then fair share and age), with their position, expected start and why they wait; STATE "
                       "Gated: batchgate's queue holds it until its turn comes and all of it fits; QSTATE: its "
                       "queue's state (open, hold, drain, stop); then running ones with their start and deadline. "
                       "Expected starts come from "
                       "the reconciler's shadow schedule: running work frees its nodes at its deadline, "
                       "maintenance windows block theirs. Lists the whole cluster (falls back to --namespace "
                       "when that is all you may read).")
    q.add_argument("--namespace", "-n", default=None, help="show this namespace only (default: all)")
    q.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table",
                   help="table (default), wide (adds kind and pods) or json")
    _cluster_flags(q, usage=True)

    sh = sub.add_parser("share", help="fair share per account: shares, usage, factor (like sshare)",
                        description="For each account (a namespace, or the bundle's spec.fairShare.accounts): its "
                        "shares and their part of all (NORM SHARES), its usage decayed to now (RAW USAGE: weighted "
                        "resource-seconds, spec.fairShare.weights) and its part of all (EFFECTV USAGE), and the "
                        "fair-share factor 2^(-EFFECTV USAGE / NORM SHARES) that orders its waiting work after "
                        "priority (Slurm's classic factor), with how many workloads it has waiting. Parts are "
                        "taken among the accounts with usage or waiting work, as the reconciler takes them. Reads "
                        "the ConfigMap batchgate-usage, and lists the cluster for the waiting work.")
    sh.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table",
                    help="table (default), wide (adds each account's namespaces) or json")
    _cluster_flags(sh, usage=True)

    us = sub.add_parser("usage", help="core-hours and GPU-hours per account and queue (like a short sreport)",
                        description="Sum the undecayed daily figures the reconciler stores in the ConfigMap "
                        "batchgate-usage (kept 35 days) per account and queue, over the UTC days since --since "
                        "ago: CPU core-hours and GPU-hours allocated to bound pods.")
    us.add_argument("--since", default="7d", metavar="DURATION",
                    help="from this long ago (UTC days, today included), e.g. 1d, 30d (default 7d)")
    us.add_argument("-o", "--output", choices=("table", "json"), default="table",
                    help="table (default, with a TOTAL row) or json")
    _cluster_flags(us, usage=True)

    mt = sub.add_parser("maintenance", help="maintenance windows and what each one will stop or hold back",
                        description="List MaintenanceWindows (start, end, state, nodes, reason) with the running "
                        "jobs each will stop (their deadline is after its start) and the pending ones it holds "
                        "back (they would start sooner without it); -o wide names them, -o json gives all.")
    mt.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table",
                    help="table (default), wide (also names the jobs each window stops or holds back) or json")
    _cluster_flags(mt)

    a = sub.add_parser("audit", help="what the bundle would deny or change in every live workload (like Gatekeeper's audit)",
                       description="List the live Pods, Jobs, CronJobs, Deployments, StatefulSets, DaemonSets and "
                       "ScavengerJobs through a kubeconfig and decide each with the same function as check and the "
                       "webhook, as a CREATE now: print what would be denied and what would be changed against what "
                       "is stored (e.g. objects stored while the webhook was down, or admitted by an older bundle). "
                       "Kubernetes records no creator: objects a controller made from a template (a Job's pods, a "
                       "Deployment's) are decided through that template, the others as --user in --groups. Uses the "
                       "namespace labels the reconciler published, when readable. Progress on stderr. Exit 0 nothing "
                       "denied, 1 something denied, 2 usage, bundle or connection error.")
    a.add_argument("--namespace", "-n", default=None, help="audit this namespace only (default: all)")
    a.add_argument("-o", "--output", choices=("text", "json"), default="text",
                   help="text (default: one line per denial and change) or json (every object that differs, "
                   "with its warnings)")
    _cluster_flags(a)
    a.add_argument("--user", default="batchgate-audit",
                   help="who creates the objects no controller made, for the checks that depend on who asks "
                   "(default batchgate-audit)")
    a.add_argument("--groups", default="system:authenticated",
                   help="comma-separated groups of --user (default system:authenticated)")

    m = sub.add_parser("manifests", help="generate manifests/ parts that come from the bundle",
                       description="Write the parts of manifests/ derived from the bundle (PriorityClasses, "
                       "the bundle ConfigMap, the webhook configurations, the admission policies), and the rest of "
                       "the shipped kustomize tree where it is missing (so an installed wheel writes a complete "
                       "manifests/); with --check, exit 1 when the files on disk have drifted.")
    m.add_argument("--policies", default=None, help=POLICIES_HELP)
    m.add_argument("--out", default=str(DEFAULT_MANIFESTS), metavar="DIR",
                   help="the manifests/ directory to write (default: the repository's manifests/ in a "
                   "checkout, else ./manifests); the files shipped with batchgate that do not come from "
                   "the bundle are added where missing, never overwritten")
    m.add_argument("--check", action="store_true",
                   help="compare instead of writing: exit 1 when a file differs or is missing (default: write)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .logs import setup_logging

    setup_logging(level=args.log_level, fmt=args.log_format)
    handler = {
        "serve": cmd_serve,
        "check": cmd_check,
        "test": cmd_test,
        "certs": cmd_certs,
        "reconcile": cmd_reconcile,
        "manifests": cmd_manifests,
        "seal-key": cmd_seal_key,
        "queue": cmd_queue,
        "share": cmd_share,
        "usage": cmd_usage,
        "maintenance": cmd_maintenance,
        "audit": cmd_audit,
    }[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130


def _load(path: str | None) -> Any:
    from .bundle import default_policies
    from .rules import load_bundle
    from .yamlsrc import BundleError

    try:
        return load_bundle(path or default_policies())
    except BundleError as e:
        print(f"batchgate: bundle error: {e}", file=sys.stderr)
        return None


def _with_labels(bundle: Any, path: str | None) -> Any:
    """``check --namespaces``: the bundle deciding with those labels; None (exit 2) when unusable."""
    from . import nsfacts
    from .offline import load_namespace_labels, with_namespace_labels

    if path is None:
        return with_namespace_labels(bundle, None, "batchgate check was run without --namespaces")
    try:
        facts = load_namespace_labels(Path(path))
    except nsfacts.FactsError as e:
        print(f"batchgate: namespace labels: {e}", file=sys.stderr)
        return None
    missing = sorted(set(bundle.selector_keys) - facts.keys)
    if missing:
        print(f"note: {path} covers no label {', '.join(missing)} (published for bundle {facts.bundle or '?'}); "
              "grants selecting by it admit nobody, as in the webhook until the reconciler catches up",
              file=sys.stderr)
    return with_namespace_labels(bundle, facts)


def cmd_check(args: argparse.Namespace) -> int:
    """Decide every document it can; report the rest. Exit 2 if any input was unusable (an
    unreadable file, invalid YAML, a broken object), else 1 if anything was denied, else 0.
    Directories are read as ``kubectl apply -f DIR`` reads them (``-R``: recursively); documents
    that are no Kubernetes objects (kustomization.yaml) are skipped with a note. No objects at all
    is an unusable input, as kubectl's "no objects passed to apply"."""
    from .engine import BadReview
    from .offline import (
        Caller,
        api_server_problems,
        as_submitted_namespace,
        check_object,
        not_an_object,
        parse_manifests,
    )
    from .yamlsrc import BundleError

    bundle = _load(args.policies)
    if bundle is None:
        return 2
    bundle = _with_labels(bundle, args.namespaces)
    if bundle is None:
        return 2
    caller = Caller(
        operation=args.operation,
        username=args.user,
        groups=tuple(g for g in args.groups.split(",") if g),
        namespace=args.namespace,
    )
    unusable = denied = False
    objects: list[tuple[str, Any]] = []
    names: list[str] = []
    for name in args.files:  # a directory as `kubectl apply -f DIR` (-R: its subdirectories too)
        if name == "-" or not Path(name).is_dir():
            names.append(name)
            continue
        found = manifest_files(Path(name), recursive=args.recursive)
        if not found:
            print(f"error: {name}: a directory with no {', '.join(MANIFEST_SUFFIXES)} files"
                  + ("" if args.recursive else " (-R to look in its subdirectories)"), file=sys.stderr)
            unusable = True
        names.extend(str(f) for f in found)
    for name in names:
        try:
            text = read_input(name)
            docs = parse_manifests(text, name)
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: {name}: cannot read: {e}", file=sys.stderr)
            unusable = True
            continue
        except yaml.YAMLError as e:
            print(f"error: {name}: not valid YAML or JSON: {e}", file=sys.stderr)
            unusable = True
            continue
        except BundleError as e:  # too deep, an alias bomb, a value YAML cannot construct
            print(f"error: {e}", file=sys.stderr)
            unusable = True
            continue
        for i, doc in enumerate(docs, 1):
            where = f"{name}" if len(docs) == 1 else f"{name} (document {i})"
            if (reason := not_an_object(doc)) is not None:
                print(f"skipped: {where}: {reason}", file=sys.stderr)
            else:
                objects.append((where, doc))
    out: list[dict[str, Any]] = []
    for source, obj in objects:
        try:
            decision = check_object(obj, bundle, caller)
        except BadReview as e:
            print(f"error: {source}: {e}", file=sys.stderr)
            unusable = True
            continue
        label = _describe(obj, caller)
        for w in decision.warnings:
            print(f"warning: {label}: {w}", file=sys.stderr)
        for tb_policy, _ in decision.errors:
            print(f"error: {label}: policy {tb_policy} failed internally", file=sys.stderr)
        submitted = _submitted(obj)
        refused = api_server_problems(decision.obj if decision.obj is not None else submitted)
        for problem in refused:
            print(f"invalid: {label}: {problem} (the API server refuses this)", file=sys.stderr)
        if not decision.allowed or refused:
            denied = True
            for d in decision.denials:
                print(f"denied: {label}: {d}", file=sys.stderr)
            continue
        admitted = submitted if decision.obj is None else as_submitted_namespace(decision.obj, submitted)
        if args.output == "diff":
            a = yaml.safe_dump(submitted, sort_keys=False).splitlines()
            b = yaml.safe_dump(admitted, sort_keys=False).splitlines()
            sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(
                a, b, f"{label} (submitted)", f"{label} (admitted)", lineterm=""))
        else:
            out.append(admitted)
    if not objects and not unusable:  # like kubectl's "no objects passed to apply"
        print("error: no objects passed to check", file=sys.stderr)
        unusable = True
    if args.output == "yaml" and out:
        sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False))
    elif args.output == "json":  # always one document of one shape, even with 0 or 1 items
        sys.stdout.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}, indent=2) + "\n")
    return 2 if unusable else 1 if denied else 0


MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")  # what `kubectl apply -f DIR` reads


def read_input(name: str) -> str:
    """One input of ``check`` (``-`` is stdin), refused before it is read or parsed when it is
    larger than yamlsrc.MAX_INPUT_BYTES (a BundleError naming the limit)."""
    from . import yamlsrc

    limit = yamlsrc.MAX_INPUT_BYTES
    too_big = yamlsrc.BundleError(name, None, "", f"larger than {yamlsrc.size_text(limit)}, the most check "
                                  "reads from one input; split it (one file per namespace, say)")
    if name == "-":
        text = sys.stdin.read(limit + 1)
        if len(text) > limit:
            raise too_big
        return text
    if Path(name).stat().st_size > limit:
        raise too_big
    return Path(name).read_text(encoding="utf-8")


def manifest_files(directory: Path, *, recursive: bool) -> list[Path]:
    """The manifests in ``directory`` as kubectl takes them: by suffix, in name order."""
    pattern = "**/*" if recursive else "*"
    return sorted(f for f in directory.glob(pattern) if f.is_file() and f.suffix in MANIFEST_SUFFIXES)


def _submitted(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as submitted; for a captured AdmissionReview, the object inside it."""
    if obj.get("kind") == "AdmissionReview":
        request = obj.get("request") or {}
        inner = request.get("object") or request.get("oldObject")
        return inner if isinstance(inner, dict) else obj
    return obj


def _describe(obj: Any, caller: Any) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or (meta.get("generateName", "") + "*") or "(unnamed)"
    return f"{obj.get('kind')} {meta.get('namespace') or caller.namespace}/{name}"


def cmd_test(args: argparse.Namespace) -> int:
    from .offline import missing_suites, run_suite, suite_files
    from .yamlsrc import BundleError

    directory, only = args.directory, list(args.policy)
    if directory and (Path(directory) / "policy.yaml").is_file() \
            and (Path(directory).resolve().parent / "bundle.yaml").is_file():  # one policy's folder
        directory, only = str(Path(directory).resolve().parent), [*only, Path(directory).resolve().name]
    bundle = _load(directory)
    if bundle is None:
        return 2
    unknown = sorted(set(only) - {p.name for p in bundle.policies})
    if unknown:
        print(f"batchgate: no policy named {', '.join(unknown)} in {directory or 'the bundle'} "
              f"(it has: {', '.join(p.name for p in bundle.policies)})", file=sys.stderr)
        return 2
    passed = failed = 0
    for problem in missing_suites(bundle, only=only):
        print(f"FAIL {problem}")
        failed += 1
    for path, policies in suite_files(bundle):
        if not path.is_file() or (only and not (policies and policies[0].name in only)):
            continue
        try:
            results = run_suite(path, bundle, policies)
        except BundleError as e:
            print(f"batchgate: suite error: {e}", file=sys.stderr)
            return 2
        for r in results:
            if r.ok:
                passed += 1
                if args.verbose:
                    print(f"ok   {path.parent.name}: {r.name}")
            else:
                failed += 1
                print(f"FAIL {path.parent.name}: {r.name}")
                for f in r.failures:
                    print("     " + f.replace("\n", "\n     "))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .bundle import default_policies
    from .server import ServeOptions, run
    from .units import parse_duration

    try:
        max_age = float(parse_duration(args.namespace_labels_max_age))
    except ValueError as e:
        print(f"batchgate: --namespace-labels-max-age: {e}", file=sys.stderr)
        return 2
    return run(ServeOptions(
        namespaces=args.namespaces,
        namespace_labels_max_age=max_age,
        host=args.host,
        port=args.port,
        policies=args.policies or default_policies(),
        cert_dir=args.cert_dir,
        dns_names=tuple(args.dns_name),
        workers=args.workers,
        reload_interval=args.reload_interval,
        review_budget=args.review_budget,
        seal_keys=args.seal_keys,
    ))


def cmd_seal_key(args: argparse.Namespace) -> int:
    from .certs import new_seal_key_line

    print(new_seal_key_line())
    return 0


def cmd_certs(args: argparse.Namespace) -> int:
    from .certs import ensure_certs, service_dns_names
    from .units import parse_duration

    names = list(args.dns_name)
    if args.service:
        ns, _, name = args.service.partition("/")
        if not ns or not name:
            print("batchgate: --service takes NAMESPACE/NAME", file=sys.stderr)
            return 2
        names += service_dns_names(name, ns)
    try:
        renew = parse_duration(args.renew_before)
    except ValueError as e:
        print(f"batchgate: --renew-before: {e}", file=sys.stderr)
        return 2
    bundle = ensure_certs(Path(args.cert_dir), dns_names=names, force=args.force, renew_before=renew)
    if args.patch:
        from .generate import MANIFESTS, ca_bundle_patch, webhook_configurations

        manifests = args.manifests or MANIFESTS
        try:
            configs = webhook_configurations(bundle.ca_bundle_b64, manifests=manifests)
        except (OSError, ValueError, KeyError) as e:
            print(f"batchgate: --patch: cannot read the webhook configurations in {manifests}: {e}",
                  file=sys.stderr)
            return 2
        config = configs[0] if args.patch == "mutating" else configs[1]
        print(json.dumps(ca_bundle_patch(config, bundle.ca_bundle_b64)))
        return 0
    print(bundle.ca_bundle_b64)
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from .reconciler.main import run as run_reconciler

    return int(run_reconciler(args))


def cmd_queue(args: argparse.Namespace) -> int:
    from .reconciler.main import report

    return report(args, "queue")


def cmd_share(args: argparse.Namespace) -> int:
    from .reconciler.main import accounting

    return accounting(args, "share")


def cmd_usage(args: argparse.Namespace) -> int:
    from .reconciler.main import accounting

    return accounting(args, "usage")


def cmd_maintenance(args: argparse.Namespace) -> int:
    from .reconciler.main import report

    return report(args, "maintenance")


def cmd_audit(args: argparse.Namespace) -> int:
    """List the live workloads (webhook.reconciler.kube), decide each (webhook.offline.audit_object)."""
    from . import nsfacts
    from .contract import OPT_OUT_LABEL, OPT_OUT_VALUE
    from .offline import Caller, audit_object, audit_skip, with_namespace_labels
    from .reconciler.errors import Forbidden, KubeError, NotFound
    from .reconciler.kube import KubeApi
    from .reconciler.model import AUDITED, CONFIG_MAP, NAMESPACE
    from .reconciler.settings import Settings

    bundle = _load(args.policies)
    if bundle is None:
        return 2
    caller = Caller(username=args.user, groups=tuple(g for g in args.groups.split(",") if g))
    try:
        api = KubeApi.connect(args.kubeconfig)
    except KubeError as e:
        print(f"batchgate: {e}", file=sys.stderr)
        return 2
    findings: list[Any] = []
    audited = skipped = 0
    opted_out: set[str] = set()  # namespaces every webhook leaves out
    try:
        try:
            namespaces = ([api.get(NAMESPACE, None, args.namespace)] if args.namespace
                          else list(api.list_all(NAMESPACE)))
            opted_out = {str(n["metadata"]["name"]) for n in namespaces
                         if (n["metadata"].get("labels") or {}).get(OPT_OUT_LABEL) == OPT_OUT_VALUE}
        except Forbidden as e:
            print(f"note: cannot read Namespaces ({e}); those labelled {OPT_OUT_LABEL}={OPT_OUT_VALUE} are "
                  "audited too", file=sys.stderr)
        if bundle.selectors:  # grants by namespace label: the labels the reconciler published
            problem = ""
            try:
                cm = api.get(CONFIG_MAP, Settings().lease_namespace, nsfacts.CONFIGMAP)
                facts = nsfacts.parse_facts((cm.get("data") or {}).get(nsfacts.KEY) or "", nsfacts.CONFIGMAP)
            except (KubeError, nsfacts.FactsError) as e:
                facts, problem = None, f"audit could not read the published namespace labels: {e}"
                print(f"note: {problem}; grants by namespaceSelector admit nobody", file=sys.stderr)
            bundle = with_namespace_labels(bundle, facts, problem)
        for kind in AUDITED:
            count = 0
            try:
                for obj in api.list_all(kind, args.namespace):
                    count += 1
                    if (obj.get("metadata") or {}).get("namespace") in opted_out:
                        continue
                    if audit_skip(obj) is not None:
                        skipped += 1
                        continue
                    finding = audit_object(obj, bundle, caller)
                    audited += 1
                    if finding.differs:
                        findings.append(finding)
            except NotFound:  # the ScavengerJob CRD is not installed
                print(f"note: no {kind.kind} API on this cluster", file=sys.stderr)
                continue
            print(f"listed {count} {kind.plural}", file=sys.stderr)
    except KubeError as e:
        print(f"batchgate: {e}", file=sys.stderr)
        return 2
    finally:
        api.close()
    findings.sort(key=lambda f: (f.namespace, f.kind, f.name))
    denied = sum(1 for f in findings if f.denials)
    if args.output == "json":
        print(json.dumps({"kind": "AuditReport", "audited": audited, "decidedThroughTheirMaker": skipped,
                          "items": [{"kind": f.kind, "namespace": f.namespace, "name": f.name, "denials": f.denials,
                                     "changes": f.changes, "mutatedBy": f.mutated_by, "warnings": f.warnings}
                                    for f in findings]}, indent=2))
    else:
        for f in findings:
            label = f"{f.kind} {f.namespace}/{f.name}" if f.namespace else f"{f.kind} {f.name}"
            for d in f.denials:
                print(f"denied: {label}: {d}")
            for op in f.changes:
                value = "" if "value" not in op else " " + json.dumps(op["value"], separators=(",", ":"))
                print(f"would change: {label}: ({', '.join(f.mutated_by)}) {op['op']} {op['path']}{value}")
    print(f"audited {audited} objects ({skipped} more decided through the workload that made them): "
          f"{denied} would be denied, {sum(1 for f in findings if f.changes)} would be changed", file=sys.stderr)
    return 1 if denied else 0


def cmd_manifests(args: argparse.Namespace) -> int:
    from .generate import generated_manifests, static_manifests

    bundle = _load(args.policies)
    if bundle is None:
        return 2
    out = Path(args.out)
    drift = []
    generated = generated_manifests(bundle)
    # the rest of the tree, as shipped, where it is missing (never over an admin's copy)
    shipped = {n: t for n, t in static_manifests(generated).items() if not (out / n).is_file()}
    for name, text in {**generated, **shipped}.items():
        path = out / name
        current = path.read_text() if path.is_file() else None
        if current == text:
            continue
        if args.check:
            drift.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    for name in drift:
        print(f"drift: {out / name} differs from the bundle; run `batchgate manifests`", file=sys.stderr)
    return 1 if drift else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

