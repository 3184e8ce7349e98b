// cohort's metrics on prometheus-cpp (Debian's prometheus-cpp-dev): the library keeps the
// counters, gauges and histograms and writes the text exposition. What this thin layer adds is
// what every cohort program relies on: a family's children by label values in the family's
// declared label order (WithLabels({"ml", "train-0"})), registration that throws on any clash
// of series names or a counter without "_total", and collectors for values that live elsewhere
// (per-task state, seconds since a heartbeat), read at every scrape.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_type.h"
#include "prometheus/registry.h"

namespace cohort {

// Increment() ignores a negative amount; Value() reads it.
using Counter = prometheus::Counter;
// Set(), Increment(), Decrement(), Value().
using Gauge = prometheus::Gauge;
// Observe(); the buckets are the family's.
using Histogram = prometheus::Histogram;

template <typename T>
class Family {
 public:
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  const std::string& name() const { return family_->GetName(); }

  // The child for these label values (in the order of the family's label names), made at the
  // first call. The reference stays valid until Remove() of the same values. Thread-safe; a
  // child already made costs a map lookup (the library's Add would build it again to compare).
  T& WithLabels(const std::vector<std::string>& values) {
    CheckArity(values);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(values);
    if (it != children_.end()) return *it->second;
    prometheus::Labels labels;
    for (size_t i = 0; i < values.size(); ++i) labels.emplace(label_names_[i], values[i]);
    T* child;
    if constexpr (std::is_same_v<T, Histogram>) {
      child = &family_->Add(labels, buckets_);
    } else {
      child = &family_->Add(labels);
    }
    children_.emplace(values, child);
    return *child;
  }

  void Remove(const std::vector<std::string>& values) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(values);
    if (it == children_.end()) return;
    family_->Remove(it->second);
    children_.erase(it);
  }

 private:
  friend class MetricsRegistry;

  Family(prometheus::Family<T>* family, std::vector<std::string> label_names,
         Histogram::BucketBoundaries buckets)
      : family_(family), label_names_(std::move(label_names)), buckets_(std::move(buckets)) {}

  void CheckArity(const std::vector<std::string>& values) const {
    if (values.size() != label_names_.size()) {
      throw std::invalid_argument("metric " + name() + " takes " +
                                  std::to_string(label_names_.size()) + " label values, got " +
                                  std::to_string(values.size()));
    }
  }

  prometheus::Family<T>* const family_;  // Owned by the registry.
  const std::vector<std::string> label_names_;
  const Histogram::BucketBoundaries buckets_;  // Histograms only.
  std::mutex mu_;
  std::map<std::vector<std::string>, T*> children_;  // Owned by family_.
};

// One sample of a collector, and its family. Only gauges and counters are collected.
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
  MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;
  ~MetricsRegistry();

  // Registration throws std::invalid_argument on an invalid name, a series name another
  // family has (a histogram has four: name, _bucket, _sum, _count), an invalid, reserved or
  // repeated label name, or (counters) a name that does not end in "_total".
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names);
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names);
  // `buckets`: finite, strictly increasing upper bounds (a trailing +Inf may be given; it is
  // always implied).
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names,
                                  std::vector<double> buckets);

  // Called at every scrape. A family whose name is invalid or already taken is skipped, as is
  // a sample with an invalid label name; a collector that throws contributes nothing.
  void AddCollector(std::function<std::vector<CollectedFamily>()> collector);

  // Prometheus text format 0.0.4 (the library's TextSerializer): the registered families in
  // registration order, each child by label values, a family without children as its HELP
  // and TYPE; then the collectors' families.
  std::string Render() const;

 private:
  // Checks the name and label names against every family registered so far and takes the
  // family's series names; throws on a clash.
  void Claim(const std::string& name, const std::string& type,
             const std::vector<std::string>& label_names);

  // A registered family as the exposition shows it even before its first child.
  struct Registered {
    const prometheus::Collectable* family;
    std::string name;
    std::string help;
    prometheus::MetricType type;
    std::vector<std::string> label_names;  // As declared; the exposition keeps this order.
  };

  const std::shared_ptr<prometheus::Registry> registry_;  // Owns the families.
  mutable std::mutex mu_;
  std::set<std::string> series_;        // Every registered family's series names.
  std::vector<Registered> registered_;  // In registration order.
  std::vector<std::unique_ptr<Family<Counter>>> counters_;
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_;
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_;
  std::vector<std::function<std::vector<CollectedFamily>()>> collectors_;
};

// `count` buckets: start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// `count` buckets: start, start+width, start+2*width, ...
std::vector<double> LinearBuckets(double start, double width, int count);

}  // namespace cohort
