//! `graft-driver`: the DRA kubelet plugin. Its place in the workspace is set; the kubelet
//! endpoints, discovery and ResourceSlices come with the DRA plugin work. It already shares
//! the record contract with the NRI plugin through `graft-record`.

use anyhow::bail;

fn main() -> anyhow::Result<()> {
    bail!(
        "graft-driver is not implemented yet (record format v{})",
        graft_record::FORMAT_VERSION
    )
}
