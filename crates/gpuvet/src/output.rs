//! Where reports go: progress on the terminal while checks run, then the table or JSON,
//! and the JUnit XML and HTML files the flags ask for. Data goes to stdout, progress and diagnostics to stderr.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use gpuvet_analysis::render;
use gpuvet_model::diagnosis::TERMINAL_WIDTH;
use gpuvet_model::results::RunReport;
use gpuvet_runner::RunnerEvent;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::failure::Failure;

/// A progress line on stderr while the checks run; invisible when not wanted.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn new(visible: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            None,
            if visible {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{pos}/{len}] {msg} ({elapsed})")
                .expect("the progress template is valid"),
        );
        Progress { bar }
    }

    pub fn observe(&mut self, event: RunnerEvent<'_>) {
        match event {
            RunnerEvent::RunStarted {
                plan,
                backend,
                devices,
            } => {
                self.bar.set_length(plan.checks.len() as u64);
                self.bar.set_message(format!(
                    "starting on the {backend} backend with {devices} devices"
                ));
                self.bar.enable_steady_tick(Duration::from_millis(120));
            }
            RunnerEvent::CheckStarted { name, .. } => self.bar.set_message(name.to_string()),
            RunnerEvent::Remeasuring { name, entities } => {
                let names: Vec<String> = entities.iter().map(ToString::to_string).collect();
                self.bar
                    .set_message(format!("{name}: re-measuring {}", names.join(", ")));
            }
            RunnerEvent::CheckFinished { result, .. } => {
                self.bar.println(format!(
                    "  {:<22} {:<15} {:.1}s",
                    result.name.as_str(),
                    result.status.as_str(),
                    result.duration_secs
                ));
                self.bar.inc(1);
            }
            RunnerEvent::RunFinished { .. } => self.bar.finish_and_clear(),
        }
    }
}

/// How much the table shows of each check: everything with `--verbose`.
pub fn detail(args: &crate::cli::SanityArgs) -> render::Detail {
    if args.verbose {
        render::Detail::Full
    } else {
        render::Detail::Brief
    }
}

/// How wide the report may be: the terminal's width when it is narrower than 100
/// columns, else 100 (and 100 into a file or pipe).
pub fn width(is_terminal: bool) -> usize {
    let columns = is_terminal.then(terminal_columns).flatten();
    columns.map_or(TERMINAL_WIDTH, |c| c.min(TERMINAL_WIDTH))
}

/// The columns of the terminal on stderr (or stdout), when it says.
fn terminal_columns() -> Option<usize> {
    [libc::STDERR_FILENO, libc::STDOUT_FILENO]
        .into_iter()
        .find_map(|fd| {
            let mut size = libc::winsize {
                ws_row: 0,
                ws_col: 0,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is given.
            let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
            (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
        })
}

/// Writes text to stdout; a closed pipe (e.g. `| head`) is not an error, and any other
/// failure (stdout redirected to a full disk) is the environment's, not a bug.
pub fn stdout(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::io("cannot write to stdout", err)
                .with_hint("check the file or pipe stdout goes to: a full disk, a closed reader"))
        }
        _ => Ok(()),
    }
}

/// Writes text to stderr (reports of `gpuvet run`, whose stdout belongs to the app).
pub fn stderr(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

pub fn json(report: &RunReport) -> String {
    let mut text = serde_json::to_string_pretty(report).expect("a report always serializes");
    text.push('\n');
    text
}

/// Writes the report files the flags ask for (`--junit`, `--html`), each next to its
/// final name first, so a reader never sees half a file.
pub fn write_report_files(
    args: &crate::cli::SanityArgs,
    report: &RunReport,
) -> Result<(), Failure> {
    if let Some(path) = &args.junit {
        write_report_file(path, "JUnit report", &render::junit(report))?;
    }
    if let Some(path) = &args.html {
        write_report_file(path, "HTML report", &gpuvet_html::page(report))?;
    }
    Ok(())
}

fn write_report_file(path: &Path, what: &str, text: &str) -> Result<(), Failure> {
    write_atomically(path, text.as_bytes()).map_err(|err| {
        Failure::io(
            format!("cannot write the {what} to `{}`", path.display()),
            err,
        )
        .with_hint("check that the directory exists and is writable")
    })
}

pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".to_owned());
    let temp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    // A write cut short (a full disk) leaves no temp file behind either.
    std::fs::write(&temp, bytes)
        .and_then(|()| std::fs::rename(&temp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })
}
