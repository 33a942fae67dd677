// int4.cpp: weight-only blocked 4-bit quantization (see int4.h).
#include "quant/int4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "lib/error.h"
#include "lib/tensor.h"
#include "passes/pass_util.h"
#include "quant/gptq.h"

namespace onnxtool {

namespace {

/// A weight quantized along K in blocks: for column n and row k, code(n, k) in [0, 15]
/// (symmetric: the int4 value + 8), scale(n, k / bs) and zero point (n, k / bs) (symmetric: 8).
/// Dequantized: (code - zp) * scale.
struct BlockQuant {
  int64_t k = 0, n = 0, bs = 0, blocks = 0;
  std::vector<uint8_t> code;   // [n][k]
  std::vector<float> scale;    // [n][blocks]
  std::vector<uint8_t> zp;     // [n][blocks]
};

/// `at(k, n)` reads the float weight at logical row k (the reduced axis), column n.
template <typename At>
BlockQuant quantizeBlocks(int64_t K, int64_t N, int64_t bs, bool symmetric, At at) {
  BlockQuant q;
  q.k = K, q.n = N, q.bs = bs, q.blocks = (K + bs - 1) / bs;
  q.code.assign(static_cast<size_t>(K * N), 0);
  q.scale.assign(static_cast<size_t>(N * q.blocks), 1.0f);
  q.zp.assign(static_cast<size_t>(N * q.blocks), 8);
  for (int64_t c = 0; c < N; ++c)
    for (int64_t b = 0; b < q.blocks; ++b) {
      const int64_t k0 = b * bs, k1 = std::min(K, k0 + bs);
      float lo = 0, hi = 0;  // the range always holds 0, so that zero stays exact
      for (int64_t r = k0; r < k1; ++r) {
        float v = at(r, c);
        if (!std::isfinite(v)) continue;
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
      const size_t sb = static_cast<size_t>(c * q.blocks + b);
      float scale;
      int zero;
      if (symmetric) {
        float m = std::max(-lo, hi);
        scale = m > 0 ? m / 7.0f : 1.0f;
        zero = 8;
      } else {
        scale = hi - lo > 0 ? (hi - lo) / 15.0f : 1.0f;
        zero = static_cast<int>(std::clamp(std::nearbyint(-lo / scale), 0.0f, 15.0f));
      }
      if (!std::isfinite(scale) || scale == 0) scale = 1.0f;
      q.scale[sb] = scale;
      q.zp[sb] = static_cast<uint8_t>(zero);
      const float qlo = symmetric ? 1.0f : 0.0f, qhi = symmetric ? 15.0f : 15.0f;  // symmetric: [-7, 7] + 8
      for (int64_t r = k0; r < k1; ++r) {
        float v = at(r, c);
        float x = std::isnan(v) ? static_cast<float>(zero) : std::nearbyint(v / scale) + static_cast<float>(zero);
        q.code[static_cast<size_t>(c * K + r)] = static_cast<uint8_t>(std::clamp(x, qlo, qhi));
      }
    }
  return q;
}

/// Packs 4-bit values two a byte, the first in the low nibble.
std::string packNibbles(const std::vector<uint8_t>& v) {
  std::string out((v.size() + 1) / 2, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    auto& byte = reinterpret_cast<uint8_t&>(out[i / 2]);
    byte = static_cast<uint8_t>(i % 2 ? byte | ((v[i] & 0x0F) << 4) : (v[i] & 0x0F));
  }
  return out;
}

Tensor fourBit(DType t, std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  Tensor x;
  x.dataType = static_cast<int32_t>(t);
  x.dims = std::move(dims);
  x.setRaw(Buffer::fromString(packNibbles(v)));
  return x;
}

Tensor bytes(std::vector<int64_t> dims, std::string data) {
  Tensor x;
  x.dataType = static_cast<int32_t>(DType::UInt8);
  x.dims = std::move(dims);
  x.setRaw(Buffer::fromString(std::move(data)));
  return x;
}

}  // namespace

DynamicQuantizeReport quantizeInt4(Model& model, const Int4QuantizeOptions& o) {
  DynamicQuantizeReport report;
  if (!model.graph) return report;
  int64_t opset = model.opsetVersion("").value_or(0);
  if (opset < 21 && !o.matmulNBits)
    fail(ErrorKind::Unsupported,
         "int4 weight-only quantization needs opset 21 or newer (int4 and blocked DequantizeLinear); the model has {}", opset);
  Graph& g = *model.graph;
  std::unordered_map<Value*, Value*> done;  // float weight -> its DequantizeLinear output
  std::vector<Value*> replaced;
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  const int64_t bs = o.blockSize;
  // GPTQ first (with calibration samples): the integers of every MatMul/Gemm weight the loop
  // below will quantize, on the same blocks' scales and zero points, by weight name ([N][K]).
  std::unordered_map<std::string, std::vector<uint8_t>> gptqCodes;
  if (o.calibration) {
    std::vector<GptqWeight> ws;
    std::vector<std::string> names;
    for (Node* n : order) {
      if (!n->isDomain("") || (n->opType != "MatMul" && n->opType != "Gemm")) continue;
      if (std::find(o.opTypes.begin(), o.opTypes.end(), n->opType) == o.opTypes.end()) continue;
      if (std::find(o.exclude.begin(), o.exclude.end(), n->name) != o.exclude.end() ||
          std::find(o.exclude.begin(), o.exclude.end(), n->opType) != o.exclude.end())
        continue;
      Value* wv = n->input(1);
      const Tensor* w = wv && !wv->isGraphInput() ? wv->initializer() : nullptr;
      if (!n->input(0) || !w || w->dtype() != DType::Float || w->dims.size() != 2 ||
          w->raw.size() != w->expectedBytes().value_or(UINT64_MAX) || w->numElements().value_or(0) < o.minElements)
        continue;
      const bool gemm = n->opType == "Gemm";
      if (gemm && (n->attrInt("transA", 0) != 0 || n->attrFloat("alpha", 1.0f) != 1.0f)) continue;
      if (std::find(names.begin(), names.end(), wv->name()) != names.end()) continue;  // shared: nearest
      const bool transB = gemm && n->attrInt("transB", 0) != 0;
      const int64_t K = transB ? w->dims[1] : w->dims[0], N = transB ? w->dims[0] : w->dims[1];
      std::vector<float> f(static_cast<size_t>(K * N));
      std::memcpy(f.data(), w->raw.data(), f.size() * 4);
      auto at = [&](int64_t k, int64_t c) { return transB ? f[static_cast<size_t>(c * K + k)] : f[static_cast<size_t>(k * N + c)]; };
      if (std::any_of(f.begin(), f.end(), [](float v) { return !std::isfinite(v); })) continue;
      BlockQuant q = quantizeBlocks(K, N, bs, o.symmetric, at);
      GptqWeight gw;
      gw.node = n;
      gw.rows = N, gw.cols = K, gw.block = bs;
      gw.w.resize(static_cast<size_t>(N * K));
      for (int64_t c = 0; c < N; ++c)
        for (int64_t k = 0; k < K; ++k) gw.w[static_cast<size_t>(c * K + k)] = at(k, c);
      gw.scale.assign(q.scale.begin(), q.scale.end());
      gw.zero.assign(q.zp.begin(), q.zp.end());
      gw.qmin = o.symmetric ? 1 : 0;
      gw.qmax = 15;
      ws.push_back(std::move(gw));
      names.push_back(wv->name());
    }
    GptqReport gr = roundWeightsGptq(model, *o.calibration, ws);
    for (const std::string& s : gr.skipped) spdlog::info("GPTQ skipped {}", s);
    spdlog::info("GPTQ (int4): {} layers ({} kept nearest rounding), {} passes; output error {:.3f} of nearest rounding's (mean over layers)",
                 gr.layers, gr.keptNearest, gr.passes, gr.meanErrorRatio);
    for (size_t i = 0; i < ws.size(); ++i) {
      if (ws[i].q.empty()) continue;
      std::vector<uint8_t> code(ws[i].q.size());
      for (size_t j = 0; j < code.size(); ++j) code[j] = static_cast<uint8_t>(ws[i].q[j]);
      gptqCodes[names[i]] = std::move(code);
    }
    report.gptqLayers = static_cast<int64_t>(gptqCodes.size());
    report.gptqErrorRatio = gr.meanErrorRatio;
  }
  auto blocksOf = [&](const Value* wv, int64_t K, int64_t N, auto at) {
    BlockQuant q = quantizeBlocks(K, N, bs, o.symmetric, at);
    auto it = gptqCodes.find(wv->name());
    if (it != gptqCodes.end() && it->second.size() == q.code.size()) q.code = it->second;
    return q;
  };
  for (Node* n : order) {
    if (!n->isDomain("") || (n->opType != "MatMul" && n->opType != "Gemm" && n->opType != "Gather")) continue;
    if (std::find(o.opTypes.begin(), o.opTypes.end(), n->opType) == o.opTypes.end()) continue;
    auto skip = [&](const std::string& why) {
      report.skipped.push_back(fmt::format("node '{}' ({}): {}", n->displayName(), n->opType, why));
    };
    if (std::find(o.exclude.begin(), o.exclude.end(), n->name) != o.exclude.end() ||
        std::find(o.exclude.begin(), o.exclude.end(), n->opType) != o.exclude.end()) {
      skip("excluded");
      continue;
    }
    const bool gather = n->opType == "Gather";
    const size_t widx = gather ? 0 : 1;
    Value* wv = n->input(widx);
    const Tensor* w = wv && !wv->isGraphInput() ? wv->initializer() : nullptr;
    if (!w || w->dtype() != DType::Float || w->dims.size() != 2 || w->raw.size() != w->expectedBytes().value_or(UINT64_MAX)) {
      skip(gather ? "the table is not a constant 2-D float matrix" : "the weight is not a constant 2-D float matrix");
      continue;
    }
    if (gather && n->attrInt("axis", 0) != 0 && n->attrInt("axis", 0) != -2) {
      skip("Gather along an axis other than 0");
      continue;
    }
    const bool gemm = n->opType == "Gemm";
    if (gemm && (n->attrInt("transA", 0) != 0 || n->attrFloat("alpha", 1.0f) != 1.0f)) {
      skip("Gemm with transA or alpha other than the defaults");
      continue;
    }
    if (w->numElements().value_or(0) < o.minElements) {
      skip(fmt::format("the weight has fewer than {} elements", o.minElements));
      continue;
    }
    // Blocks run along K: axis 0 of a MatMul weight [K, N], axis 1 of a Gemm's transposed [N, K]
    // and of an embedding table [V, H] (each row's H values in blocks).
    const bool transB = gather || (gemm && n->attrInt("transB", 0) != 0);
    const int64_t rows = w->dims[0], cols = w->dims[1];
    const int64_t K = transB ? cols : rows, N = transB ? rows : cols;
    Value* gemmC = gemm ? n->input(2) : nullptr;
    const float beta = n->attrFloat("beta", 1.0f);
    if (o.matmulNBits && gemmC && beta != 1.0f) {
      skip("Gemm with a C input and beta other than 1");
      continue;
    }
    std::vector<float> f(static_cast<size_t>(rows * cols));
    std::memcpy(f.data(), w->raw.data(), f.size() * 4);
    auto at = [&](int64_t k, int64_t c) { return transB ? f[static_cast<size_t>(c * K + k)] : f[static_cast<size_t>(k * N + c)]; };
    report.nodesQuantized++;

    if (o.matmulNBits && !gather) {
      // B [N, blocks, bs/2]: column n's codes block by block, the last block padded with its zero point.
      BlockQuant q = blocksOf(wv, K, N, at);
      std::vector<uint8_t> padded(static_cast<size_t>(N * q.blocks * bs));
      for (int64_t c = 0; c < N; ++c)
        for (int64_t k = 0; k < q.blocks * bs; ++k)
          padded[static_cast<size_t>(c * q.blocks * bs + k)] =
              k < K ? q.code[static_cast<size_t>(c * K + k)] : q.zp[static_cast<size_t>(c * q.blocks + k / bs)];
      Value* vb = addInitializer(g, bytes({N, q.blocks, bs / 2}, packNibbles(padded)), wv->name() + "_q4");
      Value* vs = addInitializer(g, Tensor::fromFloats("", {N * q.blocks}, q.scale), wv->name() + "_scales");
      std::vector<Value*> ins{n->input(0), vb, vs};
      uint64_t qbytes = static_cast<uint64_t>(N * q.blocks * bs / 2) + q.scale.size() * 4;
      if (!o.symmetric) {
        // Zero points packed per column like B: ceil(blocks / 2) bytes a column.
        const int64_t zpRow = (q.blocks + 1) / 2;
        std::vector<uint8_t> z(static_cast<size_t>(N * zpRow * 2), 0);
        for (int64_t c = 0; c < N; ++c)
          for (int64_t b = 0; b < q.blocks; ++b) z[static_cast<size_t>(c * zpRow * 2 + b)] = q.zp[static_cast<size_t>(c * q.blocks + b)];
        ins.push_back(addInitializer(g, bytes({N * zpRow}, packNibbles(z)), wv->name() + "_zero_points"));
        qbytes += static_cast<uint64_t>(N * zpRow);
      }
      auto setAttrs = [&](Node* m) {
        m->setAttr(Attribute::ofInt("K", K));
        m->setAttr(Attribute::ofInt("N", N));
        m->setAttr(Attribute::ofInt("bits", 4));
        m->setAttr(Attribute::ofInt("block_size", bs));
      };
      if (!gemm || !gemmC) {
        // Rewritten in place: the node keeps its name and output.
        n->opType = "MatMulNBits";
        n->domain = "com.microsoft";
        n->attributes.clear();
        n->truncateInputs(0);
        for (Value* v : ins) n->addInput(v);
        setAttrs(n);
      } else {
        // Gemm with C: MatMulNBits, then the node becomes Add(product, C).
        Node* m = g.addNode("MatMulNBits", ins, {g.uniqueName(n->output(0)->name() + "_nbits")}, "com.microsoft", n);
        m->name = m->output(0)->name();
        setAttrs(m);
        TypeInfo t = n->output(0)->type();
        m->output(0)->setType(t);
        n->opType = "Add";
        n->attributes.clear();
        n->truncateInputs(0);
        n->addInput(m->output(0));
        n->addInput(gemmC);
      }
      if (!done.count(wv)) {
        done[wv] = nullptr;
        replaced.push_back(wv);
        report.weightsQuantized++;
        report.floatWeightBytes += w->raw.size();
      }
      report.int8WeightBytes += qbytes;
      continue;
    }

    if (!done.count(wv)) {
      BlockQuant q = gather ? quantizeBlocks(K, N, bs, o.symmetric, at) : blocksOf(wv, K, N, at);
      // The weight keeps its layout; scales [blocks, N] (MatMul) or [N, blocks] (Gemm transB).
      std::vector<int64_t> scaleDims = transB ? std::vector<int64_t>{N, q.blocks} : std::vector<int64_t>{q.blocks, N};
      std::vector<float> scale(q.scale.size());
      std::vector<uint8_t> zp(q.zp.size()), codes(static_cast<size_t>(rows * cols));
      for (int64_t c = 0; c < N; ++c)
        for (int64_t b = 0; b < q.blocks; ++b) {
          size_t dst = static_cast<size_t>(transB ? c * q.blocks + b : b * N + c), src = static_cast<size_t>(c * q.blocks + b);
          scale[dst] = q.scale[src];
          zp[dst] = q.zp[src];
        }
      for (int64_t c = 0; c < N; ++c)
        for (int64_t k = 0; k < K; ++k) {
          uint8_t v = q.code[static_cast<size_t>(c * K + k)];
          // int4 holds code - 8 as a two's complement nibble; uint4 the code.
          codes[static_cast<size_t>(transB ? c * K + k : k * N + c)] = o.symmetric ? static_cast<uint8_t>((v - 8) & 0x0F) : v;
        }
      Value* vq = addInitializer(g, fourBit(o.symmetric ? DType::Int4 : DType::UInt4, w->dims, codes),
                                 wv->name() + (o.symmetric ? "_int4" : "_uint4"));
      Value* vs = addInitializer(g, Tensor::fromFloats("", scaleDims, scale), wv->name() + "_scale");
      std::vector<Value*> ins{vq, vs};
      uint64_t qbytes = static_cast<uint64_t>((rows * cols + 1) / 2) + scale.size() * 4;
      if (!o.symmetric) {
        ins.push_back(addInitializer(g, fourBit(DType::UInt4, scaleDims, zp), wv->name() + "_zero_point"));
        qbytes += (zp.size() + 1) / 2;
      }
      Node* dq = g.addNode("DequantizeLinear", ins, {g.uniqueName(wv->name() + "_dequantized")}, "", g.nodes().front().get());
      dq->name = dq->output(0)->name();
      dq->setAttr(Attribute::ofInt("axis", transB ? 1 : 0));
      dq->setAttr(Attribute::ofInt("block_size", bs));
      dq->output(0)->setType(wv->type());
      done[wv] = dq->output(0);
      replaced.push_back(wv);
      report.weightsQuantized++;
      report.floatWeightBytes += w->raw.size();
      report.int8WeightBytes += qbytes;
    }
    n->setInput(widx, done[wv]);
  }
  for (Value* v : replaced)
    if (!v->hasUses() && !v->isGraphOutput()) g.removeInitializer(v);
  if (o.matmulNBits && report.nodesQuantized > 0 && !model.opsetVersion("com.microsoft"))
    model.opsetImports.push_back({"com.microsoft", 1, {}});
  return report;
}

}  // namespace onnxtool
