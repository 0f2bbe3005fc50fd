//! Progress bars on stderr, for the benches, `skiff gen` and the shell.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr (hidden when stderr is not a terminal) drawn
/// with the indicatif `template`; the shell's query progress uses it too.
pub fn stderr_bar(template: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar
}
