"""Names that are part of batchgate's public contract (labels, annotations, the API group): users and
admins type these, so they never change."""

from __future__ import annotations

from typing import Any

from .units import DurationTooLong, parse_duration, shown

GROUP = "batchgate.io"
API_VERSION = f"{GROUP}/v1alpha1"
QUEUE_LABEL = f"{GROUP}/queue"
TIME_LIMIT_ANNOTATION = f"{GROUP}/time-limit"
# The user's own guess of how long the job runs (at most its time limit): expected start times
# count on it, where they would otherwise predict from earlier runs. Slurm's --time-min in spirit.
EXPECTED_RUNTIME_ANNOTATION = f"{GROUP}/expected-runtime"
EXCLUSIVE_LABEL = f"{GROUP}/exclusive"
EXCLUSIVE_GROUP_LABEL = f"{GROUP}/exclusive-group"
POD_GROUP_LABEL = f"{GROUP}/pod-group"
# On a Namespace, =disabled leaves it out of every webhook (set by cluster admins only).
OPT_OUT_LABEL = f"{GROUP}/admission"
OPT_OUT_VALUE = "disabled"
POD_GROUP_SIZE_LABEL = f"{GROUP}/pod-group-size"
# On a Job (or its pod template, a CronJob's jobTemplate): "true" makes its pods a gang, "false" keeps
# them apart even where the queue runs multi-pod Jobs as gangs.
GANG_LABEL = f"{GROUP}/gang"
# Job networking (policy job-network): users type the first two; the webhook stamps the label.
CONNECT_TO_ANNOTATION = f"{GROUP}/connect-to"  # workloads this one may talk to (both sides must name each other)
SLOTS_ANNOTATION = f"{GROUP}/slots"  # MPI slots per member in the hostfile
NETWORK_LABEL = f"{GROUP}/network"  # the workload's headless Service; selects its members
# Written by the reconciler only; users read them (kubectl get -o yaml shows the deadline).
STARTED_AT_ANNOTATION = f"{GROUP}/started-at"
DEADLINE_ANNOTATION = f"{GROUP}/deadline"
WARNED_FOR_ANNOTATION = f"{GROUP}/warned-for"
# The next maintenance window on the nodes a running job uses (JSON: window, start, node), so that
# the webhook, which has no API access, can refuse an extension that would run into it.
NEXT_MAINTENANCE_ANNOTATION = f"{GROUP}/next-maintenance"
# The admission record: the queue and time limit a Pod or Job was admitted with, written by the
# webhook at CREATE into every container's environment (spec fields Kubernetes never lets anyone
# change afterwards, unlike labels and annotations). The workload may read them, as Slurm's
# SLURM_JOB_PARTITION; an extension of the limit shows in the annotation, not here.
RECORD_QUEUE_ENV = "BATCHGATE_QUEUE"
RECORD_TIME_LIMIT_ENV = "BATCHGATE_TIME_LIMIT"
# ... and which Job's controller made the pod: the Job's uid on a Pod the Job controller created
# for it (its controlling ownerReference, written by that controller at CREATE), empty on every
# other Pod and on a Job's pod template. An ownerReference can be rewritten by anyone who may
# update the pod; this cannot: a pod counts for a Job (its start, its gang) only with its uid here.
RECORD_JOB_UID_ENV = "BATCHGATE_JOB_UID"
# Written by the reconciler on a gang member whose failure restarted its gang, with the pod's own
# uid as value (a copy from a template or another pod means nothing): the failure was dealt with.
GANG_RESTART_ANNOTATION = f"{GROUP}/gang-restart"
# On a pod template (and so on the pods made from it): the webhook's seal over what it judged when
# it admitted the template (webhook.seal); written by the webhook only, a forged one never verifies.
SEAL_ANNOTATION = f"{GROUP}/admitted"
# The batch queue (policy queue-gate, reconciler queue.py): the scheduling gate on the pods of
# workloads waiting in a gated queue, and the annotation on a Job that waits suspended; only the
# reconciler (and admins) take either away, when the workload's turn comes.
QUEUE_GATE = f"{GROUP}/queue"
QUEUED_ANNOTATION = f"{GROUP}/queued"
# Its value on a released Job its user suspended (the webhook marks it; "true" elsewhere): the Job goes
# back to its queue, and the reconciler re-queues it as its own (requeue.py) before it is placed again.
QUEUED_BY_SUSPEND = "suspended"
# The gang's label for scheduler-plugins' coscheduling (policy pod-group writes it; the reconciler
# reads the gang's PodGroup name from it).
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
# Workloads another queue manager admits (Kueue) are never gated.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# On a workload waiting in batchgate's queue: its reservation's start, the promise (queue.py).
START_BY_ANNOTATION = f"{GROUP}/start-by"
# On a Job the queue re-queued (planner._requeue: a node it was narrowed to vanished while it ran):
# when it was suspended again. Its run before that no longer dates it (its time limit counts afresh
# from its next start), so only the reconciler may write it.
REQUEUED_AT_ANNOTATION = f"{GROUP}/requeued-at"
# Kata CPU (policy kata-cpu): on a pod or template it adjusted, what was asked for and the overhead taken out.
KATA_REQUESTED_CPU_ANNOTATION = f"{GROUP}/kata-requested-cpu"
KATA_OVERHEAD_CPU_ANNOTATION = f"{GROUP}/kata-overhead-cpu"
# Written by the reconciler: on Nodes, the window that cordoned it and the state before
# (maintenance); on pending workloads, the expected start (RFC 3339 or "unknown") and why;
# on what job networking made, the hash of the spec it was made from.
MAINTENANCE_ANNOTATION = f"{GROUP}/maintenance"
EXPECTED_START_ANNOTATION = f"{GROUP}/expected-start"
EXPECTED_START_REASON_ANNOTATION = f"{GROUP}/expected-start-reason"
SPEC_HASH_ANNOTATION = f"{GROUP}/spec-hash"
COUNTDOWN_LABEL = f"{GROUP}/maintenance-in-minutes"
"""Node label, written by the reconciler only: whole minutes until the node's next window."""
# On what the reconciler makes (a ScavengerJob's Jobs and guards, job networking's Services, hostfile
# ConfigMaps and NetworkPolicies): the admission policy batchgate-reconciler-writes lets its
# ServiceAccount write Services, ConfigMaps, NetworkPolicies and PodDisruptionBudgets only with it.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "batchgate"
# What only the reconciler (and admins) may set, change or remove on workloads (policy
# reconciler-annotations): its memory (a forged started-at or a removed deadline would buy time),
# the gang restart it dealt with (a forged one on a colleague's pod hides a failure), and what it
# tells users (a forged expected-start or start-by would mislead them).
RECONCILER_ANNOTATIONS = (STARTED_AT_ANNOTATION, DEADLINE_ANNOTATION, WARNED_FOR_ANNOTATION,
                          NEXT_MAINTENANCE_ANNOTATION, GANG_RESTART_ANNOTATION, EXPECTED_START_ANNOTATION,
                          EXPECTED_START_REASON_ANNOTATION, START_BY_ANNOTATION, REQUEUED_AT_ANNOTATION)
# On a ScavengerJob's Jobs and pods (and its guard's selector), written by the reconciler: the
# ScavengerJob's name and the segment number.
SCAVENGERJOB_LABEL = f"{GROUP}/scavengerjob"
SEGMENT_LABEL = f"{GROUP}/segment"
# A ScavengerJob's size, per pod and in pods (policy scavengerjob refuses more, the reconciler's view
# fails such an object stored while the webhook was down): far beyond any node and any gang, and
# small enough that the controller's arithmetic and the Job it makes stay what Kubernetes takes.
# Durations are bounded by the parser (webhook.units.MAX_DURATION).
SCAVENGERJOB_MAX_PODS = 10_000
# Its name is a label value on its Jobs, their pods and its guard (batchgate.io/scavengerjob): at most
# 63 characters, or the Job could never be created (the CRD's schema says so too).
SCAVENGERJOB_MAX_NAME = 63
SCAVENGERJOB_MAX_CPU = 10_000  # cores per pod
SCAVENGERJOB_MAX_MEMORY = 2**50  # bytes per pod: 1Pi
# spec.checkpointExitCode is 1..this: 128 and up mean killed by a signal (the CRD's schema says the same)
SCAVENGERJOB_MAX_CHECKPOINT_EXIT_CODE = 127
# spec.checkpoint.interval: the workload checkpoints every interval, counted from its container's
# start, and runs as one long pod (no segments); at least this many seconds.
SCAVENGERJOB_MIN_CHECKPOINT_INTERVAL = 60


def scavengerjob_checkpoint(spec: dict[str, Any]) -> tuple[int | None, list[str]]:
    """``spec.checkpoint`` of a ScavengerJob: the declared interval in seconds (None: not declared,
    or unusable) and its problems, each starting with its field path. The one parse the admission
    rule (policy scavengerjob) and the reconciler's view share."""
    value = spec.get("checkpoint")
    if value is None:
        return None, []
    if not isinstance(value, dict):
        return None, ["spec.checkpoint: must be a mapping like {interval: 10m}"]
    problems = [f"spec.checkpoint.{k}: unknown field (known: interval)" for k in value if k != "interval"]
    if spec.get("checkpointExitCode") is not None:
        problems.append("spec.checkpoint: set either spec.checkpoint (one long pod that checkpoints every interval) "
                        "or spec.checkpointExitCode (segments it ends itself), not both")
    interval: int | None = None
    text = value.get("interval")
    if text is None:
        problems.append("spec.checkpoint.interval: required, how often the workload checkpoints counted from its "
                        "container's start, e.g. 10m")
    else:
        try:
            interval = parse_duration(text if isinstance(text, str) else "")
        except DurationTooLong as e:
            problems.append(f"spec.checkpoint.interval: {e}")
        except ValueError:
            problems.append(f"spec.checkpoint.interval: {shown(text)} is not a duration, write e.g. 10m or 1h")
        if interval is not None and interval < SCAVENGERJOB_MIN_CHECKPOINT_INTERVAL:
            problems.append(f"spec.checkpoint.interval: {text} is shorter than "
                            f"{SCAVENGERJOB_MIN_CHECKPOINT_INTERVAL // 60}m")
            interval = None
    return (interval if not problems else None), problems
