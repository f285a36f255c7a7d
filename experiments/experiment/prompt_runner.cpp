#include "experiments/experiment/prompt_runner.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "experiments/experiment/row_forms.h"
#include "experiments/experiment/runner.h"
#include "experiments/tools/process.h"
#include "experiments/tools/text_io.h"
#include "framework/text/tokenizer.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/progress.h"

namespace gengraph {
namespace {

using Line = nlohmann::ordered_json;

// One prompt, ready to generate.
struct Prepared {
  std::vector<int64_t> ids;
  nlohmann::json settings;  // the experiment's generation: under the line's own keys
  uint64_t seed = 0;
  bool skip_special = false;
};

std::string at_line(const PromptFile& f, const PromptLine& p) {
  return "'" + f.path + "' line " + std::to_string(p.line);
}

// Every line's token ids: texts encoded (chat ones rendered first), ids as given.
std::vector<Prepared> prepare(const ExperimentConfig& c, const PromptFile& f,
                              std::unique_ptr<TextCodec>& codec, std::ostream& log) {
  std::vector<Prepared> out(f.lines.size());
  std::vector<size_t> texts, conversations;
  for (size_t i = 0; i < f.lines.size(); ++i) {
    const PromptLine& p = f.lines[i];
    Prepared& q = out[i];
    q.ids = p.ids;
    q.settings = c.generation;
    for (const auto& [k, v] : p.settings.items()) q.settings[k] = v;
    q.seed = p.seed.value_or(c.run.seed);
    const bool chat = !p.messages.is_null() || (p.is_text() && c.inputs.chat);
    q.skip_special = p.skip_special_tokens.value_or(c.inputs.skip_special_tokens.value_or(chat));
    if (!p.messages.is_null()) conversations.push_back(i);
    if (p.is_text()) texts.push_back(i);
  }
  if (texts.empty() && conversations.empty()) return out;
  codec = std::make_unique<TextCodec>(
      c.model.path, parse_tokenizer_choice(c.inputs.tokenizer, c.file + ": inputs.tokenizer"), log);
  log << "encoding " << texts.size() + conversations.size() << " prompt(s) with the tokenizer ("
      << codec->description() << ")\n";
  // The chat template's output is encoded without special tokens: its markers are in the text.
  std::vector<std::string> plain, chat;
  std::vector<size_t> plain_at, chat_at;
  std::vector<nlohmann::json> messages;
  for (size_t i : texts) {
    (c.inputs.chat ? chat : plain).push_back(f.lines[i].text);
    (c.inputs.chat ? chat_at : plain_at).push_back(i);
  }
  if (!chat.empty()) chat = codec->chat_prompts(chat);
  for (size_t i : conversations) messages.push_back(f.lines[i].messages);
  if (!messages.empty()) {
    for (auto& t : codec->chat_conversations(messages)) chat.push_back(std::move(t));
    chat_at.insert(chat_at.end(), conversations.begin(), conversations.end());
  }
  const auto encode = [&](const std::vector<std::string>& list, const std::vector<size_t>& at,
                          bool special) {
    if (list.empty()) return;
    const auto ids = codec->encode(list, special, "'" + f.path + "' prompts");
    for (size_t k = 0; k < at.size(); ++k) {
      out[at[k]].ids = ids[k];
      if (ids[k].empty()) throw Error(at_line(f, f.lines[at[k]]) + ": encodes to no tokens");
    }
  };
  encode(plain, plain_at, true);
  encode(chat, chat_at, false);
  return out;
}

// A group: the prompts of one block with equal settings and seed, generated together.
struct Group {
  std::vector<size_t> lines;
  Plan plan;
};

std::vector<std::vector<int64_t>> prompts_of(const Group& g, const std::vector<Prepared>& q) {
  std::vector<std::vector<int64_t>> out;
  for (size_t i : g.lines) out.push_back(q[i].ids);
  return out;
}

// Every block's groups, each planned: a line's bad setting or prompt (too long for the context)
// is refused by its line before anything runs.
std::vector<std::vector<Group>> plan_blocks(const PromptFile& f, const std::vector<Prepared>& q,
                                            Engine& engine, int64_t batch) {
  const int64_t vocab = engine.vocab_size();
  for (size_t i = 0; i < q.size(); ++i) {
    for (const int64_t id : q[i].ids) {
      if (id >= vocab) {
        throw Error(at_line(f, f.lines[i]) + ": token id " + std::to_string(id) +
                    " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
      }
    }
  }
  std::vector<std::vector<Group>> blocks;
  for (size_t start = 0; start < q.size(); start += static_cast<size_t>(batch)) {
    const size_t end = std::min(q.size(), start + static_cast<size_t>(batch));
    std::map<std::string, size_t> by_settings;
    std::vector<Group> groups;
    for (size_t i = start; i < end; ++i) {
      const std::string key = q[i].settings.dump() + "/" + std::to_string(q[i].seed);
      const auto [it, added] = by_settings.emplace(key, groups.size());
      if (added) groups.emplace_back();
      groups[it->second].lines.push_back(i);
    }
    for (Group& g : groups) {
      const nlohmann::json& settings = q[g.lines.front()].settings;
      try {
        g.plan = engine.plan(prompts_of(g, q), settings);
      } catch (const Error& e) {
        // The line that fails alone, else the group as a whole (its memory, say).
        for (size_t i : g.lines) {
          try {
            engine.plan({q[i].ids}, q[i].settings);
          } catch (const Error& alone) {
            throw Error(at_line(f, f.lines[i]) + ": " + alone.what());
          }
        }
        throw Error(at_line(f, f.lines[g.lines.front()]) + " and the " +
                    std::to_string(g.lines.size() - 1) +
                    " other prompt(s) of its batch: " + e.what());
      }
    }
    blocks.push_back(std::move(groups));
  }
  return blocks;
}

// The indices an earlier run wrote to `path` (resume), each line checked to be this file's
// prompt at that index. `complete` receives the length of its whole lines: a last line without its
// line break was cut off by the stop and is written again.
std::vector<bool> written_before(const std::string& path, const PromptFile& f, size_t& complete) {
  std::vector<bool> done(f.lines.size(), false);
  complete = 0;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return done;
  const std::string bytes = read_regular_file(path, "the output '" + path + "' (--resume)",
                                              "a JSON Lines file", 1ull << 34);
  const size_t end = bytes.rfind('\n');
  complete = end == std::string::npos ? 0 : end + 1;
  int64_t number = 0;
  for (size_t at = 0; at < complete;) {
    const size_t eol = bytes.find('\n', at);
    const std::string text = bytes.substr(at, eol - at);
    at = eol + 1;
    ++number;
    const std::string where = "the output '" + path + "' line " + std::to_string(number) + ": ";
    const std::string not_ours = "; it is not this prompt file's output ('" + f.path +
                                 "'): give another --output, or leave out --resume to start over";
    nlohmann::json line;
    try {
      line = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      throw Error(where + "expected a JSON object, found text that is not JSON" + not_ours);
    }
    if (!line.is_object() || !line.contains("index") || !line["index"].is_number_unsigned() ||
        line["index"].get<uint64_t>() >= f.lines.size()) {
      throw Error(where + "expected an object with an \"index\" below " +
                  std::to_string(f.lines.size()) + not_ours);
    }
    const size_t i = line["index"].get<size_t>();
    if (!line.contains("prompt") || line["prompt"] != f.lines[i].prompt()) {
      throw Error(where + "the prompt of index " + std::to_string(i) + " differs from " +
                  at_line(f, f.lines[i]) + not_ours);
    }
    done[i] = true;
  }
  return done;
}

// The reason a sequence ended: "stop" (an end-of-sequence token or a stop sequence, or another
// stopping rule before the limit), else "length".
std::string finish_reason(const Sequence& s, const nlohmann::json& settings, int64_t limit) {
  if (!s.tokens.empty()) {
    const nlohmann::json eos = settings.value("eos_token_id", nlohmann::json());
    const int64_t last = s.tokens.back();
    if ((eos.is_number_integer() && eos.get<int64_t>() == last) ||
        (eos.is_array() && std::find(eos.begin(), eos.end(), nlohmann::json(last)) != eos.end())) {
      return "stop";
    }
  }
  return static_cast<int64_t>(s.tokens.size()) >= limit ? "length" : "stop";
}

// Writes `bytes` whole to descriptor `fd`, or throws naming the output.
void write_all(int fd, const std::string& bytes, const std::string& name) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot write " + name + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

}  // namespace

PromptRunReport run_prompt_file(const ExperimentConfig& c, const PromptRunOptions& o,
                                std::ostream& out, std::ostream& log) {
  const InterruptGuard guard;  // a stop between blocks keeps the lines written
  if (!c.inputs.prompt_file) throw Error(c.file + ": inputs.file: expected a prompt file");
  const PromptFile& f = *c.inputs.prompt_file;
  if (c.backends.size() != 1) throw Error(c.file + ": a prompt file runs on one backend");
  // The backend, the model and the settings; the prompts are planned by batch below, not as one.
  ExperimentConfig checked = c;
  checked.inputs.prompts.clear();
  checked.inputs.texts.clear();
  check_runnable(checked);
  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  size_t complete = 0;
  std::vector<bool> done =
      o.resume ? written_before(o.output, f, complete) : std::vector<bool>(f.lines.size(), false);
  PromptRunReport report;
  for (const bool d : done) report.kept += d;
  std::unique_ptr<TextCodec> codec;
  const std::vector<Prepared> q = prepare(c, f, codec, log);
  log << "loading model " << model_name(c.model) << " (" << c.model.dtype << ", " << c.model.device
      << ")\n";
  const Model model(model_name(c.model), model_options(c.model));
  Engine engine(model, run_options(c.backends.front()));
  const auto blocks = plan_blocks(f, q, engine, o.batch);
  throw_if_interrupted();

  // Checked: now the output is opened (appended to when resumed, its partial last line cut off).
  const std::string name = o.output.empty() ? "standard output" : "'" + o.output + "'";
  int fd = -1;
  if (!o.output.empty()) {
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (o.resume ? 0 : O_TRUNC);
    fd = ::open(o.output.c_str(), flags, 0644);
    if (fd < 0) throw Error("cannot open the output " + name + ": " + std::strerror(errno));
    if (o.resume &&
        (::ftruncate(fd, static_cast<off_t>(complete)) != 0 || ::lseek(fd, 0, SEEK_END) < 0)) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error("cannot resume the output " + name + ": " + why);
    }
  }
  struct Close {
    int fd;
    ~Close() {
      if (fd >= 0) ::close(fd);
    }
  } close_on_exit{fd};
  if (report.kept > 0) {
    log << "resuming: " << report.kept << " of " << f.lines.size() << " prompt(s) are in " << name
        << " already\n";
  }

  const auto started = std::chrono::steady_clock::now();
  auto last_note = started;
  // Lines written to a file: a progress display of the prompts still to run (steps, time, an
  // estimate). Lines on standard output: a plain note every 5 s instead, which does not redraw
  // over them.
  const int64_t to_run = static_cast<int64_t>(f.lines.size()) - report.kept;
  Progress shown(report.kept > 0 ? "prompts (" + std::to_string(report.kept) + " kept)" : "prompts",
                 to_run, 0, loop_position_text,
                 fd >= 0 ? progress_mode_for(log) : ProgressMode::kOff);
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::map<size_t, Line> lines;
    for (const Group& g : blocks[b]) {
      bool pending = false;
      for (size_t i : g.lines) pending = pending || !done[i];
      if (!pending) continue;
      const size_t first = g.lines.front();
      engine.manual_seed(q[first].seed);
      const Generation gen = engine.generate(g.plan, prompts_of(g, q));
      const int64_t limit = g.plan.max_length() - g.plan.prompt_length();
      for (size_t k = 0; k < g.lines.size(); ++k) {
        const size_t i = g.lines[k];
        if (done[i]) continue;
        const PromptLine& p = f.lines[i];
        const auto sequence = [&](const Sequence& s) {
          Line j;
          if (codec) {
            std::vector<size_t> cut;
            j["text"] = codec->decode({s.tokens}, q[i].skip_special, &cut).front();
            if (cut.front() > 0) j["text_cut_bytes"] = cut.front();  // a character cut, left out
          }
          j["tokens"] = s.tokens;
          j["finish_reason"] = finish_reason(s, gen.settings, limit);
          return j;
        };
        Line line;
        line["index"] = i;
        if (!p.id.is_null()) line["id"] = p.id;
        line["prompt"] = p.prompt();
        line["prompt_tokens"] = q[i].ids.size();
        const Line best = sequence(gen.outputs[k].front());
        for (const auto& [key, v] : best.items()) line[key] = v;
        if (gen.outputs[k].size() > 1) {
          line["sequences"] = Line::array();
          for (const Sequence& s : gen.outputs[k]) line["sequences"].push_back(sequence(s));
        }
        lines[i] = std::move(line);
      }
    }
    std::string bytes;
    for (const auto& [i, line] : lines) bytes += line.dump() + "\n";
    if (fd >= 0) {
      write_all(fd, bytes, "the output " + name);
    } else {
      out << bytes << std::flush;
      if (!out) throw Error("cannot write the lines to standard output");
    }
    report.written += static_cast<int64_t>(lines.size());
    shown.advance(static_cast<int64_t>(lines.size()));
    const auto now = std::chrono::steady_clock::now();
    if (fd < 0 && now - last_note > std::chrono::seconds(5)) {
      last_note = now;
      log << "prompts: " << report.written + report.kept << "/" << f.lines.size() << " ("
          << std::chrono::duration_cast<std::chrono::seconds>(now - started).count() << " s)\n";
    }
    try {
      throw_if_interrupted();
    } catch (const Interrupted& e) {
      throw Interrupted(e.signal, "interrupted by signal " + std::to_string(e.signal) + ": " +
                                      std::to_string(report.written + report.kept) + " of " +
                                      std::to_string(f.lines.size()) + " prompt(s) are in " + name +
                                      (o.output.empty() ? "" : "; --resume goes on from there"));
    }
  }
  return report;
}

}  // namespace gengraph
