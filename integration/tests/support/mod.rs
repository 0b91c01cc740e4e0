//! What the workspace's rule tests share: reading sources as text, and the module graph
//! (also included by `driver/tests/module_graph.rs`).

// Each test binary that includes this uses only part of it.
#![allow(dead_code)]

pub mod module_graph;
pub mod source;
