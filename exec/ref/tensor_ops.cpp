// tensor_ops.cpp: reference kernels that move data without arithmetic: Identity, Reshape,
// Constant, Transpose, Concat, Gather, Slice, ...
#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

void identity(KernelContext& ctx) { ctx.setOutput(0, *ctx.input(0)); }

void constant(KernelContext& ctx) {
  const Attribute* a = ctx.attr("value");
  if (a && a->t) {
    ctx.setOutput(0, RtValue::ofTensor(std::shared_ptr<const Tensor>(a->t)));
    return;
  }
  if ((a = ctx.attr("value_float"))) return ctx.setOutput(0, Tensor::fromFloats("", {}, {a->f}));
  if ((a = ctx.attr("value_floats"))) return ctx.setOutput(0, Tensor::fromFloats("", {int64_t(a->floats.size())}, a->floats));
  if ((a = ctx.attr("value_int"))) return ctx.setOutput(0, Tensor::fromInt64s("", {}, {a->i}));
  if ((a = ctx.attr("value_ints"))) return ctx.setOutput(0, Tensor::fromInt64s("", {int64_t(a->ints.size())}, a->ints));
  if ((a = ctx.attr("value_string"))) {
    Tensor t = makeTensor(DType::String, {});
    t.strings[0] = a->s;
    return ctx.setOutput(0, std::move(t));
  }
  if ((a = ctx.attr("value_strings"))) {
    Tensor t = makeTensor(DType::String, {int64_t(a->strings.size())});
    t.strings = a->strings;
    return ctx.setOutput(0, std::move(t));
  }
  ctx.fail("Constant needs one of value, value_float(s), value_int(s), value_string(s) (sparse_value unsupported)");
}

}  // namespace

void registerTensorOps() {
  addRef("", "Identity", 1, "ref.identity", identity);
  addRef("", "Constant", 1, "ref.constant", constant);
}

}  // namespace onnxtool::ref
