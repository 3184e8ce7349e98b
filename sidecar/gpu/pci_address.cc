#include "sidecar/gpu/pci_address.h"

#include <cstdio>

namespace cohort::gpu {

std::optional<PciAddress> ParsePciAddress(const std::string& text) {
  PciAddress address;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x%n", &address.domain, &address.bus, &address.device,
                  &address.function, &consumed) != 4 ||
      static_cast<size_t>(consumed) != text.size()) {
    return std::nullopt;
  }
  return address;
}

std::string SysfsPciName(const PciAddress& address) {
  char name[32];
  std::snprintf(name, sizeof(name), "%04x:%02x:%02x.%x", address.domain, address.bus,
                address.device, address.function);
  return name;
}

}  // namespace cohort::gpu
