//! The progress bar: drawn on standard error when it is a terminal, not
//! with `-q`, and only once a build has run for a second (so quick builds
//! print nothing but their summary). It reads what the library counts
//! ([`composer::progress`]) ten times a second and is cleared before
//! anything else is printed.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use composer::progress::{snapshot, Step};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a build runs before its bar appears; `COMPOSER_PROGRESS_DELAY_MS`
/// changes it (0: at once).
fn delay() -> Duration {
    std::env::var("COMPOSER_PROGRESS_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(1), Duration::from_millis)
}

const TICK: Duration = Duration::from_millis(100);

pub struct Bar {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Bar {
    /// A bar for the work that follows, if standard error is a terminal.
    pub fn start() -> Bar {
        let stop = Arc::new(AtomicBool::new(false));
        if super::ui::quiet() || !std::io::stderr().is_terminal() {
            return Bar { stop, thread: None };
        }
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || draw(&flag))
            .ok();
        Bar { stop, thread }
    }

    /// Clears the bar (if it was drawn) and stops drawing.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.stop();
    }
}

fn style(step: Step, total: u64) -> ProgressStyle {
    let template = match (step.bytes(), total > 0) {
        (true, true) => "composer: {msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        (true, false) => "composer: {spinner} {msg} {bytes} {bytes_per_sec}",
        (false, true) => "composer: {msg} {wide_bar} {pos}/{len}",
        (false, false) => "composer: {spinner} {msg} {pos}",
    };
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

fn draw(stop: &AtomicBool) {
    let started = Instant::now();
    let wait = delay();
    let mut bar: Option<ProgressBar> = None;
    let mut shown = (Step::Idle, 0);
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(
            TICK.min(
                wait.saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1)),
            ),
        );
        if started.elapsed() < wait {
            continue;
        }
        let (step, done, total) = snapshot();
        if step == Step::Idle {
            continue;
        }
        let b = bar.get_or_insert_with(|| {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        });
        if shown != (step, total) {
            b.set_style(style(step, total));
            b.set_length(total);
            b.set_message(step.label());
            shown = (step, total);
        }
        b.set_position(done);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
