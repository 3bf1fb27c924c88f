// The .npy reader (lib/Client/Npy.cpp): what numpy writes reads back, and
// malformed files, including the inputs fuzz_npy found, are refused with a
// std::runtime_error before anything sized by the header is allocated.
#include "Npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace dtorch::client {
namespace {

// A version-1 .npy file with `header` (padded as numpy pads it) and `data`.
std::string npyBytes(const std::string &header, const std::string &data) {
  std::string padded = header;
  size_t total = 10 + padded.size() + 1;
  padded.append((64 - total % 64) % 64, ' ');
  padded += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(padded.size() & 0xff);
  bytes += static_cast<char>(padded.size() >> 8);
  return bytes + padded + data;
}

std::string refusal(const std::string &bytes) {
  try {
    parseNpy(bytes, "t.npy");
  } catch (const std::runtime_error &e) {
    return e.what();
  }
  return "";
}

TEST(NpyTest, WrittenFileReadsBack) {
  rt::Tensor t = rt::Tensor::empty(wire::F32, {2, 3});
  for (int i = 0; i < 6; ++i)
    t.data_as<float>()[i] = 0.5f * i;
  std::string path = (std::filesystem::temp_directory_path() /
                      ("npy_test_" + std::to_string(::getpid()) + ".npy"))
                         .string();
  writeNpy(path, t);
  rt::Tensor back = readNpy(path);
  std::remove(path.c_str());
  ASSERT_EQ(back.dtype(), wire::F32);
  ASSERT_EQ(back.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0);
}

TEST(NpyTest, HeaderKeysInAnyOrderAndScalars) {
  std::string data(8, '\0');
  data[0] = 7;
  rt::Tensor t = parseNpy(
      npyBytes("{'shape': (), 'fortran_order': False, 'descr': '<i8', }", data),
      "t.npy");
  EXPECT_EQ(t.shape().size(), 0u);
  EXPECT_EQ(t.data_as<int64_t>()[0], 7);
}

TEST(NpyTest, RefusesMalformedHeaders) {
  std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  EXPECT_EQ(refusal(npyBytes(ok, std::string(8, '\0'))), "");
  EXPECT_NE(refusal("\x93NUMPY"), "");
  EXPECT_NE(refusal(npyBytes(ok, std::string(7, '\0'))).find("shorter"),
            std::string::npos);
  EXPECT_NE(refusal(npyBytes("{'descr': '<f4', 'shape': (2,), }", "")), "");
  EXPECT_NE(refusal(npyBytes("{'descr': '<f4', 'descr': '<f4', "
                             "'fortran_order': False, 'shape': (2,), }",
                             std::string(8, '\0'))),
            "");
  EXPECT_NE(refusal(npyBytes("{'descr': '<f4', 'fortran_order': False, "
                             "'shape': (-2,), }",
                             "")),
            "");
  EXPECT_NE(refusal(npyBytes("{'descr': '<f4', 'fortran_order': True, "
                             "'shape': (2,), }",
                             std::string(8, '\0')))
                .find("Fortran"),
            std::string::npos);
  std::string badVersion = npyBytes(ok, std::string(8, '\0'));
  badVersion[6] = 9;
  EXPECT_NE(refusal(badVersion).find("version"), std::string::npos);
}

// fuzz_npy: a shape whose element count is huge (or overflows int64) in a
// file of a few bytes must be refused before the tensor is allocated.
TEST(NpyTest, HugeShapeIsRefusedWithoutAllocating) {
  EXPECT_NE(refusal(npyBytes("{'descr': '<f8', 'fortran_order': False, "
                             "'shape': (1000000000, 1000000000), }",
                             "abc"))
                .find("shorter"),
            std::string::npos);
  EXPECT_NE(refusal(npyBytes("{'descr': '<f8', 'fortran_order': False, "
                             "'shape': (4294967296, 4294967296, 16), }",
                             "")),
            "");
  EXPECT_NE(refusal(npyBytes("{'descr': '<f8', 'fortran_order': False, "
                             "'shape': (99999999999999999999,), }",
                             "")),
            "");
}

// The regex-based reader it replaces recursed once per header character:
// a long header overflowed the stack.
TEST(NpyTest, LongHeaderIsParsedWithoutRecursion) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::string(60000, ' ') + "1,), }";
  std::string bytes("\x93NUMPY\x02\x00", 8);
  uint32_t length = static_cast<uint32_t>(header.size());
  bytes.append(reinterpret_cast<const char *>(&length), 4);
  bytes += header + std::string(4, '\0');
  rt::Tensor t = parseNpy(bytes, "t.npy");
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{1}));
  std::string tooLong(bytes);
  length = static_cast<uint32_t>(kMaxNpyHeaderBytes + 1);
  std::memcpy(tooLong.data() + 8, &length, 4);
  EXPECT_NE(refusal(tooLong), "");
}

} // namespace
} // namespace dtorch::client
