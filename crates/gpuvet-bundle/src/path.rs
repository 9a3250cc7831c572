//! Which paths a bundle may hold: relative, `/`-separated, without `.` or `..`, and
//! writable as one line of a sha256sum manifest.

use std::collections::BTreeSet;

/// Why `path` cannot be a file's path inside a bundle, if it cannot.
pub(crate) fn path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("the path is empty");
    }
    if path.starts_with('/') {
        return Some("the path is absolute; give it relative to the bundle's directory");
    }
    if path.contains(['\\', '\n', '\r', '\0']) {
        // sha256sum escapes such names, and the escape is not portable.
        return Some("a path may not hold `\\`, a line break or NUL");
    }
    for component in path.split('/') {
        match component {
            "" => return Some("the path has an empty component (`//` or a trailing `/`)"),
            "." => return Some("the path has a `.` component"),
            ".." => return Some("the path leaves the bundle's directory (`..`)"),
            _ => {}
        }
    }
    None
}

/// Why `root` cannot name a bundle's directory, if it cannot: it must be one component.
pub(crate) fn root_problem(root: &str) -> Option<&'static str> {
    if root.contains('/') {
        return Some("it must be one path component, without `/`");
    }
    path_problem(root)
}

/// The first path inside another path (`a/b` and `a`), which no file system can
/// unpack, with why.
pub(crate) fn file_under_file<'a>(
    paths: impl IntoIterator<Item = &'a str>,
) -> Option<(String, String)> {
    let paths: BTreeSet<&str> = paths.into_iter().collect();
    paths.iter().find_map(|path| {
        parents(path).find(|dir| paths.contains(dir)).map(|dir| {
            let reason = format!("`{dir}` is a file, so `{path}` cannot be inside it");
            ((*path).to_owned(), reason)
        })
    })
}

/// The directories above `path`, outermost first: `a/b/c` gives `a`, `a/b`.
pub(crate) fn parents(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(|(at, _)| &path[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_plain_and_one_line() {
        for good in ["a", "a/b.json", "nodes/n-1/x", ".hidden", "a..b", "日本/x"] {
            assert_eq!(path_problem(good), None, "{good}");
        }
        for bad in [
            "", "/a", "a//b", "a/", "./a", "a/./b", "..", "a/../b", "a\\b", "a\nb", "a\0",
        ] {
            assert!(path_problem(bad).is_some(), "{bad:?}");
        }
        assert!(root_problem("a/b").is_some());
        assert_eq!(root_problem("gpuvet-bundle-job7-attempt2"), None);
    }

    #[test]
    fn a_file_cannot_be_a_directory_too() {
        assert_eq!(file_under_file(["a", "b/c", "a.json"]), None);
        assert_eq!(
            file_under_file(["x/y", "x/y/z"]),
            Some((
                "x/y/z".to_owned(),
                "`x/y` is a file, so `x/y/z` cannot be inside it".to_owned()
            ))
        );
        assert_eq!(parents("a/b/c").collect::<Vec<_>>(), ["a", "a/b"]);
        assert_eq!(parents("a").count(), 0);
    }
}
