#include "bench/bench_util.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

namespace cohort::bench {

long RssKiB(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

double CpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string stat = ss.str();
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream rest(stat.substr(paren + 2));
  std::vector<std::string> fields((std::istream_iterator<std::string>(rest)),
                                  std::istream_iterator<std::string>());
  // utime and stime are fields 14 and 15 of the line, 12 and 13 after "(comm) ".
  if (fields.size() < 13) return -1;
  return (std::stod(fields[11]) + std::stod(fields[12])) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace cohort::bench
