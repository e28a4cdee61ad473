//! Yield points: places inside long kernel loops (a GEMM's row blocks, a Winograd conv's
//! channel blocks, a direct conv's chunks of position tiles, a bf16 GEMM's row or depth
//! blocks) where the thread running them may pause for higher-priority work.
//!
//! The kernels only call [`yield_point`]; what it does is installed once by the runtime
//! ([`install`]): the intra-op pool's CPU-claim check, so that a low-priority FC steps
//! aside for a helper of a higher-priority one within tens of µs instead of at its next
//! node boundary (issue 13). Without an installed check a yield point is one atomic load.
//! Pausing never changes what a kernel computes.

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Installs the check every yield point calls (the first call wins; later ones are
/// ignored).
pub fn install(check: fn()) {
    let _ = HOOK.set(check);
}

/// A point where the calling thread may pause (see the module doc).
#[inline]
pub fn yield_point() {
    if let Some(check) = HOOK.get() {
        check();
    }
}
