// Checkpoints in the runtime: the metadata reader refuses every malformed
// file with a CheckpointError, the box arithmetic maps a new shard onto the
// saved chunks, a rank writes its pieces and reads any region of them back
// (checksums checked), and a checkpoint folder is replaced atomically.
#include "dtorch/runtime/Checkpoint.h"
#include "dtorch/runtime/RankState.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dtorch::rt {
namespace {

namespace wire = ::dtorch::wire;

wire::CheckpointChunk chunk(std::vector<int64_t> offsets,
                            std::vector<int64_t> sizes, std::string file,
                            uint64_t byteOffset, uint64_t elementSize) {
  wire::CheckpointChunk c;
  int64_t volume = 1;
  for (size_t d = 0; d < offsets.size(); ++d) {
    c.add_offsets(offsets[d]);
    c.add_sizes(sizes[d]);
    volume *= sizes[d];
  }
  c.set_file(std::move(file));
  c.set_byte_offset(byteOffset);
  c.set_byte_size(static_cast<uint64_t>(volume) * elementSize);
  return c;
}

// A 7x5 float32 tensor saved as two row blocks (4 and 3 rows).
wire::CheckpointMetadata validMetadata() {
  wire::CheckpointMetadata m;
  m.set_format_version(kCheckpointFormatVersion);
  wire::CheckpointTensor *t = m.add_tensors();
  t->set_key("model.w");
  t->set_dtype(wire::F32);
  t->add_shape(7);
  t->add_shape(5);
  *t->add_chunks() = chunk({0, 0}, {4, 5}, "shards-rank-00000.bin", 0, 4);
  *t->add_chunks() = chunk({4, 0}, {3, 5}, "shards-rank-00001.bin", 0, 4);
  m.set_objects_json("{}");
  return m;
}

std::string errorOf(const std::string &text) {
  try {
    readCheckpointMetadata(text);
  } catch (const CheckpointError &e) {
    return e.what();
  }
  return "";
}

std::string errorOf(const wire::CheckpointMetadata &m) {
  std::string text;
  // Bypass the writer's validation: print the message as it is.
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  EXPECT_TRUE(
      google::protobuf::util::MessageToJsonString(m, &text, options).ok());
  return errorOf(text);
}

TEST(CheckpointMetadata, RoundTripsThroughTheJsonFile) {
  wire::CheckpointMetadata m = validMetadata();
  std::string text = writeCheckpointMetadata(m);
  EXPECT_NE(text.find("\"format_version\":1"), std::string::npos) << text;
  wire::CheckpointMetadata back = readCheckpointMetadata(text);
  EXPECT_EQ(back.SerializeAsString(), m.SerializeAsString());
}

TEST(CheckpointMetadata, RefusesMalformedText) {
  EXPECT_NE(errorOf(""), "");
  EXPECT_NE(errorOf("{"), "");
  EXPECT_NE(errorOf("[]"), "");
  EXPECT_NE(errorOf("{\"format_version\": 1, \"surprise\": 2}"), "");
  EXPECT_NE(errorOf("{\"format_version\": \"x\"}"), "");
  EXPECT_NE(errorOf("{\"format_version\": 2}").find("version 2"),
            std::string::npos);
}

TEST(CheckpointMetadata, RefusesInconsistentTensors) {
  auto mutate = [](auto change) {
    wire::CheckpointMetadata m = validMetadata();
    change(*m.mutable_tensors(0));
    return errorOf(m);
  };
  EXPECT_EQ(errorOf(validMetadata()), "");
  EXPECT_NE(mutate([](auto &t) {
              t.set_dtype(wire::DTYPE_INVALID);
            }).find("invalid dtype"),
            std::string::npos);
  EXPECT_NE(mutate([](auto &t) { t.set_shape(0, -7); }).find("negative"),
            std::string::npos);
  EXPECT_NE(mutate([](auto &t) {
              t.set_shape(0, int64_t(1) << 40);
              t.set_shape(1, int64_t(1) << 40);
            }).find("overflow"),
            std::string::npos);
  // A gap: the second chunk is gone.
  EXPECT_NE(mutate([](auto &t) {
              t.mutable_chunks()->RemoveLast();
            }).find("cover 20 of its 35"),
            std::string::npos);
  // Overlap: the second chunk starts on row 3.
  EXPECT_NE(mutate([](auto &t) {
              t.mutable_chunks(1)->set_offsets(0, 3);
            }).find("overlaps"),
            std::string::npos);
  // Outside the tensor.
  EXPECT_NE(mutate([](auto &t) {
              t.mutable_chunks(1)->set_offsets(0, 5);
            }).find("outside"),
            std::string::npos);
  EXPECT_NE(mutate([](auto &t) {
              t.mutable_chunks(0)->set_byte_size(7);
            }).find("byte size"),
            std::string::npos);
  EXPECT_NE(mutate([](auto &t) {
              t.mutable_chunks(0)->set_byte_offset(~uint64_t(0) - 3);
            }).find("overflows"),
            std::string::npos);
  for (const char *bad : {"../x", "a/b", "", ".", ".."})
    EXPECT_NE(mutate([&](auto &t) {
                t.mutable_chunks(0)->set_file(bad);
              }).find("invalid file name"),
              std::string::npos)
        << bad;
  EXPECT_NE(
      mutate([](auto &t) { t.mutable_chunks(0)->add_offsets(0); }).find("rank"),
      std::string::npos);
  wire::CheckpointMetadata twice = validMetadata();
  *twice.add_tensors() = twice.tensors(0);
  EXPECT_NE(errorOf(twice).find("listed twice"), std::string::npos);
}

TEST(CheckpointMetadata, RefusesOversizedInputBeforeParsing) {
  CheckpointLimits limits;
  limits.maxMetadataBytes = 16;
  EXPECT_THROW(readCheckpointMetadata(std::string(17, ' '), limits),
               CheckpointError);
}

TEST(CheckpointBoxes, IntersectionAndCoverage) {
  Box a{{0, 0}, {4, 5}}, b{{2, 3}, {4, 4}};
  Intersection i = intersectBoxes(a, b);
  ASSERT_TRUE(i.found);
  EXPECT_EQ(i.box.offsets, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(i.box.sizes, (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE(intersectBoxes(a, Box{{4, 0}, {3, 5}}).found);

  // A column block of a 7x5 tensor read from two row blocks.
  std::vector<Box> chunks{{{0, 0}, {4, 5}}, {{4, 0}, {3, 5}}};
  std::vector<ChunkRead> reads = planChunkReads(Box{{0, 3}, {7, 2}}, chunks);
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].source, 0u);
  EXPECT_EQ(reads[0].box.sizes, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(reads[1].box.offsets, (std::vector<int64_t>{4, 3}));
  // A gap in the saved chunks is an error, not zeros.
  EXPECT_THROW(planChunkReads(Box{{0, 0}, {7, 5}}, {chunks[0]}),
               CheckpointError);
  EXPECT_TRUE(planChunkReads(Box{{0, 0}, {0, 5}}, {}).empty());
}

class CheckpointIOTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/dtorch-ckpt-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    folder_ = pattern;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + folder_ + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }
  std::string folder_;
};

Tensor iotaTensor(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::empty(wire::F32, shape);
  float *p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = start + static_cast<float>(i);
  return t;
}

TEST_F(CheckpointIOTest, WritesPiecesAndReadsAnyRegionBack) {
  // The 7x5 tensor 0..34 as rows 0-3 and 4-6 on two "ranks".
  RankState rank0(0, nullptr), rank1(1, nullptr);
  rank0.put(10, iotaTensor({4, 5}, 0));
  rank0.put(11, iotaTensor({2}, 100));
  rank1.put(10, iotaTensor({3, 5}, 20));
  wire::CheckpointRequest write;
  write.set_action(wire::CheckpointRequest::WRITE);
  write.set_directory(folder_);
  write.set_rank(0);
  write.set_file("shards-rank-00000.bin");
  write.add_write_handles(10);
  write.add_write_handles(11);
  wire::CheckpointReply r0 = serveCheckpointRequest(rank0, write);
  ASSERT_TRUE(r0.ok()) << r0.error();
  ASSERT_EQ(r0.written_size(), 2);
  EXPECT_EQ(r0.written(1).byte_offset(), 80u);
  write.set_rank(1);
  write.set_file("shards-rank-00001.bin");
  write.clear_write_handles();
  write.add_write_handles(10);
  wire::CheckpointReply r1 = serveCheckpointRequest(rank1, write);
  ASSERT_TRUE(r1.ok()) << r1.error();

  wire::CheckpointChunk top =
      chunk({0, 0}, {4, 5}, "shards-rank-00000.bin", 0, 4);
  top.set_checksum(r0.written(0).checksum());
  wire::CheckpointChunk bottom =
      chunk({4, 0}, {3, 5}, "shards-rank-00001.bin", 0, 4);
  bottom.set_checksum(r1.written(0).checksum());

  // Columns 3-4 of every row: parts of both chunks.
  RankState reader(2, nullptr);
  wire::CheckpointRequest read;
  read.set_action(wire::CheckpointRequest::READ);
  read.set_directory(folder_);
  read.set_rank(2);
  wire::CheckpointRead *item = read.add_reads();
  item->set_handle(7);
  item->set_dtype(wire::F32);
  item->add_offsets(0);
  item->add_offsets(3);
  item->add_sizes(7);
  item->add_sizes(2);
  *item->add_sources() = top;
  *item->add_sources() = bottom;
  // And all of it (whole chunks: checksums checked).
  wire::CheckpointRead *whole = read.add_reads();
  whole->set_handle(8);
  whole->set_dtype(wire::F32);
  whole->add_offsets(0);
  whole->add_offsets(0);
  whole->add_sizes(7);
  whole->add_sizes(5);
  *whole->add_sources() = top;
  *whole->add_sources() = bottom;
  wire::CheckpointReply answer = serveCheckpointRequest(reader, read);
  ASSERT_TRUE(answer.ok()) << answer.error();
  const Tensor &cols = reader.fetch(7);
  ASSERT_EQ(cols.shape(), (std::vector<int64_t>{7, 2}));
  for (int64_t row = 0; row < 7; ++row)
    for (int64_t col = 0; col < 2; ++col)
      EXPECT_EQ(cols.data_as<float>()[row * 2 + col], row * 5 + col + 3);
  const Tensor &all = reader.fetch(8);
  for (int64_t i = 0; i < 35; ++i)
    EXPECT_EQ(all.data_as<float>()[i], i);

  // A flipped byte in the data: the whole-chunk read names the file.
  {
    std::fstream f(folder_ + "/shards-rank-00001.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5);
    f.put('\x7f');
  }
  read.mutable_reads()->DeleteSubrange(0, 1);
  wire::CheckpointReply corrupt = serveCheckpointRequest(reader, read);
  EXPECT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.error().find("shards-rank-00001.bin is corrupt"),
            std::string::npos)
      << corrupt.error();
  EXPECT_TRUE(reader.isPoisoned(8));

  // A truncated file is named too.
  ASSERT_EQ(::truncate((folder_ + "/shards-rank-00000.bin").c_str(), 10), 0);
  wire::CheckpointReply truncated = serveCheckpointRequest(reader, read);
  EXPECT_FALSE(truncated.ok());
  EXPECT_NE(truncated.error().find("truncated"), std::string::npos)
      << truncated.error();
}

TEST_F(CheckpointIOTest, RefusesPathsOutsideTheFolder) {
  RankState rank(0, nullptr);
  rank.put(1, iotaTensor({2}, 0));
  wire::CheckpointRequest write;
  write.set_action(wire::CheckpointRequest::WRITE);
  write.set_directory(folder_);
  write.set_file("../escape.bin");
  write.add_write_handles(1);
  wire::CheckpointReply reply = serveCheckpointRequest(rank, write);
  EXPECT_FALSE(reply.ok());
  EXPECT_NE(reply.error().find("invalid checkpoint file name"),
            std::string::npos);
  write.set_file("ok.bin");
  write.set_directory("relative/folder");
  EXPECT_FALSE(serveCheckpointRequest(rank, write).ok());
  // An unknown handle fails the save before any file is made.
  write.set_directory(folder_);
  write.add_write_handles(99);
  EXPECT_FALSE(serveCheckpointRequest(rank, write).ok());
  EXPECT_NE(::access((folder_ + "/ok.bin").c_str(), F_OK), 0);
}

TEST_F(CheckpointIOTest, CommitReplacesTheFolderAtomically) {
  std::string target = folder_ + "/ckpt", staging = folder_ + "/.ckpt.tmp";
  auto make = [](const std::string &dir, const std::string &content) {
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    writeFileSynced(dir + "/metadata.json", content);
  };
  auto read = [](const std::string &path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  make(staging, "first");
  EXPECT_EQ(commitCheckpointFolder(staging, target), "");
  EXPECT_EQ(read(target + "/metadata.json"), "first");
  make(staging, "second");
  std::string old = commitCheckpointFolder(staging, target);
  ASSERT_FALSE(old.empty());
  EXPECT_EQ(read(target + "/metadata.json"), "second");
  EXPECT_EQ(read(old + "/metadata.json"), "first");
}

} // namespace
} // namespace dtorch::rt
