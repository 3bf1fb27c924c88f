#include "GlooPairAuthentication.h"

#include "dtorch/runtime/Tensor.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <sodium.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

namespace dtorch::rt::detail {

namespace {

using Clock = std::chrono::steady_clock;
using Digest = std::array<unsigned char, crypto_auth_hmacsha256_BYTES>;
using Nonce = std::array<unsigned char, 32>;

void initSodium() {
  if (sodium_init() < 0)
    throw RuntimeError("gloo: libsodium failed to initialize");
}

// The key of the pair proofs: a hash of the mesh secret, so the proofs never
// use the secret itself as a key.
std::array<unsigned char, crypto_auth_hmacsha256_KEYBYTES>
proofKey(const std::string &secret) {
  std::array<unsigned char, crypto_auth_hmacsha256_KEYBYTES> key{};
  static const char label[] = "dtorch gloo pair proof v1";
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, key.size());
  crypto_generichash_update(&state,
                            reinterpret_cast<const unsigned char *>(label),
                            sizeof(label) - 1);
  crypto_generichash_update(
      &state, reinterpret_cast<const unsigned char *>(secret.data()),
      secret.size());
  crypto_generichash_final(&state, key.data(), key.size());
  return key;
}

void putRank(unsigned char *out, int64_t rank) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<unsigned char>(static_cast<uint64_t>(rank) >>
                                        (8 * (7 - i)));
}

// HMAC of the challenge `nonce` answered by `from` for `to`.
Digest
proofOf(const std::array<unsigned char, crypto_auth_hmacsha256_KEYBYTES> &key,
        const Nonce &nonce, int64_t from, int64_t to) {
  std::array<unsigned char, 32 + 16> message{};
  std::memcpy(message.data(), nonce.data(), nonce.size());
  putRank(message.data() + 32, from);
  putRank(message.data() + 40, to);
  Digest digest{};
  crypto_auth_hmacsha256(digest.data(), message.data(), message.size(),
                         key.data());
  return digest;
}

std::chrono::milliseconds leftUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

} // namespace

void authenticateGlooPairs(::gloo::Context &context, int rank,
                           const std::string &secret,
                           std::chrono::milliseconds deadline) {
  initSodium();
  auto key = proofKey(secret);
  int size = context.size;
  auto until = Clock::now() + deadline;
  auto failure = [&](int peer, const std::string &why) {
    return RuntimeError(
        "gloo: rank " + std::to_string(rank) + ": the connection to rank " +
        std::to_string(peer) + " did not prove membership of this mesh (" +
        why +
        "); a process that is not a mesh peer may have connected to the "
        "collective port");
  };
  std::vector<Nonce> mine(size), theirs(size);
  std::vector<Digest> myProofs(size), theirProofs(size);
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> sends, recvs;
  // Round 1: nonces.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank)
      continue;
    randombytes_buf(mine[peer].data(), mine[peer].size());
    auto send =
        context.createUnboundBuffer(mine[peer].data(), mine[peer].size());
    send->send(peer, kPairNonceSlot);
    sends.push_back(std::move(send));
    auto recv =
        context.createUnboundBuffer(theirs[peer].data(), theirs[peer].size());
    recv->recv(peer, kPairNonceSlot);
    recvs.push_back(std::move(recv));
  }
  auto waitAll = [&](const char *what) {
    size_t k = 0;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank)
        continue;
      try {
        recvs[k]->waitRecv(nullptr, leftUntil(until));
        sends[k]->waitSend(nullptr, leftUntil(until));
      } catch (const std::exception &error) {
        throw failure(peer, std::string("no ") + what +
                                " by the deadline: " + error.what());
      }
      ++k;
    }
    sends.clear();
    recvs.clear();
  };
  waitAll("challenge");
  // Round 2: answers.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank)
      continue;
    myProofs[peer] = proofOf(key, theirs[peer], rank, peer);
    auto send = context.createUnboundBuffer(myProofs[peer].data(),
                                            myProofs[peer].size());
    send->send(peer, kPairProofSlot);
    sends.push_back(std::move(send));
    auto recv = context.createUnboundBuffer(theirProofs[peer].data(),
                                            theirProofs[peer].size());
    recv->recv(peer, kPairProofSlot);
    recvs.push_back(std::move(recv));
  }
  waitAll("answer");
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank)
      continue;
    Digest expected = proofOf(key, mine[peer], peer, rank);
    if (crypto_verify_32(expected.data(), theirProofs[peer].data()) != 0)
      throw failure(peer, "wrong answer to the challenge");
  }
}

} // namespace dtorch::rt::detail
