"""Opting a namespace out of batchgate is an admin act, enforced.

Every webhook configuration leaves out namespaces labelled ``batchgate.io/admission=disabled``
(and, through ``kubernetes.io/metadata.name``, the system namespaces). Anyone who may label a
Namespace could otherwise switch every policy off for it: the cluster's RBAC rarely separates
"edit a namespace's labels" from "this label". As with Gatekeeper's check of its ignore label,
the webhook itself refuses that to everyone but the bundle's admins (and ``writers``):

- setting, changing or removing ``batchgate.io/admission`` on a Namespace;
- ``kubernetes.io/metadata.name`` with a value other than the Namespace's own name. Kubernetes
  1.21+ sets that label itself (and overwrites any other value); on 1.20 it is an ordinary
  label, and a namespace claiming ``kube-system`` would be left out by the selectors.

The configuration sends Namespace CREATE and UPDATE to this policy with no namespaceSelector,
so a request that opts a namespace out is judged before the label can take effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contract import OPT_OUT_LABEL
from .base import Ctx, Finding, RuleType, deny

if TYPE_CHECKING:
    from ..bundle import Bundle, Principals
    from ..yamlsrc import Node

NAME_LABEL = "kubernetes.io/metadata.name"


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
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
    claimed = new.get(NAME_LABEL)
    if claimed is not None and claimed != name and claimed != old.get(NAME_LABEL):
        out.append(deny(
            f"the label {NAME_LABEL} must be the namespace's own name ({name!r}), not {claimed!r}: "
            "the webhook configurations use it to leave system namespaces out (Kubernetes 1.21+ "
            "sets it; on 1.20 it is an ordinary label)"))
    return out


TYPE = RuleType(
    name="namespace-opt-out",
    doc=(
        f"Only admins may set or remove `{OPT_OUT_LABEL}` on a Namespace (or give it a "
        f"`{NAME_LABEL}` other than its name): opting out is an admin act, enforced."
    ),
    parse=parse,
    validate=validate,
    default_kinds=(("", "v1", "Namespace"),),
    default_operations=("CREATE", "UPDATE"),
    default_failure_policy="Fail",
)
