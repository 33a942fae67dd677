// cpu_kernels.cpp: the table of the cpu executor's fast kernels (explicit, no static
// self-registration) and its lookup. Ops not listed, or declined by `create`, run on the
// reference kernels.
#include "exec/cpu/kernels.h"
#include "exec/cpu/kernels_int8.h"

namespace onnxtool::cpu {

namespace {

constexpr int kLast = 1 << 20;  // "every later version": bumped when a new schema version changes semantics

// Binary elementwise ops before version 7 had their own `broadcast`/`axis` attributes: left to
// the reference kernels. DType::Undefined on a view means any element type.
constexpr CpuKernelDef kKernels[] = {
    {"", "MatMul", 1, kLast, DType::Float, "cpu.matmul.f32", OutputReuse::None, createMatMul, true},
    {"", "Gemm", 7, kLast, DType::Float, "cpu.gemm.f32", OutputReuse::None, createGemm, true},
    {"", "Cast", 6, kLast, DType::Float16, "cpu.cast.f16.f32", OutputReuse::None, createCast},
    {"", "Cast", 6, kLast, DType::BFloat16, "cpu.cast.bf16.f32", OutputReuse::None, createCast},
    {"", "Cast", 6, kLast, DType::Float, "cpu.cast.f32.half", OutputReuse::None, createCast},
    {"", "Cast", 6, kLast, DType::Int8, "cpu.cast.s8.f32", OutputReuse::None, createCastS8},
    {"com.microsoft", "MatMulNBits", 1, kLast, DType::Float, "cpu.ms.matmulnbits.f32", OutputReuse::None, createMatMulNBits},
    {"", "Conv", 1, kLast, DType::Float, "cpu.conv.f32", OutputReuse::None, createConvFast, true},
    {"", "LSTM", 7, kLast, DType::Float, "cpu.lstm.f32", OutputReuse::None, createLstm, true, true},
    {"", "GRU", 7, kLast, DType::Float, "cpu.gru.f32", OutputReuse::None, createGru, true, true},
    {"", "ConvTranspose", 1, kLast, DType::Float, "cpu.convtranspose.f32", OutputReuse::None, createConvTranspose},
    {"", "Add", 7, kLast, DType::Float, "cpu.add.f32", OutputReuse::InPlace, createAdd},
    {"", "Sub", 7, kLast, DType::Float, "cpu.sub.f32", OutputReuse::InPlace, createSub},
    {"", "Mul", 7, kLast, DType::Float, "cpu.mul.f32", OutputReuse::InPlace, createMul},
    {"", "Div", 7, kLast, DType::Float, "cpu.div.f32", OutputReuse::InPlace, createDiv},
    {"", "Pow", 7, kLast, DType::Float, "cpu.pow.f32", OutputReuse::InPlace, createPow},
    {"", "Max", 8, kLast, DType::Float, "cpu.max.f32", OutputReuse::InPlace, createMax},
    {"", "Min", 8, kLast, DType::Float, "cpu.min.f32", OutputReuse::InPlace, createMin},
    {"", "Exp", 6, kLast, DType::Float, "cpu.exp.f32", OutputReuse::InPlace, createExp},
    {"", "Erf", 9, kLast, DType::Float, "cpu.erf.f32", OutputReuse::InPlace, createErf},
    {"", "Sqrt", 6, kLast, DType::Float, "cpu.sqrt.f32", OutputReuse::InPlace, createSqrt},
    {"", "Sum", 6, kLast, DType::Float, "cpu.sum.f32", OutputReuse::InPlace, createSum},
    {"", "Relu", 6, kLast, DType::Float, "cpu.relu.f32", OutputReuse::InPlace, createRelu},
    {"", "Clip", 6, kLast, DType::Float, "cpu.clip.f32", OutputReuse::InPlace, createClip},
    {"", "Sigmoid", 6, kLast, DType::Float, "cpu.sigmoid.f32", OutputReuse::InPlace, createSigmoid},
    {"", "Tanh", 6, kLast, DType::Float, "cpu.tanh.f32", OutputReuse::InPlace, createTanh},
    {"", "HardSwish", 14, kLast, DType::Float, "cpu.hardswish.f32", OutputReuse::InPlace, createHardSwish},
    {"", "HardSigmoid", 6, kLast, DType::Float, "cpu.hardsigmoid.f32", OutputReuse::InPlace, createHardSigmoid},
    {"", "Gelu", 20, kLast, DType::Float, "cpu.gelu.f32", OutputReuse::InPlace, createGelu},
    {"", "Softmax", 1, kLast, DType::Float, "cpu.softmax.f32", OutputReuse::None, createSoftmax},
    {"", "MaxPool", 1, kLast, DType::Float, "cpu.maxpool.f32", OutputReuse::None, createMaxPool},
    {"", "AveragePool", 1, kLast, DType::Float, "cpu.averagepool.f32", OutputReuse::None, createAveragePool},
    {"", "GlobalAveragePool", 1, kLast, DType::Float, "cpu.globalaveragepool.f32", OutputReuse::None,
     createGlobalAveragePool},
    // Resize-10 (nearest rounding of its own, asymmetric coordinates) is left to the reference kernel.
    {"", "Resize", 11, kLast, DType::Float, "cpu.resize.f32", OutputReuse::None, createResize},
    // Versions before 9 carry `spatial`/`is_test`: left to the reference kernel.
    {"", "BatchNormalization", 9, kLast, DType::Float, "cpu.batchnorm.f32", OutputReuse::InPlace, createBatchNorm},
    {"", "LRN", 1, kLast, DType::Float, "cpu.lrn.f32", OutputReuse::None, createLrn},
    {"", "LayerNormalization", 17, kLast, DType::Float, "cpu.layernorm.f32", OutputReuse::InPlace, createLayerNorm},
    {"", "Transpose", 1, kLast, DType::Undefined, "cpu.transpose.copy", OutputReuse::None, createTranspose},
    {"", "ReduceMean", 1, kLast, DType::Float, "cpu.reducemean.f32.trailing", OutputReuse::None, createReduceMean},
    {"", "Gather", 1, kLast, DType::Undefined, "cpu.gather.copy", OutputReuse::None, createGather, true},
    {"", "Attention", 23, kLast, DType::Float, "cpu.attention.f32", OutputReuse::None, createAttention},
    {"", "TopK", 1, kLast, DType::Float, "cpu.topk.f32", OutputReuse::None, createTopK, false, true},
    {"", "Pad", 2, kLast, DType::Undefined, "cpu.pad.copy", OutputReuse::None, createPad},
    {"", "Slice", 1, kLast, DType::Undefined, "cpu.slice.copy", OutputReuse::None, createSlice},
    {"", "Concat", 4, kLast, DType::Undefined, "cpu.concat.copy", OutputReuse::None, createConcat},
    {"", "Split", 2, kLast, DType::Undefined, "cpu.split.copy", OutputReuse::None, createSplit, false, true},
    {"", "NonMaxSuppression", 10, kLast, DType::Float, "cpu.nonmaxsuppression.f32", OutputReuse::Dynamic,
     createNonMaxSuppression},
    {"", "RoiAlign", 10, kLast, DType::Float, "cpu.roialign.f32", OutputReuse::None, createRoiAlign},
    {"", "Where", 9, kLast, DType::Bool, "cpu.where.select", OutputReuse::None, createWhere},
    {"", "Expand", 8, kLast, DType::Undefined, "cpu.expand.copy", OutputReuse::None, createExpand},
    {"", "ConstantOfShape", 9, kLast, DType::Int64, "cpu.constantofshape.fill", OutputReuse::None, createConstantOfShape},
    {"", "ScatterElements", 11, kLast, DType::Undefined, "cpu.scatterelements.copy", OutputReuse::None, createScatterElements},
    {"", "Reshape", 5, kLast, DType::Undefined, "cpu.reshape.view", OutputReuse::View, createView},
    {"", "Flatten", 1, kLast, DType::Undefined, "cpu.flatten.view", OutputReuse::View, createView},
    {"", "Squeeze", 1, kLast, DType::Undefined, "cpu.squeeze.view", OutputReuse::View, createView},
    {"", "Unsqueeze", 1, kLast, DType::Undefined, "cpu.unsqueeze.view", OutputReuse::View, createView},
    {"", "Identity", 1, kLast, DType::Undefined, "cpu.identity.view", OutputReuse::View, createView},
    {"", "MatMulInteger", 10, kLast, DType::UInt8, "cpu.matmulinteger.u8s8", OutputReuse::None, createMatMulInteger},
    {"", "QLinearMatMul", 10, kLast, DType::UInt8, "cpu.qlinearmatmul.u8s8", OutputReuse::None, createQLinearMatMul},
    {"", "QLinearConv", 10, kLast, DType::UInt8, "cpu.qlinearconv.u8s8", OutputReuse::None, createQLinearConv},
    {"", "QuantizeLinear", 10, kLast, DType::Float, "cpu.quantizelinear.f32.u8", OutputReuse::None, createQuantizeLinear},
    {"", "DequantizeLinear", 10, kLast, DType::UInt8, "cpu.dequantizelinear.u8.f32", OutputReuse::None, createDequantizeLinearU8},
    {"", "DequantizeLinear", 10, kLast, DType::Int8, "cpu.dequantizelinear.s8.f32", OutputReuse::None, createDequantizeLinearS8},
};

}  // namespace

std::span<const CpuKernelDef> cpuKernels() { return kKernels; }

const CpuKernelDef* findCpuKernel(std::string_view domain, std::string_view opType, int schemaVersion, DType dtype) {
  for (const CpuKernelDef& k : kKernels) {
    if (k.opType != opType || canonicalDomain(k.domain) != canonicalDomain(domain)) continue;
    if (schemaVersion < k.sinceVersion || schemaVersion > k.lastVersion) continue;
    if (k.dtype != DType::Undefined && k.dtype != dtype) continue;
    if (k.dtype == DType::Undefined && (dtype == DType::String || dtypeBits(dtype) < 8)) continue;
    return &k;
  }
  return nullptr;
}

}  // namespace onnxtool::cpu
