"""Pure core, thin edges (docs/dev/architecture.md, "Layout"). The import contracts of the layers are import-linter's
(pyproject.toml, `make lint`); what it cannot see is checked here on the source: the pure
modules read no clock, and no module imports another's private names."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "webhook"
CONTRACTS = {c["name"]: c for c in tomllib.loads((PKG.parent / "pyproject.toml").read_text())
             ["tool"]["importlinter"]["contracts"]}


def _files(module: str) -> list[Path]:
    """The source files of a dotted module name: a module's file, or every file of a package."""
    path = PKG.parent.joinpath(*module.split("."))
    return sorted(path.glob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


# The pure core is the one import-linter's contract names (pyproject.toml): one list, two checks
PURE = sorted({f for m in CONTRACTS["The pure core uses no HTTP, Kubernetes client or metrics library"]
               ["source_modules"] for f in _files(m)})
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


def test_every_policy_type_is_in_the_independence_contract() -> None:
    """A new policy type is independent of the others from its first commit."""
    listed = set(CONTRACTS["Policy types are independent of each other; they share only rules.base"]["modules"])
    on_disk = {f"webhook.rules.{p.stem}" for p in (PKG / "rules").glob("*.py") if p.stem not in ("__init__", "base")}
    assert listed == on_disk


def test_the_pure_core_is_every_module_the_layers_put_below_the_edges() -> None:
    assert len(PURE) > 20 and all(p.is_file() for p in PURE)
    assert PKG / "server.py" not in PURE and PKG / "reconciler" / "kube.py" not in PURE
