//! How far the current long step has come, for a front end to show: the
//! library only counts (atomics, no printing, no clock); the `composer`
//! binary draws a progress bar from [`snapshot`] when the work takes long
//! enough and standard error is a terminal.
//!
//! Steps: reading trees and globs (entries found so far), reading kernel
//! modules (modules read), writing the image (bytes of the archive before
//! compression, of a known total).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The steps a build goes through that can take long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Idle,
    Trees,
    Modules,
    Writing,
}

impl Step {
    /// What the step is, for people.
    pub fn label(self) -> &'static str {
        match self {
            Step::Idle => "",
            Step::Trees => "reading trees",
            Step::Modules => "reading kernel modules",
            Step::Writing => "writing",
        }
    }

    /// Whether the counts are bytes (else items).
    pub fn bytes(self) -> bool {
        self == Step::Writing
    }

    fn from_index(i: usize) -> Step {
        match i {
            1 => Step::Trees,
            2 => Step::Modules,
            3 => Step::Writing,
            _ => Step::Idle,
        }
    }

    fn index(self) -> usize {
        match self {
            Step::Idle => 0,
            Step::Trees => 1,
            Step::Modules => 2,
            Step::Writing => 3,
        }
    }
}

static STEP: AtomicUsize = AtomicUsize::new(0);
static DONE: AtomicU64 = AtomicU64::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);

/// Starts `step` with `total` units to do (0: not known).
pub fn start(step: Step, total: u64) {
    DONE.store(0, Ordering::Relaxed);
    TOTAL.store(total, Ordering::Relaxed);
    STEP.store(step.index(), Ordering::Release);
}

/// `n` more units of the current step are done.
pub fn advance(n: u64) {
    DONE.fetch_add(n, Ordering::Relaxed);
}

/// The current step is over.
pub fn finish() {
    STEP.store(Step::Idle.index(), Ordering::Release);
}

/// The current step, units done and total (0: not known).
pub fn snapshot() -> (Step, u64, u64) {
    let step = Step::from_index(STEP.load(Ordering::Acquire));
    (
        step,
        DONE.load(Ordering::Relaxed),
        TOTAL.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_within_a_step() {
        start(Step::Writing, 100);
        advance(30);
        advance(12);
        assert_eq!(snapshot(), (Step::Writing, 42, 100));
        start(Step::Modules, 0);
        assert_eq!(snapshot(), (Step::Modules, 0, 0));
        finish();
        assert_eq!(snapshot().0, Step::Idle);
        assert!(Step::Writing.bytes() && !Step::Trees.bytes());
    }
}
