"""time-limit-extension: on UPDATE a limit may change within the admitted queue's maximum."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import fixture
from tests.unit.conftest import only
from tests.unit.rules.test_time_limit import ANN, cronjob, job, pod, run
from webhook.bundle import Bundle


@pytest.fixture(scope="module")
def ext(bundle: Bundle) -> Bundle:
    return only(bundle, "time-limit-extension")


# -- UPDATE: extensions --------------------------------------------------------------------
RUNNING = job({ANN: "1d"}, {ANN: "1d"}, queue="batch")


def _changed(**kw: Any) -> dict[str, Any]:
    new = copy.deepcopy(RUNNING)
    meta = new["metadata"]
    if "limit" in kw:
        if kw["limit"] is None:
            meta["annotations"].pop(ANN)
        else:
            meta["annotations"][ANN] = kw["limit"]
    if "queue" in kw:
        meta["labels"]["batchgate.io/queue"] = kw["queue"]
    if "label" in kw:
        meta["labels"]["team"] = kw["label"]
    return new


EXTENSIONS = [
    ("extend within the maximum", _changed(limit="6d"), None),
    ("extend to exactly the maximum", _changed(limit="7d"), None),
    ("shorten", _changed(limit="2h"), None),
    ("unrelated label", _changed(label="hpc"), None),
    ("over the maximum", _changed(limit="8d"),
     "8d exceeds the maximum of queue 'batch', which is 7d; the current limit is 1d"),
    ("malformed", _changed(limit="6 days"), "'6 days' is not a duration"),
    ("removed", _changed(limit=None), "removing batchgate.io/time-limit is not allowed (the current limit is 1d)"),
    ("relabelled to a roomier queue", _changed(limit="20d", queue="scavenger"), "queue 'batch', which is 7d"),
]


@pytest.mark.parametrize(("new", "message"), [c[1:] for c in EXTENSIONS], ids=[c[0] for c in EXTENSIONS])
def test_update_extensions(ext, new, message):
    d = run(ext, new, op="UPDATE", old=RUNNING)
    assert d.patch == []
    if message is None:
        assert d.allowed, d.message
    else:
        assert not d.allowed
        assert message in d.message, d.message


def test_extension_of_a_pod_stored_before_batchgate(ext):
    r = fixture("pod-update-label.mutate.json")["request"]
    old, new = r["oldObject"], copy.deepcopy(r["object"])
    assert run(ext, new, op="UPDATE", old=old).allowed  # the captured `kubectl label`
    new["metadata"].setdefault("annotations", {})[ANN] = "8d"
    d = run(ext, new, op="UPDATE", old=old)
    assert not d.allowed and "there was no limit" in d.message


def test_a_limit_past_the_bound_is_refused_on_update_whatever_the_queue(ext):
    """Issue 27: a bare Pod relabelled to a queue the bundle does not know, its limit then raised
    to a duration whose deadline no date can hold; the denial names the bound."""
    old = pod({ANN: "2h"}, queue="no-such-queue")
    new = pod({ANN: "99999999999999999999s"}, queue="no-such-queue")
    d = run(ext, new, op="UPDATE", old=old)
    assert not d.allowed
    assert "'99999999999999999999s' is longer than 3650d, the longest duration batchgate accepts" in d.message
    assert "the current limit is 2h" in d.message
    d = run(ext, _changed(limit="99999999999999999999s"), op="UPDATE", old=RUNNING)
    assert not d.allowed and "is longer than 3650d" in d.message


def test_extension_checks_cronjob_job_template(ext):
    old = cronjob({ANN: "3h"})
    new = cronjob({ANN: "9d"})
    d = run(ext, new, op="UPDATE", old=old)
    assert not d.allowed
    assert "in spec.jobTemplate.metadata; the current limit is 3h" in d.message


def test_extension_policy_ignores_create(ext):
    assert run(ext, pod({ANN: "99d"})).allowed


# -- extensions and maintenance windows ------------------------------------------------------
NEXT = '{"node":"n1","start":"2026-11-23T06:00:00Z","window":"fw"}'


def _recorded(limit: str, *, started: str | None = "2026-11-23T00:00:00Z", nxt: str | None = NEXT) -> dict[str, Any]:
    obj = _changed(limit=limit)
    ann = obj["metadata"]["annotations"]
    if started:
        ann["batchgate.io/started-at"] = started
    if nxt:
        ann["batchgate.io/next-maintenance"] = nxt
    return obj


@pytest.mark.parametrize(("old", "new", "denied"), [
    pytest.param(_recorded("1h"), _recorded("7h"), True, id="into-the-window"),
    pytest.param(_recorded("1h"), _recorded("6h"), False, id="ends-as-it-starts"),
    pytest.param(_recorded("8h"), _recorded("7h"), False, id="shorter-is-fine-even-past-it"),
    pytest.param(_recorded("1h", started=None), _recorded("7h", started=None), False, id="not-started-yet"),
    pytest.param(_recorded("1h", nxt=None), _recorded("7h", nxt=None), False, id="no-window"),
    pytest.param(_recorded("1h"), _recorded("7h", nxt=None), True, id="the-stored-record-counts-not-the-request"),
    pytest.param(_recorded("1h", nxt="garbage"), _recorded("7h", nxt="garbage"), False, id="unreadable-record"),
])
def test_extensions_that_run_into_a_window(ext: Bundle, old: dict[str, Any], new: dict[str, Any], denied: bool) -> None:
    d = run(ext, new, op="UPDATE", old=old)
    assert d.allowed is not denied, d.message
    if denied:
        assert "into maintenance window fw, which starts at 2026-11-23T06:00:00Z on node n1" in d.message
        assert "its limit can be at most 6h" in d.message


# -- the admission record decides the queue, not the label as it is now (issue 11) --------
def _admitted_job(queue: str, label: str) -> dict[str, Any]:
    """A Job admitted to ``queue`` (recorded in its containers' env) whose label now says ``label``:
    relabelled by an earlier UPDATE, e.g. while UPDATE validation was unreachable."""
    obj = job({ANN: "2h"}, {ANN: "2h"}, queue=label)
    for c in obj["spec"]["template"]["spec"]["containers"]:
        c["env"] = [{"name": "BATCHGATE_QUEUE", "value": queue}, {"name": "BATCHGATE_TIME_LIMIT", "value": "2h"}]
    return obj


@pytest.mark.parametrize("label", ["scavenger", "no-such-queue"])
def test_relabelled_earlier_then_raised_is_judged_by_the_recorded_queue(ext, label):
    old = _admitted_job("interactive", label)
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][ANN] = "20d"
    d = run(ext, new, op="UPDATE", old=old)
    assert not d.allowed and "exceeds the maximum of queue 'interactive', which is 12h" in d.message
    new["metadata"]["annotations"][ANN] = "12h"
    assert run(ext, new, op="UPDATE", old=old).allowed


def test_relabelling_a_recorded_workload_says_what_still_counts(ext):
    old = _admitted_job("interactive", "interactive")
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["batchgate.io/queue"] = "scavenger"
    d = run(ext, new, op="UPDATE", old=old)
    assert d.allowed
    assert any("was admitted to queue 'interactive'" in w for w in d.warnings), d.warnings
    assert run(ext, copy.deepcopy(old), op="UPDATE", old=old).warnings == []
