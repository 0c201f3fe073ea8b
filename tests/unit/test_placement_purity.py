"""The pure core keeps no state between calls and changes none of its arguments: the shadow
schedule, placed again on the same inputs (as ``queue.place`` places again when it promotes, and
the estimate pass after it), gives the same estimates and leaves its inputs as they were. Checked
at every placement of a replayed day (bench/queue_replay.py, the ``deadline`` system: promotions,
predicted runtimes, the estimate pass), and a day with an extra placement at every estimate pass
(what a measuring harness adds) runs workload for workload as the day without it."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
sim: Any = load_script(ROOT / "bench" / "queue_replay.py", "queue_replay")

P = sim.Params(hours=2.0)  # the fair-share day: a few passes promote


def _day() -> list[Any]:
    works: list[Any] = sim.generate(1, P)
    return works


def _outcome(works: list[Any]) -> list[tuple[Any, ...]]:
    return [(w.wid, w.started, w.expected, w.start_by, w.overtaken, tuple(w.nodes)) for w in works]


def test_placing_again_gives_the_same_estimates_and_leaves_the_inputs_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = sim.shadow_schedule
    seen = {"calls": 0, "predicted": 0}

    def checked(snapshot: Any, now: float, windows: Any, **kw: Any) -> Any:
        before = pickle.dumps((snapshot, now, tuple(windows), kw))
        first = real(snapshot, now, windows, **kw)
        assert pickle.dumps((snapshot, now, tuple(windows), kw)) == before  # no argument changed
        again = real(copy.deepcopy(snapshot), now, windows, **copy.deepcopy(kw))
        assert again == first  # nothing kept from the call before
        assert real(snapshot, now, windows, **kw) == first
        seen["calls"] += 1
        seen["predicted"] += kw.get("runtimes") is not None
        return first

    monkeypatch.setattr(sim, "shadow_schedule", checked)
    res = sim.simulate(_day(), P, "deadline")
    assert seen["calls"] > 50 and seen["predicted"] > 10  # the queue's placements and the estimate pass's
    assert max(res.rounds) > 1  # some pass promoted and placed again


def test_an_extra_placement_at_every_estimate_pass_changes_nothing_the_day_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    plain = sim.simulate(_day(), P, "deadline")
    real = sim._expected_shadow

    def measured(run: Any, ranked_works: list[Any], placed: list[Any], now: float, policy: Any,
                 forecast: Any, scores: Any) -> None:
        real(run, ranked_works, placed, now, policy, forecast, scores)
        snap = run.views.snapshot()  # a harness's variant: the running pods' runtimes known
        snap = dataclasses.replace(snap, pods={k: dataclasses.replace(pod, expected_runtime=60)
                                               for k, pod in snap.pods.items()})
        queued = [dataclasses.replace(q, pods=(sim._pod_of(w),))
                  for q, w in zip(sim.as_queued(placed, policy), ranked_works, strict=True)]
        sim.shadow_schedule(snap, sim.EPOCH + now, (), queued=queued, runtimes=sim.Predictor.of(run.history))

    monkeypatch.setattr(sim, "_expected_shadow", measured)
    extra = sim.simulate(_day(), P, "deadline")
    assert _outcome(extra.works) == _outcome(plain.works)
    assert any(w.expected is not None for w in plain.works)
