"""The policy types a bundle can use, by name (``spec.type`` in policy.yaml).

One name per type everywhere: type ``time-limit`` is ``TYPE`` in the module
``webhook/rules/time_limit.py``, the folder ``policies/time-limit`` of the default
bundle and the tests ``tests/unit/rules/test_time_limit.py``; one module per type.
A new type is a module with a ``TYPE`` and a line here.
"""

from __future__ import annotations

import os
from typing import Any

from ..bundle import Bundle
from ..bundle import load_bundle as _load_bundle_of
from . import (
    job_network,
    kata_cpu,
    maintenance_affinity,
    maintenance_window,
    namespace_opt_out,
    node_selection,
    pod_group,
    queue_access,
    queue_gate,
    queue_priority,
    reconciler_annotations,
    scavenger_qos,
    scavengerjob,
    service_account_token,
    shm,
    time_limit,
    time_limit_extension,
)
from .base import RuleType

REGISTRY: dict[str, RuleType[Any]] = {m.TYPE.name: m.TYPE for m in (
    job_network,
    kata_cpu,
    maintenance_affinity,
    maintenance_window,
    namespace_opt_out,
    node_selection,
    pod_group,
    queue_access,
    queue_gate,
    queue_priority,
    reconciler_annotations,
    scavenger_qos,
    scavengerjob,
    service_account_token,
    shm,
    time_limit,
    time_limit_extension,
)}


def load_bundle(directory: str | os.PathLike[str], *, deployable: bool = True) -> Bundle:
    """The bundle in ``directory``, its policies of the built-in types; raises BundleError."""
    return _load_bundle_of(directory, REGISTRY, deployable=deployable)


def catalogue() -> str:
    """The README's policy table, from each type's own ``doc``, in run order."""
    rows = [f"| `{r.name}` | {r.doc} |" for r in sorted(REGISTRY.values(), key=lambda r: (r.order, r.name))]
    return "\n".join(["| policy | what it does |", "| --- | --- |", *rows]) + "\n"
