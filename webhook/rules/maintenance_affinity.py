"""``maintenance-affinity``: a time-limited job only starts on nodes it can finish on before
their next maintenance window.

Slurm's MAINT reservations let a job start on the reserved nodes only if its time
limit ends before the reservation begins. Here the decision must be made when
kube-scheduler *binds* the pod, which can be hours after admission, and the
webhook has no API credentials to look at windows anyway. So the two halves
meet on the nodes:

- the reconciler labels every node with a window ahead
  ``batchgate.io/maintenance-in-minutes: "<whole minutes left>"`` (rounded down,
  rewritten before it could overstate; see :mod:`webhook.windows`);
- this policy gives each pod with a ``batchgate.io/time-limit`` a *required* node
  affinity that only nodes *without* the label, or with a value ``Gt`` the
  limit plus ``margin`` in minutes, satisfy.

``nodeSelectorTerms`` are ORed and the expressions in a term ANDed, so the two
alternatives (no window / window far enough) are added to *every* term the pod
already has (the user's own, the node-selection policy's): n terms become 2n,
each keeping its own expressions and fields. Expressions on the countdown label
that anyone else wrote are dropped first (the label is batchgate's), which also
makes the rule idempotent: a controller's Pod made from an admitted template
needs no change.

Pods without a time limit (services: a Deployment's pods) are left alone; they
are drained at the window's start like everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contract import COUNTDOWN_LABEL, TIME_LIMIT_ANNOTATION
from ..kubefields import REQUIRED
from ..units import parse_duration
from ..windows import minutes_needed
from .base import Ctx, Finding, RuleType

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..draft import Draft
    from ..yamlsrc import Node


@dataclass(frozen=True, slots=True)
class Settings:
    margin: int = 300
    """Seconds added to the time limit: the time between binding and the containers'
    start (image pulls), which the limit does not count (``margin``, default 5m)."""
    exempt_queues: tuple[str, ...] = ()
    """Queues whose pods may start on a window's nodes anyway (they are drained at its start)."""


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("margin", "exemptQueues"))
    m, e = node.get("margin"), node.get("exemptQueues")
    exempt: tuple[str, ...] = ()
    if e is not None:
        for q in e.seq():
            if q.str() not in bundle.queues:
                q.fail(f"unknown queue; queues: {', '.join(bundle.queues)}")
        exempt = e.str_list()
    return Settings(
        margin=m.parsed(parse_duration, expected="a duration like 5m") if m is not None else Settings().margin,
        exempt_queues=exempt,
    )


def _limit(draft: Draft, ctx: Ctx) -> int | None:
    assert ctx.shape is not None
    value = draft.get(*ctx.shape.pod_meta, "annotations", TIME_LIMIT_ANNOTATION)
    try:
        return parse_duration(value) if isinstance(value, str) else None
    except ValueError:
        return None  # the time-limit policy denies it


def ours(expr: Any) -> bool:
    return isinstance(expr, dict) and expr.get("key") == COUNTDOWN_LABEL


def terms_for(terms: list[Any], operand: int) -> list[dict[str, Any]]:
    """Every term of ``terms`` (countdown expressions dropped, duplicates merged) twice: once
    for nodes without a window ahead, once for nodes whose countdown is > ``operand``."""
    base: list[dict[str, Any]] = []
    for t in terms:
        if not isinstance(t, dict):
            continue
        exprs = [e for e in t.get("matchExpressions") or [] if not ours(e)]
        stripped = {k: v for k, v in t.items() if k != "matchExpressions"}
        if exprs:
            stripped["matchExpressions"] = exprs
        if stripped not in base:
            base.append(stripped)
    if not base:
        base = [{}]
    out: list[dict[str, Any]] = []
    for t in base:
        exprs = list(t.get("matchExpressions") or [])
        for extra in ({"key": COUNTDOWN_LABEL, "operator": "DoesNotExist"},
                      {"key": COUNTDOWN_LABEL, "operator": "Gt", "values": [str(operand)]}):
            out.append({**t, "matchExpressions": [*exprs, extra]})
    return out


def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    shape = ctx.shape
    if shape is None or ctx.queue_name in settings.exempt_queues:
        return []
    spec = draft.get(*shape.pod_spec)
    if not isinstance(spec, dict):
        return []
    limit = _limit(draft, ctx)
    if limit is None:
        return []
    path = (*shape.pod_spec, "affinity", "nodeAffinity", REQUIRED, "nodeSelectorTerms")
    current = draft.get(*path)
    if current is not None and not isinstance(current, list):
        return []  # malformed: the API server will say so
    want = terms_for(current or [], minutes_needed(limit, settings.margin))
    if want == current:
        return []
    draft.set(*path, want)
    return []  # no warning: nothing the user must know or act on until a window comes


TYPE = RuleType(
    name="maintenance-affinity",
    doc=(
        "Time-limited pods get a required node affinity on `batchgate.io/maintenance-in-minutes` "
        "(absent, or `Gt` the limit + 5m), so kube-scheduler starts them only where they finish "
        "before the next maintenance window; ANDed into each of the pod's own node-affinity terms."
    ),
    parse=parse,
    mutate=mutate,
    default_failure_policy="Fail",
    order=30,  # after time-limit (the limit) and node-selection (its terms)
)
