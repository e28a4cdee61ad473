//! The one way into the library from C: run a closure under `catch_unwind`, turn its
//! `Err` (or a panic) into the hbDNN status code and remember the error's text as the
//! calling thread's *last error detail* (`vnpuGetLastErrorDetail`).
//!
//! Also the small pointer helpers every export uses: NULL checks that name the
//! argument, and out-param writes that happen only after all checks succeeded.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, Result};

thread_local! {
    /// Detail of the last failing call on this thread (NUL-terminated for C).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `e` as this thread's last error detail.
pub(crate) fn set_last_error(e: &Error) {
    let text = e.to_string().replace('\0', "\\0");
    let c = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = c);
}

/// The text of this thread's last error (empty if none), for Rust callers and tests.
pub fn last_error_detail() -> String {
    LAST_ERROR.with(|slot| slot.borrow().to_string_lossy().into_owned())
}

/// Pointer to this thread's last error detail; valid until the next failing call on
/// this thread.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs `f` for a status-returning export: `Ok` → 0, `Err(e)` → `e.code()` (with the
/// detail stored), panic → `HB_DNN_RUN_TASK_FAILED`-class [`Error::Panic`].
pub(crate) fn status<F: FnOnce() -> Result<()>>(f: F) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_last_error(&e);
            e.code()
        }
        Err(payload) => {
            let e = Error::Panic(panic_message(payload));
            set_last_error(&e);
            e.code()
        }
    }
}

/// Runs `f` for an export that returns a value and cannot report a status (version
/// strings, tables): a panic yields `fallback` and is recorded as the last error.
pub(crate) fn value<T, F: FnOnce() -> T>(fallback: T, f: F) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            set_last_error(&Error::Panic(panic_message(payload)));
            fallback
        }
    }
}

/// Fails with [`Error::InvalidArgument`] naming `name` when `p` is NULL.
pub(crate) fn non_null<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        Err(Error::InvalidArgument {
            name: name.into(),
            reason: "is NULL".into(),
        })
    } else {
        Ok(())
    }
}

/// Same as [`non_null`] for the hbSys functions ([`Error::SysInvalidArgument`]).
pub(crate) fn sys_non_null<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        Err(Error::SysInvalidArgument(format!("{name} is NULL")))
    } else {
        Ok(())
    }
}

/// Writes an out-param (call only after every check has passed).
///
/// # Safety
/// `p` must be non-null, aligned and valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T) {
    // SAFETY: guaranteed by the caller.
    unsafe { p.write(v) }
}

/// Reads a C string argument as UTF-8.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, name: &str) -> Result<&'a str> {
    non_null(p, name)?;
    // SAFETY: non-null (checked) and NUL-terminated (caller's contract).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| Error::InvalidArgument {
        name: name.into(),
        reason: "is not valid UTF-8".into(),
    })
}

/// Checks a count argument: `1..=max`.
pub(crate) fn count(n: i32, name: &str, max: i32) -> Result<usize> {
    if n < 1 || n > max {
        Err(Error::InvalidArgument {
            name: name.into(),
            reason: format!("{n} is outside 1..={max}"),
        })
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_err_and_panic() {
        assert_eq!(status(|| Ok(())), 0);
        let code = status(|| Err(Error::ApiUse("sequence".into())));
        assert_eq!(code, crate::error::codes::HB_DNN_API_USE_ERROR);
        assert!(last_error_detail().contains("sequence"));
        let code = status(|| panic!("boom"));
        assert_eq!(code, crate::error::codes::HB_DNN_RUN_TASK_FAILED);
        assert!(last_error_detail().contains("boom"));
        assert_eq!(value(7, || panic!("x")), 7);
    }

    #[test]
    fn detail_is_per_thread() {
        status(|| Err(Error::ApiUse("main thread".into())));
        std::thread::spawn(|| {
            assert_eq!(last_error_detail(), "");
            status(|| Err(Error::ApiUse("other".into())));
            assert!(last_error_detail().contains("other"));
        })
        .join()
        .expect("thread");
        assert!(last_error_detail().contains("main thread"));
    }

    #[test]
    fn helpers() {
        assert!(non_null(std::ptr::null::<u8>(), "x").is_err());
        assert!(sys_non_null(std::ptr::null::<u8>(), "x").is_err());
        assert_eq!(count(3, "n", 5).expect("ok"), 3);
        assert!(count(0, "n", 5).is_err());
        assert!(count(6, "n", 5).is_err());
        let s = CString::new("abc").expect("cstring");
        // SAFETY: `s` is a valid NUL-terminated string.
        assert_eq!(unsafe { c_str(s.as_ptr(), "s") }.expect("utf8"), "abc");
        // SAFETY: NULL is allowed and rejected.
        assert!(unsafe { c_str(std::ptr::null(), "s") }.is_err());
    }
}
