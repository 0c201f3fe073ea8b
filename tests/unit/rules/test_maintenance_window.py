"""maintenance-window: a MaintenanceWindow's spec is checked before it is stored (the meaning
of a window is webhook.windows's, tested in tests/unit/test_windows.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.conftest import decided, load_sample, settings_error, with_settings
from webhook.bundle import Bundle
from webhook.engine import Decision
from webhook.offline import Caller, synthetic_review

ADMIN = Caller(username="root", groups=("batchgate:admins",))


def run(b: Bundle, obj: dict[str, Any], *, op: str = "CREATE", old: dict[str, Any] | None = None) -> Decision:
    caller = Caller(operation=op, username=ADMIN.username, groups=ADMIN.groups)
    d = decided(synthetic_review(obj, caller, old_object=old), b, phase="check")
    assert d.errors == [] and d.patch == []
    return d


def test_max_duration_is_a_setting(tmp_path: Path) -> None:
    long = load_sample("maintenance-window", "window-too-long.yaml")  # one year
    assert "longer than the 30d this cluster allows" in run(with_settings(tmp_path, "maintenance-window", None), long).message
    roomy = with_settings(tmp_path / "roomy", "maintenance-window", {"maxDuration": "400d"})
    assert run(roomy, long).allowed


def test_a_metadata_only_update_of_a_bad_stored_window_passes(tmp_path: Path) -> None:
    b = with_settings(tmp_path, "maintenance-window", None)
    bad = load_sample("maintenance-window", "window-bad-times.yaml")
    assert not run(b, bad).allowed
    relabelled = {**bad, "metadata": {**bad["metadata"], "labels": {"team": "ops"}}}
    assert run(b, relabelled, op="UPDATE", old=bad).allowed


def test_bad_settings_name_file_line_and_field(tmp_path: Path) -> None:
    e = settings_error(tmp_path, "maintenance-window", "    maxDuration: a month\n")
    assert "maintenance-window/policy.yaml:8: spec.settings.maxDuration: expected a duration like 7d" in str(e), e
    e = settings_error(tmp_path / "2", "maintenance-window", "    maxDays: 30\n")
    assert "maintenance-window/policy.yaml:8: spec.settings.maxDays: unknown field" in str(e), e
