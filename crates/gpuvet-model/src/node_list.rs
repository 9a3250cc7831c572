//! Node names said briefly, in Slurm's hostlist syntax: the one way every report, page
//! and label folds a set of node names, so `node-[0-511,513-1023]` means the same
//! thing in the terminal, the HTML report, the server's pages and `SLURM_JOB_NODELIST`.
//!
//! - **Syntax.** A name is a prefix and its trailing decimal number. Names that share a
//!   prefix fold into one bracket of comma-separated numbers and ranges,
//!   `prefix[0-3,7,9-12]`; a prefix with one name is that name (`node-5`). Parts are
//!   joined by `,` with no space, as `scontrol show hostlist` prints them. Zero-padding
//!   is kept as a width, as Slurm reads it: a range is written with its first number's
//!   digits and every number in it has that many (`gpu-[01-04,07]`, `n[8-10]`), so
//!   `n7` and `n07` are different names and both come back.
//! - **Order.** Natural order ([`natural_key`]): by prefix, then by number (`node-2`
//!   before `node-10`), whatever order the names came in. A folded list is a set, so
//!   a caller that needs the group's rank order (who is rank 0, who the ring's
//!   neighbours are) lists the names itself; a report's `group.nodes` is in rank order.
//! - **Duplicates** count once.
//! - **Cut.** At most `max_parts` parts are listed, a part being a number or range
//!   inside a bracket or a name on its own; the rest are counted in words after the
//!   list: `node-[0,2,4] and 509 more`. What is listed is still a valid hostlist of
//!   exactly the listed nodes.
//! - **Not hostnames.** A name without a trailing number, with one too long for `u64`,
//!   or with `[`, `]`, `,` or whitespace in it is listed as it is, in its natural place.
//!   A list holding one of the last kind no longer parses as a hostlist.

use std::collections::{BTreeMap, BTreeSet};

/// The most parts the terminal report's group line lists (and the HTML report's
/// summary of it, which says the same).
pub const MAX_PARTS: usize = 8;

/// The sort key of natural order: by prefix, then by trailing number, then by the name
/// itself (so `node-07` and `node-7` keep a fixed order). A name without a trailing
/// number, or with one too long for `u64`, is all prefix.
pub fn natural_key(name: &str) -> (&str, Option<u64>, &str) {
    match split(name) {
        Some((prefix, number, _)) => (prefix, Some(number), name),
        None => (name, None, name),
    }
}

/// `names` folded into Slurm's hostlist syntax, in natural order, at most `max_parts`
/// parts (at least one), then ` and K more` when K nodes were not listed. See the
/// module's header for the rules.
pub fn fold_node_names<'a, S>(names: impl IntoIterator<Item = &'a S>, max_parts: usize) -> String
where
    S: AsRef<str> + ?Sized + 'a,
{
    let names: BTreeSet<&str> = names.into_iter().map(AsRef::as_ref).collect();
    let total = names.len();
    let mut budget = max_parts.max(1);
    let mut listed = 0usize;
    let mut out: Vec<String> = Vec::new();
    for unit in units(&names) {
        if budget == 0 {
            break;
        }
        match unit {
            Unit::Name(name) => {
                out.push(name.to_owned());
                listed += 1;
                budget -= 1;
            }
            Unit::Prefix(prefix, ranges) => {
                let shown = &ranges[..ranges.len().min(budget)];
                budget -= shown.len();
                let count: u64 = shown.iter().map(Range::len).sum();
                listed += usize::try_from(count).unwrap_or(usize::MAX);
                if count == 1 {
                    out.push(format!("{prefix}{}", shown[0]));
                } else {
                    let inside: Vec<String> = shown.iter().map(Range::to_string).collect();
                    out.push(format!("{prefix}[{}]", inside.join(",")));
                }
            }
        }
    }
    let list = out.join(",");
    match total.saturating_sub(listed) {
        0 => list,
        more => format!("{list} and {more} more"),
    }
}

/// `name` as (prefix, trailing number, its digits); `None` when it has no trailing
/// number, one too long for `u64`, or characters the hostlist syntax uses.
fn split(name: &str) -> Option<(&str, u64, &str)> {
    if name.contains(['[', ']', ',']) || name.contains(char::is_whitespace) {
        return None;
    }
    let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &name[prefix.len()..];
    let number = digits.parse().ok()?;
    Some((prefix, number, digits))
}

/// Consecutive numbers under one prefix, all written `width` digits wide (0: as they
/// are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    first: u64,
    last: u64,
    width: usize,
}

impl Range {
    fn len(&self) -> u64 {
        self.last - self.first + 1
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self.width;
        if self.first == self.last {
            write!(f, "{:0width$}", self.first)
        } else {
            write!(f, "{:0width$}-{:0width$}", self.first, self.last)
        }
    }
}

/// The sort key of natural order ([`natural_key`]).
type NaturalKey<'a> = (&'a str, Option<u64>, &'a str);

/// A part of the list before it is cut: a name on its own, or a prefix and its ranges.
#[derive(Debug)]
enum Unit<'a> {
    Name(&'a str),
    Prefix(&'a str, Vec<Range>),
}

/// The distinct `names` as units, in natural order: each prefix where its first name
/// sorts.
fn units<'a>(names: &BTreeSet<&'a str>) -> Vec<Unit<'a>> {
    let mut by_prefix: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    let mut units: Vec<(NaturalKey<'a>, Unit<'a>)> = Vec::new();
    for &name in names {
        match split(name) {
            Some((prefix, number, digits)) => {
                by_prefix.entry(prefix).or_default().push((number, digits))
            }
            None => units.push((natural_key(name), Unit::Name(name))),
        }
    }
    for (prefix, numbers) in by_prefix {
        let folded = ranges(&numbers);
        // Sorts where its first name does.
        let key = (prefix, Some(folded[0].first), "");
        units.push((key, Unit::Prefix(prefix, folded)));
    }
    units.sort_by(|a, b| a.0.cmp(&b.0));
    units.into_iter().map(|(_, unit)| unit).collect()
}

/// The numbers of one prefix (distinct names) as ranges, by first number. A number
/// with a leading zero has its width; one without joins a padded width it fills
/// exactly (`10` beside `08` and `09` is `08-10`), else it is written as it is.
fn ranges(numbers: &[(u64, &str)]) -> Vec<Range> {
    let padded = |digits: &str| digits.len() > 1 && digits.starts_with('0');
    let widths: BTreeSet<usize> = numbers
        .iter()
        .filter(|(_, d)| padded(d))
        .map(|(_, d)| d.len())
        .collect();
    let mut by_width: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for &(number, digits) in numbers {
        let width = if padded(digits) || widths.contains(&digits.len()) {
            digits.len()
        } else {
            0
        };
        by_width.entry(width).or_default().push(number);
    }
    let mut out = Vec::new();
    for (width, mut numbers) in by_width {
        numbers.sort_unstable();
        numbers.dedup();
        let mut at = 0;
        while at < numbers.len() {
            let first = numbers[at];
            let mut last = first;
            while at + 1 < numbers.len() && Some(numbers[at + 1]) == last.checked_add(1) {
                last = numbers[at + 1];
                at += 1;
            }
            out.push(Range { first, last, width });
            at += 1;
        }
    }
    // A plain range before a padded one with the same first number, as `n7` sorts
    // after `n07`: padded first.
    out.sort_by_key(|r| (r.first, std::cmp::Reverse(r.width)));
    out
}

#[cfg(test)]
mod tests;
