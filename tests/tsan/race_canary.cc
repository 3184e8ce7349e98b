// ThreadSanitizer builds only: a deliberate data race, run by ctest, which passes only when
// TSan reports it. `make tsan-test` being clean means something only if a race would not be:
// this fails the moment the build, the flags or TSAN_OPTIONS stop catching one.
#include <cstdio>
#include <thread>

namespace {
int unguarded = 0;  // written by two threads, with nothing ordering them
}

int main() {
  std::thread other([] { unguarded = 1; });
  unguarded = 2;
  other.join();
  std::printf("no race was reported: %d\n", unguarded);
  return 0;
}
