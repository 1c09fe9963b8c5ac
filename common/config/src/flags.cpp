#include "wisp/config/flags.hpp"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace wisp::config {
namespace {

std::string EnvNameFor(const std::string& flag) {
  std::string env = "WISP_";
  for (char c : flag) env.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(c)));
  return env;
}

std::string Quote(std::string_view v) { return "\"" + std::string(v) + "\""; }

}  // namespace

absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("empty duration");
  // A bare integer is seconds, as most operators expect from "--timeout 30".
  bool all_digits = true;
  for (char c : text) all_digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
  if (all_digits) {
    int64_t n = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    // The same bound as the unit form below (1e15 ms, about 31,000 years), so "n * 1000" cannot
    // overflow.
    if (ec != std::errc() || n > 1'000'000'000'000)
      return absl::InvalidArgumentError(Quote(text) + " is out of range");
    return std::chrono::milliseconds(n * 1000);
  }
  double total_ms = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
      ++i;
    if (start == i)
      return absl::InvalidArgumentError(Quote(text) + " is not a duration like 90s, 5m, 1h30m");
    double value = std::strtod(std::string(text.substr(start, i - start)).c_str(), nullptr);
    size_t ustart = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    const std::string_view unit = text.substr(ustart, i - ustart);
    double scale;
    if (unit == "ms")
      scale = 1;
    else if (unit == "s")
      scale = 1000;
    else if (unit == "m")
      scale = 60'000;
    else if (unit == "h")
      scale = 3'600'000;
    else if (unit == "d")
      scale = 86'400'000;
    else
      return absl::InvalidArgumentError(Quote(text) + " has unknown unit " + Quote(unit) +
                                        " (use ms, s, m, h, d)");
    total_ms += value * scale;
  }
  if (total_ms > 1e15) return absl::InvalidArgumentError(Quote(text) + " is out of range");
  return std::chrono::milliseconds(static_cast<int64_t>(total_ms));
}

std::string FormatDuration(std::chrono::milliseconds d) {
  int64_t ms = d.count();
  if (ms == 0) return "0s";
  if (ms % 1000 != 0) return std::to_string(ms) + "ms";
  int64_t s = ms / 1000;
  std::string out;
  if (s >= 3600) {
    out += std::to_string(s / 3600) + "h";
    s %= 3600;
  }
  if (s >= 60) {
    out += std::to_string(s / 60) + "m";
    s %= 60;
  }
  if (s > 0) out += std::to_string(s) + "s";
  return out;
}

struct Flags::Impl {
  struct Setting {
    std::string name;
    std::string env;
    std::string help;
    std::string type;  // string|int|bool|duration|enum
    std::string default_text;
    std::vector<std::string> choices;
    // Parses and stores a value; the message names neither the setting nor its source (the caller
    // does).
    std::function<absl::Status(const std::string&)> set;
    // Non-empty: a secret, refused on the command line; what to use instead.
    std::string secret_instead = {};
  };
  std::string program;
  std::string summary;
  std::string description;
  std::string examples;
  std::vector<Setting> settings;
  std::vector<std::string> positional;
  bool help = false;
  bool version = false;

  Setting* Find(std::string_view name) {
    for (auto& s : settings)
      if (s.name == name) return &s;
    return nullptr;
  }
  void Add(Setting s) { settings.push_back(std::move(s)); }
};

Flags::Flags(std::string program, std::string summary) : impl_(std::make_unique<Impl>()) {
  impl_->program = std::move(program);
  impl_->summary = std::move(summary);
}
Flags::~Flags() = default;

void Flags::Description(std::string text) { impl_->description = std::move(text); }
void Flags::Examples(std::string text) { impl_->examples = std::move(text); }

void Flags::String(std::string name, std::string* dest, std::string help,
                   Validator<std::string> v) {
  std::string env = EnvNameFor(name);
  impl_->Add({std::move(name),
              std::move(env),
              std::move(help),
              "string",
              *dest,
              {},
              [dest, v](const std::string& text) -> absl::Status {
                if (v) WISP_RETURN_IF_ERROR(v(text));
                *dest = text;
                return absl::OkStatus();
              }});
}

Flags::Validator<int64_t> Flags::Between(int64_t lo, int64_t hi) {
  return [lo, hi](const int64_t& n) {
    return n >= lo && n <= hi ? absl::OkStatus()
                              : absl::InvalidArgumentError("must be between " + std::to_string(lo) +
                                                           " and " + std::to_string(hi));
  };
}

void Flags::Int(std::string name, int64_t* dest, std::string help, Validator<int64_t> v) {
  std::string env = EnvNameFor(name);
  impl_->Add({std::move(name),
              std::move(env),
              std::move(help),
              "int",
              std::to_string(*dest),
              {},
              [dest, v](const std::string& text) -> absl::Status {
                int64_t n = 0;
                auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
                if (ec != std::errc() || p != text.data() + text.size() || text.empty()) {
                  return absl::InvalidArgumentError(Quote(text) + " is not an integer");
                }
                if (v) WISP_RETURN_IF_ERROR(v(n));
                *dest = n;
                return absl::OkStatus();
              }});
}

void Flags::Bool(std::string name, bool* dest, std::string help) {
  std::string env = EnvNameFor(name);
  impl_->Add({std::move(name),
              std::move(env),
              std::move(help),
              "bool",
              *dest ? "true" : "false",
              {},
              [dest](const std::string& text) -> absl::Status {
                if (text == "true" || text == "1" || text == "yes") {
                  *dest = true;
                  return absl::OkStatus();
                }
                if (text == "false" || text == "0" || text == "no") {
                  *dest = false;
                  return absl::OkStatus();
                }
                return absl::InvalidArgumentError(Quote(text) +
                                                  " is not a boolean (true or false)");
              }});
}

void Flags::Duration(std::string name, std::chrono::milliseconds* dest, std::string help,
                     Validator<std::chrono::milliseconds> v) {
  std::string env = EnvNameFor(name);
  impl_->Add({std::move(name),
              std::move(env),
              std::move(help),
              "duration",
              FormatDuration(*dest),
              {},
              [dest, v](const std::string& text) -> absl::Status {
                WISP_ASSIGN_OR_RETURN(auto d, ParseDuration(text));
                if (v) WISP_RETURN_IF_ERROR(v(d));
                *dest = d;
                return absl::OkStatus();
              }});
}

void Flags::Enum(std::string name, std::string* dest, std::vector<std::string> choices,
                 std::string help) {
  std::string env = EnvNameFor(name);
  auto c = choices;
  impl_->Add({std::move(name), std::move(env), std::move(help), "enum", *dest, std::move(choices),
              [dest, c](const std::string& text) -> absl::Status {
                for (const auto& choice : c) {
                  if (choice == text) {
                    *dest = text;
                    return absl::OkStatus();
                  }
                }
                std::string list;
                for (const auto& choice : c) list += (list.empty() ? "" : ", ") + choice;
                return absl::InvalidArgumentError(Quote(text) + " is not one of " + list);
              }});
}

void Flags::Env(std::string env_name) {
  if (!impl_->settings.empty()) impl_->settings.back().env = std::move(env_name);
}

void Flags::Secret(std::string instead) {
  if (!impl_->settings.empty()) impl_->settings.back().secret_instead = std::move(instead);
}

absl::Status Flags::Parse(int argc, const char* const* argv) {
  std::map<std::string, std::pair<std::string, std::string>> from_flags;  // name -> (value, source)
  std::string config_file;
  bool config_from_flag = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) impl_->positional.push_back(argv[i]);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      impl_->help = true;
      continue;
    }
    if (arg == "--version") {
      impl_->version = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      impl_->positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "config") {
      if (!value) {
        if (i + 1 >= argc) return absl::InvalidArgumentError("--config: needs a file name");
        value = argv[++i];
      }
      config_file = *value;
      config_from_flag = true;
      continue;
    }
    Impl::Setting* s = impl_->Find(name);
    if (s == nullptr && name.rfind("no-", 0) == 0) {
      Impl::Setting* b = impl_->Find(name.substr(3));
      if (b != nullptr && b->type == "bool" && !value) {
        from_flags[b->name] = {"false", "--" + name};
        continue;
      }
    }
    if (s == nullptr) {
      return absl::InvalidArgumentError("--" + name + ": unknown flag (see --help)");
    }
    if (!s->secret_instead.empty()) {
      // Refused whatever the value: by the time a warning could be read, `ps` has shown it.
      return absl::InvalidArgumentError("--" + name +
                                        ": a secret is not taken on the command line, where ps "
                                        "shows it to every user of the machine; use " +
                                        s->secret_instead);
    }
    if (!value) {
      if (s->type == "bool") {
        value = "true";
      } else {
        if (i + 1 >= argc) return absl::InvalidArgumentError("--" + name + ": needs a value");
        value = argv[++i];
      }
    }
    from_flags[s->name] = {*value, "--" + name};
  }
  if (impl_->help || impl_->version) return absl::OkStatus();

  if (!config_from_flag) {
    if (const char* e = std::getenv("WISP_CONFIG"); e != nullptr && *e != '\0') config_file = e;
  }
  // Lowest precedence first: file, then environment, then flags; each later one overwrites.
  if (!config_file.empty()) {
    YAML::Node root;
    try {
      root = YAML::LoadFile(config_file);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError("--config: " + config_file + ": " + e.what());
    }
    if (root && !root.IsNull()) {
      if (!root.IsMap())
        return absl::InvalidArgumentError("--config: " + config_file + ": not a YAML mapping");
      for (const auto& kv : root) {
        // Only scalars are read, never converted with as<>() (which throws on a mapping or a
        // sequence where a scalar was expected).
        if (!kv.first.IsScalar()) {
          return absl::InvalidArgumentError("--config: " + config_file + ": keys must be scalars");
        }
        const std::string key = kv.first.Scalar();
        Impl::Setting* s = impl_->Find(key);
        if (s == nullptr) {
          return absl::InvalidArgumentError("--config: " + config_file + ": unknown setting " +
                                            Quote(key));
        }
        std::string text;
        if (kv.second.IsSequence()) {
          for (const auto& item : kv.second) {
            if (!item.IsScalar()) {
              return absl::InvalidArgumentError(config_file + ": " + key +
                                                ": list items must be scalars");
            }
            text += (text.empty() ? "" : ",") + item.Scalar();
          }
        } else if (kv.second.IsScalar()) {
          text = kv.second.Scalar();
        } else {
          return absl::InvalidArgumentError(config_file + ": " + key +
                                            ": must be a scalar or a list");
        }
        if (auto st = s->set(text); !st.ok()) {
          return absl::InvalidArgumentError(config_file + ": " + key + ": " +
                                            std::string(st.message()));
        }
      }
    }
  }
  for (auto& s : impl_->settings) {
    if (const char* e = std::getenv(s.env.c_str()); e != nullptr) {
      if (auto st = s.set(e); !st.ok()) {
        return absl::InvalidArgumentError(s.env + ": " + std::string(st.message()));
      }
    }
  }
  for (auto& [name, vs] : from_flags) {
    Impl::Setting* s = impl_->Find(name);
    if (auto st = s->set(vs.first); !st.ok()) {
      return absl::InvalidArgumentError("--" + name + ": " + std::string(st.message()));
    }
  }
  return absl::OkStatus();
}

void Flags::ParseOrExit(int argc, const char* const* argv) {
  auto status = Parse(argc, argv);
  if (impl_->help) {
    std::cout << Help();
    std::exit(0);
  }
  if (impl_->version) {
    std::cout << impl_->program << " " << WISP_VERSION << "\n";
    std::exit(0);
  }
  if (!status.ok()) {
    std::cerr << impl_->program << ": " << status.message() << "\n";
    std::exit(2);
  }
}

const std::vector<std::string>& Flags::Positional() const { return impl_->positional; }
bool Flags::HelpRequested() const { return impl_->help; }
bool Flags::VersionRequested() const { return impl_->version; }

std::vector<std::string> Flags::Names() const {
  std::vector<std::string> names{"config", "help", "version"};
  for (const auto& s : impl_->settings) names.push_back(s.name);
  return names;
}

namespace {
// Wraps text at 72 columns with the given indent.
std::string Wrap(const std::string& text, const std::string& indent) {
  std::string out;
  std::istringstream paragraphs(text);
  std::string paragraph;
  while (std::getline(paragraphs, paragraph)) {
    if (paragraph.empty()) {
      out += "\n";
      continue;
    }
    std::istringstream words(paragraph);
    std::string word, line = indent;
    while (words >> word) {
      if (line.size() > indent.size() && line.size() + 1 + word.size() > 76) {
        out += line + "\n";
        line = indent;
      }
      line += (line.size() > indent.size() ? " " : "") + word;
    }
    out += line + "\n";
  }
  return out;
}
}  // namespace

std::string Flags::Help() const {
  std::ostringstream o;
  o << "NAME\n    " << impl_->program << " - " << impl_->summary << "\n\n";
  o << "SYNOPSIS\n    " << impl_->program << " [--config FILE] [OPTIONS]\n\n";
  if (!impl_->description.empty()) o << "DESCRIPTION\n" << Wrap(impl_->description, "    ") << "\n";
  o << "OPTIONS\n";
  o << "    Every option can also be set by its environment variable or by a key of the same name\n"
       "    in the YAML file given by --config (or WISP_CONFIG). Precedence: flag, environment,\n"
       "    file, default.\n\n";
  for (const auto& s : impl_->settings) {
    std::string value = s.type == "bool"   ? ""
                        : s.type == "enum" ? " " +
                                                 [&] {
                                                   std::string c;
                                                   for (const auto& x : s.choices)
                                                     c += (c.empty() ? "" : "|") + x;
                                                   return c;
                                                 }()
                        : s.type == "duration" ? " DURATION"
                        : s.type == "int"      ? " N"
                                               : " VALUE";
    o << "    --" << s.name << value << "\n";
    o << Wrap(s.help, "        ");
    if (!s.secret_instead.empty()) {
      o << Wrap("Not taken on the command line (ps would show it to every user): use " +
                    s.secret_instead + ".",
                "        ");
    }
    o << "        env " << s.env << "; default "
      << (s.default_text.empty() ? "(empty)" : Quote(s.default_text)) << "\n\n";
  }
  o << "    --config FILE\n        YAML file of settings (keys are option names).\n"
       "        env WISP_CONFIG\n\n";
  o << "    --help\n        Print this help and exit.\n\n";
  o << "    --version\n        Print the version and exit.\n\n";
  if (!impl_->examples.empty()) o << "EXAMPLES\n" << Wrap(impl_->examples, "    ") << "\n";
  o << "EXIT STATUS\n    0 on success and after a clean shutdown (SIGTERM, SIGINT); 1 on a "
       "runtime\n"
       "    failure; 2 on an invalid setting, with one line on stderr naming it.\n";
  return o.str();
}

}  // namespace wisp::config
