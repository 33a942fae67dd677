"""The ONNX backend node test suite on the cpu executor (fast kernels, reference fallbacks for
the rest): every case that passes on ref passes on cpu; the allow-list is ref's, unchanged."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_conformance import run  # noqa: E402


def main():
    cpu = run(["--executor", "cpu"], "cpu")
    ref = run([], "ref")
    if cpu != ref:
        sys.exit(f"{ref} cases pass on ref but {cpu} on cpu")


if __name__ == "__main__":
    main()
