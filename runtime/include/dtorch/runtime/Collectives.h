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

// The reductions of the collectives. The runtime owns this enum: on the wire
// a collective names its reduction by the string attribute `reduce` ("sum",
// "avg", "max", "min"; docs/program-format.md), which the compiler writes and
// parseReduceOp reads, so no type of the compiler reaches the runtime.
enum class ReduceOp : uint8_t { Sum, Avg, Max, Min };
// "sum" "avg" "max" "min".
const char *reduceOpName(ReduceOp op);
// The inverse of reduceOpName; throws RuntimeError on an unknown name.
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
// Throws RuntimeError when `op` cannot reduce `dtype`: every reduction works
// on f32, f64, f16 and bf16; i32, i64 and bool support sum, max and min but
// not avg (the average of integers is not defined; torch has none either).
// bool: sum and max are logical or, min is logical and.
void checkReducible(DType dtype, ReduceOp op);

// out[i] = pieces[0][i] (op) pieces[1][i] (op) ... (op) pieces[n-1][i] for
// i < count, combined left to right in the order given (backends pass the
// members in group order, so all of them compute the same bits); avg divides
// the sum by n once at the end. f16 and bf16 sum and avg accumulate in
// float32 and round to 16 bits once; integer sums wrap around. `out` may be
// exactly one of the pieces (not a partial overlap). Throws as
// checkReducible. Details in runtime/lib/CollectiveReductions.cpp.
void reducePieces(void *out, const std::vector<const void *> &pieces,
                  int64_t count, DType dtype, ReduceOp op);

} // namespace dtorch::rt
