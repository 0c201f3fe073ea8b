"""No service-account token in user workloads.

Setting ``automountServiceAccountToken: false`` is not enough on a Pod: the
API server's ServiceAccount admission plugin runs *before* webhooks and has
already added the token volume and its mounts to the object the webhook sees.
So on Pods this policy also removes exactly what that plugin injected:

- Kubernetes < 1.21 (and clusters with BoundServiceAccountTokenVolume off): a
  secret volume named after the service account's token secret
  (``<sa>-token-xxxxx``, or that name plus ``-xxxxx`` when taken);
- Kubernetes >= 1.21: a projected volume ``kube-api-access-xxxxx`` made of the
  service-account token, the ``kube-root-ca.crt`` ConfigMap and the namespace
  from the downward API;

each mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount.
Removed are the read-only mounts at that path of a volume shaped exactly like
that, and then the volume, unless another mount still uses it (the user
declared it; the plugin only reused it). Any other volume or mount is the
user's own and is left alone. Pod templates (Job, CronJob) get only the field: the plugin
does not touch templates, and honours the field when the controller creates
the Pods.

Namespaces and service accounts that really need the API are exempted in the
settings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..draft import Draft
from ..globs import matcher
from ..yamlsrc import Node
from .base import ALL_POD_TEMPLATE_KINDS, CONTAINER_LISTS, Ctx, Finding, RuleType, warn

if TYPE_CHECKING:
    from ..bundle import Bundle

MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
FIELD = "automountServiceAccountToken"
_SUFFIX = r"[a-z0-9]{5}"
_PROJECTED_NAME = re.compile(rf"kube-api-access-{_SUFFIX}")
_SUFFIX_RX = re.compile(_SUFFIX)
_VOLUME_SUFFIX_RX = re.compile(rf"(-{_SUFFIX})?")
# The exact keys of what the plugin writes (dict key views compare with these without copying).
_MOUNT_KEYS = frozenset({"name", "mountPath", "readOnly"})
_SECRET_KEYS = frozenset({"secretName", "defaultMode"})
_PROJECTED_KEYS = frozenset({"sources", "defaultMode"})
_PROJECTED_SOURCES = frozenset({"serviceAccountToken", "configMap", "downwardAPI"})


@dataclass(frozen=True, slots=True)
class Settings:
    """Exemptions: ``namespaces`` (globs) and ``service_accounts`` (``namespace/name`` globs);
    ``keep_dedicated``: a workload that names a service account other than its namespace's
    ``default`` keeps the token (an operator's Deployment runs under the account RBAC was bound
    to for it: the token is the point there). Workloads that name no account run as
    ``default``, the account nobody meant to give API rights, and lose it."""

    namespaces: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()
    keep_dedicated: bool = False
    # The globs compiled once, at load (globs.matcher's memo costs a lookup per review).
    exempt_namespace: Callable[[str], bool] = field(init=False, repr=False, compare=False)
    exempt_account: Callable[[str], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, globs in (("exempt_namespace", self.namespaces), ("exempt_account", self.service_accounts)):
            object.__setattr__(self, name, matcher(globs) if globs else _never)


def _never(value: str) -> bool:
    return False


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("exemptNamespaces", "exemptServiceAccounts", "keepDedicatedServiceAccounts"))
    for sa in node.each("exemptServiceAccounts"):
        glob = sa.str()
        if glob.count("/") != 1 or not all(glob.split("/")):
            sa.fail(f"{glob!r}: expected namespace/name (globs allowed, e.g. ci-*/deployer)")
    return Settings(namespaces=node.opt("exemptNamespaces", Node.str_list, ()),
                    service_accounts=node.opt("exemptServiceAccounts", Node.str_list, ()),
                    keep_dedicated=node.opt("keepDedicatedServiceAccounts", Node.bool, False))


def service_account(spec: dict[str, Any]) -> str:
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def exempt(settings: Settings, namespace: str, account: str) -> bool:
    return settings.exempt_namespace(namespace) or settings.exempt_account(f"{namespace}/{account}")


def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    shape = ctx.shape
    if shape is None:
        return []
    path = shape.pod_spec
    spec = draft.get(*path)
    if not isinstance(spec, dict):
        return []
    account = service_account(spec)
    if (settings.keep_dedicated and account != "default") or exempt(settings, ctx.namespace, account):
        return []
    findings: list[Finding] = []
    pod = None  # the pod spec, once edited
    current = spec.get(FIELD)
    if current is not False:
        if current is True and not ctx.from_controller:
            findings.append(warn(
                f"{FIELD}: true overridden: workloads get no Kubernetes API token here; ask an admin "
                f"to exempt service account {ctx.namespace}/{account} if this one needs the API"
            ))
        pod = draft.edit(*path)
        pod[FIELD] = False
    if shape.is_pod and spec.get("volumes"):
        remove_injected(draft, path, spec, account, pod)
    return findings


def token_volumes(spec: dict[str, Any], account: str) -> set[str]:
    """Names of the volumes shaped exactly like the ServiceAccount plugin's token volume."""
    return {v["name"] for v in spec.get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("name"), str) and _token_volume(v, account)}


def remove_injected(draft: Draft, spec_path: tuple[str | int, ...], spec: dict[str, Any], account: str,
                    pod: dict[str, Any] | None = None) -> None:
    """Drop the plugin's read-only mounts of a token volume at the service-account path, then
    the token volume itself unless something else still mounts it (then the user declared
    it, and the plugin only reused it). ``spec`` is the pod spec at ``spec_path``, read only;
    ``pod`` the same, edited already (or None)."""
    names = token_volumes(spec, account)
    if not names:
        return
    still_used: set[str] = set()
    for key in CONTAINER_LISTS:
        items = spec.get(key)
        if type(items) is not list:
            continue
        for i, container in enumerate(items):
            mounts = container.get("volumeMounts") or []
            kept = []
            for m in mounts:
                if isinstance(m, dict):
                    if m.get("name") in names and _token_mount(m):
                        continue  # the plugin's: removed
                    still_used.add(str(m.get("name")))
                kept.append(m)
            if len(kept) != len(mounts):
                pod = pod if pod is not None else draft.edit(*spec_path)
                owned = draft.child(draft.child(pod, key), i)
                if kept:
                    owned["volumeMounts"] = kept
                else:
                    del owned["volumeMounts"]
    gone = names - still_used
    if not gone:
        return
    volumes = [v for v in spec.get("volumes") or [] if not (isinstance(v, dict) and v.get("name") in gone)]
    pod = pod if pod is not None else draft.edit(*spec_path)
    if volumes:
        pod["volumes"] = volumes
    else:
        del pod["volumes"]



def _token_mount(m: dict[str, Any]) -> bool:
    return (
        str(m.get("mountPath", "")).rstrip("/") == MOUNT_PATH
        and m.get("readOnly") is True
        and m.keys() <= _MOUNT_KEYS
    )


def _token_volume(v: dict[str, Any], account: str) -> bool:
    name = v["name"]
    # The volume's keys are exactly name and the source ("name" is there): two tests, cheaper than
    # comparing key views with a set (1.3k instructions each).
    if len(v) == 2 and "secret" in v:  # legacy: the service account's token secret
        secret = v["secret"]
        if not isinstance(secret, dict) or not secret.keys() <= _SECRET_KEYS:
            return False
        secret_name = str(secret.get("secretName") or "")
        prefix = f"{account}-token-"
        legacy = secret_name.startswith(prefix) and _SUFFIX_RX.fullmatch(secret_name, len(prefix))
        return bool(legacy) and (name == secret_name or (  # or the secret's name plus a suffix
            name.startswith(secret_name) and _VOLUME_SUFFIX_RX.fullmatch(name, len(secret_name)) is not None))
    if len(v) == 2 and "projected" in v and _PROJECTED_NAME.fullmatch(name):
        projected = v["projected"]
        if not isinstance(projected, dict) or not projected.keys() <= _PROJECTED_KEYS:
            return False
        kinds: set[str] = set()
        sources = projected.get("sources") or []
        if not isinstance(sources, list):
            return False
        for source in sources:
            if not isinstance(source, dict) or len(source) != 1:
                return False
            (kind, body), = source.items()
            kinds.add(kind)
            if kind == "serviceAccountToken" and (not isinstance(body, dict) or body.get("audience")):
                return False
            if kind == "configMap" and (not isinstance(body, dict) or body.get("name") != "kube-root-ca.crt"):
                return False
        return kinds == _PROJECTED_SOURCES
    return False


TYPE = RuleType(
    name="service-account-token",
    doc=(
        "`automountServiceAccountToken: false`, and the token volume and mounts the API server "
        "injected before the webhook are removed."
    ),
    parse=parse,
    mutate=mutate,
    default_kinds=ALL_POD_TEMPLATE_KINDS,
    default_operations=("CREATE", "UPDATE"),
    mutate_operations=("CREATE", "UPDATE"),
    decides_pod=True,
    default_failure_policy="Fail",
    order=40,
)
