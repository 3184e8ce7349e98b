#pragma once

#include <optional>
#include <string>

namespace cohort::gpu {

// A PCI function's address. NVML writes it "00000000:18:00.0" (upper-case, 8-digit domain),
// Linux sysfs "0000:18:00.0" (lower-case, 4 digits); comparing parsed addresses avoids caring.
struct PciAddress {
  unsigned int domain = 0;
  unsigned int bus = 0;
  unsigned int device = 0;
  unsigned int function = 0;

  bool operator==(const PciAddress& other) const {
    return domain == other.domain && bus == other.bus && device == other.device &&
           function == other.function;
  }
};

// Parses "domain:bus:device.function" in hex; empty when `text` is not such an address.
std::optional<PciAddress> ParsePciAddress(const std::string& text);

// The directory name of the device under /sys/bus/pci/devices.
std::string SysfsPciName(const PciAddress& address);

}  // namespace cohort::gpu
