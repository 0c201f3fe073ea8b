"""Node selection: where a workload's pods may run.

Two things, both expressed with standard scheduling fields so that plain
kube-scheduler enforces them and nothing of batchgate has to be running for the
placement to hold:

- **nodeSelector per queue and per namespace** (``Queue.node_selector`` and
  ``NamespaceRule.node_selector`` in bundle.yaml) merged into the pod spec with
  the user's own. A user key that names another value than the bundle requires
  is denied (``onConflict: deny``, the default) or replaced with a warning
  (``onConflict: override``). A Pod made by a controller from an admitted
  template is never denied for it: the conflict can only come from a bundle
  changed since the template was admitted, and denying would make the
  controller retry forever; the bundle's value wins.

- **Exclusive whole-node placement** (label ``batchgate.io/exclusive: "true"``
  on the workload or its pod template). The pods get a *required* pod
  anti-affinity, per node, against every other managed pod that is not in
  their own exclusive group (``batchgate.io/exclusive-group`` NotIn [own]).
  Nothing is added to other pods: kube-scheduler checks the required
  anti-affinity of pods *already on a node* against the pod being scheduled as
  well (the symmetry of inter-pod anti-affinity), so an ordinary pod cannot land
  next to a running exclusive one. See policies/node-selection/README.md.

The exclusive group is derived from the workload's identity (namespace, kind,
name), never chosen by the user: the label is reserved, and a user who sets it
on a non-exclusive pod has it removed, so no one can slip onto another job's
nodes by copying its group.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..contract import EXCLUSIVE_GROUP_LABEL, EXCLUSIVE_LABEL, QUEUE_LABEL
from ..draft import Draft
from ..kubefields import REQUIRED
from ..yamlsrc import Node
from .base import ALL_POD_TEMPLATE_KINDS, Ctx, Finding, RuleType, deny, warn

if TYPE_CHECKING:
    from ..bundle import Bundle

HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
LABEL_KEY = r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"


@dataclass(frozen=True, slots=True)
class Exclusive:
    """How ``batchgate.io/exclusive: "true"`` is enforced.

    ``other_pods``: which pods an exclusive pod refuses to share a node with (a
    Kubernetes label selector, as a plain dict); by default every pod batchgate
    put in a queue, which leaves node daemons in excluded namespaces (CNI,
    kube-proxy, log shippers) alone. ``across_namespaces``: the anti-affinity
    covers pods of every namespace (``namespaceSelector: {}``, Kubernetes >=
    1.22; older API servers drop the field and the term covers the pod's own
    namespace only).
    """

    enabled: bool = True
    topology_key: str = HOSTNAME_TOPOLOGY
    across_namespaces: bool = True
    other_pods: dict[str, Any] = field(default_factory=lambda: {
        "matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}],
    })


@dataclass(frozen=True, slots=True)
class Settings:
    on_conflict: Literal["deny", "override"] = "deny"
    exclusive: Exclusive = field(default_factory=Exclusive)


# -- settings -------------------------------------------------------------------
def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("onConflict", "exclusive"))
    d, exclusive = Settings(), Exclusive()
    oc = node.get("onConflict")
    on_conflict: Literal["deny", "override"] = oc.enum("deny", "override") if oc else d.on_conflict
    if (e := node.get("exclusive")) is not None:
        e.mapping(allowed=("enabled", "topologyKey", "acrossNamespaces", "otherPods"))
        exclusive = Exclusive(
            enabled=e.opt("enabled", Node.bool, exclusive.enabled),
            topology_key=e.opt("topologyKey", lambda n: n.str(pattern=LABEL_KEY, hint="a node label key"),
                               exclusive.topology_key),
            across_namespaces=e.opt("acrossNamespaces", Node.bool, exclusive.across_namespaces),
            other_pods=e.opt("otherPods", _selector, exclusive.other_pods),
        )
    return Settings(on_conflict=on_conflict, exclusive=exclusive)


def _selector(node: Node) -> dict[str, Any]:
    """A Kubernetes LabelSelector, checked here so the generated term is always valid."""
    node.mapping(allowed=("matchLabels", "matchExpressions"))
    out: dict[str, Any] = {}
    if (ml := node.get("matchLabels")) is not None:
        labels = ml.str_map()
        for key, sub in ml.items():
            _label_key(sub, key)
            if not re.fullmatch(LABEL_VALUE, labels[key]) or len(labels[key]) > 63:
                sub.fail(f"{labels[key]!r} is not a valid label value")
        if labels:
            out["matchLabels"] = labels
    exprs = []
    for e in node.each("matchExpressions"):
        e.mapping(allowed=("key", "operator", "values"))
        key = e.req("key").str()
        _label_key(e.req("key"), key)
        op = e.req("operator").enum("In", "NotIn", "Exists", "DoesNotExist")
        values: list[str] = list(e.opt("values", Node.str_list, ()))
        if op in ("In", "NotIn") and not values:
            e.fail(f"operator {op} needs values")
        if op in ("Exists", "DoesNotExist") and values:
            e.req("values").fail(f"operator {op} takes no values")
        exprs.append({"key": key, "operator": op, **({"values": values} if values else {})})
    if exprs:
        out["matchExpressions"] = exprs
    return out


def _label_key(node: Node, key: str) -> None:
    if not re.fullmatch(LABEL_KEY, key):
        node.fail(f"{key!r} is not a valid label key")
    if key == EXCLUSIVE_GROUP_LABEL:
        node.fail(f"{EXCLUSIVE_GROUP_LABEL} is managed by the policy itself; leave it out")


# -- mutation ---------------------------------------------------------------------
def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    shape = ctx.shape
    if shape is None:
        return []
    spec = draft.get(*shape.pod_spec)
    if not isinstance(spec, dict):
        return []
    findings = merge_node_selector(settings, draft, ctx, spec)
    if any(f.severity == "deny" for f in findings):
        return findings
    return findings + place_exclusive(settings, draft, ctx)


def required_selector(ctx: Ctx) -> dict[str, tuple[str, str]]:
    """node label -> (value, why) that the bundle requires for this request."""
    out: dict[str, tuple[str, str]] = {}
    if ctx.queue is not None:
        for k, v in ctx.queue.node_selector.items():
            out[k] = (v, f"queue {ctx.queue.name!r}")
    rule = ctx.namespace_rule
    if rule is not None:  # the namespace wins; the bundle check keeps them apart for allowed queues
        for k, v in rule.node_selector.items():
            out[k] = (v, f"namespace {ctx.namespace}")
    return out


def merge_node_selector(settings: Settings, draft: Draft, ctx: Ctx, spec: dict[str, Any]) -> list[Finding]:
    """``spec``: the pod spec, read only."""
    assert ctx.shape is not None
    required = required_selector(ctx)
    if not required:
        return []
    path = (*ctx.shape.pod_spec, "nodeSelector")
    current = spec.get("nodeSelector")
    if not isinstance(current, dict):
        current = {}
    added: dict[str, str] = {}
    conflicts: list[tuple[str, str, str, str]] = []
    for key, (value, why) in required.items():
        have = current.get(key)
        if have == value:
            continue
        if have is None:
            added[key] = value
        else:
            conflicts.append((key, str(have), value, why))
    if conflicts and settings.on_conflict == "deny" and not ctx.from_controller:
        return [deny("; ".join(
            f"nodeSelector {key}={have} conflicts with {why}, which runs only on nodes with {key}={value}"
            for key, have, value, why in conflicts
        ) + "; remove " + ", ".join(sorted(c[0] for c in conflicts)) + " from nodeSelector")]
    if not added and not conflicts:
        return []
    selector = draft.edit(*path)
    selector.update(added)
    findings: list[Finding] = []
    for key, have, value, why in conflicts:
        selector[key] = value
        findings.append(warn(f"nodeSelector {key}={have} replaced by {key}={value} ({why})"))
    if added and not ctx.from_controller:
        findings.append(warn("runs only on nodes with " + ", ".join(
            f"{k}={v}" for k, v in added.items()
        ) + " (" + ", ".join(sorted({required[k][1] for k in added})) + ")"))
    return findings


def place_exclusive(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    shape = ctx.shape
    assert shape is not None
    labels = draft.get(*shape.pod_meta, "labels")  # the pod's, or the template's; read only
    if not isinstance(labels, dict):
        labels = {}
    asked = [labels.get(EXCLUSIVE_LABEL)]  # the workload's own label first, then its template's
    if not shape.is_pod:
        asked = [draft.get("metadata", "labels", EXCLUSIVE_LABEL), *asked]
    for value in asked:
        if value is not None and value not in ("true", "false"):
            return [deny(f'label {EXCLUSIVE_LABEL} must be "true" or "false", got {value!r}')]
    exclusive = "true" in asked
    findings: list[Finding] = []
    if not exclusive or not settings.exclusive.enabled:
        if exclusive and not ctx.from_controller:
            findings.append(warn(f"{EXCLUSIVE_LABEL} is ignored: exclusive placement is switched off"))
        if labels.get(EXCLUSIVE_GROUP_LABEL) is not None:
            draft.delete(*shape.pod_meta, "labels", EXCLUSIVE_GROUP_LABEL)
            if not ctx.from_controller:
                findings.append(warn(f"label {EXCLUSIVE_GROUP_LABEL} removed: it is set by batchgate "
                                     f"for {EXCLUSIVE_LABEL}: \"true\" workloads only"))
        return findings

    group = exclusive_group(ctx, draft)
    kept = labels.get(EXCLUSIVE_GROUP_LABEL)
    if ctx.from_controller and shape.template_mutable and isinstance(kept, str) and kept:
        # A Deployment's ReplicaSet: its template is the Deployment's, admitted with the group
        # written there. The deployment controller finds its ReplicaSet by comparing templates;
        # a template rewritten here would make it create another ReplicaSet, and so on.
        group = kept
    changed = False
    if labels.get(EXCLUSIVE_LABEL) != "true":
        draft.set(*shape.pod_meta, "labels", EXCLUSIVE_LABEL, "true")
        changed = True
    if labels.get(EXCLUSIVE_GROUP_LABEL) != group:
        draft.set(*shape.pod_meta, "labels", EXCLUSIVE_GROUP_LABEL, group)
        changed = True
    path = (*shape.pod_spec, "affinity", "podAntiAffinity", REQUIRED)
    terms = draft.get(*path)
    terms = terms if isinstance(terms, list) else []
    want = [t for t in terms if not is_exclusive_term(t)] + [exclusive_term(settings.exclusive, group)]
    if [_comparable(t) for t in terms] != [_comparable(t) for t in want]:
        draft.set(*path, want)
        changed = True
    if changed and not ctx.from_controller:
        findings.append(warn(
            f"exclusive placement: its pods share nodes with no other workload's pods "
            f"({EXCLUSIVE_GROUP_LABEL}={group})"
        ))
    return findings


def exclusive_group(ctx: Ctx, draft: Draft) -> str:
    """A stable label value naming one workload: ``job-mpi-sim2-1a2b3c4d5e``.

    The hash of namespace/kind/name keeps two namespaces' same-named jobs apart;
    the readable stem is for people. A controller's Pod belongs to its owner's
    group (the label on the template says the same, unless the owner was created
    with generateName, in which case this corrects it).
    """
    meta = draft.get("metadata") or {}
    kind = ctx.kind
    name = str(meta.get("name") or ctx.name or meta.get("generateName") or "")
    if ctx.shape is not None and ctx.shape.is_pod and ctx.from_controller:
        owner = next((o for o in meta.get("ownerReferences") or []
                      if isinstance(o, dict) and o.get("controller")), None)
        if owner is not None:
            kind, name = str(owner.get("kind") or kind), str(owner.get("name") or name)
    digest = hashlib.sha256(f"{ctx.namespace}/{kind}/{name}".encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9.-]+", "-", f"{kind.lower()}-{name}".lower())[:45].rstrip("-.")
    return f"{stem}-{digest}"


def exclusive_term(settings: Exclusive, group: str) -> dict[str, Any]:
    selector: dict[str, Any] = {k: v for k, v in settings.other_pods.items() if k == "matchLabels"}
    selector["matchExpressions"] = [
        *settings.other_pods.get("matchExpressions", []),
        {"key": EXCLUSIVE_GROUP_LABEL, "operator": "NotIn", "values": [group]},
    ]
    term: dict[str, Any] = {"labelSelector": selector, "topologyKey": settings.topology_key}
    if settings.across_namespaces:
        term["namespaceSelector"] = {}
    return term


def _comparable(term: Any) -> Any:
    """API servers before 1.22 drop ``namespaceSelector`` from stored terms; an
    empty one and none compare equal, or every Job's pods would be re-patched."""
    if isinstance(term, dict) and term.get("namespaceSelector") == {}:
        return {k: v for k, v in term.items() if k != "namespaceSelector"}
    return term


def is_exclusive_term(term: Any) -> bool:
    """A term this policy wrote (it alone may use the group label)."""
    if not isinstance(term, dict):
        return False
    exprs = (term.get("labelSelector") or {}).get("matchExpressions") or []
    return any(isinstance(e, dict) and e.get("key") == EXCLUSIVE_GROUP_LABEL for e in exprs)


TYPE = RuleType(
    name="node-selection",
    doc=(
        "Queue and namespace node selectors merged with the user's (a conflict is denied, or "
        'overridden if configured); `batchgate.io/exclusive: "true"` gives a job whole nodes, in '
        "both directions."
    ),
    parse=parse,
    mutate=mutate,
    default_kinds=ALL_POD_TEMPLATE_KINDS,
    default_operations=("CREATE", "UPDATE"),
    mutate_operations=("CREATE", "UPDATE"),
    decides_pod=True,
    default_failure_policy="Fail",
    order=20,
)
