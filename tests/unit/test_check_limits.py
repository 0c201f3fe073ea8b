"""`batchgate check` bounds its input per object (webhook.yamlsrc): a `kubectl get -o yaml` dump of
many objects is decided like as many files, one object past the API server's 3 MiB is refused
while it is read, and the whole input has its own, documented bounds."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import POLICIES
from webhook import cli, yamlsrc
from webhook.cli import main
from webhook.rules import load_bundle

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def pods(n: int) -> dict:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": [{**POD, "metadata": {**POD["metadata"], "name": f"p{i}"}} for i in range(n)]}


@pytest.fixture(autouse=True)
def bundle_loaded_before_the_bounds_change(monkeypatch):
    """The bundle is read through the same bounds; load it before a test lowers them."""
    bundle = load_bundle(POLICIES)
    monkeypatch.setattr(cli, "_load", lambda path: bundle)


def check(capsys, *args):
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_list_dump_is_bounded_per_item_not_as_a_whole(capsys, tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(yamlsrc, "MAX_NODES", 40)  # one pod here is 14 nodes; the List is 600
    monkeypatch.setattr(yamlsrc, "MAX_OBJECT_BYTES", 500)  # one pod here is about 150 characters
    f = tmp_path / f"dump.{fmt}"
    f.write_text(yaml.safe_dump(pods(40), sort_keys=False) if fmt == "yaml" else json.dumps(pods(40), indent=1))
    assert f.stat().st_size > 3000
    code, out, err = check(capsys, "-o", "json", str(f))
    assert code == 0, err
    assert [p["metadata"]["name"] for p in json.loads(out)["items"]] == [f"p{i}" for i in range(40)]


def test_one_list_item_past_the_bounds_is_refused_with_its_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(yamlsrc, "MAX_NODES", 40)
    dump = pods(3)
    dump["items"][1]["metadata"]["labels"] = {f"l{i}": "x" for i in range(30)}
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump(dump, sort_keys=False))
    start = f.read_text().splitlines().index("- apiVersion: v1", 10) + 1  # the second item
    code, _, err = check(capsys, str(f))
    assert code == 2
    assert f"the list item starting at line {start} expands to more than 40 nodes" in err, err


def test_the_whole_input_has_a_node_bound(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(yamlsrc, "MAX_INPUT_NODES", 300)
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump(pods(40), sort_keys=False))
    code, _, err = check(capsys, str(f))
    assert code == 2 and "expands to more than 300 nodes in all (aliases included); split the input" in err, err


def test_documents_of_a_stream_are_bounded_each(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(yamlsrc, "MAX_NODES", 40)
    f = tmp_path / "many.yaml"
    f.write_text(yaml.safe_dump_all(pods(40)["items"], sort_keys=False))
    code, out, err = check(capsys, str(f))
    assert code == 0, err
    assert len(list(yaml.safe_load_all(out))) == 40


def _big_configmap(path, megabytes: int) -> int:
    lines = megabytes * 1024 * 1024 // 100
    with path.open("w") as f:
        f.write("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n")
        for i in range(lines):
            f.write(f"  k{i:08d}: {'x' * 85}\n")
    return lines + 4


def test_a_document_past_3_mib_is_refused_while_it_is_read(capsys, tmp_path):
    f = tmp_path / "big.yaml"
    total = _big_configmap(f, 12)
    code, out, err = check(capsys, str(f))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "the document starting at line 1 is larger than 3 MiB, the most the API server takes in one request" in err
    stopped = int(lines[0].split(str(f) + ":")[1].split(":")[0])  # refused where it crossed 3 MiB, not after the whole text
    assert 3 * 1024 * 1024 // 100 < stopped < total // 2


def test_a_json_object_past_3_mib_is_refused(capsys, tmp_path):
    f = tmp_path / "big.json"
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                             "data": {f"k{i}": "x" * 100 for i in range(40_000)}}))
    code, _, err = check(capsys, str(f))
    assert code == 2 and "big.json: object 1 is larger than 3 MiB" in err, err


@pytest.mark.parametrize("stdin", [False, True])
def test_an_input_past_the_whole_input_bound_is_refused_before_it_is_read(capsys, tmp_path, monkeypatch, stdin):
    monkeypatch.setattr(yamlsrc, "MAX_INPUT_BYTES", 1000)
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump(pods(40), sort_keys=False))
    if stdin:
        import io
        monkeypatch.setattr("sys.stdin", io.StringIO(f.read_text()))
    else:
        monkeypatch.setattr(yamlsrc, "check_shape", None)  # never reached
    code, _, err = check(capsys, "-" if stdin else str(f))
    assert code == 2
    assert "larger than 1000 bytes, the most check reads from one input; split it" in err, err
