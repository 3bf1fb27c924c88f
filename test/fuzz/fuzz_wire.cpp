// libFuzzer target: bytes from the network, as a worker (and the controller)
// handle them before anything runs. The bytes are decoded as an Envelope;
// an upload's class programs are checked, resolved and validated for every
// rank of their mesh (at most kMaxRanksPrepared of them) as
// RankState::upload does through Executor::prepare; tensors of puts and
// fetch replies are deserialized; memory-stats and trace replies are
// converted as the controller converts them. Malformed input must end in a
// refusal (false, or an exception of the runtime), never a crash, a hang,
// an absurd allocation or a sanitizer report.
//
// One difference from the worker: the generated kernels of a program
// (wire::Executable) are not loaded. Loading is dlopen of the controller's
// shared object, a trust decision taken at authentication, not input
// validation.
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/Transport.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

namespace wire = ::dtorch::wire;
using namespace dtorch::rt;

namespace {

constexpr int64_t kMaxRanksPrepared = 8;

// The worker's handling of an UploadProgram (runtime/distributed/Worker.cpp
// and RankState::upload), for the first ranks of the mesh.
void prepareUpload(const wire::UploadProgram &upload) {
  std::vector<int64_t> meshShape;
  if (upload.programs_size() > 0)
    meshShape.assign(upload.programs(0).mesh_shape().begin(),
                     upload.programs(0).mesh_shape().end());
  std::vector<int64_t> meshRanks(upload.mesh_ranks().begin(),
                                 upload.mesh_ranks().end());
  std::shared_ptr<const MeshRanks> mesh;
  try {
    if (meshRanks.empty())
      meshRanks = consecutiveMeshRanks(meshShape, upload.mesh_rank_start());
    mesh = std::make_shared<const MeshRanks>(meshShape, meshRanks);
  } catch (const std::exception &) {
    return; // the worker rejects the upload with the reason
  }
  std::vector<const wire::Program *> classes;
  for (const wire::Program &program : upload.programs())
    classes.push_back(&program);
  int64_t positions = static_cast<int64_t>(meshRanks.size());
  for (int64_t p = 0; p < positions && p < kMaxRanksPrepared; ++p) {
    try {
      RankContext context = RankContext::of(mesh, mesh->rankAt(p));
      int index = programIndexAt(classes, context.coords);
      if (index < 0)
        continue;
      wire::Program resolved = resolveForRank(*classes[index], context);
      validateProgram(resolved, static_cast<int>(context.rank));
      describeInstruction(resolved, 0);
    } catch (const std::exception &) {
      // refused: the rank keeps the reason and fails every run of the id
    }
  }
}

void tryTensor(const wire::TensorData &data) {
  try {
    Tensor tensor = tensorFromWire(data);
    wire::TensorData back;
    tensorToWire(tensor, &back);
  } catch (const std::exception &) {
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  wire::Envelope envelope;
  if (!decodeEnvelope(data, size, envelope))
    return 0;
  switch (envelope.body_case()) {
  case wire::Envelope::kHello:
    checkHello(envelope.hello(), "fuzz-token", wire::ROLE_CONTROLLER);
    checkHello(envelope.hello(), "fuzz-token", wire::ROLE_WORKER);
    break;
  case wire::Envelope::kUpload:
    prepareUpload(envelope.upload());
    break;
  case wire::Envelope::kPut:
    tryTensor(envelope.put().value());
    break;
  case wire::Envelope::kFetchReply:
    tryTensor(envelope.fetch_reply().value());
    failingInstructionOf(envelope.fetch_reply().error().message());
    break;
  case wire::Envelope::kError:
    failingInstructionOf(envelope.error().message());
    break;
  case wire::Envelope::kMemoryStatsReply:
    try {
      memoryStatsFromWire(envelope.memory_stats_reply());
    } catch (const std::exception &) {
    }
    break;
  case wire::Envelope::kTraceReply:
    try {
      traceChunkFromWire(envelope.trace_reply());
    } catch (const std::exception &) {
    }
    break;
  default:
    break;
  }
  // What the sender of a reply does with the message: encode it again.
  encodeEnvelope(envelope);
  return 0;
}
