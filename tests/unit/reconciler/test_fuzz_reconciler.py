"""A short seeded run of bench/fuzz_reconciler.py on every change: random stored objects (Pods,
Jobs, ScavengerJobs, Nodes, MaintenanceWindows, PodGroups), bent toward what admission refuses
or never saw, through the views and a planning pass. No exception escapes a view of the
schema's types or a pass, no cannot-plan for them, no view past its bound. The long run
(100,000 cases) is ``python bench/fuzz_reconciler.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[3]
fuzz = load_script(ROOT / "bench" / "fuzz_reconciler.py", "fuzz_reconciler")


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
