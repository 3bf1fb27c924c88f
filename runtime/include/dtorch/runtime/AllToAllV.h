// all_to_all with uneven counts (torch's all_to_all_single with split
// sizes): the exchange an MoE dispatch needs, where the number of tokens each
// rank routes to each other rank depends on the data.
//
// Built on the point-to-point half of the Communicator interface (send never
// waits for its receiver; messages match by (sender, receiver, tag) in issue
// order), so every backend has it: in-process, host shared memory, Gloo and
// the fake hub. The counts travel first, then the rows, so a receiver learns
// how many rows come from each member before it takes them.
//
// Shapes stay static: the caller passes an output of an upper bound of rows
// (for an MoE: every token of every member) and gets the received rows packed
// at its front in group order, the rest zero, with the count from each
// member. A program that goes on computing on all of `out` therefore needs no
// data-dependent shape; the counts say which rows are real.
#pragma once

#include "dtorch/runtime/Collectives.h"

#include <cstdint>
#include <vector>

namespace dtorch::rt {

// The tag of the exchanges: above the tags the compiler gives transfers
// (their index in a function) and moves between meshes (1 << 20). All
// members issue their collectives in one order, so one tag suffices.
inline constexpr int64_t kAllToAllVTag = int64_t(1) << 21;

// x: [N, ...]; rows [offset_j, offset_j + sendCounts[j]) go to member j of
// `group` (offset_j the sum of the counts before j; sum(sendCounts) <= N).
// out: [M, ...] with x's dtype and row shape; on return its first
// sum(recvCounts) rows are those received, member by member in group order,
// and the rest are zero; recvCounts[j] is the number of rows member j sent
// here. Throws RuntimeError (with the numbers) when a count is negative, the
// counts do not fit x, the group size differs from the counts', the row
// shapes or dtypes differ, or more rows arrive than out holds (every message
// is still taken, so the channels stay in step).
void all_to_all_v(Communicator &comm, const Tensor &x,
                  const std::vector<int64_t> &sendCounts, Tensor &out,
                  std::vector<int64_t> &recvCounts, const Group &group,
                  int64_t tag = kAllToAllVTag);

// The segmented form, for a dispatch into fixed slots (what the dtensor op
// lowers to): x and out are both [n * S * segmentRows, ...] for a group of n
// members, split into n * S segments of `segmentRows` rows; counts has n * S
// entries. The first counts[j * S + s] rows of segment (j, s) go to member
// j, which puts them at the front of its segment (me, s); the rest of every
// segment of `out` is zero, and recvCounts[j * S + s] is the number of rows
// member j sent into segment (j, s). Each member's S counts travel as one
// message, then each non-empty segment's rows (no copy on the sender), so
// the bytes moved follow the counts. Returns the bytes of rows this member
// sent to the others. Throws RuntimeError (with the numbers) when a count
// is negative or exceeds segmentRows, or the shapes do not fit.
int64_t all_to_all_v_segments(Communicator &comm, const Tensor &x,
                              const std::vector<int64_t> &counts, Tensor &out,
                              std::vector<int64_t> &recvCounts,
                              const Group &group, int64_t segmentRows,
                              int64_t tag = kAllToAllVTag);

} // namespace dtorch::rt
