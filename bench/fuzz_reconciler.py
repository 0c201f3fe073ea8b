"""Seeded fuzz of the reconciler: random stored objects through its views and a planning pass.

Each case is a small cluster of random objects (Pods, Jobs, ScavengerJobs, Nodes,
MaintenanceWindows, PodGroups) built the way users and controllers store them, then bent
toward what admission would refuse or never saw (objects stored while the webhook was down,
or before it bounded them): absurd durations, quantities and timestamps, huge annotations and
label values, missing fields, forged owners and labels. Most cases keep the types the API
server enforces (its schemas); a tenth also put wrong types anywhere. Each object goes through
its view as the cache makes it (``cache.Store``: an object no view can read is left out, logged
and counted) and the views through every planning pass (``PASSES``: ``planner.plan``, which
runs the deadline, gang, PodGroup, expected-start (shadow), ScavengerJob, maintenance and
network planners).

A case fails when:
- a view raises on an object of the schema's types (it may only refuse one of wrong types);
- an exception escapes a pass (one object that cannot be planned must become its own
  ``cannot-plan`` Event, never the pass's failure);
- a view is larger than ``MAX_VIEW_BYTES`` (counted deep: every string, tuple, dict it keeps).

- a planner records a ``cannot-plan`` for an object of the schema's types (a value a view let
  through that a planner could not handle: a bug, though not the pass's failure). For one of
  wrong types it is what should happen, and is counted.

    python bench/fuzz_reconciler.py [--cases 100000] [--seed 1]

The unit tier runs a short seeded run (tests/unit/reconciler/test_fuzz_reconciler.py).
To fuzz a new kind, add a ``Gen`` to ``GENS`` (its Kind, view, Snapshot field and a maker);
to fuzz a new planner, add it to ``PASSES``.
"""

from __future__ import annotations

import argparse
import copy
import logging
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webhook.reconciler import model  # noqa: E402
from webhook.reconciler.cache import FAILED_MOUNT_EVENT, Store  # noqa: E402
from webhook.reconciler.model import Snapshot  # noqa: E402
from webhook.reconciler.mounts import mount_failure_view  # noqa: E402
from webhook.reconciler.planner import plan  # noqa: E402
from webhook.reconciler.scavenger import sj_view  # noqa: E402
from webhook.reconciler.settings import QueuePolicy, Settings  # noqa: E402
from webhook.rules import load_bundle  # noqa: E402
from webhook.units import format_time  # noqa: E402

# What one view may keep, counted deep (see deep_size). The views cut what users write
# (model.MAX_KEPT per annotation and text, model.MAX_SCHED_TEXT of placement rules,
# jobnet.MAX_PEERS peers, scavenger.MAX_SPEC_BYTES of a ScavengerJob's spec, MAX_TIMESTAMPS):
# a view's size must not follow what is stored (issue 27: 4.8 MiB per pod). A Node's view keeps
# its labels and taints whole (selectors match on them; admins and kubelets write them, each
# key and value bounded by the API server), so its bound is that of the fuzz's largest nodes:
# 1,000 labels and 1,000 taints of the longest valid keys and values.
MAX_VIEW_BYTES = 256 * 1024
MAX_VIEW_BYTES_OF = {"Node": 1024 * 1024}

T0 = 1_790_000_000.0  # 2026-09-21: "now" is drawn around it
G = "batchgate.io"

# -- values -------------------------------------------------------------------------------------
DURATIONS = ["30m", "1h", "2h30m", "0s", "-1h", "1s", "3650d", "3651d", "99999999999999999999s", "1e9h",
             "1h" * 40, "", "abc", "9" * 65 + "h", "1.5h", "PT1H", " 1h", "1d", "525600m"]
QUANTITIES = ["1", "500m", "1Gi", "16Gi", "0", "-1", "100000", "1Ei", "1e999999999", "9" * 60 + "Ei", "NaN",
              "1e-999", "0.000000001n", "", "1Ki", "110", "1e31", "1e30", "64", "x"]
BAD_TIMES = ["", "garbage", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-13-45T99:99:99Z",
             "2026-09-21T10:00:00", "1e10", "2026-09-21T10:00:00+99:00", "x" * 5000]
STRINGS = ["", " ", "x", "\u0000", "\ud7ff\ue000", "../../etc", "a" * 63, "a" * 64, "a" * 300, "é" * 1000,
           "-", "batch", "scavenger", "interactive", "no-such-queue", "True", "1", "0", "-1", "123456789012"]
LABELS = ["", "-", "x", "a" * 63, "9" * 63, "batch", "scavenger", "no-such-queue", "0", "-1", "123456789",
          "1e9", "True", "g0", "node-0", "batchgate"]
INTS = [0, 1, -1, 2, 7, 127, 128, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63)]
WRONG: list[Any] = [None, True, 1.5, -0.0, [], {}, [None], {"": None}, [[[]]], {"a": {"b": {}}}, "x", 7,
                    2**64, [1] * 1000]


@dataclass
class World:
    """What one case's objects may refer to: a few names, namespaces, uids, nodes and times, so
    owners, groups and labels sometimes match (a forged owner names a real uid) and sometimes not."""

    rng: random.Random
    now: float
    namespaces: list[str]
    names: list[str]
    uids: list[str]
    nodes: list[str]
    groups: list[str]
    queues: list[str]
    typed: bool  # keep the schema's types (the API server enforces them), or not
    usage: dict[str, float]  # each account's decayed usage (usage.py), for the batch queue's fair share

    def pick(self, xs: list[Any]) -> Any:
        return self.rng.choice(xs)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def time(self) -> str:
        if self.chance(0.1):
            return self.pick(BAD_TIMES)
        span = self.pick([60, 3600, 86400, 86400 * 365, 86400 * 365 * 100])
        return format_time(self.now + self.rng.uniform(-span, span / 10))

    def duration(self) -> str:
        return self.pick(DURATIONS) if self.chance(0.4) else f"{self.rng.randint(1, 600)}{self.pick('smhd')}"

    def quantity(self) -> str:
        return self.pick(QUANTITIES) if self.chance(0.3) else f"{self.rng.randint(1, 64)}{self.pick(['', 'Gi', 'm'])}"

    def text(self) -> str:
        r = self.rng.random()
        if r < 0.6:
            return self.pick(STRINGS)
        if r < 0.8:
            return self.pick([self.duration(), self.quantity(), self.time(), str(self.pick(INTS))])
        return self.pick(["x", "a,", "svc-", "1Gi", "é"]) * self.size(100, 1000, 30_000, 300_000)

    def label(self) -> str:
        """A label value, a name or a label key as the API server validates them (at most 63
        characters, 253 for names): absurd, but storable."""
        return self.pick(LABELS) if self.chance(0.7) else self.text()[:63]

    def count(self) -> str:
        return str(self.pick(INTS)) if self.chance(0.5) else self.text()

    def int(self) -> int:
        return self.pick(INTS) if self.chance(0.4) else self.rng.randint(0, 20)

    def size(self, *sizes: int) -> int:
        """How many of a repeated field: mostly one of the first sizes, rarely the largest."""
        return sizes[-1] if self.chance(0.03) else self.pick(list(sizes[:-1]) or [sizes[0]])

    def many(self, make: Callable[[], Any], n: int) -> list[Any]:
        """``n`` values from a few draws (a long list costs its length, not n random draws)."""
        drawn = [make() for _ in range(min(n, 3))]
        return [drawn[i % len(drawn)] for i in range(n)]

    def mapping(self, n: int, value: Callable[[], str] | None = None) -> dict[str, str]:
        """``n`` distinct keys (label keys: at most 63 characters and a number) with drawn values
        (label values unless ``value`` says otherwise)."""
        keys, values = self.many(self.label, min(n, 3)), self.many(value or self.label, min(n, 3))
        return {f"{keys[i % len(keys)]}{i or ''}": values[i % len(values)] for i in range(n)}

    def ns(self) -> str:
        return self.pick(self.namespaces)

    def name(self) -> str:
        return self.pick(self.names)

    def uid(self) -> str:
        return self.pick(self.uids)


def world(rng: random.Random) -> World:
    n = rng.randint(1, 6)
    return World(
        rng=rng, now=T0 + rng.uniform(-86400 * 30, 86400 * 30),
        namespaces=["demo", "team-a", "kube-system", "batchgate-system", ""][: rng.randint(1, 5)],
        names=[f"o{i}" for i in range(n)] + ["x" * 253],  # (label values take the first 63)
        uids=[f"uid-{i}" for i in range(n + 2)] + [""],
        nodes=[f"node-{i}" for i in range(rng.randint(1, 5))] + ["gone"],
        groups=["g0", "g1", "x" * 63],
        queues=["batch", "scavenger", "interactive", "no-such-queue", ""],
        typed=rng.random() >= 0.1,
        usage={ns: rng.choice([0.0, 1.0, 1e9, 1e300, float("inf")]) for ns in ("demo", "team-a") if rng.random() < 0.5},
    )


# -- objects ------------------------------------------------------------------------------------
def meta(w: World, *, namespaced: bool = True) -> dict[str, Any]:
    md: dict[str, Any] = {"name": w.name(), "uid": w.uid(), "resourceVersion": str(w.rng.randint(1, 10**6)),
                          "creationTimestamp": w.time(), "generation": w.int()}
    if namespaced:
        md["namespace"] = w.ns()
    if w.chance(0.05):
        md["deletionTimestamp"] = w.time()
    return md


def annotations(w: World) -> dict[str, str]:
    """batchgate's annotations (users may write any of them) with values true or absurd."""
    keys = {
        f"{G}/time-limit": w.duration, f"{G}/expected-runtime": w.duration, f"{G}/started-at": w.time,
        f"{G}/deadline": w.time, f"{G}/warned-for": w.time, f"{G}/next-maintenance": w.text,
        f"{G}/expected-start": w.time, f"{G}/gang-restart": w.uid, f"{G}/slots": w.count,
        f"{G}/connect-to": lambda: ",".join(f"svc-{i}" for i in range(w.size(1, 3, 100, 85_000))),
        f"{G}/maintenance": w.text, "batch.kubernetes.io/job-completion-index": w.count,
        f"{G}/start-by": w.time, f"{G}/queued": lambda: w.pick(["true", "", "x" * 1000]),
        "unrelated": lambda: "x" * w.pick([1, 1000, 250_000]),
    }
    return {k: make() for k, make in keys.items() if w.chance(0.25)}


def labels(w: World) -> dict[str, str]:
    keys = {
        f"{G}/queue": lambda: w.pick(w.queues), f"{G}/pod-group": lambda: w.pick(w.groups),
        f"{G}/pod-group-size": w.label, "scheduling.x-k8s.io/pod-group": lambda: w.pick(w.groups),
        f"{G}/segment": w.label, f"{G}/scavengerjob": w.name, f"{G}/network": w.name,
        "batch.kubernetes.io/job-completion-index": w.label, "app.kubernetes.io/managed-by": lambda: "batchgate",
        "kubernetes.io/hostname": lambda: w.pick(w.nodes),
    }
    return {k: make()[:63] for k, make in keys.items() if w.chance(0.25)}


def owner(w: World) -> list[dict[str, Any]]:
    """An ownerReference, often forged: a made-up kind, a real uid of another namespace's Job."""
    kind, api = w.pick([("Job", "batch/v1"), ("ScavengerJob", f"{G}/v1alpha1"), ("DaemonSet", "apps/v1"),
                        ("DaemonSet", "nope.example.com/v1"), ("ScavengerJob", "evil.example.com/v9"),
                        ("ReplicaSet", "apps/v1")])
    return [{"apiVersion": api, "kind": kind, "name": w.name(), "uid": w.uid(), "controller": w.chance(0.8)}]


def container(w: World, *, record: bool) -> dict[str, Any]:
    res = {k: {"cpu": w.quantity(), "memory": w.quantity(),
               **({w.pick(["nvidia.com/gpu", "example.com/fpga", "x" * 253]): w.quantity()} if w.chance(0.2) else {})}
           for k in ("requests", "limits") if w.chance(0.7)}
    c: dict[str, Any] = {"name": w.pick(["main", "x" * 63]), "image": w.pick(["busybox", "x" * 5000]),
                         "resources": res}
    if record:
        c["env"] = [{"name": "BATCHGATE_QUEUE", "value": w.pick(w.queues)},
                    {"name": "BATCHGATE_TIME_LIMIT", "value": w.duration()}]
        if w.chance(0.6):  # which Job's controller made it: a real uid, none, or anything
            c["env"].append({"name": "BATCHGATE_JOB_UID", **({"value": w.pick([w.uid(), w.text()])}
                                                            if w.chance(0.7) else {})})
    return c


def pod_spec(w: World) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": w.many(lambda: container(w, record=w.chance(0.6)), w.size(1, 1, 2, 50))}
    if w.chance(0.3):
        spec["initContainers"] = [container(w, record=False)]
    if w.chance(0.7):
        spec["nodeName"] = w.pick(w.nodes)
    if w.chance(0.3):
        spec["nodeSelector"] = w.mapping(w.size(1, 3, 1000))
    if w.chance(0.2):
        spec["tolerations"] = w.many(lambda: {"key": w.label(), "operator": w.pick(["Exists", "Equal", "x"]), "value": w.label(),
                                        "effect": w.pick(["NoSchedule", "NoExecute", ""])}, w.size(1, 500))
    if w.chance(0.2):
        term = {"matchExpressions": [{"key": w.label(), "operator": w.pick(["In", "NotIn", "Exists", "Gt"]),
                                      "values": w.many(w.label, w.size(1, 3, 2000))}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term] * w.size(1, 2, 300)}}}
    if w.chance(0.2):
        spec["overhead"] = {"cpu": w.quantity(), "memory": w.quantity()}
    if w.chance(0.3):
        spec["restartPolicy"] = w.pick(["Never", "OnFailure", "Always"])
    if w.chance(0.2):
        spec["priority"] = w.int()
    if w.chance(0.3):  # the batch queue's gate (queue.py), with others
        spec["schedulingGates"] = [{"name": g} for g in w.many(
            lambda: w.pick([f"{G}/queue", f"{G}/queue", "example.com/other", w.label()]), w.size(1, 2, 100))]
    if w.chance(0.3):
        spec["volumes"] = w.many(lambda: w.pick([
            {"name": "v", "persistentVolumeClaim": {"claimName": w.name()}},
            {"name": "v", "configMap": {"name": w.name(), "optional": w.chance(0.5)}},
            {"name": "v", "secret": {"secretName": w.name()}}, {"name": "v", "emptyDir": {}}]), w.size(1, 3, 500))
    if w.chance(0.3):
        spec["priorityClassName"] = w.pick(["batchgate-batch", "batchgate-scavenger", "no-such-class", w.label()])
    if w.chance(0.2):
        spec["subdomain"] = w.name()
        spec["hostname"] = w.text()
    return spec


def container_status(w: World) -> dict[str, Any]:
    state = w.pick(["running", "terminated", "waiting"])
    s: dict[str, Any] = {"startedAt": w.time()}
    if state == "terminated":
        s.update(exitCode=w.int(), finishedAt=w.time(), reason=w.pick(["Error", "OOMKilled", "Completed", w.text()]))
    out = {"name": w.pick(["main", "x" * 63]), "state": {state: s}}
    if w.chance(0.3):
        out["lastState"] = {"terminated": {"exitCode": w.int(), "startedAt": w.time(), "finishedAt": w.time()}}
    return out


def make_pod(w: World) -> dict[str, Any]:
    md = meta(w)
    md["annotations"], md["labels"] = annotations(w), labels(w)
    if w.chance(0.5):
        md["ownerReferences"] = owner(w)
    status: dict[str, Any] = {"phase": w.pick(["Pending", "Running", "Succeeded", "Failed", "Unknown", ""]),
                              "startTime": w.time(),
                              "containerStatuses": w.many(lambda: container_status(w), w.size(0, 1, 2, 100))}
    if w.chance(0.2):
        status["reason"] = w.pick(["Evicted", "NodeLost", "Preempting", w.text()])
        status["message"] = w.text()
    if w.chance(0.3):
        status["conditions"] = [{"type": w.pick(["DisruptionTarget", "Ready", "PodScheduled"]),
                                 "status": w.pick(["True", "False"]),
                                 "reason": w.pick(["BatchgateGangRestart", "EvictionByEvictionAPI", w.text()]),
                                 "message": w.text(), "lastTransitionTime": w.time()}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": pod_spec(w), "status": status}


def make_job(w: World) -> dict[str, Any]:
    md = meta(w)
    md["annotations"], md["labels"] = annotations(w), labels(w)
    if w.chance(0.3):
        md["ownerReferences"] = owner(w)
    spec: dict[str, Any] = {"template": {"metadata": {"annotations": annotations(w), "labels": labels(w)},
                                         "spec": pod_spec(w)},
                            "parallelism": w.int(), "completions": w.int(), "backoffLimit": w.int(),
                            "suspend": w.chance(0.4)}
    if w.chance(0.3):
        spec["podFailurePolicy"] = {"rules": [
            {"action": w.pick(["Ignore", "FailJob", "Count", "x"]),
             "onExitCodes": {"operator": w.pick(["In", "NotIn"]), "values": w.many(w.int, w.size(1, 300))},
             } for _ in range(w.size(1, 20))]}
    status: dict[str, Any] = {"failed": w.int(), "active": w.int(), "startTime": w.time()}
    if w.chance(0.3):
        status["conditions"] = [{"type": w.pick(["Complete", "Failed", "Suspended"]), "status": "True"}]
        status["completionTime"] = w.time()
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": md, "spec": spec, "status": status}


def make_scavenger_job(w: World) -> dict[str, Any]:
    md = meta(w)
    spec: dict[str, Any] = {"image": w.pick(["registry.example.org/sim:1", "", "x" * 5000]),
                            "command": w.many(lambda: w.pick(["sim", "x" * 1000]), w.size(1, 2, 1000)),
                            "resources": {"limits": {"cpu": w.quantity(), "memory": w.quantity()}},
                            "pods": w.int(), "duration": w.duration()}
    if w.chance(0.2):
        spec["checkpointExitCode"] = w.int()
    if w.chance(0.2):
        spec["args"] = w.many(w.text, w.size(1, 100))
    if w.chance(0.2):
        spec["env"] = w.many(lambda: {"name": w.text(), "value": w.text()}, w.size(1, 100))
    status: dict[str, Any] = {}
    if w.chance(0.6):
        status = {"phase": w.pick(["Pending", "Queued", "Running", "Interrupted", "Succeeded", "Failed", "x"]),
                  "segment": w.int(), "runningSegment": w.int(), "interruptedCount": w.int(),
                  "jobName": w.name(), "priorityStartOverTimestamp": w.time(), "guardedSegment": w.int(),
                  "runningTimestamps": w.many(w.time, w.size(0, 3, 10_000)),
                  "interruptedTimestamps": w.many(w.time, w.size(0, 3, 10_000)),
                  "message": w.text(), "observedGeneration": w.int(),
                  "conditions": [{"type": "Ready", "status": "True", "message": w.text()}] * w.size(1, 1000)}
    return {"apiVersion": f"{G}/v1alpha1", "kind": "ScavengerJob", "metadata": md, "spec": spec, "status": status}


def make_node(w: World) -> dict[str, Any]:
    md = meta(w, namespaced=False)
    md["name"] = w.pick(w.nodes)
    md["labels"] = {**labels(w), **w.mapping(w.size(0, 2, 1000))}
    md["annotations"] = annotations(w)
    spec: dict[str, Any] = {"unschedulable": w.chance(0.2)}
    if w.chance(0.3):
        spec["taints"] = w.many(lambda: {"key": w.label(), "value": w.label(), "effect": w.pick(["NoSchedule", "NoExecute"])},
                                 w.size(1, 3, 1000))
    return {"apiVersion": "v1", "kind": "Node", "metadata": md, "spec": spec, "status": {
        "allocatable": {"cpu": w.quantity(), "memory": w.quantity(), "pods": w.quantity()},
        "conditions": [{"type": "Ready", "status": w.pick(["True", "False", "Unknown", ""])}]}}


def make_window(w: World) -> dict[str, Any]:
    md = meta(w, namespaced=False)
    spec: dict[str, Any] = {"start": w.time(), "end": w.time(), "reason": w.text()}
    if w.chance(0.7):
        spec["nodes"] = w.many(lambda: w.pick([*w.nodes, w.text()]), w.size(1, 3, 5000))
    if w.chance(0.5):
        spec["nodeSelector"] = {"matchLabels": w.mapping(w.size(0, 1, 1000))}
    status = {"state": w.pick(["Upcoming", "Draining", "Active", "Done", w.text()]), "nodeCount": w.int()}
    return {"apiVersion": f"{G}/v1alpha1", "kind": "MaintenanceWindow", "metadata": md, "spec": spec,
            "status": status}


def make_pod_group(w: World) -> dict[str, Any]:
    md = meta(w)
    md["labels"] = labels(w)
    if w.chance(0.6):
        md["ownerReferences"] = owner(w)
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": md,
            "spec": {"minMember": w.int()}}


def make_event(w: World) -> dict[str, Any]:
    """A FailedMount Event, as the kubelet writes it or as anyone could (mounts.py)."""
    volume, secret = w.pick(["creds", "x" * 63, w.name()]), w.pick(["md-creds", "creds", w.name(), "x" * 300])
    message = w.pick([f'MountVolume.SetUp failed for volume "{volume}" : secret "{secret}" not found',
                      f'MountVolume.SetUp failed for volume "{volume}" : [configmap "a" not found, secrets "{secret}" '
                      'not found]', w.text()])
    node = w.pick(w.nodes)
    return {"apiVersion": "v1", "kind": "Event", "metadata": meta(w),
            "involvedObject": {"apiVersion": "v1", "kind": w.pick(["Pod", "Pod", "Node"]), "name": w.name(),
                               "uid": w.uid()},
            "reason": "FailedMount", "type": w.pick(["Warning", "Warning", "Normal"]), "message": message,
            "source": {"component": w.pick(["kubelet", "kubelet", w.name()]), "host": node},
            "reportingComponent": "kubelet", "reportingInstance": node}


@dataclass(frozen=True)
class Gen:
    """One kind: its Kind (the cache's Store), its view, the Snapshot field its views go to, a maker."""

    kind: model.Kind
    view: Callable[[Any], Any]
    field: str
    make: Callable[[World], dict[str, Any]]
    weight: int = 1


GENS = [
    Gen(model.POD, model.pod_view, "pods", make_pod, weight=6),
    Gen(model.JOB, model.job_view, "jobs", make_job, weight=3),
    Gen(model.SCAVENGER_JOB, sj_view, "scavenger_jobs", make_scavenger_job, weight=2),
    Gen(model.NODE, model.node_view, "nodes", make_node, weight=2),
    Gen(model.MAINTENANCE_WINDOW, model.window_view, "windows", make_window),
    Gen(model.POD_GROUP, model.pod_group_view, "pod_groups", make_pod_group),
    Gen(FAILED_MOUNT_EVENT, mount_failure_view, "mount_failures", make_event),
]


# -- bending what was built ---------------------------------------------------------------------
def places(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from places(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:20]):
            yield from places(v, (*path, i))


# Where the API server validates a string as a label key or value, or a name (whatever the
# webhook said): "labels", "nodeSelector", "tolerations", "taints", "matchExpressions" anywhere on the
# path, "name"/"namespace"/"nodeName" outside ownerReferences (whose names it does not bound).
VALIDATED = {"labels", "nodeSelector", "tolerations", "taints", "matchExpressions", "matchLabels"}
NAMES = {"name", "namespace", "nodeName", "uid", "resourceVersion"}  # (the last two the API server writes)


def same_type(w: World, old: Any, path: tuple[Any, ...] = ()) -> Any:
    """Another value of ``old``'s type (the schema's): an absurd string, number or boolean."""
    if isinstance(old, bool):
        return not old
    if isinstance(old, int):
        return w.pick(INTS)
    if isinstance(old, str):
        if VALIDATED.intersection(map(str, path)) or (path[-1:] and path[-1] in NAMES
                                                       and "ownerReferences" not in path):
            return w.label()
        return w.text()
    return old


def bend(w: World, obj: dict[str, Any]) -> dict[str, Any]:
    """A few random edits: a leaf swapped for another of its type, a field dropped; and when the
    case is not typed, a value of the wrong type anywhere."""
    for _ in range(w.rng.randint(0, 4)):
        path, node = w.pick(list(places(obj)))
        if not path:
            continue
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        r = w.rng.random()
        if not w.typed and r < 0.4:
            parent[path[-1]] = copy.deepcopy(w.pick(WRONG))
        elif r < 0.7 and not isinstance(node, dict | list):
            parent[path[-1]] = same_type(w, node, path)
        elif isinstance(parent, dict):
            del parent[path[-1]]
    return obj


def objects(w: World) -> list[tuple[Gen, dict[str, Any]]]:
    weights = [g.weight for g in GENS]
    return [(g, bend(w, g.make(w))) for g in w.rng.choices(GENS, weights, k=w.rng.randint(1, 30))]


# -- measuring ----------------------------------------------------------------------------------
def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes a view keeps: it and everything it refers to (strings, tuples, dicts, nested views),
    each object once. Shared objects (memoised records, the default failure policy) count in full
    for every view: an upper bound."""
    seen = set() if seen is None else seen
    if id(obj) in seen or obj is None or isinstance(obj, bool | type):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple | set | frozenset):
        size += sum(deep_size(v, seen) for v in obj)
    elif is_dataclass(obj):
        size += sum(deep_size(getattr(obj, f.name), seen) for f in fields(obj))
    return size


def where(e: BaseException) -> str:
    """The innermost frame of ``e`` in batchgate's code: file:line function."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/webhook/" in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(e.__traceback__)[-1]
    return f"{Path(f.filename).name}:{f.lineno} {f.name}"


# -- passes -------------------------------------------------------------------------------------
Pass = Callable[[Snapshot, World, Settings], Any]
PASSES: dict[str, Pass] = {
    # deadlines, gangs, PodGroups, the shadow schedule and expected starts, the batch queue,
    # ScavengerJobs, maintenance windows, networks
    "plan": lambda snapshot, w, settings: plan(snapshot, w.now, settings, estimate=True, usage=w.usage),
}


def settings_for(w: World, queues: QueuePolicy) -> Settings:
    """The shipped bundle's queues, with some of them gated (the batch queue) in some state."""
    gated = w.pick([(), ("batch",), ("batch", "scavenger", "no-such-queue")])
    return Settings(leader_elect=False, queues=QueuePolicy(**{
        **{f.name: getattr(queues, f.name) for f in fields(queues)},
        "scavengers": replace(queues.scavengers, guard=w.pick([0.0, 1.0, 3600.0]),
                              unschedulable_timeout=w.pick([0, 300])),
        "gated": gated, "states": {**queues.states, **{q: w.pick(["open", "hold", "drain", "stop", "x"]) for q in gated}}}))


def run(cases: int, seed: int, *, max_view: int = MAX_VIEW_BYTES) -> dict[str, Any]:
    rng = random.Random(seed)
    queues = QueuePolicy.from_bundle(load_bundle(ROOT / "policies"))
    failures: list[str] = []
    left_out: Counter[str] = Counter()
    unplannable: Counter[str] = Counter()
    biggest: dict[str, int] = {}
    n_objects = 0
    quiet = logging.getLogger("webhook.reconciler")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the cache logs each object it leaves out
    try:
        for i in range(cases):
            w = world(rng)
            objs = objects(w)
            n_objects += len(objs)
            views: dict[str, dict[Any, Any]] = {g.field: {} for g in GENS}
            for g, obj in objs:
                try:
                    view = g.view(obj)
                except Exception as e:
                    if w.typed:
                        failures.append(f"case {i}: {g.kind.kind} view raised {type(e).__name__}: {e} "
                                        f"at {where(e)}"[:300])
                    store = Store(g.kind, g.view)  # the cache's guard: left out, logged, counted
                    store.replace([obj])
                    if len(store):
                        failures.append(f"case {i}: the cache kept a {g.kind.kind} its view cannot read")
                    left_out[g.kind.kind] += 1
                    continue
                size = deep_size(view)
                biggest[g.kind.kind] = max(biggest.get(g.kind.kind, 0), size)
                bound = MAX_VIEW_BYTES_OF.get(g.kind.kind, max_view)
                if size > bound:
                    failures.append(f"case {i}: a {g.kind.kind} view of {size} bytes, over {bound}")
                views[g.field][Store(g.kind, g.view)._key(obj)] = view  # keyed as the cache keys it
            snapshot = Snapshot(pods=views["pods"], jobs=views["jobs"], nodes=views["nodes"],
                                pod_groups=views["pod_groups"], windows=views["windows"],
                                scavenger_jobs=views["scavenger_jobs"], net_objects={},
                                mount_failures={k: v for k, v in views["mount_failures"].items() if v is not None})
            settings = settings_for(w, queues)
            for name, planned in PASSES.items():
                try:
                    result = planned(snapshot, w, settings)
                except Exception as e:
                    failures.append(f"case {i}: {name} raised {type(e).__name__}: {e} at {where(e)}"[:300])
                    continue
                for u in getattr(result, "unplannable", ()):
                    # of the schema's types, a bug to fix; else the object's own cannot-plan, as designed
                    if w.typed:
                        failures.append(f"case {i}: {name}: cannot plan {u.concern} of {u.ref}: {u.error}"[:300])
                    unplannable[f"{u.concern}: {u.error[:120]}"] += 1
    finally:
        quiet.setLevel(level)
    return {"cases": cases, "seed": seed, "objects": n_objects, "failures": failures,
            "left_out": dict(left_out), "unplannable": dict(unplannable), "max_view_bytes": biggest}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    started = time.monotonic()
    r = run(args.cases, args.seed)
    print(f"{r['cases']} cases ({r['objects']} objects), seed {r['seed']}, {time.monotonic() - started:.0f} s: "
          f"{len(r['failures'])} failures, {sum(r['unplannable'].values())} cannot-plan, "
          f"left out (wrong types) {r['left_out']}")
    print("largest view, bytes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r["max_view_bytes"].items())))
    for line in r["failures"][:20]:
        print("  " + line)
    for line, n in sorted(r["unplannable"].items(), key=lambda kv: -kv[1])[:20]:
        print(f"  cannot-plan x{n}: {line}")
    return 1 if r["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
