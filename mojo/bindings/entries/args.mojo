"""Unpacking of a binding call's `(addresses, params)` and the error convention.

Every entry takes its addresses and params in the exact order of its layout (the table in
`_mojolearn_training.mojo`, mirrored by `mojolearn/_runtime/abi.py`). Errors are raised as
`Error("ValueError: <entry>: ...")` / `Error("RuntimeError: ...")`; the Python side maps the
prefix to the exception type (a bound Mojo function can only raise plain `Exception`).
"""
from std.ffi import external_call
from std.python import PythonObject

from training.checks import first_nonfinite
from training.config import F32P, I32P, I64P, F64P


struct Layout(ImplicitlyCopyable):
    """An entry's ABI: its name, ordered address names and ordered param names (comma lists).
    The counts are computed once, when the `comptime` constant is formed (counting commas on
    every call cost more than a batch-1 step's argument checks)."""

    var name: StaticString
    var addrs: StaticString
    var params: StaticString
    var _n_addrs: Int
    var _n_params: Int

    def __init__(out self, name: StaticString, addrs: StaticString, params: StaticString):
        self.name = name
        self.addrs = addrs
        self.params = params
        self._n_addrs = _count_names(addrs)
        self._n_params = _count_names(params)

    def n_addrs(self) -> Int:
        return self._n_addrs

    def n_params(self) -> Int:
        return self._n_params


def _count_names(names: StaticString) -> Int:
    if names.byte_length() == 0:
        return 0
    return names.count(",") + 1


struct Args(Movable):
    """The addresses and params of one call, checked against the entry's layout counts."""

    var entry: StaticString
    var addrs: List[Int]
    var params: List[Float64]

    def __init__(out self, layout: Layout, addrs: PythonObject, params: PythonObject) raises:
        var entry = layout.name
        var n_addrs = layout.n_addrs()
        var n_params = layout.n_params()
        self.entry = entry
        var na = Int(py=addrs.__len__())
        var np = Int(py=params.__len__())
        if na != n_addrs:
            raise Error("ValueError: ", entry, ": expected ", n_addrs, " addresses, got ", na)
        if np != n_params:
            raise Error("ValueError: ", entry, ": expected ", n_params, " params, got ", np)
        self.addrs = List[Int](capacity=na)
        for i in range(na):
            var a = Int(py=addrs[i])
            if a == 0:
                raise Error("ValueError: ", entry, ": address ", i, " is null")
            self.addrs.append(a)
        self.params = List[Float64](capacity=np)
        for i in range(np):
            self.params.append(Float64(py=params[i]))

    def __init__(out self, layout: Layout, packed_addrs: Int, packed_params: Int) raises:
        """Packed form for hot entries: an int64 array [count, a0, a1, ...] and a float64 array
        [count, p0, p1, ...], passed by address (no Python list reads)."""
        var entry = layout.name
        var n_addrs = layout.n_addrs()
        var n_params = layout.n_params()
        self.entry = entry
        var qa = I64P(unsafe_from_address=packed_addrs)
        var dp = F64P(unsafe_from_address=packed_params)
        var na = Int(qa[unsafe_offset=0])
        var np = Int(dp[unsafe_offset=0])
        if na != n_addrs or np != n_params:
            raise Error("ValueError: ", entry, ": expected ", n_addrs, " addresses and ", n_params,
                        " params, got ", na, " and ", np)
        self.addrs = List[Int](capacity=na)
        for i in range(na):
            var a = Int(qa[unsafe_offset=i + 1])
            if a == 0:
                raise Error("ValueError: ", entry, ": address ", i, " is null")
            self.addrs.append(a)
        self.params = List[Float64](capacity=np)
        for i in range(np):
            self.params.append(dp[unsafe_offset=i + 1])

    def f32(self, i: Int) -> F32P:
        return F32P(unsafe_from_address=self.addrs[i])

    def i32(self, i: Int) -> I32P:
        return I32P(unsafe_from_address=self.addrs[i])

    def int(self, i: Int, name: StaticString, lo: Int = 0, hi: Int = 1 << 40) raises -> Int:
        """Param `i` as an integer in [lo, hi]; refuses fractions and out-of-range values."""
        var v = self.params[i]
        if not (v >= Float64(lo) and v <= Float64(hi)) or Float64(Int(v)) != v:
            raise Error("ValueError: ", self.entry, ": ", name, " must be an integer in [", lo,
                        ", ", hi, "], got ", v)
        return Int(v)

    def flag(self, i: Int, name: StaticString) raises -> Bool:
        return self.int(i, name, 0, 1) == 1

    def f32param(self, i: Int) -> Float32:
        return Float32(self.params[i])

    def f64param(self, i: Int) -> Float64:
        """Param `i` as given (the optimizers' hyperparameters stay binary64: profile v2)."""
        return self.params[i]


def refuse_nonfinite(entry: StaticString, output: StaticString, p: F32P, n: Int) raises:
    """Raise RuntimeError naming the entry and the output when `p[0:n]` holds a NaN/Inf."""
    var bad = first_nonfinite(p, n)
    if bad >= 0:
        raise Error("RuntimeError: ", entry, ": output '", output, "' is not finite at index ", bad)


def int_arg(entry: StaticString, name: StaticString, obj: PythonObject, lo: Int,
            hi: Int) raises -> Int:
    """A positional int argument of a hot entry, in [lo, hi]. Read with PyLong_AsSsize_t,
    which refuses floats and strings (`Int(py=)` truncates 1.5 and parses "3") and is cheaper."""
    var v = external_call["PyLong_AsSsize_t", Int](obj._obj_ptr)
    if v == -1 and external_call["PyErr_Occurred", Int]() != 0:
        external_call["PyErr_Clear", NoneType]()
        raise Error("TypeError: ", entry, ": ", name, " must be an int (a C ssize_t)")
    if v < lo or v > hi:
        raise Error("ValueError: ", entry, ": ", name, " must be an integer in [", lo, ", ", hi,
                    "], got ", v)
    return v


def addr_arg(entry: StaticString, name: StaticString, obj: PythonObject) raises -> Int:
    var a = int_arg(entry, name, obj, 0, Int.MAX)
    if a == 0:
        raise Error("ValueError: ", entry, ": address '", name, "' is null")
    return a
