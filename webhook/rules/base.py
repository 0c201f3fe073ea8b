"""What every policy type is made of, and what it gets to see.

A policy type is a :class:`RuleType`: a settings parser (run once, at bundle
load) and a ``mutate`` and/or ``validate`` function (run per request). Both are
plain functions over data: they receive the request context and the object (a
:class:`~webhook.draft.Draft` when mutating) and return :class:`Finding`s. They
never do I/O, read the clock or build patches themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from ..draft import Path
from ..units import parse_quantity
from ..workloads import ALL_POD_TEMPLATE_KINDS, SHAPES, WORKLOAD_KINDS, Shape, dig

if TYPE_CHECKING:
    from ..bundle import Bundle, NamespaceRule, Queue
    from ..draft import Draft
    from ..yamlsrc import Node



@dataclass(frozen=True, slots=True)
class Finding:
    severity: Literal["warn", "deny"]
    message: str


def warn(message: str) -> Finding:
    return Finding("warn", message)


def deny(message: str) -> Finding:
    return Finding("deny", message)


# Where each workload kind keeps its pod: webhook.workloads, re-exported for the policy types.
__all__ = ["ALL_POD_TEMPLATE_KINDS", "SHAPES", "WORKLOAD_KINDS", "Path", "Shape", "dig"]


@dataclass(slots=True)  # not frozen: built on every request, and frozen __init__ is slow
class Ctx:
    """Everything about one request that a rule may look at."""

    operation: str
    group: str
    version: str
    kind: str
    namespace: str
    name: str  # may be empty: controllers create Pods with only generateName
    username: str
    groups: tuple[str, ...]
    dry_run: bool
    bundle: Bundle
    shape: Shape | None  # None for kinds without a pod template (e.g. ScavengerJob)
    queue_name: str  # the queue asked for (label) or defaulted
    queue: Queue | None  # None when queue_name is not declared in the bundle
    queue_explicit: bool  # the user set the queue label
    namespace_rule: NamespaceRule | None  # the bundle's rule for this namespace, if any
    admin: bool  # in the bundle's admins
    from_controller: bool  # a Pod (or ReplicaSet, Job) that a listed controller made from its owner
    old_object: dict[str, Any] | None
    # Made by a controller from a template this webhook judged as its writer (the seal verifies,
    # or an owner batchgate does not seal): checks that depend on who asks are not made again.
    # A controller's object whose template is not sealed is judged with no one's grants
    # (``unsealed``: username "" in group system:authenticated, not an admin).
    trusted: bool = False
    unsealed: bool = False
    # UPDATE: the old object's pod template was judged (its seal verifies); an UPDATE of one that
    # was not is judged whole, as a CREATE, not only for what it adds.
    old_judged: bool = True

    @property
    def subject(self) -> str:
        """How messages name the object: ``Job demo/mpi-sim2``."""
        return f"{self.kind} {self.namespace}/{self.name or '(generated name)'}"


@dataclass(frozen=True, slots=True)
class RuleType:
    name: str
    doc: str
    parse: Callable[[Node, Bundle], Any]
    mutate: Callable[[Any, Draft, Ctx], list[Finding]] | None = None
    validate: Callable[[Any, dict[str, Any], Ctx], list[Finding]] | None = None
    default_kinds: tuple[tuple[str, str, str], ...] = WORKLOAD_KINDS
    default_operations: tuple[str, ...] = ("CREATE",)
    mutate_operations: tuple[str, ...] = ("CREATE",)
    # Decides the pod (or pod template): runs on every kind that makes pods, and on UPDATE only
    # where the pod template may change and did (the engine skips it otherwise).
    decides_pod: bool = False
    default_failure_policy: Literal["Ignore", "Fail"] = "Ignore"
    # Its validate skips objects a controller made from a sealed template (``ctx.trusted``): the
    # webhook seals a template only when this check passes on it (webhook.seal).
    sealed_check: bool = False
    order: int = 50  # mutating policies run in this order (then by name)
    # The namespace label keys its settings select namespaces by (job-network's isolation proxy):
    # namespace-opt-out keeps them admins' to set, as it does the keys queue grants read.
    namespace_label_keys: Callable[[Any], tuple[str, ...]] | None = None


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
