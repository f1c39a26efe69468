// A chart of predicted speedup against workers as a standalone SVG (no
// dependencies; opens in any browser): workers on a log2 axis, one line per
// strategy, and the ideal (speedup = workers) dashed.
#pragma once

#include <string>
#include <vector>

namespace strata::estimate {

struct ChartSeries {
  std::string name;
  std::vector<double> workers;  // the points that could run
  std::vector<double> speedup;
};

std::string speedup_chart_svg(const std::string& title, const std::vector<ChartSeries>& series);
// IoError if it cannot be written.
void write_speedup_chart(const std::string& path, const std::string& title, const std::vector<ChartSeries>& series);

}  // namespace strata::estimate
