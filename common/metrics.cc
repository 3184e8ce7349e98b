#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <tuple>

#include "absl/strings/match.h"
#include "prometheus/check_names.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace cohort {
namespace {

// The series names a family of this type emits; no two families may share one.
std::vector<std::string> SeriesNames(const std::string& name, const std::string& type) {
  if (type == "histogram") return {name, name + "_bucket", name + "_sum", name + "_count"};
  return {name};
}

// prometheus-cpp 1.0.1 writes HELP as given; the text format wants \\ and \n escaped.
std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (const char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The library keeps a family's children unordered; a scrape lists them by label values.
void SortByLabels(prometheus::MetricFamily& family) {
  std::sort(family.metric.begin(), family.metric.end(),
            [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
              return std::lexicographical_compare(a.label.begin(), a.label.end(), b.label.begin(),
                                                  b.label.end(), [](const auto& x, const auto& y) {
                                                    return std::tie(x.name, x.value) <
                                                           std::tie(y.name, y.value);
                                                  });
            });
}

// The library keeps labels by name; cohort's exposition has always written them in the order
// the family declared them ({protocol="...",method="...",code="..."}), and scrapes that match
// lines rely on it.
void InDeclaredOrder(const std::vector<std::string>& label_names,
                     prometheus::MetricFamily& family) {
  for (prometheus::ClientMetric& metric : family.metric) {
    std::vector<prometheus::ClientMetric::Label> ordered;
    ordered.reserve(metric.label.size());
    for (const std::string& name : label_names) {
      for (prometheus::ClientMetric::Label& label : metric.label) {
        if (label.name == name) ordered.push_back(std::move(label));
      }
    }
    metric.label = std::move(ordered);
  }
}

// A collector's family in the library's terms; nullopt when it cannot be rendered.
std::optional<prometheus::MetricFamily> ToMetricFamily(CollectedFamily family) {
  prometheus::MetricFamily out;
  if (family.type == "gauge") {
    out.type = prometheus::MetricType::Gauge;
  } else if (family.type == "counter") {
    out.type = prometheus::MetricType::Counter;
  } else {
    return std::nullopt;
  }
  out.name = std::move(family.name);
  out.help = EscapeHelp(family.help);
  for (CollectedSample& sample : family.samples) {
    const bool valid = std::all_of(sample.labels.begin(), sample.labels.end(), [](const auto& l) {
      return prometheus::CheckLabelName(l.first);
    });
    if (!valid) continue;
    prometheus::ClientMetric metric;
    for (auto& [name, value] : sample.labels) {
      metric.label.push_back({std::move(name), std::move(value)});
    }
    if (out.type == prometheus::MetricType::Gauge) {
      metric.gauge.value = sample.value;
    } else {
      metric.counter.value = sample.value;
    }
    out.metric.push_back(std::move(metric));
  }
  SortByLabels(out);
  return out;
}

}  // namespace

MetricsRegistry::MetricsRegistry()
    : registry_(
          std::make_shared<prometheus::Registry>(prometheus::Registry::InsertBehavior::Throw)) {}

MetricsRegistry::~MetricsRegistry() = default;

void MetricsRegistry::Claim(const std::string& name, const std::string& type,
                            const std::vector<std::string>& label_names) {
  if (!prometheus::CheckMetricName(name)) {
    throw std::invalid_argument("invalid metric name \"" + name +
                                "\": must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  std::set<std::string> seen;
  for (const std::string& label : label_names) {
    if (!prometheus::CheckLabelName(label)) {
      throw std::invalid_argument("metric " + name + ": invalid label name \"" + label +
                                  "\": must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __");
    }
    if (type == "histogram" && label == "le") {
      throw std::invalid_argument("histogram " + name + ": label name \"le\" is reserved");
    }
    if (!seen.insert(label).second) {
      throw std::invalid_argument("metric " + name + ": label name \"" + label + "\" repeated");
    }
  }
  const std::vector<std::string> series = SeriesNames(name, type);
  for (const std::string& s : series) {
    if (series_.count(s)) {
      throw std::invalid_argument("metric " + name + " clashes with the already registered " + s);
    }
  }
  series_.insert(series.begin(), series.end());
}

Family<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                             std::vector<std::string> label_names) {
  if (!absl::EndsWith(name, "_total")) {
    throw std::invalid_argument("counter name \"" + name + "\" must end in _total");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Claim(name, "counter", label_names);
  auto& family = prometheus::BuildCounter().Name(name).Help(EscapeHelp(help)).Register(*registry_);
  registered_.push_back(
      {&family, name, EscapeHelp(help), prometheus::MetricType::Counter, label_names});
  counters_.emplace_back(new Family<Counter>(&family, std::move(label_names), {}));
  return *counters_.back();
}

Family<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Claim(name, "gauge", label_names);
  auto& family = prometheus::BuildGauge().Name(name).Help(EscapeHelp(help)).Register(*registry_);
  registered_.push_back(
      {&family, name, EscapeHelp(help), prometheus::MetricType::Gauge, label_names});
  gauges_.emplace_back(new Family<Gauge>(&family, std::move(label_names), {}));
  return *gauges_.back();
}

Family<Histogram>& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                                 std::vector<std::string> label_names,
                                                 std::vector<double> buckets) {
  if (!buckets.empty() && std::isinf(buckets.back()) && buckets.back() > 0) buckets.pop_back();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i]) || (i > 0 && !(buckets[i - 1] < buckets[i]))) {
      throw std::invalid_argument("histogram " + name +
                                  ": buckets must be finite and strictly increasing");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Claim(name, "histogram", label_names);
  auto& family =
      prometheus::BuildHistogram().Name(name).Help(EscapeHelp(help)).Register(*registry_);
  registered_.push_back(
      {&family, name, EscapeHelp(help), prometheus::MetricType::Histogram, label_names});
  histograms_.emplace_back(
      new Family<Histogram>(&family, std::move(label_names), std::move(buckets)));
  return *histograms_.back();
}

void MetricsRegistry::AddCollector(std::function<std::vector<CollectedFamily>()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  std::vector<Registered> registered;
  std::vector<std::function<std::vector<CollectedFamily>()>> collectors;
  std::set<std::string> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    registered = registered_;
    collectors = collectors_;
    taken = series_;
  }
  std::vector<prometheus::MetricFamily> families;
  for (const Registered& r : registered) {
    std::vector<prometheus::MetricFamily> collected = r.family->Collect();
    if (collected.empty()) {
      // The library leaves out a family without children; its HELP and TYPE still say it exists.
      prometheus::MetricFamily empty;
      empty.name = r.name;
      empty.help = r.help;
      empty.type = r.type;
      collected.push_back(std::move(empty));
    }
    InDeclaredOrder(r.label_names, collected.front());
    SortByLabels(collected.front());
    families.push_back(std::move(collected.front()));
  }
  // Collectors run outside the lock, so that they may take their own locks freely.
  for (const auto& collector : collectors) {
    std::vector<CollectedFamily> collected;
    try {
      collected = collector();
    } catch (const std::exception&) {
      continue;  // A scrape must not take the process down.
    }
    for (CollectedFamily& family : collected) {
      if (!prometheus::CheckMetricName(family.name) || taken.count(family.name)) continue;
      std::string name = family.name;
      if (auto converted = ToMetricFamily(std::move(family))) {
        taken.insert(std::move(name));
        families.push_back(std::move(*converted));
      }
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    throw std::invalid_argument("ExponentialBuckets needs start > 0, factor > 1, count >= 1");
  }
  std::vector<double> buckets;
  for (int i = 0; i < count; ++i) {
    buckets.push_back(start);
    start *= factor;
  }
  return buckets;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  if (!(width > 0) || count < 1) {
    throw std::invalid_argument("LinearBuckets needs width > 0, count >= 1");
  }
  std::vector<double> buckets;
  for (int i = 0; i < count; ++i) buckets.push_back(start + i * width);
  return buckets;
}

}  // namespace cohort
