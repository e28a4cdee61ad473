//! The configuration and trace calls through the C ABI, in a process of its own (the
//! settings and the runtime are process-wide): valid values, values out of range,
//! malformed values and unknown keys give the documented codes and details; runtime-start
//! keys are fixed once the runtime started; tasks being assembled (`more = 1`) count
//! against `HB_MAX_TASK_NUM`; `dspCoreId = -1` is accepted; the trace can be started,
//! stopped and dumped from C.

mod capi_support;

use std::ffi::{c_char, CStr, CString};
use std::ptr::null_mut;

use capi_support::{first_model, props, tensor};
use vnpu::error::codes::*;
use vnpu::ffi::*;

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/tiny_classifier.onnx");

fn set(key: &str, value: Option<&str>) -> i32 {
    let k = CString::new(key).unwrap();
    let v = value.map(|v| CString::new(v).unwrap());
    // SAFETY: NUL-terminated strings (or NULL) alive for the call.
    unsafe {
        vnpuSetConfig(
            k.as_ptr(),
            v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()),
        )
    }
}

fn get(key: &str) -> Result<String, i32> {
    let k = CString::new(key).unwrap();
    let mut buf = [0 as c_char; 256];
    // SAFETY: a writable buffer of the size given.
    match unsafe { vnpuGetConfig(k.as_ptr(), buf.as_mut_ptr(), buf.len() as i32) } {
        // SAFETY: NUL-terminated by the call on success.
        0 => Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()),
        rc => Err(rc),
    }
}

fn detail() -> String {
    last_error_detail()
}

#[test]
fn config_calls_trace_calls_and_the_assembly_limit() {
    // Valid values round-trip; NULL goes back to the default.
    assert_eq!(set("HB_DNN_BPU_SCHEDULE_THRESHOLD", Some("25")), 0);
    assert_eq!(get("HB_DNN_BPU_SCHEDULE_THRESHOLD").unwrap(), "25");
    assert_eq!(set("HB_DNN_BPU_SCHEDULE_THRESHOLD", None), 0);
    assert_eq!(get("HB_DNN_BPU_SCHEDULE_THRESHOLD").unwrap(), "10");
    assert_eq!(get("VNPU_CACHE_DIR").unwrap(), "");
    // Out of range, malformed, unknown, NULL: documented code, detail, nothing changed.
    assert_eq!(set("VNPU_CORES", Some("1")), 0);
    assert_eq!(set("VNPU_CORES", Some("33")), HB_DNN_INVALID_ARGUMENT);
    let d = detail();
    assert!(
        d.contains("VNPU_CORES") && d.contains("33") && d.contains("1..=32"),
        "{d}"
    );
    assert_eq!(get("VNPU_CORES").unwrap(), "1");
    assert_eq!(set("VNPU_CORE_NICE", Some("-21")), HB_DNN_INVALID_ARGUMENT);
    assert!(detail().contains("-20..=19"), "{}", detail());
    assert_eq!(
        set("VNPU_PIN_CORES", Some("maybe")),
        HB_DNN_INVALID_ARGUMENT
    );
    assert!(detail().contains("VNPU_PIN_CORES"), "{}", detail());
    assert_eq!(set("VNPU_NO_SUCH_KEY", Some("1")), HB_DNN_INVALID_ARGUMENT);
    assert!(detail().contains("unknown key"), "{}", detail());
    assert_eq!(get("VNPU_NO_SUCH_KEY"), Err(HB_DNN_INVALID_ARGUMENT));
    assert_eq!(
        // SAFETY: NULL key is a documented error.
        unsafe { vnpuSetConfig(std::ptr::null(), std::ptr::null()) },
        HB_DNN_INVALID_ARGUMENT
    );
    let k = CString::new("VNPU_CORES").unwrap();
    let mut small = [0 as c_char; 1];
    // SAFETY: a writable buffer of the size given.
    let rc = unsafe { vnpuGetConfig(k.as_ptr(), small.as_mut_ptr(), 1) };
    assert_eq!(rc, HB_DNN_INVALID_ARGUMENT);
    assert!(detail().contains("needs 2"), "{}", detail());
    assert_eq!(small[0], 0, "nothing written on error");

    // Runtime-start keys take effect when the runtime starts, then are fixed.
    assert_eq!(set("HB_MAX_TASK_NUM", Some("2")), 0);
    // SAFETY: plain calls.
    assert_eq!(unsafe { vnpuTraceStart() }, 0);
    assert_eq!(set("VNPU_CORES", Some("2")), HB_DNN_API_USE_ERROR);
    assert!(detail().contains("VNPU_CORES"), "{}", detail());
    assert_eq!(get("VNPU_CORES").unwrap(), "1");
    // Model-load keys still change.
    assert_eq!(set("VNPU_INTRA_OP_THREADS", Some("2")), 0);
    assert_eq!(
        set("VNPU_INTRA_OP_THREADS", Some("65")),
        HB_DNN_INVALID_ARGUMENT
    );

    // Tasks being assembled count against HB_MAX_TASK_NUM (2 here).
    let path = CString::new(MODEL).unwrap();
    let mut names = [path.as_ptr()];
    let mut p = null_mut();
    assert_eq!(
        // SAFETY: one valid path.
        unsafe { hbDNNInitializeFromFiles(&mut p, names.as_mut_ptr(), 1) },
        0
    );
    let h = first_model(p);
    let (inp, outp) = (props(h, false, 0), props(h, true, 0));
    let mut x = vec![0u8; inp.alignedByteSize as usize];
    let input = tensor(inp, &mut x);
    let mut bufs: Vec<Vec<u8>> = (0..4)
        .map(|_| vec![0u8; outp.alignedByteSize as usize])
        .collect();
    let mut outs: Vec<hbDNNTensor> = bufs.iter_mut().map(|b| tensor(outp, b)).collect();
    let mut ctrl = hbDNNInferCtrlParam {
        bpuCoreId: 0,
        dspCoreId: -1,
        priority: 0,
        more: 1,
        customId: 0,
        reserved1: 0,
        reserved2: 0,
    };
    let mut building = [null_mut(); 2];
    for (i, t) in building.iter_mut().enumerate() {
        let mut o: *mut hbDNNTensor = &mut outs[i];
        // SAFETY: valid pointers; memory outlives the tasks.
        let rc = unsafe { hbDNNInfer(t, &mut o, &input, h, &mut ctrl) };
        assert_eq!(rc, 0, "{}", detail());
    }
    ctrl.more = 0;
    let mut third = null_mut();
    let mut o: *mut hbDNNTensor = &mut outs[2];
    // SAFETY: as above.
    let rc = unsafe { hbDNNInfer(&mut third, &mut o, &input, h, &mut ctrl) };
    assert_eq!(rc, HB_DNN_TASK_NUM_EXCEED_LIMIT, "{}", detail());
    assert!(third.is_null());
    // SAFETY: a live handle of a task being assembled.
    assert_eq!(unsafe { hbDNNReleaseTask(building[0]) }, 0);
    // SAFETY: as above; dspCoreId = -1 is accepted (ignored).
    let rc = unsafe { hbDNNInfer(&mut third, &mut o, &input, h, &mut ctrl) };
    assert_eq!(rc, 0, "{}", detail());
    // Finishing the chain submits it in the slot it already holds.
    let mut o: *mut hbDNNTensor = &mut outs[3];
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            hbDNNInfer(&mut building[1], &mut o, &input, h, &mut ctrl),
            0
        );
        assert_eq!(hbDNNWaitTaskDone(building[1], 0), 0);
        assert_eq!(hbDNNWaitTaskDone(third, 0), 0);
        assert_eq!(hbDNNReleaseTask(building[1]), 0);
        assert_eq!(hbDNNReleaseTask(third), 0);
    }

    // The trace holds the tasks' events; stop and dump from C.
    let out = std::env::temp_dir().join(format!("vnpu-ffi-config-{}.json", std::process::id()));
    let out_c = CString::new(out.to_str().unwrap()).unwrap();
    // SAFETY: plain calls with a valid path.
    unsafe {
        assert_eq!(vnpuTraceStop(), 0);
        assert_eq!(vnpuTraceDump(out_c.as_ptr()), 0);
        assert_eq!(vnpuTraceDump(std::ptr::null()), HB_DNN_API_USE_ERROR);
        let bad = CString::new("/nonexistent-dir/x.json").unwrap();
        assert_eq!(vnpuTraceDump(bad.as_ptr()), HB_DNN_CAN_NOT_OPEN_FILE);
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let _ = std::fs::remove_file(&out);
    let events = json["traceEvents"].as_array().unwrap();
    assert!(events
        .iter()
        .any(|e| e["name"].as_str().is_some_and(|n| n.starts_with("done"))));
    // SAFETY: a live packed handle.
    assert_eq!(unsafe { hbDNNRelease(p) }, 0);
}
