// Helpers for tests that start processes: every process is killed and reaped
// when its guard goes out of scope, also when the test fails.
#pragma once

#include "ClusterProcesses.h"
#include "dtorch/runtime/Cluster.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace dtorch::rt::test {

#ifdef DTORCH_WORKER_PATH
/// An embedded cluster of `world` ranks in `procs` worker processes of the
/// dtorch-worker this build made.
inline ClusterOptions embeddedClusterOptions(int world = 4, int procs = 2) {
  ClusterOptions options;
  options.worldSize = world;
  options.numProcesses = procs;
  options.workerExecutable = DTORCH_WORKER_PATH;
  return options;
}
#endif

struct ProcessGuard {
  pid_t pid = -1;
  ProcessGuard() = default;
  explicit ProcessGuard(pid_t p) : pid(p) {}
  ProcessGuard(const ProcessGuard &) = delete;
  ~ProcessGuard() {
    if (pid > 0)
      detail::killAndReap(pid);
  }
  // Waits up to `limit` for the process to end on its own; "" if it did not.
  std::string waitExit(std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      std::string how = detail::pollExit(pid);
      if (!how.empty()) {
        pid = -1;
        return how;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "";
  }
};

inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
  int port = ntohs(address.sin_port);
  close(fd);
  return port;
}

inline bool processAlive(int64_t pid) {
  return pid > 0 && kill(static_cast<pid_t>(pid), 0) == 0;
}

} // namespace dtorch::rt::test
