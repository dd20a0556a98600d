"""The checkpoint codec: state <-> file bytes (canonical JSON envelope, atomic save, bounded
loader). It knows no trainer class: `mojolearn.checkpoint` is its public face.

Format `mojolearn.small-mlp-checkpoint.v1` (the reference's v1 layout):

- The file MUST be the canonical JSON of the envelope (keys sorted, separators `,` and `:`,
  ASCII only, no NaN/Infinity) followed by exactly one `\\n`, and MUST NOT exceed 32768 bytes.
- The envelope MUST hold exactly `schema` (= "mojolearn.small-mlp-checkpoint.v1"), `payload`,
  `payload_sha256` and MAY hold `arithmetic_profile` and `envelope_sha256`; files written by
  mojolearn always hold both ("mojolearn.portable-fp32.v2"; files written before it hold
  "mojolearn.portable-fp32.v1": read as before, and an identical-mode one resumes only with
  `allow_profile_change`, see `check_resumable`). A missing profile means the reference's
  default ("mojolearn.neural-training.fp32.v1"); the reference's layout has neither field.
- `payload_sha256` MUST be the lowercase hex SHA-256 of the payload's canonical JSON. That hash
  is also the state hash (`SmallMLPTrainer.state_hash()`).
- `envelope_sha256`, when present, MUST be the lowercase hex SHA-256 of the canonical JSON of
  the envelope without `payload` and `envelope_sha256` (so `schema`, `arithmetic_profile` and,
  through `payload_sha256`, the payload: every byte of the file is under a hash). Files
  without it (written before it existed) keep loading, their profile outside any hash: one
  claiming v2 is read as v2 only when its config holds a value that is not a float32 value
  (which no v1 writer wrote), else as v1 (`applied_profile`).
- The payload MUST hold exactly: schema ("mojolearn.small-mlp-trainer.v1"), architecture
  [8, 16, 3], numeric_mode ("identical" | "fast"), parameter_order [weight1, bias1, weight2,
  bias2], weights {name: tensor}, optimizer {kind "AdamW", step (int, 0..2**31-1), m, v
  (tensors of 195 in parameter order), flags (int32 tensor of 4)}, config {lr, beta1, beta2,
  eps, weight_decay} (JSON floats: the values as given; float32 values in a v1 file),
  data_schedule (a bounded JSON object); and, only while the trainer has a learning-rate
  schedule, lr_schedule: {kind "constant" | "warmup_linear" | "warmup_cosine", peak_lr,
  min_lr (float32 values as JSON floats), warmup_steps (int), total_steps (int or null)} or
  {kind "custom", class (its class name)} (`mojolearn._mlp.lr_schedule`). A file without a
  schedule is byte for byte what mojolearn wrote before schedules; the reference's loader
  refuses one with (it cannot continue the schedule).
- A tensor MUST be {"dtype": "<f4" | "<i4", "shape": [...], "hex": ...}: the C-order
  little-endian bytes as lowercase hex, exactly 8 hex digits per value (what the writer
  emits: one state has exactly one file, so `dumps(loads(f)) == f` byte for byte, for the
  files this version writes; a file without `envelope_sha256` is re-written with it).
- Readers MUST refuse duplicate keys, unknown or missing fields, bad or upper-case hex, wrong
  lengths, non-finite floats, numbers the writer would not have written (an `architecture`
  entry 3.0, a `config` value that is not a JSON float, or in a v1 file not a float32), a hash mismatch
  an `envelope_sha256` mismatch and (unless asked to migrate) a different profile, with
  ValueError, before any trainer state changes. Writers refuse (ValueError, nothing made) a
  state the reader would refuse. Nothing is evaluated; there is no pickle.
- Format `mojolearn.model-checkpoint.v1` (`mojolearn.Trainer`, any `nn.Sequential`): this
  envelope with `arithmetic_profile` and `envelope_sha256` both required; its payload (schema
  `mojolearn.model-state.v1`) is specified and checked by `mojolearn._model.persist`.
- `load(path)` `stat`s the path before opening it: anything but a regular file (a FIFO, which
  would block, a folder, a device, a socket) and anything over the size bound is a ValueError
  without reading; a symlink to a regular file is followed. A missing or unreadable path is
  the OSError the system gives.
- Writers MUST refuse a path that exists and is not a regular file (a folder, a FIFO, a device
  such as /dev/null) before making anything, and follow a symlink to the file it names (the
  link stays). They write a temporary `.<h>.<pid>.<random>.mojolearn-tmp` (fixed length; `<h>`
  from the target's name) in the real target's folder with the old file's permission bits,
  fsync it, `os.replace` it over the target and fsync the folder; a failed save leaves the old
  file and no temporary; temporaries of dead processes (a `kill -9` mid-save) are removed by the
  next save to that target. EINTR is retried at every call (`mojolearn._runtime.files`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat as _stat

from .._buffers.array import frombytes
from .._runtime import files as _files
from .._runtime.files import TMP_SUFFIX, clean_stale_temporaries  # noqa: F401 (API)
from .._runtime.files import write_atomic as write_atomic  # API, and the trainers' save_checkpoint
from .._runtime.portable import round_f32
from . import state as S
from .schema import MLP_RECORD, SMALL_RECORD, Schema, record
from .spec import LayerSizes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

    from .._buffers.array import Array
    from .._buffers.types import DType

    _Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]

FILE_SCHEMA, MAX_BYTES = SMALL_RECORD.file_schema, SMALL_RECORD.max_bytes
MLP_FILE_SCHEMA, MLP_MAX_BYTES = MLP_RECORD.file_schema, MLP_RECORD.max_bytes
# `mojolearn.Trainer`'s files (any `nn.Sequential`): the envelope is this module's, the payload
# is checked by `mojolearn._model.persist` (the model's record, tensors by torch name). The
# largest admissible model (2**26 parameters) has the MLP's bound; a file is held to its own
# model's bound once its record is read (`_model.persist.file_bound`).
MODEL_FILE_SCHEMA, MODEL_MAX_BYTES = "mojolearn.model-checkpoint.v1", MLP_MAX_BYTES
# `verify`'s: every schema this mojolearn reads (a load's `schema=None` stays the MLP pair,
# whose states the command line's `train`, `predict` and `resume` read).
ALL_SCHEMAS = (FILE_SCHEMA, MLP_FILE_SCHEMA, MODEL_FILE_SCHEMA)
PROFILE = "mojolearn.portable-fp32.v2"
# Files written before profile v2 (every one until 0.x's fma change): readable, and resumable
# in fast mode; an identical-mode v1 state resumes only when asked (`check_resumable`).
PROFILE_V1 = "mojolearn.portable-fp32.v1"
REFERENCE_PROFILE = "mojolearn.neural-training.fp32.v1"
_TAIL = 64  # the canonical envelope ends with its schema: `"schema":"<name>"}\n`
_ENVELOPE = frozenset(("schema", "payload", "payload_sha256"))
# Optional envelope fields: the profile, and the hash that binds it to the rest (new files).
_OPTIONAL_ENVELOPE = frozenset(("arithmetic_profile", "envelope_sha256"))
_TENSOR = frozenset(("dtype", "shape", "hex"))


# ---------------------------------------------------------------- encoding


def encode_tensor(arr: Array) -> dict[str, Any]:
    return {"dtype": arr.dtype, "shape": list(arr.shape), "hex": arr.tobytes().hex()}


def encode_state(state: dict[str, Any]) -> dict[str, Any]:
    """The payload (JSON-ready dict) of a `state_dict()` holding mojolearn Arrays."""
    payload = dict(state)
    payload["weights"] = {n: encode_tensor(w) for n, w in state["weights"].items()}
    opt = dict(state["optimizer"])
    for key in ("m", "v", "flags"):
        if key in opt:  # MLPTrainer states have no flags
            opt[key] = encode_tensor(opt[key])
    payload["optimizer"] = opt
    payload["config"] = dict(state["config"])
    return payload


def state_hash(payload: dict[str, Any]) -> str:
    """SHA-256 (hex) of the payload's canonical JSON: the state hash."""
    return hashlib.sha256(S.canonical(payload)).hexdigest()


def envelope_hash(envelope: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of the envelope without `payload` (which
    `payload_sha256` covers) and without `envelope_sha256` itself."""
    rest = {k: v for k, v in envelope.items() if k not in ("payload", "envelope_sha256")}
    return hashlib.sha256(S.canonical(rest)).hexdigest()


def dumps(state: dict[str, Any], profile: str = PROFILE) -> bytes:
    """The checkpoint file bytes of a `state_dict()` (SmallMLPTrainer's or MLPTrainer's: the
    file schema follows the state's).

    Raises:
        ValueError: the state is over the size bound, or would be refused by the loader (a
            file the trainer writes must always load): nothing is made.
    """
    payload = encode_state(state)
    rec = record(payload.get("schema"), "state_schema", SMALL_RECORD)
    data = envelope_bytes(rec.file_schema, payload, profile)
    bound = rec.max_bytes
    if len(data) > bound:
        raise ValueError(
            f"checkpoint: {len(data)} bytes exceed the {bound}-byte bound "
            f"(the data_schedule is the only part that can grow)"
        )
    try:  # the loader's own checks, on what is about to be written (its tensors' hex is ours)
        spec = _spec_of(payload) if rec.spec is None else rec.spec
        _check_state(state, payload, spec, rec, profile)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint: not written, the file would not load: {exc}") from None
    return data


def envelope_bytes(file_schema: str, payload: dict[str, Any], profile: str = PROFILE) -> bytes:
    """The file bytes of a payload: the canonical JSON of its envelope and one newline."""
    envelope = {"schema": file_schema, "payload": payload}
    envelope["payload_sha256"] = state_hash(payload)
    if profile != REFERENCE_PROFILE:  # the reference's layout has neither field
        envelope["arithmetic_profile"] = profile
        envelope["envelope_sha256"] = envelope_hash(envelope)
    data: bytes = S.canonical(envelope) + b"\n"
    return data


def _bound(schema: str | tuple[str, ...] | None, max_bytes: int | None) -> int:
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or type(max_bytes) is not int or max_bytes < 1:
            raise ValueError(f"checkpoint: max_bytes must be a positive int, got {max_bytes!r}")
        return max_bytes
    if schema == MODEL_FILE_SCHEMA or isinstance(schema, tuple):
        return MODEL_MAX_BYTES
    return record(schema, "file_schema", MLP_RECORD).max_bytes  # None: the largest


def _wanted(schema: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """The file schemas a load accepts: one name, a tuple of them, or None (the MLP pair)."""
    if schema is None:
        return (FILE_SCHEMA, MLP_FILE_SCHEMA)
    return schema if isinstance(schema, tuple) else (schema,)


# ---------------------------------------------------------------- decoding


class _Refusal(ValueError):
    """Raised by the JSON hooks, so the parser's wrapper does not relabel it."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = {}
    for key, value in pairs:
        if key in out:
            raise _Refusal(f"checkpoint: duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> NoReturn:
    raise _Refusal(f"checkpoint: {name} is not allowed (finite numbers only)")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise _Refusal(f"checkpoint: number {text[:40]} is out of range (finite numbers only)")
    return value


def _decode_tensor(desc: Any, shape: Sequence[int], dtype: DType, name: str) -> Array:
    if type(desc) is not dict or set(desc) != _TENSOR:
        raise ValueError(
            f"checkpoint: tensor {name} must be an object with exactly dtype, shape, hex"
        )
    if desc["dtype"] != dtype:
        raise ValueError(
            f"checkpoint: tensor {name} dtype must be {dtype!r}, got {desc['dtype']!r}"
        )
    if desc["shape"] != list(shape) or any(type(d) is not int for d in desc["shape"]):
        raise ValueError(
            f"checkpoint: tensor {name} shape must be {list(shape)}, got {desc['shape']!r}"
        )
    text = desc["hex"]
    count = 1
    for d in shape:
        count *= d
    if type(text) is not str or len(text) != 8 * count:
        got = len(text) if type(text) is str else type(text).__name__
        raise ValueError(f"checkpoint: tensor {name} needs {8 * count} hex digits, got {got}")
    if not all(c in "0123456789abcdef" for c in text):
        kind = "upper-case" if all(c in "0123456789abcdefABCDEF" for c in text) else "not"
        raise ValueError(f"checkpoint: tensor {name} is {kind} hexadecimal (lowercase hex only)")
    return frombytes(bytes.fromhex(text), dtype, tuple(shape))


def _spec_of(payload: dict[str, Any]) -> LayerSizes:
    """The layer spec an MLPTrainer payload declares (refused unless JSON ints in bounds)."""
    arch = payload.get("architecture")
    if type(arch) is not list or any(type(x) is not int for x in arch):
        raise ValueError(
            f"checkpoint: architecture must be a list of JSON integers, got {arch!r}"[:200]
        )
    try:
        return LayerSizes(arch, "checkpoint")
    except TypeError as exc:  # pragma: no cover - JSON integers are ints
        raise ValueError(str(exc)) from None


def _decode_payload(payload: Any, schema: Schema, profile: str = PROFILE) -> dict[str, Any]:
    """The state of a payload of `schema`'s trainer class, every tensor's length checked
    against its fixed layer sizes or else the declared architecture before it is decoded;
    `profile` the envelope's (a v1 writer rounded its config to float32)."""
    if type(payload) is not dict:
        raise ValueError("checkpoint: payload must be an object")
    missing = S.STATE_KEYS - set(payload)
    unknown = set(payload) - S.STATE_KEYS - S.OPTIONAL_STATE_KEYS
    if missing or unknown:
        raise ValueError(
            f"checkpoint: payload has missing fields {sorted(missing)} / unknown "
            f"fields {sorted(unknown)}"
        )
    spec = _spec_of(payload) if schema.spec is None else schema.spec
    state = dict(payload)
    weights = payload["weights"]
    if type(weights) is not dict or set(weights) != set(spec.names):
        raise ValueError(f"checkpoint: weights must hold exactly {list(spec.names)}"[:300])
    state["weights"] = {
        n: _decode_tensor(weights[n], s, "<f4", n) for n, s in zip(spec.names, spec.shapes)
    }
    opt = payload["optimizer"]
    if type(opt) is not dict or set(opt) != schema.optimizer_keys:
        raise ValueError(f"checkpoint: optimizer must hold exactly {sorted(schema.optimizer_keys)}")
    opt = dict(opt)
    opt["m"] = _decode_tensor(opt["m"], (spec.total,), "<f4", "m")
    opt["v"] = _decode_tensor(opt["v"], (spec.total,), "<f4", "v")
    if "flags" in schema.optimizer_keys:
        opt["flags"] = _decode_tensor(opt["flags"], (4,), "<i4", "flags")
    state["optimizer"] = opt
    if type(payload["config"]) is dict and any(
        type(x) not in (int, float) for x in payload["config"].values()
    ):
        raise ValueError("checkpoint: config values must be numbers")
    _check_state(state, payload, spec, schema, profile)
    return state


def _check_state(
    state: dict[str, Any], payload: dict[str, Any], spec: LayerSizes, schema: Schema, profile: str
) -> None:
    """The loader's rules past the tensors' encoding, on a state and its payload (the writer
    runs them too, before writing: a file it writes must load)."""
    # Every semantic rule (finite values, v >= 0, ranges, schedule bounds) is the trainer's.
    S.validate_state(state, None, spec, schema)
    # The trainer would keep 3.0 or rounded config values, so its state (and hash) would no
    # longer be this file's: refuse what the writer cannot have written.
    if type(payload["architecture"]) is list and any(
        type(x) is not int for x in payload["architecture"]
    ):
        raise ValueError(
            f"checkpoint: architecture entries must be JSON integers, got "
            f"{payload['architecture']!r}"[:200]
        )
    if type(payload["config"]) is dict:
        for key, x in payload["config"].items():
            if profile == PROFILE_V1 and (
                type(x) is not float or round_f32(x, overflow="none") != x
            ):
                raise ValueError(
                    f"checkpoint: config {key} must be a float32 value written as "
                    f"a JSON float, got {x!r}"
                )
            if type(x) is not float:
                raise ValueError(f"checkpoint: config {key} must be a JSON float, got {x!r}")


def _v1_config(payload: Any) -> bool:
    """Whether a profile-v1 writer could have written this payload's config (every value a
    float32 value as a JSON float); a v2 writer keeps them as given (0.9, 1e-3 are not)."""
    config = payload.get("config") if type(payload) is dict else None
    return type(config) is dict and all(
        type(x) is float and round_f32(x, overflow="none") == x for x in config.values()
    )


def applied_profile(envelope: dict[str, Any]) -> str:
    """The arithmetic profile a load applies to a parsed envelope.

    A file with `envelope_sha256` (every file this version writes) has its profile bound by
    that hash: it is the profile written. A file without it (the layout of earlier versions:
    its profile lies outside every hash) claiming v2 is read as v2 only when its payload
    shows a v2 writer (a config value that is not a float32 value); otherwise a one-byte edit
    of a v1 file could have made it, so it is read as v1 (an identical-mode one then resumes
    only with `allow_profile_change`, see `check_resumable`).
    """
    profile: str = envelope.get("arithmetic_profile", REFERENCE_PROFILE)
    if (
        profile == PROFILE
        and "envelope_sha256" not in envelope
        and _v1_config(envelope.get("payload"))
    ):
        return PROFILE_V1
    return profile


def _check_flag(allow_profile_change: object) -> None:
    # Any truthy object would silently migrate a file (`"no"`, 1): only a bool says so.
    if type(allow_profile_change) is not bool:
        raise TypeError(
            f"checkpoint: allow_profile_change must be a bool (True or False), got "
            f"{allow_profile_change!r} ({type(allow_profile_change).__name__})"[:300]
        )


def loads(
    data: bytes,
    allow_profile_change: bool = False,
    schema: str | tuple[str, ...] | None = FILE_SCHEMA,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """The state (`state_dict()` form) held by checkpoint bytes. Raises ValueError for any
    refused file, TypeError for an `allow_profile_change` that is not a bool.

    `schema`: the file schema to accept (FILE_SCHEMA for SmallMLPTrainer, MLP_FILE_SCHEMA for
    MLPTrainer, MODEL_FILE_SCHEMA for Trainer: its state is `Trainer.state_dict()`'s form;
    None for either MLP schema; a tuple of names for any of them, ALL_SCHEMAS for all).
    `max_bytes`: the bound applied before parsing (default: the schema's, MAX_BYTES,
    MLP_MAX_BYTES or MODEL_MAX_BYTES); a small-schema file is never over MAX_BYTES.
    `allow_profile_change=True` accepts a file written under another arithmetic profile (the
    reference's default included): a migration after which bits follow our arithmetic."""
    return _loads(data, allow_profile_change, schema, max_bytes)[0]


def _loads(
    data: bytes,
    allow_profile_change: bool = False,
    schema: str | tuple[str, ...] | None = FILE_SCHEMA,
    max_bytes: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`loads`, and the parsed envelope."""
    _check_flag(allow_profile_change)
    # Nesting just under the parser's limit parses, and the checks after it (re-encoding,
    # hashing, decoding) recurse deeper still: a RecursionError anywhere is the same refusal.
    try:
        return _parse(data, allow_profile_change, schema, max_bytes)
    except RecursionError:
        raise ValueError("checkpoint: JSON nests too deeply") from None


def _parse(
    data: bytes,
    allow_profile_change: bool,
    schema: str | tuple[str, ...] | None,
    max_bytes: int | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"checkpoint: expected bytes, got {type(data).__name__}")
    bound = _bound(schema, max_bytes)
    if len(data) > bound:
        raise ValueError(f"checkpoint: {len(data)} bytes exceed the {bound}-byte bound")
    if not data.endswith(b"\n") or data.endswith(b"\n\n") or data.count(b"\n") != 1:
        raise ValueError(
            "checkpoint: the file must be one line of JSON ended by exactly one newline"
        )
    try:
        envelope = json.loads(
            data[:-1].decode("ascii"),
            object_pairs_hook=_unique,
            parse_constant=_no_constant,
            parse_float=_finite_float,
        )
    except _Refusal as exc:
        raise ValueError(str(exc)) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"checkpoint: not valid ASCII JSON ({exc})") from None
    if type(envelope) is not dict:
        raise ValueError("checkpoint: the envelope must be a JSON object")
    keys = set(envelope) - _OPTIONAL_ENVELOPE
    if keys != _ENVELOPE:
        raise ValueError(
            f"checkpoint: envelope fields must be {sorted(_ENVELOPE)} and optionally "
            f"{' and '.join(sorted(_OPTIONAL_ENVELOPE))}, got {sorted(envelope)}"
        )
    wanted = _wanted(schema)
    if envelope["schema"] not in wanted:
        names = " or ".join(repr(w) for w in wanted)
        raise ValueError(f"checkpoint: schema must be {names}, got {envelope['schema']!r}"[:300])
    model = envelope["schema"] == MODEL_FILE_SCHEMA
    if model and set(envelope) != _ENVELOPE | _OPTIONAL_ENVELOPE:  # no file without them
        raise ValueError(
            f"checkpoint: a model checkpoint's envelope holds exactly "
            f"{sorted(_ENVELOPE | _OPTIONAL_ENVELOPE)}, got {sorted(envelope)}"
        )
    rec = record(envelope["schema"], "file_schema", MLP_RECORD)
    if rec.spec is not None and len(data) > rec.max_bytes:  # a fixed layout's bound is fixed
        raise ValueError(f"checkpoint: {len(data)} bytes exceed the {rec.max_bytes}-byte bound")
    if S.canonical(envelope) + b"\n" != bytes(data):
        raise ValueError(
            "checkpoint: the file is not canonical JSON (sorted keys, no spaces, ASCII)"
        )
    payload = envelope["payload"]
    if (
        type(envelope["payload_sha256"]) is not str
        or state_hash(payload) != envelope["payload_sha256"]
    ):
        raise ValueError(
            "checkpoint: payload_sha256 does not match the payload (corrupted or edited)"
        )
    if "envelope_sha256" in envelope and envelope["envelope_sha256"] != envelope_hash(envelope):
        raise ValueError(
            "checkpoint: envelope_sha256 does not match the envelope (its schema, "
            "arithmetic_profile or payload_sha256 corrupted or edited)"
        )
    profile = _check_profile(envelope, allow_profile_change)
    if model:
        return _model_payload(payload, len(data)), envelope
    return _decode_payload(payload, rec, profile), envelope


def _check_profile(envelope: dict[str, Any], allow_profile_change: bool) -> str:
    """The profile a load applies; refused unless it is this mojolearn's (or v1's), or
    migration is asked for."""
    if type(envelope.get("arithmetic_profile", REFERENCE_PROFILE)) is not str:
        raise ValueError("checkpoint: arithmetic_profile must be a string")
    profile = applied_profile(envelope)
    if profile not in (PROFILE, PROFILE_V1) and not allow_profile_change:
        named = (
            "none (the reference's default " + REFERENCE_PROFILE + ")"
            if "arithmetic_profile" not in envelope
            else repr(profile)
        )
        raise ValueError(
            f"checkpoint: arithmetic profile is {named}, this mojolearn computes "
            f"{PROFILE!r}; resuming would not reproduce the original run's bits. "
            f"Pass allow_profile_change=True to migrate (bits then follow {PROFILE!r})"
        )
    return profile


# The model layer's payload reader (`_model.persist.decode_payload`), registered when that
# module is imported: it sits above this codec, which must not import it (every way to a model
# file, `mojolearn.checkpoint` and `Trainer`, imports it first).
_MODEL_PAYLOAD: list[Callable[[Any, int], dict[str, Any]]] = []


def register_model_payload(reader: Callable[[Any, int], dict[str, Any]]) -> None:
    """Set the reader of `mojolearn.model-checkpoint.v1` payloads (`_model.persist`)."""
    _MODEL_PAYLOAD[:] = [reader]


def _model_payload(payload: Any, size: int) -> dict[str, Any]:
    if not _MODEL_PAYLOAD:
        raise ValueError(
            "checkpoint: a model checkpoint: read it with mojolearn.checkpoint or Trainer"
        )
    return _MODEL_PAYLOAD[0](payload, size)


def check_resumable(
    state: dict[str, Any], envelope: dict[str, Any], allow_profile_change: bool
) -> None:
    """Refuse to resume an identical-mode state written under profile v1: its next steps
    cannot give the bits of the run that wrote it (v2 computes its dot products with fma and
    its optimizer scalars in binary64). `allow_profile_change=True` continues it under v2.
    The profile is the one the load applied (`applied_profile`)."""
    _check_flag(allow_profile_change)
    profile = applied_profile(envelope)
    if profile == PROFILE_V1 and state["numeric_mode"] == "identical" and not allow_profile_change:
        raise ValueError(
            f"checkpoint: written in identical mode under arithmetic profile {PROFILE_V1!r}; "
            f"this mojolearn computes {PROFILE!r}, so resuming cannot reproduce the run that "
            f"wrote it. Pass allow_profile_change=True (CLI: --allow-profile-change) to "
            f"continue it under {PROFILE!r}"
        )


# ---------------------------------------------------------------- files


def _check_regular(st: os.stat_result, path: _Path, bound: int) -> None:
    if not _stat.S_ISREG(st.st_mode):
        raise ValueError(
            f"checkpoint: {_files.shown(path)!r} is {_files.kind(st.st_mode)}, not a regular file"
        )
    if st.st_size > bound:
        raise ValueError(
            f"checkpoint: {_files.shown(path)!r} is larger than {bound} bytes ({st.st_size} bytes)"
        )


def read_bounded(
    path: _Path, max_bytes: int = MAX_BYTES, schema: str | tuple[str, ...] | None = FILE_SCHEMA
) -> bytes:
    """The file's bytes, reading at most the bound + 1 (the bound applies before parsing).

    The path is `stat`ed first (symlinks followed) and anything but a regular file is refused
    without opening it, so a FIFO never blocks; the open is non-blocking and re-checked with
    `fstat`, so a file swapped for a FIFO between the two is refused too. Unless `schema` is
    the small one, the file's last bytes are read first: a file that does not end by naming
    a large schema it accepts (MLP_FILE_SCHEMA, MODEL_FILE_SCHEMA) is held to the small bound
    (MAX_BYTES), so no large file is read whole unless it claims to be such a checkpoint."""
    path = _files.fspath(path)
    _check_regular(os.stat(path), path, max_bytes)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        bound = max_bytes
        large = [n for n in _wanted(schema) if n != FILE_SCHEMA]
        if large and st.st_size > MAX_BYTES:
            tail = os.pread(fd, _TAIL, max(0, st.st_size - _TAIL))
            if not any(tail.endswith(b'"schema":"' + n.encode() + b'"}\n') for n in large):
                bound = MAX_BYTES
        _check_regular(st, path, bound)
        data: bytes = _files.read_at_most(fd, bound)
    finally:
        os.close(fd)
    if len(data) > bound:
        raise ValueError(f"checkpoint: {_files.shown(path)!r} is larger than {bound} bytes")
    return data


def load(
    path: _Path,
    allow_profile_change: bool = False,
    schema: str | tuple[str, ...] | None = FILE_SCHEMA,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """The state held by the checkpoint file at `path` (see `loads` for the arguments)."""
    return load_with_envelope(path, allow_profile_change, schema, max_bytes)[0]


def load_resumable(
    path: _Path,
    allow_profile_change: bool = False,
    schema: str | tuple[str, ...] | None = FILE_SCHEMA,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """`load`, then `check_resumable`: the state a trainer or `train --resume` continues."""
    state, envelope = load_with_envelope(path, allow_profile_change, schema, max_bytes)
    check_resumable(state, envelope, allow_profile_change)
    return state


def load_with_envelope(
    path: _Path,
    allow_profile_change: bool = False,
    schema: str | tuple[str, ...] | None = FILE_SCHEMA,
    max_bytes: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`load`, and the parsed envelope (its schema and arithmetic profile)."""
    _check_flag(allow_profile_change)
    bound = _bound(schema, max_bytes)
    return _loads(read_bounded(path, bound, schema), allow_profile_change, schema, bound)


def verify(
    path: _Path, allow_profile_change: bool = False, max_bytes: int | None = None
) -> dict[str, Any]:
    """Check a checkpoint file of any schema fully; return {step, schema, profile (the
    one the load applies, `applied_profile`), numeric_mode, state_hash} and `architecture`
    (an MLP's) or `model` (a model checkpoint's record)."""
    state, envelope = load_with_envelope(path, allow_profile_change, ALL_SCHEMAS, max_bytes)
    if envelope["schema"] == MODEL_FILE_SCHEMA:
        return {
            "step": state["step"],
            "schema": envelope["schema"],
            "profile": applied_profile(envelope),
            "numeric_mode": state["numeric_mode"],
            "state_hash": envelope["payload_sha256"],
            "model": state["model"],
        }
    return {
        "step": state["optimizer"]["step"],
        "schema": envelope["schema"],
        "profile": applied_profile(envelope),
        "numeric_mode": state["numeric_mode"],
        "state_hash": envelope["payload_sha256"],
        "architecture": state["architecture"],
    }
