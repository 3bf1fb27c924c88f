// Writes the seed corpus of fuzz_wire: one Envelope per file, of every kind
// a worker or the controller decodes, with real class programs compiled
// from those of the dtensor modules given on the command line that compile.
//
//   make_wire_corpus OUT_DIR a.mlir b.mlir ...
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Transport.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace wire = ::dtorch::wire;

namespace {

int written = 0;

void write(const std::string &dir, const std::string &name,
           const wire::Envelope &envelope) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  // Deterministic: map fields (instruction attributes) in key order, so
  // that writing the corpus again gives the same bytes.
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream raw(&bytes);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    envelope.SerializeToCodedStream(&coded);
  }
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ++written;
}

wire::Envelope envelope(uint64_t requestId) {
  wire::Envelope e;
  e.set_protocol_version(wire::PROTOCOL_VERSION);
  e.set_request_id(requestId);
  return e;
}

void fillTensor(wire::TensorData *data, wire::DType dtype,
                std::vector<int64_t> shape) {
  dtorch::rt::Tensor t = dtorch::rt::Tensor::empty(dtype, shape);
  if (t.nbytes())
    std::memset(t.data(), 1, t.nbytes());
  dtorch::rt::tensorToWire(t, data);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_wire_corpus OUT_DIR [module.mlir...]\n");
    return 2;
  }
  std::string dir = argv[1];

  wire::Envelope hello = envelope(0);
  // Host and pid fixed, so that writing the corpus again changes nothing.
  *hello.mutable_hello() =
      dtorch::rt::makeHello(wire::ROLE_CONTROLLER, "fuzz-token");
  hello.mutable_hello()->set_host("host");
  hello.mutable_hello()->set_pid(1234);
  write(dir, "hello_controller", hello);
  *hello.mutable_hello() = dtorch::rt::makeHello(wire::ROLE_WORKER, "wrong");
  hello.mutable_hello()->set_host("host");
  hello.mutable_hello()->set_pid(1235);
  hello.mutable_hello()->set_first_rank(2);
  hello.mutable_hello()->set_num_ranks(2);
  hello.mutable_hello()->set_world_size(4);
  write(dir, "hello_worker", hello);

  int k = 0;
  for (auto [dtype, shape] :
       std::vector<std::pair<wire::DType, std::vector<int64_t>>>{
           {wire::F32, {2, 3}},
           {wire::F64, {4}},
           {wire::I64, {}},
           {wire::BOOL, {3, 0}},
           {wire::BF16, {2, 2}},
           {wire::F16, {1, 1, 3}},
           {wire::I32, {5}}}) {
    wire::Envelope put = envelope(0);
    put.mutable_put()->set_rank(k % 2);
    put.mutable_put()->set_handle(100 + k);
    fillTensor(put.mutable_put()->mutable_value(), dtype, shape);
    write(dir, "put_" + std::to_string(k), put);
    wire::Envelope reply = envelope(7 + k);
    reply.mutable_fetch_reply()->set_rank(k % 2);
    reply.mutable_fetch_reply()->set_ok(true);
    fillTensor(reply.mutable_fetch_reply()->mutable_value(), dtype, shape);
    write(dir, "fetch_reply_" + std::to_string(k), reply);
    ++k;
  }
  wire::Envelope failed = envelope(3);
  failed.mutable_fetch_reply()->set_ok(false);
  failed.mutable_fetch_reply()->mutable_error()->set_message(
      "rank 1: program 'f_class0': instruction 3 ('matmul' at model.py:12): "
      "shapes do not match");
  write(dir, "fetch_reply_error", failed);

  wire::Envelope error = envelope(0);
  error.mutable_error()->set_rank(-1);
  error.mutable_error()->set_host("host");
  error.mutable_error()->set_message("instruction 12 failed");
  error.mutable_error()->set_instruction(12);
  write(dir, "error", error);

  wire::Envelope run = envelope(9);
  run.mutable_run()->set_program_id(1);
  for (int i = 0; i < 3; ++i)
    run.mutable_run()->add_inputs(100 + i);
  run.mutable_run()->add_outputs(200);
  run.mutable_run()->add_ranks(0);
  run.mutable_run()->add_ranks(1);
  run.mutable_run()->add_seeds(42);
  write(dir, "run", run);

  wire::Envelope fetch = envelope(10);
  fetch.mutable_fetch()->set_rank(1);
  fetch.mutable_fetch()->set_handle(200);
  write(dir, "fetch", fetch);

  wire::Envelope freed = envelope(0);
  freed.mutable_free()->add_handles(100);
  freed.mutable_free()->add_ranks(0);
  write(dir, "free", freed);

  wire::Envelope kv = envelope(11);
  kv.mutable_kv_set()->set_key("gloo/0/1");
  kv.mutable_kv_set()->set_value(std::string("\x01\x02\x03", 3));
  write(dir, "kv_set", kv);
  wire::Envelope kvReply = envelope(11);
  kvReply.mutable_kv_reply()->set_key("gloo/0/1");
  kvReply.mutable_kv_reply()->set_value("addr");
  write(dir, "kv_reply", kvReply);

  wire::Envelope stats = envelope(12);
  auto *s = stats.mutable_memory_stats_reply();
  s->set_rank(0);
  s->set_tensors(2);
  s->set_bytes(96);
  auto *byDtype = s->add_by_dtype();
  byDtype->set_dtype(wire::F32);
  byDtype->set_bytes(96);
  auto *held = s->add_held();
  held->set_handle(100);
  held->set_dtype(wire::F32);
  held->set_bytes(24);
  write(dir, "memory_stats_reply", stats);

  wire::Envelope trace = envelope(13);
  auto *t = trace.mutable_trace_reply();
  t->set_rank(0);
  t->set_host("host");
  t->set_clock_ns(1000);
  auto *event = t->add_events();
  event->set_name("matmul");
  event->set_category("kernel");
  event->set_start_ns(10);
  event->set_end_ns(20);
  event->set_bytes(-1);
  write(dir, "trace_reply", trace);

  wire::Envelope heartbeat = envelope(0);
  heartbeat.mutable_heartbeat()->set_sequence(5);
  write(dir, "heartbeat", heartbeat);

  // Regressions: what the worker once allocated before refusing.
  wire::Envelope wrapping = envelope(0);
  wrapping.mutable_put()->set_handle(1);
  wrapping.mutable_put()->mutable_value()->set_dtype(wire::F64);
  wrapping.mutable_put()->mutable_value()->add_shape(int64_t(1) << 61);
  write(dir, "regress_put_numel_times_itemsize_wraps", wrapping);
  wire::Envelope hugeMesh = envelope(0);
  wire::Program *meshProgram = hugeMesh.mutable_upload()->add_programs();
  meshProgram->set_version(wire::PROGRAM_FORMAT_VERSION);
  meshProgram->add_mesh_shape(int64_t(1) << 40);
  meshProgram->add_mesh_shape(int64_t(1) << 30);
  write(dir, "regress_upload_mesh_of_2e70_positions", hugeMesh);

  // Uploads of real programs, as the controller sends them.
  dtorch::CompileOptions options;
  options.fuseElementwise = false;
  uint64_t programId = 1;
  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i]);
    std::stringstream text;
    text << in.rdbuf();
    dtorch::CompileResult result =
        dtorch::compileModule(text.str(), argv[i], options);
    if (!result.ok)
      continue; // an invalid module of the IR corpus: nothing to upload
    for (const dtorch::CompiledFunction &fn : result.functions) {
      wire::Envelope upload = envelope(0);
      upload.mutable_upload()->set_program_id(programId++);
      for (const wire::Program &program : fn.programs)
        *upload.mutable_upload()->add_programs() = program;
      upload.mutable_upload()->set_mesh_rank_start(0);
      write(dir, "upload_" + fn.name, upload);
      if (programId == 2) {
        // Regression: num_events sized three tables before any check.
        upload.mutable_upload()->mutable_programs(0)->set_num_events(
            0x7fffffff);
        write(dir, "regress_upload_num_events_2e31", upload);
      }
    }
  }
  std::printf("wrote %d envelopes to %s\n", written, dir.c_str());
  return 0;
}
