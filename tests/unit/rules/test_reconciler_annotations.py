"""reconciler-annotations: only the reconciler (its `writers`) and admins write the state the
reconciler keeps on objects (started-at, deadline, warned-for)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import decided, load_sample, settings_error, with_settings
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review

POLICY = "reconciler-annotations"
RECONCILER = "system:serviceaccount:batchgate-system:batchgate-reconciler"


def run(b: Bundle, obj: dict[str, Any], old: dict[str, Any] | None, *, user: str = "alice") -> Decision:
    caller = Caller(operation="UPDATE" if old is not None else "CREATE", username=user, namespace="demo")
    d = decided(synthetic_review(obj, caller, old_object=old), b, phase="check")
    assert d.errors == [] and d.patch == []
    return d


@pytest.fixture
def shipped(tmp_path: Path) -> Bundle:
    return with_settings(tmp_path, POLICY, None)


def test_each_annotation_is_guarded(shipped: Bundle) -> None:
    running = load_sample(POLICY, "job-running.yaml")
    for key in ("batchgate.io/started-at", "batchgate.io/deadline", "batchgate.io/warned-for"):
        forged = copy.deepcopy(running)
        forged["metadata"]["annotations"][key] = "2099-01-01T00:00:00Z"
        d = run(shipped, forged, running)
        assert not d.allowed and f"{key} is written by the batchgate reconciler only" in d.message, key
        assert run(shipped, forged, running, user=RECONCILER).allowed


def test_writers_is_a_setting(tmp_path: Path) -> None:
    running = load_sample(POLICY, "job-running.yaml")
    forged = load_sample(POLICY, "job-forged-start.yaml")
    b = with_settings(tmp_path, POLICY, {"writers": {"users": ["timekeeper"]}})
    assert run(b, forged, running, user="timekeeper").allowed
    assert not run(b, forged, running, user=RECONCILER).allowed  # the default writers are replaced


def test_objects_without_metadata_or_annotations_pass(shipped: Bundle) -> None:
    bare = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    assert run(shipped, bare, copy.deepcopy(bare)).allowed
    assert run(shipped, {**bare, "metadata": {"name": "j", "annotations": None}}, bare).allowed


def test_bad_settings_name_file_line_and_field(tmp_path: Path) -> None:
    e = settings_error(tmp_path, POLICY, "    writers: [alice]\n")
    assert f"{POLICY}/policy.yaml:8: spec.settings.writers: expected a mapping" in str(e), e
