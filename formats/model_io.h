// model_io.h: loading and saving ONNX models (binary protobuf), with external data.
//
// Loading maps the file; external data files are mapped too and initializers borrow their bytes
// (no copy). Every external reference is untrusted: its location must be relative and stay inside
// the model's folder after resolving `..` and symlinks, and offset/length must lie inside the file.
// Saving is atomic: everything is written to temporary files in the target folder and renamed
// into place, so a failed save leaves no partial file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lib/ir.h"

namespace onnxtool {

struct LoadOptions {
  /// Map external data files and bind tensor bytes. When false, external tensors keep only
  /// their ExternalDataInfo (enough for inspect).
  bool loadExternalData = true;
  /// When false, problems with external data (bad path, out of bounds, missing file) are added
  /// to Model::loadIssues instead of throwing; `check` reports them as findings.
  bool strictExternalData = true;
};

/// Loads a model from `path` ("-" reads standard input). Throws Error(InvalidInput/Io) with a
/// one-line message naming the file on unreadable, truncated or non-ONNX input.
std::unique_ptr<Model> loadModel(const std::string& path, const LoadOptions& options = {});

/// True when `path` names a model in the textual syntax (ends in ".onnxtxt"). loadModel parses
/// text (formats/onnx_text.h) for such a name, and for any file or standard input whose content
/// starts with '<' (the text syntax's model header), and binds external data references beside
/// the file.
bool isTextModelPath(const std::string& path);

/// Writes the model in the textual syntax to `path` ("-" is standard output), atomically.
/// Returns the bytes written.
uint64_t saveModelText(const Model& model, const std::string& path);

/// Loads from bytes already in memory; `baseDir` resolves external data, `displayName` names
/// the source in messages.
std::unique_ptr<Model> loadModelFromBytes(std::string_view bytes, const std::string& baseDir,
                                          const std::string& displayName, const LoadOptions& options = {});

struct SaveOptions {
  enum class ExternalMode {
    Keep,         ///< tensors stay inline or external as loaded (external ones rewritten beside the output)
    Externalize,  ///< tensors of at least sizeThreshold bytes go to one external file
    Inline,       ///< everything inline; fails if the model would exceed protobuf's 2 GiB limit
  };
  ExternalMode mode = ExternalMode::Keep;
  /// External file name, relative to the output's folder; default "<output file name>.data".
  std::string externalFile;
  uint64_t sizeThreshold = 1024;
  /// Refuse to write binary protobuf to a terminal when path is "-" (default true).
  bool refuseTerminal = true;
  /// Tensors of Constant nodes and other attributes are externalized too (default: initializers only).
  bool externalizeAttributes = false;
  /// Largest inline tensor payload before Keep mode switches to external data; 0 means
  /// protobuf's 2 GiB limit less headroom for the graph. Tests lower it.
  uint64_t inlineLimit = 0;
};

/// Saves atomically. A model whose inline serialization would exceed 2 GiB is written with
/// external data automatically in Keep mode. Throws Error on failure, leaving no output file;
/// Error(InvalidInput) before writing anything when the external data file would be the model
/// file itself. Returns the size of the model file (or of what went to standard output).
uint64_t saveModel(const Model& model, const std::string& path, const SaveOptions& options = {});

/// Serializes the whole model inline (all tensor bytes included) into a string.
std::string serializeModel(const Model& model);

/// Parses a TensorProto (`.pb` tensor files, ONNX test data).
Tensor loadTensorProto(std::string_view bytes, const std::string& displayName);
std::string serializeTensorProto(const Tensor& t);

}  // namespace onnxtool
