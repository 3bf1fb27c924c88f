//===- Npy.cpp - reading and writing .npy files --------------------------===//
#include "Npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

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

} // namespace

rt::Tensor readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open");
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw std::runtime_error(path + ": not a .npy file");
  uint32_t headerLen = 0;
  if (magic[6] == 1) {
    uint16_t l = 0;
    in.read(reinterpret_cast<char *>(&l), 2);
    headerLen = l;
  } else {
    in.read(reinterpret_cast<char *>(&headerLen), 4);
  }
  if (!in || headerLen > (1u << 20))
    throw std::runtime_error(path + ": bad .npy header");
  std::string header(headerLen, '\0');
  in.read(header.data(), headerLen);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']+)'")))
    throw std::runtime_error(path + ": .npy header has no descr");
  wire::DType dt = dtypeOfDescr(m[1], path);
  if (std::regex_search(header, m, std::regex("'fortran_order':\\s*True")))
    throw std::runtime_error(path +
                             ": Fortran-ordered .npy files are not supported");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    throw std::runtime_error(path + ": .npy header has no shape");
  std::vector<int64_t> shape;
  std::stringstream ss(m[1].str());
  std::string item;
  while (std::getline(ss, item, ','))
    if (item.find_first_not_of(" ") != std::string::npos)
      shape.push_back(std::stoll(item));
  rt::Tensor t = rt::Tensor::empty(dt, shape);
  if (t.nbytes() && !in.read(static_cast<char *>(t.data()), t.nbytes()))
    throw std::runtime_error(path + ": file is shorter than its shape says");
  return t;
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
