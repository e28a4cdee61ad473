//! The done-callback runner (protocol step 6): done callbacks run here, never on a core or
//! CPU-pool thread, one at a time in the order their tasks ended.
//!
//! Protocol:
//! 1. An ended task with a registered callback becomes a job at the back of `jobs`.
//! 2. A runner thread runs a job only while it holds the *token* (one holder at a time),
//!    so jobs run one after another in order.
//! 3. A callback that blocks (waits on or releases a task: [`block_in_place`]) first hands
//!    the token back and, when no runner is idle, starts one more runner, so the jobs
//!    behind it (perhaps the very task it waits for) go on. Its thread returns to the pool
//!    afterwards and competes for the token like the others.
//! 4. After the callback returns, the task's result is published to its waiters.
//!
//! Invariants: a task's result is published only after its callback returned; waiting on
//! a task from inside its own callback returns the task's final status at once
//! ([`in_callback_of`]); the number of runners is one plus the number of callbacks blocked
//! at the same time.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::task::{DoneCallback, TaskShared};
use crate::error::Error;

/// A callback to run, with the result to publish after it.
pub(crate) struct Job {
    pub(crate) task: Arc<TaskShared>,
    pub(crate) cb: DoneCallback,
    pub(crate) code: i32,
    pub(crate) result: std::result::Result<(), Error>,
}

struct RunnerState {
    jobs: VecDeque<Job>,
    token_free: bool,
    idle: usize,
    shutdown: bool,
}

/// The runner of one scheduler.
pub(crate) struct Callbacks {
    st: Mutex<RunnerState>,
    cv: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

thread_local! {
    /// The runner this thread belongs to (set on runner threads only).
    static RUNNER: RefCell<Option<Arc<Callbacks>>> = const { RefCell::new(None) };
    /// Whether this thread holds its runner's token.
    static HOLDS_TOKEN: Cell<bool> = const { Cell::new(false) };
    /// The tasks whose callbacks run on this thread now (innermost last), by address.
    static RUNNING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Whether the calling thread is inside the done callback of task `t`.
pub(crate) fn in_callback_of(t: &Arc<TaskShared>) -> bool {
    let me = Arc::as_ptr(t) as usize;
    RUNNING.with(|r| r.borrow().contains(&me))
}

/// Runs `f`, which may block on other tasks; on a runner thread holding the token, hands
/// the token on first (step 3).
pub(crate) fn block_in_place<R>(f: impl FnOnce() -> R) -> R {
    if HOLDS_TOKEN.with(|h| h.get()) {
        if let Some(r) = RUNNER.with(|r| r.borrow().clone()) {
            r.hand_over();
        }
    }
    f()
}

impl Callbacks {
    /// A runner without threads (see [`start`](Self::start)).
    pub(crate) fn new() -> Arc<Callbacks> {
        Arc::new(Callbacks {
            st: Mutex::new(RunnerState {
                jobs: VecDeque::new(),
                token_free: true,
                idle: 0,
                shutdown: false,
            }),
            cv: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Starts the first runner thread.
    pub(crate) fn start(self: &Arc<Self>) -> std::io::Result<()> {
        self.spawn()
    }

    fn spawn(self: &Arc<Self>) -> std::io::Result<()> {
        let me = self.clone();
        let h = std::thread::Builder::new()
            .name("vnpu-callbacks".into())
            .spawn(move || runner_main(me))?;
        self.threads.lock().push(h);
        Ok(())
    }

    /// Step 1.
    pub(crate) fn push(&self, job: Job) {
        self.st.lock().jobs.push_back(job);
        self.cv.notify_all();
    }

    /// Step 3: the calling runner gives up the token before it blocks.
    fn hand_over(self: &Arc<Self>) {
        HOLDS_TOKEN.with(|h| h.set(false));
        let need_runner = {
            let mut st = self.st.lock();
            st.token_free = true;
            st.idle == 0 && !st.shutdown
        };
        if need_runner {
            if let Err(e) = self.spawn() {
                eprintln!("vnpu: warning: cannot start a callback thread: {e}");
            }
        }
        self.cv.notify_all();
    }

    /// Runs the jobs left, then stops and joins the runner threads.
    pub(crate) fn stop(self: &Arc<Self>) {
        let on_runner = RUNNER.with(|r| r.borrow().as_ref().is_some_and(|r| Arc::ptr_eq(r, self)));
        if on_runner && HOLDS_TOKEN.with(|h| h.get()) {
            // Dropped from inside a callback: let the other runners drain the jobs.
            HOLDS_TOKEN.with(|h| h.set(false));
            self.st.lock().token_free = true;
            if self.st.lock().idle == 0 {
                let _ = self.spawn();
            }
        }
        self.st.lock().shutdown = true;
        self.cv.notify_all();
        let me = std::thread::current().id();
        loop {
            let Some(h) = self.threads.lock().pop() else {
                break;
            };
            if h.thread().id() != me && h.join().is_err() {
                eprintln!("vnpu: warning: a callback thread panicked");
            }
        }
    }
}

fn runner_main(cb: Arc<Callbacks>) {
    RUNNER.with(|r| *r.borrow_mut() = Some(cb.clone()));
    let mut st = cb.st.lock();
    loop {
        if st.token_free && !st.jobs.is_empty() {
            st.token_free = false;
            let job = st.jobs.pop_front();
            HOLDS_TOKEN.with(|h| h.set(true));
            drop(st);
            if let Some(job) = job {
                run_job(job);
            }
            st = cb.st.lock();
            if HOLDS_TOKEN.with(|h| h.replace(false)) {
                st.token_free = true;
            }
            cb.cv.notify_all();
            continue;
        }
        if st.shutdown && st.jobs.is_empty() {
            break;
        }
        st.idle += 1;
        cb.cv.wait(&mut st);
        st.idle -= 1;
    }
    drop(st);
    RUNNER.with(|r| *r.borrow_mut() = None);
}

/// Step 4: runs the callback inside the task's callback scope, then publishes.
fn run_job(job: Job) {
    let key = Arc::as_ptr(&job.task) as usize;
    RUNNING.with(|r| r.borrow_mut().push(key));
    run_callback(job.cb, job.code);
    RUNNING.with(|r| {
        r.borrow_mut().pop();
    });
    job.task.publish(job.result);
}

/// Runs a done callback, containing a panic.
pub(crate) fn run_callback(cb: DoneCallback, code: i32) {
    if catch_unwind(AssertUnwindSafe(|| cb(code))).is_err() {
        eprintln!("vnpu: warning: a task done callback panicked; the panic was contained");
    }
}
