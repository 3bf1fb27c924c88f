//===- BufferPlan.h - live ranges and arena packing of a program -*- C++
//-*-===//
//
// MLIR-free and header-only: the one definition of when a buffer of a
// per-rank program is live and whether two buffers may share memory. The
// compiler's `rank-plan-buffers` pass plans the arena with it and the
// runtime's validator checks a received plan with the same rules.
//
// A program is a list of steps in program order; each step runs on a stream
// (instructions of a stream run in program order, the streams run
// concurrently) and may wait for steps of other streams (the program's
// events). Step j "happens after" step a when a is earlier on j's stream or
// j waits (directly or transitively) for a step at or after a on a's stream.
// A buffer's live range is [first, last] in program order: `first` is the
// step writing it, and every step after `last` happens after every access
// (the write and all reads). Two buffers whose ranges are disjoint may
// share memory; so may an input and the output of an elementwise step
// (inPlaceKernel) when every other access of the input happens before that
// step.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_BUFFERPLAN_H
#define DTORCH_BUFFERPLAN_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string_view>
#include <vector>

namespace dtorch::bufplan {

/// Offsets and sizes in the arena are multiples of this.
inline constexpr int64_t kArenaAlignment = 64;

inline int64_t alignUp(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// Kernels that read element i of each input before writing element i of
/// their output, so the output may take the memory of an input of the same
/// size that dies at the step (unary and binary elementwise kernels; reshape
/// and copy, whose copy is then skipped).
inline bool inPlaceKernel(std::string_view kernel) {
  static constexpr std::string_view kNames[] = {
      "neg",     "abs",  "exp",     "log",  "sqrt", "rsqrt",
      "relu",    "tanh", "sigmoid", "gelu", "silu", "sin",
      "cos",     "add",  "sub",     "mul",  "div",  "maximum",
      "minimum", "pow",  "reshape", "copy"};
  for (std::string_view name : kNames)
    if (name == kernel)
      return true;
  return false;
}

/// Kernels whose output may be a view of their input: the same bytes in
/// the same order (reshape). The output can then share its input's memory
/// for as long as either of them lives (viewAliases), not only when the
/// input dies at the step.
inline bool viewKernel(std::string_view kernel) { return kernel == "reshape"; }

/// A short list of ids (buffers or steps), kept inline up to four: a step
/// reads one or two buffers and writes one, and a buffer is written once and
/// read a few times, so planning or checking a program of thousands of steps
/// allocates nothing per step or per buffer.
class IdList {
public:
  IdList() = default;
  IdList(std::initializer_list<int> ids) { assign(ids.begin(), ids.end()); }
  IdList(const IdList &other) { assign(other.begin(), other.end()); }
  IdList(IdList &&other) noexcept { take(other); }
  IdList &operator=(const IdList &other) {
    if (this != &other)
      assign(other.begin(), other.end());
    return *this;
  }
  IdList &operator=(IdList &&other) noexcept {
    if (this != &other) {
      delete[] heap_;
      take(other);
    }
    return *this;
  }
  ~IdList() { delete[] heap_; }

  template <typename Iterator> void assign(Iterator first, Iterator last) {
    size_ = 0;
    for (; first != last; ++first)
      push_back(static_cast<int>(*first));
  }
  void push_back(int id) {
    if (size_ == capacity_)
      grow();
    data()[size_++] = id;
  }
  void clear() { size_ = 0; }
  bool empty() const { return size_ == 0; }
  size_t size() const { return static_cast<size_t>(size_); }
  int back() const { return data()[size_ - 1]; }
  int operator[](size_t i) const { return data()[i]; }
  const int *begin() const { return data(); }
  const int *end() const { return data() + size_; }
  bool operator==(const IdList &other) const {
    return size_ == other.size_ && std::equal(begin(), end(), other.begin());
  }

private:
  static constexpr int kInline = 4;
  int *data() { return heap_ ? heap_ : inline_; }
  const int *data() const { return heap_ ? heap_ : inline_; }
  void grow() {
    int capacity = capacity_ * 2;
    int *bigger = new int[capacity];
    std::memcpy(bigger, data(), sizeof(int) * size_);
    delete[] heap_;
    heap_ = bigger;
    capacity_ = capacity;
  }
  void take(IdList &other) {
    size_ = other.size_;
    capacity_ = other.capacity_;
    heap_ = other.heap_;
    if (!heap_)
      std::memcpy(inline_, other.inline_, sizeof(int) * size_);
    other.heap_ = nullptr;
    other.size_ = 0;
    other.capacity_ = kInline;
  }
  int *heap_ = nullptr; // the ids once there are more than kInline
  int size_ = 0;
  int capacity_ = kInline;
  int inline_[kInline];
};

struct Step {
  int stream = 0; // 0 .. numStreams-1
  IdList reads;   // buffer ids
  IdList writes;  // buffer ids
  IdList waitsOn; // earlier steps (of other streams) it waits for
};

/// Happens-before between the steps of a program, from stream order and
/// waits, as one vector clock per step. Not thread-safe (lastUnordered
/// uses a scratch vector).
class StepOrder {
public:
  StepOrder(const std::vector<Step> &steps, int numStreams)
      : numStreams_(numStreams), ordinal_(steps.size()),
        clock_(steps.size() * numStreams, 0), byStream_(numStreams) {
    std::vector<int> lastOnStream(numStreams, -1);
    for (size_t j = 0; j < steps.size(); ++j) {
      int s = steps[j].stream;
      ordinal_[j] = static_cast<int64_t>(byStream_[s].size());
      byStream_[s].push_back(static_cast<int>(j));
      int64_t *mine = &clock_[j * numStreams];
      auto absorb = [&](int before) {
        const int64_t *theirs = &clock_[before * numStreams];
        for (int u = 0; u < numStreams; ++u)
          mine[u] = std::max(mine[u], theirs[u]);
        int64_t done = ordinal_[before] + 1;
        int64_t &slot = mine[steps[before].stream];
        slot = std::max(slot, done);
      };
      if (lastOnStream[s] >= 0)
        absorb(lastOnStream[s]);
      for (int w : steps[j].waitsOn)
        if (w >= 0 && static_cast<size_t>(w) < j)
          absorb(w);
      lastOnStream[s] = static_cast<int>(j);
    }
    stream_.resize(steps.size());
    for (size_t j = 0; j < steps.size(); ++j)
      stream_[j] = steps[j].stream;
  }

  /// Step a has finished before step j starts.
  bool happensBefore(int a, int j) const {
    return a != j &&
           ordinal_[a] <
               clock_[static_cast<size_t>(j) * numStreams_ + stream_[a]];
  }

  /// The last step that does not happen after all of `accesses` (which are
  /// step indices); at least the last access.
  int lastUnordered(const IdList &accesses) const {
    std::vector<int64_t> &need = need_;
    need.assign(numStreams_, 0);
    int last = -1;
    for (int a : accesses) {
      need[stream_[a]] = std::max(need[stream_[a]], ordinal_[a] + 1);
      last = std::max(last, a);
    }
    for (int s = 0; s < numStreams_; ++s) {
      const std::vector<int> &steps = byStream_[s];
      // Steps of a stream that happen after every access form a suffix.
      size_t lo = 0, hi = steps.size();
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (after(steps[mid], need))
          hi = mid;
        else
          lo = mid + 1;
      }
      if (lo > 0)
        last = std::max(last, steps[lo - 1]);
    }
    return last;
  }

private:
  bool after(int j, const std::vector<int64_t> &need) const {
    const int64_t *clock = &clock_[static_cast<size_t>(j) * numStreams_];
    for (int u = 0; u < numStreams_; ++u)
      if (clock[u] < need[u])
        return false;
    return true;
  }

  int numStreams_;
  std::vector<int64_t> ordinal_; // position of a step on its stream
  std::vector<int64_t> clock_;   // per step: steps of each stream done before
  std::vector<std::vector<int>> byStream_;
  std::vector<int> stream_;
  mutable std::vector<int64_t> need_; // lastUnordered's scratch
};

struct LiveRange {
  int first = -1; // the step writing the buffer; -1: never written
  int last = -1;
};

/// Every buffer's live range and its accesses (writer first, then readers,
/// in program order).
struct Liveness {
  std::vector<LiveRange> ranges;
  std::vector<IdList> accesses;
};

inline Liveness computeLiveness(const std::vector<Step> &steps,
                                const StepOrder &order, int numBuffers) {
  Liveness live;
  live.ranges.resize(numBuffers);
  live.accesses.resize(numBuffers);
  for (size_t j = 0; j < steps.size(); ++j) {
    for (int b : steps[j].writes)
      if (b >= 0 && b < numBuffers) {
        if (live.ranges[b].first < 0)
          live.ranges[b].first = static_cast<int>(j);
        live.accesses[b].push_back(static_cast<int>(j));
      }
    for (int b : steps[j].reads)
      if (b >= 0 && b < numBuffers &&
          (live.accesses[b].empty() ||
           live.accesses[b].back() != static_cast<int>(j)))
        live.accesses[b].push_back(static_cast<int>(j));
  }
  for (int b = 0; b < numBuffers; ++b)
    if (!live.accesses[b].empty())
      live.ranges[b].last = order.lastUnordered(live.accesses[b]);
  return live;
}

/// True when `step` may write `output` into the memory of its input
/// `input`: every other access of `input` happens before the step.
inline bool inPlaceLegal(const Liveness &live, const StepOrder &order,
                         int input, int step) {
  for (int a : live.accesses[input])
    if (a != step && !order.happensBefore(a, step))
      return false;
  return true;
}

/// A view pair: `output`, written by a view kernel (viewKernel) from
/// `input`, is to share `input`'s memory.
struct ViewPair {
  int input;
  int output;
};

/// Buffers that share one memory because one is a view of another form a
/// view group. Every member then lives as long as the group: its accesses
/// become the accesses of all members (in program order) and its live
/// range the group's, so a buffer of the group is neither written over in
/// place (inPlaceLegal) nor given to another buffer while any member may
/// still be read. Returns each buffer's group: the earliest member (the
/// view chain's first source), or the buffer itself when it is alone.
/// Pairs must name buffers written in program order (input before output).
inline std::vector<int> viewAliases(Liveness &live, const StepOrder &order,
                                    const std::vector<ViewPair> &views) {
  int n = static_cast<int>(live.ranges.size());
  std::vector<int> group(n);
  for (int b = 0; b < n; ++b)
    group[b] = b;
  auto root = [&](int b) {
    while (group[b] != b)
      b = group[b] = group[group[b]];
    return b;
  };
  bool any = false;
  for (const ViewPair &v : views) {
    if (v.input < 0 || v.input >= n || v.output < 0 || v.output >= n ||
        live.ranges[v.input].first < 0 || live.ranges[v.output].first < 0)
      continue;
    int a = root(v.input), b = root(v.output);
    if (a == b)
      continue;
    // The earlier-written buffer stays the root.
    if (live.ranges[b].first < live.ranges[a].first ||
        (live.ranges[b].first == live.ranges[a].first && b < a))
      std::swap(a, b);
    group[b] = a;
    any = true;
  }
  for (int b = 0; b < n; ++b)
    group[b] = root(b);
  if (!any)
    return group;
  // Members of each group, the group's accesses and range.
  std::vector<std::vector<int>> members(n);
  for (int b = 0; b < n; ++b)
    if (group[b] != b)
      members[group[b]].push_back(b);
  std::vector<int> steps;
  for (int r = 0; r < n; ++r) {
    if (members[r].empty())
      continue;
    members[r].push_back(r);
    steps.clear();
    LiveRange range = live.ranges[r];
    for (int m : members[r]) {
      steps.insert(steps.end(), live.accesses[m].begin(),
                   live.accesses[m].end());
      range.first = std::min(range.first, live.ranges[m].first);
    }
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    IdList accesses;
    accesses.assign(steps.begin(), steps.end());
    range.last = order.lastUnordered(accesses);
    for (int m : members[r]) {
      live.ranges[m] = range;
      live.accesses[m] = accesses;
    }
  }
  return group;
}

/// What the planner is asked to place: for each buffer, its size in bytes
/// or -1 when it keeps its own storage (inputs and outputs of the program),
/// and the in-place pairs it may use (step, input, output).
struct InPlaceCandidate {
  int step;
  int input;
  int output;
};

struct ArenaPlan {
  std::vector<int64_t> offsets; // per buffer; -1: own storage
  int64_t arenaBytes = 0;
  int inPlace = 0; // outputs that took their input's memory
  int views = 0;   // views sharing their source's memory (viewAliases)
};

/// Greedy best-fit packing: view groups (viewGroup, viewAliases' result,
/// with `live` merged by it; empty: none) and in-place chains first become
/// one slot, then the slots are placed by decreasing size (then first
/// step), each in the smallest gap between the slots whose live ranges
/// overlap it.
inline ArenaPlan planArena(const std::vector<int64_t> &bytes,
                           const Liveness &live, const StepOrder &order,
                           const std::vector<InPlaceCandidate> &candidates,
                           const std::vector<int> &viewGroup = {}) {
  int n = static_cast<int>(bytes.size());
  ArenaPlan plan;
  plan.offsets.assign(n, -1);
  // Slot of each planned buffer (in-place chains share one).
  std::vector<int> slotOf(n, -1);
  struct Slot {
    int64_t size = 0;
    int first = 0, last = 0;
  };
  std::vector<Slot> slots;
  std::vector<bool> donated(n, false);
  std::vector<std::vector<InPlaceCandidate>> candidatesOf(n);
  for (const InPlaceCandidate &c : candidates)
    if (c.output >= 0 && c.output < n && c.input >= 0 && c.input < n)
      candidatesOf[c.output].push_back(c);
  bool views = viewGroup.size() == static_cast<size_t>(n);
  auto groupOf = [&](int b) { return views ? viewGroup[b] : b; };
  for (int b = 0; b < n; ++b) {
    if (bytes[b] < 0 || live.ranges[b].first < 0)
      continue;
    // A view shares its group's slot (the group's range is every member's).
    int g = groupOf(b);
    if (g != b && bytes[g] == bytes[b] && slotOf[g] >= 0) {
      slotOf[b] = slotOf[g];
      Slot &slot = slots[slotOf[b]];
      slot.last = std::max(slot.last, live.ranges[b].last);
      ++plan.views;
      continue;
    }
    for (const InPlaceCandidate &c : candidatesOf[b]) {
      if (bytes[c.input] != bytes[b] || donated[groupOf(c.input)] ||
          slotOf[c.input] < 0 || !inPlaceLegal(live, order, c.input, c.step))
        continue;
      donated[groupOf(c.input)] = true;
      slotOf[b] = slotOf[c.input];
      Slot &slot = slots[slotOf[b]];
      slot.last = std::max(slot.last, live.ranges[b].last);
      ++plan.inPlace;
      break;
    }
    if (slotOf[b] >= 0)
      continue;
    slotOf[b] = static_cast<int>(slots.size());
    slots.push_back(
        {alignUp(bytes[b]), live.ranges[b].first, live.ranges[b].last});
  }

  std::vector<int> orderBySize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i)
    orderBySize[i] = static_cast<int>(i);
  // Largest first, then earliest; the index breaks the remaining ties, so
  // the order is total and a plain sort is deterministic.
  std::sort(orderBySize.begin(), orderBySize.end(), [&](int a, int b) {
    if (slots[a].size != slots[b].size)
      return slots[a].size > slots[b].size;
    if (slots[a].first != slots[b].first)
      return slots[a].first < slots[b].first;
    return a < b;
  });
  std::vector<int64_t> slotOffset(slots.size(), -1);
  std::vector<int> placed;
  for (int s : orderBySize) {
    const Slot &slot = slots[s];
    if (slot.size == 0) {
      slotOffset[s] = 0;
      continue;
    }
    // Memory taken, during this slot's range, by slots placed before it.
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (int p : placed)
      if (slots[p].first <= slot.last && slot.first <= slots[p].last)
        taken.push_back({slotOffset[p], slotOffset[p] + slots[p].size});
    std::sort(taken.begin(), taken.end());
    int64_t best = -1, bestGap = 0, cursor = 0;
    for (const auto &[lo, hi] : taken) {
      if (lo > cursor) {
        int64_t gap = lo - cursor;
        if (gap >= slot.size && (best < 0 || gap < bestGap)) {
          best = cursor;
          bestGap = gap;
        }
      }
      cursor = std::max(cursor, hi);
    }
    slotOffset[s] = best >= 0 ? best : cursor;
    plan.arenaBytes = std::max(plan.arenaBytes, slotOffset[s] + slot.size);
    placed.push_back(s);
  }
  for (int b = 0; b < n; ++b)
    if (slotOf[b] >= 0)
      plan.offsets[b] = slotOffset[slotOf[b]];
  return plan;
}

} // namespace dtorch::bufplan

#endif // DTORCH_BUFFERPLAN_H
