// The store barrier of PyTorch's TCPStore protocol driven from C++: every simulated rank a
// connection of its own, all served by one thread with blocking writes and epoll for the
// releases, so that the figure is the server's rather than a Python driver's (one thread per
// rank taking the GIL in turn). The same barrier as bench/tcpstore_driver.py's: each rank
// ADDs 1 to the barrier's key, the one that reaches N SETs "<key>/done", the others WAIT for
// it. Any TCPStore server: torch's own, cohort-coordinator --torch-store-listen, a sidecar's.
#pragma once

#include <string>

#include "bench/scenarios.h"
#include "nlohmann/json.hpp"

namespace cohort::bench {

// Connects o.tasks ranks to `address` (HOST:PORT), passes one store barrier with all of them
// at once ({"connect_seconds", "register_seconds", "register_failed"}), then for the barrier
// scenario a burst barrier and o.rounds rounds timed from the last arrival to the last
// release, in bench/tcpstore_driver.py's keys.
nlohmann::json TcpStoreBarriers(const std::string& address, const std::string& scenario,
                                const Options& o);

// The server's RSS (o.pid) before any rank, with o.tasks ranks connected, and with each of
// them parked in a WAIT for a key nobody sets: {"rss_kib_before", "rss_kib_connected",
// "rss_kib_waiting", "bytes_per_rank", "bytes_per_waiting_rank"}.
nlohmann::json TcpStoreMemory(const std::string& address, const Options& o);

}  // namespace cohort::bench
