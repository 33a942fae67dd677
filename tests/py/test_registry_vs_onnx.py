#!/usr/bin/env python3
"""Checks the operator schema registry (lib/ops) against onnx.defs and, for ONNX Runtime's contrib
domains (com.microsoft, com.microsoft.nchwc) and its two ai.onnx extensions
(SimplifiedLayerNormalization, LayerNormalization-1; marked ort_extension), against onnxruntime's
get_all_operator_schema(), field by field.

Runs `unit_tests "[.dump]"` (the hidden Catch2 case in tests/unit/test_registry.cpp), which
writes the whole registry as JSON, then builds the same document from
`onnx.defs.get_all_schemas_with_history()` and reports every difference: missing or extra
schemas, since_version, deprecated, inputs/outputs (name, type_str, option, is_homogeneous,
min_arity), attributes (name, type, required, exact default value), type constraints (allowed
types in order), min/max input/output counts, function flags, the opset range of each domain,
and which version findSchema picks for every op at every opset.

Environment: ONNXTOOL_BUILD_DIR (holds tests/unit_tests). Plain script: exit 0 when the registry
matches, 1 on any difference (listed on stdout), 2 when the dump cannot be produced.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import onnx
import onnx.defs
import onnxruntime
from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")
ORT_DOMAINS = ("com.microsoft", "com.microsoft.nchwc")
ORT_ONNX_EXTENSIONS = ("SimplifiedLayerNormalization", "LayerNormalization")
MAX_LISTED = 200


def float_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def default_json(attr):
    """The dumper's encoding of an attribute default (see defaultJson in test_registry.cpp)."""
    dv = attr.default_value
    if dv.type == 0 and not dv.ListFields():
        return None
    t = int(attr.type)
    if t == 1:
        return {"float_bits": float_bits(dv.f)}
    if t == 2:
        return {"int": dv.i}
    if t == 3:
        return {"string_hex": dv.s.hex()}
    if t == 6:
        return {"floats_bits": [float_bits(f) for f in dv.floats]}
    if t == 7:
        return {"ints": list(dv.ints)}
    if t == 8:
        return {"strings_hex": [s.hex() for s in dv.strings]}
    return {"proto_hex": dv.SerializeToString(deterministic=True).hex()}


def param_json(p):
    return {"name": p.name, "type_str": p.type_str, "option": int(p.option),
            "is_homogeneous": bool(p.is_homogeneous), "min_arity": int(p.min_arity)}


def schema_json(s):
    return {
        "domain": s.domain, "name": s.name, "since_version": s.since_version,
        "deprecated": bool(s.deprecated),
        "min_input": s.min_input, "max_input": s.max_input,
        "min_output": s.min_output, "max_output": s.max_output,
        "has_function": bool(s.has_function),
        "has_context_dependent_function": bool(s.has_context_dependent_function),
        "ort_extension": False,
        "inputs": [param_json(p) for p in s.inputs],
        "outputs": [param_json(p) for p in s.outputs],
        "attributes": [{"name": a.name, "type": a.type.name, "required": bool(a.required),
                        "default": default_json(a)}
                       for a in sorted(s.attributes.values(), key=lambda a: a.name)],
        "type_constraints": [{"type_param_str": c.type_param_str,
                              "allowed_type_strs": list(c.allowed_type_strs)}
                             for c in s.type_constraints],
    }


def ort_default_json(a):
    dv = onnx.AttributeProto()
    dv.ParseFromString(a._default_value)  # b"": no default

    class _A:  # onnx.defs' attribute shape, for default_json
        pass
    x = _A()
    x.default_value, x.type = dv, onnx.AttributeProto.AttributeType.Value(a.type.name)
    return default_json(x)


def ort_schema_json(s):
    """schema_json for an ONNX Runtime schema: its binding has no min_arity (onnx's default 1) and
    no function flags (false)."""
    def param(p):
        return {"name": p.name, "type_str": p.typeStr, "option": int(p.option),
                "is_homogeneous": bool(p.isHomogeneous), "min_arity": 1}
    return {
        "domain": s.domain, "name": s.name, "since_version": s.since_version,
        "deprecated": bool(s.deprecated),
        "min_input": s.min_input, "max_input": s.max_input,
        "min_output": s.min_output, "max_output": s.max_output,
        "has_function": False, "has_context_dependent_function": False,
        "ort_extension": s.domain == "",
        "inputs": [param(p) for p in s.inputs],
        "outputs": [param(p) for p in s.outputs],
        "attributes": [{"name": a.name, "type": a.type.name, "required": bool(a.required),
                        "default": ort_default_json(a)}
                       for a in sorted(s.attributes.values(), key=lambda a: a.name)],
        "type_constraints": [{"type_param_str": c.type_param_str,
                              "allowed_type_strs": list(c.allowed_type_strs)}
                             for c in s.type_constraints],
    }


def expected_resolution(schemas, max_opset):
    """domain:name -> since_version in force at opsets 1..max (0: none), from onnx.defs."""
    out = {}
    for s in schemas:
        key = "%s:%s" % (s.domain, s.name)
        if key in out:
            continue
        row = []
        for v in range(1, max_opset[s.domain] + 1):
            try:
                row.append(onnx.defs.get_schema(s.name, v, s.domain).since_version)
            except onnx.defs.SchemaError:
                row.append(0)
        out[key] = row
    return out


def diff(path, want, got, out):
    """Appends 'path: want X, got Y' for every difference between two JSON values."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            if k not in got:
                out.append("%s.%s: missing in registry" % (path, k))
            elif k not in want:
                out.append("%s.%s: unexpected in registry" % (path, k))
            else:
                diff("%s.%s" % (path, k), want[k], got[k], out)
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            out.append("%s: onnx has %d entries, registry %d: %s vs %s"
                       % (path, len(want), len(got), json.dumps(want), json.dumps(got)))
            return
        for i, (w, g) in enumerate(zip(want, got)):
            diff("%s[%d]" % (path, i), w, g, out)
    elif want != got or type(want) is not type(got):
        out.append("%s: onnx %s, registry %s" % (path, json.dumps(want), json.dumps(got)))


def dump_registry(build_dir):
    exe = os.path.join(build_dir, "tests", "unit_tests")
    if not os.path.exists(exe):
        print("unit_tests not found at %s (build it first)" % exe)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "schemas.json")
        proc = subprocess.run([exe, "[.dump]"], env=dict(os.environ, ONNXTOOL_SCHEMA_DUMP=path),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0 or not os.path.exists(path):
            print(proc.stdout)
            print("unit_tests [.dump] failed (exit %d)" % proc.returncode)
            sys.exit(2)
        with open(path, encoding="utf-8") as f:
            return json.load(f)


def main():
    build_dir = os.environ.get("ONNXTOOL_BUILD_DIR")
    if not build_dir:
        print("ONNXTOOL_BUILD_DIR is not set")
        return 2
    got = dump_registry(build_dir)

    schemas = [s for s in onnx.defs.get_all_schemas_with_history() if s.domain in DOMAINS]
    diffs = []
    versions = onnx.defs.C.schema_version_map()
    max_opset = {d: versions[d][1] for d in DOMAINS}
    # The public accessors and the version map must agree where both exist.
    diff("max_opset[ai.onnx]", onnx.defs.onnx_opset_version(), max_opset[""], diffs)
    diff("max_opset[ai.onnx.ml]", onnx.defs.onnx_ml_opset_version(), max_opset["ai.onnx.ml"], diffs)
    diff("onnx_version", onnx.__version__, got.get("onnx_version"), diffs)
    diff("ort_version", onnxruntime.__version__, got.get("ort_version"), diffs)
    onnx_keys = {(s.domain, s.name, s.since_version) for s in schemas}
    ort_all = ort_c.get_all_operator_schema()
    ort = [s for s in ort_all if s.domain in ORT_DOMAINS]
    # ONNX Runtime's contrib domains are at opset 1, every op at since_version 1.
    diff("ort since_versions", [1] * len(ort), [s.since_version for s in ort], diffs)
    ext = [s for s in ort_all if s.domain == "" and s.name in ORT_ONNX_EXTENSIONS
           and (s.domain, s.name, s.since_version) not in onnx_keys]
    diff("ort ai.onnx extensions", ["LayerNormalization-1", "SimplifiedLayerNormalization-1"],
         sorted("%s-%d" % (s.name, s.since_version) for s in ext), diffs)
    ort += ext
    diff("max_opset", dict(max_opset, **{d: 1 for d in ORT_DOMAINS}), got.get("max_opset"), diffs)

    want_by_key = {(s.domain, s.name, s.since_version): schema_json(s) for s in schemas}
    want_by_key.update({(s.domain, s.name, s.since_version): ort_schema_json(s) for s in ort})
    got_by_key = {}
    for g in got.get("schemas", []):
        key = (g.get("domain"), g.get("name"), g.get("since_version"))
        if key in got_by_key:
            diffs.append("%s:%s-%s: listed twice in registry" % key)
        got_by_key[key] = g
    order = [(g.get("domain"), g.get("name"), g.get("since_version")) for g in got.get("schemas", [])]
    if order != sorted(order, key=lambda k: (str(k[0]), str(k[1]), k[2] or 0)):
        diffs.append("allSchemas(): not sorted by (domain, name, since_version)")
    for key in sorted(set(want_by_key) | set(got_by_key), key=lambda k: (str(k[0]), str(k[1]), k[2] or 0)):
        label = "%s:%s-%s" % key
        if key not in got_by_key:
            diffs.append("%s: missing in registry" % label)
        elif key not in want_by_key:
            diffs.append("%s: not in onnx.defs" % label)
        else:
            diff(label, want_by_key[key], got_by_key[key], diffs)
    resolved = expected_resolution(schemas, max_opset)
    resolved.update({"%s:%s" % (s.domain, s.name): [1] for s in ort if s.domain})
    for s in ext:  # an extension version is in force until onnx's next version of the op
        key = ":" + s.name
        row = resolved.get(key, [0] * max_opset[""])
        resolved[key] = [s.since_version if v >= s.since_version and (r == 0 or r < s.since_version) else r
                         for v, r in zip(range(1, max_opset[""] + 1), row)]
    diff("resolved", resolved, got.get("resolved"), diffs)

    for line in diffs[:MAX_LISTED]:
        print(line)
    if len(diffs) > MAX_LISTED:
        print("... and %d more" % (len(diffs) - MAX_LISTED))
    print("%d schemas compared, %d differences" % (len(want_by_key), len(diffs)))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
