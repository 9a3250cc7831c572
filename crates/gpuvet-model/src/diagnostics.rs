//! An error as a person reads it on a terminal, in one style for every gpuvet program:
//! `error: …`, one `caused by: …` line per cause in its `source()` chain, then a
//! `hint: …` line saying what to do next when there is one; and the same chain on one
//! line, for where an error can only go on as text.

use std::error::Error;
use std::fmt::Write;

/// `error` and each cause under it, and the hint, one line each, ending in a newline.
pub fn render_error(error: &(dyn Error + 'static), hint: Option<&str>) -> String {
    let mut text = format!("error: {error}\n");
    let mut cause = error.source();
    while let Some(next) = cause {
        // Writing to a String cannot fail.
        let _ = writeln!(text, "  caused by: {next}");
        cause = next.source();
    }
    if let Some(hint) = hint {
        let _ = writeln!(text, "hint: {hint}");
    }
    text
}

/// `error` and each of its causes, joined by `: ` on one line: how an error is written
/// where only text can go (a report, the worker pipe, a reply to the coordinator, a
/// warning).
pub fn with_causes(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot write the bundle `b.tar.gz`")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("cannot create the directory `out`")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn every_cause_gets_its_line_and_the_hint_comes_last() {
        let error = Outer(Middle(std::io::Error::from(
            std::io::ErrorKind::PermissionDenied,
        )));
        assert_eq!(
            render_error(&error, Some("pass `-o` a writable path")),
            "error: cannot write the bundle `b.tar.gz`\n\
             \x20 caused by: cannot create the directory `out`\n\
             \x20 caused by: permission denied\n\
             hint: pass `-o` a writable path\n"
        );
    }

    #[test]
    fn on_one_line_the_causes_follow_the_error() {
        let error = Outer(Middle(std::io::Error::from(
            std::io::ErrorKind::PermissionDenied,
        )));
        assert_eq!(
            with_causes(&error),
            "cannot write the bundle `b.tar.gz`: cannot create the directory `out`: permission denied"
        );
    }

    #[test]
    fn an_error_without_causes_or_hint_is_one_line() {
        let error = std::io::Error::other("no space left");
        assert_eq!(render_error(&error, None), "error: no space left\n");
    }
}
