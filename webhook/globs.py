"""Shell-style globs (``team-*``, ``kube-system/*``) compiled once per pattern set.

Matching namespaces, users and groups happens on every admission request;
``fnmatch`` per pattern per call costs more than the rest of a simple policy.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable


@functools.lru_cache(maxsize=4096)
def matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    exact = frozenset(p for p in patterns if not any(c in p for c in "*?["))
    wild = [p for p in patterns if p not in exact]
    if not wild:
        return exact.__contains__
    rx = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in wild))
    return lambda s: s in exact or rx.match(s) is not None


def matches(patterns: tuple[str, ...], value: str) -> bool:
    """True when ``value`` matches any of ``patterns`` (case-sensitive)."""
    return bool(patterns) and matcher(patterns)(value)


def matches_any(patterns: tuple[str, ...], values: Iterable[str]) -> bool:
    if not patterns:
        return False
    m = matcher(patterns)
    return any(m(v) for v in values)
