//! The page for a request the server cannot answer with a page (an unknown job, node or
//! report): the status, a title and a sentence, in the site's frame so the nav still
//! leads somewhere.

use crate::escape;
use crate::site::layout::document;

/// `404 Not found` and why, as a whole document. The server sends it with `status`.
pub fn error_page(status: u16, title: &str, message: &str) -> String {
    let body = format!(
        "<h1 class=\"error\"><span class=\"code\">{status}</span> {}</h1>\n<p class=\"message\">{}</p>\n",
        escape(title),
        escape(message)
    );
    document(&format!("gpuvet: {status} {title}"), None, &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::test_data::HOSTILE_NODE;

    #[test]
    fn the_error_page_says_the_status_title_and_message_with_the_nav_and_nothing_current() {
        let html = error_page(404, "Not found", "No instance node-9 in job job-7.");
        assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
        assert!(
            html.contains("<title>gpuvet: 404 Not found</title>"),
            "{html}"
        );
        assert!(
            html.contains("<h1 class=\"error\"><span class=\"code\">404</span> Not found</h1>"),
            "{html}"
        );
        assert!(html.contains("No instance node-9 in job job-7."));
        assert!(html.contains("<a href=\"/\">Instances</a>"));
        assert!(!html.contains(" aria-current=\"page\">"), "{html}");
    }

    #[test]
    fn the_title_and_message_are_escaped() {
        let html = error_page(404, HOSTILE_NODE, &format!("no node {HOSTILE_NODE}"));
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("no node &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
        assert!(html.contains("<title>gpuvet: 404 &lt;script&gt;"), "{html}");
    }
}
