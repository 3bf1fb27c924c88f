// Sizes and counts in a message are bounded before anything is allocated:
// the regressions of what fuzz_wire found (test/fuzz/corpus/fuzz_wire keeps
// the inputs; FuzzCorpus.fuzz_wire replays them).
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/Transport.h"

#include <gtest/gtest.h>

#include <string>

namespace dtorch::rt {
namespace {

std::string refusal(const ::dtorch::wire::TensorData &data) {
  try {
    tensorFromWire(data);
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

// numel * 8 wraps around to 0 for 2^61 elements: the empty payload used to
// pass the byte count check and the shape's full size was allocated.
TEST(WireBoundsTest, TensorWhoseByteCountWrapsIsRefused) {
  ::dtorch::wire::TensorData data;
  data.set_dtype(::dtorch::wire::F64);
  data.add_shape(int64_t(1) << 61);
  EXPECT_NE(refusal(data).find("exceeds the limit"), std::string::npos);
  data.clear_shape();
  data.add_shape(int64_t(1) << 31);
  data.add_shape(int64_t(1) << 31); // 2^62 elements * 4 bytes wraps too
  data.set_dtype(::dtorch::wire::F32);
  EXPECT_NE(refusal(data), "");
  data.clear_shape();
  data.add_shape(2);
  data.set_data(std::string(16, '\0'));
  data.set_dtype(::dtorch::wire::F64);
  EXPECT_EQ(refusal(data), "");
}

TEST(WireBoundsTest, UploadMeshSizeIsBoundedBeforeListingRanks) {
  EXPECT_EQ(consecutiveMeshRanks({2, 3}, 4),
            (std::vector<int64_t>{4, 5, 6, 7, 8, 9}));
  EXPECT_THROW(consecutiveMeshRanks({int64_t(1) << 40, 1 << 30}, 0),
               RuntimeError);
  EXPECT_THROW(consecutiveMeshRanks({kMaxMeshPositions + 1}, 0), RuntimeError);
  EXPECT_THROW(consecutiveMeshRanks({2, 0}, 0), RuntimeError);
  EXPECT_THROW(consecutiveMeshRanks({4}, -1), RuntimeError);
  EXPECT_THROW(consecutiveMeshRanks({4}, INT64_MAX - 2), RuntimeError);
  // MeshRanks counts positions the same way (no signed overflow).
  EXPECT_THROW(MeshRanks({int64_t(1) << 40, int64_t(1) << 40}, {0}),
               RuntimeError);
}

} // namespace
} // namespace dtorch::rt
