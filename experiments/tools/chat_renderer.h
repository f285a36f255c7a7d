// A model folder's chat template rendered for one conversation at a time by one long-lived Python
// process (tools/hf_tokenizer.py --serve: transformers' apply_chat_template, the template being
// Jinja), so that a server pays for starting Python and loading the tokenizer once, not per
// request.
//
// The process is started on first use (or by start()) with the tools' Python, without a shell, in a
// process group of its own (a Ctrl-C meant for the server does not reach it; it ends when its input
// ends); its standard input is one end of a Unix socket pair, its output and error are pipes, and
// no other descriptor of this process goes with it. Each render writes one request line and reads
// one answer line within a deadline: GENGRAPH_CHAT_TEMPLATE_SECONDS (default 30; the tool itself
// stops the template at that many seconds and answers with a refusal) plus kSlackSeconds, plus
// kStartSeconds when the process has not answered yet (Python's start and the tokenizer's load).
// Past the deadline the process is killed and the render throws an Error naming the template; a
// process that died or was killed is started again by the next render. What the process writes to
// its standard error goes to `log`, a line at a time, while a render waits.
//
// SIGPIPE: requests are written with send(MSG_NOSIGNAL) on the socket, so a process that died
// before reading its request gives EPIPE (reported as its end) and never a signal; no signal
// disposition of the caller is changed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace gengraph {

class ChatRenderer {
 public:
  // Seconds allowed past the template's own limit (the request's round trip), and for a process
  // that has not answered yet, for starting Python and loading the tokenizer.
  static constexpr int64_t kSlackSeconds = 5;
  static constexpr int64_t kStartSeconds = 120;

  // The chat template of model folder `folder`; nothing is started yet. `log` gets the process's
  // command line when it starts and its standard error, always under this renderer's lock.
  ChatRenderer(const std::string& folder, std::ostream& log);
  // Closes the process's input (it ends at end of input), waits up to 2 s for it, then kills it;
  // it is reaped either way.
  ~ChatRenderer();
  ChatRenderer(const ChatRenderer&) = delete;
  ChatRenderer& operator=(const ChatRenderer&) = delete;

  // The prompt text of one conversation, `messages` a JSON array of {"role": "system" | "user" |
  // "assistant", "content": string}, with the template's generation prompt when
  // `add_generation_prompt` (not tokenized: encode it without special tokens, as
  // apply_chat_template(tokenize=True) does). Thread-safe: one render at a time. Throws Error: a
  // refused message, named by position and key ("messages[1]: key 'role': expected 'system',
  // 'user' or 'assistant', found \"tool\""), the tool's refusal of the template (none in the
  // folder, a limit passed: "the chat template of '<folder>' ('<file>') ran past 30 s on
  // conversation 0"), the deadline, or the process's end (with its last lines of standard error).
  std::string render(const nlohmann::json& messages, bool add_generation_prompt);

  // Starts the process and loads the tokenizer now, when it is not running (a server at start-up,
  // so that its first request does not wait for them). Throws Error as render does.
  void start();

  // The running process's id, 0 when none; how many processes have been started.
  pid_t pid() const;
  int starts() const;

 private:
  void spawn();
  bool running();
  nlohmann::json exchange(nlohmann::json request, int64_t seconds, bool loading);
  void forward_errors(bool flush);
  void note_error_line(const std::string& line);
  void stop(bool kill_now);
  std::string template_name() const;

  std::string folder_;
  std::ostream& log_;
  mutable std::mutex mutex_;
  pid_t pid_ = 0;
  int in_ = -1, out_ = -1, err_ = -1;  // our ends: the socket to its input, its output, its error
  bool answered_ = false;              // whether this process has answered a request
  int starts_ = 0;
  int64_t next_id_ = 0;
  std::string template_source_;          // where the template is, for messages (read_chat_template)
  std::string out_buffer_, err_buffer_;  // what has come and is not yet a whole line
  std::deque<std::string> err_tail_;     // the process's last lines of standard error
  int exit_status_ = -1;                 // of the last process reaped: waitpid's status, or -1
};

}  // namespace gengraph
