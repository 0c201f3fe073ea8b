"""What the planner sees: slim, immutable views of cluster objects.

The cache turns each object the API sends into a view once, when it arrives
(``pod_view``, ``job_view``, ...), so a planning pass never parses JSON or
timestamps: it only reads attributes. That is what keeps a pass over 10,000
pods in a few milliseconds, and it keeps memory down too: the raw objects are
dropped after conversion.

Nothing here imports ``kubernetes`` or reads the clock; the tests build views
from plain dicts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any

from ..contract import (
    API_VERSION,
    CONNECT_TO_ANNOTATION,
    COSCHEDULING_LABEL,
    DEADLINE_ANNOTATION,
    EXPECTED_RUNTIME_ANNOTATION,
    EXPECTED_START_ANNOTATION,
    GANG_RESTART_ANNOTATION,
    MAINTENANCE_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NETWORK_LABEL,
    NEXT_MAINTENANCE_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_LABEL,
    QUEUE_GATE,
    QUEUE_LABEL,
    QUEUED_ANNOTATION,
    QUEUED_BY_SUSPEND,
    REQUEUED_AT_ANNOTATION,
    SEGMENT_LABEL,
    SLOTS_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    START_BY_ANNOTATION,
    STARTED_AT_ANNOTATION,
    TIME_LIMIT_ANNOTATION,
    WARNED_FOR_ANNOTATION,
)
from ..jobnet import MAX_LABEL, peers_view
from ..kubefields import DEFAULT_SCHEDULER, REQUIRED
from ..units import MAX_TEXT, parse_duration, parse_quantity, parse_time
from ..windows import Window, parse_window
from ..workloads import (
    DEFAULT_FAILURE_POLICY,
    SHAPES,
    FailurePolicy,
    admission_record,
    failure_policy,
)

# -- the names on objects --------------------------------------------------
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation (and, 1.28+, label)

# Pod ``status.reason`` values that mean the pod was stopped from outside (its
# node went away, the kubelet evicted or shut it down, the scheduler preempted
# it): an interruption, not a failure of the job itself.
INTERRUPT_REASONS = frozenset({
    "NodeLost", "Evicted", "Shutdown", "NodeShutdown", "Terminated", "Preempting",
    "Preempted", "UnexpectedAdmissionError", "NodeAffinity",
})
# The pod condition by which Kubernetes (1.26+) marks a pod it is about to stop from outside:
# kube-scheduler's preemption, the Eviction API (drains), the taint manager, PodGC, the kubelet's
# evictions. A Job's podFailurePolicy can match it (the webhook gives gang Jobs an Ignore rule).
DISRUPTION_TARGET = "DisruptionTarget"
# The reasons batchgate writes into that condition on the gang members it takes down (a gang starts
# over together): its own doing, never an interruption from outside.
REASON_GANG_RESTART = "BatchgateGangRestart"  # a Job's gang: its Job makes the pods again
REASON_GANG_TEARDOWN = "BatchgateGangTeardown"  # bare pods of a group: they go for good
OWN_DISRUPTION_REASONS = frozenset({REASON_GANG_RESTART, REASON_GANG_TEARDOWN})
# ... and on the scavengers it takes room from for released work (victims.py): an interruption of
# theirs like kube-scheduler's preemption (reason PreemptionByScheduler), so it is not among the above.
REASON_PREEMPTED = "PreemptionByBatchgate"
# ...and on a pod it deletes past a maintenance window's drain deadline: an interruption from outside
# for the pod's gang, as an eviction through the Eviction API (which writes EvictionByEvictionAPI).
REASON_MAINTENANCE_DRAIN = "BatchgateMaintenanceDrain"

Key = tuple[str, str]  # (namespace, name); ("", name) for cluster-scoped objects


@dataclass(frozen=True, slots=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    selector: str = ""  # the cache lists and watches only objects matching this label selector
    fields: str = ""  # ... and this field selector

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path: all namespaces when ``namespace`` is None."""
        group_version = self.api_version
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


POD = Kind("v1", "Pod", "pods")
JOB = Kind("batch/v1", "Job", "jobs")
NODE = Kind("v1", "Node", "nodes", namespaced=False)
POD_GROUP = Kind("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups")
EVENT = Kind("v1", "Event", "events")
LEASE = Kind("coordination.k8s.io/v1", "Lease", "leases")
MAINTENANCE_WINDOW = Kind(API_VERSION, "MaintenanceWindow", "maintenancewindows", namespaced=False)
NAMESPACE = Kind("v1", "Namespace", "namespaces", namespaced=False)
SCAVENGER_JOB = Kind(API_VERSION, "ScavengerJob", "scavengerjobs")
CONFIG_MAP = Kind("v1", "ConfigMap", "configmaps")
PVC = Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims")
# Job networking (see ``network``): only the objects batchgate made are cached (ConfigMaps too,
# while reads of a ScavengerJob's ConfigMaps go to CONFIG_MAP directly).
SERVICE = Kind("v1", "Service", "services", selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
NET_CONFIG_MAP = Kind("v1", "ConfigMap", "configmaps", selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
NETWORK_POLICY = Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies",
                      selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
NET_KINDS = (SERVICE, NET_CONFIG_MAP, NETWORK_POLICY)
# A ScavengerJob segment's guard (see ``scavenger``).
PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
# What `batchgate audit` reads: every kind whose objects batchgate decides at CREATE.
CRON_JOB = Kind("batch/v1", "CronJob", "cronjobs")
AUDITED = (POD, JOB, CRON_JOB, *(Kind("apps/v1", k, k.lower() + "s") for k in ("Deployment", "StatefulSet", "DaemonSet")),
           SCAVENGER_JOB)
KINDS = {k.kind: k for k in (POD, JOB, NODE, POD_GROUP, EVENT, LEASE, MAINTENANCE_WINDOW, NAMESPACE,
                             SCAVENGER_JOB, CONFIG_MAP, PVC, SERVICE, NETWORK_POLICY, PDB)}


@dataclass(frozen=True, slots=True)
class Ref:
    """Enough to address an object, hang an Event on it, and fence a write with its uid."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


# -- views -----------------------------------------------------------------
Term = tuple[tuple[tuple[str, str, tuple[str, ...]], ...], tuple[tuple[str, str, tuple[str, ...]], ...]]


@dataclass(frozen=True, slots=True)
class PodSched:
    """What the shadow schedule (shadow.py) needs of a pod: its requests and where it may go."""

    cpu: int  # millicores requested (containers summed, init containers' max, overhead)
    mem: int  # bytes
    priority: int
    created: float
    node_selector: tuple[tuple[str, str], ...]
    terms: tuple[Term, ...]  # required node affinity: (matchExpressions, matchFields) per term, ORed
    tolerations: tuple[tuple[str, str, str, str], ...]  # (key, operator, value, effect)
    # The rules were longer than MAX_SCHED_TEXT and are not kept (the three above are empty): where
    # the pod may go is not known (the shadow schedule gives no estimate, no NeverFits is told).
    clipped: bool = False
    # spec.schedulerName (the API server's default when it names none): who binds it (shadow.py
    # places a pending pod only when kube-scheduler serves this name)
    scheduler: str = DEFAULT_SCHEDULER


@dataclass(frozen=True, slots=True)
class NetMember:
    """What the job-network policy stamped on a pod (``spec.subdomain`` == ``service``)."""

    service: str  # batchgate.io/network
    hostname: str  # spec.hostname
    slots: int  # batchgate.io/slots, 1 when absent or malformed
    connect_to: tuple[str, ...]  # batchgate.io/connect-to: peer Services (at most jobnet.MAX_PEERS)
    index: int | None  # an Indexed Job's completion index, for the hostfile's order
    connect_to_dropped: int = 0  # names of connect-to not kept: past MAX_PEERS, or not a Service name


@dataclass(frozen=True, slots=True)
class NetObjectView:
    """A Service, ConfigMap or NetworkPolicy batchgate made for a workload's network."""

    ref: Ref
    resource_version: str
    managed: bool
    digest: str  # batchgate.io/spec-hash: the desired state it was last written from
    deleting: bool


@dataclass(frozen=True, slots=True)
class Admitted:
    """The queue and time limit a Pod or Job was admitted with, as the webhook recorded them
    where nobody can change them afterwards (the containers' env: ``webhook.workloads``)."""

    queue: str
    time_limit: str
    limit: int | None  # seconds; None when malformed


MAX_UID = 36  # characters of a uid (Kubernetes makes them as RFC 4122 text)


def _admitted(obj: Mapping[str, Any], shape_key: tuple[str, str]) -> tuple[Admitted | None, str | None]:
    """The admission record's queue and limit, and its Job uid entry (None: none, a record
    written before batchgate recorded it, or no record)."""
    record = admission_record(obj, SHAPES[shape_key])
    if record is None:
        return None, None
    # cut (a queue name is a label value, a limit at most units.MAX_TEXT, a uid 36 characters):
    # what is past the cut names no queue, parses as no limit, equals no uid, as before, without
    # keeping or memoising it whole
    return (_admitted_of(record.queue[:MAX_LABEL + 1], record.time_limit[:MAX_TEXT + 1]),
            None if record.job is None else record.job[:MAX_UID + 1])


def admitted_queue(obj: JobView | PodView) -> str | None:
    """The queue a Pod or Job was admitted to: its admission record, which nobody can change, else
    (no record: admitted before records existed, or past the webhook) its label; None when neither."""
    return obj.admitted.queue if obj.admitted is not None else obj.queue


@lru_cache(maxsize=4096)
def _admitted_of(queue: str, time_limit: str) -> Admitted:
    """One instance per distinct record (a cluster has few): views stay small."""
    return Admitted(queue, time_limit, limit_seconds(time_limit))


@dataclass(frozen=True, slots=True)
class PodView:
    ref: Ref
    resource_version: str
    owner: Ref | None  # the controlling ownerReference
    phase: str
    node: str
    deleting: bool  # metadata.deletionTimestamp is set
    started: float | None  # earliest container start (init containers too), else status.startTime once running
    failure: str | None  # why it failed by its own doing (non-zero exit, OOMKilled, phase Failed), for people
    failed_at: float | None
    interrupted: str | None  # why it was stopped from outside (evicted, node lost, preempted), for people
    group: str | None  # batchgate.io/pod-group
    group_size: int | None  # batchgate.io/pod-group-size, when a positive integer
    pod_group_name: str | None  # the PodGroup the scheduler looks for
    queue: str | None
    time_limit: str | None
    limit: int | None  # time_limit in seconds; None when absent or malformed
    started_at: str | None  # the annotations the reconciler keeps, as written ...
    deadline: str | None
    warned_for: str | None
    started_at_t: float | None  # ... and parsed (None when absent or malformed)
    deadline_t: float | None
    warned_t: float | None
    next_maintenance: str | None = None  # batchgate.io/next-maintenance as written
    sched: PodSched | None = None
    expected_start: str | None = None  # batchgate.io/expected-start as written
    segment: int | None = None  # batchgate.io/segment label (ScavengerJob pods)
    admitted: Admitted | None = None  # what the webhook recorded at CREATE (webhook.workloads)
    # ... and the uid of the Job whose controller made it, recorded at the same CREATE ("": not made
    # by a Job's controller; None: no record, or one written before batchgate recorded this)
    made_for: str | None = None
    program: str = ""  # the containers' images, comma-separated: what runs (runtime history's key)
    finished: float | None = None  # Succeeded: when its last container finished (node clock)
    expected_runtime: int | None = None  # batchgate.io/expected-runtime in seconds (None: absent or malformed)
    # -- for a failed pod: what a Job's podFailurePolicy looks at, and whether its gang restarted for it
    exits: tuple[tuple[str, int], ...] = ()  # (container, exit code) of terminated containers, non-zero only
    conditions: frozenset[tuple[str, str]] = frozenset()  # (type, status)
    index: int | None = None  # an Indexed Job's completion index
    restarted: bool = False  # batchgate.io/gang-restart names this pod's uid
    exit_code: int | None = None  # the exit code behind ``failure`` (None: no container exited non-zero)
    # -- for gangs: whether something (Kubernetes, or batchgate) marked the pod as stopped from outside
    disrupted: bool = False  # a DisruptionTarget condition with status True, whoever wrote it
    disrupted_at: float | None = None  # its lastTransitionTime, when it came from outside (``interrupted``)
    created: float | None = None  # metadata.creationTimestamp
    deleting_t: float | None = None  # metadata.deletionTimestamp parsed: when its grace period ends
    # -- the batch queue (queue.py)
    gated: bool = False  # waits behind batchgate's scheduling gate
    other_gates: tuple[str, ...] = ()  # the scheduling gates on it that are not ours (a gated pod keeps them when ours goes)
    nominated: str = ""  # status.nominatedNodeName: where kube-scheduler preempted for this pending pod
    mounts: tuple[tuple[str, str], ...] = ()  # a gated pod's volume sources: (kind, name), volume_sources()
    start_by: str | None = None  # batchgate.io/start-by as written (a gated pod)
    extended: tuple[tuple[str, int], ...] = ()  # requests of other resources (GPUs, ...), milli-units
    # spec.priorityClassName: immutable once the pod exists, unlike its labels (scavenger.is_scavenger)
    priority_class: str | None = None
    # kube-scheduler tried and found no node for it (condition PodScheduled False, reason Unschedulable)
    unschedulable: bool = False

    @property
    def cpu_m(self) -> int:
        """Requested millicores, as kube-scheduler counts them (ScavengerJobs' fit and cap)."""
        return self.sched.cpu if self.sched is not None else 0

    @property
    def mem_b(self) -> int:
        return self.sched.mem if self.sched is not None else 0
    network: NetMember | None = None  # job-network stamps, for members of a multi-pod workload

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class JobView:
    ref: Ref
    resource_version: str
    deleting: bool
    finished: bool  # condition Complete or Failed is True
    time_limit: str | None  # the Job's own annotation, else its pod template's
    limit: int | None
    queue: str | None
    started_at: str | None
    deadline: str | None
    warned_for: str | None
    started_at_t: float | None
    deadline_t: float | None
    warned_t: float | None
    group: str | None  # from the pod template's labels
    group_size: int | None
    pod_group_name: str | None
    next_maintenance: str | None = None  # batchgate.io/next-maintenance as written
    expected_start: str | None = None  # batchgate.io/expected-start as written
    # -- for ScavengerJobs (scavenger.py)
    owner: Ref | None = None  # the controlling ownerReference
    created: float | None = None
    segment: int | None = None  # batchgate.io/segment label
    admitted: Admitted | None = None  # what the webhook recorded at CREATE, in the pod template
    # that record has the Job uid entry: the webhook that admitted it records in each of its pods
    # which Job's controller made it (PodView.made_for), and only those the Job's own are its pods
    records_maker: bool = False
    program: str = ""  # the pod template's images, comma-separated
    completed: float | None = None  # status.completionTime, when condition Complete is True
    expected_runtime: int | None = None  # batchgate.io/expected-runtime (its own, else its template's), seconds
    # -- for gangs: what the Job declares about failures, and how many its controller counted
    failure_policy: FailurePolicy = DEFAULT_FAILURE_POLICY
    failed: int = 0  # status.failed
    # -- the batch queue (queue.py)
    queued: bool = False  # suspended by batchgate, waiting in its queue (batchgate.io/queued)
    # ... marked so by the webhook as its user suspended it (batchgate.io/queued: suspended): requeue.py
    # takes it back as its own before it is placed
    user_suspended: bool = False
    suspended: bool = False  # spec.suspend
    ran: bool = False  # status.startTime is set: it ran, and Kubernetes lets no release change its template
    # batchgate.io/requeued-at, parsed: when the queue re-queued it (requeue.py); the run before no longer dates it
    requeued_at: float | None = None
    wanted: int = 0  # pods it runs at once while it runs: parallelism, at most the completions left
    active: int = 0  # status.active
    template: PodSched | None = None  # its pods' requests and placement (unfinished Jobs only)
    priority_class: str = ""  # its pod template's priorityClassName
    extended: tuple[tuple[str, int], ...] = ()  # per pod, as PodView.extended
    mounts: tuple[tuple[str, str], ...] = ()  # a queued Job's volume sources, as PodView.mounts
    start_by: str | None = None  # batchgate.io/start-by as written (a queued Job)
    # condition Failed (or FailureTarget) True with reason PodFailurePolicy: a FailJob rule matched (a
    # ScavengerJob's segment: the agreed checkpoint exit code, its only such rule)
    failed_by_policy: bool = False


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    ready: str | None  # the Ready condition's status: "True", "False", "Unknown"
    # -- for maintenance windows (webhook/reconciler/maintenance.py)
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    maintenance: str | None = None  # batchgate.io/maintenance annotation: what the reconciler did to it, as written
    cpu: int = 0  # allocatable millicores
    mem: int = 0  # allocatable bytes
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    max_pods: int = 0  # allocatable pods (ScavengerJobs' fit)

    @property
    def ref(self) -> Ref:
        return Ref("v1", "Node", "", self.name, self.uid)


@dataclass(frozen=True, slots=True)
class WindowView:
    """A MaintenanceWindow: ``window`` when its spec is valid, else ``problems``."""

    ref: Ref
    resource_version: str
    window: Window | None
    problems: tuple[str, ...]
    state: str | None  # status.state as written
    node_count: int | None  # status.nodeCount as written


@dataclass(frozen=True, slots=True)
class PodGroupView:
    ref: Ref
    resource_version: str
    min_member: int | None
    managed: bool  # created by batchgate (app.kubernetes.io/managed-by=batchgate)
    group: str | None  # batchgate.io/pod-group label: the pods it is for
    owner: Ref | None  # first ownerReference (the Job), if any
    deleting: bool


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster as the planner sees it. ``None`` means "not known", never "empty":
    ``nodes`` when they may not be listed, ``pod_groups`` when the CRD is not installed."""

    pods: Mapping[Key, PodView]
    jobs: Mapping[Key, JobView]
    nodes: Mapping[str, NodeView] | None = None
    pod_groups: Mapping[Key, PodGroupView] | None = None
    windows: Mapping[str, WindowView] | None = None  # None: the MaintenanceWindow CRD is not installed
    scavenger_jobs: Mapping[Key, Any] | None = None  # scavenger.SJView; None: the CRD is not installed
    # batchgate's Services, ConfigMaps and NetworkPolicies by (kind, namespace, name); None: not known
    net_objects: Mapping[tuple[str, str, str], NetObjectView] | None = None
    # the kubelet's FailedMount Events naming a missing Secret (mounts.MountFailure); None: not known
    mount_failures: Mapping[Key, Any] | None = None

    @staticmethod
    def of(
        pods: Iterable[PodView] = (),
        jobs: Iterable[JobView] = (),
        nodes: Iterable[NodeView] | None = None,
        pod_groups: Iterable[PodGroupView] | None = None,
        windows: Iterable[WindowView] | None = None,
        scavenger_jobs: Iterable[Any] | None = None,
    ) -> Snapshot:
        return Snapshot(
            pods={(p.ref.namespace, p.ref.name): p for p in pods},
            jobs={(j.ref.namespace, j.ref.name): j for j in jobs},
            nodes=None if nodes is None else {n.name: n for n in nodes},
            pod_groups=None if pod_groups is None else {(g.ref.namespace, g.ref.name): g for g in pod_groups},
            windows=None if windows is None else {w.ref.name: w for w in windows},
            scavenger_jobs=None if scavenger_jobs is None else {(s.ref.namespace, s.ref.name): s for s in scavenger_jobs},
        )


# -- a Job's pods ----------------------------------------------------------
# How much earlier than its Job a pod of it may say it was created (both timestamps come from the
# API server, in whole seconds; several API servers' clocks may differ by a little).
CREATION_SLACK = 5.0


def owns(job: JobView | None, pod: PodView) -> bool:
    """Whether ``pod`` is one of ``job``'s pods: the one definition every module asks (dating a Job,
    its gang, its runtime, its maintenance window, what ``batchgate queue`` shows). ``job`` must be
    the controller ``pod`` names: same uid, and the pod's own namespace and the name in its
    ownerReference (Kubernetes owners are never in another namespace, and the garbage collector
    ignores a reference that says otherwise; it is forged or broken, and confirms nothing), and the
    Job's controller made the pod. The reference must say ``batch/v1`` ``Job``: another apiVersion
    names no Job the garbage collector knows (it leaves such a reference alone), so it confirms
    nothing either. An ownerReference can be rewritten by whoever may update the pod, and the Job
    controller adopts a pod anyone labelled for it; the admission record cannot be: the
    webhook records in every pod, at its CREATE, the uid of the Job whose controller made it (issue
    27: a pod re-parented to a colleague's Job dated the Job, and stopped it). A Job admitted before
    batchgate recorded that (its template's record has no such entry) has pods recorded the old
    way: for it, a pod made after the Job is taken for its own, and one older than the Job (someone's
    own old pod re-parented to it) never."""
    owner = pod.owner
    if not (job is not None and owner is not None and job.ref.uid == owner.uid
            and job.ref.namespace == pod.ref.namespace and job.ref.name == owner.name
            and owner.kind == JOB.kind and owner.api_version == JOB.api_version):
        return False
    if job.records_maker:
        return pod.made_for == job.ref.uid
    return job.created is None or pod.created is None or pod.created >= job.created - CREATION_SLACK


def job_of(snapshot: Snapshot, pod: PodView) -> JobView | None:
    """The Job ``pod`` belongs to (``owns``), looked up where Kubernetes looks: in the pod's own
    namespace, by the name its controlling ownerReference gives; None when it has none, or names
    one it is no pod of. Never by the uid alone: anyone may write another namespace's Job uid into
    an ownerReference."""
    owner = pod.owner
    if owner is None or owner.kind != JOB.kind:
        return None
    job = snapshot.jobs.get((pod.ref.namespace, owner.name))
    return job if owns(job, pod) else None


def own_job(snapshot: Snapshot, pod: PodView) -> bool:
    """Whether ``pod`` is a job of its own (a bare job, not one of a Job's pods): it has no
    controller, or it was admitted (the webhook recorded its queue and limit) and no Job confirms it
    (``job_of`` is None: a Pod a user made claiming some owner, one re-parented to a Job whose
    controller did not make it, an operator's Pod with a limit of its own). The planner times such
    a pod alone; ``batchgate queue`` lists it and it gets its ``batchgate.io/next-maintenance`` the
    same way. The Pods of services (ReplicaSets, StatefulSets, DaemonSets) carry no record."""
    return pod.owner is None or (pod.admitted is not None and job_of(snapshot, pod) is None)


# -- conversion ------------------------------------------------------------
def ref_of(kind: Kind, md: Mapping[str, Any], api_version: str | None = None) -> Ref:
    """An object's Ref from its metadata (what is not a string there, which the API server never
    stores, is "": a Ref is hashed and compared everywhere)."""
    return Ref(api_version or kind.api_version, kind.kind, _str(md.get("namespace")), _str(md.get("name")),
               _str(md.get("uid")))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _controller(md: Mapping[str, Any]) -> Ref | None:
    for o in md.get("ownerReferences") or ():
        if o.get("controller"):
            return Ref(_name(o.get("apiVersion")), _name(o.get("kind")), _str(md.get("namespace")), _name(o.get("name")),
                       _name(o.get("uid")))
    return None


MAX_EXITS = 64  # (container, exit code) pairs a failed pod's view keeps
_COUNT = re.compile(r"[0-9]{1,9}")  # ASCII digits only (str.isdigit() takes "\u00b2", which int() refuses)


def _count(text: Any) -> int | None:
    """A whole number written in a label or annotation (at most 9 digits: annotations are anyone's to
    write, and a 5,000-digit one would make int() raise), else None."""
    return int(text) if isinstance(text, str) and _COUNT.fullmatch(text) else None


def _size(text: Any) -> int | None:
    n = _count(text)
    return n if n is not None and n > 0 else None


def _describe_exit(container: str, term: Mapping[str, Any]) -> str:
    code = term.get("exitCode")
    reason = term.get("reason") or ""
    if reason == "OOMKilled":
        return f"container {container} was OOMKilled (exit code {code})"
    text = f"container {container} exited with code {code}"
    if reason and reason not in ("Error", "Completed"):
        text += f" ({reason})"
    return text


_LIMITS: dict[str, int | None] = {}


def limit_seconds(text: str | None) -> int | None:
    """A parsed ``batchgate.io/time-limit``, memoised (a cluster has few distinct values)."""
    if text is None or not isinstance(text, str) or len(text) > MAX_TEXT:
        return None  # not a duration (units.MAX_TEXT), and not kept in the memo
    try:
        return _LIMITS[text]
    except KeyError:
        pass
    try:
        value: int | None = parse_duration(text)
    except ValueError:
        value = None
    if len(_LIMITS) > 4096:
        _LIMITS.clear()
    _LIMITS[text] = value
    return value


MAX_KEPT = 1024  # characters of an annotation a view keeps as written (the longest we write is ~600)


def kept(value: Any) -> str | None:
    """An annotation's value as a view keeps it: as written when a string of at most ``MAX_KEPT``
    characters, else cut there and marked (so it never equals what the reconciler would write, and
    parses as nothing); None when absent. Views are kept for every object: their size must not
    follow what users store (issue 27)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return "(not a string)"
    return cut(value)


def cut(text: str, limit: int = MAX_KEPT) -> str:
    """``text`` whole when at most ``limit`` characters, else cut there and marked (so it never
    equals a text that fits): what a view keeps of a text for people, or of a name no object can have."""
    return text if len(text) <= limit else text[:limit] + "... (cut)"


MAX_NAME = 253  # characters of a Kubernetes name (a DNS subdomain): an owner's longer name names nothing


def _name(value: Any) -> str:
    """A name an ownerReference gives (the API server does not bound its length): cut past any name."""
    return cut(value, MAX_NAME) if isinstance(value, str) else ""


def _state(ann: Mapping[str, Any]) -> dict[str, Any]:
    """The reconciler's own annotations, as written (``kept``) and parsed."""
    started, deadline, warned = kept(ann.get(STARTED_AT_ANNOTATION)), kept(ann.get(DEADLINE_ANNOTATION)), kept(ann.get(WARNED_FOR_ANNOTATION))
    return {
        "started_at": started, "deadline": deadline, "warned_for": warned,
        "started_at_t": parse_time(started), "deadline_t": parse_time(deadline), "warned_t": parse_time(warned),
    }


def _quantity(value: Any, scale: int) -> int:
    """A resource quantity in whole units of 1/scale (millicores: 1000); 0 when absent or bad."""
    if value is None:
        return 0
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError):
        return 0
    return int(-(-(q * scale).numerator // (q * scale).denominator))


def _demand(spec: Mapping[str, Any], key: str, scale: int) -> int:
    def of(c: Any) -> int:
        res = (c.get("resources") or {}) if isinstance(c, dict) else {}
        req = res.get("requests") or {}
        return _quantity(req.get(key, (res.get("limits") or {}).get(key)), scale)

    total = sum(of(c) for c in spec.get("containers") or ())
    init = max((of(c) for c in spec.get("initContainers") or ()), default=0)
    return max(total, init) + _quantity((spec.get("overhead") or {}).get(key), scale)


def _requirements(items: Any) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    return tuple((str(e.get("key") or ""), str(e.get("operator") or ""), tuple(str(v) for v in e.get("values") or ()))
                 for e in items or () if isinstance(e, dict))


# What a view keeps of a pod's placement rules (nodeSelector, required node affinity, tolerations):
# at most this many characters of them, counted as they are written. Real pods need a few hundred;
# a pod past it (the API server takes 1.5 MB of them) is kept as ``PodSched.clipped``, without them.
MAX_SCHED_TEXT = 8192


def _sched_text(spec: Mapping[str, Any]) -> int:
    """About how many characters the placement rules take, counted without building anything
    (stops past ``MAX_SCHED_TEXT``; iterative, so no nesting is too deep)."""
    affinity = spec.get("affinity")
    todo: list[Any] = [spec.get("nodeSelector"), spec.get("tolerations"),
                       affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None]
    total = 0
    while todo and total <= MAX_SCHED_TEXT:
        x = todo.pop()
        if isinstance(x, str):
            total += len(x) + 4
        elif isinstance(x, Mapping):
            todo += x.keys()
            todo += x.values()
        elif isinstance(x, list | tuple):
            todo += x
        elif x is not None:
            total += 8
    return total


def _sched(md: Mapping[str, Any], spec: Mapping[str, Any]) -> PodSched:
    prio = spec.get("priority")
    clipped = _sched_text(spec) > MAX_SCHED_TEXT
    if clipped:
        node_selector: tuple[tuple[str, str], ...] = ()
        terms: tuple[Term, ...] = ()
        tolerations: tuple[tuple[str, str, str, str], ...] = ()
    else:
        affinity = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get(REQUIRED) or {})
        terms = tuple((_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
                      for t in affinity.get("nodeSelectorTerms") or () if isinstance(t, dict))
        node_selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
        tolerations = tuple((str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
                             str(t.get("effect") or "")) for t in spec.get("tolerations") or () if isinstance(t, dict))
    return PodSched(
        cpu=_demand(spec, "cpu", 1000), mem=_demand(spec, "memory", 1),
        priority=prio if isinstance(prio, int) and not isinstance(prio, bool) else 0,
        created=parse_time(md.get("creationTimestamp")) or 0.0,
        node_selector=node_selector,
        terms=terms,
        tolerations=tolerations,
        clipped=clipped,
        scheduler=sn[:MAX_KEPT] if isinstance(sn := spec.get("schedulerName"), str) and sn else DEFAULT_SCHEDULER,
    )


# Requests of resources other than these are kept (GPUs and other devices: usage, fit); at most
# MAX_EXTENDED of them per pod, names as long as a qualified resource name may be.
BASIC_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})
MAX_EXTENDED = 8


def _extended(spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    names: dict[str, None] = {}
    for c in spec.get("containers") or ():
        res = c.get("resources") if isinstance(c, dict) else None
        for section in ("requests", "limits"):
            items = res.get(section) if isinstance(res, dict) else None
            for k in items if isinstance(items, dict) else ():
                if isinstance(k, str) and k not in BASIC_RESOURCES and len(k) <= 253 and len(names) < MAX_EXTENDED:
                    names[k] = None
    if not names:
        return ()
    return tuple((k, v) for k in names if (v := _demand(spec, k, 1000)) > 0)


def quantity_milli(v: Any) -> int:
    try:
        q = parse_quantity(v) * 1000
    except (ValueError, TypeError):
        return 0
    return max(-(-q.numerator // q.denominator), 0)


def quantity_ceil(v: Any) -> int:
    try:
        q = parse_quantity(v)
    except (ValueError, TypeError):
        return 0
    return max(-(-q.numerator // q.denominator), 0)


def _segment(labels: Mapping[str, Any]) -> int | None:
    return _count(labels.get(SEGMENT_LABEL))


def pod_view(obj: Mapping[str, Any]) -> PodView:
    md = obj.get("metadata") or {}
    st = obj.get("status") or {}
    ann = md.get("annotations") or {}
    labels = md.get("labels") or {}
    phase = st.get("phase")
    phase = cut(phase, 64) if isinstance(phase, str) and phase else "Pending"

    started: float | None = None
    failure: str | None = None
    failed_at: float | None = None
    exit_code: int | None = None
    for statuses in (st.get("initContainerStatuses"), st.get("containerStatuses")):
        for cs in statuses or ():
            state = cs.get("state") or {}
            running = state.get("running")
            term = state.get("terminated")
            last = (cs.get("lastState") or {}).get("terminated")
            for s in (running, term, last):
                if s:
                    t = parse_time(s.get("startedAt"))
                    if t is not None and (started is None or t < started):
                        started = t
            if failure is None:
                for s in (term, last):
                    if s and s.get("exitCode", 0) != 0:
                        failure = _describe_exit(cs.get("name", "?"), s)
                        failed_at = parse_time(s.get("finishedAt"))
                        code = s.get("exitCode")
                        exit_code = code if isinstance(code, int) and not isinstance(code, bool) \
                            and s.get("reason") != "OOMKilled" else None
                        break
    if started is None and phase in ("Running", "Succeeded", "Failed"):
        started = parse_time(st.get("startTime"))
    # Container start times come from the node's clock, the creation time from the API
    # server's: a node clock behind must not make a job look older than it is (and stop it
    # at once). A pod cannot start before it exists.
    created = parse_time(md.get("creationTimestamp"))
    if started is not None and created is not None and started < created:
        started = created
    reason = st.get("reason") or ""
    message = st.get("message") or ""
    interrupted: str | None = None
    disruption = next((c for c in st.get("conditions") or ()
                       if isinstance(c, dict) and c.get("type") == DISRUPTION_TARGET and c.get("status") == "True"),
                      None)
    disrupted_at: float | None = None
    if reason in INTERRUPT_REASONS:
        interrupted = f"{reason}: {message}" if message else reason
    elif disruption is not None and not (isinstance(disruption.get("reason"), str)
                                         and disruption["reason"] in OWN_DISRUPTION_REASONS):
        # (batchgate's own mark, on a gang member it takes down, is no interruption from outside)
        why = disruption.get("reason") or DISRUPTION_TARGET
        interrupted = f"{why}: {disruption['message']}" if disruption.get("message") else why
    if interrupted is not None and disruption is not None:
        disrupted_at = parse_time(disruption.get("lastTransitionTime"))
    finished: float | None = None
    spec = obj.get("spec") or {}
    if phase == "Succeeded":
        failure = failed_at = exit_code = None  # a container restarted on the way, but the pod made it
        for cs in st.get("containerStatuses") or ():
            t = parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            if t is not None and (finished is None or t > finished):
                finished = t
    elif phase != "Failed" and spec.get("restartPolicy") in ("Always", "OnFailure"):
        # The kubelet restarts the container in place: that is not the pod failing (a Job counts
        # such restarts against its backoffLimit itself, and fails when they run out).
        failure = failed_at = None
    elif failure is None and phase == "Failed":
        failure = "pod phase Failed" + (f" ({reason}: {message})" if reason or message else "")
    exits: tuple[tuple[str, int], ...] = ()
    conditions: frozenset[tuple[str, str]] = frozenset()
    if failure is not None or interrupted is not None:
        exits = _exits(st)
        conditions = frozenset((cut(str(c.get("type") or ""), 64), cut(str(c.get("status") or ""), 64))
                               for c in (st.get("conditions") or ())[:32] if isinstance(c, dict))

    group = _str(labels.get(POD_GROUP_LABEL)) or None
    admitted, made_for = _admitted(obj, ("", "Pod"))
    return PodView(
        ref=ref_of(POD, md),
        resource_version=md.get("resourceVersion") or "",
        owner=_controller(md),
        phase=phase,
        node=_str((obj.get("spec") or {}).get("nodeName")),
        deleting=bool(md.get("deletionTimestamp")),
        started=started,
        # texts for people, made of what the kubelet and controllers wrote (reasons, messages)
        failure=None if failure is None else cut(failure),
        failed_at=failed_at,
        interrupted=None if interrupted is None else cut(interrupted),
        group=group,
        group_size=_size(labels.get(POD_GROUP_SIZE_LABEL)),
        pod_group_name=(labels.get(COSCHEDULING_LABEL) or group) if group else None,
        queue=labels.get(QUEUE_LABEL),
        time_limit=kept(ann.get(TIME_LIMIT_ANNOTATION)),
        limit=limit_seconds(ann.get(TIME_LIMIT_ANNOTATION)),
        **_state(ann),
        next_maintenance=kept(ann.get(NEXT_MAINTENANCE_ANNOTATION)),
        sched=_sched(md, obj.get("spec") or {}),
        expected_start=kept(ann.get(EXPECTED_START_ANNOTATION)),
        segment=_segment(labels),
        exit_code=exit_code,
        network=_net_member(labels, ann, spec),
        admitted=admitted,
        made_for=made_for,
        program=_program(obj.get("spec") or {}),
        finished=finished,
        expected_runtime=limit_seconds(ann.get(EXPECTED_RUNTIME_ANNOTATION)),
        exits=exits,
        conditions=conditions,
        index=_index(ann.get(LABEL_COMPLETION_INDEX) or labels.get(LABEL_COMPLETION_INDEX)),
        restarted=bool(ann.get(GANG_RESTART_ANNOTATION)) and ann.get(GANG_RESTART_ANNOTATION) == md.get("uid"),
        disrupted=disruption is not None,
        disrupted_at=disrupted_at,
        created=created,
        deleting_t=parse_time(md.get("deletionTimestamp")),
        **_gates(spec),
        nominated=_str(st.get("nominatedNodeName")),
        start_by=kept(ann.get(START_BY_ANNOTATION)),
        extended=_extended(spec),
        priority_class=_class_name(spec.get("priorityClassName")),
        unschedulable=phase == "Pending" and any(
            isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"
            and c.get("reason") == "Unschedulable" for c in st.get("conditions") or ()),
    )


def _gates(spec: Mapping[str, Any]) -> dict[str, Any]:
    gates = spec.get("schedulingGates")
    names = [g.get("name") for g in gates if isinstance(g, dict)] if isinstance(gates, list) else []
    if QUEUE_GATE not in names:  # another's gates (kube-scheduler leaves such a pod alone too), if any
        return {"other_gates": tuple(str(n)[:MAX_KEPT] for n in names[:MAX_EXTENDED])} if names else {}
    return {"gated": True, "other_gates": tuple(str(n)[:MAX_KEPT] for n in names[:MAX_EXTENDED] if n != QUEUE_GATE),
            "mounts": volume_sources(spec.get("volumes"))}


MAX_MOUNTS = 16  # volume sources a view keeps (the first ones): enough to name what is missing


def volume_sources(volumes: Any) -> tuple[tuple[str, str], ...]:
    """(kind, name) of the PersistentVolumeClaims and ConfigMaps that ``volumes`` (a pod spec's, a
    ScavengerJob's) need to exist; those marked ``optional`` are left out, and so are Secrets: the
    reconciler may not read Secrets (a ``get`` reads their data too, in every namespace); a missing
    one keeps the pods in ContainerCreating, the kubelet's FailedMount Event naming it."""
    out: list[tuple[str, str]] = []
    for v in volumes if isinstance(volumes, list) else ():
        if not isinstance(v, dict) or len(out) >= MAX_MOUNTS:
            continue
        for key, kind, name_key in (("persistentVolumeClaim", "PersistentVolumeClaim", "claimName"),
                                    ("configMap", "ConfigMap", "name")):
            src = v.get(key)
            if isinstance(src, dict) and src.get("optional") is not True:
                name = src.get(name_key)
                if isinstance(name, str) and 0 < len(name) <= 253:
                    out.append((kind, name))
    return tuple(out)


def _class_name(value: Any) -> str | None:
    """A PriorityClass name as a view keeps it (a DNS subdomain: at most 253 characters; longer
    names no class has)."""
    return value if isinstance(value, str) and 0 < len(value) <= 253 else None


def _program(spec: Mapping[str, Any]) -> str:
    """What a pod runs, for the runtime history: its containers' images, in order (a digest of them
    when that is longer than ``MAX_KEPT``: it is only ever compared)."""
    text = ",".join(str(c.get("image") or "") for c in spec.get("containers") or () if isinstance(c, dict))
    return text if len(text) <= MAX_KEPT else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _index(v: Any) -> int | None:
    return _count(v)


def _exits(st: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """Non-zero exit codes of terminated containers (init containers too), as a Job's
    podFailurePolicy onExitCodes sees them."""
    out: list[tuple[str, int]] = []
    for statuses in (st.get("initContainerStatuses"), st.get("containerStatuses")):
        for cs in statuses or ():
            term = (cs.get("state") or {}).get("terminated") if isinstance(cs, dict) else None
            code = term.get("exitCode") if isinstance(term, dict) else None
            if isinstance(code, int) and not isinstance(code, bool) and code != 0:
                out.append((str(cs.get("name") or "")[:MAX_LABEL], code))
    return tuple(out[:MAX_EXITS])


def _net_member(labels: Mapping[str, Any], ann: Mapping[str, Any], spec: Mapping[str, Any]) -> NetMember | None:
    service = labels.get(NETWORK_LABEL)
    if not service or not isinstance(service, str) or spec.get("subdomain") != service:
        return None  # not stamped, or the user runs their own Service
    hostname = spec.get("hostname")
    index = ann.get(LABEL_COMPLETION_INDEX)
    slots = _size(ann.get(SLOTS_ANNOTATION)) or 1
    peers, dropped = peers_view(ann.get(CONNECT_TO_ANNOTATION))
    return NetMember(
        service=service,
        hostname=hostname[:MAX_LABEL] if isinstance(hostname, str) else "",
        slots=slots,
        connect_to=peers,
        index=_count(index),
        connect_to_dropped=dropped,
    )


def job_view(obj: Mapping[str, Any]) -> JobView:
    md = obj.get("metadata") or {}
    ann = md.get("annotations") or {}
    labels = md.get("labels") or {}
    template_md = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
    t_ann = template_md.get("annotations") or {}
    t_labels = template_md.get("labels") or {}
    status = obj.get("status") or {}
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict) and c.get("status") == "True"]
    finished = any(c.get("type") in ("Complete", "Failed") for c in conditions)
    complete = any(c.get("type") == "Complete" for c in conditions)
    group = t_labels.get(POD_GROUP_LABEL) or None
    time_limit = ann.get(TIME_LIMIT_ANNOTATION) or t_ann.get(TIME_LIMIT_ANNOTATION)
    failed = (obj.get("status") or {}).get("failed")
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    t_spec = template.get("spec") or {}
    suspended = spec.get("suspend") is True
    unfinished = not finished and not md.get("deletionTimestamp")
    admitted, made_for = _admitted(obj, ("batch", "Job"))
    return JobView(
        ref=ref_of(JOB, md),
        resource_version=md.get("resourceVersion") or "",
        deleting=bool(md.get("deletionTimestamp")),
        finished=finished,
        time_limit=kept(time_limit),
        limit=limit_seconds(time_limit),
        queue=labels.get(QUEUE_LABEL) or t_labels.get(QUEUE_LABEL),
        **_state(ann),
        group=group,
        group_size=_size(t_labels.get(POD_GROUP_SIZE_LABEL)),
        pod_group_name=(t_labels.get(COSCHEDULING_LABEL) or group) if group else None,
        next_maintenance=kept(ann.get(NEXT_MAINTENANCE_ANNOTATION)),
        expected_start=kept(ann.get(EXPECTED_START_ANNOTATION)),
        owner=_controller(md),
        created=parse_time(md.get("creationTimestamp")),
        segment=_segment(labels),
        admitted=admitted,
        records_maker=made_for is not None,
        program=_program(((obj.get("spec") or {}).get("template") or {}).get("spec") or {}),
        completed=parse_time(status.get("completionTime")) if complete else None,
        expected_runtime=limit_seconds(ann.get(EXPECTED_RUNTIME_ANNOTATION) or t_ann.get(EXPECTED_RUNTIME_ANNOTATION)),
        # only gangs need it: every other Job shares the one default
        failure_policy=(failure_policy(obj.get("spec")) if group is not None or POD_GROUP_SIZE_LABEL in t_labels
                        else _NO_POLICY),
        failed=failed if isinstance(failed, int) and not isinstance(failed, bool) and failed > 0 else 0,
        queued=suspended and ann.get(QUEUED_ANNOTATION) is not None,
        user_suspended=suspended and ann.get(QUEUED_ANNOTATION) == QUEUED_BY_SUSPEND,
        suspended=suspended,
        ran=bool(status.get("startTime")),
        requeued_at=parse_time(kept(ann.get(REQUEUED_AT_ANNOTATION))),
        wanted=_wanted(spec, status) if unfinished else 0,
        active=_whole(status.get("active")),
        template=_sched(template.get("metadata") or md, t_spec) if unfinished else None,
        priority_class=str(t_spec.get("priorityClassName") or "")[:MAX_LABEL] if unfinished else "",
        extended=_extended(t_spec) if unfinished else (),
        mounts=volume_sources(t_spec.get("volumes")) if suspended and ann.get(QUEUED_ANNOTATION) is not None else (),
        start_by=kept(ann.get(START_BY_ANNOTATION)),
        failed_by_policy=any(c.get("type") in ("Failed", "FailureTarget") and c.get("reason") == "PodFailurePolicy"
                             for c in conditions),
    )


MAX_JOB_PODS = 100_000  # more pods at once than any cluster runs: a Job asking more is taken at this


def _wanted(spec: Mapping[str, Any], status: Mapping[str, Any]) -> int:
    """How many pods a Job runs at once while it runs: its parallelism (1 by default), at most the
    completions it still needs."""
    par = spec.get("parallelism")
    par = par if isinstance(par, int) and not isinstance(par, bool) and par >= 0 else 1
    comp = spec.get("completions")
    if isinstance(comp, int) and not isinstance(comp, bool):
        par = min(par, max(comp - _whole(status.get("succeeded")), 0))
    return min(par, MAX_JOB_PODS)


def _whole(v: Any) -> int:
    """A count the API server writes (status.active): a non-negative int, else 0."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


_NO_POLICY = DEFAULT_FAILURE_POLICY


def node_view(obj: Mapping[str, Any]) -> NodeView:
    ready = next(
        (c.get("status") for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"),
        None,
    )
    ready = cut(ready, 64) if isinstance(ready, str) else None  # "True", "False", "Unknown" (as the kubelet wrote it)
    md = obj.get("metadata") or {}
    alloc = (obj.get("status") or {}).get("allocatable") or {}
    return NodeView(
        cpu=_quantity(alloc.get("cpu"), 1000), mem=_quantity(alloc.get("memory"), 1),
        taints=tuple((_str(t.get("key")), _str(t.get("value")), _str(t.get("effect")))
                     for t in (obj.get("spec") or {}).get("taints") or () if isinstance(t, dict)),
        name=_str(md.get("name")), ready=ready,
        uid=md.get("uid") or "", resource_version=md.get("resourceVersion") or "",
        labels=dict(md.get("labels") or {}),
        unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
        maintenance=kept((md.get("annotations") or {}).get(MAINTENANCE_ANNOTATION)),
        max_pods=quantity_ceil(alloc.get("pods", 0)),
    )


def window_view(obj: Mapping[str, Any]) -> WindowView:
    md = obj.get("metadata") or {}
    status = obj.get("status") or {}
    window, problems = parse_window(obj)
    count = status.get("nodeCount")
    return WindowView(
        ref=ref_of(MAINTENANCE_WINDOW, md), resource_version=md.get("resourceVersion") or "",
        window=window, problems=tuple(problems),
        state=cut(status["state"], 64) if isinstance(status.get("state"), str) else None,
        node_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
    )


def pod_group_view(obj: Mapping[str, Any]) -> PodGroupView:
    md = obj.get("metadata") or {}
    labels = md.get("labels") or {}
    mm = (obj.get("spec") or {}).get("minMember")
    owners = md.get("ownerReferences") or ()
    owner = None
    if owners:
        o = owners[0]
        owner = Ref(_name(o.get("apiVersion")), _name(o.get("kind")), _str(md.get("namespace")), _name(o.get("name")),
                    _name(o.get("uid")))
    return PodGroupView(
        ref=ref_of(POD_GROUP, md),
        resource_version=md.get("resourceVersion") or "",
        min_member=mm if isinstance(mm, int) and not isinstance(mm, bool) else None,
        managed=labels.get(MANAGED_BY_LABEL) == MANAGED_BY,
        group=labels.get(POD_GROUP_LABEL),
        owner=owner,
        deleting=bool(md.get("deletionTimestamp")),
    )


def net_object_view(obj: Mapping[str, Any], kind: Kind = SERVICE) -> NetObjectView:
    """List items come without ``kind``: the store says which kind it holds."""
    md = obj.get("metadata") or {}
    return NetObjectView(
        ref=ref_of(kind, md),
        resource_version=md.get("resourceVersion") or "",
        managed=(md.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY,
        digest=(md.get("annotations") or {}).get(SPEC_HASH_ANNOTATION) or "",
        deleting=bool(md.get("deletionTimestamp")),
    )


VIEW_OF: dict[str, Callable[[Mapping[str, Any]], Any]] = {"Pod": pod_view, "Job": job_view, "Node": node_view, "PodGroup": pod_group_view,
           "MaintenanceWindow": window_view, "Service": net_object_view,
           "ConfigMap": partial(net_object_view, kind=NET_CONFIG_MAP),
           "NetworkPolicy": partial(net_object_view, kind=NETWORK_POLICY)}
