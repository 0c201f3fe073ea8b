"""The ScavengerJob demo workload (examples/scavenger-demo/primes.py), run as a pod would run
it: a subprocess, stopped with SIGTERM mid-run, started again on the same state directory.

The sieve runs to 10^8 in small segments here (a second or two); the answers are the
published pi(10^k) and sums of primes, so a resumed run that skipped or repeated a segment
gets them wrong.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "scavenger-demo"
SCRIPT = DEMO / "primes.py"
LIMIT = 10**8
COUNT, SUM = 5761455, 279209790387276  # pi(10^8) and the sum of the primes below 10^8


primes = load_script(SCRIPT, "demo_primes")


def args(state: Path, *extra: str, limit: int = LIMIT) -> list[str]:
    return [sys.executable, str(SCRIPT), "--limit", str(limit), "--state-dir", str(state),
            "--segment", str(1 << 16), *extra]


def run(state: Path, *extra: str, limit: int = LIMIT) -> tuple[int, str]:
    done = subprocess.run(args(state, *extra, limit=limit), capture_output=True, text=True, timeout=120)
    assert not done.stderr, done.stderr
    return done.returncode, done.stdout


def interrupt(state: Path, *, after: str, extra: tuple[str, ...] = (), delay: float = 0.0) -> tuple[int, str]:
    """Start the workload, wait for a line containing `after`, SIGTERM it, return (code, output)."""
    proc = subprocess.Popen(args(state, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if after in line:
            break
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert not err, err
    return proc.returncode, "".join(seen) + out


def checkpoint(state: Path, name: str = "checkpoint.json") -> dict[str, Any]:
    return json.loads((state / name).read_text())  # type: ignore[no-any-return]


def result(state: Path) -> dict[str, Any]:
    return json.loads((state / "result.json").read_text())  # type: ignore[no-any-return]


def test_sigterm_mid_run_saves_and_the_next_run_resumes_there(tmp_path):
    code, out = interrupt(tmp_path, after="scheduled checkpoint:", extra=("--checkpoint-every", "0.05"))
    assert code == 143, out
    assert "stopped by signal 15, checkpoint saved at" in out
    saved = checkpoint(tmp_path)
    assert 1 < saved["next"] <= LIMIT and saved["segments"] > 0

    code, out = run(tmp_path)
    assert code == 0, out
    assert "resumed from checkpoint.json: " in out and f"next {saved['next']}," in out
    total = result(tmp_path)
    assert (total["count"], total["sum"]) == (COUNT, SUM)
    assert total["runs"] == 2
    # The second run did only what was left, not the whole range again.
    all_segments = checkpoint(tmp_path)["segments"]
    assert f"this run sieved {all_segments - saved['segments']} of {all_segments} segments" in out
    assert "matches the published values" in out


def test_sigterm_saves_even_when_no_scheduled_checkpoint_was_due(tmp_path):
    code, out = interrupt(tmp_path, after="starting from 1", extra=("--checkpoint-every", "3600"), delay=0.3)
    assert code == 143, out
    assert "scheduled checkpoint:" not in out  # no scheduled save happened: this one came from SIGTERM
    assert checkpoint(tmp_path)["next"] > 1
    assert not (tmp_path / "checkpoint.prev.json").exists()


def test_stopped_again_and_again_it_still_gets_the_right_answer(tmp_path):
    positions = []
    for _ in range(3):
        code, out = interrupt(tmp_path, after="scheduled checkpoint:", extra=("--checkpoint-every", "0.05"))
        assert code == 143, out
        positions.append(checkpoint(tmp_path)["next"])
    assert positions == sorted(positions) and len(set(positions)) == 3  # always forward
    code, out = run(tmp_path)
    assert code == 0, out
    assert (result(tmp_path)["count"], result(tmp_path)["sum"]) == (COUNT, SUM)
    assert result(tmp_path)["runs"] == 4


def test_with_the_checkpoint_exit_code_each_run_is_one_segment_and_the_next_resumes(tmp_path):
    """spec.checkpointExitCode: batchgate sets $BATCHGATE_CHECKPOINT_EXIT_CODE; each run ends right
    after its first scheduled checkpoint with that code, the next run resumes there, and only
    the run that finishes the range exits 0, with the right answer and no segment sieved twice."""
    env = {**os.environ, "BATCHGATE_CHECKPOINT_EXIT_CODE": "75"}
    positions: list[int] = []
    for runs in range(1, 200):
        done = subprocess.run(args(tmp_path, "--checkpoint-every", "0.2"), capture_output=True, text=True,
                              timeout=120, env=env)
        assert not done.stderr, done.stderr
        if done.returncode == 0:
            break
        assert done.returncode == 75, done.stdout
        assert "scheduled checkpoint:" in done.stdout and "exiting 75, the next run resumes here" in done.stdout
        positions.append(checkpoint(tmp_path)["next"])
        if runs > 1:
            assert "resumed from checkpoint.json: " in done.stdout and f"next {positions[-2]}," in done.stdout
    assert len(positions) >= 2, positions  # it took several segments
    assert positions == sorted(positions) and len(set(positions)) == len(positions)  # always forward
    total = result(tmp_path)
    assert (total["count"], total["sum"]) == (COUNT, SUM) and total["runs"] == len(positions) + 1
    # every segment of the range was sieved exactly once over all the runs
    assert checkpoint(tmp_path)["segments"] == -(-(LIMIT - 1) // (1 << 16))
    assert "matches the published values" in done.stdout


@pytest.mark.parametrize(("value", "message"), [
    ("3", "0-3 are this program's own exit codes"), ("143", "128 and up a death by signal"),
    ("0", "must be 4..127"), ("x", "must be a whole number 4..127, got 'x'"),
])
def test_a_checkpoint_exit_code_it_cannot_use_is_refused(tmp_path, value, message):
    by_flag = subprocess.run(args(tmp_path, "--checkpoint-exit-code", value), capture_output=True, text=True,
                             timeout=60)
    by_env = subprocess.run(args(tmp_path), capture_output=True, text=True, timeout=60,
                            env={**os.environ, "BATCHGATE_CHECKPOINT_EXIT_CODE": value})
    for done in (by_flag, by_env):
        assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "checkpoint.json").exists()


def _stopped_once(state: Path) -> None:
    """Leave a state directory with checkpoint.json and checkpoint.prev.json, mid-range."""
    code, out = interrupt(state, after="scheduled checkpoint:", extra=("--checkpoint-every", "0.02"), delay=0.1)
    assert code == 143, out
    assert (state / "checkpoint.prev.json").exists()


def test_a_torn_checkpoint_is_moved_aside_and_the_previous_one_used(tmp_path):
    _stopped_once(tmp_path)
    prev = checkpoint(tmp_path, "checkpoint.prev.json")
    current = (tmp_path / "checkpoint.json").read_bytes()
    (tmp_path / "checkpoint.json").write_bytes(current[: len(current) // 2])  # torn write
    code, out = run(tmp_path)
    assert code == 0, out
    assert "checkpoint.json is unusable" in out
    assert "resumed from checkpoint.prev.json: " in out and f"next {prev['next']}," in out
    assert (tmp_path / "checkpoint.json.corrupt").read_bytes() == current[: len(current) // 2]
    assert (result(tmp_path)["count"], result(tmp_path)["sum"]) == (COUNT, SUM)


def test_a_tampered_checkpoint_fails_its_checksum(tmp_path):
    _stopped_once(tmp_path)
    body = checkpoint(tmp_path)
    body["count"] += 1  # valid JSON, wrong content: would give a wrong answer if believed
    (tmp_path / "checkpoint.json").write_text(json.dumps(body))
    code, out = run(tmp_path)
    assert code == 0, out
    assert "checksum mismatch" in out and "resumed from checkpoint.prev.json" in out
    assert (result(tmp_path)["count"], result(tmp_path)["sum"]) == (COUNT, SUM)


def test_with_no_usable_checkpoint_it_starts_over_and_is_still_right(tmp_path):
    _stopped_once(tmp_path)
    (tmp_path / "checkpoint.json").write_bytes(b"\x00\x00garbage")
    (tmp_path / "checkpoint.prev.json").write_text("{")
    (tmp_path / ".checkpoint.json.12345.tmp").write_text('{"half": ')  # a save killed mid-write
    code, out = run(tmp_path)
    assert code == 0, out
    assert "removing .checkpoint.json.12345.tmp" in out
    assert "no checkpoint, starting from 1" in out
    assert not (tmp_path / ".checkpoint.json.12345.tmp").exists()
    assert (tmp_path / "checkpoint.prev.json.corrupt").exists()
    assert (result(tmp_path)["count"], result(tmp_path)["sum"]) == (COUNT, SUM)


def test_a_checkpoint_of_another_computation_is_refused_and_kept(tmp_path):
    _stopped_once(tmp_path)
    before = (tmp_path / "checkpoint.json").read_bytes()
    code, out = run(tmp_path, limit=10**7)
    assert code == 2, out
    assert f"checkpoint of the primes up to {LIMIT}, not {10**7}" in out
    assert (tmp_path / "checkpoint.json").read_bytes() == before


def test_a_wrong_answer_exits_1(tmp_path):
    # A (validly signed) checkpoint one segment before the end whose count is off by one:
    # the run completes, compares with the published value and refuses to call it done.
    state = primes.State(tmp_path, 10**6)
    state.body.update({"next": 999_001, "count": 78_000, "sum": 1, "segments": 10})
    state.save()
    code, out = run(tmp_path, limit=10**6)
    assert code == 1, out
    assert "the published values are count 78498" in out


def test_done_is_done(tmp_path):
    code, out = run(tmp_path, limit=10**6)
    assert code == 0 and "matches the published values" in out
    code, out = run(tmp_path, limit=10**6)
    assert code == 0, out
    assert "this run sieved 0 of" in out and result(tmp_path)["runs"] == 1


def test_no_volume_exits_3(tmp_path):
    code, out = run(tmp_path / "missing")
    assert code == 3 and "is not a directory" in out


@pytest.mark.parametrize("segment", [2, 3, 64, 1000, 1 << 20])
@pytest.mark.parametrize("limit", [10, 10**3, 10**5])
def test_the_sieve_is_right_whatever_the_segment(tmp_path, segment, limit):
    code = primes.main(["--limit", str(limit), "--state-dir", str(tmp_path), "--segment", str(segment)])
    assert code == 0
    assert (result(tmp_path)["count"], result(tmp_path)["sum"]) == primes.KNOWN[limit]


def test_the_sieve_agrees_with_trial_division_on_odd_limits(tmp_path):
    limit = 1999  # not a power of ten: no published value, checked here instead
    naive = [n for n in range(2, limit + 1) if all(n % d for d in range(2, int(n**0.5) + 1))]
    assert primes.main(["--limit", str(limit), "--state-dir", str(tmp_path), "--segment", "37"]) == 0
    assert (result(tmp_path)["count"], result(tmp_path)["sum"]) == (len(naive), sum(naive))


def test_the_configmap_carries_this_very_script():
    hack = load_script(ROOT / "hack" / "scavenger-demo-configmap.py", "demo_configmap")
    assert (DEMO / "configmap.yaml").read_text() == hack.render(SCRIPT.read_text()), (
        "examples/scavenger-demo/configmap.yaml is out of date: run python hack/scavenger-demo-configmap.py")


def test_the_example_manifests_pass_batchgate_check(bundle):
    from webhook.offline import Caller, check_object, parse_manifests

    seen = {}
    for path in sorted(DEMO.glob("*.yaml")):
        for obj in parse_manifests(path.read_text()):
            decision = check_object(obj, bundle, Caller())
            assert decision.allowed and not decision.warnings and not decision.errors, (path.name, decision)
            assert not decision.patch, (path.name, decision.patch)
            seen[obj["kind"]] = {policy for policy, _ in decision.outcomes}
    assert sorted(seen) == ["ConfigMap", "PersistentVolumeClaim", "ScavengerJob"]
    assert "scavengerjob" in seen["ScavengerJob"]  # the ScavengerJob was validated, not skipped
