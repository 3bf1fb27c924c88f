//===- SessionOptimizer.cpp - multi-tensor optimizer updates --------------===//
//
// Session::fusedAdam and Session::fusedSgd record the Adam/AdamW or SGD
// update of every parameter of an optimizer group as one dtensor.fused_adam
// or dtensor.fused_sgd node (and one kResultOfNode node
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

void Session::recordOptimizerUpdate(
    const char *op, const std::vector<Tensor> &scalars,
    const std::vector<const std::vector<Tensor> *> &groups, size_t resultGroups,
    Attrs attrs, const std::vector<std::vector<Tensor> *> &targets) {
  std::string where = std::string(op) + ": ";
  const std::vector<Tensor> &params = *groups[0];
  size_t n = params.size();
  if (n == 0)
    throw ValueError(where + "no parameters");
  std::vector<Tensor> inputs(scalars);
  for (const std::vector<Tensor> *list : groups) {
    if (list->size() != n)
      throw ValueError(where + "expected " + std::to_string(n) +
                       " tensors in each group, got " +
                       std::to_string(list->size()));
    inputs.insert(inputs.end(), list->begin(), list->end());
  }
  int meshId = scalars[0]->meta_.meshId;
  for (const Tensor &t : inputs) {
    if (!t || t->session_ != this)
      throw ValueError(where + "tensor belongs to another dtorch session");
    if (t->meta_.meshId != meshId)
      throw ValueError(where + "every tensor must be on one device mesh");
  }
  for (const Tensor &scalar : scalars)
    if (!scalar->meta_.shape.empty() || scalar->meta_.dtype != wire::F64)
      throw ValueError(where + (scalars.size() == 2 ? "step and lr" : "lr") +
                       " must be 0-d float64 tensors");
  size_t perParam = groups.size(), first = scalars.size();
  for (size_t i = 0; i < n; ++i) {
    const TensorMeta &p = params[i]->meta_;
    if (!isFloat(p.dtype))
      throw ValueError(where + "parameter " + std::to_string(i) + " is " +
                       dtypeName(p.dtype) + ", not a float tensor");
    for (const Placement &pl : p.placements)
      if (pl.isPartial())
        throw ValueError(where + "parameter " + std::to_string(i) +
                         " must not be Partial");
    for (size_t k = 1; k < perParam; ++k) {
      const TensorMeta &o = inputs[first + k * n + i]->meta_;
      if (o.shape != p.shape || o.dtype != p.dtype ||
          o.placements != p.placements)
        throw ValueError(
            where + "tensor " + std::to_string(k) + " of parameter " +
            std::to_string(i) + " (" + shapeStr(o.shape) + " " +
            dtypeName(o.dtype) + " " + placementsStr(o.placements) +
            ") differs from the parameter (" + shapeStr(p.shape) + " " +
            dtypeName(p.dtype) + " " + placementsStr(p.placements) +
            "): redistribute it to the parameter's placements");
    }
  }

  // The op and its result nodes go into one segment.
  size_t numResults = resultGroups * n;
  if (segment_.meshId != meshId ||
      segment_.nodes.size() + numResults > options_.maxSegmentNodes)
    flush();
  std::vector<Tensor> results;
  results.reserve(numResults);
  results.push_back(addNode(op, inputs, std::move(attrs), params[0]->meta_));
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

  // Result group g replaces the tensors of targets[g] (they exist already,
  // or, for a new state tensor, are made here with its parameter's type).
  for (size_t r = 0; r < numResults; ++r) {
    std::vector<Tensor> &target = *targets[r / n];
    if (target.size() < n)
      target.push_back(results[r]);
    else
      // The result has the target's placements: a re-pointing, no op.
      target[r % n]->storage_ = results[r]->storage_;
  }
}

void Session::fusedAdam(const Tensor &step, const Tensor &lr,
                        const std::vector<Tensor> &params,
                        const std::vector<Tensor> &grads,
                        const std::vector<Tensor> &expAvgs,
                        const std::vector<Tensor> &expAvgSqs,
                        const std::vector<Tensor> &maxExpAvgSqs,
                        const AdamHyperParameters &hyper) {
  size_t n = params.size();
  if (maxExpAvgSqs.size() != (hyper.amsgrad ? n : 0))
    throw ValueError(
        "fused_adam: expected " + std::to_string(hyper.amsgrad ? n : 0) +
        " max_exp_avg_sqs, got " + std::to_string(maxExpAvgSqs.size()));
  Attrs attrs{{"beta1", floatAttr(hyper.beta1)},
              {"beta2", floatAttr(hyper.beta2)},
              {"eps", floatAttr(hyper.eps)},
              {"weight_decay", floatAttr(hyper.weightDecay)},
              {"decoupled", intAttr(hyper.decoupled)},
              {"amsgrad", intAttr(hyper.amsgrad)},
              {"maximize", intAttr(hyper.maximize)}};
  std::vector<const std::vector<Tensor> *> groups = {&params, &grads, &expAvgs,
                                                     &expAvgSqs};
  if (hyper.amsgrad)
    groups.push_back(&maxExpAvgSqs);
  // Results in order: parameters, exp_avgs, exp_avg_sqs, max_exp_avg_sqs
  // (re-pointed in place: the vectors are the caller's tensors).
  std::vector<Tensor> p(params), m(expAvgs), v(expAvgSqs), vmax(maxExpAvgSqs);
  std::vector<std::vector<Tensor> *> targets = {&p, &m, &v};
  if (hyper.amsgrad)
    targets.push_back(&vmax);
  recordOptimizerUpdate("fused_adam", {step, lr}, groups, groups.size() - 1,
                        std::move(attrs), targets);
}

std::vector<Tensor>
Session::fusedSgd(const Tensor &lr, const std::vector<Tensor> &params,
                  const std::vector<Tensor> &grads,
                  const std::vector<Tensor> &momentumBuffers,
                  const SgdHyperParameters &hyper) {
  size_t n = params.size();
  bool momentum = hyper.momentum != 0;
  if (!momentum && (hyper.nesterov || !momentumBuffers.empty()))
    throw ValueError("fused_sgd: nesterov and momentum buffers need a "
                     "momentum");
  // No buffers yet (the first step): the op starts them from the gradients
  // and returns them.
  bool firstStep = momentum && momentumBuffers.empty();
  if (momentum && !firstStep && momentumBuffers.size() != n)
    throw ValueError("fused_sgd: expected " + std::to_string(n) +
                     " momentum buffers (or none on the first step), got " +
                     std::to_string(momentumBuffers.size()));
  Attrs attrs{{"momentum", floatAttr(hyper.momentum)},
              {"dampening", floatAttr(hyper.dampening)},
              {"weight_decay", floatAttr(hyper.weightDecay)},
              {"nesterov", intAttr(hyper.nesterov)},
              {"maximize", intAttr(hyper.maximize)},
              {"first_step", intAttr(firstStep)}};
  std::vector<const std::vector<Tensor> *> groups = {&params, &grads};
  if (momentum && !firstStep)
    groups.push_back(&momentumBuffers);
  std::vector<Tensor> p(params), buffers;
  if (!firstStep)
    buffers = momentumBuffers;
  std::vector<std::vector<Tensor> *> targets = {&p};
  if (momentum)
    targets.push_back(&buffers);
  recordOptimizerUpdate("fused_sgd", {lr}, groups, momentum ? 2 : 1,
                        std::move(attrs), targets);
  return buffers;
}

} // namespace dtorch::client
