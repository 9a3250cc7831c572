//! The frame every page of `gpuvet serve` shares: the document head with the inline
//! stylesheet, the nav bar (Instances, Nodes, Events; the current one marked with
//! `aria-current="page"`) and the footer. Pages render their own body and hand it here.

use crate::site::href;
use crate::{STYLESHEET, escape};

/// The sections of the nav bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Instances,
    Nodes,
    Events,
}

/// A whole document: `title` (text, escaped here), the nav bar with `current` marked
/// (none on an error page), then `body` (HTML, as given).
pub fn document(title: &str, current: Option<Section>, body: &str) -> String {
    let mut out = String::with_capacity(STYLESHEET.len() + body.len() + 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str(&format!(
        "<title>{}</title>\n<style>\n{STYLESHEET}</style>\n</head>\n<body>\n",
        escape(title)
    ));
    out.push_str(&nav(current));
    out.push_str("<main>\n");
    out.push_str(body);
    out.push_str(&format!(
        "</main>\n<footer>gpuvet {}</footer>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    ));
    out
}

fn nav(current: Option<Section>) -> String {
    let links = [
        (Section::Instances, href::instances(None), "Instances"),
        (Section::Nodes, href::nodes(), "Nodes"),
        (Section::Events, href::events(None, None, None), "Events"),
    ];
    let items: Vec<String> = links
        .into_iter()
        .map(|(section, url, name)| {
            let marker = if current == Some(section) {
                " aria-current=\"page\""
            } else {
                ""
            };
            format!("<a href=\"{}\"{marker}>{name}</a>", escape(&url))
        })
        .collect();
    format!(
        "<nav class=\"site\"><span class=\"brand\">gpuvet</span> {}</nav>\n",
        items.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_has_a_title_the_styles_and_a_nav_with_the_current_section_marked() {
        let html = document("job <7>", Some(Section::Events), "<p>body</p>\n");
        assert!(html.starts_with("<!DOCTYPE html>\n"), "{html}");
        assert!(html.contains("<title>job &lt;7&gt;</title>"), "{html}");
        assert!(html.contains(STYLESHEET));
        assert!(html.contains("<a href=\"/\">Instances</a>"), "{html}");
        assert!(
            html.contains("<a href=\"/events\" aria-current=\"page\">Events</a>"),
            "{html}"
        );
        assert!(html.contains("<main>\n<p>body</p>\n</main>"), "{html}");
        assert!(html.ends_with("</html>\n"));
    }

    #[test]
    fn at_most_one_section_is_current() {
        let instances = document("t", Some(Section::Instances), "");
        assert!(instances.contains("<a href=\"/\" aria-current=\"page\">Instances</a>"));
        // The stylesheet names the attribute too; the nav writes it before a `>`.
        let marked = |html: &str| html.matches(" aria-current=\"page\">").count();
        assert_eq!(marked(&instances), 1);
        assert_eq!(marked(&document("t", None, "")), 0);
    }
}
