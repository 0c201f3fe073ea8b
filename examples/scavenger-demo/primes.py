#!/usr/bin/env python3
"""Count and sum every prime up to N, however often it is stopped: a ScavengerJob demo.

A long, deterministic computation with an answer anyone can check: a segmented sieve of
Eratosthenes over [1, N] that counts the primes (pi(N)) and adds them up. For N a power of
ten up to 10^12 both figures are published (OEIS A006880 and A046731) and the result is
compared with them. Pure standard library, one file: it runs in a stock `python:3` image,
shipped to the pod in a ConfigMap (examples/scavenger-demo/).

Checkpoints. The state (next number to sieve, count and sum so far) is small and goes to
STATE_DIR/checkpoint.json on the volume:
  - on a schedule: every --checkpoint-every seconds, counted from the start of this process;
    with --checkpoint-exit-code (or $BATCHGATE_CHECKPOINT_EXIT_CODE, which a ScavengerJob
    with spec.checkpointExitCode sets) the run ends right after its first scheduled
    checkpoint with that code: each run is one segment, and the next resumes there;
  - on SIGTERM (and SIGINT): the signal only raises a flag; the sieve checks it after every
    segment (a fraction of a second), saves and exits, well within a pod's grace period.
A save is atomic: the new state is written to a temporary file in the same directory,
fsync'ed, the current checkpoint becomes checkpoint.prev.json and the temporary file is
renamed over checkpoint.json (rename is atomic on POSIX file systems), then the directory is
fsync'ed. Each file carries a SHA-256 of its content. On start the newest valid file wins:
a torn or corrupt checkpoint.json is moved aside to checkpoint.json.corrupt and the
previous one is used; with neither, the run starts from 1. Left-over temporary files of a
run killed mid-save are removed.

Exit codes (the ScavengerJob controller treats any non-zero exit of a pod it did not stop as
a failure; a pod it or the scheduler stopped is an interruption whatever its code):
    0    done: the whole range is sieved, the answer is printed and in STATE_DIR/result.json
         (and matches the published value where there is one). Starting it again after that
         prints the saved answer and exits 0 at once.
    1    done, but the answer differs from the published value: a bug or bad hardware.
    2    bad usage, or STATE_DIR holds a checkpoint of another computation (another N):
         nothing is resumed or overwritten.
    3    the checkpoint could not be written (volume full, read-only, missing).
    CODE with --checkpoint-exit-code CODE (4..127): a scheduled checkpoint is saved and this
         run ends its segment; start it again with the same arguments to go on.
    130  stopped by SIGINT, 143 stopped by SIGTERM, after saving a checkpoint: start it again
         with the same arguments to resume.

    python primes.py --limit 1e12 --state-dir /data --checkpoint-every 600 --checkpoint-exit-code 75
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

FORMAT = "batchgate-demo-primes/1"
# Published values for N = 10^k: pi(N) (OEIS A006880) and the sum of the primes <= N
# (OEIS A046731, the running total of A077645).
KNOWN = {
    10**1: (4, 17),
    10**2: (25, 1060),
    10**3: (168, 76127),
    10**4: (1229, 5736396),
    10**5: (9592, 454396537),
    10**6: (78498, 37550402023),
    10**7: (664579, 3203324994356),
    10**8: (5761455, 279209790387276),
    10**9: (50847534, 24739512092254535),
    10**10: (455052511, 2220822432581729238),
    10**11: (4118054813, 201467077743744681014),
    10**12: (37607912018, 18435588552550705911377),
}
EXIT_DONE, EXIT_WRONG, EXIT_USAGE, EXIT_NO_SAVE = 0, 1, 2, 3
ENV_EXIT_CODE = "BATCHGATE_CHECKPOINT_EXIT_CODE"  # set by batchgate from spec.checkpointExitCode


class Stop(Exception):
    """A signal asked us to stop (raised only between segments)."""


class OtherComputation(Exception):
    """The state directory holds a checkpoint of another computation."""


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {msg}", flush=True)


def base_primes(limit: int) -> list[int]:
    """The odd primes <= limit (plain sieve; limit is sqrt(N), at most 10^6 or so)."""
    if limit < 3:
        return []
    flags = bytearray([1]) * (limit + 1)
    flags[0:2] = b"\0\0"
    for p in range(2, math.isqrt(limit) + 1):
        if flags[p]:
            flags[p * p :: p] = bytes(len(range(p * p, limit + 1, p)))
    return [p for p in range(3, limit + 1, 2) if flags[p]]


def sieve_segment(lo: int, hi: int, primes: list[int]) -> tuple[int, int]:
    """Count and sum of the odd primes in [lo, hi); lo is odd."""
    size = (hi - lo + 1) // 2  # odd numbers lo, lo+2, ..., < hi
    if size <= 0:
        return 0, 0
    seg = bytearray([1]) * size
    if lo == 1:
        seg[0] = 0  # 1 is not prime
    for p in primes:
        sq = p * p
        if sq >= hi:
            break
        start = sq if sq >= lo else ((lo + p - 1) // p) * p
        if start % 2 == 0:
            start += p
        i = (start - lo) // 2
        if i < size:
            seg[i::p] = bytes((size - 1 - i) // p + 1)
    return seg.count(1), sum(itertools.compress(range(lo, lo + 2 * size, 2), seg))


# --- checkpoints -------------------------------------------------------------------------

def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, body: dict[str, Any], *, keep_previous: Path | None = None) -> None:
    """Write body (plus its digest) to path so that a reader sees the old or the new file,
    never a torn one; with keep_previous, the file being replaced is kept there."""
    data = json.dumps({**body, "sha256": _digest(body)}, indent=1, sort_keys=True).encode() + b"\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if keep_previous is not None and path.exists():
        os.replace(path, keep_previous)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def read_checked(path: Path) -> dict[str, Any] | None:
    """The file's content if it is a whole, untampered checkpoint; None if it is missing."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    body = json.loads(raw)  # ValueError on a torn or garbled file
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    digest = body.pop("sha256", None)
    if digest != _digest(body):
        raise ValueError("checksum mismatch")
    for key in ("limit", "next", "count", "sum", "segments"):
        if not isinstance(body.get(key), int) or body[key] < 0:
            raise ValueError(f"field {key} missing or not a non-negative integer")
    if body["next"] % 2 == 0 or body["next"] > body["limit"] + 2:
        raise ValueError(f"next={body['next']} is not an odd number within the range")
    return body


class State:
    """Where the sieve stands, and where it is kept."""

    def __init__(self, state_dir: Path, limit: int) -> None:
        self.dir = state_dir
        self.current = state_dir / "checkpoint.json"
        self.previous = state_dir / "checkpoint.prev.json"
        self.result = state_dir / "result.json"
        self.limit = limit
        self.body: dict[str, Any] = {
            "format": FORMAT, "limit": limit, "next": 1, "count": 1 if limit >= 2 else 0,
            "sum": 2 if limit >= 2 else 0, "segments": 0, "compute_seconds": 0.0, "runs": 0,
        }

    def load(self) -> str:
        """Adopt the newest valid checkpoint; say what happened."""
        for leftover in self.dir.glob(".checkpoint.json.*.tmp"):
            log(f"removing {leftover.name}, a save that never completed")
            leftover.unlink(missing_ok=True)
        for path in (self.current, self.previous):
            try:
                body = read_checked(path)
            except ValueError as e:  # torn, garbled or tampered with (OSError: let it out)
                aside = path.with_name(path.name + ".corrupt")
                log(f"WARNING {path.name} is unusable ({e}); moved aside to {aside.name}")
                os.replace(path, aside)
                continue
            if body is None:
                continue
            if body["limit"] != self.limit:
                raise OtherComputation(
                    f"{path} is a checkpoint of the primes up to {body['limit']}, not {self.limit}: "
                    f"use another --state-dir or the same --limit"
                )
            self.body = body
            return f"resumed from {path.name}: {self.describe()}"
        return "no checkpoint, starting from 1"

    def describe(self) -> str:
        b = self.body
        done = min(b["next"], self.limit) / self.limit * 100 if self.limit else 100.0
        return (f"{done:.2f}% (next {b['next']}, {b['count']} primes so far, "
                f"{b['segments']} segments, {b['compute_seconds']:.1f} s of compute)")

    def save(self) -> None:
        write_atomic(self.current, self.body, keep_previous=self.previous)


# --- the run -------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    stop: list[int] = []  # first thing: a signal from now on only raises this flag
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    state = State(args.state_dir, args.limit)
    if not args.state_dir.is_dir():
        log(f"cannot save checkpoints: {args.state_dir} is not a directory")
        return EXIT_NO_SAVE
    try:
        log(state.load())
    except OtherComputation as e:
        log(f"ERROR {e}")
        return EXIT_USAGE
    except OSError as e:
        log(f"ERROR cannot read or move the checkpoint: {e}")
        return EXIT_NO_SAVE
    started_at, segments_before = state.body["next"], state.body["segments"]
    if started_at <= args.limit:
        state.body["runs"] = state.body.get("runs", 0) + 1

    primes = base_primes(math.isqrt(args.limit))
    span = args.segment
    t0 = time.monotonic()
    next_save = t0 + args.checkpoint_every
    b = state.body
    try:
        while b["next"] <= args.limit:
            if stop:
                raise Stop
            c0 = time.process_time()
            lo = b["next"]
            hi = min(lo + span, args.limit + 1)
            count, total = sieve_segment(lo, hi, primes)
            b["next"] = hi if hi % 2 else hi + 1
            b["count"] += count
            b["sum"] += total
            b["segments"] += 1
            b["compute_seconds"] = round(b["compute_seconds"] + time.process_time() - c0, 3)
            if stop:  # a signal during the segment wins over a checkpoint due now: report the signal
                raise Stop
            if time.monotonic() >= next_save and b["next"] <= args.limit:
                state.save()
                log(f"scheduled checkpoint: {state.describe()}")
                if args.checkpoint_exit_code is not None:
                    log(f"segment done: this run sieved {b['segments'] - segments_before} segments from "
                        f"{started_at}; exiting {args.checkpoint_exit_code}, the next run resumes here")
                    return int(args.checkpoint_exit_code)
                next_save += args.checkpoint_every * max(1, math.ceil((time.monotonic() - next_save) / args.checkpoint_every))
        if stop:
            raise Stop
    except Stop:
        try:
            state.save()
        except OSError as e:
            log(f"ERROR stopped by signal {stop[0]} and could not save the checkpoint: {e}")
            return EXIT_NO_SAVE
        log(f"stopped by signal {stop[0]}, checkpoint saved at {state.describe()}; "
            f"start again to resume")
        return 128 + stop[0]
    except OSError as e:
        log(f"ERROR cannot save the checkpoint: {e}")
        return EXIT_NO_SAVE

    if started_at <= args.limit:  # this run did the last segment: record the result once
        try:
            state.save()
            write_atomic(state.result, {"format": FORMAT, "limit": args.limit, "count": b["count"],
                                        "sum": b["sum"], "compute_seconds": b["compute_seconds"],
                                        "runs": b["runs"]})
        except OSError as e:
            log(f"ERROR cannot save the result: {e}")
            return EXIT_NO_SAVE
    log(f"primes up to {args.limit}: count {b['count']}, sum {b['sum']} "
        f"({b['compute_seconds']:.1f} s of compute over {b['runs']} run(s); this run sieved "
        f"{b['segments'] - segments_before} of {b['segments']} segments, from {started_at})")
    known = KNOWN.get(args.limit)
    if known is None:
        log("no published value for this limit to compare with")
        return EXIT_DONE
    if (b["count"], b["sum"]) != known:
        log(f"ERROR the published values are count {known[0]}, sum {known[1]}")
        return EXIT_WRONG
    log("matches the published values (OEIS A006880, A046731)")
    return EXIT_DONE


def positive_int(text: str) -> int:
    value = int(float(text)) if "e" in text.lower() else int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def exit_code(text: str) -> int:
    """A code that says "checkpointed, segment over": not one of ours (0-3), not a death by signal (128+)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number 4..127, got {text!r}") from None
    if not 4 <= value <= 127:
        raise argparse.ArgumentTypeError(
            f"must be 4..127 (0-3 are this program's own exit codes, 128 and up a death by signal), got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Count and sum the primes up to --limit, checkpointing to --state-dir; "
                    "resumes from the last checkpoint. Exit 0 only when done (see the module docstring).")
    p.add_argument("--limit", type=positive_int, default=10**12,
                   help="sieve [1, LIMIT] (default 1e12: about 6 hours of one core; 1e11: 25 minutes)")
    p.add_argument("--state-dir", type=Path, default=Path(os.environ.get("STATE_DIR", "/data")),
                   help="directory for checkpoint.json and result.json, on the ScavengerJob's "
                        "volume (default $STATE_DIR or /data)")
    p.add_argument("--checkpoint-every", type=float, default=300.0, metavar="SECONDS",
                   help="save every SECONDS from the start of the process (default 300)")
    p.add_argument("--checkpoint-exit-code", type=exit_code, default=os.environ.get(ENV_EXIT_CODE) or None,
                   metavar="CODE",
                   help="end the run right after its first scheduled checkpoint, with exit CODE (4..127; "
                        f"default ${ENV_EXIT_CODE}, which a ScavengerJob with spec.checkpointExitCode sets): "
                        "each run is one segment, the next resumes there. Unset: run to the end")
    p.add_argument("--segment", type=positive_int, default=1 << 22, metavar="NUMBERS",
                   help="numbers sieved between two looks at the stop flag (default 4194304)")
    args = p.parse_args(argv)
    if args.checkpoint_every <= 0:
        p.error("--checkpoint-every must be more than 0")
    if args.segment < 2:
        p.error("--segment must be at least 2")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
