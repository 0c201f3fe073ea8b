"""A short seeded run of bench/fuzz_reconciler.py on every change: random stored objects (Pods,
Jobs, ScavengerJobs, Nodes, MaintenanceWindows, PodGroups), bent toward what admission refuses
or never saw, through the views and a planning pass. No exception escapes a view of the
schema's types or a pass, no cannot-plan for them, no view past its bound. The long run
(100,000 cases) is ``python bench/fuzz_reconciler.py``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("fuzz_reconciler", ROOT / "bench" / "fuzz_reconciler.py")
assert spec and spec.loader
fuzz = importlib.util.module_from_spec(spec)
sys.modules["fuzz_reconciler"] = fuzz  # (its dataclasses look their module up)
spec.loader.exec_module(fuzz)


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_reconciler_fuzz_no_pass_fails_and_views_stay_bounded(seed):
    result = fuzz.run(1000, seed)
    assert result["failures"] == []
    assert result["objects"] > 10_000
    assert set(result["max_view_bytes"]) == {g.kind.kind for g in fuzz.GENS}  # every kind was viewed
    assert sum(result["left_out"].values()) > 0  # wrong types were tried, and the cache left them out


def test_the_measure_counts_what_a_view_keeps():
    """deep_size is what the bound is checked with: it must see a long annotation a view kept."""
    from webhook.reconciler.model import pod_view

    small = {"metadata": {"name": "p", "annotations": {"batchgate.io/next-maintenance": "x"}}}
    large = {"metadata": {"name": "p", "annotations": {"batchgate.io/next-maintenance": "x" * 1000}}}
    assert fuzz.deep_size(pod_view(large)) - fuzz.deep_size(pod_view(small)) >= 999
