// Which CPUs a rank's compute thread runs on. MLIR-free.
//
// A worker's rank thread runs the rank's kernels (and starts its BLAS and
// OpenMP threads, which inherit its CPUs). With DTORCH_PIN_RANKS=1, and when
// the ranks of a host do not outnumber the CPUs of the process's affinity
// mask, each rank gets CPUs of its own (as Open MPI's and Slurm's binding
// do): the host's CPUs are cut into ranksOnHost shares of cpus /
// ranksOnHost (Blas.h's threadShare), rank r takes share r mod ranksOnHost
// (ranks of a host are numbered consecutively) and of it as many CPUs as
// its BLAS runs threads (one rank alone on two CPUs with one BLAS thread:
// one CPU). The worker process keeps to the union of its ranks' CPUs, so
// that handing a message to a rank thread wakes no other CPU. With more
// ranks than CPUs nothing is pinned: ranks that share CPUs are better left
// to the scheduler.
//
// Off by default: two sessions on one host would both pin their rank 0 to
// the same CPU. Measured on a 2-CPU VM (bench/rank_pinning_ab.py): 1 rank's
// 1024^3 GEMM against torch's 0.964 pinned, 0.943 not; the hand-off into
// the rank 90 us shorter; a back-to-back tiny op 8-12% slower (the worker's
// threads then share its rank's CPU).
#pragma once

#include <string>
#include <vector>

namespace dtorch::rt {

/// The CPUs of this thread's affinity mask, ascending.
std::vector<int> affinityCpuList();

/// The CPUs of `cpus` that `rank` gets when `ranksOnHost` ranks share them
/// and each runs `threads` BLAS threads (see above): min(max(threads, 1),
/// share) CPUs from the start of its share; empty when the ranks outnumber
/// the CPUs, when ranksOnHost < 1 or when `cpus` is empty.
std::vector<int> rankCpuSlice(const std::vector<int> &cpus, int rank,
                              int ranksOnHost, int threads);

/// The CPUs of every slice, ascending and once each; empty when any slice
/// is empty (one rank left to the scheduler leaves its process so too).
std::vector<int> unionOfCpus(const std::vector<std::vector<int>> &slices);

/// Whether DTORCH_PIN_RANKS asks for pinning: "1" -> true; unset, "" or
/// "0" -> false; anything else throws RuntimeError naming the variable.
bool rankPinningEnabled();

/// Pins the calling thread to `cpus` (sched_setaffinity); returns false
/// (and changes nothing) when `cpus` is empty or the call fails.
bool pinCurrentThread(const std::vector<int> &cpus);

/// Ascending integers with each run of consecutive ones written "a-b",
/// joined by `separator`: {0, 1, 2, 5} -> "0-2" + separator + "5"; "" when
/// empty. (describeCpus, and formatRankList in DialInAdmission.h.)
std::string formatIntRanges(const std::vector<int> &values,
                            const std::string &separator);

/// "2-3", "0,2": a CPU list as taskset prints it ("none" when empty).
std::string describeCpus(const std::vector<int> &cpus);

/// The start-up line's account of it for ranks [firstRank, firstRank +
/// numRanks): "rank 0 on CPU 1, rank 1 on CPUs 2-3", or why nothing is
/// pinned ("ranks not pinned (DTORCH_PIN_RANKS=1 pins them)", "ranks not
/// pinned: 4 ranks on 2 CPUs").
std::string describeRankPinning(bool enabled, const std::vector<int> &cpus,
                                int firstRank, int numRanks, int ranksOnHost,
                                int threads);

} // namespace dtorch::rt
