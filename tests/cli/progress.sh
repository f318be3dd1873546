#!/usr/bin/env bash
# progress.sh FUSEC MODEL: long work shows progress on a terminal and
# nothing of it when stderr is not one. The terminal is a pseudo-terminal
# made by script(1).
set -euo pipefail
fusec=$1 model=$2
on_tty=$(script -qec "$(printf '%q ' "$fusec" run "$model" --tune)" /dev/null)
grep -q 'fused: tuning [0-9]*/[0-9]*' <<<"$on_tty" || { echo "progress: no tuning progress on a terminal"; exit 1; }
grep -q 'fused: building kernels [0-9]*/[0-9]*' <<<"$on_tty" || { echo "progress: no build progress on a terminal"; exit 1; }
piped=$("$fusec" run "$model" --tune 2>&1)
if grep -q $'\x1b\\[K\\|building kernels [0-9]' <<<"$piped"; then echo "progress: progress drawn into a pipe"; exit 1; fi
grep -q "device time" <<<"$piped"
echo "progress: on a terminal only"
