#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

namespace cohort {
namespace {

void AtomicAdd(std::atomic<double>& target, double v) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + v, std::memory_order_relaxed)) {
  }
}

bool IsValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsValidMetricName(const std::string& name) { return IsValidName(name, true); }

bool IsValidLabelName(const std::string& name) {
  return IsValidName(name, false) && name.rfind("__", 0) != 0;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

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

// The series names a family of this type emits; no two families may share one.
std::vector<std::string> SeriesNames(const std::string& name, const std::string& type) {
  if (type == "histogram") return {name, name + "_bucket", name + "_sum", name + "_count"};
  return {name};
}

void AppendHeader(const std::string& name, const std::string& help, const std::string& type,
                  std::string* out) {
  *out += "# HELP " + name + " " + EscapeHelp(help) + "\n";
  *out += "# TYPE " + name + " " + type + "\n";
}

void AppendSample(const std::string& name, const std::string& labels, double value,
                  std::string* out) {
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += " " + FormatMetricValue(value) + "\n";
}

void AppendCollectedFamily(CollectedFamily family, std::string* out) {
  std::vector<CollectedSample> samples;
  for (auto& sample : family.samples) {
    const bool labels_ok = std::all_of(sample.labels.begin(), sample.labels.end(),
                                       [](const auto& l) { return IsValidLabelName(l.first); });
    if (labels_ok) samples.push_back(std::move(sample));
  }
  std::stable_sort(samples.begin(), samples.end(),
                   [](const auto& a, const auto& b) { return a.labels < b.labels; });
  AppendHeader(family.name, family.help, family.type, out);
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i > 0 && samples[i].labels == samples[i - 1].labels) continue;  // Duplicate series.
    std::string labels;
    for (const auto& [label, value] : samples[i].labels) {
      if (!labels.empty()) labels += ",";
      labels += label + "=\"" + EscapeLabelValue(value) + "\"";
    }
    AppendSample(family.name, labels, samples[i].value, out);
  }
}

}  // namespace

void Counter::Inc(double v) {
  if (v < 0 || std::isnan(v)) return;
  AtomicAdd(value_, v);
}

void Gauge::Inc(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> upper_bounds) : upper_bounds_(std::move(upper_bounds)) {
  if (!upper_bounds_.empty() && std::isinf(upper_bounds_.back()) && upper_bounds_.back() > 0) {
    upper_bounds_.pop_back();
  }
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    if (std::isnan(upper_bounds_[i]) || (i > 0 && !(upper_bounds_[i - 1] < upper_bounds_[i]))) {
      throw std::invalid_argument("histogram buckets must be strictly increasing numbers");
    }
  }
  bucket_counts_ = std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1);
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) bucket_counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // NaN compares false with every bound, so it lands in the +Inf bucket.
  const size_t bucket =
      std::isnan(v)
          ? upper_bounds_.size()
          : std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  bucket_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

uint64_t Histogram::Count() const {
  uint64_t count = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    count += bucket_counts_[i].load(std::memory_order_relaxed);
  }
  return count;
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> counts(upper_bounds_.size() + 1);
  for (size_t i = 0; i < counts.size(); ++i) {
    counts[i] = bucket_counts_[i].load(std::memory_order_relaxed);
  }
  return counts;
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";  // Also folds -0.
  char buf[64];
  if (std::trunc(v) == v && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  // Shortest text that parses back to the same double.
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

std::string RenderLabelPairs(const std::vector<std::string>& names,
                             const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (i > 0) out += ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  return out;
}

void RenderChild(const std::string& name, const std::string& labels, const Counter& c,
                 std::string* out) {
  AppendSample(name, labels, c.Value(), out);
}

void RenderChild(const std::string& name, const std::string& labels, const Gauge& g,
                 std::string* out) {
  AppendSample(name, labels, g.Value(), out);
}

void RenderChild(const std::string& name, const std::string& labels, const Histogram& h,
                 std::string* out) {
  // Read the buckets once and derive _count from them, so a scrape racing with Observe() is
  // still internally consistent (+Inf bucket == _count).
  const std::vector<uint64_t> counts = h.BucketCounts();
  const std::string prefix = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le =
        i < h.UpperBounds().size() ? FormatMetricValue(h.UpperBounds()[i]) : "+Inf";
    AppendSample(name + "_bucket", prefix + "le=\"" + le + "\"", static_cast<double>(cumulative),
                 out);
  }
  AppendSample(name + "_sum", labels, h.Sum(), out);
  AppendSample(name + "_count", labels, static_cast<double>(cumulative), out);
}

void MetricsRegistry::AddFamily(std::unique_ptr<FamilyBase> family) {
  const std::string& name = family->name();
  if (!IsValidMetricName(name)) {
    throw std::invalid_argument("invalid metric name \"" + name +
                                "\": must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  std::set<std::string> seen;
  for (const auto& label : family->label_names()) {
    if (!IsValidLabelName(label)) {
      throw std::invalid_argument("metric " + name + ": invalid label name \"" + label +
                                  "\": must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __");
    }
    if (!seen.insert(label).second) {
      throw std::invalid_argument("metric " + name + ": label name \"" + label + "\" repeated");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& existing : families_) {
    for (const auto& a : SeriesNames(existing->name(), existing->type())) {
      for (const auto& b : SeriesNames(name, family->type())) {
        if (a == b) {
          throw std::invalid_argument("metric " + name + " clashes with already registered " +
                                      existing->type() + " " + existing->name());
        }
      }
    }
  }
  families_.push_back(std::move(family));
}

Family<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                             std::vector<std::string> label_names) {
  if (!EndsWith(name, "_total")) {
    throw std::invalid_argument("counter name \"" + name + "\" must end in _total");
  }
  auto* family = new Family<Counter>(name, help, "counter", std::move(label_names),
                                     [] { return std::make_unique<Counter>(); });
  AddFamily(std::unique_ptr<FamilyBase>(family));
  return *family;
}

Family<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names) {
  auto* family = new Family<Gauge>(name, help, "gauge", std::move(label_names),
                                   [] { return std::make_unique<Gauge>(); });
  AddFamily(std::unique_ptr<FamilyBase>(family));
  return *family;
}

Family<Histogram>& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                                 std::vector<std::string> label_names,
                                                 std::vector<double> buckets) {
  if (std::find(label_names.begin(), label_names.end(), "le") != label_names.end()) {
    throw std::invalid_argument("histogram " + name + ": label name \"le\" is reserved");
  }
  // Validate and normalize the buckets now rather than at the first WithLabels().
  std::vector<double> bounds = Histogram(std::move(buckets)).UpperBounds();
  auto* family = new Family<Histogram>(
      name, help, "histogram", std::move(label_names),
      [bounds = std::move(bounds)] { return std::make_unique<Histogram>(bounds); });
  AddFamily(std::unique_ptr<FamilyBase>(family));
  return *family;
}

void MetricsRegistry::AddCollector(std::function<std::vector<CollectedFamily>()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  std::vector<const FamilyBase*> families;
  std::vector<std::function<std::vector<CollectedFamily>()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& f : families_) families.push_back(f.get());
    collectors = collectors_;
  }
  std::string out;
  std::set<std::string> taken;  // Series names already rendered.
  for (const FamilyBase* f : families) {
    AppendHeader(f->name(), f->help(), f->type(), &out);
    f->RenderChildren(&out);
    for (auto& series : SeriesNames(f->name(), f->type())) taken.insert(std::move(series));
  }
  // Collectors run outside the lock so that they may take their own locks freely.
  for (const auto& collector : collectors) {
    std::vector<CollectedFamily> collected;
    try {
      collected = collector();
    } catch (const std::exception&) {
      continue;  // A scrape must not take the process down.
    }
    for (auto& family : collected) {
      if (!IsValidMetricName(family.name) || (family.type != "gauge" && family.type != "counter") ||
          !taken.insert(family.name).second) {
        continue;
      }
      AppendCollectedFamily(std::move(family), &out);
    }
  }
  return out;
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
