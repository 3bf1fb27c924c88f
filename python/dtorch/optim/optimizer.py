"""Optimizer: the base class of dtorch.optim, with torch.optim.Optimizer's
param groups, state, state_dict/load_state_dict and zero_grad.

State tensors live on the workers, each with its parameter's mesh,
placements and dtype. A step records its updates as ops (in no_grad mode)
and applies them in place with `Tensor._assign`, so the step joins the
pending segment of the forward and backward and then ends it (a cheap
`_C.cut_segment()`: nothing waits). Every training step is thus one segment,
the same each time whether or not the loop fetches anything, and from the
second step on (the first creates the state) it runs one cached program.
Scalars that change from step to step (the learning rate under a schedule,
the bias corrections) are 0-d tensors on the workers, never constants of
the program text, so they do not defeat the program cache.
"""
import collections
import copy
import os

import numpy as np

from .. import _C
from ..nn._grad import grad_of, no_grad

Tensor = _C.Tensor


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _replicated_raw(t):
    return [("R", 0, "")] * len(t._placements_raw)


def _fused_on(device_type):
    """Whether a mesh of `device_type` has the multi-tensor optimizer
    kernels (fused_adam, fused_sgd): the runtime's hand-written CPU kernels,
    or on a CUDA mesh the ones the controller generates through MLIR's NVVM
    path (unless DTORCH_GENERATED_ADAM=0)."""
    if device_type == "cpu":
        return True
    return device_type == "cuda" and os.environ.get("DTORCH_GENERATED_ADAM", "1") != "0"


def _group_uses_fused(group, env_switch):
    """Whether a parameter group takes the multi-tensor update: unless it
    asks for the per-op one (``foreach=False`` or ``fused=False``;
    ``fused=True`` wins). With neither set, the environment variable
    `env_switch` set to 0 picks the per-op update (side-by-side benchmarks)."""
    if group["fused"]:
        return True
    if group["foreach"] is None and group["fused"] is None:
        return os.environ.get(env_switch, "1") != "0"
    return group["foreach"] is not False and group["fused"] is not False


def _fused_takes(pairs):
    """Whether the fused op can update these (parameter, grad) pairs: every
    mesh has the multi-tensor kernels and no parameter is Partial (a Partial
    parameter has no elementwise update)."""
    return all(_fused_on(p.device_mesh.device_type) and
               not any(k == "P" for k, _, _ in p._placements_raw) for p, _ in pairs)


def _state_placements_raw(p):
    return [("R", 0, "") if k == "P" else (k, d, o) for k, d, o in p._placements_raw]


class Optimizer:
    """Base class: subclasses implement ``step``.

    Args:
        params: an iterable of tensors, or of dicts (param groups) with a
            ``"params"`` key and per-group hyperparameters.
        defaults (dict): the hyperparameters of groups that do not set them.
    """

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = collections.defaultdict(dict)
        self.param_groups = []
        self._scalar_cache = {}
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + type(params).__name__)
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)

    def add_param_group(self, param_group):
        """Adds a group of parameters with its own hyperparameters."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params "
                                "is " + type(p).__name__)
        if len({id(p) for p in params}) != len(params):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        group = dict(param_group)
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        """Drops the gradients (``set_to_none=True``, the default) or sets
        them to zero in place."""
        for group in self.param_groups:
            for p in group["params"]:
                g = grad_of(p)
                if g is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    with no_grad():
                        g.zero_()

    def step(self, closure=None):
        """One update of every param group (`closure` re-evaluates the loss
        with grad enabled, as in torch). Subclasses define _step_group."""
        loss = None
        if closure is not None:
            from ..autograd import enable_grad
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                self._step_group(group)
        # A step ends its segment: forward, backward and update are one
        # segment, the same every step, so a loop that never fetches also
        # hits the program cache from the third step on.
        _C.cut_segment()
        return loss

    def _step_group(self, group):
        raise NotImplementedError

    # ---- helpers for the subclasses -----------------------------------------------
    def _params_with_grads(self, group):
        """(param, grad) of the group's parameters that have a gradient,
        grouped by mesh so a step cuts as few segments as possible."""
        pairs = [(p, grad_of(p)) for p in group["params"]]
        pairs = [(p, g) for p, g in pairs if g is not None]
        pairs.sort(key=lambda pg: pg[0]._mesh_id)
        out = []
        for p, g in pairs:
            if tuple(g.shape) != tuple(p.shape):
                raise ValueError(f"the gradient's shape {tuple(g.shape)} differs from its "
                                 f"parameter's {tuple(p.shape)}")
            if g._mesh_id != p._mesh_id:
                raise ValueError("a gradient lives on another device mesh than its parameter")
            if g.dtype != p.dtype:
                g = g.to(p.dtype)
            if g._placements_raw != p._placements_raw:
                # State follows the parameter's layout (a Partial gradient is reduced).
                g = _C.redistribute(g, p._mesh_id, _state_placements_raw(p), p._view)
            out.append((p, g))
        return out

    def _scalar(self, like, value, dtype=None):
        """A 0-d tensor holding `value` on `like`'s mesh (replicated); one put
        per new value, reused while the value stays the same."""
        dtype = dtype or like.dtype
        restarts = _C.restart_count()
        if getattr(self, "_scalar_restarts", 0) != restarts:
            # dtorch.restart() may have lost the cached tensors' pieces.
            self._scalar_cache.clear()
            self._scalar_restarts = restarts
        key = (like._mesh_id, len(like._placements_raw), dtype)
        hit = self._scalar_cache.get(key)
        if hit is not None and hit[0] == value:
            return hit[1]
        np_dtype = {_C.dtype.float64: np.float64, _C.dtype.float32: np.float32,
                    _C.dtype.float16: np.float16}.get(dtype)
        if np_dtype is None:  # bfloat16 (ml_dtypes is slow to import: only then)
            t = _C.cast(self._scalar(like, value, _C.dtype.float32), dtype)
        else:
            t = _C.from_numpy(np.array(value, dtype=np_dtype), like._mesh_id,
                              _replicated_raw(like), -1)
        self._scalar_cache[key] = (value, t)
        return t

    @staticmethod
    def _zeros_like(p):
        return _C.full(list(p.shape), 0.0, p.dtype, p._mesh_id, _state_placements_raw(p),
                       p._view)

    @staticmethod
    def _step_tensor(p, value=0.0):
        """The step count of a parameter: a 0-d float64 tensor on its mesh."""
        return _C.full([], float(value), _C.dtype.float64, p._mesh_id, _replicated_raw(p), -1)

    # ---- state ------------------------------------------------------------------
    def state_dict(self):
        """torch's layout: ``{"state": {index: {name: value}}, "param_groups":
        [{hyperparameters..., "params": [indices]}]}``; the values are the
        state tensors themselves (on the workers; ``.numpy()`` fetches)."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state and self.state[p]:
                    state[index[id(p)]] = dict(self.state[p])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Loads hyperparameters and state (tensors of any mesh, numpy arrays,
        torch tensors or numbers), each state tensor placed like its
        parameter. Everything is checked before anything changes."""
        from .._inplace import _as_value
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't "
                             "match the size of optimizer's group")
        id_map = {}
        for g, s in zip(groups, saved_groups):
            for p, i in zip(g["params"], s["params"]):
                id_map[i] = p
        errors = []
        for i, st in state_dict["state"].items():
            if i not in id_map:
                errors.append(f"state for parameter {i}, which no group holds")
                continue
            p = id_map[i]
            for k, v in st.items():
                shape = tuple(v.shape) if hasattr(v, "shape") else np.shape(v)
                if k != "step" and shape not in ((), tuple(p.shape)) \
                        and not isinstance(v, (int, float)):
                    errors.append(f"state '{k}' of parameter {i} has shape {shape}, the "
                                  f"parameter has {tuple(p.shape)}")
        if errors:
            raise ValueError("cannot load the optimizer state: " + "; ".join(errors))
        new_state = collections.defaultdict(dict)
        with no_grad():
            for i, st in state_dict["state"].items():
                p = id_map[i]
                for k, v in st.items():
                    if k == "step":
                        step = float(v.item()) if hasattr(v, "shape") else float(v)
                        new_state[p][k] = self._step_tensor(p, step)
                    elif isinstance(v, Tensor) or hasattr(v, "shape"):
                        value = _as_value(p, v)
                        if value.placements != p.placements:
                            value = value.redistribute(p.device_mesh, p.placements)
                        new_state[p][k] = _C.alias(value)
                    else:
                        new_state[p][k] = copy.deepcopy(v)
        for g, s in zip(groups, saved_groups):
            for k, v in s.items():
                if k != "params":
                    g[k] = copy.deepcopy(v)
        self.state = new_state
