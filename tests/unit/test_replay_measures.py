"""Issue 24's measures (bench/replay_measures.py) on hand-made records."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
rm: Any = load_script(ROOT / "bench" / "replay_measures.py", "replay_measures")
R = rm.Record


def test_a_promise_is_kept_by_its_start_by_plus_the_slack() -> None:
    assert rm.kept(R(arrival=0, start=1060, end=2000, start_by=1000))
    assert not rm.kept(R(arrival=0, start=1061, end=2000, start_by=1000))


def test_without_a_promise_only_a_start_on_arrival_counts_as_kept() -> None:
    assert rm.kept(R(arrival=0, start=30, end=100))
    assert not rm.kept(R(arrival=0, start=3600, end=4000))  # waited an hour, never promised


def test_promises_separate_the_clean_from_the_overtaken() -> None:
    records = [R(arrival=0, start=100, end=200, start_by=200),  # clean, kept
               R(arrival=0, start=900, end=1000, start_by=500, overtaken=True),  # broken by a later arrival
               R(arrival=0, start=0, end=50),  # on arrival: kept, no promise
               R(arrival=0, start=700, end=800)]  # waited, no promise: not kept
    m = rm.promises(records)
    assert m["promised"] == 2 and m["clean"] == 1
    assert m["kept_clean"] == 1.0
    assert m["kept_promised"] == 0.5
    assert m["kept_all"] == 0.5
    assert m["broken_overtaken"] == 1 and m["waited_unpromised"] == 1


def test_no_clean_workload_means_no_figure_not_a_perfect_one() -> None:
    assert rm.promises([R(arrival=0, start=0, end=1)])["kept_clean"] is None


def test_tightness_is_the_median_ratio_of_promise_to_wait_beside_the_to_limit_start() -> None:
    records = [R(arrival=0, start=100, end=200, start_by=150, to_limit=300),
               R(arrival=10, start=110, end=200, start_by=310, to_limit=310),
               R(arrival=0, start=100, end=200, start_by=100, to_limit=100),
               R(arrival=0, start=0, end=10, start_by=None, to_limit=0)]  # did not wait: left out
    t = rm.tightness(records)
    assert t["tightness"] == 1.5  # 1.5, 3.0, 1.0
    assert t["tightness_to_limit"] == 3.0  # 3.0, 3.0, 1.0


def test_estimates_calibration_error_and_share_within_ten_minutes() -> None:
    records = [R(arrival=0, start=1000, end=2000, expected=1200, to_limit=5000),  # early, 200 s off
               R(arrival=0, start=1000, end=2000, expected=1900, to_limit=3000),  # early, 900 s off
               R(arrival=0, start=1000, end=2000, expected=700, to_limit=1000),  # late, 300 s off
               R(arrival=0, start=1000, end=2000, expected=1000, to_limit=1000),  # exact: not "before"
               R(arrival=0, start=30, end=100, expected=0, to_limit=0)]  # did not wait: left out
    e = rm.estimates(records)
    assert e["estimated"] == 4
    assert e["calibration"] == 0.5
    overtaken = [records[2], records[3], dataclasses.replace(records[0], overtaken=True)]
    assert rm.estimates(overtaken)["calibration_clean"] == 0.0  # the one early estimate was overtaken
    assert e["mae"] == 250.0  # 0, 200, 300, 900
    assert e["mae_to_limit"] == 1000.0  # 0, 0, 2000, 4000
    assert e["within_near"] == 0.75 and e["within_near_to_limit"] == 0.5


def test_utilisation_counts_what_each_pod_holds_within_the_window() -> None:
    # a gang of two 2-core pods: the first held from 0 (idle until the second starts at 50), both end at 150
    r = R(arrival=0, start=50, end=150, gang=True, pieces=((0, 2), (50, 2)))
    assert rm.utilisation([r], capacity=4, window=100) == pytest.approx((2 * 100 + 2 * 50) / 400)


def test_utilisation_ends_each_pod_at_its_own_end_where_pods_end_apart() -> None:
    # two 2-core pods that are not a gang: each computes from its own start (0 and 50) for 40 s
    r = R(arrival=0, start=50, end=90, pieces=((0, 2), (50, 2)), ends=(40, 90))
    assert rm.utilisation([r], capacity=4, window=100) == pytest.approx((2 * 40 + 2 * 40) / 400)


def test_bounded_slowdown_uses_the_threshold_for_short_jobs() -> None:
    assert rm.bounded_slowdown(R(arrival=0, start=60, end=61)) == pytest.approx(61 / 10)
    assert rm.bounded_slowdown(R(arrival=0, start=100, end=200)) == 2.0
    assert rm.bounded_slowdown(R(arrival=0, start=0, end=1)) == 1.0  # never below 1


def test_costs_longest_gang_wait_and_mean_slowdown() -> None:
    records = [R(arrival=0, start=100, end=200, gang=True), R(arrival=0, start=500, end=600),
               R(arrival=10, start=40, end=140, gang=True)]
    c = rm.costs(records, capacity=1, window=1000)
    assert c["longest_gang_wait"] == 100
    assert c["mean_bounded_slowdown"] == pytest.approx((2.0 + 6.0 + 1.3) / 3)


def test_measures_is_every_group_and_pooled_takes_mean_and_range() -> None:
    m = rm.measures([R(arrival=0, start=10, end=20, start_by=10, to_limit=10, expected=10)], capacity=1, window=10)
    assert {"kept_clean", "tightness", "calibration", "utilisation", "mean_bounded_slowdown"} <= m.keys()
    assert rm.pooled([{"x": 0.5}, {"x": 1.0}, {"x": None}], "x") == (0.75, 0.5, 1.0)
    assert rm.pooled([{"x": None}], "x") is None


def test_broken_promises_are_counted_by_cause() -> None:
    records = [R(arrival=0, start=100, end=200, start_by=200),  # kept
               R(arrival=0, start=900, end=1000, start_by=500, overtaken=True, by_priority=True),
               R(arrival=0, start=900, end=1000, start_by=500, overtaken=True),  # fair share only
               R(arrival=0, start=900, end=1000, start_by=500),  # nothing ranked ahead: a defect
               R(arrival=0, start=400, end=1000, start_by=500, overtaken=True),  # moved, yet by its first: kept
               R(arrival=0, start=700, end=800)]  # waited, no promise
    assert rm.broken(records) == {"broken_unpromised": 1, "broken_priority": 1, "broken_fair_share": 1,
                                  "broken_clean": 1}
