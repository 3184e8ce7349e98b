// `--config FILE`: a program's options from a YAML file (CLI11's config interface).
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

}  // namespace cohort
