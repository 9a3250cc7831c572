//! Baseline figures per GPU model, each with its public source.
//!
//! A baseline is what a healthy GPU of a model reaches on a check's work, as measured
//! by someone else and published. It feeds the analysis as a floor (or a ceiling for
//! lower-is-better metrics) at a fraction of the figure, so a node whose GPUs are all
//! equally slow is still caught when there are no healthy peers to compare with.
//!
//! Only measured figures are listed, never datasheet peaks: achieved GEMM throughput is
//! 60–80 % of peak, so a floor from a peak would flag every healthy GPU. A figure that
//! has no public measurement is `None` rather than a guess. Config overrides take
//! precedence (`gpuvet.baselines`, see [`effective_limit`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::analysis::Limit;
use crate::catalog::{CheckName, Direction};
use crate::config::Dtype;

/// Default fraction of a baseline that still passes: 10 % below a GEMM or busbw figure,
/// or 1/0.9 above a latency, is slow. Looser than the peer tolerance because the figures
/// come from other machines, drivers and library versions.
pub const DEFAULT_FRACTION: f64 = 0.9;

/// The GEMM size the GEMM figures were measured at; smaller work does not reach them.
pub const GEMM_FIGURE_MIN_SIZE: u32 = 8192;

/// The number of GPUs per node the intra-node all-reduce figures were measured with.
pub const INTRA_NODE_FIGURE_GPUS: usize = 8;

/// A GPU model with baseline data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuModel {
    H100Sxm,
    H200,
    A100Sxm,
    L40s,
    B200,
}

impl GpuModel {
    pub const ALL: [GpuModel; 5] = [
        GpuModel::H100Sxm,
        GpuModel::H200,
        GpuModel::A100Sxm,
        GpuModel::L40s,
        GpuModel::B200,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GpuModel::H100Sxm => "h100_sxm",
            GpuModel::H200 => "h200",
            GpuModel::A100Sxm => "a100_sxm",
            GpuModel::L40s => "l40s",
            GpuModel::B200 => "b200",
        }
    }

    /// The model behind an NVML/CUDA device name (`NVIDIA H100 80GB HBM3`,
    /// `NVIDIA A100-SXM4-80GB`, ...). PCIe and NVL variants run at lower power and
    /// clocks, so they do not map to the SXM figures and return `None`.
    pub fn from_device_name(name: &str) -> Option<GpuModel> {
        let upper = name.trim().to_ascii_uppercase();
        let bare = upper
            .strip_prefix("NVIDIA")
            .map(str::trim_start)
            .unwrap_or(&upper);
        let words: Vec<&str> = bare
            .split(|c: char| c.is_whitespace() || c == '-')
            .filter(|w| !w.is_empty())
            .collect();
        let first = *words.first()?;
        let has = |word: &str| words.contains(&word);
        let is_pcie_or_nvl = has("PCIE") || has("NVL");
        match first {
            // SXM H100s report `NVIDIA H100 80GB HBM3` (PCIe: `NVIDIA H100 PCIe`, NVL:
            // `NVIDIA H100 NVL`); `H100 SXM5 ...` appears on some boards.
            "H100" if !is_pcie_or_nvl && (has("HBM3") || has("SXM") || has("SXM5")) => {
                Some(GpuModel::H100Sxm)
            }
            "H200" if !is_pcie_or_nvl => Some(GpuModel::H200),
            "A100" if !is_pcie_or_nvl && words.iter().any(|w| w.starts_with("SXM")) => {
                Some(GpuModel::A100Sxm)
            }
            "L40S" => Some(GpuModel::L40s),
            "B200" if !is_pcie_or_nvl => Some(GpuModel::B200),
            _ => None,
        }
    }
}

impl fmt::Display for GpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One published figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    pub value: f64,
    /// Where the figure comes from, precise enough to check it there.
    pub source: &'static str,
}

const fn fig(value: f64, source: &'static str) -> Option<Figure> {
    Some(Figure { value, source })
}

/// Dense GEMM throughput per precision, TFLOPS, 8192³ or larger.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GemmFigures {
    pub bf16: Option<Figure>,
    pub fp16: Option<Figure>,
    pub tf32: Option<Figure>,
    pub fp32: Option<Figure>,
    pub fp8: Option<Figure>,
}

/// Everything known about one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Baseline {
    pub model: GpuModel,
    pub gemm_tflops: GemmFigures,
    /// nccl-tests all-reduce busbw across the 8 GPUs of one node, GB/s, large messages.
    pub intra_node_all_reduce_busbw: Option<Figure>,
    /// Inter-node busbw one NIC (one rail) carries, GB/s.
    pub inter_node_busbw_per_nic: Option<Figure>,
    /// Empty-kernel launch latency, host wall time per synchronised launch, µs.
    pub launch_wall_us: Option<Figure>,
    /// The same launch timed by CUDA events, µs.
    pub launch_event_us: Option<Figure>,
}

const GPU_FRYER: &str = "huggingface/gpu-fryer README, reference table (cuBLASLt, 8192x8192)";
const GPU_FRYER_TF32: &str = "huggingface/gpu-fryer README, `FP32` row; gpu-fryer's f32 path is cudarc's cuBLASLt \
     `Matmul<f32>`, which computes in `CUBLAS_COMPUTE_32F_FAST_TF32`, i.e. TF32 tensor-core math";
const SUPERBENCH_NDV4: &str = "microsoft/superbench-results v0.4.0, Azure-NDv4-A100 baseline.json (gemm-flops, kernel-launch, nccl-bw)";
const NCCL_TESTS_212: &str =
    "NVIDIA/nccl-tests#212: 8xH100 NVLS all-reduce busbw about 480 GB/s (ring about 370)";
const NCCL_TESTS_290: &str =
    "NVIDIA/nccl-tests#290: NDR 400G InfiniBand carries 46-48 GB/s per NIC in NCCL";
const AZURE_H200: &str =
    "Azure/AI-benchmarking-guide, ND H200 v5: 8xH200 NCCL all-reduce 8 GB busbw 480 GB/s";
const H200_TORCH: &str = "torch.matmul bf16 8192^3 held for about a second (0.5 s warm-up, then \
     timed, as gemm_flops does) on an H200 SXM at its 700 W power limit: 665.5 TFLOPS, gpuvet's \
     own GEMM 671 in the same run (gpuvet docs/benchmarks.md, GPU; measured 2026-12-04)";
const NCCL_1807: &str = "NVIDIA/nccl#1807: 8xB200 all_reduce_perf reported at 830+ GB/s busbw";

const NO_GEMM: GemmFigures = GemmFigures {
    bf16: None,
    fp16: None,
    tf32: None,
    fp32: None,
    fp8: None,
};

/// The table. Every `Some` carries its source; see the module docs for what is left out.
pub const BASELINES: [Baseline; 5] = [
    Baseline {
        model: GpuModel::H100Sxm,
        gemm_tflops: GemmFigures {
            bf16: fig(730.0, GPU_FRYER),
            fp16: None,
            tf32: fig(373.0, GPU_FRYER_TF32),
            fp32: None,
            fp8: fig(1530.0, GPU_FRYER),
        },
        intra_node_all_reduce_busbw: fig(480.0, NCCL_TESTS_212),
        inter_node_busbw_per_nic: fig(46.0, NCCL_TESTS_290),
        launch_wall_us: None,
        launch_event_us: None,
    },
    Baseline {
        model: GpuModel::H200,
        gemm_tflops: GemmFigures {
            // Sustained, not a burst: ten products after three warm-ups reach 769-798
            // TFLOPS, before the power limit holds the clocks down.
            bf16: fig(665.5, H200_TORCH),
            ..NO_GEMM
        },
        intra_node_all_reduce_busbw: fig(480.0, AZURE_H200),
        // ND H200 v5 and HGX H200 boards use the same NDR 400G NICs as HGX H100.
        inter_node_busbw_per_nic: fig(46.0, NCCL_TESTS_290),
        launch_wall_us: None,
        launch_event_us: None,
    },
    Baseline {
        model: GpuModel::A100Sxm,
        gemm_tflops: GemmFigures {
            bf16: fig(265.9, SUPERBENCH_NDV4),
            fp16: fig(280.4, SUPERBENCH_NDV4),
            tf32: fig(128.2, SUPERBENCH_NDV4),
            fp32: None,
            fp8: None,
        },
        intra_node_all_reduce_busbw: fig(235.0, SUPERBENCH_NDV4),
        inter_node_busbw_per_nic: None,
        launch_wall_us: fig(9.6, SUPERBENCH_NDV4),
        launch_event_us: fig(5.7, SUPERBENCH_NDV4),
    },
    Baseline {
        model: GpuModel::L40s,
        gemm_tflops: NO_GEMM,
        intra_node_all_reduce_busbw: None,
        inter_node_busbw_per_nic: None,
        launch_wall_us: None,
        launch_event_us: None,
    },
    Baseline {
        model: GpuModel::B200,
        gemm_tflops: NO_GEMM,
        intra_node_all_reduce_busbw: fig(830.0, NCCL_1807),
        inter_node_busbw_per_nic: None,
        launch_wall_us: None,
        launch_event_us: None,
    },
];

/// The baseline of a model.
pub fn baseline(model: GpuModel) -> &'static Baseline {
    BASELINES
        .iter()
        .find(|b| b.model == model)
        .expect("every model has a row")
}

impl GemmFigures {
    /// The figure for a GEMM dtype; `Auto` means bf16, the GPU default.
    pub fn get(&self, dtype: Dtype) -> Option<Figure> {
        match dtype {
            Dtype::Auto | Dtype::Bf16 => self.bf16,
            Dtype::Fp16 => self.fp16,
            Dtype::Tf32 => self.tf32,
            Dtype::Fp32 => self.fp32,
            Dtype::Fp8 => self.fp8,
        }
    }
}

/// What the work of a check looked like, to decide whether a figure applies to it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub gemm_dtype: Dtype,
    /// `None`: the backend's default size, which for GPUs is at least 8192.
    pub gemm_size: Option<u32>,
    /// GPUs taking part in one node's all-reduce.
    pub gpus_per_node: usize,
}

/// The figure a check is held to on a model, if one applies to this workload.
pub fn figure_for(model: GpuModel, check: CheckName, workload: &Workload) -> Option<Figure> {
    let row = baseline(model);
    match check {
        CheckName::GemmFlops => {
            let big_enough = workload
                .gemm_size
                .is_none_or(|size| size >= GEMM_FIGURE_MIN_SIZE);
            if big_enough {
                row.gemm_tflops.get(workload.gemm_dtype)
            } else {
                None
            }
        }
        CheckName::KernelLaunch => row.launch_wall_us,
        CheckName::AllReduce1 if workload.gpus_per_node == INTRA_NODE_FIGURE_GPUS => {
            row.intra_node_all_reduce_busbw
        }
        // One communicator per rail: each carries what one NIC does.
        CheckName::MultiAllReduce2 | CheckName::MultiAllReduce => row.inter_node_busbw_per_nic,
        _ => None,
    }
}

/// Turns a figure into the worst acceptable value: `fraction` of it for
/// higher-is-better metrics, the figure divided by `fraction` for lower-is-better ones.
/// `fraction` must be in (0, 1].
pub fn limit_from(direction: Direction, figure: f64, fraction: f64) -> Limit {
    debug_assert!(fraction > 0.0 && fraction <= 1.0, "fraction {fraction}");
    match direction {
        Direction::HigherIsBetter => Limit::Floor(figure * fraction),
        Direction::LowerIsBetter => Limit::Ceiling(figure / fraction),
    }
}

/// The baseline limit of a check on a model, if a figure applies.
pub fn limit_for(
    model: GpuModel,
    check: CheckName,
    workload: &Workload,
    fraction: f64,
) -> Option<Limit> {
    let figure = figure_for(model, check, workload)?;
    Some(limit_from(
        check.spec().metric.direction,
        figure.value,
        fraction,
    ))
}

/// The limit the analysis should use: the configured one (`gpuvet.baselines`) when set,
/// else the model's baseline at `fraction`, else none.
pub fn effective_limit(
    check: CheckName,
    configured: &BTreeMap<CheckName, Limit>,
    model: Option<GpuModel>,
    workload: &Workload,
    fraction: f64,
) -> Option<Limit> {
    configured
        .get(&check)
        .copied()
        .or_else(|| limit_for(model?, check, workload, fraction))
}

/// The single model of a node's devices, when they all are the same known model.
pub fn model_of<'a>(device_names: impl IntoIterator<Item = &'a str>) -> Option<GpuModel> {
    let mut models = device_names.into_iter().map(GpuModel::from_device_name);
    let first = models.next()??;
    models.all(|m| m == Some(first)).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_WORK: Workload = Workload {
        gemm_dtype: Dtype::Auto,
        gemm_size: None,
        gpus_per_node: 8,
    };

    fn all_figures(b: &Baseline) -> Vec<Option<Figure>> {
        let g = b.gemm_tflops;
        vec![
            g.bf16,
            g.fp16,
            g.tf32,
            g.fp32,
            g.fp8,
            b.intra_node_all_reduce_busbw,
            b.inter_node_busbw_per_nic,
            b.launch_wall_us,
            b.launch_event_us,
        ]
    }

    #[test]
    fn every_figure_is_positive_and_has_a_source() {
        for row in &BASELINES {
            for figure in all_figures(row).into_iter().flatten() {
                assert!(figure.value.is_finite() && figure.value > 0.0, "{row:?}");
                assert!(
                    figure.source.len() > 20,
                    "{}: source too vague: {}",
                    row.model,
                    figure.source
                );
            }
        }
    }

    #[test]
    fn every_model_has_exactly_one_row() {
        for model in GpuModel::ALL {
            assert_eq!(
                BASELINES.iter().filter(|b| b.model == model).count(),
                1,
                "{model}"
            );
            assert_eq!(baseline(model).model, model);
        }
    }

    #[test]
    fn figures_match_reference_and_their_ordering_makes_sense() {
        let h100 = baseline(GpuModel::H100Sxm).gemm_tflops;
        assert_eq!(h100.bf16.unwrap().value, 730.0);
        assert!(h100.fp8.unwrap().value > h100.bf16.unwrap().value);
        assert!(h100.bf16.unwrap().value > h100.tf32.unwrap().value);
        let a100 = baseline(GpuModel::A100Sxm);
        assert_eq!(a100.gemm_tflops.tf32.unwrap().value, 128.2);
        assert!(a100.launch_wall_us.unwrap().value > a100.launch_event_us.unwrap().value);
        assert_eq!(
            baseline(GpuModel::H200)
                .intra_node_all_reduce_busbw
                .unwrap()
                .value,
            480.0
        );
        assert_eq!(
            baseline(GpuModel::H200).gemm_tflops.bf16.unwrap().value,
            665.5
        );
    }

    #[test]
    fn nvml_names_map_to_models() {
        let cases = [
            ("NVIDIA H100 80GB HBM3", Some(GpuModel::H100Sxm)),
            ("NVIDIA H100 SXM5 80GB", Some(GpuModel::H100Sxm)),
            ("NVIDIA H100 PCIe", None),
            ("NVIDIA H100 NVL", None),
            ("NVIDIA H200", Some(GpuModel::H200)),
            ("NVIDIA H200 NVL", None),
            ("NVIDIA A100-SXM4-80GB", Some(GpuModel::A100Sxm)),
            ("NVIDIA A100-SXM4-40GB", Some(GpuModel::A100Sxm)),
            ("NVIDIA A100-PCIE-40GB", None),
            ("NVIDIA A100 80GB PCIe", None),
            ("NVIDIA L40S", Some(GpuModel::L40s)),
            ("NVIDIA L40", None),
            ("NVIDIA B200", Some(GpuModel::B200)),
            ("NVIDIA GB200", None),
            ("NVIDIA GH200 480GB", None),
            ("  nvidia h200  ", Some(GpuModel::H200)),
            ("", None),
            ("Tesla V100-SXM2-16GB", None),
        ];
        for (name, expected) in cases {
            assert_eq!(GpuModel::from_device_name(name), expected, "{name:?}");
        }
    }

    #[test]
    fn a_node_has_a_model_only_when_all_its_gpus_agree() {
        assert_eq!(model_of(["NVIDIA H200"; 8]), Some(GpuModel::H200));
        assert_eq!(model_of(["NVIDIA H200", "NVIDIA H100 80GB HBM3"]), None);
        assert_eq!(model_of(["NVIDIA H200", "NVIDIA H200 NVL"]), None);
        assert_eq!(model_of(std::iter::empty()), None);
    }

    #[test]
    fn floors_and_ceilings_come_from_the_fraction() {
        let floor = limit_for(GpuModel::H200, CheckName::GemmFlops, &DEFAULT_WORK, 0.9).unwrap();
        assert_eq!(floor, Limit::Floor(665.5 * 0.9));
        let ceiling = limit_for(
            GpuModel::A100Sxm,
            CheckName::KernelLaunch,
            &DEFAULT_WORK,
            0.9,
        )
        .unwrap();
        match ceiling {
            Limit::Ceiling(v) => assert!((v - 9.6 / 0.9).abs() < 1e-12, "{v}"),
            other => panic!("expected a ceiling, got {other:?}"),
        }
        assert_eq!(
            limit_from(Direction::HigherIsBetter, 100.0, 1.0),
            Limit::Floor(100.0)
        );
    }

    #[test]
    fn figures_apply_only_to_the_work_they_were_measured_on() {
        let fp8 = Workload {
            gemm_dtype: Dtype::Fp8,
            ..DEFAULT_WORK
        };
        assert_eq!(
            figure_for(GpuModel::H100Sxm, CheckName::GemmFlops, &fp8)
                .unwrap()
                .value,
            1530.0
        );
        let small = Workload {
            gemm_size: Some(1024),
            ..DEFAULT_WORK
        };
        assert_eq!(
            figure_for(GpuModel::H100Sxm, CheckName::GemmFlops, &small),
            None
        );
        let big = Workload {
            gemm_size: Some(16384),
            ..DEFAULT_WORK
        };
        assert!(figure_for(GpuModel::H100Sxm, CheckName::GemmFlops, &big).is_some());
        let four_gpus = Workload {
            gpus_per_node: 4,
            ..DEFAULT_WORK
        };
        assert_eq!(
            figure_for(GpuModel::H200, CheckName::AllReduce1, &four_gpus),
            None
        );
        assert!(figure_for(GpuModel::H200, CheckName::AllReduce1, &DEFAULT_WORK).is_some());
        assert_eq!(
            figure_for(GpuModel::H200, CheckName::MultiAllReduce2, &DEFAULT_WORK)
                .unwrap()
                .value,
            46.0
        );
        assert_eq!(
            figure_for(
                GpuModel::H200,
                CheckName::NetworkConnectivity,
                &DEFAULT_WORK
            ),
            None
        );
        // No figure rather than a guess.
        assert_eq!(
            figure_for(GpuModel::L40s, CheckName::GemmFlops, &DEFAULT_WORK),
            None
        );
    }

    #[test]
    fn configured_limits_win_over_baselines() {
        let mut configured = BTreeMap::new();
        assert_eq!(
            effective_limit(
                CheckName::GemmFlops,
                &configured,
                Some(GpuModel::H200),
                &DEFAULT_WORK,
                0.9
            ),
            Some(Limit::Floor(665.5 * 0.9))
        );
        configured.insert(CheckName::GemmFlops, Limit::Floor(500.0));
        assert_eq!(
            effective_limit(
                CheckName::GemmFlops,
                &configured,
                Some(GpuModel::H200),
                &DEFAULT_WORK,
                0.9
            ),
            Some(Limit::Floor(500.0))
        );
        assert_eq!(
            effective_limit(CheckName::GemmFlops, &configured, None, &DEFAULT_WORK, 0.9),
            Some(Limit::Floor(500.0))
        );
        assert_eq!(
            effective_limit(
                CheckName::KernelLaunch,
                &configured,
                None,
                &DEFAULT_WORK,
                0.9
            ),
            None
        );
    }
}
