"""Golden text tests of the graph passes, in the style of LLVM lit + FileCheck.

Each tests/passes/*.onnxtxt holds a model in ONNX's textual syntax and, in `#` comments, one intent
line and RUN lines (shell commands, piped) with substitutions: %onnxtool (the CLI), %s (this file),
%t (a fresh temporary path), %FileCheck (llvm's FileCheck), %python (the test venv's Python),
%srcdir (the source tree). CHECK lines are read by FileCheck from
the same file. A file passes when every RUN line exits 0.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import ONNXTOOL, SOURCE_DIR, Checker  # noqa: E402


def file_check():
    for name in ("FileCheck-14", "FileCheck"):
        p = shutil.which(name)
        if p:
            return p
    p = "/usr/lib/llvm-14/bin/FileCheck"
    if os.path.exists(p):
        return p
    sys.exit("FileCheck not found: scripts/setup installs llvm-14-tools")


def main():
    fc = file_check()
    files = sorted(glob.glob(os.path.join(SOURCE_DIR, "tests", "passes", "*.onnxtxt")))
    if len(sys.argv) > 1:
        files = [f for f in files if any(a in os.path.basename(f) for a in sys.argv[1:])]
    c = Checker("passes golden")
    c.check(len(files) > 0, "no tests/passes/*.onnxtxt found")
    for f in files:
        lines = open(f).read().splitlines()
        intent = lines[0] if lines else ""
        c.check(intent.startswith("#") and len(intent) > 10, f"{f}: the first line must state the intent")
        runs = [l.split("RUN:", 1)[1].strip() for l in lines if l.lstrip().startswith("#") and "RUN:" in l]
        c.check(len(runs) > 0, f"{f}: no RUN lines")
        with tempfile.TemporaryDirectory() as tmp:
            for i, r in enumerate(runs):
                cmd = (r.replace("%onnxtool", ONNXTOOL).replace("%FileCheck", fc)
                       .replace("%python", sys.executable).replace("%srcdir", SOURCE_DIR)
                       .replace("%s", f).replace("%t", os.path.join(tmp, f"t{i}")))
                p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=300)
                ok = p.returncode == 0
                c.check(ok, f"{os.path.basename(f)}: RUN {r}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    c.finish()


if __name__ == "__main__":
    main()
