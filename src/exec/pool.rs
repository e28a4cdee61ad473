//! The intra-op helper pool: persistent threads that run chunks of one large node beside
//! the thread that runs the node (bit-identical: the chunks write disjoint outputs with the
//! same kernels as one thread), created once and never allocating per use.
//!
//! Host priority (issue 13): the helpers run at the process's normal OS priority, the
//! *top* host class of the scheduler's core threads. Work for a node is offered to helpers
//! only when the calling thread runs top-class work (a core's top thread, the CPU pool, or
//! any thread outside the scheduler) and fewer top-class threads are busy than there are
//! CPUs, i.e. some CPU is running only low-class (`SCHED_IDLE` / nice 19) work or is idle.
//! A low-class FC runs all of its chunks itself, so it never takes a CPU at top priority,
//! and it steps aside at node boundaries on a CPU that a helper or a top-class FC claims
//! (`claim.rs`).
//!
//! Protocol of one [`Pool::run`] with `n` chunks:
//! 1. The caller offers the job to up to `min(n - 1, free CPUs, idle helpers)` helpers: for
//!    each, it moves the helper's slot `IDLE -> SETUP` (so no other caller takes it), stores
//!    the job pointer, publishes `OFFERED` and unparks the helper.
//! 2. Caller and helpers claim chunk indices from one counter (`fetch_add`), each index
//!    exactly once, and run them. A helper *attaches* (`OFFERED -> ATTACHED`) before it
//!    touches the job; the caller never waits for a helper that has not attached.
//! 3. When no index is left, the caller revokes every offer of its own not yet taken
//!    (`OFFERED -> IDLE`, on the state word it published, so never another caller's
//!    later offer of the same slot) and waits only for attached helpers, which are running a chunk
//!    or about to find none. A helper frees its slot (`ATTACHED -> IDLE`), then detaches by
//!    decrementing `live`, its last use of the job; the job lives on the caller's stack
//!    until `live == 0`, so the caller's next run finds the helper idle.
//!
//! Invariants: each chunk runs exactly once, on the caller or on one helper; a helper
//! touches a job only between attaching and detaching; a caller returns only after every
//! helper that attached has detached. The gauge of busy top-class threads (`TOP_BUSY`) is
//! process-wide: the scheduler's threads [`enter`] a [`HostClass`] around each FC or CPU
//! segment, attached helpers count themselves.

use crate::exec::Line;
use crate::huge_pages::HugeVec;
use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// Most chunks one run takes (one bit each in the helper mask) and most helpers a pool has.
pub const MAX_CHUNKS: usize = 64;

/// How long a helper polls for its next job before sleeping, and a caller polls for its
/// helpers before sleeping.
const SPIN: Duration = Duration::from_micros(50);

/// Least estimated work of one chunk, in µs, worth handing to a helper. Measured with
/// `cargo bench --bench intra_op_overhead` (2 vCPUs, loaded host): a polling helper
/// attaches to an offer in < 1 µs and the join costs < 1 µs; a sleeping one wakes in
/// ~7 µs p50; a helper that comes late only loses parallelism (the caller claims the
/// chunks it has not taken). A 40 µs chunk thus keeps most of its gain with a cold helper.
pub const MIN_CHUNK_US: usize = 40;

/// One thread's dense conv / GEMM throughput the chunk sizes assume, in multiply-adds per
/// µs (AVX2 + FMA on Zen 3: 60-80 GFLOPS).
pub const DENSE_MACS_PER_US: usize = 30_000;

/// Bytes per µs one thread streams from memory (10 GB/s), for chunk sizes of work bound
/// by its operands' bytes rather than its products: one-row products (their weights),
/// shallow convs on the matrix engine (their f32 planes).
pub const STREAM_BYTES_PER_US: usize = 10_000;

/// One thread's depthwise conv throughput the chunk sizes assume, in multiply-adds per µs
/// (7-12 GFLOPS).
pub const DEPTHWISE_MACS_PER_US: usize = 4_000;

/// Cuts `len` units, in whole blocks of `align` units, into at most `threads` contiguous
/// ranges of about equal size, each of at least [`MIN_CHUNK_US`] of work when the whole is
/// `est_us` µs; empty when fewer than two ranges result (one thread runs it all).
pub fn chunk_ranges(
    len: usize,
    align: usize,
    est_us: usize,
    threads: usize,
) -> Vec<(usize, usize)> {
    let blocks = len.div_ceil(align.max(1));
    let want = threads
        .min(est_us / MIN_CHUNK_US)
        .min(blocks)
        .min(MAX_CHUNKS);
    if want < 2 {
        return Vec::new();
    }
    (0..want)
        .map(|i| {
            let (b0, b1) = (i * blocks / want, (i + 1) * blocks / want);
            (b0 * align, (b1 * align).min(len))
        })
        .collect()
}

/// One poll of a wait loop that began at `start`: spins for [`SPIN`], then sleeps until
/// unparked (returns at once when unparked meanwhile). Returns the nanoseconds it slept.
///
/// It does not yield the CPU between polls. Tried (`sched_yield` after 5 µs): on a host
/// loaded with other normal-priority processes it cut the join after a helper that the
/// OS had woken on the caller's own CPU from ~50 µs to ~7 µs, but a yielding helper lost
/// its CPU for milliseconds (it took 0-6% of hot offers instead of 77-100%), and under
/// EEVDF a yield gives up the rest of the slice, which may go to a `SCHED_IDLE`
/// background thread: the case the helpers exist for (the OS places a woken helper on a
/// CPU that runs only `SCHED_IDLE` work, and it preempts that work at once).
fn poll_wait(start: Instant) -> u64 {
    if start.elapsed() < SPIN {
        std::hint::spin_loop();
        0
    } else {
        let t = Instant::now();
        std::thread::park();
        u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

const IDLE: u8 = 0;
const SETUP: u8 = 1;
const OFFERED: u8 = 2;
const ATTACHED: u8 = 3;
const EXIT: u8 = 4;

/// A slot's state word: the state in the low byte, above it the number of the offer the
/// state belongs to. A caller revokes only its own offer (the word it published): with the
/// state alone, a caller whose helper had just finished could take back the next caller's
/// offer of the same slot (that caller then waited forever and the helper's late
/// decrement hit a job already gone).
fn word(state: u8, offer: u64) -> u64 {
    (offer << 8) | u64::from(state)
}

/// The state of a slot's state word.
fn state_of(w: u64) -> u8 {
    (w & 0xff) as u8
}

/// The offer number of a slot's state word.
fn offer_of(w: u64) -> u64 {
    w >> 8
}

/// Threads doing top-class work now: scheduler threads inside a counted [`enter`] scope
/// and attached helpers.
static TOP_BUSY: AtomicUsize = AtomicUsize::new(0);

/// The host priority class of the work a thread runs (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostClass {
    /// Work of the highest live priority (or no scheduler): may hand chunks to helpers.
    Top,
    /// Lower-priority work: runs its chunks itself.
    Low,
}

/// Chunks that ran inside one [`enter`] scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    /// Chunks of chunked nodes run in the scope.
    pub chunks: u32,
    /// Of those, chunks that ran on helper threads.
    pub on_helpers: u32,
    /// Time the scope's threads were off their CPUs, where measured ([`off_cpu`]).
    pub off_cpu: Option<OffCpu>,
}

/// Microseconds the threads of one [`enter`] scope were runnable but off their CPUs
/// (another thread or the hypervisor had them; see [`off_cpu`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffCpu {
    /// The scope's own thread, not counting its sleeps while waiting for helpers or
    /// stepping aside for a claim.
    pub own_us: u32,
    /// Helper threads, summed over the chunks they ran for the scope.
    pub helpers_us: u32,
    /// The scope's own thread asleep on purpose: waiting for its helpers, or (low
    /// class) stepping aside for a claimed CPU (`claim.rs`).
    pub slept_us: u32,
}

#[derive(Clone, Copy)]
struct Ctx {
    low: bool,
    counted: bool,
    counts: ChunkCounts,
    /// Nanoseconds the thread slept in this scope waiting for helpers or stepping aside.
    slept_ns: u64,
    /// Nanoseconds helpers were off their CPUs while running this scope's chunks.
    helpers_off_ns: u64,
}

const NO_CTX: Ctx = Ctx {
    low: false,
    counted: false,
    counts: ChunkCounts {
        chunks: 0,
        on_helpers: 0,
        off_cpu: None,
    },
    slept_ns: 0,
    helpers_off_ns: 0,
};

thread_local! {
    static CTX: Cell<Ctx> = const { Cell::new(NO_CTX) };
}

/// A thread's scope of one FC or CPU segment in a host class; [`Scope::finish`] ends it.
#[derive(Debug)]
pub struct Scope {
    prev_low: bool,
    prev_counted: bool,
    counted: bool,
    /// The CPU a top-class scope claimed when it began.
    held: Option<usize>,
    /// Where off-CPU time is measured: the clock started with the scope.
    clock: Option<off_cpu::Clock>,
}

/// Marks the calling thread as running `class` work until [`Scope::finish`]; top-class
/// work counts as a busy top-class thread in the pool's gauge.
pub fn enter(class: HostClass) -> Scope {
    if class == HostClass::Low {
        // Low-class work also steps aside inside long kernels, not only between nodes.
        crate::kernels::yield_point::install(node_boundary);
    }
    let counted = class == HostClass::Top;
    // Top-class work holds its CPU against low-class FCs of other cores placed on the
    // same CPU (more virtual cores than CPUs): they step aside at their next yield point
    // instead of sharing the CPU by the OS's slices (see `claim.rs`).
    let held = if counted {
        TOP_BUSY.fetch_add(1, Ordering::AcqRel);
        claim::claim()
    } else {
        None
    };
    let prev = CTX.with(|c| {
        let p = c.get();
        c.set(Ctx {
            low: class == HostClass::Low,
            counted,
            ..NO_CTX
        });
        p
    });
    Scope {
        prev_low: prev.low,
        prev_counted: prev.counted,
        counted,
        held,
        clock: off_cpu::measuring().then(off_cpu::Clock::start),
    }
}

impl Scope {
    /// Ends the scope; returns the chunks run in it and, where measured, the time its
    /// threads were off their CPUs.
    pub fn finish(self) -> ChunkCounts {
        let ctx = CTX.with(|c| c.get());
        let mut counts = ctx.counts;
        let us = |ns: u64| u32::try_from(ns / 1000).unwrap_or(u32::MAX);
        counts.off_cpu = self.clock.map(|c| OffCpu {
            own_us: us(c.off_ns(ctx.slept_ns)),
            helpers_us: us(ctx.helpers_off_ns),
            slept_us: us(ctx.slept_ns),
        });
        drop(self);
        counts
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.counted {
            TOP_BUSY.fetch_sub(1, Ordering::AcqRel);
        }
        claim::release(self.held.take());
        CTX.with(|c| {
            c.set(Ctx {
                low: self.prev_low,
                counted: self.prev_counted,
                ..NO_CTX
            })
        });
    }
}

/// One run's shared state, on the caller's stack.
struct Job<'a> {
    run: &'a (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    /// Bit i: chunk i ran on a helper.
    on_helpers: AtomicU64,
    /// Nanoseconds helpers were off their CPUs while running chunks (where measured).
    helpers_off_ns: AtomicU64,
    /// Helpers offered the job and not yet revoked or detached.
    live: AtomicUsize,
    panic: AtomicBool,
    caller: Thread,
}

impl Job<'_> {
    /// Claims and runs chunks until none is left; returns the mask of those it ran.
    fn work(&self) -> u64 {
        let mut mine = 0u64;
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            if i >= self.n {
                return mine;
            }
            if catch_unwind(AssertUnwindSafe(|| (self.run)(i))).is_err() {
                self.panic.store(true, Ordering::Release);
            }
            mine |= 1 << i;
        }
    }
}

struct Slot {
    /// See [`word`].
    state: AtomicU64,
    job: AtomicPtr<()>,
    thread: OnceLock<Thread>,
    steer: steer::Steer,
}

struct Shared {
    slots: Box<[Slot]>,
    cpus: usize,
}

/// A set of persistent helper threads (see the module doc).
pub struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("helpers", &self.shared.slots.len())
            .field("cpus", &self.shared.cpus)
            .finish()
    }
}

/// The process's pool: one helper per host CPU but one (none on one CPU), started on
/// first use.
pub fn global() -> &'static Pool {
    static GLOBAL: OnceLock<Pool> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Pool::new(cpus.saturating_sub(1).min(MAX_CHUNKS), cpus)
    })
}

impl Pool {
    /// Starts `helpers` helper threads (at most [`MAX_CHUNKS`]; fewer if the OS refuses
    /// threads) for a host of `cpus` CPUs (the gauge's bound).
    pub fn new(helpers: usize, cpus: usize) -> Pool {
        let shared = Arc::new(Shared {
            slots: (0..helpers.min(MAX_CHUNKS))
                .map(|_| Slot {
                    // Not offered to anyone until its thread runs (then IDLE).
                    state: AtomicU64::new(word(SETUP, 0)),
                    job: AtomicPtr::new(std::ptr::null_mut()),
                    thread: OnceLock::new(),
                    steer: steer::Steer::new(),
                })
                .collect(),
            cpus,
        });
        let mut threads = Vec::new();
        for i in 0..shared.slots.len() {
            let sh = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("vnpu-intra{i}"))
                .spawn(move || helper_main(&sh, i));
            match spawned {
                Ok(h) => {
                    let _ = shared.slots[i].thread.set(h.thread().clone());
                    // Usable only once its thread handle is known.
                    shared.slots[i]
                        .state
                        .store(word(IDLE, 0), Ordering::Release);
                    threads.push(h);
                }
                Err(e) => {
                    eprintln!("vnpu: warning: cannot start intra-op helper {i}: {e}");
                    for slot in shared.slots[i..].iter() {
                        slot.state.store(word(EXIT, 0), Ordering::Release);
                    }
                    break;
                }
            }
        }
        Pool { shared, threads }
    }

    /// Helper threads of the pool.
    pub fn helpers(&self) -> usize {
        self.threads.len()
    }

    /// How many helpers a run of `n` chunks would be offered now from this thread.
    fn offer_count(&self, n: usize) -> usize {
        let ctx = CTX.with(|c| c.get());
        if ctx.low || !(2..=MAX_CHUNKS).contains(&n) {
            return 0;
        }
        let others = TOP_BUSY
            .load(Ordering::Acquire)
            .saturating_sub(usize::from(ctx.counted));
        let free_cpus = self.shared.cpus.saturating_sub(1 + others);
        free_cpus.min(n - 1).min(self.threads.len())
    }

    /// Runs `f(i, &mut parts[i])` for every i, each exactly once, on this thread and on
    /// helpers offered the work by the rules of the module doc; returns the mask of the
    /// chunks that ran on helpers (bit i = chunk i). Results equal a sequential run when
    /// the parts are disjoint. A panic in any chunk is raised here after every chunk ran.
    /// Counts the chunks into the calling thread's [`enter`] scope.
    pub fn run<T: Send>(&self, parts: &mut [T], f: &(dyn Fn(usize, &mut T) + Sync)) -> u64 {
        let n = parts.len();
        let offer = self.offer_count(n);
        let mask = if offer == 0 {
            for (i, p) in parts.iter_mut().enumerate() {
                f(i, p);
            }
            0
        } else {
            self.run_shared(parts, f, offer)
        };
        CTX.with(|c| {
            let mut x = c.get();
            x.counts.chunks = x.counts.chunks.saturating_add(n as u32);
            x.counts.on_helpers = x.counts.on_helpers.saturating_add(mask.count_ones());
            c.set(x);
        });
        mask
    }

    fn run_shared<T: Send>(
        &self,
        parts: &mut [T],
        f: &(dyn Fn(usize, &mut T) + Sync),
        offer: usize,
    ) -> u64 {
        struct Parts<T>(*mut T);
        // SAFETY: the pointer is only used to reach `&mut parts[i]` for an index claimed
        // once (protocol step 2); T: Send lets that element move to the helper's thread.
        unsafe impl<T: Send> Sync for Parts<T> {}
        let base = Parts(parts.as_mut_ptr());
        let n = parts.len();
        let run = |i: usize| {
            let base = &base;
            // SAFETY: `i < n` was claimed by exactly one thread (the counter hands out each
            // index once), so this is the only reference to element i, and `parts`
            // outlives the run (the caller waits for every attached helper).
            let p = unsafe { &mut *base.0.add(i) };
            f(i, p);
        };
        let job = Job {
            run: &run,
            n,
            next: AtomicUsize::new(0),
            on_helpers: AtomicU64::new(0),
            helpers_off_ns: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            panic: AtomicBool::new(false),
            caller: std::thread::current(),
        };
        let ptr = &job as *const Job<'_> as *mut ();
        let mut offered = 0u64;
        // The state word each offer published (bit s of `offered` set).
        let mut words = [0u64; MAX_CHUNKS];
        for (s, slot) in self.shared.slots.iter().enumerate() {
            if offered.count_ones() as usize == offer {
                break;
            }
            let w = slot.state.load(Ordering::Acquire);
            let next = offer_of(w) + 1;
            if state_of(w) != IDLE
                || slot
                    .state
                    .compare_exchange(w, word(SETUP, next), Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            slot.steer.away_from_caller();
            job.live.fetch_add(1, Ordering::AcqRel);
            slot.job.store(ptr, Ordering::Relaxed);
            words[s] = word(OFFERED, next);
            slot.state.store(words[s], Ordering::Release);
            if let Some(t) = slot.thread.get() {
                t.unpark();
            }
            offered |= 1 << s;
        }
        job.work();
        // Revoke the offers no helper took (step 3).
        for (s, slot) in self.shared.slots.iter().enumerate() {
            let idle = word(IDLE, offer_of(words[s]));
            if offered & (1 << s) != 0
                && slot
                    .state
                    .compare_exchange(words[s], idle, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                job.live.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let start = Instant::now();
        let mut slept = 0u64;
        while job.live.load(Ordering::Acquire) != 0 {
            slept = slept.saturating_add(poll_wait(start));
        }
        let helpers_off = job.helpers_off_ns.load(Ordering::Acquire);
        CTX.with(|c| {
            let mut x = c.get();
            x.slept_ns = x.slept_ns.saturating_add(slept);
            x.helpers_off_ns = x.helpers_off_ns.saturating_add(helpers_off);
            c.set(x);
        });
        if job.panic.load(Ordering::Acquire) {
            resume_unwind(Box::new("an intra-op chunk panicked") as Box<dyn Any + Send>);
        }
        job.on_helpers.load(Ordering::Acquire)
    }
}

/// The output block and scratch of each intra-op chunk, taken once by whichever thread
/// runs the chunk.
pub(crate) type ChunkParts<'a> = [Option<(&'a mut [f32], &'a mut [f32])>; MAX_CHUNKS];

/// The output block and scratch of each intra-op chunk (`lens` floats of `y` each, in
/// order): chunk 0 takes `scratch`, chunk i the scratch of helper slot i - 1 (its
/// cache lines as floats).
pub(crate) fn chunk_parts<'a>(
    lens: impl Iterator<Item = usize>,
    y: &'a mut [f32],
    scratch: &'a mut [f32],
    helpers: &'a mut [HugeVec<Line>],
) -> ChunkParts<'a> {
    let mut parts: ChunkParts<'a> = std::array::from_fn(|_| None);
    let (mut tail, mut first) = (y, Some(scratch));
    let mut hs = helpers.iter_mut();
    for (slot, len) in parts.iter_mut().zip(lens) {
        let (part, t) = std::mem::take(&mut tail).split_at_mut(len);
        tail = t;
        let s = match first.take() {
            Some(s) => Some(s),
            None => hs.next().map(|v| bytemuck::cast_slice_mut::<Line, f32>(v)),
        };
        *slot = s.map(|s| (part, s));
    }
    parts
}

fn helper_main(sh: &Shared, i: usize) {
    let slot = &sh.slots[i];
    slot.steer.register_current();
    // The CPU this helper holds against low-class work (claim.rs), from its attaching to
    // a job until it sleeps.
    let mut held = None;
    loop {
        let start = Instant::now();
        let offered = loop {
            let w = slot.state.load(Ordering::Acquire);
            match state_of(w) {
                OFFERED => break w,
                EXIT => {
                    claim::release(held.take());
                    return;
                }
                _ if start.elapsed() < SPIN => std::hint::spin_loop(),
                _ => {
                    claim::release(held.take());
                    std::thread::park();
                }
            }
        };
        let n = offer_of(offered);
        if slot
            .state
            .compare_exchange(
                offered,
                word(ATTACHED, n),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            continue; // revoked
        }
        if held.is_none() {
            held = claim::claim();
        }
        // SAFETY: the slot was ATTACHED from OFFERED, so the job pointer stored before
        // OFFERED was published is live until this helper decrements `live` (step 3).
        let job = unsafe { &*(slot.job.load(Ordering::Acquire) as *const Job<'_>) };
        TOP_BUSY.fetch_add(1, Ordering::AcqRel);
        let clock = off_cpu::measuring().then(off_cpu::Clock::start);
        let mine = job.work();
        if let Some(c) = clock {
            job.helpers_off_ns.fetch_add(c.off_ns(0), Ordering::AcqRel);
        }
        TOP_BUSY.fetch_sub(1, Ordering::AcqRel);
        job.on_helpers.fetch_or(mine, Ordering::AcqRel);
        let caller = job.caller.clone();
        // Free before detaching, so the caller's next run finds this helper idle. A new
        // offer meanwhile is seen at the top of the loop; the old job stays alive until
        // the decrement below.
        let exit = slot
            .state
            .compare_exchange(
                word(ATTACHED, n),
                word(IDLE, n),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err();
        // The last touch of the job: the caller may return (and free it) right after.
        job.live.fetch_sub(1, Ordering::AcqRel);
        caller.unpark();
        if exit {
            claim::release(held.take());
            return;
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for slot in self.shared.slots.iter() {
            // Waits out a running job: a helper leaves ATTACHED by itself.
            loop {
                let w = slot.state.load(Ordering::Acquire);
                let exit = word(EXIT, offer_of(w));
                if state_of(w) == EXIT
                    || (state_of(w) == IDLE
                        && slot
                            .state
                            .compare_exchange(w, exit, Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok())
                {
                    break;
                }
                std::thread::yield_now();
            }
            if let Some(t) = slot.thread.get() {
                t.unpark();
            }
        }
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

mod claim;
pub mod off_cpu;
mod steer;

/// A node boundary of the calling thread's FC, or a kernel's yield point
/// (`kernels::yield_point`): a low-class FC sleeps here while a helper holds its CPU for
/// top-class chunks (see `claim.rs`); anything else returns at once.
pub fn node_boundary() {
    if CTX.with(|c| c.get().low) {
        // Where off-CPU time is measured, the sleep is the FC's choice, not time lost.
        let t = off_cpu::measuring().then(Instant::now);
        if claim::step_aside() {
            if let Some(t) = t {
                let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
                CTX.with(|c| {
                    let mut x = c.get();
                    x.slept_ns = x.slept_ns.saturating_add(ns);
                    c.set(x);
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
