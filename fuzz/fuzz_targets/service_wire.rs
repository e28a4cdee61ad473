//! Fuzzes the service-mode message decoders: any bytes must give `Ok` or a clean error,
//! and whatever decodes must encode back to the same bytes (the encoding is canonical).
#![no_main]
use libfuzzer_sys::fuzz_target;
use vnpu::service::wire::{Request, Response};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Request::decode(data) {
        assert_eq!(r.encode(), data);
    }
    if let Ok(r) = Response::decode(data) {
        assert_eq!(r.encode(), data);
    }
});
