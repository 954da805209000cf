#!/usr/bin/env bash
# Creates (or reuses) .venv-clients/, a small virtual environment for the third-party clients whose
# pins conflict with the project's own .venv (tests/guided/server/test_clients.py runs them there, in a
# subprocess, against a server started in .venv).
#
# instructor 1.17 pins jiter<0.15 while openai >= 3.4 needs jiter>=0.16, so instructor cannot sit
# beside the project's openai 3.57; here it gets the newest openai it accepts (3.3.0).
# Idempotent: a stamp file records what was installed; a second run with the same list does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-clients}
PYTHON=${PYTHON:-python3}
PACKAGES=(instructor==1.17.0 openai==3.3.0 pydantic==2.14.4 jsonschema pytest)
STAMP="$VENV/.client-venv-stamp"
WANT="${PACKAGES[*]}"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  echo "client_venv: $VENV is up to date ($WANT)"
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
echo "client_venv: installing $WANT into $VENV"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PACKAGES[@]}"
"$VENV/bin/python" -c 'import instructor, openai, pydantic, jsonschema'
echo "$WANT" > "$STAMP"
echo "client_venv: ready"
