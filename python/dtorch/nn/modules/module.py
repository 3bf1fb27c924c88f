"""Module: the base class of dtorch.nn, with torch.nn.Module's behaviour
(registration by attribute assignment, named_* iterators, train/eval,
state_dict/load_state_dict, zero_grad)."""
import collections
import collections.abc
import itertools
import os
import weakref

import numpy as np

from ... import _C
from .._grad import no_grad
from ..parameter import Buffer, Parameter

Tensor = _C.Tensor

_IncompatibleKeys = collections.namedtuple("IncompatibleKeys",
                                           ["missing_keys", "unexpected_keys"])

_USER_ERRORS = (ValueError, TypeError, IndexError)
_hook_ids = itertools.count()

# Parameters, buffers and submodules are also kept as plain instance
# attributes (see _MemberDict), so ``self.weight`` in a forward is an
# ordinary attribute read rather than a failed lookup, an AttributeError and
# a call of ``__getattr__`` (about 1 us each, ~70 per GPT forward).
# DTORCH_FAST_MODULE_ATTRS=0 keeps them in the member dicts only.
_MIRROR_MEMBERS = os.environ.get("DTORCH_FAST_MODULE_ATTRS", "1") != "0"
_MEMBER_KEYS = ("_parameters", "_buffers", "_modules")


def _on_type(cls, name):
    """Whether `name` is an attribute of the class (which, for a method or
    plain class attribute, an instance attribute would hide)."""
    return any(name in k.__dict__ for k in cls.__mro__)


class _MemberDict(dict):
    """A module's ``_parameters``, ``_buffers`` or ``_modules``: a dict whose
    every change also updates the owner's instance attribute of that name
    (``Module._mirror``), so direct writes such as
    ``module._parameters["weight"] = p`` stay visible as ``module.weight``."""

    __slots__ = ("_owner",)

    def __init__(self, owner, items=()):
        # A weak reference: a strong one would make every module part of a
        # reference cycle, so a dropped module (and its parameters' values
        # on the workers) would wait for the cyclic garbage collector.
        dict.__init__(self, items)
        self._owner = weakref.ref(owner)

    def _changed(self, name):
        owner = self._owner()
        if owner is not None:
            owner._mirror(name)

    def __reduce_ex__(self, protocol):
        # Copied and pickled as a plain dict; Module.__setstate__ makes the
        # copy's own _MemberDict (the weak reference must name the copy).
        return (dict, (dict(self),))

    def __setitem__(self, name, value):
        dict.__setitem__(self, name, value)
        self._changed(name)

    def __delitem__(self, name):
        dict.__delitem__(self, name)
        self._changed(name)

    def pop(self, name, *default):
        value = dict.pop(self, name, *default)
        self._changed(name)
        return value

    def popitem(self):
        name, value = dict.popitem(self)
        self._changed(name)
        return name, value

    def setdefault(self, name, default=None):
        value = dict.setdefault(self, name, default)
        self._changed(name)
        return value

    def update(self, *args, **kwargs):
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self):
        names = list(self)
        dict.clear(self)
        for name in names:
            self._changed(name)


def _member_dict(owner):
    return _MemberDict(owner) if _MIRROR_MEMBERS else {}


class RemovableHandle:
    """Unregisters a hook: ``handle.remove()`` (also as a context manager)."""

    def __init__(self, table, key, kwargs_set):
        self._table, self.id, self._kwargs_set = table, key, kwargs_set

    def remove(self):
        self._table.pop(self.id, None)
        self._kwargs_set.discard(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _check_name(kind, name, module):
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain ".", got: {name}')


class Module:
    """Base class of every module, as ``torch.nn.Module``: subclasses set
    parameters, buffers and submodules as attributes in ``__init__`` and
    compute in ``forward``.

    A user mistake inside ``forward`` (a shape mismatch, ...) raises the
    same exception type with the module's path and type in front of the op's
    message: ``fc2 (Linear): matmul: shapes (4, 16) and (8, 3) cannot be
    multiplied (16 != 8)``.

    Example:
        >>> import dtorch
        >>> class MLP(dtorch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc1 = dtorch.nn.Linear(4, 8)
        ...         self.fc2 = dtorch.nn.Linear(8, 2)
        ...     def forward(self, x):
        ...         return self.fc2(self.fc1(x).relu())
        >>> [n for n, _ in MLP().named_parameters()]
        ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    """

    training: bool

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_mirrored_names", set())
        object.__setattr__(self, "_parameters", _member_dict(self))
        object.__setattr__(self, "_buffers", _member_dict(self))
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", _member_dict(self))
        object.__setattr__(self, "_forward_pre_hooks", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks", collections.OrderedDict())
        object.__setattr__(self, "_hooks_with_kwargs", set())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  '"forward" function')

    def __call__(self, *args, **kwargs):
        try:
            if not (self._forward_pre_hooks or self._forward_hooks):
                return self.forward(*args, **kwargs)
            return self._call_with_hooks(args, kwargs)
        except _USER_ERRORS as e:
            self._name_in_error(e)
            raise

    def _call_with_hooks(self, args, kwargs):
        for key, hook in list(self._forward_pre_hooks.items()):
            if key in self._hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for key, hook in list(self._forward_hooks.items()):
            if key in self._hooks_with_kwargs:
                result = hook(self, args, kwargs, output)
            else:
                result = hook(self, args, output)
            if result is not None:
                output = result
        return output

    def _add_hook(self, table, hook, prepend, with_kwargs):
        key = next(_hook_ids)
        table[key] = hook
        if prepend:
            table.move_to_end(key, last=False)
        if with_kwargs:
            self._hooks_with_kwargs.add(key)
        return RemovableHandle(table, key, self._hooks_with_kwargs)

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` with
        ``with_kwargs``) runs before ``forward``; a non-None result replaces
        the arguments. Returns a handle whose ``remove()`` unregisters it."""
        return self._add_hook(self._forward_pre_hooks, hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs,
        output)``) runs after ``forward``; a non-None result replaces the
        output. Returns a handle whose ``remove()`` unregisters it."""
        return self._add_hook(self._forward_hooks, hook, prepend, with_kwargs)

    def _name_in_error(self, e):
        """Puts this module's path (relative to the outermost module the
        error passes through) and type in front of the message."""
        inner = getattr(e, "_dtorch_module", None)
        if inner is None:
            e._dtorch_module = self
            e._dtorch_message = str(e.args[0]) if e.args else str(e)
            path = ""
        else:
            path = next((n for n, m in self.named_modules() if m is inner), None)
            if path is None:  # raised by a module that is not our descendant
                return
        desc = f"{path} ({type(inner or self).__name__})" if path else type(self).__name__
        e.args = (f"{desc}: {e._dtorch_message}",) + tuple(e.args[1:])

    # ---- registration ------------------------------------------------------
    def register_parameter(self, name, param):
        """Adds a parameter (a `Parameter`, or None for an absent one)."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name, self)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (dtorch.nn.Parameter or None required)")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Adds a buffer: state that is not a parameter (in ``state_dict``
        unless ``persistent=False``)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name, self)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (dtorch.Tensor or None required)")
        if isinstance(tensor, Buffer):
            persistent = tensor.persistent
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        """Adds a submodule (or None)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        _check_name("module", name, self)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        mod = self
        for item in target.split(".") if target else []:
            if item not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target):
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return mod._parameters[name]

    def __setattr__(self, name, value):
        def remove_from(*dicts):
            for d in dicts:
                if name in d:
                    if d is self.__dict__:
                        object.__delattr__(self, name)
                    else:
                        del d[name]

        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(self.__dict__, self._buffers, self._modules)
            self._non_persistent_buffers_set.discard(name)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (dtorch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            modules = self.__dict__.get("_modules")
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(self.__dict__, self._parameters, self._buffers)
            self._non_persistent_buffers_set.discard(name)
            modules[name] = value
        elif self.__dict__.get("_modules") is not None and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (dtorch.nn.Module or None expected)")
            self._modules[name] = value
        elif isinstance(value, Buffer) or (self.__dict__.get("_buffers") is not None
                                           and name in self._buffers):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(dtorch.Tensor or None expected)")
            persistent = value.persistent if isinstance(value, Buffer) else \
                name not in self._non_persistent_buffers_set
            remove_from(self.__dict__, self._parameters, self._modules)
            self.register_buffer(name, value, persistent)
        else:
            object.__setattr__(self, name, value)

    def __setstate__(self, state):
        """Copies and unpickled modules: the member dicts arrive as plain
        dicts (_MemberDict.__reduce_ex__) and become this module's own."""
        self.__dict__.update(state)
        if _MIRROR_MEMBERS and "_mirrored_names" in state:
            # A shallow copy (copy.copy) gets its own set and dicts too.
            object.__setattr__(self, "_mirrored_names", set(state["_mirrored_names"]))
            for key in _MEMBER_KEYS:
                if key in state:
                    object.__setattr__(self, key, _MemberDict(self, state[key]))

    def _mirror(self, name):
        """Makes the instance attribute `name` the member of that name (the
        first of parameters, buffers, modules that has it, as __getattr__
        looks them up), or removes it when no member has the name. A plain
        attribute or a class attribute of that name is left alone: it is
        found before __getattr__ would be asked, so it must stay so."""
        d = self.__dict__
        mirrored = d.get("_mirrored_names")
        if mirrored is None:
            return
        for key in _MEMBER_KEYS:
            members = d.get(key)
            if members is not None and name in members:
                if name in mirrored or (name not in d and not _on_type(type(self), name)):
                    d[name] = members[name]
                    mirrored.add(name)
                return
        if name in mirrored:
            mirrored.discard(name)
            d.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if key in d and name in d[key]:
                return d[key][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(key, {}):
                del self.__dict__[key][name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    # ---- iteration -----------------------------------------------------------
    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for k, v in get_members(module):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield (module_prefix + ("." if module_prefix else "") + k, v)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """(name, Parameter) pairs in registration order, as torch names them."""
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                   remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                   remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self):
        memo = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    # ---- modes and helpers -----------------------------------------------------
    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, *args, dtype=None, **kwargs):
        """``module.to(dtype)``: converts floating-point parameters and
        buffers (a new Parameter per converted one, shared ones stay
        shared; build optimizers afterwards). Devices: dtorch places values
        with ``device_mesh``/``placements`` instead, so only "cpu" is
        accepted."""
        for a in args:
            if isinstance(a, _C.dtype):
                dtype = a
            elif isinstance(a, str) and a != "cpu":
                raise ValueError(f"to({a!r}): dtorch modules stay on their meshes")
        if dtype is None:
            return self
        floating = (_C.dtype.float32, _C.dtype.float64, _C.dtype.float16, _C.dtype.bfloat16)
        if dtype not in floating:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, got {dtype}")
        converted = {}

        def convert(t, param):
            if t is None or t.dtype not in floating or t.dtype == dtype:
                return t
            if id(t) not in converted:
                if t.is_meta:
                    raw = [("R", 0, "") if k == "P" else (k, d, o)
                           for k, d, o in t._placements_raw]
                    value = _C.meta(list(t.shape), dtype, t._mesh_id, raw, t._view)
                else:
                    with no_grad():
                        value = _C.cast(t, dtype)
                converted[id(t)] = Parameter(value, t.requires_grad) if param else value
            return converted[id(t)]

        for m in self.modules():
            for k, p in m._parameters.items():
                m._parameters[k] = convert(p, True)
            for k, b in m._buffers.items():
                m._buffers[k] = convert(b, False)
        return self

    def float(self):
        return self.to(_C.dtype.float32)

    def double(self):
        return self.to(_C.dtype.float64)

    def half(self):
        return self.to(_C.dtype.float16)

    def bfloat16(self):
        return self.to(_C.dtype.bfloat16)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Drops (or zeroes) the gradient of every parameter."""
        for p in self.parameters():
            g = getattr(p, "grad", None)
            if g is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                with no_grad():
                    g.zero_()

    def reset_parameters_recursively(self):
        """Calls ``reset_parameters()`` of every module that has one (the
        second half of meta-style init, after `to_empty`)."""
        for m in self.modules():
            if hasattr(type(m), "reset_parameters"):
                m.reset_parameters()
        return self

    def to_empty(self, *, device=None, recurse=True):
        """Gives every parameter and buffer a value (zeros) with its shape,
        dtype, mesh and placements, computed on the workers in that layout:
        the second step of meta-device init (`dtorch.nn.meta_init` or
        ``device="meta"``), before ``reset_parameters`` or
        ``load_state_dict``. Placements changed while the module was meta
        (by a parallel style) are kept, so nothing is ever materialised in
        another layout, nor on the client."""
        with no_grad():
            for t in list(self.parameters(recurse)) + list(self.buffers(recurse)):
                raw = [("R", 0, "") if k == "P" else (k, d, o) for k, d, o in t._placements_raw]
                t._assign(_C.full(list(t.shape), 0.0, t.dtype, t._mesh_id, raw, t._view))
        return self

    # ---- state ---------------------------------------------------------------
    def _state_items(self, prefix=""):
        for name, module in self.named_modules(prefix=prefix, remove_duplicate=False):
            pre = name + ("." if name else "")
            for k, p in module._parameters.items():
                if p is not None:
                    yield pre + k, p
            for k, b in module._buffers.items():
                if b is not None and k not in module._non_persistent_buffers_set:
                    yield pre + k, b

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An ordered dict of every parameter and persistent buffer by its
        dotted name (torch's keys). The values are the module's own tensor
        objects: dtorch has no views, so returning them is what lets an
        in-place load into the dict (a checkpoint load) reach the module;
        fetch them with ``.numpy()``."""
        if destination is None:
            destination = collections.OrderedDict()
        for k, v in self._state_items(prefix):
            destination[k] = v
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Loads values (numpy arrays, torch tensors, dtorch tensors on any
        mesh, nested lists) into the parameters and buffers, in place, each
        keeping its mesh, placements and dtype.

        Every key is checked before anything is loaded: missing or
        unexpected keys (with ``strict=True``) and shape mismatches raise one
        RuntimeError that lists every offending key, and the module keeps
        all its old values.

        Returns:
            a namedtuple ``(missing_keys, unexpected_keys)``.
        """
        from ..._inplace import _as_value
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        own = collections.OrderedDict(self._state_items())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.append("Missing key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in missing) + ". ")
        for k, target in own.items():
            if k not in state_dict:
                continue
            v = state_dict[k]
            shape = tuple(v.shape) if hasattr(v, "shape") else np.shape(v)
            if tuple(shape) != tuple(target.shape):
                errors.append(f"size mismatch for {k}: copying a param with shape "
                              f"{tuple(shape)} from checkpoint, the shape in current model "
                              f"is {tuple(target.shape)}.")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        with no_grad():
            values = [(own[k], _as_value(own[k], state_dict[k])) for k in own if k in state_dict]
            for target, value in values:
                target._assign(value)
        return _IncompatibleKeys(missing, unexpected)

    # ---- printing ------------------------------------------------------------
    def extra_repr(self):
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        children = []
        for name, m in self._modules.items():
            text = repr(m).replace("\n", "\n  ")
            children.append(f"({name}): {text}")
        body = lines + children
        if not body:
            return self._get_name() + "()"
        if len(lines) == 1 and not children:
            return f"{self._get_name()}({lines[0]})"
        return self._get_name() + "(\n  " + "\n  ".join(body) + "\n)"
