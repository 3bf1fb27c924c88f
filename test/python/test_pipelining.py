"""Moving tensors between pipeline stages (dtorch.distributed.pipelining.
transfer): point-to-point messages that the controller schedules, against
numpy, forward and backward, and the errors at the call."""
import numpy as np
import pytest

import dtorch
from conftest import assert_close
from dtorch import Replicate, Shard
from dtorch.distributed.pipelining import transfer


def moved(x, n, sources, destinations, dim=0):
    """numpy: block destinations[k] of the result is x's block sources[k]
    (blocks of dim `dim`, n of them), the others zero."""
    blocks = np.split(x, n, axis=dim)
    out = [np.zeros_like(b) for b in blocks]
    for s, d in zip(sources, destinations):
        out[d] = blocks[s]
    return np.concatenate(out, axis=dim)


@pytest.fixture(scope="module")
def pp4(dt):
    return dt.init_device_mesh("cpu", (4,), mesh_dim_names=("pp",))


@pytest.fixture(scope="module")
def pp_dp(dt):
    return dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))


def test_transfer_moves_blocks_between_stages(dt, pp4):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 3)).astype(np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)])
    # Stage 0 -> 1 only; a forward shift through every stage; a ring in
    # which every stage sends and receives (one batched exchange each).
    for src, dst in [([0], [1]), ([0, 1, 2], [1, 2, 3]), ([0, 1, 2, 3], [1, 2, 3, 0]),
                     ([3, 1], [0, 2])]:
        y = transfer(x, "pp", src, dst)
        assert y.placements == (Shard(0),) and y.shape == (8, 3)
        assert_close(y.numpy(), moved(a, 4, src, dst), tol=0)
    ir = dt.last_ir("rank")
    assert "rank.batch_send_recv" in ir or "rank.send" in ir


def test_a_stage_computes_on_what_the_previous_one_sent(dt, pp4):
    # Each stage scales its block and hands it on: three hops carry stage
    # 0's rows to stage 3 through stages 1 and 2, computing on the way.
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    w = rng.standard_normal((5, 5)).astype(np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)])
    wt = dt.distribute_tensor(w, pp4, [Replicate()])
    h = x
    want = a.copy()
    for stage in range(3):
        h = transfer((h @ wt).relu(), "pp", [stage], [stage + 1])
        want = moved(np.maximum(want @ w, 0), 4, [stage], [stage + 1])
    assert_close(h.numpy(), want, tol=1e-5)
    text = dt.last_ir("rank")
    assert "rank.send" in text and "rank.recv" in text


def test_stages_that_are_data_parallel_inside(dt, pp_dp):
    # pp x dp: each stage's block is split again by "dp" along another dim;
    # the ranks of one dp coordinate exchange with each other.
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 8)).astype(np.float32)
    x = dt.distribute_tensor(a, pp_dp, [Shard(0), Shard(1)])
    y = transfer(x, "pp", [0], [1])
    assert y.placements == (Shard(0), Shard(1))
    assert_close(y.numpy(), moved(a, 2, [0], [1]), tol=0)
    back = transfer(y * 2.0, 0, [1], [0])
    assert_close(back.numpy(), moved(2 * moved(a, 2, [0], [1]), 2, [1], [0]), tol=0)
    # On a sub-mesh view the dim is named by the view.
    z = dt.distribute_tensor(a, pp_dp["pp"], [Shard(1)])
    assert_close(transfer(z, "pp", [1], [0]).numpy(), moved(a, 2, [1], [0], dim=1), tol=0)


def test_gradient_goes_back_along_the_reversed_pairs(dt, pp4):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 2)).astype(np.float32)
    c = rng.standard_normal((4, 2)).astype(np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)]).requires_grad_()
    cw = dt.distribute_tensor(c, pp4, [Shard(0)])
    src, dst = [0, 1, 2], [1, 2, 3]
    loss = (transfer(x, "pp", src, dst) * cw).sum()
    loss.backward()
    assert_close(loss.item(), float((moved(a, 4, src, dst) * c).sum()), tol=1e-5)
    # d loss / d x: c moved back from each destination to its source.
    assert_close(x.grad.numpy(), moved(c, 4, dst, src), tol=0)


def test_bad_transfers_raise_at_the_call_with_the_numbers(dt, pp4, pp_dp):
    a = np.zeros((8, 3), np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)])
    with pytest.raises(ValueError, match="must be Shard"):
        transfer(dt.distribute_tensor(a, pp4, [Replicate()]), "pp", [0], [1])
    with pytest.raises(ValueError, match="dim 0 of size 6 does not split evenly over 4"):
        transfer(dt.distribute_tensor(np.zeros((6, 3), np.float32), pp4, [Shard(0)]),
                 "pp", [0], [1])
    with pytest.raises(ValueError, match="position 4 is out of range for mesh dim 0 of size 4"):
        transfer(x, "pp", [0], [4])
    with pytest.raises(ValueError, match="pair 1 moves block 2 onto itself"):
        transfer(x, "pp", [0, 2], [1, 2])
    with pytest.raises(ValueError, match="position 1 appears twice among the destinations"):
        transfer(x, "pp", [0, 2], [1, 1])
    with pytest.raises(ValueError, match="got 2 and 1"):
        transfer(x, "pp", [0, 2], [1])
    with pytest.raises(ValueError, match="no dim named 'tp'"):
        transfer(x, "tp", [0], [1])
    nested = dt.distribute_tensor(a, pp_dp, [Shard(0), Shard(0)])
    with pytest.raises(ValueError, match="tensor dim 0 is also sharded by mesh dim 1"):
        transfer(nested, "pp", [0], [1])
    # Nothing was queued by the failed calls: the session still works.
    assert_close(transfer(x, "pp", [0], [1]).numpy(), a, tol=0)


# ---- moving a tensor to another mesh (a stage's own ranks) ------------------------------

def test_move_between_stage_meshes(dt):
    # Two 2-rank meshes (the stages of a pp x dp mesh): every rank sends its
    # piece to the rank at the same position of the other mesh.
    a = dt.DeviceMesh("cpu", [0, 1], mesh_dim_names=("dp",))
    b = dt.DeviceMesh("cpu", [3, 2], mesh_dim_names=("dp",))
    rng = np.random.default_rng(4)
    v = rng.standard_normal((6, 5)).astype(np.float32)
    for placements in ([Shard(0)], [Shard(1)], [Replicate()]):
        x = dt.distribute_tensor(v, a, placements)
        y = dt._C.move_to_mesh(x, b._mesh_id)
        assert y.placements == tuple(placements) and y.device_mesh == b
        assert_close(y.numpy(), v, tol=0)
        # and back, through a computation on the other side
        z = dt._C.move_to_mesh((y * 2.0).relu(), a._mesh_id)
        assert_close(z.numpy(), np.maximum(2 * v, 0), tol=0)
    with pytest.raises(ValueError, match=r"meshes differ in shape \(\[2\] and \[4\]\)"):
        dt._C.move_to_mesh(dt.distribute_tensor(v, a, [Shard(0)]),
                           dt.DeviceMesh("cpu", [0, 1, 2, 3])._mesh_id)
    with pytest.raises(ValueError, match="rank 1 is at mesh position 1 of both meshes"):
        dt._C.move_to_mesh(dt.distribute_tensor(v, a, [Shard(0)]),
                           dt.DeviceMesh("cpu", [2, 1])._mesh_id)


def test_send_and_receive_recorded_apart(dt):
    # The halves of a move recorded apart (as pipeline() records them: the
    # receive where the receiving stage reads the value), with work on both
    # meshes between them, two messages in flight on one tag (received in
    # the order sent) and another tag crossing them.
    a = dt.DeviceMesh("cpu", [0, 1], mesh_dim_names=("dp",))
    b = dt.DeviceMesh("cpu", [2, 3], mesh_dim_names=("dp",))
    rng = np.random.default_rng(9)
    v, w = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2))
    x = dt.distribute_tensor(v, a, [Shard(0)])
    first = dt._C.send_to_mesh(x, b._mesh_id, 3)
    second = dt._C.send_to_mesh(x * 2.0, b._mesh_id, 3)
    other = dt._C.send_to_mesh(dt.distribute_tensor(w, a, [Replicate()]), b._mesh_id, 4)
    busy = dt.distribute_tensor(w, b, [Replicate()]).relu()  # b works meanwhile
    got_other = dt._C.receive_from_mesh(other, b._mesh_id, 4)
    got_first = dt._C.receive_from_mesh(first, b._mesh_id, 3)
    got_second = dt._C.receive_from_mesh(second, b._mesh_id, 3)
    assert got_first.device_mesh == b and got_first.placements == (Shard(0),)
    assert_close(got_first.numpy(), v, tol=0)
    assert_close(got_second.numpy(), 2 * v, tol=0)
    assert_close(got_other.numpy(), w, tol=0)
    assert_close(busy.numpy(), np.maximum(w, 0), tol=0)
    with pytest.raises(ValueError, match=r"tag -1 is outside \[0, 1048576\)"):
        dt._C.send_to_mesh(x, b._mesh_id, -1)
    with pytest.raises(ValueError, match="rank 1 is at mesh position 1 of both meshes"):
        dt._C.receive_from_mesh(first, dt.DeviceMesh("cpu", [2, 1])._mesh_id)


def test_a_mismatched_move_is_an_error_naming_both_programs_not_a_hang(dt):
    # Two messages in flight on one tag: receiving the second first would
    # take the first's bytes (another shape), and a receive on a tag nobody
    # sent on would wait forever. The controller refuses both before they
    # run, naming the receiving and the sending program; the messages stay
    # and the right receives still get them.
    a = dt.DeviceMesh("cpu", [0, 1])
    b = dt.DeviceMesh("cpu", [2, 3])
    x = dt.distribute_tensor(np.ones((4, 3), np.float32), a, [Shard(0)])
    y = dt.distribute_tensor(np.full((2, 3), 2, np.float32), a, [Shard(0)])
    first = dt._C.send_to_mesh(x, b._mesh_id, 0)
    second = dt._C.send_to_mesh(y, b._mesh_id, 0)
    with pytest.raises(dt.DTorchError,
                       match=r"mismatched move between meshes: @segment_class0 of program \d+ at "
                             r"global rank 2 receives F32\[1x3\] from global rank 0 .*sent by "
                             r"@segment_class0 of program \d+, is F32\[2x3\]"):
        refused = dt._C.receive_from_mesh(second, b._mesh_id, 0)
        refused.numpy()
    # The refused segment's result never exists: fetching it again, or
    # computing from it, raises the same error (not an internal one), and
    # the session stays usable.
    for again in (lambda: refused.numpy(), lambda: (refused * 2.0 + 1.0).numpy()):
        with pytest.raises(dt.DTorchError, match="mismatched move between meshes"):
            again()
    del refused
    with pytest.raises(dt.DTorchError, match="receive would wait forever"):
        dt._C.receive_from_mesh(first, b._mesh_id, 5).numpy()
    assert_close(dt._C.receive_from_mesh(first, b._mesh_id, 0).numpy(), np.ones((4, 3)), tol=0)
    assert_close(dt._C.receive_from_mesh(second, b._mesh_id, 0).numpy(), np.full((2, 3), 2),
                 tol=0)


# ---- pipeline(): schedules, parity with an unpipelined step, errors ---------------------

from dtorch import nn  # noqa: E402
from dtorch.distributed.pipelining import pipeline  # noqa: E402
from dtorch.distributed.pipelining.schedules import recording_order  # noqa: E402


def make_stages(widths, n_stages, seed):
    """A chain of Linear (+ ReLU but on the last) layers cut into n_stages
    Sequentials, and its weights as numpy arrays (layer by layer)."""
    rng = np.random.default_rng(seed)
    layers, weights = [], []
    for k in range(len(widths) - 1):
        w = (rng.standard_normal((widths[k + 1], widths[k])) * 0.5).astype(np.float32)
        b = (rng.standard_normal(widths[k + 1]) * 0.1).astype(np.float32)
        lin = nn.Linear(widths[k], widths[k + 1])
        lin.load_state_dict({"weight": w, "bias": b})
        relu = k < len(widths) - 2
        layers.append([lin] + ([nn.ReLU()] if relu else []))
        weights.append((w, b, relu))
    cuts = np.array_split(np.arange(len(layers)), n_stages)
    stages = [nn.Sequential(*[m for k in cut for m in layers[k]]) for cut in cuts]
    return stages, [layer[0] for layer in layers], weights


def numpy_step(weights, x, y):
    """Loss (MSE, mean) and the gradient of every weight and bias."""
    acts, pre = [x.astype(np.float64)], []
    for w, b, relu in weights:
        z = acts[-1] @ w.T + b
        pre.append(z)
        acts.append(np.maximum(z, 0) if relu else z)
    out = acts[-1]
    loss = ((out - y) ** 2).mean()
    g = 2 * (out - y) / out.size
    grads = [None] * len(weights)
    for k in reversed(range(len(weights))):
        w, b, relu = weights[k]
        if relu:
            g = g * (pre[k] > 0)
        grads[k] = (g.T @ acts[k], g.sum(0))
        g = g @ w
    return loss, grads


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_pipeline_matches_an_unpipelined_step(dt, schedule):
    # 2 stages, each data parallel inside (pp x dp), 4 microbatches.
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    stages, linears, weights = make_stages([6, 16, 12, 3], 2, seed=5)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    pp = pipeline(stages, mesh["pp"], n_microbatches=4, schedule=schedule)
    assert [m.mesh.tolist() for m in pp.stage_meshes] == [[0, 1], [2, 3]]
    loss = pp.step(x, target=y, loss_fn=dt.nn.functional.mse_loss)
    want_loss, want_grads = numpy_step(weights, x, y)
    assert_close(loss.item(), want_loss, tol=1e-5)
    for lin, (gw, gb) in zip(linears, want_grads):
        assert_close(lin.weight.grad.numpy(), gw, tol=1e-5)
        assert_close(lin.bias.grad.numpy(), gb, tol=1e-5)
    # Stage s's parameters live on stage s's ranks only.
    assert linears[0].weight.device_mesh == pp.stage_meshes[0]
    assert linears[-1].weight.device_mesh == pp.stage_meshes[1]


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_four_stages_eight_microbatches_train_like_one_device(dt, schedule):
    # 4 stages of one rank each; ten SGD steps, each on a fresh batch.
    mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("pp",))
    stages, linears, weights = make_stages([5, 8, 8, 8, 2], 4, seed=7)
    pp = pipeline(stages, mesh["pp"], n_microbatches=8, schedule=schedule)
    params = [p for s in stages for p in s.parameters()]
    opt = dt.optim.SGD(params, lr=0.1)
    rng = np.random.default_rng(8)
    ws = [[w.astype(np.float64), b.astype(np.float64), r] for w, b, r in weights]
    for step in range(10):
        x = rng.standard_normal((16, 5)).astype(np.float32)
        y = rng.standard_normal((16, 2)).astype(np.float32)
        opt.zero_grad()
        loss = pp.step(x, target=y, loss_fn=dt.nn.functional.mse_loss)
        opt.step()
        want_loss, grads = numpy_step(ws, x, y)
        assert_close(loss.item(), want_loss, tol=1e-4)
        for k, (gw, gb) in enumerate(grads):
            ws[k][0] = ws[k][0] - 0.1 * gw
            ws[k][1] = ws[k][1] - 0.1 * gb
    for lin, (w, b, _) in zip(linears, ws):
        assert_close(lin.weight.numpy(), w, tol=1e-4)
        assert_close(lin.bias.numpy(), b, tol=1e-4)


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B", "Interleaved1F1B"])
def test_every_receive_recording_gives_the_same_step(dt, schedule):
    # pipeline() records each receive one action of the receiving rank
    # ahead of its use; at use, or with its send (the old order), kept for
    # the benchmark, must give the same loss and gradients.
    mesh = dt.init_device_mesh("cpu", (2,), mesh_dim_names=("pp",))
    n = 4 if schedule == "Interleaved1F1B" else 2
    stages, linears, weights = make_stages([5, 6, 6, 6, 3], n, seed=11)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    pp = pipeline(stages, mesh["pp"], n_microbatches=4, schedule=schedule)
    got = []
    assert pp._receive == "ahead"
    for mode in ("ahead", "at_use", "with_send"):
        for s in stages:
            s.zero_grad()
        pp._receive = mode
        loss = pp.step(x, target=y, loss_fn=dt.nn.functional.mse_loss).item()
        got.append((loss, [lin.weight.grad.numpy() for lin in linears]))
    want_loss, want_grads = numpy_step(weights, x, y)
    for loss, grads in got:
        assert_close(loss, want_loss, tol=1e-5)
        for g, (gw, _) in zip(grads, want_grads):
            assert_close(g, gw, tol=1e-5)


def test_schedules_keep_each_stage_order_and_1f1b_holds_fewer_activations():
    p, m = 4, 8
    for schedule, n_stages in (("GPipe", p), ("1F1B", p), ("Interleaved1F1B", 2 * p)):
        order = recording_order(schedule, n_stages, m, p)
        assert sorted(order) == sorted((k, s, i) for k in "FB" for s in range(n_stages)
                                       for i in range(m))
        done = set()
        for kind, s, i in order:  # every action after what it needs
            if kind == "F":
                assert s == 0 or ("F", s - 1, i) in done
            else:
                assert ("F", s, i) in done and (s == n_stages - 1 or ("B", s + 1, i) in done)
            done.add((kind, s, i))
    # Activations alive per stage (forwards whose backward has not run).
    def peak(schedule, s):
        alive = best = 0
        for kind, st, _ in recording_order(schedule, p, m):
            if st == s:
                alive += 1 if kind == "F" else -1
                best = max(best, alive)
        return best
    assert [peak("GPipe", s) for s in range(p)] == [m] * p
    assert [peak("1F1B", s) for s in range(p)] == [p - s for s in range(p)]
    # Interleaved: rank r runs stages r and r + p; its first forwards go
    # through both chunks of the first group of p microbatches.
    order = recording_order("Interleaved1F1B", 2 * p, m, p)
    rank0 = [(k, s, i) for k, s, i in order if s % p == 0]
    assert rank0[:4] == [("F", 0, 0), ("F", 0, 1), ("F", 0, 2), ("F", 0, 3)]
    assert rank0[4:8] == [("F", 4, 0), ("F", 4, 1), ("F", 4, 2), ("F", 4, 3)]


def test_interleaved_1f1b_matches_an_unpipelined_step(dt):
    # 2 positions, 2 stages on each (stage k at position k % 2).
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    stages, linears, weights = make_stages([4, 8, 8, 8, 2], 4, seed=13)
    pp = pipeline(stages, mesh["pp"], n_microbatches=4, schedule="Interleaved1F1B")
    assert [m.mesh.tolist() for m in pp.stage_meshes] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    rng = np.random.default_rng(14)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 2)).astype(np.float32)
    loss = pp.step(x, target=y, loss_fn=dt.nn.functional.mse_loss)
    want_loss, grads = numpy_step(weights, x, y)
    assert_close(loss.item(), want_loss, tol=1e-5)
    for lin, (gw, gb) in zip(linears, grads):
        assert_close(lin.weight.grad.numpy(), gw, tol=1e-5)
        assert_close(lin.bias.grad.numpy(), gb, tol=1e-5)


def test_pipeline_bad_input_raises_at_the_call_with_the_numbers(dt):
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    with pytest.raises(ValueError, match="3 stages for the 2 positions of mesh dim 'pp'"):
        pipeline([nn.Linear(2, 2) for _ in range(3)], mesh["pp"], 4)
    with pytest.raises(ValueError, match="unknown schedule 'zigzag'"):
        pipeline([nn.Linear(2, 2), nn.Linear(2, 2)], mesh["pp"], 4, schedule="zigzag")
    with pytest.raises(ValueError, match="n_microbatches must be a positive int, got 0"):
        pipeline([nn.Linear(2, 2), nn.Linear(2, 2)], mesh["pp"], 0)
    with pytest.raises(ValueError, match="Interleaved1F1B needs a multiple \\(at least 2\\) of the "
                                         "2 positions of mesh dim 'pp' as stages, got 3"):
        pipeline([nn.Linear(2, 2) for _ in range(3)], mesh["pp"], 4, schedule="Interleaved1F1B")
    with pytest.raises(ValueError, match="n_microbatches divisible by the 2 positions of mesh "
                                         "dim 'pp', got 3"):
        pipeline([nn.Linear(2, 2) for _ in range(4)], mesh["pp"], 3, schedule="Interleaved1F1B")
    with pytest.raises(ValueError, match="1-D view"):
        pipeline([nn.Linear(2, 2)] * 4, mesh, 4)
    pp = pipeline([nn.Linear(2, 2), nn.Linear(2, 2)], mesh["pp"], 4)
    with pytest.raises(ValueError, match=r"x's batch of 10 does not split into 4 microbatches "
                                         r"\(10 % 4 = 2\)"):
        pp.step(np.ones((10, 2), np.float32), np.ones((10, 2), np.float32),
                dt.nn.functional.mse_loss)
    with pytest.raises(ValueError, match="target's batch of 6 does not split into 4"):
        pp.step(np.ones((8, 2), np.float32), np.ones((6, 2), np.float32),
                dt.nn.functional.mse_loss)


def test_pipeline_cuts_a_sequential_by_parameter_count(dt):
    from dtorch.distributed.pipelining.schedules import split_by_parameters
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    # 6*24+24 = 168 | 0 | 24*4+4 = 100 | 0 | 4*4+4 = 20 | 4*2+2 = 10:
    # the best cut puts the first Linear alone (168 | 130).
    stages, linears, weights = make_stages([6, 24, 4, 4, 2], 1, seed=9)
    model = stages[0]
    assert [len(s) for s in split_by_parameters(model, 2)] == [2, 5]
    three = split_by_parameters(model, 3)
    counts = [sum(int(np.prod(p.shape)) for p in s.parameters()) for s in three]
    assert max(counts) == 168 and min(len(s) for s in three) >= 1
    assert [c for s in three for c in s.children()] == list(model.children())
    pp = pipeline(model, mesh["pp"], n_microbatches=2, schedule="1F1B")
    assert len(pp.stages) == 2 and sum(len(s) for s in pp.stages) == len(model)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = rng.standard_normal((4, 2)).astype(np.float32)
    loss = pp.step(x, target=y, loss_fn=dt.nn.functional.mse_loss)
    want_loss, grads = numpy_step(weights, x, y)
    assert_close(loss.item(), want_loss, tol=1e-5)
    for lin, (gw, gb) in zip(linears, grads):
        assert_close(lin.weight.grad.numpy(), gw, tol=1e-5)
        assert_close(lin.bias.grad.numpy(), gb, tol=1e-5)
    with pytest.raises(ValueError, match="7 children cannot make 8 stages"):
        split_by_parameters(model, 8)


def test_stages_that_are_tensor_parallel_inside(dt):
    # pp x tp: each stage's Linears split column- then row-wise on its own
    # "tp" dim after the pipeline placed them.
    from dtorch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                    parallelize_module)
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
    stages, linears, weights = make_stages([6, 8, 6, 8, 3], 2, seed=11)
    pp = pipeline(stages, mesh["pp"], n_microbatches=4, schedule="GPipe")
    for s, stage in enumerate(pp.stages):
        parallelize_module(stage, pp.stage_meshes[s]["tp"],
                           {"0": ColwiseParallel(), "2": RowwiseParallel()})
    assert linears[0].weight.placements == (Shard(0),)
    assert linears[1].weight.placements == (Shard(1),)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    loss = pp.step(x, target=y, loss_fn=dt.nn.functional.mse_loss)
    want_loss, grads = numpy_step(weights, x, y)
    assert_close(loss.item(), want_loss, tol=1e-5)
    for lin, (gw, gb) in zip(linears, grads):
        assert_close(lin.weight.grad.numpy(), gw, tol=1e-5)
        assert_close(lin.bias.grad.numpy(), gb, tol=1e-5)
