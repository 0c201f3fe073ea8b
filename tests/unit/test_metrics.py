"""The hot-path tally behind the admission counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from webhook.metrics import Tally


def test_tally_exposes_counters_with_the_totals_of_single_and_bagged_increments():
    registry = CollectorRegistry()
    t = Tally("demo_decisions", "What each policy did.", ("policy", "outcome"), registry)
    t.inc("shm", "mutated")
    t.inc_each((("shm", "mutated"), ("kata-cpu", "passed")))
    t.inc_each((("shm", "mutated"), ("kata-cpu", "passed")))
    assert t.value("shm", "mutated") == 3 and t.value("kata-cpu", "passed") == 2
    text = generate_latest(registry).decode()
    assert "# TYPE demo_decisions_total counter" in text or "# TYPE demo_decisions counter" in text
    assert 'demo_decisions_total{outcome="mutated",policy="shm"} 3.0' in text
    assert 'demo_decisions_total{outcome="passed",policy="kata-cpu"} 2.0' in text


def test_many_distinct_bags_fold_without_losing_counts(monkeypatch):
    registry = CollectorRegistry()
    t = Tally("demo", "d", ("policy", "outcome"), registry)
    monkeypatch.setattr(Tally, "BAGS_LIMIT", 4)
    for i in range(50):
        t.inc_each(((f"p{i}", "passed"), ("shm", "mutated")))
    assert len(t._bags) <= 4
    assert t.value("shm", "mutated") == 50
    assert sum(t.value(f"p{i}", "passed") for i in range(50)) == 50
