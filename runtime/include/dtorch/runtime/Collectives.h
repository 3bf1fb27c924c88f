// The collective-communication interface the executor drives on the COMM
// stream. Backends: FakeCollectiveHub (in-process, tests); Gloo/NCCL later.
//
// Conventions (docs/program-format.md, "Collectives"):
//  * `group` lists global ranks in group order; the caller's rank is in it;
//    every member issues the same collectives on the same group in the same
//    order.
//  * Outputs are preallocated by the caller with their final dtype and shape.
//  * Every blocking call has a deadline; when a member does not arrive in
//    time the call throws RuntimeError naming the missing rank(s).
#pragma once

#include "dtorch/Layout.h"
#include "dtorch/runtime/Tensor.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace dtorch::rt {

using Group = std::vector<int64_t>;

// The one reduction enum of the project (include/dtorch/Layout.h, MLIR-free),
// with its names from dtorch::reduceOpName.
using ReduceOp = ::dtorch::ReduceOp;
using ::dtorch::reduceOpName;
// "sum" "avg" "max" "min"; throws RuntimeError otherwise.
// Throws RuntimeError on an unknown name.
ReduceOp parseReduceOp(const std::string &name);

class Communicator {
public:
  virtual ~Communicator() = default;

  // This communicator's global rank.
  virtual int rank() const = 0;

  // out = reduce over members of x (same dtype and shape on every member).
  virtual void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                          ReduceOp op) = 0;

  // out = concat along `dim` of every member's x; member j's x has extent
  // sizes[j] along dim.
  virtual void all_gather(const Tensor &x, Tensor &out, const Group &group,
                          int64_t dim, const std::vector<int64_t> &sizes) = 0;

  // x has extent sum(sizes) along `dim`; member j's out is the reduction of
  // piece j (extent sizes[j]) over the members.
  virtual void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                              ReduceOp op, int64_t dim,
                              const std::vector<int64_t> &sizes) = 0;

  // x is cut along splitDim into pieces of splitSizes (piece j goes to member
  // j); out is the concatenation along concatDim of the pieces received,
  // member j's having extent concatSizes[j].
  virtual void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                          int64_t splitDim,
                          const std::vector<int64_t> &splitSizes,
                          int64_t concatDim,
                          const std::vector<int64_t> &concatSizes) = 0;

  // Every member's out receives the x of `root` (a global rank). Non-root
  // members may pass an undefined x.
  virtual void broadcast(const Tensor &x, Tensor &out, const Group &group,
                         int64_t root) = 0;

  // Point to point, matched by (sender, receiver, tag) in issue order. send
  // returns once the data is handed to the transport (it does not wait for
  // the receiver); recv blocks until the matching send arrives or the
  // deadline passes.
  virtual void send(const Tensor &x, int64_t peer, int64_t tag) = 0;
  virtual void recv(Tensor &out, int64_t peer, int64_t tag) = 0;
};

// Helpers shared by backends.
// Index of `rank` in `group`; throws RuntimeError when absent or when the
// group is empty or has duplicates.
// Point-to-point messages between ranks of one process, matched by (sender,
// receiver, tag) in issue order; shared by the in-process backends.
class Mailboxes {
public:
  // Copies `x`: the sender may reuse its buffer at once.
  void post(int64_t from, int64_t to, int64_t tag, const Tensor &x);
  // Waits for the next message or throws after `deadline`, naming `from`; the
  // message is copied into `out`, whose dtype and shape it must have.
  void take(int64_t from, int64_t to, int64_t tag,
            std::chrono::milliseconds deadline, Tensor &out);

private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<Tensor>> queues_;
};

size_t groupIndexOf(const Group &group, int64_t rank);
std::string groupToString(const Group &group);
// acc[i] = acc[i] (op) x[i] over `count` elements of dtype (Avg accumulates
// as Sum; see finishAverage). Throws RuntimeError for unsupported dtypes.
void reduceInto(void *acc, const void *x, int64_t count, DType dtype,
                ReduceOp op);
// acc[i] /= members (integer dtypes truncate toward zero).
void finishAverage(void *acc, int64_t count, DType dtype, int64_t members);

} // namespace dtorch::rt
