"""Kata containers: give back the CPU the VM overhead takes.

A pod on a Kata runtime class runs in a small VM, and its RuntimeClass declares
the VM's cost as ``overhead.podFixed``. The RuntimeClass admission plugin runs
before webhooks and has already copied it to ``spec.overhead``; the scheduler,
the kubelet's cgroups and ResourceQuota then charge containers + overhead. A
user who asked for 4 CPUs would be charged 4.25. This policy lowers the
containers so that the pod, overhead included, costs what the user asked for.

``subtract`` (default), in exact millicores:
- app containers: their CPU requests are lowered by ``overhead.cpu`` in total,
  each in proportion to its request; their limits likewise, in proportion to
  the limits (only when every app container has a CPU limit, i.e. the pod has a
  pod-level limit at all). Exact shares are rounded to millicores by largest
  remainder, so the totals come out exact. A container never goes below
  ``minCPU`` (or its own value, if that was lower); what it cannot give, the
  others give, in proportion. When even that is impossible the pod is denied
  with the numbers.
- init containers run one at a time, before the app containers, alone with the
  overhead: each is capped at (pod request the user asked for - overhead), the
  pod request being max(sum of app requests, largest init request) as
  Kubernetes computes it; limits the same way.
So the pod's effective request + overhead equals the request the user asked
for, and the same for limits. Requests stay <= limits, and a Guaranteed pod
(requests == limits) stays Guaranteed.

``wholeVCPU``: first ``subtract``; then every app container's CPU limit is
rounded down to a whole number of CPUs (Kata hot-plugs ceil(limit) vCPUs per
container, so a fractional limit pays for a vCPU it cannot fully use), except
that a limit below 1 CPU stays as it is; a request above its new limit is
lowered to it.

The original values go into the annotation ``batchgate.io/kata-requested-cpu``
(JSON, per container). Its presence marks the pod as adjusted: a second pass,
or a pod that already carries it, is left alone.

Only Pods (templates have no overhead yet; their Pods are adjusted when
created) and only CREATE (container resources are immutable afterwards).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from ..contract import GROUP
from ..draft import Draft
from ..globs import matches
from ..units import format_cpu, parse_quantity
from ..yamlsrc import Node
from .base import Ctx, Finding, RuleType, deny, warn

if TYPE_CHECKING:
    from ..bundle import Bundle

ANNOTATION = f"{GROUP}/kata-requested-cpu"
Kind = Literal["requests", "limits"]
KINDS: tuple[Kind, Kind] = ("limits", "requests")  # limits first: they cap the requests


@dataclass(frozen=True, slots=True)
class Settings:
    runtime_classes: tuple[str, ...] = ("kata*",)
    mode: Literal["subtract", "wholeVCPU"] = "subtract"
    min_cpu: int = 100  # millicores


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("runtimeClasses", "mode", "minCPU"))
    rc = node.get("runtimeClasses")
    mode = node.get("mode")
    min_node = node.get("minCPU")
    min_cpu = 100
    if min_node is not None:
        value = min_node.parsed(parse_quantity, expected="a CPU quantity like 100m")
        millis = value * 1000
        if millis.denominator != 1 or millis < 1:
            min_node.fail(f"expected at least 1m in whole millicores, got {min_node.value!r}")
        min_cpu = int(millis)
    classes = rc.str_list() if rc else ("kata*",)
    if rc is not None and not classes:
        rc.fail("name at least one runtime class (globs allowed, e.g. kata*)")
    return Settings(
        runtime_classes=classes,
        mode=mode.enum("subtract", "wholeVCPU") if mode else "subtract",
        min_cpu=min_cpu,
    )


# -- arithmetic (millicores, exact) ----------------------------------------------
class Infeasible(ValueError):
    pass


def millis(quantity: Any) -> int:
    """A CPU quantity in whole millicores, rounded up as the API server stores it."""
    m = parse_quantity(quantity) * 1000
    return -(-m.numerator // m.denominator)


def shrink(values: list[int], total_cut: int, floor: int, caps: list[int] | None = None) -> list[int]:
    """Lower ``values`` by ``total_cut`` in total, each in proportion to its value; exact
    integers (largest remainder; earlier items win ties, so results are deterministic).

    No item goes below min(its value, ``floor``) nor above min(its value, its cap); what a
    bounded item cannot take, the others take, in proportion. Raises Infeasible when the
    bounds leave no solution.
    """
    n = len(values)
    lows = [min(v, floor) for v in values]
    highs = [min(v, c) for v, c in zip(values, caps, strict=True)] if caps else list(values)
    if any(lo > hi for lo, hi in zip(lows, highs, strict=True)):
        raise Infeasible()
    target = sum(values) - total_cut
    if not sum(lows) <= target <= sum(highs):
        raise Infeasible()
    fixed: dict[int, int] = {}
    while True:  # each round fixes at least one item at a bound, so at most n rounds
        free = [i for i in range(n) if i not in fixed]
        budget = target - sum(fixed.values())
        base = sum(values[i] for i in free)
        if not free or base == 0:
            if budget != 0:
                raise Infeasible()
            shares: dict[int, Fraction] = {i: Fraction(0) for i in free}
            break
        shares = {i: Fraction(values[i] * budget, base) for i in free}
        low = [i for i in free if shares[i] < lows[i]]
        high = [i for i in free if shares[i] > highs[i]]
        if not low and not high:
            break
        for i in low or high:  # one side at a time; fixing both at once can overshoot
            fixed[i] = lows[i] if low else highs[i]
    out = [0] * n
    for i, v in fixed.items():
        out[i] = v
    floors = {i: int(x) for i, x in shares.items()}
    left = budget - sum(floors.values())
    # only items with a remainder get a millicore, so none passes its bound
    for i in sorted((i for i in floors if shares[i] != floors[i]),
                    key=lambda i: (-(shares[i] - floors[i]), i))[:left]:
        floors[i] += 1
    for i, v in floors.items():
        out[i] = v
    return out


@dataclass(slots=True)
class Plan:
    """New CPU values per (list, index, kind), in millicores."""

    new: dict[tuple[str, int, Kind], int]
    old: dict[tuple[str, int, Kind], int]


def plan(spec: dict[str, Any], overhead: int, settings: Settings) -> Plan:
    """Raises Infeasible with a message naming the numbers."""
    app = list(enumerate(spec.get("containers") or []))
    init = list(enumerate(spec.get("initContainers") or []))
    old: dict[tuple[str, int, Kind], int] = {}
    for key, items in (("containers", app), ("initContainers", init)):
        for i, c in items:
            for kind in KINDS:
                q = ((c.get("resources") or {}).get(kind) or {}).get("cpu")
                if q is not None:
                    old[(key, i, kind)] = millis(q)
    new: dict[tuple[str, int, Kind], int] = {}
    for kind in KINDS:
        keys = [("containers", i, kind) for i, _ in app if ("containers", i, kind) in old]
        if kind == "limits" and len(keys) != len(app):
            continue  # some container is unbounded: the pod has no CPU limit to keep
        values = [old[k] for k in keys]
        if not values or sum(values) == 0:
            continue
        caps = None
        if kind == "requests":
            limits = [new.get(("containers", k[1], "limits"), old.get(("containers", k[1], "limits")))
                      for k in keys]
            caps = [v if c is None else c for v, c in zip(values, limits, strict=True)]
        try:
            cut = shrink(values, overhead, settings.min_cpu, caps)
        except Infeasible:
            raise Infeasible(
                f"the runtime class adds {format_cpu(Fraction(overhead, 1000))} CPU of VM overhead, "
                f"which cannot come out of the containers' CPU {kind} "
                f"({' + '.join(format_cpu(Fraction(v, 1000)) for v in values)}) without taking a "
                f"container below {format_cpu(Fraction(settings.min_cpu, 1000))}; ask for at least "
                f"{format_cpu(Fraction(overhead + sum(min(v, settings.min_cpu) for v in values), 1000))} "
                f"CPU {kind} in total"
            ) from None
        for k, v in zip(keys, cut, strict=True):
            new[k] = v
        asked = max([sum(values)] + [old[("initContainers", i, kind)] for i, _ in init
                                     if ("initContainers", i, kind) in old])
        for i, _ in init:
            k = ("initContainers", i, kind)
            if k in old and old[k] > asked - overhead:
                new[k] = max(asked - overhead, min(old[k], settings.min_cpu))
    if settings.mode == "wholeVCPU":
        for i, _ in app:
            k = ("containers", i, "limits")
            if k in new and new[k] >= 1000:
                new[k] = new[k] // 1000 * 1000
    for (key, i, kind), v in list(new.items()):  # requests never above limits
        if kind == "requests":
            limit = new.get((key, i, "limits"), old.get((key, i, "limits")))
            if limit is not None and v > limit:
                new[(key, i, kind)] = limit
    return Plan(new={k: v for k, v in new.items() if v != old[k]}, old=old)


# -- the rule ----------------------------------------------------------------------
def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    if ctx.shape is None or not ctx.shape.is_pod or ctx.operation != "CREATE":
        return []
    spec = draft.get("spec")
    if not isinstance(spec, dict):
        return []
    runtime = spec.get("runtimeClassName")
    if not isinstance(runtime, str) or not matches(settings.runtime_classes, runtime):
        return []
    if draft.get("metadata", "annotations", ANNOTATION) is not None:
        return []  # adjusted already (or the user opted out by setting it)
    cpu = (spec.get("overhead") or {}).get("cpu")
    if cpu is None:
        return []
    try:
        overhead = millis(cpu)
        if overhead <= 0:
            return []
        p = plan(spec, overhead, settings)
    except Infeasible as e:
        return [deny(f"runtimeClassName {runtime}: {e}")]
    except ValueError as e:  # a CPU quantity out of bounds (1e999999999) or malformed
        return [deny(f"runtimeClassName {runtime}: cannot take the VM overhead out of the containers' CPU: {e}")]
    if not p.new:
        return []
    record: dict[str, dict[str, str]] = {}
    changes = []
    for (key, i, kind), value in sorted(p.new.items()):
        container = spec[key][i]
        name = str(container.get("name", f"{key}[{i}]"))
        for k in ("requests", "limits"):  # record both, so the user sees the whole original
            if (key, i, k) in p.old:
                record.setdefault(name, {})[k] = format_cpu(Fraction(p.old[(key, i, k)], 1000))
        draft.set("spec", key, i, "resources", kind, "cpu", format_cpu(Fraction(value, 1000)))
        changes.append(f"{name} {kind} {format_cpu(Fraction(p.old[(key, i, kind)], 1000))} -> "
                       f"{format_cpu(Fraction(value, 1000))}")
    draft.set("metadata", "annotations", ANNOTATION, json.dumps(record, sort_keys=True, separators=(",", ":")))
    return [warn(
        f"runtimeClassName {runtime} adds {format_cpu(Fraction(overhead, 1000))} CPU of VM overhead; "
        f"CPU lowered so the pod costs what it asked for ({'; '.join(changes)}); "
        f"the original values are in the annotation {ANNOTATION}"
    )]


TYPE = RuleType(
    name="kata-cpu",
    doc=(
        "Pods on a Kata runtime class get container CPU reduced by the VM overhead "
        "(`spec.overhead`), so pod total = what the user asked; or limits rounded to whole vCPUs."
    ),
    parse=parse,
    mutate=mutate,
    default_kinds=(("", "v1", "Pod"),),
    order=45,
)
