//! Service mode, task by task: assemblies (`more = 1`) count against the daemon's
//! per-client task limit, through the Rust client and through the unchanged C API; ROI
//! inference (`hbDNNRoiInfer`) through the C API gives what the in-process runtime gives.
//! A daemon runs on a temporary socket in this process; C calls run in a child process
//! (this test binary re-run with `VNPU_SERVICE` set). Assertions are on return codes,
//! output bytes and the daemon's counters, never on time.

mod capi_support;
mod service_support;

use std::path::{Path, PathBuf};
use std::ptr::null_mut;

use capi_support::{ctrl, load_file, props, tensor_at};
use service_support::*;
use vnpu::error::codes;
use vnpu::ffi::*;
use vnpu::runtime::{CtrlParams, IoBuffer, PackedModel, Roi, RoiFrame, Runtime};
use vnpu::sched::SchedConfig;
use vnpu::service::wire::ModelRef;
use vnpu::service::{Client, Limits, RemotePart};

const CHILD_ENV: &str = "VNPU_SERVICE_TASKS_CHILD";

/// A one-core daemon allowing `tasks_per_client` live tasks per client.
fn daemon(dir: &Path, tasks_per_client: usize) -> TestDaemon {
    let sched = SchedConfig {
        cores: 1,
        max_tasks: 64,
        ..SchedConfig::default()
    };
    let limits = Limits {
        tasks_per_client,
        ..Limits::default()
    };
    TestDaemon::start(dir, sched, limits)
}

/// (live tasks, assemblies) of the one client, from the daemon's status.
fn counts(d: &TestDaemon) -> (u64, u64) {
    let s = d.daemon.status_json();
    let c = &s["clients"][0];
    (
        c["live_tasks"].as_u64().unwrap(),
        c["assembling_tasks"].as_u64().unwrap(),
    )
}

fn child_model() -> Option<PathBuf> {
    std::env::var_os(CHILD_ENV).map(PathBuf::from)
}

/// Reservations (assemblies) and tasks share the per-client limit; a reservation's own
/// submission always has room; giving one back frees its room.
#[test]
fn reservations_count_against_the_client_task_limit() {
    let dir = temp_dir("svc-tasks");
    let model = classifier_file(&dir, "classifier", false);
    let d = daemon(&dir, 3);
    let c = Client::connect(&d.socket).unwrap();
    let pack = c.load_files(&[&model]).unwrap();
    let m = &pack.models[0];
    let inp = c.alloc_shared(m.inputs[0].aligned_byte_size).unwrap();
    let out = c.alloc_shared(m.outputs[0].aligned_byte_size).unwrap();
    let part = RemotePart {
        model: ModelRef {
            pack: pack.id,
            index: 0,
        },
        inputs: vec![vec![inp.whole()]],
        outputs: vec![out.whole()],
    };
    let parts = std::slice::from_ref(&part);
    let ctrl = CtrlParams::default();

    let r1 = c.reserve().unwrap();
    let r2 = c.reserve().unwrap();
    assert_eq!(counts(&d), (0, 2));
    let t1 = c.submit(parts, ctrl).unwrap();
    assert_eq!(counts(&d), (1, 2));
    // Two assemblies and one task fill the limit of 3.
    let e = c.submit(parts, ctrl).unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_TASK_NUM_EXCEED_LIMIT, "{e}");
    let e = c.reserve().unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_TASK_NUM_EXCEED_LIMIT, "{e}");
    // An assembly's submission takes its own room.
    let t2 = c.submit_reserved(parts, ctrl, r1).unwrap();
    assert_eq!(counts(&d), (2, 1));
    let e = c.submit_reserved(parts, ctrl, r1).unwrap_err();
    assert_eq!(e.code(), codes::HB_DNN_INVALID_TASK_HANDLE, "{e}");
    // Giving a reservation back frees its room.
    c.unreserve(r2).unwrap();
    assert_eq!(counts(&d), (2, 0));
    let t3 = c.submit(parts, ctrl).unwrap();
    for t in [t1, t2, t3] {
        c.wait(t, None).unwrap();
        c.forget(t).unwrap();
    }
    // Forgotten tasks are told with the next submission, then their room is free.
    let t4 = c.submit(parts, ctrl).unwrap();
    assert_eq!(counts(&d), (1, 0));
    c.wait(t4, None).unwrap();
    c.release(t4).unwrap();
    assert_eq!(counts(&d), (0, 0));
}

/// The same through the C API: a task built with `more = 1` holds its room from its first
/// part, and releasing it unsubmitted gives the room back.
#[test]
fn c_assemblies_count_against_the_client_task_limit() {
    let dir = temp_dir("svc-tasks");
    let model = classifier_file(&dir, "classifier", false);
    let d = daemon(&dir, 2);
    run_child_done("child_assemblies", &d.socket, CHILD_ENV, &model);
    // The daemon sees the child's disconnect on its own thread, after the child exited.
    let t0 = std::time::Instant::now();
    while !d.daemon.status_json()["clients"]
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the child's session never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Loads `model` through the C API: (pack, model, input props, output props).
fn load(
    model: &Path,
) -> (
    hbPackedDNNHandle_t,
    hbDNNHandle_t,
    hbDNNTensorProperties,
    hbDNNTensorProperties,
) {
    let (p, h) = load_file(model);
    (p, h, props(h, false, 0), props(h, true, 0))
}

#[test]
#[ignore = "run by c_assemblies_count_against_the_client_task_limit"]
fn child_assemblies() {
    let Some(model) = child_model() else { return };
    assert!(vnpu::ffi::service_socket().is_some(), "service mode");
    let (p, h, ip, op) = load(&model);
    let mut x = vec![0u8; ip.alignedByteSize as usize];
    let mut y = vec![0u8; op.alignedByteSize as usize];
    let xt = tensor_at(ip, x.as_mut_ptr().cast(), x.len());
    let mut yt = tensor_at(op, y.as_mut_ptr().cast(), y.len());
    let mut o: *mut hbDNNTensor = &mut yt;
    let (mut more, mut last) = (ctrl(0, 1), ctrl(0, 0));
    let (mut a, mut b, mut c) = (null_mut(), null_mut(), null_mut());
    // SAFETY: valid pointers; the memory outlives the tasks.
    unsafe {
        // Task a is being assembled: it holds one of the two rooms.
        assert_eq!(hbDNNInfer(&mut a, &mut o, &xt, h, &mut more), 0);
        assert_eq!(hbDNNInfer(&mut b, &mut o, &xt, h, &mut last), 0);
        assert_eq!(
            hbDNNInfer(&mut c, &mut o, &xt, h, &mut last),
            codes::HB_DNN_TASK_NUM_EXCEED_LIMIT,
            "an assembly and a task fill a limit of 2"
        );
        assert!(c.is_null());
        // Its last part needs no new room.
        assert_eq!(hbDNNInfer(&mut a, &mut o, &xt, h, &mut last), 0);
        for t in [a, b] {
            assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
            assert_eq!(hbDNNReleaseTask(t), 0);
        }
        // An assembly released before its submission gives its room back.
        let (mut d, mut e, mut f) = (null_mut(), null_mut(), null_mut());
        assert_eq!(hbDNNInfer(&mut d, &mut o, &xt, h, &mut more), 0);
        assert_eq!(hbDNNInfer(&mut e, &mut o, &xt, h, &mut more), 0);
        assert_eq!(
            hbDNNInfer(&mut f, &mut o, &xt, h, &mut more),
            codes::HB_DNN_TASK_NUM_EXCEED_LIMIT,
            "two assemblies fill a limit of 2"
        );
        assert_eq!(hbDNNReleaseTask(d), 0);
        assert_eq!(hbDNNInfer(&mut f, &mut o, &xt, h, &mut last), 0);
        assert_eq!(hbDNNWaitTaskDone(f, 0), 0);
        assert_eq!(hbDNNReleaseTask(f), 0);
        assert_eq!(hbDNNReleaseTask(e), 0);
        assert_eq!(hbDNNRelease(p), 0);
    }
    println!("child: done");
}

/// `hbDNNRoiInfer` in service mode: the crops are made in the client and staged, the
/// model runs in the daemon, and the outputs equal the in-process runtime's ROI entry
/// point bit for bit, with heap and with `hbSysAllocMem` memory.
#[test]
fn c_roi_inference_through_the_daemon() {
    let dir = temp_dir("svc-tasks");
    let model = classifier_file(&dir, "cls", true);
    let d = daemon(&dir, 16);
    let text = run_child_done("child_roi", &d.socket, CHILD_ENV, &model);
    assert!(text.contains("child: staged"), "{text}");
}

#[test]
#[ignore = "run by c_roi_inference_through_the_daemon"]
fn child_roi() {
    let Some(model) = child_model() else { return };
    assert!(vnpu::ffi::service_socket().is_some(), "service mode");
    // A 128x96 NV12 frame with a 160-byte row stride, and two ROIs.
    let (w, hgt, stride) = (128usize, 96usize, 160usize);
    let mut frame = vec![0u8; stride * hgt * 3 / 2];
    for (k, v) in frame.iter_mut().enumerate() {
        *v = (k % 251) as u8;
    }
    let rois = [
        Roi {
            left: 0,
            top: 0,
            right: 63,
            bottom: 63,
        },
        Roi {
            left: 64,
            top: 32,
            right: 127,
            bottom: 95,
        },
    ];

    // The reference: the runtime's own ROI entry point in this process.
    let local = PackedModel::load_files(std::slice::from_ref(&model)).unwrap();
    let m = local.models[0].clone();
    let per_roi = m.outputs[0].aligned_byte_size;
    let mut want = vec![0u8; 2 * per_roi];
    {
        let rt = Runtime::with_config(SchedConfig::default()).unwrap();
        let (y, uv) = frame.split_at_mut(stride * hgt);
        let f = RoiFrame {
            y: IoBuffer::from_slice(y),
            uv: IoBuffer::from_slice(uv),
            width: w,
            height: hgt,
            y_stride: stride,
            uv_stride: stride,
        };
        let t = rt
            .submit_roi(
                &m,
                f,
                &rois,
                &[IoBuffer::from_slice(&mut want)],
                CtrlParams::default(),
            )
            .unwrap();
        t.wait(None).unwrap();
        t.release().unwrap();
    }

    let (p, h, ip, op) = load(&model);
    let mut fp = ip;
    fp.validShape.dimensionSize[2] = hgt as i32;
    fp.validShape.dimensionSize[3] = w as i32;
    fp.alignedShape = fp.validShape;
    fp.alignedShape.dimensionSize[3] = stride as i32;
    let mut op2 = op;
    op2.validShape.dimensionSize[0] = 2;
    let mut c_rois = rois.map(|r| hbDNNRoi {
        left: r.left,
        top: r.top,
        right: r.right,
        bottom: r.bottom,
    });
    let mut run = |frame: *mut u8, out: *mut u8| {
        let input = tensor_at(fp, frame.cast(), stride * hgt * 3 / 2);
        let inputs = [input, input];
        let mut output = tensor_at(op2, out.cast(), 2 * per_roi);
        let mut o: *mut hbDNNTensor = &mut output;
        let mut c = ctrl(0, 0);
        let mut t = null_mut();
        // SAFETY: valid pointers; one frame per ROI; the memory outlives the task.
        unsafe {
            assert_eq!(
                hbDNNRoiInfer(
                    &mut t,
                    &mut o,
                    inputs.as_ptr(),
                    c_rois.as_mut_ptr(),
                    2,
                    h,
                    &mut c
                ),
                0,
                "{}",
                last_error_detail()
            );
            assert_eq!(hbDNNWaitTaskDone(t, 0), 0);
            assert_eq!(hbDNNReleaseTask(t), 0);
        }
    };
    // Heap frame and output.
    let mut got = vec![0u8; 2 * per_roi];
    run(frame.as_mut_ptr(), got.as_mut_ptr());
    assert_eq!(got, want, "heap memory");
    let staged = service_staged_bytes();
    assert!(staged > 0, "crops and heap outputs are staged");
    // hbSysAllocMem frame and output: the output lands in shared memory.
    let zero = hbSysMem {
        phyAddr: 0,
        virAddr: null_mut(),
        memSize: 0,
    };
    let (mut fm, mut om) = (zero, zero);
    // SAFETY: valid out-pointers; the copy stays inside the allocation.
    unsafe {
        assert_eq!(hbSysAllocMem(&mut fm, frame.len() as u32), 0);
        assert_eq!(hbSysAllocMem(&mut om, (2 * per_roi) as u32), 0);
        assert_eq!(
            hbSysWriteMem(&mut fm, frame.as_mut_ptr().cast(), frame.len() as u32),
            0
        );
    }
    run(fm.virAddr.cast(), om.virAddr.cast());
    // SAFETY: `om` holds 2 * per_roi bytes.
    let shared = unsafe { std::slice::from_raw_parts(om.virAddr as *const u8, 2 * per_roi) };
    assert_eq!(shared, &want[..], "hbSysAllocMem memory");
    // SAFETY: live memory and pack, released once.
    unsafe {
        assert_eq!(hbSysFreeMem(&mut fm), 0);
        assert_eq!(hbSysFreeMem(&mut om), 0);
        assert_eq!(hbDNNRelease(p), 0);
    }
    println!("child: staged {staged} bytes");
    println!("child: done");
}
