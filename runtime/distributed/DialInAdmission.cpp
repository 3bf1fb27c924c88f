//===- DialInAdmission.cpp - admitting workers that dial the controller ---===//

#include "dtorch/runtime/DialInAdmission.h"

#include "dtorch/runtime/RankCpuPlacement.h"
#include "dtorch/runtime/Transport.h"

#include <algorithm>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;

namespace {

std::string rankRange(int first, int count) {
  if (count == 1)
    return "rank " + std::to_string(first);
  return "ranks " + std::to_string(first) + "-" +
         std::to_string(first + count - 1);
}

} // namespace

std::string formatRankList(const std::vector<int> &ranks) {
  return formatIntRanges(ranks, ", ");
}

DialInAdmission::DialInAdmission(int worldSize, std::string token)
    : worldSize_(std::max(0, worldSize)), token_(std::move(token)) {}

std::string DialInAdmission::describe(const DialInWorker &worker) {
  std::string text = "host " + (worker.host.empty() ? "?" : worker.host) +
                     " pid " + std::to_string(worker.pid);
  if (worker.numRanks > 0)
    text += " (" + rankRange(worker.firstRank, worker.numRanks) + ")";
  if (!worker.peerAddress.empty())
    text += " from " + worker.peerAddress;
  return text;
}

DialInAdmission::Decision DialInAdmission::offer(const std::string &peer,
                                                 const std::string &peerAddress,
                                                 const wire::Hello &hello) {
  DialInWorker candidate;
  candidate.peer = peer;
  candidate.peerAddress = peerAddress;
  candidate.host = hello.host();
  candidate.pid = hello.pid();
  candidate.firstRank = hello.first_rank();
  candidate.numRanks = hello.num_ranks();
  candidate.cudaDevices = hello.cuda_devices();
  candidate.cudaUnavailable = hello.cuda_unavailable();
  auto refuse = [&](const std::string &why) {
    return Decision{false, "the worker " + describe(candidate) +
                               " was refused: " + why};
  };
  if (std::string bad = checkHello(hello, token_, wire::ROLE_WORKER);
      !bad.empty())
    return refuse(bad);
  if (candidate.numRanks < 1 || candidate.firstRank < 0)
    return refuse("it reports no valid block of ranks (first rank " +
                  std::to_string(candidate.firstRank) + ", " +
                  std::to_string(candidate.numRanks) + " rank(s))");
  if (hello.world_size() < 1)
    return refuse("it reports a world size of " +
                  std::to_string(hello.world_size()));
  if (worldSize_ > 0 && hello.world_size() != worldSize_) {
    std::string whose =
        "the controller's world size is " + std::to_string(worldSize_);
    if (!admitted_.empty())
      whose += " (the world of " + describe(admitted_.front()) + ")";
    return refuse("world size mismatch: it was started for a world of " +
                  std::to_string(hello.world_size()) + " ranks, " + whose);
  }
  int world = worldSize_ > 0 ? worldSize_ : hello.world_size();
  if (static_cast<int64_t>(candidate.firstRank) + candidate.numRanks > world)
    return refuse(rankRange(candidate.firstRank, candidate.numRanks) +
                  " is not inside the world of " + std::to_string(world) +
                  " ranks (0-" + std::to_string(world - 1) + ")");
  for (const DialInWorker &other : admitted_) {
    int lo = std::max(other.firstRank, candidate.firstRank);
    int hi = std::min(other.firstRank + other.numRanks,
                      candidate.firstRank + candidate.numRanks);
    if (lo < hi)
      return refuse("duplicate rank: " + rankRange(lo, hi - lo) +
                    " is already held by the worker " + describe(other));
  }
  worldSize_ = world;
  admitted_.push_back(std::move(candidate));
  return Decision{true, ""};
}

bool DialInAdmission::withdraw(const std::string &peer) {
  auto it = std::find_if(
      admitted_.begin(), admitted_.end(),
      [&](const DialInWorker &worker) { return worker.peer == peer; });
  if (it == admitted_.end())
    return false;
  admitted_.erase(it);
  return true;
}

bool DialInAdmission::holds(const std::string &peer) const {
  return std::any_of(
      admitted_.begin(), admitted_.end(),
      [&](const DialInWorker &worker) { return worker.peer == peer; });
}

std::vector<int> DialInAdmission::missingRanks() const {
  std::vector<bool> held(static_cast<size_t>(worldSize_), false);
  for (const DialInWorker &worker : admitted_)
    for (int r = worker.firstRank; r < worker.firstRank + worker.numRanks; ++r)
      held[static_cast<size_t>(r)] = true;
  std::vector<int> missing;
  for (int r = 0; r < worldSize_; ++r)
    if (!held[static_cast<size_t>(r)])
      missing.push_back(r);
  return missing;
}

bool DialInAdmission::complete() const {
  return worldSize_ > 0 && missingRanks().empty();
}

std::string DialInAdmission::describeMissing() const {
  if (worldSize_ == 0)
    return "no worker arrived";
  std::vector<int> missing = missingRanks();
  std::string text = (missing.size() == 1 ? "rank " : "ranks ") +
                     formatRankList(missing) + " of " +
                     std::to_string(worldSize_) + " never arrived";
  if (admitted_.empty())
    return text + " (no worker arrived)";
  text += " (" + std::to_string(admitted_.size()) + " worker(s) admitted: ";
  for (size_t i = 0; i < admitted_.size(); ++i)
    text += (i ? "; " : "") + describe(admitted_[i]);
  return text + ")";
}

} // namespace dtorch::rt
