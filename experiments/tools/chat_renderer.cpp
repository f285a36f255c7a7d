#include "experiments/tools/chat_renderer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <vector>

#include "experiments/tools/process.h"
#include "experiments/tools/text_io.h"
#include "framework/text/chat_template.h"
#include "framework/util/error.h"

extern char** environ;

namespace gengraph {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitGraceMs = 2000;    // for the process to end once its input is closed
constexpr size_t kTailLines = 5;      // lines of its standard error kept for messages
constexpr size_t kMaxErrLine = 4096;  // a longer piece without a newline is passed on as a line

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string status_text(int status) {
  if (status < 0) return "status unknown: reaped elsewhere";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "signal " + std::to_string(sig) + ", " + ::strsignal(sig);
  }
  return "status " + std::to_string(status);
}

// posix_spawn's attributes and file actions, released on every path.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

}  // namespace

ChatRenderer::ChatRenderer(const std::string& folder, std::ostream& log)
    : folder_(folder), log_(log) {}

ChatRenderer::~ChatRenderer() {
  std::lock_guard lock(mutex_);
  stop(false);
}

pid_t ChatRenderer::pid() const {
  std::lock_guard lock(mutex_);
  return pid_;
}

int ChatRenderer::starts() const {
  std::lock_guard lock(mutex_);
  return starts_;
}

std::string ChatRenderer::template_name() const {
  return "the chat template of '" + folder_ + "'" +
         (template_source_.empty() ? "" : " (" + template_source_ + ")");
}

void ChatRenderer::spawn() {
  // The template is checked first (UTF-8, size), naming its file and key, as
  // TextCodec::chat_prompts does; a folder without one is left to the tool, which says so.
  const auto chat_template = read_chat_template(folder_);
  template_source_ = chat_template ? chat_template->source : "";
  const std::string python = python_for_tools().string();
  const std::vector<std::string> argv = {python,
                                         (source_root() / "tools" / "hf_tokenizer.py").string(),
                                         "--serve", "--model", folder_};
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0 ||
      ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    for (int* fd : {&in[0], &in[1], &out[0], &out[1], &err[0], &err[1]}) close_fd(*fd);
    throw Error("cannot make the pipes of tools/hf_tokenizer.py --serve for '" + folder_ +
                "': " + std::strerror(e));
  }
  SpawnSetup s;
  posix_spawn_file_actions_adddup2(&s.actions, in[1], 0);
  posix_spawn_file_actions_adddup2(&s.actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&s.actions, err[1], 2);
  // Nothing else of this process goes along (a server's sockets, files without close-on-exec).
  posix_spawn_file_actions_addclosefrom_np(&s.actions, 3);
  // The signals a caller may have blocked or ignored are the child's defaults again; its own
  // process group keeps a terminal's Ctrl-C for the caller to handle.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGCHLD}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &defaults);
  posix_spawnattr_setpgroup(&s.attr, 0);
  posix_spawnattr_setflags(&s.attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, python.c_str(), &s.actions, &s.attr, args.data(), environ);
  close_fd(in[1]);
  close_fd(out[1]);
  close_fd(err[1]);
  if (rc != 0) {
    close_fd(in[0]);
    close_fd(out[0]);
    close_fd(err[0]);
    throw Error("cannot start the tools' Python '" + python + "' for " + template_name() + ": " +
                std::strerror(rc) +
                " (GENGRAPH_PYTHON names one; scripts/setup.sh makes .venv/bin/python)");
  }
  pid_ = pid;
  in_ = in[0];
  out_ = out[0];
  err_ = err[0];
  for (int fd : {in_, out_, err_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  answered_ = false;
  out_buffer_.clear();
  err_buffer_.clear();
  err_tail_.clear();
  ++starts_;
  log_ << "hf_tokenizer.py:";
  for (const auto& a : argv) log_ << " " << a;
  log_ << " (pid " << pid << ")\n";
}

bool ChatRenderer::running() {
  if (pid_ == 0) return false;
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == 0) return true;
  // It ended between renders (killed, out of memory): reaped here, started again by the caller.
  const pid_t was = pid_;
  close_fd(in_);
  close_fd(out_);
  forward_errors(true);
  close_fd(err_);
  pid_ = 0;
  exit_status_ = r == was ? status : -1;
  log_ << "note: tools/hf_tokenizer.py --serve (pid " << was << ") for " << template_name()
       << " had ended (" << status_text(exit_status_) << "); starting it again\n";
  return false;
}

void ChatRenderer::note_error_line(const std::string& line) {
  log_ << line << "\n";
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  err_tail_.push_back(line.size() > 400 ? line.substr(0, 400) + "..." : line);
  if (err_tail_.size() > kTailLines) err_tail_.pop_front();
}

void ChatRenderer::forward_errors(bool flush) {
  if (err_ < 0) return;
  char buf[4096];
  for (int reads = 0; reads < 64; ++reads) {  // a bounded amount per call: the process may go on
    const ssize_t n = ::read(err_, buf, sizeof buf);
    if (n > 0) {
      err_buffer_.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n == 0) {  // the end: what is left is the last line
        flush = true;
        close_fd(err_);
      }
      break;
    }
  }
  size_t start = 0;
  for (size_t nl; (nl = err_buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
    note_error_line(err_buffer_.substr(start, nl - start));
  }
  err_buffer_.erase(0, start);
  if ((flush && !err_buffer_.empty()) || err_buffer_.size() > kMaxErrLine) {
    note_error_line(err_buffer_);
    err_buffer_.clear();
  }
}

void ChatRenderer::stop(bool kill_now) {
  if (pid_ == 0) return;
  close_fd(in_);  // end of input: the tool ends by itself
  close_fd(out_);
  if (kill_now) ::kill(-pid_, SIGKILL);  // its own process group: anything it started too
  int status = -1;
  const auto give_up = Clock::now() + std::chrono::milliseconds(kExitGraceMs);
  while (true) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) {  // ECHILD: reaped elsewhere (SIGCHLD ignored by the caller)
      status = -1;
      break;
    }
    if (Clock::now() >= give_up) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0) {
        if (errno != EINTR) {
          status = -1;
          break;
        }
      }
      break;
    }
    pollfd p{err_, POLLIN, 0};
    ::poll(&p, 1, 10);  // its standard error meanwhile (none once it is closed), a short wait
    forward_errors(false);
  }
  forward_errors(true);
  close_fd(err_);
  exit_status_ = status;
  pid_ = 0;
}

nlohmann::json ChatRenderer::exchange(nlohmann::json request, int64_t seconds, bool loading) {
  const std::string tool = "tools/hf_tokenizer.py --serve";
  for (int attempt = 0;; ++attempt) {
    if (!running()) spawn();
    if (!template_source_.empty()) request["template_source"] = template_source_;
    const int64_t id = ++next_id_;
    request["id"] = id;
    std::string line;
    try {
      line = request.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict) + "\n";
    } catch (const nlohmann::json::exception& e) {
      throw Error("the messages for " + template_name() + " cannot be sent: " + e.what());
    }
    const bool first = !answered_;
    const int64_t allowed = seconds + kSlackSeconds + (first ? kStartSeconds : 0);
    const auto deadline = Clock::now() + std::chrono::seconds(allowed);
    const size_t max_answer = (size_t{64} << 20) + 24 * line.size();
    size_t sent = 0;
    bool unsent = false;  // the process was gone before it took any of the request
    bool again = false;   // ... and a new one is to take it
    std::string answer_line;
    while (true) {
      if (const size_t nl = out_buffer_.find('\n'); nl != std::string::npos) {
        answer_line = out_buffer_.substr(0, nl);
        out_buffer_.erase(0, nl + 1);
        break;
      }
      if (out_buffer_.size() > max_answer) {
        stop(true);
        throw Error(template_name() + ": " + tool + " answered with more than " +
                    std::to_string(max_answer) + " bytes; the process was stopped");
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        const pid_t was = pid_;
        stop(true);
        if (loading) {
          throw Error(tool + " did not load the tokenizer of '" + folder_ + "' within " +
                      std::to_string(allowed) + " s and was stopped (pid " + std::to_string(was) +
                      ")");
        }
        if (first) {
          throw Error(template_name() + " was not rendered within " + std::to_string(allowed) +
                      " s (" + std::to_string(seconds) + " s for the template, the rest for " +
                      "starting Python and loading the tokenizer): " + tool + " (pid " +
                      std::to_string(was) + ") was stopped; the next render starts it again");
        }
        throw Error(template_name() + " ran past " + std::to_string(seconds) +
                    " s and was stopped (" + tool + ", pid " + std::to_string(was) +
                    ", gave no answer within " + std::to_string(allowed) +
                    " s; the next render starts it again)");
      }
      pollfd fds[3] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}, {-1, POLLOUT, 0}};
      if (sent < line.size() && !unsent) fds[2].fd = in_;
      if (::poll(fds, 3, static_cast<int>(std::min<int64_t>(left, INT_MAX))) < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        stop(true);
        throw Error(template_name() + ": waiting for " + tool + " failed: " + std::strerror(e));
      }
      if (fds[1].revents != 0) forward_errors(false);
      if (fds[2].revents != 0) {
        // A socket: MSG_NOSIGNAL makes a reader that is gone an EPIPE, never a SIGPIPE.
        const ssize_t n =
            ::send(in_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          sent += static_cast<size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          unsent = sent == 0;  // its end is reported when its output ends, just after
          sent = line.size();
        }
      }
      if (fds[0].revents == 0) continue;
      char buf[65536];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n > 0) {
        out_buffer_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      // The end of its output: the process ended (or is ending).
      const pid_t was = pid_;
      stop(false);
      if (unsent && attempt == 0) {  // it had ended before this request: a new one takes it
        log_ << "note: " << tool << " (pid " << was << ") had ended (" << status_text(exit_status_)
             << "); starting it again\n";
        again = true;
        break;
      }
      std::string tail;
      for (const auto& l : err_tail_) tail += "\n  " + l;
      throw Error(tool + " (pid " + std::to_string(was) + ") for " + template_name() + " ended (" +
                  status_text(exit_status_) + ") before answering" +
                  (tail.empty() ? " (it printed nothing)" : ":" + tail) +
                  "\nthe next render starts it again");
    }
    if (again) continue;
    answered_ = true;
    forward_errors(false);
    nlohmann::json answer = nlohmann::json::parse(answer_line, nullptr, false);
    const auto got = answer.is_object() ? answer.find("id") : answer.end();
    if (answer.is_discarded() || !answer.is_object() || got == answer.end() ||
        !got->is_number_integer() || got->get<int64_t>() != id) {
      stop(true);
      throw Error(template_name() + ": " + tool + " gave an answer that is not one for request " +
                  std::to_string(id) + " ('" + answer_line.substr(0, 200) +
                  "'); the process was stopped");
    }
    if (const auto e = answer.find("error"); e != answer.end()) {
      throw Error(e->is_string() ? e->get<std::string>() : e->dump());
    }
    return answer;
  }
}

std::string ChatRenderer::render(const nlohmann::json& messages, bool add_generation_prompt) {
  std::lock_guard lock(mutex_);
  const int64_t seconds = chat_template_seconds();  // a bad value is named before anything starts
  nlohmann::json request = {
      {"messages", nlohmann::json::array({messages})},
      {"add_generation_prompt", add_generation_prompt},
      {"limits", {{"seconds", seconds}, {"characters_per_character", 4}, {"characters", 1000000}}}};
  nlohmann::json answer;
  try {
    answer = exchange(std::move(request), seconds, false);
  } catch (const Error& e) {
    // The tool names the one conversation sent as messages[0]: the caller's is `messages` itself.
    const std::string m = e.what();
    if (m.rfind("messages[0][", 0) == 0) throw Error("messages[" + m.substr(12));
    if (m.rfind("messages[0]: ", 0) == 0) throw Error("messages: " + m.substr(13));
    throw;
  }
  const auto texts = answer.find("texts");
  if (texts == answer.end() || !texts->is_array() || texts->size() != 1 ||
      !(*texts)[0].is_string()) {
    stop(true);
    throw Error(template_name() +
                ": tools/hf_tokenizer.py --serve answered without one text (\"texts\"); the "
                "process was stopped");
  }
  return (*texts)[0].get<std::string>();
}

void ChatRenderer::start() {
  std::lock_guard lock(mutex_);
  if (running()) return;
  const int64_t seconds = chat_template_seconds();
  exchange({{"load", true}}, seconds, true);
}

}  // namespace gengraph
