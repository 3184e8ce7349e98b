#pragma once

#include "common/metrics.h"
#include "service/core/coordination_service.h"

namespace cohort {

// The coordinator's metrics: counters fed by the core's observer callbacks, and gauges read
// from the service at scrape time. Names are listed in docs/metrics.md.
class CoordinatorMetrics : public ServiceObserver {
 public:
  explicit CoordinatorMetrics(MetricsRegistry& registry);
  // Scrape-time gauges read from `service`, which must outlive the registry's use.
  void Attach(const CoordinationService* service);

  void OnBarrierDone(const std::string& id, int64_t counter, const absl::Status& result,
                     absl::Duration open_for) override;
  void OnErrorPropagated(const TaskName& source, const absl::Status& error) override;

 private:
  MetricsRegistry& registry_;
  Family<Counter>& barriers_;
  Family<Histogram>& barrier_seconds_;
  Family<Counter>& errors_;
};

}  // namespace cohort
