"""``scavenger-qos``: every container of a workload in a scavenger queue is Guaranteed QoS.

Scavengers run on capacity that others have reserved and must give it back at
once; their accounting (the reconciler's share of allocatable resources, the
preemption order) assumes that what a scavenger requests is exactly what it may
use. So every container of a workload in a scavenger queue must be Guaranteed:
cpu and memory requests equal to limits.

Kubernetes defaults a Pod container's missing requests to its limits *before*
admission, but not a pod template's (a Job's template is defaulted only when the
Job controller makes the Pod). A container with limits only is therefore
Guaranteed either way, and is treated so here for every kind.
"""

from __future__ import annotations

from typing import Any

from .base import (
    ALL_POD_TEMPLATE_KINDS,
    QOS_RESOURCES,
    Ctx,
    Finding,
    RuleType,
    deny,
    dig,
    no_settings,
    pod_spec_parts,
    quantity_or_none,
)


def container_problems(container: dict[str, Any]) -> list[str]:
    """Why one container is not Guaranteed QoS (empty when it is)."""
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    problems = []
    for r in QOS_RESOURCES:
        limit = limits.get(r)
        request = requests.get(r, limit)  # what the API server defaults a missing request to
        if limit is None:
            hint = f" (set it to the request, {request})" if request is not None else ""
            problems.append(f"no {r} limit{hint}")
        elif quantity_or_none(request) is None or quantity_or_none(request) != quantity_or_none(limit):
            problems.append(f"{r} request {request} != limit {limit}")
    return problems


def validate_qos(settings: None, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    if ctx.queue is None or not ctx.queue.scavenger or ctx.shape is None:
        return []
    path = ".".join(map(str, ctx.shape.pod_spec))
    spec = dig(obj, ctx.shape.pod_spec) or {}
    offenders = []
    for key, i, container in pod_spec_parts(spec):
        problems = container_problems(container)
        if problems:
            offenders.append(f"{key[:-1]} {container.get('name')!r} ({path}.{key}[{i}]): {', '.join(problems)}")
    if not offenders:
        return []
    return [deny(
        f"queue {ctx.queue.name!r} runs scavengers, which must be Guaranteed QoS: every container "
        f"(init containers too) needs cpu and memory limits, with requests equal to them or left out. "
        f"Fix: {'; '.join(offenders)}"
    )]


TYPE = RuleType(
    name="scavenger-qos",
    doc=(
        "Scavenger workloads must be Guaranteed QoS; the denial names each container."
    ),
    parse=no_settings,
    validate=validate_qos,
    default_kinds=ALL_POD_TEMPLATE_KINDS,
    default_operations=("CREATE", "UPDATE"),
    mutate_operations=("CREATE", "UPDATE"),
    decides_pod=True,
    default_failure_policy="Fail",
)
