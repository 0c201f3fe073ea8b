"""Offline decisions: ``batchgate check`` on manifests and ``batchgate test`` on suites.

Both wrap objects into the AdmissionReview the API server would send and call
the same :func:`webhook.engine.decide` the HTTPS endpoints call, so what CI
sees is what the cluster does. One difference is stated, not hidden: the API
server's own admission plugins (ServiceAccount token injection, Priority,
RuntimeClass overhead) run before webhooks in a cluster, and do not run here.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import nsfacts, objectmeta, workloads, yamlsrc
from .bundle import Bundle, Policy
from .contract import QUEUE_GATE, QUEUED_ANNOTATION, SEAL_ANNOTATION
from .draft import escape
from .engine import PHASES, BadReview, Decision, Phase, decide
from .seal import OFFLINE, Keyring
from .yamlsrc import BundleError, Node, load_documents, read_file

PLURALS = {"Pod": "pods", "Job": "jobs", "CronJob": "cronjobs", "ScavengerJob": "scavengerjobs",
           "MaintenanceWindow": "maintenancewindows"}
CLUSTER_SCOPED = ("Namespace", "PriorityClass", "Node", "MaintenanceWindow")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who the simulated request comes from, and about what."""

    operation: str = "CREATE"
    username: str = "batchgate-check"
    groups: tuple[str, ...] = ("system:authenticated",)
    namespace: str = "default"
    dry_run: bool = False
    subresource: str = ""  # e.g. "resize": an UPDATE through pods/resize


def synthetic_review(obj: dict[str, Any], caller: Caller, *, old_object: dict[str, Any] | None = None) -> dict[str, Any]:
    """The AdmissionReview a v1 API server would send for ``obj``."""
    api_version = str(obj.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind") or "")
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    namespace = "" if kind == "MaintenanceWindow" else meta.get("namespace") or caller.namespace
    if meta.get("namespace") != namespace and kind not in CLUSTER_SCOPED:
        obj = {**obj, "metadata": {**meta, "namespace": namespace}}
    gvk = {"group": group, "version": version, "kind": kind}
    resource = {"group": group, "version": version, "resource": PLURALS.get(kind, kind.lower() + "s")}
    deleting = caller.operation == "DELETE"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": resource,
            "requestKind": gvk,
            "requestResource": resource,
            "name": meta.get("name") or "",
            "namespace": namespace,
            "operation": caller.operation,
            "userInfo": {"username": caller.username, "groups": list(caller.groups)},
            "object": None if deleting else obj,
            "oldObject": obj if deleting else old_object,
            "dryRun": caller.dry_run,
            **({"subResource": caller.subresource, "requestSubResource": caller.subresource}
               if caller.subresource else {}),
        },
    }


def load_namespace_labels(path: Path) -> nsfacts.Facts:
    """``batchgate check --namespaces``: the labels the reconciler published, as the file the
    webhook reads (namespaces.json, or the directory holding it) or as the ConfigMap itself
    (``kubectl get configmap batchgate-namespaces -o yaml``). Raises FactsError."""
    file = path / nsfacts.KEY if path.is_dir() else path
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise nsfacts.FactsError(f"{file}: cannot read: {e}") from e
    try:
        docs = parse_manifests(text, str(file))
    except (yaml.YAMLError, BundleError) as e:
        raise nsfacts.FactsError(f"{file}: not YAML or JSON: {e}") from e
    if len(docs) != 1:
        raise nsfacts.FactsError(f"{file}: expected one document, found {len(docs)}")
    doc = docs[0]
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        data = doc.get("data")
        if not isinstance(data, dict) or not isinstance(data.get(nsfacts.KEY), str):
            raise nsfacts.FactsError(f"{file}: ConfigMap without data.{nsfacts.KEY}")
        return nsfacts.parse_facts(data[nsfacts.KEY], f"{file}: data.{nsfacts.KEY}")
    return nsfacts.facts_from(doc, str(file))


def with_namespace_labels(bundle: Bundle, facts: nsfacts.Facts | None, problem: str = "") -> Bundle:
    """The bundle deciding with ``facts`` as the webhook would while they are fresh (offline there
    is no clock to age them by: they count as published just now)."""
    if not bundle.selectors:
        return bundle
    when = facts.published_at if facts is not None else 0.0
    return dataclasses.replace(bundle, namespace_facts=nsfacts.view(bundle.selectors, facts, when, problem=problem))


def check_object(obj: Any, bundle: Bundle, caller: Caller, keys: Keyring = OFFLINE) -> Decision:
    """``keys``: the admission seal's (webhook.seal); offline, the published OFFLINE key."""
    if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
        raise BadReview("each document must be a Kubernetes object with apiVersion and kind")
    if obj["kind"] == "AdmissionReview":  # a captured request: decide it exactly as sent
        return decide(obj, bundle, phase="check", keys=keys)
    return decide(synthetic_review(obj, caller), bundle, phase="check", keys=keys)


def api_server_problems(obj: dict[str, Any]) -> list[str]:
    """What the API server would refuse in ``obj`` (as admitted) before storing it: its names,
    label and annotation syntax and lengths (webhook.objectmeta says what is and is not checked)."""
    return objectmeta.problems(obj, namespaced=obj.get("kind") not in CLUSTER_SCOPED)


# -- audit: the live objects, decided as if created now ------------------------------
# What the API server sets on an object; a CREATE request carries none of it.
SERVER_SET_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                       "deletionTimestamp", "deletionGracePeriodSeconds")
_UNREPORTED_ANNOTATIONS = (SEAL_ANNOTATION, QUEUED_ANNOTATION)
_UNREPORTED_KEYS = tuple("/annotations/" + escape(a) for a in _UNREPORTED_ANNOTATIONS)


@dataclass(slots=True)
class AuditFinding:
    """What the bundle would do to one stored object if it were created now."""

    kind: str
    namespace: str
    name: str
    denials: list[str] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)  # JSONPatch ops against what is stored
    mutated_by: list[str] = field(default_factory=list)  # the policies that would change it
    warnings: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return bool(self.denials or self.changes)


def audit_skip(obj: dict[str, Any]) -> str | None:
    """Why a stored object is not decided on its own (then its maker is), or None: what a
    controller made from a pod template is decided in that template (the workload's own CREATE or
    UPDATE), what batchgate's reconciler made from a ScavengerJob in the ScavengerJob."""
    ref = workloads.controller_of(obj)
    if ref is None:
        return None
    group = str(ref.get("apiVersion") or "").rpartition("/")[0]
    if workloads.made_from_template(obj) or group == "batchgate.io":
        return f"made by {ref.get('kind')} {ref.get('name')}: decided through it"
    return None


def as_created(stored: dict[str, Any]) -> dict[str, Any]:
    """The stored object as a CREATE would carry it: no status, no metadata the server sets."""
    meta = stored.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    out = {k: v for k, v in stored.items() if k != "status"}
    out["metadata"] = {k: v for k, v in meta.items() if k not in SERVER_SET_METADATA}
    return out


def _reportable(op: dict[str, Any]) -> dict[str, Any] | None:
    """``op`` without what is no difference for a stored object: the admission seal (a cluster's
    webhook seals with its own key, which an audit does not have) and the batch queue's hold at
    CREATE (the scheduling gate, a Job's suspend and its queued annotation: what is stored has
    been released by the reconciler, or ran while the webhook was down, which `batchgate queue`
    reports)."""
    path = str(op.get("path") or "")
    value = op.get("value")
    if path.endswith(_UNREPORTED_KEYS):
        return None
    if path.endswith("/annotations") and isinstance(value, dict):
        rest = {k: v for k, v in value.items() if k not in _UNREPORTED_ANNOTATIONS}
        return None if not rest and value else {**op, "value": rest} if rest != value else op
    if op.get("op") != "remove" and path.startswith("/spec/schedulingGates"):
        gates = value if isinstance(value, list) else [value]
        rest_gates = [g for g in gates if not (isinstance(g, dict) and g.get("name") == QUEUE_GATE)]
        if not rest_gates:
            return None
        return {**op, "value": rest_gates} if isinstance(value, list) else op
    if path == "/spec/suspend" and value is True:
        return None
    return op


def audit_object(stored: dict[str, Any], bundle: Bundle, caller: Caller) -> AuditFinding:
    """``stored`` decided by the same :func:`webhook.engine.decide` as ``check``, as a CREATE by
    ``caller`` in its namespace: the denials, and the JSONPatch the webhook would apply to what is
    stored now (none when it was admitted by this bundle and nothing changed since)."""
    meta = stored.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    obj = as_created(stored)
    decision = check_object(obj, bundle, dataclasses.replace(caller, operation="CREATE",
                                                               namespace=namespace or caller.namespace))
    finding = AuditFinding(kind=str(stored.get("kind")), namespace=namespace, name=str(meta.get("name") or ""),
                           denials=list(decision.denials), warnings=list(decision.warnings))
    if decision.allowed:
        finding.changes = [o for o in map(_reportable, decision.patch) if o is not None]
        if finding.changes:
            holds = any("schedulingGates" in o["path"] or o["path"].endswith("/suspend") for o in finding.changes)
            gates = set() if holds else {p.name for p in bundle.policies if p.rule.name == "queue-gate"}
            finding.mutated_by = [p for p, outcome in decision.outcomes if outcome == "mutated" and p not in gates]
    return finding


# Files that sit among manifests but are not API objects: kustomize's own configuration
# (kustomization.yaml, Component, generator/transformer configs) and kpt/KRM function configs.
CONFIG_GROUPS = ("kustomize.config.k8s.io", "config.kubernetes.io", "kpt.dev")


def not_an_object(doc: Any) -> str | None:
    """Why a parsed document is no Kubernetes object to decide (then it is skipped), or None.

    A document with only one of apiVersion and kind is a broken object, not another kind of
    file: that is :func:`check_object`'s error, not a skip."""
    if not isinstance(doc, dict):
        return f"not a Kubernetes object (a YAML {type(doc).__name__}, not a mapping)"
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not api_version and not kind:
        return "not a Kubernetes object (no apiVersion and no kind; a kustomization.yaml?)"
    group = str(api_version or "").rpartition("/")[0]
    if group in CONFIG_GROUPS or group.endswith(tuple("." + g for g in CONFIG_GROUPS)):
        return f"not a Kubernetes object ({kind or 'a file'} of {group}, a build tool's configuration)"
    return None


def as_submitted_namespace(admitted: dict[str, Any], submitted: dict[str, Any]) -> dict[str, Any]:
    """``admitted`` without the namespace the check filled in for the review: a manifest with no
    namespace comes out with none, so that its diff is empty when no policy changed it."""
    sub_meta = submitted.get("metadata")
    meta = admitted.get("metadata")
    if isinstance(sub_meta, dict) and "namespace" in sub_meta:
        return admitted
    if not isinstance(meta, dict) or "namespace" not in meta:
        return admitted
    rest = {k: v for k, v in meta.items() if k != "namespace"}
    out = dict(admitted)
    if rest or isinstance(sub_meta, dict):
        out["metadata"] = rest
    else:
        del out["metadata"]
    return out


def expand_lists(docs: list[Any]) -> list[Any]:
    """``kind: List`` (and ``*List``) documents become their items."""
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            out.extend(expand_lists(doc["items"]))
        else:
            out.append(doc)
    return out


def parse_manifests(text: str, name: str = "<input>") -> list[Any]:
    """JSON or multi-document YAML (JSON is YAML, but a JSON stream of objects is not).

    Bounded per object (webhook.yamlsrc): YAML while it is parsed, JSON (no aliases; C-fast to
    parse) by each object's size once parsed; JSON nested too deep for Python is read as YAML,
    which refuses it with the line."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            pass
        else:
            docs = expand_lists(value if isinstance(value, list) else [value])
            limit = yamlsrc.MAX_OBJECT_BYTES
            if len(text) > limit:
                for i, doc in enumerate(docs, 1):
                    if len(json.dumps(doc, separators=(",", ":"))) > limit:
                        raise BundleError(name, None, "", f"object {i} is larger than {yamlsrc.size_text(limit)}, "
                                          "the most the API server takes in one request")
            return docs
    return expand_lists(load_documents(text, name))


# -- suites -------------------------------------------------------------------
@dataclass(slots=True)
class CaseResult:
    suite: str
    name: str
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def suite_files(bundle: Bundle) -> list[tuple[Path, list[Policy] | None]]:
    """Each policy's suite.yaml (run against that policy alone), and the bundle's own."""
    out: list[tuple[Path, list[Policy] | None]] = []
    for p in bundle.policies:
        out.append((Path(p.path) / "suite.yaml", [p]))
    top = Path(bundle.root) / "suite.yaml"
    if top.is_file():
        out.append((top, None))
    return out


def missing_suites(bundle: Bundle, *, only: list[str] | None = None) -> list[str]:
    """Policies (those named in ``only``, else all) lacking what every policy folder must have:
    a suite and a README."""
    return [
        f"{p.name}: policy has no {f} (every policy needs one)"
        for p in bundle.policies
        if not only or p.name in only
        for f in ("suite.yaml", "README.md")
        if not (Path(p.path) / f).is_file()
    ]


def run_suite(path: Path, bundle: Bundle, policies: list[Policy] | None) -> list[CaseResult]:
    docs = read_file(path)
    if len(docs) != 1:
        raise BundleError(str(path), None, "", "expected one YAML document")
    doc = docs[0].mapping(allowed=("apiVersion", "kind", "cases"))
    if doc.req("kind").value != "Suite":
        doc.req("kind").fail("expected Suite")
    subject = bundle if policies is None else _only(bundle, policies)
    results = []
    for case in doc.req("cases").seq():
        results.append(_run_case(case, subject, path, bundle_suite=policies is None))
    return results


def _only(bundle: Bundle, policies: list[Policy]) -> Bundle:
    keep = tuple(policies)
    return dataclasses.replace(
        bundle,
        policies=keep,
        mutating=tuple(p for p in keep if p.rule.mutate is not None),
        validating=tuple(p for p in keep if p.rule.validate is not None),
    )


CASE_FIELDS = ("name", "object", "oldObject", "request", "phase", "policies", "bundle", "namespaceLabels", "expect")
EXPECT_FIELDS = ("allowed", "message", "messages", "mutated", "unchanged", "warnings", "noWarnings")


def _load_object(node: Node, base: Path) -> dict[str, Any]:
    if isinstance(node.value, str):
        file = base / node.value
        if not file.is_file():
            node.fail(f"no such sample file: {file}")
        docs = load_documents(file.read_text(), str(file))
        if len(docs) != 1 or not isinstance(docs[0], dict):
            node.fail(f"{file} must hold exactly one object")
        obj: dict[str, Any] = docs[0]
        return obj
    if not isinstance(node.value, dict):
        node.fail("expected an object, or the path of a sample file")
    copied: dict[str, Any] = json.loads(json.dumps(node.value))
    return copied


def _run_case(case: Node, bundle: Bundle, path: Path, *, bundle_suite: bool) -> CaseResult:
    case.mapping(allowed=CASE_FIELDS)
    result = CaseResult(str(path), case.req("name").str())
    base = path.parent
    obj = _load_object(case.req("object"), base)
    old = _load_object(case.req("oldObject"), base) if case.get("oldObject") else None
    caller = Caller()
    if (r := case.get("request")) is not None:
        r.mapping(allowed=("operation", "user", "groups", "namespace", "dryRun", "subResource"))
        caller = Caller(
            operation=r.opt("operation", lambda n: n.enum("CREATE", "UPDATE", "DELETE"), "CREATE"),
            username=r.opt("user", Node.str, "alice"),
            groups=r.opt("groups", Node.str_list, ("system:authenticated",)),
            namespace=r.opt("namespace", Node.str, "default"),
            dry_run=r.opt("dryRun", Node.bool, False),
            subresource=r.opt("subResource", Node.str, ""),
        )
    else:
        caller = Caller(username="alice")
    p = case.get("phase")
    phase: Phase = p.enum(*PHASES) if p else "check"
    if (names := case.get("policies")) is not None:  # the bundle's suite: these policies only
        if not bundle_suite:
            names.fail("not supported in a policy's own suite (it runs that policy alone); "
                       "use the bundle's suite.yaml")
        bundle = _only(bundle, _named(names, bundle))
    if (b := case.get("bundle")) is not None:  # another bundle.yaml (a folder next to the suite), same policies
        bundle = _other_bundle(b, base, bundle)
    if (n := case.get("namespaceLabels")) is not None:  # the labels the reconciler published for it
        labels = n.str_map()
        facts = nsfacts.facts_from(nsfacts.document({caller.namespace: labels}, bundle.selector_keys, 0.0, "suite"))
        bundle = with_namespace_labels(bundle, facts)
    else:
        bundle = with_namespace_labels(bundle, None, "the case gives no namespaceLabels (not published)")
    expect = case.req("expect").mapping(allowed=EXPECT_FIELDS)
    review = synthetic_review(obj, caller, old_object=old)
    decision = decide(review, bundle, phase=phase)
    f = result.failures
    for policy, tb in decision.errors:
        f.append(f"policy {policy} raised:\n{tb}")
    if (a := expect.get("allowed")) is not None and decision.allowed != a.bool():
        f.append(f"expected allowed={a.value}, got allowed={decision.allowed} ({decision.message or 'no message'})")
    for m in ([expect.req("message")] if expect.get("message") else []) + (
        expect.req("messages").seq() if expect.get("messages") else []
    ):
        if m.str() not in decision.message:
            f.append(f"denial message lacks {m.value!r}; it was: {decision.message or '(none)'}")
    for w in expect.each("warnings"):
        if not any(w.str() in x for x in decision.warnings):
            f.append(f"no warning contains {w.value!r}; warnings: {decision.warnings}")
    if expect.get("noWarnings") and expect.req("noWarnings").bool() and decision.warnings:
        f.append(f"expected no warnings, got {decision.warnings}")
    if expect.get("unchanged") and expect.req("unchanged").bool() and decision.patch:
        f.append(f"expected no change, got patch {json.dumps(decision.patch)}")
    if (expected := expect.get("mutated")) is not None:
        want = _load_object(expected, base)
        got = decision.obj if decision.obj is not None else {}
        if "namespace" not in (want.get("metadata") or {}):  # the suite added it, not a policy
            got = {**got, "metadata": {k: v for k, v in (got.get("metadata") or {}).items() if k != "namespace"}}
        if got != want:
            f.append("mutated object differs from expected:\n" + _diff(want, got))
    if decision.allowed and decision.obj is not None:
        again = decide(synthetic_review(decision.obj, caller, old_object=old), bundle, phase="mutate")
        if again.patch:
            f.append(f"not idempotent: a second pass patches again: {json.dumps(again.patch)}")
    return result


def _named(node: Node, bundle: Bundle) -> list[Policy]:
    """The bundle's policies a case's ``policies:`` names, in the bundle's order."""
    by_name = {p.name: p for p in bundle.policies}
    wanted = node.str_list()
    if not wanted:
        node.fail("expected at least one policy name")
    for name in wanted:
        if name not in by_name:
            node.fail(f"no policy named {name!r} in the bundle (it has: {', '.join(sorted(by_name))})")
    return [p for p in bundle.policies if p.name in wanted]


def _other_bundle(node: Node, base: Path, bundle: Bundle) -> Bundle:
    """The case's own bundle.yaml (``bundle: samples/some-folder``) with the suite's policies."""
    from .rules import load_bundle

    folder = base / node.str()
    if not (folder / "bundle.yaml").is_file():
        node.fail(f"no bundle.yaml in {folder}")
    other = load_bundle(folder, deployable=False)  # a variant to run the suite's policies with
    return dataclasses.replace(other, policies=bundle.policies, mutating=bundle.mutating,
                               validating=bundle.validating)


def _diff(want: Any, got: Any) -> str:
    a = yaml.safe_dump(want, sort_keys=True).splitlines()
    b = yaml.safe_dump(got, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "expected", "got", lineterm=""))
