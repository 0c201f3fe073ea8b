"""The queue replay's promises, estimates and EASY backfill (bench/queue_replay.py, issue 24)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_queue_replay import sim

ONE = sim.Params(nodes=1, node_cpu=8, hours=1.0)


def _day() -> list[Any]:
    W = sim.Work
    return [W(0, "a", 0.0, 1, 4, 3600.0, 3600.0, False),  # 4 cores until 3600
            W(1, "a", 0.0, 1, 2, 7200.0, 7200.0, False),  # 2 cores until 7200: 2 free
            W(2, "a", 1.0, 1, 8, 3600.0, 3600.0, False),  # the head: the whole node, at 7200
            W(3, "a", 2.0, 1, 6, 1800.0, 1800.0, False),  # second: fits 3600..5400, before the head
            W(4, "a", 3.0, 1, 2, 5400.0, 5000.0, False)]  # fits now, ends before 7200, but runs into 3600..5400


def test_conservative_holds_a_job_that_would_delay_the_second_reservation() -> None:
    res = sim.simulate(_day(), ONE, "queue")
    head, second, late = res.works[2], res.works[3], res.works[4]
    assert head.start_by == 7200.0 and head.started == 7200.0
    assert second.start_by == 3600.0 and second.started == 3600.0
    assert late.started is not None and late.started >= 5400.0


def test_easy_releases_it_when_only_the_head_is_delayed_by_nothing() -> None:
    res = sim.simulate(_day(), ONE, "easy")
    head, second, late = res.works[2], res.works[3], res.works[4]
    assert late.starts == [3.0]  # backfilled: it delays the second, not the head
    assert head.start_by == 7200.0 and head.started == 7200.0  # the head's promise holds
    assert second.start_by is None and second.started == 5003.0  # no promise: it was never the head
    assert second.to_limit == 3600.0  # what the to-the-limit start said when it came


def _outranked() -> tuple[Any, list[Any]]:
    """Account a's second workload is promised 3600; b's, arriving later, outranks it on fair share."""
    W = sim.Work
    return sim.Params(nodes=1, node_cpu=4, hours=1.0), [
        W(0, "a", 0.0, 1, 4, 3600.0, 3600.0, False), W(1, "a", 1.0, 1, 4, 3600.0, 3600.0, False),
        W(2, "b", 100.0, 1, 4, 3600.0, 3600.0, False)]


def test_a_later_arrival_ranked_ahead_marks_the_promise_overtaken() -> None:
    """A light account's new work outranks the heavy account's older work on fair share."""
    p, works = _outranked()
    res = sim.simulate(works, p, "queue")
    older, newer = res.works[1], res.works[2]
    assert older.start_by == 3600.0 and older.started == 7200.0 and older.overtaken
    assert newer.start_by == 3600.0 and newer.started == 3600.0 and not newer.overtaken
    m = sim.figures(res, p, sim.FairShare())
    assert m["kept_clean"] == 1.0 and m["kept_promised"] == 0.5 and m["broken_overtaken"] == 1


def test_under_keep_a_later_arrival_ranked_ahead_does_not_break_the_promise() -> None:
    p, works = _outranked()
    res = sim.simulate(works, p, "keep")
    older, newer = res.works[1], res.works[2]
    assert older.start_by == 3600.0 and older.started == 3600.0 and not older.overtaken
    assert newer.start_by == 7200.0 and newer.started == 7200.0


def test_expected_start_comes_from_predicted_runtimes_and_never_after_the_promise() -> None:
    """The second run of a program is expected to end as the first did, not at its limit."""
    p = sim.Params(nodes=1, node_cpu=4, hours=1.0)
    W = sim.Work
    works = [W(0, "a", 0.0, 1, 4, 7200.0, 600.0, False, program="x"),  # a first run: 600 s of 7200
             W(1, "a", 700.0, 1, 4, 7200.0, 600.0, False, program="x"),  # runs 700..1300
             W(2, "a", 710.0, 1, 4, 7200.0, 600.0, False, program="x")]
    res = sim.simulate(works, p, "queue")
    third = res.works[2]
    assert third.start_by == 700.0 + 7200.0  # the promise: the one ahead runs to its limit
    assert third.expected == 1300.0 and third.started == 1300.0  # the estimate: as the first run did


def test_the_replay_measures_utilisation_as_the_simulation_does() -> None:
    p = sim.Params(hours=2.0, heavy_backlog=10, depth=30)
    works = sim.generate(1, p)
    for system in ("kube", "queue", "easy"):
        res = sim.simulate(works, p, system)
        f = sim.figures(res, p, sim.FairShare())
        assert abs(f["utilisation"] - res.alloc_window / (p.nodes * p.node_cpu * p.hours * 3600)) < 1e-9
        assert f["kept_all"] is not None and 0 <= f["kept_all"] <= 1


def test_bench_shadow_models_replay_with_priorities() -> None:
    p = sim.Params(nodes=4, node_cpu=64, hours=2.0)
    works = sim.generate_model(1, "repeat", 0.8, p)
    assert works and {w.prio for w in works} == {0, 1000} and all(w.pods == 1 for w in works)
    rows = sim.run(1, p, model="repeat", load=0.8, systems=("kube", "easy"))
    assert [r["system"] for r in rows] == ["kube", "easy"] and rows[1]["model"] == "repeat"


def test_under_easy_the_replay_keeps_a_promised_head_ahead_of_older_work_fair_share_ranks_first() -> None:
    """As queue.waiting does (queue.promised_ahead): fair share ranked the older, unpromised work
    ahead of the promised head; the head keeps its place, and nothing counts as overtaken."""
    W = sim.Work
    older, head = W(0, "b", 0.0, 1, 4, 3600.0, 3600.0, False), W(1, "a", 5.0, 1, 4, 3600.0, 3600.0, False)
    head.start_by = head.current = 3600.0
    head.promised_at = 10.0
    assert [w.wid for w in sim._rank([older, head], easy=True, keep=False)] == [1, 0]
    assert not head.overtaken
    assert [w.wid for w in sim._rank([older, head], easy=False, keep=False)] == [0, 1], "(conservative would have promised the older too)"


def test_the_overtaken_promise_says_whether_a_higher_priority_or_fair_share_went_ahead() -> None:
    p, works = _outranked()
    assert not sim.simulate(works, p, "queue").works[1].by_priority  # one priority: fair share went ahead
    works[2].prio = 1  # now b's later work is of a higher priority
    older = sim.simulate(works, p, "queue").works[1]
    assert older.overtaken and older.by_priority


def _fragmented() -> tuple[Any, list[Any]]:
    """Two nodes of 8 cores: node 0 frees whole at 3600, node 1 half at 3600 and whole at 7200. a's
    whole-node workload is promised node 0 at 3600; b's 4-core one arrives later and outranks it on
    fair share: the first node with room at 3600 is node 0, but node 1 has room for it then too."""
    W = sim.Work
    return sim.Params(nodes=2, node_cpu=8, hours=1.0), [
        W(0, "a", 0.0, 1, 8, 3600.0, 3600.0, False), W(1, "c", 0.0, 1, 4, 3600.0, 3600.0, False),
        W(2, "c", 0.0, 1, 4, 7200.0, 7200.0, False), W(3, "a", 1.0, 1, 8, 3600.0, 3600.0, False),
        W(4, "b", 100.0, 1, 4, 3600.0, 3600.0, False)]


def test_in_queue_order_a_later_arrival_takes_the_promised_room_it_had_elsewhere() -> None:
    p, works = _fragmented()
    res = sim.simulate(works, p, "queue")
    promised, newer = res.works[3], res.works[4]
    assert promised.start_by == 3600.0 and promised.started == 7200.0 and promised.overtaken
    assert newer.started == 3600.0


def test_under_yield_a_later_arrival_with_other_room_goes_behind_the_promise() -> None:
    p, works = _fragmented()
    res = sim.simulate(works, p, "yield")
    promised, newer = res.works[3], res.works[4]
    assert promised.start_by == 3600.0 and promised.started == 3600.0
    assert newer.started == 3600.0  # no later than ahead of it


def test_a_promise_first_placed_past_its_start_by_says_whether_the_arrival_had_other_room() -> None:
    p, works = _fragmented()
    assert sim.simulate(works, p, "queue").works[3].at_risk == "other-room"  # node 1 had room for it
    p, works = _outranked()
    assert sim.simulate(works, p, "queue").works[1].at_risk == "needed"  # one node: it needed the room


def test_under_deadline_a_later_arrival_goes_ahead_only_while_the_promise_holds() -> None:
    """``deadline`` (the product's): b's later work outranks a's promised work. Where it would break
    the promise (an hour's work ahead of a promise of 3600), the promise holds its place; where
    the promise has room to spare (promised 7200 behind a job limited to 7200 that ended at 1000),
    b's goes first and a's still starts by its promise."""
    p, works = _outranked()
    res = sim.simulate(works, p, "deadline")
    older, newer = res.works[1], res.works[2]
    assert older.start_by == 3600.0 and older.started == 3600.0
    assert newer.start_by == 7200.0 and newer.started == 7200.0
    assert max(res.rounds) == 2  # the pass b arrived at placed again, once

    W = sim.Work
    slack = [W(0, "a", 0.0, 1, 4, 3600.0, 3600.0, False), W(1, "a", 0.0, 1, 4, 7200.0, 1000.0, False),
             W(2, "a", 1.0, 1, 8, 3600.0, 3600.0, False), W(3, "b", 1100.0, 1, 8, 1800.0, 1800.0, False)]
    two = sim.Params(nodes=1, node_cpu=8, hours=1.0)
    res = sim.simulate(slack, two, "deadline")
    older, newer = res.works[2], res.works[3]
    assert older.start_by == 7200.0 and newer.started == 3600.0 and older.started == 5400.0


def test_easy_deadline_is_easy_backfill_whose_promise_never_moves_earlier() -> None:
    """``easy-deadline``, a ``backfill: easy`` queue with the default ``promise: deadline``: EASY's
    backfill (the late job starts at once, delaying only the second) and deadline's placement; the
    head's start-by, 7200 behind a job limited to 7200 that ended at 1000, stays 7200 when its
    reservation moves to 3600 at the pass a small arrival makes then (under ``easy``, ``promise: fair-share``, it follows to 3600)."""
    res = sim.simulate(_day(), ONE, "easy-deadline")
    assert res.works[4].starts == [3.0] and res.works[3].start_by is None and res.rounds
    W = sim.Work
    slack = [W(0, "a", 0.0, 1, 4, 3600.0, 3600.0, False), W(1, "a", 0.0, 1, 4, 7200.0, 1000.0, False),
             W(2, "a", 1.0, 1, 8, 3600.0, 3600.0, False), W(3, "a", 1000.0, 1, 1, 1800.0, 600.0, False)]
    head = {s: sim.simulate(slack, ONE, s).works[2] for s in ("easy", "easy-deadline")}
    assert all(w.start_by == 7200.0 and w.started == 3600.0 for w in head.values())
    assert head["easy"].current == 3600.0 and head["easy-deadline"].current == 7200.0


def test_the_deadline_systems_need_the_shadow_placement() -> None:
    with pytest.raises(SystemExit):
        sim.main(["--systems", "deadline", "--placement", "simple", "--seeds", "1", "--hours", "1"])


def _slack_day(limit: float) -> list[Any]:
    """A promise with room to spare: the whole node is promised 3600 (when both running jobs reach
    their limits); one ends at 600, so its reservation moves to 1800 while its start-by stays 3600.
    Then 4 cores free until 1800 and a job for ``limit`` arrives."""
    W = sim.Work
    return [W(0, "a", 0.0, 1, 4, 3600.0, 600.0, False), W(1, "a", 0.0, 1, 4, 1800.0, 1800.0, False),
            W(2, "a", 1.0, 1, 8, 3600.0, 3600.0, False), W(3, "a", 601.0, 1, 4, limit, limit, False)]


def test_backfill_start_by_releases_into_a_promises_room_to_spare_and_keeps_the_promise() -> None:
    p = sim.Params(nodes=1, node_cpu=8, hours=1.0)
    held = sim.simulate(_slack_day(2400.0), p, "deadline").works
    assert held[3].starts == [5400.0] and held[2].started == 1800.0  # conservative: behind the reservation
    went = sim.simulate(_slack_day(2400.0), p, "start-by").works
    assert went[3].starts == [601.0]  # ends by 3001: the reservation moves, the start-by does not
    assert went[2].start_by == 3600.0 and went[2].started == 3001.0


def test_backfill_start_by_holds_a_job_that_would_start_a_promise_late() -> None:
    p = sim.Params(nodes=1, node_cpu=8, hours=1.0)
    works = sim.simulate(_slack_day(3600.0), p, "start-by").works  # would end 4201, past 3600
    assert works[3].starts == [5400.0] and works[2].started == 1800.0


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_backfill_start_by_keeps_every_clean_promise_in_a_random_day(seed: int) -> None:
    """A small random fair-share day: every promise no later arrival of a higher priority went
    ahead of is kept, as under deadline; and the day backfills into some promise's room to spare."""
    p = sim.Params(nodes=4, node_cpu=32, hours=4.0)
    works = sim.generate(seed, p)
    slack = sim.simulate(works, p, "start-by")
    m = sim.figures(slack, p, sim.FairShare())
    assert m["kept_clean"] == 1.0
    assert all(w.started <= w.start_by + sim.START_BY_SLACK for w in slack.works
               if w.start_by is not None and not w.overtaken and w.started is not None)
    plain = sim.simulate(works, p, "deadline")
    assert [w.starts for w in slack.works] != [w.starts for w in plain.works]
