//! Tests across the parts.

mod guard;
mod layouts;
