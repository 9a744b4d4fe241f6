//! One archive: the planner its alignment mode asks for.

use super::layout::{Layout, Options};
use super::{in_order, planner};
use crate::entry::Entry;
use crate::policy::AlignMode;

pub(super) fn plan<'a>(entries: &'a [Entry], opts: &Options) -> Layout<'a> {
    match opts.policy.mode {
        AlignMode::GenInitCpio => in_order::plan(entries, opts),
        AlignMode::Readers | AlignMode::KernelOnly => planner::plan(entries, opts),
    }
}
