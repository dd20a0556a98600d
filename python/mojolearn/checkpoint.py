"""Checkpoint files: read, check and write them without a trainer.

The public face of the codec in `mojolearn._mlp.codec`, whose docstring is the file format's
specification (canonical JSON envelope, SHA-256 of the payload and of the envelope, arithmetic
profile, size bounds, atomic writes); `mojolearn._model.persist`'s gives the payload of
`mojolearn.Trainer`'s files (`MODEL_FILE_SCHEMA`), which `verify` and
`load(path, schema=MODEL_FILE_SCHEMA)` read. `trainer_from_bytes` stays importable here: trainers
pickled before the package was cut into wings name it.
"""

from __future__ import annotations

from ._mlp.codec import (
    ALL_SCHEMAS,
    FILE_SCHEMA,
    MAX_BYTES,
    MLP_FILE_SCHEMA,
    MLP_MAX_BYTES,
    MODEL_FILE_SCHEMA,
    MODEL_MAX_BYTES,
    PROFILE,
    PROFILE_V1,
    REFERENCE_PROFILE,
    applied_profile,
    check_resumable,
    dumps,
    encode_state,
    encode_tensor,
    envelope_hash,
    load,
    load_resumable,
    load_with_envelope,
    loads,
    read_bounded,
    state_hash,
    verify,
    write_atomic,
)
from ._mlp.persist import trainer_from_bytes
from ._model import persist as _model_persist  # noqa: F401  (registers the model payload reader)
from ._runtime.files import TMP_SUFFIX, clean_stale_temporaries

__all__ = [
    "ALL_SCHEMAS",
    "FILE_SCHEMA",
    "MAX_BYTES",
    "MLP_FILE_SCHEMA",
    "MLP_MAX_BYTES",
    "MODEL_FILE_SCHEMA",
    "MODEL_MAX_BYTES",
    "PROFILE",
    "PROFILE_V1",
    "REFERENCE_PROFILE",
    "TMP_SUFFIX",
    "applied_profile",
    "check_resumable",
    "clean_stale_temporaries",
    "dumps",
    "encode_state",
    "envelope_hash",
    "encode_tensor",
    "load",
    "load_resumable",
    "load_with_envelope",
    "loads",
    "read_bounded",
    "state_hash",
    "trainer_from_bytes",
    "verify",
    "write_atomic",
]
