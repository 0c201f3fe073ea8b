"""Write the README's generated parts (the policy catalogue, from each policy type's ``doc``);
with --check, fail when the README differs from what would be written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from webhook.rules import catalogue

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(<!-- generated from the policy types' docs[^\n]*-->\n).*?(<!-- end of generated catalogue -->)", re.S)


def main(argv: list[str]) -> int:
    text = README.read_text()
    if not BLOCK.search(text):
        print(f"{README}: the generated catalogue markers are missing", file=sys.stderr)
        return 1
    want = BLOCK.sub(lambda m: m.group(1) + catalogue() + m.group(2), text)
    if "--check" in argv:
        if want != text:
            print(f"{README}: the policy catalogue is out of date; run `make readme`", file=sys.stderr)
            return 1
        return 0
    README.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
