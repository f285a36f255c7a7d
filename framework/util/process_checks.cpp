#include "framework/util/process_checks.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <limits>

namespace gengraph {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  std::string h(buf);
  for (char& c : h) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  }
  return h;
}

bool process_is_running(long pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace gengraph
