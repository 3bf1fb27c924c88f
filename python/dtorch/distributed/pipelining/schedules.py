"""Pipeline schedules: GPipe and 1F1B over stages that each run on their own
ranks.

Stage ``s`` lives on the sub-mesh at position ``s`` of the ``"pp"`` dim: a
mesh of its own over those ranks, with the parent's other dims (so a stage
may be data or tensor parallel inside). Its parameters are moved there once,
when the pipeline is built. `PipelineSchedule.step` splits the batch into
microbatches and records every microbatch's forward and backward, stage by
stage, in the order of the schedule; the single controller sends each
stage's ops to that stage's ranks only, and the activations (forward) and
their gradients (backward) move between neighbouring stages with
``dtensor.send``/``dtensor.recv`` pairs, issued on the communication
stream: the send is recorded with the action that makes the value
(`Session::sendToMesh`) and the receive with the action that reads it
(`Session::receiveFromMesh`), so each rank's queue holds its own actions in
the schedule's order and no receive waits ahead of work that does not need
it. Ranks of different stages run their queues at the
same time, so stage s works on microbatch i + 1 while stage s + 1 works on
microbatch i: the order in which the ops are recorded is the schedule.

A stage's input is a fresh leaf (the received activation, detached), so each
stage's backward is recorded on its own: ``out.backward(grad)`` with the
gradient received from the next stage, and the leaf's gradient goes back to
the previous one. Parameter gradients accumulate over the microbatches; the
loss of a microbatch is scaled by ``1 / n_microbatches``, so the gradients
and the returned loss are those of the whole batch (the mean of the
microbatch losses), as in an unpipelined run.
"""
import numpy as np

from ... import _C
from ..._creation import distribute_tensor
from ...device_mesh import DeviceMesh
from ...placement_types import Replicate, Shard, from_raw
from .. import _layout

__all__ = ["pipeline", "PipelineSchedule", "split_by_parameters"]

SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B")


def _lane_orders(schedule, n_stages, n_microbatches, n_ranks):
    """Each rank's actions, ("F" or "B", stage, microbatch), in its own
    order. Stage k runs on rank k % n_ranks (one stage per rank but for
    the interleaved schedule, which gives each rank n_stages / n_ranks)."""
    m = n_microbatches
    orders = []
    for r in range(n_ranks):
        if schedule == "GPipe":
            order = [("F", r, i) for i in range(m)] + [("B", r, i) for i in range(m)]
        else:
            if schedule == "1F1B":
                forwards = [(r, i) for i in range(m)]
                backwards = forwards
                # enough forwards to fill the pipeline below this rank
                warmup = min(n_ranks - r - 1, m)
            else:  # Interleaved1F1B: v chunks per rank, microbatches in groups of p
                v, p = n_stages // n_ranks, n_ranks
                forwards = [(c * p + r, g * p + j) for g in range(m // p)
                            for c in range(v) for j in range(p)]
                backwards = [(c * p + r, g * p + j) for g in range(m // p)
                             for c in reversed(range(v)) for j in range(p)]
                warmup = min((p - r - 1) * 2 + (v - 1) * p, len(forwards))
            # then one backward after each forward, then the last backwards
            order = [("F",) + a for a in forwards[:warmup]]
            f, b = warmup, 0
            while f < len(forwards):
                order.append(("F",) + forwards[f])
                f += 1
                order.append(("B",) + backwards[b])
                b += 1
            order += [("B",) + a for a in backwards[b:]]
        orders.append(order)
    return orders


def recording_order(schedule, n_stages, n_microbatches, n_ranks=None):
    """The global order in which a schedule's actions are recorded: in time
    steps, each rank takes its next action when its inputs exist (the
    forward of the stage before, or the backward of the stage after), so
    every rank's own order is the schedule's.

    Args:
        schedule (str): "GPipe", "1F1B" or "Interleaved1F1B".
        n_stages (int): stages; n_ranks of them unless interleaved.
        n_microbatches (int): microbatches per batch.
        n_ranks (int, optional): positions of the pp dim (n_stages when
            omitted); stage k runs at position k % n_ranks.

    Returns:
        list[tuple[str, int, int]]: ("F" or "B", stage, microbatch).

    Example:
        >>> from dtorch.distributed.pipelining.schedules import recording_order
        >>> [(a, s, i) for a, s, i in recording_order("1F1B", 2, 2)]
        [('F', 0, 0), ('F', 1, 0), ('F', 0, 1), ('B', 1, 0), ('B', 0, 0), ('F', 1, 1), ('B', 1, 1), ('B', 0, 1)]
    """
    n_ranks = n_stages if n_ranks is None else n_ranks
    orders = _lane_orders(schedule, n_stages, n_microbatches, n_ranks)
    done = set()
    position = [0] * n_ranks
    out = []
    total = sum(len(o) for o in orders)
    while len(out) < total:
        progressed = False
        for r in range(n_ranks):
            if position[r] >= len(orders[r]):
                continue
            kind, s, i = orders[r][position[r]]
            if kind == "F":
                ready = s == 0 or ("F", s - 1, i) in done
            else:
                ready = ("F", s, i) in done and (s == n_stages - 1 or ("B", s + 1, i) in done)
            if ready:
                done.add((kind, s, i))
                out.append((kind, s, i))
                position[r] += 1
                progressed = True
        if not progressed:  # pragma: no cover - the schedules above never stall
            raise RuntimeError(f"pipeline schedule {schedule} stalled")
    return out


def _stage_meshes(pp_mesh):
    """One mesh per position of the pp dim: the ranks there, with the root
    mesh's other dims (names kept)."""
    root = pp_mesh._root
    axis = pp_mesh._groups[0][0]
    names = [n for a, n in enumerate(root.mesh_dim_names or ()) if a != axis]
    meshes = []
    for s in range(pp_mesh.size()):
        ranks = np.take(root._ranks, s, axis=axis)
        meshes.append(DeviceMesh(pp_mesh.device_type, ranks,
                                 mesh_dim_names=tuple(names) if names and ranks.ndim else None))
    return meshes


def _placements_on(t, stage_mesh, pp_root, pp_axis):
    """t's placements on a stage mesh: its placements on the pp root's other
    dims when it lives on that root (a Shard on pp itself becomes
    Replicate), else Replicate everywhere."""
    if t._mesh_id != pp_root._mesh_id:
        return [Replicate()] * stage_mesh.ndim
    raw = [tuple(r) for a, r in enumerate(t._placements_raw) if a != pp_axis]
    out = [from_raw(r) for r in raw]
    return out if len(out) == stage_mesh.ndim else [Replicate()] * stage_mesh.ndim


class PipelineSchedule:
    """Runs stage modules as a pipeline over the positions of a ``"pp"``
    mesh dim; made by `pipeline`.

    Attributes:
        stages (list[nn.Module]): the stages, stage s on `stage_meshes`[s].
        stage_meshes (list[DeviceMesh]): each stage's mesh (the ranks at
            its pp position, the parent's other dims; interleaved stages
            k and k + p share one).
        n_microbatches (int), schedule (str): as given.

    Example:
        >>> import numpy as np
        >>> import dtorch
        >>> from dtorch import nn
        >>> from dtorch.distributed.pipelining import pipeline
        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        >>> pp = pipeline([nn.Linear(4, 8), nn.Linear(8, 2)], mesh["pp"], n_microbatches=2)
        >>> [m.mesh.tolist() for m in pp.stage_meshes]
        [[0, 1], [2, 3]]
        >>> loss = pp.step(np.ones((4, 4), np.float32), target=np.zeros((4, 2), np.float32),
        ...                loss_fn=dtorch.nn.functional.mse_loss)
        >>> loss.shape, pp.stages[1].weight.grad.shape
        ((), (2, 8))
    """

    def __init__(self, stages, mesh, n_microbatches, schedule):
        self.stages = list(stages)
        self.n_microbatches = n_microbatches
        self.schedule = schedule
        positions = _stage_meshes(mesh)
        self.n_ranks = len(positions)
        self.stage_meshes = [positions[k % self.n_ranks] for k in range(len(self.stages))]
        root, axis = mesh._root, mesh._groups[0][0]
        for stage, stage_mesh in zip(self.stages, self.stage_meshes):
            for t in list(stage.parameters()) + [b for b in stage.buffers() if b is not None]:
                if t._mesh_id == stage_mesh._mesh_id:
                    continue
                _layout.relayout_(t, stage_mesh, _placements_on(t, stage_mesh, root, axis))
        self._root, self._axis = root, axis
        # When each move's receive is recorded: "ahead" (default: at the end
        # of the receiving rank's action before the one that reads it, or
        # at use when the send comes later), "at_use" (with the action that
        # reads it) or "with_send" (right after its send, how moves were
        # recorded before). The last two are kept for
        # bench/pipeline_bench.py, which measures them side by side.
        self._receive = "ahead"

    def _microbatches(self, value, what, stage_mesh):
        """`value` (numpy array or tensor) cut into n_microbatches along
        dim 0, each placed on `stage_mesh`."""
        if hasattr(value, "_mesh_id"):
            placements = _placements_on(value, stage_mesh, self._root, self._axis)
            value = value.numpy()
        else:
            value = np.asarray(value)
            placements = None
        if value.ndim == 0:
            raise ValueError(f"pipeline.step: {what} has no batch dim to split")
        batch, m = value.shape[0], self.n_microbatches
        if batch % m:
            raise ValueError(f"pipeline.step: {what}'s batch of {batch} does not split into "
                             f"{m} microbatches ({batch} % {m} = {batch % m})")
        if placements is None:
            # A numpy batch is split over a "dp" dim of the stage (data
            # parallel inside the stage) when it divides, else replicated.
            names = stage_mesh.mesh_dim_names or ()
            placements = [Shard(0) if n == "dp" and (batch // m) % stage_mesh.shape[k] == 0
                          else Replicate() for k, n in enumerate(names)] \
                or [Replicate()] * stage_mesh.ndim
        return [distribute_tensor(np.ascontiguousarray(piece), stage_mesh, placements)
                for piece in np.split(value, m, axis=0)]

    def step(self, x, target=None, loss_fn=None):
        """Forward and backward of every microbatch, in the schedule's order.

        Args:
            x: the batch (numpy array or tensor), split along dim 0. A
                tensor keeps its placements on the stage's dims; a numpy
                batch is ``Shard(0)`` on a stage dim named ``"dp"`` (when
                the microbatch divides) and replicated on the others.
            target: the targets, split alike (given to `loss_fn`).
            loss_fn: ``loss_fn(output, target)`` on the last stage's output
                (a mean over the microbatch, as torch's losses); without it
                the last stage's output is the loss.

        Returns:
            Tensor: the batch loss (the mean of the microbatch losses), a
            0-d tensor on the last stage's mesh. The parameters' gradients
            are accumulated (``zero_grad`` between steps, as usual).

        Raises:
            ValueError: the batch (or target) does not split into
                n_microbatches, with the numbers.

        Example:
            >>> import numpy as np
            >>> import dtorch
            >>> from dtorch import nn
            >>> from dtorch.distributed.pipelining import pipeline
            >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
            >>> pp = pipeline([nn.Linear(3, 3), nn.Linear(3, 1)], mesh["pp"], 2, schedule="GPipe")
            >>> pp.step(np.ones((3, 3), np.float32), np.zeros((3, 1), np.float32),
            ...         dtorch.nn.functional.mse_loss)
            Traceback (most recent call last):
            ...
            ValueError: pipeline.step: x's batch of 3 does not split into 2 microbatches (3 % 2 = 1)
        """
        p, m = len(self.stages), self.n_microbatches
        first, last = self.stage_meshes[0], self.stage_meshes[-1]
        xs = self._microbatches(x, "x", first)
        ts = self._microbatches(target, "target", last) if target is not None else [None] * m
        inputs = [[None] * m for _ in range(p)]  # each stage's input per microbatch
        outputs = [[None] * m for _ in range(p)]  # its output (the last: the loss)
        grads = [[None] * m for _ in range(p)]  # the gradient of its output
        inputs[0] = xs
        scale = 1.0 / m
        losses = []
        meshes = [sm._mesh_id for sm in self.stage_meshes]
        n_ranks = self.n_ranks
        order = recording_order(self.schedule, p, m, n_ranks)
        # A move's send is recorded with the action that makes the value;
        # its receive is recorded once the send exists, at the end of the
        # receiving rank's action before the one that reads it. A rank runs
        # its queue and its communication stream in order: a receive
        # recorded with its send (at the sender's time) would wait there
        # ahead of the receiver's work that does not need it (1F1B's
        # backward behind the next activation, and the backward's send
        # behind that receive); one recorded at use leaves the message's
        # latency exposed. One action ahead, it waits behind the sends of
        # the action before, while the rank has nothing else to run. Each
        # stage boundary and direction has a tag of its own, so a channel
        # carries one boundary's messages, sent and received in microbatch
        # order.
        fwd_tag = lambda s: 2 * s  # noqa: E731 - stage s -> s + 1
        bwd_tag = lambda s: 2 * s + 1  # noqa: E731 - stage s -> s - 1
        received = {}  # (kind, stage, microbatch) -> its received input

        def incoming(kind, s, i):
            """(token, mesh, tag) of the move an action reads, None when it
            reads none or its send is not recorded yet."""
            if kind == "F" and s > 0 and inputs[s][i] is not None:
                return inputs[s][i], meshes[s], fwd_tag(s - 1)
            if kind == "B" and s < p - 1 and grads[s][i] is not None:
                return grads[s][i], meshes[s], bwd_tag(s + 1)
            return None

        def receive(action):
            if action not in received:
                token, mesh_id, tag = incoming(*action)
                received[action] = _C.receive_from_mesh(token, mesh_id, tag)
            return received.pop(action)

        next_action = {}  # an action -> the next action of its rank
        last = {}
        for action in order:
            r = action[1] % n_ranks
            if r in last:
                next_action[last[r]] = action
            last[r] = action
        for kind, s, i in order:
            if kind == "F":
                inp = inputs[s][i]
                if s > 0:
                    if self._receive != "with_send":
                        inp = receive(("F", s, i))
                    inp = inp.detach().requires_grad_()
                    inputs[s][i] = inp
                out = self.stages[s](inp)
                if s < p - 1:
                    inputs[s + 1][i] = _C.send_to_mesh(out.detach(), meshes[s + 1], fwd_tag(s))
                    if self._receive == "with_send":
                        inputs[s + 1][i] = _C.receive_from_mesh(
                            inputs[s + 1][i], meshes[s + 1], fwd_tag(s))
                    outputs[s][i] = out
                else:
                    loss = loss_fn(out, ts[i]) if loss_fn is not None else out
                    if loss.ndim != 0:
                        raise ValueError(f"pipeline.step: the loss must be a 0-d tensor, got shape "
                                         f"{tuple(loss.shape)}")
                    outputs[s][i] = loss * scale
                    losses.append(outputs[s][i].detach())
            else:
                if s == p - 1:
                    outputs[s][i].backward()
                else:
                    g = grads[s][i]
                    if self._receive != "with_send":
                        g = receive(("B", s, i))
                    outputs[s][i].backward(g)
                if s > 0:
                    g = inputs[s][i].grad
                    grads[s - 1][i] = _C.send_to_mesh(g, meshes[s - 1], bwd_tag(s))
                    if self._receive == "with_send":
                        grads[s - 1][i] = _C.receive_from_mesh(
                            grads[s - 1][i], meshes[s - 1], bwd_tag(s))
                # What the microbatch kept alive on this stage goes now (1F1B
                # holds fewer activations than GPipe this way).
                outputs[s][i] = inputs[s][i] = grads[s][i] = None
            following = next_action.get((kind, s, i))
            if (self._receive == "ahead" and following is not None
                    and following not in received and incoming(*following) is not None):
                receive_ahead = incoming(*following)
                received[following] = _C.receive_from_mesh(*receive_ahead)
        total = losses[0]
        for loss in losses[1:]:
            total = total + loss
        return total


def split_by_parameters(module, n_stages):
    """Cuts a Sequential into `n_stages` Sequentials of consecutive children
    whose largest parameter count is as small as it can be (each stage gets
    at least one child; among equal cuts, children without parameters stay
    with the child before them).

    Args:
        module (nn.Sequential): the model; its children are kept (not
            copied), in order.
        n_stages (int): how many stages.

    Returns:
        list[nn.Sequential]

    Raises:
        ValueError: fewer children than stages, with both numbers.

    Example:
        >>> from dtorch import nn
        >>> from dtorch.distributed.pipelining.schedules import split_by_parameters
        >>> model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 2))
        >>> [len(s) for s in split_by_parameters(model, 2)]   # 72 + 0 | 72 + 18 parameters
        [2, 2]
    """
    from ...nn import Sequential
    children = list(module.children())
    if len(children) < n_stages:
        raise ValueError(f"split_by_parameters: {len(children)} children cannot make "
                         f"{n_stages} stages (one child at least per stage)")
    sizes = [sum(int(np.prod(p.shape)) for p in c.parameters()) for c in children]
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    n = len(children)
    # best[k][j]: the smallest largest stage of children[:j] cut into k stages.
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(n_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0
    for k in range(1, n_stages + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                cost = max(best[k - 1][i], prefix[j] - prefix[i])
                # On a tie the later cut: a layer without parameters (an
                # activation) stays with the layer before it.
                if cost <= best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    bounds, j = [], n
    for k in range(n_stages, 0, -1):
        bounds.append((cut[k][j], j))
        j = cut[k][j]
    return [Sequential(*children[a:b]) for a, b in reversed(bounds)]


def pipeline(stages, mesh, n_microbatches, schedule="1F1B"):
    """A pipeline of `stages` over the positions of the 1-D mesh `mesh`
    (``mesh["pp"]``), as the API's ``dtorch.distributed.pipelining.pipeline``.

    Stage s runs on the ranks at position s (with the parent mesh's other
    dims: a stage may be DP x TP); its parameters and buffers are moved
    there now, in place (the Parameter objects stay, so an optimizer made
    before or after sees them). To make a stage tensor parallel as well,
    parallelize it afterwards on its mesh (``parallelize_module(pp.stages[s],
    pp.stage_meshes[s]["tp"], plan)``). Call `PipelineSchedule.step` per
    batch.

    Args:
        stages (list[nn.Module] or nn.Sequential): one module per position
            of the dim (stage s + 1 takes stage s's output), or a Sequential
            to cut into as many stages by parameter count
            (`split_by_parameters`).
        mesh (DeviceMesh): a 1-D view of a root mesh (``mesh["pp"]``).
        n_microbatches (int): how many microbatches each batch is split into.
        schedule (str): ``"GPipe"`` (every forward, then every backward),
            ``"1F1B"`` (after a warm-up, one backward after each forward:
            fewer activations alive) or ``"Interleaved1F1B"`` (v stages per
            position, stage k at position k % p, microbatches in groups of
            p: a smaller bubble; needs v * p stages, v >= 2, and
            n_microbatches divisible by p).

    Returns:
        PipelineSchedule

    Raises:
        ValueError: the number of stages differs from the dim's positions,
            the mesh is not a 1-D view, n_microbatches is below 1, or the
            schedule is unknown, each with the numbers involved.

    Example:
        >>> import dtorch
        >>> from dtorch import nn
        >>> from dtorch.distributed.pipelining import pipeline
        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        >>> pipeline([nn.Linear(2, 2)] * 3, mesh["pp"], n_microbatches=4)
        Traceback (most recent call last):
        ...
        ValueError: pipeline: 3 stages for the 2 positions of mesh dim 'pp' (one stage per position)
        >>> pipeline([nn.Linear(2, 2), nn.Linear(2, 2)], mesh["pp"], 4, schedule="zigzag")
        Traceback (most recent call last):
        ...
        ValueError: pipeline: unknown schedule 'zigzag' (expected one of GPipe, 1F1B, Interleaved1F1B)
    """
    if not isinstance(mesh, DeviceMesh) or mesh.ndim != 1 or len(mesh._groups[0]) != 1:
        raise ValueError("pipeline: mesh must be a 1-D view of one mesh dim, e.g. mesh['pp']")
    if schedule not in SCHEDULES:
        raise ValueError(f"pipeline: unknown schedule {schedule!r} (expected one of "
                         f"{', '.join(SCHEDULES)})")
    from ...nn import Sequential
    if isinstance(stages, Sequential):
        stages = split_by_parameters(stages, mesh.size())
    stages = list(stages)
    name = mesh.mesh_dim_names[0] if mesh.mesh_dim_names else "0"
    n = mesh.size()
    if schedule == "Interleaved1F1B":
        if n < 2:
            raise ValueError(f"pipeline: Interleaved1F1B needs at least 2 positions of mesh dim "
                             f"{name!r}, it has {n}")
        if len(stages) % n or len(stages) < 2 * n:
            raise ValueError(f"pipeline: Interleaved1F1B needs a multiple (at least 2) of the "
                             f"{n} positions of mesh dim {name!r} as stages, got {len(stages)}")
        if isinstance(n_microbatches, int) and n_microbatches % n:
            raise ValueError(f"pipeline: Interleaved1F1B needs n_microbatches divisible by the "
                             f"{n} positions of mesh dim {name!r}, got {n_microbatches}")
    elif len(stages) != n:
        raise ValueError(f"pipeline: {len(stages)} stages for the {n} positions of "
                         f"mesh dim {name!r} (one stage per position)")
    if len({id(s) for s in stages}) != len(stages):
        raise ValueError("pipeline: a module appears twice among the stages")
    if not isinstance(n_microbatches, int) or n_microbatches < 1:
        raise ValueError(f"pipeline: n_microbatches must be a positive int, got {n_microbatches!r}")
    return PipelineSchedule(stages, mesh, n_microbatches, schedule)
