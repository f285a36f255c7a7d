// gengraph._gengraph: the public C++ API (include/gengraph/gengraph.h) and the experiment runner
// as a Python extension module. python/gengraph/__init__.py is the package over it (keyword
// settings, inputs as texts, lists or tensors, the stream as an iterator); docs/python.md.
//
// The GIL is released while gengraph loads, generates or runs an experiment; a Python backend
// (py_backend.cpp) takes it for each call. The Scheduler's classes are serving.cpp's.
#include <c10/util/Exception.h>
#include <gengraph/cli.h>
#include <gengraph/gengraph.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "backends/register_builtin.h"
#include "experiments/cli/output.h"
#include "experiments/experiment/experiment_config.h"
#include "experiments/experiment/runner.h"
#include "experiments/results/results.h"
#include "experiments/results/table.h"
#include "experiments/tools/text_io.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/known_models.h"
#include "framework/model/loader.h"
#include "framework/quant/kernels.h"
#include "framework/util/strings.h"
#include "python/src/convert.h"
#include "python/src/py_backend.h"
#include "python/src/serving.h"

namespace gengraph::python {

namespace {

DType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "float") return DType::kFloat32;
  if (s == "bfloat16") return DType::kBFloat16;
  if (s == "float16" || s == "half") return DType::kFloat16;
  throw Error("dtype: expected float32, bfloat16 or float16, found '" + s + "'");
}

WholeStep parse_whole_step(const std::string& s) {
  if (s == "off") return WholeStep::kOff;
  if (s == "auto") return WholeStep::kAuto;
  if (s == "on") return WholeStep::kOn;
  throw Error("whole_step: expected off, auto or on, found '" + s + "'");
}

ModelOptions model_options(const py::dict& o) {
  ModelOptions m;
  for (const auto& [k, v] : o) {
    const std::string key = py::str(k);
    if (key == "device") {
      m.device = Device(py::str(v).cast<std::string>());
    } else if (key == "dtype") {
      m.dtype = parse_dtype(py::str(v));
    } else if (key == "fused") {
      m.fused = v.cast<bool>();
    } else if (key == "check_weights") {
      m.check_weights = v.cast<bool>();
    } else if (key == "weights") {
      m.weights = py::str(v);
    } else if (key == "group_size") {
      m.group_size = v.cast<int64_t>();
    } else if (key == "quantize_head") {
      m.quantize_head = v.cast<bool>();
    } else if (key == "int8_head") {
      m.int8_head = v.cast<bool>();
    } else if (key == "int8_activation_rows") {
      m.int8_activation_rows = v.cast<int64_t>();
    } else if (key == "int8_activation_block") {
      m.int8_activation_block = v.cast<int64_t>();
    } else if (key == "model_config") {
      m.model_config = to_json(v, "model_config");
    } else if (key == "weights_seed") {
      m.weights_seed = v.cast<uint64_t>();
    } else {
      throw Error("Model: unknown option '" + key + "'");
    }
  }
  return m;
}

RunOptions run_options(const std::string& backend, const std::map<std::string, std::string>& opts,
                       const std::string& whole_step, bool capture, int64_t sync_every) {
  RunOptions r;
  r.backend = backend;
  r.backend_options = opts;
  r.whole_step = parse_whole_step(whole_step);
  r.capture = capture;
  r.sync_every = sync_every;
  return r;
}

// What a stream hands over, taken from the generating thread without the GIL.
struct Item {
  bool is_text = false;
  StreamedToken token;
  TextPiece piece;
};

// A generation on its own thread, handing each token over as it is chosen. The generating thread
// waits until the consumer has taken the token before it goes on, so it runs at most one token
// ahead: closing the stream (the iterator's `break`) stops the generation after that token's step.
class StreamRun {
 public:
  StreamRun(Engine& engine, std::vector<std::vector<int64_t>> prompts,
            std::vector<std::string> texts, nlohmann::json settings) {
    const bool is_text = !texts.empty();
    // The generation runs on the worker's OpenMP threads: this thread's (which may have loaded
    // the model or generated before) would otherwise stay alive beside them (kernels.h).
    kernels::release_openmp_threads();
    worker_ = std::thread([this, &engine, prompts = std::move(prompts), texts = std::move(texts),
                           settings = std::move(settings), is_text] {
      try {
        Generation g = is_text ? engine.generate_text(texts, settings,
                                                      TextPieceCallback([this](const TextPiece& p) {
                                                        Item item;
                                                        item.is_text = true;
                                                        item.piece = p;
                                                        return push(std::move(item));
                                                      }))
                               : engine.generate(prompts, settings, [this](const StreamedToken& t) {
                                   Item item;
                                   item.token = t;
                                   return push(std::move(item));
                                 });
        const std::lock_guard<std::mutex> lock(mutex_);
        result_ = std::move(g);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
      cv_.notify_all();
    });
  }
  ~StreamRun() {
    if (!worker_.joinable()) return;
    // Called from Python (the GIL held) or at interpreter exit: the worker may need the GIL.
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      stop_and_join();
    } else {
      stop_and_join();
    }
  }

  py::object next() {
    std::optional<Item> item;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
      if (!queue_.empty()) {
        item = std::move(queue_.front());
        queue_.pop_front();
        cv_.notify_all();
      }
    }
    if (item)
      return item->is_text ? py::cast(StreamedText{std::move(item->piece)}) : py::cast(item->token);
    join();
    if (error_ && !error_raised_) {
      error_raised_ = true;
      std::rethrow_exception(error_);
    }
    throw py::stop_iteration();
  }

  // Stops the generation after the step of the last token taken, and waits for it to end.
  void close() {
    py::gil_scoped_release nogil;
    stop_and_join();
  }

  bool finished() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
  }

  // The generation as far as it got: after the stream ended, or once close() has returned.
  Generation result() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!finished_) {
        throw Error(
            "Stream.result: the generation is still running; iterate the stream to its end or "
            "call close() first");
      }
    }
    join();
    if (error_) std::rethrow_exception(error_);
    return *result_;
  }

  struct StreamedText {
    TextPiece piece;
  };

 private:
  bool push(Item item) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_) return false;
    queue_.push_back(std::move(item));
    cv_.notify_all();
    cv_.wait(lock, [&] { return queue_.empty() || stop_; });
    return !stop_;
  }
  void stop_and_join() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      queue_.clear();
      cv_.notify_all();
    }
    join_without_gil();
  }
  void join() {
    py::gil_scoped_release nogil;
    join_without_gil();
  }
  void join_without_gil() {
    const std::lock_guard<std::mutex> lock(join_mutex_);
    if (worker_.joinable()) worker_.join();
  }

  std::mutex mutex_, join_mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool finished_ = false, stop_ = false, error_raised_ = false;
  std::exception_ptr error_;
  std::optional<Generation> result_;
  std::thread worker_;  // last: it starts once everything above exists
};

// The Python Engine: the C++ Engine and the stream that may be running on it. A call while a
// stream of the same Engine is unfinished would wait for the stream, whose thread waits for the
// caller to take its next token: it is refused instead.
class PyEngine {
 public:
  explicit PyEngine(std::unique_ptr<Engine> e) : engine_(std::move(e)) {}
  Engine& get(const char* call) {
    if (auto s = stream_.lock(); s && !s->finished()) {
      throw Error(std::string("Engine.") + call +
                  ": a stream of this Engine is still running; iterate it to its end or close() "
                  "it first (or use a second Engine)");
    }
    return *engine_;
  }
  std::shared_ptr<StreamRun> stream(std::vector<std::vector<int64_t>> prompts,
                                    std::vector<std::string> texts, nlohmann::json settings) {
    Engine& e = get("stream");
    auto s =
        std::make_shared<StreamRun>(e, std::move(prompts), std::move(texts), std::move(settings));
    stream_ = s;
    return s;
  }
  // Conversations rendered with the model's chat template, as gengraph generate --chat renders
  // them (TextCodec: natively, else by transformers, naming why); a preset is refused as
  // Engine::chat refuses it.
  std::vector<std::string> chat_texts(const nlohmann::json& conversations) {
    Engine& e = get("chat");
    if (e.model_source().rfind("preset:", 0) == 0) {
      e.apply_chat_template(conversations.at(0));  // throws, naming the preset
    }
    if (!codec_) {
      codec_ = std::make_unique<TextCodec>(e.model_source(), TokenizerChoice::Auto, std::cerr);
    }
    return codec_->chat_conversations(conversations.get<std::vector<nlohmann::json>>());
  }
  ~PyEngine() {
    // A stream still running uses this Engine: end it first.
    if (auto s = stream_.lock()) s->close();
  }

 private:
  std::unique_ptr<Engine> engine_;
  std::weak_ptr<StreamRun> stream_;
  std::unique_ptr<TextCodec> codec_;  // chat_texts' renderer, made on first use
};

py::list backend_list() {
  py::list out;
  auto& registry = BackendRegistry::instance();
  for (const auto& name : registry.names()) {
    const auto& info = registry.get(name);
    const std::string why =
        info.unavailable_reason ? info.unavailable_reason(BackendOptions(name, {})) : std::string();
    py::dict d;
    d["name"] = name;
    d["description"] = info.description;
    d["available"] = why.empty();
    d["unavailable_reason"] = why;
    d["python"] = is_python_backend(name);
    out.append(d);
  }
  return out;
}

py::dict preset_dict() {
  py::dict out;
  for (const auto& p : preset_names()) out[py::str(p)] = from_json(preset_config(p));
  return out;
}

py::list model_list() {
  py::list out;
  for (const auto& m : known_models()) {
    py::dict d;
    d["name"] = m.name;
    d["description"] = m.description;
    d["license"] = m.license;
    try {
      const KnownModelStatus s = known_model_status(m.name);
      d["ready"] = s.ready;
      d["folder"] = s.folder.string();
      d["unavailable_reason"] = s.unavailable_reason;
    } catch (const Error& e) {
      d["ready"] = false;
      d["folder"] = py::none();
      d["unavailable_reason"] = std::string(e.what());
    }
    out.append(d);
  }
  return out;
}

// gengraph.run's body: the experiment read (a file, or YAML/JSON text), every point validated,
// then run without the GIL; with `output`, the results JSON (and the plot the experiment names)
// written as `gengraph run` writes them.
py::object run(const std::string& source, bool is_file, const std::vector<std::string>& overrides,
               bool quiet, const std::string& output) {
  const ExperimentConfig config = is_file
                                      ? load_experiment(source, overrides)
                                      : parse_experiment(source, "gengraph.run(config)", overrides);
  if (!output.empty()) {
    check_output_path(output, "results");
    cli::check_not_an_input("results", output, config);
  }
  nlohmann::json doc;
  {
    py::gil_scoped_release nogil;
    std::ostringstream sink;
    doc = run_experiment(config, quiet ? static_cast<std::ostream&>(sink) : std::cerr);
    if (!output.empty()) write_outputs(doc, output, config.plot);
  }
  return from_json(doc);
}

}  // namespace
}  // namespace gengraph::python

namespace py = pybind11;
using gengraph::Engine;
using gengraph::Generation;
using gengraph::Model;
using gengraph::Sequence;
using gengraph::StreamedToken;
using gengraph::python::from_json;
using gengraph::python::PyEngine;
using gengraph::python::StreamRun;
using gengraph::python::to_json;
using gengraph::python::top_pairs;

PYBIND11_MODULE(_gengraph, m) {
  m.doc() = "gengraph's C++ engine (the package gengraph wraps it; see docs/python.md)";
  static py::exception<gengraph::Error> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gengraph::Error& e) {
      py::set_error(error, gengraph::python::message(e.what()));
    } catch (const c10::Error& e) {
      // LibTorch's message without its C++ stack.
      py::set_error(PyExc_RuntimeError, gengraph::python::message(e.what_without_backtrace()));
    }
  });

  py::class_<Sequence>(m, "Sequence", "One generated sequence (gengraph::Sequence).")
      .def_readonly("tokens", &Sequence::tokens, "the generated tokens: no prompt, no padding")
      .def_readonly("score", &Sequence::score,
                    "beam strategies' length-normalised score; with output_scores, every "
                    "strategy's (greedy search and sampling: the sum of token_scores)")
      .def_readonly("text", &Sequence::text, "the tokens decoded (texts in)")
      .def_readonly("token_scores", &Sequence::token_scores,
                    "with output_scores: each token's log-probability")
      .def_property_readonly(
          "top_logprobs", [](const Sequence& s) { return top_pairs(s.top_logprobs); },
          "with top_logprobs=k: per token, its step's k most likely (token, logprob), best first")
      .def("__repr__", [](const Sequence& s) {
        return "Sequence(tokens=" + std::string(py::repr(py::cast(s.tokens))) +
               (s.text.empty() ? "" : ", text=" + std::string(py::repr(py::str(s.text)))) + ")";
      });

  py::class_<Generation>(m, "Generation", "What a generation returns (gengraph::Generation).")
      .def_readonly("outputs", &Generation::outputs, "per prompt, its sequences best first")
      .def_property_readonly(
          "settings", [](const Generation& g) { return from_json(g.settings); },
          "the resolved generation settings")
      .def_readonly("prompt_length", &Generation::prompt_length)
      .def_readonly("rows", &Generation::rows)
      .def_readonly("steps", &Generation::steps, "tokens chosen per row")
      .def_readonly("time_to_first_token_s", &Generation::time_to_first_token_s)
      .def_readonly("seconds", &Generation::seconds, "prefill to the last token")
      .def_readonly("whole_step", &Generation::whole_step)
      .def_readonly("captured", &Generation::captured)
      .def_readonly("whole_step_fallback", &Generation::whole_step_fallback)
      .def_readonly("steps_run", &Generation::steps_run)
      .def_readonly("flag_reads", &Generation::flag_reads)
      .def_readonly("capture_s", &Generation::capture_s)
      .def_readonly("verify_steps", &Generation::verify_steps)
      .def_readonly("candidates_proposed", &Generation::candidates_proposed)
      .def_readonly("candidates_accepted", &Generation::candidates_accepted)
      .def_readonly("propose_s", &Generation::propose_s)
      .def_readonly("verify_s", &Generation::verify_s);

  py::class_<StreamedToken>(m, "StreamedToken",
                            "A token as it is chosen (gengraph::StreamedToken).")
      .def_readonly("input", &StreamedToken::input, "which prompt")
      .def_readonly("sequence", &StreamedToken::sequence, "which of its sequences")
      .def_readonly("token", &StreamedToken::token)
      .def_readonly("step", &StreamedToken::step, "generated tokens before this one")
      .def_readonly("logprob", &StreamedToken::logprob,
                    "with output_scores or top_logprobs; NaN without")
      .def_property_readonly(
          "top", [](const StreamedToken& t) { return top_pairs(t.top); },
          "with top_logprobs=k: the k most likely (token, logprob), best first; [] without")
      .def_readonly("last", &StreamedToken::last, "the sequence ended with this token")
      .def("__repr__", [](const StreamedToken& t) {
        return "StreamedToken(input=" + std::to_string(t.input) +
               ", sequence=" + std::to_string(t.sequence) + ", token=" + std::to_string(t.token) +
               ", step=" + std::to_string(t.step) + (t.last ? ", last=True" : "") + ")";
      });
  using StreamedText = StreamRun::StreamedText;
  py::class_<StreamedText>(m, "StreamedText",
                           "Text of one sequence as it becomes final, with the tokens behind it.")
      .def_property_readonly("input", [](const StreamedText& t) { return t.piece.input; })
      .def_property_readonly("sequence", [](const StreamedText& t) { return t.piece.sequence; })
      .def_property_readonly("text", [](const StreamedText& t) { return t.piece.text; })
      .def_property_readonly(
          "tokens", [](const StreamedText& t) { return t.piece.tokens; },
          "the ids streamed since the previous piece of this sequence")
      .def_property_readonly(
          "logprobs", [](const StreamedText& t) { return t.piece.logprobs; },
          "their log-probabilities (nan without output_scores or top_logprobs)")
      .def_property_readonly(
          "top", [](const StreamedText& t) { return top_pairs(t.piece.top); },
          "with top_logprobs=k: per token, its step's k most likely (token, logprob)")
      .def("__repr__", [](const StreamedText& t) {
        return "StreamedText(input=" + std::to_string(t.piece.input) +
               ", sequence=" + std::to_string(t.piece.sequence) +
               ", text=" + std::string(py::repr(py::str(t.piece.text))) + ")";
      });

  py::class_<StreamRun, std::shared_ptr<StreamRun>>(m, "_StreamRun")
      .def("next", &StreamRun::next)
      .def("close", &StreamRun::close)
      .def_property_readonly("finished", &StreamRun::finished)
      .def_property_readonly("result", &StreamRun::result);

  py::class_<Model>(m, "_Model")
      .def(py::init([](const std::string& model, const py::dict& options) {
        const gengraph::ModelOptions o = gengraph::python::model_options(options);
        py::gil_scoped_release nogil;
        return Model(model, o);
      }))
      .def_property_readonly("source", &Model::source)
      .def_property_readonly("vocab_size", &Model::vocab_size)
      .def_property_readonly("warnings", &Model::warnings);

  py::class_<PyEngine>(m, "_Engine")
      .def(py::init([](const py::object& model, const std::string& backend,
                       const std::map<std::string, std::string>& backend_options,
                       const std::string& whole_step, bool capture, int64_t sync_every,
                       const py::dict& model_opts) {
        const gengraph::RunOptions r = gengraph::python::run_options(
            backend, backend_options, whole_step, capture, sync_every);
        if (py::isinstance<Model>(model)) {
          if (!model_opts.empty()) {
            throw gengraph::Error(
                "Engine: the model is a loaded gengraph.Model, whose form was "
                "fixed when it was loaded; give " +
                std::string(py::str(model_opts.attr("keys")())) + " to gengraph.Model instead");
          }
          const Model loaded = model.cast<Model>();
          py::gil_scoped_release nogil;
          return std::make_unique<PyEngine>(std::make_unique<Engine>(loaded, r));
        }
        gengraph::EngineOptions o;
        static_cast<gengraph::ModelOptions&>(o) = gengraph::python::model_options(model_opts);
        static_cast<gengraph::RunOptions&>(o) = r;
        const std::string name = model.cast<std::string>();
        py::gil_scoped_release nogil;
        return std::make_unique<PyEngine>(std::make_unique<Engine>(name, o));
      }))
      .def("generate",
           [](PyEngine& e, const std::vector<std::vector<int64_t>>& prompts, const py::object& s) {
             Engine& engine = e.get("generate");
             const nlohmann::json settings = to_json(s, "generate: the settings");
             py::gil_scoped_release nogil;
             return engine.generate(prompts, settings);
           })
      .def("plan",
           [](PyEngine& e, const std::vector<std::vector<int64_t>>& prompts, const py::object& s) {
             Engine& engine = e.get("plan");
             const nlohmann::json settings = to_json(s, "plan: the settings");
             nlohmann::json out;
             {
               py::gil_scoped_release nogil;
               const gengraph::Plan p = engine.plan(prompts, settings);
               out = {{"settings", p.settings()},
                      {"ignored_keys", p.ignored_keys()},
                      {"inputs", p.inputs()},
                      {"rows_per_input", p.rows_per_input()},
                      {"prompt_length", p.prompt_length()},
                      {"max_length", p.max_length()},
                      {"memory_bytes", p.memory_bytes()},
                      {"memory_breakdown", p.memory_breakdown()}};
             }
             return from_json(out);
           })
      .def("_generate_timed",
           [](PyEngine& e, const std::vector<std::vector<int64_t>>& prompts, const py::object& s) {
             // bench/bench_python.py: the C++ call's own wall time, to tell the Python layer's
             // cost from the Engine's work outside the generation's timer.
             Engine& engine = e.get("generate");
             const nlohmann::json settings = to_json(s, "generate: the settings");
             py::gil_scoped_release nogil;
             const auto t0 = std::chrono::steady_clock::now();
             Generation g = engine.generate(prompts, settings);
             const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
             return std::make_pair(std::move(g), took.count());
           })
      .def("generate_text",
           [](PyEngine& e, const std::vector<std::string>& texts, const py::object& s) {
             Engine& engine = e.get("generate");
             const nlohmann::json settings = to_json(s, "generate: the settings");
             py::gil_scoped_release nogil;
             return engine.generate_text(texts, settings);
           })
      .def(
          "stream",
          [](PyEngine& e, std::vector<std::vector<int64_t>> prompts, std::vector<std::string> texts,
             const py::object& s) {
            return e.stream(std::move(prompts), std::move(texts),
                            to_json(s, "stream: the settings"));
          },
          py::keep_alive<0, 1>())
      .def("chat_texts",
           [](PyEngine& e, const py::object& conversations) {
             return e.chat_texts(to_json(conversations, "chat: messages"));
           })
      .def("encode",
           [](PyEngine& e, const std::string& text, bool add_special_tokens) {
             return e.get("encode").encode(text, add_special_tokens);
           })
      .def("decode",
           [](PyEngine& e, const std::vector<int64_t>& ids, bool skip_special_tokens) {
             return e.get("decode").decode(ids, skip_special_tokens);
           })
      .def("manual_seed",
           [](PyEngine& e, uint64_t seed) { e.get("manual_seed").manual_seed(seed); })
      .def("default_settings",
           [](PyEngine& e) { return from_json(e.get("default_settings").default_settings()); })
      .def("model", [](PyEngine& e) { return e.get("model").model(); })
      .def("model_source", [](PyEngine& e) { return e.get("model_source").model_source(); })
      .def("backend", [](PyEngine& e) { return e.get("backend").backend(); })
      .def("vocab_size", [](PyEngine& e) { return e.get("vocab_size").vocab_size(); })
      .def("backend_report",
           [](PyEngine& e) { return from_json(e.get("backend_report").backend_report()); })
      .def("warnings", [](PyEngine& e) { return e.get("warnings").warnings(); });

  m.def("backends", &gengraph::python::backend_list,
        "The registered backends: name, description, whether usable here (and why not), and "
        "whether defined in Python.");
  m.def("presets", &gengraph::python::preset_dict,
        "The built-in model shapes (random weights from a seed): name -> config.json.");
  m.def("models", &gengraph::python::model_list,
        "The known real models and whether the set-up has them here.");
  m.def("_run", &gengraph::python::run);
  m.def(
      "format_table",
      [](const py::object& doc) { return gengraph::format_table(to_json(doc, "format_table")); },
      "The readable table `gengraph run` prints, of a results document.");

  // The built-in backends listed and usable from the first call, and aoti able to build its
  // packages (tools/export_aoti.py) as the CLI's runner lets it.
  gengraph::register_builtin_backends();
  gengraph::install_aoti_export_tool();
  gengraph::python::bind_backends(m);
  gengraph::python::bind_serving(m);
}
