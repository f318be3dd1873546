#!/usr/bin/env bash
# Usage: expect-output.sh PATTERN COMMAND...
# Passes when COMMAND exits with status 0 and its output (stdout and stderr)
# matches the extended regex PATTERN, read as one text (`.` spans lines).
pattern=$1
shift
output=$("$@" 2>&1)
status=$?
if [ "$status" -ne 0 ]; then
  echo "expected exit status 0, got $status; output:"
  echo "$output"
  exit 1
fi
if ! grep -Ezq -- "$pattern" <<<"$output"; then
  echo "output does not match /$pattern/:"
  echo "$output"
  exit 1
fi
echo "$output"
echo "ok"
