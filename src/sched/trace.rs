//! Scheduling trace: a lock-free ring buffer of task and FC events, readable as Rust
//! values ([`TraceEvent`]) and dumpable as Chrome / Perfetto trace JSON.
//!
//! Protocol of one event:
//! 1. `record` loads `enabled` (one relaxed atomic load; nothing else happens when off).
//! 2. It claims index `i` with `head.fetch_add(1)`; the slot is `i % capacity`.
//! 3. It marks the slot invalid (`seq = 0`), writes the fields, then publishes `seq = i + 1`
//!    with release ordering.
//! 4. A reader takes slot `i` only if `seq == i + 1` both before and after reading the
//!    fields (a sequence lock), so a slot overwritten meanwhile is skipped, never torn.
//!
//! Invariants: events are ordered by claimed index; a writer that records under the
//! scheduler lock therefore orders its event against every other event recorded under it.
//! When more than `capacity` events were recorded, only the newest `capacity` are kept.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::exec::pool::off_cpu;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// The task was submitted.
    Submit,
    /// The task left the library queue (or skipped it) and started; `core` = the core it holds.
    Dequeue,
    /// The task was inserted on `core` during its holder's middle CPU segment;
    /// `status` = the [`InsertReason`](super::InsertReason) code that allowed it.
    Insert,
    /// A segment started (`core` = None for a CPU segment on the CPU pool).
    SegmentStart,
    /// A segment ended.
    SegmentEnd,
    /// An FC started on `core`; `status` = its host priority class (0 = top, 1 = low: a
    /// task of a higher priority was live, see [`HostPriority`](super::HostPriority)).
    FcStart,
    /// An FC ended on `core` (`status` = 0 or its error code).
    FcEnd,
    /// The task ended with `status`.
    Done,
    /// The task was cancelled while queued.
    Cancel,
    /// The task left `core` after its last BPU segment, before its trailing CPU segment.
    Leave,
    /// The FC on `core` (or the CPU segment, `core` = None) ran intra-op chunks of large
    /// nodes (recorded just before its `FcEnd` / `SegmentEnd`): `count` = its chunks,
    /// `status` = those that ran on the helper pool's threads (`crate::exec::pool`).
    IntraOp,
    /// The threads that ran the FC on `core` (or the CPU segment, `core` = None) were
    /// runnable but off their CPUs (another thread or the hypervisor had them; recorded
    /// just before its `FcEnd` / `SegmentEnd`, only while tracing): `count` = µs of the
    /// thread that ran it, not counting its sleeps while waiting for helpers or stepping
    /// aside for a claimed CPU (low class); `status` = µs
    /// summed over the helpers that ran its intra-op chunks (`crate::exec::pool::off_cpu`).
    OffCpu,
    /// The thread that ran the FC on `core` (or the CPU segment) slept on purpose during
    /// it (recorded after its `OffCpu`, only while tracing and when it slept): `count` =
    /// µs waiting for its intra-op helpers or, for a low-class FC, stepping aside at its
    /// node boundaries and yield points while a top-class thread held its CPU.
    Slept,
    /// The BPU segment `seg` of a priority-255 task, none of whose FCs was committed yet
    /// on the core it waited on (`status` = that core), moved to `core`, whose running FC
    /// was ending with nothing else committed (protocol step 4).
    Move,
}

impl TraceKind {
    const ALL: [TraceKind; 14] = [
        TraceKind::Submit,
        TraceKind::Dequeue,
        TraceKind::Insert,
        TraceKind::SegmentStart,
        TraceKind::SegmentEnd,
        TraceKind::FcStart,
        TraceKind::FcEnd,
        TraceKind::Done,
        TraceKind::Cancel,
        TraceKind::Leave,
        TraceKind::IntraOp,
        TraceKind::OffCpu,
        TraceKind::Slept,
        TraceKind::Move,
    ];

    fn code(self) -> u64 {
        self as u64
    }

    fn from_code(c: u64) -> Option<TraceKind> {
        Self::ALL.get(usize::try_from(c).ok()?).copied()
    }

    fn name(self) -> &'static str {
        match self {
            TraceKind::Submit => "submit",
            TraceKind::Dequeue => "dequeue",
            TraceKind::Insert => "insert",
            TraceKind::SegmentStart => "segment_start",
            TraceKind::SegmentEnd => "segment_end",
            TraceKind::FcStart => "fc_start",
            TraceKind::FcEnd => "fc_end",
            TraceKind::Done => "done",
            TraceKind::Cancel => "cancel",
            TraceKind::Leave => "leave",
            TraceKind::IntraOp => "intra_op",
            TraceKind::OffCpu => "off_cpu",
            TraceKind::Slept => "slept",
            TraceKind::Move => "move",
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Nanoseconds since the tracer was created.
    pub ts_ns: u64,
    /// What happened.
    pub kind: TraceKind,
    /// The task id ([`TaskHandle::id`](super::TaskHandle::id)).
    pub task: u64,
    /// The core, where one is involved.
    pub core: Option<usize>,
    /// Segment index (0 where not applicable).
    pub seg: u32,
    /// FC index within the segment (0 where not applicable).
    pub fc: u32,
    /// The task's priority.
    pub priority: u8,
    /// A status code; for `Insert` the reason code, for `FcStart` the host priority class.
    pub status: i32,
    /// The task's label (model names) interned by the tracer; 0 when unknown (the task
    /// was submitted while tracing was off). The JSON dump resolves it.
    pub label: u32,
    /// For `IntraOp`: the FC's intra-op chunks (0 for other kinds).
    pub count: u32,
}

#[derive(Default)]
struct Slot {
    seq: AtomicU64,
    ts: AtomicU64,
    task: AtomicU64,
    /// kind (8 bits) | priority (8) | core + 1 (16, 0 = none) | status (32)
    packed: AtomicU64,
    /// seg (32) | fc (32)
    pos: AtomicU64,
    /// label (32) | count (32)
    label: AtomicU64,
}

/// The trace recorder of one scheduler.
pub(crate) struct Tracer {
    enabled: AtomicBool,
    head: AtomicU64,
    capacity: usize,
    slots: OnceLock<Box<[Slot]>>,
    epoch: Instant,
    /// Interned labels: id - 1 indexes the `Vec`.
    labels: Mutex<(HashMap<String, u32>, Vec<String>)>,
}

impl Tracer {
    /// A stopped tracer keeping up to `capacity` events (memory is taken on first start).
    pub(crate) fn new(capacity: usize) -> Tracer {
        Tracer {
            enabled: AtomicBool::new(false),
            head: AtomicU64::new(0),
            capacity: capacity.max(1),
            slots: OnceLock::new(),
            epoch: Instant::now(),
            labels: Mutex::new((HashMap::new(), Vec::new())),
        }
    }

    /// Whether events are being recorded.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Starts recording (keeps what was recorded before); the FCs' time off their CPUs
    /// is measured while any tracer records.
    pub(crate) fn start(&self) {
        self.slots.get_or_init(|| {
            (0..self.capacity)
                .map(|_| Slot::default())
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        if !self.enabled.swap(true, Ordering::AcqRel) {
            off_cpu::start();
        }
    }

    /// Stops recording.
    pub(crate) fn stop(&self) {
        if self.enabled.swap(false, Ordering::AcqRel) {
            off_cpu::stop();
        }
    }

    /// Forgets every recorded event (interned labels stay valid for tasks in flight).
    pub(crate) fn clear(&self) {
        // Readers skip slots whose seq does not match, so moving head forward past every
        // written index empties the buffer without touching the slots.
        let cap = self.capacity as u64;
        let h = self.head.load(Ordering::Acquire);
        self.head
            .store(h.div_ceil(cap) * cap + cap, Ordering::Release);
        if let Some(slots) = self.slots.get() {
            for s in slots.iter() {
                s.seq.store(0, Ordering::Release);
            }
        }
    }

    /// The interned id of `label` for the events of a task (0 while tracing is off).
    pub(crate) fn intern(&self, label: &str) -> u32 {
        if !self.enabled() {
            return 0;
        }
        let mut l = self.labels.lock();
        if let Some(&id) = l.0.get(label) {
            return id;
        }
        l.1.push(label.to_owned());
        let id = u32::try_from(l.1.len()).unwrap_or(u32::MAX);
        l.0.insert(label.to_owned(), id);
        id
    }

    /// Records one event (one relaxed load when tracing is off).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn record(
        &self,
        kind: TraceKind,
        task: u64,
        core: Option<usize>,
        seg: usize,
        fc: usize,
        priority: u8,
        status: i32,
        label: u32,
    ) {
        self.record_count(kind, task, core, seg, fc, priority, status, label, 0);
    }

    /// [`record`](Self::record) with the event's `count`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn record_count(
        &self,
        kind: TraceKind,
        task: u64,
        core: Option<usize>,
        seg: usize,
        fc: usize,
        priority: u8,
        status: i32,
        label: u32,
        count: u32,
    ) {
        if !self.enabled() {
            return;
        }
        let Some(slots) = self.slots.get() else {
            return;
        };
        let ts = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let i = self.head.fetch_add(1, Ordering::AcqRel);
        let slot = &slots[(i % self.capacity as u64) as usize];
        let core_field = core.map_or(0u64, |c| (c as u64 + 1) & 0xffff);
        let packed = kind.code()
            | (u64::from(priority) << 8)
            | (core_field << 16)
            | (u64::from(status as u32) << 32);
        let pos = ((seg as u64 & 0xffff_ffff) << 32) | (fc as u64 & 0xffff_ffff);
        slot.seq.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.ts.store(ts, Ordering::Relaxed);
        slot.task.store(task, Ordering::Relaxed);
        slot.packed.store(packed, Ordering::Relaxed);
        slot.pos.store(pos, Ordering::Relaxed);
        slot.label.store(
            u64::from(label) | (u64::from(count) << 32),
            Ordering::Relaxed,
        );
        slot.seq.store(i + 1, Ordering::Release);
    }

    /// The recorded events, oldest first.
    pub(crate) fn events(&self) -> Vec<TraceEvent> {
        let Some(slots) = self.slots.get() else {
            return Vec::new();
        };
        let cap = self.capacity as u64;
        let head = self.head.load(Ordering::Acquire);
        let first = head.saturating_sub(cap);
        let mut out = Vec::with_capacity((head - first) as usize);
        for i in first..head {
            let slot = &slots[(i % cap) as usize];
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 != i + 1 {
                continue;
            }
            let ts = slot.ts.load(Ordering::Relaxed);
            let task = slot.task.load(Ordering::Relaxed);
            let packed = slot.packed.load(Ordering::Relaxed);
            let pos = slot.pos.load(Ordering::Relaxed);
            let label = slot.label.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) != s1 {
                continue;
            }
            let Some(kind) = TraceKind::from_code(packed & 0xff) else {
                continue;
            };
            let core_field = (packed >> 16) & 0xffff;
            out.push(TraceEvent {
                ts_ns: ts,
                kind,
                task,
                core: core_field.checked_sub(1).map(|c| c as usize),
                seg: (pos >> 32) as u32,
                fc: (pos & 0xffff_ffff) as u32,
                priority: ((packed >> 8) & 0xff) as u8,
                status: (packed >> 32) as u32 as i32,
                label: label as u32,
                count: (label >> 32) as u32,
            });
        }
        out
    }

    /// The recorded events as Chrome / Perfetto trace JSON: tid 0 = library queue (instant
    /// events), tid 1 = CPU pool (CPU segments), tid 2 + k = core k (FCs).
    pub(crate) fn chrome_json(&self, cores: usize) -> Value {
        let events = self.events();
        let labels = self.labels.lock().1.clone();
        let label = |e: &TraceEvent| {
            (e.label as usize)
                .checked_sub(1)
                .and_then(|i| labels.get(i).cloned())
                .unwrap_or_else(|| format!("task {}", e.task))
        };
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut out = vec![
            json!({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "vnpu scheduler"}}),
            json!({"ph": "M", "pid": 1, "tid": 0, "name": "thread_name", "args": {"name": "library queue"}}),
            json!({"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "cpu pool"}}),
        ];
        for k in 0..cores {
            out.push(
                json!({"ph": "M", "pid": 1, "tid": 2 + k, "name": "thread_name",
                            "args": {"name": format!("core {k}")}}),
            );
        }
        let mut open: HashMap<(u64, u32, u32, bool), &TraceEvent> = HashMap::new();
        let mut intra: HashMap<(u64, u32, u32, bool), (u32, i32)> = HashMap::new();
        let mut off: HashMap<(u64, u32, u32, bool), (u32, i32)> = HashMap::new();
        let mut slept: HashMap<(u64, u32, u32, bool), u32> = HashMap::new();
        for e in &events {
            match e.kind {
                TraceKind::IntraOp => {
                    let key = (e.task, e.seg, e.fc, e.core.is_some());
                    intra.insert(key, (e.count, e.status));
                }
                TraceKind::OffCpu => {
                    let key = (e.task, e.seg, e.fc, e.core.is_some());
                    off.insert(key, (e.count, e.status));
                }
                TraceKind::Slept => {
                    slept.insert((e.task, e.seg, e.fc, e.core.is_some()), e.count);
                }
                TraceKind::FcStart => {
                    open.insert((e.task, e.seg, e.fc, true), e);
                }
                TraceKind::SegmentStart if e.core.is_none() => {
                    open.insert((e.task, e.seg, 0, false), e);
                }
                TraceKind::FcEnd | TraceKind::SegmentEnd => {
                    let is_fc = e.kind == TraceKind::FcEnd;
                    if !is_fc && e.core.is_some() {
                        continue;
                    }
                    let fc = if is_fc { e.fc } else { 0 };
                    if let Some(s) = open.remove(&(e.task, e.seg, fc, is_fc)) {
                        let (chunks, on_helpers) =
                            intra.remove(&(e.task, e.seg, fc, is_fc)).unwrap_or((0, 0));
                        let key = (e.task, e.seg, fc, is_fc);
                        let asleep = slept.remove(&key).unwrap_or(0);
                        let off_cpu = off.remove(&key).map(|(own, helpers)| {
                            json!({"own_us": own, "helpers_us": helpers, "slept_us": asleep})
                        });
                        let tid = if is_fc { 2 + e.core.unwrap_or(0) } else { 1 };
                        let name = if is_fc {
                            format!("{} s{} fc{}", label(e), e.seg, e.fc)
                        } else {
                            format!("{} s{} cpu", label(e), e.seg)
                        };
                        out.push(json!({
                            "ph": "X", "pid": 1, "tid": tid, "name": name,
                            "cat": if is_fc { "fc" } else { "cpu" },
                            "ts": us(s.ts_ns), "dur": us(e.ts_ns.saturating_sub(s.ts_ns)),
                            "args": {"task": e.task, "model": label(e), "priority": e.priority,
                                     "segment": e.seg, "fc": e.fc, "status": e.status,
                                     "host_class": if is_fc {
                                         json!(if s.status == 0 { "top" } else { "low" })
                                     } else { Value::Null },
                                     "intra_op_chunks": chunks,
                                     "chunks_on_helpers": on_helpers,
                                     "off_cpu": off_cpu}
                        }));
                    }
                }
                TraceKind::Submit
                | TraceKind::Dequeue
                | TraceKind::Insert
                | TraceKind::Done
                | TraceKind::Cancel
                | TraceKind::Leave
                | TraceKind::Move => {
                    out.push(json!({
                        "ph": "i", "s": "t", "pid": 1, "tid": 0, "cat": "task",
                        "name": format!("{} {}", e.kind.name(), label(e)),
                        "ts": us(e.ts_ns),
                        "args": {"task": e.task, "model": label(e), "priority": e.priority,
                                 "core": e.core, "status": e.status}
                    }));
                }
                TraceKind::SegmentStart => {}
            }
        }
        json!({ "traceEvents": out, "displayTimeUnit": "ms" })
    }

    /// Writes [`Tracer::chrome_json`] to `path`.
    pub(crate) fn dump(&self, path: &Path, cores: usize) -> Result<()> {
        let text = serde_json::to_string(&self.chrome_json(cores)).map_err(|e| Error::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        std::fs::write(path, text).map_err(|e| Error::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing_and_on_keeps_order() {
        let t = Tracer::new(8);
        t.record(TraceKind::Submit, 1, None, 0, 0, 0, 0, 0);
        assert!(t.events().is_empty());
        t.start();
        t.record(TraceKind::Submit, 1, None, 0, 0, 7, 0, 0);
        t.record(TraceKind::FcStart, 1, Some(3), 2, 5, 7, 0, 0);
        t.record(TraceKind::Done, 1, None, 0, 0, 7, -6000012, 0);
        let ev = t.events();
        assert_eq!(
            ev.iter().map(|e| e.kind).collect::<Vec<_>>(),
            vec![TraceKind::Submit, TraceKind::FcStart, TraceKind::Done]
        );
        assert_eq!(
            (ev[1].core, ev[1].seg, ev[1].fc, ev[1].priority),
            (Some(3), 2, 5, 7)
        );
        assert_eq!(ev[2].status, -6000012);
        assert!(ev[0].ts_ns <= ev[2].ts_ns);
    }

    #[test]
    fn ring_keeps_the_newest_events() {
        let t = Tracer::new(4);
        t.start();
        for i in 0..10 {
            t.record(TraceKind::Submit, i, None, 0, 0, 0, 0, 0);
        }
        let ids: Vec<u64> = t.events().iter().map(|e| e.task).collect();
        assert_eq!(ids, vec![6, 7, 8, 9]);
        t.clear();
        assert!(t.events().is_empty());
        t.record(TraceKind::Submit, 42, None, 0, 0, 0, 0, 0);
        assert_eq!(t.events().len(), 1);
    }

    #[test]
    fn chrome_json_pairs_fcs_and_cpu_segments() {
        let t = Tracer::new(64);
        t.start();
        let l = t.intern("resnet");
        assert_eq!(t.intern("resnet"), l);
        assert_ne!(t.intern("mobilenet"), l);
        t.record(TraceKind::Submit, 5, None, 0, 0, 1, 0, l);
        t.record(TraceKind::SegmentStart, 5, None, 0, 0, 1, 0, l);
        t.record(TraceKind::SegmentEnd, 5, None, 0, 0, 1, 0, l);
        t.record(TraceKind::FcStart, 5, Some(1), 1, 0, 1, 0, l);
        t.record(TraceKind::FcEnd, 5, Some(1), 1, 0, 1, 0, l);
        let v = t.chrome_json(2);
        let evs = v["traceEvents"].as_array().unwrap();
        let fc = evs.iter().find(|e| e["cat"] == "fc").expect("an FC slice");
        assert_eq!(fc["tid"], 3);
        assert_eq!(fc["args"]["model"], "resnet");
        let cpu = evs.iter().find(|e| e["cat"] == "cpu").expect("a CPU slice");
        assert_eq!(cpu["tid"], 1);
        assert!(evs
            .iter()
            .any(|e| e["ph"] == "i" && e["name"] == "submit resnet"));
    }
}
