"""Released work is kept to the room the placement gave it (planner._release, issues 23 and 24).

kube-scheduler's default scoring (NodeResourcesFit LeastAllocated) binds a pod on the emptiest node
that fits, which is often the node being emptied for a reserved big job: every release the placement
decides is narrowed to the nodes the placement chose for it (its required node affinity, each of its
own terms tightened with a node-name requirement), so backfill cannot take reserved room and a gang
cannot be scattered so that part of it does not fit."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.reconciler.reconbuild import HOUR, T0, group_labels
from tests.unit.reconciler.test_queue import POLICY, busy, gated, queued_job
from tests.unit.reconciler.test_shadow import node, snap
from webhook.reconciler.actions import Action
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import Settings

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TWO = [node("a", cpu="4"), node("b", cpu="4")]


def name_in(*nodes: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": list(nodes)}


def acts(*objs: dict[str, Any], nodes: list[Any] = TWO, policy: Any = POLICY, estimate: bool = False) -> list[Action]:
    return plan(snap(*objs, nodes=nodes), T0, Settings(queues=policy), estimate=estimate).actions


def terms_of(a: Action) -> list[dict[str, Any]]:
    spec = a.patch["spec"]
    spec = spec["template"]["spec"] if "template" in spec else spec
    return spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]  # type: ignore[no-any-return]


def reserved_node_case() -> list[dict[str, Any]]:
    """a frees at +1h (busy-a's limit) and is emptier than b (1 CPU used against 3); the whole-node
    job ranked first reserves a from +1h; short (1 CPU, 2 h) fits now on both, but on a it would
    delay the big job: the placement starts it on b."""
    return [busy("busy-a", "1", node_name="a"), busy("busy-b", "3", node_name="b", limit="8h"),
            queued_job("big", cpu="4", created=-2 * HOUR), queued_job("short", cpu="1", limit="2h", created=-HOUR)]


def test_backfill_is_kept_off_the_reserved_node_kube_scheduler_would_have_chosen() -> None:
    out = acts(*reserved_node_case())
    (rel,) = [a for a in out if a.kind == "release"]
    assert rel.target.name == "short"
    assert terms_of(rel) == [{"matchFields": [name_in("b")]}]  # the Job's template, in its release patch
    assert rel.patch["spec"]["suspend"] is False
    assert "kept to the node planned for it (b)" in rel.message
    (promise,) = [a for a in out if a.kind == "start-by"]
    assert promise.target.name == "big"


def test_a_gated_pod_is_narrowed_before_its_gate_goes() -> None:
    out = acts(busy("busy-a", "1", node_name="a"), busy("busy-b", "3", node_name="b", limit="8h"),
               queued_job("big", cpu="4", created=-2 * HOUR), gated("short", cpu="1", limit="2h", created=-HOUR))
    mine = [a for a in out if a.target.name == "short"]
    assert [a.kind for a in mine] == ["narrow", "release"]
    assert terms_of(mine[0]) == [{"matchFields": [name_in("b")]}]
    assert mine[0].quiet and mine[0].patch["metadata"]["resourceVersion"]  # fenced, no Event of its own


def test_narrowing_only_tightens_the_users_own_affinity() -> None:
    """Each term the user wrote keeps its requirements, in their order, and gains the node's name: a
    node the user excluded is never planned (the placement matched it), and Kubernetes accepts only
    additions to a gated pod's terms."""
    p = gated("mine", cpu="1", created=-HOUR)
    own = [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["b", "c"]}]},
           {"matchExpressions": [{"key": "zone", "operator": "Exists"}],
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}]
    p["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": own}}}
    (narrow,) = [a for a in acts(p) if a.kind == "narrow"]
    assert terms_of(narrow) == [
        {"matchExpressions": own[0]["matchExpressions"], "matchFields": [name_in("b")]},
        {"matchExpressions": own[1]["matchExpressions"], "matchFields": [*own[1]["matchFields"], name_in("b")]}]


def test_a_pod_whose_own_affinity_names_its_planned_node_is_not_narrowed_again() -> None:
    """A DaemonSet's pod (its controller names its node, ``metadata.name In [b]``) is released with no
    narrowing patch: it would add the same requirement twice. A pod naming a and b, planned on b, is
    narrowed; so is a Job naming b (its requeue takes the last field requirement out again)."""
    def naming(p: dict[str, Any], *nodes: str) -> dict[str, Any]:
        p["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [name_in(*nodes)]}]}}}
        return p

    full_a = busy("busy-a", "4", node_name="a", limit="8h")
    out = acts(full_a, naming(gated("agent", cpu="1"), "b"))
    assert [a.kind for a in out if a.target.name == "agent"] == ["release"]
    (narrow,) = [a for a in acts(full_a, naming(gated("two", cpu="1"), "a", "b")) if a.kind == "narrow"]
    assert terms_of(narrow) == [{"matchFields": [name_in("a", "b"), name_in("b")]}]
    j = queued_job("named", cpu="1")
    naming(j["spec"]["template"], "b")
    (rel,) = [a for a in acts(full_a, j) if a.kind == "release"]
    assert terms_of(rel) == [{"matchFields": [name_in("b"), name_in("b")]}]


def test_a_gang_is_kept_to_the_nodes_the_placement_split_it_over() -> None:
    """Three 3-CPU pods of one group: two fit on a and b (one each) and the third on c; kube-scheduler
    may put them anywhere among those three, where they all fit."""
    nodes = [node("a", cpu="4"), node("b", cpu="4"), node("c", cpu="4"), node("d", cpu="4")]
    group = [gated(f"g-{i}", cpu="3", labels=group_labels("g", 3), created=-HOUR + i) for i in range(3)]
    out = acts(busy("d-busy", "2", node_name="d"), *group, nodes=nodes)
    narrows = [a for a in out if a.kind == "narrow"]
    assert sorted(a.target.name for a in narrows) == ["g-0", "g-1", "g-2"]
    assert all(terms_of(a) == [{"matchFields": [name_in("a", "b", "c")]}] for a in narrows)


def test_a_job_that_ran_is_released_as_it_is() -> None:
    """Kubernetes refuses a change to the template of a Job that has a start time: narrowing it would
    make every release fail, so it goes unnarrowed."""
    j = queued_job("again", cpu="1")
    j["status"] = {"startTime": "2020-01-01T00:00:00Z"}
    (rel,) = [a for a in acts(j) if a.kind == "release"]
    assert rel.patch["spec"] == {"suspend": False}
    assert "kept to" not in rel.message


def test_work_asking_for_gpus_is_released_as_it_is() -> None:
    """The placement counts cpu and memory, not GPUs: kept to its planned node, a GPU job could wait
    there while another node has GPUs free."""
    j = queued_job("gpu", cpu="1")
    j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    (rel,) = [a for a in acts(j) if a.kind == "release"]
    assert rel.patch["spec"] == {"suspend": False}
    p = gated("gpu-pod", cpu="1")
    p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    assert [a.kind for a in acts(p) if a.target.name == "gpu-pod"] == ["release"]


def test_a_queue_no_longer_gated_lets_its_work_go_as_it_is() -> None:
    policy = dataclasses.replace(POLICY, gated=frozenset(q for q in POLICY.gated if q != "batch"))
    (rel,) = [a for a in acts(queued_job("free", cpu="1"), policy=policy) if a.kind == "release"]
    assert rel.patch["spec"] == {"suspend": False}


def test_a_released_pod_whose_planned_node_is_gone_is_told_it_never_fits() -> None:
    """Released, narrowed to b, and b is deleted before kube-scheduler bound it: the pod is kube-
    scheduler's now (no gate), its affinity names only b, and the expected-start pass says so (a
    Warning, NeverFits). A node that only filled up instead keeps it waiting there, its start placed
    when that room frees (other work's promises count it)."""
    p = gated("stranded", cpu="1", limit="2h", gates=())
    p["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [name_in("b")]}]}}}
    gone = acts(p, nodes=[node("a", cpu="4")], estimate=True)
    (warn,) = [a for a in gone if a.target.name == "stranded" and a.reason == "NeverFits"]
    assert warn.event_type == "Warning" and "no node matches" in warn.message
    full = acts(p, busy("filler", "4", node_name="b"), nodes=TWO, estimate=True)
    (moved,) = [a for a in full if a.target.name == "stranded" and a.kind == "expected-start"]
    assert moved.reason == "ExpectedStart" and "node b" in moved.message
