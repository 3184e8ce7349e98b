// What every cohort program's command line has alike: --version, help that names what options
// take, one-line errors, duration flags (the YAML --config file: yaml_config.h).
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort {

// A duration flag's value: "10s", "500ms", "1h30m". A negative duration is refused, and zero
// unless `zero_ok`; the error is the one line the program prints, naming the flag:
// `--heartbeat-timeout "soon" is not a duration such as 10s, 500ms or 5m`.
absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& flag, const std::string& text,
                                                 bool zero_ok = true);

// cohort's version, as every binary's --version prints it ("cohortctl 0.1.0").
const char* Version();
// What every cohort program's command line has: `--version` (prints "<app name> <version>" on
// stdout and exits 0, through ParseCommandLine) and help that names what options take
// (DURATION, HOST:PORT, PATH, N, true|false) rather than CLI11's TEXT and BOOLEAN=1, and
// shows a flag's negation as a flag of its own (--register-barrier, --no-register-barrier).
void AddVersionFlag(CLI::App& app);

// The help formatter AddVersionFlag installs.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
};

// Parses the command line (and the config file). Returns an exit code when the program
// should stop now: 0 after --help or --version, 2 with a one-line reason on stderr for bad
// input ("<app name>: <reason>"). A command with subcommands that is given none, or an unknown
// one, says so, naming the command it did not know and the ones it has.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace cohort
