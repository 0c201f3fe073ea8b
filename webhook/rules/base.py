"""What every policy type is made of, and what it gets to see.

A policy type is a :class:`RuleType`, generic in its settings type ``S``: a
settings parser (run once, at bundle load: ``spec.settings`` -> ``S``) and a
``mutate`` and/or ``validate`` function (run per request) that get that ``S``.
Both are plain functions over data: they receive the request context and the
object (a :class:`~webhook.draft.Draft` when mutating) and return
:class:`Finding`s. They never do I/O, read the clock or build patches
themselves. ``RuleType``, ``Ctx`` and ``Finding`` are defined in
``webhook.bundle`` (a policy holds its type, and the bundle is a layer below the
rules) and re-exported here for the policy types.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..bundle import Ctx, Finding, RuleType
from ..draft import Path
from ..units import parse_quantity
from ..workloads import ALL_POD_TEMPLATE_KINDS, SHAPES, WORKLOAD_KINDS, Shape, dig

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..yamlsrc import Node


def warn(message: str) -> Finding:
    return Finding("warn", message)


def deny(message: str) -> Finding:
    return Finding("deny", message)


# What a policy type is (webhook.bundle, where a policy holds its type) and where each workload
# kind keeps its pod (webhook.workloads), re-exported for the policy types.
__all__ = ["ALL_POD_TEMPLATE_KINDS", "SHAPES", "WORKLOAD_KINDS", "Ctx", "Finding", "Path", "RuleType", "Shape", "dig"]


def no_settings(node: Node, bundle: Bundle) -> None:
    node.mapping(allowed=())
    return None


CONTAINER_LISTS = ("initContainers", "containers")  # a pod spec's lists of containers that policies shape


def pod_spec_parts(spec: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(list name, index, container) for init containers and containers; a list that is
    not a list (a string, an object) has no containers."""
    out = []
    for key in CONTAINER_LISTS:
        items = spec.get(key)
        if isinstance(items, list):
            for i, c in enumerate(items):
                out.append((key, i, c))
    return out


# Guaranteed QoS: the resources whose requests must equal their limits (scavenger-qos, scavengerjob).
QOS_RESOURCES = ("cpu", "memory")


def quantity_or_none(value: Any) -> Fraction | None:
    """A Kubernetes quantity as a number; None when it is not one."""
    try:
        return parse_quantity(value) if isinstance(value, str | int | float) else None
    except ValueError:
        return None
