"""A mixture-of-experts layer: top-k routing with softmax gating, a capacity
per expert with token dropping, and the load-balancing auxiliary loss."""
import math

import dtorch

from .. import functional as F
from ..parameter import Parameter
from .linear import Linear
from .module import Module


class MoE(Module):
    """Top-k routed experts (two-layer GELU MLPs), as GShard and Switch.

    For tokens ``x [..., d_model]``: the router's softmax gives each token a
    probability per expert; each token goes to its `top_k` most probable
    experts with those probabilities renormalized to sum to one as gates.
    Every expert takes at most ``capacity = ceil(capacity_factor * tokens *
    top_k / n_experts)`` assignments, first choices of all tokens before
    second choices, tokens in order; the others are dropped (a dropped
    assignment adds nothing; the layer's caller keeps its residual). The
    output is the gate-weighted sum of the experts' outputs. `aux_loss`
    (after a forward) is Switch's load-balancing loss ``n_experts *
    sum_e f_e * P_e`` (f_e: the fraction of assignments routed to e, P_e:
    the mean router probability of e), to add to the training loss.

    The experts' weights are stacked, ``w1 [E, d_model, d_ff]``,
    ``w2 [E, d_ff, d_model]`` (and biases), so `ExpertParallel` can shard
    them on an ``"ep"`` dim (``Shard(0)``). The layer then splits the
    tokens into one block per ``"ep"`` position and dispatches and combines
    them with `dtorch.distributed.all_to_all_v`: a fixed slot segment per
    (block, expert) of ``min(capacity, tokens / ep)`` rows, of which only
    the filled rows move (the routing counts them on the ranks).

    Args:
        d_model (int), d_ff (int): the expert MLP's sizes.
        n_experts (int): experts.
        top_k (int): experts per token (at most n_experts).
        capacity_factor (float): capacity per expert relative to an even
            split of the assignments.

    Raises:
        ValueError: top_k larger than n_experts (or below 1), with both.

    Example:
        >>> import dtorch
        >>> from dtorch.nn import MoE
        >>> moe = MoE(8, 16, n_experts=4, top_k=2)
        >>> moe(dtorch.randn(6, 8)).shape, moe.aux_loss.shape
        ((6, 8), ())
        >>> MoE(8, 16, n_experts=4, top_k=5)
        Traceback (most recent call last):
        ...
        ValueError: MoE: top_k = 5 is larger than the 4 experts
    """

    def __init__(self, d_model, d_ff, n_experts, top_k=2, capacity_factor=1.25):
        super().__init__()
        if top_k > n_experts:
            raise ValueError(f"MoE: top_k = {top_k} is larger than the {n_experts} experts")
        if top_k < 1:
            raise ValueError(f"MoE: top_k must be at least 1, got {top_k}")
        self.d_model, self.d_ff = d_model, d_ff
        self.n_experts, self.top_k, self.capacity_factor = n_experts, top_k, capacity_factor
        self.router = Linear(d_model, n_experts, bias=False)
        bound1, bound2 = 1 / math.sqrt(d_model), 1 / math.sqrt(d_ff)
        self.w1 = Parameter(dtorch.rand(n_experts, d_model, d_ff) * (2 * bound1) - bound1)
        self.b1 = Parameter(dtorch.zeros(n_experts, d_ff))
        self.w2 = Parameter(dtorch.rand(n_experts, d_ff, d_model) * (2 * bound2) - bound2)
        self.b2 = Parameter(dtorch.zeros(n_experts, d_model))
        self.aux_loss = None

    def capacity(self, n_tokens):
        """Assignments each expert takes for `n_tokens` tokens.

        Example:
            >>> from dtorch.nn import MoE
            >>> MoE(4, 4, n_experts=4, top_k=2, capacity_factor=1.0).capacity(6)
            3
        """
        return max(1, math.ceil(self.capacity_factor * n_tokens * self.top_k / self.n_experts))

    def _expert_parallel(self):
        """(mesh, root mesh dim, size) of the mesh dim that splits the
        experts (``Shard(0)`` of ``w1``, as `ExpertParallel` lays them out),
        or None when no mesh dim of more than one position does."""
        from ...placement_types import Shard
        w = self.w1
        mesh = w.device_mesh
        if mesh is None:
            return None
        for i, p in enumerate(w.placements):
            if isinstance(p, Shard) and p.dim == 0 and mesh.shape[i] > 1 \
                    and len(mesh._groups[i]) == 1:
                return mesh, mesh._groups[i][0], mesh.shape[i]
        return None

    def forward(self, x):
        """The routed experts' output for tokens ``x [..., d_model]`` (same
        shape); sets `aux_loss`.

        Example:
            >>> import dtorch
            >>> from dtorch.nn import MoE
            >>> MoE(4, 8, n_experts=2, top_k=1)(dtorch.randn(2, 3, 4)).shape
            (2, 3, 4)
        """
        lead = tuple(x.shape[:-1])
        n = math.prod(lead)
        e, k, d = self.n_experts, self.top_k, self.d_model
        c = self.capacity(n)
        m = k * n
        x = x.reshape(n, d)
        probs = F.softmax(self.router(x), -1)  # [N, E]
        top = dtorch.topk(probs, k, dim=-1)
        gates = top.values / top.values.sum(-1, keepdim=True)  # [N, k]
        # Assignments slot-major (every token's first choice, then the
        # second ...): m = j * N + n.
        choice = top.indices.transpose(0, 1).reshape(m)  # [M]
        chosen = F.one_hot(choice, e).float()  # [M, E]
        # Position of each assignment in its expert's queue: a prefix sum.
        before = dtorch.tril(dtorch.ones(m, m, device_mesh=chosen.device_mesh))
        position = (before @ chosen - 1.0) * chosen  # [M, E], 0 where not chosen
        kept = chosen * (position < c).float()
        fraction = chosen.detach().mean(0)  # [E]
        self.aux_loss = (fraction * probs.mean(0)).sum() * float(e)
        ep = self._expert_parallel()
        if ep is not None and n % ep[2] == 0:
            out = self._exchanged(x, kept, gates, ep)
        else:
            out = self._gathered(x, kept, position, gates, c)
        return out.reshape(*lead, d)

    def _gathered(self, x, kept, position, gates, c):
        """Experts that no mesh dim splits (or tokens that do not split over
        the experts' ranks): each expert's queue is a [capacity, d] buffer
        filled by a one-hot matmul, the compiler's layouts decide the rest."""
        e, k, d = self.n_experts, self.top_k, self.d_model
        n = x.shape[0]
        m = k * n
        slot = dtorch.clamp(position.sum(-1), 0, c - 1).long()  # [M]
        dispatch = kept.reshape(m, e, 1) * F.one_hot(slot, c).float().reshape(m, 1, c)
        flat = dispatch.reshape(m, e * c)  # [M, E*C]
        tokens = dtorch.cat([x] * k, 0)  # [M, d]
        expert_in = (flat.transpose(0, 1) @ tokens).reshape(e, c, d)
        expert_out = self._experts(expert_in)  # [E, C, d]
        weights = flat * gates.transpose(0, 1).reshape(m, 1)
        return (weights @ expert_out.reshape(e * c, d)).reshape(k, n, d).sum(0)

    def _experts(self, expert_in):
        """The stacked expert MLPs on ``[E, rows, d_model]``."""
        e, d = self.n_experts, self.d_model
        h = F.gelu(dtorch.bmm(expert_in, self.w1) + self.b1.reshape(e, 1, self.d_ff))
        return dtorch.bmm(h, self.w2) + self.b2.reshape(e, 1, d)

    def _exchanged(self, x, kept, gates, ep):
        """Experts split over `ep` = (mesh, root dim, P positions), tokens
        split into P blocks of N/P: every block routes its kept assignments
        into one slot segment of ``rows = min(capacity, N/P)`` rows per
        (destination position, local expert), and `all_to_all_v` moves only
        the filled rows there (dispatch) and back (combine).
        docs/guide/parallelism.md, "Expert parallelism", says why."""
        from ...autograd import _exchange_layout, all_to_all_v, transposed_counts
        _, axis, p = ep
        e, k, d = self.n_experts, self.top_k, self.d_model
        n = x.shape[0]
        nl = n // p  # tokens per block
        el = e // p  # experts per position
        assigned = k * nl  # assignments per block, (choice j, token) order
        rows = min(self.capacity(n), nl)  # a block sends an expert <= both
        mesh = kept.device_mesh
        # Per block: which expert keeps each assignment, and its gate.
        kept_b = (kept.reshape(k, p, nl, e).transpose(0, 1)
                  .reshape(p, assigned, e))  # [P, A, E]
        gates_b = (gates.transpose(0, 1).reshape(k, p, nl).transpose(0, 1)
                   .reshape(p, assigned, 1))  # [P, A, 1]
        # Each block's routing on its own rank before it grows into one-hot
        # slot matrices (E * rows times larger), so those are built in place.
        kept_b = _exchange_layout(kept_b, axis, False)
        gates_b = _exchange_layout(gates_b, axis, True)
        # The slot of a kept assignment in its (block, expert) segment: the
        # kept assignments of that block to that expert before it.
        before = dtorch.tril(dtorch.ones(p, assigned, assigned, device_mesh=mesh))
        slot = dtorch.clamp(((dtorch.bmm(before, kept_b) - 1.0) * kept_b).sum(-1),
                            0, rows - 1).long()  # [P, A]
        place = (kept_b.reshape(p, assigned, e, 1)
                 * F.one_hot(slot, rows).float().reshape(p, assigned, 1, rows)
                 ).reshape(p, assigned, e * rows)  # [P, A, E*rows]
        counts = kept_b.sum(1).long()  # [P, E]: segments (position, local expert)
        tokens = dtorch.cat([x.reshape(p, nl, d)] * k, 1)  # [P, A, d]
        send = dtorch.bmm(place.transpose(1, 2), tokens)  # [P, E*rows, d]
        received = all_to_all_v(send, counts, axis)  # block q: (source, local expert)
        expert_in = (received.reshape(p, p, el, rows, d).transpose(1, 2)
                     .reshape(e, p * rows, d))
        expert_out = self._experts(expert_in)  # [E, P*rows, d]
        back = (expert_out.reshape(p, el, p, rows, d).transpose(1, 2)
                .reshape(p, e * rows, d))
        returned = all_to_all_v(back, transposed_counts(counts), axis)
        out = dtorch.bmm(place * gates_b, returned)  # [P, A, d]
        return out.reshape(p, k, nl, d).sum(1).reshape(n, d)
