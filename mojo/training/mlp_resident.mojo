"""The resident MLP session: parameters, AdamW moments, their pre-step backup, the step count
and the step's scratch in ONE binding-owned memory block, kept between calls.

The session is an address (the handle Python holds): `session_open` callocs the block and
fills it, `session_close` clears the magic word and frees it. Every entry checks the magic
word first, which catches a foreign address or a closed block whose memory is still mapped;
it cannot make a use-after-close safe (freed memory may be unmapped or reused), so the handle
is private: `_mlp_resident.Session` closes it exactly once and never uses it after.

Block layout: 40 int64 header slots (below; `S_DEVICE` is used by GPU builds only: the widths,
the region offsets, the counts every call needs), then float32 regions, each rounded up to 16
floats: hyperparameters (lr, beta1, beta2, eps, weight_decay as five binary64 values in the
first 16 floats), two banks of (params, m, v), the network's program (int64 words:
training/model.mojo `mlp_program`), the model runner's scratch for `capacity` rows
(`scratch_floats`: activations, their gradients, the rows' losses), int32 labels (rows). Any
layer sizes [n0, ..., nL], L <= 16.

One bank holds the current state (`S_BANK` says which). A CPU training run reads the current
bank and writes the other (its first AdamW update reads one bank and writes the other, later
steps of the run update it in place), then publishes it by switching `S_BANK`: a refused run
(non-finite output) switches nothing, so the state is as it was without a copy, and the old
bank stays intact as the backup that `session_rollback` switches back to (the Python side
uses it when something fails after the binding returned) until the next run overwrites it.

A run's steps take the session's lr (`Session.set_lr` changes it between runs), or one rate per
step from the caller (`rates`: a learning-rate schedule's, binary64 as given, like the lr).

A host step is the model engine's (training/model.mojo `model_pass` on the network's program,
then `adamw_flat_into`): an MLP is a program like any other model, so `MLPTrainer` and
`Trainer` run one step pipeline. SmallMLPTrainer's 8→16→3 network runs
training/mlp_lanes.mojo's compile-time specialization of the same operations in the same order,
so a resident step has the bits of `mlp_train_step` and of the per-operation path
(tests/test_resident.py, tests/test_mlp_trainer.py compare them).
On GPU vendors the state of every session (any layer sizes) is device-resident
(training/mlp_gpu_session.mojo): the first run creates the session's device state from the
block's params, m, v (so opening a session needs no GPU, and a run on a host without one fails
with DEVICE_FAILED and changes nothing); from then on the device copy is authoritative and the
block's banks and scratch are unused. A run uploads only the batch, backs the state up device
to device, runs the step on the device (training/mlp_gpu_layers.mojo: the fused one-block
kernel of training/mlp_gpu.mojo for a small one-hidden-layer network, else one kernel per
phase and layer), checks finiteness on the device and downloads only the outputs and status
words; a refused or failed run restores from the device backup, and `session_download`,
`session_rollback` and `session_close` act on the device state. Microbatch gradients and
`apply_gradients` (data parallel) stay host-only: the entries refuse them for device
sessions. The cuda fused path ran on an NVIDIA H200 under profile v1 (tools/device_check.sh,
tools/device_extra.sh; v2's is compile-checked only); the layer kernels (deeper or larger networks) and the hip build are
compile-checked only.
"""
from std.ffi import external_call

from training.arena import arena_release
from training.checks import first_nonfinite, first_nonfinite_shared
from training.config import F32P, F64P, I32P, I64P, VENDOR
from training.copy import copy_floats
from training.mlp import MLPDims, MODE_FORWARD, MODE_TRAIN, adamw_flat_into, total_params
from training.mlp_gpu_session import (DeviceCheck, DeviceStateP, device_state,
                                      device_state_free, device_state_new)
from training.mlp_lanes import lanes_backward, lanes_cross_entropy, lanes_forward
from training.model import Program, mlp_program, model_pass, scratch_floats

comptime MAGIC = 0x314E4F4953534553  # "SESSION1", little-endian
comptime HEADER_SLOTS = 40
comptime MAX_LAYERS = 16
comptime S_MAGIC = 0
comptime S_INPUTS = 1
comptime S_HIDDEN = 2  # the hidden width of a one-hidden-layer network, else 0
comptime S_CLASSES = 3
comptime S_CAPACITY = 4
comptime S_T = 5
comptime S_BACKUP_T = 6  # -1: no backup to roll back to
comptime S_TOTAL_FLOATS = 7
comptime S_DEVICE = 8  # GPU builds: address of the session's DeviceState, 0 until the first run
comptime S_BANK = 9  # 0 or 1: the bank holding the current (params, m, v)
comptime S_LAYERS = 10
comptime S_N = 11  # floats of params (and of m, of v)
comptime S_R_WORDS = 12  # region offsets (floats from the first float after the header)
comptime S_R_SCRATCH = 13
comptime S_R_Y = 16
comptime S_SIZES = 17  # the widths n0 .. nL (up to MAX_LAYERS + 1 slots)
comptime S_POOL = 34  # the worker pool (training/pool.mojo) the host steps' GEMMs share, or 0
comptime S_ARENA = 35  # 35..37 (ARENA_WORDS): the arena the host steps' GEMMs pack in

# Outcomes of a run (the entry turns them into Python errors).
comptime OK = 0
comptime BAD_TARGET = 1  # detail: flat index of the first label outside [0, O)
comptime BAD_X = 2  # detail: flat index of the first non-finite input
comptime NONFINITE = 3  # detail: which output (NF_* below), index in `index`
comptime DEVICE_FAILED = 4  # the GPU runtime refused (no device, launch error); detail:
comptime STATE_LOST = 1  # ... the device state was lost (else 0: the session is unchanged)
comptime NF_LOGITS = 0
comptime NF_LOSSES = 1
comptime NF_GRADS = 2
comptime NF_INPUT_GRAD = 3
comptime NF_PARAMS = 4
comptime NF_M = 5
comptime NF_V = 6


def _round16(n: Int) -> Int:
    return (n + 15) // 16 * 16


@fieldwise_init
struct Regions(ImplicitlyCopyable):
    """Float offsets of a session's regions from the first float after the header: `p` starts
    bank 0 (p, m, v, `n` floats apart), `bank_stride` floats later bank 1; the program's
    `words` (two floats a word), the runner's `scratch`, the int32 labels `y`."""

    var hyper: Int
    var p: Int
    var n: Int
    var bank_stride: Int
    var words: Int
    var scratch: Int
    var y: Int
    var end: Int

    @staticmethod
    def of(sizes: List[Int], words: List[Int64], capacity: Int) -> Regions:
        var n = _round16(total_params(sizes))
        var p = 16
        var at = p + 6 * n
        var scratch = at + _round16(2 * len(words))
        var y = scratch + _round16(scratch_floats(I64P(unsafe_from_address=Int(words.unsafe_ptr())), capacity))
        return Regions(0, p, n, 3 * n, at, scratch, y, y + _round16(capacity))


struct Session(ImplicitlyCopyable):
    """A view of an open session block (no ownership: `session_close` frees the block)."""

    var addr: Int
    var dims: MLPDims  # widths of a one-hidden-layer network (hidden 0 for other depths)
    var layers: Int
    var n: Int  # floats of params
    var capacity: Int
    var r: Regions

    def __init__(out self, addr: Int):
        # Header reads only: this runs on every call, and SmallMLPTrainer's step is ~2 µs.
        var hdr = I64P(unsafe_from_address=addr)
        self.addr = addr
        self.dims = MLPDims(Int(hdr[unsafe_offset=S_INPUTS]), Int(hdr[unsafe_offset=S_HIDDEN]),
                            Int(hdr[unsafe_offset=S_CLASSES]))
        self.layers = Int(hdr[unsafe_offset=S_LAYERS])
        self.n = Int(hdr[unsafe_offset=S_N])
        self.capacity = Int(hdr[unsafe_offset=S_CAPACITY])
        var n16 = _round16(self.n)
        self.r = Regions(0, 16, n16, 3 * n16, Int(hdr[unsafe_offset=S_R_WORDS]),
                         Int(hdr[unsafe_offset=S_R_SCRATCH]), Int(hdr[unsafe_offset=S_R_Y]),
                         Int(hdr[unsafe_offset=S_TOTAL_FLOATS]))

    def sizes(self) -> List[Int]:
        var out = List[Int](capacity=self.layers + 1)
        for l in range(self.layers + 1):
            out.append(Int(self.header()[unsafe_offset=S_SIZES + l]))
        return out^

    def inputs(self) -> Int:
        return self.dims.inputs

    def classes(self) -> Int:
        return self.dims.classes

    def small(self) -> Bool:
        """SmallMLPTrainer's 8→16→3: the compile-time lanes specialization."""
        return self.layers == 2 and self.dims.inputs == 8 and self.dims.hidden == 16 \
            and self.dims.classes == 3

    def words(self) -> I64P:
        """The network's program (training/model.mojo `mlp_program`)."""
        return I64P(unsafe_from_address=Int(self.f(self.r.words)))

    def arena(self) -> Int:
        """The address of the session's packing arena (in its header)."""
        return self.addr + 8 * S_ARENA

    def header(self) -> I64P:
        return I64P(unsafe_from_address=self.addr)

    def f(self, offset: Int) -> F32P:
        return F32P(unsafe_from_address=self.addr + 8 * HEADER_SLOTS + 4 * offset)

    def t(self) -> Int:
        return Int(self.header()[unsafe_offset=S_T])

    def set_t(self, t: Int):
        self.header()[unsafe_offset=S_T] = Int64(t)

    def backup_t(self) -> Int:
        return Int(self.header()[unsafe_offset=S_BACKUP_T])

    def bank(self, spare: Bool = False) -> Bank:
        """The current (params, m, v), or with `spare` the other bank."""
        var which = Int(self.header()[unsafe_offset=S_BANK])
        if spare:
            which = 1 - which
        return Bank(Int(self.f(self.r.p + which * self.r.bank_stride)), self.r.n)

    def switch_bank(self):
        self.header()[unsafe_offset=S_BANK] = 1 - self.header()[unsafe_offset=S_BANK]

    def params(self) -> F32P:
        return self.bank().p()

    def m(self) -> F32P:
        return self.bank().m()

    def v(self) -> F32P:
        return self.bank().v()

    def hyper(self, i: Int) -> Float64:
        """Hyperparameter i (lr, beta1, beta2, eps, weight_decay), kept as given (binary64)."""
        return F64P(unsafe_from_address=Int(self.f(self.r.hyper)))[unsafe_offset=i]

    def set_lr(self, lr: Float64):
        """The learning rate the next runs use (a schedule's, set before each run)."""
        F64P(unsafe_from_address=Int(self.f(self.r.hyper)))[unsafe_offset=0] = lr

    def lr_of(self, rates: Int, i: Int) -> Float64:
        """The rate of a run's step i: `rates[i]` (k binary64 rates at that address), or the
        session's lr when `rates` is 0."""
        if rates == 0:
            return self.hyper(0)
        return F64P(unsafe_from_address=rates)[unsafe_offset=i]


@fieldwise_init
struct Bank(ImplicitlyCopyable):
    """One bank's (params, m, v): `n` floats each, from address `at`."""

    var at: Int
    var n: Int

    def p(self) -> F32P:
        return F32P(unsafe_from_address=self.at)

    def m(self) -> F32P:
        return F32P(unsafe_from_address=self.at + 4 * self.n)

    def v(self) -> F32P:
        return F32P(unsafe_from_address=self.at + 8 * self.n)


def is_session(addr: Int) -> Bool:
    """True when `addr` is an open session block (its magic word is set)."""
    return addr != 0 and I64P(unsafe_from_address=addr)[unsafe_offset=S_MAGIC] == MAGIC


def session_open(sizes: List[Int], capacity: Int, t: Int, lr: Float64, beta1: Float64,
                 beta2: Float64, eps: Float64, weight_decay: Float64, p: F32P, m: F32P,
                 v: F32P) -> Int:
    """A new session for widths `sizes` (at most MAX_LAYERS layers) holding copies of p, m, v
    (`total_params(sizes)` each) and step count t; 0 when the allocation fails."""
    var words = mlp_program(sizes)
    var r = Regions.of(sizes, words, capacity)
    var addr = external_call["calloc", Int](8 * HEADER_SLOTS + 4 * r.end, 1)
    if addr == 0:
        return 0
    var layers = len(sizes) - 1
    var hdr = I64P(unsafe_from_address=addr)
    hdr[unsafe_offset=S_INPUTS] = Int64(sizes[0])
    hdr[unsafe_offset=S_HIDDEN] = Int64(sizes[1] if layers == 2 else 0)
    hdr[unsafe_offset=S_CLASSES] = Int64(sizes[layers])
    hdr[unsafe_offset=S_LAYERS] = Int64(layers)
    hdr[unsafe_offset=S_N] = Int64(total_params(sizes))
    hdr[unsafe_offset=S_R_WORDS] = Int64(r.words)
    hdr[unsafe_offset=S_R_SCRATCH] = Int64(r.scratch)
    hdr[unsafe_offset=S_R_Y] = Int64(r.y)
    for l in range(layers + 1):
        hdr[unsafe_offset=S_SIZES + l] = Int64(sizes[l])
    hdr[unsafe_offset=S_CAPACITY] = Int64(capacity)
    hdr[unsafe_offset=S_T] = Int64(t)
    hdr[unsafe_offset=S_BACKUP_T] = -1
    hdr[unsafe_offset=S_TOTAL_FLOATS] = Int64(r.end)
    var s = Session(addr)
    var hy = F64P(unsafe_from_address=Int(s.f(r.hyper)))
    hy[unsafe_offset=0] = lr
    hy[unsafe_offset=1] = beta1
    hy[unsafe_offset=2] = beta2
    hy[unsafe_offset=3] = eps
    hy[unsafe_offset=4] = weight_decay
    var n = s.n
    copy_floats(p, s.params(), n)
    copy_floats(m, s.m(), n)
    copy_floats(v, s.v(), n)
    for i in range(len(words)):
        s.words()[unsafe_offset=i] = words[i]
    hdr[unsafe_offset=S_MAGIC] = MAGIC
    return addr


def session_close(addr: Int):
    """Free an open session (the magic word is cleared first, so a stale handle is refused)
    and, in GPU builds, its device state; never raises."""
    var hdr = I64P(unsafe_from_address=addr)
    hdr[unsafe_offset=S_MAGIC] = 0
    comptime if VENDOR != "cpu":
        var device = Int(hdr[unsafe_offset=S_DEVICE])
        hdr[unsafe_offset=S_DEVICE] = 0
        if device != 0:
            device_state_free(device)
    arena_release(addr + 8 * S_ARENA)
    external_call["free", NoneType](addr)


def _lost_error(entry: StaticString) -> Error:
    return Error("RuntimeError: ", entry, ": the session's device state was lost (a GPU failure "
                 "interrupted restoring it); only closing the session is possible")


def session_download(s: Session, p: F32P, m: F32P, v: F32P) raises -> Int:
    """Copy the current params, m, v out (from the device once a run created its state);
    returns the step count."""
    comptime if VENDOR != "cpu":
        var device = Int(s.header()[unsafe_offset=S_DEVICE])
        if device != 0:
            comptime E = "mlp_resident_download"
            var dev = device_state(device)
            if dev[].lost:
                raise _lost_error(E)
            try:
                dev[].download_state(p, m, v)
            except e:
                raise Error("RuntimeError: ", E, ": the GPU runtime failed to copy the state "
                            "back (", e, ")")
            return s.t()
    var n = s.n
    copy_floats(s.params(), p, n)
    copy_floats(s.m(), m, n)
    copy_floats(s.v(), v, n)
    return s.t()


def session_rollback(s: Session, t_before: Int) raises -> Bool:
    """Undo the last completed training run when it started at step `t_before` and the session
    has moved on since; returns whether it did. GPU builds restore from the device backup."""
    if s.t() == t_before or s.backup_t() != t_before:
        return False
    comptime if VENDOR != "cpu":
        var device = Int(s.header()[unsafe_offset=S_DEVICE])
        if device != 0:
            comptime E = "mlp_resident_rollback"
            var dev = device_state(device)
            if dev[].lost:
                raise _lost_error(E)
            try:
                dev[].restore()
            except e:
                raise Error("RuntimeError: ", E, ": the GPU runtime failed to restore the "
                            "state (", e, ")")
            s.set_t(s.backup_t())
            return True
    s.switch_bank()  # back to the bank the run started from, untouched since
    s.set_t(t_before)
    s.header()[unsafe_offset=S_BACKUP_T] = -1  # the undone state is no backup
    return True


def first_bad_label(y: Int, itemsize: Int, n: Int, classes: Int) -> Int:
    """Index of the first of n labels (int32 or int64 at address y) outside [0, classes)."""
    if itemsize == 8:
        var q = I64P(unsafe_from_address=y)
        for i in range(n):
            var c = q[unsafe_offset=i]
            if c < 0 or c >= Int64(classes):
                return i
    else:
        var w = I32P(unsafe_from_address=y)
        for i in range(n):
            var c = w[unsafe_offset=i]
            if c < 0 or c >= Int32(classes):
                return i
    return -1


def read_label(y: Int, itemsize: Int, i: Int) -> Int:
    if itemsize == 8:
        return Int(I64P(unsafe_from_address=y)[unsafe_offset=i])
    return Int(I32P(unsafe_from_address=y)[unsafe_offset=i])


@fieldwise_init
struct Outcome(ImplicitlyCopyable):
    var status: Int
    var detail: Int
    var index: Int


@fieldwise_init
struct Outputs(ImplicitlyCopyable):
    """Where a run writes: losses (k), logits (rows × O), grads (n), input_grad (rows × I)."""

    var losses_at: Int
    var logits_at: Int
    var grads_at: Int
    var dx_at: Int

    @staticmethod
    def packed(out_addr: Int, classes: Int, n: Int, rows: Int, k: Int) -> Outputs:
        """The layout of one flat result buffer: [losses | logits | grads | input_grad]."""
        var logits = out_addr + 4 * k
        var grads = logits + 4 * rows * classes
        return Outputs(out_addr, logits, grads, grads + 4 * n)

    def losses(self) -> F32P:
        return F32P(unsafe_from_address=self.losses_at)

    def logits(self) -> F32P:
        return F32P(unsafe_from_address=self.logits_at)

    def grads(self) -> F32P:
        return F32P(unsafe_from_address=self.grads_at)

    def dx(self) -> F32P:
        return F32P(unsafe_from_address=self.dx_at)


def run_steps(s: Session, x: F32P, y: Int, y_itemsize: Int, o: Outputs, rows: Int, k: Int,
              mode: Int, want_dx: Bool, divide_by: Int = 0, rates: Int = 0) -> Outcome:
    """Check the inputs, then run `k` steps (mode train) or one forward / gradient pass on the
    session, all or nothing. `rates`: the address of k binary64 learning rates, one per step
    (a schedule's), or 0 for the session's lr. Pure Mojo (no Python API): the caller may
    release the GIL."""
    if mode != MODE_FORWARD:
        var bad = first_bad_label(y, y_itemsize, k * rows, s.classes())
        if bad >= 0:
            return Outcome(BAD_TARGET, bad, 0)
    var bad_x = first_nonfinite_shared(Int(s.header()[unsafe_offset=S_POOL]), x,
                                       k * rows * s.inputs())
    if bad_x >= 0:
        return Outcome(BAD_X, bad_x, 0)
    comptime if VENDOR != "cpu":
        return _run_device(s, x, y, y_itemsize, o, rows, k, mode, want_dx, rates)
    var train = mode == MODE_TRAIN
    var t = s.t()
    if train:
        s.header()[unsafe_offset=S_BACKUP_T] = -1  # the run overwrites the spare bank
    var checked = _run_host(s, x, y, y_itemsize, o, rows, k, mode, want_dx, t + 1, divide_by,
                            rates)
    var which = _first_nonfinite_output(s, o, rows, k, mode, want_dx, checked)
    if which.status != OK:
        return which  # the current bank is untouched
    if train:
        s.switch_bank()
        s.header()[unsafe_offset=S_BACKUP_T] = Int64(t)
        s.set_t(t + k)
    return Outcome(OK, 0, 0)


def on_device(s: Session) -> Bool:
    """Whether this build keeps the session's state in device memory (every GPU build)."""
    comptime if VENDOR != "cpu":
        return True
    return False


def _device(s: Session) raises -> DeviceStateP:
    """The session's device state, created from the block's p, m, v at the first run."""
    var hdr = s.header()
    if hdr[unsafe_offset=S_DEVICE] == 0:
        hdr[unsafe_offset=S_DEVICE] = Int64(device_state_new(s.sizes(), s.capacity, s.params(),
                                                             s.m(), s.v()))
    return device_state(Int(hdr[unsafe_offset=S_DEVICE]))


def _device_steps_at_rates(dev: DeviceStateP, s: Session, x: F32P, y: Int, y_itemsize: Int,
                           o: Outputs, rows: Int, k: Int, rates: Int) raises -> DeviceCheck:
    """k training steps at k rates (a schedule's) on the device state, backed up by the
    caller: one upload and one device run per step (the device kernels take one rate per run),
    stopping at the first non-finite output (its `index` counts losses across the k steps)."""
    for i in range(k):
        dev[].upload_batch(x.unsafe_offset(i * rows * s.inputs()), y + i * rows * y_itemsize,
                           y_itemsize, rows, 1, True)
        var check = dev[].run(o.losses().unsafe_offset(i), o.logits(), o.grads(), o.dx(), rows,
                              1, MODE_TRAIN, False, s.t() + 1 + i, s.lr_of(rates, i),
                              s.hyper(1), s.hyper(2), s.hyper(3), s.hyper(4))
        if check.which >= 0:
            return DeviceCheck(check.which, check.index + (i if check.which == NF_LOSSES else 0))
    return DeviceCheck(-1, 0)


def _run_device(s: Session, x: F32P, y: Int, y_itemsize: Int, o: Outputs, rows: Int, k: Int,
                mode: Int, want_dx: Bool, rates: Int = 0) -> Outcome:
    """The GPU body of `run_steps`, all or nothing on the device-resident state."""
    var train = mode == MODE_TRAIN
    var dev: DeviceStateP
    try:
        dev = _device(s)
    except:
        return Outcome(DEVICE_FAILED, 0, 0)  # no device: the block's state stays authoritative
    if dev[].lost:
        return Outcome(DEVICE_FAILED, STATE_LOST, 0)
    var backed_up = False
    var check: DeviceCheck
    var per_step = train and rates != 0
    try:
        if not per_step:
            dev[].upload_batch(x, y, y_itemsize, rows, k, mode != MODE_FORWARD)
        if train:
            # The backup is overwritten from here on: no rollback to an older run until done.
            s.header()[unsafe_offset=S_BACKUP_T] = -1
            dev[].backup_state()
            backed_up = True
            s.header()[unsafe_offset=S_BACKUP_T] = Int64(s.t())
        if per_step:
            check = _device_steps_at_rates(dev, s, x, y, y_itemsize, o, rows, k, rates)
        else:
            check = dev[].run(o.losses(), o.logits(), o.grads(), o.dx(), rows, k, mode, want_dx,
                              s.t() + 1, s.hyper(0), s.hyper(1), s.hyper(2), s.hyper(3),
                              s.hyper(4))
    except:
        if backed_up:
            try:
                dev[].restore()
            except:
                return Outcome(DEVICE_FAILED, STATE_LOST, 0)  # restore() marked it lost
        return Outcome(DEVICE_FAILED, 0, 0)
    if check.which >= 0:
        if train:
            try:
                dev[].restore()
            except:
                return Outcome(DEVICE_FAILED, STATE_LOST, 0)
        var codes: List[Int] = [NF_LOGITS, NF_LOSSES, NF_GRADS, NF_INPUT_GRAD, NF_PARAMS, NF_M,
                                NF_V]
        return Outcome(NONFINITE, codes[check.which], check.index)
    if train:
        s.set_t(s.t() + k)
    return Outcome(OK, 0, 0)


def _run_host(s: Session, x: F32P, y: Int, y_itemsize: Int, o: Outputs, rows: Int, k: Int,
              mode: Int, want_dx: Bool, t0: Int, divide_by: Int = 0, rates: Int = 0) -> Bool:
    """The CPU body of `run_steps`: k steps from the current bank into the spare one, step i
    at `s.lr_of(rates, i)`. Returns whether the last AdamW found its gradients and the new
    state all finite (False when no AdamW ran: nothing was checked)."""
    var train = mode == MODE_TRAIN
    var checked = False
    var state = s.bank()
    var new = s.bank(spare=True)
    var pool = Int(s.header()[unsafe_offset=S_POOL])
    var scratch = s.f(s.r.scratch)
    var arena_floats = rows * Int(s.words()[unsafe_offset=3])
    var y32 = I32P(unsafe_from_address=Int(s.f(s.r.y)))
    var lrs = F64P(unsafe_from_address=rates)  # used only when rates != 0
    # The lanes specialization divides by its own rows; another divisor takes the general
    # path (the same operations, the same bits). Its h, dlogits and dh lie in the scratch.
    var small = s.small() and (divide_by == 0 or divide_by == rows)
    var h = scratch
    var dl = scratch.unsafe_offset(16 * rows)
    var dh = scratch.unsafe_offset(19 * rows)
    var inputs = s.inputs()
    for i in range(k):
        var xb = x.unsafe_offset(i * rows * inputs)
        var p = state.p()
        var yb = I32P(unsafe_from_address=y + i * rows * y_itemsize)
        if mode != MODE_FORWARD and y_itemsize != 4:
            for r in range(rows):
                y32[unsafe_offset=r] = Int32(read_label(y, y_itemsize, i * rows + r))
            yb = y32
        if small:
            lanes_forward[8, 16, 3](xb, p, h, o.logits(), rows)
            if mode == MODE_FORWARD:
                break
            o.losses()[unsafe_offset=i] = lanes_cross_entropy[3](o.logits(), yb, dl, rows)
            lanes_backward[8, 16, 3](xb, p, h, dl, dh, o.grads(), o.dx(), rows, want_dx)
        else:
            var pr = Program(Int(s.words()), Int(xb), Int(scratch),
                             Int(scratch.unsafe_offset(arena_floats)), rows, Int(o.logits()),
                             Int(o.dx()) if want_dx else 0, pool, s.arena(),
                             Int(scratch.unsafe_offset(2 * arena_floats)))
            # xb stands in for MSE's float targets: an MLP's program never reads them.
            var loss = model_pass(pr, p, yb, xb, o.grads(), mode, t0 + i, 0, divide_by)
            if mode == MODE_FORWARD:
                break
            o.losses()[unsafe_offset=i] = loss
        if train:
            checked = adamw_flat_into(p, o.grads(), state.m(), state.v(), new.p(), new.m(),
                                      new.v(), s.n, t0 + i,
                                      s.hyper(0) if rates == 0 else lrs[unsafe_offset=i],
                                      s.hyper(1), s.hyper(2), s.hyper(3), s.hyper(4), pool)
            state = new
    return checked


def _first_nonfinite_output(s: Session, o: Outputs, rows: Int, k: Int, mode: Int,
                            want_dx: Bool, state_checked: Bool = False) -> Outcome:
    """The first NaN/Inf among the outputs, in the order logits, losses, grads, input_grad,
    params, m, v. `state_checked`: the last AdamW found grads, params, m and v finite."""
    var n = s.n
    var at = first_nonfinite(o.logits(), rows * s.classes())
    if at >= 0:
        return Outcome(NONFINITE, NF_LOGITS, at)
    if mode == MODE_FORWARD:
        return Outcome(OK, 0, 0)
    at = first_nonfinite(o.losses(), k)
    if at >= 0:
        return Outcome(NONFINITE, NF_LOSSES, at)
    if not state_checked:
        at = first_nonfinite(o.grads(), n)
        if at >= 0:
            return Outcome(NONFINITE, NF_GRADS, at)
    if want_dx:
        at = first_nonfinite(o.dx(), rows * s.inputs())
        if at >= 0:
            return Outcome(NONFINITE, NF_INPUT_GRAD, at)
    if mode == MODE_TRAIN and not state_checked:  # the new state, in the spare bank
        var new = s.bank(spare=True)
        at = first_nonfinite(new.p(), n)
        if at >= 0:
            return Outcome(NONFINITE, NF_PARAMS, at)
        at = first_nonfinite(new.m(), n)
        if at >= 0:
            return Outcome(NONFINITE, NF_M, at)
        at = first_nonfinite(new.v(), n)
        if at >= 0:
            return Outcome(NONFINITE, NF_V, at)
    return Outcome(OK, 0, 0)


def apply_gradients(s: Session, grads: F32P) -> Outcome:
    """One AdamW step with the given flat gradients, from the current bank into the spare one,
    published only when the new state is finite (all or nothing, like a training run; the old
    bank stays the rollback). CPU sessions only (the caller refuses device-resident ones)."""
    var bad = first_nonfinite(grads, s.n)
    if bad >= 0:
        return Outcome(NONFINITE, NF_GRADS, bad)
    var t = s.t()
    var state = s.bank()
    var new = s.bank(spare=True)
    s.header()[unsafe_offset=S_BACKUP_T] = -1  # the spare bank is being overwritten
    if not adamw_flat_into(state.p(), grads, state.m(), state.v(), new.p(), new.m(), new.v(),
                           s.n, t + 1, s.hyper(0), s.hyper(1), s.hyper(2), s.hyper(3),
                           s.hyper(4), Int(s.header()[unsafe_offset=S_POOL])):
        var checks: List[Int] = [NF_PARAMS, NF_M, NF_V]
        for i in range(3):
            var p = new.p() if i == 0 else (new.m() if i == 1 else new.v())
            var at = first_nonfinite(p, s.n)
            if at >= 0:
                return Outcome(NONFINITE, checks[i], at)
    s.switch_bank()
    s.header()[unsafe_offset=S_BACKUP_T] = Int64(t)
    s.set_t(t + 1)
    return Outcome(OK, 0, 0)
