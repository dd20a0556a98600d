"""The device half of a resident MLP session (cuda / hip builds): params, AdamW moments and
their pre-step backup live in device memory between calls.

`training/mlp_resident.mojo` creates a `DeviceState` at a session's first run (opening a
session never needs a GPU) and keeps its address in the session block's `S_DEVICE` header
slot; from then on the device copy of p, m, v is authoritative and the block's host copy is
stale. A run uploads only the batch (x, and int32 labels unless forward), backs p, m, v up
device to device (training runs), launches `training/mlp_gpu.mojo`'s step kernel unchanged,
then `finite_status_kernel`, and downloads losses, logits, gradients, dx and seven status
words, never the state. A non-finite result restores p, m, v from the device backup.

If a restore itself fails the device state is unknown: it is marked `lost`, and every later
run, download or rollback on the session is refused (the session can only be closed).

Compile-checked only (cross-compiled for sm_90 and gfx942); not run on a GPU.
"""
from std.ffi import external_call
from std.sys import size_of

from max.gpu import barrier, block_dim, thread_idx
from max.gpu.host import DeviceBuffer, DeviceContext

from training.checks import is_finite32
from training.config import F32P, I32P, I64P
from training.mlp_gpu import BLOCK, enqueue_mlp_steps

# One status word per checked output, in the order of training/mlp_resident.mojo's NF_* codes
# (logits, losses, grads, input_grad, params, m, v): the first non-finite index, or -1.
comptime CHECKS = 7


@always_inline
def _scan(a: F32P, n: Int64, which: Int, seen: I64P, tid: Int, nt: Int):
    """This thread's first non-finite index of a[0:n] among i ≡ tid (mod nt), or -1."""
    var first = Int64(-1)
    for i in range(tid, Int(n), nt):
        if not is_finite32(a[unsafe_offset=i]):
            first = Int64(i)
            break
    seen[unsafe_offset=which * nt + tid] = first


def finite_status_kernel(a0: F32P, n0: Int64, a1: F32P, n1: Int64, a2: F32P, n2: Int64,
                         a3: F32P, n3: Int64, a4: F32P, n4: Int64, a5: F32P, n5: Int64,
                         a6: F32P, n6: Int64, seen: I64P, status: I64P):
    """status[c] = the first index i < n_c with a_c[i] NaN or infinite, -1 when none (n_c = 0:
    not checked). One block; integer work only, so the float code of a build is unchanged."""
    var tid = Int(thread_idx.x)
    var nt = Int(block_dim.x)
    _scan(a0, n0, 0, seen, tid, nt)
    _scan(a1, n1, 1, seen, tid, nt)
    _scan(a2, n2, 2, seen, tid, nt)
    _scan(a3, n3, 3, seen, tid, nt)
    _scan(a4, n4, 4, seen, tid, nt)
    _scan(a5, n5, 5, seen, tid, nt)
    _scan(a6, n6, 6, seen, tid, nt)
    barrier()
    if tid < CHECKS:
        var best = Int64(-1)
        for j in range(nt):
            var at = seen[unsafe_offset=tid * nt + j]
            if at >= 0 and (best < 0 or at < best):
                best = at
        status[unsafe_offset=tid] = best


def _f(b: DeviceBuffer[DType.float32]) -> F32P:
    return F32P(unsafe_from_address=Int(b.unsafe_ptr()))


@fieldwise_init
struct DeviceCheck(ImplicitlyCopyable):
    """The first non-finite output of a run: `which` in NF_* order (-1: all finite), `index`."""

    var which: Int
    var index: Int


struct DeviceState(Movable):
    """One session's device memory: the state and its backup, the step scratch for `capacity`
    rows, the outputs, and upload buffers that grow to the largest batch stack seen."""

    var ctx: DeviceContext
    var inputs: Int
    var hidden: Int
    var classes: Int
    var capacity: Int
    var total: Int
    var lost: Bool
    var p: DeviceBuffer[DType.float32]
    var m: DeviceBuffer[DType.float32]
    var v: DeviceBuffer[DType.float32]
    var bp: DeviceBuffer[DType.float32]
    var bm: DeviceBuffer[DType.float32]
    var bv: DeviceBuffer[DType.float32]
    var h: DeviceBuffer[DType.float32]
    var dl: DeviceBuffer[DType.float32]
    var dh: DeviceBuffer[DType.float32]
    var row_loss: DeviceBuffer[DType.float32]
    var logits: DeviceBuffer[DType.float32]
    var grads: DeviceBuffer[DType.float32]
    var dx: DeviceBuffer[DType.float32]
    var losses: DeviceBuffer[DType.float32]
    var x: DeviceBuffer[DType.float32]
    var y: DeviceBuffer[DType.int32]
    var y_host: List[Int32]
    var seen: DeviceBuffer[DType.int64]
    var status: DeviceBuffer[DType.int64]

    def __init__(out self, inputs: Int, hidden: Int, classes: Int, capacity: Int, p: F32P,
                 m: F32P, v: F32P) raises:
        """Allocate everything and upload p, m, v; waits, so a failure surfaces here."""
        self.ctx = DeviceContext()
        self.inputs = inputs
        self.hidden = hidden
        self.classes = classes
        self.capacity = capacity
        self.total = hidden * inputs + hidden + classes * hidden + classes
        self.lost = False
        var n = self.total
        self.p = self.ctx.enqueue_create_buffer[DType.float32](n)
        self.m = self.ctx.enqueue_create_buffer[DType.float32](n)
        self.v = self.ctx.enqueue_create_buffer[DType.float32](n)
        self.bp = self.ctx.enqueue_create_buffer[DType.float32](n)
        self.bm = self.ctx.enqueue_create_buffer[DType.float32](n)
        self.bv = self.ctx.enqueue_create_buffer[DType.float32](n)
        self.h = self.ctx.enqueue_create_buffer[DType.float32](capacity * hidden)
        self.dl = self.ctx.enqueue_create_buffer[DType.float32](capacity * classes)
        self.dh = self.ctx.enqueue_create_buffer[DType.float32](capacity * hidden)
        self.row_loss = self.ctx.enqueue_create_buffer[DType.float32](capacity)
        self.logits = self.ctx.enqueue_create_buffer[DType.float32](capacity * classes)
        self.grads = self.ctx.enqueue_create_buffer[DType.float32](n)
        self.dx = self.ctx.enqueue_create_buffer[DType.float32](capacity * inputs)
        self.losses = self.ctx.enqueue_create_buffer[DType.float32](1)
        self.x = self.ctx.enqueue_create_buffer[DType.float32](capacity * inputs)
        self.y = self.ctx.enqueue_create_buffer[DType.int32](capacity)
        self.y_host = List[Int32]()
        self.seen = self.ctx.enqueue_create_buffer[DType.int64](CHECKS * BLOCK)
        self.status = self.ctx.enqueue_create_buffer[DType.int64](CHECKS)
        self.ctx.enqueue_copy(self.p, p)
        self.ctx.enqueue_copy(self.m, m)
        self.ctx.enqueue_copy(self.v, v)
        self.ctx.synchronize()

    def upload_batch(mut self, x: F32P, y: Int, y_itemsize: Int, rows: Int, k: Int,
                     labels: Bool) raises:
        """Copy k stacked batches of x (and their labels as int32) to the device; touches no
        state, so a failure here leaves the session as it was."""
        var nx = k * rows * self.inputs
        if nx > len(self.x):
            self.x = self.ctx.enqueue_create_buffer[DType.float32](nx)
        if k > len(self.losses):
            self.losses = self.ctx.enqueue_create_buffer[DType.float32](k)
        self.ctx.enqueue_copy(self.x.create_sub_buffer[DType.float32](0, nx), x)
        if not labels:
            return
        var ny = k * rows
        if ny > len(self.y):
            self.y = self.ctx.enqueue_create_buffer[DType.int32](ny)
        var dst = self.y.create_sub_buffer[DType.int32](0, ny)
        if y_itemsize == 4:
            self.ctx.enqueue_copy(dst, I32P(unsafe_from_address=y))
            return
        # int64 labels (already checked to lie in [0, classes)) narrow on the host, into a
        # member: the copy may still read it until the run's synchronize.
        if ny > len(self.y_host):
            self.y_host = List[Int32](length=ny, fill=0)
        var wide = I64P(unsafe_from_address=y)
        for i in range(ny):
            self.y_host[i] = Int32(wide[unsafe_offset=i])
        self.ctx.enqueue_copy(dst, I32P(unsafe_from_address=Int(self.y_host.unsafe_ptr())))

    def backup(mut self) raises:
        self.ctx.enqueue_copy(self.bp, self.p)
        self.ctx.enqueue_copy(self.bm, self.m)
        self.ctx.enqueue_copy(self.bv, self.v)

    def restore(mut self) raises:
        """p, m, v back from the backup, waited for; a failure marks the state lost."""
        try:
            self.ctx.enqueue_copy(self.p, self.bp)
            self.ctx.enqueue_copy(self.m, self.bm)
            self.ctx.enqueue_copy(self.v, self.bv)
            self.ctx.synchronize()
        except e:
            self.lost = True
            raise e^

    def run(mut self, losses: F32P, logits: F32P, grads: F32P, dx: F32P, rows: Int, k: Int,
            mode: Int, want_dx: Bool, t0: Int, lr: Float32, beta1: Float32, beta2: Float32,
            eps: Float32, weight_decay: Float32) raises -> DeviceCheck:
        """Run the uploaded batches (mode 0 forward, 1 gradients, 2 k training steps after
        `backup`), download the outputs and report the first non-finite one."""
        var I = self.inputs
        var O = self.classes
        var n = self.total
        var grad_pass = mode != 0
        var train = mode == 2
        enqueue_mlp_steps(self.ctx, _f(self.x), I32P(unsafe_from_address=Int(self.y.unsafe_ptr())),
                          _f(self.p), _f(self.m), _f(self.v), _f(self.losses), _f(self.logits),
                          _f(self.grads), _f(self.dx), _f(self.h), _f(self.dl), _f(self.dh),
                          _f(self.row_loss), I, self.hidden, O, rows, mode, k, t0, lr, beta1,
                          beta2, eps, weight_decay, want_dx)
        self.ctx.enqueue_function[finite_status_kernel](
            _f(self.logits), Int64(rows * O),
            _f(self.losses), Int64(k if grad_pass else 0),
            _f(self.grads), Int64(n if grad_pass else 0),
            _f(self.dx), Int64(rows * I if grad_pass and want_dx else 0),
            _f(self.p), Int64(n if train else 0),
            _f(self.m), Int64(n if train else 0),
            _f(self.v), Int64(n if train else 0),
            I64P(unsafe_from_address=Int(self.seen.unsafe_ptr())),
            I64P(unsafe_from_address=Int(self.status.unsafe_ptr())),
            grid_dim=1, block_dim=BLOCK)
        var status = List[Int64](length=CHECKS, fill=-1)
        self.ctx.enqueue_copy(I64P(unsafe_from_address=Int(status.unsafe_ptr())), self.status)
        self.ctx.enqueue_copy(logits, self.logits.create_sub_buffer[DType.float32](0, rows * O))
        if grad_pass:
            self.ctx.enqueue_copy(losses, self.losses.create_sub_buffer[DType.float32](0, k))
            self.ctx.enqueue_copy(grads, self.grads)
            if want_dx:
                self.ctx.enqueue_copy(dx, self.dx.create_sub_buffer[DType.float32](0, rows * I))
        self.ctx.synchronize()
        for c in range(CHECKS):
            if status[c] >= 0:
                return DeviceCheck(c, Int(status[c]))
        return DeviceCheck(-1, 0)

    def download_state(mut self, p: F32P, m: F32P, v: F32P) raises:
        self.ctx.enqueue_copy(p, self.p)
        self.ctx.enqueue_copy(m, self.m)
        self.ctx.enqueue_copy(v, self.v)
        self.ctx.synchronize()


comptime DeviceStateP = Pointer[DeviceState, MutAnyOrigin]


def device_state_new(inputs: Int, hidden: Int, classes: Int, capacity: Int, p: F32P, m: F32P,
                     v: F32P) raises -> Int:
    """A heap-allocated DeviceState holding copies of p, m, v; its address (never 0)."""
    var state = DeviceState(inputs, hidden, classes, capacity, p, m, v)
    var addr = external_call["malloc", Int](size_of[DeviceState]())
    if addr == 0:
        raise Error("cannot allocate the device state")
    DeviceStateP(unsafe_from_address=addr).unsafe_write(state^)
    return addr


def device_state(addr: Int) -> DeviceStateP:
    return DeviceStateP(unsafe_from_address=addr)


def device_state_free(addr: Int):
    """Release the buffers and the context, then the allocation; never raises (a failing
    runtime must not stop a session from closing)."""
    var d = device_state(addr)
    try:
        d[].ctx.synchronize()
    except:
        pass
    d.unsafe_deinit_pointee()
    external_call["free", NoneType](addr)
