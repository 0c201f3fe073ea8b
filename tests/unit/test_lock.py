"""The locked installs (requirements/*.txt, `make lock`) agree with pyproject.toml and each other."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT

PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", re.M)


def _pins(name: str) -> dict[str, str]:
    text = (ROOT / "requirements" / name).read_text()
    pins = {re.sub(r"[-_.]+", "-", n).lower(): v for n, v in PIN.findall(text)}
    # every pin carries its hashes, so pip installs it with --require-hashes
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", text)) >= len(pins)
    return pins


def _declared(extra: str | None = None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return [Requirement(d) for d in deps]


def test_the_runtime_lock_pins_every_dependency_inside_its_range():
    pins = _pins("runtime.txt")
    for req in _declared():
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} is a dependency but not in requirements/runtime.txt: make lock"
        assert Version(pins[name]) in req.specifier, f"{name}=={pins[name]} outside {req}: make lock"


def test_the_dev_lock_has_the_test_tools_and_the_same_versions_as_the_runtime_lock():
    dev, runtime = _pins("dev.txt"), _pins("runtime.txt")
    for req in _declared("test"):
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in dev and Version(dev[name]) in req.specifier, f"{req}: make lock"
    differ = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n) != v}
    assert not differ, f"runtime and dev locks disagree (runtime, dev): {differ}; make lock"
    assert "setuptools" in runtime  # the build backend installs from the lock too
