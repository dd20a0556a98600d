"""Seeded mutations of valid checkpoint files: blind byte edits and structure-aware edits of
the parsed envelope (field deletions, type swaps, huge numbers, deep nesting, long strings,
shape/length mismatches, key order, whitespace, case, duplicate keys), re-hashed most of the
time so the edit reaches the checks behind the hash."""

import hashlib
import json

_INTERESTING = [
    b"0",
    b"-0",
    b"1e999",
    b"-1e999",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e-400",
    b"9" * 400,
    b"9" * 5000,
    b"null",
    b"true",
    b"[]",
    b"{}",
    b'""',
    b'"\\ud800"',
    b'"\\u0000"',
    b"\xef\xbb\xbf",
    b"\xff",
    b"\x00",
    b" ",
    b"\n",
    b"\r\n",
    b"\t",
    b",",
    b":",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b"\\",
    b"2147483648",
    b"-1",
    b"18446744073709551616",
    b"1.0",
    b"3.0",
    b"1E5",
]


def canon(obj):
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def old_layout(data):
    """The bytes of a checkpoint without its `envelope_sha256`: the layout of the files written
    before that hash, which the loader still reads (its `dumps` writes them with it)."""
    env = json.loads(data)
    env.pop("envelope_sha256", None)
    return canon(env) + b"\n"


def written(state, profile, data):
    """Whether `data` is the file the writer makes of `state`, in either layout."""
    from mojolearn import checkpoint

    new = checkpoint.dumps(state, profile)
    return data in (new, old_layout(new))


def rehash(env):
    if isinstance(env, dict) and "payload" in env:
        try:
            env["payload_sha256"] = hashlib.sha256(canon(env["payload"])).hexdigest()
        except (TypeError, ValueError):
            pass


def nodes(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from nodes(v, path + (i,))


def _parent(root, path):
    for key in path[:-1]:
        root = root[key]
    return root


def _other_value(rng):
    return rng.choice(
        [
            None,
            True,
            False,
            0,
            -1,
            1 << 31,
            1 << 64,
            -(1 << 70),
            10**300,
            1.5,
            -0.0,
            1e308,
            3.4028235677973366e38,
            5e-324,
            "",
            "x" * rng.choice([1, 100, 3000, 20000]),
            "\ud800",
            "\u00e9",
            [],
            {},
            [1, 2, 3],
            {"dtype": "<f4", "shape": [3], "hex": "00" * 12},
            {"dtype": "<i4", "shape": [4], "hex": "00" * 16},
            [[[]]],
            "identical",
            "fast",
            "AdamW",
            [8, 16, 3],
            [8.0, 16, 3],
            3.0,
            0.1,
            1,
        ]
    )


def _deep(rng):
    n = rng.choice([10, 100, 1000, 5000, 12000])
    return "[" * n + "]" * n if rng.random() < 0.5 else '{"a":' * n + "1" + "}" * n


def structured(rng, env):
    """(bytes, description) of one structure-aware edit of a parsed envelope (edited in place)."""
    every = list(nodes(env))[1:]
    path, value = rng.choice(every)
    parent = _parent(env, path)
    key = path[-1]
    op = rng.randrange(14)
    what = f"{op}@{'/'.join(map(str, path))}"
    if op == 0:  # field deletion
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif op == 1:  # type swap
        parent[key] = _other_value(rng)
    elif op == 2:  # extra field
        target = value if isinstance(value, dict) else parent
        if isinstance(target, dict):
            target[rng.choice(["extra", "hex", "dtype", "payload", "schema", "zz"])] = _other_value(
                rng
            )
    elif op == 3:  # shape / length mismatch
        if isinstance(value, dict) and "hex" in value:
            choice = rng.randrange(5)
            if choice == 0:
                value["hex"] = value["hex"][: -rng.choice([1, 2, 8])]
            elif choice == 1:
                value["hex"] += rng.choice(["0", "00", "00000000"])
            elif choice == 2:
                value["shape"] = [
                    rng.choice([0, 1, 195, 1 << 40, -1]) for _ in range(rng.randrange(4))
                ]
            elif choice == 3:
                value["shape"] = [1 << 32, 1 << 32]
            else:
                value["dtype"] = rng.choice(["<f8", ">f4", "<i4", "<f4", "f4", ""])
        else:
            parent[key] = _other_value(rng)
    elif op == 4:  # huge numbers
        parent[key] = rng.choice([1 << 63, 1 << 1000, -(1 << 2000), 1e308, -1e308, 2**-1074])
    elif op == 5:  # long string
        parent[key] = rng.choice(["a", "\u00ff", "\\"]) * rng.choice([2049, 10000, 40000])
    elif op == 6:  # upper-case hex
        if isinstance(value, str) and any(c in "abcdef" for c in value):
            parent[key] = value.upper()
        else:
            parent[key] = "%X" % rng.getrandbits(64)
    elif op == 7:  # hex character edits
        if isinstance(value, str) and value:
            i = rng.randrange(len(value))
            parent[key] = value[:i] + rng.choice("0g-+ Z\u00e9") + value[i + 1 :]
    elif op == 8:  # numbers near the limits
        parent[key] = rng.choice([0, -1, (1 << 31) - 1, 1 << 31, 0.0, -0.0, 1.0, 0.999999, 1e-45])
    elif op == 9:  # list / dict swap
        if isinstance(value, dict):
            parent[key] = list(value.values())
        elif isinstance(value, list):
            parent[key] = {str(i): v for i, v in enumerate(value)}
        else:
            parent[key] = [value]
    rng.random() < 0.85 and rehash(env)
    try:
        text = canon(env)
    except (TypeError, ValueError):
        text = json.dumps(env, sort_keys=True, separators=(",", ":")).encode("ascii", "replace")
    if op == 10:  # deep nesting spliced in as a value
        marker = b'"cursor":'
        i = text.find(marker)
        if i < 0:
            i = len(text) // 2
        text = text[:i] + b'"deep":' + _deep(rng).encode() + b"," + text[i:]
    elif op == 11:  # non-canonical layout: spaces, key order, indentation, BOM, CRLF
        choice = rng.randrange(5)
        if choice == 0:
            text = json.dumps(env, sort_keys=True).encode("ascii", "replace")
        elif choice == 1:
            text = json.dumps(env, separators=(",", ":")).encode("ascii", "replace")
            if isinstance(env, dict) and list(env) == sorted(env):
                text = json.dumps(dict(reversed(list(env.items()))), separators=(",", ":")).encode(
                    "ascii", "replace"
                )
        elif choice == 2:
            text = b"\xef\xbb\xbf" + text
        elif choice == 3:
            text = text + b"\r"
        else:
            text = b" " + text
    elif op == 12:  # duplicate key
        i = text.find(b'{"', 1)
        if i > 0:
            j = text.find(b",", i)
            if j > 0:
                text = text[:j] + b"," + text[i + 1 : j] + text[j:]
    elif op == 13:  # non-ASCII or escaped surrogate in a string
        i = text.find(b'"cursor"')
        if i > 0:
            text = (
                text[:i]
                + rng.choice([b'"\\ud800x":1,', '"\u00e9":1,'.encode(), b'"\\u0000":1,'])
                + text[i:]
            )
    tail = rng.choice([b"\n"] * 8 + [b"", b"\n\n", b"\nx", b" \n", b"\n\x00"])
    return text + tail, what


def blind(rng, data, others):
    """(bytes, description) of byte-level edits of a valid file."""
    data = bytearray(data)
    ops = []
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        op = rng.randrange(9)
        i = rng.randrange(len(data) + 1)
        ops.append(op)
        if op == 0:  # bit flip
            if data:
                j = min(i, len(data) - 1)
                data[j] ^= 1 << rng.randrange(8)
        elif op == 1:
            if data:
                data[min(i, len(data) - 1)] = rng.randrange(256)
        elif op == 2:
            del data[i : i + rng.choice([1, 2, 8, 100, 5000])]
        elif op == 3:
            data[i:i] = rng.randbytes(rng.choice([1, 2, 8, 100]))
        elif op == 4:
            data[i:i] = rng.choice(_INTERESTING)
        elif op == 5:  # duplicate a chunk
            j = rng.randrange(len(data) + 1)
            data[i:i] = data[min(i, j) : max(i, j)][:4000]
        elif op == 6:  # truncate
            del data[i:]
        elif op == 7:  # splice with another valid file
            other = rng.choice(others)
            data = data[:i] + other[min(i, len(other)) :]
        else:  # overwrite a run with one hex digit (keeps length)
            for k in range(i, min(len(data), i + rng.choice([1, 8, 64]))):
                if chr(data[k]) in "0123456789abcdef":
                    data[k] = ord(rng.choice("0123456789abcdef"))
    return bytes(data), f"blind{ops}"


def random_bytes(rng):
    n = rng.choice([0, 1, 2, 10, 100, 1000, 32768, 32769])
    body = (
        rng.randbytes(n)
        if rng.random() < 0.5
        else bytes(rng.choice(b'{}[]",:0123456789abcdef.eE+-ntrufalse \n\\') for _ in range(n))
    )
    return body, f"random{n}"
