#include <cstring>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/plugin.h"
#include "tools/strata/commands.h"

namespace strata::cli {

int load_plugin_flags(int argc, char** argv) {
  std::vector<std::string> paths = plugins_from_environment();
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {  // the rest belongs to a command strata runs
      while (i < argc) argv[out++] = argv[i++];
      break;
    }
    if (a == "--plugin") {
      if (i + 1 >= argc) fail<ConfigError>("--plugin needs the path of a layer library (.so)");
      paths.push_back(argv[++i]);
      continue;
    }
    if (a.rfind("--plugin=", 0) == 0) {
      paths.push_back(a.substr(9));
      continue;
    }
    argv[out++] = argv[i];
  }
  for (const std::string& p : paths) load_layer_plugin(p);
  return out;
}

}  // namespace strata::cli
