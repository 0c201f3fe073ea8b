"""batchgate queue / maintenance: the rows and how they print (pure; the CLI only lists the cluster)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.unit.conftest import shipped_bundle
from tests.unit.reconciler.fakeapi import FakeApi
from tests.unit.reconciler.reconbuild import HOUR, T0, ts
from tests.unit.reconciler.test_shadow import node, running, waiting
from webhook.bundle import Account
from webhook.cli import build_parser, main
from webhook.reconciler.kube import KubeApi
from webhook.reconciler.model import Snapshot, job_view, pod_view, window_view
from webhook.reconciler.report import (
    MAINTENANCE_COLUMNS,
    QUEUE_COLUMNS,
    QUEUE_WIDE,
    SHARE_COLUMNS,
    SHARE_WIDE,
    maintenance_rows,
    queue_rows,
    render,
    share_rows,
    summarize,
    usage_rows,
    with_total,
)
from webhook.reconciler.settings import QueuePolicy
from webhook.reconciler.usage import Usage, factors
from webhook.reconciler.usage import render as render_usage
from webhook.units import format_time


def cluster(*windows: dict) -> Snapshot:  # type: ignore[type-arg]
    r = running("r1", "n1", limit="2h", cpu="4")
    r["metadata"]["annotations"]["batchgate.io/deadline"] = ts(HOUR)
    objs = [r, waiting("w1", cpu="4"), waiting("w2", cpu="4", priority=10, created=-60), waiting("huge", cpu="64")]
    return Snapshot.of(pods=[pod_view(o) for o in objs], jobs=[job_view(o) for o in objs if o["kind"] == "Job"],
                       nodes=[node("n1")], windows=[window_view(w) for w in windows])


def mw(start: float, end: float) -> dict:  # type: ignore[type-arg]
    return {"apiVersion": "batchgate.io/v1alpha1", "kind": "MaintenanceWindow",
            "metadata": {"name": "fw", "uid": "uid-fw"},
            "spec": {"start": ts(start), "end": ts(end), "nodes": ["n1"], "reason": "firmware"}}


def test_queue_lists_pending_work_in_order_then_running_work() -> None:
    rows = queue_rows(cluster(), T0)
    assert [(r["name"], r["state"], r["position"], r["start"]) for r in rows] == [
        ("w2", "Pending", 1, ts(HOUR)), ("huge", "Pending", 2, "unknown"), ("w1", "Pending", 3, ts(2.4 * HOUR)),
        ("r1", "Running", None, ts(-HOUR))]
    # w1 would start at +2h; w2, of a higher priority, arrived a minute ago: 4 cores x 1 h of the node's
    # 4 cores x 6 h ranked ahead, and w1's wait is stretched by 1 / (1 - 1/6) (forecast.py)
    assert "later by x1.20" in rows[2]["reason"]
    assert rows[1]["reason"].startswith("never fits: each pod asks for cpu 64")
    assert rows[3]["deadline"] == ts(HOUR) and rows[3]["reason"] == "on n1"
    text = render(rows, "table", QUEUE_COLUMNS, QUEUE_WIDE)
    assert text.splitlines()[0].split() == ["NAMESPACE", "NAME", "QUEUE", "PRIORITY", "POS", "STATE", "QSTATE",
                                            "START", "START-BY", "DEADLINE", "REASON"]
    assert "KIND" in render(rows, "wide", QUEUE_COLUMNS, QUEUE_WIDE).splitlines()[0]
    assert json.loads(render(rows, "json", QUEUE_COLUMNS))[0]["name"] == "w2"
    assert queue_rows(cluster(), T0, namespace="elsewhere") == []


def test_maintenance_names_what_a_window_stops_and_holds_back() -> None:
    (row,) = maintenance_rows(cluster(mw(30 * 60, HOUR + 30 * 60)), T0)
    assert (row["name"], row["state"], row["nodes"], row["reason"]) == ("fw", "Scheduled", ["n1"], "firmware")
    assert row["stops"] == ["Pod demo/r1"]  # its deadline is after the window's start
    assert row["holds"] == ["Pod demo/w1", "Pod demo/w2"]  # they start later because of it
    (s,) = summarize([row])
    assert (s["nodes"], s["stops"], s["holds"]) == (1, 1, 2)
    assert "HOLDS BACK" in render([s], "table", MAINTENANCE_COLUMNS)


def test_the_cli_takes_the_contracts_flags() -> None:
    args = build_parser().parse_args(["queue", "--namespace", "demo", "-o", "wide"])
    assert (args.command, args.namespace, args.output) == ("queue", "demo", "wide")
    args = build_parser().parse_args(["maintenance", "-o", "json", "--kubeconfig", "k"])
    assert (args.command, args.output, args.kubeconfig) == ("maintenance", "json", "k")


# -- the batch queue: gated work, share, usage --------------------------------------------
POLICY = QueuePolicy.from_bundle(shipped_bundle())


def gated_pod(name: str, *, ns: str = "demo", cpu: str = "4", created: float = -HOUR) -> dict[str, Any]:
    p = waiting(name, cpu=cpu, created=created, priority=POLICY.class_values["batchgate-batch"])
    p["metadata"]["namespace"], p["metadata"]["uid"] = ns, f"uid-{ns}-{name}"
    p["metadata"]["labels"] = {"batchgate.io/queue": "batch"}
    p["spec"]["schedulingGates"] = [{"name": "batchgate.io/queue"}]
    return p


def queue_snapshot(*objs: dict[str, Any]) -> Snapshot:
    return Snapshot.of(pods=[pod_view(o) for o in objs], nodes=[node("n1")])


def test_queue_shows_gated_work_in_the_queues_order_with_the_queues_state() -> None:
    s = queue_snapshot(gated_pod("heavy-1", ns="heavy", created=-2 * HOUR), gated_pod("light-1", ns="light", created=-60))
    rows = queue_rows(s, T0, queues=POLICY, usage={"heavy": 1000.0})
    assert [(r["name"], r["state"], r["queueState"], r["gated"], r["position"]) for r in rows] == [
        ("light-1", "Gated", "open", True, 1), ("heavy-1", "Gated", "open", True, 2)]
    held = dataclasses.replace(POLICY, states={**POLICY.states, "batch": "hold"})
    rows = queue_rows(s, T0, queues=held)
    assert {r["queueState"] for r in rows} == {"hold"}
    assert all("queue 'batch' is on hold" in r["reason"] for r in rows)
    assert "hold" in render(rows, "table", QUEUE_COLUMNS, QUEUE_WIDE).splitlines()[1].split()


def test_queue_says_when_a_bare_pod_of_a_gated_queue_came_in_without_the_gate() -> None:
    p = gated_pod("p")
    del p["spec"]["schedulingGates"]
    (row,) = queue_rows(queue_snapshot(p), T0, queues=POLICY)
    assert row["state"] == "Pending" and row["ungated"] and row["reason"].startswith("not gated (admitted while")


def test_share_is_sshare_with_the_factors_the_reconciler_uses() -> None:
    stored = Usage(sampled_at=T0 - POLICY.fair_share.half_life, billing={"heavy": 300.0, "light": 100.0})
    fair = dataclasses.replace(POLICY.fair_share, accounts=(Account("light", ("light", "light-*"), 2.0),
                                                            Account("idle", ("idle",), 1.0)))
    qp = dataclasses.replace(POLICY, fair_share=fair)
    rows = {r["account"]: r for r in share_rows(stored, T0, qp, {"light": 2, "new": 1})}
    assert set(rows) == {"heavy", "light", "new", "idle"}
    h, lt, n, i = rows["heavy"], rows["light"], rows["new"], rows["idle"]
    assert (h["rawUsage"], lt["rawUsage"]) == (150, 50)  # decayed by one half-life
    assert (h["normShares"], lt["normShares"], n["normShares"]) == (0.25, 0.5, 0.25)
    assert (h["effectiveUsage"], lt["effectiveUsage"], n["effectiveUsage"]) == (0.75, 0.25, 0.0)
    billing = stored.at(T0, fair.half_life)
    assert h["fairShare"] == round(factors(billing, {"light", "new"}, fair)["heavy"], 6) == 2 ** -3
    assert lt["fairShare"] == 0.707107 and n["fairShare"] == 1.0
    assert (lt["waiting"], h["waiting"]) == (2, 0)
    assert (i["normShares"], i["effectiveUsage"], i["fairShare"]) == (None, None, 1.0)  # competes for nothing now
    assert lt["namespaces"] == ["light", "light-*"] and h["namespaces"] == ["heavy"]
    text = render(list(rows.values()), "wide", SHARE_COLUMNS, SHARE_WIDE)
    assert text.splitlines()[0].split() == ["ACCOUNT", "SHARES", "NORM", "SHARES", "RAW", "USAGE", "EFFECTV",
                                            "USAGE", "FAIRSHARE", "WAITING", "NAMESPACES"]
    unknown = share_rows(stored, T0, qp, None)
    assert all(r["waiting"] is None for r in unknown)


def test_usage_sums_the_days_since_per_account_and_queue() -> None:
    day = 86400
    days = {ts(-10 * day)[:10]: {"a/batch": [3600.0 * 100, 0.0]},
            ts(-2 * day)[:10]: {"a/batch": [3600.0, 7200.0], "b/interactive": [1800.0, 0.0]},
            ts(0)[:10]: {"a/batch": [3600.0, 0.0], "a/interactive": [36.0, 0.0]}}
    rows = usage_rows(Usage(sampled_at=T0, days=days), T0, 7 * day)
    assert rows == [{"account": "a", "queue": "batch", "coreHours": 2.0, "gpuHours": 2.0},
                    {"account": "b", "queue": "interactive", "coreHours": 0.5, "gpuHours": 0.0},
                    {"account": "a", "queue": "interactive", "coreHours": 0.01, "gpuHours": 0.0}]
    assert usage_rows(Usage(sampled_at=T0, days=days), T0, 30 * day)[0]["coreHours"] == 102.0
    assert with_total(rows)[-1] == {"account": "TOTAL", "queue": "", "coreHours": 2.51, "gpuHours": 2.0}


# -- the commands, on the FakeApi ------------------------------------------------------
class Api(FakeApi):
    def close(self) -> None:
        pass


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], api: FakeApi,
            *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(KubeApi, "connect", staticmethod(lambda *a, **k: api))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def usage_configmap(api: FakeApi, usage: Usage, namespace: str = "batchgate-system") -> None:
    api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "batchgate-usage", "namespace": namespace},
             "data": {"usage.json": render_usage(usage, POLICY.fair_share)}})


def test_batchgate_share_reads_the_stored_usage_and_counts_waiting_work(monkeypatch, capsys) -> None:
    import time

    api = Api()
    usage_configmap(api, Usage(sampled_at=time.time(), billing={"heavy": 300.0, "light": 100.0}), "elsewhere")
    api.put(gated_pod("w", ns="light"))
    code, out, err = run_cli(monkeypatch, capsys, api, "share", "-o", "json", "--batchgate-namespace", "elsewhere")
    assert code == 0, err
    rows = {r["account"]: r for r in json.loads(out)}
    assert rows["light"]["waiting"] == 1 and rows["heavy"]["waiting"] == 0
    assert rows["heavy"]["effectiveUsage"] == 0.75 and rows["heavy"]["fairShare"] == round(2 ** -1.5, 6)
    code, out, _ = run_cli(monkeypatch, capsys, api, "share", "--batchgate-namespace", "elsewhere")
    assert code == 0 and out.splitlines()[0].startswith("ACCOUNT")


def test_batchgate_share_without_stored_usage_says_so_and_a_broken_document_fails(monkeypatch, capsys) -> None:
    api = Api()
    code, out, err = run_cli(monkeypatch, capsys, api, "share", "-o", "json")
    assert code == 0 and json.loads(out) == [] and "no usage stored yet" in err
    api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "batchgate-usage", "namespace": "batchgate-system"},
             "data": {"usage.json": "{oops"}})
    code, out, err = run_cli(monkeypatch, capsys, api, "share")
    assert code == 1 and "does not hold usage batchgate can read" in err and out == ""


def test_batchgate_usage_prints_core_and_gpu_hours_since(monkeypatch, capsys) -> None:
    import time

    now = time.time()
    api = Api()
    days = {format_time(now)[:10]: {"a/batch": [7200.0, 3600.0]}, format_time(now - 20 * 86400)[:10]: {"a/batch": [3600.0, 0.0]}}
    usage_configmap(api, Usage(sampled_at=now, days=days))
    code, out, _ = run_cli(monkeypatch, capsys, api, "usage", "-o", "json")
    assert code == 0 and json.loads(out) == [{"account": "a", "queue": "batch", "coreHours": 2.0, "gpuHours": 1.0}]
    code, out, _ = run_cli(monkeypatch, capsys, api, "usage", "--since", "30d")
    lines = out.splitlines()
    assert lines[0].split() == ["ACCOUNT", "QUEUE", "CORE-HOURS", "GPU-HOURS"]
    assert lines[1].split() == ["a", "batch", "3.0", "1.0"] and lines[-1].split() == ["TOTAL", "3.0", "1.0"]
    code, _, err = run_cli(monkeypatch, capsys, api, "usage", "--since", "a while")
    assert code == 2 and "--since" in err


def test_batchgate_queue_orders_gated_work_by_the_stored_usage(monkeypatch, capsys) -> None:
    import time

    api = Api()
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
             "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    api.put(gated_pod("heavy-1", ns="heavy", created=-2 * HOUR))
    api.put(gated_pod("light-1", ns="light", created=-60))
    usage_configmap(api, Usage(sampled_at=time.time(), billing={"heavy": 1000.0}))
    code, out, err = run_cli(monkeypatch, capsys, api, "queue", "-o", "json")
    assert code == 0, err
    assert [(r["name"], r["state"]) for r in json.loads(out) if r["state"] == "Gated"] == [
        ("light-1", "Gated"), ("heavy-1", "Gated")]


def test_queue_shows_the_queue_work_was_admitted_to_not_its_label() -> None:
    """Issue 27: the label is anyone's to change who may update the object; the record is not."""
    r = running("r1", "n1", limit="2h", cpu="4")
    r["metadata"].setdefault("labels", {})["batchgate.io/queue"] = "interactive"  # relabelled after admission
    r["spec"]["containers"][0]["env"] = [{"name": "BATCHGATE_QUEUE", "value": "scavenger"},
                                        {"name": "BATCHGATE_TIME_LIMIT", "value": "2h"}]
    w = waiting("w1", cpu="4")
    w["metadata"].setdefault("labels", {})["batchgate.io/queue"] = "interactive"
    w["spec"]["containers"][0].pop("env", None)  # no record (admitted before records existed): the label
    rows = queue_rows(Snapshot.of(pods=[pod_view(r), pod_view(w)], nodes=[node("n1")]), T0)
    assert {row["name"]: row["queue"] for row in rows} == {"r1": "scavenger", "w1": "interactive"}


def test_queue_shows_the_promise_beside_the_expected_start() -> None:
    """Issue 24: START-BY (batchgate.io/start-by, as the reconciler wrote it) beside START."""
    p = gated_pod("w")
    p["metadata"]["annotations"] = {**(p["metadata"].get("annotations") or {}), "batchgate.io/start-by": ts(HOUR)}
    rows = {r["name"]: r for r in queue_rows(queue_snapshot(p, gated_pod("other", cpu="1")), T0, queues=POLICY)}
    assert rows["w"]["startBy"] == ts(HOUR) and rows["other"]["startBy"] == "-"
    table = render(list(rows.values()), "table", QUEUE_COLUMNS, QUEUE_WIDE)
    assert "START-BY" in table.splitlines()[0] and ts(HOUR) in table
