#include "dtorch/runtime/NcclBootstrap.h"

namespace dtorch::rt {

std::string ncclUniqueIdKey(const std::string &prefix, const Group &group) {
  std::string key = prefix + "/id/";
  for (size_t i = 0; i < group.size(); ++i)
    key += (i ? "," : "") + std::to_string(group[i]);
  return key;
}

std::string exchangeNcclUniqueId(KeyValueStore &store,
                                 const std::string &prefix, int64_t rank,
                                 const Group &group,
                                 const std::function<std::string()> &makeId,
                                 size_t idBytes,
                                 std::chrono::milliseconds deadline) {
  groupIndexOf(group, rank); // a member, a valid group
  const std::string key = ncclUniqueIdKey(prefix, group);
  auto checkSize = [&](const std::string &id, const char *where) {
    if (id.size() != idBytes)
      throw RuntimeError("NCCL communicator of group " + groupToString(group) +
                         ": the unique id " + where + " has " +
                         std::to_string(id.size()) + " bytes, not " +
                         std::to_string(idBytes));
  };
  if (group.front() == rank) {
    std::string id = makeId();
    checkSize(id, "made here");
    store.set(key, id);
    return id;
  }
  std::string id;
  try {
    id = store.get(key, deadline);
  } catch (const std::exception &e) {
    throw RuntimeError(
        "NCCL communicator of group " + groupToString(group) + ": rank " +
        std::to_string(rank) + " got no unique id from rank " +
        std::to_string(group.front()) + " within " +
        std::to_string(deadline.count()) + " ms (" + e.what() + ")");
  }
  checkSize(id, "in the store");
  return id;
}

} // namespace dtorch::rt
