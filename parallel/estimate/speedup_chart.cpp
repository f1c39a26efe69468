#include "parallel/estimate/speedup_chart.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "framework/error.h"

namespace strata::estimate {

namespace {

constexpr double kWidth = 760, kHeight = 480;
constexpr double kLeft = 70, kRight = 190, kTop = 50, kBottom = 60;  // margins; the legend sits right
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick label: 20, 2.5, 0.25.
std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A round tick step for an axis up to v with about five ticks: 1, 2, 2.5 or
// 5 times a power of ten.
double nice_step(double v) {
  const double raw = std::max(v, 1e-9) / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string speedup_chart_svg(const std::string& title, const std::vector<ChartSeries>& series) {
  double wmin = 1e300, wmax = 0, smax = 1;
  for (const ChartSeries& s : series) {
    for (double w : s.workers) wmin = std::min(wmin, w), wmax = std::max(wmax, w);
    for (double v : s.speedup) smax = std::max(smax, v);
  }
  if (wmax <= 0) wmin = 1, wmax = 2;
  const double x0 = std::log2(wmin), x1 = std::max(std::log2(wmax), x0 + 1);
  const double ystep = nice_step(smax * 1.05);
  const int yticks = static_cast<int>(std::ceil(smax * 1.05 / ystep - 1e-9));
  const double ymax = ystep * yticks;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto X = [&](double w) { return kLeft + (std::log2(w) - x0) / (x1 - x0) * pw; };
  auto Y = [&](double s) { return kTop + ph - s / ymax * ph; };

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<defs><clipPath id=\"plot\"><rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw
    << "\" height=\"" << ph << "\"/></clipPath></defs>\n"
    << "<text x=\"" << kLeft + pw / 2 << "\" y=\"25\" text-anchor=\"middle\" font-size=\"15\">" << escape(title)
    << "</text>\n";
  // Grid and ticks: every power of two on x, five steps on y.
  for (double e = std::ceil(x0); e <= x1 + 1e-9; ++e) {
    const double x = kLeft + (e - x0) / (x1 - x0) * pw;
    o << "<line x1=\"" << num(x) << "\" y1=\"" << kTop << "\" x2=\"" << num(x) << "\" y2=\"" << kTop + ph
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << num(x) << "\" y=\"" << kTop + ph + 18
      << "\" text-anchor=\"middle\">" << static_cast<long long>(std::llround(std::exp2(e))) << "</text>\n";
  }
  for (int k = 0; k <= yticks; ++k) {
    const double v = ystep * k, y = Y(v);
    o << "<line x1=\"" << kLeft << "\" y1=\"" << num(y) << "\" x2=\"" << kLeft + pw << "\" y2=\"" << num(y)
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << kLeft - 8 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">"
      << label(v) << "</text>\n";
  }
  o << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#444\"/>\n"
    << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kHeight - 15 << "\" text-anchor=\"middle\">workers (log2)</text>\n"
    << "<text transform=\"translate(18," << kTop + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << "predicted speedup</text>\n";
  // Ideal scaling (speedup = workers), clipped to the plot: on the log2
  // workers axis and a linear speedup axis it is a curve, drawn through eight
  // points per doubling (exactly through every power of two).
  o << "<path id=\"ideal\" clip-path=\"url(#plot)\" fill=\"none\" stroke=\"#999\" stroke-dasharray=\"6,4\" d=\"";
  for (int k = 0; k <= static_cast<int>(std::ceil((x1 - x0) * 8)); ++k) {
    const double w = std::min(std::exp2(x0 + k / 8.0), std::exp2(x1));
    o << (k ? " L" : "M") << num(X(w)) << "," << num(Y(w));
  }
  o << "\"/>\n";
  // Each legend entry shows its line: colour, dashes and marker.
  double legend_y = kTop + 10;
  const double lx = kLeft + pw + 12;
  auto legend_line = [&](const char* color, const std::string& dash, bool marker, bool hollow) {
    o << "<line x1=\"" << num(lx) << "\" y1=\"" << num(legend_y - 4) << "\" x2=\"" << num(lx + 24) << "\" y2=\""
      << num(legend_y - 4) << "\" stroke=\"" << color << "\" stroke-width=\"2\"" << dash << "/>\n";
    if (marker) {
      o << "<circle cx=\"" << num(lx + 12) << "\" cy=\"" << num(legend_y - 4) << "\" r=\"" << (hollow ? 5 : 3) << "\""
        << (hollow ? " fill=\"white\" stroke-width=\"2\" stroke=\"" : " fill=\"") << color << "\"/>\n";
    }
  };
  legend_line("#999", " stroke-dasharray=\"6,4\"", false, false);
  o << "<text x=\"" << num(lx + 30) << "\" y=\"" << num(legend_y) << "\" fill=\"#666\">ideal</text>\n";
  // A measured series takes the colour of the predicted series of its name.
  std::vector<std::string> predicted_names;
  for (const ChartSeries& s : series) {
    if (s.style == SeriesStyle::kPredicted) predicted_names.push_back(s.name);
  }
  size_t next_color = predicted_names.size();
  for (size_t i = 0; i < series.size(); ++i) {
    const ChartSeries& s = series[i];
    size_t ci = i;
    if (s.style == SeriesStyle::kMeasured) {
      auto it = std::find(predicted_names.begin(), predicted_names.end(), s.name);
      ci = it != predicted_names.end() ? static_cast<size_t>(it - predicted_names.begin()) : next_color++;
    }
    const char* color = kColors[ci % (sizeof kColors / sizeof kColors[0])];
    if (s.style == SeriesStyle::kMeasured) {
      o << "<g><title>" << escape(s.name) << " (measured)</title>\n";
      for (size_t k = 0; k < s.workers.size(); ++k) {
        o << "<circle cx=\"" << num(X(s.workers[k])) << "\" cy=\"" << num(Y(s.speedup[k]))
          << "\" r=\"6\" fill=\"none\" stroke-width=\"2\" stroke=\"" << color << "\"/>\n";
      }
      legend_y += 20;
      legend_line(color, " stroke-opacity=\"0\"", true, true);
      o << "<text x=\"" << num(lx + 30) << "\" y=\"" << num(legend_y) << "\" fill=\"" << color << "\">"
        << escape(s.name) << " measured</text>\n</g>\n";
      continue;
    }
    std::string points;
    for (size_t k = 0; k < s.workers.size(); ++k) points += num(X(s.workers[k])) + "," + num(Y(s.speedup[k])) + " ";
    // Strategies that predict the same may coincide: dashes keep both visible.
    const char* dashes[] = {"", " stroke-dasharray=\"9,5\"", " stroke-dasharray=\"2,4\""};
    const char* dash = dashes[i % 3];
    o << "<g><title>" << escape(s.name) << "</title>\n";
    if (!points.empty()) {
      o << "<polyline clip-path=\"url(#plot)\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\""
        << dash << " points=\"" << points << "\"/>\n";
    }
    for (size_t k = 0; k < s.workers.size(); ++k) {
      o << "<circle cx=\"" << num(X(s.workers[k])) << "\" cy=\"" << num(Y(s.speedup[k])) << "\" r=\"3\" fill=\""
        << color << "\"/>\n";
    }
    legend_y += 20;
    legend_line(color, dash, true, false);
    o << "<text x=\"" << num(lx + 30) << "\" y=\"" << num(legend_y) << "\" fill=\"" << color << "\">"
      << escape(s.name) << "</text>\n</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

void write_speedup_chart(const std::string& path, const std::string& title, const std::vector<ChartSeries>& series) {
  std::ofstream out(path);
  if (!out) fail<IoError>("cannot write the chart '", path, "': ", std::strerror(errno), "; check the folder exists");
  out << speedup_chart_svg(title, series);
  if (!out) fail<IoError>("writing the chart '", path, "' failed (disk full?)");
}

}  // namespace strata::estimate
