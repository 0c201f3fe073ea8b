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

Pod templates (Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs,
CronJobs) at CREATE and at UPDATE of the template: a template has no
``spec.overhead`` (the RuntimeClass plugin fills it in each Pod), and a webhook
cannot read RuntimeClasses, so ``overheads`` declares the CPU overhead of the
runtime classes as installed. The template is adjusted with it exactly as its
Pods would be (a CPU limit without a request counts as both, as the API server
defaults each Pod), a template whose Pods would be denied is denied, and
``batchgate.io/kata-overhead-cpu`` records the overhead taken out. A Pod made
from such a template is adjusted already; if its real ``spec.overhead`` differs
from the recorded one, it is adjusted again from the original values in the
annotation. A template updated with other CPU values is adjusted from those.
A runtime class with no declared overhead leaves templates alone (their Pods
are still adjusted when created).

Pods only on CREATE (container resources are immutable afterwards).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from ..contract import KATA_OVERHEAD_CPU_ANNOTATION, KATA_REQUESTED_CPU_ANNOTATION
from ..draft import Draft
from ..globs import matches
from ..units import format_cpu, parse_quantity
from ..yamlsrc import Node
from .base import (
    ALL_POD_TEMPLATE_KINDS,
    CONTAINER_LISTS,
    Ctx,
    Finding,
    RuleType,
    deny,
    dig,
    pod_spec_parts,
    warn,
)

if TYPE_CHECKING:
    from ..bundle import Bundle

Kind = Literal["requests", "limits"]
KINDS: tuple[Kind, Kind] = ("limits", "requests")  # limits first: they cap the requests


@dataclass(frozen=True, slots=True)
class Settings:
    runtime_classes: tuple[str, ...] = ("kata*",)
    mode: Literal["subtract", "wholeVCPU"] = "subtract"
    min_cpu: int = 100  # millicores
    # (runtime class name or glob, CPU overhead in millicores) for pod templates
    overheads: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    def declared(self, runtime: str) -> int | None:
        """The overhead declared for ``runtime``: its own name's, else the first glob's."""
        exact = dict(self.overheads).get(runtime)
        return exact if exact is not None else next(
            (m for glob, m in self.overheads if matches((glob,), runtime)), None)


def _overheads(node: Node) -> tuple[tuple[str, int], ...]:
    out = []
    for glob, value in node.items():
        m = value.parsed(parse_quantity, expected="a CPU quantity like 250m") * 1000
        if m.denominator != 1 or m < 0:
            value.fail(f"expected a CPU quantity >= 0 in whole millicores, got {value.value!r}")
        out.append((glob, int(m)))
    return tuple(out)


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("runtimeClasses", "mode", "minCPU", "overheads"))
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
        overheads=node.opt("overheads", _overheads, ()),
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
    shape = ctx.shape
    if shape is None or (shape.is_pod and ctx.operation != "CREATE"):
        return []
    spec = draft.get(*shape.pod_spec)
    if not isinstance(spec, dict):
        return []
    runtime = spec.get("runtimeClassName")
    if not isinstance(runtime, str) or not matches(settings.runtime_classes, runtime):
        return []
    annotations = draft.get(*shape.pod_meta, "annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    recorded, taken = annotations.get(KATA_REQUESTED_CPU_ANNOTATION), annotations.get(KATA_OVERHEAD_CPU_ANNOTATION)
    if recorded is not None and taken is None:
        return []  # adjusted already (a Pod reinvoked), or the user opted out by setting it
    try:
        if shape.is_pod:
            cpu = (spec.get("overhead") or {}).get("cpu")
            overhead = None if cpu is None else millis(cpu)
        else:
            overhead = settings.declared(runtime)
        if overhead is None or overhead <= 0:
            return []
        asked = _as_pod(spec)
        if recorded is not None:
            old = dig(ctx.old_object, shape.pod_spec) if ctx.old_object is not None else None
            asked = _asked(asked, _as_pod(old) if isinstance(old, dict) else None, recorded,
                           millis(taken), settings)
        p = plan(asked, overhead, settings)
    except Infeasible as e:
        return [deny(f"{_whose(shape.is_pod)}runtimeClassName {runtime}: {e}")]
    except ValueError as e:  # a CPU quantity out of bounds (1e999999999) or malformed
        return [deny(f"{_whose(shape.is_pod)}runtimeClassName {runtime}: cannot take the VM overhead "
                     f"out of the containers' CPU: {e}")]
    record: dict[str, dict[str, str]] = {}
    writes: list[tuple[str, int, Kind, int]] = []
    changes = []
    for (key, i, kind), was in sorted(p.old.items()):
        name = str(asked[key][i].get("name", f"{key}[{i}]"))
        want = p.new.get((key, i, kind), was)
        if (key, i, kind) in p.new:
            changes.append(f"{name} {kind} {_cpu(was)} -> {_cpu(want)}")
            for k in ("requests", "limits"):  # record both, so the user sees the whole original
                if (key, i, k) in p.old:
                    record.setdefault(name, {})[k] = _cpu(p.old[(key, i, k)])
        have = _cpu_of(spec, key, i, kind)
        if (have is None and (key, i, kind) in p.new) or (have is not None and millis(have) != want):
            writes.append((key, i, kind, want))
    if not record:
        return []
    for key, i, kind, want in writes:
        draft.set(*shape.pod_spec, key, i, "resources", kind, "cpu", _cpu(want))
    meta = (*shape.pod_meta, "annotations")
    draft.ensure(*meta, KATA_REQUESTED_CPU_ANNOTATION, json.dumps(record, sort_keys=True, separators=(",", ":")))
    if not shape.is_pod or taken is not None:
        draft.ensure(*meta, KATA_OVERHEAD_CPU_ANNOTATION, _cpu(overhead))
    if not writes:
        return []
    source = "" if shape.is_pod else " (as the kata-cpu policy declares it)"
    return [warn(
        f"{_whose(shape.is_pod)}runtimeClassName {runtime} adds {_cpu(overhead)} CPU of VM overhead"
        f"{source}; CPU lowered so the pod costs what it asked for ({'; '.join(changes)}); "
        f"the original values are in the annotation {KATA_REQUESTED_CPU_ANNOTATION}"
    )]


def _cpu(m: int) -> str:
    return format_cpu(Fraction(m, 1000))


def _whose(is_pod: bool) -> str:
    return "" if is_pod else "pod template: "


def _as_pod(spec: dict[str, Any]) -> dict[str, Any]:
    """The containers as the API server stores each Pod made from ``spec``: a CPU limit
    without a request is both (the Pod defaulting; a template is not defaulted)."""
    out = dict(spec)
    for key in CONTAINER_LISTS:
        if not isinstance(spec.get(key), list):
            continue
        out[key] = []
        for c in spec[key]:
            res = c.get("resources") if isinstance(c, dict) else None
            if isinstance(res, dict) and isinstance(res.get("limits"), dict) and "cpu" in res["limits"] \
                    and "cpu" not in (res.get("requests") or {}):
                c = {**c, "resources": {**res, "requests": {**(res.get("requests") or {}),
                                                            "cpu": res["limits"]["cpu"]}}}
            out[key].append(c)
    return out


def _cpu_of(spec: Any, key: str, i: int, kind: str) -> Any:
    items = spec.get(key) if isinstance(spec, dict) else None
    c = items[i] if isinstance(items, list) and i < len(items) else None
    res = c.get("resources") if isinstance(c, dict) else None
    values = res.get(kind) if isinstance(res, dict) else None
    return values.get("cpu") if isinstance(values, dict) else None


def _asked(spec: dict[str, Any], old: Any, recorded: Any, taken: int, settings: Settings) -> dict[str, Any]:
    """What the user asks for in a template (or its Pod) that this policy adjusted before,
    taking ``taken`` CPU out: a recorded container's original value wherever its value is
    still the adjusted one (as in ``old``, the object before this UPDATE, or as the earlier
    adjustment makes it), the value as it is wherever the user has changed it."""
    try:
        originals = json.loads(recorded) if isinstance(recorded, str) else None
    except ValueError:
        originals = None
    if not isinstance(originals, dict):
        raise ValueError(f"the annotation {KATA_REQUESTED_CPU_ANNOTATION} is not what this policy writes")
    restored = {k: list(spec[k]) for k in CONTAINER_LISTS if isinstance(spec.get(k), list)}
    ours: list[tuple[str, int, Kind]] = []
    for key, i, c in pod_spec_parts(spec):
        was = originals.get(c.get("name")) if isinstance(c, dict) else None
        if not isinstance(was, dict):
            continue
        res = dict(c.get("resources") or {})
        for kind in KINDS:
            if isinstance(was.get(kind), str):
                res[kind] = {**(res.get(kind) or {}), "cpu": was[kind]}
                ours.append((key, i, kind))
        restored[key][i] = {**c, "resources": res}
    out = {**spec, **restored}
    try:
        made = plan(out, taken, settings)
    except Infeasible:
        made = None
    for key, i, kind in ours:
        have = _cpu_of(spec, key, i, kind)
        if have is not None and old is not None and have == _cpu_of(old, key, i, kind):
            continue  # unchanged by this UPDATE: still the adjusted value
        if have is not None and made is not None and \
                millis(have) == made.new.get((key, i, kind), made.old.get((key, i, kind))):
            continue  # what the earlier adjustment made of the original (a reinvocation)
        if old is None and have is not None:
            continue  # created adjusted (a Pod from an adjusted template)
        res = dict(restored[key][i]["resources"])
        rest = {k: v for k, v in (res.get(kind) or {}).items() if k != "cpu"}
        res[kind] = rest if have is None else {**rest, "cpu": have}
        restored[key][i] = {**restored[key][i], "resources": res}
    return {**spec, **restored}


TYPE = RuleType(
    name="kata-cpu",
    doc=(
        "Pods on a Kata runtime class get container CPU reduced by the VM overhead "
        "(`spec.overhead`), so pod total = what the user asked; or limits rounded to whole vCPUs. "
        "Pod templates of every workload kind get the same, with the overhead declared in the settings."
    ),
    parse=parse,
    mutate=mutate,
    default_kinds=ALL_POD_TEMPLATE_KINDS,
    default_operations=("CREATE", "UPDATE"),
    mutate_operations=("CREATE", "UPDATE"),
    decides_pod=True,
    order=45,
)
