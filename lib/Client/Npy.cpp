//===- Npy.cpp - reading and writing .npy files --------------------------===//
#include "Npy.h"

#include "dtorch/runtime/Shape.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace dtorch::client {
namespace {

const char *descrOf(wire::DType dt) {
  switch (dt) {
  case wire::F32:
    return "<f4";
  case wire::F64:
    return "<f8";
  case wire::I32:
    return "<i4";
  case wire::I64:
    return "<i8";
  case wire::BOOL:
    return "|b1";
  default:
    throw std::runtime_error("cannot write dtype to .npy");
  }
}

wire::DType dtypeOfDescr(const std::string &d, const std::string &path) {
  if (d == "<f4")
    return wire::F32;
  if (d == "<f8")
    return wire::F64;
  if (d == "<i4")
    return wire::I32;
  if (d == "<i8")
    return wire::I64;
  if (d == "|b1")
    return wire::BOOL;
  throw std::runtime_error(path + ": unsupported .npy dtype '" + d + "'");
}

// The header dictionary numpy writes: {'descr': '<f4', 'fortran_order':
// False, 'shape': (2, 3), } with the keys in any order. A hand-written
// scanner (no regex: std::regex recurses per character and overflows the
// stack on long headers); every key must appear exactly once, nothing else.
class NpyHeaderParser {
public:
  NpyHeaderParser(std::string_view text, const std::string &name)
      : text_(text), name_(name) {}

  void parse(std::string &descr, bool &fortranOrder,
             std::vector<int64_t> &shape) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    expect('{');
    while (true) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key = parseString();
      expect(':');
      if (key == "descr" && !haveDescr) {
        descr = parseString();
        haveDescr = true;
      } else if (key == "fortran_order" && !haveOrder) {
        fortranOrder = parseBool();
        haveOrder = true;
      } else if (key == "shape" && !haveShape) {
        shape = parseShape();
        haveShape = true;
      } else {
        fail("unexpected or repeated key '" + key + "'");
      }
      skipSpace();
      if (consume('}'))
        break;
      expect(',');
    }
    if (!haveDescr)
      fail("no descr");
    if (!haveOrder)
      fail("no fortran_order");
    if (!haveShape)
      fail("no shape");
    skipSpace(); // numpy pads the header with spaces and a newline
    if (pos_ != text_.size())
      fail("trailing characters after the dictionary");
  }

private:
  [[noreturn]] void fail(const std::string &what) const {
    throw std::runtime_error(name_ + ": bad .npy header: " + what);
  }
  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    skipSpace();
    if (!consume(c))
      fail(std::string("expected '") + c + "' at offset " +
           std::to_string(pos_));
  }
  std::string parseString() {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      fail("expected a string at offset " + std::to_string(pos_));
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos)
      fail("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  bool parseBool() {
    skipSpace();
    for (auto [word, value] :
         {std::pair<std::string_view, bool>{"True", true}, {"False", false}})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    fail("fortran_order is neither True nor False");
  }
  std::vector<int64_t> parseShape() {
    expect('(');
    std::vector<int64_t> shape;
    while (true) {
      skipSpace();
      if (consume(')'))
        break;
      if (pos_ >= text_.size() || !std::isdigit(uint8_t(text_[pos_])))
        fail("shape entries must be non-negative integers");
      int64_t extent = 0;
      while (pos_ < text_.size() && std::isdigit(uint8_t(text_[pos_]))) {
        int digit = text_[pos_++] - '0';
        if (extent > (std::numeric_limits<int64_t>::max() - digit) / 10)
          fail("shape entry out of range");
        extent = extent * 10 + digit;
      }
      if (shape.size() >= kMaxRank)
        fail("more than " + std::to_string(kMaxRank) + " dims");
      shape.push_back(extent);
      skipSpace();
      if (consume(')'))
        break;
      expect(',');
    }
    return shape;
  }

  static constexpr size_t kMaxRank = 64;
  std::string_view text_;
  const std::string &name_;
  size_t pos_ = 0;
};

} // namespace

rt::Tensor parseNpy(std::string_view bytes, const std::string &name) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY"))
    throw std::runtime_error(name + ": not a .npy file");
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  auto byteAt = [&](size_t i) {
    return static_cast<uint32_t>(uint8_t(bytes[i]));
  };
  size_t headerLen = 0, headerStart = 0;
  if (major == 1) {
    headerLen = byteAt(8) | byteAt(9) << 8;
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      throw std::runtime_error(name + ": truncated .npy header");
    headerLen =
        byteAt(8) | byteAt(9) << 8 | byteAt(10) << 16 | byteAt(11) << 24;
    headerStart = 12;
  } else {
    throw std::runtime_error(name + ": unsupported .npy version " +
                             std::to_string(major));
  }
  if (headerLen > kMaxNpyHeaderBytes || headerLen > bytes.size() - headerStart)
    throw std::runtime_error(name + ": bad .npy header length " +
                             std::to_string(headerLen));
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
  NpyHeaderParser(bytes.substr(headerStart, headerLen), name)
      .parse(descr, fortranOrder, shape);
  wire::DType dt = dtypeOfDescr(descr, name);
  if (fortranOrder)
    throw std::runtime_error(name +
                             ": Fortran-ordered .npy files are not supported");
  // The element count is checked against the bytes present before anything
  // is allocated: a header cannot make the reader allocate more than the
  // file holds.
  int64_t numel = 1;
  try {
    numel = rt::shapeNumel(shape);
  } catch (const std::exception &e) {
    throw std::runtime_error(name + ": " + e.what());
  }
  size_t dataStart = headerStart + headerLen;
  size_t available = (bytes.size() - dataStart) / rt::dtypeSize(dt);
  if (static_cast<uint64_t>(numel) > available)
    throw std::runtime_error(name + ": file is shorter than its shape says");
  rt::Tensor t = rt::Tensor::empty(dt, shape);
  if (t.nbytes())
    std::memcpy(t.data(), bytes.data() + dataStart, t.nbytes());
  return t;
}

rt::Tensor readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad())
    throw std::runtime_error(path + ": cannot read");
  return parseNpy(contents.str(), path);
}

void writeNpy(const std::string &path, const rt::Tensor &t) {
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i)
    shape +=
        std::to_string(t.shape()[i]) +
        (t.shape().size() == 1 ? "," : (i + 1 < t.shape().size() ? ", " : ""));
  shape += ")";
  std::string header = std::string("{'descr': '") + descrOf(t.dtype()) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out)
    throw std::runtime_error(path + ": cannot write");
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char *>(&len), 2);
  out.write(header.data(), header.size());
  out.write(static_cast<const char *>(t.data()), t.nbytes());
}

} // namespace dtorch::client
