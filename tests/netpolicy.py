"""NetworkPolicy semantics (networking.k8s.io/v1) as a CNI applies them, for tests.

No CNI runs next to the test API server, so the tests read back the stored
NetworkPolicies and ask this evaluator whether a connection would pass:
a pod is isolated for a direction when some policy in its namespace selects it
with that policy type; then a connection passes only if some rule of some such
policy admits the peer (and port). Both ends must allow it: the source's egress
and the destination's ingress. ipBlock peers and named ports are not used by
batchgate and are not supported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    namespace: str
    labels: Mapping[str, str]
    namespace_labels: Mapping[str, str] = field(default_factory=dict)


def _selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector; an empty one selects everything."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(peer: Mapping[str, Any], policy_ns: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        raise NotImplementedError("ipBlock")
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    if ns_sel is None:
        in_ns = other.namespace == policy_ns
    else:
        in_ns = _selects(ns_sel, other.namespace_labels)
    return in_ns and _selects(pod_sel, other.labels)


def _port_matches(ports: list[Mapping[str, Any]] | None, protocol: str, port: int) -> bool:
    if not ports:
        return True
    return any((p.get("protocol") or "TCP") == protocol and p.get("port") in (None, port) for p in ports)


def _types(policy: Mapping[str, Any]) -> list[str]:
    spec = policy["spec"]
    if spec.get("policyTypes"):
        return list(spec["policyTypes"])
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def _allowed(policies: Iterable[Mapping[str, Any]], me: Endpoint, other: Endpoint, direction: str,
             protocol: str, port: int) -> bool:
    field_, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    isolated = False
    for pol in policies:
        if pol["metadata"]["namespace"] != me.namespace or direction not in _types(pol):
            continue
        if not _selects(pol["spec"].get("podSelector"), me.labels):
            continue
        isolated = True
        for rule in pol["spec"].get(field_) or []:
            peers = rule.get(peers_key)
            if (not peers or any(_peer_matches(p, me.namespace, other) for p in peers)) and \
                    _port_matches(rule.get("ports"), protocol, port):
                return True
    return not isolated


def connection_allowed(policies: Iterable[Mapping[str, Any]], src: Endpoint, dst: Endpoint, *,
                       protocol: str = "TCP", port: int = 8080) -> bool:
    pols = list(policies)
    return (_allowed(pols, src, dst, "Egress", protocol, port)
            and _allowed(pols, dst, src, "Ingress", protocol, port))
