#include "experiments/cli/serve.h"

#include <ATen/Parallel.h>
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string_view>
#include <thread>

#include "experiments/cli/arguments.h"
#include "experiments/cli/usage.h"
#include "experiments/experiment/experiment_config.h"
#include "experiments/experiment/row_forms.h"
#include "experiments/tools/chat_renderer.h"
#include "experiments/tools/text_io.h"
#include "framework/model/gguf.h"
#include "framework/model/model_names.h"
#include "framework/text/chat_native.h"
#include "framework/text/chat_template.h"
#include "framework/text/tokenizer.h"
#include "framework/util/error.h"
#include "server/http_server.h"

namespace gengraph {
namespace {

using cli::UsageError;

struct ServeArgs {
  std::string config, model, backend, weights, dtype, device, host, port, api_key, max_queue,
      model_id, threads;
  bool log_prompts = false;
  std::vector<std::string> sets;
};

ServeArgs parse(const std::vector<std::string>& args) {
  ServeArgs a;
  const std::vector<std::pair<const char*, std::string ServeArgs::*>> valued = {
      {"--model", &ServeArgs::model},         {"--backend", &ServeArgs::backend},
      {"--weights", &ServeArgs::weights},     {"--dtype", &ServeArgs::dtype},
      {"--device", &ServeArgs::device},       {"--host", &ServeArgs::host},
      {"--port", &ServeArgs::port},           {"--api-key", &ServeArgs::api_key},
      {"--max-queue", &ServeArgs::max_queue}, {"--model-id", &ServeArgs::model_id},
      {"--threads", &ServeArgs::threads}};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--log-prompts") {
      a.log_prompts = true;
      continue;
    }
    bool matched = false;
    for (const auto& [flag, field] : valued) {
      if (arg != flag) continue;
      if (i + 1 >= args.size()) throw UsageError(std::string(flag) + ": expected a value");
      a.*field = args[++i];
      matched = true;
    }
    if (matched) continue;
    if (arg == "--set") {
      if (i + 1 >= args.size()) throw UsageError("--set: expected KEY=VALUE");
      a.sets.push_back(args[++i]);
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("serve: unknown option '" + arg + "'");
    } else if (a.config.empty()) {
      a.config = arg;
    } else {
      throw UsageError("serve: one CONFIG.yaml at most, found '" + a.config + "' and '" + arg +
                       "'");
    }
  }
  return a;
}

// The flags as the YAML a config file would hold, so both go through one reader. Values are JSON
// strings (YAML double-quoted scalars): no value can change the structure.
std::string flags_yaml(const ServeArgs& a) {
  if (a.model.empty()) throw UsageError("serve: give CONFIG.yaml or --model PRESET|FOLDER|NAME");
  const ModelName name = resolve_model_name(a.model, "serve: --model", /*locate_known=*/false);
  if (!name.note.empty()) std::cerr << "note: " << name.note << "\n";
  const auto q = [](const std::string& v) { return nlohmann::json(v).dump(); };
  std::string y = "name: serve\nmodel:\n  ";
  y += !name.folder.empty() ? "path: " + q(name.folder.string())
       : name.known         ? "name: " + q(a.model)
                            : "preset: " + q(name.preset);
  y += "\n";
  if (!a.weights.empty()) y += "  weights: " + q(a.weights) + "\n";
  if (!a.dtype.empty()) y += "  dtype: " + q(a.dtype) + "\n";
  if (!a.device.empty()) y += "  device: " + q(a.device) + "\n";
  y += "backend: " + q(a.backend.empty() ? "eager" : a.backend) + "\nserve: {}\n";
  return y;
}

ExperimentConfig read_config(const ServeArgs& a) {
  std::vector<std::string> sets;
  const auto q = [](const std::string& v) { return nlohmann::json(v).dump(); };
  if (!a.host.empty()) sets.push_back("serve.host=" + q(a.host));
  if (!a.port.empty()) sets.push_back("serve.port=" + a.port);
  if (!a.max_queue.empty()) sets.push_back("serving.max_queue=" + a.max_queue);
  if (!a.threads.empty()) sets.push_back("run.threads=" + a.threads);
  if (!a.model_id.empty()) sets.push_back("serve.model_id=" + q(a.model_id));
  if (a.log_prompts) sets.push_back("serve.log_prompts=true");
  sets.insert(sets.end(), a.sets.begin(), a.sets.end());
  if (a.config.empty())
    return parse_experiment(flags_yaml(a), "gengraph serve (flags as YAML)", sets);
  for (const std::string* f : {&a.model, &a.backend, &a.weights, &a.dtype, &a.device}) {
    if (!f->empty()) {
      throw UsageError(
          "serve: with CONFIG.yaml the model and backend come from the file; use "
          "--set model.KEY=VALUE to change them");
    }
  }
  ExperimentConfig c = load_experiment(a.config, sets);
  if (!c.serve) {
    throw Error(a.config +
                ": expected a serve: section (a server's options), found none; "
                "experiments run with gengraph run");
  }
  return c;
}

std::string api_key(const ServeArgs& a, const ServeSpec& s) {
  if (!a.api_key.empty()) return a.api_key;
  if (!s.api_key_env.empty()) {
    const char* v = std::getenv(s.api_key_env.c_str());
    if (v == nullptr || *v == '\0') {
      throw Error("serve.api_key_env: the environment variable '" + s.api_key_env +
                  "' is not set (or empty); it should hold the API key");
    }
    return v;
  }
  const char* v = std::getenv("GENGRAPH_API_KEY");
  return v != nullptr ? v : "";
}

}  // namespace

int serve_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const auto& arg : args) {
    if (arg == "--help" || arg == "-h") {
      out << cli::command_help("serve");
      return 0;
    }
  }
  const ServeArgs a = parse(args);
  const ExperimentConfig c = read_config(a);
  ServeSpec spec = *c.serve;
  spec.options.api_key = api_key(a, spec);
  if (c.backends.size() != 1) throw Error(c.file + ": backends: expected one backend to serve on");

  // SIGINT and SIGTERM go to one watcher thread: blocked here, before any thread starts, so
  // every thread (the scheduler's, each connection's) inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // the server ended by itself: wakes the watcher
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, never a signal

  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  err << "gengraph serve: loading " << model_name(c.model) << "\n";
  server::ServedModel served{Model(model_name(c.model), model_options(c.model)),
                             RunOptions{},
                             spec.serving,
                             nullptr,
                             {},
                             ""};
  served.run.backend = c.backends[0].name;
  served.run.backend_options = c.backends[0].options;
  served.name = !c.model.name.empty()   ? c.model.name
                : !c.model.path.empty() ? std::filesystem::path(c.model.path).filename().string()
                                        : c.model.preset;
  std::shared_ptr<ChatRenderer> renderer;
  if (!c.model.path.empty()) {
    const std::filesystem::path folder(c.model.path);
    if (is_gguf_file(folder)) {
      // Its tokenizer is in its metadata; a file without one (converted with --no-vocab) serves
      // token ids.
      try {
        served.tokenizer = load_tokenizer(folder);
      } catch (const Error& e) {
        if (std::string_view(e.what()).find(kUnsupportedTokenizer) == std::string_view::npos) {
          throw;
        }
        err << "note: " << e.what() << "\n";
      }
    } else if (std::filesystem::exists(folder / "tokenizer.json") ||
               std::filesystem::exists(folder / "tokenizer.model")) {
      served.tokenizer = load_tokenizer(folder);
    }
    if (served.tokenizer) {
      // The template rendered natively where it can be (framework/text/chat_native.h); one that
      // uses what the native renderer does not render goes to transformers, in a Python process.
      std::optional<NativeChat> native;
      bool python = false;
      try {
        native = NativeChat::for_model(folder);
      } catch (const jinja::Unsupported& e) {
        err << "note: " << e.what() << ": chat requests are rendered by transformers\n";
        python = !is_gguf_file(folder);
      }
      if (native) {
        auto chat = std::make_shared<const NativeChat>(std::move(*native));
        const int64_t seconds = chat_template_seconds();
        served.chat = [chat, seconds](const nlohmann::json& messages) {
          return chat->render(messages, /*add_generation_prompt=*/true, "the request", seconds);
        };
      } else if (python) {
        renderer = std::make_shared<ChatRenderer>(c.model.path, err);
        renderer->start();  // Python and the tokenizer now, not in the first chat request
        served.chat = [renderer](const nlohmann::json& messages) {
          return renderer->render(messages, /*add_generation_prompt=*/true);
        };
      }
    }
  }
  if (!served.tokenizer) {
    err << "note: the model has no tokenizer gengraph reads: prompts are token ids, answers carry "
           "token_ids, and /v1/chat/completions is refused\n";
  } else if (!served.chat) {
    err << "note: the model has no chat template: /v1/chat/completions is refused\n";
  }
  server::Server srv(std::move(served), spec.options, err);
  const int port = srv.bind();
  out << "gengraph serve: listening on http://" << spec.options.host << ":" << port
      << " (OpenAI API under /v1)" << std::endl;

  std::atomic<int> stopped_by{0};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGUSR1) return;
    stopped_by = sig;
    err << "gengraph serve: signal " << sig << ": draining (a second signal exits at once)\n";
    std::thread stopper([&] { srv.stop(); });
    for (;;) {
      sigwait(&signals, &sig);
      if (sig == SIGUSR1) break;
      std::_Exit(1);
    }
    stopper.join();
  });
  srv.run();
  if (stopped_by == 0) {
    // The listener ended without a signal (it could not accept any more): stop and drain.
    srv.stop();
  }
  pthread_kill(watcher.native_handle(), SIGUSR1);
  watcher.join();
  err << "gengraph serve: stopped\n";
  return stopped_by != 0 ? 0 : 1;
}

}  // namespace gengraph
