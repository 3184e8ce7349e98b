#include "common/yaml_config.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "yaml-cpp/yaml.h"

namespace cohort {
namespace {

std::string OptionName(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

}  // namespace

std::string YamlConfig::to_config(const CLI::App* app, bool default_also, bool, std::string) const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_lnames().empty() || opt->get_lnames()[0] == "config" ||
        opt->get_lnames()[0] == "help") {
      continue;
    }
    std::vector<std::string> values = opt->reduced_results();
    if (values.empty() && default_also && !opt->get_default_str().empty()) {
      values.push_back(opt->get_default_str());
    }
    if (values.empty()) continue;
    out << YAML::Key << opt->get_lnames()[0] << YAML::Value;
    if (values.size() == 1) {
      out << values[0];
    } else {
      out << YAML::Flow << values;
    }
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& input) const {
  YAML::Node root;
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    throw CLI::ConversionError("config",
                               std::string("the config file is not valid YAML: ") + e.what());
  }
  std::vector<CLI::ConfigItem> items;
  if (root.IsNull()) return items;
  if (!root.IsMap()) {
    throw CLI::ConversionError("config", "the config file must be a YAML mapping of option: value");
  }
  for (const auto& entry : root) {
    CLI::ConfigItem item;
    if (!entry.first.IsScalar()) {
      throw CLI::ConversionError(
          "config", "the config file's keys must be option names, not lists or mappings (line " +
                        std::to_string(entry.first.Mark().line + 1) + ")");
    }
    item.name = OptionName(entry.first.as<std::string>());
    const YAML::Node& value = entry.second;
    if (value.IsSequence()) {
      for (const auto& v : value) {
        if (!v.IsScalar()) {
          throw CLI::ConversionError(
              item.name, "config key \"" + item.name + "\" must be a scalar or a list of scalars");
        }
        item.inputs.push_back(v.as<std::string>());
      }
    } else if (value.IsScalar()) {
      item.inputs.push_back(value.as<std::string>());
    } else if (value.IsNull()) {
      continue;
    } else {
      throw CLI::ConversionError(
          item.name, "config key \"" + item.name + "\" must be a scalar or a list of scalars");
    }
    items.push_back(std::move(item));
  }
  return items;
}

void AddYamlConfigOption(CLI::App& app) {
  app.config_formatter(std::make_shared<YamlConfig>());
  app.set_config("--config", "", "YAML file of option: value pairs; flags override it");
  app.allow_config_extras(false);
}

}  // namespace cohort
