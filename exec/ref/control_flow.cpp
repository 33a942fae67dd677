// control_flow.cpp: reference kernels of If, Loop and Scan, sequence and optional ops.
#include "exec/ref/kernel_util.h"

namespace onnxtool::ref {

namespace {

void ifOp(KernelContext& ctx) {
  const Tensor& cond = ctx.tensor(0);
  if (numel(cond) != 1) ctx.fail("If condition must have exactly one element");
  bool c = cond.elementAsDouble(0) != 0;
  const Attribute* branch = ctx.attr(c ? "then_branch" : "else_branch");
  if (!branch || !branch->g) ctx.fail(c ? "then_branch is missing" : "else_branch is missing");
  std::vector<RtValue> outs = ctx.runSubgraph(*branch->g, {});
  if (outs.size() != ctx.numOutputs())
    ctx.fail(fmt::format("the branch produced {} outputs, the node has {}", outs.size(), ctx.numOutputs()));
  for (size_t i = 0; i < outs.size(); ++i) ctx.setOutput(i, std::move(outs[i]));
}

}  // namespace

void registerControlFlowOps() { addRef("", "If", 1, "ref.if", ifOp); }

}  // namespace onnxtool::ref
