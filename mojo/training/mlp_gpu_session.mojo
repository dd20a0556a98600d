"""The device half of a resident MLP session (cuda / hip builds): params, AdamW moments and
their pre-step backup live in device memory between calls.

`training/mlp_resident.mojo` creates a `DeviceState` at a session's first run (opening a
session never needs a GPU) and keeps its address in the session block's `S_DEVICE` header
slot; from then on the device copy of p, m, v is authoritative and the block's host copy is
stale. Any layer sizes the session supports. Each GPU operation costs microseconds of
latency, so a run keeps the copies to three: one upload of the batch (x, then the labels as
int32), one device-to-device copy backing p | m | v up (training runs), then the step's
launches (training/mlp_gpu_layers.mojo `enqueue_steps`: the fused kernel for a small
one-hidden-layer network, else one kernel per phase and layer, then the finiteness scan that
writes the status words), and one download of losses | logits | grads | dx | status, never the
state. A non-finite result restores p | m | v from the device backup.

If a restore itself fails the device state is unknown: it is marked `lost`, and every later
run, download or rollback on the session is refused (the session can only be closed).

A one-hidden-layer session on the fused kernel ran on an NVIDIA H200 under profile v1
(tools/device_check.sh, tools/device_extra.sh; v2's is compile-checked only); sessions on the layer kernels (deeper or larger
networks) are compile-checked only, as is the hip build.
"""
from std.ffi import external_call
from std.sys import size_of

from max.gpu.host import DeviceBuffer, DeviceContext, HostBuffer

from training.config import F32P, I32P, I64P
from training.copy import copy_floats
from training.mlp import LayerScratch, total_params
from training.mlp_gpu import CHECKS
from training.mlp_gpu_layers import DeviceRun, SEEN_WORDS, enqueue_steps, scratch_floats


def _f(b: DeviceBuffer[DType.float32], offset: Int = 0) -> F32P:
    return F32P(unsafe_from_address=Int(b.unsafe_ptr()) + 4 * offset)


@fieldwise_init
struct DeviceCheck(ImplicitlyCopyable):
    """The first non-finite output of a run: `which` in NF_* order (-1: all finite), `index`."""

    var which: Int
    var index: Int


struct DeviceState(Movable):
    """One session's device memory: p | m | v and their backup, the step scratch for
    `capacity` rows, and one input and one output buffer (with host staging copies) that grow
    to the largest run seen."""

    var ctx: DeviceContext
    var sizes: List[Int]
    var inputs: Int
    var classes: Int
    var capacity: Int
    var total: Int
    var lost: Bool
    var state: DeviceBuffer[DType.float32]  # p | m | v, total each
    var backup: DeviceBuffer[DType.float32]
    var acts: DeviceBuffer[DType.float32]  # training.mlp.LayerScratch's regions
    var dl: DeviceBuffer[DType.float32]
    var ping: DeviceBuffer[DType.float32]
    var pong: DeviceBuffer[DType.float32]
    var row_loss: DeviceBuffer[DType.float32]
    var seen: DeviceBuffer[DType.int64]
    var inp: DeviceBuffer[DType.float32]  # x (k·rows·inputs) | labels as int32 (k·rows)
    var out: DeviceBuffer[DType.float32]  # losses | logits | grads | dx | status (int32)
    # Pinned host copies of inp and out: copies from and to pinned memory take a fraction of
    # the latency of pageable ones.
    var stage: HostBuffer[DType.float32]
    var out_host: HostBuffer[DType.float32]

    def __init__(out self, sizes: List[Int], capacity: Int, p: F32P, m: F32P, v: F32P) raises:
        """Allocate everything and upload p, m, v; waits, so a failure surfaces here."""
        self.ctx = DeviceContext()
        self.sizes = sizes.copy()
        var inputs = sizes[0]
        var classes = sizes[len(sizes) - 1]
        self.inputs = inputs
        self.classes = classes
        self.capacity = capacity
        self.total = total_params(sizes)
        self.lost = False
        var n = self.total
        var sf = scratch_floats(sizes, capacity)
        self.state = self.ctx.enqueue_create_buffer[DType.float32](3 * n)
        self.backup = self.ctx.enqueue_create_buffer[DType.float32](3 * n)
        self.acts = self.ctx.enqueue_create_buffer[DType.float32](sf[0])
        self.dl = self.ctx.enqueue_create_buffer[DType.float32](sf[1])
        self.ping = self.ctx.enqueue_create_buffer[DType.float32](sf[2])
        self.pong = self.ctx.enqueue_create_buffer[DType.float32](sf[3])
        self.row_loss = self.ctx.enqueue_create_buffer[DType.float32](sf[4])
        self.seen = self.ctx.enqueue_create_buffer[DType.int64](SEEN_WORDS)
        var in_words = capacity * (inputs + 1)
        var out_words = 1 + capacity * (classes + inputs) + n + CHECKS
        self.inp = self.ctx.enqueue_create_buffer[DType.float32](in_words)
        self.out = self.ctx.enqueue_create_buffer[DType.float32](out_words)
        self.stage = self.ctx.enqueue_create_host_buffer[DType.float32](in_words)
        self.out_host = self.ctx.enqueue_create_host_buffer[DType.float32](out_words)
        self.ctx.enqueue_copy(self.state.create_sub_buffer[DType.float32](0, n), p)
        self.ctx.enqueue_copy(self.state.create_sub_buffer[DType.float32](n, n), m)
        self.ctx.enqueue_copy(self.state.create_sub_buffer[DType.float32](2 * n, n), v)
        self.ctx.synchronize()

    def upload_batch(mut self, x: F32P, y: Int, y_itemsize: Int, rows: Int, k: Int,
                     labels: Bool) raises:
        """Stage k stacked batches of x and (unless forward) their labels as int32 on the
        host, and copy them to the device in one upload; touches no state, so a failure here
        leaves the session as it was."""
        var nx = k * rows * self.inputs
        var words = nx + (k * rows if labels else 0)
        if words > len(self.inp):
            self.inp = self.ctx.enqueue_create_buffer[DType.float32](words)
        if words > len(self.stage):
            self.stage = self.ctx.enqueue_create_host_buffer[DType.float32](words)
            self.ctx.synchronize()  # the host writes into it next
        var st = F32P(unsafe_from_address=Int(self.stage.unsafe_ptr()))
        copy_floats(x, st, nx)
        if labels:
            # int64 labels (already checked to lie in [0, classes)) narrow here.
            var dst = I32P(unsafe_from_address=Int(st) + 4 * nx)
            if y_itemsize == 4:
                copy_floats(F32P(unsafe_from_address=y), F32P(unsafe_from_address=Int(dst)),
                            k * rows)
            else:
                var wide = I64P(unsafe_from_address=y)
                for i in range(k * rows):
                    dst[unsafe_offset=i] = Int32(wide[unsafe_offset=i])
        self.ctx.enqueue_copy(self.inp.create_sub_buffer[DType.float32](0, words), st)

    def backup_state(mut self) raises:
        self.ctx.enqueue_copy(self.backup, self.state)

    def restore(mut self) raises:
        """p | m | v back from the backup, waited for; a failure marks the state lost."""
        try:
            self.ctx.enqueue_copy(self.state, self.backup)
            self.ctx.synchronize()
        except e:
            self.lost = True
            raise e^

    def run(mut self, losses: F32P, logits: F32P, grads: F32P, dx: F32P, rows: Int, k: Int,
            mode: Int, want_dx: Bool, t0: Int, lr: Float64, beta1: Float64, beta2: Float64,
            eps: Float64, weight_decay: Float64) raises -> DeviceCheck:
        """Run the uploaded batches (mode 0 forward, 1 gradients, 2 k training steps after
        `backup_state`), download the outputs with the status words in one copy, and report
        the first non-finite output."""
        var I = self.inputs
        var O = self.classes
        var n = self.total
        var grad_pass = mode != 0
        var dx_words = rows * I if grad_pass and want_dx else 0
        var at_logits = k
        var at_grads = at_logits + rows * O
        var at_dx = at_grads + n
        var at_status = at_dx + dx_words
        var words = at_status + CHECKS
        if words > len(self.out):
            self.out = self.ctx.enqueue_create_buffer[DType.float32](words)
        if words > len(self.out_host):
            self.out_host = self.ctx.enqueue_create_host_buffer[DType.float32](words)
        var scratch = LayerScratch(Int(_f(self.acts)), Int(_f(self.dl)), Int(_f(self.ping)),
                                   Int(_f(self.pong)))
        var run = DeviceRun(Int(_f(self.inp)), Int(_f(self.inp, k * rows * I)),
                            Int(_f(self.state)), Int(_f(self.state, n)),
                            Int(_f(self.state, 2 * n)), Int(_f(self.out)),
                            Int(_f(self.out, at_logits)), Int(_f(self.out, at_grads)),
                            Int(_f(self.out, at_dx)), scratch, Int(_f(self.row_loss)),
                            Int(self.seen.unsafe_ptr()), Int(_f(self.out, at_status)))
        enqueue_steps(self.ctx, self.sizes, run, rows, mode, k, t0, lr, beta1, beta2, eps,
                      weight_decay, want_dx, True)
        var host = F32P(unsafe_from_address=Int(self.out_host.unsafe_ptr()))
        self.ctx.enqueue_copy(host, self.out.create_sub_buffer[DType.float32](0, words))
        self.ctx.synchronize()
        copy_floats(host.unsafe_offset(at_logits), logits, rows * O)
        if grad_pass:
            copy_floats(host, losses, k)
            copy_floats(host.unsafe_offset(at_grads), grads, n)
            copy_floats(host.unsafe_offset(at_dx), dx, dx_words)
        var status = I32P(unsafe_from_address=Int(host) + 4 * at_status)
        for c in range(CHECKS):
            if status[unsafe_offset=c] >= 0:
                return DeviceCheck(c, Int(status[unsafe_offset=c]))
        return DeviceCheck(-1, 0)

    def download_state(mut self, p: F32P, m: F32P, v: F32P) raises:
        var n = self.total
        self.ctx.enqueue_copy(p, self.state.create_sub_buffer[DType.float32](0, n))
        self.ctx.enqueue_copy(m, self.state.create_sub_buffer[DType.float32](n, n))
        self.ctx.enqueue_copy(v, self.state.create_sub_buffer[DType.float32](2 * n, n))
        self.ctx.synchronize()


comptime DeviceStateP = Pointer[DeviceState, MutAnyOrigin]


def device_state_new(sizes: List[Int], capacity: Int, p: F32P, m: F32P, v: F32P) raises -> Int:
    """A heap-allocated DeviceState for widths `sizes` holding copies of p, m, v; its address
    (never 0)."""
    var state = DeviceState(sizes, capacity, p, m, v)
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
