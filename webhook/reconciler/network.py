"""Job networking, planned: per workload a headless Service, a hostfile ConfigMap and, where
the bundle isolates the namespace, a NetworkPolicy. A pure function of the snapshot.

The webhook (policy ``job-network``) stamped every member pod: the label
``batchgate.io/network: <service>`` with ``spec.subdomain: <service>``, its
hostname, slots and ``batchgate.io/connect-to``. From those alone this module
derives, per ``(namespace, service)``:

- **Service** ``<service>``: headless (``clusterIP: None``), selecting the
  members, ``publishNotReadyAddresses`` so that names resolve before the pods are
  ready (MPI launchers look workers up while they start). ``<hostname>.<service>``
  then resolves in the namespace.
- **ConfigMap** ``<service>-hostfile``: keys ``hostfile`` (``<host>.<service>
  slots=<n>``, one line per member), ``hosts`` (comma separated) and ``peers``
  (members of connected workloads). First written once all members of the group
  exist (the pods wait for it, see the policy), then kept current.
- **NetworkPolicy** ``<service>`` in namespaces an ``isolation`` rule matches:
  ingress only from the members, from connected workloads, and from the proxy;
  with ``egress: restricted``, egress only to those and DNS. Deleted again when
  the namespace stops being isolated.

A **connection** holds only when both workloads name each other in
``batchgate.io/connect-to`` (every member of each, so one forged pod cannot
open a door).

Ownership: every object is owned by the members' Job when they all have the
same controlling Job, else by every member pod (bare pods), so the garbage
collector removes it with the workload, even while batchgate is down. Only
objects labelled ``app.kubernetes.io/managed-by=batchgate`` are changed;
each carries ``batchgate.io/spec-hash`` of the state it was written from, so a
steady cluster plans nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..contract import MANAGED_BY, MANAGED_BY_LABEL, NETWORK_LABEL, SPEC_HASH_ANNOTATION
from ..jobnet import HOSTFILE_KEY, HOSTS_KEY, PEERS_KEY, Isolation, hostfile_name
from .actions import Action, NetWrite, Unplannable, unplannable
from .model import (
    CONFIG_MAP,
    NETWORK_POLICY,
    SERVICE,
    Kind,
    NetObjectView,
    PodView,
    Ref,
    Snapshot,
    owns,
)

NetKey = tuple[str, str]  # (namespace, service)


@dataclass(frozen=True, slots=True)
class Workload:
    namespace: str
    service: str
    members: tuple[PodView, ...]  # live (not terminal, not being deleted), in hostfile order
    pods: tuple[PodView, ...]  # every pod carrying the stamps, for ownership
    size: int  # the group size the pods were admitted with
    connect_to: frozenset[str]  # peers every member names
    owners: tuple[Ref, ...]


def workloads(snapshot: Snapshot, excluded: Callable[[str], bool]) -> dict[NetKey, Workload]:
    """The stamped pods, grouped by (namespace, service)."""
    by: dict[NetKey, list[PodView]] = {}
    for p in snapshot.pods.values():
        if p.network is not None and not excluded(p.ref.namespace):
            by.setdefault((p.ref.namespace, p.network.service), []).append(p)
    out: dict[NetKey, Workload] = {}
    for (ns, service), pods in by.items():
        pods.sort(key=lambda p: p.ref.name)
        members = [p for p in pods if not p.terminal and not p.deleting and p.network and p.network.hostname]
        members.sort(key=lambda p: (p.network.index if p.network and p.network.index is not None else -1,
                                    p.ref.name))
        live = [p for p in pods if not p.deleting] or pods
        peers = frozenset.intersection(*(frozenset(p.network.connect_to) for p in live if p.network)) \
            if live else frozenset()
        owners = _owners(snapshot, pods)
        if not owners:
            continue
        out[(ns, service)] = Workload(
            namespace=ns, service=service, members=tuple(members), pods=tuple(pods),
            size=max((p.group_size or 1 for p in live), default=1),
            connect_to=peers - {service}, owners=owners,
        )
    return out


def _owners(snapshot: Snapshot, pods: Sequence[PodView]) -> tuple[Ref, ...]:
    """The Job all pods belong to (``model.owns``: the rule every module asks, the maker record
    included), if it exists and is not going; else the pods themselves (a pod re-parented to a Job
    whose controller did not make it is a job of its own, as the planner times it)."""
    jobs = {p.owner.uid: p.owner for p in pods if p.owner is not None and p.owner.kind == "Job"}
    if len(jobs) == 1 and all(p.owner is not None and p.owner.uid in jobs for p in pods):
        ref = next(iter(jobs.values()))
        job = snapshot.jobs.get((ref.namespace, ref.name))
        if job is None or job.ref.uid != ref.uid or job.deleting:
            return ()  # the Job is gone or going: the garbage collector takes what it owned
        if all(owns(job, p) for p in pods):
            return (Ref("batch/v1", "Job", ref.namespace, ref.name, ref.uid),)
    return tuple(Ref("v1", "Pod", p.ref.namespace, p.ref.name, p.ref.uid) for p in pods if not p.deleting)


def connected(w: Workload, all_: Mapping[NetKey, Workload]) -> tuple[Workload, ...]:
    """Peers that name ``w`` back."""
    out = []
    for peer in sorted(w.connect_to):
        other = all_.get((w.namespace, peer))
        if other is not None and w.service in other.connect_to:
            out.append(other)
    return tuple(out)


# -- the objects -----------------------------------------------------------------
def _meta(w: Workload, name: str) -> dict[str, Any]:
    return {
        "name": name, "namespace": w.namespace,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY, NETWORK_LABEL: w.service},
        "ownerReferences": [{"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid}
                            for o in w.owners],
    }


def service(w: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": _meta(w, w.service),
        "spec": {"clusterIP": "None", "selector": {NETWORK_LABEL: w.service}, "publishNotReadyAddresses": True},
    }


def _host(p: PodView) -> str:
    assert p.network is not None
    return f"{p.network.hostname}.{p.network.service}"


def hostfile(w: Workload, peers: Sequence[Workload]) -> dict[str, Any]:
    lines = [f"{_host(p)} slots={p.network.slots}" for p in w.members if p.network]
    peer_hosts = [_host(p) for peer in peers for p in peer.members]
    return {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(w, hostfile_name(w.service)),
        "data": {
            HOSTFILE_KEY: "".join(f"{line}\n" for line in lines),
            HOSTS_KEY: ",".join(_host(p) for p in w.members),
            PEERS_KEY: "".join(f"{h}\n" for h in peer_hosts),
        },
    }


def network_policy(w: Workload, peers: Sequence[Workload], rule: Isolation) -> dict[str, Any]:
    def members_of(s: str) -> dict[str, Any]:
        return {"podSelector": {"matchLabels": {NETWORK_LABEL: s}}}

    inside = [members_of(w.service), *(members_of(p.service) for p in peers)]
    sources = list(inside)
    if rule.proxy is not None:
        sources.append({"namespaceSelector": {"matchLabels": dict(rule.proxy.namespace_selector)},
                        "podSelector": {"matchLabels": dict(rule.proxy.pod_selector)}})
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {NETWORK_LABEL: w.service}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": sources}],
    }
    if rule.egress == "restricted":
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["egress"] = [
            {"to": inside},
            {"to": [{"namespaceSelector": {"matchLabels": dict(rule.dns.namespace_selector)},
                     "podSelector": {"matchLabels": dict(rule.dns.pod_selector)}}],
             "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        ]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(w, w.service), "spec": spec}


def digest(body: Mapping[str, Any]) -> str:
    md = body["metadata"]
    content = {k: v for k, v in body.items() if k not in ("metadata", "apiVersion", "kind")}
    content["labels"], content["owners"] = md["labels"], md["ownerReferences"]
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


# -- the plan ---------------------------------------------------------------------
def plan_network(
    snapshot: Snapshot,
    *,
    isolation_for: Callable[[str], Isolation | None],
    excluded: Callable[[str], bool],
    failed: list[Unplannable] | None = None,
) -> list[Action]:
    """Create or update what each workload should have; delete NetworkPolicies of namespaces no
    longer isolated. Nothing when ``net_objects`` is unknown (the cache could not list them).
    ``failed``: where a workload that cannot be planned is recorded (with a ``cannot-plan`` action
    on its first owner, and nothing else planned for it) while the others go on; None: the error
    propagates."""
    existing = snapshot.net_objects
    if existing is None:
        return []
    ws = workloads(snapshot, excluded)
    actions: list[Action] = []
    wanted: set[tuple[str, str, str]] = set()
    for w in sorted(ws.values(), key=lambda w: (w.namespace, w.service)):
        try:
            peers = connected(w, ws)
            bodies: list[tuple[Kind, dict[str, Any]]] = [(SERVICE, service(w))]
            if len(w.members) >= w.size:
                bodies.append((CONFIG_MAP, hostfile(w, peers)))
            rule = isolation_for(w.namespace)
            if rule is not None:
                bodies.append((NETWORK_POLICY, network_policy(w, peers, rule)))
        except Exception as e:
            if failed is None or not w.owners:
                raise
            unplannable("network", w.owners[0], e, failed, actions)
            continue
        for kind, body in bodies:
            name = body["metadata"]["name"]
            wanted.add((kind.kind, w.namespace, name))
            if kind is CONFIG_MAP and (kind.kind, w.namespace, name) not in existing and len(w.members) < w.size:
                continue
            action = _ensure(kind, body, existing.get((kind.kind, w.namespace, name)), w)
            if action is not None:
                actions.append(action)
    for (kind_name, ns, name), obj in sorted(existing.items()):
        if kind_name == NETWORK_POLICY.kind and obj.managed and not obj.deleting and isolation_for(ns) is None:
            actions.append(Action(
                kind="delete-network", target=obj.ref, reason="IsolationLifted",
                message=f"namespace {ns} is no longer isolated by the bundle: NetworkPolicy {name} removed",
                key=f"lifted|{obj.resource_version}", quiet=True,
                net=NetWrite("delete", NETWORK_POLICY.kind, ns, name, uid=obj.ref.uid),
            ))
    return actions


def _ensure(kind: Kind, body: dict[str, Any], have: NetObjectView | None, w: Workload) -> Action | None:
    h = digest(body)
    body["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: h}
    name = body["metadata"]["name"]
    target = w.owners[0]
    what = f"{kind.kind} {w.namespace}/{name}"
    if have is None:
        return Action(kind="create-network", target=target, reason="NetworkCreated",
                      message=f"{what} for {len(w.members)} member(s)", key=f"{kind.kind}|{name}|{h}",
                      quiet=True, net=NetWrite("create", kind.kind, w.namespace, name, body=body))
    if not have.managed or have.deleting or have.digest == h:
        return None
    return Action(kind="update-network", target=target, reason="NetworkUpdated",
                  message=f"{what} now for {len(w.members)} member(s)", key=f"{kind.kind}|{name}|{h}",
                  quiet=True, net=NetWrite("update", kind.kind, w.namespace, name, body=body,
                                           uid=have.ref.uid, resource_version=have.resource_version))
