// strata layers: the registered layer types, and strata check-layers: the
// generic layer checks (framework/layer_check.h) on the types a layer library
// registers, or on any types named: a table, then every problem found. The
// CPU-against-CUDA column runs where a CUDA build finds a GPU.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/layer_check.h"
#include "framework/layer_registry.h"
#include "framework/plugin.h"
#include "tools/strata/args.h"
#include "tools/strata/commands.h"
#include "tools/strata/flag_lists.h"

namespace strata::cli {

namespace {

// "ok", or the number of problems. An exception is one problem.
struct Outcome {
  std::string cell = "ok";
  std::vector<std::string> problems;
};

template <typename Check>
Outcome run(const Check& check) {
  Outcome o;
  try {
    o.problems = check();
  } catch (const std::exception& e) {
    o.problems = {std::string("threw: ") + e.what()};
  }
  if (!o.problems.empty()) o.cell = "FAILED (" + std::to_string(o.problems.size()) + ")";
  return o;
}

// bf16 and f16 blobs against f32 ones, for a layer that takes them ("-": f32 only).
Outcome storage_outcome(const std::string& type, const LayerExample& ex) {
  Outcome s{"-", {}};
  for (DType storage : {DType::kBF16, DType::kF16}) {
    bool takes = false;
    const Outcome t = run([&] {
      takes = example_takes_storage(type, ex, storage);
      return takes ? check_storage(type, ex, storage) : std::vector<std::string>{};
    });
    if (!takes && t.problems.empty()) continue;
    for (const std::string& p : t.problems) s.problems.push_back(std::string(dtype_name(storage)) + ": " + p);
    s.cell = s.problems.empty() ? "ok" : "FAILED (" + std::to_string(s.problems.size()) + ")";
  }
  return s;
}

// NHWC calls against NCHW ones, for a layer that takes channels-last blobs ("-": NCHW only).
Outcome channels_last_outcome(const std::string& type, const LayerExample& ex) {
  bool takes = false;
  Outcome o = run([&] {
    takes = example_takes_channels_last(type, ex);
    return takes ? check_channels_last(type, ex) : std::vector<std::string>{};
  });
  if (!takes && o.problems.empty()) o.cell = "-";
  return o;
}

}  // namespace

int layers_main(int argc, char** argv) {
  Args args("layers", {});
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    std::printf("%s", args.help().c_str());
    return 0;
  }
  const LayerRegistry& registry = LayerRegistry::instance();
  for (const std::string& t : registry.types()) {
    const LayerRegistration& reg = registry.find(t);
    std::printf("%-18s %s%s\n", t.c_str(), reg.schema().summary.c_str(),
                reg.origin.empty() ? "" : ("  [from " + reg.origin + "]").c_str());
  }
  return 0;
}

int check_layers_main(int argc, char** argv) {
  Args args("check-layers",
            {{"types", FlagKind::kValue, "layer types to check, comma-separated",
              "the types of the --plugin libraries, else every registered type"},
             {"threads", FlagKind::kValue, "CPU threads (0 = all cores)", "all cores"}});
  if (parse_command_flags(args, argc, argv) == FlagsParsed::kHelpShown) return 0;
  std::vector<std::string> types;
  if (args.has("types")) {
    const std::set<std::string> named = split_list({args.get("types")});
    types.assign(named.begin(), named.end());
    for (const std::string& t : types) LayerRegistry::instance().find(t);  // unknown: the registry's error
  } else if (!loaded_plugins().empty()) {
    for (const LoadedPlugin& p : loaded_plugins()) types.insert(types.end(), p.types.begin(), p.types.end());
  } else {
    types = LayerRegistry::instance().types();
  }
  std::printf("%-20s %-8s %-16s %-16s %-16s %-16s %-16s %-16s\n", "layer type", "example", "gradients", "zero batch",
              "extreme values", "16-bit storage", "NHWC", "CPU vs CUDA");
  std::vector<std::string> report;
  std::map<std::string, int> cuda_not_run;  // why -> examples
  int failed = 0, checked = 0;
  for (const std::string& type : types) {
    const LayerSchema schema = LayerRegistry::instance().find(type).schema();
    if (schema.examples.empty()) {
      const bool allowed = schema.kind == LayerKind::kData || schema.kind == LayerKind::kOutput;
      std::printf("%-20s %-8s %s\n", type.c_str(), "-",
                  allowed ? "no examples (a data or output layer: not checked here)"
                          : "FAILED: no LayerExample in its schema(); add one");
      if (!allowed) {
        ++failed;
        report.push_back(type + ": no LayerExample; add one to its schema() (only data and output layers may go "
                                "without)");
      }
      continue;
    }
    for (size_t i = 0; i < schema.examples.size(); ++i) {
      const LayerExample& ex = schema.examples[i];
      const Outcome g = run([&] { return check_gradients(type, ex); });
      const Outcome z = run([&] { return check_zero_batch(type, ex); });
      const Outcome x = run([&] { return check_extreme_values(type, ex); });
      const Outcome s = storage_outcome(type, ex);
      const Outcome n = channels_last_outcome(type, ex);
      const std::string cuda_why = cuda_check_unavailable(type);
      if (!cuda_why.empty()) ++cuda_not_run[cuda_why];
      const Outcome c = cuda_why.empty() ? run([&] { return check_cpu_vs_cuda(type, ex, kCudaCheckFp32Tolerance); })
                                         : Outcome{"-", {}};
      std::printf("%-20s %-8zu %-16s %-16s %-16s %-16s %-16s %-16s\n", type.c_str(), i, g.cell.c_str(),
                  z.cell.c_str(), x.cell.c_str(), s.cell.c_str(), n.cell.c_str(), c.cell.c_str());
      std::fflush(stdout);
      ++checked;
      const std::string what = describe_example(type, ex);
      for (const auto& [name, o] : {std::make_pair("gradients", &g), std::make_pair("zero batch", &z),
                                    std::make_pair("extreme values", &x), std::make_pair("16-bit storage", &s),
                                    std::make_pair("NHWC", &n), std::make_pair("CPU vs CUDA", &c)}) {
        for (const std::string& p : o->problems) report.push_back(what + ": " + name + ": " + p);
      }
      if (!g.problems.empty() || !z.problems.empty() || !x.problems.empty() || !s.problems.empty() ||
          !n.problems.empty() || !c.problems.empty()) {
        ++failed;
      }
    }
  }
  for (const std::string& line : report) std::printf("  %s\n", line.c_str());
  for (const auto& [why, n] : cuda_not_run) std::printf("CPU vs CUDA not run for %d example(s): %s\n", n, why.c_str());
  std::printf("%d example(s) of %zu type(s) checked on the CPU, %d failed%s\n", checked, types.size(), failed,
              failed ? "" : ": all passed");
  return failed ? 1 : 0;
}

}  // namespace strata::cli
