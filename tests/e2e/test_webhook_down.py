"""What an outage of the webhook does: exactly docs/admin/webhook-down.md.

The session's webhook server is stopped (its port then refuses connections)
while the generated webhook configurations stay registered, every row of the
document's table is tried, and the server is started again; the fixture
restarts it even when the test fails, and waits until the API server calls it
again, so later tests see the normal configuration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cluster import KubeApiError, require_components, wait_for
from harness import (
    QUEUE_LABEL,
    TIME_LIMIT,
    create,
    job,
    jobs_path,
    pod,
    pods_path,
    unique,
)

REPO = Path(__file__).resolve().parents[2]
MUTATE = "mutate.batchgate.io"
CREATE_VALIDATE = "create.validate.batchgate.io"
TIMEOUT_SECONDS = 5  # timeoutSeconds of both CREATE webhooks


def attempt(fn: Callable[[], Any]) -> tuple[int, str, float, Any]:
    """(HTTP status, message, seconds, result) of one API call."""
    t0 = time.monotonic()
    try:
        result = fn()
    except KubeApiError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return exc.status, str(body.get("message", exc)), time.monotonic() - t0, body
    return 200, "", time.monotonic() - t0, result


def scavengerjob(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(
        (REPO / "policies/scavengerjob/samples/scavengerjob-gromacs.yaml").read_text())
    obj["metadata"] = {"name": name}
    return obj


def test_webhook_down_behaves_as_documented(kube, webhook_server, namespace, outage):
    require_components(kube, "kube-controller-manager")
    ns = namespace
    hook = webhook_server
    port = hook.server.port

    # --- while the webhook is up ------------------------------------------------
    p0 = unique("p0")
    create(kube, ns, pod(p0))
    stored = kube.get(pods_path(ns, p0))
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "batch"
    assert (stored["spec"]["priorityClassName"], stored["spec"]["priority"]) == ("batchgate-batch", 1000)
    status, msg, _, _ = attempt(lambda: kube.patch(
        pods_path(ns, p0), {"metadata": {"annotations": {TIME_LIMIT: "8d"}}}, as_user="alice"))
    assert status == 403 and "time-limit-extension" in msg, (status, msg)

    # --- down ----------------------------------------------------------------------
    hook.server.stop()
    assert hook.server.refuses_connections()

    def refused(webhook: str, path: str) -> Callable[[int, str, float], list[str]]:
        def check(status: int, msg: str, seconds: float) -> list[str]:
            out = []
            if status != 500:
                out.append(f"HTTP {status}, expected 500")
            for part in (f'failed calling webhook "{webhook}"',
                         f'Post "https://127.0.0.1:{port}{path}?timeout={TIMEOUT_SECONDS}s"',
                         "connect: connection refused"):
                if part not in msg:
                    out.append(f"message lacks {part!r}")
            if seconds >= TIMEOUT_SECONDS:
                out.append(f"took {seconds:.1f}s, not well under timeoutSeconds")
            return out
        return check

    def admitted(status: int, msg: str, seconds: float) -> list[str]:
        return [] if status == 200 else [f"HTTP {status}: {msg}"]

    names = {k: unique(k) for k in ("p1", "j2", "d3", "s4", "p8", "cm9")}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": names["d3"]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": names["d3"]}},
                 "template": {"metadata": {"labels": {"app": names["d3"]}},
                              "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.2"}]}}},
    }
    rows: list[tuple[str, Callable[[], Any], Callable[[int, str, float], list[str]]]] = [
        ("1 CREATE Pod (alice)", lambda: create(kube, ns, pod(names["p1"])),
         refused(MUTATE, "/mutate")),
        ("2 CREATE batch/v1 Job", lambda: create(kube, ns, job(names["j2"])),
         refused(MUTATE, "/mutate")),
        ("3 CREATE apps/v1 Deployment", lambda: kube.request(
            "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment, as_user="alice"),
         refused(MUTATE, "/mutate")),
        ("4 CREATE ScavengerJob", lambda: create(kube, ns, scavengerjob(names["s4"])),
         refused(CREATE_VALIDATE, "/validate")),
        ("5 PATCH a label onto P0", lambda: kube.patch(
            pods_path(ns, p0), {"metadata": {"labels": {"during": "outage"}}}, as_user="alice"),
         admitted),
        ("6 PATCH P0's time limit past the maximum", lambda: kube.patch(
            pods_path(ns, p0), {"metadata": {"annotations": {TIME_LIMIT: "8d"}}}, as_user="alice"),
         admitted),
    ]
    problems: list[str] = []
    results: dict[str, tuple[int, str, float, Any]] = {}
    for label, call, check in rows:
        results[label] = r = attempt(call)
        problems += [f"row {label}: {p}" for p in check(*r[:3])]

    # nothing was stored for the rejected creates
    for path in (pods_path(ns, names["p1"]), jobs_path(ns, names["j2"]),
                 f"/apis/apps/v1/namespaces/{ns}/deployments/{names['d3']}",
                 f"/apis/batchgate.io/v1alpha1/namespaces/{ns}/scavengerjobs/{names['s4']}"):
        if kube.exists(path):
            problems.append(f"{path} was stored although its CREATE was rejected")
    # rows 5 and 6 are stored (unvalidated), and well before the update webhook's 3s matter
    p0_now = kube.get(pods_path(ns, p0))
    if p0_now["metadata"]["labels"].get("during") != "outage":
        problems.append("row 5: label not stored")
    if p0_now["metadata"]["annotations"].get(TIME_LIMIT) != "8d":
        problems.append("row 6: annotation not stored")

    # 7 DELETE P0
    status, msg, _, _ = attempt(lambda: kube.request("DELETE", pods_path(ns, p0), as_user="alice"))
    if status != 200:
        problems.append(f"row 7 DELETE: HTTP {status}: {msg}")

    # 8 CREATE Pod (no priorityClassName) in kube-system: unmutated, globalDefault class
    status, msg, _, _ = attempt(lambda: create(kube, "kube-system", pod(names["p8"]), as_user="admin"))
    if status != 200:
        problems.append(f"row 8 kube-system CREATE: HTTP {status}: {msg}")
    else:
        try:
            p8 = kube.get(pods_path("kube-system", names["p8"]))
            if QUEUE_LABEL in (p8["metadata"].get("labels") or {}):
                problems.append("row 8: kube-system pod got a queue label")
            if "batchgate-shm" in {v["name"] for v in p8["spec"].get("volumes") or []}:
                problems.append("row 8: kube-system pod got batchgate-shm")
            if (p8["spec"].get("priorityClassName"), p8["spec"].get("priority")) != ("batchgate-default", 0):
                problems.append(f"row 8: priorityClassName/priority "
                                f"{p8['spec'].get('priorityClassName')}/{p8['spec'].get('priority')}, "
                                "expected batchgate-default/0 (globalDefault)")
        finally:
            kube.delete(pods_path("kube-system", names["p8"]))

    # 9 CREATE ConfigMap in N
    status, msg, _, _ = attempt(lambda: kube.create(
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": names["cm9"]}}, as_user="alice"))
    if status != 200:
        problems.append(f"row 9 ConfigMap: HTTP {status}: {msg}")

    # --- up again ------------------------------------------------------------------
    outage.end()
    status, msg, _, _ = attempt(lambda: create(kube, ns, pod(names["p1"])))
    if status != 200:
        problems.append(f"after restart, row 1's CREATE: HTTP {status}: {msg}")
    else:
        p1 = kube.get(pods_path(ns, names["p1"]))
        if (p1["metadata"]["labels"].get(QUEUE_LABEL), p1["spec"].get("priority")) != ("batch", 1000):
            problems.append(f"after restart, row 1's Pod is not mutated: {p1['metadata'].get('labels')}")
    # the Job of row 2, retried as a controller would, now gets its pods
    status, msg, _, _ = attempt(lambda: create(kube, ns, job(names["j2"])))
    if status != 200:
        problems.append(f"after restart, row 2's Job: HTTP {status}: {msg}")
    else:
        uid = kube.get(jobs_path(ns, names["j2"]))["metadata"]["uid"]
        pods = kube.wait_for_pods(ns, label_selector=f"controller-uid={uid}", count=1, timeout=60)
        if pods[0]["spec"].get("priorityClassName") != "batchgate-batch":
            problems.append("after restart, the Job's pod is not mutated")

    timings = {label: f"{r[0]} in {r[2]:.2f}s" for label, r in results.items()}
    assert not problems, "webhook-down behaviour differs from docs/admin/webhook-down.md:\n  " + \
        "\n  ".join(problems) + f"\nresults: {timings}"


def test_webhook_back_after_outage(kube, webhook_server):
    """The configuration the rest of the session relies on is in force again."""
    got = webhook_server.wait_effective(timeout=10)
    assert got["spec"]["priorityClassName"] == "batchgate-batch"
    assert wait_for(lambda: not webhook_server.server.refuses_connections(), 5, message="server up")
