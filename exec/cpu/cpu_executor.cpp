// cpu_executor.cpp: the `cpu` executor. prepare() keeps the caller's model untouched; the plan
// is specialised per set of concrete input shapes (cached), each specialisation holding:
//   - a deep clone of the model (lib/ir_clone.h, weights shared) with those input shapes fixed,
//     optimised by the -O<graphOptLevel> preset of passes/ (shape arithmetic folded, Dropout and
//     no-ops gone, BatchNorm folded, the standard fusions), then typed by shape inference, so
//     every value has a concrete type;
//   - one step per node of the main graph: a fast kernel object from the table in
//     cpu_kernels.cpp (created once, constant inputs at hand for prepacking), or the reference
//     kernel run through the same step (fallback; control-flow bodies and model-local function
//     calls run on the reference machinery, RefNodeRunner);
//   - executor-level fusions: a Conv followed by Add/Sum of a tensor of its output's shape
//     (residual) and/or Relu/Clip becomes one step running at the last node's place, its
//     kernel applying the epilogue in its store (the nodes run unfused when no kernel takes it);
//   - a memory plan: every output of a fast kernel (and each kernel's workspace) gets an offset
//     in one arena from the values' lifetimes; Reshape-family views alias their input; an
//     elementwise op writes over its input when that input dies there.
// A run takes one arena (returned outputs keep it alive; a finished run's arena that no output
// holds any more is reused by a later run) and its own value table, so runs
// of one plan may go on in several threads at once.
#include "exec/cpu/cpu_executor.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <deque>
#include <exception>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "exec/cpu/cpu_kernel.h"
#include "exec/cpu/kernels_nchwc.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/prefaulted.h"
#include "exec/cpu/kernels_attention.h"
#include "exec/cpu/kernels_int8.h"
#include "exec/kernel.h"
#include "exec/ref/kernel_util.h"
#include "exec/ref/ref_executor.h"
#include "exec/specialize.h"
#include "lib/error.h"
#include "lib/ir_clone.h"
#include "lib/ops/op_schema.h"
#include "lib/input_shapes.h"
#include "lib/shape_inference.h"
#include "passes/pass_manager.h"
#include "passes/pattern_match.h"

namespace onnxtool {

namespace {

using cpu::CpuKernel;
using cpu::CpuKernelDef;
using cpu::OutputReuse;
using cpu::StaticTensorType;
using cpu::VecUnary;

constexpr size_t kArenaAlignment = 64;
constexpr int kForever = INT_MAX;

size_t alignUp(size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

/// Where a value's bytes live during a run.
enum class SlotKind : uint8_t {
  Held,   ///< an RtValue: graph inputs, initializers, outputs of reference kernels
  Arena,  ///< at `offset` in the run's arena
  Alias,  ///< the bytes of slot `root` (a view, or an output written in place)
};

struct Slot {
  const Value* value = nullptr;
  std::optional<StaticTensorType> type;  ///< set when a tensor whose every dim is known
  SlotKind kind = SlotKind::Held;
  int root = -1;      ///< Alias: the slot whose bytes these are (never itself an Alias)
  int region = -1;    ///< Arena: index into the memory plan's regions
  size_t bytes = 0;
  int def = -1;       ///< defining step, -1 for inputs and initializers
  int end = -1;       ///< last step that needs the bytes; kForever for graph outputs
  bool graphOutput = false;
};

class Specialization;

/// A subgraph (If branch, Loop or Scan body) of a control-flow node, run as a cpu sub-plan: the
/// body becomes the main graph of a model of its own (lib/ir_clone.h cloneSubgraphAsModel)
/// whose inputs are its formal inputs, then the outer-scope values it reads; that model is
/// planned like a main graph (optimizer preset, fast kernels, memory plan) for the shapes its
/// inputs have when it runs, one plan per set of shapes (cached). The control-flow op itself
/// runs on its reference kernel (it only picks the branch, iterates, slices and stacks), which
/// calls run() for each execution of the body. A body the cpu executor cannot plan (an input
/// that is no tensor of a byte-sized type, a failure while planning, more shapes than kMaxPlans)
/// runs on the reference machinery (run() returns nullopt).
class CpuBody {
 public:
  CpuBody(const Model& model, const Graph& body, const Graph& top, int threads, int graphOptLevel);
  const Graph& graph() const { return body_; }
  using OuterLookup = std::function<const RtValue*(const Value*)>;
  std::optional<std::vector<RtValue>> run(const std::vector<RtValue>& inputs, const OuterLookup& outer, std::mt19937_64& rng,
                                          cpu::ThreadPool* pool) const;

 private:
  struct Entry {
    std::unique_ptr<Model> model;          ///< the body as a main graph, inputs typed with these shapes
    std::shared_ptr<const Specialization> plan;  ///< null: the cpu executor could not plan it
  };
  using Key = std::vector<std::pair<int32_t, std::vector<int64_t>>>;
  std::shared_ptr<const Entry> entry(const Key& key) const;

  const Model& model_;
  const Graph& body_;
  std::vector<const Value*> outer_;  ///< values of enclosing graphs the body reads, each once: inputs of its model
  std::vector<const Value*> constants_;  ///< and the initializers among them: initializers of its model
  int threads_, graphOptLevel_;
  mutable std::mutex mutex_;
  mutable std::map<Key, std::shared_ptr<const Entry>> cache_;
  /// Plans kept per body. Shapes that change with the data (an NMS count per image) each get a
  /// plan (planning a small body takes about a millisecond); past this many (a Loop whose
  /// carried value grows every iteration, as in a decoding loop) new shapes run on the reference
  /// machinery instead of planning every time.
  static constexpr size_t kMaxPlans = 32;
};

class LazyKernels;

struct Step {
  const Node* node = nullptr;
  int64_t opset = 0;
  std::vector<int> in, out;   ///< slots, -1 for omitted values
  std::vector<int> outerReads;  ///< slots of this graph that the node's subgraphs read
  std::unique_ptr<CpuKernel> kernel;  ///< the fast kernel, or null for a fallback
  /// Without a kernel: fast kernels made at run time for the shapes met (the reference kernel
  /// for shapes none takes), for a node whose input shapes are unknown at prepare
  std::unique_ptr<LazyKernels> lazy;
  const CpuKernelDef* def = nullptr;
  const KernelDef* ref = nullptr;  ///< the reference kernel of a fallback (null: function call)
  int workspaceRegion = -1;
  std::vector<int> release;  ///< Held slots dropped after this step
  std::string kernelName;
  int graphNodes = 1;  ///< nodes of the graph this step runs (fusions make it more)
  const char* fusedOp = nullptr;  ///< the op a fused step computes, when not its node's
  /// The epilogue a fused Conv step's kernel was made with (planFusions), kept to make it again
  /// (a deferred plain kernel: planBlockedLayout); null for unfused steps.
  std::shared_ptr<const cpu::FusedEpilogue> fusedEpi;
  /// Control-flow ops (If, Loop, Scan): their reference kernel runs these bodies as cpu sub-plans
  std::vector<std::unique_ptr<CpuBody>> bodies;
  std::string refKernelName;  ///< with bodies: the name for a run in which a body fell back to ref
  std::string_view opType() const { return fusedOp ? std::string_view(fusedOp) : std::string_view(node->opType); }
};

struct Region {
  size_t bytes = 0, offset = 0;
  int start = 0, end = 0;
};

int64_t opsetFor(const Model& m, const Node& n) {
  std::string_view d = canonicalDomain(n.domain);
  if (auto v = m.opsetVersion(d)) return *v;
  if (d.empty()) return maxKnownOpset("");
  return 1;
}

/// Whether a tensor of this type fits in this machine's memory (its size computed without
/// overflow): the plan only lays out (and lazy kernels only allocate) such tensors; a larger one
/// stays typeless, and its node's reference kernel refuses it with a message.
bool fitsMemory(const StaticTensorType& t) {
  uint64_t bytes = static_cast<uint64_t>(dtypeBits(t.dtype) / 8);
  for (int64_t d : t.dims)
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return false;
  return bytes <= ref::physicalMemoryBytes();
}

std::optional<StaticTensorType> staticType(const TypeInfo& t) {
  if (t.kind != TypeInfo::Kind::Tensor || !t.shape.hasRank) return std::nullopt;
  DType dt = t.dtype();
  if (dt == DType::String || dt == DType::Undefined || dtypeBits(dt) < 8) return std::nullopt;
  StaticTensorType s;
  s.dtype = dt;
  for (const Dim& d : t.shape.dims) {
    if (!d.isValue() || d.value < 0) return std::nullopt;
    s.dims.push_back(d.value);
  }
  if (!fitsMemory(s)) return std::nullopt;
  return s;
}

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

/// The fast kernels of a node whose input shapes are known only when it runs (values computed
/// from data: the proposals a detector keeps after NonMaxSuppression). A kernel is made at run
/// time for each set of input shapes met (and the values of the inputs that give output shapes:
/// Reshape's shape, Slice's starts, ...), its output types from shape inference of the node
/// alone (lib/shape_inference.h inferNodeOutputTypes); constant inputs are packed once for all
/// of them (cpu::PackCache: a Gemm's weights whatever the row count). Kept per set of shapes,
/// at most kMaxShapes, the least recently used dropped first. Shapes no fast kernel takes (a
/// create() that declines, outputs inference cannot give) run on the reference kernel.
/// Thread-safe: runs of a plan in several threads share it.
class LazyKernels {
 public:
  struct Entry {
    std::unique_ptr<CpuKernel> kernel;  ///< null: the reference kernel runs these shapes
    const CpuKernelDef* def = nullptr;
    std::vector<StaticTensorType> inTypes;                   ///< per input (omitted: Undefined)
    std::vector<std::optional<StaticTensorType>> outTypes;  ///< per output (omitted, or Dynamic: nullopt)
    std::deque<RtTensor> values;  ///< the shape-giving inputs, copied: the kernel's constants
    size_t workspace = 0;
    std::string name;  ///< the kernel's name for profiles
    mutable std::atomic<uint64_t> lastUse{0};
  };

  LazyKernels(const Model& model, const Node& node, int64_t opset, int sinceVersion, int threads,
              std::vector<std::shared_ptr<const RtTensor>> constants, std::string_view defName)
      : model_(model), node_(node), opset_(opset), sinceVersion_(sinceVersion), threads_(threads), constants_(std::move(constants)),
        defName_(defName) {}
  /// The kernel table's name for the node's op (for messages made at prepare).
  std::string_view defName() const { return defName_; }

  /// The kernel for these inputs (one per input of the node, null for omitted ones), made now
  /// if not kept; null when an input is no tensor (the reference kernel says what is wrong).
  std::shared_ptr<const Entry> entry(const std::vector<const RtValue*>& inputs) const {
    std::string key;
    auto put = [&key](const void* p, size_t n) { key.append(static_cast<const char*>(p), n); };
    for (size_t i = 0; i < inputs.size(); ++i) {
      const RtValue* v = inputs[i];
      int64_t tag = -1;
      if (!v) {
        put(&tag, sizeof tag);
        continue;
      }
      if (!v->isTensor()) return nullptr;
      const TensorData& t = *v->tensor;
      int64_t head[2] = {t.dataType, static_cast<int64_t>(t.dims.size())};
      put(head, sizeof head);
      put(t.dims.data(), t.dims.size() * sizeof(int64_t));
      if (givesShape(i, t)) put(t.raw.data(), t.raw.size());
    }
    const uint64_t now = clock_.fetch_add(1) + 1;
    {
      std::lock_guard lock(mutex_);
      auto it = cache_.find(key);
      if (it != cache_.end()) {
        it->second->lastUse.store(now, std::memory_order_relaxed);
        return it->second;
      }
    }
    // Made outside the lock (packing a weight takes a while; the pack cache has its own lock);
    // two runs racing make it twice and keep one.
    std::shared_ptr<Entry> e = make(inputs);
    e->lastUse.store(now, std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    if (cache_.size() >= kMaxShapes && !cache_.count(key)) {
      auto oldest = cache_.begin();
      for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if (it->second->lastUse.load(std::memory_order_relaxed) < oldest->second->lastUse.load(std::memory_order_relaxed))
          oldest = it;
      cache_.erase(oldest);  // a run still using it holds its own reference
    }
    return cache_.emplace(key, std::move(e)).first->second;
  }

 private:
  /// Whether input i's values (not only its shape) choose the output shapes or the kernel: the
  /// shape-like inputs of the ops with fast kernels, when they are small.
  bool givesShape(size_t i, const TensorData& t) const {
    if (t.raw.size() > 64 * sizeof(int64_t) || t.dtype() == DType::String) return false;
    std::string_view op = node_.opType;
    if (!canonicalDomain(node_.domain).empty()) return false;
    if (op == "Reshape" || op == "Expand" || op == "Tile" || op == "TopK" || op == "Split" || op == "Squeeze" ||
        op == "Unsqueeze" || op == "OneHot" || op.rfind("Reduce", 0) == 0)
      return i == 1;
    if (op == "Slice") return i >= 1;
    if (op == "Resize" || op == "Pad") return i >= 1 && i <= 3;
    if (op == "ConstantOfShape" || op == "Range") return true;
    return false;
  }

  std::shared_ptr<Entry> make(const std::vector<const RtValue*>& inputs) const {
    auto e = std::make_shared<Entry>();
    std::vector<TypeInfo> types(inputs.size());
    std::vector<const TensorData*> constants(inputs.size(), nullptr);
    std::vector<const StaticTensorType*> inPtrs(inputs.size(), nullptr);
    e->inTypes.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i]) continue;
      const TensorData& t = *inputs[i]->tensor;
      e->inTypes[i].dtype = t.dtype();
      e->inTypes[i].dims = t.dims;
      inPtrs[i] = &e->inTypes[i];
      types[i] = TypeInfo::tensor(t.dtype(), Shape::of(t.dims));
      if (i < constants_.size() && constants_[i]) {
        constants[i] = constants_[i].get();
      } else if (givesShape(i, t)) {
        RtTensor c(t);
        c.setRaw(Buffer::copyOf(t.raw.bytes()));  // not a view of a run's arena
        e->values.push_back(std::move(c));
        constants[i] = &e->values.back();
      }
    }
    const std::string shapes = [&] {
      std::string r;
      for (const StaticTensorType* t : inPtrs) r += fmt::format("{}{}", r.empty() ? "" : " ", t ? dimsStr(t->dims) : "-");
      return r;
    }();
    auto decline = [&](std::string_view why) {
      spdlog::debug("cpu executor: node '{}' ({}) runs {} on the reference kernel: {}", node_.displayName(), node_.opType, shapes, why);
      e->kernel.reset();
      return e;
    };
    if (inputs.empty() || !inputs[0] || dtypeBits(e->inTypes[0].dtype) < 8) return decline("no fast kernel for input 0's type");
    e->def = cpu::findCpuKernel(node_.domain, node_.opType, sinceVersion_, e->inTypes[0].dtype);
    if (!e->def) return decline("no fast kernel for input 0's type");
    const bool dynamic = e->def->reuse == OutputReuse::Dynamic;
    const bool multiOutput = e->def->allOutputs;  // Split, LSTM, GRU write every output
    std::vector<TypeInfo> outs;
    try {
      outs = inferNodeOutputTypes(model_, node_, types, constants);
    } catch (const std::exception& ex) {
      return decline(ex.what());
    }
    e->outTypes.resize(node_.outputs().size());
    std::vector<const StaticTensorType*> outPtrs(node_.outputs().size(), nullptr);
    for (size_t k = 0; k < node_.outputs().size(); ++k) {
      if (!node_.output(k)) continue;
      if (k > 0 && !multiOutput) return decline("an optional output is used");
      if (dynamic) continue;
      e->outTypes[k] = k < outs.size() ? staticType(outs[k]) : std::nullopt;  // nullopt too for one past memory
      if (!e->outTypes[k]) return decline(fmt::format("inference gives output {} no shape (or one too large)", k));
      outPtrs[k] = &*e->outTypes[k];
    }
    cpu::CpuNodeInfo info;
    info.node = &node_;
    info.opset = opset_;
    info.sinceVersion = sinceVersion_;
    info.threads = threads_;
    info.inputs = inPtrs;
    info.outputs = outPtrs;
    info.constants = constants;
    info.packs = &packs_;
    try {
      e->kernel = e->def->create(info);
    } catch (const std::exception& ex) {
      return decline(ex.what());
    }
    if (!e->kernel) return decline("the fast kernel declines these shapes");
    e->workspace = e->kernel->workspaceBytes();
    if (e->workspace > ref::physicalMemoryBytes()) return decline("its workspace would not fit in memory");
    e->name = fmt::format("{}{} (lazy)", e->def->name, e->kernel->variant());
    return e;
  }

  /// Entries kept per node: one per number of detections met, say; past this many the least
  /// recently used goes (making one again is cheap: its weights stay packed in packs_).
  static constexpr size_t kMaxShapes = 32;
  const Model& model_;
  const Node& node_;
  int64_t opset_;
  int sinceVersion_;
  int threads_;
  std::vector<std::shared_ptr<const RtTensor>> constants_;  ///< the plan's initializer inputs (null: computed)
  std::string_view defName_;
  mutable cpu::PackCache packs_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<Entry>> cache_;
  mutable std::atomic<uint64_t> clock_{0};
};


/// Arenas of one specialization kept for the next run: an arena comes back when the last
/// output borrowing it is dropped, so a steady-state run allocates nothing (and touches pages
/// that are already mapped). Shared by the arenas' deleters, so it outlives the plan if needed.
class ArenaCache : public std::enable_shared_from_this<ArenaCache> {
 public:
  explicit ArenaCache(size_t bytes) : bytes_(bytes) {}
  ~ArenaCache() {
    for (uint8_t* p : free_) release(p);
  }
  std::shared_ptr<uint8_t> take() {
    uint8_t* p = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        p = free_.back();
        free_.pop_back();
      }
    }
    if (!p) p = bytes_ >= cpu::PrefaultedAllocator<uint8_t>::kMapBytes
                    ? cpu::PrefaultedAllocator<uint8_t>().allocate(bytes_)  // mapped in one call, not a fault per page in the first run
                    : static_cast<uint8_t*>(::operator new(bytes_, std::align_val_t(kArenaAlignment)));
    return std::shared_ptr<uint8_t>(p, [cache = shared_from_this()](uint8_t* q) { cache->give(q); });
  }

 private:
  void give(uint8_t* p) {
    {
      std::lock_guard lock(mutex_);
      if (free_.size() < kKeep) {
        free_.push_back(p);
        return;
      }
    }
    release(p);
  }
  void release(uint8_t* p) const {
    if (bytes_ >= cpu::PrefaultedAllocator<uint8_t>::kMapBytes) cpu::PrefaultedAllocator<uint8_t>().deallocate(p, bytes_);
    else ::operator delete(p, std::align_val_t(kArenaAlignment));
  }
  static constexpr size_t kKeep = 4;  // concurrent runs whose arenas are worth keeping
  size_t bytes_;
  std::mutex mutex_;
  std::vector<uint8_t*> free_;
};

/// Buffers for the outputs and workspaces of lazy kernels (sizes known only as they run), kept
/// for later runs once nothing holds them: a detector's per-run tensors of megabytes would
/// otherwise be fresh pages every run (a page fault per 4 KiB). Sizes are rounded up to classes
/// of an eighth of their power of two, so that counts that change a little reuse the same
/// buffers; at most kKeepBytes are kept. Shared by the buffers' deleters, so it outlives the plan
/// if needed. Thread-safe.
class BufferCache : public std::enable_shared_from_this<BufferCache> {
 public:
  ~BufferCache() {
    for (auto& [bytes, list] : free_)
      for (uint8_t* p : list) ::operator delete(p, std::align_val_t(kArenaAlignment));
  }
  /// `bytes` (at least) of uninitialised memory aligned to kArenaAlignment.
  std::shared_ptr<uint8_t> take(size_t bytes) {
    const size_t cls = sizeClass(bytes);
    uint8_t* p = nullptr;
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        kept_ -= cls;
      }
    }
    if (!p) p = static_cast<uint8_t*>(::operator new(cls, std::align_val_t(kArenaAlignment)));
    return std::shared_ptr<uint8_t>(p, [cache = shared_from_this(), cls](uint8_t* q) { cache->give(q, cls); });
  }

 private:
  static size_t sizeClass(size_t n) {
    if (n <= 4096) return std::max<size_t>(alignUp(n), kArenaAlignment);
    size_t step = std::bit_floor(n) / 8;
    return (n + step - 1) / step * step;
  }
  void give(uint8_t* p, size_t cls) {
    {
      std::lock_guard lock(mutex_);
      if (kept_ + cls <= kKeepBytes) {
        free_[cls].push_back(p);
        kept_ += cls;
        return;
      }
    }
    ::operator delete(p, std::align_val_t(kArenaAlignment));
  }
  static constexpr size_t kKeepBytes = size_t{256} << 20;
  std::mutex mutex_;
  std::map<size_t, std::vector<uint8_t*>> free_;
  size_t kept_ = 0;
};

/// Wall time of the phases of a prepare, for `-vv` (spdlog debug).
class PhaseTimer {
 public:
  void lap(std::string_view phase) {
    auto now = std::chrono::steady_clock::now();
    text_ += fmt::format("{}{} {:.1f} ms", text_.empty() ? "" : ", ", phase, std::chrono::duration<double>(now - last_).count() * 1e3);
    last_ = now;
  }
  const std::string& str() const { return text_; }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::string text_;
};

/// One plan for one set of input shapes. Immutable once built (its arena cache aside).
class Specialization {
 public:
  Specialization(const Model& original, const std::map<std::string, std::vector<int64_t>>& inputDims, int threads,
                 int graphOptLevel, cpu::ThreadPool* pool)
      : graphOptLevel_(graphOptLevel) {
    PhaseTimer timer;
    pool_ = pool;
    std::string phases;
    bool typesFresh = false;
    model_ = specializeModel(original, inputDims, graphOptLevel, "cpu executor", &phases, &typesFresh);
    timer.lap(phases);
    bool changed = int4WeightsToNBits();
    changed |= foldWeightDequantize();
    changed |= cpu::foldConstantInt8Lookups(*model_->graph);
    timer.lap("weights");
    if (changed || !typesFresh) {  // else the -O pipeline's last inference saw the model as it is
      InferOptions io;
      for (const auto& [name, dims] : inputDims) {
        auto& d = io.inputDims[name];
        for (int64_t x : dims) d.push_back(std::to_string(x));
      }
      inferShapes(*model_, io);
    }
    timer.lap("infer");
    // resolves (and validates) every node; the main graph's initializers are ours (initValue)
    ref_ = std::make_unique<RefNodeRunner>(*model_, false);
    timer.lap("ref-resolve");
    const Graph& g = *model_->graph;
    for (const auto& e : g.inputs()) inputSlots_.push_back(slotFor(e.value));
    for (Value* v : g.initializers()) slotFor(v);
    for (Value* v : g.sparseInitializers()) slotFor(v);
    nchwc_ = cpu::nchwcEnabled() && hasBlockedDepthwise(g);
    // int8 chains first (kernels_int8.h), then Conv [+BN] [+Add] [+Relu/Clip] chains among the rest
    planInt8Fusions(g, threads);
    planFusions(threads);
    timer.lap("conv-fusions");
    precreateKernels(g, threads);
    for (const auto& n : g.nodes()) {
      auto f = fusedAt_.find(n.get());
      if (f != fusedAt_.end()) {
        planFused(*f->second);
        continue;
      }
      if (fusedAway_.count(n.get()) || absorbed_.count(n.get())) continue;
      auto c = convFusedAt_.find(n.get());
      if (c == convFusedAt_.end()) {
        planNode(*n, threads);
        continue;
      }
      int idx = static_cast<int>(steps_.size());
      for (int s : c->second.out) slots_[static_cast<size_t>(s)].def = idx;
      steps_.push_back(std::move(c->second));
    }
    for (const auto& e : g.outputs()) {
      int s = e.value ? slotFor(e.value) : -1;
      outputSlots_.push_back(s);
      if (s >= 0) slots_[static_cast<size_t>(s)].graphOutput = true;
    }
    timer.lap("kernels");
    fuseSteps();
    planBlockedLayout(threads);
    timer.lap("step-fusions");
    planMemory();
    releaseUnreadInitializers();
    timer.lap("memory-plan");
    arenas_ = std::make_shared<ArenaCache>(arenaBytes_);
    if (std::any_of(steps_.begin(), steps_.end(), [](const Step& st) { return st.lazy != nullptr; }))
      held_ = std::make_shared<BufferCache>();
    pool_ = nullptr;  // runs get the pool as an argument
    precreated_.clear();
    createScratch_ = {};  // the build's scratch goes with it
    spdlog::debug("cpu executor: prepared {} steps for {} nodes, arena {} bytes; {}", steps_.size(), g.nodes().size(),
                  arenaBytes_, timer.str());
  }

  std::vector<RtValue> run(const Graph& originalGraph, const std::map<std::string, RtValue>& inputs, std::mt19937_64& rng,
                           cpu::ThreadPool* pool, RunProfile* profile) const;

 private:
  /// Weight-only int4 (`quantize --int4`): a blocked DequantizeLinear of a constant int4/uint4
  /// matrix whose every reader is a MatMul (the weight [K, N], blocks along K) or a Gemm without
  /// transA and alpha (its C, if any, added after with beta 1) becomes a com.microsoft
  /// MatMulNBits node of the plan's clone per reader, whose kernel keeps the codes packed and
  /// dequantizes them block by block as its GEMM runs (PackedB4): an eighth of the float weight
  /// in memory. (q - zp) is the same integer in MatMulNBits' unsigned codes (int4 + 8).
  bool int4WeightsToNBits() {
    Graph& g = *model_->graph;
    auto constantOf = [](const Value* v) -> const TensorData* { return v && v->initializer() && !v->isGraphInput() ? v->initializer() : nullptr; };
    std::vector<Node*> dqs;
    for (const auto& n : g.nodes())
      if (n->opType == "DequantizeLinear" && n->isDomain("") && n->output(0) && n->output(0)->hasUses() &&
          !n->output(0)->isGraphOutput())
        dqs.push_back(n.get());
    bool any = false;
    for (Node* dq : dqs) {
      const TensorData* q = constantOf(dq->input(0));
      const TensorData* sc = dq->inputs().size() > 1 ? constantOf(dq->input(1)) : nullptr;
      const TensorData* zp = dq->inputs().size() > 2 && dq->input(2) ? constantOf(dq->input(2)) : nullptr;
      if (!q || !sc || (dq->inputs().size() > 2 && dq->input(2) && !zp)) continue;
      const bool isSigned = q->dtype() == DType::Int4;
      if ((!isSigned && q->dtype() != DType::UInt4) || q->dims.size() != 2 || sc->dtype() != DType::Float) continue;
      if (zp && (zp->dtype() != q->dtype() || zp->dims != sc->dims)) continue;
      const int64_t bs = dq->attrInt("block_size", 0);
      int64_t axis = dq->attrInt("axis", 1);
      if (axis < 0) axis += 2;
      if (bs < 16 || (bs & (bs - 1)) || (axis != 0 && axis != 1)) continue;
      // Blocks run along K: axis 0 of a MatMul's or Gemm's B [K, N], axis 1 of a transposed B [N, K].
      const bool transB = axis == 1;
      const int64_t K = q->dims[transB ? 1 : 0], N = q->dims[transB ? 0 : 1], blocks = (K + bs - 1) / bs;
      if (K <= 0 || N <= 0 || sc->dims != (transB ? std::vector<int64_t>{N, blocks} : std::vector<int64_t>{blocks, N})) continue;
      bool ok = true;
      for (const Use& u : dq->output(0)->uses()) {
        const Node* r = u.node;
        if (u.index != 1 || !r->isDomain("")) ok = false;
        else if (r->opType == "MatMul") ok = ok && !transB;
        else if (r->opType == "Gemm")
          ok = ok && r->attrInt("transA", 0) == 0 && r->attrInt("transB", 0) == (transB ? 1 : 0) && r->attrFloat("alpha", 1.f) == 1.f &&
               (r->inputs().size() < 3 || !r->input(2) || r->attrFloat("beta", 1.f) == 1.f);
        else ok = false;
      }
      if (!ok) continue;
      // MatMulNBits' tensors: codes [N][blocks][bs / 2], scales [N * blocks], zero points [N][ceil(blocks / 2)].
      auto nibble = [](const TensorData& t, int64_t i) -> int {
        const int v = (static_cast<uint8_t>(t.raw.data()[i / 2]) >> ((i & 1) * 4)) & 15;
        return t.dtype() == DType::Int4 ? (v ^ 8) - 8 : v;
      };
      const int shift = isSigned ? 8 : 0;
      // Column n's codes in K order, n's blocks one after the other; the padding of a last partial
      // block is 0 (MatMulNBits reads only K of them).
      std::string codes(static_cast<size_t>(N * blocks * bs / 2), '\0');
      const auto* src = reinterpret_cast<const uint8_t*>(q->raw.data());
      auto* dst = reinterpret_cast<uint8_t*>(codes.data());
      const int64_t colBytes = blocks * (bs / 2);
      const unsigned flip = isSigned ? 8u : 0u;  // int4 + 8 = its bits ^ 8
      if (transB && K % 2 == 0) {  // [N, K]: column n's codes are already contiguous
        for (int64_t n = 0; n < N; ++n) {
          std::memcpy(dst + n * colBytes, src + n * (K / 2), static_cast<size_t>(K / 2));
          if (flip)
            for (int64_t b = 0; b < K / 2; ++b) dst[n * colBytes + b] ^= 0x88;
        }
      } else if (!transB && N % 2 == 0) {  // [K, N]: two rows at a time into one byte of 64 columns
        for (int64_t n0 = 0; n0 < N; n0 += 64) {
          const int64_t n1 = std::min(N, n0 + 64);
          for (int64_t k = 0; k < K; k += 2) {
            const uint8_t* r0 = src + k * (N / 2);
            const uint8_t* r1 = k + 1 < K ? r0 + N / 2 : nullptr;
            for (int64_t n = n0; n < n1; ++n) {
              const int sh = static_cast<int>(n & 1) * 4;
              const unsigned lo = ((r0[n >> 1] >> sh) & 15u) ^ flip, hi = r1 ? ((r1[n >> 1] >> sh) & 15u) ^ flip : 0u;
              dst[n * colBytes + (k >> 1)] = static_cast<uint8_t>(lo | (hi << 4));
            }
          }
        }
      } else {
        const int64_t rowStride = transB ? 1 : N, colStride = transB ? K : 1;  // element (k, n) at k * rowStride + n * colStride
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0, i = n * colStride; k < K; ++k, i += rowStride) {
            const unsigned v = ((src[i >> 1] >> ((i & 1) * 4)) & 15u) ^ flip;
            dst[n * colBytes + (k >> 1)] |= static_cast<uint8_t>(v << ((k & 1) * 4));
          }
      }
      std::vector<float> scales(static_cast<size_t>(N * blocks));
      const int64_t zpRow = (blocks + 1) / 2;
      std::string zeros(static_cast<size_t>(N * zpRow), '\0');
      for (int64_t n = 0; n < N; ++n)
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t i = transB ? n * blocks + b : b * N + n;
          std::memcpy(&scales[static_cast<size_t>(n * blocks + b)], sc->raw.data() + i * 4, 4);
          const int z = (zp ? nibble(*zp, i) : 0) + shift;
          zeros[static_cast<size_t>(n * zpRow + b / 2)] |= static_cast<char>(z << ((b & 1) * 4));
        }
      auto bytesOf = [&](std::string data, std::vector<int64_t> dims, const std::string& suffix) {
        Tensor t;
        t.name = g.uniqueName(dq->output(0)->name() + suffix);
        t.dataType = static_cast<int32_t>(DType::UInt8);
        t.dims = std::move(dims);
        t.setRaw(Buffer::fromString(std::move(data)));
        return g.addInitializer(std::move(t));
      };
      Value* vCodes = bytesOf(std::move(codes), {N, blocks, bs / 2}, "_nbits");
      Tensor st = Tensor::fromFloats(g.uniqueName(dq->output(0)->name() + "_nbits_scales"), {N * blocks}, scales);
      Value* vScales = g.addInitializer(std::move(st));
      Value* vZeros = zp || !isSigned ? bytesOf(std::move(zeros), {N * zpRow}, "_nbits_zero_points") : nullptr;  // int4 without: 8
      std::vector<Use> uses = dq->output(0)->uses();
      for (const Use& u : uses) {
        Node* r = u.node;
        Value* c = r->opType == "Gemm" && r->inputs().size() > 2 ? r->input(2) : nullptr;
        std::vector<Value*> ins{r->input(0), vCodes, vScales};
        if (vZeros) ins.push_back(vZeros);
        Node* m = r;
        if (c) {  // Gemm with C: MatMulNBits, then the Gemm becomes Add(product, C)
          m = g.addNode("MatMulNBits", ins, {g.uniqueName(r->output(0)->name() + "_nbits")}, "com.microsoft", r);
          m->name = m->output(0)->name();
          r->opType = "Add";
          r->attributes.clear();
          r->truncateInputs(0);
          r->addInput(m->output(0));
          r->addInput(c);
        } else {
          r->opType = "MatMulNBits";
          r->domain = "com.microsoft";
          r->attributes.clear();
          r->truncateInputs(0);
          for (Value* v : ins) r->addInput(v);
        }
        m->setAttr(Attribute::ofInt("K", K));
        m->setAttr(Attribute::ofInt("N", N));
        m->setAttr(Attribute::ofInt("bits", 4));
        m->setAttr(Attribute::ofInt("block_size", bs));
      }
      g.removeNode(dq);
      q->raw.dropMappedPages();  // read once here; nothing reads it again
      any = true;
    }
    if (any && !model_->opsetVersion("com.microsoft")) model_->opsetImports.push_back({"com.microsoft", 1, {}});
    return any;
  }

  /// Weight-only quantization (`quantize --int4`, int8 weights with float activations) and the
  /// weights of grouped convolutions: a DequantizeLinear of constant inputs none of whose readers
  /// is a MatMul/Gemm/group-1 Conv on another DequantizeLinear's output (a QDQ island, which the
  /// int8 fusions run as such) is computed once here and becomes
  /// a float initializer of the clone, so that MatMul/Gemm pack it and Gather reads it like any
  /// float weight (the reference kernel would dequantize it on every run).
  bool foldWeightDequantize() {
    Graph& g = *model_->graph;
    auto constantOf = [](const Value* v) -> const TensorData* { return v && v->initializer() && !v->isGraphInput() ? v->initializer() : nullptr; };
    bool any = false;
    std::vector<Node*> dqs;
    for (const auto& n : g.nodes())
      if (n->opType == "DequantizeLinear" && n->isDomain("") && n->output(0) && !n->output(0)->isGraphOutput()) dqs.push_back(n.get());
    for (Node* dq : dqs) {
      bool ok = dq->output(0)->hasUses();
      for (Value* in : dq->inputs()) ok = ok && (!in || constantOf(in));
      for (const Use& u : dq->output(0)->uses()) {
        // What the int8 fusions take (kernels_int8.h): MatMul, Gemm, group-1 and depthwise Conv
        // (weights [group, 1, KH, KW]) on a QDQ activation. Another grouped Conv's weight is
        // folded: the float kernel between the DequantizeLinear and QuantizeLinear of its
        // activations computes exactly what the graph says, on constant weights.
        const Node* r = u.node;
        const int64_t group = r->opType == "Conv" ? r->attrInt("group", 1) : 1;
        const TensorData* wq = constantOf(dq->input(0));
        // (int8, at most 8x8 taps: what the int8 depthwise kernel takes whatever the values)
        const bool depthwise = group > 1 && u.index == 1 && wq && wq->dtype() == DType::Int8 && wq->dims.size() == 4 &&
                               wq->dims[0] == group && wq->dims[1] == 1 && wq->dims[2] * wq->dims[3] <= 64;
        bool int8Reader = r->isDomain("") && (r->opType == "MatMul" || r->opType == "Gemm" ||
                                               (r->opType == "Conv" && (group == 1 || depthwise)));
        for (Value* other : r->inputs())
          if (int8Reader && other && other != dq->output(0) && other->producer() && other->producer()->opType == "DequantizeLinear")
            ok = false;
      }
      std::vector<float> w;
      if (!ok || !cpu::dequantizeConstant(*dq, constantOf, w)) continue;
      Tensor t = Tensor::fromFloats(g.uniqueName(dq->output(0)->name() + "_folded"), constantOf(dq->input(0))->dims, w);
      Value* folded = g.addInitializer(std::move(t));
      folded->setType(dq->output(0)->type());
      dq->output(0)->replaceAllUsesWith(folded);
      g.removeNode(dq);
      any = true;
    }
    return any;
  }

 public:

  size_t arenaBytes() const { return arenaBytes_; }
  /// "op: kernel, ..." for every step (debug logs).
  std::string describe() const {
    std::string r;
    for (const Step& st : steps_) r += fmt::format("{}{}: {}", r.empty() ? "" : ", ", st.opType(), st.kernelName);
    return r;
  }

 private:
  int slotFor(const Value* v) {
    auto it = slotOf_.find(v);
    if (it != slotOf_.end()) return it->second;
    Slot s;
    s.value = v;
    s.type = staticType(v->type());
    if (v->initializer() && !s.type) {  // an initializer's type is its tensor's
      StaticTensorType t;
      t.dtype = v->initializer()->dtype();
      t.dims = v->initializer()->dims;
      if (t.dtype != DType::String && dtypeBits(t.dtype) >= 8) s.type = t;
    }
    if (s.type) s.bytes = static_cast<size_t>(s.type->numElements()) * static_cast<size_t>(dtypeBits(s.type->dtype) / 8);
    slots_.push_back(std::move(s));
    int idx = static_cast<int>(slots_.size() - 1);
    slotOf_[v] = idx;
    return idx;
  }

  void planNode(const Node& n, int threads) {
    Step st;
    st.node = &n;
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
    if (schema && n.subgraphs().empty()) tryFast(st, *schema, threads);
    if (!st.kernel && schema && !fn && n.subgraphs().empty()) planLazy(st, *schema, threads);
    if (!st.kernel) {
      if (fn) {
        st.kernelName = fmt::format("function {} (reference)", n.opType);
      } else {
        st.ref = KernelRegistry::instance().find("ref", n.domain, n.opType, schema->sinceVersion);
        st.kernelName = std::string(st.ref->name);
        if (!n.subgraphs().empty()) st.kernelName += " (subgraphs on ref)";
        bool controlFlow = canonicalDomain(n.domain).empty() && (n.opType == "If" || n.opType == "Loop" || n.opType == "Scan");
        if (controlFlow && st.kernelName.rfind("ref.", 0) == 0) {
          for (Graph* sg : n.subgraphs())
            st.bodies.push_back(std::make_unique<CpuBody>(*model_, *sg, *model_->graph, threads, graphOptLevel_));
          st.refKernelName = st.kernelName;
          st.kernelName = fmt::format("cpu.{} (subgraphs on cpu)", std::string_view(st.ref->name).substr(4));
        }
      }
    }
    if (st.lazy) {
      st.refKernelName = st.kernelName;
      st.kernelName = fmt::format("{} (lazy)", st.lazy->defName());
    }
    steps_.push_back(std::move(st));
  }

  /// A node without a fast kernel at prepare because shapes of its inputs or outputs are known
  /// only at run time, whose op has one: its kernels are made as it runs (LazyKernels).
  void planLazy(Step& st, const OpSchema& schema, int threads) {
    const Node& n = *st.node;
    bool known = true;
    for (int s : st.in) known = known && (s < 0 || slots_[static_cast<size_t>(s)].type);
    for (int s : st.out) known = known && (s < 0 || slots_[static_cast<size_t>(s)].type);
    if (known || st.in.empty() || st.in[0] < 0) return;  // known shapes that the kernel declined
    // The kernel for input 0's element type, if inference knows it (else any of the op's)
    const CpuKernelDef* def = nullptr;
    DType dt = n.input(0)->type().kind == TypeInfo::Kind::Tensor ? n.input(0)->type().dtype() : DType::Undefined;
    if (dt != DType::Undefined) {
      def = cpu::findCpuKernel(n.domain, n.opType, schema.sinceVersion, dt);
    } else {
      for (const CpuKernelDef& d : cpu::cpuKernels())
        if (d.opType == n.opType && canonicalDomain(d.domain) == canonicalDomain(n.domain) && schema.sinceVersion >= d.sinceVersion &&
            schema.sinceVersion <= d.lastVersion && !def)
          def = &d;
    }
    if (!def) return;
    std::vector<std::shared_ptr<const RtTensor>> constants;
    for (const Value* v : n.inputs())
      constants.push_back(v && v->initializer() && !v->isGraphInput() ? initValue(v).tensor : nullptr);
    st.lazy = std::make_unique<LazyKernels>(*model_, n, st.opset, schema.sinceVersion, threads, std::move(constants), def->name);
  }

  /// Chains of nodes that run as one fused int8 step (kernels_int8.h): each at its last node.
  void planInt8Fusions(const Graph& g, int threads) {
    std::deque<StaticTensorType> types;
    auto typeOf = [&](const Value* v) -> const StaticTensorType* {
      auto t = staticType(v->type());
      if (!t) return nullptr;
      types.push_back(std::move(*t));
      return &types.back();
    };
    auto constantOf = [&](const Value* v) -> const TensorData* {
      return v && v->initializer() && !v->isGraphInput() ? initValue(v).tensor.get() : nullptr;
    };
    fused_ = cpu::findInt8Fusions(g, typeOf, constantOf, threads);
    cpu::findAttentionFusions(g, typeOf, constantOf, static_cast<int>(model_->opsetVersion("").value_or(maxKnownOpset(""))),
                              threads, fused_);
    for (auto& f : fused_) {
      fusedAt_[f.last] = &f;
      for (const Node* n : f.covered) fusedAway_.insert(n);
    }
  }

  void planFused(cpu::FusedInt8Step& f) {
    Step st;
    st.node = f.last;
    st.opset = opsetFor(*model_, *f.last);
    int idx = static_cast<int>(steps_.size());
    st.in.push_back(slotFor(f.input));
    if (f.input2) st.in.push_back(slotFor(f.input2));
    for (const Value* v : f.moreInputs) st.in.push_back(v ? slotFor(v) : -1);
    st.fusedOp = f.fusedOp;
    st.graphNodes = static_cast<int>(f.covered.size()) +
                    (std::find(f.covered.begin(), f.covered.end(), f.last) == f.covered.end() ? 1 : 0);
    int out = slotFor(f.output);
    slots_[static_cast<size_t>(out)].def = idx;
    st.out.push_back(out);
    if (f.output2) {
      int out2 = slotFor(f.output2);
      slots_[static_cast<size_t>(out2)].def = idx;
      st.out.push_back(out2);
    }
    st.kernel = std::move(f.kernel);
    st.def = f.def;
    st.kernelName = std::string(st.def->name);
    steps_.push_back(std::move(st));
  }

  /// Whether an int8 fused step (planInt8Fusions) runs node `n`.
  bool int8Fused(const Node* n) const { return fusedAt_.count(n) || fusedAway_.count(n); }

  /// The constant float scalar of an initializer input (Clip's bounds), or nullopt.
  std::optional<float> constantScalar(const Value* v) const {
    if (!v || !v->initializer() || v->isGraphInput()) return std::nullopt;
    const RtValue& rv = initValue(v);
    if (!rv.isTensor() || rv.tensor->dtype() != DType::Float || rv.tensor->raw.size() != sizeof(float)) return std::nullopt;
    float f;
    std::memcpy(&f, rv.tensor->raw.data(), sizeof f);
    return f;
  }

  /// An inference BatchNormalization (opset >= 9, one output, not training) with constant
  /// scale, B, mean and var of the conv output's channel count, as scale and shift per channel.
  bool foldBatchNorm(const Node& bn, const Slot& convOut, cpu::FusedEpilogue& epi) const {
    if (opsetFor(*model_, bn) < 9 || bn.inputs().size() != 5 || bn.attrInt("training_mode", 0) != 0) return false;
    if (!convOut.type || convOut.type->dims.size() < 2) return false;
    const int64_t m = convOut.type->dims[1];
    std::vector<float> p[4];
    for (int i = 0; i < 4; ++i) {
      const Value* v = bn.input(static_cast<size_t>(i) + 1);
      if (!v || !v->initializer() || v->isGraphInput()) return false;
      const RtValue& rv = initValue(v);
      if (!rv.isTensor() || rv.tensor->dtype() != DType::Float || rv.tensor->raw.size() != static_cast<size_t>(m) * sizeof(float))
        return false;
      p[i].resize(static_cast<size_t>(m));
      std::memcpy(p[i].data(), rv.tensor->raw.data(), rv.tensor->raw.size());
    }
    const double eps = bn.attrFloat("epsilon", 1e-5f);
    epi.scale.resize(static_cast<size_t>(m));
    epi.shift.resize(static_cast<size_t>(m));
    for (size_t c = 0; c < static_cast<size_t>(m); ++c) {
      double sc = p[0][c] / std::sqrt(static_cast<double>(p[3][c]) + eps);
      epi.scale[c] = static_cast<float>(sc);
      epi.shift[c] = static_cast<float>(p[1][c] - p[2][c] * sc);
    }
    return true;
  }

  /// Finds Conv [-> BatchNormalization] [-> Add/Sum(residual)] [-> Relu/Clip] chains whose intermediate values have one
  /// reader and are no graph outputs, and prepares a fused step for each that a kernel takes.
  /// A kernel to create for a step: its def and what create() reads. Built serially (it may
  /// make aligned copies of constants), created on any thread (createKernels), then accepted
  /// serially in plan order (acceptKernel).
  struct KernelJob {
    const CpuKernelDef* def = nullptr;
    cpu::CpuNodeInfo info;
    std::vector<StaticTensorType> types;  ///< what info.inputs and info.outputs point at
    std::unique_ptr<CpuKernel> kernel;
    std::exception_ptr error;  ///< what create() threw, rethrown when accepted
  };

  /// A Conv chain of planFusions, with the kernel job of its fused step.
  struct ConvCandidate {
    cpu::FusedEpilogue epi;
    std::vector<const Node*> chain;
    /// Nodes in front of the conv run inside it: a channel-scale Mul, or a BatchNormalization
    /// and the Relu after it (the prologue); empty: none.
    std::vector<const Node*> pre;
    Step step;
    KernelJob job;
  };

  void planFusions(int threads) {
    const Graph& g = *model_->graph;
    std::vector<std::unique_ptr<ConvCandidate>> candidates;
    auto soleReader = [](const Value* v) -> const Node* {
      if (!v || v->isGraphOutput() || v->uses().size() != 1) return nullptr;
      const Node* r = v->uses()[0].node;
      return r && canonicalDomain(r->domain).empty() && r->outputs().size() == 1 && r->output(0) ? r : nullptr;
    };
    // v read by exactly Sigmoid(v) and Mul(v, that Sigmoid) (either order), the Sigmoid's output read by that Mul
    // only, none a graph output: the Mul, else nullptr.
    auto siluMul = [&](const Value* v) -> const Node* {
      if (!v || v->isGraphOutput() || v->uses().size() != 2) return nullptr;
      const Node* sig = nullptr;
      const Node* mul = nullptr;
      for (const Use& u : v->uses()) {
        const Node* r = u.node;
        if (!r || !canonicalDomain(r->domain).empty() || r->outputs().size() != 1 || !r->output(0)) return nullptr;
        if (r->opType == "Sigmoid") sig = r;
        else if (r->opType == "Mul" && r->inputs().size() == 2) mul = r;
      }
      if (!sig || !mul || sig->output(0)->isGraphOutput() || sig->output(0)->uses().size() != 1 ||
          sig->output(0)->uses()[0].node != mul)
        return nullptr;
      bool pair = (mul->input(0) == v && mul->input(1) == sig->output(0)) || (mul->input(1) == v && mul->input(0) == sig->output(0));
      return pair ? mul : nullptr;
    };
    // v read by exactly the nodes of a decomposed HardSwish of v (x * Relu6(x + 3) / 6 in its
    // spellings, or x * HardSigmoid(x): passes/pattern_match.h matchHardSwish), all in v's graph,
    // the intermediates read by nothing else: those nodes in order, else empty. (-O3 writes
    // HardSwish for these at opset 14 and later; exporters at older opsets leave them, as
    // PaddleOCR's PP-OCRv4 recogniser at opset 12 does after 28 of its convolutions.)
    auto hardSwishOf = [&](const Value* v) -> std::vector<const Node*> {
      if (!v || v->isGraphOutput() || v->uses().size() != 2) return {};
      for (const Use& u : v->uses()) {
        const Node* r = u.node;
        if (!r || r->graph() != v->graph()) return {};
        const Node* start = r->opType == "HardSigmoid" ? r : r->opType == "Add" ? soleUser(r->output(0)) : nullptr;
        if (!start) continue;
        std::vector<Node*> pattern;
        if (matchHardSwish(*start, opsetFor(*model_, *start), pattern) != v) continue;
        bool covered = true;  // v's two readers are in the pattern, and the pattern is in v's graph
        for (const Use& w : v->uses()) covered = covered && std::find(pattern.begin(), pattern.end(), w.node) != pattern.end();
        for (const Node* p : pattern) covered = covered && p->graph() == v->graph() && p->outputs().size() == 1;
        if (covered) return {pattern.begin(), pattern.end()};
      }
      return {};
    };
    // The conv's input x * s with s of one element per (image, channel) (a squeeze-and-excitation
    // block's channel scale) read only by a pointwise conv (1x1, stride 1, no pads, one group)
    // whose map is at least twice as large as its output channels: the Mul, else nullptr. The
    // conv then scales its weights per image instead (M x C products and a copy of the packed
    // weights instead of a pass over C x H x W: a margin of two for that copy's traffic).
    auto channelScaleMul = [&](const Node& conv, const Value*& x, const Value*& scale) -> const Node* {
      const Value* in = conv.input(0);
      const Node* mul = in ? in->producer() : nullptr;
      if (!mul || mul->opType != "Mul" || !canonicalDomain(mul->domain).empty() || mul->inputs().size() != 2 || soleReader(in) != &conv ||
          opsetFor(*model_, *mul) < 7 || int8Fused(mul))
        return nullptr;
      if (conv.inputs().size() < 2 || !conv.input(1) || conv.attrInt("group", 1) != 1 || conv.attrString("auto_pad", "NOTSET") != "NOTSET")
        return nullptr;
      for (const char* a : {"strides", "pads"})
        for (int64_t v : conv.attrInts(a, {})) if (v != (std::string(a) == "strides" ? 1 : 0)) return nullptr;
      // Copies: slotFor may add slots, which moves them.
      const std::optional<StaticTensorType> wt = slots_[static_cast<size_t>(slotFor(conv.input(1)))].type;
      const std::optional<StaticTensorType> ot = slots_[static_cast<size_t>(slotFor(in))].type;
      if (!wt || !ot || wt->dims.size() != 4 || ot->dims.size() != 4) return nullptr;
      const auto& wd = wt->dims;
      const auto& od = ot->dims;
      // Channel-major scales the weights per image (m x c products): worth it from maps of 2m
      // pixels; the blocked twin (kernels_nchwc.h) scales its input instead, at any size.
      const bool twin = nchwc_ && wd[0] % cpu::kNchwcBlock == 0 && wd[1] % cpu::kNchwcBlock == 0;
      if (wd[2] != 1 || wd[3] != 1 || (!twin && od[2] * od[3] < 2 * wd[0])) return nullptr;
      for (int i = 0; i < 2; ++i) {
        const Value* a = mul->input(static_cast<size_t>(i));
        const Value* b = mul->input(static_cast<size_t>(1 - i));
        if (!a || !b || a == b) continue;
        const std::optional<StaticTensorType> at = slots_[static_cast<size_t>(slotFor(a))].type;
        const std::optional<StaticTensorType> bt = slots_[static_cast<size_t>(slotFor(b))].type;
        if (!at || !bt || at->dtype != DType::Float || bt->dtype != DType::Float) continue;
        const auto& ad = at->dims;
        const auto& bd = bt->dims;
        if (ad != od || bd.size() != 4 || bd[0] != od[0] || bd[1] != od[1] || bd[2] != 1 || bd[3] != 1) continue;
        x = a;
        scale = b;
        return mul;
      }
      return nullptr;
    };
    // BatchNormalization -> Relu -> a 1x1 Conv (stride 1, no pads, one group, constant weights),
    // the BatchNormalization and the Relu read by nothing else (DenseNet's pre-activation
    // layers): their per-channel scale and shift go into e.inScale/inShift, and the conv applies
    // them as it packs its input (no pass of its own over the concatenated maps). Returns the
    // Relu (bn: the BatchNormalization), or nullptr.
    auto bnReluPrologue = [&](const Node& conv, const Node*& bn, cpu::FusedEpilogue& e) -> const Node* {
      const Value* in = conv.input(0);
      const Node* relu = in ? in->producer() : nullptr;
      if (!relu || relu->opType != "Relu" || !canonicalDomain(relu->domain).empty() || relu->inputs().size() != 1 ||
          soleReader(in) != &conv || int8Fused(relu))
        return nullptr;
      const Value* r = relu->input(0);
      const Node* b = r ? r->producer() : nullptr;
      if (!b || b->opType != "BatchNormalization" || !canonicalDomain(b->domain).empty() || b->outputs().size() != 1 ||
          soleReader(r) != relu || int8Fused(b) || !b->input(0))
        return nullptr;
      if (conv.inputs().size() < 2 || !conv.input(1) || !conv.input(1)->initializer() || conv.input(1)->isGraphInput() ||
          conv.attrInt("group", 1) != 1 || conv.attrString("auto_pad", "NOTSET") != "NOTSET")
        return nullptr;
      for (const char* a : {"strides", "pads", "dilations"})
        for (int64_t v : conv.attrInts(a, {})) if (v != (std::string(a) == "pads" ? 0 : 1)) return nullptr;
      // Copies: slotFor may add slots, which moves them.
      const std::optional<StaticTensorType> wt = slots_[static_cast<size_t>(slotFor(conv.input(1)))].type;
      const Slot x = slots_[static_cast<size_t>(slotFor(b->input(0)))];
      if (!wt || !x.type || wt->dims.size() != 4 || wt->dims[2] != 1 || wt->dims[3] != 1 || x.type->dims.size() != 4 ||
          x.type->dtype != DType::Float)
        return nullptr;
      cpu::FusedEpilogue folded;
      if (!foldBatchNorm(*b, x, folded)) return nullptr;
      e.inScale = std::move(folded.scale);
      e.inShift = std::move(folded.shift);
      bn = b;
      return relu;
    };
    for (const auto& np : g.nodes()) {
      const Node& conv = *np;
      if (conv.opType != "Conv" || !canonicalDomain(conv.domain).empty() || conv.outputs().size() != 1 || !conv.output(0))
        continue;
      const Value* cur = conv.output(0);
      const int curSlot = slotFor(cur);
      if (!slots_[static_cast<size_t>(curSlot)].type) continue;
      cpu::FusedEpilogue epi;
      const Value* residual = nullptr;
      std::vector<const Node*> chain;
      const Value* scaledX = nullptr;
      const Value* channelScale = nullptr;
      const Node* pre = channelScaleMul(conv, scaledX, channelScale);
      if (pre) {
        epi.inputScale = true;
        epi.suffix += "+scale";
      }
      // Or BatchNormalization -> Relu -> this Conv (1x1): both in front of it (a prologue).
      const Node* preBn = nullptr;
      const Node* preRelu = pre ? nullptr : bnReluPrologue(conv, preBn, epi);
      if (preRelu) epi.suffix = "+bn+relu_in" + epi.suffix;
      const Node* next = soleReader(cur);
      if (next && next->opType == "BatchNormalization" && foldBatchNorm(*next, slots_[static_cast<size_t>(curSlot)], epi)) {
        epi.suffix += "+bn";
        chain.push_back(next);
        cur = next->output(0);
        next = soleReader(cur);
      }
      if (next && next->inputs().size() == 2 && ((next->opType == "Add" && opsetFor(*model_, *next) >= 7) || next->opType == "Sum")) {
        const Value* other = next->input(0) == cur ? next->input(1) : next->input(0);
        if (other && other != cur) {
          const Slot& o = slots_[static_cast<size_t>(slotFor(other))];
          const Slot& c = slots_[static_cast<size_t>(curSlot)];
          if (o.type && o.type->dtype == c.type->dtype && o.type->dims == c.type->dims) {
            residual = other;
            epi.residual = true;
            epi.suffix += "+add";
            chain.push_back(next);
            cur = next->output(0);
            next = soleReader(cur);
          }
        }
      }
      if (next && next->opType == "Relu") {
        epi.clamp = true;
        epi.lo = 0.f;
        epi.hi = std::numeric_limits<float>::infinity();
        epi.suffix += "+relu";
        chain.push_back(next);
      } else if (next && next->opType == "Clip") {
        std::optional<float> lo, hi;
        if (opsetFor(*model_, *next) < 11) {
          lo = next->attrFloat("min", std::numeric_limits<float>::lowest());
          hi = next->attrFloat("max", std::numeric_limits<float>::max());
        } else {
          lo = next->input(1) ? constantScalar(next->input(1)) : std::optional<float>(-std::numeric_limits<float>::infinity());
          hi = next->input(2) ? constantScalar(next->input(2)) : std::optional<float>(std::numeric_limits<float>::infinity());
        }
        if (lo && hi && *lo <= *hi) {
          epi.clamp = true;
          epi.lo = *lo;
          epi.hi = *hi;
          epi.suffix += "+clip";
          chain.push_back(next);
        }
      } else if (next && next->opType == "HardSwish" && opsetFor(*model_, *next) >= 14) {
        epi.act = VecUnary::HardSwish;
        epi.suffix += "+hardswish";
        chain.push_back(next);
      } else if (const Node* mul = !next ? siluMul(cur) : nullptr) {  // x * Sigmoid(x): SiLU (EfficientNet)
        epi.act = VecUnary::Silu;
        epi.suffix += "+silu";
        chain.push_back(mul->input(0) == cur ? mul->input(1)->producer() : mul->input(0)->producer());
        chain.push_back(mul);
      } else if (std::vector<const Node*> hs = !next ? hardSwishOf(cur) : std::vector<const Node*>{}; !hs.empty()) {
        epi.act = VecUnary::HardSwish;
        epi.suffix += "+hardswish";
        chain.insert(chain.end(), hs.begin(), hs.end());
      }
      if ((chain.empty() && !pre && !preRelu) || int8Fused(&conv)) continue;
      bool int8 = false;
      for (const Node* c : chain) int8 = int8 || int8Fused(c);
      if (int8) continue;
      const OpSchema* schema = findSchema(conv.domain, conv.opType, opsetFor(*model_, conv));
      if (!schema) continue;
      // With a channel scale or a prologue, the chain without it too: taken where the kernel
      // declines it (a channel scale on a map it computes pixel-major), else skipped as its
      // nodes are taken.
      const bool front = pre || preRelu;
      for (bool withPre : {front, false}) {
        if (!withPre && front && chain.empty()) break;
        auto cand = std::make_unique<ConvCandidate>();
        cand->epi = epi;
        if (front && !withPre) {
          cand->epi.inputScale = false;
          cand->epi.inScale.clear();
          cand->epi.inShift.clear();
          const std::string lead = pre ? "+scale" : "+bn+relu_in";
          cand->epi.suffix = cand->epi.suffix.substr(lead.size());
        }
        cand->chain = chain;
        if (withPre && pre) cand->pre = {pre};
        if (withPre && preRelu) cand->pre = {preBn, preRelu};
        Step& st = cand->step;
        st.node = &conv;
        st.opset = opsetFor(*model_, conv);
        for (Value* v : conv.inputs()) st.in.push_back(v ? slotFor(v) : -1);
        while (st.in.size() < 3) st.in.push_back(-1);
        if (residual) st.in.push_back(slotFor(residual));
        if (withPre && pre) {  // x in place of the Mul's output, the scale as input 4
          st.in[0] = slotFor(scaledX);
          if (st.in.size() < 4) st.in.push_back(-1);
          st.in.push_back(slotFor(channelScale));
        }
        if (withPre && preRelu) st.in[0] = slotFor(preBn->input(0));  // the BatchNormalization's input
        st.out.push_back(slotFor(cand->chain.empty() ? conv.output(0) : cand->chain.back()->output(0)));
        if (!kernelJob(st, *schema, threads, &cand->epi, cand->job)) continue;
        candidates.push_back(std::move(cand));
        if (!front) break;
      }
    }
    // An inference BatchNormalization read only by a Relu (DenseNet's pre-activation BN-Relu
    // before each 1x1 Conv): one pass, the kernel clamping as it stores.
    for (const auto& np : g.nodes()) {
      const Node& bn = *np;
      if (bn.opType != "BatchNormalization" || !canonicalDomain(bn.domain).empty() || bn.outputs().size() != 1 || !bn.output(0))
        continue;
      const Node* relu = soleReader(bn.output(0));
      if (!relu || relu->opType != "Relu" || int8Fused(&bn) || int8Fused(relu)) continue;
      const OpSchema* schema = findSchema(bn.domain, bn.opType, opsetFor(*model_, bn));
      if (!schema) continue;
      auto cand = std::make_unique<ConvCandidate>();
      cand->epi.clamp = true;
      cand->epi.lo = 0.f;
      cand->epi.hi = std::numeric_limits<float>::infinity();
      cand->epi.suffix = "+relu";
      cand->chain = {relu};
      Step& st = cand->step;
      st.node = &bn;
      st.opset = opsetFor(*model_, bn);
      for (Value* v : bn.inputs()) st.in.push_back(v ? slotFor(v) : -1);
      st.out.push_back(slotFor(relu->output(0)));
      if (!kernelJob(st, *schema, threads, &cand->epi, cand->job)) continue;
      candidates.push_back(std::move(cand));
    }
    // The kernels of every chain side by side, then the chains taken in graph order.
    std::vector<KernelJob*> jobs;
    for (auto& c : candidates) jobs.push_back(&c->job);
    createKernels(jobs, pool_);
    for (auto& c : candidates) {
      bool taken = false;  // Add(conv1, conv2): the second chain would take the same Add
      for (const Node* n : c->chain) taken = taken || absorbed_.count(n) || convFusedAt_.count(n);
      for (const Node* n : c->pre) taken = taken || absorbed_.count(n) || convFusedAt_.count(n);
      taken = taken || absorbed_.count(c->step.node) || convFusedAt_.count(c->step.node);  // its conv's other candidate
      if (taken) continue;
      Step& st = c->step;
      acceptKernel(st, c->job);
      if (!st.kernel) continue;
      st.fusedEpi = std::make_shared<const cpu::FusedEpilogue>(c->epi);
      // for profiles: the Conv and what it absorbed
      st.graphNodes = 1 + static_cast<int>(c->chain.size() + c->pre.size());
      const Node* place = c->chain.empty() ? st.node : c->chain.back();  // the step runs at its last node's place
      if (place != st.node) absorbed_.insert(st.node);
      for (size_t i = 0; i + 1 < c->chain.size(); ++i) absorbed_.insert(c->chain[i]);
      for (const Node* n : c->pre) absorbed_.insert(n);
      convFusedAt_.emplace(place, std::move(st));
    }
  }

  /// With a pool of several threads, the kernels of the nodes that run unfused are created side
  /// by side before the steps are planned in order (tryFast then takes them from precreated_).
  void precreateKernels(const Graph& g, int threads) {
    if (!pool_ || pool_->threads() < 2) return;
    std::vector<std::pair<const Node*, Step>> steps;
    for (const auto& n : g.nodes()) {
      const Node* node = n.get();
      if (fusedAt_.count(node) || fusedAway_.count(node) || absorbed_.count(node) || convFusedAt_.count(node)) continue;
      if (!n->subgraphs().empty() || model_->findFunction(n->domain, n->opType, n->overload)) continue;
      Step st;  // as planNode makes it
      st.node = node;
      st.opset = opsetFor(*model_, *n);
      for (Value* v : n->inputs()) st.in.push_back(v ? slotFor(v) : -1);
      for (Value* v : n->outputs()) st.out.push_back(v ? slotFor(v) : -1);
      steps.emplace_back(node, std::move(st));
    }
    std::vector<KernelJob*> jobs;
    for (auto& [node, st] : steps) {
      const OpSchema* schema = findSchema(node->domain, node->opType, st.opset);
      if (!schema) continue;
      KernelJob& job = precreated_[node];
      if (!kernelJob(st, *schema, threads, nullptr, job)) {
        precreated_.erase(node);
        continue;
      }
      jobs.push_back(&job);
    }
    createKernels(jobs, pool_);
  }

  /// Fills `job` for step st; false when no fast kernel can take it.
  bool kernelJob(const Step& st, const OpSchema& schema, int threads, const cpu::FusedEpilogue* fused, KernelJob& job) {
    const Node& n = *st.node;
    if (st.in.empty() || st.in[0] < 0 || !slots_[static_cast<size_t>(st.in[0])].type) return false;
    const CpuKernelDef* def =
        cpu::findCpuKernel(n.domain, n.opType, schema.sinceVersion, slots_[static_cast<size_t>(st.in[0])].type->dtype);
    if (!def) return false;
    cpu::CpuNodeInfo& info = job.info;
    info.node = &n;
    info.opset = st.opset;
    info.sinceVersion = schema.sinceVersion;
    info.threads = threads;
    info.fused = fused;
    info.nchwc = nchwc_;
    job.def = def;
    job.types.reserve(st.in.size() + st.out.size());  // no reallocation: info points into it
    for (int s : st.in) {
      if (s < 0) {
        info.inputs.push_back(nullptr);
        info.constants.push_back(nullptr);
        continue;
      }
      const Slot& sl = slots_[static_cast<size_t>(s)];
      if (!sl.type) return false;
      job.types.push_back(*sl.type);
      info.inputs.push_back(&job.types.back());
      const Value* v = sl.value;
      const TensorData* c = nullptr;
      if (v->initializer() && !v->isGraphInput())  // the model's own bytes where the kernel reads them at any address
        c = def->unalignedConstants ? static_cast<const TensorData*>(v->initializer()) : initValue(v).tensor.get();
      info.constants.push_back(c);
    }
    if (st.out.empty() || st.out[0] < 0) return false;
    const bool dynamic = def->reuse == OutputReuse::Dynamic;  // output types known only when it runs
    for (int s : st.out) {
      if (s < 0 || dynamic) {
        info.outputs.push_back(nullptr);
        continue;
      }
      const Slot& sl = slots_[static_cast<size_t>(s)];
      if (!sl.type) return false;
      job.types.push_back(*sl.type);
      info.outputs.push_back(&job.types.back());
    }
    // Fast kernels write output 0 only unless their def says allOutputs (Split, LSTM, GRU);
    // others with optional outputs (Mean, Indices, ...) would leave them unwritten.
    for (size_t k = 1; k < st.out.size(); ++k)
      if (st.out[k] >= 0 && !def->allOutputs) return false;
    return true;
  }

  /// Runs job.def->create. The model's own bytes a kernel packed and never reads again leave
  /// memory at once (dropping file pages is always safe: they are read again if touched), so
  /// that kernels created side by side do not hold every weight's pages at the same time.
  /// Creates job's kernel with creation scratch `slot` (one per thread creating kernels).
  void createKernel(KernelJob& job, size_t slot) {
    job.info.scratch = slot < createScratch_.size() ? &createScratch_[slot] : nullptr;
    try {
      job.kernel = job.def->create(job.info);
    } catch (...) {
      job.error = std::current_exception();
      return;
    }
    if (!job.kernel || !job.def->unalignedConstants) return;
    for (size_t i = 0; i < job.info.constants.size(); ++i)
      if (job.info.constants[i] && !job.kernel->readsInput(i)) job.info.constants[i]->raw.dropMappedPages();
  }

  /// Creates the jobs' kernels, side by side on the pool's threads when it has several (the
  /// expensive part of a prepare: packing weights).
  void createKernels(std::vector<KernelJob*>& jobs, cpu::ThreadPool* pool) {
    if (createScratch_.size() < static_cast<size_t>(pool ? pool->threads() : 1))  // a slot per thread, before any runs
      createScratch_.resize(static_cast<size_t>(pool ? pool->threads() : 1));
    if (!pool || pool->threads() < 2 || jobs.size() < 2) {
      for (KernelJob* j : jobs) createKernel(*j, 0);
      return;
    }
    std::atomic<size_t> next{0};
    pool->parallelFor(pool->threads(), 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)  // each thread takes the next job until none is left
        for (size_t i = next.fetch_add(1); i < jobs.size(); i = next.fetch_add(1)) createKernel(*jobs[i], static_cast<size_t>(t));
    });
  }

  /// Gives step st the kernel of its job (if create() made one).
  void acceptKernel(Step& st, KernelJob& job) {
    if (job.error) std::rethrow_exception(job.error);
    if (!job.kernel) return;
    st.kernel = std::move(job.kernel);
    st.def = job.def;
    st.kernelName = std::string(st.def->name) + st.kernel->variant();
    // Weights the kernel packed and never reads again: once every node reading them has such a
    // kernel, their bytes go now, before the next weights are packed (peak memory).
    for (size_t i = 0; i < st.in.size(); ++i)
      if (job.info.constants[i] && !st.kernel->readsInput(i)) consumed(slots_[static_cast<size_t>(st.in[i])].value);
  }

  void tryFast(Step& st, const OpSchema& schema, int threads, const cpu::FusedEpilogue* fused = nullptr) {
    if (!fused) {
      auto it = precreated_.find(st.node);
      if (it != precreated_.end()) {
        acceptKernel(st, it->second);
        precreated_.erase(it);
        return;
      }
    }
    KernelJob job;
    if (!kernelJob(st, schema, threads, fused, job)) return;
    if (createScratch_.empty()) createScratch_.resize(1);
    createKernel(job, 0);
    acceptKernel(st, job);
  }

  /// One more reader of initializer v took what it needs at prepare (a packing kernel).
  void consumed(const Value* v) {
    size_t& n = consumedUses_[v];
    if (++n < v->uses().size() || v->isGraphOutput() || v->isGraphInput()) return;
    releaseInitializer(v);
  }

  /// Drops the plan's value of initializer v: an aligned copy is freed, pages of a mapped model
  /// file are given back to the kernel (read again if the caller's model touches them), and the
  /// plan's clone lets go of the bytes (freeing those only the plan had: weights it folded or
  /// dequantized itself; the caller's model keeps its own reference to the rest).
  void releaseInitializer(const Value* v) {
    inits_.erase(v);
    released_.insert(v);
    if (Tensor* t = v->initializer()) {
      t->raw.dropMappedPages();
      t->setRaw(Buffer());
    }
  }

  /// The initializers of the main graph that no run reads (every reader is a kernel that packed
  /// them, or was fused away keeping a copy of what it needed) are released; the others get
  /// their run-time values now (runs only read inits_).
  void releaseUnreadInitializers() {
    // read: 1 by kernels that take any address only, 2 by something that needs aligned bytes
    std::vector<char> read(slots_.size(), 0);
    for (const Step& st : steps_) {
      for (size_t k = 0; k < st.in.size(); ++k) {
        if (st.in[k] < 0 || (st.kernel && !st.kernel->readsInput(k))) continue;
        char& r = read[static_cast<size_t>(st.in[k])];
        r = std::max<char>(r, st.kernel && st.kernel->readsInputUnaligned(k) ? 1 : 2);
      }
      for (int s : st.outerReads) read[static_cast<size_t>(s)] = 2;
    }
    for (int s : outputSlots_)
      if (s >= 0) read[static_cast<size_t>(s)] = 2;
    // int8 fused steps were made from their nodes' constants: kept as they were
    for (const auto& f : fused_)
      for (const Node* n : f.covered)
        for (const Value* v : n->inputs())
          if (v && slotOf_.count(v)) read[static_cast<size_t>(slotOf_.at(v))] = 2;
    auto settle = [&](const Value* v) {
      char r = read[static_cast<size_t>(slotOf_.at(v))];
      if (r == 2 || v->isGraphInput() || v->isGraphOutput()) {
        initValue(v);
      } else if (r == 1) {  // the model's bytes in place (model_ holds them), unless made already
        const Tensor* t = v->initializer();
        if (!t) {
          initValue(v);
        } else if (!inits_.count(v)) {
          inits_.emplace(v, RtValue::viewOf(*t));  // bytes shared, not copied
          t->raw.dropMappedPages();  // creation read them all; runs page in what they read (the rows gathered)
        }
      } else {
        releaseInitializer(v);
      }
    };
    for (const Value* v : model_->graph->initializers()) settle(v);
    for (const Value* v : model_->graph->sparseInitializers()) settle(v);
  }

  /// The value of initializer v of the main graph: its bytes in place, or an aligned copy (made
  /// once, when first asked for at prepare); sparse ones densified.
  const RtValue& initValue(const Value* v) const {
    auto it = inits_.find(v);
    if (it != inits_.end()) return it->second;
    if (released_.count(v))  // every reader packed it: nothing may ask for it again
      fail(ErrorKind::Internal, "cpu executor: initializer '{}' was asked for after its readers packed it", v->name());
    return inits_.emplace(v, runtimeInitializer(v)).first->second;
  }

  // ---- executor fusions: several nodes become one step of a fast kernel ----

  /// The steps reading slot s (its outer reads included); graph outputs count as a reader.
  std::vector<int> readersOf(int s) const {
    std::vector<int> r;
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& st = steps_[i];
      if (st.node == nullptr) continue;  // fused away
      bool reads = std::find(st.in.begin(), st.in.end(), s) != st.in.end() ||
                   std::find(st.outerReads.begin(), st.outerReads.end(), s) != st.outerReads.end();
      if (reads) r.push_back(static_cast<int>(i));
    }
    if (slots_[static_cast<size_t>(s)].graphOutput) r.push_back(-1);
    return r;
  }

  /// The one step reading step i's output 0 (a fast kernel of `opType`), or -1.
  int soleFastReader(int i, std::string_view opType) const {
    const Step& st = steps_[static_cast<size_t>(i)];
    if (st.out.size() != 1 || st.out[0] < 0) return -1;
    auto r = readersOf(st.out[0]);
    if (r.size() != 1 || r[0] < 0) return -1;
    const Step& next = steps_[static_cast<size_t>(r[0])];
    return next.kernel && next.opType() == opType && canonicalDomain(next.node->domain).empty() ? r[0] : -1;
  }

  /// The float scalar of a constant slot (an initializer of one element), if it is one.
  std::optional<float> constScalar(int s) const {
    if (s < 0) return std::nullopt;
    const Slot& sl = slots_[static_cast<size_t>(s)];
    if (!sl.value->initializer() || sl.value->isGraphInput() || !sl.type || sl.type->dtype != DType::Float ||
        sl.type->numElements() != 1)
      return std::nullopt;
    float f;
    std::memcpy(&f, initValue(sl.value).tensor->raw.data(), sizeof f);
    return f;
  }

  /// The other input of binary step i than slot s, or -1 (when s is not an input, or both are).
  int otherInput(int i, int s) const {
    const Step& st = steps_[static_cast<size_t>(i)];
    if (st.in.size() != 2) return -1;
    if (st.in[0] == s && st.in[1] != s) return st.in[1];
    if (st.in[1] == s && st.in[0] != s) return st.in[0];
    return -1;
  }

  /// Step `into` takes over the output of step `last` (steps between fused away).
  void absorb(int into, int last, const std::vector<int>& removed, std::string_view what) {
    Step& st = steps_[static_cast<size_t>(into)];
    st.out = steps_[static_cast<size_t>(last)].out;
    for (int r : removed) {
      st.kernelName += fmt::format("+{}", steps_[static_cast<size_t>(r)].node->opType);
      st.graphNodes += steps_[static_cast<size_t>(r)].graphNodes;
      steps_[static_cast<size_t>(r)].node = nullptr;
    }
    (void)what;
  }

  /// The erf GELU as exporters spell it after a node writing x: Div(x, sqrt 2) -> Erf ->
  /// Add(., 1) -> Mul(x, .) -> Mul(., 0.5). Returns the steps (Div, Erf, Add, Mul, Mul) or empty.
  std::vector<int> matchGeluErf(int i) const {
    int x = steps_[static_cast<size_t>(i)].out[0];
    auto readers = readersOf(x);
    if (readers.size() != 2 || readers[0] < 0 || readers[1] < 0) return {};
    for (int k = 0; k < 2; ++k) {
      int div = readers[static_cast<size_t>(k)], mul1 = readers[static_cast<size_t>(1 - k)];
      const Step& d = steps_[static_cast<size_t>(div)];
      if (!d.kernel || d.node->opType != "Div" || d.in.size() != 2 || d.in[0] != x) continue;
      auto c = constScalar(d.in[1]);
      if (!c || std::fabs(*c - 1.41421356f) > 1e-5f) continue;
      int erf = soleFastReader(div, "Erf");
      if (erf < 0) continue;
      int add = soleFastReader(erf, "Add");
      if (add < 0) continue;
      auto one = constScalar(otherInput(add, steps_[static_cast<size_t>(erf)].out[0]));
      if (!one || *one != 1.f) continue;
      if (soleFastReader(add, "Mul") != mul1 || otherInput(mul1, steps_[static_cast<size_t>(add)].out[0]) != x) continue;
      int mul2 = soleFastReader(mul1, "Mul");
      if (mul2 < 0) continue;
      auto half = constScalar(otherInput(mul2, steps_[static_cast<size_t>(mul1)].out[0]));
      if (!half || *half != 0.5f) continue;
      return {div, erf, add, mul1, mul2};
    }
    return {};
  }

  /// MatMul/Gemm + constant bias Add (+ Relu, Gelu, Sigmoid, Tanh or the spelled-out erf GELU)
  /// become one GEMM with an epilogue (Conv + activation too, where its kernel takes one); Add + LayerNormalization becomes a residual LayerNorm.
  /// Only single-reader intermediates that are not graph outputs are fused away, and every
  /// fused node had a fast kernel of its own (so the result is what the steps computed, up to
  /// the approximations of vec.h).
  /// The constant float tensor of slot s with n elements, if it is one.
  std::optional<std::vector<float>> constFloats(int s, int64_t n) const {
    if (s < 0) return std::nullopt;
    const Slot& sl = slots_[static_cast<size_t>(s)];
    if (!sl.value->initializer() || sl.value->isGraphInput() || !sl.type || sl.type->dtype != DType::Float ||
        sl.type->numElements() != n)
      return std::nullopt;
    std::vector<float> v(static_cast<size_t>(n));
    std::memcpy(v.data(), initValue(sl.value).tensor->raw.data(), v.size() * sizeof(float));
    return v;
  }

  /// A ReduceMean step over the last axis only, keeping dims: its rows' length, else 0.
  int64_t lastAxisMean(int i) const {
    const Step& st = steps_[static_cast<size_t>(i)];
    if (!st.node || !st.kernel || st.opType() != "ReduceMean" || st.in.empty() || st.in[0] < 0 || st.out[0] < 0) return 0;
    const auto& in = slots_[static_cast<size_t>(st.in[0])].type->dims;
    const auto& out = slots_[static_cast<size_t>(st.out[0])].type->dims;
    if (in.empty() || out.size() != in.size() || out.back() != 1 || in.back() < 1) return 0;
    for (size_t k = 0; k + 1 < in.size(); ++k)
      if (in[k] != out[k]) return 0;
    return in.back();
  }

  /// The LayerNorm exporters spell out, from its first ReduceMean (step i): x -> mean =
  /// ReduceMean(x) -> d = Sub(x, mean) -> Pow(d, 2) -> ReduceMean -> Add(., eps) -> Sqrt ->
  /// Div(d, .) [-> Mul(., gamma)] [-> Add(., beta)], gamma and beta constant rows. One step.
  void fuseSpelledLayerNorm(int i) {
    int64_t n = lastAxisMean(i);
    if (!n) return;
    Step& r1 = steps_[static_cast<size_t>(i)];
    int x = r1.in[0];
    int sub = soleFastReader(i, "Sub");
    if (sub < 0 || steps_[static_cast<size_t>(sub)].in[0] != x) return;
    int d = steps_[static_cast<size_t>(sub)].out[0];
    auto dr = readersOf(d);
    if (dr.size() != 2 || dr[0] < 0 || dr[1] < 0) return;
    int pow = steps_[static_cast<size_t>(dr[0])].opType() == "Pow" ? dr[0] : dr[1];
    int div = pow == dr[0] ? dr[1] : dr[0];
    const Step& ps = steps_[static_cast<size_t>(pow)];
    if (!ps.kernel || ps.opType() != "Pow" || ps.in[0] != d || constScalar(ps.in[1]) != std::optional<float>(2.f)) return;
    int r2 = -1;
    if (auto r = readersOf(ps.out[0]); r.size() == 1 && r[0] >= 0 && lastAxisMean(r[0]) == n) r2 = r[0];
    if (r2 < 0) return;
    int add = soleFastReader(r2, "Add");
    if (add < 0) return;
    auto eps = constScalar(otherInput(add, steps_[static_cast<size_t>(r2)].out[0]));
    if (!eps) return;
    int sq = soleFastReader(add, "Sqrt");
    if (sq < 0 || soleFastReader(sq, "Div") != div) return;
    const Step& ds = steps_[static_cast<size_t>(div)];
    if (!ds.kernel || ds.in.size() != 2 || ds.in[0] != d || ds.in[1] != steps_[static_cast<size_t>(sq)].out[0]) return;
    std::vector<int> fused = {sub, pow, r2, add, sq, div};
    int last = div;
    std::vector<float> gamma(static_cast<size_t>(n), 1.f), beta;
    if (int mul = soleFastReader(last, "Mul"); mul >= 0)
      if (auto g = constFloats(otherInput(mul, steps_[static_cast<size_t>(last)].out[0]), n)) {
        gamma = *g;
        fused.push_back(mul);
        last = mul;
      }
    if (int ab = soleFastReader(last, "Add"); ab >= 0)
      if (auto b = constFloats(otherInput(ab, steps_[static_cast<size_t>(last)].out[0]), n)) {
        beta = *b;
        fused.push_back(ab);
        last = ab;
      }
    if (slots_[static_cast<size_t>(steps_[static_cast<size_t>(last)].out[0])].type->dims !=
        slots_[static_cast<size_t>(x)].type->dims)
      return;  // a broadcast widened the result: not a LayerNorm of x
    const auto& xd = slots_[static_cast<size_t>(x)].type->dims;
    int64_t rows = 1;
    for (size_t k = 0; k + 1 < xd.size(); ++k) rows *= xd[k];
    r1.kernel = cpu::makeLayerNorm(rows, n, *eps, std::move(gamma), std::move(beta));
    r1.def = cpu::findCpuKernel("", "LayerNormalization", 17, DType::Float);
    r1.kernelName = "cpu.layernorm.f32 (ReduceMean";
    r1.fusedOp = "LayerNormalization";
    r1.in = {x};
    absorb(i, last, fused, "layernorm");
    r1.kernelName += ")";
  }

  void fuseSteps() {
    for (size_t i = 0; i < steps_.size(); ++i)
      if (steps_[i].node) fuseSpelledLayerNorm(static_cast<int>(i));
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step& st = steps_[i];
      if (!st.node || !st.kernel || st.out.size() != 1 || st.out[0] < 0) continue;
      std::string_view op = st.opType();
      int ii = static_cast<int>(i);
      // A fused int8 MatMul chain (its bias already inside) takes the activations after it.
      const bool int8MatMul = st.def && (st.def->name == "cpu.qdqmatmul.u8s8.fused" || st.def->name == "cpu.dynqmatmul.u8s8.fused" ||
                                         st.def->name == "cpu.dynqmatmul.rows.u8s8.fused");
      const bool gemmLike = ((op == "MatMul" || op == "Gemm" || op == "Conv") && canonicalDomain(st.node->domain).empty()) ||
                            (op == "MatMulNBits" && st.node->domain == "com.microsoft") || int8MatMul;
      if (gemmLike) {
        int last = ii;
        if (int add = op == "Conv" ? -1 : soleFastReader(last, "Add"); add >= 0) {
          int b = otherInput(add, st.out[0]);
          const Slot* bs = b >= 0 ? &slots_[static_cast<size_t>(b)] : nullptr;
          const auto& outDims = slots_[static_cast<size_t>(st.out[0])].type->dims;
          if (bs && bs->type && bs->type->dtype == DType::Float && bs->value->initializer() && !bs->value->isGraphInput() &&
              !outDims.empty() && bs->type->numElements() == outDims.back() &&
              slots_[static_cast<size_t>(steps_[static_cast<size_t>(add)].out[0])].type->dims == outDims) {
            const TensorData& t = *initValue(bs->value).tensor;
            std::vector<float> bias(static_cast<size_t>(outDims.back()));
            std::memcpy(bias.data(), t.raw.data(), bias.size() * sizeof(float));
            if (st.kernel->fuseBias(bias.data(), static_cast<int64_t>(bias.size()))) {
              absorb(ii, add, {add}, "bias");
              last = ii;
            }
          }
        }
        std::vector<int> gelu = matchGeluErf(last);
        if (!gelu.empty() && st.kernel->fuseActivation(VecUnary::GeluErf)) {
          absorb(ii, gelu.back(), gelu, "gelu");
          continue;
        }
        const std::pair<const char*, VecUnary> acts[] = {{"Relu", VecUnary::Relu}, {"Sigmoid", VecUnary::Sigmoid}, {"Tanh", VecUnary::Tanh},
                                                           {"HardSwish", VecUnary::HardSwish}};
        for (auto [name, act] : acts) {
          int r = soleFastReader(last, name);
          if (r >= 0 && st.kernel->fuseActivation(act)) {
            absorb(ii, r, {r}, name);
            break;
          }
        }
        if (int g = soleFastReader(last, "Gelu"); g >= 0) {
          VecUnary act = steps_[static_cast<size_t>(g)].node->attrString("approximate", "none") == "tanh" ? VecUnary::GeluTanh
                                                                                                      : VecUnary::GeluErf;
          if (st.kernel->fuseActivation(act)) absorb(ii, g, {g}, "Gelu");
        }
      } else if (op == "Add" && canonicalDomain(st.node->domain).empty() && st.in.size() == 2) {
        int ln = soleFastReader(ii, "LayerNormalization");
        if (ln < 0) continue;
        Step& l = steps_[static_cast<size_t>(ln)];
        const auto& dims = slots_[static_cast<size_t>(st.out[0])].type->dims;
        bool same = true;
        for (int s : st.in) same &= s >= 0 && slots_[static_cast<size_t>(s)].type && slots_[static_cast<size_t>(s)].type->dims == dims;
        if (!same || l.in[0] != st.out[0]) continue;
        cpu::makeLayerNormResidual(*l.kernel);
        std::vector<int> in = {st.in[0], st.in[1]};
        in.insert(in.end(), l.in.begin() + 1, l.in.end());
        l.in = std::move(in);
        l.kernelName += "+residual";
        l.graphNodes += st.graphNodes;
        st.node = nullptr;  // the Add is gone; the LayerNorm step reads its inputs
      }
    }
    std::vector<Step> kept;
    for (Step& st : steps_)
      if (st.node) kept.push_back(std::move(st));
    steps_ = std::move(kept);
    for (Slot& sl : slots_) sl.def = -1;
    for (size_t i = 0; i < steps_.size(); ++i)
      for (int s : steps_[i].out)
        if (s >= 0) slots_[static_cast<size_t>(s)].def = static_cast<int>(i);
  }

  int rootOf(int s) const {
    const Slot& sl = slots_[static_cast<size_t>(s)];
    return sl.kind == SlotKind::Alias ? sl.root : s;
  }

  /// Whether g has a float depthwise convolution of whole channel blocks (group = C = M, C a
  /// multiple of kNchwcBlock): where the blocked layout gains (CpuNodeInfo::nchwc).
  static bool hasBlockedDepthwise(const Graph& g) {
    for (const auto& n : g.nodes()) {
      if (n->opType != "Conv" || !canonicalDomain(n->domain).empty() || n->inputs().empty() || !n->input(0)) continue;
      const auto t = staticType(n->input(0)->type());
      if (!t || t->dtype != DType::Float || t->dims.size() != 4) continue;
      const int64_t c = t->dims[1];
      if (c > 0 && c % cpu::kNchwcBlock == 0 && n->attrInt("group", 1) == c) return true;
    }
    return false;
  }

  /// The blocked channel layout (kernels_nchwc.h) for chains of convolutions. A step whose
  /// kernel has a blocked twin runs it when its input 0 or its output is kept blocked; a value is
  /// kept blocked when the step writing it runs blocked (output 0, written blocked) and every
  /// reader runs blocked and reads it at a blocked input (not a graph output, no subgraph reads
  /// it). A step between two plain values would only reorder: it stays plain, and so does a
  /// pointwise convolution with a plain input or output (NchwcKernel::gainsOnlyInChains), until
  /// nothing changes. Plans with fewer than 3 blocked convolutions stay plain. A blocked step with
  /// a plain input or output goes through the adapter (reorders in its workspace); the pointwise
  /// convolution reads a plain input 0 as it lies. ONNXTOOL_NCHWC=0: never; =all: every twin runs
  /// (measurements).
  void planBlockedLayout(int threads) {
    const size_t nSteps = steps_.size();
    std::vector<cpu::NchwcKernel*> twin(nSteps, nullptr);
    for (size_t i = 0; i < nSteps; ++i) {
      Step& st = steps_[i];
      if (!st.kernel || !st.kernel->nchwcTwin || st.out.empty() || st.out[0] < 0) continue;
      // nothing absorbed into the step after its kernel was made (its name says so)
      if (st.kernelName != std::string(st.def->name) + st.kernel->variant()) continue;
      twin[i] = dynamic_cast<cpu::NchwcKernel*>(st.kernel->nchwcTwin.get());
    }
    std::vector<std::vector<std::pair<int, size_t>>> readers(slots_.size());
    std::vector<char> pinned(slots_.size(), 0);
    for (size_t i = 0; i < nSteps; ++i) {
      const Step& st = steps_[i];
      for (size_t k = 0; k < st.in.size(); ++k)
        if (st.in[k] >= 0) readers[static_cast<size_t>(st.in[k])].emplace_back(static_cast<int>(i), k);
      for (int s : st.outerReads) pinned[static_cast<size_t>(s)] = 1;
    }
    for (int s : outputSlots_)
      if (s >= 0) pinned[static_cast<size_t>(s)] = 1;
    std::vector<char> on(nSteps, 0);
    for (size_t i = 0; i < nSteps; ++i) on[i] = twin[i] != nullptr;
    auto blockedAt = [&](int i, size_t k) {
      const auto ins = twin[static_cast<size_t>(i)]->blockedInputs();
      return std::find(ins.begin(), ins.end(), k) != ins.end();
    };
    auto blocked = [&](int s) {
      if (s < 0 || pinned[static_cast<size_t>(s)]) return false;
      const int d = slots_[static_cast<size_t>(s)].def;
      if (d < 0 || !on[static_cast<size_t>(d)] || !twin[static_cast<size_t>(d)]->outputBlocked() || steps_[static_cast<size_t>(d)].out[0] != s)
        return false;
      for (const auto& [j, k] : readers[static_cast<size_t>(s)])
        if (!on[static_cast<size_t>(j)] || !blockedAt(j, k)) return false;
      return true;
    };
    const char* env = std::getenv("ONNXTOOL_NCHWC");
    const bool force = env && std::string_view(env) == "all";  // every twin, whatever it costs (measurements)
    for (bool changed = !force; changed;) {
      changed = false;
      for (size_t i = 0; i < nSteps; ++i) {
        if (!on[i]) continue;
        const bool in = blocked(steps_[i].in[0]), out = blocked(steps_[i].out[0]);
        if (twin[i]->gainsOnlyInChains() ? !(in && out) : !(in || out)) on[i] = 0, changed = true;
      }
    }
    size_t convs = 0;
    for (size_t i = 0; i < nSteps; ++i) convs += on[i] && twin[i]->outputBlocked();
    if (convs < 3 && !(force && convs > 0)) std::fill(on.begin(), on.end(), 0);
    {
      std::vector<std::pair<std::vector<size_t>, bool>> io(nSteps);  // per blocked step: plain inputs, plain output
      for (size_t i = 0; i < nSteps; ++i) {
        if (!on[i]) continue;
        const Step& st = steps_[i];
        for (size_t k : twin[i]->blockedInputs())
          if (!blocked(st.in[k])) io[i].first.push_back(k);
        io[i].second = twin[i]->outputBlocked() && !blocked(st.out[0]);
      }
      for (size_t i = 0; i < nSteps; ++i) {
        if (!on[i]) continue;
        Step& st = steps_[i];
        auto& [plainIn, plainOut] = io[i];
        if (!plainIn.empty() && plainIn[0] == 0 && twin[i]->readPlainInput0()) plainIn.erase(plainIn.begin());
        std::unique_ptr<cpu::NchwcKernel> t(static_cast<cpu::NchwcKernel*>(st.kernel->nchwcTwin.release()));
        st.kernel = plainIn.empty() && !plainOut ? std::unique_ptr<CpuKernel>(std::move(t))
                                                 : cpu::adaptNchwc(std::move(t), plainIn, plainOut, threads);
        st.kernelName = std::string(st.def->name) + st.kernel->variant();
      }
    }
    // The steps left plain whose plain kernel was deferred (PendingPlainConv) get it now.
    for (size_t i = 0; i < nSteps; ++i) {
      Step& st = steps_[i];
      if (on[i] || !dynamic_cast<const cpu::PendingPlainConv*>(st.kernel.get())) continue;
      const OpSchema* schema = findSchema(st.node->domain, st.node->opType, st.opset);
      KernelJob job;
      if (!schema || !kernelJob(st, *schema, threads, st.fusedEpi.get(), job))
        fail(ErrorKind::Internal, "cpu executor: node '{}': its plain convolution kernel cannot be made", st.node->displayName());
      job.info.nchwc = false;
      job.info.deferredFrom = true;
      createKernel(job, 0);
      st.kernel.reset();
      acceptKernel(st, job);
      if (!st.kernel)
        fail(ErrorKind::Internal, "cpu executor: node '{}': its plain convolution kernel declined", st.node->displayName());
    }
    size_t twins = 0, ran = 0;
    for (size_t i = 0; i < nSteps; ++i) twins += twin[i] != nullptr, ran += on[i] != 0;
    if (twins) spdlog::debug("cpu executor: blocked layout: {} of {} steps with a blocked twin run it ({} convolutions)", ran, twins, convs);
    for (Step& st : steps_)
      if (st.kernel) st.kernel->nchwcTwin.reset();
  }

  void planMemory() {
    int nSteps = static_cast<int>(steps_.size());
    // Outputs of fast kernels live in the arena; views alias their input.
    for (Step& st : steps_) {
      if (!st.kernel || st.def->reuse == OutputReuse::Dynamic) continue;  // Dynamic: held, allocated as it runs
      Slot& o = slots_[static_cast<size_t>(st.out[0])];
      if (st.def->reuse == OutputReuse::View) {
        o.kind = SlotKind::Alias;
        o.root = rootOf(st.in[0]);
      } else {
        for (int k : st.out)  // Split has several
          if (k >= 0) slots_[static_cast<size_t>(k)].kind = SlotKind::Arena;
      }
    }
    // Lifetimes: the last step reading a value, then (backwards) a view keeps its input's
    // bytes alive, and so does the output of a reference kernel (which may alias its inputs).
    for (int i = 0; i < nSteps; ++i) {
      for (int s : steps_[static_cast<size_t>(i)].in)
        if (s >= 0) slots_[static_cast<size_t>(s)].end = std::max(slots_[static_cast<size_t>(s)].end, i);
      for (int s : steps_[static_cast<size_t>(i)].outerReads) slots_[static_cast<size_t>(s)].end = std::max(slots_[static_cast<size_t>(s)].end, i);
      for (int s : steps_[static_cast<size_t>(i)].out)
        if (s >= 0) slots_[static_cast<size_t>(s)].end = std::max(slots_[static_cast<size_t>(s)].end, i);
    }
    for (int s : outputSlots_)
      if (s >= 0) slots_[static_cast<size_t>(s)].end = kForever;
    for (int i = nSteps - 1; i >= 0; --i) {
      const Step& st = steps_[static_cast<size_t>(i)];
      bool passesThrough = !st.kernel || st.def->reuse == OutputReuse::View;
      if (!passesThrough) continue;
      int outEnd = -1;
      for (int s : st.out)
        if (s >= 0) outEnd = std::max(outEnd, slots_[static_cast<size_t>(s)].end);
      auto extend = [&](int s) {
        if (s >= 0) slots_[static_cast<size_t>(s)].end = std::max(slots_[static_cast<size_t>(s)].end, outEnd);
      };
      for (int s : st.in) extend(s);
      for (int s : st.outerReads) extend(s);
    }
    // An alias keeps its root alive.
    for (Slot& s : slots_)
      if (s.kind == SlotKind::Alias) {
        Slot& r = slots_[static_cast<size_t>(s.root)];
        r.end = std::max(r.end, s.end);
      }
    // In place: an elementwise output takes its input's bytes when nothing reads them later.
    for (int i = 0; i < nSteps; ++i) {
      const Step& st = steps_[static_cast<size_t>(i)];
      if (!st.kernel || st.def->reuse != OutputReuse::InPlace) continue;
      int r = rootOf(st.in[0]);
      Slot& root = slots_[static_cast<size_t>(r)];
      Slot& out = slots_[static_cast<size_t>(st.out[0])];
      const Slot& in0 = slots_[static_cast<size_t>(st.in[0])];
      if (root.kind != SlotKind::Arena || root.end != i || root.graphOutput || in0.type->dims != out.type->dims ||
          root.bytes != out.bytes || in0.type->dtype != out.type->dtype)
        continue;
      bool sameShapeReads = true;  // another input reading the same bytes must read them index for index
      for (size_t k = 1; k < st.in.size(); ++k)
        if (st.in[k] >= 0 && rootOf(st.in[k]) == r && slots_[static_cast<size_t>(st.in[k])].type->dims != out.type->dims)
          sameShapeReads = false;
      if (!sameShapeReads) continue;
      out.kind = SlotKind::Alias;
      out.root = r;
      root.end = std::max(root.end, out.end);
      // Views and in-place outputs of `out` were pointed at `out`: repoint them.
      for (Slot& s : slots_)
        if (s.kind == SlotKind::Alias && s.root == st.out[0]) s.root = r;
      // `out` may itself be a graph output.
      root.graphOutput = root.graphOutput || out.graphOutput;
    }
    // Regions: one per arena slot, one per workspace; then offsets, first fit by size.
    for (size_t s = 0; s < slots_.size(); ++s) {
      Slot& sl = slots_[s];
      if (sl.kind != SlotKind::Arena) continue;
      sl.region = static_cast<int>(regions_.size());
      regions_.push_back({alignUp(sl.bytes), 0, sl.def, sl.end});
    }
    for (int i = 0; i < nSteps; ++i) {
      Step& st = steps_[static_cast<size_t>(i)];
      if (st.kernel && st.kernel->workspaceBytes()) {
        st.workspaceRegion = static_cast<int>(regions_.size());
        regions_.push_back({alignUp(st.kernel->workspaceBytes()), 0, i, i});
      }
    }
    std::vector<size_t> order(regions_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return regions_[a].bytes > regions_[b].bytes; });
    std::vector<size_t> placed;
    for (size_t ri : order) {
      Region& r = regions_[ri];
      std::vector<std::pair<size_t, size_t>> busy;  // [offset, offset + bytes) of regions live at the same time
      for (size_t pi : placed) {
        const Region& p = regions_[pi];
        if (p.start <= r.end && r.start <= p.end) busy.emplace_back(p.offset, p.offset + p.bytes);
      }
      std::sort(busy.begin(), busy.end());
      size_t off = 0;
      for (const auto& [b, e] : busy) {
        if (off + r.bytes <= b) break;
        off = std::max(off, e);
      }
      r.offset = off;
      arenaBytes_ = std::max(arenaBytes_, off + r.bytes);
      placed.push_back(ri);
    }
    // Held values are dropped after their last use (graph outputs, inputs and initializers stay).
    for (size_t s = 0; s < slots_.size(); ++s) {
      const Slot& sl = slots_[s];
      if (sl.kind != SlotKind::Held || sl.graphOutput || sl.def < 0 || sl.end < 0 || sl.end == kForever) continue;
      steps_[static_cast<size_t>(std::min(sl.end, nSteps - 1))].release.push_back(static_cast<int>(s));
    }
  }

  int graphOptLevel_;
  bool nchwc_ = false;  ///< kernels make blocked twins (CpuNodeInfo::nchwc)
  std::unique_ptr<Model> model_;
  std::unique_ptr<RefNodeRunner> ref_;
  /// Main-graph initializer values (initValue); after prepare, those runs read. Only prepare
  /// adds or removes entries (runs read them, several at once).
  mutable std::unordered_map<const Value*, RtValue> inits_;
  std::unordered_map<const Value*, size_t> consumedUses_;  ///< readers of a weight that packed it
  std::unordered_set<const Value*> released_;               ///< initializers whose bytes the plan let go
  cpu::ThreadPool* pool_ = nullptr;  ///< the plan's pool while the constructor runs (kernels made side by side)
  std::unordered_map<const Node*, KernelJob> precreated_;  ///< kernels made before planNode asks (precreateKernels)
  std::vector<std::vector<float>> createScratch_;  ///< createKernel's scratch, one per thread creating kernels (CpuNodeInfo::scratch)
  std::vector<Slot> slots_;
  std::unordered_map<const Value*, int> slotOf_;
  std::vector<Step> steps_;
  std::vector<cpu::FusedInt8Step> fused_;                      ///< int8 fused steps (kernels_int8.h)
  std::unordered_map<const Node*, cpu::FusedInt8Step*> fusedAt_;  ///< int8 steps, by their last node
  std::unordered_set<const Node*> fusedAway_;                  ///< nodes an int8 step covers
  std::unordered_set<const Node*> absorbed_;                   ///< nodes run inside a fused Conv step
  std::unordered_map<const Node*, Step> convFusedAt_;          ///< fused Conv steps, by the node whose place they take
  std::vector<Region> regions_;
  std::vector<int> inputSlots_, outputSlots_;
  size_t arenaBytes_ = 0;
  std::shared_ptr<ArenaCache> arenas_;
  std::shared_ptr<BufferCache> held_;  ///< outputs of lazy kernels (null without any)


  friend class RunState;
};

/// The values of one run.
class RunState : public cpu::OutputAllocator {
 public:
  RunState(const Specialization& sp, std::mt19937_64& rng, cpu::ThreadPool* pool) : sp_(sp), rng_(rng), pool_(pool) {
    vals_.resize(sp.slots_.size());
    ptr_.assign(sp.slots_.size(), nullptr);
    // a finished run's arena comes back from the cache once nothing (no output) holds it
    if (sp.arenaBytes_) arena_ = sp.arenas_->take();
    for (size_t s = 0; s < sp.slots_.size(); ++s) {
      const Slot& sl = sp.slots_[s];
      if (sl.kind == SlotKind::Arena) ptr_[s] = arena_.get() + sp.regions_[static_cast<size_t>(sl.region)].offset;
    }
  }

  ~RunState() {
    vals_.clear();  // this run's own views of the arena go; the arena returns to the cache
                    // when the last output a caller still holds goes too
  }
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;

  void setHeld(int s, RtValue v) {
    vals_[static_cast<size_t>(s)] = std::move(v);
    const RtValue& rv = vals_[static_cast<size_t>(s)];
    ptr_[static_cast<size_t>(s)] = rv.isTensor() ? rv.tensor->raw.data() : nullptr;
  }

  const uint8_t* ptr(int s) const {
    const Slot& sl = sp_.slots_[static_cast<size_t>(s)];
    return sl.kind == SlotKind::Alias ? ptr_[static_cast<size_t>(sl.root)] : ptr_[static_cast<size_t>(s)];
  }

  /// Slot s as an RtValue (arena bytes and aliases are wrapped without copying).
  const RtValue& value(int s) {
    RtValue& v = vals_[static_cast<size_t>(s)];
    const Slot& sl = sp_.slots_[static_cast<size_t>(s)];
    if (sl.kind == SlotKind::Held || !v.isEmpty()) return v;
    RtTensor t;
    t.dataType = static_cast<int32_t>(sl.type->dtype);
    t.dims = sl.type->dims;
    std::shared_ptr<const void> owner = arena_;
    if (sl.kind == SlotKind::Alias) {
      const Slot& r = sp_.slots_[static_cast<size_t>(sl.root)];
      if (r.kind == SlotKind::Held) owner = vals_[static_cast<size_t>(sl.root)].tensor;
    }
    t.setRaw(Buffer::borrow(owner, ptr(s), sl.bytes));
    v = RtValue::ofTensor(std::move(t));
    return v;
  }

  /// Whether a body of the last control-flow step ran on the reference machinery.
  bool bodiesOnRef() const { return bodiesOnRef_; }

  void runStep(const Step& st) {
    bodiesOnRef_ = false;
    if (st.kernel) {
      const void* ins[16];
      std::vector<const void*> insBig;
      const void** inp = ins;
      if (st.in.size() > 16) {
        insBig.resize(st.in.size());
        inp = insBig.data();
      }
      for (size_t k = 0; k < st.in.size(); ++k) inp[k] = st.in[k] >= 0 ? ptr(st.in[k]) : nullptr;
      void* outs[16];  // one but for Split (nullptr for omitted outputs)
      std::vector<void*> outsBig;
      void** outp = outs;
      if (st.out.size() > 16) {
        outsBig.resize(st.out.size());
        outp = outsBig.data();
      }
      const bool dynamic = st.def->reuse == OutputReuse::Dynamic;
      for (size_t k = 0; k < st.out.size(); ++k)
        outp[k] = st.out[k] >= 0 && !dynamic ? const_cast<uint8_t*>(ptr(st.out[k])) : nullptr;
      void* ws = st.workspaceRegion >= 0 ? arena_.get() + sp_.regions_[static_cast<size_t>(st.workspaceRegion)].offset : nullptr;
      running_ = &st;
      st.kernel->compute({std::span<const void* const>(inp, st.in.size()), std::span<void* const>(outp, st.out.size()), ws, pool_,
                          this});
    } else if (st.lazy) {
      runLazy(st);
    } else {
      runFallback(st);
    }
    for (int s : st.release) {
      vals_[static_cast<size_t>(s)] = RtValue{};
      ptr_[static_cast<size_t>(s)] = nullptr;
    }
  }

  /// OutputAllocator: output k of the running step (an OutputReuse::Dynamic kernel).
  void* allocate(size_t k, DType dtype, std::span<const int64_t> dims) override {
    const Step& st = *running_;
    int s = k < st.out.size() ? st.out[k] : -1;
    if (s < 0) fail(ErrorKind::Internal, "node '{}' ({}): allocates output {}, which it does not have", st.node->displayName(), st.node->opType, k);
    const Slot& sl = sp_.slots_[static_cast<size_t>(s)];
    std::vector<int64_t> d(dims.begin(), dims.end());
    if (sl.type && (d != sl.type->dims || dtype != sl.type->dtype))  // a fast kernel downstream trusts the planned type
      fail(ErrorKind::Internal, "node '{}' ({}): output '{}' is {} {}, shape inference planned {} {}", st.node->displayName(),
           st.node->opType, sl.value->name(), dtypeName(dtype), dimsStr(d), dtypeName(sl.type->dtype), dimsStr(sl.type->dims));
    size_t n = static_cast<size_t>(dtypeBits(dtype) / 8);
    for (int64_t x : d) n *= static_cast<size_t>(x);
    RtTensor t;
    t.dataType = static_cast<int32_t>(dtype);
    t.dims = std::move(d);
    t.setRaw(Buffer::zeros(n));
    uint8_t* p = t.raw.mutableData();
    setHeld(s, RtValue::ofTensor(std::move(t)));
    return p;
  }

  /// The kernel the last lazy step ran (null: its reference kernel).
  const LazyKernels::Entry* lastLazy() const { return lazy_ && lazy_->kernel ? lazy_.get() : nullptr; }

  std::vector<RtValue> outputs() {
    std::vector<RtValue> r;
    for (int s : sp_.outputSlots_) r.push_back(s >= 0 ? value(s) : RtValue{});
    return r;
  }

 private:
  /// A step of LazyKernels: the kernel for the shapes its inputs have now, its outputs held by
  /// the run (as a reference kernel's are), else the reference kernel.
  void runLazy(const Step& st) {
    std::vector<const RtValue*> ins;
    ins.reserve(st.in.size());
    for (int s : st.in) ins.push_back(s >= 0 ? &value(s) : nullptr);
    lazy_ = st.lazy->entry(ins);
    if (!lazy_ || !lazy_->kernel) {
      runFallback(st);
      return;
    }
    const LazyKernels::Entry& e = *lazy_;
    std::vector<const void*> inp(ins.size(), nullptr);
    for (size_t k = 0; k < ins.size(); ++k)
      if (ins[k]) inp[k] = ins[k]->tensor->raw.data();
    std::vector<void*> outp(st.out.size(), nullptr);
    std::vector<std::optional<RtTensor>> made(st.out.size());
    bool anyBytes = e.def->reuse == OutputReuse::Dynamic;
    for (size_t k = 0; k < st.out.size(); ++k) {
      if (st.out[k] < 0 || k >= e.outTypes.size() || !e.outTypes[k]) continue;
      const StaticTensorType& type = *e.outTypes[k];
      const size_t bytes = static_cast<size_t>(type.numElements()) * static_cast<size_t>(dtypeBits(type.dtype) / 8);
      anyBytes = anyBytes || bytes > 0;
      RtTensor& t = made[k].emplace();
      t.dataType = static_cast<int32_t>(type.dtype);
      t.dims = type.dims;
      if (e.def->reuse == OutputReuse::View && k == 0) {  // input 0's bytes, which it keeps alive
        t.setRaw(Buffer::borrow(ins[0]->tensor, ins[0]->tensor->raw.data(), bytes));
        continue;
      }
      std::shared_ptr<uint8_t> mem = sp_.held_->take(bytes);
      outp[k] = mem.get();
      t.setRaw(Buffer::borrow(mem, mem.get(), bytes));
    }
    if (anyBytes && e.def->reuse != OutputReuse::View) {  // no element to write: nothing to run
      std::shared_ptr<uint8_t> ws = e.workspace ? sp_.held_->take(e.workspace) : nullptr;  // recycled like the outputs
      running_ = &st;
      e.kernel->compute({std::span<const void* const>(inp.data(), inp.size()), std::span<void* const>(outp.data(), outp.size()),
                         ws.get(), pool_, this});
    }
    for (size_t k = 0; k < st.out.size(); ++k) {
      if (!made[k]) continue;
      const Slot& sl = sp_.slots_[static_cast<size_t>(st.out[k])];
      if (sl.type && (made[k]->dims != sl.type->dims || made[k]->dtype() != sl.type->dtype))  // a fast kernel downstream trusts it
        fail(ErrorKind::Internal, "node '{}' ({}): output '{}' is {} {}, shape inference planned {} {}", st.node->displayName(),
             st.node->opType, sl.value->name(), dtypeName(made[k]->dtype()), dimsStr(made[k]->dims), dtypeName(sl.type->dtype),
             dimsStr(sl.type->dims));
      setHeld(st.out[k], RtValue::ofTensor(std::move(*made[k])));
    }
  }

  void runFallback(const Step& st) {
    const Node& n = *st.node;
    std::vector<const RtValue*> ins;
    for (int s : st.in) ins.push_back(s >= 0 ? &value(s) : nullptr);
    std::vector<RtValue> outs;
    if (!st.ref) {
      outs = sp_.ref_->callFunction(n, ins, rng_);
    } else {
      RefNodeRunner::OuterLookup outer = [this](const Value* v) -> const RtValue* {
        auto it = sp_.slotOf_.find(v);
        return it == sp_.slotOf_.end() ? nullptr : &value(it->second);
      };
      SubgraphRunner runner = [this, &outer, &st](const Graph& body, const std::vector<RtValue>& inputs) {
        for (const auto& b : st.bodies)
          if (&b->graph() == &body) {
            if (auto outs = b->run(inputs, outer, rng_, pool_)) return std::move(*outs);
            break;
          }
        bodiesOnRef_ = true;
        return sp_.ref_->runSubgraph(body, inputs, outer, rng_);
      };
      KernelContext ctx(n, st.opset, std::move(ins), n.outputs().size(), runner, &rng_, sp_.model_.get(), nullptr);
      st.ref->fn(ctx);
      outs = std::move(ctx.outputs());
    }
    for (size_t k = 0; k < st.out.size() && k < outs.size(); ++k) {
      int s = st.out[k];
      if (s < 0) continue;
      const Slot& sl = sp_.slots_[static_cast<size_t>(s)];
      // A fast kernel downstream trusts the planned type: check what the reference kernel made.
      if (sl.type && outs[k].isTensor() && (outs[k].tensor->dims != sl.type->dims || outs[k].tensor->dtype() != sl.type->dtype))
        fail(ErrorKind::Internal, "node '{}' ({}): output '{}' is {} {}, shape inference planned {} {}", n.displayName(), n.opType,
             sl.value->name(), dtypeName(outs[k].tensor->dtype()), dimsStr(outs[k].tensor->dims), dtypeName(sl.type->dtype),
             dimsStr(sl.type->dims));
      setHeld(s, std::move(outs[k]));
    }
  }

  const Specialization& sp_;
  std::mt19937_64& rng_;
  cpu::ThreadPool* pool_;
  std::vector<RtValue> vals_;
  std::vector<const uint8_t*> ptr_;
  std::shared_ptr<uint8_t> arena_;
  const Step* running_ = nullptr;  ///< the step whose kernel computes now (for allocate)
  bool bodiesOnRef_ = false;
  std::shared_ptr<const LazyKernels::Entry> lazy_;  ///< the kernel of the last lazy step
};

/// Kernels read elements through typed pointers: bytes not aligned to the element size (a
/// tensor file may place them anywhere) are copied once.
RtValue alignedInput(const RtValue& v) {
  if (!v.isTensor() || v.tensor->raw.empty() || v.tensor->raw.isAligned(16)) return v;
  RtTensor copy = *v.tensor;
  copy.setRaw(Buffer::copyOf(v.tensor->raw.bytes()));
  return RtValue::ofTensor(std::move(copy));
}

std::vector<RtValue> Specialization::run(const Graph& original, const std::map<std::string, RtValue>& inputs,
                                         std::mt19937_64& rng, cpu::ThreadPool* pool, RunProfile* profile) const {
  RunState state(*this, rng, pool);
  const Graph& g = *model_->graph;
  for (const auto& [v, rv] : inits_) state.setHeld(slotOf_.at(v), rv);
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    auto it = inputs.find(original.inputs()[i].value->name());
    if (it != inputs.end()) state.setHeld(inputSlots_[i], alignedInput(it->second));
  }
  if (profile) profile->nodes.clear();
  for (const Step& st : steps_) {
    if (!profile) {
      state.runStep(st);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    state.runStep(st);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bool onRef = !st.kernel && (st.bodies.empty() || state.bodiesOnRef());
    const std::string* name = !st.bodies.empty() && onRef ? &st.refKernelName : &st.kernelName;
    double flops = st.kernel ? st.kernel->flops() : 0.0;
    if (st.lazy) {  // which kernel ran for these shapes
      const LazyKernels::Entry* e = state.lastLazy();
      onRef = !e;
      name = e ? &e->name : &st.refKernelName;
      flops = e ? e->kernel->flops() : 0.0;
    }
    profile->nodes.push_back({st.node->displayName(), std::string(st.opType()), *name, onRef, sec, flops, st.graphNodes});
  }
  return state.outputs();
}

CpuBody::CpuBody(const Model& model, const Graph& body, const Graph& top, int threads, int graphOptLevel)
    : model_(model), body_(body), threads_(threads), graphOptLevel_(graphOptLevel) {
  std::vector<const Value*> reads;
  collectOuterReads(body, top, reads);
  std::unordered_set<const Value*> seen;
  for (const Value* v : reads)  // constants become initializers of the body's model (cloneSubgraphAsModel)
    if (seen.insert(v).second) (v->initializer() && !v->isGraphInput() ? constants_ : outer_).push_back(v);
}

std::shared_ptr<const CpuBody::Entry> CpuBody::entry(const Key& key) const {
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    if (cache_.size() >= kMaxPlans) return nullptr;  // shapes change with the data: no more plans
  }
  // Planned outside the lock (a nested body plans its own); two runs racing plan it twice.
  auto e = std::make_shared<Entry>();
  auto t0 = std::chrono::steady_clock::now();
  try {
    std::vector<const Value*> all = outer_;
    all.insert(all.end(), constants_.begin(), constants_.end());
    e->model = cloneSubgraphAsModel(model_, body_, all);
    std::map<std::string, std::vector<int64_t>> dims;
    auto& ins = e->model->graph->inputs();
    for (size_t i = 0; i < ins.size(); ++i) {
      Shape sh;
      sh.hasRank = true;
      for (int64_t d : key[i].second) sh.dims.push_back(Dim::ofValue(d));
      ins[i].value->setType(TypeInfo::tensor(static_cast<DType>(key[i].first), sh));
      ins[i].typeOverride.reset();
      dims[ins[i].value->name()] = key[i].second;
    }
    e->plan = std::make_shared<const Specialization>(*e->model, dims, threads_, graphOptLevel_, nullptr);  // planned mid-run: kernels made inline
    if (spdlog::should_log(spdlog::level::debug))
      spdlog::debug("cpu executor: body '{}' planned in {:.2f} ms: {}", body_.name,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), e->plan->describe());
  } catch (const std::exception& ex) {
    spdlog::debug("cpu executor: body '{}' runs on the reference kernels: {}", body_.name, ex.what());
    e->plan.reset();
  }
  std::lock_guard lock(mutex_);
  return cache_.emplace(key, std::move(e)).first->second;
}

std::optional<std::vector<RtValue>> CpuBody::run(const std::vector<RtValue>& inputs, const OuterLookup& outer,
                                                 std::mt19937_64& rng, cpu::ThreadPool* pool) const {
  if (inputs.size() != body_.inputs().size()) return std::nullopt;  // the reference says what is wrong
  std::vector<const RtValue*> all;
  for (const RtValue& v : inputs) all.push_back(&v);
  for (const Value* v : outer_) all.push_back(outer(v));
  Key key;
  key.reserve(all.size());
  for (const RtValue* v : all) {
    if (!v || !v->isTensor()) return std::nullopt;
    DType t = v->tensor->dtype();
    if (t == DType::String || t == DType::Undefined || dtypeBits(t) < 8) return std::nullopt;
    key.emplace_back(v->tensor->dataType, v->tensor->dims);
  }
  std::shared_ptr<const Entry> e = entry(key);
  if (!e || !e->plan) return std::nullopt;
  const Graph& g = *e->model->graph;
  std::map<std::string, RtValue> byName;
  for (size_t i = 0; i < all.size(); ++i) byName.emplace(g.inputs()[i].value->name(), *all[i]);
  return e->plan->run(g, byName, rng, pool, nullptr);
}

class CpuPlan : public Plan {
 public:
  CpuPlan(const Model& m, const PrepareOptions& o)
      : model_(m), seed_(o.seed), threads_(o.threads), graphOptLevel_(o.graphOptLevel) {
    if (threads_ > 1) pool_ = std::make_unique<cpu::ThreadPool>(threads_);
    if (!m.graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", m.path);
    // Specialise now when every input's shape is static, so prepare time is prepare time.
    std::map<std::string, std::vector<int64_t>> dims;
    bool allStatic = true;
    for (const auto& e : m.graph->inputs()) {
      if (e.value->initializer()) continue;
      auto st = staticType(e.type());
      if (!st) {
        allStatic = false;
        break;
      }
      dims[e.value->name()] = st->dims;
    }
    // Either way, a node without a kernel fails now, as on ref: the reference machinery
    // resolves every node when it is built.
    if (allStatic) specialization(dims);
    else RefNodeRunner check(m, false);
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
    std::shared_ptr<const Specialization> sp = specialization(dims);
    uint64_t runIndex = runs_.fetch_add(1);
    std::mt19937_64 rng(seed_ ? *seed_ + runIndex : std::random_device{}());
    return sp->run(g, inputs, rng, pool_.get(), profile);
  }

  std::shared_ptr<const Specialization> specialization(const std::map<std::string, std::vector<int64_t>>& dims) {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(dims);
    if (it != cache_.end()) return it->second;
    auto sp = std::make_shared<const Specialization>(model_, dims, threads_, graphOptLevel_, pool_.get());
    cache_.emplace(dims, sp);
    return sp;
  }

  const Model& model_;
  std::optional<uint64_t> seed_;
  int threads_;
  int graphOptLevel_;
  std::unique_ptr<cpu::ThreadPool> pool_;  ///< null for one thread: everything inline
  std::atomic<uint64_t> runs_{0};
  std::mutex mutex_;
  std::map<std::map<std::string, std::vector<int64_t>>, std::shared_ptr<const Specialization>> cache_;
};

class CpuExecutor : public Executor {
 public:
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Plan> prepare(const Model& model, const PrepareOptions& options) override {
    registerRefKernels();
    PrepareOptions o = options;
    if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    cpu::configureBlas(o.threads);
    return std::make_unique<CpuPlan>(model, o);
  }
};

}  // namespace

std::unique_ptr<Executor> makeCpuExecutor() { return std::make_unique<CpuExecutor>(); }

}  // namespace onnxtool
