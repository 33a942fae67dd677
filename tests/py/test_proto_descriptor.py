"""Our formats/onnx.proto against the installed onnx package's schema: every message, field
(name, number, type, label, packing, oneof) and enum value must match, so our files and onnx's
are wire-compatible in both directions."""
import os
import subprocess
import sys
import tempfile

import onnx
from google.protobuf import descriptor_pb2

sys.path.insert(0, os.path.dirname(__file__))
from onnxtool_test import SOURCE_DIR, Checker  # noqa: E402


def ours():
    protoc = os.environ.get("PROTOC", "protoc")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "d.pb")
        subprocess.run([protoc, f"-I{SOURCE_DIR}", f"--descriptor_set_out={out}", "formats/onnx.proto"], check=True)
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return fds.file[0]


def theirs():
    fdp = descriptor_pb2.FileDescriptorProto()
    onnx.onnx_ml_pb2.DESCRIPTOR.CopyToProto(fdp)
    return fdp


def short_type(name):
    return name.rsplit(".", 1)[-1] if name else ""


def field_key(f, oneofs):
    packed = f.options.packed if f.options.HasField("packed") else None
    oneof = oneofs[f.oneof_index] if f.HasField("oneof_index") else None
    return (f.number, f.type, f.label, short_type(f.type_name), packed, oneof)


def compare_enums(c, where, a, b):
    av = {v.name: v.number for v in a.value}
    bv = {v.name: v.number for v in b.value}
    c.check(av == bv, f"enum {where}: ours {av} vs onnx {bv}")


def compare_messages(c, where, a, b):
    aone = [o.name for o in a.oneof_decl]
    bone = [o.name for o in b.oneof_decl]
    af = {f.name: field_key(f, aone) for f in a.field}
    bf = {f.name: field_key(f, bone) for f in b.field}
    for name in sorted(set(af) | set(bf)):
        c.check(af.get(name) == bf.get(name), f"{where}.{name}: ours {af.get(name)} vs onnx {bf.get(name)}")
    an = {m.name: m for m in a.nested_type}
    bn = {m.name: m for m in b.nested_type}
    c.check(set(an) == set(bn), f"{where}: nested messages {sorted(an)} vs {sorted(bn)}")
    for n in set(an) & set(bn):
        compare_messages(c, f"{where}.{n}", an[n], bn[n])
    ae = {e.name: e for e in a.enum_type}
    be = {e.name: e for e in b.enum_type}
    c.check(set(ae) == set(be), f"{where}: nested enums {sorted(ae)} vs {sorted(be)}")
    for n in set(ae) & set(be):
        compare_enums(c, f"{where}.{n}", ae[n], be[n])


def main():
    c = Checker("proto-descriptor")
    a, b = ours(), theirs()
    am = {m.name: m for m in a.message_type}
    bm = {m.name: m for m in b.message_type}
    c.check(set(am) == set(bm), f"messages: ours {sorted(set(am) - set(bm))} extra, {sorted(set(bm) - set(am))} missing")
    for n in sorted(set(am) & set(bm)):
        compare_messages(c, n, am[n], bm[n])
    ae = {e.name: e for e in a.enum_type}
    be = {e.name: e for e in b.enum_type}
    c.check(set(ae) == set(be), "top-level enums differ")
    for n in set(ae) & set(be):
        compare_enums(c, n, ae[n], be[n])
    c.check(a.syntax in ("", "proto2"), f"syntax is {a.syntax!r}, expected proto2")
    print(f"compared against onnx {onnx.__version__} (IR version {onnx.IR_VERSION})")
    c.finish()


if __name__ == "__main__":
    main()
