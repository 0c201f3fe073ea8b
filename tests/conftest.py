"""Shared test helpers: the real AdmissionReview fixtures and the bundled policies."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "policies"
# shared/ sits beside the repo on developer machines and in CI; a copy in tests/fixtures
# keeps the suite runnable from a lone clone.
_SHARED = ROOT.parent / "shared" / "fixtures" / "admission-k8s-1.20"
FIXTURES = Path(os.environ.get("BATCHGATE_FIXTURES", _SHARED if _SHARED.is_dir() else ROOT / "tests" / "fixtures" / "admission-k8s-1.20"))


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def bundle() -> Any:
    from webhook.rules import load_bundle

    return load_bundle(POLICIES)


@pytest.fixture
def state_factory(tmp_path: Path) -> Any:
    """A prepared webhook State on a copy of the bundled policies (certificates in tmp)."""
    import shutil

    from webhook.server import ServeOptions, prepare

    def make() -> Any:
        policies = tmp_path / "policies"
        if not policies.exists():
            shutil.copytree(POLICIES, policies)
        return prepare(ServeOptions(policies=str(policies), cert_dir=str(tmp_path / "certs")))

    return make
