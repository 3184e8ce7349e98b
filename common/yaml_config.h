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

// Parses the command line (and the config file). Returns an exit code when the program
// should stop now: 0 after --help, 2 with a one-line reason on stderr for bad input.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace cohort
