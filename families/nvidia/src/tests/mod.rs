//! Tests across the parts.

mod layouts;
