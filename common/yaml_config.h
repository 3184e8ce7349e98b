#pragma once

#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace cohort {

// Lets CLI11 read `--config FILE` as YAML. Top-level keys are option names
// (`heartbeat-timeout: 10s`; underscores work too); a list gives a repeatable option its
// values. Flags given on the command line override the file, as CLI11 does for any config.
class YamlConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

// Adds `--config FILE` (YAML) to the app.
void AddYamlConfigOption(CLI::App& app);

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
