#!/usr/bin/env python3
"""fuzz_models.py: structure-aware fuzzing of `onnxtool run` / `check` / `inspect` / `convert`.

Takes the ONNX backend node test models, mutates them with the onnx Python API (attribute
values, initializer and Constant tensors, graph input types and shapes, the input tensors
themselves, node input/output counts, opset versions), runs the sanitizer build on each mutant
and flags every outcome the project promises never happens on bad input:

  * death by a signal (SIGSEGV, SIGABRT, ...) or an exit code other than 0/1/2/3,
  * a sanitizer report ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", UBSan's
    "runtime error:"),
  * a run past the per-run timeout (a hang, or an absurd amount of work),
  * a failure (exit 2/3) whose stderr is empty or more than one line,
  * (soft) a C++ standard-library message leaking out ("vector::_M_range_check", "stoll", ...)
    instead of one naming the file, node or field.

Findings are grouped by crash site (the first project frame of the sanitizer stack, or the
UBSan source location, or the kind and op type) and one reproducer per site is kept under
OUT/findings/<site>/ (model.onnx, inputs/, cmd.txt, stderr.txt).

Command line (from the repository root, after `scripts/build asan`):

    build/venv/bin/python tests/fuzz/fuzz_models.py \\
        --onnxtool build-asan/onnxtool --node-dir build/onnx-tests/node \\
        --seed 1 --iterations 2000 --timeout 10 --mem-gb 4 --jobs 2 --out /tmp/onnxtool-fuzz

`--filter REGEX` limits the node tests (e.g. `--filter 'gather|scatter'`). Each iteration makes
one mutant and runs `run --inputs-dir` (or `run --random`), then `check`, and on some
iterations `inspect --json` and `convert`; every op family is visited in turn (the test list is
shuffled with the seed and walked round-robin). The same seed and iteration count give the same
mutants. Memory is bounded by RLIMIT_AS for an uninstrumented binary and by ASan's
hard_rss_limit_mb / max_allocation_size_mb for a sanitizer build (ASan needs terabytes of
address space for its shadow, so RLIMIT_AS cannot be used there). Exit status: 0 when nothing
was flagged, 1 otherwise. Not run by CTest: it takes minutes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import hashlib
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

HUGE_INTS = [0, -1, -2, 1, 2**31 - 1, -(2**31), 2**40, -(2**40), 2**62, 2**63 - 1, -(2**63), 3, 7, 1000003]
BAD_FLOATS = [float("nan"), float("inf"), float("-inf"), 0.0, -1.0, 1e30, -1e30, 1e-40, 2.0**40]
GARBAGE_STRINGS = [b"", b"\xff\xfe", b"NOT_A_MODE", b"A" * 300, b"\x00x", b"constant", b"linear", b"DCR"]
DTYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT8,
          TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16,
          TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL, TensorProto.STRING, TensorProto.COMPLEX64,
          TensorProto.FLOAT8E4M3FN, TensorProto.UINT4, TensorProto.INT4, 0, 17, 25, 99, -3]
STD_LEAKS = re.compile(r"vector::|basic_string|_M_range_check|\bstoll?\b|\bstoi\b|std::|bad_optional|bad_variant|"
                       r"map::at|unordered_map::at|out_of_range|bad_function_call")
SAN_FRAME = re.compile(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+?):(\d+)")
UBSAN_LOC = re.compile(r"(\S+?):(\d+):\d+: runtime error: (.*)")


# ---------------------------------------------------------------- mutations


def mutate_int(rng: random.Random, v: int) -> int:
    r = rng.random()
    if r < 0.7:
        return rng.choice(HUGE_INTS)
    if r < 0.85:
        return -v
    return v + rng.choice([-1, 1, 2, 100])


def mutate_ints(rng: random.Random, vs: list[int]) -> list[int]:
    vs = list(vs)
    r = rng.random()
    if r < 0.25 and vs:
        return vs[: rng.randrange(len(vs))]  # shortened
    if r < 0.45:
        return vs + [rng.choice(vs + [0, 1, -1, 2**40]) for _ in range(rng.randint(1, 4))]  # lengthened
    if r < 0.55:
        return []
    if vs:
        i = rng.randrange(len(vs))
        vs[i] = mutate_int(rng, vs[i])
        if rng.random() < 0.3:
            vs = [rng.choice(HUGE_INTS) for _ in vs]
    return vs


def mutate_tensor(rng: random.Random, t: TensorProto) -> str:
    """Mutates a TensorProto in place; returns what it did."""
    r = rng.random()
    if r < 0.3:  # dims changed
        dims = list(t.dims)
        c = rng.random()
        if c < 0.25 and dims:
            dims.pop(rng.randrange(len(dims)))
        elif c < 0.5:
            dims.insert(rng.randrange(len(dims) + 1), rng.choice([0, 1, 2, 3, 2**40, -1]))
        elif dims:
            dims[rng.randrange(len(dims))] = rng.choice([0, -1, 2**31, 2**40, 2**62, 1, 7])
        else:
            dims = [rng.choice([0, 2, 2**40])]
        del t.dims[:]
        t.dims.extend(dims)
        return f"tensor {t.name!r} dims -> {dims}"
    if r < 0.55:  # data truncated or extended
        if t.HasField("raw_data") and t.raw_data:
            n = len(t.raw_data)
            t.raw_data = t.raw_data[: rng.randrange(n)] if rng.random() < 0.7 else t.raw_data + b"\x01" * rng.randint(1, 9)
            return f"tensor {t.name!r} raw_data {n} -> {len(t.raw_data)} bytes"
        for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
            f = getattr(t, field)
            if len(f):
                k = rng.randrange(len(f))
                del f[k:]
                return f"tensor {t.name!r} {field} truncated to {k}"
        t.raw_data = b"\x07" * rng.randint(1, 5)
        return f"tensor {t.name!r} given odd raw_data"
    if r < 0.75:  # dtype changed, data kept
        old = t.data_type
        t.data_type = rng.choice(DTYPES)
        return f"tensor {t.name!r} dtype {old} -> {t.data_type}"
    if r < 0.9:  # values extreme (integers: out-of-range indices; floats: nan/inf)
        try:
            a = numpy_helper.to_array(t)
        except Exception:
            return "tensor unreadable, unchanged"
        if a.size == 0 or a.dtype.kind not in "iuf":
            return "tensor empty, unchanged"
        a = a.copy()
        flat = a.reshape(-1)
        i = rng.randrange(flat.size)
        if a.dtype.kind == "f":
            flat[i] = rng.choice(BAD_FLOATS)
        else:
            info = np.iinfo(a.dtype)
            flat[i] = rng.choice([info.min, info.max, -1, info.max // 2, 2**31 - 1 if info.max > 2**31 else info.max])
        t.CopyFrom(numpy_helper.from_array(a, t.name))
        return f"tensor {t.name!r} element {i} extreme"
    # external data pointing nowhere (or somewhere odd)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    loc = rng.choice(["missing.bin", "../../../../etc/passwd", "/etc/passwd", "", "model.onnx"])
    t.external_data.add(key="location", value=loc)
    if rng.random() < 0.5:
        t.external_data.add(key="offset", value=str(rng.choice([-1, 2**62, 10])))
        t.external_data.add(key="length", value=str(rng.choice([-5, 2**62, 4])))
    return f"tensor {t.name!r} external -> {loc}"


def all_nodes(g: onnx.GraphProto):
    for n in g.node:
        yield n
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from all_nodes(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sg in a.graphs:
                    yield from all_nodes(sg)


def all_graphs(g: onnx.GraphProto):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                yield from all_graphs(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sg in a.graphs:
                    yield from all_graphs(sg)


def schema_attrs(node: onnx.NodeProto, opset: int):
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain).attributes
    except Exception:
        return {}


def m_attribute(rng, model, inputs):
    nodes = [n for n in all_nodes(model.graph)]
    if not nodes:
        return None
    n = rng.choice(nodes)
    opset = next((o.version for o in model.opset_import if o.domain == n.domain), 21)
    if not n.attribute or rng.random() < 0.25:
        # add an attribute the schema knows but the node lacks, with a hostile value
        known = {k: v for k, v in schema_attrs(n, opset).items() if k not in {a.name for a in n.attribute}}
        if not known:
            return None
        name, a = rng.choice(sorted(known.items()))
        t = a.type
        if t == AttributeProto.INT:
            n.attribute.append(helper.make_attribute(name, rng.choice(HUGE_INTS)))
        elif t == AttributeProto.INTS:
            n.attribute.append(helper.make_attribute(name, [rng.choice(HUGE_INTS) for _ in range(rng.randint(0, 5))]))
        elif t == AttributeProto.FLOAT:
            n.attribute.append(helper.make_attribute(name, rng.choice(BAD_FLOATS)))
        elif t == AttributeProto.FLOATS:
            n.attribute.append(helper.make_attribute(name, [rng.choice(BAD_FLOATS) for _ in range(rng.randint(0, 4))]))
        elif t == AttributeProto.STRING:
            n.attribute.append(helper.make_attribute(name, rng.choice(GARBAGE_STRINGS)))
        elif t == AttributeProto.STRINGS:
            n.attribute.append(helper.make_attribute(name, [rng.choice(GARBAGE_STRINGS) for _ in range(rng.randint(0, 3))]))
        else:
            return None
        return f"{n.op_type}: added attribute {name}"
    a = rng.choice(list(n.attribute))
    if rng.random() < 0.08:  # wrong attribute type
        n.attribute.remove(a)
        alt = rng.choice([helper.make_attribute(a.name, 1.5), helper.make_attribute(a.name, [1, 2, 3]),
                          helper.make_attribute(a.name, b"x"), helper.make_attribute(a.name, 5)])
        n.attribute.append(alt)
        return f"{n.op_type}: attribute {a.name} retyped"
    if rng.random() < 0.05:
        n.attribute.remove(a)
        return f"{n.op_type}: attribute {a.name} removed"
    if a.type == AttributeProto.INT:
        a.i = mutate_int(rng, a.i)
        return f"{n.op_type}: {a.name}={a.i}"
    if a.type == AttributeProto.INTS:
        v = mutate_ints(rng, list(a.ints))
        del a.ints[:]
        a.ints.extend(v)
        return f"{n.op_type}: {a.name}={v}"
    if a.type == AttributeProto.FLOAT:
        a.f = rng.choice(BAD_FLOATS)
        return f"{n.op_type}: {a.name}={a.f}"
    if a.type == AttributeProto.FLOATS:
        v = list(a.floats)
        c = rng.random()
        if c < 0.3 and v:
            v = v[: rng.randrange(len(v))]
        elif c < 0.5:
            v += [rng.choice(BAD_FLOATS)] * rng.randint(1, 3)
        elif v:
            v[rng.randrange(len(v))] = rng.choice(BAD_FLOATS)
        del a.floats[:]
        a.floats.extend(v)
        return f"{n.op_type}: {a.name} floats mutated"
    if a.type == AttributeProto.STRING:
        a.s = rng.choice(GARBAGE_STRINGS)
        return f"{n.op_type}: {a.name}={a.s[:20]!r}"
    if a.type == AttributeProto.STRINGS:
        v = list(a.strings)
        if v and rng.random() < 0.5:
            v = v[: rng.randrange(len(v))]
        else:
            v.append(rng.choice(GARBAGE_STRINGS))
        del a.strings[:]
        a.strings.extend(v)
        return f"{n.op_type}: {a.name} strings mutated"
    if a.type == AttributeProto.TENSOR:
        return f"{n.op_type}: {a.name}: " + mutate_tensor(rng, a.t)
    if a.type == AttributeProto.GRAPH:
        g = a.g
        c = rng.random()
        if c < 0.3 and g.node:
            del g.node[rng.randrange(len(g.node))]
            return f"{n.op_type}: {a.name} body node dropped"
        if c < 0.6 and g.output:
            del g.output[rng.randrange(len(g.output))]
            return f"{n.op_type}: {a.name} body output dropped"
        if g.input:
            del g.input[rng.randrange(len(g.input))]
            return f"{n.op_type}: {a.name} body input dropped"
        return None
    return None


def m_initializer(rng, model, inputs):
    tensors = []
    for g in all_graphs(model.graph):
        tensors += list(g.initializer)
        for n in g.node:
            if n.op_type == "Constant":
                tensors += [a.t for a in n.attribute if a.type == AttributeProto.TENSOR]
    if not tensors:
        return None
    return mutate_tensor(rng, rng.choice(tensors))


def m_graph_input_type(rng, model, inputs):
    ins = [i for i in model.graph.input if i.type.HasField("tensor_type")]
    if not ins:
        return None
    vi = rng.choice(ins)
    tt = vi.type.tensor_type
    c = rng.random()
    if c < 0.25:
        tt.elem_type = rng.choice(DTYPES)
        return f"input {vi.name} elem_type -> {tt.elem_type}"
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    if c < 0.5 and dims:
        dims[rng.randrange(len(dims))] = rng.choice([0, 2**40, 2**62, -1, 1, "N"])
    elif c < 0.7:
        dims = dims + [rng.choice([1, 2, 2**40])]
    elif c < 0.85 and dims:
        dims = dims[:-1]
    else:
        dims = [rng.choice([2**40, 2**31, 3]) for _ in range(rng.randint(1, 6))]
    tt.ClearField("shape")
    tt.shape.SetInParent()
    for d in dims:
        nd = tt.shape.dim.add()
        if isinstance(d, int):
            nd.dim_value = d
        elif d:
            nd.dim_param = d
    return f"input {vi.name} dims -> {dims}"


def m_input_tensor(rng, model, inputs):
    if not inputs:
        return None
    idx = rng.randrange(len(inputs))
    t = inputs[idx]
    if not isinstance(t, TensorProto):
        return None
    c = rng.random()
    try:
        a = numpy_helper.to_array(t)
    except Exception:
        a = None
    if c < 0.2 and a is not None and a.dtype.kind in "iufb":
        target = rng.choice([np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.float16, np.int8])
        with np.errstate(all="ignore"):
            b = a.astype(target)
        inputs[idx] = numpy_helper.from_array(b, t.name)
        return f"input {idx} dtype -> {np.dtype(target).name}"
    if c < 0.4 and a is not None:
        r = rng.random()
        if r < 0.4:
            b = a.reshape(-1)
        elif r < 0.7:
            b = a.reshape((1,) + a.shape)
        else:
            b = a.reshape(a.shape + (1,))
        inputs[idx] = numpy_helper.from_array(b, t.name)
        return f"input {idx} rank {a.ndim} -> {b.ndim}"
    if c < 0.55 and a is not None and a.ndim > 0:
        shape = list(a.shape)
        shape[rng.randrange(len(shape))] = 0
        inputs[idx] = numpy_helper.from_array(np.zeros(shape, a.dtype), t.name)
        return f"input {idx} zero dim {shape}"
    if c < 0.7:  # huge dims declared, tiny data
        t2 = copy.deepcopy(t)
        dims = list(t2.dims) or [1]
        dims[rng.randrange(len(dims))] = rng.choice([2**40, 2**31, 2**62, -1])
        del t2.dims[:]
        t2.dims.extend(dims)
        inputs[idx] = t2
        return f"input {idx} dims declared {dims}"
    if a is not None and a.size and a.dtype.kind in "iuf":
        b = a.copy()
        flat = b.reshape(-1)
        n = rng.randint(1, min(4, flat.size))
        for _ in range(n):
            i = rng.randrange(flat.size)
            if b.dtype.kind == "f":
                flat[i] = rng.choice(BAD_FLOATS)
            else:
                info = np.iinfo(b.dtype)
                flat[i] = rng.choice([info.min, info.max, -1, 0, min(info.max, 2**31 - 1), min(info.max, 1000)])
        inputs[idx] = numpy_helper.from_array(b, t.name)
        return f"input {idx} {n} extreme values"
    return None


def m_node_inputs(rng, model, inputs):
    nodes = [n for n in all_nodes(model.graph)]
    if not nodes:
        return None
    n = rng.choice(nodes)
    ins = list(n.input)
    c = rng.random()
    if c < 0.3 and ins:
        ins.pop(rng.randrange(len(ins)))
        what = "dropped an input"
    elif c < 0.55 and ins:
        ins.insert(rng.randrange(len(ins) + 1), rng.choice(ins))
        what = "duplicated an input"
    elif c < 0.7 and ins:
        ins[rng.randrange(len(ins))] = ""
        what = "blanked an input"
    elif c < 0.8 and ins:
        ins.append(rng.choice(ins))
        what = "appended an input"
    elif c < 0.9 and n.output:
        outs = list(n.output)
        if rng.random() < 0.5 and len(outs) > 1:
            outs[rng.randrange(len(outs))] = ""
        else:
            outs.append(f"fuzz_extra_out_{len(outs)}")
        del n.output[:]
        n.output.extend(outs)
        return f"{n.op_type}: outputs -> {outs}"
    elif ins:
        ins.reverse()
        what = "reversed inputs"
    else:
        return None
    del n.input[:]
    n.input.extend(ins)
    return f"{n.op_type}: {what}"


def m_opset(rng, model, inputs):
    if not model.opset_import:
        return None
    o = rng.choice(list(model.opset_import))
    old = o.version
    o.version = rng.choice([1, 2, 5, 6, 7, 9, 10, 11, 12, 13, 14, 17, 18, 19, 20, 21, 22, 23, 24, 0, -1, 1000, 2**40])
    return f"opset {o.domain or 'ai.onnx'} {old} -> {o.version}"


def m_op_type(rng, model, inputs):
    nodes = [n for n in model.graph.node]
    if not nodes:
        return None
    n = rng.choice(nodes)
    old = n.op_type
    n.op_type = rng.choice(SIBLING_OPS)
    return f"op {old} -> {n.op_type}"


SIBLING_OPS = ["Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Slice", "Reshape", "Expand",
               "Tile", "Pad", "Transpose", "Concat", "Split", "Squeeze", "Unsqueeze", "TopK", "OneHot", "Resize",
               "ConstantOfShape", "Range", "CumSum", "Einsum", "MatMul", "Conv", "MaxPool", "AveragePool",
               "DepthToSpace", "SpaceToDepth", "Compress", "NonZero", "Trilu", "ReverseSequence", "GridSample",
               "RoiAlign", "Unique", "Where", "Mod", "Div", "BitShift", "CenterCropPad", "Col2Im", "DFT", "STFT"]

MUTATORS = [(m_attribute, 30), (m_initializer, 15), (m_graph_input_type, 8), (m_input_tensor, 25),
            (m_node_inputs, 10), (m_opset, 7), (m_op_type, 5)]


def pick_mutator(rng):
    total = sum(w for _, w in MUTATORS)
    r = rng.uniform(0, total)
    for f, w in MUTATORS:
        r -= w
        if r <= 0:
            return f
    return MUTATORS[-1][0]


# ---------------------------------------------------------------- running


def limits(mem_bytes: int | None):
    def f():
        os.setsid()
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return f


def run_one(cmd, timeout, env, mem_bytes, cwd):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd,
                         preexec_fn=limits(mem_bytes))
    try:
        _, err = p.communicate(timeout=timeout)
        return p.returncode, err.decode("utf-8", "replace"), time.monotonic() - t0, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, err = p.communicate()
        return None, err.decode("utf-8", "replace"), time.monotonic() - t0, True


def classify(sub, rc, err, timed_out, root):
    """Returns (kind, site) for a flagged outcome, or None."""
    if timed_out:
        return "timeout", None
    if "ERROR: AddressSanitizer" in err or "ERROR: LeakSanitizer" in err or "runtime error:" in err:
        m = UBSAN_LOC.search(err)
        if m:
            return "ubsan", f"{shorten(m.group(1), root)}:{m.group(2)}"
        kind = "asan"
        mm = re.search(r"ERROR: (AddressSanitizer|LeakSanitizer): (\S+)", err)
        if mm:
            kind = f"{mm.group(1)[:4].lower()}-{mm.group(2)}"
        for fm in SAN_FRAME.finditer(err):
            f = fm.group(2)
            if root in f and "/build" not in f:
                return kind, f"{shorten(f, root)}:{fm.group(3)}"
        return kind, None
    if rc is not None and rc < 0:
        return f"signal-{signal.Signals(-rc).name}", None
    if rc not in (0, 1, 2, 3):
        return f"exit-{rc}", None
    if rc in (2, 3) or (rc == 1 and sub == "run"):
        lines = [l for l in err.splitlines() if l.strip()]
        if not lines:
            return "empty-stderr", None
        if len(lines) > 1:
            return "multiline-stderr", None
        if STD_LEAKS.search(lines[0]):
            return "std-message", re.sub(r"[^a-zA-Z_:]", "", STD_LEAKS.search(lines[0]).group(0))
    return None


def shorten(path, root):
    return path[len(root) + 1:] if path.startswith(root + "/") else path


def ops_of(model):
    return sorted({n.op_type for n in model.graph.node})


def one_iteration(args, it, case, root, env, mem_bytes):
    rng = random.Random(f"{args.seed}:{it}")
    model = onnx.load(str(case / "model.onnx"))
    inputs = []
    ds = case / "test_data_set_0"
    for p in sorted(ds.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1])):
        t = TensorProto()
        try:
            t.ParseFromString(p.read_bytes())
        except Exception:
            t = None
        inputs.append(t if t is not None and t.ByteSize() else p.read_bytes())
    notes = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        m = pick_mutator(rng)
        try:
            what = m(rng, model, inputs)
        except Exception as e:  # a mutation the onnx API refuses: skip it
            what = f"{m.__name__} failed: {e}"
        if what:
            notes.append(what)
    work = Path(tempfile.mkdtemp(prefix=f"it{it}_", dir=args.scratch))
    mpath = work / "model.onnx"
    mpath.write_bytes(model.SerializeToString())
    idir = work / "inputs"
    idir.mkdir()
    for i, t in enumerate(inputs):
        (idir / f"input_{i}.pb").write_bytes(t.SerializeToString() if isinstance(t, TensorProto) else t)
    exe = args.onnxtool
    cmds = []
    if rng.random() < 0.8 and inputs:
        cmds.append(("run", [exe, "run", str(mpath), "--inputs-dir", str(idir), "-q"]))
    else:
        cmds.append(("run", [exe, "run", str(mpath), "--random", "--seed", str(it), "-q"]))
    cmds.append(("check", [exe, "check", str(mpath)]))
    if rng.random() < 0.25:
        cmds.append(("inspect", [exe, "inspect", str(mpath), "--json", "--nodes", "--initializers"]))
    if rng.random() < 0.15:
        cmds.append(("convert", [exe, "convert", str(mpath), "-o", str(work / "out.onnx"),
                                 *rng.choice([[], ["--external-data"], ["--inline"]])]))
    results = []
    flagged = []
    for sub, cmd in cmds:
        rc, err, dt, to = run_one(cmd, args.timeout, env, mem_bytes, work)
        c = classify(sub, rc, err, to, root)
        results.append((sub, rc, dt))
        if c:
            flagged.append((sub, cmd, rc, err, c))
    keep = bool(flagged)
    return dict(it=it, case=case.name, ops=ops_of(model), notes=notes, results=results, flagged=flagged,
                work=str(work), keep=keep)


def main():
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # numpy: nan/inf cast into ints on purpose
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = str(Path(__file__).resolve().parents[2])
    ap.add_argument("--onnxtool", default=os.path.join(root, "build-asan/onnxtool"))
    ap.add_argument("--node-dir", default=os.path.join(root, "build/onnx-tests/node"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--start", type=int, default=0, help="first iteration number (to resume or replay one)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per onnxtool run")
    ap.add_argument("--mem-gb", type=float, default=4.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--filter", default="", help="regex on node test names")
    ap.add_argument("--out", default="/tmp/onnxtool-fuzz")
    ap.add_argument("--verbose", action="store_true", help="print every flagged run as it happens")
    args = ap.parse_args()

    args.onnxtool = str(Path(args.onnxtool).resolve())
    cases = sorted(p for p in Path(args.node_dir).iterdir() if (p / "model.onnx").exists())
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    if not cases:
        sys.exit(f"no node tests under {args.node_dir}")
    random.Random(args.seed).shuffle(cases)
    out = Path(args.out)
    findings_dir = out / "findings"
    findings_dir.mkdir(parents=True, exist_ok=True)
    args.scratch = str(out / "scratch")
    shutil.rmtree(args.scratch, ignore_errors=True)
    os.makedirs(args.scratch)

    env = dict(os.environ)
    mem = int(args.mem_gb * 2**30)
    sanitized = b"__asan_init" in Path(args.onnxtool).read_bytes()
    mem_bytes = None if sanitized else mem
    env["ASAN_OPTIONS"] = (f"hard_rss_limit_mb={mem >> 20}:max_allocation_size_mb={mem >> 20}:"
                           "allocator_may_return_null=0:detect_leaks=1:abort_on_error=0:symbolize=1")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"

    sites: dict[str, dict] = {}
    stats = dict(iterations=0, runs=0, flagged_runs=0, by_sub={}, by_rc={})
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = [pool.submit(one_iteration, args, it, cases[it % len(cases)], root, env, mem_bytes)
                for it in range(args.start, args.start + args.iterations)]
        for fut in concurrent.futures.as_completed(futs):
            r = fut.result()
            stats["iterations"] += 1
            for sub, rc, _ in r["results"]:
                stats["runs"] += 1
                stats["by_sub"][sub] = stats["by_sub"].get(sub, 0) + 1
                key = "timeout" if rc is None else str(rc)
                stats["by_rc"][key] = stats["by_rc"].get(key, 0) + 1
            for sub, cmd, rc, err, (kind, site) in r["flagged"]:
                stats["flagged_runs"] += 1
                op = "+".join(r["ops"])[:60]
                key = f"{kind}@{site}" if site else f"{kind}@{sub}:{op}"
                s = sites.get(key)
                if s is None:
                    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", key)[:100] + "_" + hashlib.sha1(key.encode()).hexdigest()[:6]
                    dest = findings_dir / slug
                    shutil.rmtree(dest, ignore_errors=True)
                    shutil.copytree(r["work"], dest)
                    cmdline = " ".join(c.replace(r["work"], str(dest)) for c in cmd)
                    (dest / "cmd.txt").write_text(cmdline + "\n# case: " + r["case"] + "  iteration: " + str(r["it"])
                                                  + "\n# mutations: " + "; ".join(r["notes"]) + "\n")
                    (dest / "stderr.txt").write_text(err)
                    s = sites[key] = dict(count=0, dir=str(dest), case=r["case"], it=r["it"], notes=r["notes"],
                                          first=err.strip().splitlines()[0][:200] if err.strip() else "")
                    if args.verbose:
                        print(f"NEW {key}  ({r['case']} it={r['it']}: {'; '.join(r['notes'])})", flush=True)
                s["count"] += 1
            shutil.rmtree(r["work"], ignore_errors=True)
            if stats["iterations"] % 100 == 0:
                print(f"[{stats['iterations']}/{args.iterations}] runs={stats['runs']} flagged={stats['flagged_runs']} "
                      f"sites={len(sites)} {time.monotonic() - t0:.0f}s", flush=True)

    print(f"\niterations {stats['iterations']}, runs {stats['runs']} ({stats['by_sub']}), exit codes {stats['by_rc']}, "
          f"flagged runs {stats['flagged_runs']}, distinct sites {len(sites)}, {time.monotonic() - t0:.0f}s")
    for key, s in sorted(sites.items(), key=lambda kv: -kv[1]["count"]):
        print(f"  {s['count']:4d}  {key}\n        {s['case']} it={s['it']}: {'; '.join(s['notes'])}\n"
              f"        {s['first']}\n        repro: {s['dir']}/cmd.txt")
    shutil.rmtree(args.scratch, ignore_errors=True)
    sys.exit(1 if sites else 0)


if __name__ == "__main__":
    main()
