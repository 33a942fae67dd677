#!/usr/bin/env python3
"""Generates the operator schema registry data from the installed `onnx` and `onnxruntime` packages.

Reads `onnx.defs.get_all_schemas_with_history()` for the domains "" (ai.onnx), "ai.onnx.ml",
"ai.onnx.preview" and "ai.onnx.preview.training", and ONNX Runtime's contrib operator schemas
(`onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()`) for the domains
"com.microsoft" and "com.microsoft.nchwc", and writes, deterministically (sorted by domain, op
name, since_version):

  lib/ops/schemas.inc  the schema table (C++ data, included once by lib/ops/registry.cpp)
  lib/ops/ops.def      the X-macro list of ops, one `ONNXTOOL_OP("domain", OpName)` per line

Two ops of ai.onnx that ONNX Runtime defines and the ONNX spec does not are kept too, marked
`ortExtension`: SimplifiedLayerNormalization (which ORT's transformer optimizer writes for RMS
norms) and LayerNormalization version 1 (which it writes into models of opset < 17).
Ops are keyed by (domain, name): ONNX Runtime reuses ai.onnx names (Attention, Gelu, ...) in
com.microsoft. ONNX Runtime's Python binding does not expose min_arity nor function bodies: its
variadic parameters get onnx's default min_arity 1 and its schemas no function flags.
Doc strings are not kept. Default attribute values are stored exactly: FLOAT/INT/STRING and
their list forms as typed literals (floats with %.9g, which round-trips float32, and exact bit
patterns for NaN), every other kind as the serialized AttributeProto bytes.

usage: gen_op_schemas.py [--check] [--out-dir DIR]
  --check    write nothing; exit 1 if the files on disk differ from what would be generated
  --out-dir  where to write (default: lib/ops of this repository)
"""
import argparse
import math
import os
import struct
import sys

import onnx
import onnx.defs
import onnxruntime
from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")
# ONNX Runtime's contrib domains: every op there is at since_version 1 and the domains' opset is 1.
ORT_DOMAINS = ("com.microsoft", "com.microsoft.nchwc")
DOMAINS = ONNX_DOMAINS + ORT_DOMAINS
# ONNX Runtime's own ops in ai.onnx (not in the ONNX spec) that its tools write.
ORT_ONNX_EXTENSIONS = ("SimplifiedLayerNormalization", "LayerNormalization")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNBOUNDED = 2147483647  # onnx's max_input/max_output for "no limit"

# AttributeProto.AttributeType values -> lib/attr_type.h enumerators.
ATTR_TYPE_ENUM = {
    0: "Undefined", 1: "Float", 2: "Int", 3: "String", 4: "Tensor", 5: "Graph", 6: "Floats",
    7: "Ints", 8: "Strings", 9: "Tensors", 10: "Graphs", 11: "SparseTensor", 12: "SparseTensors",
    13: "TypeProto", 14: "TypeProtos",
}
PARAM_OPTION_ENUM = {0: "Single", 1: "Optional", 2: "Variadic"}
CXX_KEYWORDS = {"and", "or", "not", "xor", "if", "else", "for", "while", "do", "switch", "case",
                "default", "return", "int", "float", "double", "bool", "char", "void"}


def c_literal(data):
    """C++ string literal for `data` (bytes); non-printables as 3-digit octal escapes."""
    out = []
    for b in data:
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def sv(value):
    """A constant expression convertible to std::string_view (explicit size if it holds NUL)."""
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if b"\0" in data:
        return "std::string_view(%s, %d)" % (c_literal(data), len(data))
    return c_literal(data)


def float32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def float_literal(x):
    """A C++ float constant expression equal, bit for bit, to float32(x)."""
    bits = float32_bits(x)
    x32 = struct.unpack("<f", struct.pack("<I", bits))[0]
    if math.isnan(x32):
        return "std::bit_cast<float>(uint32_t{0x%08x})" % bits
    if math.isinf(x32):
        return ("-" if x32 < 0 else "") + "std::numeric_limits<float>::infinity()"
    text = "%.9g" % x32
    if float32_bits(float(text)) != bits:
        raise AssertionError("float %r does not round-trip through %r" % (x, text))
    if "." not in text and "e" not in text:
        text += ".0"
    return text + "f"


def int_literal(v):
    if v == -(2**63):
        return "(-9223372036854775807LL - 1)"
    if not -(2**63) <= v < 2**63:
        raise AssertionError("int attribute default %d out of int64 range" % v)
    return "%dLL" % v if not -(2**31) <= v < 2**31 else str(v)


class Pool:
    """A flat array of items; sequences with equal keys share one slice. `key` maps an item to
    what makes it equal (floats compare by bit pattern: -0.0 == 0.0 in Python, not here)."""

    def __init__(self, key=lambda x: x):
        self.items = []
        self.slices = {}
        self.key = key

    def add(self, seq):
        seq = tuple(seq)
        if not seq:
            return 0
        k = tuple(self.key(x) for x in seq)
        if k not in self.slices:
            self.slices[k] = len(self.items)
            self.items.extend(seq)
        return self.slices[k]


def attr_default(attr, pools):
    """(hasDefault, offset, count) of `attr`'s default value in the typed pools."""
    dv = attr.default_value
    atype = int(attr.type)
    if dv.type == 0 and not dv.ListFields():
        return False, 0, 0
    if dv.type != atype:
        raise AssertionError("%s: default of type %d for attribute of type %d" % (attr.name, dv.type, atype))
    if atype == 1:
        return True, pools["floats"].add([dv.f]), 1
    if atype == 2:
        return True, pools["ints"].add([dv.i]), 1
    if atype == 3:
        return True, pools["strings"].add([dv.s]), 1
    if atype == 6:
        return True, pools["floats"].add(dv.floats), len(dv.floats)
    if atype == 7:
        return True, pools["ints"].add(dv.ints), len(dv.ints)
    if atype == 8:
        return True, pools["strings"].add(dv.strings), len(dv.strings)
    return True, pools["strings"].add([dv.SerializeToString(deterministic=True)]), 1


def param_tuple(p):
    return (p.name, p.type_str, int(p.option), bool(p.is_homogeneous), int(p.min_arity))


def wrap(items, indent="    ", width=100):
    """Comma-separated items wrapped to `width` columns, one string."""
    lines, line = [], indent
    for item in items:
        piece = item + ","
        if len(line) + len(piece) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += piece + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


class _OrtParam:
    """An ONNX Runtime FormalParameter with onnx.defs' attribute names."""

    def __init__(self, p):
        self.name, self.type_str, self.option = p.name, p.typeStr, int(p.option)
        self.is_homogeneous, self.min_arity = bool(p.isHomogeneous), 1


class _OrtAttr:
    def __init__(self, a):
        self.name, self.type, self.required = a.name, int(a.type), bool(a.required)
        self.default_value = onnx.AttributeProto()
        self.default_value.ParseFromString(a._default_value)  # b"" when there is no default


class _OrtConstraint:
    def __init__(self, c):
        self.type_param_str, self.allowed_type_strs = c.type_param_str, list(c.allowed_type_strs)


class OrtSchema:
    """An ONNX Runtime contrib OpSchema seen through onnx.defs.OpSchema's attribute names."""

    def __init__(self, s):
        self.domain, self.name, self.since_version = s.domain, s.name, s.since_version
        self.deprecated = bool(s.deprecated)
        self.inputs = [_OrtParam(p) for p in s.inputs]
        self.outputs = [_OrtParam(p) for p in s.outputs]
        self.attributes = {k: _OrtAttr(a) for k, a in s.attributes.items()}
        self.type_constraints = [_OrtConstraint(c) for c in s.type_constraints]
        self.min_input, self.max_input = s.min_input, s.max_input
        self.min_output, self.max_output = s.min_output, s.max_output
        self.has_function = self.has_context_dependent_function = False
        self.ort_extension = s.domain == ""


def ort_schemas():
    """ONNX Runtime's schemas of ORT_DOMAINS, and its ai.onnx extensions (ORT_ONNX_EXTENSIONS
    versions that onnx.defs lacks)."""
    onnx_keys = {(s.domain, s.name, s.since_version) for s in onnx.defs.get_all_schemas_with_history()}
    return [OrtSchema(s) for s in ort_c.get_all_operator_schema()
            if s.domain in ORT_DOMAINS or (s.domain == "" and s.name in ORT_ONNX_EXTENSIONS
                                           and ("", s.name, s.since_version) not in onnx_keys)]


def load_schemas():
    schemas = [s for s in onnx.defs.get_all_schemas_with_history() if s.domain in ONNX_DOMAINS]
    schemas += ort_schemas()
    schemas.sort(key=lambda s: (s.domain, s.name, s.since_version))
    keys = [(s.domain, s.name, s.since_version) for s in schemas]
    if len(set(keys)) != len(keys):
        raise AssertionError("duplicate (domain, name, since_version) in onnx.defs")
    return schemas


def domain_versions(schemas):
    """(domain, min opset, max opset) for each domain we keep."""
    # onnx's own opset range of each domain (the newest may exceed every since_version in it).
    newest = {domain: hi for domain, (_, hi) in onnx.defs.C.schema_version_map().items()}
    newest.update({domain: 1 for domain in ORT_DOMAINS})
    out = []
    for domain in DOMAINS:
        since = [s.since_version for s in schemas if s.domain == domain]
        out.append((domain, min(since), max(newest[domain], max(since))))
    return out


def generate_inc(schemas):
    pools = {"types": Pool(), "constraints": Pool(), "params": Pool(), "attrs": Pool(),
             "ints": Pool(), "floats": Pool(float32_bits), "strings": Pool()}
    rows = []
    for s in schemas:
        constraints = [(tc.type_param_str, pools["types"].add(tc.allowed_type_strs), len(tc.allowed_type_strs))
                       for tc in s.type_constraints]
        attrs = []
        for name in sorted(s.attributes):
            a = s.attributes[name]
            if a.name != name:
                raise AssertionError("%s: attribute key %r names %r" % (s.name, name, a.name))
            has, off, count = attr_default(a, pools)
            attrs.append((a.name, int(a.type), bool(a.required), has, off, count))
        inputs = [param_tuple(p) for p in s.inputs]
        outputs = [param_tuple(p) for p in s.outputs]
        rows.append((s, (pools["params"].add(inputs), len(inputs)), (pools["params"].add(outputs), len(outputs)),
                     (pools["attrs"].add(attrs), len(attrs)), (pools["constraints"].add(constraints), len(constraints))))

    def span(array, slice_):
        off, count = slice_
        return "{}" if count == 0 else "{%s.data() + %d, %d}" % (array, off, count)

    def flag(b):
        return "true" if b else "false"

    out = []
    w = out.append
    w("// schemas.inc: operator schemas as data, domains \"\" (ai.onnx), \"ai.onnx.ml\", \"ai.onnx.preview\",")
    w("// \"ai.onnx.preview.training\" (from onnx) and \"com.microsoft\", \"com.microsoft.nchwc\" (ONNX Runtime's")
    w("// contrib ops). Generated by scripts/gen_op_schemas.py from onnx %s and onnxruntime %s, do not edit."
      % (onnx.__version__, onnxruntime.__version__))
    w("// Included once, by lib/ops/registry.cpp, after the types it names (lib/ops/op_schema.h and")
    w("// registry.cpp's DomainVersions). Sorted by (domain, name, sinceVersion); lists are slices of")
    w("// the shared pools below.")
    w("")
    w("namespace onnxtool::schema_data {")
    w("")
    w("inline constexpr std::string_view kOnnxVersion = %s;" % sv(onnx.__version__))
    w("inline constexpr std::string_view kOrtVersion = %s;" % sv(onnxruntime.__version__))
    w("")
    w("inline constexpr DomainVersions kDomains[] = {")
    for domain, lo, hi in domain_versions(schemas):
        w("    {%s, %d, %d}," % (sv(domain), lo, hi))
    w("};")
    w("")

    def pool_array(ctype, name, items, render):
        w("inline constexpr std::array<%s, %d> %s = {{" % (ctype, len(items), name))
        if items:
            w(wrap([render(x) for x in items]))
        w("}};")
        w("")

    pool_array("std::string_view", "kTypeStrs", pools["types"].items, sv)
    pool_array("int64_t", "kInts", pools["ints"].items, int_literal)
    pool_array("float", "kFloats", pools["floats"].items, float_literal)
    pool_array("std::string_view", "kStrings", pools["strings"].items, sv)

    w("// {typeParamStr, allowedTypes}")
    w("inline constexpr std::array<TypeConstraint, %d> kConstraints = {{" % len(pools["constraints"].items))
    for param, off, count in pools["constraints"].items:
        w("    {%s, %s}," % (sv(param), span("kTypeStrs", (off, count))))
    w("}};")
    w("")
    w("// {name, typeStr, option, isHomogeneous, minArity}")
    w("inline constexpr std::array<FormalParam, %d> kParams = {{" % len(pools["params"].items))
    for name, type_str, option, homogeneous, min_arity in pools["params"].items:
        w("    {%s, %s, ParamOption::%s, %s, %d}," % (sv(name), sv(type_str), PARAM_OPTION_ENUM[option],
                                                  flag(homogeneous), min_arity))
    w("}};")
    w("")
    w("// {name, type, required, hasDefault, defaultOffset_, defaultCount_}; the default lives in the pool")
    w("// for its type: kFloats (FLOAT, FLOATS), kInts (INT, INTS), kStrings (STRING, STRINGS, and the")
    w("// serialized AttributeProto of every other kind).")
    w("inline constexpr std::array<AttrSchema, %d> kAttrs = {{" % len(pools["attrs"].items))
    for name, atype, required, has, off, count in pools["attrs"].items:
        w("    {%s, AttrType::%s, %s, %s, %d, %d}," % (sv(name), ATTR_TYPE_ENUM[atype], flag(required), flag(has),
                                                  off, count))
    w("}};")
    w("")
    w("// {domain, name, sinceVersion, deprecated, inputs, outputs, attributes, typeConstraints,")
    w("//  minInputs, maxInputs, minOutputs, maxOutputs, hasFunction, hasContextDependentFunction,")
    w("//  ortExtension}")
    w("inline constexpr std::array<OpSchema, %d> kSchemas = {{" % len(rows))
    for s, ins, outs, attrs, tcs in rows:
        w("    {%s, %s, %d, %s, %s, %s, %s, %s, %d, %d, %d, %d, %s, %s, %s}," % (
            sv(s.domain), sv(s.name), s.since_version, flag(s.deprecated),
            span("kParams", ins), span("kParams", outs), span("kAttrs", attrs), span("kConstraints", tcs),
            s.min_input, s.max_input, s.min_output, s.max_output,
            flag(s.has_function), flag(s.has_context_dependent_function), flag(getattr(s, "ort_extension", False))))
    w("}};")
    w("")
    w("}  // namespace onnxtool::schema_data")
    return "\n".join(out) + "\n"


def generate_def(schemas):
    ops = sorted({(s.domain, s.name) for s in schemas})
    for _, name in ops:
        if not name.isidentifier() or name in CXX_KEYWORDS:
            raise AssertionError("op name %r is not usable as a C++ identifier" % name)
    out = [
        "// ops.def: every operator in the schema registry, one line per (domain, op); X-macro list.",
        "// Generated by scripts/gen_op_schemas.py from onnx %s and onnxruntime %s, do not edit."
        % (onnx.__version__, onnxruntime.__version__),
        "//",
        "// Define ONNXTOOL_OP(domain, name) before including: `domain` is a string literal (\"\" is",
        "// ai.onnx), `name` the op type as a bare identifier (#name gives the string). An op is the pair",
        "// (domain, name): one name can be in two domains (Gelu is in ai.onnx and com.microsoft), so",
        "// anything keyed by ops (enumerators, tables) must take the domain too.",
        "// The macro is #undef'd at the end.",
        "",
        "#ifndef ONNXTOOL_OP",
        "#error \"define ONNXTOOL_OP(domain, name) before including lib/ops/ops.def\"",
        "#endif",
        "",
    ]
    out += ["ONNXTOOL_OP(%s, %s)" % (c_literal(domain.encode()), name) for domain, name in ops]
    out += ["", "#undef ONNXTOOL_OP"]
    return "\n".join(out) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ, write nothing")
    parser.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "lib", "ops"))
    args = parser.parse_args(argv)

    schemas = load_schemas()
    files = {"schemas.inc": generate_inc(schemas), "ops.def": generate_def(schemas)}
    stale = []
    for name, text in files.items():
        path = os.path.join(args.out_dir, name)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old == text:
            continue
        stale.append(path)
        if not args.check:
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
    n_ops = len({(s.domain, s.name) for s in schemas})
    verb = "out of date" if args.check else "written"
    print("%d schemas, %d ops from onnx %s and onnxruntime %s; %s: %s" % (
        len(schemas), n_ops, onnx.__version__, onnxruntime.__version__, verb,
                                                        ", ".join(stale) if stale else "none"),
          file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
