"""A short seeded run of bench/fuzz_webhook.py on every change: mutated real reviews,
deep nesting, huge lists, wrong types and raw garbage; no 5xx, no hang. The long
run (100,000 cases) is ``python bench/fuzz_webhook.py``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("fuzz_webhook", ROOT / "bench" / "fuzz_webhook.py")
assert spec and spec.loader
fuzz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fuzz)


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_fuzz_never_5xx_never_hangs(bundle, seed):
    result = fuzz.run(600, seed, bundle, hang=2.0)
    assert result["failures"] == []
    assert set(result["statuses"]) <= {200, 400, 413}
    assert result["statuses"].get(200, 0) > 100 and result["statuses"].get(400, 0) > 100  # both paths taken
