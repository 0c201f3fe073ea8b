"""Raw API objects for the planner tests, shaped like what the API server returns.

Times are offsets in seconds from ``T0`` so that cases read as "started 10
minutes before now" rather than as timestamps.
"""

from __future__ import annotations

from typing import Any, cast

from webhook.contract import (
    COSCHEDULING_LABEL,
    DEADLINE_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_LABEL,
    STARTED_AT_ANNOTATION,
    TIME_LIMIT_ANNOTATION,
    WARNED_FOR_ANNOTATION,
)
from webhook.reconciler.model import (
    NodeView,
    Snapshot,
    job_view,
    pod_group_view,
    pod_view,
)
from webhook.units import format_time, parse_time

T0 = int(parse_time("2024-05-01T10:00:00Z") or 0)
HOUR = 3600


def ts(offset: float) -> str:
    return format_time(T0 + offset)


def running(started: float = 0, name: str = "main") -> dict[str, Any]:
    return {"name": name, "ready": True, "restartCount": 0, "state": {"running": {"startedAt": ts(started)}}}


def terminated(exit_code: int, *, reason: str | None = None, name: str = "main", started: float = 0,
               finished: float = 60, last: bool = False) -> dict[str, Any]:
    term: dict[str, Any] = {"exitCode": exit_code, "startedAt": ts(started), "finishedAt": ts(finished)}
    term["reason"] = reason or ("Completed" if exit_code == 0 else "Error")
    if last:
        return {"name": name, "ready": True, "restartCount": 1, "state": {"running": {"startedAt": ts(finished + 1)}},
                "lastState": {"terminated": term}}
    return {"name": name, "ready": False, "restartCount": 0, "state": {"terminated": term}}


def _meta(name: str, ns: str, uid: str | None, rv: str, annotations: dict[str, str] | None,
          labels: dict[str, str] | None, deleting: bool) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}", "resourceVersion": rv,
                          "creationTimestamp": ts(-100 * 24 * HOUR)}
    if annotations:
        md["annotations"] = dict(annotations)
    if labels:
        md["labels"] = dict(labels)
    if deleting:
        md["deletionTimestamp"] = ts(0)
        md["deletionGracePeriodSeconds"] = 30
    return md


def deadline_ann(limit: str, started: float | None = None, deadline: float | None = None,
                 warned: float | None = None) -> dict[str, str]:
    a = {TIME_LIMIT_ANNOTATION: limit}
    if started is not None:
        a[STARTED_AT_ANNOTATION] = ts(started)
    if deadline is not None:
        a[DEADLINE_ANNOTATION] = ts(deadline)
    if warned is not None:
        a[WARNED_FOR_ANNOTATION] = ts(warned)
    return a


def group_labels(group: str, size: int, cosched: bool = True) -> dict[str, str]:
    labels = {POD_GROUP_LABEL: group, POD_GROUP_SIZE_LABEL: str(size)}
    if cosched:
        labels[COSCHEDULING_LABEL] = group
    return labels


AUTO: Any = object()


def record_env(queue: str, limit: str) -> list[dict[str, str]]:
    """The admission record the webhook writes into every container (webhook.workloads)."""
    return [{"name": "BATCHGATE_QUEUE", "value": queue}, {"name": "BATCHGATE_TIME_LIMIT", "value": limit}]


def _record(admitted: Any, annotations: dict[str, str] | None, labels: dict[str, str] | None,
            ) -> tuple[str, str] | None:
    """``AUTO``: what the webhook would have recorded - the annotation's limit, the label's queue
    (else the shipped default, batch) - when there is a limit; else ``admitted`` itself."""
    if admitted is not AUTO:
        return cast("tuple[str, str] | None", admitted)
    limit = (annotations or {}).get(TIME_LIMIT_ANNOTATION)
    return ((labels or {}).get("batchgate.io/queue") or "batch", limit) if limit else None


def pod(name: str, *, ns: str = "demo", uid: str | None = None, phase: str = "Running",
        containers: list[dict[str, Any]] | None = None, started: float | None = 0,
        owner: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None, node: str = "node-1", deleting: bool = False,
        reason: str | None = None, message: str | None = None,
        conditions: list[dict[str, Any]] | None = None, rv: str = "10",
        admitted: tuple[str, str] | None = AUTO, restart_policy: str | None = None) -> dict[str, Any]:
    """A pod; ``owner`` is a raw Job from ``job()`` (becomes the controlling ownerReference);
    ``admitted``: the (queue, limit) recorded at admission, None for none (see ``_record``)."""
    md = _meta(name, ns, uid, rv, annotations, labels, deleting)
    if owner is not None:
        md["ownerReferences"] = [{
            "apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
        }]
    if containers is None:
        containers = [running(started)] if phase == "Running" and started is not None else []
    status: dict[str, Any] = {"phase": phase, "containerStatuses": containers}
    if phase != "Pending" and started is not None:
        status["startTime"] = ts(started - 5)
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    if conditions:
        status["conditions"] = conditions
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if (record := _record(admitted, annotations, labels)) is not None:
        container["env"] = record_env(*record)
    spec: dict[str, Any] = {"nodeName": node, "containers": [container]}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": status}


def job(name: str, *, ns: str = "demo", uid: str | None = None, annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None, template_labels: dict[str, str] | None = None,
        template_annotations: dict[str, str] | None = None, finished: str | None = None,
        deleting: bool = False, rv: str = "20", admitted: tuple[str, str] | None = AUTO,
        spec: dict[str, Any] | None = None, failed: int | None = None) -> dict[str, Any]:
    md = _meta(name, ns, uid, rv, annotations, labels, deleting)
    tmd: dict[str, Any] = {}
    if template_labels:
        tmd["labels"] = dict(template_labels)
    if template_annotations:
        tmd["annotations"] = dict(template_annotations)
    status: dict[str, Any] = {}
    if finished:
        status["conditions"] = [{"type": finished, "status": "True"}]
    if failed is not None:
        status["failed"] = failed
    containers: list[dict[str, Any]] = []
    record = _record(admitted, {**(template_annotations or {}), **(annotations or {})},
                     {**(template_labels or {}), **(labels or {})})
    if record is not None:
        containers.append({"name": "main", "image": "busybox", "env": record_env(*record)})
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": md,
            "spec": {"parallelism": 2, "template": {"metadata": tmd, "spec": {"containers": containers}},
                     **(spec or {})},
            "status": status}


def pod_group(name: str, *, ns: str = "demo", min_member: int = 2, managed: bool = True,
              group: str | None = None, owner: dict[str, Any] | None = None, rv: str = "30") -> dict[str, Any]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY} if managed else {}
    labels[POD_GROUP_LABEL] = group or name
    md = _meta(name, ns, None, rv, None, labels, False)
    if owner is not None:
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                                  "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": md,
            "spec": {"minMember": min_member}}


def snapshot(*objects: dict[str, Any], nodes: list[str] | None = None,
             pod_groups: list[dict[str, Any]] | None = None) -> Snapshot:
    return Snapshot.of(
        pods=[pod_view(o) for o in objects if o["kind"] == "Pod"],
        jobs=[job_view(o) for o in objects if o["kind"] == "Job"],
        nodes=None if nodes is None else [NodeView(n, "True") for n in nodes],
        pod_groups=None if pod_groups is None else [pod_group_view(o) for o in pod_groups],
    )
