//! The MPS client side of the fake libcuda, as the MPS guide describes the real one
//! ("Architecture"; `man nvidia-cuda-mps-control`, DESCRIPTION): at cuInit the driver tries
//! the control daemon on `$CUDA_MPS_PIPE_DIRECTORY/control` (default `/tmp/nvidia-mps`);
//! when none answers the program runs without MPS, as it normally would. When one does, the
//! client asks it for a server of its own UID (waiting while a server of another UID still
//! has clients), connects to that server and hands it its requests from
//! `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`; the server
//! answers with the limits it applies (its own, lowered by the requests). The connection
//! lasts as long as the process: the server counts it as a client until it exits. A daemon
//! or server that refuses makes cuInit fail with CUDA_ERROR_MPS_CONNECTION_FAILED.
//!
//! The bytes exchanged are graft's own protocol (integration/fake-nvml/mps-common.h):
//! NVIDIA's is private.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use crate::err::{CuResult, MPS_CONNECTION_FAILED};

const HELLO: &str = "graft-fake-mps-client";

/// What the server applies to this client.
#[derive(Debug)]
pub struct Client {
    /// Held open for the process's lifetime: the server's count of its clients.
    _server: UnixStream,
    /// Bytes of device memory this client may pin on device 0; `None`: no limit.
    pub pinned_limit: Option<u64>,
}

fn pipe_dir() -> PathBuf {
    match std::env::var_os("CUDA_MPS_PIPE_DIRECTORY") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from("/tmp/nvidia-mps"),
    }
}

/// An environment variable as one word for the protocol (`-` when unset or unusable).
fn request(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() && !v.contains(char::is_whitespace) => v,
        _ => "-".into(),
    }
}

fn line(stream: &UnixStream) -> CuResult<String> {
    let mut reader = BufReader::new(stream.try_clone().map_err(|_| MPS_CONNECTION_FAILED)?);
    let mut out = String::new();
    reader
        .read_line(&mut out)
        .map_err(|_| MPS_CONNECTION_FAILED)?;
    Ok(out.trim_end().to_string())
}

/// `0=<N>M` of the server's answer, in bytes.
fn device0_limit(limits: &str) -> Option<u64> {
    limits.split(',').find_map(|item| {
        let mib = item.strip_prefix("0=")?.strip_suffix('M')?;
        mib.parse::<u64>().ok().map(|m| m << 20)
    })
}

/// Connects as an MPS client when a control daemon answers; `Ok(None)` when none does.
pub fn connect() -> CuResult<Option<Client>> {
    let dir = pipe_dir();
    let Ok(mut control) = UnixStream::connect(dir.join("control")) else {
        return Ok(None);
    };
    control
        .write_all(format!("{HELLO}\n").as_bytes())
        .map_err(|_| MPS_CONNECTION_FAILED)?;
    // Blocks while the daemon queues this client behind another UID's server.
    let answer = line(&control)?;
    let pid = answer
        .strip_prefix("server ")
        .and_then(|p| p.parse::<u32>().ok())
        .ok_or(MPS_CONNECTION_FAILED)?;
    let mut server = UnixStream::connect(dir.join(format!("mps-server-{pid}")))
        .map_err(|_| MPS_CONNECTION_FAILED)?;
    let hello = format!(
        "attach {} {}\n",
        request("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        request("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
    );
    server
        .write_all(hello.as_bytes())
        .map_err(|_| MPS_CONNECTION_FAILED)?;
    let limits = line(&server)?;
    let mut words = limits.split_whitespace();
    if words.next() != Some("limits") {
        return Err(MPS_CONNECTION_FAILED);
    }
    let _percentage = words.next().ok_or(MPS_CONNECTION_FAILED)?;
    let pinned_limit = words.next().and_then(device0_limit);
    Ok(Some(Client {
        _server: server,
        pinned_limit,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device0_limits_are_read_from_the_answer() {
        assert_eq!(device0_limit("0=30720M"), Some(30720 << 20));
        assert_eq!(device0_limit("1=5M,0=7M"), Some(7 << 20));
        assert_eq!(device0_limit("none"), None);
        assert_eq!(device0_limit("1=5M"), None);
    }
}
