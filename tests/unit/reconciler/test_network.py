"""Job networking planned from stamped pods: Service, hostfile ConfigMap, NetworkPolicy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.netpolicy import Endpoint, connection_allowed
from webhook.contract import SPEC_HASH_ANNOTATION
from webhook.jobnet import Isolation, Proxy
from webhook.reconciler.actions import Action
from webhook.reconciler.model import (
    CONFIG_MAP,
    NETWORK_POLICY,
    SERVICE,
    Snapshot,
    job_view,
    net_object_view,
    pod_view,
)
from webhook.reconciler.network import plan_network
from webhook.reconciler.planner import plan
from webhook.reconciler.settings import QueuePolicy, Settings

NS = "demo"
NET = "batchgate.io/network"
PROXY = Proxy(namespace_selector=(("batchgate.io/role", "platform"),), pod_selector=(("app", "proxy"),))
ISOLATED = Isolation(namespaces=(NS,), proxy=PROXY)


def job(name: str, uid: str | None = None, *, deleting: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid or f"uid-{name}"}
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": md, "spec": {"template": {}}}


def member(name: str, service: str, *, size: int = 3, job_name: str | None = None, phase: str = "Running",
           connect: str | None = None, slots: str = "4", index: int | None = None,
           hostname: str | None = None, deleting: bool = False) -> dict[str, Any]:
    ann = {"batchgate.io/slots": slots}
    if connect is not None:
        ann["batchgate.io/connect-to"] = connect
    if index is not None:
        ann["batch.kubernetes.io/job-completion-index"] = str(index)
    md: dict[str, Any] = {
        "name": name, "namespace": NS, "uid": f"uid-{name}",
        "labels": {NET: service, "batchgate.io/pod-group": service, "batchgate.io/pod-group-size": str(size)},
        "annotations": ann,
    }
    if job_name:
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name,
                                  "uid": f"uid-{job_name}", "controller": True}]
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": md, "spec": {"hostname": hostname or name, "subdomain": service},
            "status": {"phase": phase}}


def snap(pods: list[dict[str, Any]], jobs: list[dict[str, Any]] = (), objects: list[dict[str, Any]] = ()
         ) -> Snapshot:  # type: ignore[assignment]
    s = Snapshot.of(pods=[pod_view(p) for p in pods], jobs=[job_view(j) for j in jobs])
    kinds = {"Service": SERVICE, "ConfigMap": CONFIG_MAP, "NetworkPolicy": NETWORK_POLICY}
    views = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): net_object_view(o, kinds[o["kind"]])
             for o in objects}
    return Snapshot(pods=s.pods, jobs=s.jobs, net_objects=views)


def run(s: Snapshot, rule: Isolation | None = None) -> list[Action]:
    return plan_network(s, isolation_for=lambda ns: rule if rule and ns in rule.namespaces else None,
                        excluded=lambda ns: ns == "kube-system")


def bodies(actions: list[Action]) -> dict[str, dict[str, Any]]:
    return {a.net.kind: dict(a.net.body) for a in actions if a.net and a.net.body}


def stored(actions: list[Action]) -> list[dict[str, Any]]:
    """The objects as the API server would store them after these creates (with a uid)."""
    out = []
    for a in actions:
        assert a.net and a.net.body
        body = {**a.net.body, "metadata": {**a.net.body["metadata"], "uid": f"uid-{a.net.name}",
                                           "resourceVersion": "1"}}
        out.append(body)
    return out


MPI = [member(f"mpi-{x}", "mpi", job_name="mpi") for x in ("zz9", "bk2", "f7d")]


def test_a_complete_job_gets_its_headless_service_and_hostfile_owned_by_the_job() -> None:
    actions = run(snap(MPI, [job("mpi")]))
    assert [(a.kind, a.net.kind) for a in actions if a.net] == [
        ("create-network", "Service"), ("create-network", "ConfigMap")]
    b = bodies(actions)
    svc = b["Service"]
    assert svc["metadata"]["name"] == "mpi"
    assert svc["spec"] == {"clusterIP": "None", "selector": {NET: "mpi"}, "publishNotReadyAddresses": True}
    assert svc["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "mpi",
                                                   "uid": "uid-mpi"}]
    assert svc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "batchgate"
    cm = b["ConfigMap"]
    assert cm["metadata"]["name"] == "mpi-hostfile"
    assert cm["data"]["hostfile"] == "mpi-bk2.mpi slots=4\nmpi-f7d.mpi slots=4\nmpi-zz9.mpi slots=4\n"
    assert cm["data"]["hosts"] == "mpi-bk2.mpi,mpi-f7d.mpi,mpi-zz9.mpi"
    assert cm["data"]["peers"] == ""
    assert all(a.quiet for a in actions)


def test_hostfile_waits_for_every_member() -> None:
    actions = run(snap(MPI[:2], [job("mpi")]))
    assert [a.net.kind for a in actions if a.net] == ["Service"]


def test_steady_state_plans_nothing_and_restart_finds_no_duplicates() -> None:
    first = run(snap(MPI, [job("mpi")]))
    assert run(snap(MPI, [job("mpi")], stored(first))) == []


def test_a_replaced_member_updates_the_hostfile_fenced_by_its_version() -> None:
    first = stored(run(snap(MPI, [job("mpi")])))
    replaced = [*MPI[:2], member("mpi-q4x", "mpi", job_name="mpi")]
    actions = run(snap(replaced, [job("mpi")], first))
    assert [(a.kind, a.net.kind) for a in actions if a.net] == [("update-network", "ConfigMap")]
    w = actions[0].net
    assert w.resource_version == "1" and w.uid == "uid-mpi-hostfile"
    assert "mpi-q4x.mpi slots=4" in w.body["data"]["hostfile"] and "f7d" not in w.body["data"]["hostfile"]


def test_members_that_ended_or_are_going_are_not_listed() -> None:
    pods = [*MPI, member("mpi-old", "mpi", job_name="mpi", phase="Failed"),
            member("mpi-bye", "mpi", job_name="mpi", deleting=True)]
    cm = bodies(run(snap(pods, [job("mpi")])))["ConfigMap"]
    assert "old" not in cm["data"]["hosts"] and "bye" not in cm["data"]["hosts"]


def test_indexed_job_hostfile_is_in_index_order() -> None:
    pods = [member(f"lat-{i}-x{i}", "lat", size=3, job_name="lat", index=i, hostname=f"lat-{i}") for i in (2, 0, 1)]
    cm = bodies(run(snap(pods, [job("lat")])))["ConfigMap"]
    assert cm["data"]["hosts"] == "lat-0.lat,lat-1.lat,lat-2.lat"


def test_objects_of_a_job_being_deleted_are_left_to_the_garbage_collector() -> None:
    assert run(snap(MPI, [job("mpi", deleting=True)])) == []
    assert run(snap(MPI, [])) == [], "the Job is gone already"


def test_a_pod_re_parented_to_the_job_makes_the_network_the_pods_own() -> None:
    """The same rule as everywhere (``model.owns``): a pod older than the Job (someone's own pod
    re-parented to it) is no pod of the Job, whose uid alone it names; the network is not the Job's
    to own then, but the pods', as for any pods that are jobs of their own."""
    made = "2026-01-01T10:00:00Z"
    j = job("mpi")
    j["metadata"]["creationTimestamp"] = made
    pods = [member(f"mpi-{x}", "mpi", job_name="mpi") for x in ("a", "b", "old")]
    for p in pods:
        p["metadata"]["creationTimestamp"] = "2026-01-01T09:00:00Z" if p["metadata"]["name"] == "mpi-old" else made
    svc = bodies(run(snap(pods, [j])))["Service"]
    assert [(o["kind"], o["name"]) for o in svc["metadata"]["ownerReferences"]] == [
        ("Pod", "mpi-a"), ("Pod", "mpi-b"), ("Pod", "mpi-old")]
    svc = bodies(run(snap([*pods[:2], member("mpi-c", "mpi", job_name="mpi")], [j])))["Service"]
    assert [(o["kind"], o["name"]) for o in svc["metadata"]["ownerReferences"]] == [("Job", "mpi")]


def test_bare_pods_own_their_network_together() -> None:
    pods = [member("ring-0", "ring", size=2), member("ring-1", "ring", size=2)]
    svc = bodies(run(snap(pods)))["Service"]
    assert [(o["kind"], o["name"]) for o in svc["metadata"]["ownerReferences"]] == [("Pod", "ring-0"),
                                                                                   ("Pod", "ring-1")]


def test_an_object_batchgate_did_not_make_is_never_touched() -> None:
    foreign = {"kind": "Service", "metadata": {"name": "mpi", "namespace": NS, "uid": "u", "resourceVersion": "3",
                                               "labels": {"app": "theirs"}}}
    actions = run(snap(MPI, [job("mpi")], [foreign]))
    assert [a.net.kind for a in actions if a.net] == ["ConfigMap"]


def test_excluded_namespaces_and_unknown_objects_plan_nothing() -> None:
    s = snap(MPI, [job("mpi")])
    assert plan_network(Snapshot(pods=s.pods, jobs=s.jobs, net_objects=None),
                        isolation_for=lambda ns: None, excluded=lambda ns: False) == []
    assert plan_network(s, isolation_for=lambda ns: None, excluded=lambda ns: ns == NS) == []


# -- isolation ------------------------------------------------------------------------
def ep(labels: dict[str, str], ns: str = NS, ns_labels: dict[str, str] | None = None) -> Endpoint:
    return Endpoint(ns, labels, ns_labels or {})


SOLVER = [member(f"solver-{i}", "solver", size=2, job_name="solver", connect="viz") for i in range(2)]
VIZ = [member(f"viz-{i}", "viz", size=2, job_name="viz", connect="solver") for i in range(2)]
SNOOP = [member(f"snoop-{i}", "snoop", size=2, job_name="snoop", connect="solver") for i in range(2)]


def policies(actions: list[Action]) -> list[dict[str, Any]]:
    return [dict(a.net.body) for a in actions if a.net and a.net.kind == "NetworkPolicy"]


def test_isolated_job_admits_itself_agreed_peers_and_the_proxy_only() -> None:
    actions = run(snap([*SOLVER, *VIZ, *SNOOP], [job("solver"), job("viz"), job("snoop")]), ISOLATED)
    pols = policies(actions)
    assert sorted(p["metadata"]["name"] for p in pols) == ["snoop", "solver", "viz"]
    solver, viz, snoop = ep({NET: "solver"}), ep({NET: "viz"}), ep({NET: "snoop"})
    proxy = ep({"app": "proxy"}, ns="platform", ns_labels={"batchgate.io/role": "platform"})
    assert connection_allowed(pols, solver, solver)
    assert connection_allowed(pols, viz, solver) and connection_allowed(pols, solver, viz)
    assert connection_allowed(pols, proxy, solver) and connection_allowed(pols, proxy, snoop)
    # snoop names solver, but solver does not name snoop: no way in, either direction
    assert not connection_allowed(pols, snoop, solver)
    assert not connection_allowed(pols, solver, snoop)
    # anything else: another app in the namespace, the proxy's pod selector in another namespace,
    # another pod in the proxy's namespace
    assert not connection_allowed(pols, ep({"app": "web"}), solver)
    assert not connection_allowed(pols, ep({"app": "proxy"}, ns="other"), solver)
    assert not connection_allowed(pols, ep({"app": "db"}, ns="platform", ns_labels={"batchgate.io/role": "platform"}),
                                  solver)
    # the peers are listed in the hostfile's peers key, by name
    cm = next(dict(a.net.body) for a in actions if a.net and a.net.kind == "ConfigMap"
              and a.net.name == "solver-hostfile")
    assert cm["data"]["peers"] == "viz-0.viz\nviz-1.viz\n"


def test_restricted_egress_keeps_dns_and_peers_only() -> None:
    rule = Isolation(namespaces=(NS,), proxy=PROXY, egress="restricted")
    pols = policies(run(snap([*SOLVER, *VIZ], [job("solver"), job("viz")]), rule))
    solver, viz = ep({NET: "solver"}), ep({NET: "viz"})
    dns = ep({"k8s-app": "kube-dns"}, ns="kube-system", ns_labels={"kubernetes.io/metadata.name": "kube-system"})
    assert connection_allowed(pols, solver, dns, protocol="UDP", port=53)
    assert connection_allowed(pols, solver, dns, protocol="TCP", port=53)
    # port 53 anywhere else is not DNS: a pod in the namespace, or one posing as kube-dns elsewhere
    assert not connection_allowed(pols, solver, ep({"app": "resolver"}, ns="internet"), protocol="UDP", port=53)
    assert not connection_allowed(pols, solver, ep({"k8s-app": "kube-dns"}, ns="mine",
                                                   ns_labels={"kubernetes.io/metadata.name": "mine"}), port=53)
    # a cluster whose DNS lives elsewhere says so in the rule
    own = Isolation(namespaces=(NS,), egress="restricted",
                    dns=Proxy((("kubernetes.io/metadata.name", "dns"),), (("app", "unbound"),)))
    pols_own = policies(run(snap([*SOLVER, *VIZ], [job("solver"), job("viz")]), own))
    unbound = ep({"app": "unbound"}, ns="dns", ns_labels={"kubernetes.io/metadata.name": "dns"})
    assert connection_allowed(pols_own, solver, unbound, protocol="UDP", port=53)
    assert not connection_allowed(pols_own, solver, dns, protocol="UDP", port=53)
    assert connection_allowed(pols, solver, viz)
    assert not connection_allowed(pols, solver, ep({"app": "web"}, ns="internet"), port=443)
    open_pols = policies(run(snap([*SOLVER, *VIZ], [job("solver"), job("viz")]), ISOLATED))
    assert connection_allowed(open_pols, solver, ep({"app": "web"}, ns="internet"), port=443)


def test_no_rule_no_network_policy_and_a_lifted_rule_removes_it() -> None:
    first = run(snap(SOLVER, [job("solver")]), ISOLATED)
    assert policies(first)
    assert policies(run(snap(SOLVER, [job("solver")]))) == []
    objs = stored(first)
    lifted = run(snap(SOLVER, [job("solver")], objs))
    assert [(a.kind, a.net.kind, a.net.op) for a in lifted if a.net] == [("delete-network", "NetworkPolicy", "delete")]
    assert lifted[0].net.uid == "uid-solver"


def test_the_planner_runs_it_with_the_bundles_isolation_rules() -> None:
    s = snap(SOLVER, [job("solver")])
    settings = Settings(queues=QueuePolicy(isolation=(ISOLATED,)))
    kinds = sorted(a.net.kind for a in plan(s, 0.0, settings).actions if a.net)
    assert kinds == ["ConfigMap", "NetworkPolicy", "Service"]
    assert SPEC_HASH_ANNOTATION in plan(s, 0.0, settings).actions[0].net.body["metadata"]["annotations"]


@pytest.mark.parametrize("budget", [1, 2])
def test_creates_count_against_the_bookkeeping_budget(budget: int) -> None:
    s = snap(MPI, [job("mpi")])
    p = plan(s, 0.0, Settings(max_bookkeeping_per_pass=budget))
    assert len([a for a in p.actions if a.net]) == budget and p.deferred == 2 - budget


# -- the actuator: create, adopt its own, leave others' alone ------------------------------
def _api_and_actions() -> tuple[Any, list[Action]]:
    from tests.unit.reconciler.fakeapi import FakeApi

    return FakeApi(), run(snap(MPI, [job("mpi")]))


def test_actuator_creates_then_a_crashed_runs_leftover_is_adopted() -> None:
    from webhook.reconciler.actuator import Actuator

    api, actions = _api_and_actions()
    out = Actuator(api, Settings(api_backoff=0)).execute(actions)
    assert [o.result for o in out] == ["done", "done"]
    assert api.objects[("services", NS, "mpi")]["spec"]["clusterIP"] == "None"
    # a run that created the ConfigMap but crashed before its cache saw it: create again -> adopt
    del api.objects[("services", NS, "mpi")]
    api.objects[("configmaps", NS, "mpi-hostfile")]["data"] = {"hosts": "stale"}
    out = Actuator(api, Settings(api_backoff=0)).execute(actions)
    assert [o.result for o in out] == ["done", "done"]
    assert api.objects[("configmaps", NS, "mpi-hostfile")]["data"]["hosts"] == "mpi-bk2.mpi,mpi-f7d.mpi,mpi-zz9.mpi"
    assert ("patch", "configmaps", NS, "mpi-hostfile") in api.calls


def test_actuator_never_takes_over_a_name_someone_else_holds() -> None:
    from webhook.reconciler.actuator import Actuator

    api, actions = _api_and_actions()
    api.put({"kind": "Service", "metadata": {"name": "mpi", "namespace": NS, "labels": {"app": "theirs"}},
             "spec": {"clusterIP": "10.0.0.7"}})
    act = Actuator(api, Settings(api_backoff=0))
    out = act.execute(actions)
    assert out[0].result == "failed" and "not managed by batchgate" in out[0].error
    assert api.objects[("services", NS, "mpi")]["spec"] == {"clusterIP": "10.0.0.7"}
    n = len(api.calls)
    act.execute(actions[:1])
    assert len(api.calls) == n, "remembered: no second try on every pass"
