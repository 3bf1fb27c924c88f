//===- AllToAllV.cpp - all_to_all with uneven counts ----------------------===//
#include "dtorch/runtime/AllToAllV.h"

#include <cstring>
#include <string>

namespace dtorch::rt {

namespace {

std::vector<int64_t> rowShape(const Tensor &t) {
  return std::vector<int64_t>(t.shape().begin() + 1, t.shape().end());
}

/// Rows [first, first + count) of `t` as a tensor sharing its storage.
Tensor rows(const Tensor &t, int64_t first, int64_t count, size_t rowBytes) {
  std::vector<int64_t> shape = t.shape();
  shape[0] = count;
  return Tensor::viewOf(t, static_cast<size_t>(first) * rowBytes, t.dtype(),
                        shape);
}

} // namespace

void all_to_all_v(Communicator &comm, const Tensor &x,
                  const std::vector<int64_t> &sendCounts, Tensor &out,
                  std::vector<int64_t> &recvCounts, const Group &group,
                  int64_t tag) {
  const size_t n = group.size();
  const size_t me = groupIndexOf(group, comm.rank());
  if (sendCounts.size() != n)
    throw RuntimeError("all_to_all_v: " + std::to_string(sendCounts.size()) +
                       " send counts for a group of " + std::to_string(n) +
                       " members " + groupToString(group));
  if (x.dim() < 1 || out.dim() < 1)
    throw RuntimeError("all_to_all_v: input and output need a row dim");
  if (x.dtype() != out.dtype() || rowShape(x) != rowShape(out))
    throw RuntimeError("all_to_all_v: the output's rows differ from the "
                       "input's (dtype or row shape)");
  int64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    if (sendCounts[j] < 0)
      throw RuntimeError("all_to_all_v: send count " +
                         std::to_string(sendCounts[j]) + " for member " +
                         std::to_string(j) + " is negative");
    total += sendCounts[j];
  }
  if (total > x.shape()[0])
    throw RuntimeError("all_to_all_v: the send counts add up to " +
                       std::to_string(total) + " rows but the input has " +
                       std::to_string(x.shape()[0]));
  const size_t rowBytes =
      x.shape()[0] ? x.nbytes() / static_cast<size_t>(x.shape()[0])
                   : (out.shape()[0] ? out.nbytes() / out.shape()[0] : 0);

  // Counts first (every send before any receive: sends do not wait), then
  // the rows of every non-empty piece.
  std::vector<int64_t> offsets(n, 0);
  for (size_t j = 1; j < n; ++j)
    offsets[j] = offsets[j - 1] + sendCounts[j - 1];
  for (size_t j = 0; j < n; ++j) {
    if (j == me)
      continue;
    Tensor count = Tensor::empty(DType::I64, {1});
    *count.data_as<int64_t>() = sendCounts[j];
    comm.send(count, group[j], tag);
  }
  for (size_t j = 0; j < n; ++j)
    if (j != me && sendCounts[j] > 0)
      comm.send(rows(x, offsets[j], sendCounts[j], rowBytes), group[j], tag);

  recvCounts.assign(n, 0);
  for (size_t j = 0; j < n; ++j) {
    if (j == me) {
      recvCounts[j] = sendCounts[j];
      continue;
    }
    Tensor count = Tensor::empty(DType::I64, {1});
    comm.recv(count, group[j], tag);
    recvCounts[j] = *count.data_as<int64_t>();
    if (recvCounts[j] < 0)
      throw RuntimeError("all_to_all_v: member " + std::to_string(j) +
                         " sent a negative count");
  }
  int64_t received = 0;
  for (int64_t c : recvCounts)
    received += c;
  const int64_t capacity = out.shape()[0];
  // Take every message even when they do not fit, so that the channels stay
  // in step for what follows; then report.
  int64_t at = 0;
  for (size_t j = 0; j < n; ++j) {
    int64_t c = recvCounts[j];
    if (c == 0)
      continue;
    if (at + c <= capacity) {
      Tensor dst = rows(out, at, c, rowBytes);
      if (j == me)
        std::memcpy(dst.data(), rows(x, offsets[j], c, rowBytes).data(),
                    static_cast<size_t>(c) * rowBytes);
      else
        comm.recv(dst, group[j], tag);
    } else if (j != me) {
      std::vector<int64_t> shape = x.shape();
      shape[0] = c;
      Tensor sink = Tensor::empty(x.dtype(), shape);
      comm.recv(sink, group[j], tag);
    }
    at += c;
  }
  if (received > capacity)
    throw RuntimeError("all_to_all_v: " + std::to_string(received) +
                       " rows arrived but the output holds " +
                       std::to_string(capacity));
  if (received < capacity)
    std::memset(static_cast<char *>(out.data()) +
                    static_cast<size_t>(received) * rowBytes,
                0, static_cast<size_t>(capacity - received) * rowBytes);
}

int64_t all_to_all_v_segments(Communicator &comm, const Tensor &x,
                              const std::vector<int64_t> &counts, Tensor &out,
                              std::vector<int64_t> &recvCounts,
                              const Group &group, int64_t segmentRows,
                              int64_t tag) {
  const size_t n = group.size();
  const size_t me = groupIndexOf(group, comm.rank());
  if (n == 0 || counts.empty() || counts.size() % n != 0)
    throw RuntimeError("all_to_all_v: " + std::to_string(counts.size()) +
                       " segment counts do not split over a group of " +
                       std::to_string(n) + " members " + groupToString(group));
  const size_t perMember = counts.size() / n;
  if (segmentRows < 0)
    throw RuntimeError("all_to_all_v: segment_rows " +
                       std::to_string(segmentRows) + " is negative");
  const int64_t rowsNeeded = static_cast<int64_t>(counts.size()) * segmentRows;
  if (x.dim() < 1 || x.shape() != out.shape() || x.dtype() != out.dtype() ||
      x.shape()[0] != rowsNeeded)
    throw RuntimeError("all_to_all_v: input and output must both have " +
                       std::to_string(rowsNeeded) + " rows (" +
                       std::to_string(counts.size()) + " segments of " +
                       std::to_string(segmentRows) +
                       ") and the same dtype and row shape");
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] < 0 || counts[i] > segmentRows)
      throw RuntimeError("all_to_all_v: count " + std::to_string(counts[i]) +
                         " of segment " + std::to_string(i) +
                         " is outside [0, " + std::to_string(segmentRows) +
                         "]");
  const size_t rowBytes =
      rowsNeeded ? x.nbytes() / static_cast<size_t>(rowsNeeded) : 0;
  auto segment = [&](const Tensor &t, size_t member, size_t s, int64_t c) {
    return rows(t, static_cast<int64_t>(member * perMember + s) * segmentRows,
                c, rowBytes);
  };

  // Counts first, one message per member, then each non-empty segment.
  int64_t sentBytes = 0;
  for (size_t j = 0; j < n; ++j) {
    if (j == me)
      continue;
    Tensor c = Tensor::empty(DType::I64, {static_cast<int64_t>(perMember)});
    std::memcpy(c.data(), counts.data() + j * perMember,
                perMember * sizeof(int64_t));
    comm.send(c, group[j], tag);
  }
  for (size_t j = 0; j < n; ++j) {
    if (j == me)
      continue;
    for (size_t s = 0; s < perMember; ++s) {
      int64_t c = counts[j * perMember + s];
      if (c == 0)
        continue;
      comm.send(segment(x, j, s, c), group[j], tag);
      sentBytes += c * static_cast<int64_t>(rowBytes);
    }
  }

  recvCounts.assign(counts.size(), 0);
  for (size_t j = 0; j < n; ++j) {
    if (j == me) {
      for (size_t s = 0; s < perMember; ++s)
        recvCounts[j * perMember + s] = counts[me * perMember + s];
      continue;
    }
    Tensor c = Tensor::empty(DType::I64, {static_cast<int64_t>(perMember)});
    comm.recv(c, group[j], tag);
    std::memcpy(recvCounts.data() + j * perMember, c.data(),
                perMember * sizeof(int64_t));
  }
  // Take every message even when a count is bad, so that the channels stay
  // in step for what follows; then report.
  std::string bad;
  for (size_t j = 0; j < n; ++j) {
    for (size_t s = 0; s < perMember; ++s) {
      int64_t c = recvCounts[j * perMember + s];
      bool fits = c >= 0 && c <= segmentRows;
      if (!fits && bad.empty())
        bad = "all_to_all_v: member " + std::to_string(j) + " sent " +
              std::to_string(c) + " rows for a segment of " +
              std::to_string(segmentRows);
      Tensor dst = segment(out, j, s, segmentRows);
      int64_t kept = fits ? c : 0;
      if (kept > 0) {
        if (j == me)
          std::memcpy(dst.data(), segment(x, me, s, kept).data(),
                      static_cast<size_t>(kept) * rowBytes);
        else {
          Tensor front = segment(out, j, s, kept);
          comm.recv(front, group[j], tag);
        }
      } else if (c > 0 && j != me) {
        std::vector<int64_t> shape = x.shape();
        shape[0] = c;
        Tensor sink = Tensor::empty(x.dtype(), shape);
        comm.recv(sink, group[j], tag);
      }
      std::memset(static_cast<char *>(dst.data()) +
                      static_cast<size_t>(kept) * rowBytes,
                  0, static_cast<size_t>(segmentRows - kept) * rowBytes);
    }
  }
  if (!bad.empty())
    throw RuntimeError(bad);
  return sentBytes;
}

} // namespace dtorch::rt
