"""An installed wheel (not the source tree) works on its own: it carries the default bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import yaml

from tests.conftest import POLICIES, ROOT


def test_every_package_is_listed_in_pyproject():
    """The package list is explicit (the bundle is mapped in as webhook.policies), so a new
    subpackage must be added there or the wheel would lack it."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "webhook").rglob("__init__.py")}
    assert on_disk <= listed
    assert "webhook.policies" in listed


def test_installed_wheel_ships_the_default_bundle(tmp_path):
    # Built from a copy of what the Dockerfile copies (pyproject, README, webhook/, policies/),
    # so that a stale build/ directory of the checkout cannot leak into the wheel.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("webhook", "policies", "manifests"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(wheels), str(src)], check=True, capture_output=True, text=True,
                           cwd=tmp_path)
    assert "Warning" not in built.stdout + built.stderr, built.stderr  # e.g. a bundle dir setuptools was not told of
    (wheel,) = wheels.glob("batchgate-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    site = Path(subprocess.run(
        [env_dir / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # The dependencies come from the test environment's site-packages (a path line, so its
    # .pth files - the editable install of this checkout among them - are not run).
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install",
                    "--quiet", "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    bin_ = env_dir / "bin" / "batchgate"
    clean = {k: v for k, v in os.environ.items() if k not in ("BATCHGATE_POLICIES", "PYTHONPATH")}

    where = subprocess.run([env_dir / "bin" / "python", "-c", "import webhook.bundle as b; print(b.DEFAULT_POLICIES)"],
                           capture_output=True, text=True, cwd=tmp_path, env=clean, check=True).stdout.strip()
    assert where.startswith(str(site)), where  # the installed package's copy, not this checkout
    installed = sorted(p.relative_to(where).as_posix() for p in Path(where).rglob("*") if p.is_file()
                       and "__pycache__" not in p.parts)
    shipped = sorted(p.relative_to(POLICIES).as_posix() for p in POLICIES.rglob("*") if p.is_file())
    assert installed == shipped

    r = subprocess.run([bin_, "check", str(ROOT / "examples" / "job.yaml")],
                       capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert r.returncode == 0, r.stderr
    job = yaml.safe_load(r.stdout)
    assert job["spec"]["template"]["metadata"]["labels"]["batchgate.io/queue"] == "batch"

    r = subprocess.run([bin_, "test"], capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout + r.stderr

    help_ = subprocess.run([bin_, "serve", "--help"], capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert "shipped with batchgate" in help_.stdout

    # manifests: the whole kustomize tree, as the checkout has it; certs --patch reads the shipped one
    r = subprocess.run([bin_, "manifests", "--out", "out"], capture_output=True, text=True, cwd=tmp_path, env=clean)
    assert r.returncode == 0, r.stderr
    written = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written == sorted(p.relative_to(ROOT / "manifests").as_posix()
                             for p in (ROOT / "manifests").rglob("*") if p.is_file())
    for name in written:
        assert (tmp_path / "out" / name).read_text() == (ROOT / "manifests" / name).read_text(), name
    r = subprocess.run([bin_, "manifests", "--out", "out", "--check"], capture_output=True, text=True,
                       cwd=tmp_path, env=clean)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([bin_, "certs", "--cert-dir", "c", "--patch", "validating"], capture_output=True, text=True,
                       cwd=tmp_path, env=clean)
    assert r.returncode == 0, r.stderr
    patch = json.loads(r.stdout)
    assert patch and all(op["path"].endswith("/clientConfig/caBundle") for op in patch)
