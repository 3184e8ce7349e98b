#pragma once

// Where a test finds what the build made (programs, the fake NVML) and the sources' test data,
// worked out when it runs, from the test binary's own path: every test binary is built into
// <build>/bin (CMAKE_RUNTIME_OUTPUT_DIRECTORY). The CMake definitions that name such files
// (COHORT_FAKE_NVML_PATH, COHORT_GPU_TEST_DATA_DIR, ...) are paths relative to the build
// directory: an absolute path compiled into a test differs in every checkout, and ccache could
// then not reuse the test's objects in a fresh clone (CI's).

#include <unistd.h>

#include <climits>
#include <string>

namespace cohort::testing {

// The build directory: the parent of the directory that holds the running test binary.
inline const std::string& BuildDir() {
  static const std::string dir = [] {
    char path[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) return std::string(".");
    const std::string exe(path, static_cast<size_t>(n));
    const std::string bin = exe.substr(0, exe.rfind('/'));
    return bin.substr(0, bin.rfind('/'));
  }();
  return dir;
}

// A path relative to the build directory, made absolute.
inline std::string InBuild(const std::string& relative) { return BuildDir() + "/" + relative; }

// Where the build put cohort's programs.
inline std::string BinDir() { return InBuild("bin"); }

}  // namespace cohort::testing
