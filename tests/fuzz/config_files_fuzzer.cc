// libFuzzer target: the YAML files the programs read. The first input byte picks the
// reader, the rest is the file:
//   - even: a kubeconfig, as cohort-operator loads it (LoadKubeconfig, its current context);
//   - odd: a `--config FILE` of the coordinator, sidecar or operator (YamlConfig), read by
//     CLI11 into an app with options of each kind (single, repeatable, flag).
// Whatever the bytes: a clear error (a status, or CLI11's ParseError) and no crash, no
// other exception escaping, no out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/yaml_config.h"
#include "operator/kube/kube_config.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/fuzz_files.h"

namespace {

using cohort::fuzz::ScratchDir;
using cohort::fuzz::WriteFile;

void Kubeconfig(const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/kubeconfig";
  WriteFile(path, data, size);
  (void)cohort::kube::LoadKubeconfig(path);
}

void ConfigFile(const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/config.yaml";
  WriteFile(path, data, size);
  CLI::App app;
  cohort::AddYamlConfigOption(app);
  std::string listen, heartbeat;
  std::vector<std::string> jobs;
  int port = 0;
  bool flag = false;
  app.add_option("--listen", listen);
  app.add_option("--heartbeat-timeout", heartbeat);
  app.add_option("--job", jobs)->take_all();
  app.add_option("--port", port);
  app.add_flag("--register-barrier,!--no-register-barrier", flag);
  std::vector<std::string> args = {"fuzz", "--config", path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
  }
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    (void)cohort::YamlConfig().from_config(in);
  } catch (const CLI::ParseError&) {
  }
}

}  // namespace

// The parsers log what they refuse; a million lines would only slow the fuzzer down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    Kubeconfig(data + 1, size - 1);
  } else {
    ConfigFile(data + 1, size - 1);
  }
  return 0;
}
