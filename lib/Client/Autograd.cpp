//===- Autograd.cpp - the client's autograd tape --------------------------===//
//
// Every op call goes through Session::addNode; when grad mode is on and an
// operand that requires grad is one the op can differentiate (its formula
// in the op registry is not ""), the result requires grad and owns a
// GradRecord of the op: torch's grad_fn. python/dtorch/autograd.py walks
// these records backwards and evaluates the registry's gradient formulas,
// which record their ops into the same pending segment as the forward.
//
//===----------------------------------------------------------------------===//
#include "SessionSupport.h"
#include "dtorch/Client/RecordPool.h"
#include "dtorch/OpRegistry.h"

namespace dtorch::client {
namespace {

thread_local bool tGradEnabled = true;

/// Whether operand `k` (among the tensors, the scalar slot excluded) of `op`
/// has a gradient formula. An op that declares no formulas counts as
/// differentiable, so backward() names it instead of silently skipping it.
bool differentiable(const OpInfo *info, size_t k, int scalarIndex) {
  if (!info || info->gradient.empty())
    return true;
  size_t pos =
      info->numOperands < 0
          ? 0
          : k + (scalarIndex >= 0 && static_cast<size_t>(scalarIndex) <= k);
  return pos < info->gradient.size() && info->gradient[pos][0] != '\0';
}

} // namespace

bool gradEnabled() { return tGradEnabled; }
void setGradEnabled(bool enabled) { tGradEnabled = enabled; }

void releaseGradGraph(std::shared_ptr<GradRecord> record) {
  // Dropping the last reference of a record drops its inputs, whose
  // destructors land here again: collect them instead of recursing.
  thread_local bool active = false;
  thread_local std::vector<std::shared_ptr<GradRecord>> pending;
  if (!record)
    return;
  pending.push_back(std::move(record));
  if (active)
    return;
  active = true;
  while (!pending.empty()) {
    std::shared_ptr<GradRecord> r = std::move(pending.back());
    pending.pop_back();
    r.reset();
  }
  active = false;
}

void Session::recordGrad(const Tensor &result, const std::string &op,
                         TensorList inputs, const Attrs &attrs,
                         const ScalarOperand &scalar) {
  bool any = false;
  for (const Tensor &t : inputs)
    any |= t->requiresGrad;
  if (!any || !isFloat(result->meta().dtype))
    return;
  const OpInfo *info = findOp(op);
  bool needed = false;
  for (size_t k = 0; k < inputs.size() && !needed; ++k)
    needed = inputs[k]->requiresGrad && differentiable(info, k, scalar.index);
  if (!needed)
    return;
  auto record = std::allocate_shared<GradRecord>(PoolAllocator<GradRecord>());
  record->op = op;
  record->inputs.assign(inputs.begin(), inputs.end());
  record->attrs = attrs;
  record->scalarIndex = scalar.index;
  record->scalarValue = scalar.value;
  result->requiresGrad = true;
  result->gradFn = std::move(record);
}

// Another name for x's value (the same storage): no op, no history.
Tensor Session::detach(const Tensor &x) { return TensorImpl::aliasOf(*x); }

} // namespace dtorch::client
