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

namespace {

// A pipe whose read end holds `secret` followed by end of file; both ends
// close on exec. Returns the read end.
int pipeHolding(const std::string &secret) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw RuntimeError(std::string("pipe failed: ") + std::strerror(errno));
  // A pipe holds 64 KiB before a write blocks; a token is far smaller.
  size_t done = 0;
  while (done < secret.size()) {
    ssize_t n = write(fds[1], secret.data() + done, secret.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int saved = errno;
      close(fds[0]);
      close(fds[1]);
      throw RuntimeError(std::string("writing the token pipe failed: ") +
                         std::strerror(saved));
    }
    done += static_cast<size_t>(n);
  }
  close(fds[1]);
  return fds[0];
}

} // namespace

pid_t spawnProcess(const std::string &executable,
                   const std::vector<std::string> &args,
                   const std::string &secretOnFd3, int linkOnFd4) {
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
  int secretFd = secretOnFd3.empty() ? -1 : pipeHolding(secretOnFd3);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int saved = errno;
    if (secretFd >= 0)
      close(secretFd);
    throw RuntimeError(std::string("fork failed: ") + std::strerror(saved));
  }
  if (pid == 0) {
    // Both out of the way of 3 and 4 first (either may be 3 or 4), then
    // in place (dup2 leaves 3 and 4 open across exec, the copies not).
    int secret = secretFd >= 0 ? fcntl(secretFd, F_DUPFD_CLOEXEC, 10) : -1;
    int link = linkOnFd4 >= 0 ? fcntl(linkOnFd4, F_DUPFD_CLOEXEC, 10) : -1;
    if ((secretFd >= 0 && (secret < 0 || dup2(secret, 3) < 0)) ||
        (linkOnFd4 >= 0 && (link < 0 || dup2(link, 4) < 0)))
      _exit(126);
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
  if (secretFd >= 0)
    close(secretFd);
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
