"""The simulator's model of kube-scheduler 1.20's preemption (bench/scavenger_sim.py), on small
cases worked out by hand from DefaultPreemption's rules, and the simulator on tiny days whose
losses are computed by hand."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
sim: Any = load_script(ROOT / "bench" / "scavenger_sim.py", "scavenger_sim")

GI = 1 << 30
SCAV, BATCH = sim.SCAVENGER, sim.BATCH


def pod(uid: int, cpu: int, prio: int = SCAV, start: float = 0.0, owner: Any = None, pdb: str | None = None) -> Any:
    return sim.SimPod(uid, owner if owner is not None else f"g{uid}", cpu * 1000, cpu * GI, prio, start, pdb=pdb)


def node(name: str, cpu: int, *pods: Any) -> Any:
    n = sim.SimNode(name, cpu * 1000, cpu * GI)
    for p in pods:
        n.bind(p)
    return n


def preemptor(cpu: int, prio: int = BATCH) -> Any:
    return pod(999, cpu, prio)


def uids(pods: Any) -> list[int]:
    return [p.uid for p in pods]


# -- selectVictimsOnNode ----------------------------------------------------------------------
def test_latest_started_goes_first_among_equal_priority():
    n = node("n", 8, pod(1, 2, start=10), pod(2, 2, start=20), pod(3, 2, start=30), pod(4, 2, prio=BATCH))
    victims, violations = sim.select_victims_on_node(n, preemptor(2))
    assert uids(victims) == [3] and violations == 0
    # 4 cores: the earliest (1) is reprieved first, then 2 and 3 do not fit back.
    assert uids(sim.select_victims_on_node(n, preemptor(4))[0]) == [2, 3]


def test_lowest_priority_goes_first_however_old():
    n = node("n", 4, pod(1, 2, prio=SCAV, start=5), pod(2, 2, prio=SCAV + 1, start=40))
    assert uids(sim.select_victims_on_node(n, preemptor(2))[0]) == [1]


def test_free_room_counts_and_equal_priority_is_never_a_victim():
    n = node("n", 8, pod(1, 2, start=10), pod(2, 4, prio=BATCH))  # 2 cores free
    assert uids(sim.select_victims_on_node(n, preemptor(4))[0]) == [1]
    assert sim.select_victims_on_node(n, preemptor(8)) is None  # the batch pod stays: cannot fit
    assert sim.select_victims_on_node(node("m", 4, pod(5, 4, prio=BATCH)), preemptor(2)) is None


def test_pdb_violating_pods_are_reprieved_first():
    # 2 is the latest and would go, but taking it violates its budget: 1 goes instead.
    n = node("n", 4, pod(1, 2, start=10), pod(2, 2, start=20, pdb="p"))
    assert uids(sim.select_victims_on_node(n, preemptor(2), {"p": 0})[0]) == [1]
    assert uids(sim.select_victims_on_node(n, preemptor(2), {"p": 1})[0]) == [2]  # a disruption allowed
    victims, violations = sim.select_victims_on_node(n, preemptor(4), {"p": 0})
    assert uids(victims) == [2, 1] and violations == 1  # both must go: one violation counted


# -- pickOneNodeForPreemption -----------------------------------------------------------------
def cand(name: str, *victims: Any, violations: int = 0) -> tuple[str, list[Any], int]:
    return (name, list(victims), violations)


def test_pick_one_node_criteria_in_order():
    a, b = pod(1, 1, start=50), pod(2, 1, start=60)
    # 1. fewest PDB violations, over everything else
    assert sim.pick_one_node([cand("x", a, b, violations=0), cand("y", pod(3, 1), violations=1)]) == "x"
    # 2. lowest highest-victim priority
    assert sim.pick_one_node([cand("x", pod(3, 1, prio=SCAV + 1, start=99)), cand("y", pod(4, 1, start=1))]) == "y"
    # 3./4. smallest sum of priorities (+2^31 each), which with equal priorities is fewest victims
    assert sim.pick_one_node([cand("x", a, b), cand("y", pod(5, 1, start=1))]) == "y"
    # 3. sum of priorities before count: one high-tier victim each... two low ones cost more
    assert sim.pick_one_node([cand("x", pod(6, 1, prio=SCAV + 1), pod(7, 1, prio=SCAV)),
                              cand("y", pod(8, 1, prio=SCAV + 1))]) == "y"
    # 5. latest start of the highest-priority victims
    assert sim.pick_one_node([cand("x", pod(9, 1, start=30)), cand("y", pod(10, 1, start=45)),
                              cand("z", pod(11, 1, start=40))]) == "y"
    # 6. a full tie: the first in (map) order
    assert sim.pick_one_node([cand("x", pod(12, 1, start=7)), cand("y", pod(13, 1, start=7))]) == "x"


def test_fewer_victims_beat_a_later_start_across_nodes():
    one = node("one", 4, pod(1, 2, start=50), pod(2, 2, start=10))
    two = node("two", 4, pod(3, 1, start=60), pod(4, 1, start=70), pod(5, 2, start=0))
    name, victims = sim.stock_preemption([two, one], preemptor(2))
    assert name == "one" and uids(victims) == [1]
    # with room for it on "two" after one victim, the later start there wins
    two2 = node("two2", 4, pod(6, 2, start=60), pod(7, 2, start=0))
    assert sim.stock_preemption([one, two2], preemptor(2))[0] == "two2"


# -- the oracle ---------------------------------------------------------------------------------
def test_oracle_takes_whole_gangs_at_least_cost():
    n = node("n", 8, pod(1, 2, owner="gang"), pod(2, 2, owner="gang"), pod(3, 2, owner="a"), pod(4, 2, owner="b"))
    cost = {"gang": 5.0, "a": 3.0, "b": 3.5}.__getitem__
    key, owners = sim.oracle_on_node(n, preemptor(2), cost, [1000])
    assert owners == ["a"] and key == (SCAV, 3.0, 1)
    key, owners = sim.oracle_on_node(n, preemptor(4), cost, [1000])
    assert owners == ["gang"] and key[1] == 5.0  # both pods of the gang free 4 cores, cheaper than a+b
    key, owners = sim.oracle_on_node(n, preemptor(6), cost, [1000])
    assert sorted(owners) == ["a", "gang"] and key[1] == 8.0


def test_oracle_prefers_the_lowest_priority_class_to_the_cheapest():
    n = node("n", 4, pod(1, 2, prio=SCAV, owner="old"), pod(2, 2, prio=BATCH - 1, owner="cheap"))
    cost = {"old": 100.0, "cheap": 1.0}.__getitem__
    assert sim.oracle_on_node(n, preemptor(2), cost, [1000])[1] == ["old"]


# -- tiny days, worked out by hand --------------------------------------------------------------
def tiny_day(order: str, *, saves: bool = False, **params: Any) -> Any:
    """Two 4-core nodes; one ScavengerJob of two 4-core pods (one per node) from t=0; at t=25
    an ordinary 4-core pod arrives and preempts one of them, so the whole gang goes."""
    p = sim.Params(nodes=2, node_cpu=4, warmup=0.0, hours=1.0, checkpoint=10.0, segment=10.0, restart=0.5, share=1.0,
                   **params)
    sj = sim.SJSpec(0, 0.0, 2, 4000, 8 * GI, 600.0, saves)
    job = sim.OrdinaryJob(25.0, 1, 4000, 8 * GI, 600.0, BATCH)
    return sim.Sim(p, order, 1, [job], [sj]).run()


def test_long_pods_lose_the_compute_since_the_last_inside_checkpoint():
    out = tiny_day("stock")
    # compute from 0.5; at 25: 24.5 minutes, checkpoints at 10 and 20 -> 4.5 min x 8 cores lost
    assert out.interruptions == 1 and out.preemptions == 1
    assert out.lost == pytest.approx(4.5 * 8)
    assert out.useful == pytest.approx(20 * 8)
    assert out.restart_boundary == 0


def test_segments_lose_only_the_current_segment():
    out = tiny_day("segments")
    # segments: compute 0.5-10.5, restart, 11-21, restart, 21.5-25 -> 3.5 min x 8 cores lost;
    # two boundaries cost 0.5 min x 8 cores each
    assert out.interruptions == 1
    assert out.lost == pytest.approx(3.5 * 8)
    assert out.restart_boundary == pytest.approx(2 * 0.5 * 8)
    assert out.useful == pytest.approx(20 * 8)


def test_a_workload_that_saves_on_sigterm_loses_nothing():
    out = tiny_day("stock", saves=True)
    assert out.interruptions == 1 and out.lost == 0 and out.useful == pytest.approx(24.5 * 8)


def test_tiers_rank_interrupted_scavengers_higher():
    p = sim.Params(tiers=3)
    s = sim.Sim(p, "tiers", 1, [], [])
    job = sim.SJ(sim.SJSpec(0, 0.0, 1, 1000, GI, 60.0, False))
    assert [s._priority(sim.SJ(job.spec, interrupted=k)) for k in (0, 1, 2, 5)] == [SCAV, SCAV + 1, SCAV + 2, SCAV + 2]
    assert sim.Sim(p, "segments", 1, [], [])._priority(sim.SJ(job.spec, interrupted=5)) == SCAV


def test_a_day_is_deterministic_for_a_seed():
    p = sim.Params(nodes=6, hours=3.0, warmup=1.0)
    first = sim.simulate(p, "segments", 7)
    again = sim.simulate(p, "segments", 7)
    other = sim.simulate(p, "segments", 8)
    assert (first.lost, first.interruptions, first.useful) == (again.lost, again.interruptions, again.useful)
    assert first.interruptions > 0  # the small day does preempt scavengers
    assert (first.lost, first.useful) != (other.lost, other.useful)


def test_a_sigterm_boundary_throws_away_the_compute_since_the_last_checkpoint():
    out = tiny_day("segments", boundary="sigterm")
    # SIGTERM 10 min after each start; compute starts 0.5 min in, so the checkpoint at 10 min of
    # compute never comes: 9.5 min x 8 cores thrown away at 10 and at 20, then 4.5 at 25
    assert out.boundary_lost == pytest.approx(2 * 9.5 * 8)
    assert out.useful == 0 and out.lost == pytest.approx(4.5 * 8)
    assert out.waste == pytest.approx(out.lost + out.boundary_lost + out.restart_boundary + out.restart_interrupted)


def test_guard_holds_gangs_with_enough_unsaved_work_and_never_stops_a_preemption():
    s = sim.Sim(sim.Params(guard=20.0), "guard", 1, [], [])
    g = sim.SJ(sim.SJSpec(0, 0.0, 2, 4000, 8 * GI, 600.0, False), pods=[pod(1, 4)], run_start=0.0)
    s.sjs = [g]
    assert s._budgets(2.0) == {}  # 1.5 min of compute x 8 cores = 12 core-min
    assert s._budgets(3.0) == {"sj0": 0}  # 2.5 x 8 = 20
    assert sim.Sim(sim.Params(), "segments", 1, [], [])._budgets(3.0) is None
    # a PDB is not a guarantee: with no other victim, the held gang goes all the same
    held, plain = tiny_day("guard"), tiny_day("segments")
    assert (held.lost, held.interruptions) == (plain.lost, plain.interruptions)


def _running(s: Any, *gangs: tuple[int, int, int, float, str]) -> None:
    """Running gangs (id, pods, cores per pod, start, node) bound on the sim's own nodes."""
    s.sjs = []
    for gid, pods, cpu, start, name in gangs:
        g = sim.SJ(sim.SJSpec(gid, 0.0, pods, cpu * 1000, cpu * GI, 600.0, False), run_start=start)
        g.pods = [pod(100 * gid + k, cpu, owner=g) for k in range(pods)]
        for q in g.pods:
            s.by_name[name].bind(q)
        s.sjs.append(g)


def test_guard_keep_holds_all_but_the_least_unsaved_share():
    s = sim.Sim(sim.Params(nodes=2, guard_keep=0.5), "guard", 1, [], [])
    # at 10.5: 2, 6 and 8 minutes of compute x 4 cores; the 4th (1 core, 9 min) is the cheapest
    _running(s, (0, 1, 4, 8.0, "node-000"), (1, 1, 4, 4.0, "node-000"), (2, 1, 4, 2.0, "node-001"),
             (3, 1, 1, 1.0, "node-001"))
    assert s._budgets(10.5) == {"sj1": 0, "sj2": 0}


def test_guard_node_leaves_each_node_its_cheapest_gangs_up_to_the_room():
    s = sim.Sim(sim.Params(nodes=2, node_cpu=8, guard_node=4), "guard", 1, [], [])
    # node-000: two 4-core gangs (2 and 6 min in): the cheaper one makes the 4 cores; node-001: a
    # 2-core gang (1 min in) and 6 cores free: nothing needs to be left
    _running(s, (0, 1, 4, 8.0, "node-000"), (1, 1, 4, 4.0, "node-000"), (2, 1, 2, 9.0, "node-001"))
    assert s._budgets(10.5) == {"sj1": 0, "sj2": 0}


def test_guard_tiers_class_by_the_gang_cores():
    s = sim.Sim(sim.Params(guard_tiers=True), "guard", 1, [], [])
    got = [s._priority(sim.SJ(sim.SJSpec(0, 0.0, pods, cpu * 1000, GI, 60.0, False)))
           for pods, cpu in ((1, 1), (2, 1), (1, 4), (2, 4), (4, 4), (4, 8))]
    assert got == [SCAV, SCAV, SCAV + 1, SCAV + 1, SCAV + 2, SCAV + 2]
    assert sim.Sim(sim.Params(), "guard", 1, [], [])._priority(sim.SJ(sim.SJSpec(0, 0.0, 4, 8000, GI, 60.0, False))) \
        == SCAV


def test_a_preemption_that_must_violate_a_budget_is_counted_with_its_loss():
    held = tiny_day("guard")  # the only gang, 8 cores, guarded from 2.5 min of compute: preempted at 25
    assert held.violating == 1 and held.violating_lost == pytest.approx(held.lost) and held.lost > 0
    assert tiny_day("segments").violating == 0


# -- issue 25: the reconciler's victims, declared checkpoints -----------------------------------
def test_a_declared_interval_runs_one_long_pod_that_checkpoints_from_its_start():
    out = tiny_day("declared")
    # no boundaries; checkpoints at 10 and 20 minutes after the start (the first holds 9.5 min of
    # compute after the 0.5 min restart): at 25, 19.5 min kept and 5 lost, x 8 cores
    assert out.restart_boundary == 0 and out.interruptions == 1
    assert out.useful == pytest.approx(19.5 * 8) and out.lost == pytest.approx(5 * 8)


def test_the_reconciler_picks_the_victims_of_the_work_it_releases():
    for order in ("victims", "combined"):
        assert tiny_day(order).reconciler_picks == 1  # the ordinary pod is batch: gated
    assert tiny_day("combined", gated="none").reconciler_picks == 0  # left to kube-scheduler
    assert tiny_day("guard").reconciler_picks == 0


def test_the_case_kube_scheduler_gets_wrong_node_b_gives_way():
    """Node A (node-000): one 4-core gang, 9 minutes of compute since its last checkpoint; node B
    (node-001): two 2-core gangs that checkpointed a minute and a half ago (segments: started then;
    long pods: their second checkpoint). A batch pod that needs a whole node: kube-scheduler takes
    A (one victim against two), and so does the guard when all three are held (one violation
    against two); the reconciler takes B (8 core-min lost by its count, against 40)."""
    chosen = {}
    for order in ("stock", "guard", "victims", "combined"):
        s = sim.Sim(sim.Params(nodes=2, node_cpu=4, guard=1.0), order, 1, [], [])
        b = 28.0 if s.segments else 8.0
        _running(s, (0, 1, 4, 20.0, "node-000"), (1, 1, 2, b, "node-001"), (2, 1, 2, b, "node-001"))
        if order == "guard":
            assert s._budgets(29.5) == {"sj0": 0, "sj1": 0, "sj2": 0}
        node = s._preempt(pod(999, 4, prio=BATCH), 29.5)
        chosen[order] = node.name
    assert chosen == {"stock": "node-000", "guard": "node-000", "victims": "node-001", "combined": "node-001"}


def test_json_marks_the_default_order_and_gives_each_ratio_a_range(capsys):
    assert sim.main(["--json", "--seeds", "2", "--nodes", "4", "--hours", "3", "--warmup", "1",
                     "--orders", "stock,guard,combined", "--restarts", "10"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["default"] == "combined" and set(doc["by_restart_s"]) == {"10", "30"}
    orders = doc["orders"]
    assert [o for o, r in orders.items() if r["default"]] == ["combined"]
    for r in orders.values():
        for key in ("lost_vs_stock", "waste_vs_stock", "useful_vs_stock"):
            if r[key] is not None:
                assert r[key]["min"] <= r[key]["mean"] <= r[key]["max"]
    assert orders["stock"]["waste_vs_stock"] == {"mean": 1.0, "min": 1.0, "max": 1.0}
    assert "| combined" in sim.markdown(doc)


def test_the_readme_tables_are_the_saved_json_rendered():
    """bench/README.md's issue-25 tables are ``--markdown`` of bench/results/scavenger_sim.json, so
    the README and a script read the same numbers; the default order is marked in both."""
    import json

    doc = json.loads((ROOT / "bench" / "results" / "scavenger_sim.json").read_text())
    assert [o for o, r in doc["orders"].items() if r["default"]] == [doc["default"]] == ["combined"]
    assert sim.markdown(doc) in (ROOT / "bench" / "README.md").read_text()


# -- the reconciler's victims, as the simulator searches them ------------------------------------
def test_gang_loss_counts_every_core_and_a_coming_drain_makes_room_cheap():
    from webhook.reconciler import scavenger, victims

    assert sim.gang_loss is victims.gang_loss is scavenger.gang_loss  # one rule for the reconciler's victims and the simulator
    assert sim.gang_loss(unsaved_s=100, cores=4, restart_s=30) == 4 * 130
    # drained in 5 min, checkpoints every 10, 2 min unsaved: it saves nothing before the drain (7 min
    # unsaved then): evicting it now costs nothing
    assert sim.gang_loss(unsaved_s=120, cores=4, restart_s=30, interval=600, drain_in=300) == 0
    # 8 min unsaved, drained in 5: it would checkpoint in 2 and lose 3 at the drain: now costs 8 - 3
    assert sim.gang_loss(unsaved_s=480, cores=2, restart_s=30, interval=600, drain_in=300) == 2 * 300
    # a segment (no interval): it loses more at the drain than now
    assert sim.gang_loss(unsaved_s=480, cores=2, restart_s=30, drain_in=300) == 0


def _holder(name: str, loss: float, **on: tuple[int, int, int]) -> Any:
    return sim.Holder(("demo", name), loss, on)


def test_choose_victims_takes_the_cheapest_whole_gangs_on_one_node():
    free = {"a": sim.Room("a", 0, 0, 100), "b": sim.Room("b", 0, 0, 100)}
    # node a: one 4-core gang with much unsaved work; node b: two 2-core gangs that just checkpointed
    holders = [_holder("dear", 400.0, a=(4000, 4 * GI, 1)),
               _holder("cheap1", 10.0, b=(2000, 2 * GI, 1)), _holder("cheap2", 12.0, b=(2000, 2 * GI, 1))]
    got = sim.choose_victims(sim.Need(1, 4000, 4 * GI), free, holders)
    assert got is not None and got.node == "b" and sorted(got.gangs) == [("demo", "cheap1"), ("demo", "cheap2")]
    assert got.loss == 22.0
    # a 2-core pod: one cheap gang is enough
    got = sim.choose_victims(sim.Need(1, 2000, 2 * GI), free, holders)
    assert got is not None and got.gangs == (("demo", "cheap1"),)
    # free room counts; a node that evicting scavengers cannot free enough on is skipped
    got = sim.choose_victims(sim.Need(1, 6000, 6 * GI), {**free, "a": sim.Room("a", 2000, 2 * GI, 100)}, holders)
    assert got is not None and got.node == "a" and got.gangs == (("demo", "dear"),)
    assert sim.choose_victims(sim.Need(1, 8000, 8 * GI), free, holders) is None
    got = sim.choose_victims(sim.Need(1, 1000, GI), {**free, "c": sim.Room("c", 1000, GI, 1)}, holders)
    assert got is not None and (got.node, got.gangs, got.loss) == ("c", (), 0.0)  # room without evicting
    # a gang spread over nodes counts its whole loss, but frees only its pods on the chosen node
    spread = [_holder("wide", 5.0, a=(1000, GI, 1), b=(1000, GI, 1)), _holder("mid", 8.0, b=(2000, 2 * GI, 1))]
    got = sim.choose_victims(sim.Need(1, 2000, 2 * GI), free, spread)
    assert got is not None and got.node == "b" and got.gangs == (("demo", "mid"),)


@pytest.mark.parametrize("seed", range(40))
def test_choose_victims_finds_the_least_loss_as_brute_force_does(seed: int):
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(rng.randint(1, 3))]
    free = {n: sim.Room(n, rng.choice((0, 1000, 2000)), rng.choice((0, GI, 2 * GI)), rng.choice((0, 5))) for n in nodes}
    holders = []
    for i in range(rng.randint(1, 7)):
        on = {n: (rng.choice((1000, 2000, 3000)), rng.choice((1, 2, 3)) * GI, 1)
              for n in rng.sample(nodes, rng.randint(1, len(nodes)))}
        holders.append(_holder(f"g{i}", float(rng.randint(1, 20)), **on))
    pod_need = sim.Need(1, rng.choice((2000, 4000, 6000)), rng.choice((2, 4)) * GI)
    best: tuple[float, int] | None = None
    for n in nodes:
        here = [h for h in holders if n in h.on]
        for k in range(len(here) + 1):
            for combo in itertools.combinations(here, k):
                room = free[n]
                cpu = room.cpu_m + sum(h.on[n][0] for h in combo)
                mem = room.mem_b + sum(h.on[n][1] for h in combo)
                slots = room.pods + sum(h.on[n][2] for h in combo)
                if cpu >= pod_need.cpu_m and mem >= pod_need.mem_b and slots >= 1:
                    key = (sum(h.loss for h in combo), k)
                    best = key if best is None or key < best else best
    got = sim.choose_victims(pod_need, free, holders)
    if best is None:
        assert got is None
    else:
        assert got is not None and (got.loss, len(got.gangs)) == best
