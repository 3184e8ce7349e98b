// The load generator's scenarios. Each returns one JSON object of measurements.
#pragma once

#include <string>
#include <vector>

#include "bench/kv_driver.h"
#include "bench/task_client.h"
#include "nlohmann/json.hpp"

namespace cohort::bench {

struct Options {
  int tasks = 1000;
  int channels = 16;
  int pid = 0;                   // the server's pid: RSS and CPU are read from /proc
  int rounds = 20;               // barrier rounds
  double seconds = 5;            // heartbeat and kv: how long each measured phase runs
  double interval = 1;           // heartbeat: each task's heartbeat interval, seconds
  double heartbeat_timeout = 2;  // failure: the server's, seconds (for the report)
  int clients = 64;              // kv: concurrent clients
  int value_bytes = 100;         // kv
  std::vector<std::string> ops = {"set", "get", "blocking_get"};  // kv phases
};

// Registers tasks 0..tasks-1 through the register barrier. {"register_seconds", ...}.
nlohmann::json RegisterAll(TaskClient& client, const Options& o);

// Barrier rounds over every task: the last task arrives once the others are parked; a
// round's latency is from that last call to the last release.
nlohmann::json BarrierRounds(TaskClient& client, const Options& o);

// Every task heartbeats every o.interval for o.seconds; the server's CPU meanwhile.
nlohmann::json HeartbeatLoad(TaskClient& client, const Options& o);

// Set, get and blocking-get phases with o.clients closed loops and o.value_bytes values.
nlohmann::json KeyValueLoad(KvDriver& driver, const Options& o);

// RSS before registering, once registered, and with three calls parked per task.
nlohmann::json ParkedMemory(TaskClient& client, const Options& o);

// Heartbeat path of failure detection: task 0 stops heartbeating; time until every other
// task's PollForError has returned the error.
nlohmann::json HeartbeatFailure(TaskClient& client, const Options& o);

}  // namespace cohort::bench
