"""The adversarial checkpoint corpus: one generator per file and the exact refusal expected.

`python -m tests.reliability.attacks.generate` (from the repository root) rewrites the
`*.ckpt` files of this folder (those over 32 KiB are only made at test time); `tests/reliability/test_attacks.py` checks that every file is
what its generator makes and that `checkpoint.load` refuses it with ValueError and the
expected message in under 100 ms. Attacks that cannot live in git (a sparse 1 GiB file, a
FIFO, a folder, a device, a socket, symlinks) are made at test time by `PATH_ATTACKS`.
"""
import hashlib
import json
import os
import struct

FOLDER = os.path.dirname(os.path.abspath(__file__))
_NAMES = ("weight1", "bias1", "weight2", "bias2")
_SHAPES = ((16, 8), (16,), (3, 16), (3,))


def canon(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def _hex(values, fmt="<f"):
    return b"".join(struct.pack(fmt, v) for v in values).hex()


def _floats(n, k):
    # A fixed, platform-independent pattern of exact float32 values (no RNG to drift).
    return [((i * 37 + k * 11) % 101 - 50) / 64.0 for i in range(n)]


def base_envelope():
    """A valid checkpoint envelope (identical mode, step 7) as a dict."""
    weights = {}
    for k, (name, shape) in enumerate(zip(_NAMES, _SHAPES)):
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        weights[name] = {"dtype": "<f4", "shape": list(shape), "hex": _hex(_floats(n, k))}
    payload = {
        "schema": "mojolearn.small-mlp-trainer.v1", "architecture": [8, 16, 3],
        "numeric_mode": "identical", "parameter_order": list(_NAMES), "weights": weights,
        "optimizer": {"kind": "AdamW", "step": 7,
                      "m": {"dtype": "<f4", "shape": [195], "hex": _hex(_floats(195, 5))},
                      "v": {"dtype": "<f4", "shape": [195],
                            "hex": _hex([abs(x) / 8 for x in _floats(195, 6)])},
                      "flags": {"dtype": "<i4", "shape": [4], "hex": "00" * 16}},
        "config": {"lr": 0.0009765625, "beta1": 0.875, "beta2": 0.9990234375,
                   "eps": 7.450580596923828e-09, "weight_decay": 0.0078125},
        "data_schedule": {"cursor": 56, "dataset_sha256": "ab" * 32, "seed": 11},
    }
    return seal({"schema": "mojolearn.small-mlp-checkpoint.v1",
                 "arithmetic_profile": "mojolearn.portable-fp32.v1", "payload": payload})


def seal(env):
    env["payload_sha256"] = hashlib.sha256(canon(env["payload"])).hexdigest()
    return env


def valid_bytes():
    return canon(base_envelope()) + b"\n"


def _edit(fn, rehash=True):
    """Bytes of the base envelope after `fn(payload)`, re-hashed (so the refusal is the edit)."""
    def make():
        env = base_envelope()
        fn(env["payload"])
        return canon(seal(env) if rehash else env) + b"\n"
    return make


def _raw(fn):
    return lambda: fn(valid_bytes())


def _set(path, value):
    def fn(payload):
        obj = payload
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
    return fn


def _splice_schedule(text):
    """Bytes of the base file with `text` spliced in as the first data_schedule field."""
    def make():
        data = valid_bytes()
        return data.replace(b'"data_schedule":{', b'"data_schedule":{' + text, 1)
    return make


def _w1_hex(fn):
    def edit(payload):
        payload["weights"]["weight1"]["hex"] = fn(payload["weights"]["weight1"]["hex"])
    return edit


# (file name, generator -> bytes, exact expected message: a regex matched with re.search)
ATTACKS = [
    ("empty.ckpt", lambda: b"", r"^checkpoint: the file must be one line of JSON ended by "
                                r"exactly one newline$"),
    ("truncated.ckpt", _raw(lambda b: b[:len(b) // 2]),
     r"^checkpoint: the file must be one line of JSON ended by exactly one newline$"),
    ("trailing_bytes_after_newline.ckpt", _raw(lambda b: b + b"{}"),
     r"^checkpoint: the file must be one line of JSON ended by exactly one newline$"),
    ("two_newlines.ckpt", _raw(lambda b: b + b"\n"),
     r"^checkpoint: the file must be one line of JSON ended by exactly one newline$"),
    ("crlf.ckpt", _raw(lambda b: b[:-1] + b"\r\n"),
     r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$"),
    ("bom.ckpt", _raw(lambda b: b"\xef\xbb\xbf" + b),
     r"^checkpoint: not valid ASCII JSON \('ascii' codec can't decode byte 0xef in position 0"),
    ("raw_utf8_surrogate.ckpt", _splice_schedule(b'"\xed\xa0\x80":1,'),
     r"^checkpoint: not valid ASCII JSON \('ascii' codec can't decode byte 0xed"),
    ("lone_surrogate_escape.ckpt", _edit(_set(("data_schedule", "note"), "\ud800")),
     r"^SmallMLPTrainer: data_schedule string holds a lone surrogate \(not valid Unicode\)$"),
    ("lone_surrogate_key.ckpt", _edit(_set(("data_schedule", "\udfff"), 1)),
     r"^SmallMLPTrainer: data_schedule key holds a lone surrogate \(not valid Unicode\)$"),
    ("nesting_100000_deep.ckpt", lambda: b"[" * 100000 + b"]" * 100000 + b"\n",
     # as bytes: the size bound; as a file: the same bound from stat, before any read
     r"^checkpoint: (200001 bytes exceed the 32768-byte bound|'.*' is larger than 32768 "
     r"bytes \(200001 bytes\))$"),
    ("nesting_16000_deep.ckpt", lambda: b"[" * 16000 + b"]" * 16000 + b"\n",
     r"^checkpoint: JSON nests too deeply$"),
    ("nesting_schedule_9_deep.ckpt", _edit(_set(("data_schedule", "deep"), [[[[[[[[[1]]]]]]]]])),
     r"^SmallMLPTrainer: data_schedule nests deeper than 8$"),
    ("duplicate_envelope_key.ckpt", _raw(lambda b: b.replace(b'{"arithmetic_profile"',
                                                             b'{"schema":"x","arithmetic_profile"', 1)),
     r"^checkpoint: duplicate key 'schema'$"),
    ("duplicate_tensor_key.ckpt", _raw(lambda b: b.replace(b'"flags":{"dtype":"<i4",',
                                                           b'"flags":{"dtype":"<i4","dtype":"<i4",', 1)),
     r"^checkpoint: duplicate key 'dtype'$"),
    ("nan_literal.ckpt", _raw(lambda b: b.replace(b'"lr":0.0009765625', b'"lr":NaN', 1)),
     r"^checkpoint: NaN is not allowed \(finite numbers only\)$"),
    ("infinity_literal.ckpt", _raw(lambda b: b.replace(b'"lr":0.0009765625',
                                                       b'"lr":Infinity', 1)),
     r"^checkpoint: Infinity is not allowed \(finite numbers only\)$"),
    ("minus_infinity_literal.ckpt", _raw(lambda b: b.replace(b'"lr":0.0009765625',
                                                             b'"lr":-Infinity', 1)),
     r"^checkpoint: -Infinity is not allowed \(finite numbers only\)$"),
    ("float_overflow_1e999.ckpt", _raw(lambda b: b.replace(b'"lr":0.0009765625',
                                                           b'"lr":1e999', 1)),
     r"^checkpoint: number 1e999 is out of range \(finite numbers only\)$"),
    ("int_5000_digits.ckpt", _splice_schedule(b'"big":' + b"7" * 5000 + b","),
     r"^checkpoint: not valid ASCII JSON \(Exceeds the limit \(4300 digits\)"),
    ("odd_length_hex.ckpt", _edit(_w1_hex(lambda h: h[:-1])),
     r"^checkpoint: tensor weight1 needs 1024 hex digits, got 1023$"),
    ("hex_beyond_shape.ckpt", _edit(_w1_hex(lambda h: h + "00000000")),
     r"^checkpoint: tensor weight1 needs 1024 hex digits, got 1032$"),
    ("upper_case_hex.ckpt", _edit(_w1_hex(str.upper)),
     r"^checkpoint: tensor weight1 is upper-case hexadecimal \(lowercase hex only\)$"),
    ("non_hex_digit.ckpt", _edit(_w1_hex(lambda h: "g" + h[1:])),
     r"^checkpoint: tensor weight1 is not hexadecimal \(lowercase hex only\)$"),
    ("length_claim_beyond_file.ckpt", _edit(_set(("weights", "weight1", "shape"), [16, 1 << 40])),
     r"^checkpoint: tensor weight1 shape must be \[16, 8\], got \[16, 1099511627776\]$"),
    ("shape_product_overflow.ckpt", _edit(_set(("optimizer", "m", "shape"), [1 << 32, 1 << 32, 1 << 32])),
     r"^checkpoint: tensor m shape must be \[195\], got \[4294967296, 4294967296, 4294967296\]$"),
    ("negative_shape.ckpt", _edit(_set(("weights", "bias2", "shape"), [-3])),
     r"^checkpoint: tensor bias2 shape must be \[3\], got \[-3\]$"),
    ("non_canonical_key_order.ckpt",
     _raw(lambda b: json.dumps(dict(reversed(list(json.loads(b).items()))),
                               separators=(",", ":")).encode() + b"\n"),
     r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$"),
    ("whitespace.ckpt", _raw(lambda b: json.dumps(json.loads(b), sort_keys=True).encode() + b"\n"),
     r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$"),
    ("escaped_ascii.ckpt", _raw(lambda b: b.replace(b'"cursor"', b'"\\u0063ursor"', 1)),
     r"^checkpoint: the file is not canonical JSON \(sorted keys, no spaces, ASCII\)$"),
    ("hash_mismatch.ckpt", _edit(_set(("optimizer", "step"), 8), rehash=False),
     r"^checkpoint: payload_sha256 does not match the payload \(corrupted or edited\)$"),
    ("upper_case_hash.ckpt", _raw(lambda b: b.replace(
        b'"payload_sha256":"' + json.loads(b)["payload_sha256"].encode(),
        b'"payload_sha256":"' + json.loads(b)["payload_sha256"].upper().encode())),
     r"^checkpoint: payload_sha256 does not match the payload \(corrupted or edited\)$"),
    ("other_file_schema.ckpt",
     lambda: canon({**base_envelope(), "schema": "mojolearn.small-mlp-checkpoint.v2"}) + b"\n",
     r"^checkpoint: schema must be 'mojolearn.small-mlp-checkpoint.v1', got "
     r"'mojolearn.small-mlp-checkpoint.v2'$"),
    ("other_profile.ckpt",
     lambda: canon({**base_envelope(), "arithmetic_profile": "someone.else.v3"}) + b"\n",
     r"^checkpoint: arithmetic profile is 'someone.else.v3', this mojolearn computes "),
    ("extra_envelope_field.ckpt", lambda: canon({**base_envelope(), "z": 1}) + b"\n",
     r"^checkpoint: envelope fields must be \['payload', 'payload_sha256', 'schema'\] and "
     r"optionally arithmetic_profile, got "),
    ("top_level_array.ckpt", lambda: b"[1,2,3]\n",
     r"^checkpoint: the envelope must be a JSON object$"),
    ("missing_payload_field.ckpt", _edit(lambda p: p.pop("config")),
     r"^checkpoint: payload has missing fields \['config'\] / unknown fields \[\]$"),
    ("step_overflow.ckpt", _edit(_set(("optimizer", "step"), 1 << 31)),
     r"^SmallMLPTrainer: optimizer step must be in \[0, 2\*\*31-1\], got 2147483648$"),
    ("negative_second_moment.ckpt",
     _edit(lambda p: p["optimizer"]["v"].update(hex="000080bf" + p["optimizer"]["v"]["hex"][8:])),
     r"^SmallMLPTrainer: optimizer v \(second moments\) must be >= 0$"),
    ("nan_bits_in_weight.ckpt", _edit(_w1_hex(lambda h: h[:8] + "0000c07f" + h[16:])),
     r"^SmallMLPTrainer: weight1 must be finite \(flat index 1 is nan\)$"),
    ("float_architecture.ckpt", _edit(_set(("architecture",), [8, 16, 3.0])),
     r"^checkpoint: architecture entries must be JSON integers, got \[8, 16, 3.0\]$"),
    ("integer_config.ckpt", _edit(_set(("config", "weight_decay"), 0)),
     r"^checkpoint: config weight_decay must be a float32 value written as a JSON float, got 0$"),
    ("non_float32_config.ckpt", _edit(_set(("config", "lr"), 0.001)),
     r"^checkpoint: config lr must be a float32 value written as a JSON float, got 0.001$"),
    ("long_string.ckpt", _edit(_set(("data_schedule", "note"), "x" * 3000)),
     r"^SmallMLPTrainer: data_schedule string longer than 2048 characters$"),
    ("nul_byte.ckpt", _raw(lambda b: b.replace(b'"cursor"', b'"cur\x00sor"', 1)),
     r"^checkpoint: not valid ASCII JSON \(Invalid control character"),
]


def committed(make):
    """Whether an attack's file lives in git (files over the loader's 32768-byte bound are
    made at test time instead)."""
    return len(make()) <= 32768


def main():
    written = 0
    for name, make, _ in ATTACKS:
        if committed(make):
            with open(os.path.join(FOLDER, name), "wb") as f:
                f.write(make())
            written += 1
    print(f"wrote {written} of {len(ATTACKS)} attack files to {FOLDER}")


if __name__ == "__main__":
    main()
