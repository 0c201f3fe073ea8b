"""What batchgate knows about workloads: for every kind it handles, where the pod template,
the queue, the time limit, the gang and the controlling owner live.

One pure module (no I/O, no clock), asked by the engine, the policy types and (for the owner of a pod)
the reconciler, so that nothing else re-derives these places. A kind that makes pods keeps
one pod template; every pod-level policy decides on that template, at CREATE and at UPDATE
where the template can change, so that what the workload's pods will get - and any denial -
is known to whoever applied the workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .contract import (
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_LABEL,
    QUEUE_LABEL,
    RECORD_JOB_UID_ENV,
    RECORD_QUEUE_ENV,
    RECORD_TIME_LIMIT_ENV,
)
from .draft import Path
from .units import json_int

Kind = tuple[str, str, str]  # group, version ("*": any), kind

_TEMPLATE: Path = ("spec", "template")
_CRON_TEMPLATE: Path = ("spec", "jobTemplate", "spec", "template")


@dataclass(frozen=True, slots=True)
class Shape:
    """One workload kind: where it keeps its pod (the Pod itself, or its pod template) and
    what Kubernetes lets change in it."""

    kind: str
    pod_meta: Path  # metadata of the Pod, or of the pod template
    pod_spec: Path  # spec of the Pod, or of the pod template
    is_pod: bool = False
    # The pod template may change after CREATE (apps kinds, CronJob); a Pod's spec and a
    # Job's template are immutable, so policies that decide the pod act there on CREATE only.
    template_mutable: bool = False
    # Where the time limit annotation is read, outermost first, and whether it is written
    # there too (the controller copies the inner ones into what it makes).
    time_limit_at: tuple[tuple[Path, bool], ...] = ()
    # The Kubernetes API accepts spec.activeDeadlineSeconds in this kind's pods: not in the
    # pod templates of Deployments, ReplicaSets, StatefulSets, DaemonSets (services).
    runs_to_completion: bool = True
    # Where the webhook records, at CREATE, the queue and time limit the workload was admitted
    # with (``Record``): a pod spec nobody can change afterwards. A Pod's spec is immutable
    # (but for images, added tolerations, a lowered activeDeadlineSeconds). A Job's template is
    # immutable too, except that Kubernetes 1.23+ lets anyone who may update a *suspended Job
    # that never started* change the template's labels, annotations, nodeSelector, node
    # affinity, tolerations and schedulingGates (and 1.35 its resources): so the record is
    # in the containers' env, which stays immutable, not in template annotations. None: kinds
    # whose template may change (CronJob, apps kinds); the Jobs and Pods they make are recorded
    # at their own CREATE.
    record_at: Path | None = None

    def template(self, obj: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(metadata, spec) of the pod or pod template; empty dicts where absent."""
        meta, spec = dig(obj, self.pod_meta), dig(obj, self.pod_spec)
        return (meta if isinstance(meta, dict) else {}), (spec if isinstance(spec, dict) else {})

    def template_changed(self, obj: Any, old: Any) -> bool:
        """An UPDATE changed the pod template (or its metadata): what new pods get differs."""
        root = self.pod_meta[:-1]
        return bool(dig(obj, root) != dig(old, root))


SHAPES: dict[tuple[str, str], Shape] = {
    ("", "Pod"): Shape("Pod", ("metadata",), ("spec",), is_pod=True,
                       time_limit_at=((("metadata",), True),), record_at=("spec",)),
    ("batch", "Job"): Shape("Job", (*_TEMPLATE, "metadata"), (*_TEMPLATE, "spec"),
                            time_limit_at=((("metadata",), True), ((*_TEMPLATE, "metadata"), True)),
                            record_at=(*_TEMPLATE, "spec")),
    # A CronJob's own metadata is read but not written: the CronJob controller copies
    # spec.jobTemplate.metadata into each Job, never the CronJob's.
    ("batch", "CronJob"): Shape("CronJob", (*_CRON_TEMPLATE, "metadata"), (*_CRON_TEMPLATE, "spec"),
                                template_mutable=True,
                                time_limit_at=((("metadata",), False), (("spec", "jobTemplate", "metadata"), True),
                                               ((*_CRON_TEMPLATE, "metadata"), True))),
    **{
        ("apps", k): Shape(k, (*_TEMPLATE, "metadata"), (*_TEMPLATE, "spec"), template_mutable=True,
                           runs_to_completion=False)
        for k in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet")
    },
}

# Kinds for policies about jobs (things that run to completion) and for those about any pod.
WORKLOAD_KINDS: tuple[Kind, ...] = (("", "v1", "Pod"), ("batch", "*", "Job"), ("batch", "*", "CronJob"))
ALL_POD_TEMPLATE_KINDS: tuple[Kind, ...] = WORKLOAD_KINDS + tuple(
    ("apps", "v1", k) for k in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet")
)
# Controllers of pods that are services, not jobs (no time limit for their pods), and the API
# group each really is in: a "DaemonSet" of another group (nope.example.com/v1) is not one.
SERVICE_OWNER_KINDS = ("ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController")
SERVICE_OWNER_GROUPS = {"ReplicaSet": "apps", "StatefulSet": "apps", "DaemonSet": "apps", "ReplicationController": ""}
# Their pods wait in a gated queue as bare Pods do (rules.queue_gate), each released as a one-pod
# workload: anyone may run batch work as a ReplicaSet, StatefulSet or DaemonSet. A DaemonSet's pod
# too: since Kubernetes 1.12 its controller gives it a required node affinity to its node and
# kube-scheduler binds it, so it waits for room on that node like any pod (and tolerating the
# unschedulable taint does not let it skip the queue). Not a Job's (the Job waited, suspended).
# The kinds of services a user creates (each makes pods, or ReplicaSets that do): a queue that is
# draining or stopped refuses new ones, as it refuses new Pods and Jobs.
SERVICE_KINDS: tuple[Kind, ...] = tuple(("apps", "v1", k) for k in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"))


def shape_of(group: str, kind: str) -> Shape | None:
    return SHAPES.get((group, kind))


def dig(obj: Any, path: Path) -> Any:
    """``obj[path[0]][path[1]]...``, or None where the path does not exist."""
    for key in path:
        if obj.__class__ is dict and key.__class__ is str:  # the usual step, tested first: ~30% cheaper
            obj = obj.get(key)
        elif isinstance(key, int):
            obj = obj[key] if isinstance(obj, list) and -len(obj) <= key < len(obj) else None
        else:
            obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def meta_entry(obj: Any, meta_path: Path, section: str, key: str) -> Any:
    """``dig(obj, (*meta_path, section, key))`` for a ``meta_path`` of keys (a label or an
    annotation of the metadata there), without building the path or testing for list indexes:
    a third of dig's cost, read by several policies on every review."""
    for step in meta_path:
        obj = obj.get(step) if type(obj) is dict else None
    entries = obj.get(section) if type(obj) is dict else None
    return entries.get(key) if type(entries) is dict else None


def _labels(meta: Any) -> dict[str, Any]:
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def requested_queue(obj: Any, shape: Shape | None) -> Any:
    """The queue label the user set: on the object, else on its pod template; None if neither."""
    value = _labels(dig(obj, ("metadata",))).get(QUEUE_LABEL)
    if value is None and shape is not None and not shape.is_pod:
        value = _labels(dig(obj, shape.pod_meta)).get(QUEUE_LABEL)
    return value


def label_places(shape: Shape | None) -> tuple[Path, ...]:
    """Every metadata whose labels reach the workload or its pods, outermost first: the object's,
    a CronJob's Job template's (copied into each Job), the pod template's."""
    if shape is None or shape.is_pod:
        return (("metadata",),)
    middle: tuple[Path, ...] = ((*_CRON_TEMPLATE[:2], "metadata"),) if shape.kind == "CronJob" else ()
    return (("metadata",), *middle, shape.pod_meta)


def label_maps(obj: Any, shape: Shape | None) -> list[dict[str, Any]]:
    """The labels of every metadata in :func:`label_places` (empty dicts where absent)."""
    return [_labels(dig(obj, path)) for path in label_places(shape)]


@dataclass(frozen=True, slots=True)
class Record:
    """What a workload was admitted with: its queue and time limit (as written, e.g. ``4h``), and
    on a Pod the uid of the Job whose controller made it ("" for any other Pod, and in a Job's pod
    template; None in a record written before batchgate recorded it)."""

    queue: str
    time_limit: str
    job: str | None = ""

    def env(self) -> list[dict[str, str]]:
        # An empty value is written as Kubernetes stores it (no "value"): a second pass changes nothing.
        return [{"name": RECORD_QUEUE_ENV, "value": self.queue},
                {"name": RECORD_TIME_LIMIT_ENV, "value": self.time_limit},
                {"name": RECORD_JOB_UID_ENV, "value": self.job} if self.job else {"name": RECORD_JOB_UID_ENV}]


RECORD_ENV = (RECORD_QUEUE_ENV, RECORD_TIME_LIMIT_ENV, RECORD_JOB_UID_ENV)


def admission_record(obj: Any, shape: Shape | None) -> Record | None:
    """The queue and time limit recorded when the workload was admitted; None when this kind
    keeps no record or this object has none (created before batchgate recorded admissions, or
    while the webhook was bypassed). The webhook writes the record into every container at CREATE,
    replacing what the user wrote there; the first container that has a queue and a limit holds
    it (containers a later mutating webhook adds may lack it), with its Job uid entry (``job``
    None when that container has none: a record written before batchgate recorded it)."""
    spec = dig(obj, shape.record_at) if shape is not None and shape.record_at is not None else None
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for c in containers if isinstance(containers, list) else ():
        env = c.get("env") if isinstance(c, dict) else None
        queue = limit = job = None
        for e in env if isinstance(env, list) else ():
            if isinstance(e, dict) and "valueFrom" not in e:
                name, value = e.get("name"), e.get("value")
                if name == RECORD_QUEUE_ENV:
                    queue = value
                elif name == RECORD_TIME_LIMIT_ENV:
                    limit = value
                elif name == RECORD_JOB_UID_ENV:
                    job = value if isinstance(value, str) else ""
        if isinstance(queue, str) and queue and isinstance(limit, str) and limit:
            return Record(queue, limit, job)
    return None


def pod_group(obj: Any, shape: Shape | None) -> tuple[Any, Any]:
    """(group name, group size) labels of the pod or pod template; None where unset."""
    if shape is None:
        return None, None
    labels = _labels(dig(obj, shape.pod_meta))
    return labels.get(POD_GROUP_LABEL), labels.get(POD_GROUP_SIZE_LABEL)


def controller_of(obj: Any) -> dict[str, Any] | None:
    """The controlling ownerReference (``controller: true``), if any. Claimed by whoever
    wrote the object: who may be trusted to have written it is the caller's question."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None  # dig(), unrolled: on every review
    owners = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in owners if isinstance(owners, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def controller_kind(obj: Any) -> str | None:
    ref = controller_of(obj)
    return str(ref.get("kind") or "") if ref is not None else None


def controller_group_kind(obj: Any) -> tuple[str, str] | None:
    """(API group, kind) of the controlling owner, if any."""
    ref = controller_of(obj)
    if ref is None:
        return None
    return str(ref.get("apiVersion") or "").rpartition("/")[0], str(ref.get("kind") or "")


def service_owned(obj: Any, kinds: tuple[str, ...]) -> bool:
    """The controlling owner (of ``obj``, a dict) is one of ``kinds`` (``service_kind``)."""
    gk = controller_group_kind(obj)
    return gk is not None and service_kind(gk[0], gk[1], kinds)


def service_kind(group: str, kind: str, kinds: tuple[str, ...] = SERVICE_OWNER_KINDS) -> bool:
    """``group``/``kind`` is one of ``kinds`` (services' controllers): one of Kubernetes' own
    (``SERVICE_OWNER_GROUPS``) only in its real API group, ``apps/v1 DaemonSet`` and not
    ``nope.example.com/v1 DaemonSet``; another kind an admin listed, by its name."""
    if kind not in kinds:
        return False
    real = SERVICE_OWNER_GROUPS.get(kind)
    return real is None or group == real


# The kinds whose controllers make pods (or workloads) from a pod template someone wrote: what they
# make carries that template's admission seal (webhook.seal), or was never judged as its writer.
TEMPLATE_OWNERS = frozenset({("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("apps", "DaemonSet"),
                             ("apps", "Deployment"), ("batch", "Job"), ("batch", "CronJob"),
                             ("", "ReplicationController")})


def made_from_template(obj: Any) -> bool:
    """The controlling owner is a kind that makes its pods from a pod template (TEMPLATE_OWNERS)."""
    ref = controller_of(obj)
    if ref is None:
        return False
    group = str(ref.get("apiVersion") or "").rpartition("/")[0]
    return (group, str(ref.get("kind") or "")) in TEMPLATE_OWNERS


# API groups of Kubernetes' own workload controllers; any other controlling owner is a
# custom resource run by an operator.
BUILTIN_GROUPS = ("", "apps", "batch", "batchgate.io")


def owned_by_custom_resource(obj: Any) -> bool:
    ref = controller_of(obj)
    if ref is None:
        return False
    group = str(ref.get("apiVersion") or "").rpartition("/")[0]
    return group not in BUILTIN_GROUPS


# -- gangs and what a Job declares about failures ------------------------------------
# A gang's pods start together (the gang scheduler's labels) and, when one fails, start over
# together (the reconciler). That suits workloads whose pods need each other (MPI ranks, the
# workers of a distributed training run), and breaks those built to let one pod fail while the
# others go on. So a multi-pod Job is a gang when it asks (``batchgate.io/gang: "true"``, or it
# names its batchgate group itself), when its queue says every multi-pod Job is one (unless the Job
# says ``"false"``), or when its shape says its pods run as one: an Indexed Job whose indexes all
# run at once (completions == parallelism) and that declares no tolerance for one of them failing.

BACKOFF_LIMIT_DEFAULT = 6  # what the API server writes when a Job leaves spec.backoffLimit out
PodFailureAction = str  # "FailJob" | "Ignore" | "Count" | "FailIndex"
FAILURE_ACTIONS = frozenset({"FailJob", "Ignore", "Count", "FailIndex"})
MAX_FAILURE_RULES = 20  # podFailurePolicy rules (and conditions per rule) the API server takes
MAX_EXIT_CODES = 255  # onExitCodes values the API server takes


@dataclass(frozen=True, slots=True)
class PodFailureRule:
    """One ``spec.podFailurePolicy.rules[]`` entry (Kubernetes 1.25+)."""

    action: PodFailureAction
    container: str | None = None  # onExitCodes.containerName
    exit_in: bool = True  # onExitCodes.operator: In (True) or NotIn
    exit_codes: frozenset[int] | None = None  # None: the rule has no onExitCodes
    conditions: tuple[tuple[str, str], ...] = ()  # onPodConditions: (type, status)

    def matches(self, exits: tuple[tuple[str, int], ...], conditions: frozenset[tuple[str, str]]) -> bool:
        """``exits``: (container, code) of the failed pod's terminated containers, non-zero codes only;
        ``conditions``: its (type, status) conditions."""
        if self.exit_codes is not None:
            return any((self.container is None or name == self.container)
                       and ((code in self.exit_codes) == self.exit_in) for name, code in exits)
        return any(c in conditions for c in self.conditions)


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """What a Job declares about its pods failing, as its controller applies it."""

    backoff_limit: int = BACKOFF_LIMIT_DEFAULT
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    success_policy: bool = False
    rules: tuple[PodFailureRule, ...] = ()
    restart_policy: str = "Never"  # of the pod template: Never or OnFailure

    def action_for(self, exits: tuple[tuple[str, int], ...], conditions: frozenset[tuple[str, str]]) -> PodFailureAction:
        """What the Job controller does with a failed pod: the first matching rule's action, else
        Count (the failure counts against backoffLimit, or backoffLimitPerIndex)."""
        for rule in self.rules:
            if rule.matches(exits, conditions):
                return rule.action
        return "Count"

    def tolerates(self) -> tuple[str, ...]:
        """What lets one pod fail (or be retried) on its own while the others go on; empty when
        nothing does. backoffLimit is not among them: it is a budget for the Job as a whole, which
        a gang spends by starting over together."""
        said: list[str] = []
        if self.backoff_limit_per_index is not None:
            said.append(f"backoffLimitPerIndex: {self.backoff_limit_per_index}")
        if self.max_failed_indexes is not None:
            said.append(f"maxFailedIndexes: {self.max_failed_indexes}")
        if self.success_policy:
            said.append("successPolicy")
        if any(r.action == "Ignore" and r.exit_codes is not None for r in self.rules):
            said.append("podFailurePolicy rules that Ignore exit codes")
        if self.restart_policy == "OnFailure":
            said.append("restartPolicy: OnFailure")
        return tuple(said)


DEFAULT_FAILURE_POLICY = FailurePolicy()


_DECLARED_FAILURE_FIELDS = frozenset({"podFailurePolicy", "backoffLimitPerIndex", "maxFailedIndexes", "successPolicy"})


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def failure_policy(job_spec: Any) -> FailurePolicy:
    """The Job's declared failure handling; anything malformed reads as absent (the API server
    rejects such Jobs anyway)."""
    if not isinstance(job_spec, dict):
        return DEFAULT_FAILURE_POLICY
    if _DECLARED_FAILURE_FIELDS.isdisjoint(job_spec) and job_spec.get("backoffLimit") in (None, BACKOFF_LIMIT_DEFAULT) \
            and dig(job_spec, ("template", "spec", "restartPolicy")) != "OnFailure":
        return DEFAULT_FAILURE_POLICY  # the usual Job, without building a FailurePolicy to compare (~8k instructions)
    rules: list[PodFailureRule] = []
    pfp = job_spec.get("podFailurePolicy")
    # (at most as many rules, codes and conditions as the API server takes, of the actions it knows)
    for r in _list(pfp.get("rules") if isinstance(pfp, dict) else None)[:MAX_FAILURE_RULES]:
        if not isinstance(r, dict) or r.get("action") not in FAILURE_ACTIONS:
            continue
        on_exit = r.get("onExitCodes")
        if isinstance(on_exit, dict):
            codes = frozenset(c for c in _list(on_exit.get("values"))[:MAX_EXIT_CODES] if json_int(c) is not None)
            name = on_exit.get("containerName")
            rules.append(PodFailureRule(r["action"], container=name[:63] if isinstance(name, str) else None,
                                        exit_in=on_exit.get("operator") != "NotIn", exit_codes=codes))
        else:
            conds = tuple((str(c.get("type") or "")[:316], str(c.get("status") or "True")[:16])
                          for c in _list(r.get("onPodConditions"))[:MAX_FAILURE_RULES] if isinstance(c, dict))
            rules.append(PodFailureRule(r["action"], conditions=conds))
    backoff = json_int(job_spec.get("backoffLimit"))
    restart = dig(job_spec, ("template", "spec", "restartPolicy"))
    policy = FailurePolicy(
        backoff_limit=BACKOFF_LIMIT_DEFAULT if backoff is None else backoff,
        backoff_limit_per_index=json_int(job_spec.get("backoffLimitPerIndex")),
        max_failed_indexes=json_int(job_spec.get("maxFailedIndexes")),
        success_policy=isinstance(job_spec.get("successPolicy"), dict),
        rules=tuple(rules),
        restart_policy=restart if restart == "OnFailure" else "Never",
    )
    return DEFAULT_FAILURE_POLICY if policy == DEFAULT_FAILURE_POLICY else policy


def pods_at_once(job_spec: Any) -> int:
    """Pods a Job runs at once: parallelism (1 when unset), unless fewer completions are wanted."""
    if not isinstance(job_spec, dict):
        return 1
    n = json_int(job_spec.get("parallelism"))
    n = 1 if n is None else n
    completions = json_int(job_spec.get("completions"))
    return min(n, completions) if completions is not None else n


GangRequest = Any  # the batchgate.io/gang label's value as written: "true", "false", None, or junk


@dataclass(frozen=True, slots=True)
class Gang:
    """Whether a Job's pods form a gang, and why (for messages)."""

    size: int  # pods at once
    is_gang: bool
    why: str  # what made it one, or not: completes "... is a gang because <why>"
    tolerates: tuple[str, ...]  # what the Job declares that lets one pod fail on its own
    by_queue: bool = False  # the queue's setting made it a gang


def job_gang(job_spec: Any, *, request: GangRequest, names_group: bool, queue: str | None,
             queue_gangs: bool) -> Gang:
    """Decide whether a Job is a gang. ``request``: its ``batchgate.io/gang`` label; ``names_group``:
    its pod template names its batchgate group itself (``batchgate.io/pod-group``); ``queue_gangs``:
    its queue makes every multi-pod Job a gang."""
    size = pods_at_once(job_spec)
    policy = failure_policy(job_spec)
    tolerates = policy.tolerates()
    if size <= 1:
        return Gang(size, False, "it runs one pod at a time", tolerates)
    if request == "false":
        return Gang(size, False, 'it says batchgate.io/gang: "false"', tolerates)
    if request == "true":
        return Gang(size, True, 'it asks with batchgate.io/gang: "true"', tolerates)
    if names_group:
        return Gang(size, True, "its pod template names its batchgate.io/pod-group", tolerates)
    if queue_gangs:
        return Gang(size, True, f"queue {queue} runs every multi-pod Job as a gang", tolerates, by_queue=True)
    spec = job_spec if isinstance(job_spec, dict) else {}
    indexed = spec.get("completionMode") == "Indexed"
    if indexed and json_int(spec.get("completions")) == json_int(spec.get("parallelism")) and not tolerates:
        return Gang(size, True, "it is an Indexed Job whose indexes all run at once", tolerates)
    if tolerates:
        return Gang(size, False, f"it tolerates a pod failing ({', '.join(tolerates)})", tolerates)
    if not indexed:
        return Gang(size, False, "its pods are interchangeable (not Indexed)", tolerates)
    return Gang(size, False, "its indexes do not all run at once (completions != parallelism)", tolerates)
