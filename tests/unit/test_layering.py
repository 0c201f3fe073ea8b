"""Pure core, thin edges (STYLE.md): the decision and planning modules import no HTTP, no
Kubernetes client, no metrics, and read no clock. Checked on the source, like an
import-linter contract."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "webhook"
PURE = sorted(
    [PKG / n for n in ("engine.py", "draft.py", "bundle.py", "yamlsrc.py", "units.py", "offline.py",
                       "globs.py", "contract.py", "wire.py")]
    + list((PKG / "rules").glob("*.py"))
    + [PKG / "reconciler" / n for n in ("planner.py", "model.py", "actions.py", "settings.py", "scavenger.py")]
)
FORBIDDEN_IMPORTS = ("aiohttp", "kubernetes", "prometheus_client", "requests", "urllib3", "socket", "ssl")
CLOCK_CALLS = {("time", "time"), ("time", "monotonic"), ("datetime", "now"), ("datetime", "utcnow"), ("date", "today")}


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PKG)))
def test_pure_module_has_no_edges(path):
    tree = ast.parse(path.read_text(), str(path))
    assert not (_imports(tree) & set(FORBIDDEN_IMPORTS)), f"{path.name} imports an edge library"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            assert (name, node.func.attr) not in CLOCK_CALLS, f"{path.name}:{node.lineno} reads the clock"
