"""Write the README's generated parts: the policy catalogue (from each policy type's ``doc``)
and the "Job before and after" example (what ``batchgate check examples/job.yaml`` prints).
With --check, fail when the README differs from what would be written."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from webhook.rules import catalogue

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLE = "examples/job.yaml"


def job_example() -> str:
    """The example as submitted and as `batchgate check` admits it, run through the real CLI."""
    run = subprocess.run([sys.executable, "-m", "webhook", "check", EXAMPLE], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"batchgate check {EXAMPLE} exited {run.returncode}:\n{run.stderr}")
    told = "\n".join(f"    {line}" for line in run.stderr.splitlines()) or "    (nothing)"
    return (f"What a user submits (`{EXAMPLE}`):\n\n```yaml\n{(ROOT / EXAMPLE).read_text()}```\n\n"
            f"What the cluster stores (`batchgate check {EXAMPLE}`):\n\n```yaml\n{run.stdout}```\n\n"
            f"and on stderr:\n\n{told}\n")


# (what the opening marker says, the closing marker, what goes between them)
BLOCKS: list[tuple[str, str, Callable[[], str]]] = [
    ("<!-- generated from the policy types' docs", "<!-- end of generated catalogue -->", catalogue),
    ("<!-- generated from examples/job.yaml", "<!-- end of generated example -->", job_example),
]


def render(text: str) -> str:
    for opening, closing, make in BLOCKS:
        found = re.search(f"({re.escape(opening)}[^\n]*-->\n).*?({re.escape(closing)})", text, re.S)
        if not found:
            raise SystemExit(f"{README}: the markers {opening} ... {closing} are missing")
        text = text[:found.end(1)] + make() + text[found.start(2):]
    return text


def main(argv: list[str]) -> int:
    text = README.read_text()
    want = render(text)
    if "--check" in argv:
        if want != text:
            print(f"{README}: a generated part (policy catalogue, Job example) is out of date; "
                  "run `make readme`", file=sys.stderr)
            return 1
        return 0
    README.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
