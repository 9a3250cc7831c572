//! A list of node names short enough for one line of a report: runs of names that share
//! a prefix and count up fold into `node-[0-4095]`, and past [`MAX_PARTS`] parts the rest
//! are counted, so a group of 4,096 nodes is one short line, not 4,096 names.

/// The most parts (names or folded runs) listed in full.
pub const MAX_PARTS: usize = 8;

/// The parts shown when there are more than [`MAX_PARTS`]; the rest are counted.
pub const SHOWN_PARTS: usize = 6;

/// The shortest run folded into `prefix[a-b]`; two names read as well unfolded.
pub const MIN_FOLDED_RUN: usize = 3;

/// `names` in their order, each run of at least [`MIN_FOLDED_RUN`] names with the same
/// prefix and consecutive numeric suffixes folded into `prefix[first-last]`, joined by
/// `, `. A run whose first suffix has a leading zero keeps that width
/// (`n[01-03]` is `n01, n02, n03`); otherwise its suffixes are plain numbers
/// (`n[8-10]`). Past [`MAX_PARTS`] parts only the first [`SHOWN_PARTS`] are listed,
/// then `… and K more`, K the nodes not listed.
pub fn compact_node_names<S: AsRef<str>>(names: &[S]) -> String {
    let names: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    let mut parts: Vec<(String, usize)> = Vec::new();
    let mut at = 0;
    while at < names.len() {
        let run = run_from(&names[at..]);
        if run >= MIN_FOLDED_RUN {
            let (prefix, first) = split_suffix(names[at]);
            let (_, last) = split_suffix(names[at + run - 1]);
            parts.push((format!("{prefix}[{first}-{last}]"), run));
            at += run;
        } else {
            parts.push((names[at].to_owned(), 1));
            at += 1;
        }
    }
    if parts.len() <= MAX_PARTS {
        return parts
            .into_iter()
            .map(|(part, _)| part)
            .collect::<Vec<_>>()
            .join(", ");
    }
    let hidden: usize = parts[SHOWN_PARTS..].iter().map(|(_, count)| count).sum();
    let shown: Vec<String> = parts
        .into_iter()
        .take(SHOWN_PARTS)
        .map(|(part, _)| part)
        .collect();
    format!("{}, … and {hidden} more", shown.join(", "))
}

/// How many of `names`, from the first, form a run: the first name's prefix, then
/// suffixes counting up by one, written as the first one's is. 1 when the first name
/// has no numeric suffix.
fn run_from(names: &[&str]) -> usize {
    let (prefix, first) = split_suffix(names[0]);
    let Ok(start) = first.parse::<u64>() else {
        return 1;
    };
    // A leading zero fixes the width; `0` alone is a plain number.
    let width = if first.len() > 1 && first.starts_with('0') {
        first.len()
    } else {
        0
    };
    let mut run = 1;
    for name in &names[1..] {
        let Some(expected) = u64::try_from(run)
            .ok()
            .and_then(|step| start.checked_add(step))
        else {
            break;
        };
        let (next_prefix, suffix) = split_suffix(name);
        if next_prefix != prefix || suffix != format!("{expected:0width$}") {
            break;
        }
        run += 1;
    }
    run
}

/// `name` split before its trailing ASCII digits: `("node-", "12")`, `("gpu-a", "")`.
fn split_suffix(name: &str) -> (&str, &str) {
    let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit());
    name.split_at(prefix.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names a compacted list stands for, when nothing was cut: the inverse of
    /// [`compact_node_names`].
    fn expand(list: &str) -> Vec<String> {
        if list.is_empty() {
            return Vec::new();
        }
        list.split(", ")
            .flat_map(|part| {
                let Some((prefix, range)) =
                    part.strip_suffix(']').and_then(|part| part.split_once('['))
                else {
                    return vec![part.to_owned()];
                };
                let (first, last) = range.split_once('-').unwrap();
                let width = if first.starts_with('0') && first.len() > 1 {
                    first.len()
                } else {
                    0
                };
                let (first, last): (u64, u64) = (first.parse().unwrap(), last.parse().unwrap());
                (first..=last)
                    .map(|n| format!("{prefix}{n:0width$}"))
                    .collect()
            })
            .collect()
    }

    fn compact(names: &[&str]) -> String {
        let list = compact_node_names(names);
        if !list.contains('…') {
            assert_eq!(expand(&list), names, "{list} does not round-trip");
        }
        list
    }

    #[test]
    fn a_run_of_consecutive_suffixes_folds_and_other_names_stay() {
        assert_eq!(
            compact(&["node-0", "node-1", "node-2", "gpu-a"]),
            "node-[0-2], gpu-a"
        );
        assert_eq!(
            compact(&["local-0", "local-1", "local-2", "local-3"]),
            "local-[0-3]"
        );
        assert_eq!(compact(&["vm#0", "vm#1", "vm#2"]), "vm#[0-2]");
        assert_eq!(compact(&[]), "");
        assert_eq!(compact(&["solo"]), "solo");
    }

    #[test]
    fn a_run_of_two_stays_two_names() {
        assert_eq!(compact(&["node-0", "node-1"]), "node-0, node-1");
        assert_eq!(compact(&["a1", "a2", "b3", "b4", "b5"]), "a1, a2, b[3-5]");
    }

    #[test]
    fn input_order_is_kept_and_only_neighbours_fold() {
        assert_eq!(compact(&["n3", "n1", "n2"]), "n3, n1, n2");
        assert_eq!(
            compact(&["n0", "n1", "n2", "x", "n3", "n4", "n5"]),
            "n[0-2], x, n[3-5]"
        );
        assert_eq!(
            compact(&["n0", "n1", "n2", "n4", "n5", "n6"]),
            "n[0-2], n[4-6]"
        );
        assert_eq!(compact(&["n2", "n1", "n0"]), "n2, n1, n0");
    }

    #[test]
    fn suffixes_with_leading_zeros_keep_their_width() {
        assert_eq!(compact(&["n01", "n02", "n03"]), "n[01-03]");
        assert_eq!(compact(&["n08", "n09", "n10", "n11"]), "n[08-11]");
        assert_eq!(compact(&["n8", "n9", "n10"]), "n[8-10]");
        assert_eq!(compact(&["n0", "n1", "n2"]), "n[0-2]");
        assert_eq!(compact(&["n00", "n01", "n02"]), "n[00-02]");
        // A width change ends the run.
        assert_eq!(compact(&["n9", "n010", "n011", "n012"]), "n9, n[010-012]");
        assert_eq!(compact(&["n1", "n02", "n03"]), "n1, n02, n03");
        assert_eq!(
            compact(&["n098", "n099", "n100", "n0101"]),
            "n[098-100], n0101"
        );
    }

    #[test]
    fn suffixes_past_u64_neither_fold_nor_panic() {
        let names = [
            "n18446744073709551614",
            "n18446744073709551615",
            "n18446744073709551616",
            "n99999999999999999999999",
        ];
        assert_eq!(compact(&names), names.join(", "));
    }

    #[test]
    fn a_group_of_4096_is_one_part() {
        let names: Vec<String> = (0..4096).map(|n| format!("node-{n}")).collect();
        assert_eq!(compact_node_names(&names), "node-[0-4095]");
    }

    #[test]
    fn past_eight_parts_the_rest_are_counted_in_nodes() {
        let eight = ["a", "b", "c", "d", "e", "f", "g", "h"];
        assert_eq!(compact(&eight), eight.join(", "));
        // Six single names, then three runs of three: 9 parts, 9 nodes not listed.
        let mut names: Vec<String> = ["a", "b", "c", "d", "e", "f"].map(str::to_owned).to_vec();
        for prefix in ["x", "y", "z"] {
            names.extend((0..3).map(|n| format!("{prefix}{n}")));
        }
        assert_eq!(compact_node_names(&names), "a, b, c, d, e, f, … and 9 more");
        let scattered: Vec<String> = (0..100).map(|n| format!("n{}", n * 2)).collect();
        assert_eq!(
            compact_node_names(&scattered),
            "n0, n2, n4, n6, n8, n10, … and 94 more"
        );
    }
}
