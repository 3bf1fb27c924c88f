//===- SessionOptimizer.cpp - multi-tensor optimizer updates --------------===//
//
// Session::fusedAdam records the Adam/AdamW update of every parameter of an
// optimizer group as one dtensor.fused_adam node (and one kResultOfNode node
// per further result, which the compiler turns back into the op's results),
// then re-points each parameter and state tensor at its result, as
// Tensor._assign does. The client's cost is one node per updated tensor
// with no Python in between, instead of about ten elementwise ops per
// parameter.
//
//===----------------------------------------------------------------------===//
#include "SessionSupport.h"
#include "dtorch/Client/Session.h"
#include "dtorch/SegmentGraph.h"

namespace dtorch::client {

void Session::fusedAdam(const Tensor &step, const Tensor &lr,
                        const std::vector<Tensor> &params,
                        const std::vector<Tensor> &grads,
                        const std::vector<Tensor> &expAvgs,
                        const std::vector<Tensor> &expAvgSqs,
                        const std::vector<Tensor> &maxExpAvgSqs,
                        const AdamHyperParameters &hyper) {
  const char *where = "fused_adam: ";
  size_t n = params.size();
  if (n == 0)
    throw ValueError(std::string(where) + "no parameters");
  if (grads.size() != n || expAvgs.size() != n || expAvgSqs.size() != n ||
      maxExpAvgSqs.size() != (hyper.amsgrad ? n : 0))
    throw ValueError(std::string(where) + "expected " + std::to_string(n) +
                     " gradients, exp_avgs, exp_avg_sqs" +
                     (hyper.amsgrad ? " and max_exp_avg_sqs" : "") + ", got " +
                     std::to_string(grads.size()) + ", " +
                     std::to_string(expAvgs.size()) + ", " +
                     std::to_string(expAvgSqs.size()) +
                     (hyper.amsgrad ? ", " + std::to_string(maxExpAvgSqs.size())
                                    : std::string()));
  std::vector<Tensor> inputs{step, lr};
  for (const auto *list : {&params, &grads, &expAvgs, &expAvgSqs})
    inputs.insert(inputs.end(), list->begin(), list->end());
  if (hyper.amsgrad)
    inputs.insert(inputs.end(), maxExpAvgSqs.begin(), maxExpAvgSqs.end());
  int meshId = step->meta_.meshId;
  for (const Tensor &t : inputs) {
    if (!t || t->session_ != this)
      throw ValueError(std::string(where) +
                       "tensor belongs to another dtorch session");
    if (t->meta_.meshId != meshId)
      throw ValueError(std::string(where) +
                       "every tensor must be on one device mesh");
  }
  for (const Tensor *scalar : {&step, &lr})
    if (!(*scalar)->meta_.shape.empty() || (*scalar)->meta_.dtype != wire::F64)
      throw ValueError(std::string(where) +
                       "step and lr must be 0-d float64 tensors");
  size_t perParam = hyper.amsgrad ? 5 : 4;
  for (size_t i = 0; i < n; ++i) {
    const TensorMeta &p = params[i]->meta_;
    if (!isFloat(p.dtype))
      throw ValueError(std::string(where) + "parameter " + std::to_string(i) +
                       " is " + dtypeName(p.dtype) + ", not a float tensor");
    for (const Placement &pl : p.placements)
      if (pl.isPartial())
        throw ValueError(std::string(where) + "parameter " + std::to_string(i) +
                         " must not be Partial");
    for (size_t k = 1; k < perParam; ++k) {
      const TensorMeta &o = inputs[2 + k * n + i]->meta_;
      if (o.shape != p.shape || o.dtype != p.dtype ||
          o.placements != p.placements)
        throw ValueError(
            std::string(where) + "tensor " + std::to_string(k) +
            " of parameter " + std::to_string(i) + " (" + shapeStr(o.shape) +
            " " + dtypeName(o.dtype) + " " + placementsStr(o.placements) +
            ") differs from the parameter (" + shapeStr(p.shape) + " " +
            dtypeName(p.dtype) + " " + placementsStr(p.placements) +
            "): redistribute it to the parameter's placements");
    }
  }

  auto floatAttr = [](double v) {
    AttrValue a;
    a.kind = AttrValue::Kind::Float;
    a.f = v;
    return a;
  };
  auto intAttr = [](int64_t v) {
    AttrValue a;
    a.i = v;
    return a;
  };
  Attrs attrs{{"beta1", floatAttr(hyper.beta1)},
              {"beta2", floatAttr(hyper.beta2)},
              {"eps", floatAttr(hyper.eps)},
              {"weight_decay", floatAttr(hyper.weightDecay)},
              {"decoupled", intAttr(hyper.decoupled)},
              {"amsgrad", intAttr(hyper.amsgrad)},
              {"maximize", intAttr(hyper.maximize)}};

  // The op and its result nodes go into one segment.
  size_t numResults = (perParam - 1) * n;
  if (segment_.meshId != meshId ||
      segment_.nodes.size() + numResults > options_.maxSegmentNodes)
    flush();
  std::vector<Tensor> results;
  results.reserve(numResults);
  results.push_back(
      addNode("fused_adam", inputs, std::move(attrs), params[0]->meta_));
  recordingResults_ = true;
  try {
    for (size_t r = 1; r < numResults; ++r)
      results.push_back(addNode(kResultOfNode, {results[0]},
                                {{"index", intAttr(static_cast<int64_t>(r))}},
                                params[r % n]->meta_));
  } catch (...) {
    recordingResults_ = false;
    throw;
  }
  recordingResults_ = false;

  // Results in order: parameters, exp_avgs, exp_avg_sqs, max_exp_avg_sqs.
  const std::vector<Tensor> *targets[] = {&params, &expAvgs, &expAvgSqs,
                                          &maxExpAvgSqs};
  for (size_t r = 0; r < numResults; ++r) {
    const Tensor &target = (*targets[r / n])[r % n];
    // The result has the target's placements: a re-pointing, no op.
    target->storage_ = results[r]->storage_;
  }
}

} // namespace dtorch::client
