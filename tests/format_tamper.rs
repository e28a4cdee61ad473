//! Files whose manifest was edited and resealed (checksums recomputed) either fail to
//! load with a clean error, or load and run without panicking: no file that loads can
//! break an executor invariant. Mutations are deterministic (fixed-seed LCG) over the
//! golden file's manifest bytes.

use std::path::Path;
use std::sync::Arc;

use vnpu::exec::{ModelPlan, PlanOptions};

fn golden() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/small_v2.vnpu"))
        .expect("golden file")
}

fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes")) as usize
}

#[test]
fn resealed_manifest_edits_never_load_into_a_panic() {
    let base = golden();
    let (moff, mlen) = (u64_at(&base, 16), u64_at(&base, 24));
    let mut seed = 0x5EED_u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    let (mut loaded, mut refused) = (0, 0);
    for _ in 0..3000 {
        let mut b = base.clone();
        for _ in 0..1 + next() % 3 {
            let at = moff + (next() as usize) % mlen;
            b[at] = match next() % 4 {
                0 => b[at] ^ (1 << (next() % 8)),
                1 => b[at].wrapping_add(1),
                2 => b[at].wrapping_sub(1),
                _ => next() as u8,
            };
        }
        vnpu::format::reseal(&mut b);
        let Ok(models) = vnpu::format::read_models(&b, "tampered") else {
            refused += 1;
            continue;
        };
        loaded += 1;
        for m in models {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let g = Arc::new(m.graph.clone());
                if let Ok(plan) = ModelPlan::new(g, &PlanOptions::default()) {
                    let mut st = plan.new_state();
                    let _ = plan.run_all(&mut st);
                }
            }));
            assert!(r.is_ok(), "a resealed file loaded and then panicked");
        }
    }
    // Most single-byte edits of a manifest are refused; some (names, estimates) load.
    assert!(
        refused > 0 && loaded > 0,
        "refused {refused}, loaded {loaded}"
    );
}
