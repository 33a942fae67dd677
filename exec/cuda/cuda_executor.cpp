// cuda_executor.cpp: the `cuda` executor. Like `cpu` (exec/cpu/cpu_executor.cpp), prepare()
// keeps the caller's model untouched and specialises the plan per set of concrete input shapes
// (cached), each specialisation holding:
//   - the model as exec/specialize.h makes it (the -O<level> preset on a clone, shapes fixed),
//     typed by shape inference, so every value has a concrete type;
//   - one step per node of the main graph: a device kernel from cuda_kernels.cpp, created once
//     (constant inputs uploaded once, cuDNN algorithms measured once per shape), or the
//     reference kernel run on the host with copies at the border (fallback: control flow, ops or
//     types without a device kernel);
//   - executor-level fusions: an activation (and a residual Add) after a Conv, MatMul or Gemm
//     applied in that kernel's epilogue;
//   - a device memory plan: one arena, every value an offset from the values' lifetimes,
//     Reshape-family views aliasing their input; a workspace shared by the steps;
//   - pinned host buffers for the inputs and outputs, one stream, cuBLAS and cuDNN handles.
// A run copies the inputs in, enqueues every step, and copies the outputs out. From the second
// run on, a plan with no host step replays its kernels as one CUDA graph captured then (unless
// PrepareOptions::deviceGraph is false). Runs of one plan are serialised (one arena per plan).
#include "exec/cuda/cuda_executor.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <cublas_v2.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "exec/cuda/cuda_kernel.h"
#include "exec/kernel.h"
#include "exec/ref/ref_executor.h"
#include "exec/specialize.h"
#include "lib/error.h"
#include "lib/ops/op_schema.h"
#include "lib/shape_inference.h"

namespace onnxtool {

namespace {

using cuda::check;
using cuda::CudaKernel;
using cuda::CudaKernelDef;
using cuda::DeviceBuffer;
using cuda::DeviceContext;
using cuda::DevTensorType;
using cuda::Precision;

constexpr size_t kAlign = 256;
constexpr int kForever = INT_MAX;
constexpr size_t kBlasWorkspace = size_t{32} << 20;
constexpr size_t kCopyChunk = size_t{1} << 20;  ///< inputs move in chunks of at least this
constexpr size_t kParallelCopy = size_t{8} << 20;  ///< inputs from this size are copied by several threads
constexpr size_t kOutputBuffers = 4;  ///< pinned buffers per output that results may hold at once

size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int64_t opsetFor(const Model& m, const Node& n) {
  std::string_view d = canonicalDomain(n.domain);
  if (auto v = m.opsetVersion(d)) return *v;
  if (d.empty()) return maxKnownOpset("");
  return 1;
}

std::optional<std::vector<int64_t>> staticDims(const TypeInfo& t) {
  if (t.kind != TypeInfo::Kind::Tensor || !t.shape.hasRank) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : t.shape.dims) {
    if (!d.isValue() || d.value < 0) return std::nullopt;
    dims.push_back(d.value);
  }
  return dims;
}

bool deviceType(DType t) { return t != DType::String && t != DType::Undefined && dtypeBits(t) >= 8 && dtypeBits(t) % 8 == 0; }

void collectOuterReads(const Graph& g, const Graph& top, std::vector<const Value*>& out) {
  for (const auto& n : g.nodes()) {
    for (Value* v : n->inputs())
      if (v && v->graph() == &top) out.push_back(v);
    for (Graph* sg : n->subgraphs()) collectOuterReads(*sg, top, out);
  }
  for (const auto& e : g.outputs())
    if (e.value && e.value->graph() == &top) out.push_back(e.value);
}

std::string dimsStr(const std::vector<int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ",")); }

/// Page-locked host memory (inputs and outputs are copied through it asynchronously).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) : n_(bytes) {
    if (bytes) check(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  }
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(p_, o.p_), std::swap(n_, o.n_);
    return *this;
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

struct Slot {
  const Value* value = nullptr;
  std::optional<DevTensorType> type;  ///< as stored on the device; nullopt: host only
  DType logical = DType::Undefined;   ///< the model's element type
  size_t bytes = 0;                   ///< device bytes
  bool constant = false;
  bool hasDefault = false;       ///< a graph input with an initializer: `host` when not given
  bool device = false;           ///< has device bytes during a run
  bool producedOnDevice = false;
  bool hostRead = false;         ///< a host step, a subgraph or the caller reads it
  int def = -1;                  ///< producing step; -1: graph input or constant
  int last = -1;                 ///< last step reading its device bytes (kForever: graph output)
  int alias = -1;                ///< the slot whose bytes it views
  size_t offset = 0;             ///< in the arena (roots)
  DeviceBuffer constBuf;         ///< a constant read on the device
  RtValue host;                  ///< a constant's host value
  int graphInput = -1;
  bool graphOutput = false;
  PinnedBuffer pinned;           ///< graph inputs read on the device, graph outputs made there
  bool converted() const { return type && type->dtype != logical; }
  size_t logicalBytes() const { return type ? static_cast<size_t>(type->numElements()) * static_cast<size_t>(dtypeBits(logical) / 8) : 0; }
};

struct Step {
  const Node* node = nullptr;
  int64_t opset = 0;
  std::vector<int> in, out;
  std::vector<int> outerReads;
  std::unique_ptr<CudaKernel> kernel;
  const CudaKernelDef* def = nullptr;
  const KernelDef* ref = nullptr;  ///< host fallback (null with kernel null: a model-local function)
  std::string name;
  int graphNodes = 1;
  std::string opType;
  std::vector<int> upload;  ///< host step outputs copied to the device after it runs
};

class Specialization {
 public:
  Specialization(const Model& original, const std::map<std::string, std::vector<int64_t>>& inputDims, int level,
                 DeviceContext& ctx, bool useGraph)
      : ctx_(ctx), useGraph_(useGraph) {
    auto t0 = std::chrono::steady_clock::now();
    std::string phases;
    model_ = specializeModel(original, inputDims, level, "cuda executor", &phases);
    InferOptions io;
    for (const auto& [name, dims] : inputDims) {
      auto& d = io.inputDims[name];
      for (int64_t x : dims) d.push_back(std::to_string(x));
    }
    inferShapes(*model_, io);
    ref_ = std::make_unique<RefNodeRunner>(*model_, false);
    const Graph& g = *model_->graph;
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      int s = slotFor(g.inputs()[i].value);
      inputSlots_.push_back(s);
      if (!slots_[static_cast<size_t>(s)].constant) slots_[static_cast<size_t>(s)].graphInput = static_cast<int>(i);
    }
    for (const Value* v : g.initializers()) slotFor(v);
    for (const Value* v : g.sparseInitializers()) slotFor(v);
    for (const auto& n : g.nodes()) planNode(*n);
    for (const auto& e : g.outputs()) {
      int s = e.value ? slotFor(e.value) : -1;
      outputSlots_.push_back(s);
      if (s >= 0) slots_[static_cast<size_t>(s)].graphOutput = true;
    }
    fuseEpilogues();
    planResidency();
    planMemory();
    if (spdlog::should_log(spdlog::level::debug)) {
      size_t host = 0;
      for (const Step& st : steps_) host += !st.kernel && !st.name.empty();
      spdlog::debug("cuda executor: {} steps for {} nodes ({} on the host), arena {} bytes, workspace {} bytes; {}, {:.1f} ms in all",
                    steps_.size(), g.nodes().size(), host, arena_.size(), workspace_.size(), phases,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }

  ~Specialization() {
    if (graphExec_) cudaGraphExecDestroy(graphExec_);
    if (graph_) cudaGraphDestroy(graph_);
  }

  std::vector<RtValue> run(const Graph& original, const std::map<std::string, RtValue>& inputs, std::mt19937_64& rng,
                           RunProfile* profile);

 private:
  int slotFor(const Value* v) {
    auto it = slotOf_.find(v);
    if (it != slotOf_.end()) return it->second;
    Slot s;
    s.value = v;
    std::optional<std::vector<int64_t>> dims;
    DType logical = DType::Undefined;
    bool init = v->initializer() || v->sparseInitializer();
    if (init && !v->isGraphInput()) {
      s.constant = true;
      s.host = runtimeInitializer(v);
      if (s.host.isTensor()) dims = s.host.tensor->dims, logical = s.host.tensor->dtype();
    } else if (init) {  // a graph input with a default (IR >= 4): the caller may give another value
      s.host = runtimeInitializer(v);
      s.hasDefault = true;
      dims = staticDims(v->type());
      if (!dims && s.host.isTensor()) dims = s.host.tensor->dims;
      logical = v->type().kind == TypeInfo::Kind::Tensor ? v->type().dtype() : DType::Undefined;
      if (logical == DType::Undefined && s.host.isTensor()) logical = s.host.tensor->dtype();
    } else {
      dims = staticDims(v->type());
      if (v->type().kind == TypeInfo::Kind::Tensor) logical = v->type().dtype();
    }
    s.logical = logical;
    if (dims && deviceType(logical)) {
      DevTensorType t;
      t.dtype = cuda::storageType(logical, ctx_.precision);
      t.dims = *dims;
      uint64_t bytes = static_cast<uint64_t>(dtypeBits(t.dtype) / 8);
      bool fits = true;
      for (int64_t d : t.dims) fits = fits && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
      if (fits && bytes < (uint64_t{1} << 40)) {
        s.bytes = static_cast<size_t>(bytes);
        s.type = std::move(t);
      }
    }
    slots_.push_back(std::move(s));
    int idx = static_cast<int>(slots_.size() - 1);
    slotOf_[v] = idx;
    return idx;
  }

  void planNode(const Node& n) {
    Step st;
    st.node = &n;
    st.opType = n.opType;
    st.opset = opsetFor(*model_, n);
    int idx = static_cast<int>(steps_.size());
    for (Value* v : n.inputs()) st.in.push_back(v ? slotFor(v) : -1);
    for (Value* v : n.outputs()) {
      int s = v ? slotFor(v) : -1;
      if (s >= 0) slots_[static_cast<size_t>(s)].def = idx;
      st.out.push_back(s);
    }
    std::vector<const Value*> outer;
    for (Graph* sg : n.subgraphs()) collectOuterReads(*sg, *model_->graph, outer);
    for (const Value* v : outer) st.outerReads.push_back(slotFor(v));
    const Function* fn = model_->findFunction(n.domain, n.opType, n.overload);
    const OpSchema* schema = fn ? nullptr : findSchema(n.domain, n.opType, st.opset);
    if (schema && n.subgraphs().empty()) tryDevice(st, *schema);
    if (!st.kernel) {
      if (fn) {
        st.name = fmt::format("function {} (reference, host)", n.opType);
      } else {
        st.ref = KernelRegistry::instance().find("ref", n.domain, n.opType, schema->sinceVersion);
        st.name = fmt::format("{} (host)", st.ref->name);
      }
    }
    steps_.push_back(std::move(st));
  }

  cuda::CudaNodeInfo nodeInfo(const Step& st, int sinceVersion) {
    cuda::CudaNodeInfo info;
    info.node = st.node;
    info.opset = st.opset;
    info.sinceVersion = sinceVersion;
    info.ctx = &ctx_;
    for (int s : st.in) {
      const Slot* sl = s >= 0 ? &slots_[static_cast<size_t>(s)] : nullptr;
      info.inputs.push_back(sl && sl->type ? &*sl->type : nullptr);
      info.constants.push_back(sl && sl->constant && sl->host.isTensor() ? sl->host.tensor.get() : nullptr);
    }
    for (int s : st.out) {
      const Slot* sl = s >= 0 ? &slots_[static_cast<size_t>(s)] : nullptr;
      info.outputs.push_back(sl && sl->type ? &*sl->type : nullptr);
    }
    return info;
  }

  void tryDevice(Step& st, const OpSchema& schema) {
    const Node& n = *st.node;
    const CudaKernelDef* def = cuda::findCudaKernel(canonicalDomain(n.domain), n.opType, schema.sinceVersion);
    if (!def) return;
    if (!def->allOutputs)
      for (size_t k = 1; k < st.out.size(); ++k)
        if (st.out[k] >= 0) return;
    // bfloat16 values of the model itself stay on the reference kernels, as on `cpu`: the ONNX
    // reference rounds them per op in ways a float32-accumulating kernel does not reproduce
    for (const std::vector<int>* list : {&st.in, &st.out})
      for (int x : *list)
        if (x >= 0 && slots_[static_cast<size_t>(x)].logical == DType::BFloat16) return;
    cuda::CudaNodeInfo info = nodeInfo(st, schema.sinceVersion);
    std::unique_ptr<CudaKernel> k;
    try {
      k = def->create(info);
    } catch (const std::exception& e) {
      spdlog::debug("cuda executor: node '{}' ({}): {}; it runs on the host", n.displayName(), n.opType, e.what());
    }
    if (!k) return;
    st.kernel = std::move(k);
    st.def = def;
    st.name = std::string(def->name) + st.kernel->variant();
  }

  /// Whether slot s is read by exactly one step input (and nothing else: no graph output,
  /// no subgraph).
  int readers(int s) const {
    int n = 0;
    for (const Step& st : steps_) {
      for (int x : st.in) n += x == s;
      for (int x : st.outerReads) n += x == s;
    }
    return n + (slots_[static_cast<size_t>(s)].graphOutput ? 1 : 0);
  }

  /// A Conv, MatMul or Gemm followed by Add (of a tensor of its output's shape) and/or an
  /// activation becomes one step: the kernel applies them in its epilogue.
  void fuseEpilogues() {
    if (std::getenv("ONNXTOOL_CUDA_NO_FUSION")) return;  // debugging aid: every node its own step
    std::vector<bool> gone(steps_.size(), false);
    auto consumerOf = [&](int s, size_t from) -> int {
      for (size_t j = from; j < steps_.size(); ++j) {
        if (gone[j]) continue;
        for (int x : steps_[j].in)
          if (x == s) return static_cast<int>(j);
      }
      return -1;
    };
    auto activation = [&](const Step& st, cuda::Unary& act, float& a, float& b) {
      if (!st.kernel || st.out.size() != 1) return false;
      const std::string& op = st.node->opType;
      if (!canonicalDomain(st.node->domain).empty()) return false;
      if (op == "Relu") return act = cuda::Unary::Relu, true;
      if (op == "Sigmoid") return act = cuda::Unary::Sigmoid, true;
      if (op == "Tanh") return act = cuda::Unary::Tanh, true;
      if (op == "HardSwish") return act = cuda::Unary::HardSwish, true;
      if (op == "LeakyRelu") return act = cuda::Unary::LeakyRelu, a = st.node->attrFloat("alpha", 0.01f), true;
      if (op == "Gelu") {
        std::string ap = st.node->attrString("approximate", "none");
        act = ap == "tanh" ? cuda::Unary::GeluTanh : cuda::Unary::GeluErf;
        return true;
      }
      if (op == "Clip") {
        a = std::numeric_limits<float>::lowest(), b = std::numeric_limits<float>::max();
        if (st.opset < 11) {
          a = st.node->attrFloat("min", a), b = st.node->attrFloat("max", b);
        } else {
          for (size_t i = 1; i <= 2 && i < st.in.size(); ++i) {
            if (st.in[i] < 0) continue;
            const Slot& sl = slots_[static_cast<size_t>(st.in[i])];
            if (!sl.constant || !sl.host.isTensor() || sl.host.tensor->numElements().value_or(0) != 1) return false;
            (i == 1 ? a : b) = static_cast<float>(sl.host.tensor->elementAsDouble(0));
          }
        }
        act = cuda::Unary::Clip;
        return true;
      }
      return false;
    };
    auto isOp = [&](size_t j, const char* op) {
      const Step& sj = steps_[j];
      return !gone[j] && sj.node->opType == op && canonicalDomain(sj.node->domain).empty() && sj.out.size() == 1 &&
             sj.out[0] >= 0;
    };
    auto scalar = [&](int s) -> std::optional<double> {
      if (s < 0) return std::nullopt;
      const Slot& sl = slots_[static_cast<size_t>(s)];
      if (!sl.constant || !sl.host.isTensor() || sl.host.tensor->numElements().value_or(0) != 1) return std::nullopt;
      return sl.host.tensor->elementAsDouble(0);
    };
    /// The other input of binary step j, which reads s; -1 when it is not binary.
    auto other = [&](size_t j, int s) {
      const Step& sj = steps_[j];
      if (sj.in.size() != 2) return -1;
      return sj.in[0] == s ? sj.in[1] : sj.in[1] == s ? sj.in[0] : -1;
    };
    auto near = [](std::optional<double> v, double want) { return v && std::abs(*v - want) <= 1e-6 * std::abs(want); };
    /// The erf GELU as exporters spell it, x * 0.5 * (1 + erf(x / sqrt(2))) in either order of
    /// the two Muls, reading x = s: its steps and the last one's output.
    auto geluChain = [&](int s, size_t from, std::vector<size_t>& chain, int& out) {
      if (readers(s) != 2) return false;
      int div = -1, mul = -1;
      for (size_t j = from; j < steps_.size(); ++j) {
        if (gone[j]) continue;
        for (int x : steps_[j].in)
          if (x == s) (isOp(j, "Div") && steps_[j].in[0] == s ? div : mul) = static_cast<int>(j);
      }
      if (div < 0 || mul < 0 || !isOp(static_cast<size_t>(mul), "Mul")) return false;
      auto d = static_cast<size_t>(div), m = static_cast<size_t>(mul);
      if (!near(scalar(steps_[d].in[1]), 1.4142135623730951)) return false;
      int erfOut = steps_[d].out[0];
      int e = readers(erfOut) == 1 ? consumerOf(erfOut, d + 1) : -1;
      if (e < 0 || !isOp(static_cast<size_t>(e), "Erf")) return false;
      int addIn = steps_[static_cast<size_t>(e)].out[0];
      int a = readers(addIn) == 1 ? consumerOf(addIn, static_cast<size_t>(e) + 1) : -1;
      if (a < 0 || !isOp(static_cast<size_t>(a), "Add") || !near(scalar(other(static_cast<size_t>(a), addIn)), 1.0)) return false;
      int plus = steps_[static_cast<size_t>(a)].out[0];
      if (readers(plus) != 1) return false;
      int mOther = other(m, s);
      size_t last;
      if (mOther == plus) {  // x * (1 + erf) then * 0.5
        int h = readers(steps_[m].out[0]) == 1 ? consumerOf(steps_[m].out[0], m + 1) : -1;
        if (h < 0 || !isOp(static_cast<size_t>(h), "Mul") || !near(scalar(other(static_cast<size_t>(h), steps_[m].out[0])), 0.5))
          return false;
        last = static_cast<size_t>(h);
      } else if (near(scalar(mOther), 0.5)) {  // x * 0.5 then * (1 + erf)
        int h = readers(steps_[m].out[0]) == 1 ? consumerOf(steps_[m].out[0], m + 1) : -1;
        if (h < 0 || !isOp(static_cast<size_t>(h), "Mul") || other(static_cast<size_t>(h), steps_[m].out[0]) != plus ||
            readers(plus) != 1)
          return false;
        last = static_cast<size_t>(h);
      } else {
        return false;
      }
      chain = {d, static_cast<size_t>(e), static_cast<size_t>(a), m, last};
      out = steps_[last].out[0];
      return true;
    };
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step& st = steps_[i];
      if (!st.kernel || gone[i] || st.out.empty() || st.out[0] < 0) continue;
      const std::string& op = st.node->opType;
      if (op != "Conv" && op != "MatMul" && op != "Gemm" && op != "BatchNormalization") continue;
      const Slot& outSlot = slots_[static_cast<size_t>(st.out[0])];
      if (!outSlot.type || (outSlot.logical != DType::Float && outSlot.logical != DType::Float16)) continue;
      int cur = st.out[0];
      int residual = -1;
      std::vector<size_t> absorbed;
      std::string label;
      // MatMul / Gemm then Div or Mul by a constant scalar: the GEMM's alpha
      if (op == "MatMul" || op == "Gemm") {
        int j = readers(cur) == 1 ? consumerOf(cur, i + 1) : -1;
        if (j >= 0 && (isOp(static_cast<size_t>(j), "Div") || isOp(static_cast<size_t>(j), "Mul")) &&
            steps_[static_cast<size_t>(j)].in.size() == 2 && steps_[static_cast<size_t>(j)].in[0] == cur) {
          auto c = scalar(steps_[static_cast<size_t>(j)].in[1]);
          bool div = steps_[static_cast<size_t>(j)].node->opType == "Div";
          if (c && *c != 0 && std::isfinite(*c) && st.kernel->fuseScale(static_cast<float>(div ? 1.0 / *c : *c))) {
            absorbed.push_back(static_cast<size_t>(j));
            label += div ? "+div" : "+mul";
            cur = steps_[static_cast<size_t>(j)].out[0];
          }
        }
      }
      int j = readers(cur) == 1 ? consumerOf(cur, i + 1) : -1;
      // residual Add: the other operand has the output's element count and type (the epilogue
      // adds element by element), and exists already; a Reshape-family view in between is
      // looked through (a Gemm on [B*S, C] whose output goes back to [B, S, C])
      int addAt = j, addIn = cur, viewAt = -1;
      if (j >= 0 && steps_[static_cast<size_t>(j)].kernel && steps_[static_cast<size_t>(j)].def->reuse == cuda::Reuse::View &&
          steps_[static_cast<size_t>(j)].in[0] == cur && steps_[static_cast<size_t>(j)].out[0] >= 0) {
        int v = steps_[static_cast<size_t>(j)].out[0];
        viewAt = j;
        addIn = v;
        addAt = readers(v) == 1 ? consumerOf(v, static_cast<size_t>(j) + 1) : -1;
      }
      if (addAt >= 0 && steps_[static_cast<size_t>(addAt)].kernel && isOp(static_cast<size_t>(addAt), "Add")) {
        const Step& add = steps_[static_cast<size_t>(addAt)];
        int other = add.in.size() == 2 ? (add.in[0] == addIn ? add.in[1] : add.in[0]) : -1;
        const Slot& so = slots_[static_cast<size_t>(std::max(other, 0))];
        const Slot& sc = slots_[static_cast<size_t>(addIn)];
        bool ready = other >= 0 && other != addIn && (so.def < static_cast<int>(i) || so.constant);
        if (ready && so.type && sc.type && so.type->numElements() == sc.type->numElements() &&
            so.type->dtype == sc.type->dtype && slots_[static_cast<size_t>(add.out[0])].type &&
            slots_[static_cast<size_t>(add.out[0])].type->numElements() == sc.type->numElements()) {
          residual = other;
          if (viewAt >= 0) absorbed.push_back(static_cast<size_t>(viewAt)), label += "+" + steps_[static_cast<size_t>(viewAt)].node->opType;
          absorbed.push_back(static_cast<size_t>(addAt));
          label += "+add";
          cur = add.out[0];
          j = readers(cur) == 1 ? consumerOf(cur, static_cast<size_t>(addAt) + 1) : -1;
        }
      }
      cuda::Unary act = cuda::Unary::Identity;
      float a = 0, b = 0;
      std::vector<size_t> chain;
      int chainOut = -1;
      if (j >= 0 && steps_[static_cast<size_t>(j)].in[0] == cur && activation(steps_[static_cast<size_t>(j)], act, a, b)) {
        absorbed.push_back(static_cast<size_t>(j));
        label += "+" + steps_[static_cast<size_t>(j)].node->opType;
        cur = steps_[static_cast<size_t>(j)].out[0];
      } else if (residual < 0 && geluChain(cur, i + 1, chain, chainOut)) {
        act = cuda::Unary::GeluErf;
        absorbed.insert(absorbed.end(), chain.begin(), chain.end());
        label += "+gelu";
        cur = chainOut;
      } else {
        act = cuda::Unary::Identity;
      }
      if (absorbed.empty()) continue;
      if (act == cuda::Unary::Identity && residual < 0) {  // a scale alone, taken already
        for (size_t k : absorbed) gone[k] = true;
        st.graphNodes += static_cast<int>(absorbed.size());
        st.name += label;
        slots_[static_cast<size_t>(st.out[0])].def = -2;
        st.out[0] = cur;
        slots_[static_cast<size_t>(cur)].def = static_cast<int>(i);
        st.opType = st.node->opType + label;
        continue;
      }
      int residualInput = -1;
      if (residual >= 0) residualInput = static_cast<int>(st.in.size());
      // (every kernel that took a scale above takes an epilogue too, so nothing is half-fused)
      if (!st.kernel->fuseEpilogue(act, a, b, residualInput)) continue;
      if (residual >= 0) st.in.push_back(residual);
      // the fused step produces the last node's output, at the first node's place (every input
      // it reads exists by then: the residual was made before it)
      for (size_t k : absorbed) gone[k] = true;
      st.graphNodes += static_cast<int>(absorbed.size());
      st.name += label;
      slots_[static_cast<size_t>(st.out[0])].def = -2;  // no longer produced
      st.out[0] = cur;
      slots_[static_cast<size_t>(cur)].def = static_cast<int>(i);
      st.opType = st.node->opType + label;
    }
    std::vector<Step> kept;
    for (size_t i = 0; i < steps_.size(); ++i)
      if (!gone[i]) kept.push_back(std::move(steps_[i]));
    steps_ = std::move(kept);
    for (Slot& s : slots_)
      if (s.def >= 0) s.def = -3;  // renumbered below
    for (size_t i = 0; i < steps_.size(); ++i)
      for (int s : steps_[i].out)
        if (s >= 0) slots_[static_cast<size_t>(s)].def = static_cast<int>(i);
  }

  int root(int s) const {
    while (slots_[static_cast<size_t>(s)].alias >= 0) s = slots_[static_cast<size_t>(s)].alias;
    return s;
  }

  void planResidency() {
    auto deviceRead = [&](int s, int at) {
      Slot& sl = slots_[static_cast<size_t>(s)];
      sl.device = true;
      Slot& r = slots_[static_cast<size_t>(root(s))];
      r.device = true;
      r.last = std::max(r.last, at);
    };
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step& st = steps_[i];
      int at = static_cast<int>(i);
      if (st.kernel) {
        for (size_t k = 0; k < st.in.size(); ++k)
          if (st.in[k] >= 0 && st.kernel->readsInput(k)) deviceRead(st.in[k], at);
        for (int s : st.out)
          if (s >= 0) slots_[static_cast<size_t>(s)].device = slots_[static_cast<size_t>(s)].producedOnDevice = true;
        if (st.def->reuse == cuda::Reuse::View && st.in[0] >= 0 && st.out[0] >= 0) {
          slots_[static_cast<size_t>(st.out[0])].alias = st.in[0];
          slots_[static_cast<size_t>(st.out[0])].producedOnDevice = true;
        }
      } else {
        hostSteps_ = true;
        for (int s : st.in)
          if (s >= 0) hostRead(s, at);
        for (int s : st.outerReads) hostRead(s, at);
      }
    }
    for (int s : outputSlots_)
      if (s >= 0) hostRead(s, kForever);
    // host-made values that device steps read are uploaded right after the step that made them
    for (size_t i = 0; i < steps_.size(); ++i)
      if (!steps_[i].kernel)
        for (int s : steps_[i].out)
          if (s >= 0 && slots_[static_cast<size_t>(s)].device) steps_[i].upload.push_back(s);
    for (Slot& s : slots_) {
      if (!s.constant || !s.device || !s.type) continue;
      const TensorData& t = *s.host.tensor;
      if (s.converted()) {
        DeviceBuffer raw = DeviceBuffer::upload(t.raw.data(), t.raw.size());
        s.constBuf = DeviceBuffer(std::max<size_t>(s.bytes, 1));
        cuda::cast(static_cast<int>(s.logical), static_cast<int>(s.type->dtype), raw.get(), s.constBuf.get(),
                   s.type->numElements(), ctx_.stream);
        check(cudaStreamSynchronize(ctx_.stream), "converting a constant");
      } else {
        s.constBuf = t.raw.size() ? DeviceBuffer::upload(t.raw.data(), t.raw.size()) : DeviceBuffer(1);  // (empty: any address)
      }
    }
  }

  void hostRead(int s, int at) {
    Slot& sl = slots_[static_cast<size_t>(s)];
    sl.hostRead = true;
    if (sl.producedOnDevice) {  // copied out at `at`: its device bytes live until then
      Slot& r = slots_[static_cast<size_t>(root(s))];
      r.last = std::max(r.last, at);
    }
  }

  void planMemory() {
    struct Item {
      int slot;
      size_t bytes;
      int start, end;
    };
    std::vector<Item> items;
    size_t staging = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.device || !s.type) continue;
      bool convertedAtBorder = s.converted() && (s.graphInput >= 0 || s.hostRead || (s.def >= 0 && !s.producedOnDevice));
      if (convertedAtBorder) staging = std::max(staging, s.logicalBytes());
      if (s.alias >= 0 || s.constant) continue;
      int start = s.graphInput >= 0 ? -1 : s.def;
      int end = std::max(s.last, start);
      items.push_back({static_cast<int>(i), alignUp(std::max<size_t>(s.bytes, 1)), start, end});
    }
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.bytes > b.bytes; });
    std::vector<const Item*> placed;
    size_t total = 0;
    std::vector<std::pair<size_t, size_t>> busy;
    for (Item& it : items) {
      busy.clear();
      for (const Item* p : placed)
        if (p->start <= it.end && it.start <= p->end)
          busy.emplace_back(slots_[static_cast<size_t>(p->slot)].offset, p->bytes);
      std::sort(busy.begin(), busy.end());
      size_t at = 0;
      for (const auto& [o, b] : busy) {
        if (at + it.bytes <= o) break;
        at = std::max(at, o + b);
      }
      slots_[static_cast<size_t>(it.slot)].offset = at;
      total = std::max(total, at + it.bytes);
      placed.push_back(&it);
    }
    arena_ = DeviceBuffer(std::max<size_t>(total, kAlign));
    size_t ws = 0;
    for (const Step& st : steps_)
      if (st.kernel) ws = std::max(ws, st.kernel->workspaceBytes());
    if (ws) workspace_ = DeviceBuffer(ws);
    if (staging) staging_ = DeviceBuffer(staging);
    for (int s : inputSlots_) {
      Slot& sl = slots_[static_cast<size_t>(s)];
      if (sl.device && sl.type && !sl.constant) sl.pinned = PinnedBuffer(std::max<size_t>(sl.logicalBytes(), 1));
    }
    for (int s : outputSlots_) {
      if (s < 0) continue;
      Slot& sl = slots_[static_cast<size_t>(s)];
      if (sl.producedOnDevice && sl.type && !sl.pinned.get()) sl.pinned = PinnedBuffer(std::max<size_t>(sl.logicalBytes(), 1));
    }
  }

  void* devicePtr(int s) const {
    const Slot& r = slots_[static_cast<size_t>(root(s))];
    if (r.constant) return r.constBuf.get();
    return static_cast<uint8_t*>(arena_.get()) + r.offset;
  }

  /// Copies host tensor `t` into slot s's device bytes (converted to its storage type).
  void toDevice(int s, const TensorData& t, const void* pinnedSrc) {
    const Slot& sl = slots_[static_cast<size_t>(s)];
    const void* src = pinnedSrc ? pinnedSrc : t.raw.data();
    size_t bytes = sl.logicalBytes();
    if (!bytes) return;
    if (sl.converted()) {
      check(cudaMemcpyAsync(staging_.get(), src, bytes, cudaMemcpyHostToDevice, ctx_.stream), "copy to the device");
      cuda::cast(static_cast<int>(sl.logical), static_cast<int>(sl.type->dtype), staging_.get(), devicePtr(s),
                 sl.type->numElements(), ctx_.stream);
    } else {
      check(cudaMemcpyAsync(devicePtr(s), src, bytes, cudaMemcpyHostToDevice, ctx_.stream), "copy to the device");
    }
    if (!pinnedSrc) check(cudaStreamSynchronize(ctx_.stream), "copy to the device");  // pageable source: done before it goes
  }

  /// Copies graph input s's host bytes to the device through its pinned buffer, in chunks so that
  /// the host's copy of one chunk into pinned memory overlaps the transfer of the one before.
  void uploadInput(int s, const uint8_t* src) {
    const Slot& sl = slots_[static_cast<size_t>(s)];
    size_t bytes = sl.logicalBytes();
    if (!bytes) return;
    auto* pin = static_cast<uint8_t*>(sl.pinned.get());
    auto* dst = static_cast<uint8_t*>(sl.converted() ? staging_.get() : devicePtr(s));
    // A large input is copied into pinned memory by several threads (one core copies some
    // 6-10 GB/s, the transfer runs at 25-50), then moved in one transfer.
    unsigned parts = bytes >= kParallelCopy ? std::min(8u, std::max(1u, std::thread::hardware_concurrency())) : 1u;
    if (parts > 1) {
      size_t per = (bytes + parts - 1) / parts;
      std::vector<std::thread> workers;
      for (unsigned p = 1; p < parts; ++p) {
        size_t off = std::min(bytes, p * per), n = std::min(per, bytes - off);
        if (n) workers.emplace_back([=] { std::memcpy(pin + off, src + off, n); });
      }
      std::memcpy(pin, src, std::min(per, bytes));
      for (auto& w : workers) w.join();
      check(cudaMemcpyAsync(dst, pin, bytes, cudaMemcpyHostToDevice, ctx_.stream), "copy to the device");
    } else {
      size_t chunk = std::max(kCopyChunk, bytes / 32);
      for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = std::min(chunk, bytes - off);
        std::memcpy(pin + off, src + off, n);
        check(cudaMemcpyAsync(dst + off, pin + off, n, cudaMemcpyHostToDevice, ctx_.stream), "copy to the device");
      }
    }
    if (sl.converted())
      cuda::cast(static_cast<int>(sl.logical), static_cast<int>(sl.type->dtype), staging_.get(), devicePtr(s),
                 sl.type->numElements(), ctx_.stream);
  }

  /// A pinned buffer for output slot s that no earlier run's result holds any more, or null
  /// (kOutputBuffers of them are held by the caller's results already).
  std::shared_ptr<uint8_t> outputBuffer(int s, size_t bytes) {
    auto& pool = outputPool_[s];
    for (const auto& b : pool)
      if (b.use_count() == 1) return b;
    if (pool.size() >= kOutputBuffers) return nullptr;
    void* p = nullptr;
    check(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault), "cudaHostAlloc");
    pool.emplace_back(static_cast<uint8_t*>(p), [](uint8_t* q) { cudaFreeHost(q); });
    return pool.back();
  }

  /// The graph outputs made on the device, copied to the host, by slot. Each lands in a pinned
  /// buffer that the returned tensor then holds (no second copy); the buffer comes back to this
  /// plan when the caller drops the result.
  std::map<int, RtValue> fetchOutputs(const std::vector<RtValue>& hv) {
    struct Pending {
      std::shared_ptr<uint8_t> buf;
      bool pooled;
    };
    std::map<int, Pending> pending;
    for (int s : outputSlots_) {
      if (s < 0 || pending.count(s)) continue;
      const Slot& sl = slots_[static_cast<size_t>(s)];
      if (hv[static_cast<size_t>(s)].kind != RtValue::Kind::Empty || !sl.producedOnDevice) continue;
      size_t bytes = sl.logicalBytes();
      std::shared_ptr<uint8_t> buf = outputBuffer(s, bytes);
      bool pooled = buf != nullptr;
      if (!pooled) buf = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(sl.pinned.get()), [](uint8_t*) {});
      enqueueToHost(s, buf.get());
      pending.emplace(s, Pending{buf, pooled});
    }
    check(cudaStreamSynchronize(ctx_.stream), "copy to the host");
    std::map<int, RtValue> out;
    for (auto& [s, p] : pending) {
      const Slot& sl = slots_[static_cast<size_t>(s)];
      if (!p.pooled) {
        out.emplace(s, hostTensor(s, p.buf.get()));
        continue;
      }
      Tensor t;
      t.dataType = static_cast<int32_t>(sl.logical);
      t.dims = sl.type->dims;
      t.setRaw(Buffer::borrow(std::shared_ptr<const void>(p.buf, p.buf.get()), p.buf.get(), sl.logicalBytes()));
      out.emplace(s, RtValue::ofTensor(std::move(t)));
    }
    return out;
  }

  /// Enqueues the copy of slot s's device bytes into `dst` (host, logical type).
  void enqueueToHost(int s, void* dst) const {
    const Slot& sl = slots_[static_cast<size_t>(s)];
    size_t bytes = sl.logicalBytes();
    if (!bytes) return;
    const void* src = devicePtr(s);
    if (sl.converted()) {
      cuda::cast(static_cast<int>(sl.type->dtype), static_cast<int>(sl.logical), src, staging_.get(), sl.type->numElements(),
                 ctx_.stream);
      src = staging_.get();
    }
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_.stream), "copy to the host");
  }

  RtValue hostTensor(int s, const void* bytes) const {
    const Slot& sl = slots_[static_cast<size_t>(s)];
    Tensor t;
    t.dataType = static_cast<int32_t>(sl.logical);
    t.dims = sl.type->dims;
    t.setRaw(Buffer::copyOf(std::span<const uint8_t>(static_cast<const uint8_t*>(bytes), sl.logicalBytes())));
    return RtValue::ofTensor(std::move(t));
  }

  void launchStep(const Step& st, std::vector<const void*>& ins, std::vector<void*>& outs) const {
    ins.clear();
    outs.clear();
    for (size_t k = 0; k < st.in.size(); ++k)
      ins.push_back(st.in[k] >= 0 && st.kernel->readsInput(k) ? devicePtr(st.in[k]) : nullptr);
    for (int s : st.out) outs.push_back(s >= 0 ? devicePtr(s) : nullptr);
    cuda::CudaComputeArgs args;
    args.inputs = ins;
    args.outputs = outs;
    args.workspace = workspace_.get();
    args.ctx = &ctx_;
    st.kernel->compute(args);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      fail(ErrorKind::Internal, "node '{}' ({}, {}): CUDA: {}", st.node->displayName(), st.opType, st.name, cudaGetErrorString(e));
  }

  DeviceContext& ctx_;
  bool useGraph_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<RefNodeRunner> ref_;
  std::vector<Slot> slots_;
  std::unordered_map<const Value*, int> slotOf_;
  std::vector<Step> steps_;
  std::vector<int> inputSlots_, outputSlots_;
  bool hostSteps_ = false;
  DeviceBuffer arena_, workspace_, staging_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graphExec_ = nullptr;
  int runs_ = 0;
  std::map<int, std::vector<std::shared_ptr<uint8_t>>> outputPool_;  ///< pinned output buffers by slot

};

std::vector<RtValue> Specialization::run(const Graph& original, const std::map<std::string, RtValue>& inputs,
                                         std::mt19937_64& rng, RunProfile* profile) {
  using Clock = std::chrono::steady_clock;
  const Graph& g = *model_->graph;
  std::vector<RtValue> hv(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].constant) hv[i] = slots_[i].host;
  auto t0 = Clock::now();
  // inputs: to the pinned buffers, then to the device
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    auto it = inputs.find(original.inputs()[i].value->name());
    int s = inputSlots_[i];
    Slot& sl = slots_[static_cast<size_t>(s)];
    if (sl.constant) continue;
    if (it == inputs.end() && !sl.hasDefault) continue;
    const RtValue& v = it != inputs.end() ? it->second : sl.host;
    hv[static_cast<size_t>(s)] = v;
    if (!sl.device || !sl.type) continue;
    if (!v.isTensor() || v.tensor->dims != sl.type->dims || v.tensor->dtype() != sl.logical)
      fail(ErrorKind::InvalidInput, "input '{}': expected {} {}", sl.value->name(), dtypeName(sl.logical), dimsStr(sl.type->dims));
    size_t bytes = sl.logicalBytes();
    if (v.tensor->raw.size() < bytes) fail(ErrorKind::InvalidInput, "input '{}': {} bytes of data, {} expected", sl.value->name(), v.tensor->raw.size(), bytes);
    uploadInput(s, v.tensor->raw.data());
  }
  if (profile) {
    check(cudaStreamSynchronize(ctx_.stream), "copy to the device");
    profile->copyInSeconds = std::chrono::duration<double>(Clock::now() - t0).count();
    profile->nodes.clear();
  }

  std::vector<const void*> ins;
  std::vector<void*> outs;
  auto toHostValue = [&](int s) -> const RtValue& {
    RtValue& v = hv[static_cast<size_t>(s)];
    if (v.kind != RtValue::Kind::Empty || !slots_[static_cast<size_t>(s)].producedOnDevice) return v;
    const Slot& sl = slots_[static_cast<size_t>(s)];
    std::vector<uint8_t> tmp(sl.logicalBytes());
    enqueueToHost(s, tmp.data());
    check(cudaStreamSynchronize(ctx_.stream), "copy to the host");
    v = hostTensor(s, tmp.data());
    return v;
  };

  bool replay = !profile && !hostSteps_ && useGraph_ && (graphExec_ || runs_ >= 1);
  if (replay && !graphExec_) {
    // capture the steps once (the first run has made every lazy library state)
    cudaError_t e = cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal);
    bool ok = e == cudaSuccess;
    if (ok) {
      try {
        for (const Step& st : steps_) launchStep(st, ins, outs);
      } catch (const std::exception& ex) {
        spdlog::debug("cuda executor: graph capture failed: {}", ex.what());
        ok = false;
      }
      cudaGraph_t graph = nullptr;
      e = cudaStreamEndCapture(ctx_.stream, &graph);
      ok = ok && e == cudaSuccess && graph;
      if (ok && cudaGraphInstantiate(&graphExec_, graph, 0) == cudaSuccess) graph_ = graph;
      else {
        if (graph) cudaGraphDestroy(graph);
        graphExec_ = nullptr;
        ok = false;
      }
    }
    if (!ok) {
      cudaGetLastError();
      spdlog::debug("cuda executor: no CUDA graph ({}); kernels are launched one by one", cudaGetErrorString(e));
      useGraph_ = false;
      replay = false;
    }
  }
  if (replay) {
    check(cudaGraphLaunch(graphExec_, ctx_.stream), "cudaGraphLaunch");
  } else {
    cudaEvent_t ev0 = nullptr, ev1 = nullptr;
    struct EventGuard {
      cudaEvent_t& a;
      cudaEvent_t& b;
      ~EventGuard() {
        if (a) cudaEventDestroy(a);
        if (b) cudaEventDestroy(b);
      }
    } guard{ev0, ev1};
    if (profile) {
      check(cudaEventCreate(&ev0), "cudaEventCreate");
      check(cudaEventCreate(&ev1), "cudaEventCreate");
    }
    for (const Step& st : steps_) {
      if (st.kernel) {
        if (profile) check(cudaEventRecord(ev0, ctx_.stream), "cudaEventRecord");
        launchStep(st, ins, outs);
        if (profile) {
          check(cudaEventRecord(ev1, ctx_.stream), "cudaEventRecord");
          check(cudaEventSynchronize(ev1), "cudaEventSynchronize");
          float ms = 0;
          cudaEventElapsedTime(&ms, ev0, ev1);
          profile->nodes.push_back({st.node->displayName(), st.opType, st.name, false, ms * 1e-3, st.kernel->flops(), st.graphNodes});
        }
        continue;
      }
      // host step: inputs copied out as needed, the reference kernel, outputs copied in
      auto h0 = Clock::now();
      const Node& n = *st.node;
      std::vector<const RtValue*> in;
      for (int s : st.in) in.push_back(s >= 0 ? &toHostValue(s) : nullptr);
      for (int s : st.outerReads) toHostValue(s);
      std::vector<RtValue> result;
      if (!st.ref) {
        result = ref_->callFunction(n, in, rng);
      } else {
        RefNodeRunner::OuterLookup outer = [&](const Value* v) -> const RtValue* {
          auto it = slotOf_.find(v);
          return it == slotOf_.end() ? nullptr : &toHostValue(it->second);
        };
        SubgraphRunner runner = [&](const Graph& body, const std::vector<RtValue>& args) {
          return ref_->runSubgraph(body, args, outer, rng);
        };
        KernelContext kc(n, st.opset, std::move(in), n.outputs().size(), runner, &rng, model_.get(), nullptr);
        st.ref->fn(kc);
        result = std::move(kc.outputs());
      }
      for (size_t k = 0; k < st.out.size() && k < result.size(); ++k) {
        int s = st.out[k];
        if (s < 0) continue;
        hv[static_cast<size_t>(s)] = std::move(result[k]);
      }
      for (int s : st.upload) {
        const Slot& sl = slots_[static_cast<size_t>(s)];
        const RtValue& v = hv[static_cast<size_t>(s)];
        if (!v.isTensor() || v.tensor->dims != sl.type->dims || v.tensor->dtype() != sl.logical)
          fail(ErrorKind::Internal, "node '{}' ({}): output '{}' is not the {} {} shape inference planned", n.displayName(),
               n.opType, sl.value->name(), dtypeName(sl.logical), dimsStr(sl.type->dims));
        toDevice(s, *v.tensor, nullptr);
      }
      if (profile)
        profile->nodes.push_back({n.displayName(), st.opType, st.name, true,
                                  std::chrono::duration<double>(Clock::now() - h0).count(), 0.0, st.graphNodes});
    }
  }
  ++runs_;
  // outputs
  auto o0 = Clock::now();
  if (profile) check(cudaStreamSynchronize(ctx_.stream), "run");
  std::map<int, RtValue> made = fetchOutputs(hv);
  std::vector<RtValue> out;
  for (int s : outputSlots_) {
    if (s < 0) {
      out.emplace_back();
      continue;
    }
    auto it = made.find(s);
    out.push_back(it != made.end() ? it->second : hv[static_cast<size_t>(s)]);
  }
  if (profile) profile->copyOutSeconds = std::chrono::duration<double>(Clock::now() - o0).count();
  return out;
}

class CudaPlan : public Plan {
 public:
  CudaPlan(const Model& m, const PrepareOptions& o, Precision p)
      : model_(m), seed_(o.seed), level_(o.graphOptLevel), graph_(o.deviceGraph), ctx_(owner_.ctx) {
    if (!m.graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", m.path);
    ctx_.precision = p;
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // library handles only for models that use them (creating cuDNN's costs milliseconds)
    bool blasOps = false, dnnOps = false;
    for (const auto& n : m.graph->nodes()) {
      if (!canonicalDomain(n->domain).empty()) continue;
      blasOps = blasOps || n->opType == "MatMul" || n->opType == "Gemm";
      dnnOps = dnnOps || n->opType == "Conv";
    }
    if (blasOps) {
      cublasHandle_t blas = nullptr;
      if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) fail(ErrorKind::Internal, "cuBLAS: cublasCreate failed");
      ctx_.blas = blas;
      check(cudaMalloc(&ctx_.blasWorkspace, kBlasWorkspace), "cudaMalloc");
      ctx_.blasWorkspaceBytes = kBlasWorkspace;
      if (cublasSetStream(blas, ctx_.stream) != CUBLAS_STATUS_SUCCESS ||
          cublasSetWorkspace(blas, ctx_.blasWorkspace, kBlasWorkspace) != CUBLAS_STATUS_SUCCESS)
        fail(ErrorKind::Internal, "cuBLAS: setting the stream and workspace failed");
    }
    if (dnnOps) {
      cudnnHandle_t dnn = nullptr;
      if (cudnnCreate(&dnn) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Internal, "cuDNN: cudnnCreate failed");
      ctx_.dnn = dnn;
      if (cudnnSetStream(dnn, ctx_.stream) != CUDNN_STATUS_SUCCESS) fail(ErrorKind::Internal, "cuDNN: cudnnSetStream failed");
    }
    std::map<std::string, std::vector<int64_t>> dims;
    bool allStatic = true;
    for (const auto& e : m.graph->inputs()) {
      if (e.value->initializer()) continue;
      auto d = staticDims(e.type());
      if (!d) {
        allStatic = false;
        break;
      }
      dims[e.value->name()] = *d;
    }
    if (allStatic) specialization(dims);
    else RefNodeRunner validate(m, false);  // a node without a kernel fails now, as on ref
  }

  std::vector<RtValue> run(const std::map<std::string, RtValue>& inputs) override { return runImpl(inputs, nullptr); }
  std::vector<RtValue> runProfiled(const std::map<std::string, RtValue>& inputs, RunProfile& profile) override {
    return runImpl(inputs, &profile);
  }

 private:
  std::vector<RtValue> runImpl(const std::map<std::string, RtValue>& inputs, RunProfile* profile) {
    const Graph& g = *model_.graph;
    std::map<std::string, std::vector<int64_t>> dims;
    for (const auto& [name, value] : inputs) {
      const ValueInfoEntry* entry = nullptr;
      for (const auto& e : g.inputs())
        if (e.value->name() == name) entry = &e;
      if (!entry) {
        std::string names;
        for (const auto& e : g.inputs())
          if (!e.value->initializer()) names += (names.empty() ? "" : ", ") + e.value->name();
        fail(ErrorKind::InvalidInput, "unknown input '{}', the model's inputs are: {}", name, names);
      }
      checkGraphInput(*entry, value);
      if (value.isTensor()) dims[name] = value.tensor->dims;
    }
    for (const auto& e : g.inputs())
      if (!inputs.count(e.value->name()) && !e.value->initializer())
        fail(ErrorKind::InvalidInput, "input '{}' is missing, expected {}", e.value->name(), e.type().str());
    std::lock_guard lock(mutex_);
    Specialization& sp = specialization(dims);
    std::mt19937_64 rng(seed_ ? *seed_ + runs_ : std::random_device{}());
    ++runs_;
    return sp.run(g, inputs, rng, profile);
  }

  Specialization& specialization(const std::map<std::string, std::vector<int64_t>>& dims) {
    auto it = cache_.find(dims);
    if (it != cache_.end()) return *it->second;
    auto sp = std::make_unique<Specialization>(model_, dims, level_, ctx_, graph_);
    return *cache_.emplace(dims, std::move(sp)).first->second;
  }

  /// The stream and library handles, released by a member (also when the constructor throws),
  /// after the specializations that use them (declared before cache_).
  struct ContextOwner {
    DeviceContext ctx;
    ContextOwner() = default;
    ContextOwner(const ContextOwner&) = delete;
    ContextOwner& operator=(const ContextOwner&) = delete;
    ~ContextOwner() {
      if (ctx.dnn) cudnnDestroy(reinterpret_cast<cudnnHandle_t>(ctx.dnn));
      if (ctx.blas) cublasDestroy(reinterpret_cast<cublasHandle_t>(ctx.blas));
      if (ctx.blasWorkspace) cudaFree(ctx.blasWorkspace);
      if (ctx.stream) cudaStreamDestroy(ctx.stream);
    }
  };

  const Model& model_;
  std::optional<uint64_t> seed_;
  int level_;
  bool graph_;
  ContextOwner owner_;
  DeviceContext& ctx_;
  uint64_t runs_ = 0;
  std::mutex mutex_;
  std::map<std::map<std::string, std::vector<int64_t>>, std::unique_ptr<Specialization>> cache_;
};

class CudaExecutor : public Executor {
 public:
  std::string name() const override { return "cuda"; }
  std::unique_ptr<Plan> prepare(const Model& model, const PrepareOptions& options) override {
    std::string why;
    if (!cudaDevice(&why)) fail(ErrorKind::Unsupported, "--device cuda: no usable CUDA GPU: {}", why);
    registerRefKernels();
    Precision p = Precision::FP32;
    if (options.precision == "tf32") p = Precision::TF32;
    else if (options.precision == "fp16") p = Precision::FP16;
    else if (options.precision == "bf16") p = Precision::BF16;
    else if (options.precision != "fp32")
      fail(ErrorKind::InvalidInput, "--precision {}: expected fp32, tf32, fp16 or bf16", options.precision);
    return std::make_unique<CudaPlan>(model, options, p);
  }
};

}  // namespace

std::optional<CudaDeviceInfo> cudaDevice(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (why) *why = e != cudaSuccess ? fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e)) : "no CUDA device";
    cudaGetLastError();
    return std::nullopt;
  }
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    return std::nullopt;
  }
  CudaDeviceInfo info;
  info.name = prop.name;
  info.computeMajor = prop.major;
  info.computeMinor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.memoryBytes = prop.totalGlobalMem;
  cudaDriverGetVersion(&info.driverVersion);
  cudaRuntimeGetVersion(&info.runtimeVersion);
  info.cudnnVersion = cudnnGetVersion();
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  info.cublasVersion = major * 10000 + minor * 100 + patch;
  return info;
}

std::unique_ptr<Executor> makeCudaExecutor() { return std::make_unique<CudaExecutor>(); }

}  // namespace onnxtool
