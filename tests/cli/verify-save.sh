#!/usr/bin/env bash
# Usage: verify-save.sh FUSEC WORK PACK...
# `fusec verify --save` on wrong rules, then each saved case through
# `fusec onnx-test --rewrite` with the rule's pack: every case reproduces
# the failure (the rule fires on the saved model and changes its outputs;
# constants the rule does not need are graph inputs, so that compiling the
# case does not fold them away first).
set -u
fusec=$1 work=$2
shift 2
rm -rf "$work"
mkdir -p "$work"
failed=0 cases=0
for pack in "$@"; do
  "$fusec" verify --no-device --save "$work/saved" "$pack" > /dev/null 2>&1
  for rule in $(sed -n 's/^rule \([a-z_0-9]*\).*/\1/p' "$pack"); do
    found=0
    for dir in "$work/saved/$rule" "$work/saved/$rule"-[0-9]; do
      [ -d "$dir" ] || continue
      found=1 cases=$((cases + 1))
      out=$("$fusec" onnx-test "$dir" --rewrite --rules "$pack" 2>&1)
      if [ $? -ne 1 ] || ! grep -q "^onnx-test: 0 passed, 1 failed" <<<"$out"; then
        echo "FAIL: $dir does not reproduce: $(tail -n 2 <<<"$out")"
        failed=1
      fi
    done
    [ $found -eq 1 ] || { echo "FAIL: no saved case for $rule"; failed=1; }
  done
done
[ $failed -eq 0 ] && echo "verify-save: $cases saved cases reproduce"
exit $failed
