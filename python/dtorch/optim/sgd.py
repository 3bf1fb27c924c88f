"""SGD with momentum, dampening, Nesterov and weight decay (torch's rule)."""

from .. import _C
from .optimizer import Optimizer, _fused_takes, _group_uses_fused, required

_F64 = _C.dtype.float64


class SGD(Optimizer):
    """torch.optim.SGD's update, on the workers:

        g = grad (+ weight_decay * p)            (-grad when maximize)
        buf = g on the first step, else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf      (when momentum != 0)
        p = p - lr * g

    By default (``foreach``/``fused`` not False, DTORCH_FUSED_SGD not
    "0") the update of every parameter of a group on one mesh is one op,
    ``dtensor.fused_sgd``, which each rank runs as one kernel call over all
    its pieces, written over the old values (donation); the learning rate is
    a 0-d float64 tensor, so a schedule never recompiles. Otherwise the
    update is recorded op by op, as above, with the same bits in float32
    and float64.

    State per parameter: ``momentum_buffer`` (with momentum). The first step
    makes the buffer; from the second on, each step is the same program.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    @staticmethod
    def _uses_fused(group):
        """The multi-tensor update unless the group asks for the per-op one
        or DTORCH_FUSED_SGD=0 (optimizer._group_uses_fused)."""
        return _group_uses_fused(group, "DTORCH_FUSED_SGD")

    def _step_group(self, group):
        pairs = self._params_with_grads(group)
        if not pairs:
            return
        # A Partial parameter has no elementwise update; the fused op updates
        # a parameter and its buffer in one layout (a buffer laid out apart
        # from it, as ZeRO-1 does, takes the per-op update), and starts
        # either every buffer of its parameters or none.
        if not self._uses_fused(group) or not _fused_takes(pairs):
            self._step_group_per_op(group, pairs)
            return
        by_mesh, apart = {}, []
        for p, g in pairs:
            buf = (self.state.get(p) or {}).get("momentum_buffer")
            if buf is not None and (buf._mesh_id != p._mesh_id or
                                    buf._placements_raw != p._placements_raw):
                apart.append((p, g))
            else:
                has = buf is not None
                by_mesh.setdefault((p._mesh_id, has), []).append((p, g))
        if apart:
            self._step_group_per_op(group, apart)
        for mesh_pairs in by_mesh.values():
            self._step_fused(group, mesh_pairs)

    def _step_fused(self, group, pairs):
        """Every parameter of `pairs` (one mesh; all with a momentum buffer
        or none) in one recorded op; `_C.fused_sgd_` replaces each parameter
        and buffer, and on the first step returns the new buffers."""
        params = [p for p, _ in pairs]
        momentum = group["momentum"]
        buffers = []
        if momentum != 0:
            buffers = [self.state[p].get("momentum_buffer") for p in params]
            if buffers[0] is None:
                buffers = []
        lr = self._scalar(params[0], group["lr"], _F64)
        out = _C.fused_sgd_(lr, params, [g for _, g in pairs], buffers, momentum,
                            group["dampening"], group["weight_decay"],
                            bool(group["nesterov"]), bool(group["maximize"]))
        if momentum != 0 and not buffers:
            for p, buf in zip(params, out):
                self.state[p]["momentum_buffer"] = buf

    def _step_group_per_op(self, group, pairs):
        momentum, dampening = group["momentum"], group["dampening"]
        wd, nesterov = group["weight_decay"], group["nesterov"]
        for p, g in pairs:
            d_p = -g if group["maximize"] else g
            if wd != 0:
                d_p = d_p + p * wd
            if momentum != 0:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:
                    # Values are immutable: the buffer may name d_p's value.
                    buf = _C.alias(d_p)
                    state["momentum_buffer"] = buf
                else:
                    new = buf * momentum
                    new = new + (d_p if dampening == 0 else d_p * (1 - dampening))
                    buf._assign(new)
                d_p = d_p + buf * momentum if nesterov else buf
            lr = self._scalar(p, group["lr"])
            p._assign(p - lr * d_p)
