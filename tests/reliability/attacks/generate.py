"""The adversarial checkpoint corpora: one generator per file and the exact refusal expected.

`python -m tests.reliability.attacks.generate` (from the repository root) rewrites the
`*.ckpt` files of this folder (those over 32 KiB are only made at test time);
`tests/reliability/test_attacks.py` checks that every file is what its generator makes and
that the loader refuses it with ValueError and the expected message in under 100 ms.
`ATTACKS` are files of the small schema (`mojolearn.small-mlp-checkpoint.v1`, refused by
`checkpoint.load`); `MLP_ATTACKS` (files named `mlp_*`) are files of `mojolearn.mlp-checkpoint.v1`,
refused by `checkpoint.load(path, schema=MLP_FILE_SCHEMA)` and `MLPTrainer.from_checkpoint`:
the same classes of attack on an MLP base file, plus attacks on its declared architecture.
The base files have the layout of files written before `envelope_sha256` (which the loader
still reads); edits of that hash and of the profile it binds are tested on files of the
current layout in `tests/reliability/test_round4_ckpt.py`.
Attacks that cannot live in git (a sparse 1 GiB file, a FIFO, a folder, a device, a socket,
symlinks) are made at test time by test_attacks.py (`_path_attacks`).
"""

import functools
import hashlib
import json
import math
import os
import re
import struct

FOLDER = os.path.dirname(os.path.abspath(__file__))
MLP_SIZES = (3, 4, 4, 2)  # two hidden layers: deep enough for order and depth attacks


def canon(obj):
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _hex(values, fmt="<f"):
    return b"".join(struct.pack(fmt, v) for v in values).hex()


def _floats(n, k):
    # A fixed, platform-independent pattern of exact float32 values (no RNG to drift).
    return [((i * 37 + k * 11) % 101 - 50) / 64.0 for i in range(n)]


def _f4(values):
    return {"dtype": "<f4", "shape": [len(values)], "hex": _hex(values)}


def layout(sizes):
    """(names, shapes) of the tensors of layer sizes `sizes`, in parameter order."""
    names, shapes = [], []
    for layer, (n_in, n_out) in enumerate(zip(sizes, sizes[1:]), start=1):
        names += [f"weight{layer}", f"bias{layer}"]
        shapes += [(n_out, n_in), (n_out,)]
    return names, shapes


def _payload(state_schema, sizes):
    """A valid payload (identical mode, step 7) of a network of `sizes`, without flags."""
    names, shapes = layout(sizes)
    weights = {}
    for k, (name, shape) in enumerate(zip(names, shapes)):
        weights[name] = {
            "dtype": "<f4",
            "shape": list(shape),
            "hex": _hex(_floats(math.prod(shape), k)),
        }
    total = sum(math.prod(s) for s in shapes)
    return {
        "schema": state_schema,
        "architecture": list(sizes),
        "numeric_mode": "identical",
        "parameter_order": names,
        "weights": weights,
        "optimizer": {
            "kind": "AdamW",
            "step": 7,
            "m": _f4(_floats(total, 5)),
            "v": _f4([abs(x) / 8 for x in _floats(total, 6)]),
        },
        "config": {
            "lr": 0.0009765625,
            "beta1": 0.875,
            "beta2": 0.9990234375,
            "eps": 7.450580596923828e-09,
            "weight_decay": 0.0078125,
        },
        "data_schedule": {"cursor": 56, "dataset_sha256": "ab" * 32, "seed": 11},
    }


def base_envelope():
    """A valid small-schema checkpoint envelope (identical mode, step 7) as a dict."""
    payload = _payload("mojolearn.small-mlp-trainer.v1", (8, 16, 3))
    payload["optimizer"]["flags"] = {"dtype": "<i4", "shape": [4], "hex": "00" * 16}
    return seal(
        {
            "schema": "mojolearn.small-mlp-checkpoint.v1",
            "arithmetic_profile": "mojolearn.portable-fp32.v2",
            "payload": payload,
        }
    )


def mlp_base_envelope(sizes=MLP_SIZES):
    """A valid `mojolearn.mlp-checkpoint.v1` envelope of layer sizes `sizes` (identical mode,
    step 7) as a dict: what `MLPTrainer.save_checkpoint` writes of such a state."""
    return seal(
        {
            "schema": "mojolearn.mlp-checkpoint.v1",
            "arithmetic_profile": "mojolearn.portable-fp32.v2",
            "payload": _payload("mojolearn.mlp-trainer.v1", sizes),
        }
    )


def v1_envelope(base=base_envelope):
    """The base envelope as a profile-v1 writer left it (config in float32)."""
    return seal({**base(), "arithmetic_profile": "mojolearn.portable-fp32.v1"})


def mlp_v1_envelope():
    return v1_envelope(mlp_base_envelope)


def seal(env):
    env["payload_sha256"] = hashlib.sha256(canon(env["payload"])).hexdigest()
    return env


def valid_bytes(base=base_envelope):
    return canon(base()) + b"\n"


def mlp_valid_bytes(sizes=MLP_SIZES):
    return valid_bytes(functools.partial(mlp_base_envelope, sizes))


def _edit(fn, rehash=True, base=base_envelope):
    """Bytes of the base envelope after `fn(payload)`, re-hashed (so the refusal is the edit)."""

    def make():
        env = base()
        fn(env["payload"])
        return canon(seal(env) if rehash else env) + b"\n"

    return make


def _envelope(base=base_envelope, **fields):
    """Bytes of the base envelope with its top-level `fields` replaced (not re-hashed)."""
    return lambda: canon({**base(), **fields}) + b"\n"


def _raw(fn, base=base_envelope):
    return lambda: fn(valid_bytes(base))


def _sub(old, new, base=base_envelope):
    """Bytes of the base file with the first `old` replaced by `new` (not re-hashed)."""
    return _raw(lambda b: b.replace(old, new, 1), base)


def _set(path, value):
    def fn(payload):
        obj = payload
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value

    return fn


def _splice_schedule(text, base=base_envelope):
    """Bytes of the base file with `text` spliced in as the first data_schedule field."""
    return _sub(b'"data_schedule":{', b'"data_schedule":{' + text, base)


def _w1_hex(fn):
    def edit(payload):
        payload["weights"]["weight1"]["hex"] = fn(payload["weights"]["weight1"]["hex"])

    return edit


# (file name, generator -> bytes, exact expected message: a regex matched with re.search)
ATTACKS = [
    (
        "empty.ckpt",
        lambda: b"",
        r"^checkpoint: the file must be one line of JSON ended by "
        r"exactly one newline$",
    ),
    (
        "truncated.ckpt",
        _raw(lambda b: b[: len(b) // 2]),
        r"^checkpoint: the file must be one line of JSON ended by exactly one newline$",
    ),
    (
        "trailing_bytes_after_newline.ckpt",
        _raw(lambda b: b + b"{}"),
        r"^checkpoint: the file must be one line of JSON ended by exactly one newline$",
    ),
    (
        "two_newlines.ckpt",
        _raw(lambda b: b + b"\n"),
        r"^checkpoint: the file must be one line of JSON ended by exactly one newline$",
    ),
    (
        "crlf.ckpt",
        _raw(lambda b: b[:-1] + b"\r\n"),
        r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$",
    ),
    (
        "bom.ckpt",
        _raw(lambda b: b"\xef\xbb\xbf" + b),
        r"^checkpoint: not valid ASCII JSON \('ascii' codec can't decode byte 0xef in position 0",
    ),
    (
        "raw_utf8_surrogate.ckpt",
        _splice_schedule(b'"\xed\xa0\x80":1,'),
        r"^checkpoint: not valid ASCII JSON \('ascii' codec can't decode byte 0xed",
    ),
    (
        "lone_surrogate_escape.ckpt",
        _edit(_set(("data_schedule", "note"), "\ud800")),
        r"^SmallMLPTrainer: data_schedule string holds a lone surrogate \(not valid Unicode\)$",
    ),
    (
        "lone_surrogate_key.ckpt",
        _edit(_set(("data_schedule", "\udfff"), 1)),
        r"^SmallMLPTrainer: data_schedule key holds a lone surrogate \(not valid Unicode\)$",
    ),
    (
        "nesting_100000_deep.ckpt",
        lambda: b"[" * 100000 + b"]" * 100000 + b"\n",
        # as bytes: the size bound; as a file: the same bound from stat, before any read
        r"^checkpoint: (200001 bytes exceed the 32768-byte bound|'.*' is larger than 32768 "
        r"bytes \(200001 bytes\))$",
    ),
    (
        "nesting_16000_deep.ckpt",
        lambda: b"[" * 16000 + b"]" * 16000 + b"\n",
        r"^checkpoint: JSON nests too deeply$",
    ),
    (
        "nesting_schedule_9_deep.ckpt",
        _edit(_set(("data_schedule", "deep"), [[[[[[[[[1]]]]]]]]])),
        r"^SmallMLPTrainer: data_schedule nests deeper than 8$",
    ),
    (
        "duplicate_envelope_key.ckpt",
        _raw(
            lambda b: b.replace(b'{"arithmetic_profile"', b'{"schema":"x","arithmetic_profile"', 1)
        ),
        r"^checkpoint: duplicate key 'schema'$",
    ),
    (
        "duplicate_tensor_key.ckpt",
        _raw(
            lambda b: b.replace(
                b'"flags":{"dtype":"<i4",', b'"flags":{"dtype":"<i4","dtype":"<i4",', 1
            )
        ),
        r"^checkpoint: duplicate key 'dtype'$",
    ),
    (
        "nan_literal.ckpt",
        _raw(lambda b: b.replace(b'"lr":0.0009765625', b'"lr":NaN', 1)),
        r"^checkpoint: NaN is not allowed \(finite numbers only\)$",
    ),
    (
        "infinity_literal.ckpt",
        _raw(lambda b: b.replace(b'"lr":0.0009765625', b'"lr":Infinity', 1)),
        r"^checkpoint: Infinity is not allowed \(finite numbers only\)$",
    ),
    (
        "minus_infinity_literal.ckpt",
        _raw(lambda b: b.replace(b'"lr":0.0009765625', b'"lr":-Infinity', 1)),
        r"^checkpoint: -Infinity is not allowed \(finite numbers only\)$",
    ),
    (
        "float_overflow_1e999.ckpt",
        _raw(lambda b: b.replace(b'"lr":0.0009765625', b'"lr":1e999', 1)),
        r"^checkpoint: number 1e999 is out of range \(finite numbers only\)$",
    ),
    (
        "int_5000_digits.ckpt",
        _splice_schedule(b'"big":' + b"7" * 5000 + b","),
        r"^checkpoint: not valid ASCII JSON \(Exceeds the limit \(4300 digits\)",
    ),
    (
        "odd_length_hex.ckpt",
        _edit(_w1_hex(lambda h: h[:-1])),
        r"^checkpoint: tensor weight1 needs 1024 hex digits, got 1023$",
    ),
    (
        "hex_beyond_shape.ckpt",
        _edit(_w1_hex(lambda h: h + "00000000")),
        r"^checkpoint: tensor weight1 needs 1024 hex digits, got 1032$",
    ),
    (
        "upper_case_hex.ckpt",
        _edit(_w1_hex(str.upper)),
        r"^checkpoint: tensor weight1 is upper-case hexadecimal \(lowercase hex only\)$",
    ),
    (
        "non_hex_digit.ckpt",
        _edit(_w1_hex(lambda h: "g" + h[1:])),
        r"^checkpoint: tensor weight1 is not hexadecimal \(lowercase hex only\)$",
    ),
    (
        "length_claim_beyond_file.ckpt",
        _edit(_set(("weights", "weight1", "shape"), [16, 1 << 40])),
        r"^checkpoint: tensor weight1 shape must be \[16, 8\], got \[16, 1099511627776\]$",
    ),
    (
        "shape_product_overflow.ckpt",
        _edit(_set(("optimizer", "m", "shape"), [1 << 32, 1 << 32, 1 << 32])),
        r"^checkpoint: tensor m shape must be \[195\], got \[4294967296, 4294967296, 4294967296\]$",
    ),
    (
        "negative_shape.ckpt",
        _edit(_set(("weights", "bias2", "shape"), [-3])),
        r"^checkpoint: tensor bias2 shape must be \[3\], got \[-3\]$",
    ),
    (
        "non_canonical_key_order.ckpt",
        _raw(
            lambda b: (
                json.dumps(
                    dict(reversed(list(json.loads(b).items()))), separators=(",", ":")
                ).encode()
                + b"\n"
            )
        ),
        r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$",
    ),
    (
        "whitespace.ckpt",
        _raw(lambda b: json.dumps(json.loads(b), sort_keys=True).encode() + b"\n"),
        r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$",
    ),
    (
        "escaped_ascii.ckpt",
        _raw(lambda b: b.replace(b'"cursor"', b'"\\u0063ursor"', 1)),
        r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$",
    ),
    (
        "hash_mismatch.ckpt",
        _edit(_set(("optimizer", "step"), 8), rehash=False),
        r"^checkpoint: payload_sha256 does not match the payload \(corrupted or edited\)$",
    ),
    (
        "upper_case_hash.ckpt",
        _raw(
            lambda b: b.replace(
                b'"payload_sha256":"' + json.loads(b)["payload_sha256"].encode(),
                b'"payload_sha256":"' + json.loads(b)["payload_sha256"].upper().encode(),
            )
        ),
        r"^checkpoint: payload_sha256 does not match the payload \(corrupted or edited\)$",
    ),
    (
        "other_file_schema.ckpt",
        lambda: canon({**base_envelope(), "schema": "mojolearn.small-mlp-checkpoint.v2"}) + b"\n",
        r"^checkpoint: schema must be 'mojolearn.small-mlp-checkpoint.v1', got "
        r"'mojolearn.small-mlp-checkpoint.v2'$",
    ),
    (
        "other_profile.ckpt",
        lambda: canon({**base_envelope(), "arithmetic_profile": "someone.else.v3"}) + b"\n",
        r"^checkpoint: arithmetic profile is 'someone.else.v3', this mojolearn computes ",
    ),
    (
        "extra_envelope_field.ckpt",
        lambda: canon({**base_envelope(), "z": 1}) + b"\n",
        r"^checkpoint: envelope fields must be \['payload', 'payload_sha256', 'schema'\] and "
        r"optionally arithmetic_profile and envelope_sha256, got ",
    ),
    (
        "top_level_array.ckpt",
        lambda: b"[1,2,3]\n",
        r"^checkpoint: the envelope must be a JSON object$",
    ),
    (
        "missing_payload_field.ckpt",
        _edit(lambda p: p.pop("config")),
        r"^checkpoint: payload has missing fields \['config'\] / unknown fields \[\]$",
    ),
    (
        "step_overflow.ckpt",
        _edit(_set(("optimizer", "step"), 1 << 31)),
        r"^SmallMLPTrainer: optimizer step must be in \[0, 2\*\*31-1\], got 2147483648$",
    ),
    (
        "negative_second_moment.ckpt",
        _edit(
            lambda p: p["optimizer"]["v"].update(hex="000080bf" + p["optimizer"]["v"]["hex"][8:])
        ),
        r"^SmallMLPTrainer: optimizer v \(second moments\) must be >= 0$",
    ),
    (
        "nan_bits_in_weight.ckpt",
        _edit(_w1_hex(lambda h: h[:8] + "0000c07f" + h[16:])),
        r"^SmallMLPTrainer: weight1 must be finite \(flat index 1 is nan\)$",
    ),
    (
        "float_architecture.ckpt",
        _edit(_set(("architecture",), [8, 16, 3.0])),
        r"^checkpoint: architecture entries must be JSON integers, got \[8, 16, 3.0\]$",
    ),
    (
        "integer_config.ckpt",
        _edit(_set(("config", "weight_decay"), 0)),
        r"^checkpoint: config weight_decay must be a JSON float, got 0$",
    ),
    (  # a v1 writer rounded its config to float32 (profile v2 keeps the values as given)
        "non_float32_config.ckpt",
        _edit(_set(("config", "lr"), 0.001), base=v1_envelope),
        r"^checkpoint: config lr must be a float32 value written as a JSON float, got 0.001$",
    ),
    (
        "long_string.ckpt",
        _edit(_set(("data_schedule", "note"), "x" * 3000)),
        r"^SmallMLPTrainer: data_schedule string longer than 2048 characters$",
    ),
    (
        "nul_byte.ckpt",
        _raw(lambda b: b.replace(b'"cursor"', b'"cur\x00sor"', 1)),
        r"^checkpoint: not valid ASCII JSON \(Invalid control character",
    ),
]


# -- mojolearn.mlp-checkpoint.v1 -------------------------------------------------------------
#
# The base is a [3, 4, 4, 2] network: 46 parameters, weight1 (4, 3) holds 96 hex digits.

_MLP_NAMES = layout(MLP_SIZES)[0]
_LARGE = (64, 128, 10)  # 9,610 parameters: a ~230 KB file, read whole only for its MLP tail
_medit = functools.partial(_edit, base=mlp_base_envelope)
_msub = functools.partial(_sub, base=mlp_base_envelope)
_mraw = functools.partial(_raw, base=mlp_base_envelope)
_menvelope = functools.partial(_envelope, mlp_base_envelope)
_msplice = functools.partial(_splice_schedule, base=mlp_base_envelope)
_ONE_LINE = r"^checkpoint: the file must be one line of JSON ended by exactly one newline$"
_NOT_CANONICAL = r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$"
_HASH = r"^checkpoint: payload_sha256 does not match the payload \(corrupted or edited\)$"
_NOT_INTS = r"^checkpoint: architecture must be a list of JSON integers, got "


def _arch(sizes):
    return _medit(_set(("architecture",), sizes))


def _weights_for(sizes):
    return re.escape(f"checkpoint: weights must hold exactly {layout(sizes)[0]}")


def _tensor_edit(fn):
    def edit(payload):
        fn(payload["weights"])

    return edit


def _rename(weights, old, new):
    weights[new] = weights.pop(old)


def _swap(weights, a, b):
    weights[a], weights[b] = weights[b], weights[a]


def _large(edit=None, rehash=True):
    base = functools.partial(mlp_base_envelope, _LARGE)
    return _edit(edit or (lambda p: None), rehash, base)


def _params_message(sizes, total):
    return re.escape(
        f"checkpoint: layer_sizes {list(sizes)} has {total:,} parameters, at most "
        f"67,108,864 (2**26) are allowed"
    )


# Exactly 2**26 parameters, three layers like the base (admitted, so the refusal is the
# tensors'), and 1,024 more.
_AT_BOUND, _OVER_BOUND = (64851, 1024, 682, 2), (64852, 1024, 682, 2)

MLP_ATTACKS = [
    # structure and encoding
    ("mlp_truncated.ckpt", _mraw(lambda b: b[: len(b) // 2]), _ONE_LINE),
    ("mlp_trailing_bytes_after_newline.ckpt", _mraw(lambda b: b + b"{}"), _ONE_LINE),
    ("mlp_two_newlines.ckpt", _mraw(lambda b: b + b"\n"), _ONE_LINE),
    ("mlp_crlf.ckpt", _mraw(lambda b: b[:-1] + b"\r\n"), _NOT_CANONICAL),
    (
        "mlp_bom.ckpt",
        _mraw(lambda b: b"\xef\xbb\xbf" + b),
        r"^checkpoint: not valid ASCII JSON \('ascii' codec can't decode byte 0xef in position 0",
    ),
    (
        "mlp_raw_utf8_surrogate.ckpt",
        _msplice(b'"\xed\xa0\x80":1,'),
        r"^checkpoint: not valid ASCII JSON \('ascii' codec can't decode byte 0xed",
    ),
    (
        "mlp_lone_surrogate_escape.ckpt",
        _medit(_set(("data_schedule", "note"), "\ud800")),
        r"^MLPTrainer: data_schedule string holds a lone surrogate \(not valid Unicode\)$",
    ),
    (
        "mlp_lone_surrogate_key.ckpt",
        _medit(_set(("data_schedule", "\udfff"), 1)),
        r"^MLPTrainer: data_schedule key holds a lone surrogate \(not valid Unicode\)$",
    ),
    (
        "mlp_nul_byte.ckpt",
        _msub(b'"cursor"', b'"cur\x00sor"'),
        r"^checkpoint: not valid ASCII JSON \(Invalid control character",
    ),
    (
        "mlp_whitespace.ckpt",
        _mraw(lambda b: json.dumps(json.loads(b), sort_keys=True).encode() + b"\n"),
        _NOT_CANONICAL,
    ),
    (
        "mlp_non_canonical_key_order.ckpt",
        _mraw(
            lambda b: (
                json.dumps(
                    dict(reversed(list(json.loads(b).items()))), separators=(",", ":")
                ).encode()
                + b"\n"
            )
        ),
        _NOT_CANONICAL,
    ),
    ("mlp_escaped_ascii.ckpt", _msub(b'"cursor"', b'"\\u0063ursor"'), _NOT_CANONICAL),
    # nesting: inside an MLP file (its tail names the schema, so it is read whole and parsed)
    (
        "mlp_nesting_16000_deep_schedule.ckpt",
        _msplice(b'"deep":' + b"[" * 16000 + b"]" * 16000 + b","),
        r"^checkpoint: JSON nests too deeply$",
    ),
    (
        "mlp_nesting_9_deep_schedule.ckpt",
        _medit(_set(("data_schedule", "deep"), [[[[[[[[[1]]]]]]]]])),
        r"^MLPTrainer: data_schedule nests deeper than 8$",
    ),
    ("mlp_nesting_architecture.ckpt", _arch([[[[3]]], 4, 4, 2]), _NOT_INTS + r"\[\[\[\[3\]\]\], 4"),
    # duplicate keys
    (
        "mlp_duplicate_envelope_key.ckpt",
        _msub(b'{"arithmetic_profile"', b'{"schema":"x","arithmetic_profile"'),
        r"^checkpoint: duplicate key 'schema'$",
    ),
    (
        "mlp_duplicate_architecture_key.ckpt",
        _msub(b'"architecture":[3,4,4,2]', b'"architecture":[3,4,4,2],"architecture":[3,5,4,2]'),
        r"^checkpoint: duplicate key 'architecture'$",
    ),
    (
        "mlp_duplicate_tensor_key.ckpt",
        _msub(b'"m":{"dtype":"<f4",', b'"m":{"dtype":"<f4","dtype":"<f4",'),
        r"^checkpoint: duplicate key 'dtype'$",
    ),
    (
        "mlp_duplicate_weight_name.ckpt",
        _msub(b'"weights":{', b'"weights":{"weight3":{"dtype":"<f4","hex":"","shape":[0]},'),
        r"^checkpoint: duplicate key 'weight3'$",
    ),
    # numbers
    (
        "mlp_nan_literal.ckpt",
        _msub(b'"lr":0.0009765625', b'"lr":NaN'),
        r"^checkpoint: NaN is not allowed \(finite numbers only\)$",
    ),
    (
        "mlp_infinity_literal.ckpt",
        _msub(b'"lr":0.0009765625', b'"lr":Infinity'),
        r"^checkpoint: Infinity is not allowed \(finite numbers only\)$",
    ),
    (
        "mlp_minus_infinity_literal.ckpt",
        _msub(b'"lr":0.0009765625', b'"lr":-Infinity'),
        r"^checkpoint: -Infinity is not allowed \(finite numbers only\)$",
    ),
    (
        "mlp_float_overflow_1e999.ckpt",
        _msub(b'"lr":0.0009765625', b'"lr":1e999'),
        r"^checkpoint: number 1e999 is out of range \(finite numbers only\)$",
    ),
    (
        "mlp_int_5000_digits_width.ckpt",
        _msub(b'"architecture":[3,4,', b'"architecture":[3,' + b"7" * 5000 + b","),
        r"^checkpoint: not valid ASCII JSON \(Exceeds the limit \(4300 digits\)",
    ),
    (
        "mlp_integer_config.ckpt",
        _medit(_set(("config", "weight_decay"), 0)),
        r"^checkpoint: config weight_decay must be a JSON float, got 0$",
    ),
    (
        "mlp_non_float32_config.ckpt",
        _edit(_set(("config", "lr"), 0.001), base=mlp_v1_envelope),
        r"^checkpoint: config lr must be a float32 value written as a JSON float, got 0.001$",
    ),
    (
        "mlp_negative_lr.ckpt",
        _medit(_set(("config", "lr"), -0.5)),
        r"^MLPTrainer: invalid learning rate -0.5 \(must be > 0 in float32\)$",
    ),
    (
        "mlp_step_overflow.ckpt",
        _medit(_set(("optimizer", "step"), 1 << 31)),
        r"^MLPTrainer: optimizer step must be in \[0, 2\*\*31-1\], got 2147483648$",
    ),
    (
        "mlp_negative_step.ckpt",
        _medit(_set(("optimizer", "step"), -1)),
        r"^MLPTrainer: optimizer step must be in \[0, 2\*\*31-1\], got -1$",
    ),
    (
        "mlp_float_step.ckpt",
        _medit(_set(("optimizer", "step"), 7.0)),
        r"^MLPTrainer: optimizer step must be an integer, got float$",
    ),
    (
        "mlp_negative_second_moment.ckpt",
        _medit(
            lambda p: p["optimizer"]["v"].update(hex="000080bf" + p["optimizer"]["v"]["hex"][8:])
        ),
        r"^MLPTrainer: optimizer v \(second moments\) must be >= 0$",
    ),
    (
        "mlp_nan_bits_in_weight.ckpt",
        _medit(_w1_hex(lambda h: h[:8] + "0000c07f" + h[16:])),
        r"^MLPTrainer: weight1 must be finite \(flat index 1 is nan\)$",
    ),
    (
        "mlp_infinity_bits_in_m.ckpt",
        _medit(
            lambda p: p["optimizer"]["m"].update(hex="0000807f" + p["optimizer"]["m"]["hex"][8:])
        ),
        r"^MLPTrainer: optimizer m must be finite \(flat index 0 is inf\)$",
    ),
    # hex tensors
    (
        "mlp_odd_length_hex.ckpt",
        _medit(_w1_hex(lambda h: h[:-1])),
        r"^checkpoint: tensor weight1 needs 96 hex digits, got 95$",
    ),
    (
        "mlp_hex_beyond_shape.ckpt",
        _medit(_w1_hex(lambda h: h + "00000000")),
        r"^checkpoint: tensor weight1 needs 96 hex digits, got 104$",
    ),
    (
        "mlp_upper_case_hex.ckpt",
        _medit(_w1_hex(str.upper)),
        r"^checkpoint: tensor weight1 is upper-case hexadecimal \(lowercase hex only\)$",
    ),
    (
        "mlp_non_hex_digit.ckpt",
        _medit(_w1_hex(lambda h: "g" + h[1:])),
        r"^checkpoint: tensor weight1 is not hexadecimal \(lowercase hex only\)$",
    ),
    (
        "mlp_length_claim_beyond_file.ckpt",
        _medit(_set(("weights", "weight1", "shape"), [4, 1 << 40])),
        r"^checkpoint: tensor weight1 shape must be \[4, 3\], got \[4, 1099511627776\]$",
    ),
    (
        "mlp_shape_product_overflow.ckpt",
        _medit(_set(("optimizer", "m", "shape"), [1 << 32, 1 << 32, 1 << 32])),
        r"^checkpoint: tensor m shape must be \[46\], got \[4294967296, 4294967296, 4294967296\]$",
    ),
    (
        "mlp_negative_shape.ckpt",
        _medit(_set(("weights", "bias3", "shape"), [-2])),
        r"^checkpoint: tensor bias3 shape must be \[2\], got \[-2\]$",
    ),
    (
        "mlp_float_shape.ckpt",
        _medit(_set(("weights", "weight1", "shape"), [4.0, 3])),
        r"^checkpoint: tensor weight1 shape must be \[4, 3\], got \[4.0, 3\]$",
    ),
    (
        "mlp_float64_dtype.ckpt",
        _medit(_set(("weights", "bias1", "dtype"), "<f8")),
        r"^checkpoint: tensor bias1 dtype must be '<f4', got '<f8'$",
    ),
    (
        "mlp_tensor_extra_field.ckpt",
        _medit(_set(("optimizer", "v", "order"), "C")),
        r"^checkpoint: tensor v must be an object with exactly dtype, shape, hex$",
    ),
    # hash
    ("mlp_hash_mismatch.ckpt", _medit(_set(("optimizer", "step"), 8), rehash=False), _HASH),
    (
        "mlp_upper_case_hash.ckpt",
        _mraw(
            lambda b: b.replace(
                b'"payload_sha256":"' + json.loads(b)["payload_sha256"].encode(),
                b'"payload_sha256":"' + json.loads(b)["payload_sha256"].upper().encode(),
            )
        ),
        _HASH,
    ),
    ("mlp_hash_not_a_string.ckpt", _menvelope(payload_sha256=0), _HASH),
    (
        "mlp_architecture_edited_not_rehashed.ckpt",
        _medit(_set(("architecture",), [3, 4, 4, 3]), rehash=False),
        _HASH,
    ),
    # envelope, schema, profile
    (
        "mlp_other_file_schema.ckpt",
        _menvelope(schema="mojolearn.mlp-checkpoint.v2"),
        r"^checkpoint: schema must be 'mojolearn.mlp-checkpoint.v1', got "
        r"'mojolearn.mlp-checkpoint.v2'$",
    ),
    (
        "mlp_small_schema_file.ckpt",
        lambda: valid_bytes(),
        r"^checkpoint: schema must be 'mojolearn.mlp-checkpoint.v1', got "
        r"'mojolearn.small-mlp-checkpoint.v1'$",
    ),
    (
        "mlp_small_payload.ckpt",
        lambda: canon(seal({**mlp_base_envelope(), "payload": base_envelope()["payload"]})) + b"\n",
        r"^checkpoint: optimizer must hold exactly \['kind', 'm', 'step', 'v'\]$",
    ),
    (
        "mlp_small_state_schema.ckpt",
        _medit(_set(("schema",), "mojolearn.small-mlp-trainer.v1")),
        r"^MLPTrainer: state schema must be 'mojolearn.mlp-trainer.v1', got "
        r"'mojolearn.small-mlp-trainer.v1'$",
    ),
    (
        "mlp_flags_added.ckpt",
        _medit(_set(("optimizer", "flags"), {"dtype": "<i4", "shape": [4], "hex": "00" * 16})),
        r"^checkpoint: optimizer must hold exactly \['kind', 'm', 'step', 'v'\]$",
    ),
    (
        "mlp_optimizer_kind.ckpt",
        _medit(_set(("optimizer", "kind"), "Adam")),
        r"^MLPTrainer: optimizer kind must be 'AdamW', got 'Adam'$",
    ),
    (
        "mlp_numeric_mode.ckpt",
        _medit(_set(("numeric_mode",), "exact")),
        r"^MLPTrainer: numeric_mode must be one of \('identical', 'fast'\), got 'exact'$",
    ),
    (
        "mlp_other_profile.ckpt",
        _menvelope(arithmetic_profile="someone.else.v3"),
        r"^checkpoint: arithmetic profile is 'someone.else.v3', this mojolearn computes ",
    ),
    (
        "mlp_no_profile.ckpt",
        lambda: (
            canon({k: v for k, v in mlp_base_envelope().items() if k != "arithmetic_profile"})
            + b"\n"
        ),
        r"^checkpoint: arithmetic profile is none \(the reference's default "
        r"mojolearn.neural-training.fp32.v1\), this mojolearn computes ",
    ),
    (
        "mlp_extra_envelope_field.ckpt",
        _menvelope(z=1),
        r"^checkpoint: envelope fields must be \['payload', 'payload_sha256', 'schema'\] and "
        r"optionally arithmetic_profile and envelope_sha256, got ",
    ),
    (
        "mlp_missing_architecture.ckpt",
        _medit(lambda p: p.pop("architecture")),
        r"^checkpoint: payload has missing fields \['architecture'\] / unknown fields \[\]$",
    ),
    (
        "mlp_extra_payload_field.ckpt",
        _medit(_set(("layers",), 3)),
        r"^checkpoint: payload has missing fields \[\] / unknown fields \['layers'\]$",
    ),
    (
        "mlp_long_string.ckpt",
        _medit(_set(("data_schedule", "note"), "x" * 3000)),
        r"^MLPTrainer: data_schedule string longer than 2048 characters$",
    ),
    # size: a large file (over the small schema's 32 KiB bound) is read whole only when its
    # tail names the MLP schema; the loader and from_checkpoint see the file, `loads` the bytes
    (
        "mlp_large_trailing_byte.ckpt",
        lambda: _large()() + b" ",
        r"^checkpoint: ('.*' is larger than 32768 bytes \(\d+ bytes\)|the file must be one line "
        r"of JSON ended by exactly one newline)$",
    ),
    ("mlp_large_hash_mismatch.ckpt", _large(_set(("optimizer", "step"), 8), rehash=False), _HASH),
    (
        "mlp_large_nan_bits_in_last_weight.ckpt",
        _large(
            lambda p: p["weights"]["bias2"].update(
                hex=p["weights"]["bias2"]["hex"][:-8] + "0000c0ff"
            )
        ),
        r"^MLPTrainer: bias2 must be finite \(flat index 9 is nan\)$",
    ),
    (
        "mlp_nesting_100000_deep_bare.ckpt",
        lambda: b"[" * 100000 + b"]" * 100000 + b"\n",
        # as a file its tail names no schema: held to 32 KiB by stat; as bytes: parsed
        r"^checkpoint: ('.*' is larger than 32768 bytes \(200001 bytes\)|JSON nests too deeply)$",
    ),
    # architecture: sizes against tensors
    (
        "mlp_wider_hidden.ckpt",
        _arch([3, 5, 4, 2]),
        r"^checkpoint: tensor weight1 shape must be \[5, 3\], got \[4, 3\]$",
    ),
    (
        "mlp_more_inputs.ckpt",
        _arch([7, 4, 4, 2]),
        r"^checkpoint: tensor weight1 shape must be \[4, 7\], got \[4, 3\]$",
    ),
    (
        "mlp_more_classes.ckpt",
        _arch([3, 4, 4, 3]),
        r"^checkpoint: tensor weight3 shape must be \[3, 4\], got \[2, 4\]$",
    ),
    ("mlp_deeper_than_tensors.ckpt", _arch([3, 4, 4, 4, 2]), _weights_for([3, 4, 4, 4, 2])),
    ("mlp_shallower_than_tensors.ckpt", _arch([3, 4, 2]), _weights_for([3, 4, 2])),
    (
        "mlp_width_at_bound.ckpt",
        _arch([3, 65536, 4, 2]),
        r"^checkpoint: tensor weight1 shape must be \[65536, 3\], got \[4, 3\]$",
    ),
    (
        "mlp_parameters_at_bound.ckpt",
        _arch(list(_AT_BOUND)),
        r"^checkpoint: tensor weight1 shape must be \[1024, 64851\], got \[4, 3\]$",
    ),
    # architecture: sizes refused by themselves
    (
        "mlp_parameters_over_bound.ckpt",
        _arch(list(_OVER_BOUND)),
        "^" + _params_message(_OVER_BOUND, (1 << 26) + 1024) + "$",
    ),
    (
        "mlp_parameters_over_bound_huge.ckpt",
        _arch([65536] * 17),
        "^" + _params_message([65536] * 17, 16 * (65536 * 65536 + 65536)) + "$",
    ),
    (
        "mlp_17_layers.ckpt",
        _arch([3] + [4] * 16 + [2]),
        r"^checkpoint: layer_sizes describes 17 layers, at most 16 are allowed$",
    ),
    (
        "mlp_3000_layers.ckpt",
        _arch([3] + [4] * 2999 + [2]),
        r"^checkpoint: layer_sizes describes 3000 layers, at most 16 are allowed$",
    ),
    (
        "mlp_width_over_bound.ckpt",
        _arch([3, 65537, 4, 2]),
        r"^checkpoint: layer_sizes\[1\] must be in \[1, 65536\], got 65537$",
    ),
    (
        "mlp_width_huge.ckpt",
        _arch([3, 4, 10**30, 2]),
        r"^checkpoint: layer_sizes\[2\] must be in \[1, 65536\], got 1000000000000000000000000000000$",
    ),
    (
        "mlp_width_zero.ckpt",
        _arch([3, 0, 4, 2]),
        r"^checkpoint: layer_sizes\[1\] must be in \[1, 65536\], got 0$",
    ),
    (
        "mlp_width_negative.ckpt",
        _arch([3, 4, -4, 2]),
        r"^checkpoint: layer_sizes\[2\] must be in \[1, 65536\], got -4$",
    ),
    (
        "mlp_inputs_zero.ckpt",
        _arch([0, 4, 4, 2]),
        r"^checkpoint: layer_sizes\[0\] must be in \[1, 65536\], got 0$",
    ),
    (
        "mlp_zero_classes.ckpt",
        _arch([3, 4, 4, 0]),
        r"^checkpoint: layer_sizes\[3\] must be in \[1, 65536\], got 0$",
    ),
    (
        "mlp_one_class.ckpt",
        _arch([3, 4, 4, 1]),
        r"^checkpoint: layer_sizes\[-1\] \(classes\) must be >= 2, got 1$",
    ),
    (
        "mlp_one_entry.ckpt",
        _arch([3]),
        r"^checkpoint: layer_sizes needs at least 2 entries \[inputs, classes\], got \[3\]$",
    ),
    (
        "mlp_empty_architecture.ckpt",
        _arch([]),
        r"^checkpoint: layer_sizes needs at least 2 entries \[inputs, classes\], got \[\]$",
    ),
    ("mlp_float_width.ckpt", _arch([3, 4.0, 4, 2]), _NOT_INTS + r"\[3, 4.0, 4, 2\]$"),
    ("mlp_bool_width.ckpt", _arch([3, True, 4, 2]), _NOT_INTS + r"\[3, True, 4, 2\]$"),
    ("mlp_string_width.ckpt", _arch([3, "4", 4, 2]), _NOT_INTS + r"\[3, '4', 4, 2\]$"),
    ("mlp_null_width.ckpt", _arch([3, None, 4, 2]), _NOT_INTS + r"\[3, None, 4, 2\]$"),
    ("mlp_architecture_string.ckpt", _arch("3,4,4,2"), _NOT_INTS + r"'3,4,4,2'$"),
    ("mlp_architecture_object.ckpt", _arch({"inputs": 3}), _NOT_INTS + r"\{'inputs': 3\}$"),
    # architecture: tensors against sizes
    (
        "mlp_missing_tensor.ckpt",
        _medit(_tensor_edit(lambda w: w.pop("bias3"))),
        _weights_for(MLP_SIZES),
    ),
    (
        "mlp_extra_tensor.ckpt",
        _medit(
            _tensor_edit(
                lambda w: w.update(weight4={"dtype": "<f4", "shape": [2, 2], "hex": "00" * 16})
            )
        ),
        _weights_for(MLP_SIZES),
    ),
    (
        "mlp_renamed_tensor.ckpt",
        _medit(_tensor_edit(lambda w: _rename(w, "weight2", "w2"))),
        _weights_for(MLP_SIZES),
    ),
    (
        "mlp_zero_based_names.ckpt",
        _medit(
            _tensor_edit(
                lambda w: [_rename(w, n, n[:-1] + str(int(n[-1]) - 1)) for n in _MLP_NAMES]
            )
        ),
        _weights_for(MLP_SIZES),
    ),
    (
        "mlp_swapped_tensors.ckpt",
        _medit(_tensor_edit(lambda w: _swap(w, "weight1", "weight3"))),
        r"^checkpoint: tensor weight1 shape must be \[4, 3\], got \[2, 4\]$",
    ),
    (
        "mlp_transposed_weight.ckpt",
        _medit(_set(("weights", "weight3", "shape"), [4, 2])),
        r"^checkpoint: tensor weight3 shape must be \[2, 4\], got \[4, 2\]$",
    ),
    (
        "mlp_short_m.ckpt",
        _medit(
            lambda p: p["optimizer"]["m"].update(hex=p["optimizer"]["m"]["hex"][:-8], shape=[45])
        ),
        r"^checkpoint: tensor m shape must be \[46\], got \[45\]$",
    ),
    (
        "mlp_long_v.ckpt",
        _medit(
            lambda p: p["optimizer"]["v"].update(
                hex=p["optimizer"]["v"]["hex"] + "00" * 4, shape=[47]
            )
        ),
        r"^checkpoint: tensor v shape must be \[46\], got \[47\]$",
    ),
    (
        "mlp_swapped_parameter_order.ckpt",
        _medit(_set(("parameter_order",), ["bias1", "weight1"] + _MLP_NAMES[2:])),
        r"^MLPTrainer: parameter_order must be \['weight1', 'bias1', 'weight2', 'bias2', 'weight3', "
        r"'bias3'\], got \['bias1', 'weight1', ",
    ),
    (
        "mlp_parameter_order_other_depth.ckpt",
        _medit(_set(("parameter_order",), _MLP_NAMES[:4])),
        r"^MLPTrainer: parameter_order must be \['weight1', 'bias1', 'weight2', 'bias2', 'weight3', "
        r"'bias3'\], got \['weight1', 'bias1', 'weight2', 'bias2'\]$",
    ),
]


def committed(make):
    """Whether an attack's file lives in git (files over the loader's 32768-byte bound are
    made at test time instead)."""
    return len(make()) <= 32768


def main():
    written = 0
    for name, make, _ in ATTACKS + MLP_ATTACKS:
        if committed(make):
            with open(os.path.join(FOLDER, name), "wb") as f:
                f.write(make())
            written += 1
    print(f"wrote {written} of {len(ATTACKS) + len(MLP_ATTACKS)} attack files to {FOLDER}")


if __name__ == "__main__":
    main()
