//! Reference GEMM for the `gemm_flops` benchmark: the `gemm` crate called directly on
//! one thread, with nothing of gpuvet around it (no correctness sampling, no runner).
//! Prints the median TFLOPS of `ITERATIONS` f32 multiplications of size N³.
//!
//! `cargo run --release -p gpuvet-backend --example gemm_reference -- 1024`

use std::time::Instant;

const ITERATIONS: usize = 20;

#[allow(clippy::print_stdout)]
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i * 104_729) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut c = vec![0.0_f32; n * n];
    let mut tflops = Vec::with_capacity(ITERATIONS);
    for iteration in 0..=ITERATIONS {
        let started = Instant::now();
        // SAFETY: all three buffers hold n×n row-major f32 values.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                n as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        let seconds = started.elapsed().as_secs_f64();
        if iteration > 0 {
            tflops.push(2.0 * (n as f64).powi(3) / seconds / 1e12);
        }
    }
    tflops.sort_by(f64::total_cmp);
    println!("{:.6}", tflops[tflops.len() / 2]);
}
