// Proof that every Gloo pair of a context reaches a member of this mesh
// (internal to GlooCollectives.cpp).
//
// Gloo's TCP listener hands an incoming connection to whichever pair waits
// for the sequence number the connection sends first; it checks nothing
// else, so any process that can reach the port could stand in for a peer.
// After connecting, each pair therefore runs a challenge-response: both
// sides send a fresh random nonce and answer the other's with
// HMAC-SHA-256(key, nonce | sender rank | receiver rank), the key derived
// from a secret that only the mesh's members hold (the controller hands it
// out through its authenticated store). An impostor cannot answer, and the
// secret never crosses the data link.
#pragma once

#include <chrono>
#include <string>

namespace gloo {
class Context;
}

namespace dtorch::rt::detail {

// Slots of the exchange; collectives use slots with the top bit set.
constexpr uint64_t kPairNonceSlot = 1;
constexpr uint64_t kPairProofSlot = 2;

// Runs the exchange with every other rank of `context` (all ranks call it
// together). Throws RuntimeError naming the first peer whose proof is wrong
// or missing by `deadline`.
void authenticateGlooPairs(::gloo::Context &context, int rank,
                           const std::string &secret,
                           std::chrono::milliseconds deadline);

} // namespace dtorch::rt::detail
