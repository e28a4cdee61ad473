//! Shared support of the integration tests that build their own tensors: deterministic
//! pseudo-random data.

/// `n` floats in `[-1, 1)` from a xorshift seeded with `seed` (the same sequence on every
/// host).
pub fn rand_f32(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}
