//! Byte-level mutations of valid inputs, shared by the property tests of the record crate,
//! graft-driver and graft-nri (each includes this file with `#[path]`). Each crate keeps
//! its own token list and mix of mutations.

// Not every includer uses every helper.
#![allow(dead_code)]

use proptest::prelude::*;

#[derive(Debug, Clone)]
pub enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Token(usize, usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize, usize),
    Truncate(usize),
}

/// How often each mutation is drawn (weights), and how long deleted and duplicated runs
/// may be.
pub struct Mix {
    pub flip: u32,
    pub set: u32,
    pub token: u32,
    pub delete_max: usize,
    pub duplicate_max: usize,
}

/// One mutation, over a token list of `tokens` entries.
pub fn mutation(tokens: usize, mix: Mix) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        mix.flip => (any::<usize>(), 0u8..8).prop_map(|(a, b)| Mutation::Flip(a, b)),
        mix.set => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Set(a, b)),
        mix.token => (any::<usize>(), 0..tokens).prop_map(|(a, t)| Mutation::Token(a, t)),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(a, b)| Mutation::Insert(a, b)),
        1 => (any::<usize>(), 1usize..mix.delete_max).prop_map(|(a, n)| Mutation::Delete(a, n)),
        1 => (any::<usize>(), 1usize..mix.duplicate_max, any::<usize>())
            .prop_map(|(a, n, t)| Mutation::Duplicate(a, n, t)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

pub fn apply<T: AsRef<[u8]>>(data: &mut Vec<u8>, m: &Mutation, tokens: &[T]) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
    match m {
        Mutation::Flip(i, bit) if !data.is_empty() => {
            let i = i % data.len();
            data[i] ^= 1 << bit;
        }
        Mutation::Set(i, b) if !data.is_empty() => {
            let i = i % data.len();
            data[i] = *b;
        }
        Mutation::Flip(..) | Mutation::Set(..) => {}
        Mutation::Token(i, t) => {
            let i = at(*i, data.len());
            data.splice(i..i, tokens[*t].as_ref().iter().copied());
        }
        Mutation::Insert(i, b) => {
            let i = at(*i, data.len());
            data.splice(i..i, b.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let i = at(*i, data.len());
            let end = (i + n).min(data.len());
            data.drain(i..end);
        }
        Mutation::Duplicate(i, n, to) => {
            let i = at(*i, data.len());
            let end = (i + n).min(data.len());
            let chunk = data[i..end].to_vec();
            let to = at(*to, data.len());
            data.splice(to..to, chunk);
        }
        Mutation::Truncate(i) => {
            let i = at(*i, data.len());
            data.truncate(i);
        }
    }
}

pub fn mutated<T: AsRef<[u8]>>(mut data: Vec<u8>, muts: &[Mutation], tokens: &[T]) -> Vec<u8> {
    for m in muts {
        apply(&mut data, m, tokens);
    }
    data
}
