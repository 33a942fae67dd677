#!/usr/bin/env python3
"""Materialises the ONNX backend node test suite of the installed `onnx` package.

Recent `onnx` wheels no longer ship `onnx/backend/test/data/node`; they ship the case
definitions (`onnx.backend.test.case.node`) that the data is generated from. This script runs
those definitions and writes the standard layout: OUT/node/<case>/model.onnx and
OUT/node/<case>/test_data_set_0/{input,output}_<i>.pb. If the wheel does ship the data, it is
copied instead. A stamp file records the onnx version so the work is done once per version.

usage: gen_node_tests.py OUT
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def _serialize(value, type_proto, name):
    if type_proto.HasField("map_type"):
        return numpy_helper.from_dict(value, name)
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name)
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name)
    if isinstance(value, onnx.TensorProto):
        return value
    return numpy_helper.from_array(np.asarray(value), name)


def main(out):
    stamp = os.path.join(out, "ONNX_VERSION")
    if os.path.exists(stamp) and open(stamp).read().strip() == onnx.__version__:
        return 0
    node_dir = os.path.join(out, "node")
    if os.path.isdir(node_dir):
        shutil.rmtree(node_dir)
    os.makedirs(node_dir)
    shipped = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if os.path.isdir(shipped):
        shutil.rmtree(node_dir)
        shutil.copytree(shipped, node_dir)
    else:
        from onnx.backend.test.case import node as node_cases

        np.random.seed(0)
        for case in node_cases.collect_testcases():
            case_dir = os.path.join(node_dir, case.name)
            os.makedirs(case_dir, exist_ok=True)
            with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
                f.write(case.model.SerializeToString())
            graph = case.model.graph
            for k, (inputs, outputs) in enumerate(case.data_sets):
                ds = os.path.join(case_dir, f"test_data_set_{k}")
                os.makedirs(ds, exist_ok=True)
                for j, value in enumerate(inputs):
                    proto = _serialize(value, graph.input[j].type, graph.input[j].name)
                    with open(os.path.join(ds, f"input_{j}.pb"), "wb") as f:
                        f.write(proto.SerializeToString())
                for j, value in enumerate(outputs):
                    proto = _serialize(value, graph.output[j].type, graph.output[j].name)
                    with open(os.path.join(ds, f"output_{j}.pb"), "wb") as f:
                        f.write(proto.SerializeToString())
    with open(stamp, "w") as f:
        f.write(onnx.__version__ + "\n")
    print(f"gen_node_tests: {len(os.listdir(node_dir))} node test cases of onnx {onnx.__version__} in {node_dir}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
