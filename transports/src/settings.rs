//! How the settings snapshot reaches the cores: the control thread builds a [`Settings`] (a
//! `kudurru-core` type) and swaps it in through `arc-swap`; each core loads the current one.
//! A query loads it once, at ingress, and carries that snapshot to its answer.

use std::sync::Arc;

use arc_swap::ArcSwap;
pub use kudurru_core::Settings;

/// The published snapshot, swapped atomically by the control thread.
pub type SharedSettings = Arc<ArcSwap<Settings>>;
