"""The SmallMLPTrainer state: names, shapes and the checks every way in goes through.

The constructor, `load_state_dict` and the checkpoint loader share these checks, so a state
refused by one is refused by all, with the same message. Nothing here touches the binding:
the checkpoint loader (and a fuzzer feeding it bytes) runs without it.
"""

import array as _pyarray
import json
import math
import numbers
import operator

from .._buffers.array import Array, frombytes
from .._buffers.intake import owned_tensor
from .._runtime.portable import f32_in_range, round_f32
from . import lr_schedule as _lrs
from .schema import MLP_RECORD, SMALL_RECORD
from .spec import SMALL

NAMES, SHAPES, OFFSETS, TOTAL = SMALL.names, SMALL.shapes, SMALL.offsets, SMALL.total
ARCHITECTURE = list(SMALL.sizes)
SCHEMA, MLP_SCHEMA = SMALL_RECORD.state_schema, MLP_RECORD.state_schema
OPTIMIZER = "AdamW"
# The v1 schema's step counter is an int32 (the reference layout), whatever the transport.
STEP_INT32_MAX = (1 << 31) - 1
CONFIG_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay")
STATE_KEYS = frozenset(
    (
        "schema",
        "architecture",
        "numeric_mode",
        "parameter_order",
        "weights",
        "optimizer",
        "config",
        "data_schedule",
    )
)
# Present only while a learning-rate schedule is set (`_lr_schedule`'s record), so a state
# without one is the reference's v1 layout, field for field.
OPTIONAL_STATE_KEYS = frozenset(("lr_schedule",))
MODES = ("identical", "fast")

_SCHEDULE_NODES = 128
_SCHEDULE_DEPTH = 8
_SCHEDULE_STRING = 2048
_SCHEDULE_BYTES = 2048
# data_schedule=None in the MLP trainers' constructors: a record saying that none was given
# (their schedules are non-empty; `Trainer`'s None stays {}, as its state hashes pin).
DEFAULT_SCHEDULE = {"source": "unspecified"}
# api -> (nodes, canonical bytes). SmallMLPTrainer keeps the reference's v1 bounds above;
# MLPTrainer and Trainer (our own schemas) leave room for what `mojolearn train` records of its data at
# any width (a name, a mean and a standard deviation per input column, a name per class),
# still well inside the 1 MiB that checkpoint.MLP_MAX_BYTES keeps beside the tensors.
_SCHEDULE_BOUNDS = {api: (1 << 16, 512 << 10) for api in ("MLPTrainer", "Trainer")}


def canonical(value):
    """Canonical JSON bytes: sorted keys, no spaces, ASCII, NaN/Infinity refused."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _scalar(value, name, api="SmallMLPTrainer"):
    # A real number by the `numbers` ABCs, as the optimizers check it: NumPy registers its
    # floats and ints there, not its bools (whose type name changed in NumPy 2).
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{api}: {name} must be a real number, got {value!r} ({type(value).__name__})"
        )
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(
            f"{api}: {name} must be a real number, got {type(value).__name__}"
        ) from None
    if round_f32(x, overflow="none") is None:
        raise ValueError(f"{api}: {name} must be a finite float32, got {x!r}")
    return x


def check_config(lr, betas, eps, weight_decay, api="SmallMLPTrainer"):
    """The five hyperparameters as given (binary64: profile v2 forms the step's scalars from
    them), checked by torch's rules both as given and rounded to float32 (the per-element
    update uses the rounded beta, eps and weight decay): 1e-50 is refused as an lr."""
    if isinstance(betas, (str, bytes)):
        raise ValueError(f"{api}: betas must be a pair of numbers, got {betas!r}")
    try:
        beta1, beta2 = betas
    except (TypeError, ValueError):
        raise ValueError(f"{api}: betas must be a pair of numbers, got {betas!r}") from None
    cfg = {
        "lr": _scalar(lr, "lr", api),
        "beta1": _scalar(beta1, "betas[0]", api),
        "beta2": _scalar(beta2, "betas[1]", api),
        "eps": _scalar(eps, "eps", api),
        "weight_decay": _scalar(weight_decay, "weight_decay", api),
    }
    # The values are finite float32 by now; a nonzero code is a value outside its range.
    if f32_in_range(cfg["lr"], 0.0, lo_open=True):
        raise ValueError(f"{api}: invalid learning rate {lr!r} (must be > 0 in float32)")
    if f32_in_range(cfg["eps"], 0.0, lo_open=True):
        raise ValueError(f"{api}: invalid eps {eps!r} (must be > 0 in float32)")
    if f32_in_range(cfg["weight_decay"], 0.0):  # x >= 0 holds for its rounding too
        raise ValueError(f"{api}: invalid weight_decay {weight_decay!r} (must be >= 0)")
    for i, key in enumerate(("beta1", "beta2")):
        if f32_in_range(cfg[key], 0.0, 1.0, hi_open=True):
            raise ValueError(
                f"{api}: invalid beta at index {i}: {betas[i]!r} (must be in [0, 1) in float32)"
            )
    return cfg


def _unicode(text, what, api):
    # A lone surrogate (`\ud800` in JSON) is no Unicode text: other readers of the file
    # would refuse or replace it, so the state would not be the same state everywhere.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{api}: data_schedule {what} holds a lone surrogate (not valid Unicode)"
        ) from None


def check_schedule(value, api="SmallMLPTrainer"):
    """A bounded, canonical deep copy of the data_schedule JSON object."""
    most_nodes, most_bytes = _SCHEDULE_BOUNDS.get(api, (_SCHEDULE_NODES, _SCHEDULE_BYTES))
    value = dict(DEFAULT_SCHEDULE) if value is None else value
    if type(value) is not dict or not value:
        raise ValueError(
            f"{api}: data_schedule must be a non-empty JSON object (dict), "
            f"got {type(value).__name__ if type(value) is not dict else 'an empty dict'}"
        )
    nodes = [0]

    def visit(item, depth):
        nodes[0] += 1
        if nodes[0] > most_nodes:
            raise ValueError(f"{api}: data_schedule has more than {most_nodes} values")
        if depth > _SCHEDULE_DEPTH:
            raise ValueError(f"{api}: data_schedule nests deeper than {_SCHEDULE_DEPTH}")
        if type(item) is dict:
            for key, child in item.items():
                if type(key) is not str:
                    raise ValueError(f"{api}: data_schedule keys must be strings, got {key!r}")
                if len(key) > _SCHEDULE_STRING:
                    raise ValueError(
                        f"{api}: data_schedule key longer than {_SCHEDULE_STRING} characters"
                    )
                _unicode(key, "key", api)
                visit(child, depth + 1)
        elif type(item) is list:
            for child in item:
                visit(child, depth + 1)
        elif type(item) is str:
            if len(item) > _SCHEDULE_STRING:
                raise ValueError(
                    f"{api}: data_schedule string longer than {_SCHEDULE_STRING} characters"
                )
            _unicode(item, "string", api)
        elif type(item) is int:
            if item.bit_length() > 64:
                raise ValueError(f"{api}: data_schedule integers must fit in 64 bits")
        elif type(item) is float:
            if not math.isfinite(item):
                raise ValueError(f"{api}: data_schedule numbers must be finite, got {item!r}")
        elif item is not None and type(item) is not bool:
            raise ValueError(
                f"{api}: data_schedule must hold JSON values only, got {type(item).__name__}"
            )

    visit(value, 0)
    encoded = canonical(value)
    if len(encoded) > most_bytes:
        raise ValueError(
            f"{api}: data_schedule is {len(encoded)} bytes of canonical "
            f"JSON, more than {most_bytes}"
        )
    return json.loads(encoded)


def check_step(step, api="SmallMLPTrainer"):
    if isinstance(step, bool):
        raise ValueError(f"{api}: optimizer step must be an integer, got a bool")
    try:
        step = operator.index(step)
    except TypeError:
        raise ValueError(
            f"{api}: optimizer step must be an integer, got {type(step).__name__}"
        ) from None
    if not 0 <= step <= STEP_INT32_MAX:
        raise ValueError(f"{api}: optimizer step must be in [0, 2**31-1], got {step}")
    return step


def _fields(obj, keys, what, api, optional=frozenset()):
    if type(obj) is not dict:
        raise ValueError(f"{api}: {what} must be a dict, got {type(obj).__name__}")
    missing = sorted(set(keys) - set(obj))
    unknown = sorted(set(obj) - set(keys) - optional, key=repr)
    if missing or unknown:
        raise ValueError(f"{api}: {what} has missing fields {missing} / unknown fields {unknown}")


def _tensor(value, shape, name, api, dtype="<f4"):
    """`owned_tensor`, faster for a float32 Array of the shape (what `state_dict()` and the
    checkpoint decoder hold, so every save and load): a finite sum of at most 2**26 finite
    float32 values (each below 2**128) cannot overflow, so it proves them all finite in one
    C loop; anything else, or a sum that is not finite, gets the full check and its message."""
    if (
        type(value) is Array
        and dtype == "<f4"
        and value.dtype == dtype
        and tuple(value.shape) == tuple(shape)
        and value._mv.ndim == 1
        and math.isfinite(sum(value._mv))
    ):
        return value.copy()
    return owned_tensor(value, shape, name, api, dtype)


def validate_state(state, mode, spec, schema):
    """Check a whole state (`state_dict()` form, tensors as buffers) and copy it.

    `schema` is the trainer class's record (`_mlp.schema.Schema`: its name in messages, its
    state schema, its optimizer fields); `architecture` must be `spec`'s.
    Returns (params, m, v, flags, step, config, schedule, numeric_mode, lr_schedule): params,
    m, v flat owned float32 Arrays of `spec.total`, flags an int32 Array of 4 (None for
    MLPTrainer), lr_schedule the checked learning-rate schedule record or None.
    `mode`, when given, is the process's numeric mode, which the state must have been saved
    under."""
    api, name = schema.api, schema.state_schema
    _fields(state, STATE_KEYS, "state", api, OPTIONAL_STATE_KEYS)
    if state["schema"] != name:
        raise ValueError(f"{api}: state schema must be {name!r}, got {state['schema']!r}")
    if state["architecture"] != list(spec.sizes):
        raise ValueError(
            f"{api}: architecture must be {list(spec.sizes)}, got {state['architecture']!r}"[:300]
        )
    if state["numeric_mode"] not in MODES:
        raise ValueError(
            f"{api}: numeric_mode must be one of {MODES}, got {state['numeric_mode']!r}"
        )
    if mode is not None and state["numeric_mode"] != mode:
        raise ValueError(
            f"{api}: the state was saved in numeric mode "
            f"{state['numeric_mode']!r} but this process runs {mode!r}"
        )
    if state["parameter_order"] != list(spec.names):
        raise ValueError(
            f"{api}: parameter_order must be {list(spec.names)}, got {state['parameter_order']!r}"[
                :300
            ]
        )
    _fields(state["weights"], spec.names, "state weights", api)
    weights = [_tensor(state["weights"][n], s, n, api) for n, s in zip(spec.names, spec.shapes)]
    opt = state["optimizer"]
    _fields(opt, schema.optimizer_keys, "state optimizer", api)
    if opt["kind"] != OPTIMIZER:
        raise ValueError(f"{api}: optimizer kind must be 'AdamW', got {opt['kind']!r}")
    step = check_step(opt["step"], api)
    m = _tensor(opt["m"], (spec.total,), "optimizer m", api)
    v = _tensor(opt["v"], (spec.total,), "optimizer v", api)
    if min(v._mv) < 0:
        raise ValueError(f"{api}: optimizer v (second moments) must be >= 0")
    flags = None
    if "flags" in schema.optimizer_keys:  # the v1 layout's
        flags = owned_tensor(opt["flags"], (4,), "optimizer flags", api, "<i4")
        if any(f not in (0, 1) for f in flags._mv.tolist()):
            raise ValueError(f"{api}: optimizer flags must be 0 or 1, got {flags.tolist()}")
    cfg = state["config"]
    _fields(cfg, CONFIG_KEYS, "state config", api)
    config = check_config(
        cfg["lr"], (cfg["beta1"], cfg["beta2"]), cfg["eps"], cfg["weight_decay"], api
    )
    schedule = check_schedule(state["data_schedule"], api)
    lr_schedule = None
    if "lr_schedule" in state:
        lr_schedule = _lrs.check_record(state["lr_schedule"], api)
    mode = state["numeric_mode"]
    return flat(weights), m, v, flags, step, config, schedule, mode, lr_schedule


def flat(weights):
    """Parameter tensors (owned Arrays, in order) as one flat float32 Array."""
    raw = b"".join(w.tobytes() for w in weights)
    return frombytes(raw, "<f4", (len(raw) // 4,))


def split(flat_array, spec=SMALL):
    """Fresh Arrays of `spec`'s tensors held in a flat buffer (copies), by name."""
    mv = flat_array._mv
    out = {}
    for name, shape, off in zip(spec.names, spec.shapes, spec.offsets):
        out[name] = Array._wrap(_pyarray.array("f", mv[off : off + math.prod(shape)]), shape, "<f4")
    return out
