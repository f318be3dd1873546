#!/usr/bin/env bash
# Usage: plan-structure.sh FUSEC MODEL EXPECTED WORKDIR [compile options...]
# Compiles MODEL and checks its plan's groups against EXPECTED (see
# plan_groups.py): which ops, in which group, formed by which rule.
set -euo pipefail
fusec=$1 model=$2 expected=$3 work=$4
shift 4
rm -rf "$work"
"$fusec" compile --no-build "$model" -o "$work" --emit plan "$@" >/dev/null
/usr/bin/python3 "$(dirname "$0")/plan_groups.py" "$work/plan.json" "$expected"
