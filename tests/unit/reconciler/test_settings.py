"""The reconciler picks a job's queue exactly as the webhook does (same bundle semantics)."""

from __future__ import annotations

import dataclasses

import pytest

from webhook.bundle import NamespaceRule
from webhook.reconciler.settings import QueuePolicy


@pytest.mark.parametrize(("namespace", "label"), [
    ("notebooks", None), ("jupyter-7", None), ("gpu-lab", None), ("demo", None), ("gpu-lab", "scavenger"),
])
def test_queue_for_agrees_with_the_bundle(bundle, namespace, label):
    qp = QueuePolicy.from_bundle(bundle)
    assert qp.queue_for(namespace, label) == (label or bundle.default_queue_for(namespace))


def test_first_matching_rule_wins_even_without_a_default_queue(bundle):
    rules = (NamespaceRule(("gpu-*",), None, ("batch",), {}), NamespaceRule(("*",), "interactive", None, {}))
    b = dataclasses.replace(bundle, namespaces=rules)
    qp = QueuePolicy.from_bundle(b)
    assert b.default_queue_for("gpu-x") == "batch"
    assert qp.queue_for("gpu-x", None) == "batch"
    assert qp.queue_for("other", None) == "interactive"
