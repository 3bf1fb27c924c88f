//===- Speculation.cpp - predicting the segment being recorded -----------===//
#include "Speculation.h"

#include "Controller.h"

#include <cstdlib>
#include <string_view>

namespace dtorch::client {

bool speculationEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_SPECULATE");
    return !(value && std::string_view(value) == "0");
  }();
  return enabled;
}

void SegmentPredictor::atCheckpoint(const Segment &segment,
                                    Controller &controller) {
  size_t index = current_.size();
  uint64_t hash = segment.structureHash;
  current_.push_back(hash);
  nextCheckpoint_ = checkpointAfter(nextCheckpoint_);
  if (mismatched_)
    return;
  if (candidate_ < 0) {
    if (index != 0)
      return;
    for (size_t i = 0; i < history_.size(); ++i)
      if (history_[i].meshId == segment.meshId &&
          !history_[i].checkpoints.empty() &&
          history_[i].checkpoints[0] == hash) {
        candidate_ = static_cast<int>(i);
        break;
      }
    if (candidate_ < 0) {
      mismatched_ = true;
      return;
    }
  } else {
    const Record &record = history_[candidate_];
    if (index >= record.checkpoints.size() ||
        record.checkpoints[index] != hash) {
      mismatched_ = true;
      candidate_ = -1;
      return;
    }
  }
  const Record &record = history_[candidate_];
  size_t args = segment.args.size();
  if (!started_) {
    controller.speculate(
        segment.meshId, record.finalHash,
        std::vector<Handle>(segment.args.begin(), segment.args.end()),
        /*extend=*/false);
    started_ = true;
    argsSent_ = args;
  } else if (args > argsSent_) {
    controller.speculate(segment.meshId, record.finalHash,
                         std::vector<Handle>(segment.args.begin() + argsSent_,
                                             segment.args.end()),
                         /*extend=*/true);
    argsSent_ = args;
  }
}

void SegmentPredictor::onFlush(const Segment &segment) {
  if (!current_.empty()) {
    Record record;
    record.meshId = segment.meshId;
    record.finalHash = segment.structureHash;
    record.checkpoints = std::move(current_);
    // The same segment again replaces its record; the newest goes first.
    for (size_t i = 0; i < history_.size(); ++i)
      if (history_[i].meshId == record.meshId &&
          history_[i].checkpoints[0] == record.checkpoints[0]) {
        history_.erase(history_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    history_.insert(history_.begin(), std::move(record));
    if (history_.size() > kHistory)
      history_.pop_back();
  }
  current_.clear();
  nextCheckpoint_ = firstCheckpoint();
  candidate_ = -1;
  mismatched_ = false;
  argsSent_ = 0;
  started_ = false;
}

} // namespace dtorch::client
