//! Which `reason` label (`crate::metrics::prepare::REASONS`) each prepare failure counts
//! under. This is the one place errors become reasons: an error variant added to
//! [`ClaimError`] or [`CallError`] must be given one here (the matches are exhaustive).

use super::errors::CallError;
use crate::claims::input::ClaimError;
use crate::metrics::prepare::{API, BAD_CONFIG, BUSY, INTERNAL, NOT_FOUND, NRI_UNAVAILABLE, SETUP};

/// The reason of one claim's failure.
pub fn claim_reason(e: &ClaimError) -> &'static str {
    match e {
        ClaimError::Config(_)
        | ClaimError::Configure { .. }
        | ClaimError::CannotShare { .. }
        | ClaimError::SetupRefused { .. }
        | ClaimError::Policy { .. } => BAD_CONFIG,
        ClaimError::NotInPool { .. } | ClaimError::NotPresent { .. } => NOT_FOUND,
        ClaimError::InProgress { .. }
        | ClaimError::DevicesBusy { .. }
        | ClaimError::AlreadyPrepared { .. } => BUSY,
        ClaimError::NriNotReady(_) => NRI_UNAVAILABLE,
        ClaimError::Setup { .. } | ClaimError::UnreadableSetup { .. } => SETUP,
        ClaimError::PodsUnreadable(_) => API,
        ClaimError::SetupPanicked { .. } | ClaimError::Local { .. } => INTERNAL,
    }
}

/// The reason of a failure that fails every claim of the call.
pub fn call_reason(e: &CallError) -> &'static str {
    match e {
        CallError::Fetch { .. } => API,
        CallError::NotFound { .. }
        | CallError::Replaced { .. }
        | CallError::NotAllocated { .. } => NOT_FOUND,
        CallError::Local(_)
        | CallError::Internal(_)
        | CallError::Crashed(_)
        | CallError::StartupUnfinished => INTERNAL,
    }
}
