"""Job networking against a real API server: what the webhook stamps is what gets stored.

Every member of a gang Job (made Indexed by the webhook) is stored with hostname
``<job>-<index>`` (the Job controller's) and the Job's Service as subdomain; a bare
pod's hostname is its name; a pod with only ``generateName`` gets no hostname.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import require_components, wait_for
from harness import (
    GANG,
    Reconciler,
    container,
    create,
    create_and_read,
    job,
    pod,
    start_reconciler,
    stop_reconcilers,
    unique,
)

from tests.netpolicy import Endpoint, connection_allowed
from webhook.jobnet import service_name

NET = "batchgate.io/network"


@pytest.fixture(scope="module")
def ns(module_namespace: str) -> str:
    return module_namespace


def assert_member(p: dict[str, Any], service: str, size: int, hostname: str | None = None) -> None:
    spec, md = p["spec"], p["metadata"]
    assert spec["hostname"] == (hostname or md["name"])
    assert spec["subdomain"] == service and md["labels"][NET] == service
    assert {"name": "batchgate-hostfile", "configMap": {"name": f"{service}-hostfile", "optional": False,
                                                        "defaultMode": 420}} in spec["volumes"]
    for c in spec["containers"]:
        env = {e["name"]: e for e in c["env"]}
        assert env["BATCHGATE_NUM_HOSTS"]["value"] == str(size)
        assert env["BATCHGATE_HOSTS"]["valueFrom"]["configMapKeyRef"]["name"] == f"{service}-hostfile"
        assert {"name": "batchgate-hostfile", "mountPath": "/etc/batchgate", "readOnly": True} in c["volumeMounts"]


def test_gang_job_is_indexed_and_its_pods_are_named_by_index(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    name = unique("mpi")
    created = create(kube, ns, job(name, parallelism=3, completions=3, labels=GANG,
                                   containers=[container(cpu="100m", memory="64Mi")]))
    assert created["spec"]["completionMode"] == "Indexed"
    assert created["spec"]["template"]["spec"]["subdomain"] == name
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={created['metadata']['uid']}", count=3)
    by_index = {int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]): p for p in pods}
    assert sorted(by_index) == [0, 1, 2]
    for i, p in by_index.items():
        assert re.fullmatch(rf"{name}-{i}-[a-z0-9]{{5}}", p["metadata"]["name"])
        assert_member(p, name, 3, hostname=f"{name}-{i}")


def test_generate_name_job_with_a_dotted_name_gets_valid_service_and_hostnames(kube, webhook_server, ns):
    require_components(kube, "kube-controller-manager")
    created = create(kube, ns, job(None, generate_name="sim.v2-", parallelism=2, labels=GANG,
                                   containers=[container(cpu="100m", memory="64Mi")]))
    job_name = created["metadata"]["name"]
    assert "subdomain" not in created["spec"]["template"]["spec"], "named on the pods: the Job had no name yet"
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={created['metadata']['uid']}", count=2)
    service = service_name(job_name)
    assert service != job_name and "." not in service
    for p in pods:
        assert p["metadata"]["name"].startswith(f"{job_name}-")
        assert p["spec"]["subdomain"] == service and p["metadata"]["labels"][NET] == service
        assert "hostname" not in p["spec"], "not Indexed (completions unset): no stable hostname"


def test_bare_pods_of_a_group_keep_their_names_as_hostnames(kube, webhook_server, ns):
    group = unique("ring")
    labels = {"batchgate.io/pod-group": group, "batchgate.io/pod-group-size": "2"}
    stored = [create_and_read(kube, ns, pod(f"{group}-{i}", labels=labels)) for i in range(2)]
    for i, p in enumerate(stored):
        assert p["metadata"]["name"] == f"{group}-{i}"
        assert_member(p, group, 2)


def test_generate_name_pods_get_no_hostname(kube, webhook_server, ns):
    """Two identical generateName pods: the API server names them; the webhook gives them none."""
    group = unique("twin")
    body = pod("x", labels={"batchgate.io/pod-group": group, "batchgate.io/pod-group-size": "2"})
    body["metadata"] = {**body["metadata"], "generateName": f"{group}-"}
    del body["metadata"]["name"]
    a, b = (create(kube, ns, body) for _ in range(2))
    assert a["metadata"]["name"] != b["metadata"]["name"]
    for p in (a, b):
        assert "hostname" not in p["spec"] and p["spec"]["subdomain"] == group


# -- the reconciler: Service, hostfile, NetworkPolicy from the stamps ------------------
REPO = Path(__file__).resolve().parents[2]
MANAGED = "app.kubernetes.io/managed-by=batchgate"
PROXY_NS_LABELS = {"batchgate.io/role": "platform"}
PROXY_POD_LABELS = {"app": "app-kubernetes"}


@pytest.fixture
def reconcile(kube, ns, tmp_path) -> Iterator[Callable[[], Reconciler]]:
    """``batchgate reconcile`` on this namespace, with a bundle whose job-network policy isolates it
    and names a proxy; every process started is killed by pid after the test."""
    policies = tmp_path / "policies"
    shutil.copytree(REPO / "policies", policies)
    path = policies / "job-network" / "policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["settings"]["isolation"] = [{
        "namespaces": [ns], "egress": "restricted",
        "proxy": {"namespaceSelector": PROXY_NS_LABELS, "podSelector": PROXY_POD_LABELS},
    }]
    path.write_text(yaml.safe_dump(doc))
    started: list[Reconciler] = []

    def start() -> Reconciler:
        log = tmp_path / f"reconciler-{len(started)}.log"
        started.append(start_reconciler(kube, ns, log, "--policies", str(policies), "--resync", "30s",
                                        identity=f"r{len(started)}"))
        return started[-1]

    yield start
    stop_reconcilers(started)


def managed(kube, ns: str, plural: str, group: str = "api/v1") -> dict[str, dict[str, Any]]:
    items = kube.get(f"/{group}/namespaces/{ns}/{plural}", labelSelector=MANAGED)["items"]
    return {o["metadata"]["name"]: o for o in items}


def net_objects(kube, ns: str) -> dict[str, dict[str, dict[str, Any]]]:
    return {"Service": managed(kube, ns, "services"), "ConfigMap": managed(kube, ns, "configmaps"),
            "NetworkPolicy": managed(kube, ns, "networkpolicies", "apis/networking.k8s.io/v1")}


def start_job(kube, ns: str, name: str, *, size: int, connect: str | None = None) -> tuple[dict[str, Any], list]:
    annotations = {"batchgate.io/connect-to": connect} if connect else None
    created = create(kube, ns, job(name, parallelism=size, completions=size, annotations=annotations, labels=GANG,
                                   containers=[container(cpu="100m", memory="64Mi")]))
    pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={created['metadata']['uid']}", count=size)
    return created, pods


def reconciler_may(kube, verb: str, resource: str, ns: str, group: str = "") -> bool:
    """A SubjectAccessReview for the reconciler's ServiceAccount (the manifests' RBAC is applied)."""
    review = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:serviceaccount:batchgate-system:batchgate-reconciler",
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:batchgate-system",
                            "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "namespace": ns}}})
    return bool(review["status"].get("allowed"))


def endpoint(p: dict[str, Any], ns: str) -> Endpoint:
    return Endpoint(ns, p["metadata"]["labels"])


def test_reconciler_builds_each_jobs_network_and_isolation_holds(kube, webhook_server, ns, reconcile, request):
    require_components(kube, "kube-controller-manager", "kube-scheduler")
    node = unique("net-node")
    kube.create_node(node, cpu="16", memory="32Gi")
    request.addfinalizer(lambda: kube.delete_node(node))
    solver_job, solver = start_job(kube, ns, "solver", size=2, connect="viz")
    _, viz = start_job(kube, ns, "viz", size=2, connect="solver")
    _, snoop = start_job(kube, ns, "snoop", size=2, connect="solver")  # solver does not name snoop back
    # least privilege (manifests/base/rbac-reconciler.yaml): what the reconciler's account may do here
    for verb in ("create", "patch", "watch"):
        assert reconciler_may(kube, verb, "services", ns)
        assert reconciler_may(kube, verb, "networkpolicies", ns, group="networking.k8s.io")
    assert reconciler_may(kube, "delete", "networkpolicies", ns, group="networking.k8s.io")
    assert not reconciler_may(kube, "delete", "services", ns), "the garbage collector deletes them"
    assert not reconciler_may(kube, "delete", "configmaps", ns)
    first = reconcile()

    def complete():
        objs = net_objects(kube, ns)
        want = {"solver", "viz", "snoop"}
        ok = (set(objs["Service"]) >= want and set(objs["NetworkPolicy"]) >= want
              and {f"{w}-hostfile" for w in want} <= set(objs["ConfigMap"]))
        return objs if ok else None

    objs = wait_for(complete, 60, message="Services, hostfiles and NetworkPolicies of three Jobs")

    # the headless Service, owned by its Job
    svc = objs["Service"]["solver"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {NET: "solver"}
    assert [(o["kind"], o["name"], o["uid"]) for o in svc["metadata"]["ownerReferences"]] == [
        ("Job", "solver", solver_job["metadata"]["uid"])]

    # the hostfile lists every member once by <hostname>.<service>, and the agreed peer
    cm = objs["ConfigMap"]["solver-hostfile"]["data"]
    hosts = sorted(f"{p['spec']['hostname']}.solver" for p in solver)
    assert cm["hosts"] == ",".join(hosts)
    assert cm["hostfile"] == "".join(f"{h} slots=1\n" for h in hosts)
    assert cm["peers"] == "".join(f"{p['spec']['hostname']}.viz\n" for p in sorted(viz, key=lambda p: p["metadata"]["name"]))
    assert objs["ConfigMap"]["snoop-hostfile"]["data"]["peers"] == "", "a one-sided connection is none"

    # DNS: the endpoints controller publishes every member by hostname, ready or not
    for i, p in enumerate(solver):
        name = p["metadata"]["name"]
        wait_for(lambda name=name: kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")["spec"].get("nodeName"), 30,
                 message=f"{name} to be scheduled")
        kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status",
                   {"status": {"podIP": f"10.9.0.{i + 1}", "podIPs": [{"ip": f"10.9.0.{i + 1}"}]}})

    def published():
        ep = kube.get(f"/api/v1/namespaces/{ns}/endpoints/solver")
        addrs = [a for s in ep.get("subsets") or [] for a in s.get("addresses") or []]
        return addrs if len(addrs) == 2 else None

    addrs = wait_for(published, 30, message="the endpoints of the headless Service")
    assert sorted(a["hostname"] for a in addrs) == sorted(p["spec"]["hostname"] for p in solver)

    # isolation, evaluated on the stored NetworkPolicies
    pols = list(objs["NetworkPolicy"].values())
    s, v, x = endpoint(solver[0], ns), endpoint(viz[0], ns), endpoint(snoop[0], ns)
    proxy = Endpoint("platform", PROXY_POD_LABELS, PROXY_NS_LABELS)
    assert connection_allowed(pols, endpoint(solver[1], ns), s), "inside the job"
    assert connection_allowed(pols, v, s) and connection_allowed(pols, s, v), "connected both ways"
    assert connection_allowed(pols, proxy, s) and connection_allowed(pols, proxy, x), "the proxy"
    # DNS: the cluster's DNS pods, found by the namespace name label the API server itself sets
    system = kube.get("/api/v1/namespaces/kube-system")["metadata"]["labels"]
    assert connection_allowed(pols, s, Endpoint("kube-system", {"k8s-app": "kube-dns"}, system), protocol="UDP", port=53)
    assert not connection_allowed(pols, s, Endpoint("elsewhere", {"app": "resolver"}), protocol="UDP", port=53)
    assert not connection_allowed(pols, x, s), "snoop named solver, solver did not agree"
    assert not connection_allowed(pols, s, x)
    assert not connection_allowed(pols, Endpoint(ns, {"app": "other"}), s), "another app in the namespace"
    assert not connection_allowed(pols, Endpoint("elsewhere", PROXY_POD_LABELS), s), "a proxy look-alike"
    assert not connection_allowed(pols, s, Endpoint("elsewhere", {"app": "web"}), port=443), "restricted egress"

    # restart: nothing duplicated, nothing rewritten
    before = {(k, n): o["metadata"]["resourceVersion"] for k, d in objs.items() for n, o in d.items()}
    first.kill()
    reconcile()
    # Once the barrier Job's three objects exist, the new run has planned on everything made before.
    # All three: they are written one after another (Service, hostfile, NetworkPolicy), and the
    # hostfile only once the cache has seen both members, maybe a pass later than the Service.
    start_job(kube, ns, "barrier", size=2)

    def barrier_built():
        o = net_objects(kube, ns)
        ok = "barrier" in o["Service"] and "barrier-hostfile" in o["ConfigMap"] and "barrier" in o["NetworkPolicy"]
        return o if ok else None

    after = wait_for(barrier_built, 60, message="the new run's Service, hostfile and NetworkPolicy of the barrier Job")
    for (kind, name), rv in before.items():
        assert after[kind][name]["metadata"]["resourceVersion"] == rv, f"{kind} {name} rewritten after restart"
    # Nothing made twice: besides the barrier's three, an object is new only where its owner had none of its
    # kind before the restart (the first run may not have finished another group's network: the other
    # tests' pod groups share this namespace, and a write after a conflict waits a pass).
    def owner(o: dict[str, Any]) -> str:
        return ",".join(sorted(r["uid"] for r in o["metadata"].get("ownerReferences") or ()))
    had = {(kind, owner(after[kind][name])) for kind, name in before}
    new = [(k, n) for k, d in after.items() for n in d if (k, n) not in before]
    assert sorted(n for _, n in new if n.startswith("barrier")) == ["barrier", "barrier", "barrier-hostfile"], new
    twice = [(k, n) for k, n in new if (k, owner(after[k][n])) in had]
    assert not twice, f"made again after restart: {twice}"

    # the garbage collector removes a Job's network with the Job
    kube.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/viz", body={"propagationPolicy": "Background"})

    def viz_gone():
        o = net_objects(kube, ns)
        return "viz" not in o["Service"] and "viz-hostfile" not in o["ConfigMap"] and "viz" not in o["NetworkPolicy"]

    wait_for(viz_gone, 60, message="viz's Service, hostfile and NetworkPolicy to go with the Job")
    wait_for(lambda: net_objects(kube, ns)["ConfigMap"]["solver-hostfile"]["data"]["peers"] == "", 60,
             message="solver's hostfile to drop the peer that is gone")
