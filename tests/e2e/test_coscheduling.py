"""The pod-group labels batchgate writes, proven with the real coscheduling plugin (issue 22,
item 4): a gang's pods start all together or not at all.

The scheduler is the one of ``sigs.k8s.io/scheduler-plugins`` (built by
hack/scheduler-plugins-build.sh, with its PodGroup CRD), started here as a second scheduler
(``schedulerName: batchgate-coscheduling``, the Coscheduling plugin on every extension point it
has) beside the harness's default one. The rest is batchgate as deployed: alice creates a Job
that asks to be a gang and names that scheduler; the webhook writes the group labels into its
template (``scheduling.x-k8s.io/pod-group`` among them); the reconciler creates the PodGroup with
``minMember`` = the gang's size; the Job controller makes the pods. The nodes are fake (no
kubelet): a pod counts as started when it is bound (``spec.nodeName``).

scheduler-plugins v0.33.5 is kube-scheduler v1.33.5 with the plugins compiled in: four minors
behind the 1.37 API server, more than Kubernetes' skew policy allows a scheduler (one). It works
for what this test needs (pods, nodes, bindings, events.k8s.io/v1, the PodGroup CRD). The module
proxy lists no versions of scheduler-plugins; v0.35.0 is refused there, other tags were not tried.

Without the scheduler-plugins build the test is skipped (failed with ``CI=true``). The build
(cold: 6.5 CPU-minutes, 17 minutes on a busy 2-core machine; then cached, 0.1 s) runs from the
test only with ``CI=true`` or ``BATCHGATE_E2E_BUILD=1``; otherwise run
``hack/scheduler-plugins-build.sh`` once. The PodGroup CRD stays installed for the session, as
tests/e2e/test_reconciler.py leaves its own.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import (
    REPO_ROOT,
    KubeApiError,
    _set_pdeathsig,
    free_port,
    in_ci,
    require_components,
    tail,
    terminate_group,
    unavailable,
    wait_for,
)
from harness import GANG, container, create_and_read, job, own_taint, own_tolerations, unique

BUILD_SH = REPO_ROOT / "hack" / "scheduler-plugins-build.sh"
SCHEDULER = "batchgate-coscheduling"
# How long the plugin lets the first members of a gang wait at Permit for the rest (its
# default is 60 s); the PodGroups batchgate creates set no scheduleTimeoutSeconds of their own.
PERMIT_WAIT = 3
CRD_NAME = "podgroups.scheduling.x-k8s.io"
CRD_FILE = "scheduling.x-k8s.io_podgroups.yaml"
PG_API = "/apis/scheduling.x-k8s.io/v1alpha1"
GROUP, SIZE, COSCHED = "batchgate.io/pod-group", "batchgate.io/pod-group-size", "scheduling.x-k8s.io/pod-group"
POOL = "batchgate.io/e2e-pool"  # node label: the test's nodes, and only they, have its value (and its taint)
CPU_EACH, MEMBERS = "1", 3
# The gang's binds come in one burst once its last member passes Permit.
BIND_SPREAD = 2.0
# scheduler-plugins v0.33.5's Coscheduling wakes the pods it rejected only on a Pod add or a
# PodGroup add/update (its EventsToRegister), not on a Node add: a gang it turned away stays
# in kube-scheduler's unschedulable pods when a node with room joins, until some pod is created
# in the cluster or the periodic flush (every 30 s) finds it there longer than this (default
# 5 min). The test's cluster creates no other pods, so the flush is what retries the gang.
UNSCHEDULABLE_MAX = "5s"


# -- the scheduler-plugins kube-scheduler ---------------------------------------------------
@pytest.fixture(scope="module")
def plugins_dir() -> Path:
    """The directory with scheduler-plugins' kube-scheduler and PodGroup CRD (the build
    script's last stdout line). It builds only in CI or with BATCHGATE_E2E_BUILD=1."""
    env = dict(os.environ)
    if not (in_ci() or env.get("BATCHGATE_E2E_BUILD") == "1"):
        env["BATCHGATE_NO_BUILD"] = "1"
    try:
        proc = subprocess.run(["bash", str(BUILD_SH)], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"{BUILD_SH}: {exc}")
    lines = proc.stdout.split()
    if proc.returncode != 0 or not lines:
        err = "\n".join(proc.stderr.strip().splitlines()[-15:])
        unavailable(f"no scheduler-plugins kube-scheduler ({BUILD_SH.name} exited {proc.returncode}):\n{err}")
    d = Path(lines[-1])
    if not (os.access(d / "kube-scheduler", os.X_OK) and (d / CRD_FILE).is_file()):
        unavailable(f"{d} lacks kube-scheduler or {CRD_FILE}")
    return d


@pytest.fixture(scope="module")
def podgroup_crd(kube: Any, plugins_dir: Path) -> str:
    """scheduler-plugins' own PodGroup CRD, installed (replacing a hand-written one that an
    earlier test may have left under the same name) and served."""
    crd = yaml.safe_load((plugins_dir / CRD_FILE).read_text())
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        kube.create(base, crd)
    except KubeApiError as exc:
        if exc.status != 409:
            raise
        crd["metadata"]["resourceVersion"] = kube.get(f"{base}/{CRD_NAME}")["metadata"]["resourceVersion"]
        kube.request("PUT", f"{base}/{CRD_NAME}", crd)

    def established() -> bool:
        conds = kube.get(f"{base}/{CRD_NAME}").get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    wait_for(established, 30, message="the PodGroup CRD to be established")
    wait_for(lambda: kube.exists(f"{PG_API}/podgroups"), 30, message="the PodGroup API to be served")
    return PG_API


class Coscheduler:
    """scheduler-plugins' kube-scheduler with one profile, ``batchgate-coscheduling``."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log = proc, log

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the coscheduling kube-scheduler exited ({self.proc.returncode}):\n{self.logs()}")

    def logs(self, lines: int = 40) -> str:
        return tail(self.log, lines)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def scheduler_config(kubeconfig: str) -> dict[str, Any]:
    """The KubeSchedulerConfiguration of scheduler-plugins' manifests/coscheduling, as a second
    scheduler: Coscheduling on all its extension points (multiPoint: queueSort, preFilter,
    postFilter, permit, reserve/unreserve) and as the only queue sort, which the framework
    requires to be one plugin."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": kubeconfig},
        "profiles": [{
            "schedulerName": SCHEDULER,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
            },
            "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": PERMIT_WAIT}}],
        }],
    }


@pytest.fixture
def coscheduler(kube: Any, plugins_dir: Path, podgroup_crd: str, tmp_path: Path) -> Iterator[Coscheduler]:
    """The second scheduler, running until the test ends (killed by its process group)."""
    kubeconfig = kube.kubeconfig("admin")
    config = tmp_path / "coscheduling-config.yaml"
    config.write_text(json.dumps(scheduler_config(kubeconfig), indent=2))  # JSON is YAML
    certs = tmp_path / "coscheduler-certs"
    certs.mkdir()
    port = free_port()
    log = tmp_path / "coscheduler.log"
    args = [str(plugins_dir / "kube-scheduler"), f"--config={config}", "--leader-elect=false",
            f"--secure-port={port}", "--bind-address=127.0.0.1", f"--cert-dir={certs}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--authentication-skip-lookup=true", f"--pod-max-in-unschedulable-pods-duration={UNSCHEDULABLE_MAX}",
            "--v=2"]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with open(log, "wb") as out:
        out.write(f"# {' '.join(args)}\n".encode())
        out.flush()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=tmp_path, env=env, start_new_session=True, preexec_fn=_set_pdeathsig)
    s = Coscheduler(proc, log)
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # its self-signed serving cert

    def healthy() -> bool:
        s.check_alive()
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=ctx) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_for(healthy, 60, message=lambda: f"the coscheduling kube-scheduler to be healthy; log:\n{s.logs()}")
        yield s
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            terminate_group(proc, grace=5)
        print(f"--- {log.name} (exit {proc.returncode}) ---\n{s.logs(60)}")


# -- helpers -----------------------------------------------------------------------------
def job_pods(kube: Any, ns: str, uid: str) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"controller-uid={uid}")["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def bound(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def scheduled_events(kube: Any, ns: str, names: set[str]) -> list[dict[str, Any]]:
    items = kube.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e.get("reason") == "Scheduled" and (e.get("regarding") or {}).get("name") in names]


def exactly(n: int, items: Any) -> Any:
    """``items`` when there are ``n`` of them (for wait_for), else None."""
    return items if len(items) == n else None


def micro_time(ts: str) -> float:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


# -- the test ----------------------------------------------------------------------------
def test_a_gang_starts_all_together_or_not_at_all(kube, webhook_server, namespace, reconciler, coscheduler):
    require_components(kube, "kube-controller-manager")
    ns = namespace
    reconciler().wait_ready()
    pool = unique("cosched")
    full, spare = f"{pool}-a", f"{pool}-b"
    nodes: list[str] = []
    try:
        # Room for 2 of the 3 members: kube-scheduler alone would start two and leave one pending.
        kube.create_node(full, cpu="2", memory="8Gi", labels={POOL: pool}, taints=own_taint(pool))
        nodes.append(full)

        name = unique("ranks")
        body = job(name, parallelism=MEMBERS, completions=MEMBERS, labels=GANG,
                   containers=[container(cpu=CPU_EACH, memory="64Mi")],
                   nodeSelector={POOL: pool}, tolerations=own_tolerations(pool), schedulerName=SCHEDULER)
        stored = create_and_read(kube, ns, body)
        # the webhook named the group for the coscheduling plugin and left the scheduler as asked
        tmpl = stored["spec"]["template"]
        labels = tmpl["metadata"]["labels"]
        assert (labels[GROUP], labels[SIZE], labels[COSCHED]) == (name, str(MEMBERS), name), labels
        assert tmpl["spec"]["schedulerName"] == SCHEDULER
        uid = stored["metadata"]["uid"]

        # the reconciler made the PodGroup the plugin looks for: minMember = the gang's size
        pg = wait_for(lambda: kube.get(f"{PG_API}/namespaces/{ns}/podgroups/{name}"), 30,
                      message="the reconciler's PodGroup")
        assert pg["spec"]["minMember"] == MEMBERS
        assert [(o["kind"], o["uid"]) for o in pg["metadata"]["ownerReferences"]] == [("Job", uid)]

        pods = wait_for(lambda: exactly(MEMBERS, job_pods(kube, ns, uid)), 60, message="the Job's 3 pods")
        names = {p["metadata"]["name"] for p in pods}
        for p in pods:
            assert p["metadata"]["labels"][COSCHED] == name and p["spec"]["schedulerName"] == SCHEDULER

        # Two members fit on the full node: the plugin holds them at Permit, waiting for the third,
        # which fits nowhere; then lets them go (PostFilter of the third, or PERMIT_WAIT). Nothing
        # is bound meanwhile, nor after the plugin's wait has passed.
        waiting = re.compile(r'"Pod is waiting to be scheduled to node".*pod="' + re.escape(ns) + r'/([^"]+)"')

        def held() -> set[str]:
            coscheduler.check_alive()
            assert bound(job_pods(kube, ns, uid)) == {}, "a member was bound while the gang could not start"
            return {m.group(1) for m in waiting.finditer(coscheduler.text())} & names

        first_held = wait_for(held, 60, interval=0.1,
                              message=lambda: f"the plugin to hold members at Permit; log:\n{coscheduler.logs()}")
        t_held = time.monotonic()
        while time.monotonic() < t_held + 2 * PERMIT_WAIT + 2:
            held()
            time.sleep(0.1)
        print(f"held at Permit: {sorted(first_held)}; none bound in the {2 * PERMIT_WAIT + 2} s after")
        assert all(p["spec"].get("nodeName") is None for p in job_pods(kube, ns, uid))

        # A node with room for the rest: the whole gang starts, at once (once kube-scheduler retries
        # it: see UNSCHEDULABLE_MAX).
        kube.create_node(spare, cpu="2", memory="8Gi", labels={POOL: pool}, taints=own_taint(pool))
        nodes.append(spare)
        t_room = time.monotonic()
        placed = wait_for(lambda: exactly(MEMBERS, bound(job_pods(kube, ns, uid))), 90, interval=0.1,
                          message=lambda: (f"all 3 members to be bound; bound now {bound(job_pods(kube, ns, uid))}; "
                                           f"log:\n{coscheduler.logs()}"))
        took = time.monotonic() - t_room
        # 1 cpu each on two 2-cpu nodes: the gang spans both
        assert set(placed.values()) == {full, spare}, placed
        events = wait_for(lambda: exactly(MEMBERS, scheduled_events(kube, ns, names)), 30,
                          message="a Scheduled event per member")
        assert {e["reportingController"] for e in events} == {SCHEDULER}, events  # not the default scheduler
        times = [micro_time(e["eventTime"]) for e in events]
        spread = max(times) - min(times)
        print(f"bound {placed} {took:.1f} s after the spare node; Scheduled events within {spread * 1000:.1f} ms")
        assert spread <= BIND_SPREAD, f"the members were bound {spread:.2f} s apart: {events}"
    finally:
        for n in nodes:
            with contextlib.suppress(Exception):
                kube.delete_node(n)
