//===- dtorch_ext.cpp - the dtorch._C extension --------------------------===//
//
// Binds the client core (include/dtorch/Client/Session.h): one Session per
// process, the Tensor symbol with its operators, and the value fetches. The
// Python package (python/dtorch) builds the PyTorch-style API on top.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Client/BlasInfo.h"
#include "dtorch/Client/CurveKeys.h"
#include "dtorch/Client/Errors.h"
#include "dtorch/Client/RecordPool.h"
#include "dtorch/Client/Session.h"
#include "dtorch/OpRegistry.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cctype>
#include <cstring>
#include <memory>

namespace nb = nanobind;
using namespace dtorch;
using namespace dtorch::client;

namespace {

std::unique_ptr<Session> g_session;

Session &session() {
  if (!g_session)
    throw DTorchError(
        "dtorch is not initialized: create a DeviceMesh or call dtorch.init()");
  return *g_session;
}

/// Python placements arrive as (kind, dim, op) tuples: ("S", 0, ""), ("R", 0,
/// ""), ("P", 0, "sum").
Placements toPlacements(
    const std::vector<std::tuple<std::string, int64_t, std::string>> &ps) {
  Placements out;
  for (const auto &[kind, dim, op] : ps) {
    if (kind == "S")
      out.push_back(Placement::shard(dim));
    else if (kind == "R")
      out.push_back(Placement::replicate());
    else if (kind == "P") {
      std::optional<ReduceOp> r = parseReduceOp(op);
      if (!r)
        throw ValueError("unknown partial reduce_op '" + op +
                         "' (expected sum, avg, max or min)");
      out.push_back(Placement::partial(*r));
    } else {
      throw TypeError("unknown placement kind '" + kind + "'");
    }
  }
  return out;
}

std::vector<std::tuple<std::string, int64_t, std::string>>
fromPlacements(const Placements &ps) {
  std::vector<std::tuple<std::string, int64_t, std::string>> out;
  for (const Placement &p : ps) {
    if (p.isShard())
      out.emplace_back("S", p.dim, "");
    else if (p.isReplicate())
      out.emplace_back("R", 0, "");
    else
      out.emplace_back("P", 0, reduceOpName(p.op));
  }
  return out;
}

using Array = nb::ndarray<nb::numpy, nb::c_contig>;

wire::DType dtypeOf(const nb::dlpack::dtype &dt) {
  using C = nb::dlpack::dtype_code;
  if (dt.code == (uint8_t)C::Float && dt.bits == 32)
    return wire::F32;
  if (dt.code == (uint8_t)C::Float && dt.bits == 64)
    return wire::F64;
  if (dt.code == (uint8_t)C::Float && dt.bits == 16)
    return wire::F16;
  if (dt.code == (uint8_t)C::Bfloat && dt.bits == 16)
    return wire::BF16;
  if (dt.code == (uint8_t)C::Int && dt.bits == 32)
    return wire::I32;
  if (dt.code == (uint8_t)C::Int && dt.bits == 64)
    return wire::I64;
  if (dt.code == (uint8_t)C::Bool)
    return wire::BOOL;
  throw TypeError("unsupported numpy dtype for a dtorch tensor");
}

nb::dlpack::dtype dlpackOf(wire::DType dt) {
  switch (dt) {
  case wire::F32:
    return nb::dtype<float>();
  case wire::F64:
    return nb::dtype<double>();
  case wire::I32:
    return nb::dtype<int32_t>();
  case wire::I64:
    return nb::dtype<int64_t>();
  case wire::BOOL:
    return nb::dtype<bool>();
  case wire::F16:
    return {(uint8_t)nb::dlpack::dtype_code::Float, 16, 1};
  case wire::BF16: // numpy has no bfloat16: its bits, viewed by ml_dtypes
    return nb::dtype<uint16_t>();
  default:
    throw TypeError("unsupported dtype");
  }
}

/// A numpy array viewing the tensor's buffer (kept alive by a capsule).
nb::object toNumpy(rt::Tensor t) {
  auto *owner = new rt::Tensor(std::move(t));
  nb::capsule keep(
      owner, [](void *p) noexcept { delete static_cast<rt::Tensor *>(p); });
  std::vector<size_t> shape(owner->shape().begin(), owner->shape().end());
  if (owner->dtype() == wire::BF16) {
    // numpy has no bfloat16 of its own (nanobind would hand back an opaque
    // object): give the bits as uint16 viewed as ml_dtypes.bfloat16, the
    // type torch and jax give numpy.
    Array bits(owner->data(), shape.size(), shape.data(), keep, nullptr,
               nb::dtype<uint16_t>());
    nb::object bf16;
    try {
      bf16 = nb::module_::import_("ml_dtypes").attr("bfloat16");
    } catch (nb::python_error &) {
      throw TypeError(
          "fetching a bfloat16 tensor needs the ml_dtypes package "
          "(pip install ml_dtypes), or convert it first: x.float()");
    }
    return nb::cast(bits).attr("view")(bf16);
  }
  Array arr(owner->data(), shape.size(), shape.data(), keep, nullptr,
            dlpackOf(owner->dtype()));
  return nb::cast(arr);
}

/// `bits`: the dtype whose bit patterns `a` holds (bfloat16 as uint16).
rt::Tensor fromNumpy(nb::ndarray<nb::c_contig, nb::device::cpu> a,
                     std::optional<wire::DType> bits = std::nullopt) {
  std::vector<int64_t> shape;
  for (size_t i = 0; i < a.ndim(); ++i)
    shape.push_back(static_cast<int64_t>(a.shape(i)));
  wire::DType dtype;
  if (bits) {
    if (a.dtype().bits != rt::dtypeSize(*bits) * 8)
      throw TypeError("bit patterns of the wrong width for the dtype");
    dtype = *bits;
  } else {
    dtype = dtypeOf(a.dtype());
  }
  rt::Tensor t = rt::Tensor::empty(dtype, shape);
  if (t.nbytes())
    std::memcpy(t.data(), a.data(), t.nbytes());
  return t;
}

Tensor binaryAny(const char *op, const Tensor &a, nb::handle b,
                 bool reflected) {
  if (nb::isinstance<TensorImpl>(b)) {
    Tensor tb = nb::cast<Tensor>(b);
    return reflected ? session().binary(op, tb, a)
                     : session().binary(op, a, tb);
  }
  if (PyFloat_Check(b.ptr()) || PyLong_Check(b.ptr()) || PyBool_Check(b.ptr()))
    return session().binaryScalar(op, a, nb::cast<double>(b), reflected,
                                  PyFloat_Check(b.ptr()) != 0);
  throw TypeError(std::string(op) + ": unsupported operand type " +
                  nb::cast<std::string>(nb::str(b.type())));
}

/// A tensor operand or a Python number (as a 0-d tensor next to `like`).
Tensor operand(const Tensor &like, nb::handle v, const char *op) {
  if (nb::isinstance<TensorImpl>(v))
    return nb::cast<Tensor>(v);
  if (PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr()) || PyBool_Check(v.ptr()))
    return session().scalarLike(like, nb::cast<double>(v),
                                PyFloat_Check(v.ptr()) != 0);
  throw TypeError(std::string(op) + ": unsupported operand type " +
                  nb::cast<std::string>(nb::str(v.type())));
}

Tensor compareAny(const char *op, const Tensor &a, nb::handle b,
                  bool reflected) {
  Tensor tb = operand(a, b, op);
  return reflected ? session().compare(op, tb, a)
                   : session().compare(op, a, tb);
}

nb::list strings(const std::vector<const char *> &v) {
  nb::list l;
  for (const char *s : v)
    l.append(nb::str(s));
  return l;
}

/// The op registry as Python dicts (the package builds its surface from it).
nb::list registryList() {
  nb::list out;
  for (const OpInfo &op : opRegistry()) {
    nb::dict d;
    d["name"] = op.name;
    d["family"] = op.family;
    d["kernel"] = op.kernel;
    d["summary"] = op.summary;
    d["num_operands"] = op.numOperands;
    d["attrs"] = strings(op.attrs);
    d["functions"] = strings(op.functions);
    d["methods"] = strings(op.methods);
    d["operators"] = strings(op.operators);
    nb::list joint;
    for (ReduceOp r : op.jointPartial)
      joint.append(reduceOpName(r));
    d["joint_partial"] = joint;
    d["linear_operands"] = op.linearOperands;
    d["float_only"] = op.floatOnly;
    d["dtypes"] = strings(op.dtypes);
    d["uses"] = strings(op.uses);
    d["reference"] = op.reference;
    d["test"] = op.test;
    d["is_dialect_op"] = op.isDialectOp;
    d["gradient"] = strings(op.gradient);
    d["operand_names"] = strings(op.operandNames);
    out.append(d);
  }
  return out;
}

/// The user's name of an op: "matmul" for "dtensor.matmul".
std::string userOpName(const std::string &op) {
  const std::string prefix = "dtensor.";
  return op.compare(0, prefix.size(), prefix) == 0 ? op.substr(prefix.size())
                                                   : op;
}

std::string userDTypeName(const std::string &mlirType) {
  static const std::map<std::string, std::string> names = {
      {"f32", "float32"},   {"f64", "float64"}, {"f16", "float16"},
      {"bf16", "bfloat16"}, {"i32", "int32"},   {"i64", "int64"},
      {"i1", "bool"}};
  auto it = names.find(mlirType);
  return it == names.end() ? mlirType : it->second;
}

nb::list intsToList(const std::vector<int64_t> &v) {
  nb::list l;
  for (int64_t x : v)
    l.append(x);
  return l;
}

/// One row of dtorch.explain(): a dict in the user's names.
nb::dict explanationRow(RedistributionExplanation e) {
  using Reason = RedistributionExplanation::Reason;
  for (RedistributionUse &u : e.uses)
    u.op = userOpName(u.op);
  e.source = userOpName(e.source);
  nb::dict row;
  if (e.reason == Reason::Operand && !e.uses.empty()) {
    row["op"] = e.uses.front().op;
    row["operand"] = e.uses.front().operand;
  } else {
    row["op"] = e.reason == Reason::Result ? e.source : "redistribute";
    row["operand"] = nb::none();
  }
  row["reason"] = reasonText(e);
  nb::list neededBy;
  for (const RedistributionUse &u : e.uses)
    if (u.op != "func.return")
      neededBy.append(nb::make_tuple(u.op, u.operand));
  row["needed_by"] = neededBy;
  row["shape"] = nb::tuple(intsToList(e.shape));
  row["dtype"] = userDTypeName(e.elementType);
  row["mesh_dim_names"] = e.meshDimNames.empty()
                              ? nb::object(nb::none())
                              : nb::object(nb::tuple(nb::cast(e.meshDimNames)));
  row["before"] = placementsText(e.before, e.meshDimNames);
  row["after"] = placementsText(e.after, e.meshDimNames);
  row["change"] = changeText(e);
  row["regather"] = e.regather;
  nb::list collectives, steps;
  for (const StepTraffic &t : e.steps) {
    std::string text = stepText(t.step, e.meshDimNames);
    if (communicates(t.step.kind))
      collectives.append(text);
    nb::dict step;
    step["kind"] = stepKindName(t.step.kind);
    step["mesh_dim"] = t.step.axis;
    step["mesh_dim_name"] =
        t.step.axis < (int64_t)e.meshDimNames.size()
            ? nb::object(nb::str(e.meshDimNames[t.step.axis].c_str()))
            : nb::object(nb::none());
    step["text"] = text;
    step["bytes_per_rank"] = intsToList(t.bytesSent);
    steps.append(step);
  }
  row["collectives"] = collectives;
  row["steps"] = steps;
  row["bytes_per_rank"] = intsToList(e.bytesSent);
  row["text"] = explanationText(e);
  return row;
}

nb::object attrToPython(const AttrValue &v) {
  switch (v.kind) {
  case AttrValue::Kind::Int:
    return nb::int_(v.i);
  case AttrValue::Kind::Float:
    return nb::float_(v.f);
  case AttrValue::Kind::String:
    return nb::str(v.s.c_str());
  case AttrValue::Kind::Ints:
    return intsToList(v.ints);
  }
  return nb::none();
}

/// torch's name of a grad_fn: "MulBackward" for dtensor.mul.
std::string backwardName(const std::string &op) {
  std::string out;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(c)) : c;
    upper = false;
  }
  return out + "Backward";
}

/// The autograd records (GradRecord) and the tensor's autograd fields.
void bindAutograd(nb::module_ &m, nb::class_<TensorImpl> &tensorClass) {
  nb::class_<GradRecord>(m, "GradNode")
      .def_ro("op", &GradRecord::op)
      .def("name", [](const GradRecord &r) { return backwardName(r.op); })
      .def_ro("inputs", &GradRecord::inputs)
      .def_prop_ro("attrs",
                   [](const GradRecord &r) {
                     nb::dict d;
                     for (const auto &[k, v] : r.attrs)
                       d[k.c_str()] = attrToPython(v);
                     return d;
                   })
      .def_prop_ro("scalar",
                   [](const GradRecord &r) -> nb::object {
                     if (r.scalarIndex < 0)
                       return nb::none();
                     return nb::make_tuple(r.scalarIndex, r.scalarValue);
                   })
      .def_ro("released", &GradRecord::released)
      .def_prop_ro("next_functions",
                   [](const GradRecord &r) {
                     nb::list l;
                     for (const Tensor &t : r.inputs)
                       l.append(nb::make_tuple(
                           t->gradFn ? nb::cast(t->gradFn) : nb::none(), 0));
                     return nb::tuple(l);
                   })
      .def("_release",
           [](GradRecord &r) {
             r.released = true;
             auto dropped = std::move(r.inputs);
             r.inputs.clear();
           })
      .def("__repr__",
           [](const GradRecord &r) { return "<" + backwardName(r.op) + ">"; });
  tensorClass
      .def_prop_rw(
          "grad", [](const TensorImpl &t) { return t.grad; },
          [](TensorImpl &t, std::optional<Tensor> g) {
            if (g && *g) {
              if ((*g)->meta().shape != t.meta().shape)
                throw ValueError("assigned grad has a different shape than "
                                 "the tensor");
              t.grad = *g;
            } else {
              t.grad.reset();
            }
          },
          nb::arg("value").none())
      .def_prop_ro("grad_fn", [](const TensorImpl &t) { return t.gradFn; })
      .def_prop_ro("is_leaf", [](const TensorImpl &t) { return !t.gradFn; })
      .def_rw("_retains_grad", &TensorImpl::retainsGrad)
      .def_prop_ro(
          "_key",
          [](const TensorImpl &t) { return reinterpret_cast<uintptr_t>(&t); })
      .def("detach", [](const Tensor &t) { return session().detach(t); });
  m.def(
      "_backward_start",
      [](const std::vector<Tensor> &roots, const std::vector<Tensor> &grads,
         bool releaseGraph) {
        switch (session().startBackward(roots, grads, releaseGraph)) {
        case Session::BackwardStart::Replayed:
          return "replayed";
        case Session::BackwardStart::Capturing:
          return "capturing";
        case Session::BackwardStart::Walk:
          break;
        }
        return "walk";
      },
      "Replays a backward of a structure captured before (\"replayed\"), "
      "or starts capturing the walk autograd.py makes next "
      "(\"capturing\": end it with _backward_capture_end), or neither "
      "(\"walk\").");
  m.def(
      "_backward_capture_end",
      [](bool completed) { session().endBackwardCapture(completed); },
      nb::arg("completed"));
  m.def(
      "_backward_replay_stats",
      [] {
        Session::BackwardReplayStats s = session().backwardReplayStats();
        nb::dict d;
        d["replays"] = s.replays;
        d["captures"] = s.captures;
        d["not_replayable"] = s.notReplayable;
        d["walks"] = s.walks;
        d["entries"] = s.entries;
        d["last_reason"] = s.lastReason;
        return d;
      },
      "Backward replay counters: backwards replayed, captures kept, walks of "
      "structures known not replayable, walks that could not be replayed, "
      "structures cached, and why the last unreplayable one was.");
  m.def(
      "_pending_structure",
      [] {
        return nb::make_tuple(session().pendingNodes(),
                              session().pendingStructureHash());
      },
      "(ops, structural hash) of the pending segment so far.");
  m.def(
      "_record_pool_stats",
      [] {
        pool::Stats st = pool::threadStats();
        nb::dict d;
        d["enabled"] = recordPoolEnabled();
        d["reused"] = st.reused;
        d["fresh"] = st.fresh;
        d["cached"] = st.cached;
        d["returned"] = st.returned;
        return d;
      },
      "The calling thread's record pool (lib/Client/RecordPool.h): blocks "
      "handed out again, taken from the heap, cached now, and given back "
      "to the heap.");
  m.def("set_grad_enabled", [](bool on) { setGradEnabled(on); });
  m.def("is_grad_enabled", [] { return gradEnabled(); });
}

} // namespace

// python/src/checkpoint_bindings.cpp: dcp's entry points.
void bindCheckpoint(nb::module_ &m, Session &(*session)());
void bindFunctional(nb::module_ &m, Session &(*session)());

NB_MODULE(_C, m) {
  m.doc() = "DTorch's C++ core: the client session and its symbolic tensors";

  nb::enum_<wire::DType>(m, "dtype")
      .value("float32", wire::F32)
      .value("float64", wire::F64)
      .value("float16", wire::F16)
      .value("bfloat16", wire::BF16)
      .value("int32", wire::I32)
      .value("int64", wire::I64)
      .value("bool", wire::BOOL);

  static nb::object valueErrorType = nb::borrow(PyExc_ValueError);
  nb::register_exception_translator([](const std::exception_ptr &p, void *) {
    try {
      std::rethrow_exception(p);
    } catch (const ValueError &e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const TypeError &e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const IndexError &e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const WorkerError &e) {
      nb::object cls = nb::module_::import_("dtorch.errors")
                           .attr("worker_error_class")(e.what());
      nb::object exc = cls(e.what(), e.rank(), e.host());
      PyErr_SetObject(cls.ptr(), exc.ptr());
    } catch (const std::exception &e) {
      nb::object cls =
          nb::module_::import_("dtorch.errors").attr("DTorchError");
      PyErr_SetString(cls.ptr(), e.what());
    }
  });

  m.def(
      "init",
      [](int worldSize, int numProcesses, const std::string &backend,
         const std::string &workerExe, const std::vector<std::string> &workers,
         const std::string &token, const std::string &programCacheDir,
         const std::string &curveSecretKey,
         const std::vector<std::string> &curveWorkerPublicKeys,
         int64_t heartbeatMs, int64_t peerTimeoutMs,
         int64_t collectiveTimeoutMs, bool autoRestart,
         const std::string &listen, int64_t admissionTimeoutMs) {
        if (g_session)
          throw DTorchError("dtorch is already initialized");
        SessionOptions o;
        o.autoRestart = autoRestart;
        o.programCacheDir = programCacheDir;
        o.worldSize = worldSize;
        o.numProcesses = numProcesses;
        o.backend = backend;
        o.workerExecutable = workerExe;
        o.workerAddresses = workers;
        o.listenAddress = listen;
        o.admissionTimeoutMs = admissionTimeoutMs;
        o.token = token;
        o.curveSecretKey = curveSecretKey;
        o.curveWorkerPublicKeys = curveWorkerPublicKeys;
        o.heartbeatIntervalMs = heartbeatMs;
        o.peerTimeoutMs = peerTimeoutMs;
        o.collectiveTimeoutMs = collectiveTimeoutMs;
        {
          nb::gil_scoped_release release;
          g_session = std::make_unique<Session>(o);
        }
      },
      nb::arg("world_size"), nb::arg("num_processes"), nb::arg("backend"),
      nb::arg("worker_executable"), nb::arg("workers"), nb::arg("token") = "",
      nb::arg("program_cache_dir") = "", nb::arg("curve_secret_key") = "",
      nb::arg("curve_worker_public_keys") = std::vector<std::string>{},
      nb::arg("heartbeat_ms") = 0, nb::arg("peer_timeout_ms") = 0,
      nb::arg("collective_timeout_ms") = 0, nb::arg("auto_restart") = false,
      nb::arg("listen") = "", nb::arg("admission_timeout_ms") = 0);
  // CURVE keys (runtime/include/dtorch/runtime/Security.h).
  m.def("curve_available", [] { return dtorch::client::curveAvailable(); });
  m.def(
      "write_curve_keypair",
      [](const std::string &prefix) {
        return dtorch::client::writeCurveKeyPair(prefix);
      },
      nb::arg("prefix"));
  m.def(
      "read_curve_key_file",
      [](const std::string &path, const std::string &what) {
        return dtorch::client::readCurveKeyFile(path, what);
      },
      nb::arg("path"), nb::arg("what"));
  m.def("is_initialized", [] { return g_session != nullptr; });
  m.def("shutdown", [] {
    if (g_session) {
      g_session->shutdown();
      // Tensors of this session may outlive it (their Python objects, a
      // model kept across dtorch.init calls): they keep naming this Session,
      // whose release() is a no-op once shut down, and using one in a later
      // session raises. So a shut-down session is never freed (a few KB)
      // and its address is never reused by the next one.
      static auto *retired = new std::vector<std::unique_ptr<Session>>();
      retired->push_back(std::move(g_session));
    }
  });
  m.def(
      "restart",
      [](double idleTimeoutSeconds) {
        Session &s = session();
        RestartInfo info;
        {
          nb::gil_scoped_release release;
          info = s.restart(std::chrono::milliseconds(
              static_cast<int64_t>(idleTimeoutSeconds * 1000)));
        }
        return std::make_tuple(info.replacedRanks, info.lostTensors,
                               info.seconds);
      },
      nb::arg("idle_timeout"));
  m.def("restart_count", [] { return session().restartCount(); });
  m.def("world_size", [] { return session().worldSize(); });
  m.def("add_mesh",
        [](std::vector<int64_t> shape, std::vector<std::string> names,
           std::vector<int64_t> ranks, std::string device) {
          return session().addMesh(std::move(shape), std::move(names),
                                   std::move(ranks), std::move(device));
        });
  m.def("manual_seed", [](uint64_t s) { session().manualSeed(s); });
  m.def("synchronize", [] {
    nb::gil_scoped_release release;
    session().synchronize();
  });
  m.def("last_ir",
        [](const std::string &stage) { return session().lastIr(stage); });
  m.def("explain", [] {
    std::optional<std::vector<RedistributionExplanation>> e;
    {
      nb::gil_scoped_release release;
      e = session().explain();
    }
    nb::list rows;
    if (e)
      for (const RedistributionExplanation &x : *e)
        rows.append(explanationRow(x));
    return nb::make_tuple(e.has_value(), rows);
  });
  m.def(
      "memory_stats",
      [](bool withHandles) {
        std::vector<rt::MemoryStats> stats;
        {
          nb::gil_scoped_release release;
          stats = session().memoryStats();
        }
        nb::list rows;
        for (const rt::MemoryStats &st : stats) {
          nb::dict d;
          d["rank"] = st.rank;
          d["host"] = session().hostOf(st.rank);
          if (!st.known) {
            // The simulated backend holds nothing it could count.
            d["tensors"] = nb::none();
            d["bytes"] = nb::none();
            d["bytes_by_dtype"] = nb::dict();
            d["arena_bytes"] = nb::none();
            d["last_run_arena_bytes"] = nb::none();
            d["last_run_peak_bytes"] = nb::none();
            d["peak_bytes"] = nb::none();
          } else {
            d["arena_bytes"] = st.arenaBytes;
            d["last_run_arena_bytes"] = st.lastRunArenaBytes;
            d["last_run_peak_bytes"] = st.lastRunPeakBytes;
            d["peak_bytes"] = st.peakBytes;
            nb::dict speculation;
            speculation["started"] = st.speculationsStarted;
            speculation["confirmed"] = st.speculationsConfirmed;
            speculation["dropped"] = st.speculationsDropped;
            speculation["instructions"] = st.speculativeInstructions;
            d["speculation"] = speculation;
            d["tensors"] = st.tensors;
            d["bytes"] = st.bytes;
            nb::dict byDtype;
            for (const auto &[dtype, bytes] : st.bytesByDtype)
              byDtype[rt::dtypeName(dtype)] = bytes;
            d["bytes_by_dtype"] = byDtype;
          }
          if (withHandles) {
            nb::dict held;
            for (const rt::HeldTensor &t : st.held)
              held[nb::cast(t.handle)] = t.bytes;
            d["handles"] = held;
          }
          rows.append(d);
        }
        return rows;
      },
      nb::arg("with_handles") = false,
      "Every global rank's buffer table, queued behind all work submitted "
      "so far: a list of dicts (rank, host, tensors, bytes, bytes_by_dtype, "
      "arena_bytes, last_run_arena_bytes, last_run_peak_bytes, peak_bytes, "
      "speculation (started, confirmed, dropped, instructions), "
      "and with_handles: handle -> bytes).");
  m.def(
      "profiler_start",
      [](size_t capacityPerRank) {
        nb::gil_scoped_release release;
        session().startTrace(capacityPerRank);
      },
      nb::arg("capacity_per_rank"),
      "Starts the profiler in the client, the controller and every rank "
      "(dtorch.profiler.profile); waits until every rank records.");
  m.def("profiler_active", [] { return g_session && g_session->tracing(); });
  m.def(
      "profiler_stop",
      [] {
        CollectedTrace collected;
        {
          nb::gil_scoped_release release;
          collected = session().stopTrace();
        }
        auto rows = [](const std::vector<rt::TraceEvent> &events,
                       int64_t offset) {
          nb::list out;
          for (const rt::TraceEvent &e : events)
            out.append(nb::make_tuple(e.name, e.category, e.location, e.detail,
                                      e.startNs + offset, e.endNs + offset,
                                      e.bytes, rt::traceLaneName(e.lane)));
          return out;
        };
        nb::dict d;
        d["host"] = collected.host;
        d["clock_ns"] = collected.clockNs;
        d["client"] = rows(collected.client, 0);
        d["client_dropped"] = collected.clientDropped;
        nb::list ranks;
        for (const rt::TraceChunk &chunk : collected.ranks) {
          nb::dict r;
          r["rank"] = chunk.rank;
          r["supported"] = chunk.supported;
          r["host"] = chunk.host;
          r["offset_ns"] = chunk.offsetNs;
          r["dropped"] = chunk.dropped;
          r["events"] = rows(chunk.events, chunk.offsetNs);
          ranks.append(r);
        }
        d["ranks"] = ranks;
        return d;
      },
      "Stops the profiler and collects every event (queued behind all work): "
      "a dict with the client's events and every rank's, on the client's "
      "CLOCK_MONOTONIC (ns). An event is (name, category, location, detail, "
      "start_ns, end_ns, bytes, lane).");
  bindCheckpoint(m, &session);
  bindFunctional(m, &session);
  m.def("messages_sent", [] { return session().messagesSent(); });
  m.def("round_trips", [] { return session().roundTrips(); });
  m.def("pending_ops", [] { return session().pendingNodes(); });
  m.def("live_tensors", [] { return session().liveTensors(); });
  m.def("compile_count", [] { return session().compiles(); });
  // The BLAS of this process (the in-process backend's ranks); worker
  // processes print theirs with DTORCH_BLAS_VERBOSE=1 (runtime/Blas.h).
  m.def("blas_info", [] {
    BlasInfo info = blasInfo();
    nb::dict d;
    d["sgemm"] = info.sgemm;
    d["dgemm"] = info.dgemm;
    d["openblas_core"] = info.openBlasCore;
    d["openblas_chosen"] = info.openBlasChosen;
    d["openblas_preloaded"] = info.openBlasPreloaded;
    d["onednn_isa"] = info.oneDnnIsa;
    d["blis_arch"] = info.blisArch;
    d["threads"] = info.threads;
    d["description"] = info.description;
    return d;
  });
  m.def(
      "controller_stats",
      [] {
        ControllerStats st = session().controllerStats();
        nb::dict d;
        d["segments"] = st.segments;
        d["memory_hits"] = st.memoryHits;
        d["speculations"] = st.speculations;
        d["speculations_confirmed"] = st.speculationsConfirmed;
        d["inline_requests"] = st.inlineRequests;
        d["disk_hits"] = st.diskHits;
        d["compiles"] = st.compiles;
        d["compile_seconds"] = st.compileSeconds;
        d["fused_recompiles"] = st.fusedRecompiles;
        d["fused_recompile_seconds"] = st.fusedRecompileSeconds;
        d["ir_recompiles"] = st.irRecompiles;
        d["disk_seconds"] = st.diskSeconds;
        d["hit_seconds"] = st.hitSeconds;
        d["last_hit_seconds"] = st.lastHitSeconds;
        d["busy_seconds"] = st.busySeconds;
        d["requests"] = st.requests;
        d["frees"] = st.frees;
        d["free_requests"] = st.freeRequests;
        d["restarts"] = st.restarts;
        d["auto_restarts"] = st.autoRestarts;
        return d;
      },
      "The controller's counters and its own time: segments run, in-memory "
      "hits, on-disk hits, compiles; seconds spent compiling (text + "
      "compile), in the on-disk cache, on the lookup + dispatch of "
      "in-memory hits (total and last), and handling requests of any kind "
      "(busy_seconds, requests; synchronize waits for real workers), and the "
      "tensors freed and the free requests that freed them (frees, "
      "free_requests).");
  m.def("_set_segment_hash_mask",
        [](uint64_t mask) { setSegmentHashMaskForTesting(mask); });

  using PList = std::vector<std::tuple<std::string, int64_t, std::string>>;
  m.def("full", [](std::vector<int64_t> shape, double v, wire::DType dt,
                   int mesh, PList p, int view) {
    Tensor t = session().full(shape, v, dt, mesh, toPlacements(p));
    t->view = view;
    return t;
  });
  m.def("meta", [](std::vector<int64_t> shape, wire::DType dt, int mesh,
                   PList p, int view) {
    Tensor t = session().meta(shape, dt, mesh, toPlacements(p));
    t->view = view;
    return t;
  });
  m.def("random", [](std::vector<int64_t> shape, bool normal, wire::DType dt,
                     int mesh, PList p, int view) {
    Tensor t = session().random(shape, normal, dt, mesh, toPlacements(p));
    t->view = view;
    return t;
  });
  m.def(
      "from_numpy",
      [](nb::ndarray<nb::c_contig, nb::device::cpu> a, int mesh, PList p,
         int view, std::optional<wire::DType> bits) {
        Tensor t =
            session().fromData(fromNumpy(a, bits), mesh, toPlacements(p));
        t->view = view;
        return t;
      },
      nb::arg("a"), nb::arg("mesh"), nb::arg("p"), nb::arg("view"),
      nb::arg("bits") = nb::none());
  m.def("unary", [](const std::string &op, const Tensor &x) {
    return session().unary(op, x);
  });
  m.def("binary",
        [](const std::string &op, const Tensor &a, nb::handle b,
           bool reflected) { return binaryAny(op.c_str(), a, b, reflected); });
  m.def("matmul", [](const Tensor &a, const Tensor &b) {
    return session().matmul(a, b);
  });
  m.def("cast",
        [](const Tensor &x, wire::DType dt) { return session().cast(x, dt); });
  m.def("reduce", [](const std::string &op, const Tensor &x,
                     std::vector<int64_t> dims, bool keepdim) {
    return session().reduce(op, x, std::move(dims), keepdim);
  });
  m.def("reshape", [](const Tensor &x, std::vector<int64_t> shape) {
    return session().reshape(x, std::move(shape));
  });
  m.def("permute", [](const Tensor &x, std::vector<int64_t> perm) {
    return session().transpose(x, std::move(perm));
  });
  m.def(
      "broadcast_to",
      [](const Tensor &x, std::vector<int64_t> shape, std::optional<PList> p) {
        if (!p)
          return session().broadcastTo(x, shape);
        Placements want = toPlacements(*p);
        return session().broadcastTo(x, shape, &want);
      },
      nb::arg("x"), nb::arg("shape"), nb::arg("placements") = nb::none());
  m.def(
      "redistribute",
      [](const Tensor &x, int mesh, PList p, int view, bool regather) {
        Tensor t = session().redistribute(x, mesh, toPlacements(p), regather);
        if (t != x)
          t->view = view;
        return t;
      },
      nb::arg("x"), nb::arg("mesh"), nb::arg("placements"), nb::arg("view"),
      nb::arg("regather") = false);
  m.def(
      "transfer",
      [](const Tensor &x, int64_t axis, std::vector<int64_t> sources,
         std::vector<int64_t> destinations) {
        Tensor t = session().transfer(x, axis, sources, destinations);
        t->view = x->view;
        return t;
      },
      nb::arg("x"), nb::arg("axis"), nb::arg("sources"),
      nb::arg("destinations"));
  m.def(
      "all_to_all_v",
      [](const Tensor &x, const Tensor &counts, int64_t axis) {
        Tensor t = session().allToAllV(x, counts, axis);
        t->view = x->view;
        return t;
      },
      nb::arg("x"), nb::arg("counts"), nb::arg("axis"));
  m.def(
      "fused_adam_",
      [](const Tensor &step, const Tensor &lr,
         const std::vector<Tensor> &params, const std::vector<Tensor> &grads,
         const std::vector<Tensor> &expAvgs,
         const std::vector<Tensor> &expAvgSqs,
         const std::vector<Tensor> &maxExpAvgSqs, double beta1, double beta2,
         double eps, double weightDecay, bool decoupled, bool amsgrad,
         bool maximize) {
        Session::AdamHyperParameters hyper;
        hyper.beta1 = beta1;
        hyper.beta2 = beta2;
        hyper.eps = eps;
        hyper.weightDecay = weightDecay;
        hyper.decoupled = decoupled;
        hyper.amsgrad = amsgrad;
        hyper.maximize = maximize;
        session().fusedAdam(step, lr, params, grads, expAvgs, expAvgSqs,
                            maxExpAvgSqs, hyper);
      },
      nb::arg("step"), nb::arg("lr"), nb::arg("params"), nb::arg("grads"),
      nb::arg("exp_avgs"), nb::arg("exp_avg_sqs"), nb::arg("max_exp_avg_sqs"),
      nb::arg("beta1"), nb::arg("beta2"), nb::arg("eps"),
      nb::arg("weight_decay"), nb::arg("decoupled"), nb::arg("amsgrad"),
      nb::arg("maximize"),
      "One Adam/AdamW update of every parameter as one op "
      "(dtensor.fused_adam); each parameter and state tensor is updated in "
      "place.");
  m.def(
      "fused_sgd_",
      [](const Tensor &lr, const std::vector<Tensor> &params,
         const std::vector<Tensor> &grads,
         const std::vector<Tensor> &momentumBuffers, double momentum,
         double dampening, double weightDecay, bool nesterov, bool maximize) {
        Session::SgdHyperParameters hyper;
        hyper.momentum = momentum;
        hyper.dampening = dampening;
        hyper.weightDecay = weightDecay;
        hyper.nesterov = nesterov;
        hyper.maximize = maximize;
        std::vector<Tensor> buffers =
            session().fusedSgd(lr, params, grads, momentumBuffers, hyper);
        if (momentumBuffers.empty())
          for (size_t i = 0; i < buffers.size(); ++i)
            buffers[i]->view = params[i]->view;
        return buffers;
      },
      nb::arg("lr"), nb::arg("params"), nb::arg("grads"),
      nb::arg("momentum_buffers"), nb::arg("momentum"), nb::arg("dampening"),
      nb::arg("weight_decay"), nb::arg("nesterov"), nb::arg("maximize"),
      "One SGD update of every parameter as one op (dtensor.fused_sgd); "
      "each parameter and momentum buffer is updated in place. With a "
      "momentum and no buffers (the first step) the buffers start from the "
      "gradients; returns the momentum buffers (empty without momentum).");
  m.def(
      "move_to_mesh",
      [](const Tensor &x, int mesh) { return session().moveToMesh(x, mesh); },
      nb::arg("x"), nb::arg("mesh"));
  m.def(
      "send_to_mesh",
      [](const Tensor &x, int mesh, int64_t tag) {
        return session().sendToMesh(x, mesh, tag);
      },
      nb::arg("x"), nb::arg("mesh"), nb::arg("tag") = 0);
  m.def(
      "receive_from_mesh",
      [](const Tensor &token, int mesh, int64_t tag) {
        return session().receiveFromMesh(token, mesh, tag);
      },
      nb::arg("token"), nb::arg("mesh"), nb::arg("tag") = 0);
  m.def("assign", [](const Tensor &target, const Tensor &value) {
    session().assign(target, value);
  });
  m.def("rebind", [](const Tensor &target, const Tensor &value, int view) {
    session().rebind(target, value);
    target->view = view;
  });
  m.def("alias", [](const Tensor &x) { return TensorImpl::aliasOf(*x); });
  m.def("fetch", [](const Tensor &x) {
    rt::Tensor v;
    {
      nb::gil_scoped_release release;
      v = session().fetch(x);
    }
    return toNumpy(std::move(v));
  });
  nb::class_<PendingFetch>(m, "PendingFetch",
                           "A fetch in flight (fetch_async): wait() gives the "
                           "value as numpy")
      .def("wait", [](PendingFetch &f) {
        rt::Tensor v;
        {
          nb::gil_scoped_release release;
          v = f.wait();
        }
        return toNumpy(std::move(v));
      });
  m.def("fetch_async", [](const Tensor &x) { return session().fetchAsync(x); });
  m.def("cut_segment", [] {
    if (g_session)
      g_session->cutSegment();
  });
  m.def("fetch_local", [](const Tensor &x) {
    std::map<int, rt::Tensor> pieces;
    {
      nb::gil_scoped_release release;
      pieces = session().fetchLocal(x);
    }
    nb::dict out;
    for (auto &[r, t] : pieces)
      out[nb::int_(r)] = toNumpy(std::move(t));
    return out;
  });
  m.def("op_registry", &registryList);
  m.def("kernel_dtypes", [](const std::string &kernel) {
    std::vector<std::string> out;
    for (wire::DType dt : kernelDtypes(kernel))
      out.push_back(rt::dtypeName(dt));
    return out;
  });
  m.def("compare",
        [](const std::string &op, const Tensor &a, nb::handle b,
           bool reflected) { return compareAny(op.c_str(), a, b, reflected); });
  m.def("where", [](const Tensor &c, nb::handle a, nb::handle b) {
    if (!nb::isinstance<TensorImpl>(a) && !nb::isinstance<TensorImpl>(b)) {
      Tensor ta = operand(c, a, "where");
      if (c->meta().dtype == ta->meta().dtype && nb::isinstance<nb::float_>(a))
        ta = session().cast(ta, wire::F32);
      return session().where(c, ta, operand(ta, b, "where"));
    }
    Tensor like = nb::isinstance<TensorImpl>(a) ? nb::cast<Tensor>(a)
                                                : nb::cast<Tensor>(b);
    return session().where(c, operand(like, a, "where"),
                           operand(like, b, "where"));
  });
  m.def("arg_reduce",
        [](const std::string &op, const Tensor &x, int64_t dim, bool keepdim) {
          return session().argReduce(op, x, dim, keepdim);
        });
  m.def("topk_indices",
        [](const Tensor &x, int64_t k, int64_t dim, bool largest) {
          return session().topkIndices(x, k, dim, largest);
        });
  m.def("slice", [](const Tensor &x, std::vector<int64_t> offsets,
                    std::vector<int64_t> sizes, std::vector<int64_t> strides) {
    return session().slice(x, std::move(offsets), std::move(sizes),
                           std::move(strides));
  });
  m.def("concat", [](const std::vector<Tensor> &xs, int64_t dim) {
    return session().concat(xs, dim);
  });
  m.def("gather", [](const Tensor &x, int64_t dim, const Tensor &index) {
    return session().gather(x, dim, index);
  });
  m.def("index_select", [](const Tensor &x, int64_t dim, const Tensor &index) {
    return session().indexSelect(x, dim, index);
  });
  m.def("scatter_add", [](const Tensor &x, int64_t dim, const Tensor &index,
                          const Tensor &src) {
    return session().scatterAdd(x, dim, index, src);
  });
  m.def("triangle",
        [](const std::string &op, const Tensor &x, int64_t diagonal) {
          return session().triangle(op, x, diagonal);
        });
  m.def("iota", [](std::vector<int64_t> shape, int64_t dim, double start,
                   double step, wire::DType dt, int mesh, PList p, int view) {
    Tensor t =
        session().iota(shape, dim, start, step, dt, mesh, toPlacements(p));
    t->view = view;
    return t;
  });
  m.def("graph_text",
        [](const std::vector<Tensor> &in, const std::vector<Tensor> &out,
           const std::string &name) {
          return session().graphText(in, out, name);
        });

  // dynamic_attr: tensors carry Python attributes such as `grad`.
  nb::class_<TensorImpl> tensorClass(m, "Tensor", nb::dynamic_attr());
  tensorClass
      // Tensor(other): another name for other's value (Parameter uses it).
      .def("__init__",
           [](TensorImpl *self, const Tensor &other) {
             new (self)
                 TensorImpl(other->session(), other->storage(), other->meta());
             self->view = other->view;
           })
      .def_prop_ro("shape",
                   [](const TensorImpl &t) {
                     nb::list l;
                     for (int64_t d : t.meta().shape)
                       l.append(d);
                     return nb::tuple(l);
                   })
      .def_prop_ro("dtype", [](const TensorImpl &t) { return t.meta().dtype; })
      .def_prop_ro("ndim",
                   [](const TensorImpl &t) { return t.meta().shape.size(); })
      .def_prop_ro("_mesh_id",
                   [](const TensorImpl &t) { return t.meta().meshId; })
      .def_prop_ro("_view", [](const TensorImpl &t) { return t.view; })
      .def_prop_ro("_placements_raw",
                   [](const TensorImpl &t) {
                     return fromPlacements(t.meta().placements);
                   })
      .def_prop_ro("_handle", [](const TensorImpl &t) { return t.id(); })
      .def_prop_ro("is_meta",
                   [](const TensorImpl &t) { return t.storage()->meta; })
      .def_rw("_requires_grad", &TensorImpl::requiresGrad);
  bindAutograd(m, tensorClass);
  // Python operators, from the op registry: each names its dialect op.
  for (const OpInfo &op : opRegistry())
    for (const char *py : op.operators) {
      std::string_view family = op.family, name = py;
      bool reflected =
          name.size() > 3 && name.substr(0, 3) == "__r" && name != "__rshift__";
      const char *mnemonic = op.name;
      if (family == "binary")
        tensorClass.def(
            py,
            [mnemonic, reflected](const Tensor &a, nb::handle b) {
              return binaryAny(mnemonic, a, b, reflected);
            },
            nb::is_operator());
      else if (family == "compare")
        tensorClass.def(
            py,
            [mnemonic](const Tensor &a, nb::handle b) {
              return compareAny(mnemonic, a, b, false);
            },
            nb::is_operator());
      else if (family == "unary")
        tensorClass.def(py, [mnemonic](const Tensor &a) {
          return session().unary(mnemonic, a);
        });
      else if (family == "matmul")
        tensorClass.def(
            py,
            [](const Tensor &a, const Tensor &b) {
              return session().matmul(a, b);
            },
            nb::is_operator());
    }
  // __eq__ builds a tensor, as in torch; tensors stay hashable by identity.
  tensorClass.attr("__hash__") =
      nb::module_::import_("builtins").attr("object").attr("__hash__");
}
