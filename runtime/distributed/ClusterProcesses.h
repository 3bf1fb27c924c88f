// Starting and stopping local dtorch-worker processes (internal to Cluster).
#pragma once

#include <chrono>
#include <string>
#include <sys/types.h>
#include <vector>

namespace dtorch::rt::detail {

// fork + exec of `executable` (searched in PATH when it has no '/') in its
// own process group, killed by the kernel (SIGKILL) when the calling thread
// exits. Returns the pid; throws RuntimeError when fork fails.
// `secretOnFd3`, when not empty, is readable by the child on descriptor 3
// (a pipe holding it, then end of file): how the embedded cluster hands a
// worker its token without putting it on the command line (`ps`) or in the
// environment.
// `linkOnFd4`, when not -1, is the child's descriptor 4 (the embedded
// cluster's link to the worker, StreamLink.h); the caller closes its copy.
pid_t spawnProcess(const std::string &executable,
                   const std::vector<std::string> &args,
                   const std::string &secretOnFd3 = "", int linkOnFd4 = -1);

// Non-blocking: an empty string while `pid` runs, otherwise how it ended
// ("exited with status 3", "killed by signal 9"); the process is reaped.
std::string pollExit(pid_t pid);

// SIGKILL to the process group of `pid` and reap it.
void killAndReap(pid_t pid);

// The worker executable: `configured`, else $DTORCH_WORKER, else
// "dtorch-worker" next to the running executable, else from PATH.
std::string findWorkerExecutable(const std::string &configured);

} // namespace dtorch::rt::detail
