//! Fuzzes the hbDNN / hbSys C API with call sequences decoded from the input: load a
//! bundled small model (from memory, from a file, or both packed), get model handles,
//! allocate memory (exact, short, cached), infer with random control parameters, with
//! `more` chains, corrupted tensor properties and stale or made-up handles, wait with
//! short timeouts, register done callbacks, release tasks, free memory and release
//! packed models, in any order. Every call must return a status (no panic, no abort,
//! no hang); at the end everything left is released, which must succeed, and the live
//! handle counts must be back to zero.
//!
//! The harness keeps the caller's side of the contract (memory handed to a task stays
//! valid until the task is released; `memSize` is the true size), since breaking it is
//! undefined behaviour in C too.
#![no_main]
use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vnpu::ffi::*;

/// The golden compiled model: one NCHW f32 input, one output, six BPU nodes.
const GOLDEN: &[u8] = include_bytes!("../../tests/golden/small_v2.vnpu");
/// An ONNX model with two inputs (elementwise Add), compiled once at start.
const ADD2_ONNX: &[u8] = include_bytes!("../models/add2.onnx");

/// Most calls decoded from one input.
const MAX_CALLS: usize = 48;
/// Largest allocation the harness asks for.
const MAX_ALLOC: u32 = 1 << 16;

static CALLBACKS: AtomicUsize = AtomicUsize::new(0);

/// Prints a call's status when `VNPU_FUZZ_TRACE` is set (to check what a corpus input
/// reaches: `VNPU_FUZZ_TRACE=1 target/.../c_api INPUT`).
fn trace(call: &str, status: i32) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("VNPU_FUZZ_TRACE").is_some()) {
        eprintln!("{call} -> {status}");
    }
}

unsafe extern "C" fn done_cb(_task: hbDNNTaskHandle_t, _status: i32, _user: *mut c_void) {
    CALLBACKS.fetch_add(1, Ordering::Relaxed);
}

/// The second bundled model as a compiled file image.
fn add2() -> &'static [u8] {
    static ADD2: OnceLock<Vec<u8>> = OnceLock::new();
    ADD2.get_or_init(|| {
        let m = vnpu::compile::compile_onnx_bytes(
            ADD2_ONNX,
            None,
            "add2",
            &vnpu::compile::CompileOptions::default(),
        )
        .expect("the bundled add2 model compiles");
        vnpu::format::write_models(&[m]).expect("and can be written")
    })
}

/// The golden model as a file (for `hbDNNInitializeFromFiles`).
fn golden_path() -> &'static CString {
    static PATH: OnceLock<CString> = OnceLock::new();
    PATH.get_or_init(|| {
        CString::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/golden/small_v2.vnpu"
        ))
        .expect("no NUL")
    })
}

/// Reads the fuzz input as a stream of small numbers (zeros once exhausted).
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    /// An index into `0..n` (0 when `n` is 0).
    fn pick(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.u8() as usize % n
        }
    }
}

/// A made-up handle close to a real one: another kind, slot or generation.
fn near(h: Option<*mut c_void>, b: &mut Bytes) -> *mut c_void {
    let h = h.map_or(0, |h| h as usize);
    let bit = [1usize, 1 << 20, 1 << 21, 1 << 60, 1 << 61, 1 << 63][b.pick(6)];
    (h ^ bit) as *mut c_void
}

/// A task handle the harness got back, with the memory it must keep alive.
struct TaskRec {
    handle: hbDNNTaskHandle_t,
    live: bool,
    mems: Vec<usize>,
}

/// What the harness holds.
#[derive(Default)]
struct State {
    packed: Vec<(hbPackedDNNHandle_t, bool)>,
    models: Vec<hbDNNHandle_t>,
    mems: Vec<Option<hbSysMem>>,
    tasks: Vec<TaskRec>,
}

impl State {
    /// A packed handle: a held one (live or released), NULL or a made-up value.
    fn packed_handle(&self, b: &mut Bytes) -> hbPackedDNNHandle_t {
        match b.u8() % 8 {
            0 => std::ptr::null_mut(),
            1 => b.i32() as usize as hbPackedDNNHandle_t,
            2 => near(self.packed.get(b.pick(self.packed.len())).map(|p| p.0), b),
            _ => self
                .packed
                .get(b.pick(self.packed.len()))
                .map_or(std::ptr::null_mut(), |p| p.0),
        }
    }

    fn model_handle(&self, b: &mut Bytes) -> hbDNNHandle_t {
        match b.u8() % 8 {
            0 => std::ptr::null_mut(),
            1 => b.i32() as usize as hbDNNHandle_t,
            2 => near(self.models.get(b.pick(self.models.len())).copied(), b),
            _ => self
                .models
                .get(b.pick(self.models.len()))
                .copied()
                .unwrap_or(std::ptr::null_mut()),
        }
    }

    fn task_index(&self, b: &mut Bytes) -> Option<usize> {
        (!self.tasks.is_empty()).then(|| b.pick(self.tasks.len()))
    }

    fn task_handle(&self, b: &mut Bytes) -> hbDNNTaskHandle_t {
        match b.u8() % 8 {
            0 => std::ptr::null_mut(),
            1 => b.i32() as usize as hbDNNTaskHandle_t,
            2 => near(self.task_index(b).map(|i| self.tasks[i].handle), b),
            _ => self
                .task_index(b)
                .map_or(std::ptr::null_mut(), |i| self.tasks[i].handle),
        }
    }

    /// Releases every live task that holds memory `m`.
    fn release_users(&mut self, m: usize) {
        for t in self
            .tasks
            .iter_mut()
            .filter(|t| t.live && t.mems.contains(&m))
        {
            // SAFETY: a handle this harness got from hbDNNInfer.
            let r = unsafe { hbDNNReleaseTask(t.handle) };
            assert_eq!(r, 0, "releasing a live task failed");
            t.live = false;
        }
    }

    /// A live allocation of at least `need` bytes, or a new one of `need` bytes.
    fn mem_for(&mut self, b: &mut Bytes, need: u32) -> Option<usize> {
        let choice = b.u8() % 4;
        if choice == 0 && !self.mems.is_empty() {
            let i = b.pick(self.mems.len());
            return self.mems[i].is_some().then_some(i);
        }
        let size = match choice {
            1 => need.saturating_sub(1 + b.u8() as u32 % 8).max(1),
            _ => need.clamp(1, MAX_ALLOC),
        };
        self.alloc(size, choice == 2)
    }

    fn alloc(&mut self, size: u32, cached: bool) -> Option<usize> {
        let mut m = hbSysMem {
            phyAddr: 0,
            virAddr: std::ptr::null_mut(),
            memSize: 0,
        };
        // SAFETY: `m` is writable.
        let r = unsafe {
            if cached {
                hbSysAllocCachedMem(&mut m, size)
            } else {
                hbSysAllocMem(&mut m, size)
            }
        };
        if r != 0 {
            return None;
        }
        assert!(!m.virAddr.is_null() && m.memSize == size);
        self.mems.push(Some(m));
        Some(self.mems.len() - 1)
    }
}

fn zero_props() -> hbDNNTensorProperties {
    // SAFETY: a plain C struct of integers and raw pointers: all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// Properties as the library describes them, sometimes corrupted.
fn corrupt(p: &mut hbDNNTensorProperties, b: &mut Bytes) {
    match b.u8() % 12 {
        0 => p.alignedByteSize = b.i32(),
        1 => {
            let d = b.pick(8);
            p.validShape.dimensionSize[d] = b.i32();
        }
        2 => {
            let d = b.pick(8);
            p.alignedShape.dimensionSize[d] = b.i32() % 64;
        }
        3 => p.validShape.numDimensions = b.i32() % 10,
        4 => p.tensorType = b.i32() % 20,
        5 => p.tensorLayout = b.i32() % 4,
        6 => p.stride[b.pick(8)] = b.i32(),
        _ => {}
    }
}

/// One `hbDNNInfer` call (new task, or onto a held task handle).
fn infer(st: &mut State, b: &mut Bytes) {
    let model = st.model_handle(b);
    let (mut n_in, mut n_out) = (0i32, 0i32);
    // SAFETY: out-pointers are writable locals; any handle value is accepted.
    unsafe {
        if hbDNNGetInputCount(&mut n_in, model) != 0 || hbDNNGetOutputCount(&mut n_out, model) != 0
        {
            n_in = 1;
            n_out = 1;
        }
    }
    let (n_in, n_out) = (n_in.clamp(0, 8) as usize, n_out.clamp(0, 8) as usize);
    // SAFETY: an array of plain C structs: all-zero is valid.
    let mut ins: [hbDNNTensor; 8] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut outs: [hbDNNTensor; 8] = unsafe { std::mem::zeroed() };
    let mut used = Vec::new();
    for (side, n, tensors) in [(0, n_in, &mut ins), (1, n_out, &mut outs)] {
        for (i, t) in tensors.iter_mut().enumerate().take(n) {
            let mut p = zero_props();
            // SAFETY: `p` is writable; any handle and index are accepted.
            let r = unsafe {
                if side == 0 {
                    hbDNNGetInputTensorProperties(&mut p, model, i as i32)
                } else {
                    hbDNNGetOutputTensorProperties(&mut p, model, i as i32)
                }
            };
            if r != 0 {
                p = zero_props();
            }
            corrupt(&mut p, b);
            t.properties = p;
            let need = p.alignedByteSize.clamp(1, MAX_ALLOC as i32) as u32;
            if b.u8() % 16 == 0 {
                continue; // NULL virAddr
            }
            if let Some(m) = st.mem_for(b, need) {
                t.sysMem[0] = st.mems[m].expect("live");
                used.push(m);
            }
        }
    }
    let mut ctrl = hbDNNInferCtrlParam {
        bpuCoreId: [0, 1, 2, 3, -1][b.pick(5)],
        dspCoreId: [0, -1, 7][b.pick(3)],
        priority: [0, 1, 100, 254, 255, 256, -1][b.pick(7)],
        more: (b.u8() % 3 == 0) as i32,
        customId: b.i32() as i64,
        reserved1: 0,
        reserved2: 0,
    };
    let onto = if b.u8() % 3 == 0 {
        st.task_index(b)
    } else {
        None
    };
    let mut handle = onto.map_or(std::ptr::null_mut(), |i| st.tasks[i].handle);
    let mut out_ptr = outs.as_mut_ptr();
    // SAFETY: `ins` / `outs` hold 8 tensors, at least the model's counts; the memory
    // they point to is live and `memSize` is its true size; `handle`, `out_ptr` and
    // `ctrl` are writable locals.
    let r = unsafe { hbDNNInfer(&mut handle, &mut out_ptr, ins.as_ptr(), model, &mut ctrl) };
    trace("hbDNNInfer", r);
    if r != 0 {
        return;
    }
    match onto {
        Some(i) if st.tasks[i].handle == handle => st.tasks[i].mems.extend(used),
        _ => st.tasks.push(TaskRec {
            handle,
            live: true,
            mems: used,
        }),
    }
}

fn step(st: &mut State, b: &mut Bytes) {
    match b.u8() % 16 {
        0 => {
            // Load: golden from memory, add2 from memory, both packed, golden from file.
            let mut h: hbPackedDNNHandle_t = std::ptr::null_mut();
            let r = match b.u8() % 4 {
                3 => {
                    let mut names = [golden_path().as_ptr()];
                    // SAFETY: one NUL-terminated path; `h` writable.
                    unsafe { hbDNNInitializeFromFiles(&mut h, names.as_mut_ptr(), 1) }
                }
                k => {
                    let blobs: Vec<&[u8]> = match k {
                        0 => vec![GOLDEN],
                        1 => vec![add2()],
                        _ => vec![GOLDEN, add2()],
                    };
                    let mut ptrs: Vec<*const c_void> =
                        blobs.iter().map(|x| x.as_ptr().cast()).collect();
                    let mut lens: Vec<i32> = blobs.iter().map(|x| x.len() as i32).collect();
                    // SAFETY: arrays of `blobs.len()` valid buffers and their lengths.
                    unsafe {
                        hbDNNInitializeFromDDR(
                            &mut h,
                            ptrs.as_mut_ptr(),
                            lens.as_mut_ptr(),
                            blobs.len() as i32,
                        )
                    }
                }
            };
            trace("hbDNNInitialize", r);
            if r == 0 {
                st.packed.push((h, true));
            }
        }
        1 | 2 => {
            let p = st.packed_handle(b);
            let mut list: *mut *const c_char = std::ptr::null_mut();
            let mut n = 0i32;
            // SAFETY: writable locals; any handle value is accepted.
            if unsafe { hbDNNGetModelNameList(&mut list, &mut n, p) } != 0 || n <= 0 {
                return;
            }
            let k = b.pick(n as usize);
            // SAFETY: the library returned `n` valid C strings, live while `p` is.
            let name = unsafe { *list.add(k) };
            let bogus = c"no-such-model";
            let name = if b.u8() % 8 == 0 {
                bogus.as_ptr()
            } else {
                name
            };
            let mut m: hbDNNHandle_t = std::ptr::null_mut();
            // SAFETY: `m` writable, `name` NUL-terminated.
            if unsafe { hbDNNGetModelHandle(&mut m, p, name) } == 0 {
                st.models.push(m);
            }
        }
        3 => {
            let i = b.pick(st.packed.len());
            if let Some(p) = st.packed.get_mut(i) {
                // SAFETY: any handle value is accepted (a released one is an error).
                let r = unsafe { hbDNNRelease(p.0) };
                assert_eq!(r == 0, p.1, "release of a packed handle (live: {})", p.1);
                p.1 = false;
            }
        }
        4 => {
            let size = [1, 64, 768, 20, 4096, 0, MAX_ALLOC][b.pick(7)];
            st.alloc(size, b.u8() & 1 == 1);
        }
        5 => {
            let i = b.pick(st.mems.len());
            if st.mems.get(i).is_some_and(Option::is_some) {
                st.release_users(i);
                let mut m = st.mems[i].take().expect("live");
                // SAFETY: a live allocation of this harness, used by no live task.
                assert_eq!(
                    unsafe { hbSysFreeMem(&mut m) },
                    0,
                    "free of a live allocation"
                );
            }
        }
        6..=8 => infer(st, b),
        9 | 10 => {
            let t = st.task_handle(b);
            let timeout = [0, 1, 2, -1, 5][b.pick(5)];
            // SAFETY: any handle value is accepted.
            trace("hbDNNWaitTaskDone", unsafe {
                hbDNNWaitTaskDone(t, timeout)
            });
        }
        11 => {
            if let Some(i) = st.task_index(b) {
                let t = &mut st.tasks[i];
                // SAFETY: any handle value is accepted (a released one is an error).
                let r = unsafe { hbDNNReleaseTask(t.handle) };
                assert_eq!(
                    r == 0,
                    t.live,
                    "release of a task handle (live: {})",
                    t.live
                );
                t.live = false;
            }
        }
        12 => {
            let t = st.task_handle(b);
            let cb: hbDNNTaskDoneCb = if b.u8() % 8 == 0 { None } else { Some(done_cb) };
            // SAFETY: `done_cb` is safe to call from any thread.
            unsafe { hbDNNSetTaskDoneCb(t, cb, std::ptr::null_mut()) };
        }
        13 => {
            let mut us = 0i32;
            let t = st.task_handle(b);
            let m = st.model_handle(b);
            let mut p = zero_props();
            let mut name: *const c_char = std::ptr::null();
            // SAFETY: writable locals; any handle value and index are accepted.
            unsafe {
                hbDNNGetTaskEstimateTime(&mut us, t);
                hbDNNGetEstimateLatency(&mut us, m);
                let k = b.i32() % 4;
                hbDNNGetInputTensorProperties(&mut p, m, k);
                hbDNNGetOutputTensorProperties(&mut p, m, k);
                hbDNNGetInputName(&mut name, m, k);
                hbDNNGetOutputName(&mut name, m, k);
            }
        }
        _ => {
            // Flush / read / write a live allocation no live task uses.
            let i = b.pick(st.mems.len());
            let Some(Some(mut m)) = st.mems.get(i).copied() else {
                return;
            };
            if st.tasks.iter().any(|t| t.live && t.mems.contains(&i)) {
                return;
            }
            let mut buf = vec![0u8; MAX_ALLOC as usize + 8];
            let size = [0, 1, m.memSize, m.memSize + 1, u32::MAX][b.pick(5)];
            // SAFETY: `m` describes a live allocation of its true size; `buf` is larger
            // than any size the library may accept for it.
            unsafe {
                hbSysFlushMem(&mut m, b.i32() % 4);
                hbSysWriteMem(&mut m, buf.as_mut_ptr().cast(), size);
                hbSysReadMem(buf.as_mut_ptr().cast(), &mut m, size);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes { data, pos: 0 };
    let mut st = State::default();
    for _ in 0..MAX_CALLS {
        if b.done() {
            break;
        }
        step(&mut st, &mut b);
    }
    // Give everything back; each release of a live handle must succeed.
    for t in st.tasks.iter().filter(|t| t.live) {
        // SAFETY: a handle this harness got from hbDNNInfer and did not release.
        assert_eq!(
            unsafe { hbDNNReleaseTask(t.handle) },
            0,
            "final task release"
        );
    }
    for m in st.mems.iter_mut().filter_map(Option::take) {
        let mut m = m;
        // SAFETY: a live allocation; no live task uses it any more.
        assert_eq!(unsafe { hbSysFreeMem(&mut m) }, 0, "final free");
    }
    for (p, live) in &st.packed {
        if *live {
            // SAFETY: a live packed handle of this harness.
            assert_eq!(unsafe { hbDNNRelease(*p) }, 0, "final packed release");
        }
    }
    assert_eq!(live_handle_counts(), [0, 0, 0], "handles leaked");
});
