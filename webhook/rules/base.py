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


# The reconciler's ServiceAccount (namespace/name), as policies name it: the default releaser
# (queue-gate), writer of its annotations (reconciler-annotations) and controller (queue-access);
# exempt where a user may not grow running work (scavengerjob).
RECONCILER = "batchgate-system/batchgate-reconciler"

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


def amounts(holder: Any, key: str) -> dict[str, tuple[Fraction, str]]:
    """``resources.<key>`` (requests or limits) of what has ``resources`` (a container, a pod spec by
    its pod-level ones, a ScavengerJob's spec), per resource, as (amount, as written); what is not a
    quantity is left out."""
    res = holder.get("resources") if isinstance(holder, dict) else None
    values = res.get(key) if isinstance(res, dict) else None
    return {name: (q, str(v)) for name, v in (values.items() if isinstance(values, dict) else ())
            if (q := quantity_or_none(v)) is not None}


def requested(holder: Any) -> dict[str, tuple[Fraction, str]]:
    """What a container (or a pod spec, by its pod-level ``resources``; a ScavengerJob's spec, per
    pod) requests, per resource, as (amount, as written): its request, else its limit (Kubernetes
    defaults a Pod's missing request to its limit, and the queue counts it so); what is not a
    quantity is left out."""
    return {**amounts(holder, "limits"), **amounts(holder, "requests")}  # a request overrides its limit


def resources_raised(before: Any, after: Any, *, limits: bool = False) -> list[tuple[str, str, str]]:
    """What ``after`` asks for more than ``before`` (each a container, a pod spec by its pod-level
    ``resources``, or a ScavengerJob's spec), as (what, before, after): a request of a resource
    (``requested``; "cpu request"; not requested before counts as 0). With ``limits``, a limit
    raised or removed too ("memory limit"; removed: after is "none"). The one "grown" comparison:
    queue-gate's in-place resize, scavengerjob's edit of a running ScavengerJob."""
    out = []
    then = requested(before)
    for name, (q, text) in requested(after).items():
        prev = then.get(name, (Fraction(0), "0"))
        if q > prev[0]:
            out.append((f"{name} request", prev[1], text))
    if limits:
        now = amounts(after, "limits")
        for name, (q, text) in amounts(before, "limits").items():
            was = now.get(name)
            if was is None or was[0] > q:  # removed: no limit at all
                out.append((f"{name} limit", text, "none" if was is None else was[1]))
    return out
