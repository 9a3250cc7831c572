//! NVML's clock event ("throttle") reasons, `nvmlClocksEventReason*` in `nvml.h`: the
//! one table of their bits and names, read by the start-time inventory, the cuda
//! backend's GEMM sampling and the runtime watch.
//!
//! Each reason has two names, both kept because both are already in gpuvet's output:
//! `nvml.h`'s name in lower case (`hw_thermal_slowdown`) in device details and
//! start-time findings, and the short name gpu-fryer and DCGM print (`HW_THERMAL`) in
//! the watch's check names, messages and metric labels.

use serde::{Deserialize, Serialize};

pub const GPU_IDLE: u64 = 0x1;
pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
pub const SW_POWER_CAP: u64 = 0x4;
pub const HW_SLOWDOWN: u64 = 0x8;
pub const SYNC_BOOST: u64 = 0x10;
pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;

/// Reasons that mean the hardware or its cooling is in trouble, as gpu-fryer
/// (`are_gpus_healthy`) counts them: `HW_SLOWDOWN`, `HW_THERMAL`, `SW_THERMAL`.
pub const FAULTS: u64 = HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN;

/// [`FAULTS`] plus the power brake, which an external power supervisor asserts: the
/// node's power supply, not the GPU.
pub const ABNORMAL: u64 = FAULTS | HW_POWER_BRAKE_SLOWDOWN;

/// One clock event reason bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClockEventReason {
    GpuIdle,
    ApplicationsClocksSetting,
    SwPowerCap,
    HwSlowdown,
    SyncBoost,
    SwThermalSlowdown,
    HwThermalSlowdown,
    HwPowerBrakeSlowdown,
    DisplayClockSetting,
    /// Bits the table does not know (newer drivers).
    Unknown(u64),
}

/// One row of [`TABLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockEvent {
    pub bit: u64,
    pub reason: ClockEventReason,
    /// `nvml.h`'s name in lower case: `hw_thermal_slowdown`.
    pub name: &'static str,
    /// gpu-fryer's and DCGM's short name: `HW_THERMAL`.
    pub label: &'static str,
    /// For a person.
    pub explanation: &'static str,
}

const fn row(
    bit: u64,
    reason: ClockEventReason,
    name: &'static str,
    label: &'static str,
    explanation: &'static str,
) -> ClockEvent {
    ClockEvent {
        bit,
        reason,
        name,
        label,
        explanation,
    }
}

/// The known reasons, in bit order.
pub const TABLE: [ClockEvent; 9] = [
    row(
        GPU_IDLE,
        ClockEventReason::GpuIdle,
        "gpu_idle",
        "GPU_IDLE",
        "idle",
    ),
    row(
        APPLICATIONS_CLOCKS_SETTING,
        ClockEventReason::ApplicationsClocksSetting,
        "applications_clocks_setting",
        "APPLICATIONS_CLOCKS_SETTING",
        "application clocks set below maximum",
    ),
    row(
        SW_POWER_CAP,
        ClockEventReason::SwPowerCap,
        "sw_power_cap",
        "SW_POWER_CAP",
        "at the power limit",
    ),
    row(
        HW_SLOWDOWN,
        ClockEventReason::HwSlowdown,
        "hw_slowdown",
        "HW_SLOWDOWN",
        "hardware slowdown (power brake, overheating or a failing power supply)",
    ),
    row(
        SYNC_BOOST,
        ClockEventReason::SyncBoost,
        "sync_boost",
        "SYNC_BOOST",
        "held to a sync-boost group's clock",
    ),
    row(
        SW_THERMAL_SLOWDOWN,
        ClockEventReason::SwThermalSlowdown,
        "sw_thermal_slowdown",
        "SW_THERMAL",
        "driver thermal limit (GPU or memory too hot)",
    ),
    row(
        HW_THERMAL_SLOWDOWN,
        ClockEventReason::HwThermalSlowdown,
        "hw_thermal_slowdown",
        "HW_THERMAL",
        "hardware thermal slowdown (too hot)",
    ),
    row(
        HW_POWER_BRAKE_SLOWDOWN,
        ClockEventReason::HwPowerBrakeSlowdown,
        "hw_power_brake_slowdown",
        "HW_POWER_BRAKE",
        "external power brake asserted",
    ),
    row(
        DISPLAY_CLOCK_SETTING,
        ClockEventReason::DisplayClockSetting,
        "display_clock_setting",
        "DISPLAY_CLOCK_SETTING",
        "display clock setting",
    ),
];

/// Every bit [`TABLE`] knows.
pub const KNOWN: u64 = {
    let mut bits = 0;
    let mut i = 0;
    while i < TABLE.len() {
        bits |= TABLE[i].bit;
        i += 1;
    }
    bits
};

impl ClockEventReason {
    /// Its row in [`TABLE`]; `None` for [`ClockEventReason::Unknown`].
    pub fn row(self) -> Option<&'static ClockEvent> {
        TABLE.iter().find(|e| e.reason == self)
    }

    /// The short name ([`ClockEvent::label`]); `UNKNOWN` for unknown bits.
    pub fn as_str(self) -> &'static str {
        self.row().map_or("UNKNOWN", |e| e.label)
    }

    /// One of [`FAULTS`]; the others are normal operation (idle, power cap, boost, ...).
    pub fn is_fault(self) -> bool {
        self.row().is_some_and(|e| e.bit & FAULTS != 0)
    }
}

/// The rows of the bits set in `bits`, in bit order.
fn rows_set(bits: u64) -> impl Iterator<Item = &'static ClockEvent> {
    TABLE.iter().filter(move |e| bits & e.bit != 0)
}

/// The set bits [`TABLE`] does not know, if any.
fn unknown_bits(bits: u64) -> Option<u64> {
    Some(bits & !KNOWN).filter(|b| *b != 0)
}

/// Every reason set in `bits`, in bit order; unknown bits come last as one
/// [`ClockEventReason::Unknown`]. A value with several bits set yields all of them.
pub fn decode(bits: u64) -> Vec<ClockEventReason> {
    rows_set(bits)
        .map(|e| e.reason)
        .chain(unknown_bits(bits).map(ClockEventReason::Unknown))
        .collect()
}

/// The lower-case names of the set bits, in bit order; unknown bits as `0x...`.
pub fn names(bits: u64) -> Vec<String> {
    rows_set(bits)
        .map(|e| e.name.to_owned())
        .chain(unknown_bits(bits).map(|b| format!("{b:#x}")))
        .collect()
}

/// `HW_SLOWDOWN | HW_THERMAL`: the short names for the watch's messages; `NONE` when
/// no bit is set.
pub fn labels_text(bits: u64) -> String {
    let labels: Vec<String> = rows_set(bits)
        .map(|e| e.label.to_owned())
        .chain(unknown_bits(bits).map(|b| format!("UNKNOWN(0x{b:x})")))
        .collect();
    if labels.is_empty() {
        "NONE".to_owned()
    } else {
        labels.join(" | ")
    }
}

/// Why the clocks are held down, for a person; `None` when nothing but idleness is.
pub fn explain(bits: u64) -> Option<String> {
    let parts: Vec<&str> = rows_set(bits & !GPU_IDLE).map(|e| e.explanation).collect();
    (!parts.is_empty()).then(|| format!("clocks held down: {}", parts.join("; ")))
}

/// `0x<bits> (<names>)`, the form stored in device details.
pub fn format(bits: u64) -> String {
    let names = names(bits);
    if names.is_empty() {
        format!("{bits:#x} (none)")
    } else {
        format!("{bits:#x} ({})", names.join(","))
    }
}

/// Reads [`format()`]'s output (or a bare number) back.
pub fn parse(text: &str) -> Option<u64> {
    let number = text.split_whitespace().next()?;
    match number.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => number.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_bits_have_names_and_explanations() {
        assert_eq!(names(0), Vec::<String>::new());
        assert_eq!(
            names(SW_POWER_CAP | HW_SLOWDOWN),
            ["sw_power_cap", "hw_slowdown"]
        );
        assert_eq!(names(0x1000), ["0x1000"]);
        assert_eq!(explain(GPU_IDLE), None);
        let text = explain(HW_THERMAL_SLOWDOWN).unwrap();
        assert!(text.contains("too hot"), "{text}");
        for bits in [0, 0x4, 0x28, 0x1004] {
            assert_eq!(parse(&format(bits)), Some(bits));
        }
        assert_eq!(format(0x24), "0x24 (sw_power_cap,sw_thermal_slowdown)");
        assert_eq!(parse("12"), Some(12));
        assert_eq!(parse("bogus"), None);
    }

    #[test]
    fn combined_bits_decode_to_all_reasons() {
        let r = decode(0x8 | 0x20 | 0x40 | 0x4);
        assert_eq!(
            r,
            vec![
                ClockEventReason::SwPowerCap,
                ClockEventReason::HwSlowdown,
                ClockEventReason::SwThermalSlowdown,
                ClockEventReason::HwThermalSlowdown,
            ]
        );
        assert_eq!(decode(0), vec![]);
        assert_eq!(
            decode(0x1 | 0x1000),
            vec![ClockEventReason::GpuIdle, ClockEventReason::Unknown(0x1000)]
        );
        assert_eq!(labels_text(0x88), "HW_SLOWDOWN | HW_POWER_BRAKE");
        assert_eq!(labels_text(0), "NONE");
    }

    #[test]
    fn the_table_is_in_bit_order_and_agrees_with_the_fault_sets() {
        assert!(TABLE.windows(2).all(|w| w[0].bit < w[1].bit));
        assert_eq!(KNOWN, 0x1ff);
        let faults: Vec<&str> = TABLE
            .iter()
            .filter(|e| e.reason.is_fault())
            .map(|e| e.label)
            .collect();
        assert_eq!(faults, ["HW_SLOWDOWN", "SW_THERMAL", "HW_THERMAL"]);
        assert!(!ClockEventReason::Unknown(0x1000).is_fault());
        assert_eq!(ClockEventReason::Unknown(0x1000).as_str(), "UNKNOWN");
    }
}
