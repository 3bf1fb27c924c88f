//===- dtorch_ext.cpp - the dtorch._C extension --------------------------===//
//
// Binds the client core (include/dtorch/Client/Session.h): one Session per
// process, the Tensor symbol with its operators, and the value fetches. The
// Python package (python/dtorch) builds the PyTorch-style API on top.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Client/Errors.h"
#include "dtorch/Client/Session.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

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
  case wire::BF16:
    return {(uint8_t)nb::dlpack::dtype_code::Bfloat, 16, 1};
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
  Array arr(owner->data(), shape.size(), shape.data(), keep, nullptr,
            dlpackOf(owner->dtype()));
  return nb::cast(arr);
}

rt::Tensor fromNumpy(nb::ndarray<nb::c_contig, nb::device::cpu> a) {
  std::vector<int64_t> shape;
  for (size_t i = 0; i < a.ndim(); ++i)
    shape.push_back(static_cast<int64_t>(a.shape(i)));
  rt::Tensor t = rt::Tensor::empty(dtypeOf(a.dtype()), shape);
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

} // namespace

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
         const std::string &token) {
        if (g_session)
          throw DTorchError("dtorch is already initialized");
        SessionOptions o;
        o.worldSize = worldSize;
        o.numProcesses = numProcesses;
        o.backend = backend;
        o.workerExecutable = workerExe;
        o.workerAddresses = workers;
        o.token = token;
        {
          nb::gil_scoped_release release;
          g_session = std::make_unique<Session>(o);
        }
      },
      nb::arg("world_size"), nb::arg("num_processes"), nb::arg("backend"),
      nb::arg("worker_executable"), nb::arg("workers"), nb::arg("token") = "");
  m.def("is_initialized", [] { return g_session != nullptr; });
  m.def("shutdown", [] {
    if (g_session) {
      g_session->shutdown();
      g_session.reset();
    }
  });
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
  m.def("messages_sent", [] { return session().messagesSent(); });
  m.def("round_trips", [] { return session().roundTrips(); });
  m.def("pending_ops", [] { return session().pendingNodes(); });
  m.def("live_tensors", [] { return session().liveTensors(); });
  m.def("compile_count", [] { return session().compiles(); });

  using PList = std::vector<std::tuple<std::string, int64_t, std::string>>;
  m.def("full", [](std::vector<int64_t> shape, double v, wire::DType dt,
                   int mesh, PList p, int view) {
    Tensor t = session().full(shape, v, dt, mesh, toPlacements(p));
    t->view = view;
    return t;
  });
  m.def("random", [](std::vector<int64_t> shape, bool normal, wire::DType dt,
                     int mesh, PList p, int view) {
    Tensor t = session().random(shape, normal, dt, mesh, toPlacements(p));
    t->view = view;
    return t;
  });
  m.def("from_numpy", [](nb::ndarray<nb::c_contig, nb::device::cpu> a, int mesh,
                         PList p, int view) {
    Tensor t = session().fromData(fromNumpy(a), mesh, toPlacements(p));
    t->view = view;
    return t;
  });
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
  m.def("broadcast_to", [](const Tensor &x, std::vector<int64_t> shape) {
    return session().broadcastTo(x, shape);
  });
  m.def("redistribute", [](const Tensor &x, int mesh, PList p, int view) {
    Tensor t = session().redistribute(x, mesh, toPlacements(p));
    if (t != x)
      t->view = view;
    return t;
  });
  m.def("fetch", [](const Tensor &x) {
    rt::Tensor v;
    {
      nb::gil_scoped_release release;
      v = session().fetch(x);
    }
    return toNumpy(std::move(v));
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
  m.def("graph_text",
        [](const std::vector<Tensor> &in, const std::vector<Tensor> &out,
           const std::string &name) {
          return session().graphText(in, out, name);
        });

  nb::class_<TensorImpl>(m, "Tensor")
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
      .def_rw("_requires_grad", &TensorImpl::requiresGrad)
      .def(
          "__add__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("add", a, b, false);
          },
          nb::is_operator())
      .def(
          "__radd__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("add", a, b, true);
          },
          nb::is_operator())
      .def(
          "__sub__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("sub", a, b, false);
          },
          nb::is_operator())
      .def(
          "__rsub__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("sub", a, b, true);
          },
          nb::is_operator())
      .def(
          "__mul__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("mul", a, b, false);
          },
          nb::is_operator())
      .def(
          "__rmul__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("mul", a, b, true);
          },
          nb::is_operator())
      .def(
          "__truediv__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("div", a, b, false);
          },
          nb::is_operator())
      .def(
          "__rtruediv__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("div", a, b, true);
          },
          nb::is_operator())
      .def(
          "__pow__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("pow", a, b, false);
          },
          nb::is_operator())
      .def(
          "__rpow__",
          [](const Tensor &a, nb::handle b) {
            return binaryAny("pow", a, b, true);
          },
          nb::is_operator())
      .def(
          "__matmul__",
          [](const Tensor &a, const Tensor &b) {
            return session().matmul(a, b);
          },
          nb::is_operator())
      .def("__neg__", [](const Tensor &a) { return session().unary("neg", a); })
      .def("__abs__",
           [](const Tensor &a) { return session().unary("abs", a); });
}
