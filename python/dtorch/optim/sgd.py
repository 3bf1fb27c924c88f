"""SGD with momentum, dampening, Nesterov and weight decay (torch's rule)."""
from .. import _C
from .optimizer import Optimizer, required


class SGD(Optimizer):
    """torch.optim.SGD's update, on the workers:

        g = grad (+ weight_decay * p)            (-grad when maximize)
        buf = g on the first step, else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf      (when momentum != 0)
        p = p - lr * g

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

    def _step_group(self, group):
        momentum, dampening = group["momentum"], group["dampening"]
        wd, nesterov = group["weight_decay"], group["nesterov"]
        for p, g in self._params_with_grads(group):
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
