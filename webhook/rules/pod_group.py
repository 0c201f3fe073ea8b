"""Pod groups: all pods of a multi-pod job carry the gang scheduler's group labels.

A gang scheduler starts a group's pods together or not at all, so an MPI job
never sits with half its ranks running and the rest pending. Each scheduler
finds the group by its own label or annotation; batchgate writes those of the
schedulers the bundle names, plus its own scheduler-independent pair
(``batchgate.io/pod-group`` and ``batchgate.io/pod-group-size``) by which the
reconciler finds groups to tear down when one member fails.

Which Jobs are gangs (``webhook.workloads.job_gang``): those running more than
one pod at a time (``min(parallelism, completions)``) that ask
(``batchgate.io/gang: "true"``, or a template naming ``batchgate.io/pod-group``),
whose queue says ``gang: always`` (unless they say ``"false"``; a Job that
declares it lets one pod fail on its own is warned), or that are Indexed with
all indexes at once and no such tolerance. Others are left alone: a gang starts
over as a whole when one pod fails, which breaks Jobs built to let pods fail.

Where the group comes from:

- **Job** that is a gang: the labels go into ``spec.template`` so every pod the
  Job controller makes inherits them; the group is named after the Job.
- **Job with only generateName**: its name is not known at admission, so the
  template gets only the size; the Job's pods arrive with a controller
  ownerReference naming the Job, and the Pod mutation names the group then.
- **CronJob**: a fixed group name in its template would be shared by every run,
  so the CronJob's pod template gets only the size label. Each Job the CronJob
  controller creates has a fresh name and is admitted as a Job, which names the
  group after itself.
- **Bare Pods** opt in with ``batchgate.io/pod-group: <name>`` and
  ``batchgate.io/pod-group-size: "<n>"``.

A workload that already names its gang for a scheduler itself (any of the
scheduler keys below, without batchgate's) is left alone.

A Job that is a gang also gets the podFailurePolicy rule ``Ignore`` on the
``DisruptionTarget`` pod condition (``_ignore_disruptions``): the members the
reconciler takes down when the gang starts over, and those Kubernetes preempts,
evicts or loses with their node, are interruptions, not failures that spend the
Job's backoffLimit (rooms of this feature: here, webhook/reconciler/planner.py
``_gang``, webhook/reconciler/actuator.py ``_disrupt``).
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..contract import COSCHEDULING_LABEL, GANG_LABEL, POD_GROUP_LABEL, POD_GROUP_SIZE_LABEL
from ..units import json_int
from ..workloads import Gang, job_gang
from .base import Ctx, Finding, Path, RuleType, deny, dig, warn

if TYPE_CHECKING:
    from ..bundle import Bundle
    from ..draft import Draft
    from ..yamlsrc import Node

KUEUE_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"

Scheduler = Literal["coscheduling", "kueue", "volcano"]
SCHEDULERS: tuple[Scheduler, ...] = ("coscheduling", "kueue", "volcano")
# (where, key) that name the group, per scheduler; the size goes where noted below.
_NAME_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "coscheduling": (("labels", COSCHEDULING_LABEL),),
    "kueue": (("labels", KUEUE_LABEL),),
    "volcano": (("annotations", VOLCANO_ANNOTATION),),
}
_FOREIGN_KEYS = tuple(k for keys in _NAME_KEYS.values() for k in keys)
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
MAX_LABEL_VALUE = 63


@dataclass(frozen=True, slots=True)
class Settings:
    schedulers: tuple[Scheduler, ...] = ("coscheduling",)


def parse(node: Node, bundle: Bundle) -> Settings:
    node.mapping(allowed=("schedulers",))
    s = node.get("schedulers")
    if s is None:
        return Settings()
    chosen: list[Scheduler] = []
    for n in s.seq():
        name = n.enum(*SCHEDULERS)
        if name in chosen:
            n.fail("listed twice")
        chosen.append(name)
    if not chosen:
        s.fail(f"name at least one of {', '.join(SCHEDULERS)}")
    return Settings(schedulers=tuple(chosen))


def group_name(name: str) -> str:
    """``name`` as a label value: long names are cut and get a hash suffix, so they stay unique."""
    if len(name) <= MAX_LABEL_VALUE and _LABEL_VALUE.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    head = re.sub(r"[^-A-Za-z0-9_.]", "-", name)[: MAX_LABEL_VALUE - len(digest) - 1]
    head = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", head)
    return f"{head}-{digest}" if head else digest


def _size(value: Any) -> int | None:
    """A size label's value as a positive integer, or None."""
    if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]{0,8}", value):
        return int(value)
    return None


def _user_managed(meta: dict[str, Any]) -> bool:
    """The workload names its gang for some scheduler itself, without batchgate's labels."""
    if POD_GROUP_LABEL in (meta.get("labels") or {}):
        return False
    return any(key in (meta.get(where) or {}) for where, key in _FOREIGN_KEYS)


# -- mutation -------------------------------------------------------------------
def mutate(settings: Settings, draft: Draft, ctx: Ctx) -> list[Finding]:
    shape = ctx.shape
    if shape is None:
        return []
    meta = draft.get(*shape.pod_meta) or {}
    if not isinstance(meta, dict) or _user_managed(meta):
        return []
    labels = meta.get("labels") or {}
    if shape.kind == "Pod":
        return _mutate_pod(settings, draft, labels)
    if shape.kind == "Job":
        return _mutate_job(settings, draft, ctx, labels)
    if shape.kind == "CronJob":
        return _mutate_cronjob(draft, ctx, labels)
    return []


def _mutate_pod(settings: Settings, draft: Draft, labels: dict[str, Any]) -> list[Finding]:
    size = _size(labels.get(POD_GROUP_SIZE_LABEL))
    if size is None:
        return []  # not a gang, or a bad size that validate() explains
    group = labels.get(POD_GROUP_LABEL)
    if group is None:
        owner = next((r for r in draft.get("metadata", "ownerReferences") or []
                      if isinstance(r, dict) and r.get("controller") and r.get("name")), None)
        if owner is None:
            return []  # validate() asks for a group name
        group = group_name(str(owner["name"]))  # a Job with generateName: now we know its name
    _write(settings, draft, ("metadata",), str(group), size)
    return []


def _request(draft_or_obj: Any, shape_meta: Path, outer: Path) -> Any:
    """The ``batchgate.io/gang`` label: on the workload's own metadata, else its pod template's."""
    for path in (outer, shape_meta):
        labels = dig(draft_or_obj, (*path, "labels"))
        if isinstance(labels, dict) and GANG_LABEL in labels:
            return labels[GANG_LABEL]
    return None


def _decide_gang(obj: Any, ctx: Ctx) -> Gang | None:
    """Whether the Job or CronJob ``obj`` is a gang (None for other kinds)."""
    shape = ctx.shape
    if shape is None or shape.kind not in ("Job", "CronJob"):
        return None
    spec_path: Path = ("spec",) if shape.kind == "Job" else ("spec", "jobTemplate", "spec")
    outer: Path = ("metadata",) if shape.kind == "Job" else ("spec", "jobTemplate", "metadata")
    labels = dig(obj, (*shape.pod_meta, "labels"))
    names_group = isinstance(labels, dict) and POD_GROUP_LABEL in labels
    queue = ctx.queue
    return job_gang(dig(obj, spec_path), request=_request(obj, shape.pod_meta, outer), names_group=names_group,
                    queue=ctx.queue_name, queue_gangs=queue is not None and queue.gangs)


def _not_a_gang(draft: Draft, meta_path: Path, labels: dict[str, Any], gang: Gang, subject: str) -> list[Finding]:
    """A multi-pod workload that is no gang: a stray size label would make its pods one."""
    if POD_GROUP_SIZE_LABEL not in labels:
        return []
    draft.delete(*meta_path, "labels", POD_GROUP_SIZE_LABEL)
    return [warn(f"{subject}: label {POD_GROUP_SIZE_LABEL} removed from the pod template: it is not a gang because "
                 f"{gang.why}; label it {GANG_LABEL}: \"true\" to make it one")]


def _queue_warning(gang: Gang, subject: str) -> list[Finding]:
    if not (gang.by_queue and gang.tolerates):
        return []
    return [warn(
        f"{subject} runs as a gang because {gang.why}, although it declares {', '.join(gang.tolerates)}: "
        f"its {gang.size} pods start together and, when one fails, all start over together (within its "
        f"backoffLimit); label it {GANG_LABEL}: \"false\" to let its pods fail and be retried on their own"
    )]


def _mutate_job(settings: Settings, draft: Draft, ctx: Ctx, labels: dict[str, Any]) -> list[Finding]:
    gang = _decide_gang(draft.root, ctx)
    meta_path = ("spec", "template", "metadata")
    if gang is None or gang.size <= 1:
        return []
    if not gang.is_gang:
        return _not_a_gang(draft, meta_path, labels, gang, ctx.subject)
    size = gang.size
    findings: list[Finding] = _queue_warning(gang, ctx.subject)
    given = labels.get(POD_GROUP_SIZE_LABEL)
    if given is not None and given != str(size):
        findings.append(warn(
            f"spec.template label {POD_GROUP_SIZE_LABEL}={given!r} replaced by {str(size)!r}: a Job's group size "
            f"follows its parallelism and completions"
        ))
    group = labels.get(POD_GROUP_LABEL)
    if group is None and ctx.name:
        group = group_name(ctx.name)
    if group is None:  # generateName: the Pod mutation names the group after the Job
        draft.ensure(*meta_path, "labels", POD_GROUP_SIZE_LABEL, str(size))
    else:
        _write(settings, draft, meta_path, str(group), size)
    findings += _make_indexed(draft, ctx.subject)
    findings += _ignore_disruptions(draft, ctx.subject)
    return findings


def _make_indexed(draft: Draft, subject: str) -> list[Finding]:
    """A gang Job whose pods all run at once (``completions == parallelism``; Indexed needs
    completions) becomes ``completionMode: Indexed``: the Job controller then gives each pod
    ``spec.hostname: <job>-<index>`` and the completion index, so with the job-network policy's
    subdomain ``<job>-<index>.<service>`` names one rank for the Job's life (a replaced pod keeps
    its index) and the hostfile lists the members by index.

    The API server writes ``completionMode: NonIndexed`` into every Job that leaves it out, before
    the webhooks see it, so NonIndexed is taken for "not chosen" and replaced (silently: a warning
    would come with every gang Job); a Job that must stay NonIndexed and a gang opts out of the
    gang with ``batchgate.io/gang: "false"``. Left alone: a Job already Indexed, one whose
    completions are unset or differ from its parallelism (not every index runs at once: warned, as
    its pods then have no stable hostname), and a mode the API server will refuse anyway."""
    spec = draft.get("spec")
    if not isinstance(spec, dict):
        return []
    mode = spec.get("completionMode")
    if mode == "Indexed" or mode not in (None, "NonIndexed"):
        return []
    completions, parallelism = json_int(spec.get("completions")), json_int(spec.get("parallelism"))
    if completions is None or completions != parallelism:
        return []  # documented: its pods get no stable hostname
    draft.set("spec", "completionMode", "Indexed")
    return []

# The podFailurePolicy rule a gang Job gets: a pod stopped from outside (Kubernetes' preemption,
# eviction, taint manager, PodGC; batchgate taking the members down when the gang starts over) is
# an interruption, not a failure.
DISRUPTION_RULE: dict[str, Any] = {"action": "Ignore",
                                   "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
MAX_POD_FAILURE_RULES = 20  # the API server's limit


def _ignore_disruptions(draft: Draft, subject: str) -> list[Finding]:
    """Give a gang Job's podFailurePolicy the rule ``Ignore`` on the ``DisruptionTarget`` condition,
    first (the first matching rule decides: an exit-code rule would otherwise match the SIGTERM
    exit of a member stopped from outside), and ``podReplacementPolicy: Failed``, which the API
    server requires with a podFailurePolicy (it defaulted the field before the webhook saw the Job).

    Why: since Kubernetes 1.26 the Job controller tracks pods with a finalizer and counts every pod
    deleted before it ended as failed. When one member fails, the reconciler deletes the others so
    the gang starts over together; without the rule that one restart would spend the Job's
    backoffLimit once per member. With it, the restart costs the one failure that caused it: the
    reconciler marks the members it takes down with DisruptionTarget, as Kubernetes marks those it
    preempts, evicts or loses with their node. Left as written: a Job that decides about
    DisruptionTarget itself (its own rule on it), one whose pods restart in place (podFailurePolicy
    needs restartPolicy: Never), and one with no room for another rule (warned)."""
    spec = draft.get("spec")
    restart = dig(spec, ("template", "spec", "restartPolicy"))
    if restart == "OnFailure":
        return [warn(f"{subject}: with restartPolicy: OnFailure it can have no podFailurePolicy, so when its gang "
                     f"starts over together after a pod was preempted, evicted or lost with its node, the pods "
                     f"stopped count as failures against its backoffLimit; restartPolicy: Never avoids that")]
    if not isinstance(spec, dict) or restart != "Never":
        return []
    pfp = spec.get("podFailurePolicy")
    rules = pfp.get("rules") if isinstance(pfp, dict) else [] if pfp is None else None
    if not isinstance(rules, list):
        return []  # malformed: the API server says what is wrong with it
    for rule in rules:
        conds = rule.get("onPodConditions") if isinstance(rule, dict) else None
        if any(isinstance(c, dict) and c.get("type") == "DisruptionTarget" for c in conds or ()):
            return []  # its own decision about disruptions
    if len(rules) >= MAX_POD_FAILURE_RULES:
        return [warn(f"{subject}: spec.podFailurePolicy has {len(rules)} rules, the most Kubernetes allows, so "
                     f"batchgate could not add {{action: Ignore, onPodConditions: [{{type: DisruptionTarget}}]}}: "
                     f"when its gang starts over together, the pods batchgate stops count as failures against "
                     f"its backoffLimit")]
    draft.edit("spec", "podFailurePolicy", "rules", create=list).insert(0, copy.deepcopy(DISRUPTION_RULE))
    draft.ensure("spec", "podReplacementPolicy", "Failed")
    return []


def _mutate_cronjob(draft: Draft, ctx: Ctx, labels: dict[str, Any]) -> list[Finding]:
    gang = _decide_gang(draft.root, ctx)
    meta_path = ("spec", "jobTemplate", "spec", "template", "metadata")
    if gang is None or gang.size <= 1:
        return []
    if not gang.is_gang:
        return _not_a_gang(draft, meta_path, labels, gang, ctx.subject)
    findings: list[Finding] = _queue_warning(gang, ctx.subject)
    if POD_GROUP_LABEL in labels:
        findings.append(warn(
            f"the CronJob's pod template names the pod group {labels[POD_GROUP_LABEL]!r}: every run shares "
            f"it; leave {POD_GROUP_LABEL} out and each run's group is named after its Job"
        ))
    draft.ensure(*meta_path, "labels", POD_GROUP_SIZE_LABEL, str(gang.size))
    return findings


def _write(settings: Settings, draft: Draft, meta: Path, group: str, size: int) -> None:
    draft.ensure(*meta, "labels", POD_GROUP_LABEL, group)
    draft.ensure(*meta, "labels", POD_GROUP_SIZE_LABEL, str(size))
    for scheduler in settings.schedulers:
        for where, key in _NAME_KEYS[scheduler]:
            draft.ensure(*meta, where, key, group)
        if scheduler == "kueue":
            draft.ensure(*meta, "annotations", KUEUE_COUNT_ANNOTATION, str(size))



# -- validation -----------------------------------------------------------------
def validate(settings: Settings, obj: dict[str, Any], ctx: Ctx) -> list[Finding]:
    shape = ctx.shape
    if shape is None:
        return []
    meta = dig(obj, shape.pod_meta) or {}
    if not isinstance(meta, dict) or _user_managed(meta):
        return []
    labels = meta.get("labels") or {}
    where = "" if shape.is_pod else f" in {'.'.join(map(str, shape.pod_meta))}"
    findings: list[Finding] = []
    # (decided on Jobs and CronJobs only: on a Pod the label means nothing, and a pod the Job
    # controller makes must not be refused for what its admitted template says)
    request = None
    if shape.kind in ("Job", "CronJob"):
        request = _request(obj, shape.pod_meta,
                           ("metadata",) if shape.kind == "Job" else ("spec", "jobTemplate", "metadata"))
    if request is not None and request not in ("true", "false"):
        findings.append(deny(f'label {GANG_LABEL} must be "true" or "false"; got {request!r}'))
    elif request == "false" and POD_GROUP_LABEL in labels:
        findings.append(deny(
            f'label {GANG_LABEL}: "false" contradicts label {POD_GROUP_LABEL}={labels[POD_GROUP_LABEL]!r}{where}, '
            f"which makes the pods a gang; remove one of them"
        ))
    size, group = labels.get(POD_GROUP_SIZE_LABEL), labels.get(POD_GROUP_LABEL)
    if size is not None and _size(size) is None:
        findings.append(deny(
            f"label {POD_GROUP_SIZE_LABEL}{where} must be a positive whole number of pods, "
            f"like \"4\"; got {size!r}"
        ))
    if group is not None and not (isinstance(group, str) and len(group) <= MAX_LABEL_VALUE
                                  and _LABEL_VALUE.fullmatch(group)):
        findings.append(deny(
            f"label {POD_GROUP_LABEL}{where} must be a valid label value (at most {MAX_LABEL_VALUE} "
            f"letters, digits, '-', '_' or '.', starting and ending with a letter or digit); got {group!r}"
        ))
    if shape.is_pod:
        if group is not None and size is None:
            findings.append(deny(
                f"label {POD_GROUP_LABEL}={group!r} needs {POD_GROUP_SIZE_LABEL}: the number of pods in the group, "
                f"e.g. {POD_GROUP_SIZE_LABEL}: \"4\""
            ))
        if size is not None and group is None:
            findings.append(deny(
                f"label {POD_GROUP_SIZE_LABEL} needs {POD_GROUP_LABEL}: the group's name, shared by all its pods, "
                f"e.g. {POD_GROUP_LABEL}: my-run"
            ))
    return findings


TYPE = RuleType(
    name="pod-group",
    doc=(
        "Gang labels for coscheduling (default), Kueue and Volcano on Jobs that ask "
        "(batchgate.io/gang), whose queue says gang: always, or Indexed with all indexes at once "
        "and no per-pod failure tolerance; group named after the Job, sized from parallelism."
    ),
    parse=parse,
    mutate=mutate,
    validate=validate,
    order=40,
)
