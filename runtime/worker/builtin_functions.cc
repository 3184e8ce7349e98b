#include "runtime/worker/builtin_functions.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cohort::runtime {

namespace {

// A number argument: integral (Int, Long) or not (Double).
struct Number {
  bool integral = true;
  int64_t i = 0;
  double d = 0;
};

absl::StatusOr<Number> AsNumber(const v1::Obj& obj, const std::string& what) {
  if (obj.has_int_data()) return Number{true, obj.int_data().data(), 0};
  if (obj.has_long_data()) return Number{true, obj.long_data().data(), 0};
  if (obj.has_double_data()) return Number{false, 0, obj.double_data().data()};
  if (obj.has_bool_data()) return Number{true, obj.bool_data().data() ? 1 : 0, 0};
  return absl::InvalidArgumentError(absl::StrCat(what, " is not a number"));
}

absl::StatusOr<v1::Obj> Sum(const std::vector<v1::Obj>& values, const std::string& fn) {
  bool integral = true;
  int64_t i = 0;
  double d = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    absl::StatusOr<Number> n = AsNumber(values[k], absl::StrCat(fn, ": argument ", k));
    if (!n.ok()) return n.status();
    if (n->integral) {
      if (__builtin_add_overflow(i, n->i, &i)) {
        return absl::OutOfRangeError(absl::StrCat(fn, ": the sum overflows 64 bits"));
      }
    } else {
      integral = false;
      d += n->d;
    }
  }
  v1::Obj out;
  if (integral) {
    out.mutable_int_data()->set_data(i);
  } else {
    out.mutable_double_data()->set_data(d + static_cast<double>(i));
  }
  return out;
}

absl::Status Arity(const std::string& fn, const std::vector<v1::Obj>& args, size_t want) {
  if (args.size() == want) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(fn, " takes ", want, " argument", want == 1 ? "" : "s", ", got ", args.size()));
}

absl::StatusOr<v1::Obj> Noop(const std::vector<v1::Obj>& args) {
  if (absl::Status s = Arity("cohort.noop", args, 0); !s.ok()) return s;
  v1::Obj out;
  out.mutable_empty_data();
  return out;
}

absl::StatusOr<v1::Obj> Add(const std::vector<v1::Obj>& args) {
  if (absl::Status s = Arity("cohort.add", args, 2); !s.ok()) return s;
  return Sum(args, "cohort.add");
}

absl::StatusOr<v1::Obj> SumAll(const std::vector<v1::Obj>& args) {
  if (args.size() == 1 && args[0].has_list_data()) {
    std::vector<v1::Obj> items(args[0].list_data().elem().begin(),
                               args[0].list_data().elem().end());
    return Sum(items, "cohort.sum");
  }
  return Sum(args, "cohort.sum");
}

absl::StatusOr<v1::Obj> SleepMs(const std::vector<v1::Obj>& args) {
  if (absl::Status s = Arity("cohort.sleep_ms", args, 1); !s.ok()) return s;
  if (!args[0].has_int_data() || args[0].int_data().data() < 0) {
    return absl::InvalidArgumentError("cohort.sleep_ms takes a non-negative Int (milliseconds)");
  }
  absl::SleepFor(absl::Milliseconds(args[0].int_data().data()));
  v1::Obj out;
  out.mutable_empty_data();
  return out;
}

absl::StatusOr<v1::Obj> Fail(const std::vector<v1::Obj>& args) {
  if (absl::Status s = Arity("cohort.fail", args, 1); !s.ok()) return s;
  if (!args[0].has_string_data()) {
    return absl::InvalidArgumentError("cohort.fail takes a String (the message to fail with)");
  }
  return absl::AbortedError(args[0].string_data().data());
}

}  // namespace

const std::vector<BuiltinFunction>& BuiltinFunctions() {
  static const std::vector<BuiltinFunction> kFunctions = {
      {"cohort.noop", Noop},        {"cohort.add", Add},   {"cohort.sum", SumAll},
      {"cohort.sleep_ms", SleepMs}, {"cohort.fail", Fail},
  };
  return kFunctions;
}

const BuiltinFunction* FindBuiltin(const std::string& name) {
  for (const BuiltinFunction& f : BuiltinFunctions()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace cohort::runtime
