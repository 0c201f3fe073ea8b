"""The policy types a bundle can use, by name (``spec.type`` in policy.yaml)."""

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


_load()
