"""The trainer core's state as data (a mixin of `MLPCore`): its settings (`lr`, `lr_schedule`,
`weight_decay`, `data_schedule`), `state_dict` / `load_state_dict`, the state hash, checkpoint
files (through the codec, `_mlp/codec.py`), copies and pickles.
"""

from __future__ import annotations

import os

from . import codec as _ckpt
from . import lr_schedule as _lrs
from . import state as S

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from .._buffers.types import LRSchedule
    from .core import MLPCore

    _Trainer = TypeVar("_Trainer", bound=MLPCore)


def trainer_from_bytes(
    cls: type[_Trainer], data: bytes, lr_schedule: LRSchedule | None = None
) -> _Trainer:
    """A `cls` trainer from checkpoint bytes, checked as a file is (how trainers unpickle; a
    custom learning-rate schedule travels beside the bytes as `lr_schedule`)."""
    return cls._from_state(_ckpt.loads(data, schema=cls._SCHEMA_REC.file_schema), lr_schedule)


class Persistence:
    """The core's settings and state as data (a mixin of `MLPCore`)."""

    __slots__ = ()

    @property
    def lr(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> float:
        """The learning rate of the next step: while `lr_schedule` is set, its checked
        `lr_at(step_ + 1)`; else the AdamW lr, as given. Assigning one (checked as the
        constructor's `lr`: a ValueError changes nothing; refused while `lr_schedule` is set)
        takes effect at the next step and is recorded in `state_dict()["config"]`,
        checkpoints and the state hash."""
        with self._lock:
            if self._lr_schedule is not None:
                return _lrs.rate(self._lr_schedule, self._step + 1, self._API)
            return self._config["lr"]

    @lr.setter
    def lr(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, value: float
    ) -> None:
        if self._lr_schedule is not None:
            raise ValueError(
                f"{self._API}: lr cannot be set while lr_schedule is set (the schedule gives "
                f"every step's rate); set lr_schedule = None first"
            )
        self._set_config("lr", value)

    @property
    def lr_schedule(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> LRSchedule | None:
        """The learning-rate schedule, or None (every step at `lr`).

        Step t (one-based) runs at `lr_at(t)`, checked as the optimizers check a scheduled
        rate (a real number, finite and >= 0 as given and in float32); a refused rate, or an
        exception of `lr_at`, refuses the step and changes nothing. Assigning one (an object
        with `lr_at`, checked as the constructor's `lr_schedule`: a TypeError changes nothing)
        takes effect at the next step; None removes it, the next step then runs at the
        trainer's `lr` (the constructor's, or the last assigned). `state_dict()`, checkpoints
        and the state hash record it: the project's schedules in full, any other as
        {"kind": "custom", "class": ...}, which a load needs again (`lr_schedule=`).
        """
        return self._lr_schedule

    @lr_schedule.setter
    def lr_schedule(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, value: LRSchedule | None
    ) -> None:
        schedule = _lrs.checked(value, self._API)
        with self._lock:  # a new session: DataParallel notices the change (its state hash)
            p, m, v, t = self._session.download()
            self._publish(p, m, v, t, lr_schedule=schedule)

    @property
    def weight_decay(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> float:
        """The AdamW weight decay, as given. Assigning one (checked as the constructor's
        `weight_decay`: a ValueError changes nothing) takes effect at the next step and is
        recorded in `state_dict()["config"]`, checkpoints and the state hash."""
        return self._config["weight_decay"]

    @weight_decay.setter
    def weight_decay(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, value: float
    ) -> None:
        self._set_config("weight_decay", value)

    def _set_config(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, key: str, value: float
    ) -> None:
        """Set one hyperparameter: the whole config checked as the constructor checks it,
        then the session reopened holding it (the same state; its hyperparameters are fixed
        when it opens). A refusal or a failed open changes nothing."""
        with self._lock:
            c = dict(self._config)
            c[key] = value
            config = S.check_config(
                c["lr"], (c["beta1"], c["beta2"]), c["eps"], c["weight_decay"], self._API
            )
            p, m, v, t = self._session.download()
            self._publish(p, m, v, t, config)

    @property
    def data_schedule(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> dict[str, Any]:
        """The stored data-order description (a fresh copy). Assigning a new one (validated
        like the constructor's: a ValueError leaves the old one) records where the data
        stream stands, e.g. before a save."""
        with self._lock:
            return S.check_schedule(self._schedule, self._API)  # type: ignore[no-any-return]

    @data_schedule.setter
    def data_schedule(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, value: dict[str, Any]
    ) -> None:
        schedule = S.check_schedule(value, self._API)
        with self._lock:
            self._schedule = schedule

    def state_dict(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> dict[str, Any]:
        """An independent snapshot of the whole resumable state.

        Returns:
            A new dict: `schema`, `architecture` (the layer sizes), `numeric_mode`,
            `parameter_order`, `weights` (fresh Arrays by name), `optimizer` (`kind`, `step`
            and the AdamW moments `m`, `v` as flat fresh Arrays; SmallMLPTrainer's also its
            `flags`), `config` (the hyperparameters, as given; `lr` is the rate used when no
            schedule is set), `data_schedule` and, only while `lr_schedule` is set, its record
            `lr_schedule` (see the `lr_schedule` property). Nothing in it shares memory with
            the trainer.

        Example:
            >>> state = trainer.state_dict()
            >>> trainer.train_step(X, y)
            >>> trainer.load_state_dict(state)  # back to the snapshot, bit for bit
        """
        with self._lock:
            st = self._st
            optimizer = {"kind": S.OPTIMIZER, "step": st.step, "m": st.m, "v": st.v}
            if st.flags is not None:
                optimizer["flags"] = st.flags
            state = {
                "schema": self._SCHEMA_REC.state_schema,
                "architecture": list(self._spec.sizes),
                "numeric_mode": self._mode,
                "parameter_order": list(self._spec.names),
                "weights": S.split(st.params, self._spec),
                "optimizer": optimizer,
                "config": dict(self._config),
                "data_schedule": S.check_schedule(self._schedule, self._API),
            }
            if self._lr_schedule is not None:
                state["lr_schedule"] = _lrs.record(self._lr_schedule)
            return state

    def load_state_dict(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: _Trainer, state: dict[str, Any], *, lr_schedule: LRSchedule | None = None
    ) -> _Trainer:
        """Restore a `state_dict()` snapshot of the same layer sizes and numeric mode.

        The whole state is validated and copied before anything changes. Its learning-rate
        schedule comes with it: none, the project's schedule its record describes, or, for a
        custom one, `lr_schedule` (else this trainer's own schedule) of the recorded class.

        Args:
            state: a `state_dict()` of a trainer of this class (its tensors may be any
                float32 / int32 buffers of the right shapes).
            lr_schedule: the state's schedule again, needed when it is a custom one (a
                project schedule must equal the record; with no record, refused).

        Returns:
            self.

        Raises:
            ValueError: a wrong schema, architecture, numeric mode, shape or value, or an
                `lr_schedule` that is not the state's (the trainer is unchanged).
            TypeError: a tensor that is not a buffer of the right dtype, or an `lr_schedule`
                without `lr_at`.
        """
        params, m, v, flags, step, config, schedule, _, rec = S.validate_state(
            state, self._mode, self._spec, self._SCHEMA_REC
        )
        with self._lock:
            lr_sched = _lrs.resolve(rec, lr_schedule, self._lr_schedule, self._API)
            self._publish(params, m, v, step, config, schedule, flags, lr_schedule=lr_sched)
        return self

    def state_hash(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> str:
        """A digest of the whole state: equal hashes mean bit-equal states.

        Returns:
            The SHA-256 (hex) of the canonical JSON of this state's checkpoint payload (the
            hash `save_checkpoint` records in the file).
        """
        return _ckpt.state_hash(_ckpt.encode_state(self.state_dict()))

    def save_checkpoint(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore, path: str | os.PathLike[str]
    ) -> None:
        """Write the whole state to `path` atomically (see `mojolearn.checkpoint`).

        The bytes go to a temporary file in the same folder, which then replaces `path`: a
        reader sees the old file or the new one, never part of one.

        Args:
            path: the checkpoint file (replaced if it exists).

        Raises:
            ValueError: `path` names something other than a regular file, the state is
                over the file's size bound, or the file would not load (the loader's checks
                run on what is about to be written); nothing is written.
            FileNotFoundError: `path`'s folder does not exist (named); nothing is made.
            OSError: the file cannot be written.
        """
        with self._lock:
            data = _ckpt.dumps(self.state_dict())
        _ckpt.write_atomic(path, data)

    @classmethod
    def _load(  # type: ignore[misc]  # self: the MLPCore this mixes into
        cls: type[MLPCore],
        path: str | os.PathLike[str],
        allow_profile_change: bool,
        max_bytes: int | None,
    ) -> dict[str, Any]:
        """The checked state of a checkpoint file of this class's file schema (a fixed
        layout's files have their fixed bound: `max_bytes` is ignored)."""
        rec = cls._SCHEMA_REC
        bound = max_bytes if rec.spec is None else None
        return _ckpt.load_resumable(path, allow_profile_change, rec.file_schema, bound)

    def load_checkpoint(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: _Trainer,
        path: str | os.PathLike[str],
        *,
        allow_profile_change: bool = False,
        max_bytes: int | None = None,
        lr_schedule: LRSchedule | None = None,
    ) -> _Trainer:
        """Restore this trainer from a `save_checkpoint` file of the same layer sizes.

        The file is checked whole (size bound, schema, hash, arithmetic profile, every
        field) before anything changes.

        Args:
            path: the checkpoint file.
            allow_profile_change: accept a file written under another arithmetic profile (a
                migration: bits then follow this mojolearn's arithmetic).
            max_bytes: the size bound (MLPTrainer files; default `checkpoint.MLP_MAX_BYTES`).
                SmallMLPTrainer files have their fixed bound and ignore it.
            lr_schedule: the file's learning-rate schedule again, as `load_state_dict` takes
                it (needed for a custom one, unless this trainer holds one of its class).

        Returns:
            self.

        Raises:
            ValueError: the file is refused (named reason), holds other layer sizes, or a
                schedule `lr_schedule` is not; the trainer is unchanged.
            TypeError: an `lr_schedule` without `lr_at`.
            OSError: the file cannot be read.
        """
        state = self._load(path, allow_profile_change, max_bytes)
        return self.load_state_dict(state, lr_schedule=lr_schedule)

    def _custom_schedule(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> LRSchedule | None:
        """The schedule when it is a custom one (a copy needs the object; a project
        schedule is rebuilt from its record), else None."""
        s = self._lr_schedule
        return s if s is not None and _lrs.record(s)["kind"] == "custom" else None

    # A copy is a trainer of its own: same state bits, its own session and lock (a shallow
    # copy would share the session, and each would then step the other's state).
    def __copy__(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: _Trainer,
    ) -> _Trainer:
        return type(self)._from_state(self.state_dict(), self._custom_schedule())

    def __deepcopy__(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: _Trainer, memo: dict[int, Any]
    ) -> _Trainer:
        import copy

        custom = copy.deepcopy(self._custom_schedule(), memo)
        return type(self)._from_state(self.state_dict(), custom)

    def __reduce__(  # type: ignore[misc]  # self: the MLPCore this mixes into
        self: MLPCore,
    ) -> tuple[Callable[..., MLPCore], tuple[Any, ...]]:
        data = _ckpt.dumps(self.state_dict())
        custom = self._custom_schedule()
        if custom is None:
            return trainer_from_bytes, (type(self), data)
        return trainer_from_bytes, (type(self), data, custom)
