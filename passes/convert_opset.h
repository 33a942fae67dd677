// convert_opset.h: opset conversion of a model (`onnxtool convert --opset N`, the pass
// `convert-opset{to=N}`). Every node of the converted domains (main graph, subgraphs, model-local
// function bodies) moves from the model's opset to the target one version step at a time: a step
// whose schemas differ only in the types they allow (or that only gained optional inputs, outputs
// or attributes) moves the node as it is when its types and attributes fit the other side; every
// other step goes through the adapter listed for it in passes/opset_adapters.def.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/ir.h"

namespace onnxtool {

/// What to convert: the default domain to `target`, and other domains (only "ai.onnx.ml" is
/// supported) to the versions in `domains`.
struct OpsetConvertOptions {
  int64_t target = 0;                      ///< ai.onnx opset; 0 leaves the domain as it is
  std::map<std::string, int64_t> domains;  ///< "ai.onnx.ml" -> version
  /// On failure, fill NodeReach::lowest/highest (trial conversions to every opset: costs one
  /// conversion per opset; sweeps that only count refusals turn it off).
  bool computeReach = true;
};

/// One node that cannot reach the target, or (dry run) every node with its reachable range.
struct NodeReach {
  std::string graph;   ///< "main", "function DOMAIN.NAME", or "NODE/ATTR" path of a subgraph
  std::string node;    ///< the node's display name
  std::string op;      ///< op type
  std::string domain;  ///< "" for ai.onnx
  int64_t from = 0;    ///< the opset the node is expressed in
  int64_t to = 0;      ///< the requested opset
  std::string reason;  ///< why it cannot move (empty when it can)
  int64_t lowest = 0;  ///< lowest opset (>= 1) this node reaches; 0 when not computed
  int64_t highest = 0; ///< highest opset this node reaches
  std::string key;     ///< stable identity across copies: graph path and node index
};

struct OpsetConvertReport {
  std::vector<NodeReach> blocked;  ///< nodes that cannot reach the target (empty: converted)
  int64_t nodesConverted = 0;      ///< nodes that went through at least one adapter or step
  int64_t adaptersApplied = 0;
  int64_t fromOpset = 0, toOpset = 0;
  int64_t irVersionBefore = 0, irVersionAfter = 0;
};

/// Converts `model` in place. Precondition: nothing; the model is converted on a copy first and
/// only replaced when every node moved, so on failure `model` is unchanged and `blocked` names
/// every node that cannot move (with its reachable range). Throws Error(Unsupported) when a
/// target is beyond the registry (or below 1), Error(InvalidInput) for a model without a graph
/// or a domain the model does not import.
OpsetConvertReport convertOpset(Model& model, const OpsetConvertOptions& options);

/// The dry run: for every node of the converted domains, the lowest and highest opset it can
/// reach (each target tried on a copy), and `reason` why it cannot reach `options.target`.
/// `reachable` receives every default-domain opset the whole model reaches.
std::vector<NodeReach> opsetReach(const Model& model, const OpsetConvertOptions& options,
                                  std::vector<int64_t>* reachable = nullptr);

/// The lowest IR version able to hold a model of ai.onnx opset `opset` (onnx's version table).
int64_t irVersionForOpset(int64_t opset);

}  // namespace onnxtool
