"""Pure core, thin edges (docs/dev/architecture.md, "Layout"). The import contracts of the layers are import-linter's
(pyproject.toml, `make lint`); what it cannot see is checked here on the source: the pure
modules read no clock, and no module imports another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "webhook"
PURE = sorted(
    [PKG / n for n in ("engine.py", "draft.py", "bundle.py", "yamlsrc.py", "units.py",
                       "globs.py", "contract.py", "wire.py", "windows.py", "workloads.py", "jobnet.py",
                       "nsfacts.py")]
    + list((PKG / "rules").glob("*.py"))
    + [PKG / "reconciler" / n for n in ("planner.py", "maintenance.py", "scavenger.py", "expected.py",
                                             "shadow.py", "runtimes.py", "report.py", "network.py", "model.py", "actions.py",
                                             "settings.py")]
)
EVERY = sorted(PKG.rglob("*.py"))
CLOCK_CALLS = {("time", "time"), ("time", "monotonic"), ("datetime", "now"), ("datetime", "utcnow"), ("date", "today")}


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PKG)))
def test_pure_module_reads_no_clock(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            assert (name, node.func.attr) not in CLOCK_CALLS, f"{path.name}:{node.lineno} reads the clock"


@pytest.mark.parametrize("path", EVERY, ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_names_imported_from_other_modules(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            assert not private, f"{path.name}:{node.lineno} imports {', '.join(private)} from {node.module}"
