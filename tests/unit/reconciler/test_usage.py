"""Usage for fair share (usage.py: accrual, decay, factors, the stored document) and its ledger
(ledger.py: the ConfigMap batchgate-usage, read before the first sample, written every interval,
never overwritten when unreadable), on the FakeApi."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.unit.reconciler.fakeapi import FakeApi
from tests.unit.reconciler.reconbuild import HOUR, T0, pod, terminated
from tests.unit.reconciler.test_shadow import running
from webhook.bundle import Account, FairShare
from webhook.reconciler import usage as u
from webhook.reconciler.ledger import NAME, Ledger
from webhook.reconciler.model import CONFIG_MAP, PodView, pod_view
from webhook.reconciler.settings import QueuePolicy
from webhook.reconciler.usage import Usage, accrue, factors, parse, render
from webhook.units import format_time

FAIR = FairShare()  # cpu 1 per core-second, memory 0.25 per GiB-second, nvidia.com/gpu 10 per unit-second
DAY = format_time(T0)[:10]


def bound(name: str, *, ns: str = "demo", cpu: str = "1", started: float = -HOUR, gpus: int = 0) -> PodView:
    p = running(name, "n1", limit=None, cpu=cpu, mem="1Gi", started=started)
    p["metadata"]["namespace"] = ns
    if gpus:
        p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    return pod_view(p)


def fold(usage: Usage, *pods: PodView, now: float = T0, fair: FairShare = FAIR) -> Usage:
    return accrue(usage, pods, now, fair, lambda p: p.ref.namespace, lambda p: "batch")


# -- accrual -------------------------------------------------------------------------------
def test_the_first_sample_only_starts_the_clock() -> None:
    first = fold(Usage(), bound("a"))
    assert first.sampled_at == T0 and first.billing == {} and first.days == {}


def test_only_the_overlap_since_the_last_sample_counts() -> None:
    last = Usage(sampled_at=T0 - 60)
    long_running = bound("old", started=-HOUR)  # 60 s of the interval
    newcomer = bound("new", ns="other", started=-30)  # 30 s
    out = fold(last, long_running, newcomer)
    cost = 1 * 1 + 0.25 * 1  # one core and one GiB, per second
    assert out.billing == pytest.approx({"demo": 60 * cost, "other": 30 * cost})
    assert out.days[DAY] == {"demo/batch": [60.0, 0.0], "other/batch": [30.0, 0.0]}
    assert out.sampled_at == T0


def test_a_sample_no_later_than_the_last_changes_nothing() -> None:
    last = Usage(sampled_at=T0, billing={"demo": 5.0})
    assert fold(last, bound("a"), now=T0) is last


def test_unbound_pods_and_pods_that_ended_at_an_unknown_time_count_nothing() -> None:
    unbound = pod_view(pod("pending", phase="Pending", node="", started=None))
    lost = pod_view(pod("failed", phase="Failed", started=-HOUR))  # no finish time
    assert fold(Usage(sampled_at=T0 - 60), unbound, lost).billing == {}


def test_a_finished_pod_with_requests_counts_until_it_finished() -> None:
    p = running("done", "n1", limit=None, cpu="2", mem="0", started=-HOUR)
    p["status"] = {"phase": "Succeeded", "containerStatuses": [terminated(0, started=-HOUR, finished=-20)]}
    out = fold(Usage(sampled_at=T0 - 60), pod_view(p))
    assert out.days[DAY]["demo/batch"] == [80.0, 0.0]  # 2 cores for 40 s
    assert out.billing["demo"] == pytest.approx(80.0)


def test_gpus_are_counted_as_gpu_seconds_and_billed_by_their_weight() -> None:
    out = fold(Usage(sampled_at=T0 - 10), bound("train", cpu="1", gpus=2))
    assert out.days[DAY]["demo/batch"] == [10.0, 20.0]
    assert out.billing["demo"] == pytest.approx(10 * (1 + 0.25 + 2 * 10))


def test_usage_decays_by_the_half_life() -> None:
    half = FAIR.half_life
    stored = Usage(sampled_at=T0 - half, billing={"demo": 100.0})
    assert stored.at(T0, half) == pytest.approx({"demo": 50.0})
    assert stored.at(T0 + half, half) == pytest.approx({"demo": 25.0})
    assert fold(stored).billing == pytest.approx({"demo": 50.0})  # nothing ran meanwhile
    assert Usage(billing={"x": 3.0}).at(T0, half) == {"x": 3.0}  # never sampled: as stored


def test_only_the_last_days_are_kept() -> None:
    days = {f"2024-03-{d:02d}": {"demo/batch": [1.0, 0.0]} for d in range(1, 32)}
    days.update({f"2024-04-{d:02d}": {"demo/batch": [1.0, 0.0]} for d in range(1, 31)})
    out = fold(Usage(sampled_at=T0 - 60, days=days), bound("a"))
    assert len(out.days) == u.DAYS_KEPT and DAY in out.days and "2024-03-01" not in out.days


# -- factors -------------------------------------------------------------------------------
def test_factors_are_one_while_nobody_used_anything() -> None:
    assert factors({}, ["a", "b"], FAIR) == {"a": 1.0, "b": 1.0}


def test_an_account_at_exactly_its_share_gets_one_half() -> None:
    assert factors({"a": 10.0, "b": 10.0}, ["a", "b"], FAIR) == {"a": 0.5, "b": 0.5}
    f = factors({"a": 30.0}, ["a", "b"], FAIR)
    assert f["a"] == pytest.approx(0.25) and f["b"] == 1.0  # a used everything with half the shares


def test_shares_come_from_the_bundles_accounts() -> None:
    fair = dataclasses.replace(FAIR, accounts=(Account("physics", ("phys-*",), 3.0), Account("chem", ("chem",), 1.0)))
    assert fair.account_of("phys-a") == "physics" and fair.account_of("other") == "other"
    f = factors({"physics": 75.0, "chem": 25.0}, ["physics", "chem"], fair)
    assert f == pytest.approx({"physics": 0.5, "chem": 0.5})
    g = factors({"physics": 50.0, "chem": 50.0}, ["physics", "chem"], fair)
    assert g["physics"] > 0.5 > g["chem"]


# -- the stored document -----------------------------------------------------------------
def test_render_and_parse_round_trip() -> None:
    doc = Usage(sampled_at=T0, billing={"a": 1.5, "b": 2.25}, days={DAY: {"a/batch": [3.5, 0.0]}})
    text = render(doc, FAIR)
    assert parse(text) == doc
    assert json.loads(text)["halfLife"] == FAIR.half_life
    assert parse("") == Usage() and parse(None) == Usage()


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"version": 2}', '{"billing": {}}',
    '{"version": 1, "sampledAt": "yesterday"}', '{"version": 1, "billing": [1]}', '{"version": 1, "days": 3}',
])
def test_parse_refuses_what_is_not_a_usage_document(text: str) -> None:
    with pytest.raises(ValueError):
        parse(text)


def test_parse_drops_entries_it_cannot_use() -> None:
    doc = {"version": 1, "sampledAt": T0, "billing": {"ok": 1, "neg": -1, "bool": True, "text": "1"},
           "days": {DAY: {"ok/batch": [1, 2], "short/batch": [1], "bad/batch": ["x", 1]}, "junk": 5}}
    got = parse(json.dumps(doc))
    assert got.billing == {"ok": 1.0} and got.days == {DAY: {"ok/batch": [1.0, 2.0]}}


def test_render_drops_the_oldest_days_past_max_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    days = {f"2024-04-{d:02d}": {f"acct-{i}/batch": [1.0, 0.0] for i in range(20)} for d in range(1, 11)}
    full = render(Usage(sampled_at=T0, days=days), FAIR)
    monkeypatch.setattr(u, "MAX_BYTES", len(full) // 2)
    text = render(Usage(sampled_at=T0, days=days), FAIR)
    kept = json.loads(text)["days"]
    assert len(text) <= len(full) // 2 and "2024-04-10" in kept and "2024-04-01" not in kept
    assert sorted(kept) == sorted(days)[-len(kept):]


# -- the ledger (ConfigMap batchgate-usage) -----------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


POLICY = QueuePolicy(gated=("batch",))
NS = "batchgate-system"  # where the ledger keeps its ConfigMap


def ledger_at_t0(api: FakeApi | None = None) -> tuple[FakeApi, Clock, Ledger]:
    """A ledger on ``api`` (a new FakeApi by default) whose clock starts at T0."""
    api, clock = api or FakeApi(), Clock()
    return api, clock, Ledger(api, NS, clock)


def put_document(api: FakeApi, text: str) -> None:
    """The ConfigMap batchgate-usage holding ``text``, as an admin would write it."""
    api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NS},
             "data": {u.KEY: text}})


def step(ledger: Ledger, *pods: PodView) -> str:
    return ledger.step(pods, POLICY, lambda p: p.ref.namespace, lambda p: "batch")


def stored(api: FakeApi) -> Usage:
    return parse(api.get(CONFIG_MAP, NS, NAME)["data"][u.KEY])


def test_the_ledger_creates_the_configmap_and_writes_every_interval_only() -> None:
    api, clock, ledger = ledger_at_t0()
    p = bound("a", started=-HOUR)
    assert step(ledger, p) == "written" and stored(api).sampled_at == T0
    clock.t += 30
    assert step(ledger, p) == "unchanged"
    clock.t += 30
    assert step(ledger, p) == "written"
    assert stored(api).billing["demo"] == pytest.approx(60 * 1.25)
    cm = api.get(CONFIG_MAP, NS, NAME)
    assert cm["metadata"]["labels"]["app.kubernetes.io/component"] == "usage"


def test_a_new_leader_goes_on_from_the_stored_figures() -> None:
    api, clock, first = ledger_at_t0()
    p = bound("a", started=-HOUR)
    step(first, p)
    clock.t += 60
    step(first, p)
    clock.t += 60  # the first leader dies (kill -9) before its next write
    second = Ledger(api, NS, clock)
    assert step(second, p) == "written"
    assert stored(api).billing["demo"] == pytest.approx(120 * 1.25, rel=1e-3)


def test_an_unreadable_document_is_never_overwritten() -> None:
    api = FakeApi()
    put_document(api, "{oops")
    _, _, ledger = ledger_at_t0(api)
    assert step(ledger, bound("a")) == "broken" and ledger.broken
    assert api.writes() == []
    assert ledger.billing(T0, POLICY) == {}


def test_a_conflict_reads_again_and_folds_on_top_of_what_is_stored() -> None:
    api, clock, ledger = ledger_at_t0()
    step(ledger)
    restored = Usage(sampled_at=T0, billing={"restored": 500.0})
    cm = api.get(CONFIG_MAP, NS, NAME)
    cm["data"][u.KEY] = render(restored, FAIR)
    api.put(cm)  # an admin restores a backup
    clock.t += 60
    assert step(ledger) == "conflict"
    assert step(ledger) == "written"
    assert stored(api).billing["restored"] == pytest.approx(500.0 * 2 ** (-60 / FAIR.half_life))


def test_a_configmap_deleted_by_an_admin_starts_usage_from_zero() -> None:
    api, clock, ledger = ledger_at_t0()
    p = bound("a", started=-HOUR)
    step(ledger, p)
    clock.t += 60
    step(ledger, p)
    api.delete(CONFIG_MAP, NS, NAME)
    clock.t += 60
    results = [step(ledger, p) for _ in range(2)]
    assert results[-1] == "written", results
    assert stored(api).billing == {} and stored(api).sampled_at == clock.t


def test_a_new_leaders_first_pass_orders_by_the_stored_usage() -> None:
    """After a restart (kill -9) or a change of leader the stored usage decides the very first
    release, not only the passes after the first sample."""
    from tests.unit.conftest import shipped_bundle
    from tests.unit.reconciler.test_queue import gated
    from webhook.reconciler.controller import Controller
    from webhook.reconciler.settings import Settings

    api = FakeApi()
    api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
             "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    api.put(gated("heavy-1", ns="heavy", cpu="4", created=-2 * HOUR))
    api.put(gated("light-1", ns="light", cpu="4", created=-60))
    put_document(api, render(Usage(sampled_at=T0 - 30, billing={"heavy": 1e6}), FAIR))
    settings = Settings(leader_elect=False, queues=QueuePolicy.from_bundle(shipped_bundle()))
    c = Controller(api, settings, clock=lambda: T0)
    c.cache.list_once()
    released = [o.action.target.name for o in c.run_pass("resync") if o.action.kind == "release"]
    assert released == ["light-1"]
