"""Real manifests from public projects through `batchgate check`, compared with recorded results.

tests/corpus/manifests/ holds files copied unmodified from Kueue, JobSet, Volcano, the MPI
operator, Argo Workflows, Kata Containers, scheduler-plugins and kubernetes/examples (origin,
commit, git blob id and license in tests/corpus/SOURCES.yaml). For each, expected/<file>.txt
records what `batchgate check -o diff` says with the default bundle: the exit status, every
warning and denial (and why), and the diff of what the objects - and so their pods - get.
Any change in what these workloads get fails here. After an intended change, re-record with
``BATCHGATE_RECORD_CORPUS=1 .venv/bin/python -m pytest tests/unit/test_corpus.py`` and review
the diff of expected/ like code.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from webhook.cli import main

CORPUS = ROOT / "tests" / "corpus"
SOURCES = yaml.safe_load((CORPUS / "SOURCES.yaml").read_text())["sources"]
PERMISSIVE = {"Apache-2.0", "MIT"}


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_sources_cover_the_corpus_and_are_unmodified():
    files = sorted(p.name for p in (CORPUS / "manifests").iterdir())
    assert sorted(s["file"] for s in SOURCES) == files
    for s in SOURCES:
        assert s["license"] in PERMISSIVE, s
        assert len(s["commit"]) == 40 and s["repo"].count("/") == 1 and s["path"]
        assert _git_blob((CORPUS / "manifests" / s["file"]).read_bytes()) == s["blob"], f"{s['file']} was modified"


def record(capsys, file: Path) -> str:
    code = main(["check", "-o", "diff", str(file.relative_to(ROOT))])
    out, err = capsys.readouterr()
    return f"exit: {code}\n--- stderr\n{err}--- stdout (check -o diff)\n{out}"


@pytest.mark.parametrize("name", [s["file"] for s in SOURCES])
def test_corpus_manifest(capsys, monkeypatch, name):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("BATCHGATE_POLICIES", raising=False)
    got = record(capsys, CORPUS / "manifests" / name)
    expected = CORPUS / "expected" / (name.removesuffix(".yaml") + ".txt")
    if os.environ.get("BATCHGATE_RECORD_CORPUS") == "1":
        expected.parent.mkdir(exist_ok=True)
        expected.write_text(got)
    assert expected.is_file(), f"no recorded result for {name}; record with BATCHGATE_RECORD_CORPUS=1"
    assert got == expected.read_text(), f"{name}: what batchgate does with it changed (see the module docstring)"
