//! Prometheus's text exposition format (0.0.4), the escapes it asks for: the one place
//! the server's `/metrics` and the runtime watch's `/metrics` escape text, so a route,
//! a check name or a hostname with a quote in it cannot break a scrape.
//!
//! Per the format: a label value escapes backslash, double quote and line feed
//! (`\\`, `\"`, `\n`); `# HELP` text escapes backslash and line feed only. Everything
//! else, UTF-8 included, stays as it is.

use std::borrow::Cow;

/// `value` ready to go between a label's double quotes.
pub fn label_value(value: &str) -> Cow<'_, str> {
    escape(value, true)
}

/// `text` ready to follow `# HELP name `.
pub fn help_text(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

fn escape(text: &str, quotes: bool) -> Cow<'_, str> {
    let special = |c: char| c == '\\' || c == '\n' || (quotes && c == '"');
    if !text.contains(special) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label_value("line\nnext"), "line\\nnext");
        assert_eq!(label_value("\\\"\n"), "\\\\\\\"\\n");
        // Already-escaped text is escaped again: the value is what it says.
        assert_eq!(label_value("\\n"), "\\\\n");
    }

    #[test]
    fn help_text_escapes_backslash_and_newline_but_not_quotes() {
        assert_eq!(help_text("x\\y\n\"z\""), "x\\\\y\\n\"z\"");
    }

    #[test]
    fn plain_text_is_borrowed_as_it_is() {
        for text in ["", "/api/v1/jobs/{job}", "node-1", "grüße, \t'tab'\r"] {
            assert!(
                matches!(label_value(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
            assert!(
                matches!(help_text(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
        assert!(matches!(help_text("say \"hi\""), Cow::Borrowed(_)));
    }
}
