"""``maintenance-window``: a MaintenanceWindow is checked before it is stored.

The window's meaning lives in :mod:`webhook.windows` (shared with the admission
rule that keeps long jobs off a window's nodes and with the reconciler); this
policy type turns its problems into one denial that names every bad field, so
an admin fixes them all at once. Windows longer than ``maxDuration`` are
denied too: a window of years is a typo in a date, and it would hold back every
job on its nodes for as long.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contract import GROUP
from ..units import format_duration, parse_duration
from ..windows import KIND, parse_window
from .base import Ctx, Finding, RuleType, deny

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..yamlsrc import Node


@dataclass(frozen=True, slots=True)
class Settings:
    max_duration: int = 30 * 86400
    """Longest window accepted, in seconds (``maxDuration``, default 30d)."""


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("maxDuration",))
    m = node.get("maxDuration")
    if m is None:
        return Settings()
    return Settings(max_duration=m.parsed(parse_duration, expected="a duration like 7d or 48h"))


def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    old = ctx.old_object
    if ctx.operation == "UPDATE" and isinstance(old, dict) and old.get("spec") == obj.get("spec"):
        return []  # status, labels, finalizers: not ours to judge
    window, problems = parse_window(obj)
    if window is not None and window.end - window.start > settings.max_duration:
        problems = [f"spec.end: the window lasts {format_duration(int(window.end - window.start))}, longer "
                    f"than the {format_duration(settings.max_duration)} this cluster allows (maxDuration "
                    f"of the maintenance-window policy); check the dates"]
    if not problems:
        return []
    return [deny(f"invalid {KIND} {ctx.name or '(generated name)'}: {'; '.join(problems)}")]


TYPE = RuleType(
    name="maintenance-window",
    doc=(
        "Validates `MaintenanceWindow` (batchgate.io/v1alpha1, cluster-scoped): RFC 3339 start "
        "and end, end after start, a node selector that parses and/or node names, at most "
        "`maxDuration` (30d) long; every bad field named."
    ),
    parse=parse,
    validate=validate,
    default_kinds=((GROUP, "v1alpha1", KIND),),
    default_operations=("CREATE", "UPDATE"),
    default_failure_policy="Fail",
)
