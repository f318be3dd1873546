#!/usr/bin/env bash
# Usage: expect-error.sh [--status N] [--all] PATTERN COMMAND...
# Passes when COMMAND exits with status N (default 1: not a crash, not
# success) and its stderr (with --all, stdout and stderr, read as one text
# where `.` spans lines) matches the extended regex PATTERN.
want=1 all=0
while [ $# -gt 0 ]; do
  case $1 in
    --status) want=$2; shift 2 ;;
    --all) all=1; shift ;;
    *) break ;;
  esac
done
pattern=$1
shift
if [ "$all" -eq 1 ]; then
  output=$("$@" 2>&1)
else
  output=$("$@" 2>&1 >/dev/null)
fi
status=$?
if [ "$status" -ne "$want" ]; then
  echo "expected exit status $want, got $status; output:"
  echo "$output"
  exit 1
fi
if ! grep -Ezq -- "$pattern" <<<"$output"; then
  echo "output does not match /$pattern/:"
  echo "$output"
  exit 1
fi
echo "ok: $output"
