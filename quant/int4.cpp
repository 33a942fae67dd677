// int4.cpp: weight-only blocked int4 quantization (see int4.h).
#include "quant/int4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "lib/error.h"
#include "lib/tensor.h"
#include "passes/pass_util.h"

namespace onnxtool {

namespace {

}  // namespace

DynamicQuantizeReport quantizeInt4(Model& model, const Int4QuantizeOptions& o) {
  DynamicQuantizeReport report;
  if (!model.graph) return report;
  int64_t opset = model.opsetVersion("").value_or(0);
  if (opset < 21)
    fail(ErrorKind::Unsupported,
         "int4 weight-only quantization needs opset 21 or newer (int4 and blocked DequantizeLinear); the model has {}", opset);
  Graph& g = *model.graph;
  std::unordered_map<Value*, Value*> done;  // float weight -> its DequantizeLinear output
  std::vector<Value*> replaced;
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  for (Node* n : order) {
    if (!n->isDomain("") || (n->opType != "MatMul" && n->opType != "Gemm")) continue;
    auto skip = [&](const std::string& why) {
      report.skipped.push_back(fmt::format("node '{}' ({}): {}", n->displayName(), n->opType, why));
    };
    Value* wv = n->input(1);
    const Tensor* w = wv && !wv->isGraphInput() ? wv->initializer() : nullptr;
    if (!w || w->dtype() != DType::Float || w->dims.size() != 2 || w->raw.size() != w->expectedBytes().value_or(UINT64_MAX)) {
      skip("the weight is not a constant 2-D float matrix");
      continue;
    }
    if (n->opType == "Gemm" && (n->attrInt("transA", 0) != 0 || n->attrFloat("alpha", 1.0f) != 1.0f)) {
      skip("Gemm with transA or alpha other than the defaults");
      continue;
    }
    // Blocks run along K: axis 0 of a MatMul weight [K, N], axis 1 of a Gemm's transposed [N, K].
    const int64_t axis = n->opType == "Gemm" && n->attrInt("transB", 0) != 0 ? 1 : 0;
    if (w->numElements().value_or(0) < o.minElements) {
      skip(fmt::format("the weight has fewer than {} elements", o.minElements));
      continue;
    }
    if (!done.count(wv)) {
      const int64_t rows = w->dims[0], cols = w->dims[1], bs = o.blockSize;
      const int64_t k = axis == 0 ? rows : cols;
      const int64_t blocks = (k + bs - 1) / bs;
      std::vector<int64_t> scaleDims = axis == 0 ? std::vector<int64_t>{blocks, cols} : std::vector<int64_t>{rows, blocks};
      // The scale of element (r, c).
      auto at = [&](int64_t r, int64_t c) -> size_t {
        return static_cast<size_t>(axis == 0 ? (r / bs) * cols + c : r * blocks + c / bs);
      };
      std::vector<float> f(static_cast<size_t>(rows * cols));
      std::memcpy(f.data(), w->raw.data(), f.size() * 4);
      std::vector<float> scale(static_cast<size_t>(blocks * (axis == 0 ? cols : rows)), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) scale[at(r, c)] = std::max(scale[at(r, c)], std::fabs(f[static_cast<size_t>(r * cols + c)]));
      for (float& s : scale) s = s > 0 && std::isfinite(s) ? s / 7.0f : 1.0f;
      // Two values a byte, the first in the low nibble (TensorProto's int4 layout).
      std::string packed(static_cast<size_t>((rows * cols + 1) / 2), '\0');
      for (int64_t i = 0; i < rows * cols; ++i) {
        float s = scale[at(i / cols, i % cols)];
        auto q = static_cast<int>(std::clamp(std::nearbyint(f[static_cast<size_t>(i)] / s), -7.0f, 7.0f));
        auto nib = static_cast<uint8_t>(q & 0x0F);
        auto& byte = reinterpret_cast<uint8_t&>(packed[static_cast<size_t>(i / 2)]);
        byte = static_cast<uint8_t>(i % 2 ? byte | (nib << 4) : nib);
      }
      Tensor tq;
      tq.dataType = static_cast<int32_t>(DType::Int4);
      tq.dims = w->dims;
      tq.setRaw(Buffer::fromString(std::move(packed)));
      Value* vq = addInitializer(g, std::move(tq), wv->name() + "_int4");
      Value* vs = addInitializer(g, Tensor::fromFloats("", scaleDims, scale), wv->name() + "_scale");
      Node* dq = g.addNode("DequantizeLinear", {vq, vs}, {g.uniqueName(wv->name() + "_dequantized")}, "", g.nodes().front().get());
      dq->name = dq->output(0)->name();
      dq->setAttr(Attribute::ofInt("axis", axis));
      dq->setAttr(Attribute::ofInt("block_size", bs));
      dq->output(0)->setType(wv->type());
      done[wv] = dq->output(0);
      replaced.push_back(wv);
      report.weightsQuantized++;
      report.floatWeightBytes += w->raw.size();
      report.int8WeightBytes += static_cast<uint64_t>((rows * cols + 1) / 2) + scale.size() * 4;
    }
    n->setInput(1, done[wv]);
    report.nodesQuantized++;
  }
  for (Value* v : replaced)
    if (!v->hasUses() && !v->isGraphOutput()) g.removeInitializer(v);
  return report;
}

}  // namespace onnxtool
