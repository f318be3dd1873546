#!/usr/bin/env bash
# Usage: bundle.sh FUSEC MODEL WORKDIR [compile options...]
# The deployment bundle, as a user gets it: `fusec compile --emit bundle`,
# then the bundle's own CMakeLists.txt builds its host program (plain
# OpenCL, no fusec), which runs the sample inputs and must match the
# reference interpreter's outputs shipped with them. Also: --input and
# --output-dir give the same bytes as the sample run, and bad input to the
# host program is a clear error.
set -euo pipefail
fusec=$1 model=$2 work=$3
shift 3
rm -rf "$work"
# --no-build: the bundle's host program builds its kernels itself; fusec's
# own build (and timing the fusions against their members) is not tested here.
"$fusec" compile "$model" -o "$work" --emit report,bundle --no-build "$@"
bundle=$work/bundle
cmake -S "$bundle" -B "$work/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
run=$work/build/fusec-bundle-run
"$run" "$bundle" --check --repeat 2 --output-dir "$work" | tee "$work/run.log"
grep -q "matches the expected output" "$work/run.log"

# Inputs given as files: the same outputs, byte for byte (same device, same kernels).
inputs=()
for f in $(ls "$bundle/inputs" | sort -n); do inputs+=(--input "$bundle/inputs/$f"); done
mkdir -p "$work/again"
"$run" "$bundle" "${inputs[@]}" --output-dir "$work/again" >/dev/null
for f in "$work"/again/*.bin; do cmp "$f" "$work/$(basename "$f")"; done

# Concat inputs written in place (sub-buffers of the Concat's result) and
# Slices read in place (sub-buffers of their operand): the same bytes when
# each is a buffer of its own, copied into place after its writer or from
# its operand before its readers.
if grep -Eq "^buffer [0-9]* (part|view) " "$bundle/program.txt"; then
  mkdir -p "$work/copied"
  "$run" "$bundle" --copy-parts --output-dir "$work/copied" >/dev/null
  for f in "$work"/copied/*.bin; do cmp "$f" "$work/$(basename "$f")"; done
  if grep -q "^buffer [0-9]* part " "$bundle/program.txt"; then echo "parts copied: same outputs"; fi
  if grep -q "^buffer [0-9]* view " "$bundle/program.txt"; then echo "views copied: same outputs"; fi
fi

# Bad input: exit status 1 and a message naming the problem.
expect_error() {
  local pattern=$1
  shift
  local status=0
  err=$("$@" 2>&1 >/dev/null) || status=$?
  if [ "$status" -ne 1 ] || ! grep -Eq -- "$pattern" <<<"$err"; then
    echo "expected exit 1 and /$pattern/, got $status: $err"
    exit 1
  fi
}
head -c 3 "$bundle/inputs/0.bin" >"$work/short.bin"
expect_error "input .* needs [0-9]+ bytes, the file has 3" "$run" "$bundle" --input "$work/short.bin"
cp -r "$bundle" "$work/broken"
echo "kernel k kernels/none.cl 1 0 999:4:r" >>"$work/broken/program.txt"
expect_error "program.txt:[0-9]+: argument names no buffer" "$run" "$work/broken"
cp -r "$bundle" "$work/broken-part"
echo "buffer $(grep -c '^buffer ' "$bundle/program.txt") part 8 0 1000000000" >>"$work/broken-part/program.txt"
expect_error "program.txt:[0-9]+: a part must lie inside an earlier intermediate buffer" "$run" "$work/broken-part"
expect_error "no OpenCL device matches" "$run" "$bundle" --device no-such-device
echo "bundle ok"
