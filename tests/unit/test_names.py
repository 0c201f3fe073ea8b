"""One name per policy type: ``spec.type`` == the default bundle's policy folder and name ==
the module under webhook/rules (dashes as underscores) == its unit tests; one module per type."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.rules import REGISTRY
from webhook.rules.base import RuleType

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "webhook" / "rules").glob("*.py") if p.stem not in ("__init__", "base"))


def _module(rule: RuleType) -> str:
    fn = rule.mutate or rule.validate
    assert fn is not None, f"{rule.name} neither mutates nor validates"
    return fn.__module__.rsplit(".", 1)[-1]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_type_has_one_name_everywhere(name: str) -> None:
    rule, module = REGISTRY[name], name.replace("-", "_")
    assert _module(rule) == module, f"type {name} is defined in rules/{_module(rule)}.py, not rules/{module}.py"
    doc = yaml.safe_load((ROOT / "policies" / name / "policy.yaml").read_text())
    assert (doc["metadata"]["name"], doc["spec"]["type"]) == (name, name)
    assert (ROOT / "tests" / "unit" / "rules" / f"test_{module}.py").is_file(), f"no unit tests for {name}"


def test_one_type_per_module_and_a_type_per_folder() -> None:
    assert sorted(_module(r) for r in REGISTRY.values()) == MODULES
    folders = sorted(p.name for p in (ROOT / "policies").iterdir() if (p / "policy.yaml").is_file())
    assert folders == sorted(REGISTRY)
