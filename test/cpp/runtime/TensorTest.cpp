#include "TestSupport.h"

#include "dtorch/runtime/Allocator.h"
#include "dtorch/runtime/Shape.h"

#include <thread>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::BOOL;
using ::dtorch::wire::F32;
using ::dtorch::wire::F64;
using ::dtorch::wire::I64;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtypeSize(F32), 4u);
  EXPECT_EQ(dtypeSize(F64), 8u);
  EXPECT_EQ(dtypeSize(I64), 8u);
  EXPECT_EQ(dtypeSize(BOOL), 1u);
  EXPECT_STREQ(dtypeName(F32), "float32");
  EXPECT_STREQ(dtypeName(I64), "int64");
  EXPECT_STREQ(dtypeName(static_cast<DType>(99)), "invalid");
  EXPECT_THROW(dtypeSize(::dtorch::wire::DTYPE_INVALID), RuntimeError);
}

TEST(Tensor, EmptyHasShapeAndStorage) {
  Tensor t = Tensor::empty(F64, {2, 3});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), F64);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_NE(t.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(t.describe(), "float64[2, 3]");
}

TEST(Tensor, ScalarAndZeroSize) {
  Tensor scalar = Tensor::empty(F32, {});
  EXPECT_EQ(scalar.numel(), 1);
  Tensor none = Tensor::empty(F32, {4, 0});
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.nbytes(), 0u);
  EXPECT_NE(none.data(), nullptr);
}

TEST(Tensor, RejectsBadShapesAndDtypes) {
  EXPECT_THROW(Tensor::empty(F32, {2, -1}), RuntimeError);
  EXPECT_THROW(Tensor::empty(::dtorch::wire::DTYPE_INVALID, {2}), RuntimeError);
  EXPECT_THROW(Tensor::empty(F32, {int64_t(1) << 40, int64_t(1) << 40}),
               RuntimeError);
  Tensor t = Tensor::empty(F32, {2});
  EXPECT_THROW(t.data_as<double>(), RuntimeError);
  Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  EXPECT_EQ(undefined.data(), nullptr);
}

TEST(Tensor, CopiesShareStorageCloneDoesNot) {
  Tensor a = makeTensor<int64_t>(I64, {3}, {1, 2, 3});
  Tensor b = a;
  b.data_as<int64_t>()[0] = 7;
  EXPECT_EQ(a.data_as<int64_t>()[0], 7);
  Tensor c = a.clone();
  c.data_as<int64_t>()[1] = 9;
  EXPECT_EQ(a.data_as<int64_t>()[1], 2);
}

TEST(CachingAllocator, ReusesFreedBlocks) {
  auto &allocator = CachingAllocator::instance();
  void *first;
  {
    Tensor t = Tensor::empty(F32, {1000, 3}); // an unusual size: its own bucket
    first = t.data();
  }
  AllocatorStats before = allocator.stats();
  Tensor again = Tensor::empty(F32, {3000});
  AllocatorStats after = allocator.stats();
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(after.cacheHits, before.cacheHits + 1);
  EXPECT_GE(after.bytesInUse, again.nbytes());
}

TEST(CachingAllocator, BucketsBoundWaste) {
  EXPECT_EQ(CachingAllocator::bucketSize(0), 64u);
  EXPECT_EQ(CachingAllocator::bucketSize(65), 128u);
  EXPECT_EQ(CachingAllocator::bucketSize(1 << 20), size_t(1) << 20);
  size_t big = (size_t(1) << 24) + 1;
  size_t bucket = CachingAllocator::bucketSize(big);
  EXPECT_GE(bucket, big);
  EXPECT_LE(bucket, big + big / 4);
}

TEST(CachingAllocator, ThreadSafe) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 2000; ++i) {
        Tensor x = Tensor::empty(I64, {(i % 7) * 10 + t});
        if (x.numel())
          x.data_as<int64_t>()[0] = i;
      }
    });
  for (auto &thread : threads)
    thread.join();
  CachingAllocator::instance().releaseCached();
  EXPECT_EQ(CachingAllocator::instance().stats().bytesCached, 0u);
}

TEST(Shape, CopyBoxMovesABox) {
  // 3x4 source, copy the 2x2 box at (1, 1) into a 2x3 destination at (0, 1).
  std::vector<int64_t> src(12);
  for (int i = 0; i < 12; ++i)
    src[i] = i;
  std::vector<int64_t> dst(6, -1);
  copyBox(src.data(), {3, 4}, {1, 1}, dst.data(), {2, 3}, {0, 1}, {2, 2},
          sizeof(int64_t));
  EXPECT_EQ(dst, (std::vector<int64_t>{-1, 5, 6, -1, 9, 10}));
  EXPECT_THROW(copyBox(src.data(), {3, 4}, {2, 1}, dst.data(), {2, 3}, {0, 1},
                       {2, 2}, 8),
               RuntimeError);
}

} // namespace
} // namespace dtorch::rt::test
