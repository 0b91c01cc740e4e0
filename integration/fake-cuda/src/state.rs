//! The fake driver's state: contexts, modules, functions and device memory, behind one
//! lock. Handles and device pointers are numbers the fake hands out and checks on every
//! call; they are never dereferenced, so a wrong one is an error code, not a crash.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::err::CuResult;
use crate::err::{INVALID_CONTEXT, INVALID_HANDLE, INVALID_VALUE, NOT_INITIALIZED, OUT_OF_MEMORY};

/// Handle tags, so that a handle of one kind is never taken for another.
const CTX_TAG: u64 = 0xc7c7 << 32;
const MOD_TAG: u64 = 0x0d0d << 32;
const FUNC_TAG: u64 = 0xf0f0 << 32;
/// Device addresses start here, with a gap after each allocation.
const HEAP_BASE: u64 = 0x7f00_0000_0000;
const ALIGN: u64 = 512;

pub struct Alloc {
    pub ctx: u64,
    pub bytes: Vec<u8>,
}

pub struct Module {
    pub ctx: u64,
    pub entries: Vec<String>,
}

pub struct Function {
    pub module: u64,
    pub name: String,
}

#[derive(Default)]
pub struct State {
    /// The GPUs cuInit found (NVML indices); `None` before a successful cuInit.
    pub devices: Option<Vec<usize>>,
    pub current: Option<u64>,
    /// The MPS server this process is a client of, if any.
    pub mps: Option<crate::mps::Client>,
    /// Device bytes this process may hold (the MPS server's pinned memory limit).
    pub pinned_limit: Option<u64>,
    next_id: u64,
    next_addr: u64,
    contexts: BTreeMap<u64, usize>,
    modules: BTreeMap<u64, Module>,
    functions: BTreeMap<u64, Function>,
    memory: BTreeMap<u64, Alloc>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Runs `f` on the state (a poisoned lock is taken over: the state stays consistent
/// between calls).
pub fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut g: MutexGuard<'_, Option<State>> = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(State::default))
}

impl State {
    fn id(&mut self, tag: u64) -> u64 {
        self.next_id += 1;
        tag | self.next_id
    }

    pub fn devices(&self) -> CuResult<&[usize]> {
        self.devices.as_deref().ok_or(NOT_INITIALIZED)
    }

    /// The current context, which every call below needs.
    pub fn ctx(&self) -> CuResult<u64> {
        self.devices()?;
        self.current.ok_or(INVALID_CONTEXT)
    }

    pub fn create_context(&mut self, device: usize) -> u64 {
        let id = self.id(CTX_TAG);
        self.contexts.insert(id, device);
        self.current = Some(id);
        id
    }

    /// Destroys a context and everything created in it.
    pub fn destroy_context(&mut self, ctx: u64) -> CuResult<()> {
        self.devices()?;
        if self.contexts.remove(&ctx).is_none() {
            return Err(INVALID_CONTEXT);
        }
        if self.current == Some(ctx) {
            self.current = None;
        }
        self.memory.retain(|_, a| a.ctx != ctx);
        let gone: Vec<u64> = self
            .modules
            .iter()
            .filter(|(_, m)| m.ctx == ctx)
            .map(|(k, _)| *k)
            .collect();
        self.modules.retain(|_, m| m.ctx != ctx);
        self.functions.retain(|_, f| !gone.contains(&f.module));
        Ok(())
    }

    pub fn add_module(&mut self, entries: Vec<String>) -> CuResult<u64> {
        let ctx = self.ctx()?;
        let id = self.id(MOD_TAG);
        self.modules.insert(id, Module { ctx, entries });
        Ok(id)
    }

    /// The function `name` of `module`; `None` when the module has no such entry.
    pub fn function(&mut self, module: u64, name: &str) -> CuResult<Option<u64>> {
        self.ctx()?;
        let m = self.modules.get(&module).ok_or(INVALID_HANDLE)?;
        if !m.entries.iter().any(|e| e == name) {
            return Ok(None);
        }
        let id = self.id(FUNC_TAG);
        self.functions.insert(
            id,
            Function {
                module,
                name: name.to_string(),
            },
        );
        Ok(Some(id))
    }

    pub fn function_name(&self, f: u64) -> CuResult<&str> {
        self.ctx()?;
        self.functions
            .get(&f)
            .map(|f| f.name.as_str())
            .ok_or(INVALID_HANDLE)
    }

    pub fn alloc(&mut self, size: usize) -> CuResult<u64> {
        let ctx = self.ctx()?;
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let held: usize = self.memory.values().map(|a| a.bytes.len()).sum();
        if self
            .pinned_limit
            .is_some_and(|l| (held as u64).saturating_add(size as u64) > l)
        {
            return Err(OUT_OF_MEMORY);
        }
        if self.next_addr == 0 {
            self.next_addr = HEAP_BASE;
        }
        let addr = self.next_addr;
        self.next_addr += (size as u64).div_ceil(ALIGN) * ALIGN + ALIGN;
        self.memory.insert(
            addr,
            Alloc {
                ctx,
                bytes: vec![0; size],
            },
        );
        Ok(addr)
    }

    pub fn free(&mut self, addr: u64) -> CuResult<()> {
        self.ctx()?;
        self.memory.remove(&addr).map(|_| ()).ok_or(INVALID_VALUE)
    }

    /// The `len` device bytes at `addr`, which must lie in one allocation.
    pub fn bytes(&mut self, addr: u64, len: usize) -> CuResult<&mut [u8]> {
        self.ctx()?;
        let (base, a) = self
            .memory
            .range_mut(..=addr)
            .next_back()
            .ok_or(INVALID_VALUE)?;
        let off = (addr - base) as usize;
        if off.checked_add(len).is_none_or(|end| end > a.bytes.len()) {
            return Err(INVALID_VALUE);
        }
        Ok(&mut a.bytes[off..off + len])
    }
}
