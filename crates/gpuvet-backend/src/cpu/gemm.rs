//! GEMM throughput on one host thread, with the result checked.
//!
//! Every timed output is checked at sampled entries twice: against an f64 reference
//! dot product (a wrong answer), and against the same entries of the warm-up output
//! (silent corruption, as gpu-burn checks repeated results against the first).

use std::collections::BTreeMap;
use std::time::Instant;

use gemm::{Parallelism, f16};
use gpuvet_model::analysis::CONTENTION_EXTRA;
use gpuvet_model::config::Dtype;
use gpuvet_model::stats::median;

use super::contention::{WaitClock, share_pct};
use super::{IterationBudget, try_filled};
use crate::sim::SplitMix64;
use crate::{BackendError, CancelToken, Sample, WorkSpec};

/// m = n = k when the work spec leaves it open: about 20 ms per f32 iteration on one
/// core, so the budget below reaches steady state in well under a second.
const DEFAULT_SIZE: usize = 1024;
/// Untimed work before the timed iterations (at least one iteration).
const WARM_UP_SECONDS: f64 = 0.3;
const BUDGET: IterationBudget = IterationBudget {
    min_iterations: 5,
    max_iterations: 50,
    min_seconds: 0.25,
};
/// Output entries checked after every iteration; a few dot products cost nothing next
/// to the GEMM itself.
const CHECKED_ENTRIES: usize = 32;
/// Absolute slack for entries whose products nearly cancel.
const ABSOLUTE_TOLERANCE: f64 = 1e-6;

/// Fixed seeds, so every device multiplies the same matrices.
const SEED_A: u64 = 0xa;
const SEED_B: u64 = 0xb;
const SEED_POSITIONS: u64 = 0xc;

/// An element type the `gemm` crate multiplies.
trait Element: Copy + PartialEq + 'static {
    const DTYPE: Dtype;
    /// Allowed error of an output entry, relative to Σ|a_ik·b_kj|. f32 accumulation
    /// stays far below 1e-4 for any size the config allows; f16 outputs are rounded to
    /// 11 significant bits (≈ 5e-4), and some targets also accumulate in f16.
    const RELATIVE_TOLERANCE: f64;
    const ZERO: Self;
    const ONE: Self;
    fn from_f32(value: f32) -> Self;
    fn to_f64(self) -> f64;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::Fp32;
    const RELATIVE_TOLERANCE: f64 = 1e-4;
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    fn from_f32(value: f32) -> Self {
        value
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Element for f16 {
    const DTYPE: Dtype = Dtype::Fp16;
    const RELATIVE_TOLERANCE: f64 = 1e-2;
    const ZERO: Self = f16::ZERO;
    const ONE: Self = f16::ONE;
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// The shape of `c (m×n) = a (m×k) · b (k×n)`, all row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
}

impl Shape {
    fn flops(self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

pub(super) fn run(work: &WorkSpec, cancel: &CancelToken) -> Result<Sample, BackendError> {
    let size = work.gemm_size.map_or(DEFAULT_SIZE, |size| size as usize);
    let shape = Shape {
        m: size,
        n: size,
        k: size,
    };
    match work.gemm_dtype {
        Dtype::Auto | Dtype::Fp32 => measure::<f32>(shape, cancel),
        Dtype::Fp16 => measure::<f16>(shape, cancel),
        unsupported @ (Dtype::Bf16 | Dtype::Tf32 | Dtype::Fp8) => {
            Err(BackendError::Unsupported(format!(
                "the cpu backend has no {} GEMM; use `fp32` or `fp16`",
                unsupported.as_str()
            )))
        }
    }
}

fn measure<T: Element>(shape: Shape, cancel: &CancelToken) -> Result<Sample, BackendError> {
    cancel.check()?;
    if shape.m == 0 {
        return Err(BackendError::Failed(
            "the GEMM size must be at least 1".to_owned(),
        ));
    }
    let elements = shape.m.checked_mul(shape.n).ok_or_else(|| {
        BackendError::Failed(format!("a {0}×{0} GEMM does not fit in memory", shape.m))
    })?;
    let a = random_matrix::<T>(elements, SEED_A)?;
    let b = random_matrix::<T>(elements, SEED_B)?;
    let mut c = try_filled(elements, "the GEMM output", |_| T::ZERO)?;
    let positions = checked_positions(shape, CHECKED_ENTRIES, SEED_POSITIONS);
    cancel.check()?;

    // Warm up by time, not by count: a core that was idle needs a few hundred
    // milliseconds of work before it runs at its steady clock (measured here: the first
    // ~0.25 s of a fresh process ran at about half the rate of the rest).
    let warm_up_started = Instant::now();
    multiply(shape, &a, &b, &mut c);
    while warm_up_started.elapsed().as_secs_f64() < WARM_UP_SECONDS {
        cancel.check()?;
        multiply(shape, &a, &b, &mut c);
    }
    let mut wrong_result = first_wrong_entry(shape, &a, &b, &c, &positions, T::RELATIVE_TOLERANCE);
    let first_output: Vec<T> = positions.iter().map(|&(i, j)| c[i * shape.n + j]).collect();

    let mut samples = Vec::new();
    let mut timed_seconds = 0.0;
    let started = Instant::now();
    let clock = WaitClock::start();
    while BUDGET.wants_more(samples.len(), started.elapsed().as_secs_f64()) {
        cancel.check()?;
        let iteration_start = Instant::now();
        multiply(shape, &a, &b, &mut c);
        // A clock that did not advance must not produce an infinite rate.
        let seconds = iteration_start.elapsed().as_secs_f64().max(1e-9);
        timed_seconds += seconds;
        samples.push(shape.flops() / seconds / 1e12);
        if wrong_result.is_none() {
            wrong_result =
                first_changed_entry(shape.n, &c, &positions, &first_output, samples.len());
        }
    }

    let mut extra = BTreeMap::from([("seconds".to_owned(), timed_seconds)]);
    if let Some(share) = share_pct(&[clock.waited_ns()], started) {
        extra.insert(CONTENTION_EXTRA.to_owned(), share);
    }
    Ok(Sample {
        value: median(&samples).unwrap_or(0.0),
        wrong_result,
        extra,
        params: BTreeMap::from([
            ("dtype".to_owned(), T::DTYPE.as_str().to_owned()),
            ("m".to_owned(), shape.m.to_string()),
            ("n".to_owned(), shape.n.to_string()),
            ("k".to_owned(), shape.k.to_string()),
            ("iterations".to_owned(), samples.len().to_string()),
        ]),
        samples,
    })
}

/// Pseudo-random entries in [-1, 1), the same on every device and every run.
fn random_matrix<T: Element>(len: usize, seed: u64) -> Result<Vec<T>, BackendError> {
    let mut rng = SplitMix64::new(seed);
    try_filled(len, "a GEMM input", |_| {
        T::from_f32(rng.next_signed_unit_f32())
    })
}

/// The output entries to check: both corners (where edge tiles live), then random ones.
fn checked_positions(shape: Shape, count: usize, seed: u64) -> Vec<(usize, usize)> {
    let mut rng = SplitMix64::new(seed);
    let mut positions = vec![(0, 0), (shape.m - 1, shape.n - 1)];
    while positions.len() < count {
        positions.push((rng.next_below(shape.m), rng.next_below(shape.n)));
    }
    positions.truncate(count);
    positions
}

/// c = a · b on the calling thread only: one logical device is one core.
fn multiply<T: Element>(shape: Shape, a: &[T], b: &[T], c: &mut [T]) {
    let Shape { m, n, k } = shape;
    assert!(
        a.len() == m * k && b.len() == k * n && c.len() == m * n,
        "GEMM buffers do not match {shape:?}"
    );
    // Strides of row-major matrices: one element between columns, a row's length
    // between rows. Sizes are at most 65536, far inside isize.
    let (n_stride, k_stride) = (n as isize, k as isize);
    // SAFETY: the assert above keeps every access inside the three slices; `c` is
    // borrowed mutably, so it aliases neither input; `read_dst = false` means the
    // output's old contents are never read; `T` is f32 or f16, which the crate supports.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n_stride,
            false,
            a.as_ptr(),
            1,
            k_stride,
            b.as_ptr(),
            1,
            n_stride,
            // dst = alpha·dst + beta·lhs·rhs
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// The first checked entry of `c` that differs from an f64 reference dot product by
/// more than the tolerance, as a message for the report.
fn first_wrong_entry<T: Element>(
    shape: Shape,
    a: &[T],
    b: &[T],
    c: &[T],
    positions: &[(usize, usize)],
    relative_tolerance: f64,
) -> Option<String> {
    positions.iter().find_map(|&(i, j)| {
        let (reference, magnitude) = (0..shape.k).fold((0.0, 0.0), |(sum, magnitude), p| {
            let product = a[i * shape.k + p].to_f64() * b[p * shape.n + j].to_f64();
            (sum + product, magnitude + product.abs())
        });
        let got = c[i * shape.n + j].to_f64();
        // Written so that a NaN output fails too.
        let close = (got - reference).abs() <= relative_tolerance * magnitude + ABSOLUTE_TOLERANCE;
        (!close).then(|| {
            format!(
                "c[{i},{j}] = {} but the reference is {}",
                short(got),
                short(reference)
            )
        })
    })
}

/// The first checked entry of `c` that changed since the first output: the same
/// multiplication must give the same bits every time.
fn first_changed_entry<T: Element>(
    n: usize,
    c: &[T],
    positions: &[(usize, usize)],
    first_output: &[T],
    iteration: usize,
) -> Option<String> {
    positions
        .iter()
        .zip(first_output)
        .find_map(|(&(i, j), &first)| {
            let now = c[i * n + j];
            (now != first).then(|| {
            format!(
                "c[{i},{j}] = {} in iteration {iteration} but {} in the first run of the same GEMM",
                short(now.to_f64()),
                short(first.to_f64())
            )
        })
        })
}

/// The shortest text that tells two f32 values apart, e.g. `3.1` rather than
/// `3.0999999046325684`.
fn short(value: f64) -> String {
    (value as f32).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_product(size: usize) -> (Shape, Vec<f32>, Vec<f32>, Vec<f32>) {
        let shape = Shape {
            m: size,
            n: size,
            k: size,
        };
        let a = random_matrix::<f32>(size * size, SEED_A).unwrap();
        let b = random_matrix::<f32>(size * size, SEED_B).unwrap();
        let mut c = vec![0.0; size * size];
        multiply(shape, &a, &b, &mut c);
        (shape, a, b, c)
    }

    #[test]
    fn a_correct_product_passes_the_check() {
        let (shape, a, b, c) = small_product(48);
        let every_entry: Vec<(usize, usize)> =
            (0..48).flat_map(|i| (0..48).map(move |j| (i, j))).collect();
        assert_eq!(
            first_wrong_entry(shape, &a, &b, &c, &every_entry, f32::RELATIVE_TOLERANCE),
            None
        );
    }

    #[test]
    fn a_corrupted_entry_is_caught_and_named() {
        let (shape, a, b, mut c) = small_product(48);
        let positions = [(0, 0), (12, 40), (47, 47)];
        let index = 12 * 48 + 40;
        c[index] += 0.01;
        let message =
            first_wrong_entry(shape, &a, &b, &c, &positions, f32::RELATIVE_TOLERANCE).unwrap();
        assert!(message.starts_with("c[12,40] = "), "{message}");
        assert!(message.contains(" but the reference is "), "{message}");
        c[index] = f32::NAN;
        assert!(
            first_wrong_entry(shape, &a, &b, &c, &positions, f32::RELATIVE_TOLERANCE).is_some()
        );
        // An entry that is not sampled cannot be seen; the check is a sample.
        assert_eq!(
            first_wrong_entry(shape, &a, &b, &c, &[(0, 0)], f32::RELATIVE_TOLERANCE),
            None
        );
    }

    #[test]
    fn a_changed_repeat_is_caught_as_corruption() {
        let (shape, _, _, mut c) = small_product(16);
        let positions = checked_positions(shape, 8, SEED_POSITIONS);
        let first: Vec<f32> = positions.iter().map(|&(i, j)| c[i * 16 + j]).collect();
        assert_eq!(first_changed_entry(16, &c, &positions, &first, 3), None);
        let (i, j) = positions[4];
        c[i * 16 + j] = 3.1;
        let message = first_changed_entry(16, &c, &positions, &first, 3).unwrap();
        assert!(
            message.starts_with(&format!("c[{i},{j}] = 3.1 in iteration 3 but ")),
            "{message}"
        );
    }

    #[test]
    fn checked_positions_include_the_corners_and_stay_inside() {
        let shape = Shape { m: 5, n: 3, k: 9 };
        let positions = checked_positions(shape, 32, 1);
        assert_eq!(positions.len(), 32);
        assert_eq!(&positions[..2], &[(0, 0), (4, 2)]);
        assert!(positions.iter().all(|&(i, j)| i < 5 && j < 3));
        assert_eq!(
            checked_positions(Shape { m: 1, n: 1, k: 1 }, 1, 1),
            vec![(0, 0)]
        );
    }

    #[test]
    fn messages_use_short_numbers() {
        assert_eq!(short(f64::from(3.1f32)), "3.1");
        assert_eq!(short(-2.5), "-2.5");
    }

    #[test]
    fn a_small_fp32_gemm_is_fast_and_right() {
        let work = WorkSpec {
            gemm_size: Some(64),
            ..WorkSpec::default()
        };
        let sample = run(&work, &CancelToken::new()).unwrap();
        assert!(sample.value > 0.0 && sample.value.is_finite(), "{sample:?}");
        assert!(sample.samples.len() >= BUDGET.min_iterations);
        assert_eq!(sample.wrong_result, None);
        assert_eq!(sample.params["dtype"], "fp32");
        assert_eq!(sample.params["m"], "64");
        assert_eq!(
            sample.params["iterations"],
            sample.samples.len().to_string()
        );
    }

    #[test]
    fn a_small_fp16_gemm_is_right() {
        let work = WorkSpec {
            gemm_dtype: Dtype::Fp16,
            gemm_size: Some(64),
            ..WorkSpec::default()
        };
        let sample = run(&work, &CancelToken::new()).unwrap();
        assert!(sample.value > 0.0, "{sample:?}");
        assert_eq!(sample.wrong_result, None);
        assert_eq!(sample.params["dtype"], "fp16");
    }

    #[test]
    fn odd_sizes_multiply_correctly() {
        let work = WorkSpec {
            gemm_size: Some(37),
            ..WorkSpec::default()
        };
        assert_eq!(run(&work, &CancelToken::new()).unwrap().wrong_result, None);
    }

    #[test]
    fn dtypes_without_a_cpu_gemm_are_unsupported() {
        for (dtype, name) in [
            (Dtype::Bf16, "bf16"),
            (Dtype::Tf32, "tf32"),
            (Dtype::Fp8, "fp8"),
        ] {
            let work = WorkSpec {
                gemm_dtype: dtype,
                ..WorkSpec::default()
            };
            assert_eq!(
                run(&work, &CancelToken::new()),
                Err(BackendError::Unsupported(format!(
                    "the cpu backend has no {name} GEMM; use `fp32` or `fp16`"
                )))
            );
        }
    }

    #[test]
    fn a_cancelled_token_stops_before_any_work() {
        let cancel = CancelToken::new();
        cancel.cancel();
        // The default size: a cancelled run must not pay for allocating it.
        assert_eq!(
            run(&WorkSpec::default(), &cancel),
            Err(BackendError::Cancelled)
        );
    }

    #[test]
    fn a_zero_size_is_an_error_not_a_panic() {
        let work = WorkSpec {
            gemm_size: Some(0),
            ..WorkSpec::default()
        };
        assert!(matches!(
            run(&work, &CancelToken::new()),
            Err(BackendError::Failed(_))
        ));
    }
}
