"""Everyday mistakes get one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from webhook.cli import main

REFUSED = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def one_line(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return code, err


def test_a_malformed_kubeconfig_is_named_with_its_line(capsys, tmp_path):
    kc = tmp_path / "kc"
    kc.write_text("clusters: [\n")
    code, err = one_line(capsys, "reconcile", "--once", "--kubeconfig", str(kc))
    assert code != 0 and f"kubeconfig {kc} is not usable" in err and "line 2" in err


def test_a_missing_kubeconfig_names_the_path_and_what_was_tried(capsys, tmp_path, monkeypatch):
    code, err = one_line(capsys, "reconcile", "--once", "--kubeconfig", str(tmp_path / "nope"))
    assert code != 0 and f"no kubeconfig at {tmp_path / 'nope'}" in err
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, err = one_line(capsys, "reconcile", "--once")
    assert code != 0 and f"no kubeconfig at {tmp_path}/.kube/config" in err and "not in a cluster" in err


def test_connection_refused_is_one_line_without_retry_noise(capsys, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = tmp_path / "kc"
    kc.write_text(REFUSED % port)
    code, err = one_line(capsys, "reconcile", "--once", "--kubeconfig", str(kc))
    assert code != 0 and f"cannot connect to https://127.0.0.1:{port}: connection refused" in err


def test_serve_on_a_port_in_use_refuses_before_saying_serving(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "webhook", "serve", "--port", str(port),
                               "--cert-dir", str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert f"batchgate: cannot serve on 127.0.0.1:{port}: address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr and "serving address=" not in proc.stderr + proc.stdout


def test_output_piped_into_head_ends_quietly():
    sample = ROOT / "policies" / "shm" / "samples"
    proc = subprocess.run(f"{sys.executable} -m webhook check {sample}/*.yaml 2>/dev/null | head -1; "
                          f"{sys.executable} -m webhook check {sample}/*.yaml 2>&1 >/dev/null | grep -c Traceback",
                          shell=True, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.splitlines()[-1] == "0", proc.stdout
