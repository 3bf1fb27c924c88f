"""Adam and AdamW (torch's update rules, with torch's bias corrections)."""

from .. import _C
from .optimizer import Optimizer, _fused_takes, _group_uses_fused

_F64 = _C.dtype.float64


def _check(lr, betas, eps, weight_decay):
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def _lerp(start, end, weight):
    """torch.lerp's formula (the form it picks for the weight)."""
    if abs(weight) < 0.5:
        return start + (end - start) * weight
    return end - (end - start) * (1.0 - weight)


class Adam(Optimizer):
    """torch.optim.Adam's update, on the workers:

        step += 1
        g = grad (+ weight_decay * p for Adam)      (-grad when maximize)
        p = p * (1 - lr * weight_decay)             (AdamW only)
        m = m + (1 - beta1) * (g - m)               (torch's lerp)
        v = beta2 * v + (1 - beta2) * g * g
        v_max = max(v_max, v)                       (amsgrad)
        denom = sqrt(v or v_max) / sqrt(1 - beta2^step) + eps
        p = p - lr / (1 - beta1^step) * m / denom

    By default (``foreach``/``fused`` not False) the update of every
    parameter of a group on one mesh is one op, ``dtensor.fused_adam``,
    which each rank runs as one kernel call over all its pieces, written
    over the old values (donation); the parameters of a mesh then share one
    ``step`` tensor. ``foreach=False`` records the update op by op, as
    above, and gives the same bits in float32 and float64.

    State per parameter: ``step`` (a 0-d float64 tensor), ``exp_avg``,
    ``exp_avg_sq`` (and ``max_exp_avg_sq``), on the parameter's mesh with its
    placements. The bias corrections are computed on the workers in float64
    from ``step``, and the learning rate is a 0-d tensor, so steps stay one
    cached program under a schedule.
    """

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None):
        _check(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable,
                                      fused=fused))

    def _init_state(self, p, amsgrad):
        state = self.state[p]
        if not state:
            state["step"] = self._step_tensor(p)
            state["exp_avg"] = self._zeros_like(p)
            state["exp_avg_sq"] = self._zeros_like(p)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = self._zeros_like(p)
        return state

    @staticmethod
    def _uses_fused(group):
        """The multi-tensor update (one dtensor.fused_adam per mesh) unless
        the group asks for the per-op one or DTORCH_FOREACH=0
        (optimizer._group_uses_fused)."""
        return _group_uses_fused(group, "DTORCH_FOREACH")

    def _step_group(self, group):
        pairs = self._params_with_grads(group)
        # The runtime's hand-written fused_adam kernel is a CPU kernel; on a
        # CUDA mesh the controller generates one through MLIR's NVVM path
        # (unless DTORCH_GENERATED_ADAM=0). A Partial parameter has no
        # elementwise update.
        if not self._uses_fused(group) or not _fused_takes(pairs):
            self._step_group_per_op(group, pairs)
            return
        # The fused op updates a parameter and its state in one layout: a
        # parameter whose state was laid out apart from it (ZeRO-1 shards
        # the state of replicated parameters) takes the per-op update.
        by_mesh, apart = {}, []
        for p, g in pairs:
            if self._state_laid_out_apart(p):
                apart.append((p, g))
            else:
                by_mesh.setdefault(p._mesh_id, []).append((p, g))
        if apart:
            self._own_step_counts(apart)
            self._step_group_per_op(group, apart)
        for mesh_pairs in by_mesh.values():
            self._step_fused(group, mesh_pairs)

    def _state_laid_out_apart(self, p):
        state = self.state.get(p) or {}
        return any(key in state and (state[key]._mesh_id != p._mesh_id or
                                     state[key]._placements_raw != p._placements_raw)
                   for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"))

    def _own_step_counts(self, pairs):
        """The per-op update advances each parameter's own step count: a
        count the fused update shared among parameters is copied first."""
        shared = {}
        for p in self.state:
            step = self.state[p].get("step")
            if step is not None:
                shared[id(step)] = shared.get(id(step), 0) + 1
        for p, _ in pairs:
            step = self.state.get(p, {}).get("step")
            if step is not None and shared[id(step)] > 1:
                shared[id(step)] -= 1
                self.state[p]["step"] = step * 1.0

    def _step_fused(self, group, pairs):
        """Every parameter of `pairs` (one mesh) in one recorded op: the
        step count is one tensor that the parameters share, incremented
        once; `_C.fused_adam_` replaces each parameter and its state."""
        beta1, beta2 = group["betas"]
        amsgrad = group["amsgrad"]
        params = [p for p, _ in pairs]
        step = None
        for p in params:
            if "step" in self.state[p]:
                step = self.state[p]["step"]
                break
        if step is None:
            step = self._step_tensor(params[0])
        states = []
        for p in params:
            state = self.state[p]
            fresh = not state
            # The parameters of one mesh count their steps together (a
            # loaded state dict gives each the same count).
            state["step"] = step
            if fresh:
                state["exp_avg"] = self._zeros_like(p)
                state["exp_avg_sq"] = self._zeros_like(p)
            if amsgrad and "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = self._zeros_like(p)
            states.append(state)
        step._assign(step + 1.0)
        lr = self._scalar(params[0], group["lr"], _F64)
        _C.fused_adam_(step, lr, params, [g for _, g in pairs],
                       [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                       [s["max_exp_avg_sq"] for s in states] if amsgrad else [],
                       beta1, beta2, group["eps"], group["weight_decay"], self._decoupled,
                       amsgrad, group["maximize"])

    def _step_group_per_op(self, group, pairs):
        beta1, beta2 = group["betas"]
        eps, wd, amsgrad = group["eps"], group["weight_decay"], group["amsgrad"]
        for p, g in pairs:
            state = self._init_state(p, amsgrad)
            if group["maximize"]:
                g = -g
            step = state["step"]
            step._assign(step + 1.0)
            lr = self._scalar(p, group["lr"], _F64)
            # The 0-d scalars first, then the parameter's elementwise chain
            # without a 0-d op inside it: --rank-fuse-elementwise makes the
            # whole update of p, exp_avg and exp_avg_sq one generated kernel,
            # which writes them over their donated old values.
            bias_correction1 = 1.0 - beta1 ** step
            bias_correction2_sqrt = (1.0 - beta2 ** step).sqrt()
            step_size = (lr / bias_correction1).to(p.dtype)
            bias_correction2_sqrt = bias_correction2_sqrt.to(p.dtype)
            decay = (1.0 - lr * wd).to(p.dtype) if wd != 0 and self._decoupled else None
            if wd != 0:
                if self._decoupled:
                    p._assign(p * decay)
                else:
                    g = g + p * wd
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m._assign(_lerp(m, g, 1.0 - beta1))
            v._assign(v * beta2 + g * g * (1.0 - beta2))
            if amsgrad:
                vmax = state["max_exp_avg_sq"]
                vmax._assign(vmax.maximum(v))
                v = vmax
            denom = v.sqrt() / bias_correction2_sqrt + eps
            p._assign(p - step_size * (m / denom))


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW; default
    weight_decay 0.01): ``p = p * (1 - lr * weight_decay)`` before the Adam
    update."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused)
