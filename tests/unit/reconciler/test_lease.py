"""Leader election: the pure decision (table) and two electors sharing one Lease (fake clocks)."""

from __future__ import annotations

import pytest
from fakeapi import FakeApi

from webhook.reconciler.lease import LeaderElector, LeaseRecord, lease_step
from webhook.reconciler.settings import Settings


def rec(holder: str, duration: float = 15, renew: str = "t1") -> LeaseRecord:
    return LeaseRecord(holder=holder, duration=duration, acquire_time="t0", renew_time=renew, transitions=0,
                       resource_version="1")


@pytest.mark.parametrize(("record", "observed_at", "now", "want"), [
    pytest.param(None, 0, 0, "create", id="no lease yet: create it"),
    pytest.param(rec("me"), 0, 100, "renew", id="ours: renew, however late"),
    pytest.param(rec("other"), 10, 20, "wait", id="theirs, seen changing 10s ago: wait"),
    pytest.param(rec("other"), 10, 24.9, "wait", id="theirs, just under the duration: wait"),
    pytest.param(rec("other"), 10, 25, "acquire", id="theirs, unchanged for the whole duration: take over"),
    pytest.param(rec(""), 10, 10, "acquire", id="released (empty holder): take over at once"),
    pytest.param(rec("other", duration=60), 0, 30, "wait", id="their own lease duration counts"),
])
def test_lease_step(record: LeaseRecord | None, observed_at: float, now: float, want: str) -> None:
    assert lease_step(record, identity="me", observed_at=observed_at, now=now) == want


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(api: FakeApi, identity: str, clock: Clock) -> LeaderElector:
    s = Settings(identity=identity, lease_name="lease", lease_namespace="ns", lease_duration=15,
                 renew_deadline=10, retry_period=2)
    return LeaderElector(api, s, clock=clock, wall=lambda: 1_714_600_000.0 + clock.t)


def test_one_leader_takeover_after_expiry_and_step_down_without_renewal() -> None:
    api, clock = FakeApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_once() is True
    assert b.try_once() is False
    lease = api.objects[("leases", "ns", "lease")]
    assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 15
    # a keeps renewing: b never takes over
    for _ in range(20):
        clock.t += 2
        assert a.try_once() is True
        assert b.try_once() is False
    # a stops renewing (hung, partitioned): it steps down after renew_deadline ...
    clock.t += 9.9
    assert a.is_leader() is True
    clock.t += 0.2
    assert a.is_leader() is False
    # ... and b, which saw the lease unchanged, takes over only after lease_duration.
    assert b.try_once() is False
    clock.t += 5
    assert b.try_once() is True
    assert api.objects[("leases", "ns", "lease")]["spec"]["leaseTransitions"] == 1
    # a comes back: it sees b renewing and stays a follower.
    clock.t += 2
    assert b.try_once() is True
    assert a.try_once() is False


def test_release_hands_over_at_once() -> None:
    api, clock = FakeApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_once() and not b.try_once()
    a.release()
    assert not a.is_leader()
    assert api.objects[("leases", "ns", "lease")]["spec"]["holderIdentity"] == ""
    clock.t += 1
    assert b.try_once() is True


def test_racing_candidates_one_wins() -> None:
    """Both read the free lease; the second write carries a stale resourceVersion and loses."""
    api, clock = FakeApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_once()
    a.release()
    # b and c both saw the released lease; a write by one makes the other's stale.
    c = elector(api, "c", clock)
    lease = api.get(*_lease())
    real_get = api.get
    api.get = lambda *args: lease  # type: ignore[method-assign]  # both decide on the same read
    try:
        assert b.try_once() is True
        assert c.try_once() is False
    finally:
        api.get = real_get  # type: ignore[method-assign]
    assert api.objects[("leases", "ns", "lease")]["spec"]["holderIdentity"] == "b"


def _lease() -> tuple[object, str, str]:
    from webhook.reconciler.model import LEASE

    return (LEASE, "ns", "lease")
