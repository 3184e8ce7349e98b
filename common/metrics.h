// Hand-written metrics registry: prometheus-cpp is not packaged for our build image.
#ifndef COHORT_COMMON_METRICS_H_
#define COHORT_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cohort {

// A value that only goes up. Negative increments are ignored.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc(double v = 1);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Inc(double v = 1);
  void Dec(double v = 1) { Inc(-v); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `upper_bounds` must be strictly increasing; a trailing +Inf is implied and may be omitted.
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);
  uint64_t Count() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

  // Finite upper bounds, without the implied +Inf.
  const std::vector<double>& UpperBounds() const { return upper_bounds_; }
  // Per-bucket (not cumulative) counts; the last entry is the +Inf bucket.
  std::vector<uint64_t> BucketCounts() const;

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> bucket_counts_;  // upper_bounds_.size() + 1 entries.
  std::atomic<double> sum_{0};
};

// Appends the sample lines of one child to `out`; used by Family<T>::RenderChildren.
void RenderChild(const std::string& name, const std::string& labels, const Counter& c,
                 std::string* out);
void RenderChild(const std::string& name, const std::string& labels, const Gauge& g,
                 std::string* out);
void RenderChild(const std::string& name, const std::string& labels, const Histogram& h,
                 std::string* out);
// Renders `name1="value1",name2="value2"` with values escaped (no braces).
std::string RenderLabelPairs(const std::vector<std::string>& names,
                             const std::vector<std::string>& values);

class MetricsRegistry;

// Type-erased part of a family, so the registry can render families of every kind in order.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::string& type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends all children's sample lines, ordered by label values.
  virtual void RenderChildren(std::string* out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help, std::string type,
             std::vector<std::string> label_names)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(std::move(type)),
        label_names_(std::move(label_names)) {}

 private:
  std::string name_;
  std::string help_;
  std::string type_;
  std::vector<std::string> label_names_;
};

template <typename T>
class Family : public FamilyBase {
 public:
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  // Child for these label values (same order as the family's label names). The reference stays
  // valid for the registry's lifetime unless Remove() is called for the same values. Thread-safe.
  T& WithLabels(const std::vector<std::string>& values) {
    CheckArity(values);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(values);
    if (it == children_.end()) it = children_.emplace(values, make_child_()).first;
    return *it->second;
  }

  void Remove(const std::vector<std::string>& values) {
    std::lock_guard<std::mutex> lock(mu_);
    children_.erase(values);
  }

  void RenderChildren(std::string* out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [values, child] : children_) {
      RenderChild(name(), RenderLabelPairs(label_names(), values), *child, out);
    }
  }

 private:
  friend class MetricsRegistry;

  Family(std::string name, std::string help, std::string type, std::vector<std::string> label_names,
         std::function<std::unique_ptr<T>()> make_child)
      : FamilyBase(std::move(name), std::move(help), std::move(type), std::move(label_names)),
        make_child_(std::move(make_child)) {}

  void CheckArity(const std::vector<std::string>& values) const {
    if (values.size() != label_names().size()) {
      throw std::invalid_argument("metric " + name() + " takes " +
                                  std::to_string(label_names().size()) + " label values, got " +
                                  std::to_string(values.size()));
    }
  }

  const std::function<std::unique_ptr<T>()> make_child_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;  // Sorted: stable output.
};

struct CollectedSample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value;
};

struct CollectedFamily {
  std::string name;
  std::string help;
  std::string type;  // "gauge" or "counter"
  std::vector<CollectedSample> samples;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Registration throws std::invalid_argument on an invalid or already registered name, an
  // invalid or repeated label name, or (counters) a name that does not end in "_total".
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names);
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names,
                                  std::vector<double> buckets);

  // Called at every scrape, for values that live elsewhere (per-task state, seconds since a
  // heartbeat). Families whose name is invalid or already rendered are skipped, as are samples
  // with invalid label names; a collector that throws contributes nothing.
  void AddCollector(std::function<std::vector<CollectedFamily>()> collector);

  // Prometheus text format 0.0.4.
  std::string Render() const;

 private:
  // Validates the family's name and label names and appends it; throws on a clash.
  void AddFamily(std::unique_ptr<FamilyBase> family);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_;  // Registration order.
  std::vector<std::function<std::vector<CollectedFamily>()>> collectors_;
};

// `count` buckets: start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// `count` buckets: start, start+width, start+2*width, ...
std::vector<double> LinearBuckets(double start, double width, int count);

// Prometheus rendering of a sample value: "3", "0.25", "NaN", "+Inf", "-Inf".
std::string FormatMetricValue(double v);

}  // namespace cohort

#endif  // COHORT_COMMON_METRICS_H_
