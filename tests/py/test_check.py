"""`onnxtool check`: every backend test model is valid; every invalid model of tests/invalid is
rejected with its exact message (tests/invalid/cases.txt), quickly and without allocating what it
declares; onnx.checker agrees where it sees the defect; --json, stdin, several models, exit codes."""
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import onnx

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import ONNXTOOL, SOURCE_DIR, Checker, backend_data_models, node_test_models, run  # noqa: E402

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "invalid"))
import make_invalid_models  # noqa: E402

CASES_FILE = os.path.join(SOURCE_DIR, "tests", "invalid", "cases.txt")
BATCH = 300  # models per `onnxtool check` process
SECONDS_PER_CASE = 30  # generous: the sanitizer build runs these too
MAX_RSS_BYTES = 1 << 30  # a model declaring petabytes must not make the checker take a GiB

# Backend models (folder name) on which `check` reports a shape-inference finding that onnx does
# not: a bug of one of our inference functions (lib/ops/infer_*.cpp), not of the model. Each entry
# asserts the exact false finding, so it fails (and must be removed) once the function is fixed;
# every run prints the list.
KNOWN_INFERENCE_BUGS = {}


def sanitizer_report(stderr):
    """True when a sanitizer build reported a problem (it may exit 1, like a finding)."""
    text = stderr if isinstance(stderr, str) else stderr.decode("utf-8", "replace")
    return "Sanitizer" in text or "runtime error:" in text


def read_cases():
    cases = []
    with open(CASES_FILE) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            name, code, onnx_says, message = (p.strip() for p in line.split("|", 3))
            cases.append((name, int(code), onnx_says, message))
    return cases


def check_known_inference_bugs(c, models):
    """The models of KNOWN_INFERENCE_BUGS get exactly their listed false finding; returns the others."""
    rest = []
    for m in models:
        finding = KNOWN_INFERENCE_BUGS.get(os.path.basename(os.path.dirname(m)))
        if finding is None:
            rest.append(m)
            continue
        p = run(["check", m])
        c.check(p.returncode == 1 and p.stdout == f"{m}: {finding}\n",
                f"{m}: KNOWN_INFERENCE_BUGS lists '{finding}', check printed (exit {p.returncode}):\n{p.stdout}"
                "remove the entry if the inference function was fixed")
        print(f"known inference bug, not a model defect: {m}: {finding}")
    return rest


def check_valid_models(c, models, what):
    """All models pass in few processes; returns how many carry warnings."""
    models = check_known_inference_bugs(c, models)
    warned = 0
    for i in range(0, len(models), BATCH):
        batch = models[i:i + BATCH]
        p = run(["check"] + batch)
        c.check(p.returncode == 0 and not sanitizer_report(p.stderr),
                f"{what}: check exited {p.returncode} on batch {i // BATCH}:\n{p.stdout}{p.stderr}")
        summaries = {}
        for line in p.stderr.splitlines():
            path, _, verdict = line.rpartition(": ")
            summaries[path] = verdict
        for m in batch:
            verdict = summaries.get(m, "no summary")
            if c.check(verdict == "valid" or verdict.startswith("valid, "), f"{m}: {verdict}") and verdict != "valid":
                warned += 1
        for line in p.stdout.splitlines():
            c.check(": unverifiable: " in line, f"{what}: unexpected finding on a valid model: {line}")
    return warned


def onnx_rejects(path, full):
    try:
        onnx.checker.check_model(path, full_check=full)
        return False
    except Exception:  # noqa: BLE001 - onnx raises ValidationError, InferenceError, OSError, ...
        return True


def run_measured(args):
    """Runs onnxtool; returns (returncode, stdout, stderr, seconds, max RSS in bytes). The RSS is the
    largest of any child so far (RUSAGE_CHILDREN), an upper bound for this run."""
    start = time.monotonic()
    p = subprocess.Popen([ONNXTOOL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=SECONDS_PER_CASE)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return 124, out, err, SECONDS_PER_CASE, 0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return p.returncode, out, err, time.monotonic() - start, rss


def check_cases(c, tmp):
    cases = read_cases()
    paths = make_invalid_models.generate(tmp)
    names = [n for n, *_ in cases]
    c.check(sorted(names) == sorted(paths), f"cases.txt and make_invalid_models.py disagree: "
            f"{sorted(set(names) ^ set(paths))}")
    c.check(len(names) == len(set(names)), "a case is listed twice in cases.txt")
    rejected = [n for n, code, *_ in cases if code != 0]
    c.check(len(rejected) >= 40, f"only {len(rejected)} invalid models")
    onnx_misses = []
    for name, code, onnx_says, message in cases:
        path = paths.get(name)
        if path is None:
            continue
        message = message.replace("{dir}", os.path.dirname(path))
        rc, out, err, secs, rss = run_measured(["check", path])
        c.check(rc == code and not sanitizer_report(err), f"{name}: exit {rc}, expected {code}\n{out}{err}")
        c.check(secs < SECONDS_PER_CASE, f"{name}: took {secs:.1f} s")
        c.check(rss < MAX_RSS_BYTES, f"{name}: used {rss >> 20} MiB")
        lines = out.splitlines()
        if code == 2:
            expected = f"onnxtool: error: {path}: {message}"
            c.check(expected in err.splitlines(), f"{name}: expected on stderr\n  {expected}\ngot\n  {err}")
            c.check(out == "", f"{name}: unreadable input printed findings: {out}")
        elif code == 1:
            expected = f"{path}: {message}"
            c.check(expected in lines, f"{name}: expected\n  {expected}\ngot\n  " + "\n  ".join(lines))
        else:
            want = [] if message == "-" else [f"{path}: {message}"]
            c.check(lines == want, f"{name}: expected {want}, got {lines}")
        # onnx.checker on the same file: does it see the defect too?
        if onnx_says == "rejects":
            c.check(onnx_rejects(path, False), f"{name}: onnx.checker accepts it, cases.txt says it rejects")
        elif onnx_says == "rejects-full":
            c.check(not onnx_rejects(path, False) and onnx_rejects(path, True),
                    f"{name}: cases.txt says onnx.checker rejects it only with full_check=True")
        elif onnx_says in ("misses", "accepts"):
            c.check(not onnx_rejects(path, True), f"{name}: onnx.checker rejects it, cases.txt says it {onnx_says} it")
            if onnx_says == "misses":
                onnx_misses.append(name)
        elif onnx_says != "not-asked":
            c.check(False, f"{name}: unknown onnx column '{onnx_says}'")
    print(f"{len(rejected)} invalid models rejected with their message; onnx.checker misses {len(onnx_misses)} "
          f"of them: {', '.join(onnx_misses)}")
    return paths


def check_mutants(c, tmp, count=400):
    """Hostile input: byte-level mutants of backend models. Whatever they hold, check ends with
    0, 1 or 2 (never a crash or abort) and prints whole, printable UTF-8 lines."""
    import random

    rng = random.Random(20261122)
    models = node_test_models()
    paths = []
    for i in range(count):
        with open(rng.choice(models), "rb") as f:
            data = bytearray(f.read())
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(data))
            r = rng.random()
            if r < 0.6:
                data[k] = rng.randrange(256)
            elif r < 0.8:
                del data[k:k + rng.randint(1, 8)]
            else:
                data[k:k] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        path = os.path.join(tmp, f"mutant{i}.onnx")
        with open(path, "wb") as f:
            f.write(bytes(data))
        paths.append(path)
    codes = {}
    for i in range(0, len(paths), 100):
        p = subprocess.run([ONNXTOOL, "check"] + paths[i:i + 100], capture_output=True)
        c.check(p.returncode in (0, 1, 2) and not sanitizer_report(p.stderr),
                f"mutants {i}..: exit {p.returncode}\n{p.stderr[-2000:]!r}")
        for line in p.stdout.split(b"\n")[:-1]:
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            printable = text is not None and not any(ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0 for ch in text)
            c.check(printable, f"mutant finding is not a printable line: {line[:200]!r}")
        for line in p.stderr.decode("utf-8", "replace").splitlines():
            verdict = ("unreadable" if line.startswith("onnxtool: error:")
                       else "invalid" if re.search(r": \d+ errors?(, \d+ warnings?)?$", line) else "valid")
            codes[verdict] = codes.get(verdict, 0) + 1
    print(f"{count} mutated models: " + ", ".join(f"{v} {k}" for k, v in sorted(codes.items())))


def check_cli(c, paths):
    valid, invalid, unreadable = paths["if_valid_outer_scope"], paths["too_few_inputs"], paths["empty_file"]
    # --json: one document per model, one line each
    p = run(["check", "--json", invalid])
    c.check(p.returncode == 1, f"--json invalid: exit {p.returncode}")
    doc = json.loads(p.stdout)
    c.check(doc["schema_version"] == 1 and doc["file"] == invalid and doc["readable"] and not doc["valid"], f"--json: {doc}")
    c.check(doc["errors"] == [{"message": f"{invalid}: node 'add' (Add): has 1 input, expected 2", "code": "spec",
                               "node": "add", "op_type": "Add"}] and doc["warnings"] == [], f"--json errors: {doc}")
    p = run(["check", "--json", paths["node_of_unknown_domain"], unreadable])
    c.check(p.returncode == 2, f"--json warning + unreadable: exit {p.returncode}")
    docs = [json.loads(line) for line in p.stdout.splitlines()]
    c.check(len(docs) == 2 and docs[0]["valid"] and len(docs[0]["warnings"]) == 1 and docs[0]["warnings"][0]["node"] == "fused"
            and docs[0]["warnings"][0]["code"] == "unverifiable-domain", f"--json warning: {docs}")
    # --strict: warnings count as errors
    p = run(["check", "--strict", paths["node_of_unknown_domain"]])
    c.check(p.returncode == 1, f"--strict with a warning: exit {p.returncode}")
    p = run(["check", "--strict", "--json", paths["inferred_contradicts_declared"]])
    doc = json.loads(p.stdout) if p.stdout else {}
    c.check(p.returncode == 1 and not doc.get("valid", True) and
            [w["code"] for w in doc.get("warnings", [])] == ["declared-shape-mismatch"],
            f"--strict: a declared shape contradicting inference fails: {p.returncode} {doc}")
    p = run(["check", paths["inferred_contradicts_declared"]])
    c.check(p.returncode == 0, f"without --strict it is a warning: exit {p.returncode}")
    c.check(len(docs) == 2 and not docs[1]["readable"] and not docs[1]["valid"] and
            "empty file" in docs[1]["errors"][0]["message"], f"--json unreadable: {docs}")
    # several models: each checked, the worst exit code wins
    p = run(["check", valid, invalid])
    c.check(p.returncode == 1, f"valid + invalid: exit {p.returncode}")
    c.check(f"{valid}: valid" in p.stderr and f"{invalid}: 1 error" in p.stderr, f"summaries: {p.stderr}")
    p = run(["check", unreadable, valid, invalid])
    c.check(p.returncode == 2, f"unreadable + valid + invalid: exit {p.returncode}")
    c.check(f"{invalid}: node 'add' (Add): has 1 input, expected 2" in p.stdout, "models after an unreadable one are checked")
    # stdin
    with open(invalid, "rb") as f:
        p = subprocess.run([ONNXTOOL, "check", "-"], stdin=f, capture_output=True, text=True)
    c.check(p.returncode == 1 and p.stdout == "<stdin>: node 'add' (Add): has 1 input, expected 2\n", f"stdin: {p.stdout}")
    # -q drops the summary; usage errors exit 2; --help is complete
    p = run(["-q", "check", valid])
    c.check(p.returncode == 0 and p.stderr == "" and p.stdout == "", f"-q: {p.stderr}")
    p = run(["check"])
    c.check(p.returncode == 2, f"no MODEL: exit {p.returncode}")
    p = run(["check", "--no-such-flag", valid])
    c.check(p.returncode == 2, f"unknown flag: exit {p.returncode}")
    p = run(["check", "--help"])
    c.check(p.returncode == 0 and all(s in p.stdout for s in ("MODEL", "--json", "Exit codes")), f"--help: {p.stdout}")


def main():
    c = Checker("check")
    node_models = node_test_models()
    data_models = backend_data_models()
    warned = check_valid_models(c, node_models, "node tests") + check_valid_models(c, data_models, "backend data")
    print(f"{len(node_models)} backend node test models and {len(data_models)} other backend models checked valid "
          f"({warned} with unverifiable-domain warnings)")
    with tempfile.TemporaryDirectory() as tmp:
        paths = check_cases(c, tmp)
        check_cli(c, paths)
        check_mutants(c, tmp)
    c.finish()


if __name__ == "__main__":
    main()
