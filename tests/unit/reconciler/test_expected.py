"""Expected starts written and taken back (expected.py, through planner.plan as the controller runs
it): what a workload batchgate gives no estimate keeps of batchgate's annotations."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.reconciler.reconbuild import HOUR, T0, job, pod, ts
from tests.unit.reconciler.test_shadow import node, running, snap, waiting, with_spec
from webhook.contract import (
    EXPECTED_START_ANNOTATION,
    EXPECTED_START_REASON_ANNOTATION,
    START_BY_ANNOTATION,
)
from webhook.reconciler.actions import Action
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings

S = Settings()
OURS = {EXPECTED_START_ANNOTATION: ts(HOUR), EXPECTED_START_REASON_ANNOTATION: "placed", START_BY_ANNOTATION: ts(2 * HOUR)}


def annotated(p: dict[str, Any], **more: str) -> dict[str, Any]:
    """``p`` with an expected start and a start-by of batchgate's as written earlier (or forged)."""
    p["metadata"].setdefault("annotations", {}).update({**OURS, **more})
    return p


def written(*objs: dict[str, Any], settings: Settings = S) -> dict[str, Action]:
    """The expected-start actions of one pass, by target name."""
    s = snap(*objs, nodes=[node("n1", cpu="4")])
    return {a.target.name: a for a in plan(s, T0, settings).actions if a.kind == "expected-start"}


def test_a_pending_pod_of_another_scheduler_loses_our_expected_start_and_start_by() -> None:
    """kube-scheduler does not serve its schedulerName (not in kubeSchedulerProfiles): batchgate neither
    estimates nor promises its start. An expected start or a start-by it carries (written before a profile
    left the bundle, or forged while the webhook was down) is removed, quietly, all three annotations."""
    other = annotated(waiting("volcano-pod", cpu="1", schedulerName="volcano"))
    a = written(other)["volcano-pod"]
    assert a.annotations == dict.fromkeys(OURS)
    assert a.quiet and "volcano" in a.message and "kubeSchedulerProfiles" in a.message
    assert a.resource_version == other["metadata"]["resourceVersion"]
    # bound by its scheduler, running: the same (it never was ours to promise)
    assert written(annotated(running("volcano-running", "n1", limit="1h", schedulerName="volcano")))[
        "volcano-running"].annotations == dict.fromkeys(OURS)
    # nothing to take back: nothing written
    assert written(waiting("plain-volcano", cpu="1", schedulerName="volcano")) == {}


def test_a_job_whose_template_names_another_scheduler_loses_them_too() -> None:
    j = job("volcano-job", annotations=OURS, spec={"template": {"metadata": {}, "spec": {
        "schedulerName": "volcano", "containers": [{"name": "main", "image": "busybox"}]}}})
    assert written(j)["volcano-job"].annotations == dict.fromkeys(OURS)


def test_a_profile_the_bundle_lists_is_estimated_and_the_start_by_of_started_work_kept() -> None:
    """Naming a profile of kube-scheduler's, the pod is estimated as any (its start-by is not this
    module's to judge); work that started keeps its start-by (the promise it was released by) and
    loses only its expected start, as before."""
    profiles = dataclasses.replace(S, queues=dataclasses.replace(
        S.queues, kube_schedulers=frozenset({"default-scheduler", "gpu-packing"})))
    a = written(annotated(waiting("gpu-pod", cpu="1", schedulerName="gpu-packing")), settings=profiles)["gpu-pod"]
    assert START_BY_ANNOTATION not in (a.annotations or {}) and a.annotations[EXPECTED_START_ANNOTATION] != ts(HOUR)  # type: ignore[index]
    started = written(annotated(running("started", "n1", limit="1h")))["started"]
    assert started.annotations == {EXPECTED_START_ANNOTATION: None, EXPECTED_START_REASON_ANNOTATION: None}
    # a pod of another scheduler that ended: only its expected start goes, as any ended pod's
    done = annotated(with_spec(pod("done", phase="Succeeded", node="n1"), schedulerName="volcano"))
    assert written(done)["done"].annotations == {EXPECTED_START_ANNOTATION: None, EXPECTED_START_REASON_ANNOTATION: None}
