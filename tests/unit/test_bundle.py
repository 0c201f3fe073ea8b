"""Bundle loading: the shipped bundle loads; every kind of mistake names file, line and field."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import POLICIES
from webhook.bundle import load_bundle
from webhook.yamlsrc import BundleError


def test_shipped_bundle_loads(bundle):
    assert set(bundle.queues) >= {"interactive", "batch", "scavenger"}
    assert bundle.default_queue == "batch"
    assert "kube-system" in bundle.excluded_namespaces
    assert all(p.rule is not None for p in bundle.policies)


def test_every_ordinary_class_ranks_above_every_scavenger_class(bundle):
    pcs = bundle.priority_classes
    ordinary = [pcs[q.priority_class].value for q in bundle.queues.values() if not q.scavenger]
    scav = [pcs[q.priority_class] for q in bundle.queues.values() if q.scavenger]
    assert scav and all(s.preemption_policy == "Never" for s in scav)
    assert min(ordinary) > max(s.value for s in scav)


@pytest.fixture
def tmp_bundle(tmp_path: Path) -> Path:
    root = tmp_path / "policies"
    root.mkdir()
    shutil.copy(POLICIES / "bundle.yaml", root / "bundle.yaml")
    (root / "shm").mkdir()
    shutil.copy(POLICIES / "shm" / "policy.yaml", root / "shm" / "policy.yaml")
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"test setup: {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


BUNDLE_ERRORS = [
    ("unknown-field", "  defaultQueue: batch", "  defaultQueue: batch\n  defaultQeue: batch", "defaultQeue",
     r"spec\.defaultQeue: unknown field"),
    ("bad-duration", "default: 2h, max: 12h", "default: 2 hours, max: 12h", "2 hours",
     r"spec\.queues\[0\]\.timeLimit\.default: expected a duration"),
    ("default-over-max", "default: 2h, max: 12h", "default: 20h, max: 12h", "20h",
     r"timeLimit\.default: the default time limit exceeds the maximum"),
    ("unknown-class", "priorityClass: batchgate-batch", "priorityClass: batchgate-bach", "batchgate-bach",
     r"spec\.queues\[1\]\.priorityClass: unknown priority class"),
    ("scavenger-preempts", "value: -1000\n      preemptionPolicy: Never", "value: -1000\n      preemptionPolicy: PreemptLowerPriority",
     "priorityClass: batchgate-scavenger", r"preemptionPolicy must be Never"),
    ("scavenger-outranks", "value: -1000", "value: 5000", "priorityClass: batchgate-scavenger",
     r"must rank below ordinary class"),
    ("value-not-int", "value: 1000\n", "value: high\n", "value: high", r"value: expected an integer"),
    ("missing-default-queue", "defaultQueue: batch", "defaultQueue: nightly", "defaultQueue: nightly",
     r"default queue 'nightly' is not declared"),
    ("invalid-yaml", "  queues:", "  queues: [", None, r"invalid YAML"),
]


@pytest.mark.parametrize(("old", "new", "line_needle", "pattern"), [c[1:] for c in BUNDLE_ERRORS],
                         ids=[c[0] for c in BUNDLE_ERRORS])
def test_bundle_yaml_errors_name_file_line_field(tmp_bundle, old, new, line_needle, pattern):
    f = tmp_bundle / "bundle.yaml"
    _edit(f, old, new)
    with pytest.raises(BundleError) as e:
        load_bundle(tmp_bundle)
    msg = str(e.value)
    assert msg.startswith(str(f) + ":"), msg
    assert re.search(pattern, msg), msg
    if line_needle:
        assert e.value.line == _line_of(f, line_needle), msg


POLICY_ERRORS = [
    ("unknown-type", "type: shm", "type: shmem", r"spec\.type: unknown policy type"),
    ("bad-quantity", "size: 1Gi", "size: lots", r"spec\.settings\.size: expected a quantity"),
    ("bad-fraction", "fractionOfMemoryLimit: 0.5", "fractionOfMemoryLimit: 2", r"fractionOfMemoryLimit: expected a number"),
    ("unknown-setting", "size: 1Gi", "size: 1Gi\n    sise: 2Gi", r"spec\.settings\.sise: unknown field"),
    ("bad-failure-policy", "type: shm", "type: shm\n  failurePolicy: Maybe", r"failurePolicy: expected one of Ignore, Fail"),
    ("mutate-on-update", "type: shm", "type: shm\n  match:\n    operations: [UPDATE]", r"may only run on CREATE"),
    ("bad-kind", "type: shm", "type: shm\n  match:\n    kinds: [a/b/c/d]", r"expected Kind, version/Kind"),
    ("wrong-api-version", "apiVersion: batchgate.io/v1alpha1", "apiVersion: v1", r"apiVersion: expected batchgate.io/v1alpha1"),
]


@pytest.mark.parametrize(("old", "new", "pattern"), [c[1:] for c in POLICY_ERRORS], ids=[c[0] for c in POLICY_ERRORS])
def test_policy_errors_name_file_line_field(tmp_bundle, old, new, pattern):
    f = tmp_bundle / "shm" / "policy.yaml"
    _edit(f, old, new)
    with pytest.raises(BundleError) as e:
        load_bundle(tmp_bundle)
    msg = str(e.value)
    assert msg.startswith(f"{f}:"), msg
    assert e.value.line is not None and e.value.line > 0
    assert re.search(pattern, msg), msg


def test_duplicate_policy_names_are_rejected(tmp_bundle):
    shutil.copytree(tmp_bundle / "shm", tmp_bundle / "shm2")
    with pytest.raises(BundleError, match="duplicate policy name"):
        load_bundle(tmp_bundle)


def test_missing_bundle_yaml(tmp_path):
    with pytest.raises(BundleError, match=r"bundle\.yaml"):
        load_bundle(tmp_path)


def test_match_selects_by_namespace_label_user(tmp_bundle):
    _edit(tmp_bundle / "shm" / "policy.yaml", "type: shm",
          "type: shm\n  match:\n    namespaces: ['team-*']\n    selector:\n      matchExpressions:\n"
          "        - {key: shm, operator: NotIn, values: ['off']}\n  exclude:\n    users: [robot]")
    from webhook.engine import decide
    from webhook.offline import Caller, synthetic_review

    b = load_bundle(tmp_bundle)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {}},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    def mutated(ns, labels=None, user="alice"):
        obj = {**pod, "metadata": {"name": "p", "labels": labels or {}}}
        return bool(decide(synthetic_review(obj, Caller(namespace=ns, username=user)), b, phase="mutate").patch)
    assert mutated("team-a")
    assert not mutated("other")
    assert not mutated("team-a", {"shm": "off"})
    assert not mutated("team-a", user="robot")
