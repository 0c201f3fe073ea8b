"""Opting a namespace out of batchgate is an admin act, enforced.

Every webhook configuration leaves out namespaces labelled ``batchgate.io/admission=disabled``
(and, through ``kubernetes.io/metadata.name``, the system namespaces). Anyone who may label a
Namespace could otherwise switch every policy off for it: the cluster's RBAC rarely separates
"edit a namespace's labels" from "this label". As with Gatekeeper's check of its ignore label,
the webhook itself refuses that to everyone but the bundle's admins (and ``writers``):

- setting, changing or removing ``batchgate.io/admission`` on a Namespace;
- ``kubernetes.io/metadata.name`` with a value other than the Namespace's own name. Kubernetes
  1.21+ sets that label itself (and overwrites any other value); on 1.20 it is an ordinary
  label, and a namespace claiming ``kube-system`` would be left out by the selectors;
- setting, changing or removing a label that a queue grant's ``namespaceSelector`` reads
  (``Bundle.selector_keys``): whoever could label their namespace would grant themselves the
  queue (or, with ``NotIn``/``DoesNotExist``, lift a restriction).

The configuration sends Namespace CREATE and UPDATE to this policy with no namespaceSelector,
so a request that opts a namespace out is judged before the label can take effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contract import OPT_OUT_LABEL
from ..kubefields import NAMESPACE_NAME_LABEL
from .base import Ctx, Finding, RuleType, deny

if TYPE_CHECKING:
    from ..bundle import Bundle, Principals
    from ..yamlsrc import Node



@dataclass(frozen=True, slots=True)
class Settings:
    writers: Principals | None  # besides the bundle's admins (e.g. a GitOps controller's account)


def parse(node: Node, bundle: Bundle) -> Settings:
    from ..bundle import parse_principals

    node.mapping(allowed=("writers",))
    return Settings(writers=parse_principals(node.get("writers")))


def _labels(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def _who(ctx: Ctx) -> str:
    admins = ctx.bundle.admins
    names = [*(f"group {g}" for g in admins.groups), *(f"user {u}" for u in admins.users),
             *(f"service account {s}" for s in admins.service_accounts)]
    return ", ".join(names) or "the bundle's admins"


def _granting(ctx: Ctx, key: str) -> str:
    queues = sorted({q.name for q in ctx.bundle.queues.values() for a in (q.access, q.exclusive_access)
                     if a is not None for g in a.grants if g.selector is not None and key in g.selector.label_keys()})
    return "namespaceSelector of queue " + ", ".join(repr(q) for q in queues)


def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    if ctx.admin or (settings.writers is not None and settings.writers.contains(ctx.username, ctx.groups)):
        return []
    new, old = _labels(obj), _labels(ctx.old_object)
    out: list[Finding] = []
    if new.get(OPT_OUT_LABEL) != old.get(OPT_OUT_LABEL):
        what = "removing" if OPT_OUT_LABEL not in new else "setting"
        out.append(deny(
            f"{what} the label {OPT_OUT_LABEL} on a Namespace is for cluster admins only "
            f"({_who(ctx)}): {OPT_OUT_LABEL}=disabled turns every batchgate policy off in "
            "that namespace; ask an admin"))
    for key in ctx.bundle.selector_keys:  # grants by namespace label: the label is the grant
        if key == NAMESPACE_NAME_LABEL:  # Kubernetes 1.21+ sets it itself; its value is checked below
            continue
        if new.get(key) != old.get(key):
            what = "removing" if key not in new else "changing" if key in old else "setting"
            out.append(deny(
                f"{what} the label {key} on a Namespace is for cluster admins only ({_who(ctx)}): "
                f"queue grants select namespaces by it ({_granting(ctx, key)}); ask an admin"))
    for key, policy in ctx.bundle.policy_label_keys:  # e.g. job-network's isolation proxy
        if key == NAMESPACE_NAME_LABEL or key in ctx.bundle.selector_keys:
            continue
        if new.get(key) != old.get(key):
            what = "removing" if key not in new else "changing" if key in old else "setting"
            out.append(deny(
                f"{what} the label {key} on a Namespace is for cluster admins only ({_who(ctx)}): policy "
                f"{policy} selects namespaces by it (its network isolation lets such a namespace's pods in); "
                "ask an admin"))
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
    claimed = new.get(NAMESPACE_NAME_LABEL)
    if claimed is not None and claimed != name and claimed != old.get(NAMESPACE_NAME_LABEL):
        out.append(deny(
            f"the label {NAMESPACE_NAME_LABEL} must be the namespace's own name ({name!r}), not {claimed!r}: "
            "the webhook configurations use it to leave system namespaces out (Kubernetes 1.21+ "
            "sets it; on 1.20 it is an ordinary label)"))
    return out


TYPE = RuleType(
    name="namespace-opt-out",
    doc=(
        f"Only admins may set or remove `{OPT_OUT_LABEL}` on a Namespace (or give it a "
        f"`{NAMESPACE_NAME_LABEL}` other than its name), or the labels that queue grants select namespaces by: "
        "opting out and granting queues are admin acts, enforced."
    ),
    parse=parse,
    validate=validate,
    default_kinds=(("", "v1", "Namespace"),),
    default_operations=("CREATE", "UPDATE"),
    default_failure_policy="Fail",
)
