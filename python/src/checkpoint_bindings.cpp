//===- checkpoint_bindings.cpp - dtorch._C's checkpoint functions ---------===//
//
// What python/dtorch/distributed/checkpoint uses: the workers' shard writes
// and reads (Session::saveShards / loadShards), the metadata file
// (rt::readCheckpointMetadata / writeCheckpointMetadata) and the atomic
// commit of a checkpoint folder. A tensor entry crosses as a dict:
// {"key", "dtype", "shape", "chunks": [{"offsets", "sizes", "file",
// "byte_offset", "byte_size", "checksum"}]}.
//
//===----------------------------------------------------------------------===//

#include "dtorch/Client/CheckpointFiles.h"
#include "dtorch/Client/Errors.h"
#include "dtorch/Client/Session.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;
using namespace dtorch;
using namespace dtorch::client;

namespace {

nb::list intList(const google::protobuf::RepeatedField<int64_t> &values) {
  nb::list out;
  for (int64_t v : values)
    out.append(v);
  return out;
}

nb::dict toDict(const wire::CheckpointTensor &t) {
  nb::dict d;
  d["key"] = t.key();
  d["dtype"] = nb::cast(t.dtype());
  d["shape"] = intList(t.shape());
  nb::list chunks;
  for (const wire::CheckpointChunk &c : t.chunks()) {
    nb::dict cd;
    cd["offsets"] = intList(c.offsets());
    cd["sizes"] = intList(c.sizes());
    cd["file"] = c.file();
    cd["byte_offset"] = c.byte_offset();
    cd["byte_size"] = c.byte_size();
    cd["checksum"] = c.checksum();
    chunks.append(cd);
  }
  d["chunks"] = chunks;
  return d;
}

wire::CheckpointTensor fromDict(const nb::dict &d) {
  wire::CheckpointTensor t;
  t.set_key(nb::cast<std::string>(d["key"]));
  t.set_dtype(nb::cast<wire::DType>(d["dtype"]));
  for (int64_t s : nb::cast<std::vector<int64_t>>(d["shape"]))
    t.add_shape(s);
  for (nb::handle h : nb::cast<nb::list>(d["chunks"])) {
    nb::dict cd = nb::cast<nb::dict>(h);
    wire::CheckpointChunk *c = t.add_chunks();
    for (int64_t v : nb::cast<std::vector<int64_t>>(cd["offsets"]))
      c->add_offsets(v);
    for (int64_t v : nb::cast<std::vector<int64_t>>(cd["sizes"]))
      c->add_sizes(v);
    c->set_file(nb::cast<std::string>(cd["file"]));
    c->set_byte_offset(nb::cast<uint64_t>(cd["byte_offset"]));
    c->set_byte_size(nb::cast<uint64_t>(cd["byte_size"]));
    c->set_checksum(nb::cast<uint64_t>(cd["checksum"]));
  }
  return t;
}

} // namespace

void bindCheckpoint(nb::module_ &m, Session &(*session)()) {
  m.def(
      "checkpoint_save_shards",
      [session](const std::vector<Tensor> &tensors,
                const std::vector<std::string> &keys,
                const std::string &folder) {
        std::vector<wire::CheckpointTensor> saved;
        {
          nb::gil_scoped_release release;
          saved = session().saveShards(tensors, keys, folder);
        }
        nb::list out;
        for (const wire::CheckpointTensor &t : saved)
          out.append(toDict(t));
        return out;
      },
      "Has the workers write the tensors' pieces into `folder`; returns "
      "each tensor's metadata entry (a dict).");
  m.def(
      "checkpoint_load_shards",
      [session](const nb::list &entries, const std::vector<Tensor> &targets,
                const std::string &folder) {
        std::vector<wire::CheckpointTensor> saved;
        for (nb::handle h : entries)
          saved.push_back(fromDict(nb::cast<nb::dict>(h)));
        std::vector<TensorMeta> metas;
        for (const Tensor &t : targets)
          metas.push_back(t->meta());
        nb::gil_scoped_release release;
        return session().loadShards(saved, metas, folder);
      },
      "New tensors laid out like `targets` (Partial read as Replicate), "
      "read by the workers from the saved chunks in `folder`.");
  m.def(
      "checkpoint_read_metadata",
      [](nb::bytes data) {
        wire::CheckpointMetadata metadata =
            readCheckpointMetadata(std::string_view(data.c_str(), data.size()));
        nb::list tensors;
        for (const wire::CheckpointTensor &t : metadata.tensors())
          tensors.append(toDict(t));
        return nb::make_tuple(tensors, metadata.objects_json());
      },
      "Parses and validates a metadata file: (tensor entries, objects JSON).");
  m.def(
      "checkpoint_write_metadata",
      [](const std::string &path, const nb::list &entries,
         const std::string &objectsJson) {
        wire::CheckpointMetadata metadata;
        metadata.set_format_version(checkpointFormatVersion());
        for (nb::handle h : entries)
          *metadata.add_tensors() = fromDict(nb::cast<nb::dict>(h));
        metadata.set_objects_json(objectsJson);
        nb::gil_scoped_release release;
        writeCheckpointMetadata(path, metadata);
      },
      "Validates the entries and writes the metadata file, synced.");
  m.def(
      "checkpoint_write_file",
      [](const std::string &path, nb::bytes data) {
        std::string bytes(data.c_str(), data.size());
        nb::gil_scoped_release release;
        writeCheckpointFile(path, bytes);
      },
      "Writes a file and syncs it.");
  m.def(
      "checkpoint_checksum",
      [](nb::bytes data) {
        return checkpointChecksum(std::string_view(data.c_str(), data.size()));
      },
      "The chunk checksum (CRC-32, as zlib.crc32) of some bytes.");
  m.def(
      "checkpoint_commit",
      [](const std::string &staging, const std::string &target) {
        nb::gil_scoped_release release;
        return commitCheckpointFolder(staging, target);
      },
      "Moves a complete staging folder to `target` atomically; returns the "
      "path now holding the previous checkpoint ('' when none).");
  m.def("get_rng_state", [session] { return session().rngState(); });
  m.def("set_rng_state", [session](uint64_t seed, uint64_t counter) {
    session().setRngState(seed, counter);
  });
}
