"""The ScavengerJob controller over an in-memory API: the whole life of a ScavengerJob
(queued, started, running, segment boundaries, completed), failures, interruptions, a
missing volume source, start order and the cap. The test plays the Job controller and the
kubelet (it creates the Jobs' pods and writes their status)."""

from __future__ import annotations

from typing import Any

import pytest
from fakeapi import FakeApi
from reconbuild import T0, running, terminated, ts

from webhook.bundle import Scavengers
from webhook.contract import SCAVENGERJOB_LABEL, SEGMENT_LABEL
from webhook.reconciler.controller import Controller
from webhook.reconciler.settings import QueuePolicy, Settings
from webhook.units import format_time, parse_time

SETTINGS = Settings(leader_elect=False, queues=QueuePolicy(scavengers=Scavengers(unschedulable_timeout=300)))
MIN = 60


def sj(name: str, *, pods: int = 2, cpu: str = "1", mem: str = "1Gi", duration: str = "30m",
       volumes: list[dict[str, Any]] | None = None, created: float = -3600, status: dict[str, Any] | None = None,
       ns: str = "demo") -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "registry.example.org/sim:1", "command": ["sim"], "runAsUser": 1000,
                            "resources": {"limits": {"cpu": cpu, "memory": mem}}, "pods": pods,
                            "duration": duration}
    if volumes:
        spec["volumes"] = volumes
    obj: dict[str, Any] = {"apiVersion": "batchgate.io/v1alpha1", "kind": "ScavengerJob",
                           "metadata": {"name": name, "namespace": ns, "generation": 1,
                                        "creationTimestamp": ts(created)}, "spec": spec}
    if status:
        obj["status"] = status
    return obj


def node(name: str, cpu: str = "8", mem: str = "16Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


class World:
    def __init__(self, *objs: dict[str, Any], nodes: int = 1, settings: Settings = SETTINGS) -> None:
        self.api = FakeApi()
        for i in range(nodes):
            self.api.put(node(f"n{i}"))
        for o in objs:
            self.api.put(o)
        self.now = T0
        self.c = Controller(self.api, settings, clock=lambda: self.now)
        plain = self.api.delete

        def delete(kind: Any, namespace: str | None, name: str, **kw: Any) -> Any:
            """A bound pod still going is deleted gracefully: it terminates until the kubelet is done."""
            cur = self.api.objects.get((kind.plural, namespace or "", name))
            if kind.plural == "pods" and cur is not None and cur["spec"].get("nodeName") \
                    and cur["status"].get("phase") not in ("Succeeded", "Failed") \
                    and kw.get("uid") in (None, cur["metadata"]["uid"]):
                self.api.calls.append(("delete", "pods", namespace or "", name))
                cur["metadata"].setdefault("deletionTimestamp", format_time(self.now))
                cur["metadata"].setdefault("deletionGracePeriodSeconds", 60)
                return cur
            return plain(kind, namespace, name, **kw)

        self.api.delete = delete  # type: ignore[method-assign]

    def step(self, dt: float = 1) -> list[str]:
        self.now += dt
        self.c.cache.list_once()
        done = [o.action.kind for o in self.c.run_pass() if o.result == "done" and o.action.kind.startswith("sj-")]
        for j in self.jobs().values():  # the API server stamps what it creates
            j["metadata"].setdefault("creationTimestamp", format_time(self.now))
        return done

    def sj(self, name: str) -> dict[str, Any]:
        return self.api.objects[("scavengerjobs", "demo", name)]

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {k[2]: o for k, o in self.api.objects.items() if k[0] == "jobs"}

    def pods(self, job: str | None = None) -> list[dict[str, Any]]:
        return [o for k, o in self.api.objects.items() if k[0] == "pods"
                and (job is None or o["metadata"]["ownerReferences"][0]["name"] == job)]

    def run_job(self, name: str, node: str = "n0", phase: str = "Running") -> None:
        """The Job controller makes the pods, the scheduler binds them, the kubelet runs them."""
        j = self.jobs()[name]
        tpl = j["spec"]["template"]
        for i in range(j["spec"]["parallelism"]):
            self.api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-{i}", "namespace": "demo", "labels": dict(tpl["metadata"]["labels"]),
                "creationTimestamp": format_time(self.now),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "controller": True,
                                     "uid": j["metadata"]["uid"]}]},
                "spec": {**tpl["spec"], "nodeName": node},
                "status": {"phase": phase, "startTime": format_time(self.now),
                           "containerStatuses": [running(self.now - T0)] if phase == "Running" else []}})

    def set_pod(self, name: str, **status: Any) -> None:
        self.api.objects[("pods", "demo", name)]["status"].update(status)

    def kubelet_gone(self, job: str) -> None:
        """The Job's pods finish terminating (no garbage collector here: only what was deleted)."""
        for p in self.pods(job):
            if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") in ("Succeeded", "Failed"):
                del self.api.objects[("pods", "demo", p["metadata"]["name"])]

    def events(self, reason: str | None = None) -> list[str]:
        return [e["message"] for e in self.api.events() if reason is None or e["reason"] == reason]


def test_life_of_a_scavengerjob_with_segments():
    w = World(sj("md"))
    assert w.step() == ["sj-queued"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Pending" and st["interruptedCount"] == 0 and st["creationTimestamp"] == ts(-3600)
    assert w.step() == ["sj-start"]
    st = w.sj("md")["status"]
    assert (st["segment"], st["jobName"], st["phase"]) == (1, "md-1", "Pending")
    job = w.jobs()["md-1"]
    assert job["metadata"]["ownerReferences"][0]["kind"] == "ScavengerJob"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2 and job["spec"]["backoffLimit"] == 0
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["priorityClassName"] == "batchgate-scavenger"
    assert pod_spec["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert job["spec"]["template"]["metadata"]["labels"]["batchgate.io/pod-group-size"] == "2"
    assert w.step() == []  # pods not there yet: nothing to do
    w.run_job("md-1")
    assert w.step(60) == ["sj-running"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Running" and st["runningSegment"] == 1 and len(st["runningTimestamps"]) == 1
    start_over = st["priorityStartOverTimestamp"]
    assert w.step() == [] and w.c.last_plan is not None and w.c.last_plan.wake_at is not None
    # the duration runs out: status first, then the Job goes (SIGTERM -> checkpoint)
    assert w.step(30 * MIN) == ["sj-segment"]
    st = w.sj("md")["status"]
    assert (st["segment"], st["jobName"], st["phase"]) == (2, "md-2", "Running")
    assert st["priorityStartOverTimestamp"] > start_over and "md-1" not in w.jobs()
    # its pods are deleted with it, by us (SIGTERM now, not when the garbage collector gets to them)
    assert all(p["metadata"].get("deletionTimestamp") for p in w.pods("md-1")) and len(w.pods("md-1")) == 2
    assert w.step() == []  # the old pods are still checkpointing: no new segment yet
    w.kubelet_gone("md-1")
    assert w.step() == ["sj-resume"] and "md-2" in w.jobs()
    w.run_job("md-2")
    assert w.step(5) == ["sj-segment-running"]
    st = w.sj("md")["status"]
    assert st["runningSegment"] == 2 and len(st["runningTimestamps"]) == 1 and st["interruptedCount"] == 0
    for p in w.pods("md-2"):
        w.set_pod(p["metadata"]["name"], phase="Succeeded", containerStatuses=[terminated(0)])
    assert w.step() == ["sj-completed"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Completed" and st["finishedTimestamp"]
    assert [c["status"] for c in st["conditions"]] == ["False", "True"]
    assert st["observedGeneration"] == 1
    assert w.step() == [] and w.step(HOUR_) == []
    reasons = [e["reason"] for e in w.api.events()]
    assert reasons == ["Queued", "Starting", "Started", "SegmentEnded", "SegmentStarted",
                       "Completed"]


HOUR_ = 3600


def test_the_next_segment_starts_once_the_old_pods_ended_though_their_finalizer_keeps_them():
    """Kubernetes 1.26+: the Job controller's pods carry its job-tracking finalizer, and while that
    controller is away (kube-controller-manager down) they are never removed. Once the kubelet has
    stopped them and written their terminal phase they hold no room: kube-scheduler lists only pods
    that are not Succeeded or Failed. The next segment waits for that, not for the objects to go."""
    w = World(sj("md"))
    assert w.step() == ["sj-queued"] and w.step() == ["sj-start"]
    w.run_job("md-1")
    assert w.step(60) == ["sj-running"] and w.step(30 * MIN) == ["sj-segment"]
    for p in w.pods("md-1"):
        p["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    assert w.step() == []  # still running: they hold their room, and may still be writing the checkpoint
    w.set_pod("md-1-0", phase="Failed", containerStatuses=[terminated(143)])  # saved on SIGTERM, ended
    assert w.step() == []  # the other one still holds its room
    w.set_pod("md-1-1", phase="Failed", containerStatuses=[terminated(143)])
    assert w.step() == ["sj-resume"] and "md-2" in w.jobs()
    assert len(w.pods("md-1")) == 2  # still there, kept by the finalizer, in their terminal phase
    w.run_job("md-2")
    assert w.step(5) == ["sj-segment-running"] and w.sj("md")["status"]["interruptedCount"] == 0


def _running(w: World, name: str = "md") -> None:
    w.step()
    w.step()
    w.run_job(f"{name}-1")
    assert w.step(60) == ["sj-running"]


def test_a_pod_failing_by_itself_fails_it_for_good():
    w = World(sj("md"))
    _running(w)
    w.set_pod("md-1-1", phase="Failed", containerStatuses=[terminated(137, reason="OOMKilled")])
    w.api.objects[("pods", "demo", "md-1-0")]["metadata"]["deletionTimestamp"] = format_time(w.now)  # Job controller
    assert w.step() == ["sj-failed"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Failed" and "md-1-1" in st["message"] and "OOMKilled" in st["message"]
    assert "md-1" not in w.jobs()
    assert w.step(HOUR_) == []


def test_the_workload_ends_its_segments_with_the_agreed_exit_code():
    """spec.checkpointExitCode: the workload checkpoints and exits with it; that is a segment
    boundary (not a failure, and the siblings the Job controller deletes are no interruption);
    the controller never ends a segment at duration itself; another non-zero exit still fails."""
    obj = sj("md", duration="10m")
    obj["spec"]["checkpointExitCode"] = 3
    w = World(obj)
    _running(w)
    env = w.jobs()["md-1"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "BATCHGATE_CHECKPOINT_EXIT_CODE", "value": "3"} in env
    assert "ends the segment itself" in w.sj("md")["status"]["message"]
    assert w.step(HOUR_) == []  # past duration: no SIGTERM boundary, the workload decides
    w.set_pod("md-1-0", phase="Failed", containerStatuses=[terminated(3)])
    w.api.objects[("pods", "demo", "md-1-1")]["metadata"]["deletionTimestamp"] = format_time(w.now)  # Job controller
    assert w.step() == ["sj-segment"]
    st = w.sj("md")["status"]
    assert (st["segment"], st["jobName"], st["phase"], st["interruptedCount"]) == (2, "md-2", "Running", 0)
    assert st["priorityStartOverTimestamp"] == format_time(w.now) and "md-1" not in w.jobs()
    assert "checkpoint code 3" in w.events("SegmentEnded")[0]
    w.kubelet_gone("md-1")
    assert w.step() == ["sj-resume"]
    w.run_job("md-2")
    assert w.step(5) == ["sj-segment-running"]
    w.set_pod("md-2-1", phase="Failed", containerStatuses=[terminated(1)])  # not the agreed code: a failure
    assert w.step() == ["sj-failed"]
    assert "exited with code 1" in w.sj("md")["status"]["message"]


def test_a_pod_that_checkpointed_and_is_then_deleted_is_no_interruption():
    """The pod exited with the agreed code; then it is deleted (here by hand, as the Job controller,
    a person or an eviction of the ended pod would) before the controller's pass saw the exit: a
    segment boundary all the same, interruptedCount unchanged. Preempted first and then exiting
    with the code (DisruptionTarget before the exit), it is one interruption, counted once."""
    for disrupted_before, want, count in ((False, "sj-segment", 0), (True, "sj-interrupted", 1)):
        obj = sj("md", pods=1, duration="10m")
        obj["spec"]["checkpointExitCode"] = 3
        w = World(obj)
        _running(w)
        exit_at = w.now - 1
        conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                       "lastTransitionTime": format_time(exit_at - 5 if disrupted_before else exit_at + 0.5)}]
        w.set_pod("md-1-0", phase="Failed", conditions=conditions, containerStatuses=[{
            "name": "main", "ready": False, "restartCount": 0, "state": {"terminated": {
                "exitCode": 3, "reason": "Error", "startedAt": format_time(w.now - 70),
                "finishedAt": format_time(exit_at)}}}])
        w.api.objects[("pods", "demo", "md-1-0")]["metadata"]["deletionTimestamp"] = format_time(w.now)
        assert w.step() == [want]
        assert w.sj("md")["status"]["interruptedCount"] == count
        w.kubelet_gone("md-1")
        assert "sj-interrupted" not in w.step() + w.step(5)  # never counted again


def test_a_checkpointed_pod_gone_before_a_pass_is_told_by_the_jobs_failure_policy():
    """A pod that ended is deleted at once: the pass may find only the Job, failed by the FailJob rule
    on the agreed code (reason PodFailurePolicy), and the sibling the Job controller deletes."""
    obj = sj("md", pods=2, duration="10m")
    obj["spec"]["checkpointExitCode"] = 3
    w = World(obj)
    _running(w)
    job = w.jobs()["md-1"]
    assert job["spec"]["podFailurePolicy"] == {"rules": [{"action": "FailJob", "onExitCodes": {
        "containerName": "main", "operator": "In", "values": [3]}}]}
    del w.api.objects[("pods", "demo", "md-1-0")]
    w.api.objects[("pods", "demo", "md-1-1")]["metadata"]["deletionTimestamp"] = format_time(w.now)
    job["status"] = {"failed": 1, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": "exit code 3"},
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "exit code 3"}]}
    assert w.step() == ["sj-segment"]
    st = w.sj("md")["status"]
    assert (st["segment"], st["interruptedCount"]) == (2, 0) and "checkpoint code 3" in st["message"]
    # without the Job's record, the same sight is an interruption
    w2 = World(sj("other", pods=2, duration="10m"))
    _running(w2, "other")
    del w2.api.objects[("pods", "demo", "other-1-0")]
    w2.api.objects[("pods", "demo", "other-1-1")]["metadata"]["deletionTimestamp"] = format_time(w2.now)
    assert w2.step() == ["sj-interrupted"]


def test_a_pod_deleted_from_outside_interrupts_it_and_it_restarts_first():
    w = World(sj("md", cpu="2"), sj("younger", cpu="2", created=-60), nodes=1)
    w.step()
    w.step()  # md starts (older); younger waits: 4 + 4 cpu is over 70 % of 8
    kinds = {o["metadata"]["name"] for o in w.jobs().values()}
    assert kinds == {"md-1"}, "4 cpu + 4 cpu is over the 70 % cap of 8"
    w.run_job("md-1")
    assert w.step(60) == ["sj-running"]
    w.api.objects[("pods", "demo", "md-1-0")]["metadata"]["deletionTimestamp"] = format_time(w.now)
    assert w.step(600) == ["sj-interrupted"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Interrupted" and st["interruptedCount"] == 1 and len(st["interruptedTimestamps"]) == 1
    assert not st.get("jobName") and "md-1" not in w.jobs()
    assert "deleted while running" in st["message"]
    assert w.api.objects[("pods", "demo", "md-1-1")]["metadata"].get("deletionTimestamp")  # every pod goes at once
    assert w.events("Interrupted")
    assert w.step() == []  # the interrupted pod is still terminating: no start on its room
    w.kubelet_gone("md-1")
    assert w.step() == ["sj-start"]  # interrupted first, though younger is waiting too
    assert set(w.jobs()) == {"md-2"}
    from webhook.reconciler import metrics
    assert metrics.SJ_LOST._value.get() >= 600 * 4  # 2 pods x 2 cpu x 600 s


def test_a_missing_configmap_fails_it_naming_the_object():
    vols = [{"name": "params", "mountPath": "/etc/p", "configMap": {"name": "mdp"}}]
    w = World(sj("md", volumes=vols))
    w.step()
    assert w.step() == ["sj-failed"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Failed" and "ConfigMap demo/mdp does not exist" in st["message"]
    assert w.jobs() == {}
    w2 = World(sj("md", volumes=vols), {"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "mdp", "namespace": "demo"}})
    w2.step()
    assert w2.step() == ["sj-start"]
    assert w2.jobs()["md-1"]["spec"]["template"]["spec"]["volumes"] == [{"name": "params", "configMap": {"name": "mdp"}}]


def test_unschedulable_past_the_timeout_waits_again():
    w = World(sj("md"))
    w.step()
    w.step()
    w.run_job("md-1", node="", phase="Pending")
    assert w.step(200) == []
    assert w.step(200) == ["sj-unschedulable"]
    st = w.sj("md")["status"]
    assert st["phase"] == "Pending" and not st.get("jobName") and st["interruptedCount"] == 0
    assert "not scheduled within 5m" in st["message"]


def test_start_order_cap_and_never_fits():
    objs = [sj("a", created=-100), sj("b", created=-200, status={"phase": "Interrupted", "interruptedCount": 2}),
            sj("c", created=-300), sj("giant", pods=4, cpu="6", created=-400)]
    w = World(*objs, nodes=2)  # 16 cpu, cap 70 % = 11.2 cpu; each small one takes 2
    w.step()
    w.step()
    started = sorted(w.jobs())
    assert started == ["a-1", "b-1", "c-1"]
    assert "over the scavengers' share 70%" in w.sj("giant")["status"]["message"], w.sj("giant")["status"]
    assert w.events("CannotFit")
    objs2 = [sj(f"s{i}", created=-100 + i) for i in range(5)]
    w2 = World(*objs2, nodes=2)
    w2.step()
    w2.step()
    assert sorted(w2.jobs()) == ["s0-1", "s1-1", "s2-1", "s3-1", "s4-1"][:5]  # 10 cpu <= 11.2
    w3 = World(*[sj(f"s{i}", created=-100 + i) for i in range(6)], nodes=2)
    w3.step()
    w3.step()
    assert sorted(w3.jobs()) == ["s0-1", "s1-1", "s2-1", "s3-1", "s4-1"]
    assert "more than is left of the scavengers' share (70% of the cluster)" in w3.sj("s5")["status"]["message"]


def test_segment_labels_on_pods():
    w = World(sj("md"))
    _running(w)
    p = w.pods("md-1")[0]
    assert p["metadata"]["labels"][SCAVENGERJOB_LABEL] == "md" and p["metadata"]["labels"][SEGMENT_LABEL] == "1"


def test_a_forged_owner_reference_from_another_namespace_confirms_nothing():
    w = World(sj("md"))
    _running(w)
    j = w.jobs()["md-1"]
    # a pod in another namespace claims to belong to md-1 and "fails": md must not care
    w.api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "evil", "namespace": "other", "labels": {SCAVENGERJOB_LABEL: "md", SEGMENT_LABEL: "1"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "md-1", "controller": True,
                             "uid": j["metadata"]["uid"]}]},
        "spec": {"nodeName": "n0", "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Failed", "containerStatuses": [terminated(1)]}})
    assert w.step() == []
    assert w.sj("md")["status"]["phase"] == "Running"


def test_a_node_missing_from_the_cache_is_read_live_before_its_scavenger_counts_as_interrupted():
    w = World(sj("md", pods=1))
    _running(w)
    w.c.cache.forget("Node", {"metadata": {"name": "n0"}})  # a lagging watch: the node looks gone
    w.now += 1
    assert [o.action.kind for o in w.c.run_pass() if o.action.kind.startswith("sj-")] == []
    assert w.sj("md")["status"]["phase"] == "Running"
    del w.api.objects[("nodes", "", "n0")]  # really gone now
    w.c.cache.forget("Node", {"metadata": {"name": "n0"}})
    w.now += 1
    assert [o.action.kind for o in w.c.run_pass() if o.action.kind.startswith("sj-")] == ["sj-interrupted"]
    assert "node n0 of pod md-1-0 is gone" in w.sj("md")["status"]["message"]


def test_a_pod_gone_before_any_pass_saw_it_go_still_interrupts_the_gang():
    """Preempted, it saved on SIGTERM and was gone within a second: no pass ever saw its
    deletionTimestamp. The Job controller makes a replacement; whether that one is still
    pending or already running, the running segment lost a pod: the whole gang is interrupted."""
    for replacement in ("none", "Pending", "Running"):
        w = World(sj("md"))
        _running(w)
        del w.api.objects[("pods", "demo", "md-1-0")]
        if replacement != "none":
            sibling = w.api.objects[("pods", "demo", "md-1-1")]
            w.now += 5
            w.run_job("md-1", phase=replacement)  # a new md-1-0 ...
            w.api.put(sibling)  # ... beside md-1-1, running since the start
        assert w.step() == ["sj-interrupted"], replacement
        st = w.sj("md")["status"]
        assert (st["phase"], st["interruptedCount"]) == ("Interrupted", 1), replacement
        assert "a pod of running segment 1 is gone" in st["message"] and "md-1" not in w.jobs()
        if replacement == "Running":
            assert "the Job controller replaced it with md-1-0" in st["message"]


def test_a_gang_running_as_seen_is_not_taken_for_replaced():
    w = World(sj("md"))
    _running(w)
    assert w.step(600) == [] and w.step(1) == []
    assert w.sj("md")["status"]["phase"] == "Running"


GUARDED = Settings(leader_elect=False,
                   queues=QueuePolicy(scavengers=Scavengers(unschedulable_timeout=300, guard=20 * MIN)))


def _pdb(w: World, name: str) -> dict[str, Any] | None:
    return w.api.objects.get(("poddisruptionbudgets", "demo", name))


def test_a_segment_is_guarded_once_its_unsaved_work_reaches_the_guard_and_lifted_on_a_cordoned_node():
    """2 pods x 1 cpu: 20 core-minutes of unsaved work after 10 minutes. Then a
    PodDisruptionBudget over the segment's pods (no disruption allowed, owned by its Job) is
    created, seen to exist (a live GET), and only then recorded in the status; a cordoned node
    lifts it; the next segment starts unguarded."""
    w = World(sj("md", duration="1h"), settings=GUARDED)
    _running(w)
    started = w.sj("md")["status"]["priorityStartOverTimestamp"]
    assert w.step(8 * MIN) == [] and _pdb(w, "md-1") is None
    assert w.c.plan_now().wake_at == pytest.approx(parse_time(started) + 10 * MIN)
    assert w.step(MIN) == ["sj-guard-create"]
    pdb = _pdb(w, "md-1")
    assert pdb is not None and pdb["spec"] == {
        "minAvailable": 2, "selector": {"matchLabels": {SCAVENGERJOB_LABEL: "md", SEGMENT_LABEL: "1"}}}
    (owner,) = pdb["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "md-1", w.jobs()["md-1"]["metadata"]["uid"])
    assert "guardedSegment" not in w.sj("md")["status"]
    assert w.step(2) == ["sj-guard"]
    assert w.sj("md")["status"]["guardedSegment"] == 1
    writes = len(w.api.writes())
    assert w.step(MIN) == [] and len(w.api.writes()) == writes  # steady: no more writes
    # kubectl drain (or batchgate's maintenance) cordons the node: the guard goes
    w.api.objects[("nodes", "", "n0")]["spec"] = {"unschedulable": True}
    assert w.step() == ["sj-unguard"]
    assert _pdb(w, "md-1") is None and w.sj("md")["status"].get("guardedSegment") is None
    assert w.step(MIN) == []  # not again while the node is cordoned
    w.api.objects[("nodes", "", "n0")]["spec"] = {}
    assert w.step() == ["sj-guard-create"]  # uncordoned, still unsaved work: guarded again


def test_a_declared_checkpoint_interval_runs_one_long_pod_guarded_in_each_interval():
    """spec.checkpoint.interval: no segment boundary ever (past duration too); the workload reads the
    interval; the guard is held once an interval's unsaved work reaches it (2 x 1 cpu: 10 min into
    each 30-minute interval) and lifted at each checkpoint; an interruption loses the work since the
    last checkpoint by the interval."""
    obj = sj("md", duration="10m")
    obj["spec"]["checkpoint"] = {"interval": "30m"}
    w = World(obj, settings=GUARDED)
    _running(w)
    env = w.jobs()["md-1"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "BATCHGATE_CHECKPOINT_INTERVAL_SECONDS", "value": "1800"} in env
    assert "podFailurePolicy" not in w.jobs()["md-1"]["spec"]
    assert "no segment boundaries" in w.sj("md")["status"]["message"]
    start = parse_time(w.sj("md")["status"]["priorityStartOverTimestamp"])
    w.now = start + 9 * MIN
    assert w.step() == []  # 18 core-min unsaved
    assert w.c.plan_now().wake_at == pytest.approx(start + 10 * MIN)
    w.now = start + 10 * MIN
    assert w.step() == ["sj-guard-create"] and w.step(2) == ["sj-guard"]
    assert _pdb(w, "md-1")["spec"]["minAvailable"] == 2
    w.now = start + 29 * MIN
    assert w.step() in ([], ["sj-guard-set"])  # past duration (10m): no boundary
    assert w.step() == []
    assert w.c.plan_now().wake_at == pytest.approx(start + 30 * MIN)
    # from here on, one interval of writes: the budget stays, its minAvailable follows the checkpoints
    writes = len(w.api.writes())
    w.now = start + 30 * MIN + 1
    assert w.step() == ["sj-guard-set"]  # it checkpointed: cheap again, every disruption allowed
    assert _pdb(w, "md-1")["spec"]["minAvailable"] == 0 and w.sj("md")["status"]["guardedSegment"] == 1
    assert w.c.plan_now().wake_at == pytest.approx(start + 40 * MIN)
    assert w.step(MIN) == [] and w.step(MIN) == []
    w.now = start + 40 * MIN
    assert w.step() == ["sj-guard-set"] and _pdb(w, "md-1")["spec"]["minAvailable"] == 2
    w.now = start + 59 * MIN
    assert w.step() == [] and w.step() == []
    assert [c[:2] for c in w.api.writes()[writes:]] == [("patch", "poddisruptionbudgets")] * 2  # was 4 writes and 2 reads
    assert w.sj("md")["status"]["segment"] == 1  # still the one long pod
    w.now = start + 45 * MIN
    w.api.objects[("pods", "demo", "md-1-0")]["metadata"]["deletionTimestamp"] = format_time(w.now)
    assert w.step() == ["sj-interrupted"]
    st = w.sj("md")["status"]
    assert st["interruptedCount"] == 1 and "interruption 1" in st["message"]


def test_a_guard_that_exists_already_is_adopted_and_a_tainted_node_never_gets_one():
    w = World(sj("md", duration="1h"), settings=GUARDED)
    _running(w)
    w.api.put({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "md-1", "namespace": "demo"}, "spec": {"maxUnavailable": 0}})
    assert w.step(9 * MIN) == ["sj-guard"]  # made by a process that died before the status
    assert w.sj("md")["status"]["guardedSegment"] == 1

    w2 = World(sj("md", duration="1h"), settings=GUARDED)
    _running(w2)
    w2.api.objects[("nodes", "", "n0")]["spec"] = {
        "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}]}
    assert w2.step(30 * MIN) == [] and _pdb(w2, "md-1") is None


def test_the_guard_goes_with_its_segment():
    """A boundary: the next segment is unguarded until its own unsaved work reaches the guard
    (the old budget is owned by the old Job: the garbage collector removes it)."""
    obj = sj("md", duration="1h")
    obj["spec"]["checkpointExitCode"] = 3
    w = World(obj, settings=GUARDED)
    _running(w)
    assert w.step(9 * MIN) == ["sj-guard-create"] and w.step(2) == ["sj-guard"]
    w.set_pod("md-1-0", phase="Failed", containerStatuses=[terminated(3)])
    assert w.step() == ["sj-segment"]
    w.kubelet_gone("md-1")
    assert w.step() == ["sj-resume"]
    w.run_job("md-2")
    assert w.step(5) == ["sj-segment-running"]
    assert w.step(5 * MIN) == []
    assert w.step(5 * MIN) == ["sj-guard-create"] and _pdb(w, "md-2") is not None


def _deleted_at_once(w: World) -> list[str]:
    """kube-apiserver 1.20's DELETE of a pod that is not bound to a node: gone at once (grace period
    0), yet the response is the pod with a deletionTimestamp (recorded). Under load the watch
    delivers the DELETED event before the actuator reads that response: the cache hears of the
    deletion first, then of the write."""
    gone: list[str] = []
    plain = w.api.delete

    def delete(kind: Any, namespace: str | None, name: str, **kw: Any) -> Any:
        cur = w.api.objects.get((kind.plural, namespace or "", name))
        out = plain(kind, namespace, name, **kw)
        if kind.plural == "pods" and cur is not None and not cur["spec"].get("nodeName"):
            cur["metadata"].update({"deletionTimestamp": format_time(w.now), "deletionGracePeriodSeconds": 0})
            w.c.cache.pods.remove(cur)  # the watch's DELETED, first
            gone.append(name)
            return cur
        if cur is not None:
            w.c.cache.stores[cur["kind"]].remove(cur)
        return out

    w.api.delete = delete  # type: ignore[method-assign]
    return gone


def test_an_interruption_whose_replacement_pod_is_deleted_at_once_restarts_without_a_relist():
    """The demo e2e's stuck run (ScavengerJob Interrupted, no pod, no Job left, nothing planned for
    5 minutes): kube-scheduler preempted the running pod, the Job controller made a replacement that
    stayed unbound (the preemptor was nominated on the node), and the interruption deleted it. Its
    DELETE response (a deletionTimestamp, grace period 0) came after the watch's DELETED event and
    was taken into the cache as a terminating pod that no event would ever remove: the ScavengerJob
    waited for it for good. Passes here run on the watch-fed cache, no relist."""
    w = World(sj("md", pods=1))
    _running(w)
    # preempted: saved on SIGTERM and gone before any pass saw it; the replacement is unbound
    del w.api.objects[("pods", "demo", "md-1-0")]
    w.run_job("md-1", phase="Pending")
    repl = w.api.objects[("pods", "demo", "md-1-0")]
    repl["metadata"]["name"] = "md-1-r"
    repl["spec"].pop("nodeName")
    repl["status"].pop("startTime")
    w.api.objects[("pods", "demo", "md-1-r")] = w.api.objects.pop(("pods", "demo", "md-1-0"))
    w.c.cache.list_once()
    gone = _deleted_at_once(w)
    w.now += 1
    assert [o.action.kind for o in w.c.run_pass() if o.result == "done"] == ["sj-interrupted"]
    assert gone == ["md-1-r"] and not w.pods()
    assert ("demo", "md-1-r") not in w.c.cache.pods.items()
    w.now += 1
    assert [o.action.kind for o in w.c.run_pass() if o.result == "done"] == ["sj-start"]
    st = w.sj("md")["status"]
    assert (st["phase"], st["interruptedCount"], st["jobName"]) == ("Interrupted", 1, "md-2")


def test_left_over_pods_are_deleted_by_the_controller_not_left_to_the_garbage_collector():
    """A pod of the ScavengerJob that is not the current segment's and not being deleted: the Job
    controller's replacement made after the interruption deleted its Job (a cache that had not
    seen the deletion), or an old segment's pod the garbage collector has not got to (it never
    does while kube-controller-manager is down). Deleted by uid at once; the current segment's
    pods and a pod of a later segment than the status says are never touched."""
    w = World(sj("md"))
    _running(w)
    old_uid = w.jobs()["md-1"]["metadata"]["uid"]
    w.api.objects[("pods", "demo", "md-1-0")]["metadata"]["deletionTimestamp"] = format_time(w.now)
    assert w.step() == ["sj-interrupted"] and "md-1" not in w.jobs()
    w.kubelet_gone("md-1")
    assert not w.pods()
    late = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "md-1-late", "namespace": "demo", "creationTimestamp": format_time(w.now),
        "labels": {SCAVENGERJOB_LABEL: "md", SEGMENT_LABEL: "1", "job-name": "md-1"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "md-1", "uid": old_uid,
                             "controller": True}]},
        "spec": {"nodeName": "n0", "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Running", "startTime": format_time(w.now)}}
    w.api.put(late)
    assert w.step() == ["sj-cleanup"]
    assert w.api.objects[("pods", "demo", "md-1-late")]["metadata"].get("deletionTimestamp")
    assert ("delete", "pods", "demo", "md-1-late") in w.api.calls
    assert w.step() == []  # it is terminating: still waiting for its room, nothing deleted twice
    assert w.api.calls.count(("delete", "pods", "demo", "md-1-late")) == 1
    w.kubelet_gone("md-1")
    assert w.step() == ["sj-start"] and "md-2" in w.jobs()
    # a pod of the current segment (md-2) is not a leftover; one of a later segment than the status is not either
    w.run_job("md-2")
    future = {**late, "metadata": {**late["metadata"], "name": "md-3-x", "uid": "u-md-3-x",
                                   "labels": {SCAVENGERJOB_LABEL: "md", SEGMENT_LABEL: "3", "job-name": "md-3"},
                                   "ownerReferences": [{**late["metadata"]["ownerReferences"][0],
                                                        "name": "md-3", "uid": "u-md-3"}]}}
    w.api.put(future)
    assert w.step(60) == ["sj-running"]
    assert not any(p["metadata"].get("deletionTimestamp") for p in w.pods())


def test_leftovers_rule():
    from webhook.reconciler.model import pod_view
    from webhook.reconciler.scavenger import leftovers, sj_view

    def p(name: str, seg: int, owner: str, **kw: Any) -> Any:
        md: dict[str, Any] = {"name": name, "namespace": "demo", "uid": f"u-{name}",
                              "labels": {SCAVENGERJOB_LABEL: "md", SEGMENT_LABEL: str(seg)},
                              "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"md-{seg}",
                                                   "uid": owner, "controller": True}]}
        if kw.get("deleting"):
            md["deletionTimestamp"] = ts(0)
        return pod_view({"apiVersion": "v1", "kind": "Pod", "metadata": md,
                         "spec": {"nodeName": "n0", "containers": [{"name": "main", "image": "x"}]},
                         "status": {"phase": kw.get("phase", "Running")}})

    pods = [p("a", 1, "j1"), p("b", 1, "j1", deleting=True), p("c", 1, "j1", phase="Failed"),
            p("d", 2, "j2"), p("e", 3, "j3")]
    waiting = sj_view(sj("md", status={"phase": "Interrupted", "segment": 2}))
    assert [x.ref.name for x in leftovers(waiting, None, pods)] == ["a", "d"]
    starting = sj_view(sj("md", status={"phase": "Running", "segment": 2, "jobName": "md-2"}))
    assert [x.ref.name for x in leftovers(starting, None, pods)] == ["a"]


def test_a_gang_a_window_drains_before_its_next_checkpoint_gets_no_guard_and_loses_a_held_one():
    """The guard looks at coming windows (the rule of the reconciler's victims, scavenger.gang_loss):
    a gang that a maintenance window within the hour drains before its segment ends loses its unsaved
    work then anyway: nothing to protect, and the cheapest room for kube-scheduler too. One that will
    checkpoint first keeps its guard."""
    def window(start: float) -> dict[str, Any]:
        return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
                "metadata": {"name": "mw", "uid": "mw-uid"},
                "spec": {"start": format_time(start), "end": format_time(start + 3600), "nodes": ["n0"]}}

    w = World(sj("md", duration="1h"), settings=GUARDED)
    _running(w)
    start = parse_time(w.sj("md")["status"]["priorityStartOverTimestamp"])
    w.api.put(window(start + 65 * MIN))  # after the segment's end (+60): it checkpoints first
    w.now = start + 10 * MIN
    assert w.step() == ["sj-guard-create"] and w.step(2) == ["sj-guard"]
    w.api.objects[("maintenancewindows", "", "mw")]["spec"] = window(start + 40 * MIN)["spec"]  # moved: before it
    assert w.step() == ["sj-unguard"]
    assert _pdb(w, "md-1") is None and w.sj("md")["status"].get("guardedSegment") is None
    assert "before its next checkpoint" in w.sj("md")["status"]["message"]
    assert w.step(MIN) == []  # and none made while the drain comes first

    w2 = World(sj("md", duration="1h"), settings=GUARDED)
    _running(w2)
    start = parse_time(w2.sj("md")["status"]["priorityStartOverTimestamp"])
    w2.api.put(window(start + 30 * MIN))
    w2.now = start + 10 * MIN
    assert w2.step() == [] and w2.step(5 * MIN) == [] and _pdb(w2, "md-1") is None


def _lower(w: World, name: str, pods: int) -> None:
    """Its user lowers spec.pods (the API server bumps the generation)."""
    o = w.sj(name)
    o["spec"]["pods"] = pods
    o["metadata"]["generation"] = o["metadata"].get("generation", 1) + 1


def test_lowering_spec_pods_of_a_running_segment_ends_it_and_the_next_runs_with_fewer():
    """As Slurm releases a shrunk job's extra nodes and the job keeps running: the segment ends
    now, as at a boundary (its pods get SIGTERM to checkpoint; no interruption), and the next one
    starts from that checkpoint with the new, smaller gang, at once, without waiting its turn."""
    w = World(sj("md", pods=4))
    _running(w)
    _lower(w, "md", 2)
    assert w.step() == ["sj-segment"]
    st = w.sj("md")["status"]
    assert (st["segment"], st["jobName"], st["phase"], st["interruptedCount"]) == (2, "md-2", "Running", 0)
    assert "md-1" not in w.jobs() and all(p["metadata"].get("deletionTimestamp") for p in w.pods("md-1"))
    assert w.events("Resized") == [
        "spec.pods lowered from 4 to 2: segment 1 ends now, its 4 pods get SIGTERM to checkpoint and 2 of "
        "them are released; segment 2 (Job md-2, 2 pods) starts from the checkpoint when they are gone"]
    assert w.step() == []  # still checkpointing
    w.kubelet_gone("md-1")
    assert w.step() == ["sj-resume"]
    job = w.jobs()["md-2"]
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    w.run_job("md-2")
    assert w.step(5) == ["sj-segment-running"]
    st = w.sj("md")["status"]
    assert (st["runningSegment"], st["interruptedCount"], st["observedGeneration"]) == (2, 0, 2)


def test_a_segment_is_judged_by_the_gang_it_started_with_not_a_spec_edited_since():
    """Half of a 4-pod segment exiting 0 is not the ScavengerJob completing because its spec says 2
    now (its other pods still run): the segment's own size (its Job's) decides, and the lowered spec
    ends the segment instead. An admin's raise waits for the next segment: the running one is no
    interruption for lacking pods it never had."""
    w = World(sj("md", pods=4))
    _running(w)
    _lower(w, "md", 2)
    for name in ("md-1-0", "md-1-1"):
        w.set_pod(name, phase="Succeeded", containerStatuses=[terminated(0)])
    assert w.step() == ["sj-segment"]
    assert w.sj("md")["status"]["phase"] == "Running"

    w = World(sj("md", pods=2))
    _running(w)
    _lower(w, "md", 4)  # an admin may
    assert w.step() == []
    st = w.sj("md")["status"]
    assert (st["phase"], st["segment"], st["interruptedCount"]) == ("Running", 1, 0)
    assert w.step(30 * MIN) == ["sj-segment"]
    w.kubelet_gone("md-1")
    assert w.step() == ["sj-resume"] and w.jobs()["md-2"]["spec"]["parallelism"] == 4
