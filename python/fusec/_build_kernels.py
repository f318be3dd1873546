"""fusec's kernel-build helper for Python processes: ``Device::prepare`` runs
it, one process per further core, as ``python -I _build_kernels.py --device
NAME FILE...``; it compiles each canonical program FILE into the kernel cache
and exits 0 (the CLI's hidden ``fusec build-kernels`` does the same). Run in
isolated mode, it imports only the native module beside this file."""
import os
import sys


def main(argv):
    if len(argv) < 3 or argv[0] != "--device":
        print("usage: _build_kernels.py --device NAME FILE...", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _fusec  # noqa: E402 (the native module beside this file, not the package)

    error = _fusec.build_kernel_files(argv[1], argv[2:])
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
