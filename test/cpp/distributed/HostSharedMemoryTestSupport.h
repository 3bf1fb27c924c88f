// Helpers of the tests of the cross-process shared-memory communicator:
// a rendezvous directory, forked member processes, the small-chunk options.
#pragma once

#include "TestSupport.h"

#include "dtorch/runtime/HostSharedMemoryCollectives.h"

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace dtorch::rt::test {

using namespace std::chrono_literals;

// A fresh directory for the rendezvous store, removed at the end.
struct StoreDirectory {
  std::string path;
  StoreDirectory() {
    char pattern[] = "/tmp/dtorch-hostshm-test-XXXXXX";
    path = mkdtemp(pattern);
  }
  ~StoreDirectory() { std::filesystem::remove_all(path); }
};

// Forks `processes` children running body(process); each exits 0 when the
// body returned without an exception or a test failure. Returns the exit
// statuses (-1: killed after `limit`).
inline std::vector<int> runProcesses(int processes,
                                     const std::function<void(int)> &body,
                                     std::chrono::seconds limit = 60s) {
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int p = 0; p < processes; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        body(p);
        code = ::testing::Test::HasFailure() ? 1 : 0;
      } catch (const std::exception &error) {
        std::printf("process %d: %s\n", p, error.what());
        code = 2;
      }
      std::fflush(stdout);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  auto until = std::chrono::steady_clock::now() + limit;
  for (pid_t pid : pids) {
    int status = 0;
    while (true) {
      pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) {
        codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        break;
      }
      if (std::chrono::steady_clock::now() > until) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        codes.push_back(-1);
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
  }
  return codes;
}

inline void expectAllSucceeded(const std::vector<int> &codes) {
  for (size_t p = 0; p < codes.size(); ++p)
    EXPECT_EQ(codes[p], 0) << "process " << p;
}

inline HostSharedMemoryOptions
smallChunks(std::chrono::milliseconds deadline = 20s) {
  HostSharedMemoryOptions options;
  options.deadline = deadline;
  options.chunkBytes = 4096; // 9000-element tensors take several rounds
  options.ringBytes = 4096;
  options.hostIdentity = "test-host";
  // The staged rounds; the peer-access tests lower it.
  options.peerAccessBytes = SIZE_MAX;
  return options;
}

} // namespace dtorch::rt::test
