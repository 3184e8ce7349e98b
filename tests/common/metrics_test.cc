#include "common/metrics.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace cohort {
namespace {

TEST(MetricsTest, CounterRendersHelpTypeAndLabelledSamples) {
  MetricsRegistry registry;
  auto& requests = registry.AddCounter("cohort_requests_total", "RPCs served.", {"method", "code"});
  requests.WithLabels({"Barrier", "OK"}).Increment();
  requests.WithLabels({"Barrier", "OK"}).Increment(2);
  requests.WithLabels({"Heartbeat", "OK"}).Increment(0.5);

  EXPECT_EQ(registry.Render(),
            "# HELP cohort_requests_total RPCs served.\n"
            "# TYPE cohort_requests_total counter\n"
            "cohort_requests_total{method=\"Barrier\",code=\"OK\"} 3\n"
            "cohort_requests_total{method=\"Heartbeat\",code=\"OK\"} 0.5\n");
}

TEST(MetricsTest, CounterIgnoresNegativeIncrements) {
  MetricsRegistry registry;
  Counter& c = registry.AddCounter("c_total", "h", {}).WithLabels({});
  c.Increment(5);
  c.Increment(-3);
  EXPECT_EQ(c.Value(), 5);
}

TEST(MetricsTest, GaugeWithoutLabelsRendersBareName) {
  MetricsRegistry registry;
  Gauge& tasks = registry.AddGauge("cohort_tasks", "Connected tasks.", {}).WithLabels({});
  tasks.Set(10);
  tasks.Increment();
  tasks.Decrement(4);

  EXPECT_EQ(registry.Render(),
            "# HELP cohort_tasks Connected tasks.\n"
            "# TYPE cohort_tasks gauge\n"
            "cohort_tasks 7\n");
}

TEST(MetricsTest, HistogramRendersCumulativeBucketsSumAndCount) {
  MetricsRegistry registry;
  auto& latency = registry.AddHistogram("rpc_seconds", "RPC latency.", {"method"}, {0.1, 1, 10});
  Histogram& h = latency.WithLabels({"Barrier"});
  h.Observe(0.05);
  h.Observe(0.1);  // Bounds are inclusive.
  h.Observe(5);
  h.Observe(100);

  EXPECT_EQ(h.Collect().histogram.sample_count, 4u);
  EXPECT_DOUBLE_EQ(h.Collect().histogram.sample_sum, 105.15);
  EXPECT_EQ(registry.Render(),
            "# HELP rpc_seconds RPC latency.\n"
            "# TYPE rpc_seconds histogram\n"
            "rpc_seconds_count{method=\"Barrier\"} 4\n"
            "rpc_seconds_sum{method=\"Barrier\"} 105.15\n"
            "rpc_seconds_bucket{method=\"Barrier\",le=\"0.1\"} 2\n"
            "rpc_seconds_bucket{method=\"Barrier\",le=\"1\"} 2\n"
            "rpc_seconds_bucket{method=\"Barrier\",le=\"10\"} 3\n"
            "rpc_seconds_bucket{method=\"Barrier\",le=\"+Inf\"} 4\n");
}

TEST(MetricsTest, FamiliesRenderInRegistrationOrderAndChildrenByLabelValues) {
  MetricsRegistry registry;
  auto& b = registry.AddGauge("b", "second letter", {"x"});
  auto& a = registry.AddGauge("a", "first letter", {});
  b.WithLabels({"zz"}).Set(1);
  b.WithLabels({"aa"}).Set(2);
  a.WithLabels({}).Set(3);

  EXPECT_EQ(registry.Render(),
            "# HELP b second letter\n# TYPE b gauge\nb{x=\"aa\"} 2\nb{x=\"zz\"} 1\n"
            "# HELP a first letter\n# TYPE a gauge\na 3\n");
}

TEST(MetricsTest, FamilyWithoutChildrenPrintsHelpAndType) {
  MetricsRegistry registry;
  registry.AddCounter("errors_total", "Errors.", {"kind"});
  EXPECT_EQ(registry.Render(), "# HELP errors_total Errors.\n# TYPE errors_total counter\n");
}

TEST(MetricsTest, RemovedChildIsNoLongerRendered) {
  MetricsRegistry registry;
  auto& g = registry.AddGauge("g", "h", {"task"});
  g.WithLabels({"0"}).Set(1);
  g.WithLabels({"1"}).Set(1);
  g.Remove({"0"});
  EXPECT_EQ(registry.Render(), "# HELP g h\n# TYPE g gauge\ng{task=\"1\"} 1\n");
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  MetricsRegistry registry;
  registry.AddGauge("g", "h", {"v"}).WithLabels({"a\\b\"c\nd"}).Set(1);
  EXPECT_EQ(registry.Render(), "# HELP g h\n# TYPE g gauge\ng{v=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(MetricsTest, HelpIsEscaped) {
  MetricsRegistry registry;
  registry.AddGauge("g", "back\\slash \"quoted\"\nnext", {});
  EXPECT_EQ(registry.Render(), "# HELP g back\\\\slash \"quoted\"\\nnext\n# TYPE g gauge\n");
}

TEST(MetricsTest, ValuesRenderWithoutExponentNoise) {
  for (const auto& [value, text] : std::vector<std::pair<double, std::string>>{
           {0, "0"},
           {42, "42"},
           {-7, "-7"},
           {1234567890123, "1234567890123"},
           {0.1, "0.1"},
           {2.5e-7, "2.5e-07"},
           {std::numeric_limits<double>::infinity(), "+Inf"},
           {-std::numeric_limits<double>::infinity(), "-Inf"}}) {
    MetricsRegistry registry;
    registry.AddGauge("g", "h", {}).WithLabels({}).Set(value);
    EXPECT_EQ(registry.Render(), "# HELP g h\n# TYPE g gauge\ng " + text + "\n");
  }
}

// The same label values are the same child; values go to the family's label names in the
// order they were declared, and the exposition writes them in that order.
TEST(MetricsTest, ChildrenAreKeyedByLabelValuesInDeclaredOrder) {
  MetricsRegistry registry;
  auto& g = registry.AddGauge("g", "h", {"pod", "namespace"});
  Gauge& child = g.WithLabels({"train-0", "ml"});
  EXPECT_EQ(&g.WithLabels({"train-0", "ml"}), &child);
  EXPECT_NE(&g.WithLabels({"ml", "train-0"}), &child);
  child.Set(1);
  EXPECT_NE(registry.Render().find("g{pod=\"train-0\",namespace=\"ml\"} 1\n"), std::string::npos)
      << registry.Render();
  // A removed child is made anew, from zero.
  g.Remove({"train-0", "ml"});
  EXPECT_EQ(g.WithLabels({"train-0", "ml"}).Value(), 0);
}

TEST(MetricsTest, InvalidMetricNamesAreRejected) {
  MetricsRegistry registry;
  EXPECT_THROW(registry.AddGauge("", "h", {}), std::invalid_argument);
  EXPECT_THROW(registry.AddGauge("1abc", "h", {}), std::invalid_argument);
  EXPECT_THROW(registry.AddGauge("a-b", "h", {}), std::invalid_argument);
  EXPECT_NO_THROW(registry.AddGauge("ns:sub_name1", "h", {}));
}

TEST(MetricsTest, InvalidLabelNamesAreRejected) {
  MetricsRegistry registry;
  EXPECT_THROW(registry.AddGauge("g1", "h", {"a:b"}), std::invalid_argument);
  EXPECT_THROW(registry.AddGauge("g2", "h", {"__reserved"}), std::invalid_argument);
  EXPECT_THROW(registry.AddGauge("g3", "h", {"9x"}), std::invalid_argument);
  EXPECT_THROW(registry.AddGauge("g4", "h", {"x", "x"}), std::invalid_argument);
  EXPECT_THROW(registry.AddHistogram("h1", "h", {"le"}, {1}), std::invalid_argument);
}

TEST(MetricsTest, DuplicateNamesAreRejected) {
  MetricsRegistry registry;
  registry.AddGauge("g", "h", {});
  registry.AddHistogram("lat", "h", {}, {1});
  EXPECT_THROW(registry.AddGauge("g", "h", {}), std::invalid_argument);
  EXPECT_THROW(registry.AddGauge("lat_count", "h", {}), std::invalid_argument);
}

TEST(MetricsTest, CounterNameWithoutTotalSuffixIsRejected) {
  MetricsRegistry registry;
  try {
    registry.AddCounter("requests", "h", {});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("_total"), std::string::npos) << e.what();
  }
}

TEST(MetricsTest, UnsortedHistogramBucketsAreRejected) {
  MetricsRegistry registry;
  EXPECT_THROW(registry.AddHistogram("h", "h", {}, {1, 1}), std::invalid_argument);
  EXPECT_THROW(registry.AddHistogram("h", "h", {}, {2, 1}), std::invalid_argument);
}

TEST(MetricsTest, WrongNumberOfLabelValuesIsRejected) {
  MetricsRegistry registry;
  auto& f = registry.AddGauge("g", "h", {"a", "b"});
  EXPECT_THROW(f.WithLabels({"x"}), std::invalid_argument);
  EXPECT_THROW(f.WithLabels({"x", "y", "z"}), std::invalid_argument);
}

TEST(MetricsTest, ConcurrentIncrementsSumExactly) {
  MetricsRegistry registry;
  auto& counters = registry.AddCounter("ops_total", "h", {});
  auto& histograms = registry.AddHistogram("op_size", "h", {}, {10});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Counter& c = counters.WithLabels({});
      Histogram& h = histograms.WithLabels({});
      for (int i = 0; i < kPerThread; ++i) {
        c.Increment();
        h.Observe(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counters.WithLabels({}).Value(), kThreads * kPerThread);
  EXPECT_EQ(histograms.WithLabels({}).Collect().histogram.sample_count,
            uint64_t{kThreads * kPerThread});
  EXPECT_EQ(histograms.WithLabels({}).Collect().histogram.sample_sum, kThreads * kPerThread);
}

TEST(MetricsTest, CollectorFamiliesRenderAfterRegisteredOnes) {
  MetricsRegistry registry;
  int scrapes = 0;
  registry.AddCollector([&scrapes] {
    ++scrapes;
    return std::vector<CollectedFamily>{{"task_heartbeat_age_seconds",
                                         "Seconds since the last heartbeat.",
                                         "gauge",
                                         {{{{"task", "1"}}, 2.5}, {{{"task", "0"}}, 0.25}}}};
  });
  registry.AddGauge("cohort_up", "1 while serving.", {}).WithLabels({}).Set(1);

  EXPECT_EQ(registry.Render(),
            "# HELP cohort_up 1 while serving.\n# TYPE cohort_up gauge\ncohort_up 1\n"
            "# HELP task_heartbeat_age_seconds Seconds since the last heartbeat.\n"
            "# TYPE task_heartbeat_age_seconds gauge\n"
            "task_heartbeat_age_seconds{task=\"0\"} 0.25\n"
            "task_heartbeat_age_seconds{task=\"1\"} 2.5\n");
  registry.Render();
  EXPECT_EQ(scrapes, 2);
}

TEST(MetricsTest, CollectorFamilyWithRegisteredNameIsSkipped) {
  MetricsRegistry registry;
  registry.AddGauge("g", "registered", {}).WithLabels({}).Set(1);
  registry.AddCollector([] {
    return std::vector<CollectedFamily>{{"g", "collected", "gauge", {{{}, 2}}},
                                        {"bad name", "invalid", "gauge", {{{}, 3}}},
                                        {"other", "collected", "gauge", {{{}, 4}}}};
  });
  EXPECT_EQ(registry.Render(),
            "# HELP g registered\n# TYPE g gauge\ng 1\n"
            "# HELP other collected\n# TYPE other gauge\nother 4\n");
}

TEST(MetricsTest, CollectorThatThrowsContributesNothing) {
  MetricsRegistry registry;
  registry.AddCollector([]() -> std::vector<CollectedFamily> { throw std::runtime_error("x"); });
  EXPECT_EQ(registry.Render(), "");
}

TEST(MetricsTest, ExponentialBucketsMultiplyByFactor) {
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 4), (std::vector<double>{0.001, 0.01, 0.1, 1}));
  EXPECT_THROW(ExponentialBuckets(0, 2, 3), std::invalid_argument);
  EXPECT_THROW(ExponentialBuckets(1, 1, 3), std::invalid_argument);
}

// Runs `command` through the shell; returns its exit status and combined output.
std::pair<int, std::string> RunShell(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST(MetricsTest, RenderedTextPassesPromtoolCheck) {
  auto [found, where] = RunShell("command -v promtool");
  ASSERT_EQ(found, 0) << "promtool not found on PATH; install the 'prometheus' package "
                         "(tools/deps.sh) to run this test";

  MetricsRegistry registry;
  auto& requests =
      registry.AddCounter("cohort_rpc_requests_total", "RPCs \\ served\nby method.", {"method"});
  requests.WithLabels({"Barrier"}).Increment(3);
  requests.WithLabels({"odd \"value\"\nwith newline"}).Increment();
  registry.AddCounter("cohort_restarts_total", "Restarts.", {});
  registry.AddGauge("cohort_tasks", "Tasks.", {"state"}).WithLabels({"running"}).Set(4);
  registry.AddGauge("cohort_nan", "Not a number.", {}).WithLabels({}).Set(std::nan(""));
  auto& latency = registry.AddHistogram("cohort_rpc_duration_seconds", "RPC latency.", {"method"},
                                        ExponentialBuckets(0.001, 4, 6));
  latency.WithLabels({"Barrier"}).Observe(0.02);
  latency.WithLabels({"Heartbeat"}).Observe(7);
  registry.AddCollector([] {
    return std::vector<CollectedFamily>{
        {"cohort_heartbeat_age_seconds", "Age.", "gauge", {{{{"task", "0"}}, 1.5}}},
        {"cohort_collected_events_total", "Events.", "counter", {{{}, 12}}}};
  });

  char path[] = "/tmp/cohort_metrics_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << registry.Render();
  auto [status, output] = RunShell(std::string("promtool check metrics < ") + path);
  std::remove(path);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "");
}

}  // namespace
}  // namespace cohort
