// tensor_check.cpp: validity of a tensor's data against its declaration (lib/tensor_check.h).
#include "lib/tensor_check.h"

#include <climits>

#include <fmt/format.h>

namespace onnxtool {

namespace tensor_check {

std::string plural(uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string dimsStr(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string humanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  uint64_t v = b;
  while (v >= 1024 && u < 6 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{} {}", v, units[u]);
}

std::string dtypeProblem(int32_t v) {
  if (v == 0) return "is UNDEFINED, expected a valid element type";
  return fmt::format("{} is not a TensorProto.DataType, expected a value from 1 to {}", v, kMaxDType);
}

/// Typed field of TensorProto that holds `t`, and how many bytes of raw layout one entry gives.
struct TypedField {
  std::string_view name;
  uint64_t entryBytes;  ///< 0 when entries and bytes do not map one to one (6-bit types)
};

TypedField typedFieldOf(DType t) {
  switch (t) {
    case DType::Float: case DType::Complex64: return {"float_data", 4};
    case DType::Double: case DType::Complex128: return {"double_data", 8};
    case DType::Int64: return {"int64_data", 8};
    case DType::UInt32: return {"uint64_data", 4};
    case DType::UInt64: return {"uint64_data", 8};
    case DType::Int32: return {"int32_data", 4};
    case DType::Int16: case DType::UInt16: case DType::Float16: case DType::BFloat16: return {"int32_data", 2};
    case DType::Float6E2M3: case DType::Float6E3M2: return {"int32_data", 0};
    default: return {"int32_data", 1};
  }
}

/// Problems of one tensor's declaration and data, each a "<what is wrong>, <what was expected>"
/// phrase. Reads sizes only: never allocates in proportion to the declared dims.
}  // namespace tensor_check

std::vector<std::string> tensorDataProblems(const Tensor& t) {
  using namespace tensor_check;
  std::vector<std::string> out;
  if (!isValidDType(t.dataType)) {
    out.push_back("data_type " + dtypeProblem(t.dataType));
    return out;
  }
  for (int64_t d : t.dims) {
    if (d < 0) {
      out.push_back(fmt::format("dims {} include a negative dimension, expected dims >= 0", dimsStr(t.dims)));
      return out;
    }
  }
  auto n = t.numElements();
  if (!n) {
    out.push_back(
        fmt::format("dims {} hold more than 2^63 elements, refused as too large to allocate", dimsStr(t.dims)));
    return out;
  }
  static_assert(limits::kMaxTensorElements == uint64_t{1} << 40, "update the limit in the message below");
  if (static_cast<uint64_t>(*n) > limits::kMaxTensorElements) {
    out.push_back(fmt::format("dims {} declare {} elements, refused as too large to allocate (limit 2^40 elements)",
                              dimsStr(t.dims), *n));
    return out;
  }
  std::string_view typeName = dtypeName(t.dtype());
  if (t.dtype() == DType::String) {
    if (t.storage != Tensor::Storage::External && t.strings.size() != static_cast<uint64_t>(*n))
      out.push_back(fmt::format("string_data holds {}, expected {} for dims {}",
                                plural(t.strings.size(), "string", "strings"), *n, dimsStr(t.dims)));
    return out;
  }
  auto bytes = t.expectedBytes();
  if (!bytes || *bytes > kMaxTensorBytes) {
    out.push_back(fmt::format("dims {} of {} declare {}{} bytes, refused as too large to allocate (limit {})",
                              dimsStr(t.dims), typeName, bytes ? "" : "more than ",
                              bytes ? *bytes : static_cast<uint64_t>(INT64_MAX), humanBytes(kMaxTensorBytes)));
    return out;
  }
  switch (t.storage) {
    case Tensor::Storage::External:
      break;  // the loader binds and checks external ranges; its findings are in loadIssues
    case Tensor::Storage::Raw:
      if (t.raw.size() != *bytes)
        out.push_back(fmt::format("raw_data holds {}, expected {} for dims {} of {}",
                                  plural(t.raw.size(), "byte", "bytes"), *bytes, dimsStr(t.dims), typeName));
      break;
    case Tensor::Storage::Typed: {
      if (t.raw.size() == *bytes) break;
      TypedField f = typedFieldOf(t.dtype());
      if (f.entryBytes == 0)
        out.push_back(fmt::format("{} holds {} of packed data, expected {} for dims {} of {}", f.name,
                                  plural(t.raw.size(), "byte", "bytes"), *bytes, dimsStr(t.dims), typeName));
      else
        out.push_back(fmt::format("{} holds {}, expected {} for dims {} of {}", f.name,
                                  plural(t.raw.size() / f.entryBytes, "value", "values"), *bytes / f.entryBytes,
                                  dimsStr(t.dims), typeName));
      break;
    }
    case Tensor::Storage::None:
      if (*n > 0)
        out.push_back(fmt::format("has no data, expected {} for dims {} of {}",
                                  plural(static_cast<uint64_t>(*n), "element", "elements"), dimsStr(t.dims), typeName));
      break;
  }
  return out;
}

/// Problems of a sparse tensor (onnx's check_sparse_tensor rules), as phrases.
std::vector<std::string> sparseTensorDataProblems(const SparseTensor& s) {
  using namespace tensor_check;
  std::vector<std::string> out;
  if (!s.hasValues) {
    out.push_back("has no values tensor, expected values of shape [NNZ]");
    return out;
  }
  for (const auto& p : tensorDataProblems(s.values)) out.push_back("values: " + p);
  if (s.values.dims.size() != 1) {
    out.push_back(fmt::format("values have dims {}, expected rank 1 ([NNZ])", dimsStr(s.values.dims)));
    return out;
  }
  int64_t nnz = s.values.dims[0];
  if (s.dims.empty()) {
    out.push_back("has no dense dims, expected a dense shape of rank 1 or more");
    return out;
  }
  int64_t denseSize = 1;
  bool overflow = false;
  for (int64_t d : s.dims) {
    if (d <= 0) {
      out.push_back(fmt::format("dense dims {} include a non-positive dimension, expected dims > 0", dimsStr(s.dims)));
      return out;
    }
    if (denseSize > INT64_MAX / d) overflow = true;
    else denseSize *= d;
  }
  if (overflow) {
    out.push_back(
        fmt::format("dense dims {} hold more than 2^63 elements, refused as too large to allocate", dimsStr(s.dims)));
    return out;
  }
  if (!s.hasIndices) {
    if (nnz != 0) out.push_back(fmt::format("has no indices for its {} values, expected an int64 indices tensor", nnz));
    return out;
  }
  const Tensor& idx = s.indices;
  auto idxProblems = tensorDataProblems(idx);
  for (const auto& p : idxProblems) out.push_back("indices: " + p);
  if (idx.dtype() != DType::Int64) {
    out.push_back(fmt::format("indices have type {}, expected int64", dtypeName(idx.dtype())));
    return out;
  }
  size_t rank = s.dims.size();
  if (idx.dims.size() == 1) {
    if (idx.dims[0] != nnz) {
      out.push_back(fmt::format("indices hold {} entries, expected NNZ = {}", idx.dims[0], nnz));
      return out;
    }
  } else if (idx.dims.size() == 2) {
    if (idx.dims[0] != nnz || idx.dims[1] != static_cast<int64_t>(rank)) {
      out.push_back(
          fmt::format("indices have dims {}, expected [{}, {}] (NNZ, dense rank)", dimsStr(idx.dims), nnz, rank));
      return out;
    }
  } else {
    out.push_back(
        fmt::format("indices have dims {}, expected rank 1 ([NNZ]) or 2 ([NNZ, {}])", dimsStr(idx.dims), rank));
    return out;
  }
  if (!idxProblems.empty() || idx.storage == Tensor::Storage::External) return out;
  auto bytes = idx.expectedBytes();
  if (!bytes || idx.raw.size() != *bytes) return out;
  // Indices are present and sized right: check range and order (the first offender only).
  int64_t prev = -1;
  for (int64_t i = 0; i < nnz; ++i) {
    int64_t linear = 0;
    if (idx.dims.size() == 1) {
      linear = idx.elementAsInt(static_cast<size_t>(i));
      if (linear < 0 || linear >= denseSize) {
        out.push_back(
            fmt::format("index {} at position {} is out of range, expected 0 to {}", linear, i, denseSize - 1));
        return out;
      }
    } else {
      for (size_t j = 0; j < rank; ++j) {
        int64_t v = idx.elementAsInt(static_cast<size_t>(i) * rank + j);
        if (v < 0 || v >= s.dims[j]) {
          out.push_back(
              fmt::format("index {} at position [{}, {}] is out of range, expected 0 to {}", v, i, j, s.dims[j] - 1));
          return out;
        }
        linear = linear * s.dims[j] + v;
      }
    }
    if (linear <= prev) {
      out.push_back(
          fmt::format("index at position {} is not in sorted order, expected strictly increasing indices", i));
      return out;
    }
    prev = linear;
  }
  return out;
}


}  // namespace onnxtool
