// Session::redistribute with `regather`: the node carries the discardable
// `dtorch.regather` attribute, so the compiled segment holds two all_gathers
// of one shard (the plain one and the marked one) where two plain gathers
// merge into one, and the values are the same.
#include "SessionTestSupport.h"

#include <gtest/gtest.h>

#include <vector>

namespace dtorch::client {
namespace {

using test::doubles;
using test::values;

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size()))
    ++n;
  return n;
}

class SessionRegather : public test::InProcessSessionTest {
protected:
  /// gather(shard) + gather(shard), the second marked when `regather`;
  /// returns the sum's value and the "redistributed" IR.
  std::pair<std::vector<double>, std::string> twoGathers(bool regather) {
    Tensor shard = session->fromData(doubles({0, 1, 2, 3, 4, 5, 6, 7}), mesh,
                                     {Placement::shard(0)});
    session->synchronize();
    Tensor first = session->redistribute(shard, mesh, {Placement::replicate()});
    Tensor second =
        session->redistribute(shard, mesh, {Placement::replicate()}, regather);
    Tensor sum = session->binary("add", first, second);
    std::vector<double> got = values(session->fetch(sum));
    return {got, session->lastIr("redistributed")};
  }
};

TEST_F(SessionRegather, MarkedGatherIsNotMergedWithThePlainOne) {
  std::vector<double> want{0, 2, 4, 6, 8, 10, 12, 14};
  auto [plainValue, plainIr] = twoGathers(false);
  EXPECT_EQ(plainValue, want);
  EXPECT_EQ(count(plainIr, "dtensor.all_gather"), 1u) << plainIr;
  EXPECT_EQ(count(plainIr, "dtorch.regather"), 0u) << plainIr;
  auto [markedValue, markedIr] = twoGathers(true);
  EXPECT_EQ(markedValue, want);
  EXPECT_EQ(count(markedIr, "dtensor.all_gather"), 2u) << markedIr;
  EXPECT_EQ(count(markedIr, "dtorch.regather = 1 : i64"), 1u) << markedIr;
}

} // namespace
} // namespace dtorch::client
