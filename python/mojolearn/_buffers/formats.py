"""Buffer format codes without NumPy: native-endian float32 and 32-bit integers are recognised
by struct code and itemsize, never by guessing from values; `dtype_name` names any format in
error messages. A leaf: it imports nothing from the package (`_reader` reads layouts,
`_intake` decides what to accept)."""

import sys

_NATIVE = "<" if sys.byteorder == "little" else ">"
_INT_CODES = frozenset("bBhHiIlLqQnN")
_FLOAT_NAMES = {2: "float16", 4: "float32", 8: "float64"}


def split_format(fmt):
    """('<' / '>' / '' for native, code) of a single-item struct format such as '<f' or 'i'."""
    if fmt and fmt[0] in "@=<>!":
        prefix, code = fmt[0], fmt[1:]
        prefix = "" if prefix in "@=" or prefix == _NATIVE else (">" if prefix == "!" else prefix)
        return prefix, code
    return "", fmt


def is_native_f32(fmt, itemsize=4):
    prefix, code = split_format(fmt)
    return prefix == "" and code == "f" and itemsize == 4


def is_integer(fmt):
    return split_format(fmt)[1] in _INT_CODES


def is_int32(fmt, itemsize):
    prefix, code = split_format(fmt)
    return prefix == "" and code in _INT_CODES and code.islower() and itemsize == 4


_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}


def dtype_name(fmt, itemsize):
    """A readable name for error messages: 'float64', 'int64', 'uint8', '>f4', 'bool' ..."""
    if fmt.startswith("dlpack:"):  # a DLPack dtype with no struct code: (code, bits, lanes)
        code, bits, lanes = (int(x) for x in fmt.split(":")[1:])
        name = f"{_DL_CODES.get(code, f'type code {code}')}{bits}"
        return name + (f"x{lanes}" if lanes != 1 else "")
    prefix, code = split_format(fmt)
    if code == "?":
        name = "bool"
    elif code in "efd":
        name = _FLOAT_NAMES.get(itemsize, f"float{8 * itemsize}")
    elif code in _INT_CODES:
        name = ("int" if code.islower() else "uint") + str(8 * itemsize)
    else:
        return f"format {fmt!r}"
    return name if prefix == "" else f"{name} ({'big' if prefix == '>' else 'little'}-endian)"
