#include "ClusterProcesses.h"

#include "dtorch/runtime/Tensor.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dtorch::rt::detail {

pid_t spawnProcess(const std::string &executable,
                   const std::vector<std::string> &args) {
  // Everything the child needs is prepared before fork: only
  // async-signal-safe calls happen between fork and exec.
  std::vector<std::string> storage;
  storage.push_back(executable);
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (auto &arg : storage)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  bool search = executable.find('/') == std::string::npos;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    throw RuntimeError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    if (search)
      execvp(argv[0], argv.data());
    else
      execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid); // also from the parent, to avoid a race with killpg
  return pid;
}

std::string pollExit(pid_t pid) {
  int status = 0;
  pid_t done = waitpid(pid, &status, WNOHANG);
  if (done == 0)
    return "";
  if (done < 0)
    return "vanished";
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code == 127)
      return "could not be started (exit status 127: executable not found?)";
    return "exited with status " + std::to_string(code);
  }
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status));
  return "ended";
}

void killAndReap(pid_t pid) {
  if (pid <= 0)
    return;
  killpg(pid, SIGKILL);
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

std::string findWorkerExecutable(const std::string &configured) {
  if (!configured.empty())
    return configured;
  if (const char *env = std::getenv("DTORCH_WORKER"); env && *env)
    return env;
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    std::string candidate = dir + "/dtorch-worker";
    if (access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return "dtorch-worker";
}

} // namespace dtorch::rt::detail
