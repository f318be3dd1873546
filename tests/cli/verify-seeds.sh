#!/usr/bin/env bash
# Usage: verify-seeds.sh FUSEC wrong|correct PACK [SEEDS]
# (SEEDS: 10, or FUSEC_VERIFY_SEEDS; the sanitizer run sets 1.)
# `fusec verify` on one pack with every seed from 1 to SEEDS (10): a wrong
# rule gets a counterexample on each (exit status 1), a correct one is
# verified or proved on each (exit status 0, never "no instance"). A result
# that depends on the seed is the generator missing part of the instance
# space.
set -u
fusec=$1 kind=$2 pack=$3 seeds=${4:-${FUSEC_VERIFY_SEEDS:-10}}
failed=0
for seed in $(seq "$seeds"); do
  out=$("$fusec" verify --no-device --seed "$seed" "$pack" 2>&1)
  status=$?
  summary=$(tail -n 1 <<<"$out")
  if [ "$kind" = wrong ]; then
    if [ $status -ne 1 ] || ! grep -q "1 with a counterexample" <<<"$summary"; then
      echo "FAIL: seed $seed: a wrong rule passed (exit $status): $summary"
      failed=1
    fi
  else
    if [ $status -ne 0 ] || ! grep -Eq "(1 proved|1 verified)" <<<"$summary"; then
      echo "FAIL: seed $seed: a correct rule was not shown sound (exit $status):"
      grep -E "^(counterexample|no instance|not checked)" <<<"$out"
      failed=1
    fi
  fi
done
[ $failed -eq 0 ] && echo "verify-seeds: $kind rule, $seeds seeds, as expected"
exit $failed
