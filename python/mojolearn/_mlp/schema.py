"""Persistence as data: one `Schema` record per trainer class, and the table that picks one.

What tells SmallMLPTrainer's states and files from MLPTrainer's is held here and nowhere else:
its name in messages, its state and file schemas, a file's size bound, the optimizer fields
(the reference's v1 layout adds its int32 `flags`) and its layer sizes when they are fixed.
The codec, the state checks, the trainers and the command line read the record instead of
testing which trainer they serve.
"""

from __future__ import annotations

from collections import namedtuple

from .spec import MAX_PARAMS, SMALL, LayerSizes


# collections' namedtuple, typed by the annotations below: typing.NamedTuple would import
# `typing` at run time, which the package never does (tests/test_typing.py).
class Schema(namedtuple("Schema", "api state_schema file_schema max_bytes optimizer_keys spec")):
    """A trainer class's persistence (a frozen record).

    `spec` is the fixed layer sizes (the reference's v1 layout) or None, when every state
    declares its own `architecture`. A fixed layout's files have a fixed bound as well:
    `max_bytes` is then the most any reader accepts, else the default a caller may raise.
    """

    __slots__ = ()
    api: str  # the trainer's name in messages (and the public class's name)
    state_schema: str  # `state_dict()["schema"]`
    file_schema: str  # the checkpoint envelope's `schema`
    max_bytes: int  # a file's size bound
    optimizer_keys: frozenset[str]  # the fields of `state_dict()["optimizer"]`
    spec: LayerSizes | None  # the fixed layer sizes, or None


SMALL_RECORD = Schema(
    "SmallMLPTrainer",
    "mojolearn.small-mlp-trainer.v1",
    "mojolearn.small-mlp-checkpoint.v1",
    32768,
    frozenset(("kind", "step", "m", "v", "flags")),  # flags: int32 (4), each 0 or 1
    SMALL,
)
# The largest admissible MLP (2**26 parameters): params, m and v at 8 hex digits a value, plus
# 1 MiB for everything else (names, shapes, config, the data_schedule of at most 512 KiB).
MLP_RECORD = Schema(
    "MLPTrainer",
    "mojolearn.mlp-trainer.v1",
    "mojolearn.mlp-checkpoint.v1",
    3 * 8 * MAX_PARAMS + (1 << 20),
    frozenset(("kind", "step", "m", "v")),
    None,
)
# The one table: every record by its file schema and by its state schema (four distinct names).
SCHEMAS = {n: r for r in (SMALL_RECORD, MLP_RECORD) for n in (r.file_schema, r.state_schema)}


def record(name: object, kind: str, default: Schema) -> Schema:
    """The record whose `kind` schema ("file_schema" or "state_schema") is `name`; `default`
    for any other value, of any type (an unchecked argument, a forged file's field)."""
    rec = SCHEMAS.get(name, default) if isinstance(name, str) else default
    return rec if getattr(rec, kind) == name else default
