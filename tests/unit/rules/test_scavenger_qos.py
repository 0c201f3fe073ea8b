"""scavenger-qos: Guaranteed QoS in scavenger queues."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture
from tests.unit.conftest import decided, only, settings_error
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review
from webhook.rules.scavenger_qos import container_problems


@pytest.fixture(scope="module")
def qos(bundle: Bundle) -> Bundle:
    return only(bundle, "scavenger-qos")


def run(b: Bundle, obj: dict[str, Any], *, op: str = "CREATE", old: dict[str, Any] | None = None,
        user: str = "alice") -> Decision:
    d = decided(synthetic_review(obj, Caller(operation=op, username=user, namespace="demo"), old_object=old),
               b, phase="check")
    assert not d.errors, d.errors
    assert d.patch == []  # validation only
    return d


# -- scavenger-qos ------------------------------------------------------------------------
def res(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if limits is not None:
        out["limits"] = limits
    if requests is not None:
        out["requests"] = requests
    return out


G = res({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})


def pod(resources: dict[str, Any], *, init: dict[str, Any] | None = None, queue: str = "scavenger") -> dict[str, Any]:
    obj = copy.deepcopy(fixture("pod-create-by-user.mutate.json")["request"]["object"])
    obj["metadata"].pop("managedFields", None)
    obj["metadata"]["labels"]["batchgate.io/queue"] = queue
    obj["spec"]["containers"][0]["resources"] = resources
    if init is not None:
        obj["spec"]["initContainers"] = [{"name": "stage-in", "image": "busybox", "resources": init}]
    return obj


def job(resources: dict[str, Any], queue: str = "scavenger") -> dict[str, Any]:
    obj = copy.deepcopy(fixture("job-create.mutate.json")["request"]["object"])
    obj["metadata"].pop("managedFields")
    obj["metadata"]["labels"] = {"batchgate.io/queue": queue}
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    return obj


QOS = [
    ("guaranteed", pod(G), None),
    ("limits only (as a template would be)", pod(res({"cpu": "1", "memory": "1Gi"})), None),
    ("equal in other units", pod(res({"cpu": "1", "memory": "1Gi"}, {"cpu": "1000m", "memory": "1024Mi"})), None),
    ("extra resources do not matter", pod(res({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                                              {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})), None),
    ("burstable cpu", pod(res({"cpu": "1", "memory": "1Gi"}, {"cpu": "500m", "memory": "1Gi"})),
     "container 'c' (spec.containers[0]): cpu request 500m != limit 1"),
    ("no memory limit", pod(res({"cpu": "1"}, {"cpu": "1"})), "container 'c' (spec.containers[0]): no memory limit"),
    ("requests only", pod(res(None, {"cpu": "2", "memory": "4Gi"})),
     "no cpu limit (set it to the request, 2), no memory limit (set it to the request, 4Gi)"),
    ("best effort", pod({}), "container 'c' (spec.containers[0]): no cpu limit, no memory limit"),
    ("init container too", pod(G, init={}), "initContainer 'stage-in' (spec.initContainers[0]): no cpu limit"),
    ("job template", job(res({"cpu": "1", "memory": "2Gi"}, {"cpu": "1", "memory": "1Gi"})),
     "container 'w' (spec.template.spec.containers[0]): memory request 1Gi != limit 2Gi"),
    ("job template limits only", job(res({"cpu": "1", "memory": "1Gi"})), None),
    ("batch queue is not checked", pod({}, queue="batch"), None),
    ("interactive queue is not checked", job({}, queue="interactive"), None),
]


@pytest.mark.parametrize(("obj", "message"), [c[1:] for c in QOS], ids=[c[0] for c in QOS])
def test_scavenger_qos(qos, obj, message):
    d = run(qos, obj)
    if message is None:
        assert d.allowed, d.message
    else:
        assert not d.allowed
        assert "queue 'scavenger' runs scavengers, which must be Guaranteed QoS" in d.message
        assert message in d.message, d.message


def test_every_offender_is_named_in_one_denial(qos):
    d = run(qos, pod(res({"cpu": "1"}), init={}))
    assert len(d.denials) == 1
    assert "initContainer 'stage-in'" in d.message and "container 'c'" in d.message


def test_pod_as_the_api_server_defaults_it_is_guaranteed(qos):
    # What the API server does before admission (SetDefaults_Pod): a missing request becomes the limit.
    defaulted = pod(res({"cpu": "2", "memory": "2Gi"}, {"cpu": "2", "memory": "2Gi"}))
    assert run(qos, defaulted).allowed


@pytest.mark.parametrize(("container", "want"), [
    ({"resources": G}, []),
    ({}, ["no cpu limit", "no memory limit"]),
    ({"resources": res({"cpu": "x", "memory": "1Gi"}, {"cpu": "x", "memory": "1Gi"})}, ["cpu request x != limit x"]),
], ids=["guaranteed", "nothing", "unparseable"])
def test_container_problems(container, want):
    assert container_problems(container) == want


def test_settings_are_rejected_with_file_line_and_field(tmp_path: Path):
    e = settings_error(tmp_path, "scavenger-qos", "    share: 70\n")
    assert str(e).endswith("scavenger-qos/policy.yaml:8: spec.settings.share: unknown field; expected one of: "), e
