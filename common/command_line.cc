#include "common/command_line.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cohort {

absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& flag, const std::string& text,
                                                 bool zero_ok) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " \"", text, "\" is not a duration such as 10s, 500ms or 5m"));
  }
  if (d == absl::ZeroDuration() && !zero_ok) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " \"", text, "\" must be more than 0"));
  }
  return d;
}

const char* Version() { return COHORT_VERSION; }

void AddVersionFlag(CLI::App& app) {
  app.set_version_flag("--version", app.get_name() + " " + Version(), "print the version and exit");
  auto formatter = std::make_shared<HelpFormatter>();
  formatter->column_width(app.get_formatter()->get_column_width());
  // Subcommands made before this took their parent's formatter then.
  std::vector<CLI::App*> apps = {&app};
  for (size_t i = 0; i < apps.size(); ++i) {
    apps[i]->formatter(formatter);
    for (CLI::App* sub : apps[i]->get_subcommands([](CLI::App*) { return true; })) {
      apps.push_back(sub);
    }
  }
}

namespace {

// What an option's value is, from its name, where CLI11 only knows TEXT.
std::string ValueKind(const std::string& name) {
  for (const char* tail : {"timeout", "interval", "tolerance", "period", "deadline", "duration",
                           "retention", "refresh", "settle", "poll", "-for", "wait"}) {
    if (absl::EndsWith(name, tail)) return "DURATION";
  }
  for (const char* tail : {"listen", "advertise", "address", "coordinator", "scheduler"}) {
    if (absl::EndsWith(name, tail)) return "HOST:PORT";
  }
  for (const char* tail :
       {"-dir", "file", "-ca", "-cert", "-key", "library", "socket", "kubeconfig"}) {
    if (absl::EndsWith(name, tail)) return "PATH";
  }
  for (const char* whole : {"task", "num-tasks", "workers", "replicas", "expected-gpus"}) {
    if (name == whole) return "N";
  }
  return "";
}

}  // namespace

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool positional) const {
  // "--register-barrier,--no-register-barrier{false}" -> "--register-barrier,
  // --no-register-barrier"
  std::string name = CLI::Formatter::make_option_name(opt, positional);
  std::string out;
  bool in_default = false;
  for (char c : name) {
    if (c == '{') in_default = true;
    if (!in_default) out += c == ',' ? std::string(", ") : std::string(1, c);
    if (c == '}') in_default = false;
  }
  return out;
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (!opt->get_option_text().empty() || opt->get_type_size() == 0) {
    return CLI::Formatter::make_option_opts(opt);
  }
  // CLI11 writes a checked option's type as "TYPE:CHECK": "TEXT:{table,json}",
  // "INT:INT in [1 - 64]".
  std::string type = opt->get_type_name();
  std::string check;
  if (size_t colon = type.find(':'); colon != std::string::npos) {
    check = type.substr(colon + 1);
    type.resize(colon);
  }
  std::string fallback = opt->get_default_str();
  const std::string name = opt->get_lnames().empty() ? "" : opt->get_lnames().front();
  if (check.size() > 2 && check.front() == '{' && check.back() == '}') {
    // One of a set: "table|json", as true|false.
    type = check.substr(1, check.size() - 2);
    std::replace(type.begin(), type.end(), ',', '|');
    check.clear();
  } else if (type == "BOOLEAN") {
    type = "true|false";
    if (fallback == "1") fallback = "true";
    if (fallback == "0") fallback = "false";
  } else if (type == "TEXT" || type == "INT" || type == "UINT") {
    const std::string kind = ValueKind(name);
    if (!kind.empty()) {
      type = kind;
    } else if (type != "TEXT") {
      type = "N";
    }
  }
  // A range keeps its words with the kind's name: "N in [1 - 64]".
  if (check.rfind("INT in ", 0) == 0 || check.rfind("UINT in ", 0) == 0) {
    type += check.substr(check.find(' '));
  } else if (!check.empty()) {
    type += ":" + check;
  }
  std::string out;
  if (!type.empty()) out += " " + get_label(type);
  if (!fallback.empty()) out += "=" + fallback;
  if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
  if (opt->get_required()) out += " " + get_label("REQUIRED");
  return out;
}

namespace {

// The deepest command on the command line that wants a subcommand and got none: the app
// itself, or one of its subcommands ("kv" of "cohortctl kv").
CLI::App* MissingSubcommand(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands()) {
    if (CLI::App* deeper = MissingSubcommand(sub)) return deeper;
  }
  if (app->get_require_subcommand_min() > 0 && app->get_subcommands().empty()) return app;
  return nullptr;
}

// "status, kv, barrier": the subcommands of `app`.
std::string SubcommandNames(const CLI::App* app) {
  std::string names;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    if (!names.empty()) names += ", ";
    names += sub->get_name();
  }
  return names;
}

}  // namespace

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    // A flag nobody knows is the first thing to say, before what is missing because of it.
    std::string unknown_flag;
    for (const std::string& arg : app.remaining(/*recurse=*/true)) {
      if (arg.size() > 1 && arg[0] == '-') {
        unknown_flag = arg.substr(0, arg.find('='));
        break;
      }
    }
    if (!unknown_flag.empty() && (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr ||
                                  dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)) {
      message = "unknown flag " + unknown_flag + " (see " + app.get_name() + " --help)";
    } else if (CLI::App* command = MissingSubcommand(&app);
               command != nullptr && (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr ||
                                      dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)) {
      // CLI11 says "A subcommand is required" or "The following argument was not expected":
      // name what was given instead, and what would do.
      std::vector<std::string> rest = command->remaining();
      if (rest.empty()) rest = app.remaining(/*recurse=*/true);
      const bool top = command == &app;
      const std::string help = top ? app.get_name() : app.get_name() + " " + command->get_name();
      const std::string choices =
          "(commands: " + SubcommandNames(command) + "; see " + help + " --help)";
      if (!rest.empty() && !rest.front().empty() && rest.front()[0] != '-') {
        message = "unknown command \"" + rest.front() + "\"" +
                  (top ? "" : " for " + command->get_name()) + " " + choices;
      } else {
        message =
            (top ? std::string("no command given") : command->get_name() + " needs a command") +
            " " + choices;
      }
    }
    const std::string unknown = "INI was not able to parse ";
    if (message.rfind(unknown, 0) == 0) {
      message = "the config file sets \"" + message.substr(unknown.size()) +
                "\", which is not an option (see --help)";
    }
    std::fprintf(stderr, "%s: %s\n", app.get_name().c_str(), message.c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace cohort
