//! The helper pool's protocol on recorded facts (which thread ran which chunk), never on
//! time: a chunk that must run beside another waits for it (with a generous limit that
//! only turns a hang into a failure).

use super::*;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;
use std::thread::ThreadId;

/// Waits until `flag` reaches `want`; panics after 20 s (a hang, not a timing check).
fn await_count(flag: &AtomicU32, want: u32) {
    let start = Instant::now();
    while flag.load(Ordering::Acquire) < want {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "chunks that must run side by side never met"
        );
        std::thread::yield_now();
    }
}

/// Runs `n` chunks where each waits until all `meet` first chunks started, so those must
/// run on `meet` different threads; returns the mask and the thread of each chunk.
fn run_meeting(pool: &Pool, n: usize, meet: u32) -> (u64, Vec<ThreadId>) {
    let started = AtomicU32::new(0);
    let mut parts: Vec<Option<ThreadId>> = vec![None; n];
    let mask = pool.run(&mut parts, &|i, p| {
        *p = Some(std::thread::current().id());
        if (i as u32) < meet {
            started.fetch_add(1, Ordering::AcqRel);
            await_count(&started, meet);
        }
    });
    (
        mask,
        parts
            .into_iter()
            .map(|p| p.expect("every chunk ran"))
            .collect(),
    )
}

#[test]
fn every_chunk_runs_once_and_results_equal_a_sequential_run() {
    let pool = Pool::new(3, usize::MAX);
    let mut seq = vec![0u64; 37];
    for (i, v) in seq.iter_mut().enumerate() {
        *v = (i as u64 * 7919) ^ 0x5555;
    }
    for round in 0..200 {
        let calls = AtomicU32::new(0);
        let mut out = vec![0u64; 37];
        let mask = pool.run(&mut out, &|i, v| {
            calls.fetch_add(1, Ordering::Relaxed);
            *v = (i as u64 * 7919) ^ 0x5555;
        });
        assert_eq!(calls.load(Ordering::Relaxed), 37, "round {round}");
        assert_eq!(out, seq, "round {round}");
        assert_eq!(mask >> 37, 0);
    }
}

#[test]
fn a_top_class_caller_hands_chunks_to_a_free_helper() {
    let pool = Pool::new(1, usize::MAX);
    let me = std::thread::current().id();
    for _ in 0..20 {
        // Two chunks that must meet: one ran here, the other on the helper.
        let scope = enter(HostClass::Top);
        let (mask, who) = run_meeting(&pool, 2, 2);
        let counts = scope.finish();
        assert_eq!(mask.count_ones(), 1);
        for (i, t) in who.iter().enumerate() {
            assert_eq!(*t != me, mask & (1 << i) != 0, "chunk {i}");
        }
        assert_eq!((counts.chunks, counts.on_helpers), (2, 1));
    }
}

#[test]
fn a_helper_running_top_class_chunks_holds_a_cpu_claim() {
    let pool = Pool::new(1, usize::MAX);
    let me = std::thread::current().id();
    let claims_on_helper = AtomicUsize::new(usize::MAX);
    let started = AtomicU32::new(0);
    let scope = enter(HostClass::Top);
    let mut parts = vec![(); 2];
    let mask = pool.run(&mut parts, &|_, _| {
        // The two chunks meet, so one of them runs on the helper.
        started.fetch_add(1, Ordering::AcqRel);
        await_count(&started, 2);
        if std::thread::current().id() != me {
            claims_on_helper.store(claim::total(), Ordering::Release);
        }
    });
    scope.finish();
    assert_eq!(mask.count_ones(), 1);
    assert!(claims_on_helper.load(Ordering::Acquire) >= 1);
}

#[test]
fn callers_sharing_one_helper_never_take_back_each_others_offers() {
    // Two callers race for one helper thousands of times: a caller that revoked the
    // other's offer (instead of its own) left that caller waiting forever.
    let pool = Pool::new(1, usize::MAX);
    let ran = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                let scope = enter(HostClass::Top);
                for _ in 0..3000 {
                    let mut parts = vec![0u8; 2];
                    pool.run(&mut parts, &|i, p| {
                        // A little work, so that the helper often attaches and ends
                        // about when the caller ends its own chunk.
                        let mut x = i as u64;
                        for k in 0..2000u64 {
                            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(k));
                        }
                        *p += 1 + (x == u64::MAX) as u8;
                        ran.fetch_add(1, Ordering::Relaxed);
                    });
                    assert_eq!(parts, [1, 1], "each chunk exactly once");
                }
                scope.finish();
            });
        }
    });
    assert_eq!(ran.load(Ordering::Relaxed), 2 * 3000 * 2);
}

#[test]
fn a_low_class_caller_runs_every_chunk_itself() {
    let pool = Pool::new(2, usize::MAX);
    let scope = enter(HostClass::Low);
    let me = std::thread::current().id();
    let mut parts = vec![None; 5];
    let mask = pool.run(&mut parts, &|_, p| *p = Some(std::thread::current().id()));
    assert_eq!(mask, 0);
    assert!(parts.iter().all(|t| *t == Some(me)));
    let counts = scope.finish();
    assert_eq!((counts.chunks, counts.on_helpers), (5, 0));
}

#[test]
fn no_chunk_goes_to_a_helper_when_no_cpu_is_free() {
    // One CPU: the caller itself fills it, so no helper may take a chunk.
    let pool = Pool::new(2, 1);
    let me = std::thread::current().id();
    for _ in 0..50 {
        let mut parts = vec![None; 4];
        let mask = pool.run(&mut parts, &|_, p| *p = Some(std::thread::current().id()));
        assert_eq!(mask, 0);
        assert!(parts.iter().all(|t| *t == Some(me)));
    }
}

#[test]
fn a_busy_helper_is_not_waited_for() {
    // The only helper is held by a job whose chunk blocks until released; meanwhile a
    // second caller's chunks all run on that caller.
    let pool = Arc::new(Pool::new(1, usize::MAX));
    let (release, held) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let holder = {
        let (pool, release, held) = (pool.clone(), release.clone(), held.clone());
        std::thread::spawn(move || {
            let mut parts = vec![(); 2];
            pool.run(&mut parts, &|_, _| {
                // Both chunks meet (so the helper holds one), then wait for the release.
                held.fetch_add(1, Ordering::AcqRel);
                await_count(&held, 2);
                await_count(&release, 1);
            })
        })
    };
    await_count(&held, 2);
    let me = std::thread::current().id();
    let mut parts = vec![None; 3];
    let mask = pool.run(&mut parts, &|_, p| *p = Some(std::thread::current().id()));
    assert_eq!(mask, 0, "the busy helper took no chunk");
    assert!(parts.iter().all(|t| *t == Some(me)));
    release.store(1, Ordering::Release);
    assert_eq!(holder.join().expect("holder").count_ones(), 1);
}

#[test]
fn a_panicking_chunk_fails_the_run_and_the_pool_goes_on() {
    let pool = Pool::new(1, usize::MAX);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut parts = vec![(); 2];
        pool.run(&mut parts, &|i, _| {
            if i == 1 {
                panic!("chunk 1 fails");
            }
        })
    }));
    assert!(r.is_err());
    let seen = Mutex::new(Vec::new());
    let mut parts = vec![(); 4];
    pool.run(&mut parts, &|i, _| seen.lock().unwrap().push(i));
    let mut s = seen.into_inner().unwrap();
    s.sort_unstable();
    assert_eq!(s, vec![0, 1, 2, 3]);
}

#[test]
fn chunk_parts_split_the_output_and_hand_out_each_scratch_once() {
    let mut y = vec![0f32; 10];
    let mut scratch = vec![0f32; 3];
    // Helper scratch comes in cache lines of 16 floats: one line, then two.
    let mut helpers = vec![crate::exec::lines(4 * 4), crate::exec::lines(20 * 4)];
    let parts = chunk_parts([4, 4, 2].into_iter(), &mut y, &mut scratch, &mut helpers);
    let lens: Vec<(usize, usize)> = parts
        .iter()
        .take(4)
        .map(|p| p.as_ref().map_or((0, 0), |(a, b)| (a.len(), b.len())))
        .collect();
    assert_eq!(lens, vec![(4, 3), (4, 16), (2, 32), (0, 0)]);
    let starts_line = |p: &Option<(&mut [f32], &mut [f32])>| {
        p.as_ref()
            .is_some_and(|(_, s)| (s.as_ptr() as usize).is_multiple_of(64))
    };
    assert!(starts_line(&parts[1]) && starts_line(&parts[2]));
}

/// `chunk_ranges` covers the units exactly once with aligned, ordered ranges, at most one
/// per thread and none below the least work per chunk; too little work is not cut.
#[test]
fn chunk_ranges_cover_everything_in_aligned_ranges_of_enough_work() {
    for (len, align, us, threads) in [
        (70, 6, 1000, 2),
        (70, 6, 1000, 3),
        (1000, 16, 600, 4),
        (1000, 16, 3 * MIN_CHUNK_US, 8),
        (44, 8, 100_000, 64),
        (9, 8, 1000, 2),
    ] {
        let r = chunk_ranges(len, align, us, threads);
        let what = format!("{len} by {align}, {us} µs, {threads} threads: {r:?}");
        assert!(r.len() >= 2 && r.len() <= threads, "{what}");
        assert!(r.len() <= us / MIN_CHUNK_US, "{what}");
        assert_eq!(r[0].0, 0, "{what}");
        assert_eq!(r[r.len() - 1].1, len, "{what}");
        for w in r.windows(2) {
            assert_eq!(w[0].1, w[1].0, "{what}");
        }
        for &(lo, hi) in &r {
            assert!(lo < hi && lo % align == 0, "{what}");
        }
    }
    assert!(chunk_ranges(1000, 16, 2 * MIN_CHUNK_US - 1, 4).is_empty());
    assert!(chunk_ranges(1000, 16, 100_000, 1).is_empty());
    assert!(chunk_ranges(16, 16, 100_000, 4).is_empty());
}

#[test]
fn a_measured_scope_counts_its_chunks_time_off_the_cpu_wherever_they_ran() {
    // Each chunk sleeps 5 ms (off its CPU by any measure), on the caller or on the helper:
    // the two shares add up to both sleeps; the caller's own wait for the helper is not
    // counted.
    off_cpu::start();
    let pool = Pool::new(1, usize::MAX);
    let scope = enter(HostClass::Top);
    let mut parts = vec![0u8; 2];
    pool.run(&mut parts, &|_, _| {
        std::thread::sleep(Duration::from_millis(5))
    });
    let counts = scope.finish();
    off_cpu::stop();
    let off = counts.off_cpu.expect("measured while a recorder runs");
    let sum = u64::from(off.own_us) + u64::from(off.helpers_us);
    assert!(sum >= 9_500, "{off:?}");
    // Unmeasured: no figure.
    let scope = enter(HostClass::Low);
    if !off_cpu::measuring() {
        assert_eq!(scope.finish().off_cpu, None);
    }
}
