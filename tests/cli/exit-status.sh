#!/usr/bin/env bash
# Usage: exit-status.sh COMMAND...
# Runs COMMAND; a non-zero exit status ends the output with the line
# "fusec-test: exit status N". CTest ignores the exit status of a test with
# PASS_REGULAR_EXPRESSION, so every test runs through this script and fails
# on that line (FAIL_REGULAR_EXPRESSION, set in tests/CMakeLists.txt).
"$@"
status=$?
[ "$status" -eq 0 ] || echo "fusec-test: exit status $status"
exit "$status"
