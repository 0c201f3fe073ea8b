"""shm: a memory-backed /dev/shm in every container that has none, sized by the settings."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FIXTURES, POLICIES, fixture
from tests.unit.conftest import checked_decide, decided, only, settings_error, with_settings
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller

SAMPLES = POLICIES / "shm" / "samples"


@pytest.fixture
def shm(bundle: Bundle) -> Bundle:
    return only(bundle, "shm")


def make_bundle(tmp_path: Path, settings: dict[str, Any]) -> Bundle:
    return with_settings(tmp_path, "shm", settings)


def run(bundle: Bundle, obj: dict[str, Any]) -> Decision:
    return checked_decide(bundle, obj, Caller(username="alice", namespace="demo"))


def pod(memory_limits: list[str | None], *, init: list[str | None] = ()) -> dict[str, Any]:
    obj = yaml.safe_load((SAMPLES / "pod-no-memory-limit.yaml").read_text())
    template = obj["spec"]["containers"][0]

    def c(name: str, limit: str | None) -> dict[str, Any]:
        out = copy.deepcopy(template)
        out["name"] = name
        out["resources"] = {"limits": {"memory": limit}, "requests": {"memory": limit}} if limit else {}
        return out

    obj["spec"]["containers"] = [c(f"c{i}", m) for i, m in enumerate(memory_limits)]
    if init:
        obj["spec"]["initContainers"] = [c(f"i{i}", m) for i, m in enumerate(init)]
    return obj


def shm_volume(obj: dict[str, Any]) -> dict[str, Any]:
    (volume,) = [v for v in obj["spec"]["volumes"] if v["name"].startswith("batchgate-shm")]
    return volume  # type: ignore[no-any-return]


@pytest.mark.parametrize(("limits", "init", "size"), [
    pytest.param(["4Gi"], [], "2Gi", id="half"),
    pytest.param(["3Gi", "1Gi"], [], "2Gi", id="sum-of-containers"),
    pytest.param(["1536Mi"], [], "768Mi", id="mebibytes"),
    pytest.param(["64Mi"], [], "64Mi", id="min"),
    pytest.param(["100Gi"], [], "8Gi", id="max"),
    pytest.param([None], [], "1Gi", id="no-limit-fixed"),
    pytest.param(["2Gi", None], [], "1Gi", id="partial-limit-fixed"),
    pytest.param(["2Gi"], ["64Gi"], "1Gi", id="init-limits-not-counted"),
    pytest.param(["1000M"], [], "500000000", id="decimal-units-in-bytes"),
])
def test_size_from_the_shipped_settings(shm, limits, init, size):
    d = run(shm, pod(limits, init=init))
    assert shm_volume(d.obj) == {"name": "batchgate-shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}
    for key in ("initContainers", "containers"):
        for c in d.obj["spec"].get(key) or []:
            assert {"name": "batchgate-shm", "mountPath": "/dev/shm"} in c["volumeMounts"], c["name"]


@pytest.mark.parametrize(("settings", "size"), [
    pytest.param({"size": "2Gi"}, "2Gi", id="fixed-only"),
    pytest.param({}, None, id="no-size-at-all"),
    pytest.param({"fractionOfMemoryLimit": 0.25}, "1Gi", id="fraction-only"),
])
def test_other_settings(tmp_path, settings, size):
    d = run(make_bundle(tmp_path, settings), pod(["4Gi"]))
    want: dict[str, Any] = {"medium": "Memory"}
    if size:
        want["sizeLimit"] = size
    assert shm_volume(d.obj)["emptyDir"] == want


def test_custom_volume_name_and_taken_names(tmp_path):
    b = make_bundle(tmp_path, {"volumeName": "dshm", "size": "1Gi"})
    obj = pod(["2Gi"])
    obj["spec"]["volumes"] += [{"name": "dshm", "emptyDir": {}}, {"name": "dshm-1", "emptyDir": {}}]
    d = run(b, obj)
    assert [v["name"] for v in d.obj["spec"]["volumes"]][-1] == "dshm-2"
    assert d.obj["spec"]["containers"][0]["volumeMounts"][-1] == {"name": "dshm-2", "mountPath": "/dev/shm"}


@pytest.mark.parametrize("mount_path", ["/dev/shm", "/dev/shm/"])
def test_a_users_own_dev_shm_is_left_alone(shm, mount_path):
    obj = pod(["2Gi", "2Gi"])
    obj["spec"]["volumes"].append({"name": "shm", "emptyDir": {"medium": "Memory"}})
    obj["spec"]["containers"][1]["volumeMounts"].insert(0, {"name": "shm", "mountPath": mount_path})
    d = run(shm, obj)
    assert d.obj["spec"]["containers"][1]["volumeMounts"] == obj["spec"]["containers"][1]["volumeMounts"]
    assert {"name": "batchgate-shm", "mountPath": "/dev/shm"} in d.obj["spec"]["containers"][0]["volumeMounts"]
    names = [v["name"] for v in d.obj["spec"]["volumes"]]
    assert len(names) == len(set(names))


def test_real_fixture_with_a_user_volume_named_shm(shm):
    body = fixture("pod-create-user-priorityclass-shm-initcontainer.mutate.json")
    token = body["request"]["object"]["spec"]["volumes"][1]["name"]  # what the ServiceAccount plugin added
    d = decided(body, shm, phase="mutate")
    spec = d.obj["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["shm", token, "batchgate-shm"]
    assert spec["volumes"][0] == {"name": "shm", "emptyDir": {"medium": "Memory"}}
    mounts = {c["name"]: [m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
              for c in spec["initContainers"] + spec["containers"]}
    assert mounts == {"init": ["batchgate-shm"], "a": ["batchgate-shm"], "b": ["shm"]}


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*create*.mutate.json")))
def test_every_real_create_gets_dev_shm_everywhere(shm, name):
    d = decided(fixture(name), shm, phase="mutate")
    obj = d.obj
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        assert any(m["mountPath"].rstrip("/") == "/dev/shm" for m in c["volumeMounts"]), (name, c["name"])


@pytest.mark.parametrize(("settings", "line", "field", "text"), [
    pytest.param("    size: lots\n", 8, "spec.settings.size", "expected a quantity like 1Gi", id="size"),
    pytest.param("    fractionOfMemoryLimit: 1.5\n", 8, "spec.settings.fractionOfMemoryLimit", "(0, 1]",
                 id="fraction"),
    pytest.param("    volumeName: Dev_SHM\n", 8, "spec.settings.volumeName", "a DNS label", id="volume-name"),
    pytest.param("    size: 1Gi\n    maxSize: [8Gi]\n", 9, "spec.settings.maxSize", "expected a quantity", id="max"),
    pytest.param("    medium: Memory\n", 8, "spec.settings.medium", "unknown field", id="unknown"),
])
def test_bad_settings_name_file_line_field(tmp_path, settings, line, field, text):
    err = settings_error(tmp_path, "shm", settings)
    assert err.file.endswith("shm/policy.yaml")
    assert (err.line, err.field) == (line, field)
    assert text in err.message


@pytest.mark.parametrize(("value", "named"), [
    pytest.param("abc", "spec.resources is not an object", id="pod-resources-string"),
    pytest.param({"limits": 1.5}, "spec.resources.limits is not an object", id="pod-limits-float"),
])
def test_pod_resources_that_are_not_objects_are_denied_naming_them(shm, value, named):
    """Found by the 100,000-case HTTPS fuzz (issue 27): a string or a number where the pod-level
    resources or limits should be made the policy raise (a container's are the engine's check);
    now it denies, naming the field."""
    obj = pod(["4Gi"])
    obj["spec"]["resources"] = value
    d = run(shm, obj)
    assert not d.allowed
    assert f"cannot size /dev/shm from the containers' memory limits: {named}" in d.message
