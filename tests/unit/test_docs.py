"""The docs say what the code does: every Event reason the reconciler sends and every label,
annotation and variable batchgate defines has its row in docs/user/reference.md (and no row
names one that does not exist); docs/admin/suites.md lists exactly the keys the suite runner
reads; the add-a-queue recipe of docs/admin/queues.md works as written, and adding a queue
named ``gpu`` keeps the shipped suites green; and every relative link in the docs resolves."""

from __future__ import annotations

import ast
import copy
import importlib
import pkgutil
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import webhook
from tests.conftest import POLICIES, ROOT
from webhook import contract
from webhook.bundle import BundleError
from webhook.cli import main
from webhook.offline import run_suite
from webhook.reconciler import model
from webhook.rules import load_bundle

DOCS = ROOT / "docs"
REFERENCE = DOCS / "user" / "reference.md"
SUITES = DOCS / "admin" / "suites.md"
QUEUES = DOCS / "admin" / "queues.md"
RECONCILER = ROOT / "webhook" / "reconciler"
CAMEL = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z]*)*")


# -- the reference table ---------------------------------------------------------------
def reference_rows() -> dict[str, str]:
    """First cell (the name, in backquotes) -> second cell (its kind), for every row."""
    rows: dict[str, str] = {}
    for line in REFERENCE.read_text().splitlines():
        if m := re.match(r"\| `([^`]+)` \| ([^|]+) \|", line):
            assert m[1] not in rows, f"{m[1]} has two rows in {REFERENCE.name}"
            rows[m[1]] = m[2].strip()
    return rows


def _camel(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and CAMEL.fullmatch(n.value)}


def _quiet(call: ast.Call) -> bool | None:
    """True: the call says quiet=True (no Event); False: it sends an Event; None: it depends."""
    for kw in call.keywords:
        if kw.arg == "quiet":
            return kw.value.value if isinstance(kw.value, ast.Constant) else None
    return False


def reconciler_reasons() -> dict[str, set[str]]:
    """Every reason the reconciler writes, read from its source, with where it goes: "event"
    (an Event is sent), "maybe" (an Event depending on a runtime value), "quiet" (an action
    without Event: a log and --dry-run line), "condition" (a ScavengerJob condition's reason).
    Reasons reach an Action as ``reason=`` / ``event_reason=`` keywords, as the third argument
    of scavenger's ``_act`` (its condition reason, and its Event's unless ``event_reason``), as
    a local ``reason`` assigned before the Action, or as the ``reason`` of an Event body."""
    found: dict[str, set[str]] = {}

    def add(names: set[str], how: str) -> None:
        for n in names:
            found.setdefault(n, set()).add(how)

    for path in sorted(RECONCILER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func.id if isinstance(node.func, ast.Name) else ""
                quiet = _quiet(node)
                how = {True: "quiet", False: "event", None: "maybe"}[quiet]
                kws = {kw.arg: kw.value for kw in node.keywords}
                if func == "Action" and "reason" in kws:
                    add(_camel(kws["reason"]), how)
                elif func == "_act" and len(node.args) >= 3:
                    add(_camel(node.args[2]), "condition")
                    if "event_reason" in kws:
                        add(_camel(kws["event_reason"]), how)
                    else:
                        add(_camel(node.args[2]), how)
            elif isinstance(node, ast.Assign):  # reason = ...; kind, reason = ..., ...
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == "reason":
                        add(_camel(node.value), "event")
                    elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        for t, v in zip(target.elts, node.value.elts, strict=False):
                            if isinstance(t, ast.Name) and t.id == "reason":
                                add(_camel(v), "event")
            elif isinstance(node, ast.Dict) and any(
                    isinstance(k, ast.Constant) and k.value == "involvedObject" for k in node.keys):
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "reason":
                        add(_camel(v), "event")
    return found


def test_the_reason_reader_finds_what_it_should() -> None:
    """The reader above is what the next test trusts: it must see each way a reason is written."""
    found = reconciler_reasons()
    assert {"event"} <= found["TimeLimitExceeded"]  # reason="..." on an Action
    assert {"event"} <= found["GangRestarted"]
    assert "event" in found["GangFailed"]  # kind, reason = "gang-failed", "GangFailed"
    assert "event" in found["AdmissionUnrecorded"]  # reason = "AdmissionUnrecorded"
    assert found["PodFailed"] == {"condition"}  # _act(..., "PodFailed", ..., event_reason="Failed")
    assert "event" in found["Failed"]
    assert found["NamespaceLabelsTooLarge"] == {"event"}  # an Event body of its own
    assert found["NetworkCreated"] == {"quiet"}
    assert len(found) >= 50


def test_every_event_reason_has_its_row() -> None:
    rows = reference_rows()
    problems = []
    for reason, how in sorted(reconciler_reasons().items()):
        kind = rows.get(reason)
        if kind is None:
            problems.append(f"{reason}: no row")
        elif "event" in how and not kind.startswith("Event"):
            problems.append(f"{reason}: an Event is sent, the row says {kind!r}")
        elif how <= {"quiet", "condition"} and kind.startswith("Event"):
            problems.append(f"{reason}: no Event is ever sent, the row says {kind!r}")
        elif how == {"quiet"} and kind != "log":
            problems.append(f"{reason}: only in the log, the row says {kind!r}")
    for reason in sorted(model.OWN_DISRUPTION_REASONS | {model.REASON_MAINTENANCE_DRAIN}):
        if rows.get(reason) != "condition":
            problems.append(f"{reason}: a DisruptionTarget condition reason, the row says {rows.get(reason)!r}")
    assert not problems, f"{REFERENCE.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def defined_names() -> set[str]:
    """The labels, annotations and variables batchgate defines: every name in webhook/contract.py,
    and every module-level ``batchgate.io/...`` or gang-scheduler name anywhere in the package."""
    names = {v for k, v in vars(contract).items()
             if isinstance(v, str) and not k.startswith("_")
             and v not in (contract.GROUP, contract.API_VERSION, contract.OPT_OUT_VALUE, contract.MANAGED_BY,
                           contract.QUEUED_BY_SUSPEND)}  # values, not names
    names |= {v for v in vars(contract).values() if isinstance(v, tuple) for v in v}
    for info in pkgutil.walk_packages(webhook.__path__, "webhook."):
        if info.name.startswith("webhook.policies") or info.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(info.name)).values():
            if isinstance(value, str) and value != contract.API_VERSION and (
                    re.fullmatch(r"batchgate\.io/[a-z0-9.-]+", value)
                    or re.fullmatch(r"[a-z.]+\.(?:x-)?k8s\.io/(?:pod-group|pod-group-name|pod-group-total-count|group-name)",
                                    value)):
                names.add(value)
    return {n for n in names if isinstance(n, str) and not n.isdigit()}


def test_every_label_annotation_and_variable_has_its_row() -> None:
    names = defined_names()
    assert {contract.QUEUE_LABEL, contract.TIME_LIMIT_ANNOTATION, contract.RECORD_QUEUE_ENV,
            "batchgate.io/maintenance-in-minutes", "scheduling.x-k8s.io/pod-group"} <= names
    missing = sorted(names - set(reference_rows()))
    assert not missing, f"{REFERENCE.relative_to(ROOT)} has no row for: {', '.join(missing)}"


def test_every_row_names_something_that_exists() -> None:
    """A row for a name no code writes or reads any more is a stale promise."""
    source = "\n".join(p.read_text() for p in (ROOT / "webhook").rglob("*.py"))
    source += (POLICIES / "bundle.yaml").read_text()
    reasons = set(reconciler_reasons()) | model.OWN_DISRUPTION_REASONS | {model.REASON_MAINTENANCE_DRAIN}
    stale = []
    for name in reference_rows():
        if CAMEL.fullmatch(name):
            if name not in reasons:
                stale.append(name)
        elif name.split("/")[-1] not in source:
            stale.append(name)
    assert not stale, f"{REFERENCE.relative_to(ROOT)} has rows for what batchgate does not define: {stale}"


# -- the suite format --------------------------------------------------------------------
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def _keys_refused(tmp_path: Path, doc: dict[str, Any]) -> list[str]:
    """The keys the runner accepts where ``doc`` has the key ``bogus``, from its own error."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(doc))
    bundle = load_bundle(POLICIES)
    with pytest.raises(BundleError) as e:
        run_suite(suite, bundle, None)
    m = re.search(r"bogus.*unknown field; expected one of: (.*)$", str(e.value))
    assert m, str(e.value)
    return m[1].split(", ")


def documented_keys() -> list[list[str]]:
    """The first cells of the tables of docs/admin/suites.md's "Every key", table by table."""
    text = SUITES.read_text()
    section = text[text.index("## Every key"):text.index("\n## ", text.index("## Every key") + 1)]
    tables: list[list[str]] = []
    for block in re.split(r"\n\s*\n", section):
        names = re.findall(r"^\| `([^`]+)` \|", block, re.M)
        if names:
            tables.append(names)
    return tables


def test_the_suite_format_lists_every_key_the_runner_reads(tmp_path: Path) -> None:
    case = {"name": "x", "object": POD, "expect": {}}
    real = [
        _keys_refused(tmp_path, {"apiVersion": contract.API_VERSION, "kind": "Suite", "cases": [], "bogus": 1}),
        _keys_refused(tmp_path, {"kind": "Suite", "cases": [{**case, "bogus": 1}]}),
        _keys_refused(tmp_path, {"kind": "Suite", "cases": [{**case, "request": {"bogus": 1}}]}),
        _keys_refused(tmp_path, {"kind": "Suite", "cases": [{**case, "expect": {"bogus": 1}}]}),
    ]
    documented = documented_keys()
    assert len(documented) == 4, f"{SUITES.name}: expected the document, case, request and expect tables"
    for what, want, got in zip(("document", "case", "request", "expect"), real, documented, strict=True):
        assert sorted(got) == sorted(want), f"{SUITES.name}, the {what} table: the runner reads {want}"


# -- queues: the recipe, and names admins pick --------------------------------------------
def _with_queues(tmp_path: Path, classes: list[dict[str, Any]], queues: list[dict[str, Any]],
                 *, first: bool = False) -> Path:
    target = tmp_path / "policies"
    shutil.copytree(POLICIES, target)
    doc = yaml.safe_load((target / "bundle.yaml").read_text())
    doc["spec"]["priorityClasses"] += copy.deepcopy(classes)
    doc["spec"]["queues"] = (copy.deepcopy(queues) + doc["spec"]["queues"] if first
                             else doc["spec"]["queues"] + copy.deepcopy(queues))
    (target / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


def _run_test(capsys: pytest.CaptureFixture[str], directory: Path) -> tuple[int, str]:
    code = main(["test", "-v", str(directory)])
    out, _ = capsys.readouterr()
    return code, out


@pytest.mark.parametrize("first", [False, True], ids=["gpu-last", "gpu-first"])
def test_a_queue_named_gpu_keeps_the_shipped_suites_green(tmp_path, capsys, first) -> None:
    """The names admins pick first are theirs: no shipped case may depend on a queue of that
    name not existing, nor on the exact list of queues."""
    policies = _with_queues(tmp_path, [], [{"name": "gpu", "priorityClass": "batchgate-batch"}], first=first)
    code, out = _run_test(capsys, policies)
    assert code == 0, out
    assert " 0 failed" in out


def _recipe_block(heading: str) -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", QUEUES.read_text(), re.S)
    found = [b for b in blocks if b.startswith(heading)]
    assert len(found) == 1, f"{QUEUES.name}: no single yaml block starting {heading!r}"
    return found[0]


def test_the_add_a_queue_recipe_works_as_written(tmp_path, capsys) -> None:
    entries = yaml.safe_load(_recipe_block("# policies/bundle.yaml"))
    assert [q["name"] for q in entries["queues"]] == ["gpu"]
    policies = _with_queues(tmp_path, entries["priorityClasses"], entries["queues"])
    suite = _recipe_block("# policies/suite.yaml")
    (policies / "suite.yaml").write_text(suite)
    code, out = _run_test(capsys, policies)
    assert code == 0, out
    names = [c["name"] for c in yaml.safe_load(suite)["cases"]]
    assert len(names) >= 3
    for name in names:
        assert f"ok   policies: {name}" in out, out


# -- links ---------------------------------------------------------------------------------
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "bench" / "README.md",
                *DOCS.rglob("*.md"), *(POLICIES.glob("*/README.md"))])


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page."""
    out: set[str] = set()
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n, candidate = 0, slug
        while candidate in out:
            n += 1
            candidate = f"{slug}-{n}"
        out.add(candidate)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", page.read_text(), flags=re.S))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(broken)
