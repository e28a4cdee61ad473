//! Service mode end to end: a daemon on a temporary socket, clients in this process
//! (separate sessions) and in child processes (this test binary re-run as a client, and
//! `vnpu serve` as a separate daemon process). Order is asserted on the daemon's trace;
//! waits on wall time exist only as deadlock guards.

mod capi_support;
mod service_support;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(feature = "test-ops")]
use std::sync::Arc;

use service_support::*;
use vnpu::error::codes;
use vnpu::runtime::{CtrlParams, PackedModel};
use vnpu::sched::SchedConfig;
use vnpu::service::wire::{ModelRef, Request, Response, MAX_MESSAGE, PROTOCOL_VERSION};
use vnpu::service::{sock, Client, Daemon, Limits, RemotePart, ServeOptions};
use vnpu::Error;

/// A daemon with `cores` cores and `core_limit`, default client limits.
fn daemon(dir: &Path, cores: usize, core_limit: usize) -> TestDaemon {
    let sched = SchedConfig {
        cores,
        core_limit,
        max_tasks: 1024,
        ..SchedConfig::default()
    };
    TestDaemon::start(dir, sched, Limits::default())
}

#[test]
fn inference_through_the_daemon_matches_in_process_and_copies_nothing() {
    let dir = temp_dir("svc");
    let model = classifier_file(&dir, "classifier", false);
    let d = daemon(&dir, 2, 0);
    let c = Client::connect(&d.socket).unwrap();
    let pack = c.load_files(&[&model]).unwrap();
    assert_eq!(pack.models.len(), 1);
    let info = &pack.models[0];
    assert_eq!(info.name, "classifier");

    // The same model in process, as the reference.
    let local = PackedModel::load_files(std::slice::from_ref(&model)).unwrap();
    let m = local.models[0].clone();
    assert_eq!(info.inputs, m.inputs);
    assert_eq!(info.outputs, m.outputs);
    let mut input = vec![0u8; m.inputs[0].aligned_byte_size];
    fill_input(&mut input, m.inputs[0].elem);
    let want = reference_output(&m, &mut input);

    let mut inp = c.alloc_shared(input.len()).unwrap();
    let out = c.alloc_shared(want.len()).unwrap();
    inp.as_mut_slice().copy_from_slice(&input);
    for _ in 0..3 {
        let task = c
            .submit(
                &[RemotePart {
                    model: ModelRef {
                        pack: pack.id,
                        index: 0,
                    },
                    inputs: vec![vec![inp.whole()]],
                    outputs: vec![out.whole()],
                }],
                CtrlParams {
                    priority: 10,
                    ..Default::default()
                },
            )
            .unwrap();
        c.wait(task, None).unwrap();
        assert_eq!(out.as_slice(), &want[..]);
        c.release(task).unwrap();
        // Released: the id means nothing any more.
        let e = c.wait(task, Some(10)).unwrap_err();
        assert_eq!(e.code(), codes::HB_DNN_INVALID_TASK_HANDLE);
    }
    assert_eq!(c.staged_bytes(), 0, "shared memory must not be staged");
    let s = c.status().unwrap();
    assert_eq!(s["clients"][0]["models"][0], "classifier");
    assert_eq!(s["clients"][0]["live_tasks"], 0);
}

#[test]
fn bad_buffers_and_foreign_ids_are_errors() {
    let dir = temp_dir("svc");
    let model = classifier_file(&dir, "classifier", false);
    let d = daemon(&dir, 1, 0);
    let a = Client::connect(&d.socket).unwrap();
    let b = Client::connect(&d.socket).unwrap();
    assert_ne!(a.id(), b.id());
    let pack = a.load_files(&[&model]).unwrap();
    let m = &pack.models[0];
    let inp = a.alloc_shared(m.inputs[0].aligned_byte_size).unwrap();
    let out = a.alloc_shared(m.outputs[0].aligned_byte_size).unwrap();
    let part = |outputs| RemotePart {
        model: ModelRef {
            pack: pack.id,
            index: 0,
        },
        inputs: vec![vec![inp.whole()]],
        outputs,
    };
    // Output range outside its region.
    let mut big = out.whole();
    big.len += 1;
    let e = a
        .submit(&[part(vec![big])], CtrlParams::default())
        .unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_ARGUMENT, "{e}");
    // Wrong size for the model.
    let small = out.buf(0, 4).unwrap();
    let e = a
        .submit(&[part(vec![small])], CtrlParams::default())
        .unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_ARGUMENT, "{e}");
    // Client b names a's pack, region and task ids: they do not exist in its session.
    let task = a
        .submit(&[part(vec![out.whole()])], CtrlParams::default())
        .unwrap();
    let e = b.wait(task, Some(100)).unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_TASK_HANDLE, "{e}");
    let e = b
        .submit(&[part(vec![out.whole()])], CtrlParams::default())
        .unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_PACKED_DNN_HANDLE, "{e}");
    let e = b.release_pack(pack.id).unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_PACKED_DNN_HANDLE, "{e}");
    a.wait(task, None).unwrap();
    a.release(task).unwrap();
    // A model index past the pack.
    let e = a
        .submit(
            &[RemotePart {
                model: ModelRef {
                    pack: pack.id,
                    index: 7,
                },
                inputs: vec![],
                outputs: vec![],
            }],
            CtrlParams::default(),
        )
        .unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_DNN_HANDLE, "{e}");
    // A model file that is not one.
    let junk = dir.join("junk.bin");
    std::fs::write(&junk, b"not a model at all").unwrap();
    let e = a.load_files(&[&junk]).unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_MODEL, "{e}");
}

#[test]
fn identical_models_are_held_once() {
    let dir = temp_dir("svc");
    let model = classifier_file(&dir, "classifier", false);
    let d = daemon(&dir, 1, 0);
    let a = Client::connect(&d.socket).unwrap();
    let b = Client::connect(&d.socket).unwrap();
    let pa = a.load_files(&[&model]).unwrap();
    let bytes = std::fs::read(&model).unwrap();
    let pb = b.load_bytes(&[&bytes]).unwrap();
    assert_eq!(pa.models, pb.models);
    // One loaded model behind both: the daemon reports the same model in both clients,
    // and held files are counted once.
    assert_eq!(d.daemon.held_models(), 1);
    a.release_pack(pa.id).unwrap();
    assert_eq!(d.daemon.held_models(), 1, "b still holds it");
    b.release_pack(pb.id).unwrap();
    assert_eq!(d.daemon.held_models(), 0);
}

#[test]
fn unreachable_daemon_is_an_error_naming_the_socket() {
    let dir = temp_dir("svc");
    let sock = dir.join("nobody.sock");
    let e = Client::connect(&sock).err().expect("must fail");
    assert_eq!(e.code(), codes::HB_DNN_MULTI_PROGRESS_USE_ERROR);
    assert!(e.to_string().contains("nobody.sock"), "{e}");
}

#[test]
fn malformed_messages_disconnect_only_that_connection() {
    let dir = temp_dir("svc");
    let d = daemon(&dir, 1, 0);
    let good = Client::connect(&d.socket).unwrap();
    // Garbage instead of Hello.
    let fd = sock::connect(&d.socket).unwrap();
    sock::send(&fd, &[0xde, 0xad, 0xbe, 0xef], &[]).unwrap();
    assert!(sock::recv(&fd, MAX_MESSAGE).unwrap().is_none(), "closed");
    // A valid Hello, then a truncated request.
    let fd = sock::connect(&d.socket).unwrap();
    let hello = Request::Hello {
        version: PROTOCOL_VERSION,
        token: None,
    };
    sock::send(&fd, &hello.encode(), &[]).unwrap();
    let r = sock::recv(&fd, MAX_MESSAGE).unwrap().unwrap();
    assert!(matches!(
        Response::decode(&r.bytes),
        Ok(Response::Hello { .. })
    ));
    let w = Request::Wait {
        task: 1,
        timeout_ms: 0,
    }
    .encode();
    sock::send(&fd, &w[..w.len() - 3], &[]).unwrap();
    assert!(sock::recv(&fd, MAX_MESSAGE).unwrap().is_none(), "closed");
    // An oversized message.
    let fd2 = sock::connect(&d.socket).unwrap();
    sock::send(&fd2, &hello.encode(), &[]).unwrap();
    sock::recv(&fd2, MAX_MESSAGE).unwrap().unwrap();
    let _ = sock::send(&fd2, &vec![1u8; MAX_MESSAGE + 100], &[]);
    assert!(sock::recv(&fd2, MAX_MESSAGE)
        .map(|p| p.is_none())
        .unwrap_or(true));
    // A wrong protocol version is refused with the documented code.
    let fd3 = sock::connect(&d.socket).unwrap();
    let old = Request::Hello {
        version: PROTOCOL_VERSION + 1,
        token: None,
    };
    sock::send(&fd3, &old.encode(), &[]).unwrap();
    let r = Response::decode(&sock::recv(&fd3, MAX_MESSAGE).unwrap().unwrap().bytes).unwrap();
    assert!(
        matches!(r, Response::Error { code, .. } if code == codes::HB_DNN_MULTI_PROGRESS_USE_ERROR)
    );
    // A forged session token is refused.
    let fd4 = sock::connect(&d.socket).unwrap();
    let forged = Request::Hello {
        version: PROTOCOL_VERSION,
        token: Some([7; 16]),
    };
    sock::send(&fd4, &forged.encode(), &[]).unwrap();
    let r = Response::decode(&sock::recv(&fd4, MAX_MESSAGE).unwrap().unwrap().bytes).unwrap();
    assert!(matches!(r, Response::Error { .. }), "{r:?}");
    // Descriptors on a request that takes none: an error, the connection stays.
    let f = std::fs::File::open("/proc/self/exe").unwrap();
    let e = good.call(&Request::Status, &[f.as_raw_fd()]).unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_ARGUMENT);
    // The well-behaved client never noticed.
    assert!(good.status().is_ok());
}

#[test]
fn socket_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("svc");
    let d = daemon(&dir, 1, 0);
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A second daemon on a live socket is refused.
    let e = Daemon::bind(ServeOptions {
        socket: d.socket.clone(),
        group: None,
        sched: SchedConfig::default(),
        limits: Limits::default(),
    })
    .err()
    .expect("must fail");
    assert!(matches!(e, Error::Service { .. }), "{e}");
}

#[cfg(feature = "test-ops")]
mod ordering {
    use super::*;
    use vnpu::compile::{compile_onnx_bytes, CompileOptions};
    use vnpu::onnx::builder::{attr, ModelBuilder};
    use vnpu::onnx::TEST_DOMAIN;
    use vnpu::sched::TraceKind;

    /// A model of `n` Spin nodes of `us` µs each, one FC per node.
    pub fn spin_file(dir: &Path, name: &str, n: usize, us: i64) -> PathBuf {
        let mut b = ModelBuilder::new(name, 13).input("x", vnpu::ir::DType::F32, &[1, 4]);
        let mut prev = "x".to_string();
        for i in 0..n {
            let out = format!("s{i}");
            b = b.node_in(
                TEST_DOMAIN,
                "Spin",
                &format!("spin{i}"),
                &[&prev],
                &[&out],
                vec![attr::int("micros", us)],
            );
            prev = out;
        }
        let bytes = b.output(&prev).to_bytes();
        let opts = CompileOptions {
            max_time_per_fc: 1000,
            ..CompileOptions::default()
        };
        let c = compile_onnx_bytes(&bytes, None, name, &opts).unwrap();
        assert_eq!(c.segments[0].fcs.len(), n, "one FC per Spin");
        let p = dir.join(format!("{name}.bin"));
        std::fs::write(&p, vnpu::format::write_models(&[c]).unwrap()).unwrap();
        p
    }

    fn submit(
        c: &Client,
        pack: u64,
        mem: &vnpu::service::SharedRegion,
        out: &vnpu::service::SharedRegion,
        prio: u8,
        custom: i64,
    ) -> vnpu::service::RemoteTask {
        submit_on(c, pack, (mem, out), prio, custom, 0)
    }

    /// Like `submit`, with a `bpuCoreId` mask (bit i = core i, 0 = any).
    fn submit_on(
        c: &Client,
        pack: u64,
        (mem, out): (&vnpu::service::SharedRegion, &vnpu::service::SharedRegion),
        prio: u8,
        custom: i64,
        core_mask: u32,
    ) -> vnpu::service::RemoteTask {
        c.submit(
            &[RemotePart {
                model: ModelRef { pack, index: 0 },
                inputs: vec![vec![mem.whole()]],
                outputs: vec![out.whole()],
            }],
            CtrlParams {
                priority: prio,
                custom_id: custom,
                core_mask,
            },
        )
        .unwrap()
    }

    /// `bpuCoreId` masks of different clients hold on the daemon's shared cores: every
    /// FC of a task pinned to core 1 runs on core 1, every FC of one pinned to core 0 on
    /// core 0, and a task with mask 0 may run anywhere (checked on the daemon's trace).
    #[test]
    fn core_masks_hold_across_clients() {
        let dir = temp_dir("svc");
        let m = spin_file(&dir, "m", 3, 600);
        let d = daemon(&dir, 2, 0);
        let sched = d.daemon.runtime().scheduler().clone();
        let a = Client::connect(&d.socket).unwrap();
        let b = Client::connect(&d.socket).unwrap();
        let pa = a.load_files(&[&m]).unwrap();
        let pb = b.load_files(&[&m]).unwrap();
        let ra = (a.alloc_shared(16).unwrap(), a.alloc_shared(16).unwrap());
        let rb = (b.alloc_shared(16).unwrap(), b.alloc_shared(16).unwrap());
        sched.trace_clear();
        let mut tasks = Vec::new();
        for i in 0..4 {
            tasks.push((&a, submit_on(&a, pa.id, (&ra.0, &ra.1), 0, i, 0b10)));
            tasks.push((&b, submit_on(&b, pb.id, (&rb.0, &rb.1), 0, i, 0b01)));
        }
        for (c, t) in tasks {
            c.wait(t, None).unwrap();
            c.release(t).unwrap();
        }
        let ev = sched.trace_events();
        // Scheduler ids in submission order: a, b, a, b, ...
        let mut ids: Vec<u64> = Vec::new();
        for e in &ev {
            if e.kind == TraceKind::Submit && !ids.contains(&e.task) {
                ids.push(e.task);
            }
        }
        assert_eq!(ids.len(), 8);
        let mut seen = [0usize; 2];
        for e in ev.iter().filter(|e| e.kind == TraceKind::FcStart) {
            let k = ids.iter().position(|&t| t == e.task).expect("known task");
            let want = if k % 2 == 0 { 1 } else { 0 };
            assert_eq!(e.core, Some(want), "task #{k} ran an FC on {:?}", e.core);
            seen[want] += 1;
        }
        assert_eq!(seen, [12, 12], "3 FCs per task, 4 tasks per core");
    }

    /// Tasks of two clients share one library queue: priority, then customId, then
    /// submission order; and a priority-255 task of client B waits for at most
    /// `corelimit` normal FCs of client A.
    #[test]
    fn two_clients_share_one_queue_and_one_core() {
        let dir = temp_dir("svc");
        let bg = spin_file(&dir, "bg", 12, 600);
        let fg = spin_file(&dir, "fg", 2, 600);
        // Holds the core while the other five are submitted (0.4 s: ample even on a
        // loaded machine, where each submission is one round trip).
        let hold = spin_file(&dir, "hold", 400, 1000);
        let d = daemon(&dir, 1, 1);
        let sched = d.daemon.runtime().scheduler().clone();
        let a = Client::connect(&d.socket).unwrap();
        let b = Client::connect(&d.socket).unwrap();
        let pa = a.load_files(&[&bg]).unwrap();
        let ph = a.load_files(&[&hold]).unwrap();
        let pb = b.load_files(&[&fg]).unwrap();
        let (ia, oa) = (a.alloc_shared(16).unwrap(), a.alloc_shared(16).unwrap());
        let (ib, ob) = (b.alloc_shared(16).unwrap(), b.alloc_shared(16).unwrap());
        sched.trace_clear();
        // A's first task holds the only core.
        let t0 = submit(&a, ph.id, &ia, &oa, 0, 0);
        eventually("a's first FC started", || {
            sched
                .trace_events()
                .iter()
                .any(|e| e.kind == TraceKind::FcStart)
        });
        // Queued behind it: a(prio 0), b(prio 100, custom 5), b(prio 100, custom 1), a(prio 0).
        let t1 = submit(&a, pa.id, &ia, &oa, 0, 0);
        let t2 = submit(&b, pb.id, &ib, &ob, 100, 5);
        let t3 = submit(&b, pb.id, &ib, &ob, 100, 1);
        let t4 = submit(&a, pa.id, &ia, &oa, 0, 0);
        // And a priority-255 task of b.
        let t5 = submit(&b, pb.id, &ib, &ob, 255, 0);
        for (c, t) in [(&a, t0), (&a, t1), (&b, t2), (&b, t3), (&a, t4), (&b, t5)] {
            c.wait(t, None).unwrap();
            c.release(t).unwrap();
        }
        let ev = sched.trace_events();
        // Scheduler ids in submission order t0..t5.
        let mut ids: Vec<u64> = Vec::new();
        for e in &ev {
            if e.kind == TraceKind::Submit && !ids.contains(&e.task) {
                ids.push(e.task);
            }
        }
        assert_eq!(ids.len(), 6);
        let first_fc = |id: u64| {
            ev.iter()
                .position(|e| e.kind == TraceKind::FcStart && e.task == id)
                .unwrap()
        };
        // Library queue order among the queued normal tasks: t3, t2 (custom id), t1, t4.
        let order = [ids[3], ids[2], ids[1], ids[4]];
        for w in order.windows(2) {
            assert!(first_fc(w[0]) < first_fc(w[1]), "queue order {order:?}");
        }
        // The 255 task: at most corelimit (1) normal FCs started between its submission
        // and its first FC.
        let sub = ev
            .iter()
            .position(|e| e.kind == TraceKind::Submit && e.task == ids[5])
            .unwrap();
        let start = first_fc(ids[5]);
        let normal = ev[sub..start]
            .iter()
            .filter(|e| e.kind == TraceKind::FcStart && e.task != ids[5])
            .count();
        assert!(
            normal <= 1,
            "{normal} normal FCs started ahead of the 255 task"
        );
        // The daemon's trace names each task's client pid.
        let tj = d.daemon.trace_json();
        assert_eq!(
            tj["task_pids"][ids[5].to_string()],
            serde_json::json!(std::process::id())
        );
    }

    /// A client that goes away (all its connections close) loses its queued tasks;
    /// its running FC finishes; its memory and objects are dropped; the other client
    /// is unaffected.
    #[test]
    fn a_vanished_client_loses_only_its_own_tasks() {
        let dir = temp_dir("svc");
        let bg = spin_file(&dir, "bg", 100, 600);
        let d = daemon(&dir, 1, 0);
        let sched = d.daemon.runtime().scheduler().clone();
        let a = Client::connect(&d.socket).unwrap();
        let b = Client::connect(&d.socket).unwrap();
        let pa = a.load_files(&[&bg]).unwrap();
        let pb = b.load_files(&[&bg]).unwrap();
        let (ia, oa) = (a.alloc_shared(16).unwrap(), a.alloc_shared(16).unwrap());
        let (ib, ob) = (b.alloc_shared(16).unwrap(), b.alloc_shared(16).unwrap());
        for _ in 0..4 {
            submit(&a, pa.id, &ia, &oa, 0, 0);
        }
        let tb = submit(&b, pb.id, &ib, &ob, 0, 0);
        eventually("a task runs", || {
            sched
                .trace_events()
                .iter()
                .any(|e| e.kind == TraceKind::FcStart)
        });
        assert_eq!(d.clients(), 2);
        drop((ia, oa));
        drop(a); // every connection of client a closes, as when its process dies
        eventually("client a is gone", || d.clients() == 1);
        b.wait(tb, None).unwrap();
        b.release(tb).unwrap();
        let ev = sched.trace_events();
        let cancelled = ev.iter().filter(|e| e.kind == TraceKind::Cancel).count();
        assert!(
            cancelled >= 2,
            "queued tasks of a were cancelled ({cancelled})"
        );
        assert_eq!(sched.live_tasks(), 0);
    }
}

/// `vnpu serve --cores 1` as a child process on `socket`, a client of it with `model`
/// loaded, its input/output regions and a part running that model on them.
#[cfg(feature = "test-ops")]
fn serve_process(
    socket: &Path,
    model: &Path,
) -> (
    std::process::Child,
    Arc<Client>,
    vnpu::service::SharedRegion,
    vnpu::service::SharedRegion,
    RemotePart,
) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_vnpu"))
        .args(["serve", "--socket"])
        .arg(socket)
        .args(["--cores", "1"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually("daemon listening", || Client::connect(socket).is_ok());
    let c = Client::connect(socket).unwrap();
    let p = c.load_files(&[model]).unwrap();
    let (i, o) = (c.alloc_shared(16).unwrap(), c.alloc_shared(16).unwrap());
    let part = RemotePart {
        model: ModelRef {
            pack: p.id,
            index: 0,
        },
        inputs: vec![vec![i.whole()]],
        outputs: vec![o.whole()],
    };
    (child, c, i, o, part)
}

/// `vnpu serve` as its own process: a client waiting on a task gets an error promptly
/// when the daemon is killed (no hang, even with no timeout).
#[cfg(feature = "test-ops")]
#[test]
fn a_killed_daemon_fails_waiting_clients() {
    let dir = temp_dir("svc");
    let bg = ordering::spin_file(&dir, "bg", 200, 900);
    let socket = dir.join("d.sock");
    let (mut child, c, i, o, part) = serve_process(&socket, &bg);
    // Four tasks of 200 FCs on one core: the last cannot end before the kill.
    let mut last = None;
    for _ in 0..4 {
        last = Some(
            c.submit(std::slice::from_ref(&part), CtrlParams::default())
                .unwrap(),
        );
    }
    let t = last.unwrap();
    let c2 = c.clone();
    let waiter = std::thread::spawn(move || c2.wait(t, None));
    child.kill().unwrap();
    child.wait().unwrap();
    let r = waiter.join().unwrap();
    let e = r.unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_MULTI_PROGRESS_USE_ERROR, "{e}");
    // Later calls fail too, naming the socket.
    let e = c.status().unwrap_err();
    assert!(e.to_string().contains("d.sock"), "{e}");
    drop((i, o));
}

/// `vnpu serve` stopped with SIGTERM fails a pending task with a clear error.
#[cfg(feature = "test-ops")]
#[test]
fn sigterm_fails_pending_tasks_and_exits_cleanly() {
    let dir = temp_dir("svc");
    let bg = ordering::spin_file(&dir, "bg", 40, 900);
    let socket = dir.join("t.sock");
    let (mut child, c, i, o, part) = serve_process(&socket, &bg);
    let _running = c
        .submit(std::slice::from_ref(&part), CtrlParams::default())
        .unwrap();
    let queued = c.submit(&[part], CtrlParams::default()).unwrap();
    // SAFETY: sends SIGTERM to our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let e = c.wait(queued, None).unwrap_err();
    assert_ne!(e.code(), 0);
    let st = child.wait().unwrap();
    assert!(st.success(), "daemon exit status {st:?}");
    assert!(!socket.exists(), "socket removed on shutdown");
    drop((i, o));
}

/// The C ABI in service mode: a child process (this test binary re-run with
/// `VNPU_SERVICE` set) makes plain hbDNN/hbSys calls, unchanged, and they all go to the
/// daemon. Checks results against the in-process runtime, that `hbSysAllocMem` memory is
/// not copied (the staging counter stays 0) while heap memory is staged, callbacks,
/// `more`, release and the unreachable-daemon error.
mod c_api {
    use super::*;
    use crate::capi_support::{ctrl, tensor_at};
    use std::ffi::{c_void, CString};
    use std::ptr::null_mut;
    use vnpu::ffi::*;

    const CHILD_ENV: &str = "VNPU_SERVICE_TEST_CHILD";

    unsafe extern "C" fn on_done(_t: hbDNNTaskHandle_t, status: i32, user: *mut c_void) {
        // SAFETY: `user` is the `AtomicUsize` of the test, alive until it ends.
        let seen = unsafe { &*(user as *const AtomicUsize) };
        seen.fetch_add(1 + status.unsigned_abs() as usize * 1000, Ordering::SeqCst);
    }

    #[test]
    fn unchanged_c_calls_go_to_the_daemon() {
        let dir = temp_dir("svc");
        let model = classifier_file(&dir, "classifier", false);
        let d = daemon(&dir, 2, 0);
        run_child_done("c_api::child_calls", &d.socket, CHILD_ENV, &model);
        // Everything the child held was released with it (the daemon sees the
        // disconnect on its own thread, after the child has exited).
        eventually("the child's tasks released", || {
            d.daemon.status_json()["clients"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["live_tasks"] == 0)
        });
    }

    #[test]
    fn an_unreachable_daemon_fails_c_calls_with_the_socket_named() {
        let dir = temp_dir("svc");
        let model = classifier_file(&dir, "classifier", false);
        run_child_done(
            "c_api::child_unreachable",
            &dir.join("none.sock"),
            CHILD_ENV,
            &model,
        );
    }

    fn child_model() -> Option<PathBuf> {
        std::env::var_os(CHILD_ENV).map(PathBuf::from)
    }

    #[test]
    #[ignore = "run by an_unreachable_daemon_fails_c_calls_with_the_socket_named"]
    fn child_unreachable() {
        let Some(model) = child_model() else { return };
        let path = CString::new(model.to_str().unwrap()).unwrap();
        let mut names = [path.as_ptr()];
        let mut p = null_mut();
        // SAFETY: valid out-pointer and one valid path.
        let rc = unsafe { hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1) };
        assert_eq!(rc, codes::HB_DNN_MULTI_PROGRESS_USE_ERROR);
        assert!(
            last_error_detail().contains("none.sock"),
            "{}",
            last_error_detail()
        );
        let mut m = hbSysMem {
            phyAddr: 0,
            virAddr: null_mut(),
            memSize: 0,
        };
        // SAFETY: valid out-pointer.
        let rc = unsafe { hbSysAllocMem(&mut m, 64) };
        assert_eq!(rc, codes::HB_DNN_MULTI_PROGRESS_USE_ERROR);
        println!("child: done");
    }

    #[test]
    #[ignore = "run by unchanged_c_calls_go_to_the_daemon"]
    fn child_calls() {
        let Some(model) = child_model() else { return };
        assert!(vnpu::ffi::service_socket().is_some(), "service mode");
        // The reference: the same model in this process's own runtime.
        let local = PackedModel::load_files(std::slice::from_ref(&model)).unwrap();
        let m = local.models[0].clone();
        let mut input = vec![0u8; m.inputs[0].aligned_byte_size];
        fill_input(&mut input, m.inputs[0].elem);
        let want = reference_output(&m, &mut input);

        let path = CString::new(model.to_str().unwrap()).unwrap();
        let mut names = [path.as_ptr()];
        let (mut p, mut h) = (null_mut(), null_mut());
        let mut list = null_mut();
        let mut n = 0;
        // SAFETY: all-zero properties are valid values.
        let (mut ip, mut op): (hbDNNTensorProperties, hbDNNTensorProperties) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: valid out-pointers and one valid path.
        unsafe {
            assert_eq!(hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1), 0);
            assert_eq!(hbDNNGetModelNameList(&mut list, &mut n, p), 0);
            assert_eq!(n, 1);
            assert_eq!(hbDNNGetModelHandle(&mut h, p, *list), 0);
            assert_eq!(hbDNNGetInputTensorProperties(&mut ip, h, 0), 0);
            assert_eq!(hbDNNGetOutputTensorProperties(&mut op, h, 0), 0);
        }
        assert_eq!(ip.alignedByteSize as usize, input.len());

        // 1. hbSysAllocMem memory: shared with the daemon, nothing staged.
        let zero = hbSysMem {
            phyAddr: 0,
            virAddr: null_mut(),
            memSize: 0,
        };
        let (mut xm, mut ym) = (zero, zero);
        // SAFETY: valid out-pointers; the copies stay inside the allocations.
        unsafe {
            assert_eq!(hbSysAllocMem(&mut xm, input.len() as u32), 0);
            assert_eq!(hbSysAllocCachedMem(&mut ym, want.len() as u32), 0);
            assert_eq!(
                hbSysWriteMem(&mut xm, input.as_ptr() as *mut _, input.len() as u32),
                0
            );
        }
        let xt = tensor_at(ip, xm.virAddr, input.len());
        let mut yt = tensor_at(op, ym.virAddr, want.len());
        for prio in [0, 200] {
            let mut t = null_mut();
            let mut o: *mut hbDNNTensor = &mut yt;
            let mut c = ctrl(prio, 0);
            // SAFETY: valid pointers; the memory outlives the task.
            unsafe {
                assert_eq!(hbDNNInfer(&mut t, &mut o, &xt, h, &mut c), 0);
                assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
                assert_eq!(hbDNNReleaseTask(t), 0);
                assert_eq!(
                    hbDNNReleaseTask(t),
                    codes::HB_DNN_INVALID_TASK_HANDLE,
                    "double release"
                );
            }
            // SAFETY: `ym` holds `want.len()` bytes.
            let got = unsafe { std::slice::from_raw_parts(ym.virAddr as *const u8, want.len()) };
            assert_eq!(got, &want[..]);
        }
        assert_eq!(
            service_staged_bytes(),
            0,
            "hbSysAllocMem memory is not copied"
        );

        // 2. Heap memory: staged (counted), same result; a callback and `more`.
        let mut x = input.clone();
        let mut y = vec![0u8; want.len()];
        let mut y2 = vec![0u8; want.len()];
        let xh = tensor_at(ip, x.as_mut_ptr().cast(), x.len());
        let mut yh = tensor_at(op, y.as_mut_ptr().cast(), y.len());
        let mut yh2 = tensor_at(op, y2.as_mut_ptr().cast(), y2.len());
        let seen = AtomicUsize::new(0);
        let user = &seen as *const AtomicUsize as *mut c_void;
        let mut t = null_mut();
        let (mut o1, mut o2): (*mut hbDNNTensor, *mut hbDNNTensor) = (&mut yh, &mut yh2);
        let (mut c1, mut c0) = (ctrl(0, 1), ctrl(0, 0));
        // SAFETY: valid pointers; the memory outlives the task.
        unsafe {
            assert_eq!(hbDNNInfer(&mut t, &mut o1, &xh, h, &mut c1), 0);
            assert_eq!(
                hbDNNWaitTaskDone(t, 0),
                codes::HB_DNN_API_USE_ERROR,
                "still being assembled"
            );
            assert_eq!(hbDNNSetTaskDoneCb(t, Some(on_done), user), 0);
            assert_eq!(hbDNNInfer(&mut t, &mut o2, &xh, h, &mut c0), 0);
            assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
        }
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "callback ran once, status 0"
        );
        assert_eq!(y, want);
        assert_eq!(y2, want);
        let staged = service_staged_bytes();
        assert!(
            staged >= 2 * (input.len() + want.len()) as u64,
            "heap memory is staged ({staged} bytes)"
        );
        // SAFETY: live handles; the callback already fired.
        unsafe {
            assert_eq!(
                hbDNNSetTaskDoneCb(t, Some(on_done), user),
                codes::HB_DNN_API_USE_ERROR
            );
            assert_eq!(hbDNNReleaseTask(t), 0);
        }
        // A callback registered after the end, on a task with none, fires once at once.
        let mut t = null_mut();
        let mut o: *mut hbDNNTensor = &mut yh;
        let mut c = ctrl(0, 0);
        // SAFETY: valid pointers; the memory outlives the task.
        unsafe {
            assert_eq!(hbDNNInfer(&mut t, &mut o, &xh, h, &mut c), 0);
            assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
            assert_eq!(hbDNNSetTaskDoneCb(t, Some(on_done), user), 0);
            assert_eq!(hbDNNReleaseTask(t), 0);
        }
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        // A callback without any wait: the watcher observes the end.
        let mut t = null_mut();
        let mut o: *mut hbDNNTensor = &mut yh;
        y.iter_mut().for_each(|b| *b = 0);
        // SAFETY: valid pointers; the memory outlives the task.
        unsafe {
            assert_eq!(hbDNNInfer(&mut t, &mut o, &xh, h, &mut c), 0);
            assert_eq!(hbDNNSetTaskDoneCb(t, Some(on_done), user), 0);
        }
        let t0 = std::time::Instant::now();
        while seen.load(Ordering::SeqCst) < 3 {
            assert!(t0.elapsed().as_secs() < 30, "callback never ran");
            std::thread::yield_now();
        }
        // SAFETY: a live handle.
        unsafe { assert_eq!(hbDNNReleaseTask(t), 0) };
        assert_eq!(y, want, "outputs land before the callback runs");

        // SAFETY: live memory and handles, released once.
        unsafe {
            assert_eq!(hbSysFreeMem(&mut xm), 0);
            assert_eq!(hbSysFreeMem(&mut ym), 0);
            assert_eq!(hbSysFreeMem(&mut ym), codes::HB_SYS_INVALID_ARGUMENT);
            assert_eq!(hbDNNRelease(p), 0);
        }
        println!("child: done");
    }
}

/// Timeouts and releasing a running task through the C API in service mode.
#[cfg(feature = "test-ops")]
mod c_api_timeouts {
    use super::*;
    use std::ffi::CString;
    use std::ptr::null_mut;
    use vnpu::ffi::*;

    #[test]
    fn c_wait_timeouts_and_running_release_through_the_daemon() {
        let dir = temp_dir("svc");
        let model = ordering::spin_file(&dir, "slow", 30, 900);
        let d = daemon(&dir, 1, 0);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "c_api_timeouts::child_timeouts",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("VNPU_SERVICE", &d.socket)
            .env("VNPU_SERVICE_TEST_CHILD", &model)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("child: done"), "{text}");
    }

    #[test]
    #[ignore = "run by c_wait_timeouts_and_running_release_through_the_daemon"]
    fn child_timeouts() {
        let Some(model) = std::env::var_os("VNPU_SERVICE_TEST_CHILD") else {
            return;
        };
        let path = CString::new(model.to_str().unwrap()).unwrap();
        let mut names = [path.as_ptr()];
        let (mut p, mut h, mut list, mut n) = (null_mut(), null_mut(), null_mut(), 0);
        // SAFETY: all-zero properties are valid values.
        let (mut ip, mut op): (hbDNNTensorProperties, hbDNNTensorProperties) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let zero = hbSysMem {
            phyAddr: 0,
            virAddr: null_mut(),
            memSize: 0,
        };
        let (mut xm, mut ym) = (zero, zero);
        // SAFETY: valid out-pointers and one valid path.
        unsafe {
            assert_eq!(hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1), 0);
            assert_eq!(hbDNNGetModelNameList(&mut list, &mut n, p), 0);
            assert_eq!(hbDNNGetModelHandle(&mut h, p, *list), 0);
            assert_eq!(hbDNNGetInputTensorProperties(&mut ip, h, 0), 0);
            assert_eq!(hbDNNGetOutputTensorProperties(&mut op, h, 0), 0);
            assert_eq!(hbSysAllocMem(&mut xm, ip.alignedByteSize as u32), 0);
            assert_eq!(hbSysAllocMem(&mut ym, op.alignedByteSize as u32), 0);
        }
        let input = hbDNNTensor {
            sysMem: [xm, zero, zero, zero],
            properties: ip,
        };
        let mut output = hbDNNTensor {
            sysMem: [ym, zero, zero, zero],
            properties: op,
        };
        let mut ctrl = hbDNNInferCtrlParam {
            bpuCoreId: 0,
            dspCoreId: 0,
            priority: 0,
            more: 0,
            customId: 0,
            reserved1: 0,
            reserved2: 0,
        };
        let (mut t1, mut t2) = (null_mut(), null_mut());
        let mut o: *mut hbDNNTensor = &mut output;
        // SAFETY: valid pointers; the memory outlives both tasks.
        unsafe {
            assert_eq!(hbDNNInfer(&mut t1, &mut o, &input, h, &mut ctrl), 0);
            assert_eq!(hbDNNInfer(&mut t2, &mut o, &input, h, &mut ctrl), 0);
            // 30 FCs of 0.9 ms each: a 1 ms wait times out and leaves the task intact.
            assert_eq!(hbDNNWaitTaskDone(t1, 1), codes::HB_DNN_TIMEOUT);
            // Releasing the queued second task cancels it; the first still ends well.
            assert_eq!(hbDNNReleaseTask(t2), 0);
            assert_eq!(hbDNNWaitTaskDone(t1, 0), 0);
            assert_eq!(hbDNNReleaseTask(t1), 0);
            // A running task released without a wait: the call returns once its FC ended.
            let mut t3 = null_mut();
            assert_eq!(hbDNNInfer(&mut t3, &mut o, &input, h, &mut ctrl), 0);
            assert_eq!(hbDNNReleaseTask(t3), 0);
            assert_eq!(hbSysFreeMem(&mut xm), 0);
            assert_eq!(hbSysFreeMem(&mut ym), 0);
            assert_eq!(hbDNNRelease(p), 0);
        }
        println!("child: done");
    }
}
