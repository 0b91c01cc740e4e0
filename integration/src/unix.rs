//! gRPC channels over Unix sockets (CRI, the kubelet plugin sockets).

use std::path::Path;

use anyhow::Context;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// A gRPC channel over the Unix socket `socket`.
pub async fn unix_channel(socket: &Path) -> anyhow::Result<Channel> {
    let path = socket.to_path_buf();
    Endpoint::try_from("http://[::]:0")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
        .with_context(|| format!("connecting to {}", socket.display()))
}
