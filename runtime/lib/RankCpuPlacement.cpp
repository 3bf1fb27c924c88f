#include "dtorch/runtime/RankCpuPlacement.h"

#include "dtorch/runtime/Tensor.h"

#include <algorithm>
#include <cstdlib>
#include <sched.h>

namespace dtorch::rt {

std::vector<int> affinityCpuList() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set))
      cpus.push_back(cpu);
  return cpus;
}

std::vector<int> rankCpuSlice(const std::vector<int> &cpus, int rank,
                              int ranksOnHost, int threads) {
  int count = static_cast<int>(cpus.size());
  if (ranksOnHost < 1 || rank < 0 || ranksOnHost > count)
    return {};
  int share = count / ranksOnHost;
  int size = std::clamp(threads, 1, share);
  int first = (rank % ranksOnHost) * share;
  return std::vector<int>(cpus.begin() + first, cpus.begin() + first + size);
}

std::vector<int> unionOfCpus(const std::vector<std::vector<int>> &slices) {
  std::vector<int> all;
  for (const auto &slice : slices) {
    if (slice.empty())
      return {};
    all.insert(all.end(), slice.begin(), slice.end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

bool rankPinningEnabled() {
  const char *value = std::getenv("DTORCH_PIN_RANKS");
  if (!value || !*value)
    return false;
  std::string text(value);
  if (text == "1")
    return true;
  if (text == "0")
    return false;
  throw RuntimeError("DTORCH_PIN_RANKS must be 0 or 1, not '" + text + "'");
}

bool pinCurrentThread(const std::vector<int> &cpus) {
  if (cpus.empty())
    return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE)
      return false;
    CPU_SET(cpu, &set);
  }
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

std::string formatIntRanges(const std::vector<int> &values,
                            const std::string &separator) {
  std::string text;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1)
      ++j;
    if (!text.empty())
      text += separator;
    text += std::to_string(values[i]);
    if (j > i)
      text += "-" + std::to_string(values[j]);
    i = j + 1;
  }
  return text;
}

std::string describeCpus(const std::vector<int> &cpus) {
  return cpus.empty() ? "none" : formatIntRanges(cpus, ",");
}

std::string describeRankPinning(bool enabled, const std::vector<int> &cpus,
                                int firstRank, int numRanks, int ranksOnHost,
                                int threads) {
  if (!enabled)
    return "ranks not pinned (DTORCH_PIN_RANKS=1 pins them)";
  if (rankCpuSlice(cpus, firstRank, ranksOnHost, threads).empty())
    return "ranks not pinned: " + std::to_string(ranksOnHost) + " ranks on " +
           std::to_string(cpus.size()) + " CPUs";
  std::string text;
  for (int r = firstRank; r < firstRank + numRanks; ++r) {
    std::vector<int> slice = rankCpuSlice(cpus, r, ranksOnHost, threads);
    text += (text.empty() ? "rank " : ", rank ") + std::to_string(r) +
            (slice.size() == 1 ? " on CPU " : " on CPUs ") +
            describeCpus(slice);
  }
  return text;
}

} // namespace dtorch::rt
