// ThreadSanitizer builds only (COHORT_TSAN): makes the system's absl::Mutex, CondVar and
// Notification visible to TSan.
//
// Hand-written because no package does this: Debian's abseil is compiled without
// -fsanitize=thread, so its locks carry none of the annotations abseil adds in a TSan build,
// and TSan sees every access guarded by an absl::Mutex as a race. This file defines the
// locking entry points in the test program itself; the dynamic linker then binds every call
// (from cohort's code, from gRPC, from abseil's own inline wrappers such as MutexLock) to
// these, which tell TSan what the call does (__tsan_mutex_* annotations, as abseil's own
// TSan build does) and call the library's definition found with dlsym(RTLD_NEXT).
#include <dlfcn.h>
#include <link.h>
#include <sanitizer/tsan_interface.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

// TSan's runtime provides these (dynamic annotations); no header of clang 14 declares them.
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);

namespace {

// The library's own calls between these entry points (CondVar::WaitWithTimeout calling
// WaitWithDeadline, Notification::Notify locking its mutex) reach these definitions too;
// only the outermost call of a thread is annotated.
thread_local int depth = 0;

// The test program's own code (cohort's, and abseil's and gRPC's inline code compiled into
// it), as opposed to the shared libraries'. Only locks taken there are annotated: gRPC's own
// locks order memory through atomics TSan cannot see either (its reference counts), so
// annotating them alone would only trade one kind of false report for another.
struct ProgramText {
  uintptr_t begin = 0, end = 0;
};
ProgramText FindProgramText() {
  ProgramText text;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        auto* t = static_cast<ProgramText*>(out);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
            t->begin = info->dlpi_addr + ph.p_vaddr;
            t->end = t->begin + ph.p_memsz;
          }
        }
        return 1;  // the first object is the program itself
      },
      &text);
  return text;
}
bool FromProgram(const void* caller) {
  static const ProgramText text = FindProgramText();
  auto at = reinterpret_cast<uintptr_t>(caller);
  return at >= text.begin && at < text.end;
}

struct Outermost {
  explicit Outermost(const void* caller) : annotate_(depth == 0 && FromProgram(caller)) { ++depth; }
  ~Outermost() { --depth; }
  Outermost(const Outermost&) = delete;
  Outermost& operator=(const Outermost&) = delete;
  bool yes() const { return annotate_; }

 private:
  const bool annotate_;
};

// The library's definition of `symbol`, or abort: a test program cannot run without it.
void* Original(const char* symbol) {
  void* f = dlsym(RTLD_NEXT, symbol);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s not found: %s\n", symbol, dlerror());
    std::abort();
  }
  return f;
}

template <typename F>
F Fn(const char* symbol) {
  return reinterpret_cast<F>(Original(symbol));
}

// The mutexes this thread holds, and in which mode: Await and CondVar::Wait release and
// take again a mutex in the mode it is held.
struct Held {
  const void* mu;
  bool reader;
};
thread_local std::vector<Held> held;

void Took(const void* mu, bool reader) { held.push_back({mu, reader}); }
bool Dropped(const void* mu) {
  for (auto it = held.rbegin(); it != held.rend(); ++it) {
    if (it->mu == mu) {
      bool reader = it->reader;
      held.erase(std::next(it).base());
      return reader;
    }
  }
  return false;
}
bool HeldAsReader(const void* mu) {
  for (auto it = held.rbegin(); it != held.rend(); ++it) {
    if (it->mu == mu) return it->reader;
  }
  return false;
}
unsigned ReadFlag(bool reader) { return reader ? __tsan_mutex_read_lock : 0; }

void PreLock(const void* mu, bool reader, unsigned extra = 0) {
  __tsan_mutex_pre_lock(const_cast<void*>(mu), ReadFlag(reader) | extra);
}
void PostLock(const void* mu, bool reader, unsigned extra = 0) {
  __tsan_mutex_post_lock(const_cast<void*>(mu), ReadFlag(reader) | extra, 0);
  if (!(extra & __tsan_mutex_try_lock_failed)) Took(mu, reader);
}
void PreUnlock(const void* mu, bool reader) {
  __tsan_mutex_pre_unlock(const_cast<void*>(mu), ReadFlag(reader));
}
void PostUnlock(const void* mu, bool reader) {
  __tsan_mutex_post_unlock(const_cast<void*>(mu), ReadFlag(reader));
}

// A wait that releases `mu` and takes it again in the mode it is held.
template <typename Call>
auto Released(const void* mu, Call call) {
  const bool reader = HeldAsReader(mu);
  Dropped(mu);
  PreUnlock(mu, reader);
  PostUnlock(mu, reader);
  auto result = call();
  PreLock(mu, reader);
  PostLock(mu, reader);
  return result;
}

// A condition evaluated with TSan's eye on memory closed. Abseil evaluates a waiter's
// condition inside its lock and unlock operations, holding the lock but at a moment the
// annotations above cannot mark as held (the waiter's own LockWhen has not returned yet; an
// unlocking thread is already releasing). Conditions only read what the lock guards; what
// this gives up is a race inside a condition function itself.
bool Unwatched(void* cond) {
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  bool met = static_cast<const absl::Condition*>(cond)->Eval();
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  return met;
}
absl::Condition Wrap(const absl::Condition& cond) {
  return absl::Condition(&Unwatched, const_cast<absl::Condition*>(&cond));
}

// Notification's flag, an atomic read inline in the header without the library's lock.
const void* NotifiedFlag(const absl::Notification* n) {
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  static auto f = Fn<void (*)(Mutex*)>("_ZN4absl7debian35MutexD2Ev");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this);
    return;
  }
  __tsan_mutex_destroy(this, 0);
  f(this);
}

void Mutex::Lock() {
  static auto f = Fn<void (*)(Mutex*)>("_ZN4absl7debian35Mutex4LockEv");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this);
    return;
  }
  PreLock(this, false);
  f(this);
  PostLock(this, false);
}

void Mutex::ReaderLock() {
  static auto f = Fn<void (*)(Mutex*)>("_ZN4absl7debian35Mutex10ReaderLockEv");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this);
    return;
  }
  PreLock(this, true);
  f(this);
  PostLock(this, true);
}

bool Mutex::TryLock() {
  static auto f = Fn<bool (*)(Mutex*)>("_ZN4absl7debian35Mutex7TryLockEv");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this);
  }
  PreLock(this, false, __tsan_mutex_try_lock);
  bool ok = f(this);
  PostLock(this, false, __tsan_mutex_try_lock | (ok ? 0 : __tsan_mutex_try_lock_failed));
  return ok;
}

bool Mutex::ReaderTryLock() {
  static auto f = Fn<bool (*)(Mutex*)>("_ZN4absl7debian35Mutex13ReaderTryLockEv");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this);
  }
  PreLock(this, true, __tsan_mutex_try_lock);
  bool ok = f(this);
  PostLock(this, true, __tsan_mutex_try_lock | (ok ? 0 : __tsan_mutex_try_lock_failed));
  return ok;
}

void Mutex::Unlock() {
  static auto f = Fn<void (*)(Mutex*)>("_ZN4absl7debian35Mutex6UnlockEv");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this);
    return;
  }
  Dropped(this);
  PreUnlock(this, false);
  f(this);
  PostUnlock(this, false);
}

void Mutex::ReaderUnlock() {
  static auto f = Fn<void (*)(Mutex*)>("_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this);
    return;
  }
  Dropped(this);
  PreUnlock(this, true);
  f(this);
  PostUnlock(this, true);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto f =
      Fn<void (*)(Mutex*, const Condition&)>("_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this, Wrap(cond));
    return;
  }
  PreLock(this, false);
  f(this, Wrap(cond));
  PostLock(this, false);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto f = Fn<void (*)(Mutex*, const Condition&)>(
      "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this, Wrap(cond));
    return;
  }
  PreLock(this, true);
  f(this, Wrap(cond));
  PostLock(this, true);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto f = Fn<bool (*)(Mutex*, const Condition&, Duration)>(
      "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, Wrap(cond), timeout);
  }
  PreLock(this, false);
  bool met = f(this, Wrap(cond), timeout);
  PostLock(this, false);  // held either way
  return met;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto f = Fn<bool (*)(Mutex*, const Condition&, Duration)>(
      "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, Wrap(cond), timeout);
  }
  PreLock(this, true);
  bool met = f(this, Wrap(cond), timeout);
  PostLock(this, true);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto f = Fn<bool (*)(Mutex*, const Condition&, Time)>(
      "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, Wrap(cond), deadline);
  }
  PreLock(this, false);
  bool met = f(this, Wrap(cond), deadline);
  PostLock(this, false);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto f = Fn<bool (*)(Mutex*, const Condition&, Time)>(
      "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, Wrap(cond), deadline);
  }
  PreLock(this, true);
  bool met = f(this, Wrap(cond), deadline);
  PostLock(this, true);
  return met;
}

void Mutex::Await(const Condition& cond) {
  static auto f =
      Fn<void (*)(Mutex*, const Condition&)>("_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this, Wrap(cond));
    return;
  }
  Released(this, [&] {
    f(this, Wrap(cond));
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto f = Fn<bool (*)(Mutex*, const Condition&, Duration)>(
      "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, Wrap(cond), timeout);
  }
  return Released(this, [&] { return f(this, Wrap(cond), timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto f = Fn<bool (*)(Mutex*, const Condition&, Time)>(
      "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, Wrap(cond), deadline);
  }
  return Released(this, [&] { return f(this, Wrap(cond), deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static auto f = Fn<void (*)(CondVar*, Mutex*)>("_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this, mu);
    return;
  }
  Released(mu, [&] {
    f(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto f = Fn<bool (*)(CondVar*, Mutex*, Duration)>(
      "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, mu, timeout);
  }
  return Released(mu, [&] { return f(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto f = Fn<bool (*)(CondVar*, Mutex*, Time)>(
      "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, mu, deadline);
  }
  return Released(mu, [&] { return f(this, mu, deadline); });
}

void Notification::Notify() {
  static auto f = Fn<void (*)(Notification*)>("_ZN4absl7debian312Notification6NotifyEv");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    f(this);
    return;
  }
  __tsan_release(const_cast<void*>(NotifiedFlag(this)));
  f(this);
}

void Notification::WaitForNotification() const {
  static auto f =
      Fn<void (*)(const Notification*)>("_ZNK4absl7debian312Notification19WaitForNotificationEv");
  f(this);
  __tsan_acquire(const_cast<void*>(NotifiedFlag(this)));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto f = Fn<bool (*)(const Notification*, Duration)>(
      "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, timeout);
  }
  bool notified = f(this, timeout);
  if (notified) __tsan_acquire(const_cast<void*>(NotifiedFlag(this)));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static auto f = Fn<bool (*)(const Notification*, Time)>(
      "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  Outermost outer(__builtin_return_address(0));
  if (!outer.yes()) {
    return f(this, deadline);
  }
  bool notified = f(this, deadline);
  if (notified) __tsan_acquire(const_cast<void*>(NotifiedFlag(this)));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
