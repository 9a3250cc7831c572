//! The GEMM's host side: deterministic random inputs encoded as the GPU reads them, the
//! f64 reference for any output entry, and the check of sampled outputs against it
//! with a tolerance set by the type's precision and the dot product's length.

use super::GemmType;

/// Both inputs of an n×n×n GEMM, encoded as the GPU reads them (little-endian).
#[derive(Debug)]
pub struct HostInputs {
    pub ty: GemmType,
    pub size: usize,
    /// k×m, column-major: column `i` (row `i` of Aᵀ) is `a[i*k .. (i+1)*k]`.
    pub a: Vec<u8>,
    /// k×n, column-major: column `j` is `b[j*k .. (j+1)*k]`.
    pub b: Vec<u8>,
}

impl HostInputs {
    /// Deterministic random inputs; generation is spread over the host's cores.
    pub fn generate(ty: GemmType, size: usize) -> HostInputs {
        let len = size * size;
        HostInputs {
            ty,
            size,
            a: generate(ty, len, 1),
            b: generate(ty, len, 2),
        }
    }

    /// Reference value of output (i, j) and the root sum of squares of its terms.
    pub fn reference(&self, i: usize, j: usize) -> (f64, f64) {
        let k = self.size;
        let mut sum = 0.0;
        let mut squares = 0.0;
        for l in 0..k {
            let term =
                input_value(self.ty, &self.a, i * k + l) * input_value(self.ty, &self.b, j * k + l);
            sum += term;
            squares += term * term;
        }
        (sum, squares.sqrt())
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [-1, 1) with 24 random bits.
fn uniform(r: u64) -> f32 {
    (r >> 40) as f32 * (2.0 / 16_777_216.0) - 1.0
}

/// One input element from 64 random bits, written into `out`.
fn encode(ty: GemmType, r: u64, out: &mut [u8]) {
    match ty {
        GemmType::Bf16 => {
            out.copy_from_slice(&half::bf16::from_f32(uniform(r)).to_bits().to_le_bytes())
        }
        GemmType::Fp16 => {
            out.copy_from_slice(&half::f16::from_f32(uniform(r)).to_bits().to_le_bytes())
        }
        // Ten mantissa bits: exactly what TF32 keeps, so no rounding happens on the GPU.
        GemmType::Tf32 => out.copy_from_slice(&(uniform(r).to_bits() & 0xFFFF_E000).to_le_bytes()),
        GemmType::Fp32 => out.copy_from_slice(&uniform(r).to_bits().to_le_bytes()),
        // e4m3 with exponent field 0..=7: magnitudes below 2, never NaN.
        GemmType::Fp8 => {
            out[0] = ((r & 1) << 7) as u8 | (((r >> 1) & 7) << 3) as u8 | ((r >> 4) & 7) as u8
        }
    }
}

fn generate(ty: GemmType, len: usize, stream: u64) -> Vec<u8> {
    let size = ty.input_bytes();
    let mut out = vec![0u8; len * size];
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 32);
    let per_thread = len.div_ceil(threads).max(1);
    // Distinct, far-apart offsets into one Weyl sequence for A and B.
    let base = stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    std::thread::scope(|scope| {
        for (t, chunk) in out.chunks_mut(per_thread * size).enumerate() {
            scope.spawn(move || {
                for (j, slot) in chunk.chunks_exact_mut(size).enumerate() {
                    let index = (t * per_thread + j) as u64;
                    encode(ty, splitmix(base.wrapping_add(index)), slot);
                }
            });
        }
    });
    out
}

/// e4m3 (`__nv_fp8_e4m3`): 1 sign, 4 exponent (bias 7), 3 mantissa bits.
pub fn e4m3_to_f64(byte: u8) -> f64 {
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((byte >> 3) & 0xF);
    let mantissa = f64::from(byte & 7);
    if exponent == 0xF && mantissa == 7.0 {
        return f64::NAN;
    }
    if exponent == 0 {
        sign * mantissa / 8.0 * 2f64.powi(-6)
    } else {
        sign * (1.0 + mantissa / 8.0) * 2f64.powi(exponent - 7)
    }
}

pub(super) fn input_value(ty: GemmType, bytes: &[u8], index: usize) -> f64 {
    let at = index * ty.input_bytes();
    match ty {
        GemmType::Bf16 => f64::from(
            half::bf16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32(),
        ),
        GemmType::Fp16 => {
            f64::from(half::f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32())
        }
        GemmType::Tf32 | GemmType::Fp32 => f64::from(f32::from_le_bytes(
            bytes[at..at + 4].try_into().expect("4 bytes"),
        )),
        GemmType::Fp8 => e4m3_to_f64(bytes[at]),
    }
}

/// One output value as the GPU wrote it.
pub fn output_value(ty: GemmType, bytes: &[u8]) -> f64 {
    match (ty, bytes.len()) {
        (GemmType::Bf16 | GemmType::Fp8, 2) => {
            f64::from(half::bf16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32())
        }
        (GemmType::Fp16, 2) => {
            f64::from(half::f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32())
        }
        (GemmType::Tf32 | GemmType::Fp32, 4) => {
            f64::from(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        }
        _ => f64::NAN,
    }
}

/// The output entries to check: the four corners and pseudo-random others.
pub fn sample_positions(m: usize, n: usize, count: usize) -> Vec<(usize, usize)> {
    if m == 0 || n == 0 {
        return Vec::new();
    }
    let mut positions = vec![(0, 0), (m - 1, n - 1), (0, n - 1), (m - 1, 0)];
    let mut r = 0x5EED_u64;
    while positions.len() < count.max(4) {
        r = splitmix(r);
        positions.push(((r % m as u64) as usize, ((r >> 32) % n as u64) as usize));
    }
    positions.sort_unstable();
    positions.dedup();
    positions
}

/// One checked output entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Checked {
    pub i: usize,
    pub j: usize,
    pub got: f64,
    pub reference: f64,
    /// Root sum of squares of the dot product's terms.
    pub scale: f64,
}

impl Checked {
    fn tolerance(&self, ty: GemmType) -> f64 {
        ty.output_eps() * self.reference.abs() + ty.accumulation_tolerance() * self.scale + 1e-30
    }

    fn error(&self) -> f64 {
        (self.got - self.reference).abs()
    }

    /// NaN errors count as wrong.
    fn is_wrong(&self, ty: GemmType) -> bool {
        let error = self.error();
        error.is_nan() || error > self.tolerance(ty)
    }
}

/// `None` when every entry is within tolerance, else what is wrong, worst entry first.
pub fn verify(ty: GemmType, entries: &[Checked]) -> Option<String> {
    let wrong: Vec<&Checked> = entries.iter().filter(|c| c.is_wrong(ty)).collect();
    let worst = wrong.iter().max_by(|a, b| {
        let ratio = |c: &Checked| {
            if c.error().is_nan() {
                f64::INFINITY
            } else {
                c.error() / c.tolerance(ty)
            }
        };
        ratio(a).total_cmp(&ratio(b))
    })?;
    Some(format!(
        "`c[{},{}]` = `{}` but the reference is `{}` (tolerance `{:.3e}`); {} of {} sampled entries are wrong",
        worst.i,
        worst.j,
        worst.got,
        worst.reference,
        worst.tolerance(ty),
        wrong.len(),
        entries.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::super::CHECKED_ENTRIES;
    use super::*;

    #[test]
    fn inputs_are_exact_in_their_type_and_deterministic() {
        for ty in [
            GemmType::Bf16,
            GemmType::Fp16,
            GemmType::Tf32,
            GemmType::Fp32,
            GemmType::Fp8,
        ] {
            let inputs = HostInputs::generate(ty, 16);
            assert_eq!(inputs.a.len(), 256 * ty.input_bytes());
            let again = HostInputs::generate(ty, 16);
            assert_eq!(inputs.a, again.a);
            assert_ne!(inputs.a, inputs.b, "{ty:?}");
            for index in 0..256 {
                let v = input_value(ty, &inputs.a, index);
                assert!(v.is_finite() && v.abs() < 2.0, "{ty:?} {v}");
            }
        }
        // TF32 inputs keep only 10 mantissa bits.
        let tf32 = HostInputs::generate(GemmType::Tf32, 8);
        for chunk in tf32.a.chunks_exact(4) {
            assert_eq!(u32::from_le_bytes(chunk.try_into().unwrap()) & 0x1FFF, 0);
        }
    }

    #[test]
    fn e4m3_decodes() {
        assert_eq!(e4m3_to_f64(0x38), 1.0); // exponent 7, mantissa 0
        assert_eq!(e4m3_to_f64(0xB8), -1.0);
        assert_eq!(e4m3_to_f64(0x3C), 1.5);
        assert_eq!(e4m3_to_f64(0x7E), 448.0); // the largest finite value
        assert_eq!(e4m3_to_f64(0x01), 2f64.powi(-9)); // smallest subnormal
        assert!(e4m3_to_f64(0x7F).is_nan());
        assert_eq!(e4m3_to_f64(0x00), 0.0);
    }

    #[test]
    fn outputs_decode_in_their_type() {
        let bf = half::bf16::from_f32(3.5).to_bits().to_le_bytes();
        assert_eq!(output_value(GemmType::Bf16, &bf), 3.5);
        assert_eq!(output_value(GemmType::Fp8, &bf), 3.5);
        assert_eq!(output_value(GemmType::Fp32, &2.25f32.to_le_bytes()), 2.25);
        assert!(output_value(GemmType::Fp32, &[0xFF; 4]).is_nan());
        assert!(output_value(GemmType::Bf16, &[0xFF; 2]).is_nan());
        assert!(output_value(GemmType::Fp32, &[0; 2]).is_nan());
    }

    #[test]
    fn sample_positions_cover_corners_and_stay_in_range() {
        let positions = sample_positions(100, 50, 64);
        assert!(positions.len() >= 60, "{}", positions.len());
        for corner in [(0, 0), (99, 49), (0, 49), (99, 0)] {
            assert!(positions.contains(&corner));
        }
        assert!(positions.iter().all(|(i, j)| *i < 100 && *j < 50));
        assert_eq!(sample_positions(1, 1, 64), [(0, 0)]);
        assert!(sample_positions(0, 5, 64).is_empty());
    }

    /// What a GPU computes: the exact product, rounded to the output type.
    fn simulate(ty: GemmType, inputs: &HostInputs, i: usize, j: usize) -> Checked {
        let (reference, scale) = inputs.reference(i, j);
        let got = match ty {
            GemmType::Bf16 | GemmType::Fp8 => f64::from(half::bf16::from_f64(reference).to_f32()),
            GemmType::Fp16 => f64::from(half::f16::from_f64(reference).to_f32()),
            GemmType::Tf32 | GemmType::Fp32 => f64::from(reference as f32),
        };
        Checked {
            i,
            j,
            got,
            reference,
            scale,
        }
    }

    #[test]
    fn correct_results_pass_and_corruption_fails() {
        for ty in [
            GemmType::Bf16,
            GemmType::Fp16,
            GemmType::Tf32,
            GemmType::Fp32,
            GemmType::Fp8,
        ] {
            let inputs = HostInputs::generate(ty, 256);
            let positions = sample_positions(256, 256, CHECKED_ENTRIES);
            let good: Vec<Checked> = positions
                .iter()
                .map(|&(i, j)| simulate(ty, &inputs, i, j))
                .collect();
            assert_eq!(verify(ty, &good), None, "{ty:?}");

            // A GEMM that never ran leaves the NaN fill.
            let nan: Vec<Checked> = good
                .iter()
                .map(|c| Checked {
                    got: f64::NAN,
                    ..*c
                })
                .collect();
            let message = verify(ty, &nan).unwrap();
            assert!(
                message.contains(&format!(
                    "{} of {} sampled entries are wrong",
                    nan.len(),
                    nan.len()
                )),
                "{message}"
            );

            // Zeros where the products should be: caught on most entries.
            let zeros: Vec<Checked> = good.iter().map(|c| Checked { got: 0.0, ..*c }).collect();
            let message = verify(ty, &zeros).unwrap();
            assert!(message.contains("sampled entries are wrong"), "{message}");

            // One entry off by 10 %.
            let mut one = good.clone();
            let target = one
                .iter()
                .position(|c| c.reference.abs() > c.scale * 0.5)
                .unwrap();
            one[target].got = one[target].reference * 1.1;
            let message = verify(ty, &one).unwrap();
            assert!(
                message.starts_with(&format!("`c[{},{}]`", one[target].i, one[target].j)),
                "{message}"
            );
            assert!(
                message.ends_with(&format!("1 of {} sampled entries are wrong", one.len())),
                "{message}"
            );
        }
    }
}
