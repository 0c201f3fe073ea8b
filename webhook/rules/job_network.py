"""Job networking: every member of a multi-pod workload gets a stable, routable hostname,
and the list of its members as a hostfile and environment variables.

What Volcano's ``svc`` plugin, JobSet and the MPI operator give their jobs, for
plain Pods and Jobs. Admission only *stamps* the pods; the reconciler creates
the objects the stamps point at (the headless Service named ``spec.subdomain``,
the hostfile ConfigMap, and in namespaces the bundle isolates, a NetworkPolicy).
The webhook holds no API credentials.

- A gang member (``batchgate.io/pod-group`` with a size over 1, as the pod-group
  policy writes it) gets ``spec.subdomain: <service>`` (the group name, as a
  DNS-1035 label: see :func:`webhook.jobnet.service_name`) and the label
  ``batchgate.io/network: <service>`` by which the Service and NetworkPolicy
  select the members.
- **Stable hostnames.** A gang Job whose pods all run at once is made
  ``completionMode: Indexed`` by the pod-group policy, so the Job controller
  gives each pod ``spec.hostname: <job>-<index>``: ``<job>-<index>.<service>``
  resolves from any pod in the namespace and names the same rank when the pod
  is replaced. A bare Pod with a name gets ``spec.hostname`` = its name. Pods
  that already have a hostname keep it. A pod with ``generateName`` only and no
  hostname (a non-indexed Job's: its name is chosen by the API server after the
  webhooks) gets none: it is in the Service, but not in the hostfile, which
  lists only members with a resolvable name.
- Every container gets ``BATCHGATE_SERVICE``, ``BATCHGATE_NUM_HOSTS``,
  ``BATCHGATE_HOSTFILE`` (the mounted file) and ``BATCHGATE_HOSTS`` (comma
  separated, read from the ConfigMap when the container starts), and the
  ConfigMap ``<service>-hostfile`` mounted read-only at ``mountPath``.
  With ``waitForHostfile`` (default) the ConfigMap reference is not optional, so
  the kubelet holds the containers until the reconciler has written the
  ConfigMap, which it does once every member exists: all ranks start with the
  complete list.
- ``batchgate.io/connect-to: "<workload>[,<workload>...]"`` on the workload (Job
  or its template, or a bare pod) names workloads in the same namespace it may
  talk to; names are normalized to their Service names. A connection holds only
  when both sides name each other (the reconciler checks).
- ``batchgate.io/slots`` sets the slots per member in the hostfile; else
  ``slots`` (a number, or ``cpu``: the whole CPUs the pod requests, at least 1).

A Job is stamped in its template; a Job with only ``generateName`` (its name, so
its group, is unknown at admission) and CronJobs (each run is a new Job,
admitted as a Job) are stamped on their pods. A template or pod whose
``spec.subdomain`` names something else is left alone: the user runs their own
Service.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from ..contract import (
    CONNECT_TO_ANNOTATION,
    NETWORK_LABEL,
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_LABEL,
    SLOTS_ANNOTATION,
)
from ..jobnet import (
    CLUSTER_DNS,
    HOSTS_KEY,
    MAX_PEERS,
    Isolation,
    Proxy,
    hostfile_name,
    hostname_for,
    parse_peers,
    service_name,
)
from ..units import parse_quantity, shown
from .base import Ctx, Finding, Path, RuleType, deny, dig, pod_spec_parts, warn

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..draft import Draft
    from ..yamlsrc import Node

VOLUME = "batchgate-hostfile"
HOSTFILE_FILE = "hostfile"
MAX_SLOTS = 4096
_SERVICE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_WORKLOAD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class Settings:
    mount_path: str = "/etc/batchgate"
    """Where the hostfile ConfigMap is mounted (``<mountPath>/hostfile``)."""
    slots: int | Literal["cpu"] = 1
    """Slots per member in the hostfile, unless the workload says (``batchgate.io/slots``)."""
    wait_for_hostfile: bool = True
    """Containers start only once the hostfile exists (non-optional ConfigMap references)."""
    isolation: tuple[Isolation, ...] = ()
    """Namespace rules, first match wins; none: no NetworkPolicies (the default). Only the
    reconciler acts on them (``QueuePolicy.isolation_for``)."""


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("mountPath", "slots", "waitForHostfile", "isolation"))
    d = Settings()
    mount = node.get("mountPath")
    slots: int | Literal["cpu"] = d.slots
    if (s := node.get("slots")) is not None:
        slots = "cpu" if s.value == "cpu" else s.int(minimum=1, maximum=MAX_SLOTS)
    wait = node.get("waitForHostfile")
    rules: list[Isolation] = []
    for r in (iso.seq() if (iso := node.get("isolation")) is not None else []):
        r.mapping(allowed=("namespaces", "proxy", "egress", "dns"))
        names = r.req("namespaces").str_list()
        if not names:
            r.req("namespaces").fail("name at least one namespace (globs like hpc-*)")
        proxy = None
        if (p := r.get("proxy")) is not None:
            p.mapping(allowed=("namespaceSelector", "podSelector"))
            ns_sel = _selector(p.req("namespaceSelector"))
            pod_sel = _selector(p.req("podSelector"))
            proxy = Proxy(ns_sel, pod_sel)
        egress = r.get("egress")
        dns = CLUSTER_DNS
        if (where := r.get("dns")) is not None:
            where.mapping(allowed=("namespaceSelector", "podSelector"))
            dns = Proxy(_selector(where.req("namespaceSelector")), _selector(where.req("podSelector")))
        rules.append(Isolation(
            namespaces=names, proxy=proxy,
            egress=egress.enum("open", "restricted") if egress else "open",
            dns=dns,
        ))
    return Settings(
        mount_path=mount.str(pattern=r"/[^:]*", hint="an absolute path") if mount else d.mount_path,
        slots=slots,
        wait_for_hostfile=wait.bool() if wait is not None else d.wait_for_hostfile,
        isolation=tuple(rules),
    )


def _selector(node: Node) -> tuple[tuple[str, str], ...]:
    """A label map (``matchLabels``); an empty one would match everything, so it is refused."""
    labels = node.str_map()
    if not labels:
        node.fail("give at least one label (an empty selector would let every pod in)")
    for key in labels:
        if not _LABEL_KEY.fullmatch(key):
            node.fail(f"{key!r} is not a label key")
    return tuple(sorted(labels.items()))


# -- what a workload asks for ------------------------------------------------------
def _size(value: Any) -> int | None:
    if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]{0,8}", value):
        return int(value)
    return None


def _service(labels: dict[str, Any]) -> str | None:
    """The workload's Service: the stamped label, or derived from a pod group of more than one."""
    net = labels.get(NETWORK_LABEL)
    if isinstance(net, str) and net:
        return net if _SERVICE.fullmatch(net) and len(net) <= 63 else None
    group, size = labels.get(POD_GROUP_LABEL), _size(labels.get(POD_GROUP_SIZE_LABEL))
    if isinstance(group, str) and group and size is not None and size > 1:
        return service_name(group)
    return None


def _slots(settings: Settings, annotations: list[dict[str, Any]], spec: dict[str, Any]) -> str:
    for ann in annotations:
        given = ann.get(SLOTS_ANNOTATION)
        if given is not None:
            return str(given)
    if settings.slots != "cpu":
        return str(settings.slots)
    total = Fraction(0)
    for c in spec.get("containers") or []:
        res = c.get("resources") or {} if isinstance(c, dict) else {}
        cpu = (res.get("requests") or {}).get("cpu") or (res.get("limits") or {}).get("cpu")
        if cpu is not None:
            with contextlib.suppress(ValueError):
                total += parse_quantity(cpu)
    return str(max(int(total), 1))


def _peers(annotations: list[dict[str, Any]]) -> str | None:
    for ann in annotations:
        given = ann.get(CONNECT_TO_ANNOTATION)
        if isinstance(given, str):
            # more than MAX_PEERS is denied by validate; the mutation does no more work than that
            return ",".join(service_name(p) for p in parse_peers(given, most=MAX_PEERS + 1))
    return None


# -- mutation -----------------------------------------------------------------------
def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    shape = ctx.shape
    if shape is None or shape.kind not in ("Pod", "Job"):
        return []
    meta = draft.get(*shape.pod_meta)
    spec = draft.get(*shape.pod_spec)
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return []
    service = _service(meta.get("labels") or {})
    if service is None:
        return []
    own = spec.get("subdomain")
    if own and own != service:
        return [warn(
            f"{ctx.subject}: spec.subdomain {own!r} is kept, so batchgate gives this workload no "
            f"Service {service!r}, hostfile or network policy; run your own headless Service {own!r}"
        )]
    ann_sources = [meta.get("annotations") or {}]
    if not shape.is_pod:
        ann_sources.append(draft.get("metadata", "annotations") or {})
    size = _size((meta.get("labels") or {}).get(POD_GROUP_SIZE_LABEL)) or 1
    _stamp(settings, draft, meta_path=shape.pod_meta, spec_path=shape.pod_spec, service=service, size=size,
           slots=_slots(settings, ann_sources, spec), peers=_peers(ann_sources))
    if shape.is_pod and not spec.get("hostname") and (name := draft.get("metadata", "name")):
        draft.set("spec", "hostname", hostname_for(str(name)))
    return []


def _stamp(settings: Settings, draft: Draft, *, meta_path: Path, spec_path: Path, service: str, size: int,
           slots: str, peers: str | None) -> None:
    draft.ensure(*meta_path, "labels", NETWORK_LABEL, service)
    draft.ensure(*meta_path, "annotations", SLOTS_ANNOTATION, slots)
    if peers is not None:
        draft.ensure(*meta_path, "annotations", CONNECT_TO_ANNOTATION, peers)
    if draft.get(*spec_path, "subdomain") != service:
        draft.set(*spec_path, "subdomain", service)
    spec = draft.get(*spec_path)
    configmap = hostfile_name(service)
    optional = not settings.wait_for_hostfile
    mount = settings.mount_path.rstrip("/") or "/"
    env: list[dict[str, Any]] = [
        {"name": "BATCHGATE_SERVICE", "value": service},
        {"name": "BATCHGATE_NUM_HOSTS", "value": str(size)},
        {"name": "BATCHGATE_HOSTFILE", "value": f"{mount.rstrip('/')}/{HOSTFILE_FILE}"},
        {"name": "BATCHGATE_HOSTS",
         "valueFrom": {"configMapKeyRef": {"name": configmap, "key": HOSTS_KEY, "optional": optional}}},
    ]
    volumes = spec.get("volumes") or []
    has_volume = any(isinstance(v, dict) and v.get("name") == VOLUME for v in volumes)
    if not has_volume:
        draft.edit(*spec_path, "volumes", create=list).append(
            {"name": VOLUME, "configMap": {"name": configmap, "optional": optional}})
    for key, i, c in pod_spec_parts(spec):
        names = {e.get("name") for e in c.get("env") or [] if isinstance(e, dict)}
        missing = [e for e in env if e["name"] not in names]
        if missing:
            draft.edit(*spec_path, key, i, "env", create=list).extend(missing)
        mounts = c.get("volumeMounts") or []
        if not any(isinstance(m, dict) and (m.get("name") == VOLUME or str(m.get("mountPath", "")).rstrip("/")
                                            == mount.rstrip("/")) for m in mounts):
            draft.edit(*spec_path, key, i, "volumeMounts", create=list).append(
                {"name": VOLUME, "mountPath": mount, "readOnly": True})



# -- validation ---------------------------------------------------------------------
def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    """The stamps' values, wherever set (CREATE) or changed (UPDATE: labels and annotations stay
    writable, and the reconciler reads them). An UPDATE that leaves a value as it was is not
    judged on it, so an object stored with one refused now can still be changed and deleted."""
    shape = ctx.shape
    if shape is None:
        return []
    findings: list[Finding] = []
    paths = [shape.pod_meta] if shape.is_pod else [shape.pod_meta, ("metadata",)]
    old = ctx.old_object if ctx.operation == "UPDATE" and isinstance(ctx.old_object, dict) else None
    for path in paths:
        meta = dig(obj, path)
        if not isinstance(meta, dict):
            continue
        was = dig(old, path) if old is not None else None
        net = _set(meta, was, "labels", NETWORK_LABEL)
        if net is not None and not (isinstance(net, str) and len(net) <= 63 and _SERVICE.fullmatch(net)):
            findings.append(deny(
                f"label {NETWORK_LABEL} must name a Service (a DNS label starting with a letter, "
                f"at most 63 characters); got {shown(net)}"))
        slots = _set(meta, was, "annotations", SLOTS_ANNOTATION)
        if slots is not None and not (_size(slots) is not None and int(slots) <= MAX_SLOTS):
            findings.append(deny(
                f"annotation {SLOTS_ANNOTATION} must be a whole number of slots from 1 to {MAX_SLOTS}, "
                f"like \"8\"; got {shown(slots)}"))
        peers = _set(meta, was, "annotations", CONNECT_TO_ANNOTATION)
        if peers is not None:
            findings += _peer_problems(peers)
    return findings


def _set(meta: dict[str, Any], was: Any, where: str, key: str) -> Any:
    """``meta[where][key]`` when set (CREATE: ``was`` None) or changed from ``was`` (UPDATE), else None."""
    values = meta.get(where)
    value = values.get(key) if isinstance(values, dict) else None
    if isinstance(was, dict):
        before = was.get(where)
        if isinstance(before, dict) and before.get(key) == value:
            return None
    return value


def _peer_problems(peers: Any) -> list[Finding]:
    """``batchgate.io/connect-to``: at most ``MAX_PEERS`` workload names (DNS subdomains of at most
    253 characters; the webhook stamps them on pods as Service names)."""
    names = parse_peers(peers, most=MAX_PEERS + 1) if isinstance(peers, str) else ()
    if len(names) > MAX_PEERS:
        return [deny(f"annotation {CONNECT_TO_ANNOTATION} names more than {MAX_PEERS} workloads (at most "
                     f"{MAX_PEERS}, comma-separated, connected workloads are few)")]
    bad = [p for p in names if len(p) > 253 or not _WORKLOAD_NAME.fullmatch(p)]
    if bad or not isinstance(peers, str):
        return [deny(
            f"annotation {CONNECT_TO_ANNOTATION} must list workload names in this namespace, "
            f"separated by commas; {', '.join(map(shown, bad)) or shown(peers)} is not one")]
    return []


def namespace_label_keys(settings: Settings) -> tuple[str, ...]:
    """The namespace label keys isolation selects by: its proxy's (let into every isolated
    workload) and its DNS's (reachable from them). namespace-opt-out keeps them admins' to set."""
    return tuple(dict.fromkeys(k for rule in settings.isolation for where in (rule.proxy, rule.dns)
                               if where is not None for k, _ in where.namespace_selector))


TYPE = RuleType(
    name="job-network",
    doc=(
        "Multi-pod workloads: stable hostnames (`<job>-<index>` of Indexed gang Jobs, a bare pod's "
        "name), `spec.subdomain` = the workload's headless "
        "Service, the member list as a mounted hostfile and `BATCHGATE_*` variables; connected "
        "workloads (`batchgate.io/connect-to`) and per-namespace isolation for the reconciler."
    ),
    parse=parse,
    mutate=mutate,
    validate=validate,
    # UPDATE: validation only (the engine mutates on mutate_operations alone), for the labels and
    # annotations users can still change and the reconciler reads (issue 27: connect-to was
    # unbounded on UPDATE).
    default_operations=("CREATE", "UPDATE"),
    order=45,
    namespace_label_keys=namespace_label_keys,
)
