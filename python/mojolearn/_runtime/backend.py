"""Numeric mode and vendor selection, binding loading and the ABI check.

The numeric mode is chosen once per process, before first use: `set_numeric_mode(mode)`, else
the environment variable MOJOLEARN_NUMERIC_MODE, else 'identical'. The vendor: the environment
variable MOJOLEARN_VENDOR, else the first GPU vendor whose binding loads and finds a device,
else 'cpu'. Both are read back from the loaded binary (`build_info`), not from the request.

CPU level (cpu vendor): x86_64 installs carry, per numeric mode, a portable x86-64-v3 (AVX2)
binding and a `_v4` one built for x86-64-v4 (AVX-512). The v4 one loads when it exists and the
CPU has AVX-512 F, BW, CD, DQ and VL (read once from /proc/cpuinfo on first load; any other
system gets v3). MOJOLEARN_CPU_LEVEL=v3 forces the portable binding, =v4 requires the AVX-512
one, =auto (or unset) chooses. Identical-mode bits do not depend on the SIMD width, so both
identical bindings give the same bits (the v4 one is faster); a fast-mode run's bits may
differ between them (DEVIATIONS.md 31).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading

from .._buffers import reader as _reader
from . import abi as _abi

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Literal

MODES = ("identical", "fast")
VENDORS = ("cpu", "cuda", "hip")
_GPU_ORDER = ("cuda", "hip")
CPU_LEVELS = ("auto", "v3", "v4")
_V4_FLAGS = frozenset(("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"))
# x86-64-v3's vector and fused multiply-add extensions (every CPU with both has the rest of
# x86-64-v3: BMI2, F16C, MOVBE came with them on Intel and AMD): profile v2's dot products are chains of
# hardware fma, so an older x86 CPU (x86-64-v2 and below) is refused by name, in both modes (no
# software fma: it would run identical mode several times slower than the fast path it mirrors).
_V3_FLAGS = frozenset(("avx2", "fma"))
_STEM = "_mojolearn_training"
_ERRORS = (
    ("ValueError: ", ValueError),
    ("RuntimeError: ", RuntimeError),
    ("TypeError: ", TypeError),
    ("MemoryError: ", MemoryError),
)

_lock = threading.RLock()
_requested_mode = None
_loaded: Binding | None = None  # the Binding, once loaded
_cpu_flags = None  # the CPU's feature flags, read once on first need


def _check_mode(mode, what):
    if mode not in MODES:
        raise ValueError(f"{what} must be 'identical' or 'fast', got {mode!r}")
    return mode


def requested_mode():
    with _lock:
        if _requested_mode is not None:
            return _requested_mode
        return _check_mode(
            os.environ.get("MOJOLEARN_NUMERIC_MODE") or "identical", "MOJOLEARN_NUMERIC_MODE"
        )


def set_numeric_mode(mode: Literal["identical", "fast"]) -> None:
    """Select the numeric mode of this process, before first use.

    Args:
        mode: 'identical' (the default: the same bits on every machine) or 'fast'.

    Raises:
        ValueError: another mode name.
        RuntimeError: a binding of the other mode has loaded already (the mode is fixed then).

    Example:
        >>> mojolearn.set_numeric_mode("fast")  # before anything computes
    """
    global _requested_mode
    with _lock:
        _check_mode(mode, "mode")
        if _loaded is not None and _loaded.mode != mode:
            raise RuntimeError(
                f"the numeric mode is fixed once a binding has loaded: this process runs "
                f"{_loaded.mode!r} already; select {mode!r} before first use (call "
                f"set_numeric_mode first, or set MOJOLEARN_NUMERIC_MODE={mode})"
            )
        _requested_mode = mode


def translate(exc):
    """The typed exception a binding error stands for (bound Mojo functions raise plain
    Exception; the message starts with the intended type)."""
    if type(exc) is not Exception:
        return exc
    msg = str(exc)
    for prefix, cls in _ERRORS:
        if msg.startswith(prefix):
            return cls(msg[len(prefix) :])
    return RuntimeError(f"mojolearn binding error: {msg}")


class Binding:
    """A loaded binding module: entries as attributes that raise typed exceptions, except the
    hot entries of `_abi.RAW_ENTRIES` (their callers pass `translate` what they catch);
    `raw` is the module itself for plumbing that must bypass a wrapped entry."""

    def __init__(self, module):
        self.raw = module
        self.name = module.__name__.rpartition(".")[2]
        info = [str(x) for x in module.build_info()]
        self.vendor, self.mode, self.target_cpu, self.accelerator = info
        problem = _abi.first_difference(_abi.parse(module.abi_layout()))
        if problem is not None:
            raise ImportError(
                f"mojolearn binding {self.name} does not match the Python ABI "
                f"declaration: {problem}"
            )
        for entry in _abi.LAYOUT:
            fn = getattr(module, entry)
            setattr(self, entry, fn if entry in _abi.RAW_ENTRIES else _typed(fn))

    def __repr__(self):
        return f"<mojolearn binding {self.name}>"


def _typed(fn):
    def call(*args):
        try:
            return fn(*args)
        except Exception as exc:
            raise translate(exc) from None

    call.__name__ = getattr(fn, "__name__", "entry")
    return call


def _import(vendor, mode, suffix=""):
    with _environment_kept():
        return importlib.import_module(f"mojolearn.{_STEM}_{vendor}_{mode}{suffix}")


class _environment_kept:
    """Leave the process's C environment exactly as it was across loading a binding: the Mojo
    runtime's Python initialization calls setenv (PYTHONEXECUTABLE, PYTHONPATH,
    MOJO_PYTHON_LIBRARY) behind Python's back, and every child the program then starts would
    inherit them (`subprocess.run([sys.executable, ...])` outside the user's virtualenv)."""

    def __enter__(self):
        import ctypes

        self._libc = libc = ctypes.CDLL(None)
        libc.setenv.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        libc.unsetenv.argtypes = [ctypes.c_char_p]
        self._environ = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
        self._before = self._snapshot()
        return self

    def _snapshot(self):
        out, i = {}, 0
        while self._environ[i] is not None:
            key, _, value = self._environ[i].partition(b"=")
            out[key] = value
            i += 1
        return out

    def __exit__(self, *exc):
        after = self._snapshot()
        for key in after.keys() - self._before.keys():
            self._libc.unsetenv(key)
        for key, value in self._before.items():
            if after.get(key) != value:
                self._libc.setenv(key, value, 1)
        return False


def cpu_flags():
    """The CPU feature flags the kernel reports (Linux /proc/cpuinfo), read once; empty elsewhere."""
    global _cpu_flags
    if _cpu_flags is None:
        flags = frozenset()
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() == "flags":
                        flags = frozenset(value.split())
                        break
        except OSError:
            pass
        _cpu_flags = flags
    return _cpu_flags


def cpu_has_v4():
    """Whether this CPU runs x86-64-v4 code: AVX-512 F, BW, CD, DQ and VL."""
    return _V4_FLAGS <= cpu_flags()


def _cpu_level():
    level = (os.environ.get("MOJOLEARN_CPU_LEVEL") or "auto").strip().lower()
    if level not in CPU_LEVELS:
        raise ValueError(f"MOJOLEARN_CPU_LEVEL must be one of {CPU_LEVELS}, got {level!r}")
    return level


def check_cpu_has_fma(flags=None):
    """Refuse an x86_64 CPU without x86-64-v3 (AVX2 and FMA): the cpu bindings are built for
    it, and identical mode's arithmetic (docs/ARITHMETIC.md, profile v2) needs hardware fma.
    Other architectures (aarch64 has fma in every core) and hosts without /proc/cpuinfo pass."""
    import platform

    flags = cpu_flags() if flags is None else flags
    if platform.machine().lower() not in ("x86_64", "amd64") or not flags:
        return
    missing = sorted(_V3_FLAGS - flags)
    if missing:
        raise ImportError(
            f"mojolearn: this CPU lacks {', '.join(missing)} (x86-64-v3): identical mode "
            f"computes every dot product as a chain of hardware fused multiply-adds "
            f"(profile mojolearn.portable-fp32.v2) and the cpu bindings are built for "
            f"x86-64-v3; there is no software fallback"
        )


def _pick_suffix(vendor, mode):
    """'_v4' to load the AVX-512 cpu binding of `mode`, '' for the regular one."""
    level = _cpu_level()
    if vendor != "cpu" or level == "v3":
        return ""
    have = _available(vendor, mode, "_v4")
    if level == "v4":
        if not have:
            raise ImportError(
                f"MOJOLEARN_CPU_LEVEL=v4, but this install has no x86-64-v4 "
                f"{mode} binding (built on x86_64 unless MOJOLEARN_TARGET_CPU is "
                f"set or MOJOLEARN_BUILD_V4=0)"
            )
        if not cpu_has_v4():
            missing = ", ".join(sorted(_V4_FLAGS - cpu_flags()))
            raise ImportError(
                f"MOJOLEARN_CPU_LEVEL=v4, but this CPU lacks {missing}; "
                f"use MOJOLEARN_CPU_LEVEL=v3 or auto"
            )
        return "_v4"
    return "_v4" if have and cpu_has_v4() else ""


def _available(vendor, mode, suffix=""):
    return importlib.util.find_spec(f"mojolearn.{_STEM}_{vendor}_{mode}{suffix}") is not None


def _pick_vendor(mode):
    env = os.environ.get("MOJOLEARN_VENDOR")
    if env:
        if env not in VENDORS:
            raise ValueError(f"MOJOLEARN_VENDOR must be one of {VENDORS}, got {env!r}")
        if not _available(env, mode):
            raise ImportError(
                f"MOJOLEARN_VENDOR={env}, but this install has no {env} binding "
                f"for mode {mode!r} (build with MOJOLEARN_VENDORS={env})"
            )
        return env
    for vendor in _GPU_ORDER:
        if _available(vendor, mode):
            try:
                if int(_import(vendor, mode).device_count()) > 0:
                    return vendor
            except Exception:  # no driver, no device: fall through to the next vendor
                continue
    return "cpu"


def binding():
    """The binding for this process's (vendor, mode), loaded and ABI-checked once."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            mode = requested_mode()
            vendor = _pick_vendor(mode)
            if vendor == "cpu":
                check_cpu_has_fma()
            suffix = _pick_suffix(vendor, mode)
            try:
                module = _import(vendor, mode, suffix)
            except ImportError as exc:
                raise ImportError(
                    f"mojolearn: cannot load the {vendor}/{mode}{suffix} binding "
                    f"({exc}); reinstall with `pip install .`"
                ) from exc
            _loaded = Binding(module)
        return _loaded


def host_entry(name):
    """A raw entry of host code, the same in every build (`intake_read`, `array_take`), WITHOUT
    fixing this process's numeric mode: the loaded binding's when there is one, else the cpu
    identical module's (always built), ABI-checked but not recorded as the binding."""
    with _lock:
        if _loaded is not None:
            return getattr(_loaded.raw, name)
        check_cpu_has_fma()
        try:
            return getattr(Binding(_import("cpu", "identical")).raw, name)
        except ImportError as exc:
            raise ImportError(
                f"mojolearn: cannot load the cpu/identical binding ({exc}); "
                f"reinstall with `pip install .`"
            ) from exc


def numeric_mode_used() -> str:
    """The numeric mode this process computes in (loading the binding if none has loaded).

    Returns:
        'identical' or 'fast', read from the loaded binary.
    """
    return binding().mode  # type: ignore[no-any-return]  # the binding is untyped


def vendor_used() -> str:
    """The vendor whose binding this process uses (loading it if none has loaded).

    Returns:
        'cpu', 'cuda' or 'hip', read from the loaded binary.
    """
    return binding().vendor  # type: ignore[no-any-return]


# The buffer layer reads objects through the binding's host entries but sits below the runtime,
# so the runtime hands it the loader (looked up at call time: tests may wrap these).
_reader.provide(lambda name: host_entry(name), lambda exc: translate(exc))
