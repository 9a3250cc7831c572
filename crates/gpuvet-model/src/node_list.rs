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
//!
//! [`expand_hostlist`] is the inverse: a hostlist as Slurm writes it
//! (`SLURM_JOB_NODELIST`) back into its names, in the order written, as
//! `scontrol show hostnames` prints them. It reads every list [`fold_node_names`] writes
//! (uncut), and also several brackets in one name (`rack[1-2]-n[01-02]`: every
//! combination, the last bracket counting fastest); it refuses what Slurm 22.05 reads
//! loosely or not at all: text after a name's last bracket, an empty or reversed range,
//! a stray `]`, whitespace, numbers past `u64`, and more than [`MAX_EXPANDED`] names.

use std::collections::{BTreeMap, BTreeSet};

/// The most parts the terminal report's group line lists (and the HTML report's
/// summary of it, which says the same).
pub const MAX_PARTS: usize = 8;

/// The most names [`expand_hostlist`] gives back: the most Slurm 22.05 reads in one
/// range (`n[0-65536]` is "Too many hosts in range"; docs/reference.md, "Slurm"), here
/// held to the whole list, so a typo such as `n[0-99999999]` is an error, not a
/// gigabyte of names.
pub const MAX_EXPANDED: usize = 64 * 1024;

/// Why a hostlist does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{list}` is not a hostlist: {reason}")]
pub struct HostlistError {
    pub list: String,
    pub reason: String,
}

/// The names of a hostlist such as `gpu-[01-04,07],login`, in the order written and
/// with duplicates kept, as `scontrol show hostnames` prints them. A range's numbers
/// are as wide as its first number is written (`n[08-10]` is `n08 n09 n10`, `n[8-10]`
/// is `n8 n9 n10`). Empty items (`a,,b`) are skipped, as Slurm skips them.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, HostlistError> {
    let fail = |reason: String| HostlistError {
        list: list.to_owned(),
        reason,
    };
    let mut names = Vec::new();
    for item in split_items(list).map_err(&fail)? {
        if item.is_empty() {
            continue;
        }
        let pieces = item_pieces(item).map_err(&fail)?;
        let count = pieces.iter().try_fold(1usize, |count, piece| match piece {
            Piece::Text(_) => Some(count),
            Piece::Numbers(numbers) => count.checked_mul(numbers.len()),
        });
        match count {
            Some(count) if names.len() + count <= MAX_EXPANDED => {}
            _ => {
                return Err(fail(format!("it names more than `{MAX_EXPANDED}` nodes")));
            }
        }
        combine(&pieces, String::new(), &mut names);
    }
    Ok(names)
}

/// The items of a hostlist: split at the commas outside brackets.
fn split_items(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut inside, mut start) = (false, 0);
    for (at, c) in list.char_indices() {
        match c {
            '[' if inside => return Err("a `[` inside brackets".to_owned()),
            '[' => inside = true,
            ']' if !inside => return Err(format!("a `]` without its `[` at byte {at}")),
            ']' => inside = false,
            ',' if !inside => {
                items.push(&list[start..at]);
                start = at + 1;
            }
            c if c.is_whitespace() => return Err(format!("whitespace at byte {at}")),
            _ => {}
        }
    }
    if inside {
        return Err("a `[` without its `]`".to_owned());
    }
    items.push(&list[start..]);
    Ok(items)
}

/// One item in order: text, and the numbers of each bracket.
#[derive(Debug)]
enum Piece<'a> {
    Text(&'a str),
    /// Each number with the width it is written in.
    Numbers(Vec<(u64, usize)>),
}

/// `item` (brackets balanced, no commas outside them) as pieces; text after the last
/// bracket is refused, as Slurm refuses `n[1-2]x`.
fn item_pieces(item: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = item;
    while let Some((text, after)) = rest.split_once('[') {
        let (inside, after) = after.split_once(']').expect("brackets are balanced");
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        pieces.push(Piece::Numbers(bracket_numbers(inside)?));
        rest = after;
    }
    if !rest.is_empty() {
        if !pieces.is_empty() {
            return Err(format!("text `{rest}` after the brackets of `{item}`"));
        }
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

/// The numbers of one bracket's ranges (`01-04,07`), in the order written.
fn bracket_numbers(inside: &str) -> Result<Vec<(u64, usize)>, String> {
    let mut numbers = Vec::new();
    for range in inside.split(',') {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let number = |digits: &str| {
            let valid = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            valid
                .then(|| digits.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| {
                    format!("`[{inside}]` holds `{range}`, not a number or a range of numbers")
                })
        };
        let (low, high) = (number(first)?, number(last)?);
        if low > high {
            return Err(format!("the range `{range}` runs backwards"));
        }
        if high - low >= MAX_EXPANDED as u64 {
            return Err(format!("it names more than `{MAX_EXPANDED}` nodes"));
        }
        numbers.extend((low..=high).map(|n| (n, first.len())));
        if numbers.len() > MAX_EXPANDED {
            return Err(format!("it names more than `{MAX_EXPANDED}` nodes"));
        }
    }
    Ok(numbers)
}

/// Every name `pieces` stand for after `head`, the last bracket counting fastest.
fn combine(pieces: &[Piece<'_>], head: String, out: &mut Vec<String>) {
    match pieces.split_first() {
        None => out.push(head),
        Some((Piece::Text(text), rest)) => combine(rest, head + text, out),
        Some((Piece::Numbers(numbers), rest)) => {
            for &(number, width) in numbers {
                combine(rest, format!("{head}{number:0width$}"), out);
            }
        }
    }
}

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
