"""The binding ABI, Python side: entry -> (ordered address names, ordered param names).

The compiled binding exposes the same table (`abi_layout()`, built from the `Layout` constants
next to each entry in `mojo/bindings/entries/`). `_backend` compares the two when it loads a
binding and refuses to run on any difference: a silent reorder would be a wrong answer, not a
crash. Change an entry here and in its Mojo `Layout` in the same commit.
"""

LAYOUT = {
    "all_finite": (("x",), ("n",)),
    "neural_gemm": (
        ("a", "b", "c"),
        ("m", "n", "k", "transpose_a", "transpose_b", "accumulate", "row_begin", "row_end"),
    ),
    "matmul": (
        ("a", "b", "c"),
        ("a_rows", "a_cols", "b_rows", "b_cols", "transpose_a", "transpose_b", "split_macs"),
    ),
    "mlp_bias_activation": (("values", "bias", "out"), ("rows", "cols", "relu")),
    "mlp_relu_backward": (("activation", "incoming", "out"), ("rows", "cols")),
    "mlp_sum_rows": (("values", "out"), ("rows", "cols")),
    "mlp_adamw": (
        ("params", "grads", "m", "v"),
        ("n", "t", "lr", "beta1", "beta2", "eps", "weight_decay"),
    ),
    "mlp_train_step": (
        (
            "x",
            "targets",
            "params",
            "m",
            "v",
            "new_params",
            "new_m",
            "new_v",
            "losses",
            "logits",
            "grads",
            "input_grad",
            "sizes",
        ),
        (
            "layers",
            "rows",
            "mode",
            "k",
            "t",
            "lr",
            "beta1",
            "beta2",
            "eps",
            "weight_decay",
            "want_input_grad",
        ),
    ),
    # The resident session (mojo/bindings/entries/mlp.mojo); `_step` / `_steps` / `_set_lr`
    # take their addresses and params as positional ints (`_set_lr`'s lr a float), in order.
    "mlp_resident_open": (
        ("params", "m", "v", "sizes"),
        ("layers", "capacity_rows", "t", "lr", "beta1", "beta2", "eps", "weight_decay"),
    ),
    "mlp_resident_step": (
        ("session", "x", "targets", "out_or_template"),
        ("mode", "rows", "target_itemsize", "want_input_grad", "t"),
    ),
    # lrs: the address of k float64 rates, one per step (a schedule's), or 0: the session's lr.
    "mlp_resident_steps": (
        ("session", "x", "targets", "out_or_template", "lrs"),
        ("rows", "k", "target_itemsize", "t"),
    ),
    "mlp_resident_set_lr": (("session",), ("lr",)),  # positional, as `_step`
    "mlp_resident_download": (("session", "params", "m", "v"), ()),
    "mlp_resident_rollback": (("session",), ("t_before",)),
    "mlp_resident_close": (("session",), ()),
    "mlp_resident_arena": (("session",), ()),
    "mlp_resident_grads": (
        ("session", "x", "targets", "out"),
        ("rows", "target_itemsize", "divide_by", "t"),
    ),
    "mlp_resident_apply": (("session", "grads"), ("t",)),
    "mlp_resident_use_pool": (("session", "pool"), ()),
    # The worker pool of MOJOLEARN_NUM_THREADS (mojolearn/_runtime/threads.py).
    "pool_open": ((), ("workers",)),
    "pool_serve": (("pool",), ()),
    "pool_stop": (("pool",), ()),
    "pool_worker_parts": (("pool",), ()),
    "optim_step": (
        ("table", "exp_avg", "exp_avg_sq", "buf_initialized", "scratch", "step"),
        (
            "kind",
            "n_tensors",
            "n_total",
            "t",
            "lr",
            "beta1",
            "beta2",
            "eps",
            "weight_decay",
            "momentum",
            "dampening",
            "nesterov",
            "maximize",
            "clip",
            "max_norm",
        ),
    ),
    "optim_clip_grad_norm": (
        ("table",),
        ("n_tensors", "max_norm", "error_if_nonfinite", "norm_type"),
    ),
    "optim_tree_sum": (("srcs", "dst"), ("count", "n")),
    "optim_resident_alloc": ((), ("n",)),
    "optim_resident_free": (("buf",), ()),
    "optim_copy": (("dst", "src"), ("n",)),
    "cross_entropy": (
        ("logits", "targets", "losses", "dlogits"),
        ("rows", "classes", "ignore_index", "label_smoothing", "reduction", "want_grad"),
    ),
    # Row-wise softmax of logits (the trainers' predict_proba): the p_j of cross_entropy.
    "softmax": (("logits", "probs"), ("rows", "classes")),
    # Row-wise first index of the maximum, int32 (the trainers' predict).
    "argmax": (("logits", "labels"), ("rows", "classes")),
    "portable_math_eval": (("x", "y"), ("n", "function")),
    "model_step": (
        (
            "program",
            "x",
            "targets",
            "params",
            "m",
            "v",
            "new_params",
            "new_m",
            "new_v",
            "losses",
            "outputs",
            "grads",
            "scratch",
        ),
        (
            "rows",
            "mode",
            "k",
            "t",
            "lr",
            "beta1",
            "beta2",
            "eps",
            "weight_decay",
            "total",
            "first_row",
            "divide_by",
            "pool",
        ),
    ),
    # Takes a Python object (a buffer or a DLPack capsule) and a spec int, not address lists:
    # `_reader` is its only caller.
    "intake_read": (("object",), ("spec",)),
    # `Array.take` (mojo/bindings/entries/array.mojo): positional ints in this order; returns
    # (bytearray, address) of the result, or (position, value) of the first bad index.
    "array_take": (
        ("src", "indices"),
        ("outer", "rows", "inner_bytes", "n", "index_itemsize"),
    ),
}

# Entries `_backend.Binding` exposes unwrapped: they raise plain Exception("<Type>: ...") and
# their callers translate it (the wrapper's extra Python frame costs ~0.06 µs, a noticeable part
# of a batch-1 training step).
# cross_entropy's ignore_index when nothing is ignored: no int32 target equals it.
IGNORE_NOTHING = -(2**31) - 1

RAW_ENTRIES = frozenset({"mlp_resident_step", "mlp_resident_steps", "intake_read", "array_take"})


def parse(binding_layout):
    """The binding's 'entry|a,b|p,q' strings as a dict shaped like LAYOUT."""
    table = {}
    for spec in binding_layout:
        name, addrs, params = str(spec).split("|")
        table[name] = (
            tuple(addrs.split(",")) if addrs else (),
            tuple(params.split(",")) if params else (),
        )
    return table


def first_difference(binding_table, declared=None):
    """None when the tables agree, else a message naming the entry and the first difference."""
    declared = LAYOUT if declared is None else declared
    for name in sorted(set(declared) | set(binding_table)):
        if name not in binding_table:
            return (
                f"entry {name!r} is declared in mojolearn._runtime.abi but missing from the binding"
            )
        if name not in declared:
            return f"entry {name!r} is in the binding but not declared in mojolearn._runtime.abi"
        for kind, ours, theirs in zip(("address", "param"), declared[name], binding_table[name]):
            for i in range(max(len(ours), len(theirs))):
                a = theirs[i] if i < len(theirs) else "<none>"
                b = ours[i] if i < len(ours) else "<none>"
                if a != b:
                    return (
                        f"entry {name!r}: {kind} {i} is {a!r} in the binding but {b!r} "
                        f"in mojolearn._runtime.abi"
                    )
    return None
