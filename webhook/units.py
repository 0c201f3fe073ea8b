"""Kubernetes resource quantities and batchgate durations, parsed and printed.

Quantities follow the Kubernetes grammar (``500m``, ``4``, ``1.5``, ``256Mi``,
``1e3``, ``2G``); values are exact ``Fraction``s so that CPU arithmetic for Kata
overhead never drifts by a rounding millicore. Durations are what users write in
``batchgate.io/time-limit``: a number and a unit (``90m``, ``4h``, ``2d``), or
several (``1h30m``).

Both parsers bound their work before doing any: a quantity or duration is at most
:data:`MAX_TEXT` characters, and a decimal exponent is within :data:`MAX_EXPONENT`
(``1e999999999`` would otherwise be a number with a billion digits). Anything past
the bounds is a ``ValueError`` naming the value, like any other malformed one, and
never reaches the memo: a flood of distinct long strings cannot fill it.

A duration is at most :data:`MAX_DURATION` (3650d, ten years): longer than any job,
segment or window a cluster runs, and short enough that every date the reconciler
derives from one (a start plus a limit) stays a date it can print. The bound is the
parser's, so admission (the ``time-limit``, ``time-limit-extension`` and
``scavengerjob`` policies, the bundle) and the reconciler's views refuse the same
values in the same words.

Whole numbers as JSON decodes them (a Job's ``spec.parallelism``, a status counter) are
:func:`json_int`.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from fractions import Fraction
from functools import lru_cache
from typing import Any, overload

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)")


MAX_TEXT = 64  # characters; the longest quantity Kubernetes prints is ~30
MAX_EXPONENT = 30  # |e| in 1e30; Exa (1e18) is the largest suffix, a node has < 1e15 bytes
_LIMIT = Fraction(10) ** MAX_EXPONENT


@overload
def json_int(value: Any) -> int | None: ...
@overload
def json_int(value: Any, default: int) -> int: ...
def json_int(value: Any, default: int | None = None) -> int | None:
    """A whole number as JSON decodes it, else ``default``: ``true`` decodes to a Python int, and
    is not one here."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def shown(text: object) -> str:
    """``text`` for an error message, cut to a readable length."""
    r = repr(text) if not isinstance(text, str) or len(text) <= MAX_TEXT else repr(text[:MAX_TEXT]) + "..."
    return r if len(r) <= 2 * MAX_TEXT else r[: 2 * MAX_TEXT] + "..."


def parse_quantity(text: str | int | float) -> Fraction:
    """``"250m"`` -> ``Fraction(1, 4)``; raises ValueError naming the problem."""
    if isinstance(text, str):
        if len(text) > MAX_TEXT:
            raise ValueError(f"{shown(text)} is not a quantity: longer than {MAX_TEXT} characters")
    elif isinstance(text, bool) or not isinstance(text, int | float):
        raise ValueError(f"{shown(text)} is not a quantity")
    elif text != text or abs(text) > _LIMIT:  # NaN, infinities, absurd magnitudes
        raise ValueError(f"{shown(text)} is not a quantity: beyond 1e{MAX_EXPONENT}")
    return _parse_quantity(text)


@lru_cache(maxsize=4096, typed=True)  # pure, and the same few values recur on every request
def _parse_quantity(text: str | int | float) -> Fraction:
    if isinstance(text, int | float):
        return Fraction(str(text))
    m = _QUANTITY.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a quantity (examples: 500m, 2, 1.5, 256Mi, 4Gi)")
    number, exponent, suffix = m.groups()
    value = Fraction(number)
    if exponent:
        e = exponent[1:].lstrip("+")
        if len(e.lstrip("-")) > 3 or abs(int(e)) > MAX_EXPONENT:
            raise ValueError(f"{text!r} is not a quantity batchgate accepts: the exponent is "
                             f"outside -{MAX_EXPONENT}..{MAX_EXPONENT}")
        return value * Fraction(10) ** int(e)
    return value * _SUFFIX[suffix or ""]


@lru_cache(maxsize=4096, typed=True)  # pure, and the same few values recur on every request
def format_cpu(value: Fraction) -> str:
    """CPU in the canonical form the API server would print: ``2``, ``1500m``."""
    millis = value * 1000
    if millis.denominator != 1:
        millis = Fraction(-(-millis.numerator // millis.denominator))  # round up to 1m
    m = int(millis)
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


@lru_cache(maxsize=4096, typed=True)  # pure, and the same few values recur on every request
def format_memory(value: Fraction) -> str:
    """Bytes as a binary-suffixed quantity when exact (``256Mi``), else plain bytes."""
    n = int(value) if value.denominator == 1 else int(value) + 1
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        size = int(_SUFFIX[suffix])
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


_DURATION_PART = re.compile(r"([0-9]+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION = 3650 * 86400  # seconds: ten years ("3650d")


class DurationTooLong(ValueError):
    """A well-formed duration longer than :data:`MAX_DURATION`."""


def parse_duration(text: str) -> int:
    """``"90m"`` -> 5400 seconds; ``"1h30m"`` works too; raises ValueError."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise ValueError(f"{shown(text)} is not a duration (examples: 90m, 4h, 2d, 1h30m)")
    return _parse_duration(text)


@lru_cache(maxsize=4096, typed=True)  # pure, and the same few values recur on every request
def _parse_duration(text: str) -> int:
    s = text.strip()
    if not s or _DURATION_PART.sub("", s) != "":
        raise ValueError(f"{text!r} is not a duration (examples: 90m, 4h, 2d, 1h30m)")
    total = sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(s))
    if total <= 0:
        raise ValueError(f"{text!r} is not a positive duration (examples: 90m, 4h, 2d)")
    if total > MAX_DURATION:
        raise DurationTooLong(f"{text!r} is longer than {format_duration(MAX_DURATION)}, the longest duration "
                              f"batchgate accepts")
    return total


@lru_cache(maxsize=4096, typed=True)  # pure, and the same few values recur on every request
def format_duration(seconds: int) -> str:
    """The shortest exact spelling: 5400 -> ``"90m"``, 7200 -> ``"2h"``, 90000 -> ``"25h"``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_elapsed(seconds: int) -> str:
    """A time span for people, rounded down: ``"45s"``, ``"12m"``, ``"3h05m"`` (negative: ``"0s"``)."""
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


# -- times -----------------------------------------------------------------------
MAX_TIME_TEXT = 64  # characters; longer than any timestamp


def parse_time(text: Any) -> float | None:
    """RFC 3339 with a time zone (``2026-11-24T06:00:00Z``, ``...+01:00``, fractions; ``T`` and
    ``Z`` in either case) -> epoch seconds; None for anything else. The one parser of times for
    the webhook (window starts and ends) and the reconciler (the API server's timestamps, its own
    annotations). Memoised, but never for a text longer than any timestamp (an annotation is
    anyone's to write: 32,768 distinct 200 KB values would otherwise be kept)."""
    if not isinstance(text, str) or len(text) > MAX_TIME_TEXT or "T" not in text.upper():
        return None
    return _parse_time(text)


@lru_cache(maxsize=1 << 15)
def _parse_time(text: str) -> float | None:
    try:
        dt = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:
        return None
    return None if dt.tzinfo is None else dt.timestamp()


def format_time(t: float) -> str:
    """Epoch seconds -> ``2026-11-24T06:00:00Z`` (whole seconds, as Kubernetes prints them)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(t)))
