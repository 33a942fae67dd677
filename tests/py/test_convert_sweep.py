"""Quick subset of scripts/convert-sweep: every 15th ONNX backend node test converted to every opset
from 7 to the newest, run on the reference executor against the expected outputs, and checked by
onnx.checker's full check. No conversion may compute wrong outputs or fail the checker, and the
sweep must convert (not only refuse) most of what it tries. The full sweep: scripts/convert-sweep.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import BUILD_DIR, SOURCE_DIR, Checker  # noqa: E402


def main():
    c = Checker("convert sweep (quick)")
    cases = os.environ.get("ONNX_NODE_TESTS", os.path.join(SOURCE_DIR, "build", "onnx-tests", "node"))
    if not os.path.isdir(cases):
        subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "scripts", "gen_node_tests.py"),
                        os.path.dirname(cases)], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sweep.json")
        p = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "scripts", "convert-sweep"), "--cases", cases,
                            "--build", BUILD_DIR, "--every", "15", "--checker", "--json", out],
                           capture_output=True, text=True, timeout=900)
        print(p.stdout[-4000:])
        c.check(os.path.exists(out), f"the sweep wrote no report: {p.stderr[-2000:]}")
        if os.path.exists(out):
            d = json.load(open(out))["onnxtool"]
            c.check(d["tried"] > 1000, f"only {d['tried']} conversions tried")
            c.check(d["wrong"] == 0, f"{d['wrong']} conversions compute wrong outputs")
            c.check(d["checker_failed"] == 0, f"{d['checker_failed']} converted models fail onnx.checker")
            c.check(d["passed"] > d["tried"] // 2, f"only {d['passed']} of {d['tried']} conversions passed")
            c.check(p.returncode == 0, f"convert-sweep exited {p.returncode}")
    c.finish()


if __name__ == "__main__":
    main()
