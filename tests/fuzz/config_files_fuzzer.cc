// libFuzzer target: the YAML files the programs read. The first input byte picks the
// reader, the rest is the file:
//   - even: a kubeconfig, as cohort-operator loads it (LoadKubeconfig, its current context);
//   - odd: a `--config FILE` of the coordinator, sidecar or operator (YamlConfig), read by
//     CLI11 into an app with options of each kind (single, repeatable, flag).
// Whatever the bytes: a clear error (a status, or CLI11's ParseError) and no crash, no
// other exception escaping, no out-of-bounds read.
#include <fcntl.h>
#include <unistd.h>

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

namespace {

std::string* dir = nullptr;

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n <= 0) std::abort();
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

void Kubeconfig(const uint8_t* data, size_t size) {
  const std::string path = *dir + "/kubeconfig";
  WriteFile(path, data, size);
  (void)cohort::kube::LoadKubeconfig(path);
}

void ConfigFile(const uint8_t* data, size_t size) {
  const std::string path = *dir + "/config.yaml";
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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!dir) {
    spdlog::set_level(spdlog::level::off);
    char pattern[] = "/tmp/cohort-config-fuzz-XXXXXX";
    if (!mkdtemp(pattern)) std::abort();
    dir = new std::string(pattern);
  }
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    Kubeconfig(data + 1, size - 1);
  } else {
    ConfigFile(data + 1, size - 1);
  }
  return 0;
}
