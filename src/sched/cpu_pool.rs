//! The CPU pool (protocol step 4): threads that run CPU segments, fed through one channel.
//!
//! CPU segments run at the process's normal OS priority, i.e. in the top host class
//! ([`pool::enter`]): they may hand chunks of large nodes to the intra-op helper pool.
//!
//! Invariant: a pool thread never holds the scheduler lock while a segment runs, and never
//! runs user callbacks (they go to the callback runner).

use std::sync::Arc;
use std::time::Instant;

use crossbeam::channel::{unbounded, Receiver, Sender};

use super::core::run_guarded;
use super::lifecycle::stopped_if_released;
use super::task::TaskShared;
use super::{Done, SchedInner, State, TraceKind};
use crate::error::Result;
use crate::exec::pool::{self, HostClass};

pub(super) enum CpuMsg {
    Run(Arc<TaskShared>, usize),
    Exit,
}

/// The sending side of the pool.
pub(super) struct CpuPool {
    tx: Sender<CpuMsg>,
}

impl CpuPool {
    /// The pool's channel; the receiver is cloned into each pool thread.
    pub(super) fn channel() -> (CpuPool, Receiver<CpuMsg>) {
        let (tx, rx) = unbounded();
        (CpuPool { tx }, rx)
    }

    /// Queues CPU segment `seg` of `t`; fails only when the pool is gone.
    pub(super) fn send(&self, t: Arc<TaskShared>, seg: usize) -> std::result::Result<(), ()> {
        self.tx.send(CpuMsg::Run(t, seg)).map_err(|_| ())
    }

    /// Asks each of the `threads` pool threads to exit.
    pub(super) fn stop(&self, threads: usize) {
        for _ in 0..threads {
            // The receivers live as long as the pool threads; a send can only fail when
            // they are all gone already.
            let _ = self.tx.send(CpuMsg::Exit);
        }
    }
}

pub(super) fn cpu_main(inner: Arc<SchedInner>, rx: Receiver<CpuMsg>) {
    let mut done: Done = Vec::new();
    while let Ok(CpuMsg::Run(t, seg)) = rx.recv() {
        inner.trace(TraceKind::SegmentStart, &t, None, seg, 0, 0);
        let start = Instant::now();
        let scope = pool::enter(HostClass::Top);
        let result = match stopped_if_released(&t) {
            Some(e) => Err(e),
            None => run_guarded(|| t.body.run_cpu_segment(seg)),
        };
        let chunks = scope.finish();
        let elapsed = start.elapsed();
        inner.trace_intra_op(&t, None, seg, 0, chunks);
        {
            let mut st = inner.state.lock();
            inner.on_cpu_end(&mut st, &t, result, elapsed, &mut done);
        }
        inner.complete_all(std::mem::take(&mut done));
    }
}

impl SchedInner {
    fn on_cpu_end(
        &self,
        st: &mut State,
        t: &TaskShared,
        result: Result<()>,
        elapsed: std::time::Duration,
        done: &mut Done,
    ) {
        match result {
            Err(err) => {
                if let Some(e) = st.tasks.get(&t.id) {
                    self.trace(TraceKind::SegmentEnd, t, None, e.seg, 0, err.code());
                }
                self.finish_task(st, t.id, Err(err), done);
            }
            Ok(()) => self.end_segment(st, t.id, None, elapsed, done),
        }
        self.dispatch(st, done);
    }
}
