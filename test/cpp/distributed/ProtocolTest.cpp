// Wire protocol round trips and the worker's refusal of malformed,
// oversized, unauthenticated and wrong-version messages (it stays up).
#include "DistributedTestSupport.h"
#include "TestSupport.h"

#include "dtorch/runtime/Transport.h"

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;

TEST(Protocol, EnvelopeRoundTrip) {
  wire::Envelope e;
  e.set_protocol_version(wire::PROTOCOL_VERSION);
  e.set_request_id(42);
  auto *upload = e.mutable_upload();
  upload->set_program_id(7);
  upload->add_mesh_ranks(3);
  ProgramBuilder builder;
  int a = builder.input(wire::F32, {2});
  int out = builder.buffer(wire::F32, {2});
  builder.add("relu", {a}, {out});
  builder.output(out);
  *upload->add_programs() = onOneRankMesh(builder.program());
  wire::Envelope back;
  std::string bytes = encodeEnvelope(e);
  ASSERT_TRUE(decodeEnvelope(bytes.data(), bytes.size(), back));
  EXPECT_EQ(back.request_id(), 42u);
  EXPECT_EQ(back.upload().programs(0).instructions(0).op(), "relu");
  EXPECT_EQ(back.SerializeAsString(), bytes);

  Tensor t = makeTensor<int64_t>(wire::I64, {2, 2}, {1, -2, 3, 1LL << 40});
  wire::TensorData data;
  tensorToWire(t, &data);
  EXPECT_EQ(valuesOf<int64_t>(tensorFromWire(data)), valuesOf<int64_t>(t));
  data.set_data("abc");
  expectRuntimeError([&] { tensorFromWire(data); },
                     {"needs 32 bytes", "has 3"});

  EXPECT_FALSE(decodeEnvelope("\xff\xff\xff", 3, back));
  EXPECT_FALSE(decodeEnvelope("", 0, back)); // no body
}

TEST(Protocol, EnvelopeParsedIntoAnArenaOutlivesItsFirstHolder) {
  // A program of many like instructions, as a cache miss uploads.
  wire::Envelope e;
  e.set_protocol_version(wire::PROTOCOL_VERSION);
  e.set_request_id(9);
  auto *upload = e.mutable_upload();
  upload->set_program_id(3);
  ProgramBuilder builder;
  int x = builder.input(wire::F32, {4});
  int value = x;
  for (int i = 0; i < 500; ++i) {
    int next = builder.buffer(wire::F32, {4});
    builder.add("add", {value, x}, {next});
    value = next;
  }
  builder.output(value);
  *upload->add_programs() = onOneRankMesh(builder.program());
  std::string bytes = encodeEnvelope(e);

  std::shared_ptr<wire::Envelope> parsed =
      decodeEnvelopeInArena(bytes.data(), bytes.size());
  ASSERT_NE(parsed, nullptr);
  EXPECT_NE(parsed->GetArena(), nullptr);
  EXPECT_EQ(parsed->SerializeAsString(), bytes);
  // A holder of one class program keeps the whole arena alive (what a
  // rank's kept program does).
  std::shared_ptr<const wire::Program> program(parsed,
                                               &parsed->upload().programs(0));
  parsed.reset();
  ASSERT_EQ(program->instructions_size(), 500);
  EXPECT_EQ(program->instructions(499).op(), "add");
  EXPECT_EQ(program->instructions(499).inputs(1), x);
  EXPECT_EQ(program->SerializeAsString(),
            e.upload().programs(0).SerializeAsString());

  EXPECT_EQ(decodeEnvelopeInArena("\xff\xff\xff", 3), nullptr);
  EXPECT_EQ(decodeEnvelopeInArena("", 0), nullptr); // no body
}

TEST(Protocol, HelloChecks) {
  wire::Hello hello = makeHello(wire::ROLE_WORKER, "secret");
  EXPECT_EQ(checkHello(hello, "secret", wire::ROLE_WORKER), "");
  EXPECT_NE(checkHello(hello, "other", wire::ROLE_WORKER).find("wrong token"),
            std::string::npos);
  hello.set_protocol_version(99);
  std::string reason = checkHello(hello, "secret", wire::ROLE_WORKER);
  EXPECT_NE(reason.find("version 99"), std::string::npos) << reason;
  EXPECT_NE(reason.find("this side speaks version " +
                        std::to_string(wire::PROTOCOL_VERSION)),
            std::string::npos)
      << reason;
  EXPECT_EQ(failingInstructionOf(
                "program 'p': instruction 12 ('add' at x.py:3) failed"),
            12);
  EXPECT_EQ(failingInstructionOf("no number here"), -1);
}

class WorkerRejection : public ::testing::Test {
protected:
  void SetUp() override {
    port_ = freePort();
    address_ = "tcp://127.0.0.1:" + std::to_string(port_);
    worker_.pid = detail::spawnProcess(
        DTORCH_WORKER_PATH, {"--listen", address_, "--token", "tok", "--ranks",
                             "0-0", "--world-size", "1", "--max-message-bytes",
                             "65536", "--controller-timeout-ms", "5000"});
    socket_ =
        std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    socket_->set(zmq::sockopt::linger, 0);
    socket_->set(zmq::sockopt::rcvtimeo, 3000);
    socket_->connect(address_);
  }
  void TearDown() override { socket_.reset(); }

  void sendRaw(const std::string &bytes) {
    socket_->send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  void send(const wire::Envelope &e) { sendRaw(encodeEnvelope(e)); }
  wire::Envelope receive() {
    zmq::message_t message;
    auto got = socket_->recv(message, zmq::recv_flags::none);
    EXPECT_TRUE(got.has_value()) << "no reply from the worker";
    wire::Envelope e;
    if (got)
      EXPECT_TRUE(decodeEnvelope(message.data(), message.size(), e));
    return e;
  }
  std::string expectError() {
    wire::Envelope e = receive();
    EXPECT_EQ(e.body_case(), wire::Envelope::kError);
    return e.error().message();
  }
  static wire::Envelope hello(uint32_t version, const std::string &token) {
    wire::Envelope e;
    e.set_protocol_version(wire::PROTOCOL_VERSION);
    *e.mutable_hello() = makeHello(wire::ROLE_CONTROLLER, token);
    e.mutable_hello()->set_protocol_version(version);
    return e;
  }

  int port_ = 0;
  std::string address_;
  ProcessGuard worker_;
  zmq::context_t context_;
  std::unique_ptr<zmq::socket_t> socket_;
};

TEST_F(WorkerRejection, RefusesBadPeersAndStaysUp) {
  // The worker may not be listening yet: retry the first message until it
  // answers.
  sendRaw("this is not a protobuf \xff\xff");
  EXPECT_NE(expectError().find("malformed"), std::string::npos);

  wire::Envelope put;
  put.set_protocol_version(wire::PROTOCOL_VERSION);
  put.mutable_put()->set_rank(0);
  put.mutable_put()->set_handle(1);
  tensorToWire(makeTensor<float>(wire::F32, {1}, {1.f}),
               put.mutable_put()->mutable_value());
  send(put);
  EXPECT_NE(expectError().find("not authenticated"), std::string::npos);

  send(hello(99, "tok"));
  std::string mismatch = expectError();
  EXPECT_NE(mismatch.find("version 99"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("this side speaks version " +
                          std::to_string(wire::PROTOCOL_VERSION)),
            std::string::npos)
      << mismatch;

  send(hello(wire::PROTOCOL_VERSION, "wrong"));
  EXPECT_NE(expectError().find("wrong token"), std::string::npos);

  sendRaw(
      std::string(100000, 'x')); // above the 64 KiB limit, below ZeroMQ's cap
  EXPECT_NE(expectError().find("exceeds the limit"), std::string::npos);

  // Still up: a correct Hello is answered with the worker's Hello, and the
  // rejected put above was never executed.
  send(hello(wire::PROTOCOL_VERSION, "tok"));
  wire::Envelope reply = receive();
  ASSERT_EQ(reply.body_case(), wire::Envelope::kHello);
  EXPECT_EQ(reply.hello().num_ranks(), 1);
  wire::Envelope fetch;
  fetch.set_protocol_version(wire::PROTOCOL_VERSION);
  fetch.set_request_id(5);
  fetch.mutable_fetch()->set_rank(0);
  fetch.mutable_fetch()->set_handle(1);
  send(fetch);
  wire::Envelope fetched;
  do
    fetched = receive();
  while (fetched.body_case() == wire::Envelope::kHeartbeat);
  ASSERT_EQ(fetched.body_case(), wire::Envelope::kFetchReply);
  EXPECT_FALSE(fetched.fetch_reply().ok());
  EXPECT_NE(
      fetched.fetch_reply().error().message().find("unknown tensor handle 1"),
      std::string::npos);

  // Malformed after authentication: error reply, still alive.
  sendRaw("\x08");
  wire::Envelope error;
  do
    error = receive();
  while (error.body_case() == wire::Envelope::kHeartbeat);
  EXPECT_EQ(error.body_case(), wire::Envelope::kError);
  EXPECT_TRUE(processAlive(worker_.pid));

  wire::Envelope stop;
  stop.set_protocol_version(wire::PROTOCOL_VERSION);
  stop.mutable_shutdown();
  send(stop);
  EXPECT_NE(worker_.waitExit(std::chrono::seconds(3)), "");
}

} // namespace
} // namespace dtorch::rt::test
