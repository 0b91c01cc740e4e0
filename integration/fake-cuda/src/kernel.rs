//! The one kernel the fake runs: graft's probe vector add (integration/gpu/probe.c), found
//! by its entry name in PTX text and executed on the CPU. Any other image or kernel is an
//! error, so a probe that passes here used exactly this path.

use std::ffi::{c_void, CStr};

/// The probe's kernel: `graft_vadd(const float *a, const float *b, float *c, unsigned n)`.
pub const VADD: &str = "graft_vadd";

/// Why an image was refused, as a CUDA error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageError {
    /// Not PTX text (a cubin, a fatbinary, or garbage).
    NotPtx,
    /// PTX, but not the probe's kernel.
    UnknownPtx,
}

/// The entry points of a PTX image this fake can run.
///
/// # Safety
/// `image` must point to a NUL-terminated string, or start with an ELF or fatbinary
/// header, as `cuModuleLoadData` requires.
pub unsafe fn load(image: *const c_void) -> Result<Vec<String>, ImageError> {
    // The first bytes, stopping at a NUL so that a short string is never overrun. Binary
    // images (ELF cubins, fatbinaries) are never read further: their length is unknown.
    let mut head = [0u8; 4];
    for (i, b) in head.iter_mut().enumerate() {
        *b = *(image as *const u8).add(i);
        if *b == 0 {
            break;
        }
    }
    if &head == b"\x7fELF" || head == [0x50, 0xed, 0x55, 0xba] {
        return Err(ImageError::NotPtx);
    }
    let text = CStr::from_ptr(image as *const std::ffi::c_char)
        .to_str()
        .map_err(|_| ImageError::NotPtx)?;
    if !text.contains(".version") || !text.contains(".target") {
        return Err(ImageError::NotPtx);
    }
    let entries: Vec<String> = text
        .split(".entry")
        .skip(1)
        .filter_map(|rest| {
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            (name == VADD).then_some(name)
        })
        .collect();
    if entries.is_empty() {
        return Err(ImageError::UnknownPtx);
    }
    Ok(entries)
}

/// The vadd launch's arguments, read from `kernelParams`.
pub struct VaddArgs {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub n: u32,
}

/// # Safety
/// `params` must hold four pointers to the kernel's arguments (three device pointers and
/// an unsigned int), as `cuLaunchKernel` requires for this kernel.
pub unsafe fn vadd_args(params: *mut *mut c_void) -> Option<VaddArgs> {
    if params.is_null() {
        return None;
    }
    let p = std::slice::from_raw_parts(params as *const *const c_void, 4);
    if p.iter().any(|q| q.is_null()) {
        return None;
    }
    Some(VaddArgs {
        a: *(p[0] as *const u64),
        b: *(p[1] as *const u64),
        c: *(p[2] as *const u64),
        n: *(p[3] as *const u32),
    })
}

/// `c[i] = a[i] + b[i]` over little-endian f32 buffers of equal length.
pub fn vadd(a: &[u8], b: &[u8], c: &mut [u8]) {
    let f = |s: &[u8]| f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    for ((x, y), out) in a
        .chunks_exact(4)
        .zip(b.chunks_exact(4))
        .zip(c.chunks_exact_mut(4))
    {
        out.copy_from_slice(&(f(x) + f(y)).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_probe_kernel_loads() {
        let ptx =
            c".version 7.0\n.target sm_50\n.visible .entry graft_vadd(\n.param .u64 a\n)\n{ ret; }";
        // SAFETY: NUL-terminated literals.
        unsafe {
            assert_eq!(load(ptx.as_ptr().cast()), Ok(vec![VADD.to_string()]));
            let other = c".version 7.0\n.target sm_50\n.visible .entry saxpy(\n)\n{ ret; }";
            assert_eq!(load(other.as_ptr().cast()), Err(ImageError::UnknownPtx));
            assert_eq!(
                load(c"\x7fELF....".as_ptr().cast()),
                Err(ImageError::NotPtx)
            );
            assert_eq!(load(c"hello".as_ptr().cast()), Err(ImageError::NotPtx));
            assert_eq!(load(c"".as_ptr().cast()), Err(ImageError::NotPtx));
        }
    }

    #[test]
    fn vadd_adds() {
        let a: Vec<u8> = [1.0f32, 2.5].iter().flat_map(|v| v.to_le_bytes()).collect();
        let b: Vec<u8> = [3.0f32, -0.5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut c = vec![0u8; 8];
        vadd(&a, &b, &mut c);
        assert_eq!(&c[..4], &4.0f32.to_le_bytes());
        assert_eq!(&c[4..], &2.0f32.to_le_bytes());
    }
}
