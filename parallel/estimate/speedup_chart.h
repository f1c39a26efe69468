// A chart of predicted speedup against workers as a standalone SVG (no
// dependencies; opens in any browser): workers on a log2 axis, one line per
// strategy, the ideal (speedup = workers) dashed, and measured speedups as
// hollow markers in their strategy's colour.
#pragma once

#include <string>
#include <vector>

namespace strata::estimate {

// How a series is drawn: a line through its points (a prediction), or
// hollow markers only (speedups measured by a real run, to compare).
enum class SeriesStyle { kPredicted, kMeasured };

struct ChartSeries {
  std::string name;
  std::vector<double> workers;  // the points that could run
  std::vector<double> speedup;
  SeriesStyle style = SeriesStyle::kPredicted;
};

std::string speedup_chart_svg(const std::string& title, const std::vector<ChartSeries>& series);
// IoError if it cannot be written.
void write_speedup_chart(const std::string& path, const std::string& title, const std::vector<ChartSeries>& series);

}  // namespace strata::estimate
