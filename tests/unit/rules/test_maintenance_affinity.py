"""maintenance-affinity: the node affinity that keeps long jobs off nodes with a window ahead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import checked_decide, only, settings_error, with_settings
from webhook.bundle import Bundle
from webhook.contract import COUNTDOWN_LABEL
from webhook.offline import Caller
from webhook.rules.maintenance_affinity import terms_for

NONE = {"key": COUNTDOWN_LABEL, "operator": "DoesNotExist"}


def gt(n: int) -> dict[str, Any]:
    return {"key": COUNTDOWN_LABEL, "operator": "Gt", "values": [str(n)]}


def terms_of(obj: dict[str, Any], spec_path: tuple[str, ...] = ("spec",)) -> Any:
    spec: Any = obj
    for k in spec_path:
        spec = spec[k]
    return spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def user_pod(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
             affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if affinity:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "demo", "annotations": annotations or {}, "labels": labels or {}},
            "spec": spec}


E_A = {"key": "a", "operator": "In", "values": ["1"]}
E_B = {"key": "b", "operator": "Exists"}
F_N = {"key": "metadata.name", "operator": "In", "values": ["n1"]}


@pytest.mark.parametrize(("terms", "expected"), [
    pytest.param([], [{"matchExpressions": [NONE]}, {"matchExpressions": [gt(9)]}], id="none"),
    pytest.param([{"matchExpressions": [E_A]}],
                 [{"matchExpressions": [E_A, NONE]}, {"matchExpressions": [E_A, gt(9)]}], id="one-term-anded"),
    pytest.param([{"matchExpressions": [E_A]}, {"matchExpressions": [E_B], "matchFields": [F_N]}],
                 [{"matchExpressions": [E_A, NONE]}, {"matchExpressions": [E_A, gt(9)]},
                  {"matchExpressions": [E_B, NONE], "matchFields": [F_N]},
                  {"matchExpressions": [E_B, gt(9)], "matchFields": [F_N]}], id="each-ored-term-doubled"),
    pytest.param([{"matchFields": [F_N]}],
                 [{"matchFields": [F_N], "matchExpressions": [NONE]},
                  {"matchFields": [F_N], "matchExpressions": [gt(9)]}], id="fields-only"),
    pytest.param([{"matchExpressions": [E_A, gt(100000)]}, {"matchExpressions": [E_A, NONE]}],
                 [{"matchExpressions": [E_A, NONE]}, {"matchExpressions": [E_A, gt(9)]}], id="forged-or-old-dropped"),
])
def test_terms(terms: list[Any], expected: list[Any]) -> None:
    assert terms_for(terms, 9) == expected
    assert terms_for(terms_for(terms, 9), 9) == expected, "idempotent"
    assert terms_for(terms_for(terms, 3), 9) == expected, "a new limit replaces the old operand"


def test_the_whole_bundle_defaults_the_limit_then_builds_on_it(bundle: Bundle) -> None:
    d = checked_decide(bundle, user_pod(labels={"batchgate.io/queue": "interactive"}), Caller(username="alice"))
    assert d.allowed
    assert d.obj is not None and d.obj["metadata"]["annotations"]["batchgate.io/time-limit"] == "2h"
    assert terms_of(d.obj) == [{"matchExpressions": [NONE]}, {"matchExpressions": [gt(124)]}]  # 2h + 5m


def test_the_users_node_affinity_is_kept_and_anded(bundle: Bundle) -> None:
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [E_A]}]}}}
    d = checked_decide(bundle, user_pod({"batchgate.io/time-limit": "1h"}, affinity=aff), Caller(username="alice"))
    assert d.obj is not None
    assert terms_of(d.obj) == [{"matchExpressions": [E_A, NONE]}, {"matchExpressions": [E_A, gt(64)]}]


def test_a_job_template_and_a_cronjob_template(bundle: Bundle) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "demo"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x"}]}}}}
    d = checked_decide(bundle, job, Caller(username="alice"))
    assert d.obj is not None
    assert terms_of(d.obj, ("spec", "template", "spec"))[1] == {"matchExpressions": [gt(24 * 60 + 4)]}
    cron = {"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "demo"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "m", "image": "x"}]}}}}}}
    d = checked_decide(bundle, cron, Caller(username="alice"))
    assert d.obj is not None
    assert terms_of(d.obj, ("spec", "jobTemplate", "spec", "template", "spec"))[0] == {"matchExpressions": [NONE]}


def test_malformed_limits_are_left_to_the_time_limit_policy(bundle: Bundle) -> None:
    d = checked_decide(only(bundle, "maintenance-affinity"), user_pod({"batchgate.io/time-limit": "soon"}),
                       Caller(username="alice"))
    assert d.patch == []


def test_exempt_queues_and_margin(tmp_path: Path) -> None:
    b = with_settings(tmp_path, "maintenance-affinity", {"margin": "1m", "exemptQueues": ["scavenger"]})
    d = checked_decide(b, user_pod({"batchgate.io/time-limit": "1h"}), Caller(username="alice"))
    assert d.obj is not None and terms_of(d.obj)[1] == {"matchExpressions": [gt(60)]}
    d = checked_decide(b, user_pod({"batchgate.io/time-limit": "1h"}, labels={"batchgate.io/queue": "scavenger"}),
                       Caller(username="alice"))
    assert d.patch == []


def test_bad_settings_name_the_line(tmp_path: Path) -> None:
    e = settings_error(tmp_path, "maintenance-affinity", "    exemptQueues: [nope]\n")
    assert "policy.yaml:8" in str(e) and "unknown queue" in str(e)
