//! The live instance page's refresh: a small inline script (no file, no build step)
//! that polls the instance's JSON every 2 s and, once its latest run or attempt differs
//! from the ones the page was drawn with, stops polling and loads the page again.
//!
//! The script is a constant: what it needs (the API URL, the page URL, the run id and
//! attempt drawn) travels in `data-` attributes of its own `<script>` element, escaped
//! like any attribute, so no name can break out of the script. It reloads by loading
//! the page of the instance's latest attempt rather than `location.reload()`, so a
//! live page of an older attempt cannot reload itself forever, and it reloads once per
//! change it sees (remembered in `sessionStorage`), so a page that still disagrees with
//! the JSON after its reload stops polling rather than reloading every 2 s. A failed
//! fetch or a response that is not OK is ignored and the next poll tries again.

use gpuvet_model::overview::InstanceSummary;

use crate::escape;
use crate::site::href;

/// How often the page asks, in milliseconds.
pub const POLL_MS: u32 = 2000;

const REFRESH_JS: &str = r#"(function () {
  "use strict";
  var data = document.currentScript.dataset;
  var done = false;
  var timer = setInterval(function () {
    fetch(data.api, { cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (instance) {
        if (done || !instance) { return; }
        var run = instance.latest_run ? String(instance.latest_run.run_id) : "";
        var attempt = String(instance.attempt);
        if (run === data.runId && attempt === data.attempt) { return; }
        done = true;
        clearInterval(timer);
        // Reload once per change seen: a page that disagrees with the JSON after its
        // reload stays put instead of reloading every poll.
        var seen = data.api + " " + attempt + " " + run;
        try {
          if (sessionStorage.getItem("gpuvet-live-reload") === seen) { return; }
          sessionStorage.setItem("gpuvet-live-reload", seen);
        } catch (e) {}
        window.location.replace(data.page);
      })
      .catch(function () {});
  }, Number(data.pollMs));
})();"#;

/// The `<script>` element that keeps the page of `instance` current.
pub(crate) fn refresh_script(instance: &InstanceSummary) -> String {
    let who = &instance.attempt;
    let run_id = instance
        .latest_run
        .as_ref()
        .map_or_else(String::new, |run| run.run_id.to_string());
    format!(
        "<script data-api=\"{}\" data-page=\"{}\" data-run-id=\"{run_id}\" data-attempt=\"{}\" data-poll-ms=\"{POLL_MS}\">\n{REFRESH_JS}\n</script>\n",
        escape(&href::instance_api(&who.job_id, &who.node)),
        escape(&href::instance(&who.job_id, &who.node, None)),
        who.attempt,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::test_data::{HOSTILE_NODE, instance};
    use gpuvet_model::results::Outcome;

    #[test]
    fn the_script_carries_the_api_the_page_and_what_was_drawn() {
        let script = refresh_script(&instance("job-7", "node-3", Some(Outcome::Passed)));
        assert!(script.starts_with("<script data-api=\"/api/v1/jobs/job-7/instances/node-3\" data-page=\"/instances/job-7/node-3\" data-run-id=\"1\" data-attempt=\"2\" data-poll-ms=\"2000\">"), "{script}");
        assert!(script.contains("latest_run.run_id"));
        assert!(script.contains("clearInterval(timer)"));
        assert!(script.contains(".catch(function () {})"));
        assert!(
            script.contains("sessionStorage.getItem"),
            "reloads once per change"
        );
        assert!(script.ends_with("</script>\n"));
        let running = refresh_script(&instance("job-7", "node-3", None));
        assert!(running.contains("data-run-id=\"\""), "{running}");
    }

    #[test]
    fn a_hostile_node_stays_inside_its_attribute() {
        let script = refresh_script(&instance("job-7", HOSTILE_NODE, None));
        assert_eq!(script.matches("<script").count(), 1, "{script}");
        assert_eq!(script.matches("</script>").count(), 1, "{script}");
        assert!(script.contains("instances/%3Cscript%3Ealert%28%27x%27%29%3C%2Fscript%3E"));
    }
}
