// docs/config.md is the reference for every layer type and every key a layer
// reads: this test fails when a registered layer or one of its keys is not
// documented there, so the page cannot fall behind the code.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "framework/layer_registry.h"
#include "framework/solver/solver_config.h"

namespace strata {
namespace {

std::string read_docs() {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/docs/config.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text of the "### <Type>" section, up to the next heading of level 2 or 3.
std::string section(const std::string& docs, const std::string& type) {
  const std::string heading = "\n### " + type + "\n";
  const size_t start = docs.find(heading);
  if (start == std::string::npos) return "";
  size_t end = docs.find("\n## ", start + heading.size());
  const size_t next3 = docs.find("\n### ", start + heading.size());
  if (next3 < end) end = next3;
  return docs.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

TEST(DocsTest, EveryLayerTypeAndKeyIsDocumented) {
  const std::string docs = read_docs();
  ASSERT_FALSE(docs.empty()) << "docs/config.md is missing or empty";
  for (const std::string& type : LayerRegistry::instance().types()) {
    const std::string text = section(docs, type);
    EXPECT_FALSE(text.empty()) << "layer type " << type << " has no '### " << type
                               << "' section in docs/config.md";
    if (text.empty()) continue;
    const LayerSchema schema = LayerRegistry::instance().find(type).schema();
    for (const auto& block : schema.blocks) {
      EXPECT_NE(text.find("`" + block.block + "`"), std::string::npos)
          << "docs/config.md section " << type << " does not mention block `" << block.block << "`";
      for (const auto& key : block.keys) {
        EXPECT_NE(text.find("`" + key + "`"), std::string::npos)
            << "docs/config.md section " << type << " does not document key `" << key << "` of "
            << block.block;
      }
    }
  }
}

TEST(DocsTest, EverySolverKeyIsDocumented) {
  const std::string docs = read_docs();
  const size_t start = docs.find("\n## Solver");
  ASSERT_NE(start, std::string::npos) << "docs/config.md has no '## Solver' section";
  const size_t end = docs.find("\n## ", start + 4);
  const std::string text = docs.substr(start, end == std::string::npos ? std::string::npos : end - start);
  for (const std::string& key : solver_keys()) {
    EXPECT_NE(text.find("`" + key + "`"), std::string::npos)
        << "docs/config.md '## Solver' section does not document key `" << key << "`";
  }
}

}  // namespace
}  // namespace strata
