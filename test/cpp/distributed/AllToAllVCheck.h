// The exchanges every backend's all_to_all_v test runs on 4 ranks
// (AllToAllVTest.cpp, HostSharedMemoryCollectivesTest.cpp).
#pragma once

#include "TestSupport.h"

#include "dtorch/runtime/AllToAllV.h"

#include <gtest/gtest.h>

namespace dtorch::rt::test {

// Rows rank `from` sends to member `to` of the world: 0, 1 or 2, so some
// pieces are empty and every rank receives a different number of rows.
inline int64_t rowsBetween(int64_t from, int64_t to) {
  return (from + 2 * to) % 3;
}

// Row k of the piece `from` sends to `to`: [from, to, k] + 0.5.
inline float rowValue(int64_t from, int64_t to, int64_t k, int64_t col) {
  return float(col == 0 ? from : col == 1 ? to : k) + 0.5f;
}

// Runs on rank `rank` of the world {0, 1, 2, 3} (every rank at once).
inline void checkAllToAllV(Communicator &comm, int rank) {
  const Group world = {0, 1, 2, 3};
  const int64_t n = 4, cols = 3, capacity = 8;
  std::vector<int64_t> sendCounts;
  std::vector<float> data;
  for (int64_t to = 0; to < n; ++to) {
    sendCounts.push_back(rowsBetween(rank, to));
    for (int64_t k = 0; k < sendCounts.back(); ++k)
      for (int64_t c = 0; c < cols; ++c)
        data.push_back(rowValue(rank, to, k, c));
  }
  // Two spare rows at the end of x: the counts need not fill it.
  for (int64_t c = 0; c < 2 * cols; ++c)
    data.push_back(-1.0f);
  const int64_t rows = static_cast<int64_t>(data.size()) / cols;
  Tensor x = makeTensor<float>(::dtorch::wire::F32, {rows, cols}, data);
  Tensor out = Tensor::empty(::dtorch::wire::F32, {capacity, cols});
  std::vector<int64_t> recvCounts;
  all_to_all_v(comm, x, sendCounts, out, recvCounts, world);

  std::vector<float> want;
  for (int64_t from = 0; from < n; ++from) {
    EXPECT_EQ(recvCounts[from], rowsBetween(from, rank))
        << "rank " << rank << " from " << from;
    for (int64_t k = 0; k < rowsBetween(from, rank); ++k)
      for (int64_t c = 0; c < cols; ++c)
        want.push_back(rowValue(from, rank, k, c));
  }
  want.resize(capacity * cols, 0.0f); // the rest is zero
  EXPECT_EQ(valuesOf<float>(out), want) << "rank " << rank;

  // A subgroup: ranks 1 and 3 swap everything they have; the others idle.
  if (rank == 1 || rank == 3) {
    const Group pair = {1, 3};
    Tensor y = makeTensor<float>(::dtorch::wire::F32, {3, 1},
                                 {float(rank), float(rank) + 0.25f, 7.0f});
    std::vector<int64_t> counts =
        rank == 1 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{0, 3};
    Tensor got = Tensor::empty(::dtorch::wire::F32, {5, 1});
    std::vector<int64_t> from;
    all_to_all_v(comm, y, counts, got, from, pair);
    if (rank == 1) {
      EXPECT_EQ(from, (std::vector<int64_t>{1, 0}));
      EXPECT_EQ(valuesOf<float>(got), (std::vector<float>{1, 0, 0, 0, 0}));
    } else {
      EXPECT_EQ(from, (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(valuesOf<float>(got),
                (std::vector<float>{1.25f, 7, 3, 3.25f, 7}));
    }
  }

  // An output too small for what arrives: reported with the numbers, and
  // every message is still taken, so the next exchange is in step.
  Tensor small = Tensor::empty(::dtorch::wire::F32, {1, cols});
  std::vector<int64_t> ignored;
  bool tooMany = false;
  int64_t arriving = 0;
  for (int64_t from = 0; from < n; ++from)
    arriving += rowsBetween(from, rank);
  try {
    all_to_all_v(comm, x, sendCounts, small, ignored, world);
  } catch (const RuntimeError &error) {
    tooMany = true;
    EXPECT_NE(std::string(error.what())
                  .find(std::to_string(arriving) +
                        " rows arrived but the output holds 1"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(tooMany, arriving > 1) << "rank " << rank;
  all_to_all_v(comm, x, sendCounts, out, recvCounts, world);
  EXPECT_EQ(valuesOf<float>(out), want) << "rank " << rank << " after";

  // Bad counts fail before anything is sent.
  expectRuntimeError(
      [&] { all_to_all_v(comm, x, {1, 1, 1}, out, recvCounts, world); },
      {"3 send counts for a group of 4 members"});
  expectRuntimeError(
      [&] { all_to_all_v(comm, x, {0, -1, 0, 0}, out, recvCounts, world); },
      {"send count -1 for member 1 is negative"});
  expectRuntimeError(
      [&] { all_to_all_v(comm, x, {9, 0, 0, 0}, out, recvCounts, world); },
      {"add up to 9 rows but the input has"});
}

// The segmented form on rank `rank` of the world {0, 1, 2, 3}: 2 segments
// of 3 rows per member; segment (to, s) of rank `from` fills
// (from + to + s) % 4 of its rows (0 to 3: empty and full segments), row k
// holding [from, to * 2 + s, k] + 0.5 and the unfilled rows -1 (never
// sent). The bytes returned are the rows sent to the other members.
inline int64_t segmentFill(int64_t from, int64_t to, int64_t s) {
  return (from + to + s) % 4;
}

inline void checkAllToAllVSegments(Communicator &comm, int rank) {
  const Group world = {0, 1, 2, 3};
  const int64_t n = 4, per = 2, slot = 3, cols = 3;
  std::vector<int64_t> counts;
  std::vector<float> data;
  int64_t sentRows = 0;
  for (int64_t to = 0; to < n; ++to)
    for (int64_t s = 0; s < per; ++s) {
      counts.push_back(segmentFill(rank, to, s));
      if (to != rank)
        sentRows += counts.back();
      for (int64_t k = 0; k < slot; ++k)
        for (int64_t c = 0; c < cols; ++c)
          data.push_back(k < counts.back() ? rowValue(rank, to * per + s, k, c)
                                           : -1.0f);
    }
  const int64_t rows = n * per * slot;
  Tensor x = makeTensor<float>(::dtorch::wire::F32, {rows, cols}, data);
  Tensor out = Tensor::empty(::dtorch::wire::F32, {rows, cols});
  std::vector<int64_t> recvCounts;
  int64_t sent =
      all_to_all_v_segments(comm, x, counts, out, recvCounts, world, slot);
  EXPECT_EQ(sent, sentRows * cols * 4) << "rank " << rank;
  std::vector<float> want;
  for (int64_t from = 0; from < n; ++from)
    for (int64_t s = 0; s < per; ++s) {
      int64_t c = segmentFill(from, rank, s);
      EXPECT_EQ(recvCounts[from * per + s], c) << "rank " << rank;
      for (int64_t k = 0; k < slot; ++k)
        for (int64_t col = 0; col < cols; ++col)
          want.push_back(k < c ? rowValue(from, rank * per + s, k, col) : 0.0f);
    }
  EXPECT_EQ(valuesOf<float>(out), want) << "rank " << rank;

  // A count over the slot fails before anything is sent, on every rank.
  std::vector<int64_t> over = counts;
  over[0] = slot + 1;
  expectRuntimeError(
      [&] {
        all_to_all_v_segments(comm, x, over, out, recvCounts, world, slot);
      },
      {"count 4 of segment 0 is outside [0, 3]"});
  expectRuntimeError(
      [&] {
        all_to_all_v_segments(comm, x, counts, out, recvCounts, world, 2);
      },
      {"must both have 16 rows (8 segments of 2)"});
}

} // namespace dtorch::rt::test
