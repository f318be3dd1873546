#!/usr/bin/env bash
# Usage: hostile-bundle.sh HOST BUNDLE WORK
# A bundle's host program trusts nothing in the bundle: each damaged or
# hand-written program.txt, and each file that is not what it should be,
# ends in exit 1 with a one-line reason, never a crash, a hang, or a file
# read from outside the bundle.
set -u
run=$1 bundle=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
n=0
# case NAME PATTERN SED_SCRIPT|-  [COMMAND...]: a copy of the bundle with
# program.txt edited by the sed script (or by the command, run in the copy).
case_() {
  local name=$1 pattern=$2 edit=$3
  shift 3
  local copy=$work/$name
  cp -r "$bundle" "$copy"
  if [ "$edit" != - ]; then sed -i -E "$edit" "$copy/program.txt"; fi
  if [ $# -gt 0 ]; then (cd "$copy" && "$@") || fail "$name: setting up failed"; fi
  local status=0 err
  err=$(timeout 60 "$run" "$copy" --check 2>&1 >/dev/null) || status=$?
  [ "$status" -eq 1 ] || fail "$name: exit $status (expected 1): $err"
  grep -Eq -- "$pattern" <<<"$err" || fail "$name: no /$pattern/ in: $err"
  [ "$(grep -c . <<<"$err")" -le 2 ] || fail "$name: more than a short message: $err"
  n=$((n + 1))
}
first_kernel=$(grep -m1 '^kernel ' "$bundle/program.txt")
kname=$(awk '{print $2}' <<<"$first_kernel")
case_ version "version 2 expected" 's/^fusec-bundle 2/fusec-bundle 1/'
case_ no-version "must be .fusec-bundle 2" '/^fusec-bundle/d'
case_ unknown-kind "unknown buffer kind" '0,/^buffer 0 [a-z]+ /s/^buffer 0 [a-z]+ /buffer 0 weird /'
case_ negative "malformed buffer" 's/^(buffer 0 [a-z]+ )[0-9]+/\1-4/'
case_ wrap "malformed buffer|too short" 's/^(buffer [0-9]+ constant )[0-9]+ [0-9]+/\118446744073709551615 18446744073709551600/'
case_ offset-wrap "too short" 's/^(buffer [0-9]+ constant [0-9]+ )[0-9]+/\168719476735/'
case_ traversal "a kernel file must be kernels/NAME.cl" "s#^(kernel [^ ]+ )kernels/[^ ]+#\1../../../../etc/passwd#"
case_ traversal-inside "a kernel file must be kernels/NAME.cl" "s#^(kernel [^ ]+ )kernels/([^ ]+)#\1kernels/../\2#"
case_ huge-global "malformed kernel" 's/^(kernel [^ ]+ [^ ]+ )[0-9]+/\1999999999999999/'
case_ uneven-local "multiple of the local size" 's/^(kernel [^ ]+ [^ ]+ )[0-9]+ [0-9]+/\17 3/'
case_ arg-too-big "takes [0-9]+ bytes of buffer" 's/^(kernel [^ ]+ [^ ]+ [0-9]+ [0-9]+ [0-9]+):[0-9]+:/\1:68719476736:/'
# The first kernel's written argument pointed at a constant buffer.
constant=$(grep -m1 -E '^buffer [0-9]+ constant ' "$bundle/program.txt" | awk '{print $2}')
if [ -n "$constant" ]; then
  case_ writes-constant "would write into constant buffer" "s/^(kernel .* )[0-9]+(:[0-9]+:w)/\1${constant}\2/"
fi
case_ lie-smaller "its kernel file says" 's/^(kernel [^ ]+ [^ ]+ [0-9]+ [0-9]+ [0-9]+):[0-9]+:/\1:4:/'
case_ lie-global "its kernel file says" 's/^(kernel [^ ]+ [^ ]+ )[0-9]+ [0-9]+ /\11048576 0 /'
case_ kernel-untagged "not a bundle's kernel" - sh -c "sed -i 1d kernels/$kname.cl"
case_ old-args "a kernel argument is BUFFER:BYTES" 's/^(kernel [^ ]+ [^ ]+ [0-9]+ [0-9]+ [0-9]+):[0-9]+:[rw]/\1/'
case_ program-folder "program.txt: not a regular file" - sh -c 'rm program.txt && mkdir program.txt'
case_ input-fifo "inputs/0.bin: not a regular file" - sh -c 'rm inputs/0.bin && mkfifo inputs/0.bin'
case_ constants-missing "constants.bin" - rm constants.bin
case_ kernel-device "leads outside the bundle" - sh -c "ln -sf /dev/zero kernels/$kname.cl"
echo "secret line" > "$work/secret.txt"
case_ kernel-link-out "leads outside the bundle" - sh -c "ln -sf '$work/secret.txt' kernels/$kname.cl"
case_ unknown-record "unknown record" '$a frobnicate 1 2 3'
echo "ok: $n damaged bundles refused with a reason"
