// proto_convert.h: conversion between the generated protobuf classes and the IR (internal to
// formats/). Conversion is lossless: fields the IR does not model, and unknown fields, travel in
// each IR object's `residual` (a serialized partial message).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/onnx.pb.h"
#include "lib/ir.h"

namespace onnxtool::protoconv {

/// Load-side context: where messages point, and what went wrong that `check` should hear of.
struct FromCtx {
  std::string file;                       ///< for messages
  std::vector<std::string>* issues;       ///< Model::loadIssues
  /// Called for every tensor whose data is external, after conversion (binds the bytes).
  std::function<void(Tensor&, const std::string& where)> bindExternal;
  /// Bytes of main-graph initializers whose raw_data was cut from the message before parsing
  /// (see wire_splice.h), by initializer index; such tensors borrow these buffers.
  std::vector<std::optional<Buffer>> mainGraphRaw;
  /// Likewise for tensor attributes of main-graph nodes (Constant values), keyed by (node index,
  /// attribute index).
  std::map<std::pair<size_t, size_t>, Buffer> mainGraphNodeRaw;
};

void fromProto(pb::ModelProto& p, Model& m, FromCtx& ctx);
void fromProto(pb::TensorProto& p, Tensor& t, FromCtx& ctx, const std::string& where);
TypeInfo typeFromProto(const pb::TypeProto& p);

/// Save-side context: decides, per tensor, how its bytes are written.
struct ToCtx {
  /// Returns true if the tensor was written externally (the callee fills external_data in p).
  std::function<bool(const Tensor&, pb::TensorProto& p, bool isInitializer)> placeExternal;
  /// When set, raw bytes of top-level initializers are not copied into the message; the writer
  /// streams them (see model_io.cpp). Index = initializer position.
  bool deferTopLevelRaw = false;
};

void toProto(const Model& m, pb::ModelProto& p, ToCtx& ctx);
void toProto(const Tensor& t, pb::TensorProto& p, ToCtx& ctx, bool isInitializer, bool writeRaw = true);
void typeToProto(const TypeInfo& t, pb::TypeProto& p);

}  // namespace onnxtool::protoconv
