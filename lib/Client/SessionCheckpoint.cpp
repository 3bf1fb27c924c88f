//===- SessionCheckpoint.cpp - the client's half of dcp.save/dcp.load -----===//
//
// The client decides which rank writes which piece and which region each
// rank reads; the data itself moves only between the workers and the disk
// (rt::serveCheckpointRequest). See docs/guide/checkpoints.md.
//
//===----------------------------------------------------------------------===//

#include "Controller.h"
#include "SessionSupport.h"
#include "dtorch/Client/CheckpointFiles.h"

#include <cstdio>
#include <map>

namespace dtorch::client {

namespace {

Placements withoutPartial(Placements placements) {
  for (Placement &p : placements)
    if (p.isPartial())
      p = Placement::replicate();
  return placements;
}

std::string shardFileName(int64_t rank) {
  char name[64];
  std::snprintf(name, sizeof(name), "shards-rank-%05lld.bin",
                static_cast<long long>(rank));
  return name;
}

/// The request of `rank` in `requests`, made on first use.
wire::CheckpointRequest &
requestOf(std::map<int64_t, wire::CheckpointRequest> &requests, int64_t rank,
          wire::CheckpointRequest::Action action, const std::string &folder) {
  auto [it, made] = requests.try_emplace(rank);
  if (made) {
    it->second.set_rank(static_cast<int32_t>(rank));
    it->second.set_action(action);
    it->second.set_directory(folder);
    if (action == wire::CheckpointRequest::WRITE)
      it->second.set_file(shardFileName(rank));
  }
  return it->second;
}

std::vector<wire::CheckpointReply>
sendAll(Controller &controller,
        std::map<int64_t, wire::CheckpointRequest> &requests,
        std::vector<std::pair<Handle, int>> created, const char *what) {
  std::vector<wire::CheckpointRequest> list;
  for (auto &[rank, request] : requests)
    list.push_back(std::move(request));
  std::vector<wire::CheckpointReply> replies =
      controller.checkpointAsync(std::move(list), std::move(created)).get();
  for (const wire::CheckpointReply &reply : replies)
    if (!reply.ok())
      throw DTorchError(std::string("checkpoint ") + what + " failed on rank " +
                        std::to_string(reply.rank()) + ": " + reply.error());
  return replies;
}

} // namespace

std::vector<wire::CheckpointTensor>
Session::saveShards(const std::vector<Tensor> &tensors,
                    const std::vector<std::string> &keys,
                    const std::string &folder) {
  if (keys.size() != tensors.size())
    throw ValueError("saveShards: one key per tensor");
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  // Partial values are reduced first (one more op of the pending segment).
  std::vector<Tensor> values;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor &t = tensors[i];
    if (t->session_ != this)
      throw ValueError("tensor '" + keys[i] +
                       "' belongs to another dtorch session");
    if (t->storage_->meta)
      throw ValueError("tensor '" + keys[i] +
                       "' is a meta tensor: it has no value to save");
    const TensorMeta &m = t->meta();
    values.push_back(
        hasPartial(m.placements)
            ? redistribute(t, m.meshId, withoutPartial(m.placements))
            : t);
  }
  flush();

  struct Written {
    size_t tensor;
    Shape offsets, sizes;
    int64_t rank;
    int index; // position in the rank's write list
  };
  std::vector<Written> written;
  std::map<int64_t, wire::CheckpointRequest> requests;
  for (size_t i = 0; i < values.size(); ++i) {
    const TensorMeta &m = values[i]->meta();
    const Mesh &mesh = this->mesh(m.meshId);
    // Each distinct box once, by the lowest global rank that holds it.
    std::map<std::pair<Shape, Shape>, int64_t> writerOf;
    for (int64_t p = 0; p < meshSize(mesh.shape); ++p) {
      LocalBox box = localBox(m.shape, mesh.shape, m.placements,
                              meshCoords(mesh.shape, p));
      int64_t volume = 1;
      for (int64_t s : box.shape)
        volume *= s;
      if (volume == 0)
        continue;
      auto key = std::make_pair(box.offset, box.shape);
      auto [it, made] = writerOf.try_emplace(key, mesh.ranks[p]);
      if (!made)
        it->second = std::min(it->second, mesh.ranks[p]);
    }
    for (const auto &[box, rank] : writerOf) {
      wire::CheckpointRequest &request =
          requestOf(requests, rank, wire::CheckpointRequest::WRITE, folder);
      written.push_back(
          {i, box.first, box.second, rank, request.write_handles_size()});
      request.add_write_handles(values[i]->id());
    }
  }
  std::vector<wire::CheckpointReply> replies =
      sendAll(*controller_, requests, {}, "save");
  std::map<int64_t, const wire::CheckpointReply *> replyOf;
  for (const wire::CheckpointReply &reply : replies)
    replyOf[reply.rank()] = &reply;

  std::vector<wire::CheckpointTensor> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i].set_key(keys[i]);
    out[i].set_dtype(values[i]->meta().dtype);
    for (int64_t s : values[i]->meta().shape)
      out[i].add_shape(s);
  }
  for (const Written &w : written) {
    const wire::CheckpointReply *reply = replyOf.at(w.rank);
    if (w.index >= reply->written_size())
      throw DTorchError("checkpoint save: rank " + std::to_string(w.rank) +
                        " reported fewer pieces than it was asked to write");
    const wire::CheckpointWritten &done = reply->written(w.index);
    wire::CheckpointChunk *chunk = out[w.tensor].add_chunks();
    for (size_t d = 0; d < w.offsets.size(); ++d) {
      chunk->add_offsets(w.offsets[d]);
      chunk->add_sizes(w.sizes[d]);
    }
    chunk->set_file(shardFileName(w.rank));
    chunk->set_byte_offset(done.byte_offset());
    chunk->set_byte_size(done.byte_size());
    chunk->set_checksum(done.checksum());
  }
  return out;
}

std::vector<Tensor>
Session::loadShards(const std::vector<wire::CheckpointTensor> &saved,
                    const std::vector<TensorMeta> &targets,
                    const std::string &folder) {
  if (saved.size() != targets.size())
    throw ValueError("loadShards: one target per saved tensor");
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  std::vector<Tensor> out;
  std::vector<std::pair<Handle, int>> created;
  std::map<int64_t, wire::CheckpointRequest> requests;
  for (size_t i = 0; i < saved.size(); ++i) {
    const wire::CheckpointTensor &s = saved[i];
    TensorMeta meta = targets[i];
    Shape savedShape(s.shape().begin(), s.shape().end());
    if (savedShape != meta.shape)
      throw ValueError("checkpoint tensor '" + s.key() + "' has shape " +
                       shapeStr(savedShape) + ", the target has " +
                       shapeStr(meta.shape));
    if (s.dtype() != meta.dtype)
      throw ValueError("checkpoint tensor '" + s.key() + "' has dtype " +
                       dtypeName(s.dtype()) + ", the target has " +
                       dtypeName(meta.dtype));
    meta.placements = withoutPartial(meta.placements);
    const Mesh &mesh = this->mesh(meta.meshId);
    Tensor t = newTensor(meta);
    t->storage_->materialized = true;
    created.emplace_back(t->id(), meta.meshId);
    for (int64_t p = 0; p < meshSize(mesh.shape); ++p) {
      LocalBox box = localBox(meta.shape, mesh.shape, meta.placements,
                              meshCoords(mesh.shape, p));
      wire::CheckpointRequest &request = requestOf(
          requests, mesh.ranks[p], wire::CheckpointRequest::READ, folder);
      wire::CheckpointRead *read = request.add_reads();
      read->set_handle(t->id());
      read->set_dtype(meta.dtype);
      rt::Box region{box.offset, box.shape};
      for (size_t d = 0; d < box.offset.size(); ++d) {
        read->add_offsets(box.offset[d]);
        read->add_sizes(box.shape[d]);
      }
      // Only the chunks overlapping the region travel.
      for (const wire::CheckpointChunk &chunk : s.chunks()) {
        rt::Box chunkBox{Shape(chunk.offsets().begin(), chunk.offsets().end()),
                         Shape(chunk.sizes().begin(), chunk.sizes().end())};
        if (rt::intersectBoxes(region, chunkBox).found)
          *read->add_sources() = chunk;
      }
    }
    out.push_back(std::move(t));
  }
  flush();
  sendAll(*controller_, requests, std::move(created), "load");
  return out;
}

namespace {

template <class Fn> auto asDTorchError(Fn &&fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const rt::CheckpointError &e) {
    throw DTorchError(e.what());
  }
}

} // namespace

uint32_t checkpointFormatVersion() { return rt::kCheckpointFormatVersion; }

wire::CheckpointMetadata readCheckpointMetadata(std::string_view bytes) {
  return asDTorchError([&] { return rt::readCheckpointMetadata(bytes); });
}

void writeCheckpointMetadata(const std::string &path,
                             const wire::CheckpointMetadata &metadata) {
  asDTorchError([&] {
    rt::writeFileSynced(path, rt::writeCheckpointMetadata(metadata));
  });
}

void writeCheckpointFile(const std::string &path, std::string_view bytes) {
  asDTorchError([&] { rt::writeFileSynced(path, bytes); });
}

uint64_t checkpointChecksum(std::string_view bytes) {
  return rt::checksumBytes(bytes.data(), bytes.size());
}

std::string commitCheckpointFolder(const std::string &staging,
                                   const std::string &target) {
  return asDTorchError(
      [&] { return rt::commitCheckpointFolder(staging, target); });
}

} // namespace dtorch::client
