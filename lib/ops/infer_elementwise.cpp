// infer_elementwise.cpp: shape inference for element-wise ops: unary math and activations,
// broadcasting binary/variadic arithmetic, comparisons and logic, Where, Cast/CastLike, Clip,
// Dropout, BitCast, CumProd, SwiGLU; data propagation for integer arithmetic, Max/Min, Equal, Where,
// Cast and Identity.
#include <algorithm>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "lib/shape_inference.h"

namespace onnxtool {
namespace {

/// Output 0 has input 0's type and shape (the generic pass already set the dtype).
void sameAsInput0(InferContext& c) {
  if (auto s = c.inputShape(0)) c.setOutput(0, c.inputDType(0), *s);
}

void identity(InferContext& c) {
  const TypeInfo& t = c.inputType(0);
  if (!t.isTensor()) {
    if (!t.isNone()) c.setOutputType(0, t);
    return;
  }
  sameAsInput0(c);
  if (const auto* d = c.inputData(0)) c.setOutputData(0, *d);
}

/// Broadcast of every present input from `first` on; dtype given.
void broadcastAll(InferContext& c, DType dtype, size_t first = 0) {
  if (c.sinceVersion() < 7) {  // before opset 7: no broadcast, or the legacy one-way form
    if (auto s = c.inputShape(0)) c.setOutput(0, dtype, *s);
    return;
  }
  std::optional<SymShape> shape = SymShape{};
  for (size_t i = first; i < c.numInputs(); ++i) {
    if (!c.hasInput(i)) continue;
    auto s = c.inputShape(i);
    if (!s) return;
    shape = c.broadcast(*shape, *s);
  }
  c.setOutput(0, dtype, *shape);
}

/// Element-wise data propagation for two inputs with known contents (numpy broadcast of 1-D or
/// scalar contents only, which is what shape arithmetic uses).
void propagate2(InferContext& c, size_t a, size_t b, const std::function<SymDim(const SymDim&, const SymDim&)>& f) {
  const auto* x = c.inputData(a);
  const auto* y = c.inputData(b);
  if (!x || !y) return;
  auto rx = c.inputRank(a), ry = c.inputRank(b);
  if (!rx || !ry || *rx > 1 || *ry > 1) return;
  size_t n = std::max(x->size(), y->size());
  if ((x->size() != n && x->size() != 1) || (y->size() != n && y->size() != 1)) return;
  std::vector<SymDim> r;
  for (size_t i = 0; i < n; ++i) r.push_back(f((*x)[x->size() == 1 ? 0 : i], (*y)[y->size() == 1 ? 0 : i]));
  c.setOutputData(0, std::move(r));
}

template <typename Op>
void arith(InferContext& c) {
  broadcastAll(c, c.inputDType(0));
  if (!dtypeIsInteger(c.inputDType(0))) return;
  propagate2(c, 0, 1, [](const SymDim& x, const SymDim& y) -> SymDim {
    if (!x || !y) return std::nullopt;
    return Op{}(*x, *y);
  });
}

struct AddOp { SymDim operator()(const SymExpr& x, const SymExpr& y) const { return x + y; } };
struct SubOp { SymDim operator()(const SymExpr& x, const SymExpr& y) const { return x - y; } };
struct MulOp { SymDim operator()(const SymExpr& x, const SymExpr& y) const { return x * y; } };
struct DivOp {
  // Integer Div truncates toward zero: exact for non-negative shape arithmetic and an exact quotient.
  SymDim operator()(const SymExpr& x, const SymExpr& y) const {
    auto cx = x.asConstant(), cy = y.asConstant();
    if (cx && cy) return *cy == 0 ? SymDim() : SymDim(SymExpr(*cx / *cy));
    if (cy && *cy > 0) {
      if (auto q = SymExpr::exactDiv(x, y)) return q;
      return SymExpr::floorDiv(x, *cy);  // shape values are non-negative: floor == trunc
    }
    return SymExpr::exactDiv(x, y);
  }
};

/// Integer Mod of known constants (shape arithmetic: torch exports window padding as
/// (w - h % w) % w): fmod 0 takes the divisor's sign (as Python's %), fmod 1 the dividend's (as
/// C's %); a zero divisor leaves the element unknown.
void mod(InferContext& c) {
  broadcastAll(c, c.inputDType(0));
  if (!dtypeIsInteger(c.inputDType(0))) return;
  const bool cStyle = c.attrInt("fmod", 0) != 0;
  propagate2(c, 0, 1, [cStyle](const SymDim& x, const SymDim& y) -> SymDim {
    if (!x || !y) return std::nullopt;
    auto cx = x->asConstant(), cy = y->asConstant();
    if (!cx || !cy || *cy == 0) return std::nullopt;
    int64_t r = *cx % *cy;
    if (!cStyle && r != 0 && ((r < 0) != (*cy < 0))) r += *cy;
    return SymExpr(r);
  });
}

/// Max and Min: known when the operands are constants, equal, or (a max with 0 / a min with 0)
/// against a provably non-negative dim expression.
template <bool IsMax>
void maxMin(InferContext& c) {
  broadcastAll(c, c.inputDType(0));
  if (c.numInputs() != 2 || !dtypeIsInteger(c.inputDType(0))) return;
  propagate2(c, 0, 1, [](const SymDim& x, const SymDim& y) -> SymDim {
    if (!x || !y) return std::nullopt;
    if (*x == *y) return x;
    auto cx = x->asConstant(), cy = y->asConstant();
    if (cx && cy) return SymExpr(IsMax ? std::max(*cx, *cy) : std::min(*cx, *cy));
    if ((*x - *y).provablyNonNegative()) return IsMax ? x : y;
    if ((*y - *x).provablyNonNegative()) return IsMax ? y : x;
    return std::nullopt;
  });
}

void compare(InferContext& c) { broadcastAll(c, DType::Bool); }

void equal(InferContext& c) {
  broadcastAll(c, DType::Bool);
  propagate2(c, 0, 1, [](const SymDim& x, const SymDim& y) -> SymDim {
    if (!x || !y) return std::nullopt;
    if (*x == *y) return SymExpr(1);
    if (x->isConstant() && y->isConstant()) return SymExpr(0);
    return std::nullopt;
  });
}

void logic(InferContext& c) { broadcastAll(c, DType::Bool); }

void variadic(InferContext& c) { broadcastAll(c, c.inputDType(0)); }

void where(InferContext& c) {
  broadcastAll(c, c.inputDType(1));
  const auto* cond = c.inputData(0);
  const auto* x = c.inputData(1);
  const auto* y = c.inputData(2);
  if (!cond || !x || !y) return;
  for (size_t i : {0, 1, 2})
    if (auto r = c.inputRank(i); !r || *r > 1) return;
  size_t n = std::max({cond->size(), x->size(), y->size()});
  for (const auto* v : {cond, x, y})
    if (v->size() != n && v->size() != 1) return;
  std::vector<SymDim> r;
  for (size_t i = 0; i < n; ++i) {
    const SymDim& k = (*cond)[cond->size() == 1 ? 0 : i];
    if (!k || !k->isConstant()) return;
    r.push_back(*k->asConstant() ? (*x)[x->size() == 1 ? 0 : i] : (*y)[y->size() == 1 ? 0 : i]);
  }
  c.setOutputData(0, std::move(r));
}

void cast(InferContext& c) {
  auto to = static_cast<DType>(c.attrInt("to", 0));
  if (auto s = c.inputShape(0)) c.setOutput(0, to, *s);
  else c.setOutputDType(0, to);
  if (const auto* d = c.inputData(0); d && dtypeIsInteger(to)) c.setOutputData(0, *d);
}

void castLike(InferContext& c) {
  DType to = c.inputDType(1);
  if (auto s = c.inputShape(0)) c.setOutput(0, to, *s);
  else c.setOutputDType(0, to);
  if (const auto* d = c.inputData(0); d && dtypeIsInteger(to)) c.setOutputData(0, *d);
}

void bitCast(InferContext& c) {
  auto to = static_cast<DType>(c.attrInt("to", 0));
  DType from = c.inputDType(0);
  if (from != DType::Undefined && isValidDType(static_cast<int32_t>(to)) && dtypeBits(from) != dtypeBits(to))
    c.fail(fmt::format("cannot bitcast {} to {}: the widths differ", dtypeName(from), dtypeName(to)));
  if (auto s = c.inputShape(0)) c.setOutput(0, to, *s);
  else c.setOutputDType(0, to);
}

void unaryBool(InferContext& c) {
  if (auto s = c.inputShape(0)) c.setOutput(0, DType::Bool, *s);
}

void dropout(InferContext& c) {
  auto s = c.inputShape(0);
  if (!s) return;
  c.setOutput(0, c.inputDType(0), *s);
  if (c.hasOutput(1)) c.setOutput(1, c.sinceVersion() >= 10 ? DType::Bool : c.inputDType(0), *s);
}

void prelu(InferContext& c) { broadcastAll(c, c.inputDType(0)); }

void bitShift(InferContext& c) { broadcastAll(c, c.inputDType(0)); }

void neg(InferContext& c) {
  sameAsInput0(c);
  if (const auto* d = c.inputData(0)) {
    std::vector<SymDim> r;
    for (const auto& x : *d) r.push_back(x ? SymDim(-*x) : SymDim());
    c.setOutputData(0, std::move(r));
  }
}

}  // namespace

void registerInferElementwise(InferRegistry& r) {
  for (std::string_view op :
       {"Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor", "Log",
        "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Sinh", "Sqrt", "Tan", "Tanh", "Softplus", "Softsign",
        "Elu", "Selu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Mish", "Gelu", "Celu", "Not",
        "BitwiseNot", "Shrink", "LpNormalization", "Softmax", "LogSoftmax", "Hardmax", "Clip", "Trilu", "CumSum",
        "MeanVarianceNormalization", "Swish", "CumProd"})
    r.add({"", op, 1, sameAsInput0});
  r.add({"", "Identity", 1, identity});
  r.add({"", "Neg", 1, neg});
  r.add({"", "Add", 1, arith<AddOp>});
  r.add({"", "Sub", 1, arith<SubOp>});
  r.add({"", "Mul", 1, arith<MulOp>});
  r.add({"", "Div", 1, arith<DivOp>});
  for (std::string_view op : {"Pow", "BitwiseAnd", "BitwiseOr", "BitwiseXor"}) r.add({"", op, 1, variadic});
  r.add({"", "Mod", 1, mod});
  for (std::string_view op : {"Sum", "Mean"}) r.add({"", op, 1, variadic});
  r.add({"", "Max", 1, maxMin<true>});
  r.add({"", "Min", 1, maxMin<false>});
  for (std::string_view op : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) r.add({"", op, 1, compare});
  r.add({"", "Equal", 1, equal});
  for (std::string_view op : {"And", "Or", "Xor"}) r.add({"", op, 1, logic});
  for (std::string_view op : {"IsNaN", "IsInf"}) r.add({"", op, 1, unaryBool});
  r.add({"", "Where", 1, where});
  r.add({"", "Cast", 1, cast});
  r.add({"", "CastLike", 1, castLike});
  r.add({"", "BitCast", 1, bitCast});
  r.add({"", "SwiGLU", 1, variadic});
  r.add({"", "Dropout", 1, dropout});
  r.add({"", "PRelu", 1, prelu});
  r.add({"", "BitShift", 1, bitShift});
}

}  // namespace onnxtool
