#include "RunDependencies.h"

#include <algorithm>
#include <set>

namespace dtorch::rt::detail {

namespace wire = ::dtorch::wire;

void RunDependencies::setProgramRanks(
    uint64_t programId, const std::vector<const wire::Program *> &programs,
    const std::vector<int64_t> &meshRanks) {
  std::set<int64_t> ranks(meshRanks.begin(), meshRanks.end());
  for (const wire::Program *program : programs)
    for (const wire::Instruction &inst : program->instructions()) {
      if (inst.stream() != wire::COMM)
        continue;
      for (const auto &[name, attr] : inst.attrs()) {
        if (name == "group" && attr.has_ints())
          ranks.insert(attr.ints().values().begin(),
                       attr.ints().values().end());
        else if ((name == "peer" || name == "root") &&
                 attr.value_case() == wire::Attr::kI)
          ranks.insert(attr.i());
      }
    }
  programRanks_[programId] = std::vector<int64_t>(ranks.begin(), ranks.end());
  involvedCache_.erase(programId);
}

RunDependencies::Ranks
RunDependencies::involvedRanks(uint64_t programId,
                               const std::vector<int64_t> &ranks) {
  InvolvedCache &cache = involvedCache_[programId];
  if (!cache.involved || cache.ranks != ranks) {
    cache.ranks = ranks;
    std::vector<int64_t> all = involved(programId, ranks);
    uint64_t hash = all.size();
    for (int64_t r : all)
      hash = hash * 1099511628211ULL ^ static_cast<uint64_t>(r);
    std::vector<Ranks> &same = interned_[hash];
    cache.involved = nullptr;
    for (const Ranks &list : same)
      if (*list == all)
        cache.involved = list;
    if (!cache.involved) {
      cache.involved =
          std::make_shared<const std::vector<int64_t>>(std::move(all));
      same.push_back(cache.involved);
    }
  }
  return cache.involved;
}

const std::vector<int64_t> *RunDependencies::neededList(uint64_t handle) const {
  auto it = needs_.find(handle);
  return it == needs_.end() ? nullptr : it->second.get();
}

std::vector<int64_t>
RunDependencies::involved(uint64_t programId,
                          const std::vector<int64_t> &ranks) const {
  std::vector<int64_t> all = ranks;
  auto it = programRanks_.find(programId);
  if (it != programRanks_.end())
    all.insert(all.end(), it->second.begin(), it->second.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

void RunDependencies::recordRun(const std::vector<int64_t> &involved,
                                const std::vector<uint64_t> &inputs,
                                const std::vector<uint64_t> &outputs) {
  recordRunShared(std::make_shared<const std::vector<int64_t>>(involved),
                  inputs, outputs);
}

void RunDependencies::recordRunShared(const Ranks &involvedList,
                                      const std::vector<uint64_t> &inputs,
                                      const std::vector<uint64_t> &outputs) {
  if (outputs.empty())
    return;
  const std::vector<int64_t> &involved = *involvedList;
  // Usually every input needs the ranks of this very mesh (the same shared
  // list, or an equal one): then the outputs share it and nothing is
  // allocated.
  Ranks shared;
  std::vector<int64_t> extra;
  for (uint64_t input : inputs) {
    auto it = needs_.find(input);
    if (it == needs_.end())
      continue;
    if (it->second == involvedList ||
        (it->second->size() == involved.size() && *it->second == involved)) {
      if (!shared)
        shared = it->second;
      continue;
    }
    for (int64_t rank : *it->second)
      if (!std::binary_search(involved.begin(), involved.end(), rank))
        extra.push_back(rank);
  }
  if (extra.empty() && !shared)
    shared = involvedList;
  if (!extra.empty()) {
    std::vector<int64_t> all = involved;
    all.insert(all.end(), extra.begin(), extra.end());
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    shared = std::make_shared<const std::vector<int64_t>>(std::move(all));
  }
  for (uint64_t output : outputs) {
    needs_[output] = shared;
    poisoned_.erase(output);
  }
}

int64_t RunDependencies::needs(uint64_t handle,
                               const std::vector<bool> &lost) const {
  auto it = needs_.find(handle);
  if (it == needs_.end())
    return -1;
  for (int64_t rank : *it->second)
    if (rank >= 0 && static_cast<size_t>(rank) < lost.size() && lost[rank])
      return rank;
  return -1;
}

void RunDependencies::poison(uint64_t handle, const LostValue &why) {
  poisoned_[handle] = why;
  needs_.erase(handle);
}

size_t
RunDependencies::poisonNeeding(const std::vector<bool> &lost,
                               const std::function<LostValue(int64_t)> &why) {
  size_t count = 0;
  for (auto it = needs_.begin(); it != needs_.end();) {
    int64_t rank = -1;
    for (int64_t needed : *it->second)
      if (needed >= 0 && static_cast<size_t>(needed) < lost.size() &&
          lost[needed]) {
        rank = needed;
        break;
      }
    if (rank < 0) {
      ++it;
      continue;
    }
    poisoned_[it->first] = why(rank);
    it = needs_.erase(it);
    ++count;
  }
  return count;
}

const LostValue *RunDependencies::poisoned(uint64_t handle) const {
  auto it = poisoned_.find(handle);
  return it == poisoned_.end() ? nullptr : &it->second;
}

void RunDependencies::forget(uint64_t handle) {
  needs_.erase(handle);
  poisoned_.erase(handle);
}

} // namespace dtorch::rt::detail
