#!/usr/bin/env bash
# Usage: expect-error.sh PATTERN COMMAND...
# Passes when COMMAND exits with status 1 (not a crash, not success) and its
# stderr matches the extended regex PATTERN.
pattern=$1
shift
stderr=$("$@" 2>&1 >/dev/null)
status=$?
if [ "$status" -ne 1 ]; then
  echo "expected exit status 1, got $status; stderr:"
  echo "$stderr"
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$stderr"; then
  echo "stderr does not match /$pattern/:"
  echo "$stderr"
  exit 1
fi
echo "ok: $stderr"
