// quantize.cpp: `onnxtool quantize`: shrink a model with int8 weights (standard ONNX ops only) and
// report what accuracy that cost, measured on the reference executor.
#include <algorithm>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/common.h"
#include "exec/executor.h"
#include "formats/atomic_file.h"
#include "formats/model_io.h"
#include "lib/error.h"
#include "lib/input_shapes.h"
#include "passes/convert_opset.h"
#include "quant/dynamic.h"
#include "quant/int4.h"
#include "quant/float16.h"
#include "quant/gptq.h"
#include "quant/qoperator.h"
#include "quant/quant_scheme.h"
#include "quant/smooth_quant.h"
#include "quant/report.h"
#include "quant/static_qdq.h"

namespace onnxtool::app {

namespace {

using json = nlohmann::ordered_json;

struct QuantizeOptions : InputOptions {
  std::string input, output;
  bool int8 = false, dynamic = false, isStatic = false, int4 = false;
  int64_t blockSize = 32;
  bool symmetric = false;  // --symmetric (--int4)
  std::string calibration;        // --calibration DATA
  size_t calibrationSamples = 0;  // --calibration-samples N (0: all)
  std::string method = "minmax";
  std::string format = "qdq";
  int64_t minElements = 16;
  int evalSets = 2;
  bool json = false;
  std::vector<std::string> shapes;
  bool allowNewerOpset = false;
  // Quantization scheme: types, granularity, node selection, target, SmoothQuant.
  std::optional<bool> perChannel;
  std::string weightType, activationType, target = "generic";
  std::string activationScales;  // --activation-scales row|tensor (--dynamic; default row)
  bool noBiasCorrection = false;  // --no-bias-correction (--static)
  std::string biasCorrection = "empirical";  // --bias-correction analytic|empirical|none (--static)
  std::string weightRounding = "gptq";  // --weight-rounding nearest|gptq (--static)
  bool symmetricActivations = false, reduceRange = false, keepIoFloat = true, smoothQuant = false;
  double alpha = 0.5;
  std::vector<std::string> opTypes, exclude;
  // --fp16/--bf16 and the accuracy report (--report, --reference, --eval, --min-cosine).
  bool fp16 = false, bf16 = false, keepIoTypes = false;
  std::vector<std::string> opBlockList;
  bool report = false, reportLayers = false;
  std::string reference;  // --reference FP32MODEL: MODEL is already quantized, report only
  std::string evalData;   // --eval DATA: the evaluation samples (calibration's formats)
  std::optional<double> minCosine;
  bool evalSetsGiven = false;
  bool biasCorrectionGiven = false, weightRoundingGiven = false;
  std::string evalExecutor = "auto";  // --eval-executor
};

DType typeNamed(const std::string& s) {
  if (s == "uint8") return DType::UInt8;
  if (s == "int8") return DType::Int8;
  if (s == "uint16") return DType::UInt16;
  return DType::Int16;
}

/// The scheme flags resolved against the mode and --target (usage errors exit 2).
QuantScheme schemeOf(const QuantizeOptions& o) {
  bool any = o.perChannel || !o.weightType.empty() || !o.activationType.empty() || o.symmetricActivations ||
             o.reduceRange || o.smoothQuant;
  bool selection = !o.opTypes.empty() || !o.exclude.empty() || o.target != "generic";  // --int4 takes these too
  if ((o.int4 && any) || ((o.fp16 || o.bf16) && (any || selection)))
    fail(ErrorKind::InvalidInput,
         "--per-channel/--per-tensor, --weight-type, --activation-type, --symmetric-activations, --reduce-range, "
         "--smooth-quant (and but for --int4 --op-types, --exclude and --target) apply to --int8");
  if (o.int4)
    for (const std::string& op : o.opTypes)
      if (op != "MatMul" && op != "Gemm" && op != "Gather")
        fail(ErrorKind::InvalidInput, "--op-types {}: not an op --int4 quantizes (MatMul, Gemm, Gather)", op);
  if (o.symmetric && !o.int4) fail(ErrorKind::InvalidInput, "--symmetric applies to --int4 (--int8 weights are symmetric; see --symmetric-activations)");
  if (o.smoothQuant && !o.isStatic && o.calibration.empty())
    fail(ErrorKind::InvalidInput, "--smooth-quant is calibrated: it needs --static, or --dynamic with --calibration DATA");
  QuantRequest r;
  r.target = o.target == "ort" ? QuantTarget::Ort : o.target == "trt" ? QuantTarget::Trt : QuantTarget::Generic;
  r.dynamic = o.dynamic;
  r.qoperator = o.format == "qoperator";
  if (!o.weightType.empty()) r.weightType = typeNamed(o.weightType);
  if (!o.activationType.empty()) r.activationType = typeNamed(o.activationType);
  r.perChannel = o.perChannel;
  r.symmetricActivations = o.symmetricActivations;
  r.reduceRange = o.reduceRange;
  if (!o.int4) r.opTypes = o.opTypes;  // --int4 has its own set (Gather too): Int4QuantizeOptions
  r.exclude = o.exclude;
  return resolveScheme(r);
}

/// Whether two input sets hold the same tensors.
bool sameInputs(const std::map<std::string, RtValue>& a, const std::map<std::string, RtValue>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end() || !v.isTensor() || !it->second.isTensor()) return false;
    const RtTensor &x = *v.tensor, &y = *it->second.tensor;
    if (x.dtype() != y.dtype() || x.dims != y.dims || x.raw.size() != y.raw.size() ||
        (x.raw.size() && std::memcmp(x.raw.data(), y.raw.data(), x.raw.size()) != 0))
      return false;
  }
  return true;
}

/// The evaluation input sets: random ones from the shared generator, every set holding the -i
/// files (a control input such as an audio model's sample rate must keep its one valid value);
/// one set when -i gives every input.
std::vector<std::map<std::string, RtValue>> randomSets(const Model& m, const QuantizeOptions& o) {
  std::vector<std::map<std::string, RtValue>> sets;
  for (int s = 0; s < o.evalSets; ++s) {
    ModelInputOptions in = modelInputOptions(o);
    in.random = true;
    in.seed = o.seed.value_or(0) + static_cast<uint64_t>(s);
    auto set = gatherModelInputs(*m.graph, in);
    if (s == 1 && sameInputs(set, sets.front())) break;  // nothing random: the sets would repeat
    sets.push_back(std::move(set));
  }
  return sets;
}

/// The evaluation samples of --eval DATA (at most --eval-sets when given), else the random sets.
std::vector<std::map<std::string, RtValue>> evalSamples(const Model& m, const QuantizeOptions& o) {
  if (o.evalSetsGiven && o.evalSets == 0) return {};
  if (!o.evalData.empty()) return readCalibrationData(*m.graph, o.evalData, o.evalSetsGiven ? static_cast<size_t>(o.evalSets) : 0);
  return randomSets(m, o);
}

std::string sqnrText(double db) { return std::isinf(db) ? (db > 0 ? "inf" : "-inf") : fmt::format("{:.2f}", db); }

json sqnrJson(double db) { return std::isinf(db) ? json(db > 0 ? "inf" : "-inf") : json(db); }

json errorJson(const TensorError& e) {
  json j{{"name", e.name}};
  if (e.kind != "output") j.update({{"tensor", e.candidate}, {"kind", e.kind}, {"op", e.op}, {"order", e.order}});
  j.update({{"cosine_similarity", e.stats.cosine()},
            {"max_abs_diff", e.stats.maxAbs},
            {"mean_abs_diff", e.stats.meanAbs()},
            {"sqnr_db", sqnrJson(e.stats.sqnrDb())},
            {"max_abs_reference", e.stats.maxRef},
            {"elements", e.stats.count},
            {"non_finite_mismatches", e.stats.nonFinite}});
  return j;
}

json reportJson(const AccuracyReport& r, const std::string& source, const QuantizeOptions& o) {
  json outs = json::array(), layers = json::array();
  for (const TensorError& e : r.outputs) outs.push_back(errorJson(e));
  for (const TensorError& e : r.layers) layers.push_back(errorJson(e));
  json j{{"input_sets", r.samples}, {"source", source}, {"random", source == "random"}, {"outputs", outs}};
  if (o.reportLayers) j["layers"] = layers;
  if (o.minCosine) j["min_cosine"] = {{"threshold", *o.minCosine}, {"lowest", r.minCosine()}, {"passed", r.minCosine() >= *o.minCosine}};
  return j;
}

/// The --report tables (stdout): per output, then with --report-layers per compared tensor in
/// execution order, flagging ("<<") each tensor whose SQNR falls 3 dB or more below every one before.
void printReport(const AccuracyReport& r, const std::string& source, std::FILE* out) {
  if (r.outputs.empty()) {
    std::fputs("accuracy: not measured (nothing was quantized, or no evaluation sets)\n", out);
    return;
  }
  std::string s = fmt::format("accuracy on {} {} input set{}:\n", r.samples, source, r.samples == 1 ? "" : "s");
  size_t w = 6;
  for (const TensorError& e : r.outputs) w = std::max(w, e.name.size());
  s += fmt::format("  {:<{}}  {:>10}  {:>10}  {:>10}  {:>8}\n", "output", w, "max abs", "mean abs", "cosine", "SQNR dB");
  for (const TensorError& e : r.outputs)
    s += fmt::format("  {:<{}}  {:>10.4g}  {:>10.4g}  {:>10.6f}  {:>8}\n", e.name, w, e.stats.maxAbs, e.stats.meanAbs(),
                     e.stats.cosine(), sqnrText(e.stats.sqnrDb()));
  if (!r.layers.empty()) {
    size_t lw = 6;
    for (const TensorError& e : r.layers) lw = std::min<size_t>(std::max(lw, e.name.size()), 48);
    s += fmt::format("layers ({}, in execution order; << marks an activation whose SQNR is 3 dB or more below every one before):\n", r.layers.size());
    s += fmt::format("  {:>5}  {:<{}}  {:<10}  {:<16}  {:>10}  {:>10}  {:>8}\n", "order", "tensor", lw, "kind", "op", "max abs",
                     "cosine", "SQNR dB");
    // Weights have their own scale of error: the marks follow the activations and op outputs.
    double low = std::numeric_limits<double>::infinity();
    bool first = true;
    for (const TensorError& e : r.layers) {
      double db = e.stats.sqnrDb();
      bool jump = false;
      if (e.kind != "weight" && e.stats.count > 0) {
        jump = !first && db <= low - 3;
        low = first ? db : std::min(low, db);
        first = false;
      }
      s += fmt::format("  {:>5}  {:<{}}  {:<10}  {:<16}  {:>10.4g}  {:>10.6f}  {:>8}{}\n", e.order, e.name, lw, e.kind, e.op,
                       e.stats.maxAbs, e.stats.cosine(), sqnrText(db), jump ? "  <<" : "");
    }
  }
  std::fputs(s.c_str(), out);
}

/// --min-cosine: kFinding (after a line on stderr) when an output's cosine similarity is below it.
int cosineGate(const AccuracyReport& r, const QuantizeOptions& o) {
  if (!o.minCosine || r.minCosine() >= *o.minCosine) return kOk;
  for (const TensorError& e : r.outputs)
    if (e.stats.cosine() < *o.minCosine || e.stats.nonFinite)
      fmt::print(stderr, "onnxtool: output '{}': cosine similarity {:.6f} is below --min-cosine {}\n", e.name, e.stats.cosine(),
                 *o.minCosine);
  return kFinding;
}

/// `quantize QMODEL --reference FP32MODEL --report`: compares an already quantized model.
int runReportOnly(const QuantizeOptions& o) {
  auto specs = parseInputShapes(o.shapes);
  auto candidate = loadModel(o.input);
  auto reference = loadModel(o.reference);
  for (Model* m : {candidate.get(), reference.get()}) {
    if (!m->graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", m->path);
    requireKnownOpsets(*m, o.allowNewerOpset);
    applyInputShapes(*m, specs);
  }
  if (o.evalSets == 0) fail(ErrorKind::InvalidInput, "--eval-sets 0 leaves nothing to report on");
  auto samples = evalSamples(*reference, o);
  AccuracyReport r = compareModels(*reference, *candidate, samples, o.reportLayers, reportExecutor(o.evalExecutor, *candidate));
  std::string source = o.evalData.empty() ? "random" : "evaluation";
  if (o.json) {
    json doc{{"schema_version", 1}, {"model", o.input}, {"reference", o.reference}, {"mode", "report"},
             {"evaluation", reportJson(r, source, o)}};
    std::fputs((doc.dump(2) + "\n").c_str(), stdout);
  } else {
    printReport(r, source, stdout);
  }
  return cosineGate(r, o);
}

/// --fp16/--bf16.
Float16Report runFloat16(Model& model, const QuantizeOptions& o) {
  Float16Options fo;
  fo.target = o.bf16 ? DType::BFloat16 : DType::Float16;
  fo.keepIoTypes = o.keepIoTypes;
  fo.opBlockList = o.opBlockList;
  Float16Report fr = convertToFloat16(model, fo);
  if (fr.clamped)
    spdlog::warn("{} weight values beyond the {} range (up to {:.4g}) were clamped to its largest finite value", fr.clamped,
                 o.bf16 ? "bfloat16" : "float16", fr.largestClamped);
  if (fr.flushedToZero) spdlog::info("{} tiny weight values became 0 in float16", fr.flushedToZero);
  for (const std::string& k : fr.kept) spdlog::info("kept float32: {}", k);
  return fr;
}

int runQuantize(const QuantizeOptions& o) {
  bool half = o.fp16 || o.bf16;
  if (!o.int8 && !o.int4 && !half && !o.reference.empty()) return runReportOnly(o);
  if (!o.reference.empty())
    fail(ErrorKind::InvalidInput, "--reference FP32MODEL reports on an already quantized MODEL: it takes none of --int8, --int4, --fp16, --bf16");
  if (o.fp16 && o.bf16) fail(ErrorKind::InvalidInput, "choose one of --fp16 and --bf16");
  if (half && (o.int8 || o.int4 || o.dynamic || o.isStatic))
    fail(ErrorKind::InvalidInput, "--{} converts float types: it takes none of --int8, --int4, --dynamic, --static", o.fp16 ? "fp16" : "bf16");
  if (!half && (o.keepIoTypes || !o.opBlockList.empty()))
    fail(ErrorKind::InvalidInput, "--keep-io-types and --op-block-list apply to --fp16 and --bf16");
  if ((o.report || o.reportLayers || o.minCosine) && o.evalSets == 0)
    fail(ErrorKind::InvalidInput, "--report, --report-layers and --min-cosine need evaluation input sets (--eval-sets 0 given)");
  if (!o.int8 && !o.int4 && !half)
    fail(ErrorKind::InvalidInput,
         "choose a quantization: --int8 --dynamic, --int8 --static --calibration DATA, --int4, --fp16 or --bf16 (or "
         "--reference FP32MODEL to report on a quantized MODEL)");
  if (o.output.empty()) fail(ErrorKind::InvalidInput, "-o/--output OUT is required");
  if (o.int4 && (o.int8 || o.dynamic || o.isStatic))
    fail(ErrorKind::InvalidInput, "--int4 is weight-only: it takes none of --int8, --dynamic, --static");
  if (o.int8 && o.dynamic == o.isStatic) fail(ErrorKind::InvalidInput, "--int8 needs exactly one of --dynamic and --static");
  if (o.int4 && (o.blockSize < 16 || (o.blockSize & (o.blockSize - 1)) != 0))
    fail(ErrorKind::InvalidInput, "--block-size {}: expected a power of 2, 16 or more", o.blockSize);
  if (o.isStatic && o.calibration.empty())
    fail(ErrorKind::InvalidInput, "--static needs --calibration DATA (test_data_set_* folders, .npz files, or one .npz with a sample axis)");
  if (!o.isStatic && !o.calibration.empty() && !(o.dynamic && o.smoothQuant) && !o.int4)
    fail(ErrorKind::InvalidInput, "--calibration applies to --static, --int4 (GPTQ rounding), and --dynamic with --smooth-quant");
  if (!o.activationScales.empty() && !o.dynamic)
    fail(ErrorKind::InvalidInput, "--activation-scales applies to --dynamic (--static calibrates one scale per tensor)");
  if (o.noBiasCorrection && !o.isStatic) fail(ErrorKind::InvalidInput, "--no-bias-correction applies to --static");
  if (o.biasCorrectionGiven && !o.isStatic) fail(ErrorKind::InvalidInput, "--bias-correction applies to --static");
  if (o.noBiasCorrection && o.biasCorrectionGiven && o.biasCorrection != "none")
    fail(ErrorKind::InvalidInput, "--no-bias-correction contradicts --bias-correction {}", o.biasCorrection);
  const std::string biasCorrection = o.noBiasCorrection ? "none" : o.biasCorrection;
  if (o.weightRoundingGiven && !o.isStatic && !o.int4) fail(ErrorKind::InvalidInput, "--weight-rounding applies to --static and --int4");
  if (o.int4 && o.weightRoundingGiven && o.weightRounding == "gptq" && o.calibration.empty())
    fail(ErrorKind::InvalidInput, "--int4 --weight-rounding gptq needs --calibration DATA");
  if (!o.isStatic && o.format == "qoperator")
    fail(ErrorKind::InvalidInput,
         "--format qoperator applies to --static (the --dynamic form already uses the integer operators "
         "DynamicQuantizeLinear and MatMulInteger)");
  QuantScheme scheme = schemeOf(o);
  auto specs = parseInputShapes(o.shapes);
  auto model = loadModel(o.input);
  if (!model->graph) fail(ErrorKind::InvalidInput, "{}: the model has no graph", o.input);
  requireKnownOpsets(*model, o.allowNewerOpset);
  applyInputShapes(*model, specs);
  const ModelValidity inputValidity = validityOf(*model);
  auto original = o.evalSets > 0 || !o.evalData.empty() ? loadModel(o.input) : nullptr;
  if (original) applyInputShapes(*original, specs);
  for (const std::string& e : unmatchedExcludes(*model->graph, scheme))
    spdlog::warn("--exclude {}: no node of the main graph has this name or op type", e);
  bool wide = scheme.activationType == DType::Int16 || scheme.activationType == DType::UInt16;
  const bool nbits = o.int4 && o.target == "ort";  // --int4 --target ort: com.microsoft MatMulNBits, any opset
  // Gather tables take a blocked DequantizeLinear in both forms.
  const bool int4Gather = std::find(o.opTypes.begin(), o.opTypes.end(), "Gather") != o.opTypes.end();
  // The opset each form needs: 16-bit and blocked 4-bit QuantizeLinear/DequantizeLinear are
  // opset 21, per-channel (axis) ones 13, DynamicQuantizeLinear and MatMulInteger 11. An older
  // model is moved there first (as ONNX Runtime's quantizer does), never refused for its age.
  std::string why;
  int64_t need = 0;
  if (o.isStatic && wide) why = "--activation-type " + o.activationType, need = 21;
  else if (o.int4 && (!nbits || int4Gather)) why = "--int4", need = 21;
  else if (o.isStatic) why = "--int8 --static", need = 13;
  else if (o.int8) why = "--int8 --dynamic", need = 11;
  if (need && model->opsetVersion("").value_or(0) < need) {
    OpsetConvertOptions c;
    c.target = need;
    c.computeReach = false;
    OpsetConvertReport cr = convertOpset(*model, c);
    if (!cr.blocked.empty())
      fail(ErrorKind::Unsupported, "{} needs opset {}, and node '{}' ({}) cannot move there: {}", why, need, cr.blocked[0].node,
           cr.blocked[0].op, cr.blocked[0].reason);
    spdlog::info("converted opset {} -> {} for {}", cr.fromOpset, need, why);
  }
  SmoothQuantReport smooth;

  DynamicQuantizeReport r;
  std::vector<std::map<std::string, RtValue>> evalSets;
  std::string mode = "int8-dynamic";
  std::vector<std::string> keptQdq;  // --format qoperator: quantized nodes left in the QDQ form
  int64_t converted = 0, biases = 0, corrected = 0;
  int64_t gptqLayers = 0;  // --weight-rounding gptq: weights GPTQ rounded
  int64_t empirical = 0;   // --bias-correction empirical: layers corrected
  double gptqRatio = 1;    // their output error / nearest rounding's (mean over layers)
  int64_t casts = 0;  // --fp16/--bf16: Casts at the float32 borders
  if (o.isStatic) {
    mode = "int8-static-qdq";
    auto samples = readCalibrationData(*model->graph, o.calibration, o.calibrationSamples);
    if (o.smoothQuant) smooth = smoothQuant(*model, samples, o.alpha, scheme, o.minElements);
    auto activations = activationsToCalibrate(*model, scheme);
    if (o.format == "qoperator")  // QLinearMatMul/QLinearConv also need their outputs' ranges
      for (const std::string& y : outputsToCalibrate(*model))
        if (std::find(activations.begin(), activations.end(), y) == activations.end()) activations.push_back(y);
    bool tty = ::isatty(2);
    if (!(spdlog::get_level() >= spdlog::level::err) && tty)
      fmt::print(stderr, "calibrating {} activations on {} samples...\n", activations.size(), samples.size());
    CalibrationMethod cm;
    if (o.method == "entropy") cm.kind = CalibrationMethod::Kind::Entropy;
    if (o.method == "mse") cm.kind = CalibrationMethod::Kind::Mse;
    if (o.method.rfind("percentile", 0) == 0) {
      cm.kind = CalibrationMethod::Kind::Percentile;
      if (o.method.size() > 10) {
        std::string p = o.method.substr(11);
        char* end = nullptr;
        cm.percentile = std::strtod(p.c_str(), &end);
        if (o.method[10] != ':' || p.empty() || *end || !(cm.percentile > 50 && cm.percentile <= 100))
          fail(ErrorKind::InvalidInput, "--method {}: expected percentile or percentile:P with 50 < P <= 100", o.method);
      }
    }
    auto ranges = calibrateRanges(*model, activations, samples, cm);
    PresetWeights preset;
    if (o.weightRounding == "gptq") {
      if (!(spdlog::get_level() >= spdlog::level::err) && tty)
        fmt::print(stderr, "rounding weights by GPTQ on {} samples...\n", samples.size());
      GptqReport gr = roundWeightsGptq(*model, samples, scheme, o.minElements, preset);
      for (const std::string& s : gr.skipped) spdlog::info("GPTQ skipped {}", s);
      spdlog::info("GPTQ: {} layers ({} kept nearest rounding), {} passes; output error {:.3f} of nearest rounding's (mean over layers)",
                   gr.layers, gr.keptNearest, gr.passes, gr.meanErrorRatio);
      gptqLayers = gr.layers - gr.keptNearest;
      gptqRatio = gr.meanErrorRatio;
    }
    if (biasCorrection != "none") {
      int64_t own = giveOwnBiases(*model, scheme, o.minElements);
      if (own) spdlog::info("{} layers got a bias of their own (none, shared or behind an Identity)", own);
    }
    // The float model as quantization found it (preprocessed, smoothed: the same value names),
    // before the weight-only correction moves its biases: empirical correction's reference.
    std::unique_ptr<Model> floatRef;
    if (biasCorrection == "empirical") floatRef = loadModelFromBytes(serializeModel(*model), model->baseDir.empty() ? "." : model->baseDir, o.input);
    if (biasCorrection != "none") {
      BiasCorrectionReport bc = correctBiases(*model, samples, scheme, o.minElements, &preset);
      corrected = bc.corrected;
      for (const std::string& s : bc.skipped) spdlog::info("bias not corrected: {}", s);
      spdlog::info("bias correction: {} layers", bc.corrected);
    }
    StaticQuantizeReport sr = quantizeStaticQdq(*model, ranges, o.minElements, scheme, &preset);
    biases = sr.biasesQuantized;
    if (floatRef) {
      if (!(spdlog::get_level() >= spdlog::level::err) && tty)
        fmt::print(stderr, "correcting output means layer by layer on {} samples...\n", samples.size());
      // At most 128 samples, evenly spaced: the per-channel means of 128 inputs' worth of pixels
      // or tokens are settled, and each layer costs a pass (EfficientNet-Lite0 with 120 photo
      // views: 32 evenly spaced samples gave mean logit cosine 0.99847, all 120 0.99855).
      EmpiricalBiasReport er = correctBiasesEmpirically(*model, *floatRef, samples, 128);
      for (const std::string& s : er.skipped) spdlog::info("empirical bias correction skipped {}", s);
      spdlog::info("empirical bias correction: {} layers in {} passes, mean |shift| {:.4g}", er.corrected, er.passes, er.meanShift);
      empirical = er.corrected;
    }
    if (wide) mode = "int16-static-qdq";
    if (o.format == "qoperator") {
      mode = "int8-static-qoperator";
      QOperatorReport qr = convertQdqToQOperator(*model, ranges, scheme);
      keptQdq = qr.kept;
      converted = qr.nodesConverted;
    }
    r.nodesQuantized = sr.nodesQuantized;
    r.weightsQuantized = sr.weightsQuantized;
    r.floatWeightBytes = sr.floatWeightBytes;
    r.int8WeightBytes = sr.int8WeightBytes;
    r.skipped = sr.skipped;
    // Evaluated on the calibration samples: the data the model is meant for, where random inputs
    // could fall outside every calibrated range.
    if (o.evalData.empty())
      for (size_t i = 0; i < samples.size() && static_cast<int>(i) < o.evalSets; ++i) evalSets.push_back(samples[i]);
    else
      evalSets = evalSamples(*original, o);
  } else if (half) {
    mode = o.fp16 ? "fp16" : "bf16";
    Float16Report fr = runFloat16(*model, o);
    r.nodesQuantized = fr.nodesConverted;
    r.weightsQuantized = fr.initializersConverted;
    r.floatWeightBytes = fr.floatWeightBytes;
    r.int8WeightBytes = fr.halfWeightBytes;
    r.skipped = fr.kept;
    casts = fr.castsInserted;
    if (original) evalSets = evalSamples(*original, o);
  } else if (o.int4) {
    mode = "int4-weight-only";
    Int4QuantizeOptions qo;
    qo.blockSize = o.blockSize;
    qo.minElements = o.minElements;
    qo.symmetric = o.symmetric;
    qo.matmulNBits = nbits;
    if (!o.opTypes.empty()) qo.opTypes = o.opTypes;
    qo.exclude = o.exclude;
    if (nbits) mode = "int4-matmulnbits";
    std::vector<std::map<std::string, RtValue>> samples;
    if (!o.calibration.empty() && o.weightRounding == "gptq") {
      samples = readCalibrationData(*model->graph, o.calibration, o.calibrationSamples);
      if (!(spdlog::get_level() >= spdlog::level::err) && ::isatty(2))
        fmt::print(stderr, "rounding weights by GPTQ on {} samples...\n", samples.size());
      qo.calibration = &samples;
    }
    r = quantizeInt4(*model, qo);
    gptqLayers = r.gptqLayers;
    gptqRatio = r.gptqErrorRatio;
    if (original) evalSets = evalSamples(*original, o);
  } else {
    if (o.smoothQuant) {  // only where a LayerNormalization writes the activation (see smooth_quant.h)
      auto samples = readCalibrationData(*model->graph, o.calibration, o.calibrationSamples);
      smooth = smoothQuant(*model, samples, o.alpha, scheme, o.minElements, /*normOutputsOnly=*/true);
    }
    DynamicQuantizeOptions qo;
    qo.minElements = o.minElements;
    qo.scheme = scheme;
    qo.rowScales = o.activationScales != "tensor";
    r = quantizeDynamic(*model, qo);
    if (original) evalSets = evalSamples(*original, o);
  }
  for (const std::string& s : r.skipped) spdlog::info("kept float: {}", s);
  for (const std::string& s : keptQdq) spdlog::info("kept in the QDQ form: {}", s);
  for (const std::string& s : smooth.skipped) spdlog::info("not smoothed: {}", s);
  if (o.smoothQuant)
    spdlog::info("smooth-quant (alpha {}): {} layers, {} scales folded into LayerNormalization, {} Mul nodes", o.alpha,
                 smooth.layers, smooth.folded, smooth.muls);
  AccuracyReport acc;
  if (original && r.nodesQuantized > 0 && !evalSets.empty()) acc = compareModels(*original, *model, evalSets, o.reportLayers, reportExecutor(o.evalExecutor, *model));
  std::string source = !o.evalData.empty() ? "evaluation" : o.isStatic ? "calibration" : "random";
  requireValidOutput(*model, inputValidity, "quantize");
  uint64_t size = saveModel(*model, o.output);
  bool quiet = spdlog::get_level() >= spdlog::level::err;
  std::FILE* dataOut = o.output == "-" ? stderr : stdout;
  if (o.json) {
    json doc{{"schema_version", 1},
             {"model", o.input},
             {"output", o.output},
             {"mode", mode},
             {"nodes_quantized", r.nodesQuantized},
             {"weights_quantized", r.weightsQuantized},
             {"float_weight_bytes", r.floatWeightBytes},
             {"int8_weight_bytes", r.int8WeightBytes},
             {"input_size", model->fileSize},
             {"output_size", size},
             {"skipped", r.skipped},
             {"qoperator_nodes", converted},
             {"kept_qdq", keptQdq},
             {"biases_quantized", biases},
             {"biases_corrected", corrected},
             {"bias_correction", {{"method", o.isStatic ? biasCorrection : std::string("none")}, {"empirical_layers", empirical}}},
             {"weight_rounding", {{"method", o.isStatic || (o.int4 && !o.calibration.empty()) ? o.weightRounding : std::string(o.int4 ? "nearest" : "none")}, {"layers", gptqLayers}, {"error_ratio", gptqRatio}}},
             {"scheme", {{"target", o.target},
                         {"weight_type", std::string(dtypeName(scheme.weightType))},
                         {"activation_type", o.dynamic ? std::string("uint8") : std::string(dtypeName(scheme.activationType))},
                         {"activation_scales", o.dynamic ? (o.activationScales == "tensor" ? "tensor" : "row") : "tensor"},
                         {"symmetric_activations", scheme.symmetricActivations},
                         {"per_channel", scheme.perChannel},
                         {"reduce_range", scheme.reduceRange}}},
             {"smooth_quant", {{"enabled", o.smoothQuant}, {"alpha", o.alpha}, {"layers", smooth.layers},
                               {"folded_into_layer_norm", smooth.folded}, {"muls", smooth.muls}}}};
    if (half) doc["casts_inserted"] = casts;
    doc["evaluation"] = reportJson(acc, source, o);
    std::fputs((doc.dump(2) + "\n").c_str(), dataOut);
  } else {
    if (!quiet) {
      if (half)
        fmt::print(stderr, "converted {} nodes to {} ({} initializers): {:.1f} MiB of float32 weights -> {:.1f} MiB; {} kept float32, {} Casts\n",
                   r.nodesQuantized, o.fp16 ? "float16" : "bfloat16", r.weightsQuantized, r.floatWeightBytes / 1048576.0,
                   r.int8WeightBytes / 1048576.0, r.skipped.size(), casts);
      else
        fmt::print(stderr, "quantized {} nodes ({} weights): {:.1f} MiB of float weights -> {:.1f} MiB {}; {} kept float\n",
                   r.nodesQuantized, r.weightsQuantized, r.floatWeightBytes / 1048576.0, r.int8WeightBytes / 1048576.0,
                   o.int4 ? "int4" : "int8", r.skipped.size());
    }
    if (o.report || o.reportLayers) {
      printReport(acc, source, dataOut);
    } else if (!quiet) {
      for (const TensorError& a : acc.outputs)
        fmt::print(stderr,
                   "accuracy of '{}' on {} {} input set{}: cosine similarity {:.6f}, max abs diff {:.3g} (outputs up to {:.3g}), "
                   "mean abs diff {:.3g}, SQNR {} dB\n",
                   a.name, evalSets.size(), source, evalSets.size() == 1 ? "" : "s", a.stats.cosine(), a.stats.maxAbs,
                   a.stats.maxRef, a.stats.meanAbs(), sqnrText(a.stats.sqnrDb()));
    }
  }
  return cosineGate(acc, o);
}

}  // namespace

std::function<int()> addQuantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* sub = app.add_subcommand("quantize", "Shrink a model with int8 weights (standard ONNX ops) and report the accuracy cost");
  sub->add_option("MODEL", o->input, "Input model (.onnx, - for stdin)")->required();
  sub->add_option("-o,--output", o->output, "Output model (- for stdout); required unless --reference");
  sub->add_flag("--int8", o->int8, "Quantize to int8");
  sub->add_flag("--int4", o->int4,
                "Weight-only 4-bit: MatMul/Gemm weights with one scale (and zero point) per --block-size values along "
                "K per output column, behind a blocked DequantizeLinear (opset 21; the model is converted up as needed), "
                "or ONNX Runtime's MatMulNBits with --target ort; activations stay float");
  sub->add_option("--block-size", o->blockSize, "With --int4: values along K per scale (default 32; a power of 2, 16 or more)");
  sub->add_flag("--symmetric", o->symmetric,
                "With --int4: int4 in [-7, 7] with scale max|block|/7 and no zero point (default: uint4 over "
                "[min(0,block), max(0,block)] with a zero point per block)");
  sub->add_flag("--dynamic", o->dynamic,
                "Dynamic quantization: MatMul/Gemm weights to int8 (per output column, symmetric), activations "
                "quantized at run time to uint8, one scale and zero point per row (per token) by default (standard ops + "
                "MatMulInteger, opset 11+; see --activation-scales)");
  sub->add_flag("--no-bias-correction", o->noBiasCorrection,
                "With --static: keep the float biases as they are (same as --bias-correction none)");
  sub->add_option("--bias-correction", o->biasCorrection,
                  "With --static: empirical (default: the analytic correction, then each layer's output mean per channel "
                  "in the quantized model matched to the float model's on the calibration samples (at most 128, evenly "
                  "spaced), layer after layer: also takes back the shifts that rounding and clipping of activations "
                  "cause; a pass over the samples per layer or group of parallel layers), analytic (each Conv/Gemm/"
                  "MatMul+Add bias takes back the mean shift its int8 weight causes, (Wq - W) . E[x]) or none (same as "
                  "--no-bias-correction)")
      ->check(CLI::IsMember({"analytic", "empirical", "none"}))
      ->each([o](const std::string&) { o->biasCorrectionGiven = true; });
  sub->add_option("--weight-rounding", o->weightRounding,
                  "With --static, and --int4 with --calibration: gptq (default: GPTQ, the weights of each output channel rounded one input at a time, "
                  "each rounding error spread over the inputs not yet rounded through the inputs' correlations on the "
                  "calibration samples, so that the layer's output moves least; same scales and format) or nearest (each "
                  "weight to its nearest integer: faster to quantize)")
      ->check(CLI::IsMember({"nearest", "gptq"}))
      ->each([o](const std::string&) { o->weightRoundingGiven = true; });
  sub->add_option("--activation-scales", o->activationScales,
                  "With --dynamic: row (default: a scale and zero point per row of each MatMul/Gemm input, computed with "
                  "ReduceMax/ReduceMin/Div/Round/Clip/Cast, the zero point taken off MatMulInteger's int32 result) or "
                  "tensor (one per tensor by DynamicQuantizeLinear: the form ONNX Runtime fuses, less accurate on "
                  "transformers; Conv always uses it)")
      ->check(CLI::IsMember({"row", "tensor"}));
  sub->add_flag("--static", o->isStatic,
                "Static quantization in the QDQ format: QuantizeLinear/DequantizeLinear around the activations "
                "MatMul/Gemm/Conv read (ranges from --calibration) and int8 weights per output channel, biases corrected for their mean shift (opset 13+; see --no-bias-correction)");
  sub->add_option("--calibration", o->calibration,
                  "With --static (or --dynamic --smooth-quant): a folder of test_data_set_*/input_*.pb or of .npz files "
                  "(a sample each), or one .npz whose arrays have a leading sample axis")
      ->type_name("DATA");
  sub->add_option("--calibration-samples", o->calibrationSamples, "Use at most N calibration samples (default: all)")
      ->check(nonNegative());
  sub->add_option("--format", o->format,
                  "With --static: qdq (default: QuantizeLinear/DequantizeLinear pairs around float ops) or qoperator "
                  "(QLinearMatMul/QLinearConv with calibrated output scales; Gemm with a bias stays QDQ)")
      ->check(CLI::IsMember({"qdq", "qoperator"}));
  sub->add_option("--method", o->method,
                  "Calibration: minmax (default), entropy (KL divergence over histograms), percentile[:P] (keep P% "
                  "of the values, default 99.999) or mse (the range whose uint8 quantization has the least mean "
                  "squared error, clipping included)")
      ->check([](const std::string& m) {
        return m == "minmax" || m == "entropy" || m == "mse" || m.rfind("percentile", 0) == 0
                   ? std::string()
                   : "expected minmax, entropy, mse or percentile[:P]";
      });
  sub->add_option("--min-elements", o->minElements, "Weights with fewer elements stay float (default 16)")->check(nonNegative());
  sub->add_option("--eval-executor", o->evalExecutor,
                  "Executor of the accuracy report: auto (default: cpu, or ref for a float16/bfloat16 model, whose "
                  "per-op rounding the cpu executor would hide by computing in float32), cpu or ref (the spec's "
                  "semantics exactly, much slower on large models)")
      ->check(CLI::IsMember({"auto", "cpu", "ref"}));
  sub->add_option("--eval-sets", o->evalSets,
                  "Input sets on which to compare the quantized model with the original (--eval-executor): "
                  "random ones for --dynamic, the first calibration samples for --static (default 2; 0 skips the report)")
      ->check(CLI::Range(0, 1000));
  sub->add_option("-i,--input", o->inputs, "Evaluation input FILE or NAME=FILE, held in every random evaluation set (.npy, .pb, .npz, .json)")
      ->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--seed", o->seed, "Seed of the random evaluation inputs (default 0)")->check(nonNegative());
  addShapeOption(sub, o->shapes);
  addAllowNewerOpsetOption(sub, o->allowNewerOpset);
  sub->add_flag("--json", o->json, "One JSON document on stdout (stderr when -o -): counts, sizes, per-output accuracy");
  // --- quantization scheme: types, granularity, node selection, target, SmoothQuant
  auto* pc = sub->add_flag_callback("--per-channel", [o] { o->perChannel = true; },
                                    "Weights with one scale per output channel (the default): Conv axis 0, MatMul axis 1, "
                                    "Gemm axis 0 with transB, else 1");
  sub->add_flag_callback("--per-tensor", [o] { o->perChannel = false; }, "Weights with one scale per tensor")->excludes(pc);
  sub->add_option("--weight-type", o->weightType,
                  "int8 (default: symmetric, zero point 0) or uint8 (asymmetric over [min(0,w), max(0,w)])")
      ->check(CLI::IsMember({"int8", "uint8"}));
  sub->add_option("--activation-type", o->activationType,
                  "uint8 (default; int8 for --target trt), int8, or with --static uint16/int16 (QDQ at opset 21, "
                  "the model converted up as needed)")
      ->check(CLI::IsMember({"uint8", "int8", "uint16", "int16"}));
  sub->add_flag("--symmetric-activations", o->symmetricActivations,
                "With --static: activation zero point 0 (signed) or 128/32768 (unsigned), scale max|x|/127 (32767)");
  sub->add_flag("--reduce-range", o->reduceRange,
                "Weights in 7 bits (int8 [-64, 64], uint8 [0, 127]): no int16 overflow in u8s8 kernels without VNNI");
  sub->add_option("--op-types", o->opTypes, "Quantize only these ops (comma-separated: Conv,MatMul,Gemm; with --dynamic also Gather, an embedding table "
                  "(int8 per row; default MatMul,Gemm,Gather); with --int4 MatMul,Gemm (default) and Gather)")
      ->delimiter(',')->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("OP,...");
  sub->add_option("--exclude", o->exclude, "Keep float these nodes, by node name or op type (comma-separated, repeatable)")
      ->delimiter(',')->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("NODE_OR_OP,...");
  sub->add_flag("--keep-io-float", o->keepIoFloat,
                "Graph inputs and outputs keep their float types (the default, and the only mode: the first "
                "QuantizeLinear reads the float input, the last DequantizeLinear writes the float output)");
  sub->add_option("--target", o->target,
                  "generic (default: what the options ask), ort (only types ONNX Runtime's CPU kernels implement) or trt "
                  "(TensorRT: --static QDQ only, int8 symmetric activations and weights, per-channel weights, float bias); "
                  "with --int4, ort writes com.microsoft MatMulNBits (any opset) instead of blocked DequantizeLinear")
      ->check(CLI::IsMember({"generic", "ort", "trt"}));
  sub->add_flag("--smooth-quant", o->smoothQuant,
                "With --static: migrate activation outliers into the weights first (per input channel j, "
                "s_j = max|X_j|^alpha / max|W_j|^(1-alpha), folded into LayerNormalization or an explicit Mul); with "
                "--dynamic --calibration DATA: the same for the activations LayerNormalization writes");
  sub->add_option("--alpha", o->alpha, "With --smooth-quant: the migration strength in [0, 1] (default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  // --fp16/--bf16 and the accuracy report.
  sub->add_flag("--fp16", o->fp16,
                "Convert float32 weights and computation to float16 where the op's schema allows it; the rest (Resize "
                "scales/roi, Range, shape computations, If/Loop/Scan with their bodies, --op-block-list) stays float32 "
                "with Casts at the borders; weights beyond +-65504 are clamped with a warning");
  sub->add_flag("--bf16", o->bf16, "Like --fp16, with bfloat16 (opset 13+; schemas allowing bfloat16)");
  sub->add_flag("--keep-io-types", o->keepIoTypes, "With --fp16/--bf16: graph inputs and outputs stay float32");
  sub->add_option("--op-block-list", o->opBlockList, "With --fp16/--bf16: op types that stay float32 (OP,OP,...)")
      ->delimiter(',')->type_name("OP,...");
  sub->add_flag("--report", o->report,
                "Print the accuracy report on stdout (stderr with -o -): per output max and mean abs error, cosine "
                "similarity and SQNR (dB) against the float model, on the evaluation sets");
  sub->add_flag("--report-layers", o->reportLayers,
                "Add to --report the same per quantized tensor (each DequantizeLinear output against the float tensor it "
                "replaces, and the outputs of the ops reading them or rewritten), in execution order");
  sub->add_option("--reference", o->reference,
                  "MODEL is already quantized (or float16): compare it with this float model and report, writing nothing")
      ->type_name("FP32MODEL");
  sub->add_option("--eval", o->evalData,
                  "Evaluation samples in the --calibration formats (at most --eval-sets when given, else all) instead "
                  "of random or calibration inputs")
      ->type_name("DATA");
  sub->add_option("--min-cosine", o->minCosine, "Exit 1 when an output's cosine similarity to the float model is below X")
      ->type_name("X")->check(CLI::Range(-1.0, 1.0));
  CLI::Option* evalSetsOpt = sub->get_option("--eval-sets");
  sub->footer("Exit codes: 0 success, 1 an output's cosine similarity below --min-cosine (the model is written), 2 invalid "
              "input or usage error, 3 unsupported (opset below 11 or newer than this build).");
  return [o, evalSetsOpt] {
    o->evalSetsGiven = evalSetsOpt->count() > 0;
    return runQuantize(*o);
  };
}

}  // namespace onnxtool::app
