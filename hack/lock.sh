#!/usr/bin/env bash
# hack/lock.sh — refresh the locked Python installs (requirements/*.txt) from pyproject.toml's
# ranges: exact versions and sha256 hashes of every wheel and sdist, for any platform
# (uv's --universal), Python 3.11 and later.
#   requirements/dev.txt      make, .ci/run: batchgate's dependencies, the test tools, the build backend
#   requirements/runtime.txt  the Dockerfile: batchgate's dependencies and the build backend only
# Run it (`make lock`) after changing a range in pyproject.toml or to take newer versions, then
# run `make test` and commit pyproject.toml and requirements/ together. uv resolves; pip installs.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
tools="${BATCHGATE_LOCK_TOOLS:-$HOME/.cache/batchgate/uv-$UV_VERSION}"
if [[ ! -x "$tools/bin/uv" ]]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
compile() { # out, extra args...
  local out=$1; shift
  "$tools/bin/uv" pip compile --quiet --universal --python-version 3.11 --generate-hashes \
    --custom-compile-command "make lock" -o "$out" pyproject.toml requirements/build.in "$@"
}
compile requirements/dev.txt --extra test
compile requirements/runtime.txt
echo "lock: requirements/dev.txt ($(grep -c '^[a-z0-9].*==' requirements/dev.txt) packages)," \
     "requirements/runtime.txt ($(grep -c '^[a-z0-9].*==' requirements/runtime.txt) packages)" >&2
