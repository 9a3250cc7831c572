//! The SVG chart of one check: one value per entity (GPU, node or pair), drawn against
//! the median of the measured values and the baseline limit when the check has one,
//! with slow and faulty entities in their own colours and named.
//!
//! Up to [`MAX_BARS`] entities get a bar each. Beyond that a bar per entity would be
//! unreadable and the page would grow with the group, so the chart becomes the sorted
//! profile of the values (worst on the left, at most [`PROFILE_BUCKETS`] buckets) with
//! the findings marked on it: its size stays bounded at 1,024 nodes and more.

use gpuvet_model::analysis::fmt_value;
use gpuvet_model::catalog::Direction;
use gpuvet_model::results::{CheckResult, Entity, EntityResult, Verdict};

use crate::{escape, verdict_name};

/// The most entities drawn as one bar each.
pub const MAX_BARS: usize = 64;
/// The most buckets of the sorted profile; each contributes its two ends to the line.
pub const PROFILE_BUCKETS: usize = 200;
/// The most findings named in one chart; the findings table lists every one.
pub const MAX_LABELS: usize = 12;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 270.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 120.0;
const TOP: f64 = 14.0;
/// Room under the plot for the bars' rotated names, or the profile's axis caption.
const BARS_BOTTOM: f64 = 78.0;
const PROFILE_BOTTOM: f64 = 30.0;

/// Maps values to the vertical pixel axis, from zero to a round number at or above
/// the largest value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// The value drawn at the top of the plot.
    pub max: f64,
    /// Pixel row of the top of the plot.
    pub top: f64,
    /// Pixel row of zero.
    pub bottom: f64,
}

impl Scale {
    /// A scale from zero to [`round_up`]`(largest)`, drawn between `top` and `bottom`.
    pub fn new(largest: f64, top: f64, bottom: f64) -> Self {
        Scale {
            max: round_up(largest),
            top,
            bottom,
        }
    }

    /// The pixel row of `value`; values outside `0..=max` sit on the nearer edge, so a
    /// wild value cannot draw outside the chart.
    pub fn y(&self, value: f64) -> f64 {
        let fraction = if value.is_finite() {
            (value / self.max).clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.bottom - fraction * (self.bottom - self.top)
    }

    /// The values of the horizontal grid lines, from zero to the top in round steps:
    /// fifths of a top of 1, 2.5 or 5 (times a power of ten), quarters of a top of 2.
    pub fn ticks(&self) -> Vec<f64> {
        let mantissa = self.max / 10f64.powf(self.max.log10().floor());
        let steps = if (mantissa - 2.0).abs() < 1e-9 { 4 } else { 5 };
        (0..=steps)
            .map(|i| self.max * i as f64 / steps as f64)
            .collect()
    }
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten that is at least `value`; 1 for
/// nothing positive, so an all-zero check still has an axis.
pub fn round_up(value: f64) -> f64 {
    if !(value.is_finite() && value > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&step| step >= value * (1.0 - 1e-12))
        .unwrap_or(10.0 * power)
}

/// The chart of `check`, or `None` when it measured nothing to draw.
pub fn svg(check: &CheckResult) -> Option<String> {
    let measured: Vec<(usize, f64)> = check
        .entities
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e.measurement.value.filter(|v| v.is_finite())?)))
        .collect();
    if measured.is_empty() {
        return None;
    }
    let lines = ReferenceLines::of(check);
    let largest = measured
        .iter()
        .map(|&(_, v)| v)
        .chain(lines.median)
        .chain(lines.limit)
        .fold(0.0, f64::max);
    let unit = &check.metric.unit;
    let mut out = format!(
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" xmlns="http://www.w3.org/2000/svg"><title>{} per entity ({})</title>"#,
        escape(check.name.as_str()),
        escape(unit)
    );
    let bottom_margin = if check.entities.len() <= MAX_BARS {
        BARS_BOTTOM
    } else {
        PROFILE_BOTTOM
    };
    let scale = Scale::new(largest, TOP, HEIGHT - bottom_margin);
    axis(&mut out, &scale, unit);
    if check.entities.len() <= MAX_BARS {
        bars(&mut out, check, &scale);
    } else {
        profile(&mut out, check, &measured, &scale);
    }
    lines.draw(&mut out, &scale, unit);
    out.push_str("</svg>");
    Some(out)
}

/// The median of the measured values and the baseline's worst acceptable value.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ReferenceLines {
    median: Option<f64>,
    limit: Option<f64>,
    direction: Direction,
}

impl ReferenceLines {
    fn of(check: &CheckResult) -> Self {
        ReferenceLines {
            median: check.median_value(),
            // Every entity of a check is judged against the same baseline.
            limit: check.entities.iter().find_map(|e| e.evidence.baseline),
            direction: check.metric.direction,
        }
    }

    fn draw(&self, out: &mut String, scale: &Scale, unit: &str) {
        let limit_name = match self.direction {
            Direction::HigherIsBetter => "floor",
            Direction::LowerIsBetter => "ceiling",
        };
        let mut label_rows: Vec<f64> = Vec::new();
        for (class, name, value) in [
            ("median", "median", self.median),
            ("limit", limit_name, self.limit),
        ] {
            let Some(value) = value else { continue };
            let y = scale.y(value);
            // Two lines close together keep both labels readable.
            let label_y = match label_rows.last() {
                Some(&previous) if (y - previous).abs() < 12.0 => previous + 12.0,
                _ => y + 4.0,
            };
            label_rows.push(label_y);
            out.push_str(&format!(
                r#"<line class="{class}" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="{class}-label" x="{:.1}" y="{label_y:.1}">{name} {} {}</text>"#,
                WIDTH - RIGHT,
                WIDTH - RIGHT + 4.0,
                fmt_value(value),
                escape(unit)
            ));
        }
    }
}

fn axis(out: &mut String, scale: &Scale, unit: &str) {
    for tick in scale.ticks() {
        let y = scale.y(tick);
        out.push_str(&format!(
            r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}">{}</text>"#,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_value(tick)
        ));
    }
    out.push_str(&format!(
        r#"<text class="unit" x="12" y="{:.1}" transform="rotate(-90 12 {:.1})">{}</text>"#,
        (scale.top + scale.bottom) / 2.0,
        (scale.top + scale.bottom) / 2.0,
        escape(unit)
    ));
}

/// Short names when every entity is a GPU of one node (`dev3`), else the full ones.
fn entity_labels(entities: &[EntityResult]) -> Vec<String> {
    let one_node = entities.first().map(|e| e.entity.node());
    let all_devices_of_one_node = entities
        .iter()
        .all(|e| matches!(e.entity, Entity::Device { .. }) && Some(e.entity.node()) == one_node);
    entities
        .iter()
        .map(|e| match &e.entity {
            Entity::Device { index, .. } if all_devices_of_one_node => format!("dev{index}"),
            entity => entity.to_string(),
        })
        .collect()
}

fn tooltip(label: &str, entity: &EntityResult, unit: &str) -> String {
    let value = entity.measurement.value.map_or_else(
        || "no value".to_owned(),
        |v| format!("{} {unit}", fmt_value(v)),
    );
    escape(&format!(
        "{label}: {value} ({})",
        verdict_name(entity.verdict)
    ))
}

fn bars(out: &mut String, check: &CheckResult, scale: &Scale) {
    let labels = entity_labels(&check.entities);
    let band = (WIDTH - LEFT - RIGHT) / check.entities.len() as f64;
    let unit = &check.metric.unit;
    for (i, (entity, label)) in check.entities.iter().zip(&labels).enumerate() {
        let x = LEFT + band * i as f64;
        let center = x + band / 2.0;
        let class = verdict_name(entity.verdict);
        let title = tooltip(label, entity, unit);
        match entity.measurement.value.filter(|v| v.is_finite()) {
            Some(value) => {
                let y = scale.y(value);
                out.push_str(&format!(
                    r#"<rect class="bar {class}" x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}"><title>{title}</title></rect>"#,
                    x + band * 0.15,
                    band * 0.7,
                    scale.bottom - y
                ));
                if entity.verdict != Verdict::Ok {
                    out.push_str(&format!(
                        r#"<text class="value {class}" x="{center:.1}" y="{:.1}">{}</text>"#,
                        y - 4.0,
                        fmt_value(value)
                    ));
                }
            }
            // A measurement that failed has no bar: a cross on the axis marks it.
            None => out.push_str(&format!(
                r#"<text class="missing {class}" x="{center:.1}" y="{:.1}">✕<title>{title}</title></text>"#,
                scale.bottom - 3.0
            )),
        }
        let name_y = scale.bottom + 12.0;
        out.push_str(&format!(
            r#"<text class="name {class}" x="{center:.1}" y="{name_y:.1}" transform="rotate(-40 {center:.1} {name_y:.1})">{}</text>"#,
            escape(label)
        ));
    }
}

fn profile(out: &mut String, check: &CheckResult, measured: &[(usize, f64)], scale: &Scale) {
    // Worst first: ascending when higher is better, descending when lower is.
    let mut sorted = measured.to_vec();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    if check.metric.direction == Direction::LowerIsBetter {
        sorted.reverse();
    }
    let last = (sorted.len() - 1).max(1) as f64;
    let x = |rank: usize| LEFT + (WIDTH - LEFT - RIGHT) * rank as f64 / last;
    let mut points = String::new();
    for (bucket, values) in buckets(&sorted) {
        for (rank, value) in [
            (bucket.start, values[0].1),
            (bucket.end - 1, values[values.len() - 1].1),
        ] {
            points.push_str(&format!("{:.1},{:.1} ", x(rank), scale.y(value)));
        }
    }
    out.push_str(&format!(
        r#"<polyline class="profile" points="{}"/>"#,
        points.trim_end()
    ));
    let unmeasured = check.entities.len() - measured.len();
    out.push_str(&format!(
        r#"<text class="caption" x="{LEFT}" y="{:.1}">{} entities sorted worst to best{}</text>"#,
        HEIGHT - 8.0,
        measured.len(),
        if unmeasured > 0 {
            format!("; {unmeasured} without a value (see findings)")
        } else {
            String::new()
        }
    ));
    let mut named = 0;
    let unit = &check.metric.unit;
    for (rank, &(entity, value)) in sorted.iter().enumerate() {
        let result = &check.entities[entity];
        if result.verdict == Verdict::Ok {
            continue;
        }
        let label = result.entity.to_string();
        let class = verdict_name(result.verdict);
        let (cx, cy) = (x(rank), scale.y(value));
        out.push_str(&format!(
            r#"<circle class="dot {class}" cx="{cx:.1}" cy="{cy:.1}" r="4"><title>{}</title></circle>"#,
            tooltip(&label, result, unit)
        ));
        if named < MAX_LABELS {
            // Findings crowd the worst end: their names stack down from the top.
            let (lx, ly) = (cx + 14.0, TOP + 10.0 + 13.0 * named as f64);
            out.push_str(&format!(
                r#"<line class="leader" x1="{cx:.1}" y1="{cy:.1}" x2="{:.1}" y2="{:.1}"/><text class="tag {class}" x="{lx:.1}" y="{ly:.1}">{} {}</text>"#,
                lx - 2.0,
                ly - 4.0,
                escape(&label),
                fmt_value(value)
            ));
        }
        named += 1;
    }
    if named > MAX_LABELS {
        out.push_str(&format!(
            r#"<text class="tag" x="{:.1}" y="{:.1}">and {} more in the findings</text>"#,
            LEFT + 14.0,
            TOP + 10.0 + 13.0 * MAX_LABELS as f64,
            named - MAX_LABELS
        ));
    }
}

/// The sorted values cut into at most [`PROFILE_BUCKETS`] runs of consecutive ranks.
fn buckets(
    sorted: &[(usize, f64)],
) -> impl Iterator<Item = (std::ops::Range<usize>, &[(usize, f64)])> {
    let size = sorted.len().div_ceil(PROFILE_BUCKETS).max(1);
    sorted
        .chunks(size)
        .enumerate()
        .map(move |(i, chunk)| (i * size..i * size + chunk.len(), chunk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_up_picks_the_next_round_number() {
        let cases = [
            (0.93, 1.0),
            (1.0, 1.0),
            (1.2, 2.0),
            (2.3, 2.5),
            (3.0, 5.0),
            (7.1, 10.0),
            (1234.0, 2000.0),
            (0.0042, 0.005),
            (0.0, 1.0),
            (-3.0, 1.0),
            (f64::NAN, 1.0),
        ];
        for (value, expected) in cases {
            let got = round_up(value);
            assert!((got - expected).abs() < expected * 1e-9, "{value} -> {got}");
        }
    }

    #[test]
    fn scale_maps_zero_to_the_bottom_and_its_max_to_the_top() {
        let scale = Scale::new(180.0, 10.0, 210.0);
        assert_eq!(scale.max, 200.0);
        assert_eq!(scale.y(0.0), 210.0);
        assert_eq!(scale.y(200.0), 10.0);
        assert_eq!(scale.y(100.0), 110.0);
        assert_eq!(scale.ticks(), [0.0, 50.0, 100.0, 150.0, 200.0]);
        let steps = |largest: f64| Scale::new(largest, 0.0, 1.0).ticks();
        assert_eq!(steps(240.0), [0.0, 50.0, 100.0, 150.0, 200.0, 250.0]);
        assert_eq!(steps(0.7), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(steps(4.2), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn scale_keeps_wild_values_on_the_chart() {
        let scale = Scale::new(1.0, 0.0, 100.0);
        assert_eq!(scale.y(-5.0), 100.0);
        assert_eq!(scale.y(1e9), 0.0);
        assert_eq!(scale.y(f64::INFINITY), 100.0);
        assert_eq!(scale.y(f64::NAN), 100.0);
    }

    #[test]
    fn buckets_cover_every_rank_once_and_stay_bounded() {
        for n in [1, 2, 199, 200, 201, 8192] {
            let sorted: Vec<(usize, f64)> = (0..n).map(|i| (i, i as f64)).collect();
            let all: Vec<_> = buckets(&sorted).collect();
            assert!(all.len() <= PROFILE_BUCKETS, "{n}: {} buckets", all.len());
            let ranks: Vec<usize> = all.iter().flat_map(|(r, _)| r.clone()).collect();
            assert_eq!(ranks, (0..n).collect::<Vec<_>>(), "{n}");
            for (range, chunk) in &all {
                assert_eq!(chunk[0].0, range.start);
            }
        }
    }
}
