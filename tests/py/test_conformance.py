"""The ONNX backend node test suite on the reference executor: every case passes except those in
tests/conformance/expected-failures.txt (each with its reason), and no listed case passes
unnoticed, both as given and after `optimize -O3`. Also asserts the suite-wide pass rate the project promises (>= 99% once complete)."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import BUILD_DIR, NODE_TESTS, SOURCE_DIR  # noqa: E402

RUNNER = os.path.join(BUILD_DIR, "tests", "conformance")
EXPECTED = os.path.join(SOURCE_DIR, "tests", "conformance", "expected-failures.txt")


def run(extra, label):
    r = subprocess.run([RUNNER, NODE_TESTS, "--expected-failures", EXPECTED, "--quiet"] + extra, capture_output=True, text=True)
    print(r.stdout[-4000:])
    if r.stderr:
        print(r.stderr[-2000:])
    m = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", r.stdout, re.M)
    if not m:
        sys.exit(f"{label}: conformance runner printed no summary line")
    passed, failed = int(m.group(1)), int(m.group(2))
    fixed = re.search(r"(\d+) listed cases now pass", r.stdout)
    if fixed and int(fixed.group(1)):
        print("listed cases now pass: remove them from tests/conformance/expected-failures.txt")
        sys.exit(1)
    if r.returncode != 0:
        sys.exit(f"{label}: unexpected conformance failures (see FAIL lines above)")
    print(f"conformance {label}: {passed}/{passed + failed} cases pass ({100.0 * passed / (passed + failed):.1f}%)")
    return passed


def main():
    plain = run([], "ref")
    # Every model again after the optimizer's -O3 pipeline: optimized models must pass as before.
    if os.path.basename(os.path.normpath(BUILD_DIR)).endswith("asan"):
        # Under the sanitizers the second pass covers the function-expanded cases (many nodes and
        # constants, where the passes rewrite most); the release pass covers every case.
        run(["--optimize", "3", "--filter", "_expanded"], "ref after optimize -O3 (expanded cases)")
        return
    optimized = run(["--optimize", "3"], "ref after optimize -O3")
    if optimized != plain:
        sys.exit(f"{plain} cases pass as given but {optimized} after optimize -O3")


if __name__ == "__main__":
    main()
