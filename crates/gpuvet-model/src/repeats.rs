//! Messages that many nodes repeat, said once: "4 of 4 nodes: `python3` cannot import
//! torch" instead of the same line four times.

/// The most node names listed for one message; the rest are counted.
pub const NAMED_NODES: usize = 3;

/// One line per distinct message, in the order each first appears, naming the nodes
/// that said it: `4 of 4 nodes: …` when all of `total` did, else
/// `n1, n3 (2 of 4 nodes): …`, with at most [`NAMED_NODES`] names.
pub fn group_repeats<N: AsRef<str>, M: AsRef<str>>(items: &[(N, M)], total: usize) -> Vec<String> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for (node, message) in items {
        let (node, message) = (node.as_ref(), message.as_ref());
        match groups.iter_mut().find(|(m, _)| *m == message) {
            Some((_, nodes)) => nodes.push(node),
            None => groups.push((message, vec![node])),
        }
    }
    groups
        .into_iter()
        .map(|(message, nodes)| format!("{}: {message}", who(&nodes, total)))
        .collect()
}

fn who(nodes: &[&str], total: usize) -> String {
    let count = nodes.len();
    let plural = if total == 1 { "node" } else { "nodes" };
    if count == total && count > 1 {
        return format!("{count} of {total} {plural}");
    }
    if count == 1 {
        return nodes[0].to_owned();
    }
    let mut named = nodes[..count.min(NAMED_NODES)].join(", ");
    if count > NAMED_NODES {
        named.push_str(&format!(" and {} more", count - NAMED_NODES));
    }
    format!("{named} ({count} of {total} {plural})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_message_from_every_node_is_said_once() {
        let items = [("n0", "no torch"), ("n1", "no torch"), ("n2", "no torch")];
        assert_eq!(group_repeats(&items, 3), ["3 of 3 nodes: no torch"]);
    }

    #[test]
    fn distinct_messages_keep_their_order_and_name_their_nodes() {
        let items = [
            ("n0", "no torch"),
            ("n1", "python3 not found"),
            ("n2", "no torch"),
        ];
        assert_eq!(
            group_repeats(&items, 4),
            ["n0, n2 (2 of 4 nodes): no torch", "n1: python3 not found"]
        );
    }

    #[test]
    fn long_lists_are_counted_not_listed() {
        let items: Vec<(String, &str)> = (0..6).map(|i| (format!("n{i}"), "x")).collect();
        assert_eq!(
            group_repeats(&items, 8),
            ["n0, n1, n2 and 3 more (6 of 8 nodes): x"]
        );
        assert!(group_repeats::<&str, &str>(&[], 4).is_empty());
        // A group of one node is just that node.
        assert_eq!(group_repeats(&[("n0", "x")], 1), ["n0: x"]);
    }
}
