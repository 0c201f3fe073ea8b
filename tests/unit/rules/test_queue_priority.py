"""queue-priority: every workload in a queue, with its class and the integer priority of that class."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES, fixture
from tests.unit.conftest import checked_decide, decided, load_sample, only, sealed, settings_error
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller
from webhook.rules import load_bundle

ALICE = {"user": "alice", "groups": ("devs", "system:authenticated")}


@pytest.fixture
def qp(bundle: Bundle) -> Bundle:
    return only(bundle, "queue-priority")


def make_bundle(tmp_path: Path, spec: Callable[[dict[str, Any]], None]) -> Bundle:
    root = tmp_path / "bundle"
    (root / "queue-priority").mkdir(parents=True)
    doc = yaml.safe_load((POLICIES / "bundle.yaml").read_text())
    spec(doc["spec"])
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (root / "queue-priority" / "policy.yaml").write_text((POLICIES / "queue-priority" / "policy.yaml").read_text())
    return load_bundle(root)


def namespaces(spec: dict[str, Any]) -> None:
    spec["namespaces"] = [
        {"names": ["notebooks", "jupyter-*"], "defaultQueue": "interactive"},
        {"names": ["overnight"], "defaultQueue": "scavenger", "allowedQueues": ["scavenger"]},
    ]


def run(bundle: Bundle, obj: dict[str, Any], *, user: str = "alice",
        groups: tuple[str, ...] = ("devs", "system:authenticated"), namespace: str = "demo") -> Decision:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return checked_decide(bundle, obj, Caller(username=user, groups=groups, namespace=namespace))


def sample(name: str) -> dict[str, Any]:
    return load_sample("queue-priority", name)


def queued(obj: dict[str, Any], queue: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("labels", {})["batchgate.io/queue"] = queue
    return obj


def test_every_queue_gives_its_class_priority_and_preemption_policy(qp):
    for queue in qp.queues.values():
        pc = qp.priority_classes[queue.priority_class]
        d = run(qp, queued(sample("pod-no-queue.yaml"), queue.name))
        spec = d.obj["spec"]
        assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
            pc.name, pc.value, pc.preemption_policy), queue.name
        assert d.warnings == [], "an explicit queue needs no warning"


@pytest.mark.parametrize(("sample_name", "path"), [
    ("job.yaml", ("spec", "template")),
    ("cronjob-scavenger.yaml", ("spec", "jobTemplate", "spec", "template")),
])
def test_templates_get_label_and_class_but_no_integer(qp, sample_name, path):
    d = run(qp, queued(sample(sample_name), "interactive"))
    template = d.obj
    for key in path:
        template = template[key]
    assert template["metadata"]["labels"]["batchgate.io/queue"] == "interactive"
    assert template["spec"]["priorityClassName"] == "batchgate-interactive"
    assert "priority" not in template["spec"], "the Priority plugin resolves it when the Pod is created"


def test_real_job_fixture(qp):
    d = decided(fixture("job-create.mutate.json"), qp, phase="check")
    assert d.allowed
    assert d.obj["spec"]["template"]["spec"]["priorityClassName"] == "batchgate-batch"
    assert d.obj["metadata"]["labels"]["batchgate.io/queue"] == "batch"


def test_namespace_default_queue(tmp_path):
    b = make_bundle(tmp_path, namespaces)
    d = run(b, sample("pod-no-queue.yaml"), namespace="jupyter-alice")
    assert d.obj["metadata"]["labels"]["batchgate.io/queue"] == "interactive"
    assert d.obj["spec"]["priority"] == 10000
    assert d.warnings == ["queue-priority: no batchgate.io/queue label; using queue 'interactive' "
                          "(priority class batchgate-interactive, priority 10000)"]
    d = run(b, sample("pod-no-queue.yaml"), namespace="demo")
    assert d.obj["metadata"]["labels"]["batchgate.io/queue"] == "batch", "the bundle-wide default elsewhere"


def test_unknown_queue_lists_the_queues(qp):
    d = run(qp, queued(sample("pod-no-queue.yaml"), "gpu"))
    assert not d.allowed
    assert d.message.endswith("one of: interactive, batch, scavenger")


@pytest.mark.parametrize(("user", "groups", "allowed"), [
    pytest.param("alice", ("devs", "system:authenticated"), False, id="alice"),
    pytest.param("carol", ("batchgate:admins", "system:authenticated"), True, id="batchgate-admins"),
    pytest.param("admin", ("system:masters",), True, id="system-masters"),
])
def test_admin_only_class(qp, user, groups, allowed):
    d = run(qp, sample("pod-urgent.yaml"), user=user, groups=groups)
    assert d.allowed is allowed
    if allowed:
        assert d.obj["spec"]["priorityClassName"] == "batchgate-urgent"
        assert d.obj["spec"]["priority"] == 100000, "the API server's resolution is kept"
    else:
        assert "'batchgate-urgent' is reserved for admins" in d.message


def test_real_fixture_with_a_foreign_class(qp):
    """prio-pod names class "scavenger" (not batchgate's): fine for the admin who sent it, not for alice."""
    body = fixture("pod-create-user-priorityclass-shm-initcontainer.mutate.json")
    assert decided(body, qp, phase="check").allowed
    body["request"]["userInfo"] = {"username": "alice", "groups": ["devs", "system:authenticated"]}
    d = decided(body, qp, phase="check")
    assert not d.allowed and "'scavenger' is not one batchgate manages" in d.message


def test_controller_pods_are_not_rechecked(qp):
    obj = sample("pod-from-job.yaml")
    obj["spec"]["priorityClassName"], obj["spec"]["priority"] = "batchgate-urgent", 100000
    d = run(qp, sealed(obj), user="system:kube-controller-manager", groups=("system:authenticated",))
    assert d.allowed and d.patch == []
    d = run(qp, obj, user="system:kube-controller-manager", groups=("system:authenticated",))
    assert "'batchgate-urgent' is reserved for admins" in d.message and "no valid batchgate.io/admitted" in d.message


def test_bad_settings_name_file_line_field(tmp_path):
    err = settings_error(tmp_path, "queue-priority", "    defaultQueue: batch\n")
    assert err.file.endswith("queue-priority/policy.yaml")
    assert (err.line, err.field) == (8, "spec.settings.defaultQueue")
    assert "unknown field" in err.message
