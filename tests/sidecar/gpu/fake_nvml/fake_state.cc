#include "tests/sidecar/gpu/fake_nvml/fake_state.h"

namespace fake_nvml {

FakeState& State() {
  static FakeState state;  // destroyed when the library is unloaded
  return state;
}

FakeState::~FakeState() {
  for (EventSetState* events : event_sets) delete events;  // sets a test never freed
  for (GpmSampleState* sample : gpm_samples) delete sample;
}

FakeGpu* FindGpu(FakeState& state, nvml::Device device) {
  for (FakeGpu& gpu : state.node.gpus) {
    if (HandleOf(gpu) == device) return &gpu;
  }
  return nullptr;
}

}  // namespace fake_nvml
