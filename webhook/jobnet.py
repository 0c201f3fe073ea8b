"""Names of a multi-pod workload's network, shared by the webhook and the reconciler.

The webhook stamps them on the pods at admission (``spec.subdomain``, the
``batchgate.io/network`` label, the hostfile volume); the reconciler creates the
objects they point at (headless Service, hostfile ConfigMap, NetworkPolicy).
Both derive every name here, so they cannot drift apart. Pure functions: no
I/O, no clock.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from .kubefields import NAMESPACE_NAME_LABEL

__all__ = [
    "HOSTFILE_KEY",
    "HOSTS_KEY",
    "MAX_PEERS",
    "PEERS_KEY",
    "Egress",
    "Isolation",
    "Proxy",
    "hostfile_name",
    "hostname_for",
    "is_dns_label",
    "parse_peers",
    "peers_view",
    "service_name",
]

HOSTFILE_KEY = "hostfile"  # "<host>.<service> slots=<n>", one line per member
HOSTS_KEY = "hosts"  # "<host>.<service>" comma-separated (the BATCHGATE_HOSTS variable)
PEERS_KEY = "peers"  # "<host>.<peer service>" of connected workloads, one per line
MAX_LABEL = 63
# batchgate.io/connect-to names at most this many workloads: the job-network policy denies more (on
# CREATE and UPDATE), and the reconciler's pod view keeps no more whatever was stored.
MAX_PEERS = 64
_PEER = re.compile(r"[^\s,]+")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
Egress = Literal["open", "restricted"]


@dataclass(frozen=True, slots=True)
class Proxy:
    """Who may reach every isolated workload from outside: pods matching ``pod_selector`` in the
    namespaces matching ``namespace_selector`` (both as label maps)."""

    namespace_selector: tuple[tuple[str, str], ...]
    pod_selector: tuple[tuple[str, str], ...]


# The cluster's DNS pods (CoreDNS keeps kube-dns's label), found through the namespace name label
# the API server sets itself.
CLUSTER_DNS = Proxy(namespace_selector=((NAMESPACE_NAME_LABEL, "kube-system"),),
                    pod_selector=(("k8s-app", "kube-dns"),))


@dataclass(frozen=True, slots=True)
class Isolation:
    """One namespace rule: workloads in ``namespaces`` (globs) get a NetworkPolicy."""

    namespaces: tuple[str, ...]
    proxy: Proxy | None = None
    egress: Egress = "open"
    dns: Proxy = CLUSTER_DNS  # where restricted egress may still resolve names


def is_dns_label(text: str) -> bool:
    return len(text) <= MAX_LABEL and bool(_DNS_LABEL.fullmatch(text))


def _squash(text: str, *, pattern: re.Pattern[str], prefix: str) -> str:
    """``text`` as a DNS label matching ``pattern``: unchanged when it already is one; otherwise
    lower-cased, other characters made '-', cut, and suffixed with 8 hex digits of its SHA-256
    so that two different inputs never meet."""
    if len(text) <= MAX_LABEL and pattern.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    head = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if pattern is _DNS_1035 and not head[:1].isalpha():
        head = f"{prefix}-{head}".strip("-")
    head = head[: MAX_LABEL - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def service_name(group: str) -> str:
    """The headless Service (and the pods' ``spec.subdomain``) of pod group ``group``: the group
    name itself when it is a valid Service name (a DNS-1035 label), as for every Job name
    without dots that starts with a letter."""
    return _squash(group, pattern=_DNS_1035, prefix="w")


def hostfile_name(service: str) -> str:
    """The hostfile ConfigMap of the workload whose Service is ``service``."""
    return f"{service}-hostfile"


def hostname_for(pod_name: str) -> str:
    """A pod's ``spec.hostname``: its name, when that is a DNS label (pods of Jobs always are)."""
    return _squash(pod_name, pattern=_DNS_LABEL, prefix="h")


def parse_peers(text: str | None, *, most: int | None = None) -> tuple[str, ...]:
    """``batchgate.io/connect-to: "solver, viz"`` -> ("solver", "viz"): workload names in the same
    namespace, comma or space separated, in order, without repeats; with ``most``, the first that
    many. Linear in the text, and with ``most`` it stops there: an annotation is anyone's to write
    on an UPDATE (85,000 names took the old quadratic parse a minute)."""
    if not text or not isinstance(text, str):
        return ()
    out: dict[str, None] = {}
    for m in _PEER.finditer(text):
        out[m.group()] = None
        if most is not None and len(out) >= most:
            break
    return tuple(out)


def peers_view(text: str | None) -> tuple[tuple[str, ...], int]:
    """What the reconciler keeps of a pod's ``batchgate.io/connect-to`` (the Service names the
    webhook stamped): at most :data:`MAX_PEERS` names that are DNS labels, and how many names it
    did not keep (past the bound, or not a Service name), whatever was stored."""
    if not text or not isinstance(text, str):
        return (), 0
    kept: dict[str, None] = {}
    dropped = 0
    for m in _PEER.finditer(text):
        name = m.group()
        if name in kept:
            continue
        if len(kept) < MAX_PEERS and is_dns_label(name):
            kept[name] = None
        else:
            dropped += 1
    return tuple(kept), dropped
