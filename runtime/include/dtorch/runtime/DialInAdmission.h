// Admission of workers that dial in to the controller (Cluster in dial-in
// mode, ClusterOptions::listenAddress): the controller listens, each
// dtorch-worker connects and sends its Hello (protocol version, token, its
// block of ranks, the world size, its host and pid), and the world is
// complete once every rank of the world is held by exactly one admitted
// worker. MLIR-free and transport-free: the cluster hands it each Hello with
// the peer's routing id and address, and sends what it decides.
//
// Every refusal names what was wrong and who sent it (host, pid, address):
// a wrong token or protocol version, a world size that differs from the
// controller's (or from the first worker's, when the controller left it
// open), ranks outside the world, and a rank claimed by two workers (both
// named). missingRanks() / describeMissing() name the ranks no worker holds
// yet, for the admission timeout.
#pragma once

#include "dtorch_messages.pb.h"

#include <string>
#include <vector>

namespace dtorch::rt {

/// One admitted worker process.
struct DialInWorker {
  std::string peer;        // the transport's id of its connection
  std::string peerAddress; // where it connected from ("" when unknown)
  std::string host;        // the host name it reported
  int64_t pid = 0;
  int firstRank = 0;
  int numRanks = 0;
  int cudaDevices = 0;         // from its Hello
  std::string cudaUnavailable; // why cudaDevices is 0
};

class DialInAdmission {
public:
  /// `worldSize` > 0: the world the controller expects (every worker must
  /// report it); 0: the first admitted worker's world size is taken.
  DialInAdmission(int worldSize, std::string token);

  struct Decision {
    bool admitted = false;
    /// Why the worker was refused (empty when admitted): the message the
    /// worker is sent and the controller's start fails with.
    std::string reason;
  };
  /// Decides on a Hello from `peer`. An admitted worker is added to
  /// admitted(); a refused one changes nothing.
  Decision offer(const std::string &peer, const std::string &peerAddress,
                 const ::dtorch::wire::Hello &hello);
  /// A worker's connection closed before the world was complete: its ranks
  /// are free again (a restarted worker may take them). False when `peer`
  /// was not admitted.
  bool withdraw(const std::string &peer);

  /// True when `peer` is an admitted worker's connection.
  bool holds(const std::string &peer) const;
  /// True once every rank of the world is held.
  bool complete() const;
  /// 0 until the world size is known.
  int worldSize() const { return worldSize_; }
  /// Admitted workers, in order of arrival.
  const std::vector<DialInWorker> &admitted() const { return admitted_; }
  /// The ranks no admitted worker holds, ascending (empty while the world
  /// size is unknown).
  std::vector<int> missingRanks() const;
  /// "ranks 2-3, 6 of 8 never arrived (2 worker(s) admitted: ...)", or
  /// "no worker arrived" when the world size is still unknown.
  std::string describeMissing() const;
  /// How a worker is named in messages: "host H pid P (ranks a-b) from
  /// ADDRESS".
  static std::string describe(const DialInWorker &worker);

private:
  int worldSize_;
  std::string token_;
  std::vector<DialInWorker> admitted_;
};

/// "0-3, 5, 7-8" for ascending ranks.
std::string formatRankList(const std::vector<int> &ranks);

} // namespace dtorch::rt
