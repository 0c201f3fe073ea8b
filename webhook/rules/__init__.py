"""The policy types a bundle can use, by name (``spec.type`` in policy.yaml).

One name per type everywhere: type ``time-limit`` is the module
``webhook/rules/time_limit.py``, the folder ``policies/time-limit`` of the default
bundle and the tests ``tests/unit/rules/test_time_limit.py``; one module per type.
"""

from __future__ import annotations

from .base import RuleType

REGISTRY: dict[str, RuleType] = {}


def register(rule: RuleType) -> RuleType:
    if rule.name in REGISTRY:
        raise ValueError(f"policy type {rule.name!r} registered twice")
    REGISTRY[rule.name] = rule
    return rule


def _load() -> None:
    # Each module registers its types on import; RuleType.order, not import order, sets run order.
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("base",):
            importlib.import_module(f"{__name__}.{info.name}")


def catalogue() -> str:
    """The README's policy table, from each type's own ``doc``, in run order."""
    rows = [f"| `{r.name}` | {r.doc} |" for r in sorted(REGISTRY.values(), key=lambda r: (r.order, r.name))]
    return "\n".join(["| policy | what it does |", "| --- | --- |", *rows]) + "\n"


_load()
