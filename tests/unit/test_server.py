"""The HTTP edge with pytest-aiohttp: status codes, bad input, readiness, metrics, reloads."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import time
from pathlib import Path

import pytest

from tests.conftest import POLICIES, fixture
from webhook import metrics
from webhook.certs import ensure_certs
from webhook.seal import OFFLINE
from webhook.server import (
    MAX_BODY,
    ServeOptions,
    State,
    make_app,
    prepare,
    reload_bundle,
    reload_certificate,
    reload_keys,
)


@pytest.fixture
def state(tmp_path: Path) -> State:
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    return prepare(ServeOptions(policies=str(policies), cert_dir=str(tmp_path / "certs")))


@pytest.fixture
async def client(aiohttp_client, state):
    return await aiohttp_client(make_app(state))


async def test_mutate_answers_a_real_review(client):
    body = fixture("pod-create-by-user.mutate.json")
    r = await client.post("/mutate", json=body)
    assert r.status == 200
    out = await r.json()
    assert out["response"]["uid"] == body["request"]["uid"]
    patch = json.loads(base64.b64decode(out["response"]["patch"]))
    assert any(op["path"] == "/spec/priorityClassName" for op in patch)


async def test_validate_does_not_patch(client):
    r = await client.post("/validate", json=fixture("pod-create-by-user.validate.json"))
    out = await r.json()
    assert r.status == 200 and out["response"]["allowed"] is True and "patch" not in out["response"]


BAD = [
    ("non-json", b"{not json", "application/json", 400, "not valid JSON"),
    ("wrong-content-type", b"{}", "text/plain", 415, "application/json"),
    ("missing-request", b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}', "application/json", 400, "request"),
    ("missing-uid", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                "request": {"kind": {"kind": "Pod"}, "operation": "CREATE", "object": {}}}).encode(),
     "application/json", 400, "uid"),
    ("wrong-api-version", json.dumps({**fixture("pod-create-by-user.mutate.json"), "apiVersion": "v1"}).encode(),
     "application/json", 400, "apiVersion"),
    ("object-wrong-type", json.dumps({**fixture("pod-create-by-user.mutate.json"),
                                      "request": {**fixture("pod-create-by-user.mutate.json")["request"], "object": "pod"}}).encode(),
     "application/json", 400, "object"),
    ("unknown-operation", json.dumps({**fixture("pod-create-by-user.mutate.json"),
                                      "request": {**fixture("pod-create-by-user.mutate.json")["request"], "operation": "MERGE"}}).encode(),
     "application/json", 400, "operation"),
    ("body-not-object", b"[]", "application/json", 400, "JSON object"),
    ("binary", b"\xff\xfe\x00", "application/json", 400, "not valid JSON"),
    ("empty", b"", "application/json", 400, "not valid JSON"),
    ("truncated", json.dumps(fixture("pod-create-by-user.mutate.json")).encode()[:500], "application/json", 400,
     "not valid JSON"),
    ("nan", b'{"apiVersion":NaN}', "application/json", 400, "not valid JSON"),
    ("infinity", b'{"a":1e999}', "application/json", 400, "not valid JSON"),
    ("lone-surrogate", b'{"a":"\\ud800"}', "application/json", 400, "not valid JSON"),
    ("nested-1000-in-request", b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
     + b"[" * 1000 + b"]" * 1000 + b"}", "application/json", 400, "request"),
    ("nested-2000", b"[" * 2000 + b"]" * 2000, "application/json", 400, "nesting deeper than 1024"),
    ("too-many-containers", b"[" + b"{}," * 300_000 + b"{}]", "application/json", 413, "JSON objects and arrays"),
]


def _req(**changes: object) -> bytes:
    body = fixture("pod-create-by-user.mutate.json")
    for path, value in changes.items():
        node = body["request"]
        *head, last = path.split("__")
        for key in head:
            node = node[key]
        node[last] = value
    return json.dumps(body).encode()


BAD += [
    ("group-not-string", _req(kind__group=7), "application/json", 400, "kind.group must be a string"),
    ("version-not-string", _req(kind__version=["v1"]), "application/json", 400, "kind.version must be a string"),
    ("kind-not-string", _req(kind__kind={"k": 1}), "application/json", 400, "request.kind"),
    ("kind-too-long", _req(kind__kind="K" * 300), "application/json", 400, "longer than 253"),
    ("uid-not-string", _req(uid=5), "application/json", 400, "uid"),
    ("username-not-string", _req(userInfo__username=["root"]), "application/json", 400, "username"),
    ("groups-not-strings", _req(userInfo__groups=[[["x"]]]), "application/json", 400, "groups"),
    ("subresource-not-string", _req(subResource=1), "application/json", 400, "subResource"),
    ("namespace-not-string", _req(namespace=3), "application/json", 400, "namespace"),
    ("object-namespace-not-string", _req(namespace="", object__metadata__namespace=3), "application/json", 400,
     "namespace"),
    ("metadata-not-object", _req(object__metadata="m"), "application/json", 400, "metadata"),
    ("labels-not-object", _req(object__metadata__labels=["a"]), "application/json", 400, "labels"),
]


@pytest.mark.parametrize(("data", "ctype", "status", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
async def test_bad_input_is_a_4xx_with_a_json_message(client, data, ctype, status, needle):
    for path in ("/mutate", "/validate"):
        r = await client.post(path, data=data, headers={"Content-Type": ctype})
        assert r.status == status, await r.text()
        assert needle in (await r.json())["error"]


async def test_oversized_body_is_413(client):
    r = await client.post("/mutate", data=b"x" * (MAX_BODY + 1), headers={"Content-Type": "application/json"})
    assert r.status == 413


async def test_health_ready_metrics(client):
    assert (await client.get("/healthz")).status == 200
    r = await client.get("/readyz")
    assert r.status == 200 and "bundle=" in await r.text()
    await client.post("/mutate", json=fixture("pod-create-by-user.mutate.json"))
    text = await (await client.get("/metrics")).text()
    assert 'batchgate_admission_requests_total{endpoint="/mutate",operation="CREATE",outcome="mutated"}' in text
    assert 'batchgate_http_request_duration_seconds_bucket{code="200",le="0.001",path="/mutate"}' in text
    assert 'batchgate_http_request_duration_seconds_count{code="200",path="/healthz"}' in text
    assert 'batchgate_policy_decisions_total{outcome="mutated",policy="shm"}' in text


async def test_not_ready_without_bundle_or_certificate(aiohttp_client, tmp_path):
    state = State(cert_dir=tmp_path, policies=tmp_path)
    client = await aiohttp_client(make_app(state))
    r = await client.get("/readyz")
    assert r.status == 503
    assert "no policy bundle" in await r.text()
    r = await client.post("/mutate", json=fixture("pod-create-by-user.mutate.json"))
    assert r.status == 503


def _touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_bad_reload_keeps_last_good_bundle(state):
    good = state.bundle
    before = metrics.BUNDLE_RELOADS.labels("failure")._value.get()
    f = state.policies / "bundle.yaml"
    f.write_text(f.read_text().replace("defaultQueue: batch", "defaultQueue: [oops"))
    assert reload_bundle(state) is False
    assert state.bundle is good
    assert "bundle.yaml" in state.bundle_error
    assert metrics.BUNDLE_RELOADS.labels("failure")._value.get() == before + 1


@pytest.mark.parametrize(("old", "new"), [
    ("defaultQueue: batch", "defaultQueue: 2024-13-45"),                      # an unquoted impossible date
    ("defaultQueue: batch", "defaultQueue: !queue batch"),                    # an unknown YAML tag
    ("defaultQueue: batch", "defaultQueue: " + "[" * 100000 + "]" * 100000),  # would crash the C composer
    ('groups: [system:masters, "batchgate:admins"]', "groups: [system:authenticated]"),  # admin for all
], ids=["bad-date", "unknown-tag", "deep-nesting", "admin-for-everyone"])
async def test_a_running_server_keeps_the_last_good_bundle_and_says_it_is_stale(aiohttp_client, state, old, new):
    client = await aiohttp_client(make_app(state))
    good = state.bundle
    f = state.policies / "bundle.yaml"
    original = f.read_text()
    assert old in original
    f.write_text(original.replace(old, new, 1))
    _touch_later(f)
    assert reload_bundle(state) is False and state.bundle is good
    r = await client.get("/readyz")
    text = await r.text()
    assert r.status == 200, text  # still serving: pulling every replica would make the webhook unreachable
    assert text.startswith(f"ok bundle={good.fingerprint} stale: ") and f"{f}:" in text, text
    metrics_text = await (await client.get("/metrics")).text()
    assert "batchgate_bundle_stale 1.0" in metrics_text
    r = await client.post("/mutate", json=fixture("pod-create-by-user.mutate.json"))
    assert r.status == 200 and (await r.json())["response"]["allowed"]
    f.write_text(original)  # fixed: back to the bundle in force, no longer stale
    _touch_later(f)
    _touch_later(f)
    reload_bundle(state)
    assert state.bundle is good and state.bundle_error == ""
    assert "stale" not in await (await client.get("/readyz")).text()
    assert "batchgate_bundle_stale 0.0" in await (await client.get("/metrics")).text()


def test_good_reload_swaps_bundle(state):
    old = state.bundle
    f = state.policies / "bundle.yaml"
    f.write_text(f.read_text().replace("defaultQueue: batch", "defaultQueue: interactive"))
    _touch_later(f)
    assert reload_bundle(state) is True
    assert state.bundle is not old and state.bundle.default_queue == "interactive"
    assert reload_bundle(state) is False  # nothing changed since


def test_configmap_symlink_swap_is_noticed(tmp_path):
    """A mounted ConfigMap updates by re-pointing the ..data symlink."""
    v1, v2 = tmp_path / "..v1", tmp_path / "..v2"
    shutil.copytree(POLICIES, v1)
    shutil.copytree(POLICIES, v2)
    (v2 / "bundle.yaml").write_text((v2 / "bundle.yaml").read_text().replace("defaultQueue: batch", "defaultQueue: interactive"))
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "..data").symlink_to(v1)
    (mount / "bundle.yaml").symlink_to("..data/bundle.yaml")
    for p in v1.iterdir():
        if p.is_dir():
            (mount / p.name).symlink_to(f"..data/{p.name}")
    state = State(policies=mount, cert_dir=tmp_path)
    assert reload_bundle(state) and state.bundle.default_queue == "batch"
    tmp = mount / "..data_tmp"
    tmp.symlink_to(v2)
    os.replace(tmp, mount / "..data")
    assert reload_bundle(state) and state.bundle.default_queue == "interactive"


def test_certificate_rotation_is_picked_up(state):
    first = state.cert_stamp
    time.sleep(0.01)
    ensure_certs(state.cert_dir, force=True)
    assert reload_certificate(state) is True
    assert state.cert_stamp != first and state.cert_ok


def _served_certificate(context: ssl.SSLContext) -> bytes:
    """The certificate a TLS client gets from ``context`` (an in-memory handshake, no socket)."""
    client = ssl.create_default_context()
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname="batchgate-webhook")
    s = context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        done = True
        for side in (c, s):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                done = False
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if done:
            cert = c.getpeercert(binary_form=True)
            assert cert is not None
            return cert
    raise AssertionError("no TLS handshake")


def test_broken_certificate_keeps_previous(state):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    good = x509.load_pem_x509_certificate((state.cert_dir / "tls.crt").read_bytes()).public_bytes(Encoding.DER)
    assert _served_certificate(state.ssl_context) == good
    (state.cert_dir / "tls.crt").write_text("garbage")
    assert reload_certificate(state) is False
    assert _served_certificate(state.ssl_context) == good  # new handshakes still get the old one


async def test_every_path_is_timed_errors_included(aiohttp_client, state, monkeypatch):
    from webhook import server

    async def broken(request):
        raise RuntimeError("boom")

    monkeypatch.setattr(server, "_readyz", broken)
    client = await aiohttp_client(make_app(state))
    r = await client.get("/nowhere")
    assert r.status == 404 and (await r.json())["error"] == "Not Found"
    r = await client.get("/mutate")
    assert r.status == 405 and (await r.json())["error"] == "Method Not Allowed"
    r = await client.get("/readyz")
    assert r.status == 500 and (await r.json())["error"] == "internal error: RuntimeError"
    assert (await client.head("/healthz")).status == 200
    r = await client.post("/mutate", data=b"[", headers={"Content-Type": "application/json"})
    assert r.status == 400
    text = await (await client.get("/metrics")).text()
    assert 'batchgate_http_request_duration_seconds_count{code="404",path="other"}' in text
    assert 'batchgate_http_request_duration_seconds_count{code="405",path="/mutate"}' in text
    assert 'batchgate_http_request_duration_seconds_count{code="500",path="/readyz"}' in text
    assert 'batchgate_http_request_duration_seconds_count{code="400",path="/mutate"}' in text
    assert server.metrics.REQUESTS.value("/mutate", "", "bad_request") >= 1


# -- the admission seal's keys --------------------------------------------------------------
def test_a_local_server_makes_its_seal_keys_and_a_deployed_one_needs_its_file(tmp_path, state):
    made = tmp_path / "certs" / "seal.keys"
    assert made.is_file() and oct(made.stat().st_mode & 0o777) == "0o600"
    assert state.keys.current.startswith("k") and state.keys is not OFFLINE
    policies = tmp_path / "policies"
    with pytest.raises(RuntimeError, match=r"seal keys .*missing\.keys: no such file; mount the batchgate-seal Secret"):
        prepare(ServeOptions(policies=str(policies), cert_dir=str(tmp_path / "certs"),
                             seal_keys=str(tmp_path / "missing.keys")))
    bad = tmp_path / "bad.keys"
    bad.write_text("k1 c2hvcnQ=\n")
    with pytest.raises(RuntimeError, match=r"bad\.keys:1: key 'k1' has 5 bytes"):
        prepare(ServeOptions(policies=str(policies), cert_dir=str(tmp_path / "certs"), seal_keys=str(bad)))


def test_rotated_keys_are_picked_up_and_a_bad_edit_keeps_them(state):
    path = state.keys_path
    assert path is not None
    first = state.keys.current
    new = f"next {base64.b64encode(b'n' * 32).decode()}"
    path.write_text(f"{new}\n{path.read_text()}")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert reload_keys(state) and state.keys.current == "next" and state.keys.key(first) is not None
    path.write_text("garbage\n")
    assert not reload_keys(state) and state.keys.current == "next"


async def test_the_handler_seals_with_the_servers_keys(client, state):
    body = fixture("pod-create-by-user.mutate.json")
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    pod = body["request"]["object"]
    body["request"]["object"] = {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": "d", "namespace": pod["metadata"].get("namespace", "demo")},
                                 "spec": {"selector": {"matchLabels": {"a": "b"}},
                                          "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod["spec"]}}}
    r = await client.post("/mutate", json=body)
    out = await r.json()
    patch = json.loads(base64.b64decode(out["response"]["patch"]))
    seals = [op["value"] for op in patch if op["path"] == "/spec/template/metadata/annotations"]
    assert seals and seals[0]["batchgate.io/admitted"].startswith(state.keys.current + ".")


def test_an_allowed_review_with_a_policy_out_of_budget_is_logged(caplog):
    from webhook import server
    from webhook.engine import Decision

    decision = Decision(uid="u1", outcomes=[("shm", "mutated"), ("kata-cpu", "timeout")],
                        warnings=["kata-cpu: skipped"])
    seen = server.Answer(200, b"{}", "allowed", {"operation": "CREATE", "kind": {"kind": "Pod"}}, decision)
    with caplog.at_level("INFO", logger="webhook.server"):
        server._account("/mutate", seen)
    assert [r.getMessage() for r in caplog.records] == ["review ran out of its time budget"]
    assert caplog.records[0].fields["policies"] == "kata-cpu"
    caplog.clear()
    decision.outcomes = [("shm", "mutated"), ("kata-cpu", "passed")]
    server._account("/mutate", seen)
    assert caplog.records == []
